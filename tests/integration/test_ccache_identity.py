"""ccache judges the compiler by its bytes (issue 41, item 3a): every TheRock nightly unpacks the same clang under a
new path with a new mtime; with rockbuild's build environment (rockbuild.llamacpp.cmake.CCACHE_IDENTITY) a second root
with the same compiler compiles warm, where ccache's default (compiler_check = mtime) compiles everything again.

Real compilers: this host's gcc copied into two "roots" (rootA, rootB) at different paths with different mtimes, the
way two nightlies unpack one LLVM; a small CMake project built from nothing (a fresh build folder, as a CI runner
starts) through ccache, with the environment rockbuild's build gives cmake and ninja."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rockbuild.llamacpp.cmake import host_build_environment
from rockbuild.llamacpp.driver import ccache_counts

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("ccache", "cmake", "ninja", "gcc")), reason="needs ccache, cmake, ninja and gcc"
)

SOURCES = 6


def gcc_root(root: Path, mtime: int) -> Path:
    """``root/bin/gcc``: a copy of this host's gcc driver (its own bytes), finding cc1 and its libraries through
    ``root/lib`` and ``root/libexec`` as in an unpacked toolchain; its mtime set to ``mtime``."""
    real = Path(os.path.realpath(shutil.which("gcc") or "gcc"))
    version = subprocess.run([str(real), "-dumpversion"], capture_output=True, text=True, check=True).stdout.strip()
    triple = subprocess.run([str(real), "-dumpmachine"], capture_output=True, text=True, check=True).stdout.strip()
    for sub in ("lib", "libexec"):
        found = next(
            (
                p
                for p in (Path(f"/usr/{sub}/gcc/{triple}/{version}"), Path(f"/usr/lib/gcc/{triple}/{version}"))
                if p.is_dir()
            ),
            None,
        )
        if found is None:
            pytest.skip(f"no /usr/{sub}/gcc/{triple}/{version} to point the copied gcc at")
        (root / sub / "gcc" / triple).mkdir(parents=True, exist_ok=True)
        (root / sub / "gcc" / triple / version).symlink_to(found)
    (root / "bin").mkdir(parents=True)
    gcc = shutil.copy2(real, root / "bin" / "gcc")
    os.utime(gcc, (mtime, mtime))
    return Path(gcc)


def project(src: Path) -> Path:
    (src / "include").mkdir(parents=True)
    (src / "include" / "answer.h").write_text("static inline int answer(int x) { return x * 2 + 42; }\n")
    for i in range(SOURCES):
        (src / f"part{i}.c").write_text(f'#include "answer.h"\nint part{i}(void) {{ return answer({i}); }}\n')
    (src / "main.c").write_text("int part0(void);\nint main(void) { return part0() == 42 ? 0 : 1; }\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(identity C)\ninclude_directories(include)\n"
        f"add_executable(identity main.c {' '.join(f'part{i}.c' for i in range(SOURCES))})\n"
    )
    return src


def build(src: Path, build_dir: Path, gcc: Path, env: dict[str, str]) -> tuple[int, int]:
    """A build from nothing; (ccache hits, misses) it made."""
    shutil.rmtree(build_dir, ignore_errors=True)
    before = ccache_counts("ccache", env)
    subprocess.run(
        [
            "cmake",
            "-G",
            "Ninja",
            "-S",
            str(src),
            "-B",
            str(build_dir),
            f"-DCMAKE_C_COMPILER={gcc}",
            "-DCMAKE_C_COMPILER_LAUNCHER=ccache",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DCMAKE_C_FLAGS=-g",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    subprocess.run(["ninja", "-C", str(build_dir)], env=env, check=True, capture_output=True)
    after = ccache_counts("ccache", env)
    assert before is not None and after is not None
    subprocess.run([str(build_dir / "identity")], check=True)
    return after.hits - before.hits, after.misses - before.misses


@pytest.mark.parametrize("check", ["rockbuild", "mtime"])
def test_a_second_root_with_the_same_compiler_compiles_warm(tmp_path, check):
    src = project(tmp_path / "src")
    first = gcc_root(tmp_path / "cache" / "rocm" / "nightly-20261204", 1_700_000_000)
    second = gcc_root(tmp_path / "cache" / "rocm" / "nightly-20261205", 1_800_000_000)
    env = host_build_environment("linux", base=os.environ, ccache_dir=tmp_path / "ccache")
    assert env["CCACHE_COMPILERCHECK"] == "content"
    if check == "mtime":  # ccache's default: the control
        env = {k: v for k, v in env.items() if k not in ("CCACHE_COMPILERCHECK", "CCACHE_NOHASHDIR")}
    cold = build(src, tmp_path / "out" / "build", first, env)
    assert cold == (0, SOURCES + 1)
    warm = build(src, tmp_path / "out" / "build", second, env)
    if check == "rockbuild":
        assert warm == (SOURCES + 1, 0)  # every object from the cache
    else:
        assert warm == (0, SOURCES + 1)  # a "new compiler": everything compiled again
