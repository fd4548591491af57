"""What a cold night costs on the common part (issue 41): the step-seconds of each leg of the last night rehearsal
(``tests/e2e/night.sh cold``: linux-common, two ROCm families, linux-vulkan, windows-cpu), against the same night
built whole, and the same projected to the shipped matrix (config/nightly.yaml, ``rockbuild matrix``).

The figures are ninja step-seconds: the sum of every step's duration in each leg's ``.ninja_log`` (night 1 of the
rehearsal; the wall clock is about half of it on the 2-core host), split into the GPU library, the CPU modules and
the rest (bench/common_part.py's split).

The baseline it names: **the night built whole, measured 2026-12-04** by ``tests/e2e/night.sh cold`` on this host
(issue 41's table: linux-gfx1151 2,424 step-seconds, linux-vulkan 1,534, windows-cpu 1,898), because the rehearsal
cannot build both shapes in one night on 2 cores (each is about an hour). "Before" is made of parts, and says so:

- each GPU job built whole: this run's GPU library (the same compile in both shapes: ggml-hip for its targets,
  ggml-vulkan and its shaders) plus the baseline's CPU modules and rest of that kind of job (for ROCm, the gfx1151
  leg's, compiled by TheRock's clang; they do not depend on the GPU targets);
- windows-cpu: built whole in both shapes (nothing of it is shared), so both sides take this run's figure.

The two runs are two days apart, and the host may have changed under them: windows-cpu, the same build in both, is
the control. Its ratio (this run against the baseline's 1,898) scales every figure taken from the baseline, so that
"before" is what the baseline's legs would cost on today's host; the unscaled ratio is printed beside it.

Projection to the shipped matrix, from the measured parts: a ROCm job's HIP library grows with its targets
(one-target gfx1151 and two-target gfx120X measured: hip(n) = hip(1) + (n - 1) x (hip(2) - hip(1))); whole, it adds
the baseline's CPU and rest; a Vulkan job whole likewise; each OS's common part is this run's linux-common (the
Windows common part is taken as the Linux one: it is not built here).

    python bench/night_cost.py                 # read the last rehearsal ($ROCKBUILD_E2E/night)
    python bench/night_cost.py --run           # run `tests/e2e/night.sh cold` first (about 80 min; root)
    python bench/night_cost.py --json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from common_part import ninja_steps, split
from e2e_results import e2e_root, run_e2e

# The night built whole (no common part), cold: tests/e2e/night.sh cold, 2026-12-04, this 2-core host, llama.cpp
# b11312, each leg's .ninja_log (issue 41's table). gpu: the GPU library; cpu: ggml-cpu's modules; rest: the rest.
BASELINE_NAME = "the night built whole, tests/e2e/night.sh cold of 2026-12-04 (issue 41's table)"
BASELINE = {
    "linux-gfx1151": {"gpu": 1318.0, "cpu": 546.0, "rest": 559.0, "total": 2424.0, "wall": 1212.0},
    "linux-vulkan": {"gpu": 223.0, "cpu": 640.0, "rest": 671.0, "total": 1534.0, "wall": 767.0},
    "windows-cpu": {"gpu": 0.0, "cpu": 836.0, "rest": 1062.0, "total": 1898.0, "wall": 948.0},
}


def leg(folder: Path) -> dict:
    """The step-seconds of one leg's build folder (night 1), split, with its compile wall clock from build.json."""
    steps = ninja_steps(folder / "build")
    record = json.loads((folder / "build.json").read_text(encoding="utf-8"))
    targets = list(record.get("gpu_targets") or [])
    return {"total": round(sum(s for s, _ in steps), 1), **split(steps), "steps": len(steps),
            "wall": (record.get("durations") or {}).get("compile"), "targets": targets,
            "common": (record.get("common") or {}).get("job")}


def legs(night: Path) -> dict[str, dict]:
    found = {}
    outs = (night / "n1" / "out").iterdir() if (night / "n1" / "out").is_dir() else ()
    for folder in sorted((night / "n1" / "common-out").glob("*-common")) + sorted(outs):
        if (folder / "build.json").is_file() and (folder / "build" / ".ninja_log").is_file():
            found[folder.name] = leg(folder)
    if not found:
        sys.exit(f"no legs with a .ninja_log under {night}/n1: run `tests/e2e/night.sh cold` (or --run) first")
    return found


def whole(job: str, measured: dict, drift: float = 1.0) -> tuple[float, str]:
    """What JOB costs built whole, and where that figure comes from: this run's GPU library (the same compile in both
    shapes) and the baseline's CPU modules and rest of the same kind of job, scaled by ``drift``."""
    if job == "windows-cpu":
        return measured["total"], "this run (built whole in both shapes)"
    kind = "linux-gfx1151" if job.startswith("linux-gfx") else job
    if kind not in BASELINE:
        raise SystemExit(f"no baseline for {job}")
    rest = BASELINE[kind]["cpu"] + BASELINE[kind]["rest"]
    return rest * drift + measured["gpu"], f"this run's GPU library + {kind}'s CPU modules and rest in the baseline"


def shipped_jobs() -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "rockbuild", "matrix", "--format", "json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def project(measured: dict[str, dict], drift: float = 1.0) -> dict:
    hip = {len(m["targets"]): m["gpu"] for j, m in measured.items() if j.startswith("linux-gfx") and m["targets"]}
    if 1 not in hip or len(hip) < 2:
        raise SystemExit(f"the projection needs a one-target and a multi-target ROCm leg; measured {sorted(hip)}")
    many = max(hip)
    per_target = (hip[many] - hip[1]) / (many - 1)

    def hip_of(n: int) -> float:
        return hip[1] + (n - 1) * per_target

    rocm_rest = (BASELINE["linux-gfx1151"]["cpu"] + BASELINE["linux-gfx1151"]["rest"]) * drift
    common = next(m["total"] for j, m in measured.items() if j.endswith("-common"))
    vulkan = measured["linux-vulkan"]["total"]
    before = after = 0.0
    counts = {"rocm": 0, "vulkan": 0, "common": 0, "targets": 0}
    for job in shipped_jobs():
        backend = job.get("backend")
        if backend == "rocm":
            n = len(job.get("targets") or [])
            before += rocm_rest + hip_of(n)
            after += hip_of(n)
            counts["rocm"] += 1
            counts["targets"] += n
        elif backend == "vulkan":
            before += (BASELINE["linux-vulkan"]["cpu"] + BASELINE["linux-vulkan"]["rest"]) * drift \
                + measured["linux-vulkan"]["gpu"]
            after += vulkan
            counts["vulkan"] += 1
        elif job["id"].endswith("-common"):
            after += common
            counts["common"] += 1
    return {"jobs": counts, "hip_one_target": round(hip[1], 1), "hip_per_extra_target": round(per_target, 1),
            "before": round(before), "after": round(after), "ratio": round(after / before, 3)}


def report(night: Path) -> dict:
    measured = legs(night)
    control = measured.get("windows-cpu", {}).get("total")
    drift = control / BASELINE["windows-cpu"]["total"] if control else 1.0
    result = night_ratio(measured, drift)
    raw = night_ratio(measured, 1.0)
    return {**result, "unscaled": {k: raw[k] for k in ("before", "after", "ratio")},
            "control_windows_cpu": {"this_run": control, "baseline": BASELINE["windows-cpu"]["total"],
                                    "drift": round(drift, 3)},
            "shipped_matrix": project(measured, drift), "shipped_matrix_unscaled": project(measured, 1.0)}


def night_ratio(measured: dict[str, dict], drift: float) -> dict:
    rows = []
    before = after = 0.0
    for job, m in measured.items():
        after += m["total"]
        if job.endswith("-common"):
            rows.append({"job": job, "after": m, "before": None, "source": "built once, for the OS's GPU legs"})
            continue
        cost, source = whole(job, m, drift)
        before += cost
        rows.append({"job": job, "after": m, "before": round(cost, 1), "source": source})
    common = next((m for j, m in measured.items() if j.endswith("-common")), None)
    gpu_legs = [m for j, m in measured.items() if m.get("common")]
    # the night's longest chain in step-seconds (legs run side by side, each on a runner of its own)
    chain_after = max([(common["total"] if common else 0) + max((m["total"] for m in gpu_legs), default=0)]
                      + [m["total"] for m in measured.values() if not m.get("common") and m is not common])
    chain_before = max(whole(j, m, drift)[0] for j, m in measured.items() if not j.endswith("-common"))
    wall_after = max([(common["wall"] or 0 if common else 0) + max((m["wall"] or 0 for m in gpu_legs), default=0)]
                     + [m["wall"] or 0 for m in measured.values() if not m.get("common") and m is not common])
    critical = {"before": round(chain_before), "after": round(chain_after),
                "ratio": round(chain_after / chain_before, 3)}
    return {"baseline": BASELINE_NAME, "legs": rows, "before": round(before), "after": round(after),
            "ratio": round(after / before, 3), "critical_path_step_seconds": critical,
            "critical_path_wall_after": round(wall_after, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--night", type=Path, default=None,
                        help="the rehearsal's folder (default: $ROCKBUILD_E2E/night)")
    parser.add_argument("--run", action="store_true", help="run `tests/e2e/night.sh cold` first")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.run:
        run_e2e("night.sh", "cold")
    result = report(args.night or e2e_root() / "night")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    c = result["control_windows_cpu"]
    print(f"night cost, cold, step-seconds (baseline: {result['baseline']}; its figures scaled by the control, "
          f"windows-cpu built whole in both: {c['this_run']:,} now against {c['baseline']:,}: x{c['drift']})")
    for row in result["legs"]:
        m = row["after"]
        before = f"{row['before']:>9,.1f}" if row["before"] is not None else f"{'-':>9}"
        print(f"  {row['job']:<16} now {m['total']:>9,.1f} (gpu {m['gpu']:,.1f}, cpu {m['cpu']:,.1f}, rest "
              f"{m['rest']:,.1f}; compile {m['wall'] or 0:,.1f} s)  whole {before}  ({row['source']})")
    u = result["unscaled"]
    print(f"  the rehearsal's night: {result['after']:,} against {result['before']:,}: {result['ratio']}x "
          f"(goal <= 0.75x; unscaled: {u['after']:,} against {u['before']:,}: {u['ratio']}x)")
    cp = result["critical_path_step_seconds"]
    print(f"  critical path (longest chain of legs): {cp['after']:,} against {cp['before']:,} step-seconds: "
          f"{cp['ratio']}x; compile wall along it now {result['critical_path_wall_after']:,.1f} s")
    s = result["shipped_matrix"]
    print(f"  projected to the shipped matrix ({s['jobs']['rocm']} ROCm jobs with {s['jobs']['targets']} targets, "
          f"{s['jobs']['vulkan']} Vulkan, {s['jobs']['common']} common parts; HIP {s['hip_one_target']:,} for one "
          f"target + {s['hip_per_extra_target']:,} per extra target): {s['after']:,} against {s['before']:,}: "
          f"{s['ratio']}x (unscaled {result['shipped_matrix_unscaled']['ratio']}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
