"""Benchmark the build stage on the real thing: llama.cpp's HIP backend for gfx1151 with Debian's ROCm 7.2, built by
``rockbuild build`` inside the e2e ROCm root (tests/e2e/run.sh).

Cold: empty ccache, no build dir. Warm: no build dir, the ccache of the cold build (what a nightly runner with a
restored ccache does). Goal: warm <= 0.2 x cold. Also: HIP objects compiled, and the size of libggml-hip.so.

    python bench/build.py            # read the last `run.sh cold` / `run.sh warm` results ($E2E/bench/*.json)
    python bench/build.py --run      # run both first (~12 min on 2 cores; needs root and a provisioned root)
    python bench/build.py --json     # the figures as JSON
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from e2e_results import e2e_root, load_result, run_e2e

GOAL_RATIO = 0.2


def load(bench_dir: Path, mode: str) -> dict:
    return load_result(bench_dir / f"{mode}.json", f"tests/e2e/run.sh {mode}")


def in_root(root: Path, path: str) -> Path:
    """A path recorded inside the chroot, as the host sees it."""
    return root / path.lstrip("/")


def hip_objects_on_disk(root: Path, data: dict) -> int:
    build_dir = in_root(root, data["paths"]["build_dir"])
    return sum(1 for p in build_dir.rglob("*.cu.o") if "ggml-hip.dir" in p.parts)


def libggml_hip_size(root: Path, data: dict) -> tuple[str, int] | None:
    lib = in_root(root, data["paths"]["bin_dir"]) / "libggml-hip.so"
    if not lib.exists():
        return None
    target = lib
    while target.is_symlink():  # relative links inside the build dir
        target = target.parent / os.readlink(target)
    return target.name, target.stat().st_size


def figures(cold: dict, warm: dict, root: Path) -> dict:
    cold_total, warm_total = cold["durations"]["total"], warm["durations"]["total"]
    lib = libggml_hip_size(root, warm)
    return {
        "job": cold["job"]["id"],
        "llama_cpp": f"{cold['llama_cpp']['build_number']} {cold['llama_cpp']['commit']}",
        "rocm": f"{cold['rocm']['kind']} {cold['rocm']['version']} (HIP {cold['rocm']['hip_version']})",
        "compiler": cold["compilers"]["cxx"],
        "cold_seconds": cold_total,
        "cold_compile_seconds": cold["durations"]["compile"],
        "warm_seconds": warm_total,
        "warm_compile_seconds": warm["durations"]["compile"],
        "ratio": round(warm_total / cold_total, 3) if cold_total else None,
        "goal_ratio": GOAL_RATIO,
        "ninja_steps": cold["ninja"]["steps"],
        "hip_objects_compiled": cold["ninja"]["objects"].get("HIP", 0),
        "hip_objects_on_disk": hip_objects_on_disk(root, warm),
        "warm_ccache": warm["ccache"],
        "cold_ccache": cold["ccache"],
        "libggml_hip": {"file": lib[0], "bytes": lib[1]} if lib else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--e2e", type=Path, default=e2e_root())
    parser.add_argument("--run", action="store_true", help="run the cold and the warm build first")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.run:
        run_e2e("run.sh", "cold")
        run_e2e("run.sh", "warm")
    bench_dir, root = args.e2e / "bench", args.e2e / "rocm-root"
    cold, warm = load(bench_dir, "cold"), load(bench_dir, "warm")
    if cold["ccache"].get("hits") not in (0, None) or warm["ccache"].get("hit_rate") is None:
        print("warning: cold.json is not a cold build or warm.json is not a rebuild; rerun with --run", file=sys.stderr)
    result = figures(cold, warm, root)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    ok = result["ratio"] is not None and result["ratio"] <= GOAL_RATIO
    wcc = result["warm_ccache"]
    lib = result["libggml_hip"]
    rows = [
        ("job", result["job"]),
        ("llama.cpp", result["llama_cpp"]),
        ("ROCm", result["rocm"]),
        ("compiler", result["compiler"]),
        ("cold build (empty ccache)", f"{result['cold_seconds']:.1f} s (compile {result['cold_compile_seconds']:.1f})"),
        ("warm rebuild (ccache)", f"{result['warm_seconds']:.1f} s (compile {result['warm_compile_seconds']:.1f})"),
        ("warm / cold", f"{result['ratio']:.3f} (goal <= {GOAL_RATIO}: {'met' if ok else 'NOT met'})"),
        ("warm ccache", f"{wcc['hits']} hits, {wcc['misses']} misses, hit rate {wcc['hit_rate']}"),
        ("ninja steps", str(result["ninja_steps"])),
        ("HIP objects", f"{result['hip_objects_compiled']} compiled, {result['hip_objects_on_disk']} *.cu.o on disk"),
        ("libggml-hip.so", f"{lib['file']}: {lib['bytes']:,} bytes" if lib else "missing"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
