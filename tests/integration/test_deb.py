"""The .deb of a Linux release asset: real bundles of programs and libraries compiled here (an $ORIGIN RPATH, as the
bundle stage writes), packaged with dpkg-deb, read back with dpkg-deb, installed and removed with dpkg into a
private root (its maintainer scripts and update-alternatives run for real), checked by lintian, built twice."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from support.options import context
from support.publishing import config, make_job

from rockbuild.backends import REGISTRY
from rockbuild.core.errors import PublishError
from rockbuild.core.programs import load_programs
from rockbuild.publish.deb import (
    _LIBSTDCXX_GCC,
    bundle_programs,
    host_libraries,
    package_version,
    plan_deb,
    write_deb,
)
from rockbuild.publish.floor import bundle_floor
from rockbuild.publish.jobs import load_job
from rockbuild.publish.release import PublishOptions, publish

pytestmark = pytest.mark.skipif(
    shutil.which("dpkg-deb") is None or shutil.which("gcc") is None or shutil.which("g++") is None,
    reason="needs dpkg-deb, gcc and g++ (a Debian/Ubuntu machine: apt-get install dpkg g++)",
)

EPOCH = 1_764_000_000
PROGRAMS = ("llama-bench", "llama-cli", "llama-server", "ggml-rpc-server")

LIB = r"""
#include <string>
#include <stdexcept>
extern "C" const char *ggml_name(void) { static std::string s("ggml " BACKEND); return s.c_str(); }
extern "C" int ggml_check(int n) { if (n < 0) throw std::runtime_error("negative"); return n * 2; }
"""
PROG = r"""
#include <stdio.h>
#include <string.h>
const char *ggml_name(void); int ggml_check(int);
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) { printf("%s version: 11312 (0c1e570)\n", NAME); return 0; }
    printf("%s: %s %d args=%d\n", NAME, ggml_name(), ggml_check(21), argc - 1);
    return 0;
}
"""


def compile_bundle(bundle: Path, backend: str = "HIP", extra_libs: tuple[str, ...] = ()) -> None:
    """Real ELF files in ``bundle``: libggml-base.so.0 (C++: libstdc++ and libgcc_s from the host), the programs
    linked to it with RPATH $ORIGIN (what rockbuild bundle writes), rocblas kernel data, a library named like a
    program's implementation (libllama-cli-impl.so, executable but no program)."""
    src = bundle.parent / "src"
    src.mkdir(exist_ok=True)
    (src / "lib.cpp").write_text(LIB)
    (src / "prog.c").write_text(PROG)
    for stale in bundle.iterdir():  # the publisher kit's stand-ins
        if stale.is_file() and stale.name != "bundle.json":
            stale.unlink()
    subprocess.run(
        [
            "g++",
            "-shared",
            "-fPIC",
            "-O1",
            f'-DBACKEND="{backend}"',
            "-Wl,-soname,libggml-base.so.0",
            "-o",
            str(bundle / "libggml-base.so.0"),
            str(src / "lib.cpp"),
        ],
        check=True,
    )
    shutil.copy(bundle / "libggml-base.so.0", bundle / "libllama-cli-impl.so")
    for name in PROGRAMS:
        subprocess.run(
            [
                "gcc",
                "-O1",
                f'-DNAME="{name}"',
                "-o",
                str(bundle / name),
                str(src / "prog.c"),
                "-L",
                str(bundle),
                "-l:libggml-base.so.0",
                *extra_libs,
                "-Wl,--disable-new-dtags,-rpath,$ORIGIN",
            ],
            check=True,
        )
    (bundle / "libggml-base.so.0").chmod(0o755)
    data = bundle / "rocblas/library/TensileLibrary_lazy_gfx1151.dat"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_bytes(b"kernels" * 100)
    data.chmod(0o644)
    shutil.rmtree(src)


def real_job(out: Path, job_id: str = "linux-gfx1151", *, whole: bool = False, **kw) -> Path:
    """A job whose bundle holds real ELF files: PROGRAMS, or (``whole``, as publish wants it) every program of
    programs.yaml, the others copies of llama-cli."""
    job = make_job(out, job_id, programs=None if whole else PROGRAMS, **kw)
    compile_bundle(job / "bundle")
    if whole:
        for program in load_programs().programs:
            if not (job / "bundle" / program.file_name).exists():
                shutil.copy2(job / "bundle" / "llama-cli", job / "bundle" / program.file_name)
    return job


def dpkg_field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "--field", str(deb), name], check=True, capture_output=True, text=True
    ).stdout.strip()


def build(job_dir: Path, dest_dir: Path, tag: str = "b1000", **changes) -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    job = load_job(job_dir)
    return write_deb(job, tag, dest_dir / f"{tag}-{job.name}.deb", config(**changes), mtime=EPOCH)


class Root:
    """A private dpkg root: its own database and alternatives, maintainer scripts run outside a chroot (dpkg's
    --force-script-chrootless, DPKG_ROOT for update-alternatives), so a test needs no root privileges."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.admin = path / "var/lib/dpkg"
        for sub in ("updates", "info", "triggers", "alternatives"):
            (self.admin / sub).mkdir(parents=True, exist_ok=True)
        (self.admin / "status").touch()
        (path / "etc/alternatives").mkdir(parents=True, exist_ok=True)
        (path / "usr/bin").mkdir(parents=True, exist_ok=True)

    def dpkg(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DPKG_ROOT": str(self.path), "LC_ALL": "C"}
        return subprocess.run(
            [
                "dpkg",
                f"--root={self.path}",
                f"--admindir={self.admin}",
                "--force-not-root",
                "--force-script-chrootless",
                "--force-bad-path",
                "--log=/dev/null",
                *args,
            ],
            env=env,
            capture_output=True,
            text=True,
        )

    def resolve(self, path: str) -> Path:
        """``path`` as the root sees it: absolute symlinks followed inside the root."""
        current = self.path / path.lstrip("/")
        for _ in range(10):
            if not current.is_symlink():
                return current
            target = os.readlink(current)
            current = self.path / target.lstrip("/") if target.startswith("/") else current.parent / target
        raise AssertionError(f"symlink loop at {path}")


def run_wrapper(root: Root, program: str, *args: str) -> str:
    """Run /usr/bin/<program> of the root the way the shell wrapper does, with /opt mapped into the root."""
    wrapper = root.resolve(f"/usr/bin/{program}")
    text = wrapper.read_text()
    assert text.startswith("#!/bin/sh\n") and "exec /opt/rockbuild/" in text
    target = text.split("exec ", 1)[1].split(' "$@"', 1)[0]
    result = subprocess.run(
        [str(root.path / target.lstrip("/")), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=True,
    )
    return result.stdout


def test_the_deb_holds_the_bundle_wrappers_and_exact_host_depends(tmp_path):
    job = real_job(tmp_path / "out")
    deb = build(job, tmp_path / "debs")
    assert dpkg_field(deb, "Package") == "rockbuild-llama-gfx1151"
    assert dpkg_field(deb, "Version") == "11312+b1000"
    assert dpkg_field(deb, "Architecture") == "amd64"
    assert dpkg_field(deb, "Maintainer") == config().deb_maintainer
    assert dpkg_field(deb, "Homepage") == "https://github.com/ggml-org/llama.cpp"
    depends = [d.strip() for d in dpkg_field(deb, "Depends").split(",")]
    floor = bundle_floor(job / "bundle")
    gcc = _LIBSTDCXX_GCC["GLIBCXX"].get(floor["GLIBCXX"][0])
    assert depends == sorted(depends)
    assert f"libc6 (>= {floor['GLIBC'][0]})" in depends
    assert any(d.startswith("libgcc-s1") for d in depends)  # the host's libstdc++ needs it, and so do we (-lgcc_s)
    if gcc:
        assert any(d.startswith("libstdc++6 (>= ") for d in depends)
    assert not any("rocm" in d or "hip" in d for d in depends), depends
    assert {d.split()[0] for d in depends} == {"libc6", "libgcc-s1", "libstdc++6"}
    # the bundle, byte for byte, owned by root, under /opt/rockbuild/llama-<tag>-<family>
    listing = subprocess.run(
        ["dpkg-deb", "--contents", str(deb)], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    rows = {line.split()[-1]: line.split() for line in listing}
    prefix = "./opt/rockbuild/llama-b1000-gfx1151/"
    for rel in [*PROGRAMS, "libggml-base.so.0", "bundle.json", "rocblas/library/TensileLibrary_lazy_gfx1151.dat"]:
        assert prefix + rel in rows, rel
    assert all(r[1] == "root/root" for r in rows.values())
    assert all(r[3:5] == ["2025-11-24", "16:00"] for r in rows.values())  # one timestamp: the archives' (UTC)
    assert rows[prefix + "llama-server"][0] == "-rwxr-xr-x"
    assert rows[prefix + "libggml-base.so.0"][0] == "-rw-r--r--"  # 0755 in the bundle; a library is not run
    assert ((job / "bundle/libggml-base.so.0").stat().st_mode & 0o777) == 0o755  # and the bundle is left as it was
    assert rows[prefix + "rocblas/library/TensileLibrary_lazy_gfx1151.dat"][0] == "-rw-r--r--"
    for program in PROGRAMS:
        assert rows[f"./usr/lib/rockbuild-llama-gfx1151/bin/{program}"][0] == "-rwxr-xr-x"
    assert "./usr/lib/rockbuild-llama-gfx1151/bin/libllama-cli-impl.so" not in rows  # a library is no program
    assert not any(name.startswith("./usr/bin/") for name in rows)  # /usr/bin belongs to update-alternatives
    assert {
        "./usr/share/doc/rockbuild-llama-gfx1151/copyright",
        "./usr/share/doc/rockbuild-llama-gfx1151/changelog.gz",
        "./usr/share/lintian/overrides/rockbuild-llama-gfx1151",
    } <= set(rows)
    extracted = tmp_path / "x"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(extracted)], check=True)
    for path in (job / "bundle").rglob("*"):
        if path.is_file():
            copy = extracted / "opt/rockbuild/llama-b1000-gfx1151" / path.relative_to(job / "bundle")
            assert copy.read_bytes() == path.read_bytes(), path.name  # never stripped or rewritten
    # md5sums and Installed-Size, as debhelper and dpkg-gencontrol write them
    control = tmp_path / "control"
    subprocess.run(["dpkg-deb", "-e", str(deb), str(control)], check=True)
    sums = dict(reversed(line.split("  ", 1)) for line in (control / "md5sums").read_text().splitlines())
    files = [p for p in extracted.rglob("*") if p.is_file()]
    assert set(sums) == {p.relative_to(extracted).as_posix() for p in files}
    for path in files:
        assert sums[path.relative_to(extracted).as_posix()] == hashlib.md5(path.read_bytes()).hexdigest()
    dirs = [p for p in extracted.rglob("*") if p.is_dir()]
    assert int(dpkg_field(deb, "Installed-Size")) == sum(-(-p.stat().st_size // 1024) for p in files) + len(dirs)


def test_the_programs_are_those_the_audit_names(tmp_path):
    from rockbuild.bundle.audit import audit_bundle

    job = real_job(tmp_path / "out")
    # no ROCm kernel checks for the stand-in
    report = audit_bundle(job / "bundle", platform="linux", backend="vulkan", backends=REGISTRY)
    programs = next(c for c in report.checks if c.name == "programs").details["programs"]
    assert bundle_programs(job / "bundle") == sorted(programs)
    needed = next(c for c in report.checks if c.name == "needed").details["host_libraries"]
    assert set(host_libraries(job / "bundle")) == set(needed)


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg")
def test_install_run_and_remove_in_a_private_root_and_two_families_side_by_side(tmp_path):
    out = tmp_path / "out"
    gfx1151 = build(real_job(out), tmp_path / "debs")
    gfx110x = build(real_job(out, "linux-gfx110X", targets=("gfx1100", "gfx1101")), tmp_path / "debs")
    root = Root(tmp_path / "root")
    result = root.dpkg("--force-depends", "-i", str(gfx1151))  # the root has no libc6 package: only our deps
    assert result.returncode == 0, result.stdout + result.stderr
    assert root.resolve("/usr/bin/llama-server") == root.path / "usr/lib/rockbuild-llama-gfx1151/bin/llama-server"
    assert run_wrapper(root, "llama-cli", "--version").startswith("llama-cli version: 11312")
    assert run_wrapper(root, "llama-server", "a", "b") == "llama-server: ggml HIP 42 args=2\n"  # $ORIGIN resolved
    # a second family installs beside it: no file in common, the alternatives choose (the first stays: same priority)
    result = root.dpkg("--force-depends", "-i", str(gfx110x))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root.path / "opt/rockbuild/llama-b1000-gfx110X/llama-server").is_file()
    for program in PROGRAMS:
        assert root.resolve(f"/usr/bin/{program}").parent == root.path / "usr/lib/rockbuild-llama-gfx1151/bin"
    # removing the chosen one hands every /usr/bin program to the other
    result = root.dpkg("-r", "rockbuild-llama-gfx1151")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (root.path / "opt/rockbuild/llama-b1000-gfx1151").exists()
    for program in PROGRAMS:
        assert root.resolve(f"/usr/bin/{program}").parent == root.path / "usr/lib/rockbuild-llama-gfx110x/bin"
    assert "llama-bench" in run_wrapper(root, "llama-bench")
    # an upgrade (a newer release of the same family) replaces the folder of the old tag
    newer = build(out / "linux-gfx110X", tmp_path / "debs", tag="b1001")
    result = root.dpkg("--force-depends", "-i", str(newer))
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in (root.path / "opt/rockbuild").iterdir()) == ["llama-b1001-gfx110X"]
    assert "llama-b1001-gfx110X" in root.resolve("/usr/bin/llama-cli").read_text()
    result = root.dpkg("-r", "rockbuild-llama-gfx110x")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (root.path / "opt/rockbuild").exists() or not any((root.path / "opt/rockbuild").iterdir())
    assert not any((root.path / "usr/bin").iterdir()) and not any((root.path / "etc/alternatives").iterdir())


@pytest.mark.skipif(
    shutil.which("lintian") is None,
    reason="lintian is not installed (apt-get install -y --no-install-recommends lintian)",
)
def test_lintian_finds_no_error_or_warning(tmp_path):
    deb = build(real_job(tmp_path / "out"), tmp_path / "debs")
    env = {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8"}
    result = subprocess.run(
        ["lintian", "--fail-on", "error,warning", "--display-info", str(deb)], capture_output=True, text=True, env=env
    )
    # infos too: only overrides this small bundle has no use for (they are for the real one's files) may be listed
    shown = [
        line
        for line in result.stdout.splitlines()
        if line[:2] in ("E:", "W:") or (line[:2] == "I:" and "unused-override" not in line)
    ]
    assert result.returncode == 0 and shown == [], result.stdout + result.stderr
    overrides = subprocess.run(["lintian", "--show-overrides", str(deb)], capture_output=True, text=True, env=env)
    overridden = {line.split()[2] for line in overrides.stdout.splitlines() if line.startswith("O:")}
    assert {"dir-or-file-in-opt", "unstripped-binary-or-object"} <= overridden  # the layout's, with their reasons


def test_same_bundle_and_tag_give_the_same_bytes(tmp_path):
    job = real_job(tmp_path / "out")
    first = build(job, tmp_path / "one")
    time.sleep(1.1)
    # the same bytes with other mtimes (older than the timestamp: copied, not linked) and another umask
    for path in (job / "bundle").rglob("*"):
        os.utime(path, (EPOCH - 86400, EPOCH - 86400))
    old = os.umask(0o077)
    try:
        second = build(job, tmp_path / "two")
    finally:
        os.umask(old)
    assert first.read_bytes() == second.read_bytes()
    assert build(job, tmp_path / "three", tag="b1001").read_bytes() != first.read_bytes()
    assert not list((tmp_path / "one").glob(".deb-*")) and not list((tmp_path / "one").glob("*.partial"))


@pytest.mark.parametrize(
    "older,newer",
    [
        (("11312", "b1000"), ("11312", "b1001")),  # a re-release of the same llama.cpp (a newer ROCm)
        (("11312", "b9999"), ("11312", "b10000")),  # numbers compared as numbers
        (("11312", "b1001"), ("11313", "b1002")),  # a newer llama.cpp
        (("b11312", "b11312-rocm7.2.0a20261128"), ("b11312", "b11312-rocm7.2.0a20261201")),  # llama-aligned tags
        (("b11312", "b11312-rocm7.2.0a20261201"), ("b11312", "b11312-rocm10.1.0a20261202")),
    ],
)
def test_versions_sort_as_upgrades(tmp_path, older, newer):
    job = load_job(make_job(tmp_path / "out", "linux-gfx1151"))
    a = package_version(replace(job, llama_build=older[0]), older[1])
    b = package_version(replace(job, llama_build=newer[0]), newer[1])
    assert subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0, (a, b)


def test_mixed_gpu_job_names_use_a_dash(tmp_path):
    job = make_job(tmp_path / "out", "linux-gfx1151+gfx1201", targets=("gfx1151", "gfx1201"))
    compile_bundle(job / "bundle")
    plan = plan_deb(load_job(job), "b1000", config())
    assert plan.package == "rockbuild-llama-gfx1151-gfx1201"
    assert plan.install_dir == "/opt/rockbuild/llama-b1000-gfx1151-gfx1201"
    assert plan.synopsis == "llama.cpp for gfx1151, gfx1201 (ROCm), self-contained"


def test_a_host_library_without_a_known_package_is_refused(tmp_path):
    job = make_job(tmp_path / "out", "linux-gfx1151")
    compile_bundle(job / "bundle", extra_libs=("-lm", "-Wl,--no-as-needed", "-lz"))
    if not any("libz.so.1" in lib for lib in host_libraries(job / "bundle")):
        pytest.skip("no libz development files here (apt-get install zlib1g-dev)")
    with pytest.raises(PublishError) as err:
        build(job, tmp_path / "debs")
    assert "libz.so.1" in err.value.message and "from the host" in err.value.message
    assert "deb_packages" in (err.value.hint or "")
    deb = build(job, tmp_path / "debs", deb_packages={**config().deb_packages, "libz.so.1": "zlib1g"})
    assert "zlib1g" in dpkg_field(deb, "Depends")


def test_without_dpkg_deb_a_configured_deb_fails_in_one_line_and_an_unconfigured_one_is_not_made(tmp_path, monkeypatch):
    job = real_job(tmp_path / "out", whole=True)
    with pytest.raises(PublishError) as err:
        write_deb(load_job(job), "b1000", tmp_path / "x.deb", config(), mtime=EPOCH, env={"PATH": str(tmp_path)})
    assert "dpkg-deb is not installed" in err.value.message and "\n" not in err.value.message
    assert "apt-get install dpkg" in (err.value.hint or "") and "deb_for" in err.value.hint
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # a machine without dpkg-deb (Windows, macOS)
    with pytest.raises(PublishError, match="dpkg-deb is not installed"):
        publish(
            PublishOptions(context=context(), job_dirs=(job,), dry_run=True, token="", out=tmp_path / "rel"), config()
        )
    report = publish(
        PublishOptions(context=context(), job_dirs=(job,), dry_run=True, token="", out=tmp_path / "rel2"),
        config(deb_for=()),
    )
    assert not any(a.name.endswith(".deb") for a in report.assets)


def test_publish_lists_the_deb_in_sha256sums_and_the_manifest(tmp_path):
    jobs = [real_job(tmp_path / "out", whole=True), make_job(tmp_path / "out", "windows-gfx1151")]
    report = publish(
        PublishOptions(context=context(), job_dirs=tuple(jobs), dry_run=True, token="", out=tmp_path / "release"),
        config(),
    )
    name = "llama-b1000-ubuntu-rocm-gfx1151-x64.deb"
    assert [a.name for a in report.assets if a.name.endswith(".deb")] == [name]  # Linux only
    assert (name, "would upload") in report.actions
    deb = report.out_dir / name
    sums = dict(reversed(line.split("  ")) for line in (report.out_dir / "SHA256SUMS").read_text().splitlines())
    assert sums[name] == hashlib.sha256(deb.read_bytes()).hexdigest()
    manifest = json.loads((report.out_dir / "manifest.json").read_text())
    entry = next(a for a in manifest["assets"] if a["name"] == name)
    assert entry["kind"] == "deb" and entry["job"] == "linux-gfx1151" and entry["size"] == deb.stat().st_size
    job_assets = next(j for j in manifest["jobs"] if j["id"] == "linux-gfx1151")["assets"]
    assert name in {a["name"] for a in job_assets}
    # a re-run reuses the .deb it made (same key), and the bytes are the same
    again = publish(
        PublishOptions(context=context(), job_dirs=tuple(jobs), dry_run=True, token="", out=tmp_path / "release"),
        config(),
    )
    assert next(a for a in again.assets if a.name == name).sha256 == sums[name]
