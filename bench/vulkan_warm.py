"""Benchmark a warm Vulkan leg (issue 41, item 3b): the compile of a new Vulkan build tree of the same llama.cpp
source, as each night's leg starts one, with the shader cache (rockbuild/llamacpp/shader_cache.py) cold and warm;
and the no-op rerun of one tree with and without the carried patch vulkan-shaders-depfile.

Every build is ``rockbuild build --job linux-vulkan --source SRC --offline --no-web-ui --no-bundle`` with one cache
folder (``--cache``, default ``WORK/cache``: the patched mirror of the tree, at the same path every time) and one
ccache (``--ccache-dir``, default ``WORK/ccache``, which holds the shader cache, ``glslc/``), each into an emptied
``WORK/out``; the figure is build.json's ``durations.compile`` (the ``cmake --build`` of the leg's programs).

1. prime: one build, so that ccache holds every C++ object of this tree (skipped with --no-prime when it does);
2. baseline: ``out/`` and ``ccache/glslc`` emptied: ccache warm, every shader compiled by glslc;
3. warm: ``out/`` emptied, the shader cache of (2): ccache warm, shaders from the cache;
4. no-op: the leg's compile command again in the tree of (3) (patch applied), then in a tree built with the series
   minus vulkan-shaders-depfile (``--patches``): the steps ninja reruns and their wall time.

    python bench/vulkan_warm.py --source /path/to/llama.cpp --build-number 11312 [-D Vulkan_INCLUDE_DIR=...]
    python bench/vulkan_warm.py ... --json

Run it under ``flock /var/cache/rockbuild/llamacpp.lock``: it compiles llama.cpp up to four times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
JOB = "linux-vulkan"


def rockbuild_build(args: argparse.Namespace, out: Path, *extra: str) -> dict:
    command = [
        sys.executable,
        "-m",
        "rockbuild",
        "build",
        "--job",
        JOB,
        "-c",
        str(args.work / "matrix.yaml"),
        "--source",
        str(args.source),
        "--build-number",
        args.build_number,
        "--offline",
        "--no-web-ui",
        "--no-bundle",
        "--out",
        str(out),
        "--ccache-dir",
        str(args.ccache_dir),
        "-j",
        str(args.jobs),
        *extra,
    ]
    if args.common:
        command += ["--common", str(args.common)]
    if args.commit:
        command += ["--commit", args.commit]
    with open(args.work / "bench.log", "a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(command)}\n")
        log.flush()
        subprocess.run(
            command,
            check=True,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ROCKBUILD_CACHE": str(args.cache)},
        )
    return json.loads((out / JOB / "build.json").read_text(encoding="utf-8"))


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    return path


def summary(data: dict) -> dict:
    shaders = data.get("shader_cache") or {}
    ccache = data.get("ccache") or {}
    return {
        "compile_s": data["durations"]["compile"],
        "steps": (data.get("ninja") or {}).get("steps"),
        "shader_hits": shaders.get("hits"),
        "shader_misses": shaders.get("misses"),
        "ccache_hits": ccache.get("hits"),
        "ccache_misses": ccache.get("misses"),
    }


def noop_rerun(data: dict) -> dict:
    """The leg's compile command again in its tree: the steps ninja runs, which, and the wall time."""
    start = time.monotonic()
    env = {**os.environ, **data["environment"]}  # the build's own (CCACHE_DIR, NINJA_STATUS, ...)
    done = subprocess.run(data["compile_command"], capture_output=True, text=True, check=True, env=env)
    seconds = time.monotonic() - start
    steps = [m.group(1) for m in re.finditer(r"^\[\d+/\d+\] (.*)$", done.stdout, re.M)]
    shaders = [s for s in steps if s.startswith("Generate vulkan shaders for")]
    return {
        "seconds": round(seconds, 2),
        "steps": len(steps),
        "shader_steps": len(shaders),
        "shaders": [s.rsplit(" ", 1)[-1] for s in shaders],
        "relinked": [s for s in steps if s.startswith("Linking")],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True, help="the llama.cpp tree (e.g. b11312)")
    parser.add_argument("--build-number", required=True)
    parser.add_argument("--commit", default=None)
    parser.add_argument("--work", type=Path, default=Path("/var/cache/rockbuild/vulkan-warm"))
    parser.add_argument("--cache", type=Path, default=None, help="rockbuild's cache (default: WORK/cache)")
    parser.add_argument("--ccache-dir", type=Path, default=None, help="default: WORK/ccache")
    parser.add_argument(
        "-D",
        dest="defines",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a CMake definition for the job (Vulkan_INCLUDE_DIR=... where the host's headers are old)",
    )
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--no-prime", action="store_true", help="ccache already holds this tree's objects")
    parser.add_argument(
        "--common",
        type=Path,
        default=None,
        metavar="DIR",
        help="build the leg on this common part (issue 41): it compiles ggml-vulkan alone; the no-op "
        "rerun without the depfile patch is left out (its patch series differs from the common part's)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.work = args.work.absolute()
    args.work.mkdir(parents=True, exist_ok=True)
    args.cache = (args.cache or args.work / "cache").absolute()
    args.ccache_dir = (args.ccache_dir or args.work / "ccache").absolute()
    cmake = dict(d.split("=", 1) for d in args.defines)
    (args.work / "matrix.yaml").write_text(
        yaml.safe_dump(
            {"options": {"cmake": cmake} if cmake else {}, "matrix": {"os": ["linux"], "backend": ["vulkan"]}}
        )
    )
    series = yaml.safe_load((ROOT / "patches" / "patches.yaml").read_text(encoding="utf-8"))
    without = [
        {**p, "file": str(ROOT / "patches" / p["file"])}
        for p in series["patches"]
        if p["id"] != "vulkan-shaders-depfile"
    ]
    (args.work / "without-depfile-patch.yaml").write_text(yaml.safe_dump({"patches": without}))
    out = args.work / "out"
    results: dict = {"source": str(args.source), "build_number": args.build_number, "jobs": args.jobs}
    if not args.no_prime:
        results["prime"] = summary(rockbuild_build(args, fresh(out)))
    fresh(args.ccache_dir / "glslc")
    results["baseline"] = summary(rockbuild_build(args, fresh(out)))
    warm = rockbuild_build(args, fresh(out))
    results["warm"] = summary(warm)
    results["ratio"] = round(results["warm"]["compile_s"] / results["baseline"]["compile_s"], 3)
    results["noop_with_patch"] = noop_rerun(warm)
    results["common"] = str(args.common) if args.common else None
    if not args.common:
        unpatched = rockbuild_build(
            args, fresh(args.work / "out-without-patch"), "--patches", str(args.work / "without-depfile-patch.yaml")
        )
        results["without_patch"] = summary(unpatched)
        results["noop_without_patch"] = noop_rerun(unpatched)
        results["noop_without_patch_again"] = noop_rerun(unpatched)
    (args.work / "results.json").write_text(json.dumps(results, indent=2))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    b, w = results["baseline"], results["warm"]
    print(f"A new Vulkan build tree of {args.source} (b{args.build_number}), -j{args.jobs}, ccache warm in both:")
    print(
        f"  baseline (shader cache empty): compile {b['compile_s']:7.1f} s, glslc {b['shader_misses']} misses, "
        f"ccache {b['ccache_hits']} hits / {b['ccache_misses']} misses"
    )
    print(
        f"  warm (shader cache kept):      compile {w['compile_s']:7.1f} s, glslc {w['shader_hits']} hits / "
        f"{w['shader_misses']} misses, ccache {w['ccache_hits']} hits / {w['ccache_misses']} misses"
    )
    print(f"  ratio warm / baseline: {results['ratio']:.3f}")
    if args.common:
        print(f"  the leg on the common part {args.common}: ggml-vulkan alone")
    for name, label in (
        ("noop_without_patch", "without vulkan-shaders-depfile"),
        ("noop_without_patch_again", "without it, again"),
        ("noop_with_patch", "with it"),
    ):
        if name not in results:
            continue
        r = results[name]
        print(
            f"  no-op rerun {label:<32} {r['seconds']:6.2f} s, {r['steps']} steps "
            f"({r['shader_steps']} shader sources, {len(r['relinked'])} links)"
        )


if __name__ == "__main__":
    main()
