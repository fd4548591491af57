"""Benchmark the common part (issue 41, item 1): a GPU job built whole (the baseline, today's night) against the same
job built on its OS's common part (``rockbuild build --common``), cold (no ccache, no shader cache), from one tree.

Three builds, each ``rockbuild build --no-ccache --no-web-ui --no-bundle --offline`` into a fresh folder under WORK:

1. whole: ``--job GPU_JOB`` (out-whole/), what every GPU job compiles today;
2. common: ``--job COMMON_JOB`` (a ``backend: cpu`` job of the matrix file, out-split/), once per OS;
3. on the common part: ``--job GPU_JOB --common out-split/COMMON_JOB`` (out-split/), once per GPU job.

The figures are CPU seconds (user + system of each build's whole process tree: what the runners pay, and little
changed by another load on the machine) and step-seconds (the sum of every ninja step's duration in the build tree's
``.ninja_log``: the issue's measure, a wall clock per step, so inflated by another load), each build's steps split
into the GPU library (``ggml/src/ggml-hip`` or ``ggml-vulkan``), the CPU modules (``ggml/src/ggml-cpu``) and the rest.
Printed: each build's figures, the GPU job on the common part against its whole build (the baseline: what a night
pays per extra job of that OS), and the projection for N jobs of one OS: (common + N x on-common) / (N x whole).

    python bench/common_part.py --source /path/to/llama.cpp --build-number 11312 -c matrix.yaml \\
        --gpu-job linux-vulkan --common-job linux-cpu --work /var/cache/rockbuild/bench/common-part

Run it under ``flock /var/cache/rockbuild/llamacpp.lock``: it compiles llama.cpp about twice over.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

GPU_DIRS = (
    "ggml/src/ggml-hip/",
    "ggml/src/ggml-cuda/",
    "ggml/src/ggml-vulkan/",
    "ggml-vulkan-shaders",
    "vulkan-shaders",
)
CPU_DIRS = ("ggml/src/ggml-cpu/", "ggml-cpu-")


def ninja_steps(build_dir: Path) -> list[tuple[float, str]]:
    """(seconds, first output) of each step of the newest build in ``build_dir``'s .ninja_log (v5/v6: start end mtime
    output hash; a step with several outputs is one line each, with the same start, end and hash)."""
    steps: dict[tuple[str, str, str], tuple[float, str]] = {}
    log = build_dir / ".ninja_log"
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) < 5:
            continue
        start, end, _mtime, output, command_hash = parts[:5]
        steps.setdefault((start, end, command_hash), ((int(end) - int(start)) / 1000.0, output))
    return list(steps.values())


def split(steps: list[tuple[float, str]]) -> dict[str, float]:
    parts = {"gpu": 0.0, "cpu": 0.0, "rest": 0.0}
    for seconds, output in steps:
        key = "gpu" if any(d in output for d in GPU_DIRS) else "cpu" if any(d in output for d in CPU_DIRS) else "rest"
        parts[key] += seconds
    return {k: round(v, 1) for k, v in parts.items()}


def build(args: argparse.Namespace, out: Path, job: str, *extra: str) -> dict:
    command = [
        *args.rockbuild.split(),
        "build",
        "-c",
        str(args.matrix),
        "--job",
        job,
        "--source",
        str(args.source),
        "--build-number",
        args.build_number,
        "--offline",
        "--no-ccache",
        "--no-web-ui",
        "--no-bundle",
        "--out",
        str(out),
        *extra,
    ]
    if args.jobs:
        command += ["-j", str(args.jobs)]
    env = {**os.environ, "ROCKBUILD_CACHE": str(args.work / "cache")}  # the patched mirror: one path for all three
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL if not args.verbose else None)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    record = json.loads((out / job / "build.json").read_text(encoding="utf-8"))
    steps = ninja_steps(out / job / "build")
    return {
        "job": job,
        "wall": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "compile": record["durations"].get("compile"),
        "steps": len(steps),
        "step_seconds": round(sum(s for s, _ in steps), 1),
        "parts": split(steps),
        "common": (record.get("common") or {}).get("job"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--build-number", required=True)
    parser.add_argument("-c", "--matrix", type=Path, required=True, help="a matrix with GPU_JOB and COMMON_JOB")
    parser.add_argument("--gpu-job", default="linux-vulkan")
    parser.add_argument("--common-job", default="linux-cpu")
    parser.add_argument("--work", type=Path, default=Path("/var/cache/rockbuild/bench/common-part"))
    parser.add_argument("-j", "--jobs", type=int, default=None)
    parser.add_argument("--rockbuild", default=f"{sys.executable} -m rockbuild")
    parser.add_argument("--gpu-args", default="", help="more arguments for the GPU job's builds (--rocm /usr)")
    parser.add_argument(
        "--jobs-per-os",
        type=int,
        action="append",
        default=[],
        help="project the night for this many GPU jobs of one OS (default: 1, 2, 13)",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    for folder in ("out-whole", "out-split"):
        shutil.rmtree(args.work / folder, ignore_errors=True)
    gpu_args = args.gpu_args.split()
    whole = build(args, args.work / "out-whole", args.gpu_job, *gpu_args)
    common = build(args, args.work / "out-split", args.common_job)
    on_common = build(
        args,
        args.work / "out-split",
        args.gpu_job,
        *gpu_args,
        "--common",
        str(args.work / "out-split" / args.common_job),
    )
    assert on_common["common"] == args.common_job, on_common
    per_job = on_common["step_seconds"] / whole["step_seconds"]
    per_job_cpu = on_common["cpu_seconds"] / whole["cpu_seconds"]
    projections, projections_cpu = {}, {}
    for n in args.jobs_per_os or [1, 2, 13]:
        projections[n] = round(
            (common["step_seconds"] + n * on_common["step_seconds"]) / (n * whole["step_seconds"]), 3
        )
        projections_cpu[n] = round(
            (common["cpu_seconds"] + n * on_common["cpu_seconds"]) / (n * whole["cpu_seconds"]), 3
        )
    result = {
        "whole": whole,
        "common": common,
        "on_common": on_common,
        "ratio_per_job": round(per_job, 3),
        "ratio_per_job_cpu": round(per_job_cpu, 3),
        "projected": projections,
        "projected_cpu": projections_cpu,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"{'build':<28} {'steps':>6} {'step-s':>9} {'CPU s':>8} {'wall s':>8}  step-s: GPU library / CPU modules / rest"
    )
    for label, r in (
        ("whole " + whole["job"], whole),
        ("common " + common["job"], common),
        (f"{on_common['job']} on the common part", on_common),
    ):
        p = r["parts"]
        print(
            f"{label:<28} {r['steps']:>6} {r['step_seconds']:>9.1f} {r['cpu_seconds']:>8.1f} {r['wall']:>8.1f}  "
            f"{p['gpu']:.1f} / {p['cpu']:.1f} / {p['rest']:.1f}"
        )
    print(
        f"ratio: {args.gpu_job} on the common part / {args.gpu_job} whole (baseline) = {per_job:.3f}x step-seconds, "
        f"{per_job_cpu:.3f}x CPU seconds"
    )
    for n, ratio in projections.items():
        print(
            f"projected, {n} GPU job(s) of one OS: (common + {n} x on-common) / ({n} x whole) = {ratio:.3f}x "
            f"step-seconds, {projections_cpu[n]:.3f}x CPU seconds"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
