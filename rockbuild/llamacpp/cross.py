"""Cross toolchains: a build for another OS than the build machine's, named and checked by rockbuild.

One is known: ``mingw-w64``, Windows x64 from Linux with Debian's mingw-w64 (``x86_64-w64-mingw32-gcc-posix``: the
posix thread model, which std::thread needs). It is what the Windows end-to-end job is built with (docs/e2e.md):
release Windows assets are built by MSVC on a Windows runner, and this proves everything after the compiler (the
PE closure, the audit, the smoke test's programs, install) on a Linux machine under wine.

A cross toolchain is a CMake toolchain file rockbuild writes into the job folder (``CMAKE_TOOLCHAIN_FILE``), the
compilers' versions for build.json, and the folders its runtime DLLs live in (libstdc++-6.dll, libgcc_s_seh-1.dll,
libwinpthread-1.dll), which the bundle's closure searches after the build's own bin/.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rockbuild.core.data import suggest
from rockbuild.core.errors import BuildError, UsageError
from rockbuild.core.records import CrossToolchain
from rockbuild.process import first_line, run


@dataclass(frozen=True)
class CrossSpec:
    """A cross toolchain rockbuild knows: the OS it builds for and the programs it needs."""

    name: str
    system: str  # the job's os: windows
    cmake_system: str  # CMAKE_SYSTEM_NAME
    triplet: str
    c: str
    cxx: str
    rc: str
    package: str  # what to install when a program is missing
    runtime_dlls: tuple[str, ...]  # the compiler's runtime, found with -print-file-name
    sysroot: str  # CMAKE_FIND_ROOT_PATH


MINGW_W64 = CrossSpec(
    name="mingw-w64",
    system="windows",
    cmake_system="Windows",
    triplet="x86_64-w64-mingw32",
    c="x86_64-w64-mingw32-gcc-posix",
    cxx="x86_64-w64-mingw32-g++-posix",
    rc="x86_64-w64-mingw32-windres",
    package="g++-mingw-w64-x86-64-posix (mingw-w64 >= 12: Debian 12's 10 lacks THREAD_POWER_THROTTLING_STATE)",
    runtime_dlls=("libstdc++-6.dll", "libgcc_s_seh-1.dll", "libwinpthread-1.dll"),
    sysroot="/usr/x86_64-w64-mingw32",
)
CROSS: dict[str, CrossSpec] = {MINGW_W64.name: MINGW_W64}


def cross_spec(name: str, job_os: str) -> CrossSpec:
    """The cross toolchain ``name`` for a job of ``job_os``; a UsageError when unknown or for another OS."""
    spec = CROSS.get(name)
    if spec is None:
        raise UsageError(f"unknown cross toolchain {name!r}{suggest(name, CROSS)}; known: {', '.join(CROSS)}")
    if spec.system != job_os:
        raise UsageError(f"--cross {name} builds for {spec.system}, not for this {job_os} job")
    return spec


def toolchain_file_text(spec: CrossSpec, programs: Mapping[str, str]) -> str:
    """The CMake toolchain file: the target system, the compilers by absolute path, headers and libraries only from
    the cross sysroot, programs only from the build machine."""
    lines = [
        f"# written by rockbuild for --cross {spec.name}",
        f"set(CMAKE_SYSTEM_NAME {spec.cmake_system})",
        "set(CMAKE_SYSTEM_PROCESSOR x86_64)",
        f'set(CMAKE_C_COMPILER "{programs["c"]}")',
        f'set(CMAKE_CXX_COMPILER "{programs["cxx"]}")',
        f'set(CMAKE_RC_COMPILER "{programs["rc"]}")',
        f'set(CMAKE_FIND_ROOT_PATH "{spec.sysroot}")',
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)",
        "",
    ]
    return "\n".join(lines)


def runtime_dirs(spec: CrossSpec, cxx: str, env: Mapping[str, str]) -> tuple[Path, ...]:
    """The folders of the compiler's runtime DLLs (``-print-file-name``, which echoes a bare name it cannot find),
    then the sysroot's lib/ and bin/; a BuildError when one of the DLLs is nowhere."""
    found: list[Path] = []
    for dll in spec.runtime_dlls:
        answer = run([cxx, f"-print-file-name={dll}"], env=env, log=None, timeout=60, check=False).output.strip()
        path = Path(answer.splitlines()[-1]) if answer else Path(dll)
        if not path.is_absolute():
            path = next(
                (
                    Path(spec.sysroot) / sub / dll
                    for sub in ("lib", "bin")
                    if (Path(spec.sysroot) / sub / dll).is_file()
                ),
                path,
            )
        if not path.is_file():
            raise BuildError(
                f"{cxx} has no {dll} (its runtime DLL, which the bundle must carry); install {spec.package}"
            )
        found.append(path.parent)
    found += [Path(spec.sysroot) / sub for sub in ("lib", "bin") if (Path(spec.sysroot) / sub).is_dir()]
    return tuple(dict.fromkeys(found))


def provide_cross(name: str, job_os: str, job_dir: Path, env: Mapping[str, str]) -> CrossToolchain:
    """Check the cross toolchain ``name`` on this machine and write its CMake toolchain file into ``job_dir``."""
    spec = cross_spec(name, job_os)
    path = env.get("PATH", "")
    programs: dict[str, str] = {}
    for what in ("c", "cxx", "rc"):
        program = getattr(spec, what)
        found = shutil.which(program, path=path)
        if found is None:
            raise BuildError(f"--cross {spec.name}: {program} is not on PATH; install {spec.package}")
        programs[what] = found
    compilers = {what: first_line([programs[what], "--version"], env) for what in ("c", "cxx")}
    dirs = runtime_dirs(spec, programs["cxx"], env)
    toolchain_file = job_dir / f"{spec.name}.cmake"
    text = toolchain_file_text(spec, programs)
    if not toolchain_file.is_file() or toolchain_file.read_text(encoding="utf-8") != text:
        toolchain_file.write_text(text, encoding="utf-8")  # unchanged: its mtime stays, no reconfigure
    return CrossToolchain(
        name=spec.name, system=spec.system, toolchain_file=toolchain_file, compilers=compilers, runtime_dirs=dirs
    )
