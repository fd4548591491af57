"""Benchmark the compile of a second toolchain root with the same compiler (issue 41, item 3a): two TheRock nightlies
with one LLVM unpack the same compiler under two paths with two mtimes. This host's gcc is copied into two roots that
way; a C++ project (N files that instantiate enough templates to take a while) is compiled from nothing with the
first root, then from nothing with the second, through ccache with rockbuild's build environment
(rockbuild.llamacpp.cmake.CCACHE_IDENTITY: compiler_check = content), and, measured in the same run, with ccache's
default (compiler_check = mtime), which calls the second root a new compiler.

    python bench/ccache_identity.py            # prints the ratios (second compile / cold compile)
    python bench/ccache_identity.py --files 40 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from rockbuild.llamacpp.cmake import host_build_environment

BODY = """#include <map>
#include <string>
#include <vector>
#include <algorithm>
#include <sstream>
std::string part{i}(int n) {{
    std::map<std::string, std::vector<double>> m;
    for (int k = 0; k < n; ++k) m[std::to_string(k % 7)].push_back(k * {i}.5);
    std::ostringstream out;
    for (auto & [key, v] : m) {{ std::sort(v.begin(), v.end()); out << key << v.size(); }}
    return out.str();
}}
"""


def gxx_root(root: Path, mtime: int) -> Path:
    real = Path(os.path.realpath(shutil.which("g++") or "g++"))
    version = subprocess.run([str(real), "-dumpversion"], capture_output=True, text=True, check=True).stdout.strip()
    triple = subprocess.run([str(real), "-dumpmachine"], capture_output=True, text=True, check=True).stdout.strip()
    for sub in ("lib", "libexec"):
        (root / sub / "gcc" / triple).mkdir(parents=True, exist_ok=True)
        (root / sub / "gcc" / triple / version).symlink_to(f"/usr/{sub}/gcc/{triple}/{version}")
    (root / "bin").mkdir(parents=True)
    gxx = Path(shutil.copy2(real, root / "bin" / "g++"))
    os.utime(gxx, (mtime, mtime))
    return gxx


def compile_seconds(src: Path, build_dir: Path, gxx: Path, env: dict[str, str]) -> float:
    shutil.rmtree(build_dir, ignore_errors=True)
    subprocess.run(
        [
            "cmake",
            "-G",
            "Ninja",
            "-S",
            str(src),
            "-B",
            str(build_dir),
            f"-DCMAKE_CXX_COMPILER={gxx}",
            "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
            "-DCMAKE_BUILD_TYPE=Release",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    start = time.monotonic()
    subprocess.run(["ninja", "-C", str(build_dir)], env=env, check=True, capture_output=True)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="ccache-identity-") as tmp:
        base = Path(tmp)
        src = base / "src"
        src.mkdir()
        for i in range(args.files):
            (src / f"part{i}.cpp").write_text(BODY.format(i=i))
        (src / "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.20)\nproject(bench CXX)\n"
            "add_library(bench STATIC " + " ".join(f"part{i}.cpp" for i in range(args.files)) + ")\n"
        )
        first = gxx_root(base / "rocm" / "nightly-a", 1_700_000_000)
        second = gxx_root(base / "rocm" / "nightly-b", 1_800_000_000)
        for name in ("rockbuild", "ccache-default"):
            env = host_build_environment("linux", base=os.environ, ccache_dir=base / f"ccache-{name}")
            if name == "ccache-default":
                env = {k: v for k, v in env.items() if k not in ("CCACHE_COMPILERCHECK", "CCACHE_NOHASHDIR")}
            cold = compile_seconds(src, base / "out" / "build", first, env)
            warm = compile_seconds(src, base / "out" / "build", second, env)
            results[name] = {"cold_s": round(cold, 2), "second_root_s": round(warm, 2), "ratio": round(warm / cold, 3)}
    if args.json:
        print(json.dumps({"files": args.files, **results}, indent=2))
        return
    print(f"{args.files} C++ files, this host's g++ copied into two roots (other path, other mtime), from nothing:")
    for name, r in results.items():
        print(
            f"  {name:<15} cold {r['cold_s']:6.2f} s, second root {r['second_root_s']:6.2f} s: ratio {r['ratio']:.3f}"
        )


if __name__ == "__main__":
    main()
