"""The real thing (pytest -m e2e): bundle the llama.cpp HIP build made in the Debian ROCm root, audit it, and run it in
the clean root (no ROCm) with an empty environment. Needs root (chroot, bind mounts) and tests/e2e/provision.sh's
roots plus a finished build (``$ROCKBUILD_E2E_BUILD``, else the first ``e2e/out/*/build`` inside the ROCm root)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.bundles import make_bundle

from rockbuild.rocm.layout import detect_layout

pytestmark = pytest.mark.e2e

E2E = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e"))
ROCM = E2E / "rocm-root"
CLEAN = E2E / "clean-root"
HOST_LIBS = {"libc.so.6", "libm.so.6", "libgcc_s.so.1", "libstdc++.so.6", "ld-linux-x86-64.so.2"}
# bundling.md 2/9: what llama.cpp on Debian's ROCm 7.2 needs (hipBLAS chain, HSA, comgr and libLLVM's closure)
MUST_SHIP = {
    "libamdhip64.so.7",
    "libhsa-runtime64.so.1",
    "libhipblas.so.3",
    "librocblas.so.5",
    "librocsolver.so.0",
    "libroctx64.so.4",
    "libamd_comgr.so.3",
    "libLLVM.so.22.1",
    "libz3.so.4",
    "libxml2.so.16",
    "libedit.so.2",
    "libtinfo.so.6",
    "libffi.so.8",
    "libbsd.so.0",
    "libmd.so.0",
    "libdrm.so.2",
    "libdrm_amdgpu.so.1",
    "libnuma.so.1",
    "libelf.so.1",
    "libfmt.so.11",
    "libzstd.so.1",
    "libz.so.1",
}


def find_build() -> Path:
    """The gfx1151 build of tests/e2e/run.sh (these tests check gfx1151 code objects), or $ROCKBUILD_E2E_BUILD."""
    explicit = os.environ.get("ROCKBUILD_E2E_BUILD")
    candidates = [Path(explicit)] if explicit else [ROCM / "e2e" / "out" / "linux-gfx1151" / "build"]
    for build in candidates:
        if any((build / "bin").glob("libggml-hip.so*")) and (build / "bin" / "llama-cli").is_file():
            return build
    pytest.skip(f"no finished llama.cpp HIP build under {ROCM / 'e2e' / 'out'} (set ROCKBUILD_E2E_BUILD)")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    if not ROCM.is_dir() or not CLEAN.is_dir():
        pytest.skip("tests/e2e/provision.sh has not made the ROCm and clean roots")
    out = Path(os.environ.get("ROCKBUILD_E2E_BUNDLE_DIR", str(tmp_path_factory.mktemp("e2e")))) / "bundle"
    report = make_bundle(find_build(), detect_layout(ROCM), ["gfx1151"], out)
    return report, out


@contextlib.contextmanager
def in_clean_root(bundle_dir: Path):
    if os.geteuid() != 0:
        pytest.skip("running the bundle in the clean root needs root (chroot, mount)")
    proc = CLEAN / "proc"
    mounted_proc = not os.path.ismount(proc)
    if mounted_proc:  # glibc expands the main program's $ORIGIN through /proc/self/exe
        subprocess.run(["mount", "-t", "proc", "proc", str(proc)], check=True)
    target = CLEAN / "opt" / "rockbuild-e2e-bundle"
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(bundle_dir), str(target)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
    try:
        yield "/opt/rockbuild-e2e-bundle"
    finally:
        subprocess.run(["umount", str(target)], check=False)
        target.rmdir()
        if mounted_proc:
            subprocess.run(["umount", str(proc)], check=False)


def chroot_run(*args: str, env: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["chroot", str(CLEAN), "/usr/bin/env", "-i", *env, *args], capture_output=True, text=True, timeout=120
    )


def test_real_bundle_audit(bundle):
    report, out = bundle
    assert report.audit.ok, report.audit.failures
    names = {p.name for p in out.iterdir() if p.is_file()}
    assert names >= MUST_SHIP
    assert "libhipblaslt.so.1" not in names and "libhiprtc.so.7" not in names  # nothing in llama.cpp uses them
    assert not any(p.is_symlink() for p in out.rglob("*"))
    assert len(list((out / "rocblas" / "library").iterdir())) == 150
    assert report.audit.fat_binaries[0].targets == ("gfx1151",)
    assert report.audit.versions["GLIBC"][0] == "2.43"


def test_real_bundle_runs_in_a_root_without_rocm(bundle):
    _, out = bundle
    with in_clean_root(out) as where:
        version = chroot_run(f"{where}/llama-cli", "--version")
        assert version.returncode == 0, version.stderr[-2000:]
        devices = chroot_run(f"{where}/llama-cli", "--list-devices")
        assert "no ROCm-capable device is detected" in devices.stderr + devices.stdout
        traced = chroot_run(f"{where}/llama-cli", "--version", env=("LD_DEBUG=libs",))
        from_root = set(re.findall(r"calling init: (\S+)", traced.stderr))
        outside = {Path(p).name for p in from_root if not p.startswith(where)}
        assert outside <= HOST_LIBS, outside


def test_real_bundle_needs_the_glibc_it_reports(bundle):
    # this host has glibc 2.36; the audit says 2.43: the loader must refuse, naming a GLIBC version
    _, out = bundle
    result = subprocess.run([str(out / "llama-cli"), "--version"], capture_output=True, text=True, env={}, timeout=60)
    assert result.returncode != 0 and re.search(r"version `GLIBC(XX)?_[\d.]+' not found", result.stderr)


# ------------------------------------------------------------------------------------------------ pruned by default


def test_the_default_bundle_is_pruned_and_proved_by_clang_offload_bundler(bundle):
    report, out = bundle
    assert report.audit.ok, report.audit.failures
    assert {p.path.name for p in report.pruned} == {"librocblas.so.5", "librocsolver.so.0"}
    assert all(f.targets == ("gfx1151",) for f in report.audit.fat_binaries)
    proofs = {p.path.name: p.verification for p in report.pruned}
    assert all(v is not None and v.ok for v in proofs.values()), proofs
    # bundling.md 5: 65 / 235 bundles; gfx1151 holds 72,818,216 / 209,526,312 bytes of device code
    assert (proofs["librocblas.so.5"].bundles, proofs["librocblas.so.5"].code_objects) == (65, 65)
    assert proofs["librocblas.so.5"].code_object_bytes == 72_818_216
    assert (proofs["librocsolver.so.0"].bundles, proofs["librocsolver.so.0"].code_objects) == (235, 235)
    assert proofs["librocsolver.so.0"].code_object_bytes == 209_526_312
    assert all(
        v.kept_targets == ("gfx1151",) and "clang-offload-bundler" in v.tools["version"] for v in proofs.values()
    )
    pruned = report.audit.check("code-objects").details["pruned"]
    assert {d["file"] for d in pruned if d["verified"]} == {"librocblas.so.5", "librocsolver.so.0"}


def _blob(path: Path, index: int) -> bytes:
    from rockbuild.bundle.fatbin import read_fatbin

    report = read_fatbin(path)
    bundle = report.bundles[index]
    with open(path, "rb") as fh:
        fh.seek(report.section_offset + bundle.offset)
        return fh.read(bundle.size)


@pytest.mark.parametrize(
    ("name", "original"), [("librocblas.so.5", "librocblas.so.5.2"), ("librocsolver.so.0", "librocsolver.so.0.7")]
)
def test_clang_offload_bundler_reads_the_real_pruned_libraries_as_the_originals(bundle, tmp_path, name, original):
    """Independently of verify_pruned: the first, a middle and the last bundle, listed and unbundled by hand."""
    from support.offload import bundler_command

    from rockbuild.bundle.fatbin import read_fatbin

    _, out = bundle
    tool = bundler_command()
    source = ROCM / "usr" / "lib" / "x86_64-linux-gnu" / original
    count = len(read_fatbin(out / name).bundles)
    gfx1151 = "hipv4-amdgcn-amd-amdhsa--gfx1151"
    for index in (0, count // 2, count - 1):
        objects = []
        for label, path in (("original", source), ("pruned", out / name)):
            blob = tmp_path / f"{label}-{index}.bin"
            blob.write_bytes(_blob(path, index))
            listed = subprocess.run(
                [*tool, "--list", "--type=o", f"--input={blob}"],
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
            ).stdout.split()
            if label == "pruned":
                assert sorted(listed) == [gfx1151, "host-x86_64-unknown-linux-gnu-"]
            else:
                assert gfx1151 in listed and len(listed) == 15  # the host entry and 14 targets
            subprocess.run(
                [*tool, "--unbundle", "--type=o", f"--targets={gfx1151}", f"--input={blob}", f"--output={blob}.co"],
                check=True,
                capture_output=True,
                timeout=120,
            )
            objects.append(Path(f"{blob}.co").read_bytes())
        assert objects[0] == objects[1]
        assert objects[0][:4] == b"\x7fELF" and int.from_bytes(objects[0][18:20], "little") == 224  # EM_AMDGPU


def test_the_pruned_libraries_keep_their_zeros_as_holes(bundle):
    _, out = bundle
    for name in ("librocblas.so.5", "librocsolver.so.0"):
        st = (out / name).stat()
        assert st.st_blocks * 512 < 0.25 * st.st_size, name  # rocSOLVER: ~85 MB of 707 MB allocated


PROBE = r"""
import ctypes, sys
bundle, probe = sys.argv[1], sys.argv[2]
load = lambda path: ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
hip = load(f"{bundle}/libamdhip64.so.7")
for name in ("librocblas.so.5", "librocsolver.so.0"):  # their constructors register every pruned offload bundle
    load(f"{bundle}/{name}")
count = ctypes.c_int(-1)
err = hip.hipGetDeviceCount(ctypes.byref(count))
hip.hipGetErrorName.restype = ctypes.c_char_p
print("hipGetDeviceCount", hip.hipGetErrorName(err).decode(), count.value)
load(f"{bundle}/libamd_comgr.so.3")  # what libhiprtc dlopens: the bundle's, with its libLLVM
load(f"{probe}/libhiprtc-builtins.so.7")
rtc = load(f"{probe}/libhiprtc.so.7")
prog = ctypes.c_void_p()
source = b'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }'
created = rtc.hiprtcCreateProgram(ctypes.byref(prog), source, b"twice.hip", 0, None, None)
options = (ctypes.c_char_p * 1)(b"--offload-arch=gfx1151")
compiled = rtc.hiprtcCompileProgram(prog, 1, options)
size = ctypes.c_size_t(0)
rtc.hiprtcGetCodeSize(prog, ctypes.byref(size))
print("hiprtc", created, compiled, size.value)
"""


def test_the_pruned_bundle_loads_in_a_root_without_rocm(bundle, tmp_path):
    """hipErrorNoDevice with the pruned rocBLAS/rocSOLVER loaded, a hipRTC compile through the bundle's comgr, and the
    bundle's comgr unbundling a pruned rocSOLVER bundle as the HIP runtime does, to the original's code object."""
    from support.offload import COMGR_UNBUNDLE, bundler_command

    _, out = bundle
    libdir = ROCM / "usr" / "lib" / "x86_64-linux-gnu"
    probe = CLEAN / "opt" / "rockbuild-e2e-probe"
    probe.mkdir(parents=True, exist_ok=True)
    try:
        for name in ("libhiprtc.so.7", "libhiprtc-builtins.so.7"):  # llama.cpp ships no hipRTC: the probe brings it
            shutil.copyfile(libdir / name, probe / name)
        (probe / "probe.py").write_text(PROBE)
        (probe / "unbundle.py").write_text(COMGR_UNBUNDLE)
        gfx1151 = "hipv4-amdgcn-amd-amdhsa--gfx1151"
        (probe / "b.bin").write_bytes(_blob(out / "librocsolver.so.0", 17))
        original = tmp_path / "o.bin"
        original.write_bytes(_blob(libdir / "librocsolver.so.0.7", 17))
        subprocess.run(
            [
                *bundler_command(),
                "--unbundle",
                "--type=o",
                f"--targets={gfx1151}",
                f"--input={original}",
                f"--output={original}.co",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        expected = Path(f"{original}.co").read_bytes()
        with in_clean_root(out) as where:
            version = chroot_run(f"{where}/llama-cli", "--version")
            assert version.returncode == 0, version.stderr[-2000:]
            devices = chroot_run(f"{where}/llama-cli", "--list-devices")
            assert "no ROCm-capable device is detected" in devices.stderr + devices.stdout
            probed = chroot_run(
                "/usr/bin/python3", "/opt/rockbuild-e2e-probe/probe.py", where, "/opt/rockbuild-e2e-probe"
            )
            assert probed.returncode == 0, probed.stderr[-2000:]
            assert "hipGetDeviceCount hipErrorNoDevice 0" in probed.stdout, probed.stdout
            created, compiled, size = re.search(r"hiprtc (\d+) (\d+) (\d+)", probed.stdout).groups()
            assert (created, compiled) == ("0", "0") and int(size) > 0, probed.stdout
            unbundled = chroot_run(
                "/usr/bin/python3",
                "/opt/rockbuild-e2e-probe/unbundle.py",
                f"{where}/libamd_comgr.so.3",
                "/opt/rockbuild-e2e-probe/b.bin",
                gfx1151,
            )
            assert unbundled.returncode == 0, unbundled.stderr[-2000:]
            import hashlib

            assert unbundled.stdout.split() == [str(len(expected)), hashlib.sha256(expected).hexdigest()]
    finally:
        shutil.rmtree(probe, ignore_errors=True)
