"""The Windows half on Linux (issue 29): the CPU flavour, the mingw-w64 cross toolchain, a bundle whose runtime DLLs
come from the toolchain's folders, and Windows programs run under wine by rockbuild's process runner."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest
from support.pe import build_pe, wine

from rockbuild.backends import REGISTRY, get_backend
from rockbuild.backends.cpu import check_no_gpu_backend, cpu_cmake_definitions
from rockbuild.bundle.plan import BundleRequest, bundle, make_plan
from rockbuild.bundle.policy import load_policy
from rockbuild.commands.common import CROSS_TOOLCHAINS
from rockbuild.core.errors import BuildError, ProcessError, UsageError
from rockbuild.core.records import SHIPS
from rockbuild.llamacpp.cross import CROSS, MINGW_W64, cross_spec, provide_cross, runtime_dirs, toolchain_file_text
from rockbuild.process import launch_command, run


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def fake_mingw(base: Path, *, with_dlls: bool = True) -> tuple[Path, Path]:
    """bin/ with the three mingw programs (the C++ compiler answers -print-file-name like gcc: a full path when it
    has the file, the bare name when not) and the runtime folder they point at."""
    bindir, runtime = base / "bin", base / "gcc" / "16-posix"
    bindir.mkdir(parents=True)
    runtime.mkdir(parents=True)
    if with_dlls:
        for dll in MINGW_W64.runtime_dlls:
            (runtime / dll).write_bytes(b"MZ")
    answer = (
        f'case "$1" in -print-file-name=*) n="${{1#-print-file-name=}}"; '
        f'if [ -f "{runtime}/$n" ]; then echo "{runtime}/$n"; else echo "$n"; fi;; '
        '*) echo "x86_64-w64-mingw32-g++-posix (GCC) 16-posix"; echo more;; esac\n'
    )
    _script(bindir / MINGW_W64.cxx, answer)
    _script(bindir / MINGW_W64.c, 'echo "x86_64-w64-mingw32-gcc-posix (GCC) 16-posix"\n')
    _script(bindir / MINGW_W64.rc, "echo windres\n")
    return bindir, runtime


def test_the_cli_names_every_cross_toolchain():
    assert tuple(CROSS) == CROSS_TOOLCHAINS


def test_cross_spec_refuses_an_unknown_toolchain_and_another_os():
    with pytest.raises(UsageError, match="unknown cross toolchain 'mingw'.*mingw-w64"):
        cross_spec("mingw", "windows")
    with pytest.raises(UsageError, match="builds for windows, not for this linux job"):
        cross_spec("mingw-w64", "linux")


def test_toolchain_file_names_the_system_the_compilers_and_the_sysroot():
    text = toolchain_file_text(MINGW_W64, {"c": "/x/gcc", "cxx": "/x/g++", "rc": "/x/windres"})
    assert "set(CMAKE_SYSTEM_NAME Windows)" in text
    assert 'set(CMAKE_CXX_COMPILER "/x/g++")' in text and 'set(CMAKE_RC_COMPILER "/x/windres")' in text
    assert 'set(CMAKE_FIND_ROOT_PATH "/usr/x86_64-w64-mingw32")' in text
    assert "CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER" in text and "CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY" in text


def test_provide_cross_checks_the_programs_and_finds_the_runtime_dlls(tmp_path):
    bindir, runtime = fake_mingw(tmp_path / "tc")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    cross = provide_cross("mingw-w64", "windows", job_dir, {"PATH": f"{bindir}:/usr/bin:/bin"})
    assert cross.compilers == {
        "c": "x86_64-w64-mingw32-gcc-posix (GCC) 16-posix",
        "cxx": "x86_64-w64-mingw32-g++-posix (GCC) 16-posix",
    }
    assert cross.runtime_dirs[0] == runtime
    assert cross.definitions() == [("CMAKE_TOOLCHAIN_FILE", str(job_dir / "mingw-w64.cmake"))]
    assert f'"{bindir / MINGW_W64.cxx}"' in cross.toolchain_file.read_text()
    mtime = cross.toolchain_file.stat().st_mtime_ns
    again = provide_cross("mingw-w64", "windows", job_dir, {"PATH": f"{bindir}:/usr/bin:/bin"})
    assert again.toolchain_file.stat().st_mtime_ns == mtime  # unchanged: CMake sees no new toolchain file
    assert again.to_dict()["runtime_dirs"][0] == str(runtime)


def test_provide_cross_says_what_to_install(tmp_path):
    with pytest.raises(BuildError, match="x86_64-w64-mingw32-gcc-posix is not on PATH; install g\\+\\+-mingw-w64"):
        provide_cross("mingw-w64", "windows", tmp_path, {"PATH": str(tmp_path)})
    bindir, _ = fake_mingw(tmp_path / "tc", with_dlls=False)
    spec = dataclasses.replace(MINGW_W64, sysroot=str(tmp_path / "no-sysroot"))  # not this machine's real one
    with pytest.raises(BuildError, match="has no libstdc\\+\\+-6.dll .*install g\\+\\+-mingw-w64"):
        runtime_dirs(spec, str(bindir / MINGW_W64.cxx), {"PATH": f"{bindir}:/usr/bin:/bin"})


def test_the_cpu_flavour_switches_no_gpu_backend_on():
    defs = dict(cpu_cmake_definitions(extra=[("LLAMA_OPENSSL", "OFF")], offline=True))
    assert "GGML_HIP" not in defs and "GGML_VULKAN" not in defs
    assert defs["GGML_BACKEND_DL"] == "ON" and defs["GGML_CPU_ALL_VARIANTS"] == "ON"
    assert defs["LLAMA_OPENSSL"] == "OFF"  # the job's extra wins over the offline swap
    with pytest.raises(Exception, match="GGML_VULKAN is set by rockbuild for a CPU job"):
        cpu_cmake_definitions(extra=[("GGML_VULKAN", "ON")])


def test_a_cpu_bundle_carries_no_gpu_backend(tmp_path):
    policy = load_policy().for_platform("windows")
    ok = check_no_gpu_backend(tmp_path, {"llama-cli.exe", "ggml-cpu-haswell.dll", "ggml.dll"}, policy)
    assert ok.ok and ok.details["ggml_cpu"] == ["ggml-cpu-haswell.dll"]
    bad = check_no_gpu_backend(tmp_path, {"llama-cli.exe", "ggml-vulkan.dll", "amdhip64_7.dll"}, policy)
    assert not bad.ok and len(bad.failures) == 2
    devices = get_backend("cpu").smoke_devices(
        Path("llama-cli"), (), asked="yes", device=None, env={}, logs=tmp_path, kfd_topology=None
    )
    assert devices.preflight and "no GPU backend" in devices.preflight and not devices.expect


@pytest.fixture(scope="module")
def cross_tree(tmp_path_factory):
    """A cross build's bin/ (app.exe -> ggml.dll -> libruntime-1.dll) and the toolchain folder holding the runtime
    DLL, which the build never copies into bin/ (mingw's libstdc++-6.dll)."""
    base = tmp_path_factory.mktemp("cross")
    runtime = build_pe(
        base / "toolchain" / "libruntime-1.dll", "__declspec(dllexport) int runtime_value(void){return 40;}", dll=True
    )
    ggml = build_pe(
        base / "build" / "bin" / "ggml.dll",
        "__declspec(dllimport) int runtime_value(void);\n"
        "__declspec(dllexport) int ggml_value(void){return runtime_value() + 2;}",
        dll=True,
        imports=(runtime,),
    )
    build_pe(
        base / "build" / "bin" / "app.exe",
        "#include <stdio.h>\n__declspec(dllimport) int ggml_value(void);\n"
        'int main(int argc, char **argv){printf("ggml=%d args=%d\\n", ggml_value(), argc - 1); return 3;}',
        dll=False,
        imports=(ggml,),
    )
    return base


def test_a_cross_bundle_takes_the_runtime_from_the_toolchain_folders(cross_tree, tmp_path):
    policy = load_policy()
    request = BundleRequest(
        cross_tree / "build", tmp_path / "without", policy, backend="cpu", platform="windows", backends=REGISTRY
    )
    plan = make_plan(request)
    assert [lib.name for lib in plan.closure.missing] == ["libruntime-1.dll"]
    assert any("libruntime-1.dll (needed by ggml.dll) was found neither" in e for e in plan.errors)
    request = BundleRequest(
        cross_tree / "build",
        tmp_path / "bundle",
        policy,
        backend="cpu",
        platform="windows",
        library_dirs=(cross_tree / "toolchain",),
        backends=REGISTRY,
    )
    report = bundle(request)
    shipped = {lib.name: lib for lib in report.plan.closure.with_status(SHIPS)}
    assert "libruntime-1.dll" in shipped and report.audit is not None and report.audit.ok
    assert sorted(p.name for p in (tmp_path / "bundle").iterdir()) == [
        "app.exe",
        "bundle.json",
        "ggml.dll",
        "libruntime-1.dll",
    ]


def test_launch_command_runs_a_windows_program_under_wine(tmp_path):
    fake = _script(tmp_path / "wine", 'echo "wine got $*"\n')
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    assert launch_command(["/b/llama-cli.exe", "-h"], env) == [str(fake), "/b/llama-cli.exe", "-h"]
    assert launch_command(["/b/llama-cli", "-h"], env) == ["/b/llama-cli", "-h"]
    assert run(["/b/LLAMA-CLI.EXE", "-h"], env=env).output == "wine got /b/LLAMA-CLI.EXE -h\n"


def test_a_windows_program_without_wine_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr("rockbuild.process.WINE_FALLBACK", tmp_path / "no-wine")
    with pytest.raises(
        ProcessError,
        match="llama-cli.exe is a Windows program: .* under wine, which is not installed \\(apt install wine64\\)",
    ):
        run([str(tmp_path / "llama-cli.exe")], env={"PATH": str(tmp_path)})


def test_the_bundle_runs_under_wine_from_its_own_folder(cross_tree, tmp_path):
    wine()  # skips without wine
    out = tmp_path / "bundle"
    bundle(
        BundleRequest(
            cross_tree / "build",
            out,
            load_policy(),
            backend="cpu",
            platform="windows",
            library_dirs=(cross_tree / "toolchain",),
            backends=REGISTRY,
        )
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "WINEPREFIX": str(tmp_path / "prefix"),
        "WINEDEBUG": "-all",
        "WINEDLLOVERRIDES": "mscoree,mshtml=",
    }
    result = run([out / "app.exe", "a", "b"], env=env, cwd=tmp_path, check=False, timeout=300)
    assert result.returncode == 3, result.output[-2000:]
    assert result.output.replace("\r", "").splitlines()[-1] == "ggml=42 args=2"
    os.remove(out / "libruntime-1.dll")  # what the bundle would be without the toolchain's runtime
    missing = run([out / "app.exe"], env=env, cwd=tmp_path, check=False, timeout=300)
    assert missing.returncode != 0


@pytest.mark.skipif(os.name == "nt", reason="a Linux host's view")
def test_the_cli_refuses_a_cross_build_for_the_wrong_os_or_a_windows_job_without_one(run_rockbuild, tmp_path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text("matrix:\n  os: [linux, windows]\n  backend: [cpu]\n", encoding="utf-8")
    tree = tmp_path / "llama.cpp"
    (tree / "tools" / "cli").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text("project(llama)\n", encoding="utf-8")
    wrong = run_rockbuild(
        "build",
        "--job",
        "linux-cpu",
        "-c",
        str(matrix),
        "--cross",
        "mingw-w64",
        "--source",
        str(tree),
        "--out",
        str(tmp_path / "out"),
    )
    assert wrong.returncode == 2, wrong.stderr
    assert wrong.stderr.strip().splitlines()[0] == (
        "error: --cross mingw-w64 builds for windows, not for this linux job"
    )
    native = run_rockbuild(
        "build", "--job", "windows-cpu", "-c", str(matrix), "--source", str(tree), "--out", str(tmp_path / "out")
    )
    assert native.returncode == 2, native.stderr
    assert native.stderr.strip().splitlines()[0] == (
        "error: job windows-cpu builds for windows; run it on a windows machine (or cross-build it: --cross mingw-w64)"
    )
    assert "Traceback" not in wrong.stderr + native.stderr


def test_a_crash_under_wine_gets_the_status_windows_reports(tmp_path):
    # wine cuts STATUS_ILLEGAL_INSTRUCTION (0xC000001D) to its low byte; its "Unhandled" line says which it was
    _script(
        tmp_path / "wine",
        'echo "load_backend: loaded CPU backend"\n'
        'echo "wine: Unhandled illegal instruction at address 00006FFFF9D4C7F4 (thread 00ec), starting debugger..."'
        "\nexit 29\n",
    )
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    result = run([tmp_path / "llama-bench.exe"], env=env, check=False)
    assert result.returncode == 0xC000001D
    from rockbuild.smoke.parse import died_of_sigill

    assert died_of_sigill(result.returncode)
    _script(tmp_path / "wine", "echo 'wine: Unhandled page fault on read access'\nexit 3\n")
    assert run([tmp_path / "x.exe"], env=env, check=False).returncode == 3  # not the page fault's low byte: as is
    _script(tmp_path / "plain", "echo 'wine: Unhandled illegal instruction'\nexit 29\n")
    assert run([tmp_path / "plain"], env=env, check=False).returncode == 29  # not run under wine: never translated


def test_a_windows_bundle_names_its_programs_with_exe_on_linux_too(tmp_path):
    from rockbuild.smoke.probe import bundle_program

    (tmp_path / "llama-bench.exe").write_bytes(b"MZ")
    assert bundle_program(tmp_path, "llama-bench").name == "llama-bench.exe"
    assert bundle_program(tmp_path, "llama-cli").name == ("llama-cli.exe" if os.name == "nt" else "llama-cli")
