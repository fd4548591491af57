"""The real thing (pytest -m e2e): bundle the llama.cpp HIP build made in the Debian ROCm root, audit it, and run it in
the clean root (no ROCm) with an empty environment. Needs root (chroot, bind mounts) and tests/e2e/provision.sh's
roots plus a finished build (``$ROCKBUILD_E2E_BUILD``, else the first ``e2e/out/*/build`` inside the ROCm root)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from pathlib import Path

import pytest

from rockbuild.bundle import make_bundle
from rockbuild.rocm.layout import detect_layout

pytestmark = pytest.mark.e2e

E2E = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e"))
ROCM = E2E / "rocm-root"
CLEAN = E2E / "clean-root"
HOST_LIBS = {"libc.so.6", "libm.so.6", "libgcc_s.so.1", "libstdc++.so.6", "ld-linux-x86-64.so.2"}
# bundling.md 2/9: what llama.cpp on Debian's ROCm 7.2 needs (hipBLAS chain, HSA, comgr and libLLVM's closure)
MUST_SHIP = {
    "libamdhip64.so.7", "libhsa-runtime64.so.1", "libhipblas.so.3", "librocblas.so.5", "librocsolver.so.0",
    "libroctx64.so.4", "libamd_comgr.so.3", "libLLVM.so.22.1", "libz3.so.4", "libxml2.so.16", "libedit.so.2",
    "libtinfo.so.6", "libffi.so.8", "libbsd.so.0", "libmd.so.0", "libdrm.so.2", "libdrm_amdgpu.so.1",
    "libnuma.so.1", "libelf.so.1", "libfmt.so.11", "libzstd.so.1", "libz.so.1",
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
    report = make_bundle(find_build(), detect_layout(ROCM), ["gfx1151"], out, quiet=True)
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
    return subprocess.run(["chroot", str(CLEAN), "/usr/bin/env", "-i", *env, *args], capture_output=True, text=True,
                          timeout=120)


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
    result = subprocess.run([str(out / "llama-cli"), "--version"], capture_output=True, text=True, env={},
                            timeout=60)
    assert result.returncode != 0 and re.search(r"version `GLIBC(XX)?_[\d.]+' not found", result.stderr)


@pytest.fixture(scope="module")
def pruned_bundle(tmp_path_factory):
    if not ROCM.is_dir() or not CLEAN.is_dir():
        pytest.skip("tests/e2e/provision.sh has not made the ROCm and clean roots")
    out = Path(os.environ.get("ROCKBUILD_E2E_BUNDLE_DIR", str(tmp_path_factory.mktemp("e2e")))) / "pruned"
    report = make_bundle(find_build(), detect_layout(ROCM), ["gfx1151"], out, quiet=True, prune_fatbin=True)
    return report, out


def test_pruned_fat_binaries_hold_only_the_job_target_and_still_load(pruned_bundle):
    report, out = pruned_bundle
    assert report.audit.ok, report.audit.failures
    assert {p.path.name for p in report.pruned} == {"librocblas.so.5", "librocsolver.so.0"}
    assert all(f.targets == ("gfx1151",) for f in report.audit.fat_binaries)
    with in_clean_root(out) as where:
        version = chroot_run(f"{where}/llama-cli", "--version")
        assert version.returncode == 0, version.stderr[-2000:]
        devices = chroot_run(f"{where}/llama-cli", "--list-devices")
        assert "no ROCm-capable device is detected" in devices.stderr + devices.stdout
