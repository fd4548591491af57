"""What a cold night costs on the common part (issue 41): the step-seconds of each leg of the last night rehearsal
(``tests/e2e/night.sh cold``: linux-common, two ROCm families, linux-vulkan, windows-cpu), against the same night
built whole, and the same projected to the shipped matrix (config/nightly.yaml, ``rockbuild matrix``).

The figures are ninja step-seconds: the sum of every step's duration in each leg's ``.ninja_log`` (night 1 of the
rehearsal; the wall clock is about half of it on the 2-core host), split into the GPU library, the CPU modules and
the rest (bench/common_part.py's split).

The baseline it names, in order of preference:

1. **The night built whole in the same rehearsal** (``tests/e2e/night.sh whole``, run after the cold night): its
   linux-gfx1151 and linux-vulkan legs built whole (no common part) from night 1's inputs, each from an empty ccache,
   on the same host and day. "Before" of gfx1151 and vulkan is what they measured; of gfx120X, the whole gfx1151
   leg's CPU modules and rest (TheRock's clang compiles them; they do not depend on the GPU targets) plus this
   run's gfx120X GPU library (the same compile in both shapes; the whole gfx1151 leg's own HIP library against the
   common-shape one is printed as the check of that); windows-cpu is built whole in both shapes. No scaling.
2. Without that folder: **the night built whole, measured 2026-12-04** by ``tests/e2e/night.sh cold`` (issue 41's
   table: linux-gfx1151 2,424 step-seconds, linux-vulkan 1,534, windows-cpu 1,898), on another host (an AMD EPYC;
   today's may differ). Each GPU job built whole is this run's GPU library plus the baseline's CPU modules and rest
   of that kind of job, scaled by the control: windows-cpu, the same build in both, whose ratio (this run against
   1,898) says how much faster or slower the host is; the unscaled ratio is printed beside it. With a same-run
   baseline, this dated one is printed as a second opinion.

The common part measured again, alone (``tests/e2e/night.sh whole`` builds it last, into whole/common-out, from an
empty ccache with night 1's inputs, when nothing else runs): where it is there, the night is also printed with it in
place of night 1's common leg. That is a second "after", never the first: it tells how much of night 1's common leg
was the load beside it (a rehearsal shares its 2 cores with whatever else the machine does).

Projection to the shipped matrix, from the measured parts: a ROCm job's HIP library grows with its targets
(one-target gfx1151 and two-target gfx120X measured: hip(n) = hip(1) + (n - 1) x (hip(2) - hip(1))); whole, it adds
the baseline's CPU and rest; a Vulkan job whole likewise; each OS's common part is this run's linux-common (the
Windows common part is taken as the Linux one: it is not built here).

    python bench/night_cost.py                 # read the last rehearsal ($ROCKBUILD_E2E/night)
    python bench/night_cost.py --run           # run `tests/e2e/night.sh cold`, then `whole` (about 100 min; root)
    python bench/night_cost.py --json
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
from pathlib import Path

from common_part import ninja_steps, split
from e2e_results import e2e_root, run_e2e

# The night built whole (no common part), cold: tests/e2e/night.sh cold, 2026-12-04, a 2-core AMD EPYC host,
# llama.cpp b11312, each leg's .ninja_log (issue 41's table). gpu: the GPU library; cpu: ggml-cpu's modules; rest: the
# rest.
DATED_NAME = "the night built whole, tests/e2e/night.sh cold of 2026-12-04 (issue 41's table)"
DATED = {
    "linux-gfx1151": {"gpu": 1318.0, "cpu": 546.0, "rest": 559.0, "total": 2424.0, "wall": 1212.0},
    "linux-vulkan": {"gpu": 223.0, "cpu": 640.0, "rest": 671.0, "total": 1534.0, "wall": 767.0},
    "windows-cpu": {"gpu": 0.0, "cpu": 836.0, "rest": 1062.0, "total": 1898.0, "wall": 948.0},
}
SAME_RUN_NAME = "the night built whole in this rehearsal, tests/e2e/night.sh whole (same host, day and inputs)"
WHOLE_KINDS = ("linux-gfx1151", "linux-vulkan")


def leg(folder: Path) -> dict:
    """The step-seconds of one leg's build folder, split, with its compile wall clock from build.json."""
    steps = ninja_steps(folder / "build")
    record = json.loads((folder / "build.json").read_text(encoding="utf-8"))
    targets = list(record.get("gpu_targets") or [])
    return {
        "total": round(sum(s for s, _ in steps), 1),
        **split(steps),
        "steps": len(steps),
        "wall": (record.get("durations") or {}).get("compile"),
        "targets": targets,
        "common": (record.get("common") or {}).get("job"),
    }


def built(folder: Path) -> bool:
    return (folder / "build.json").is_file() and (folder / "build" / ".ninja_log").is_file()


def legs(night: Path) -> dict[str, dict]:
    found = {}
    outs = (night / "n1" / "out").iterdir() if (night / "n1" / "out").is_dir() else ()
    for folder in sorted((night / "n1" / "common-out").glob("*-common")) + sorted(outs):
        if built(folder):
            found[folder.name] = leg(folder)
    if not found:
        sys.exit(f"no legs with a .ninja_log under {night}/n1: run `tests/e2e/night.sh cold` (or --run) first")
    return found


def common_alone(night: Path) -> dict | None:
    """The common part built again by `night.sh whole`, alone on the machine, or None where it is not there."""
    found = sorted(f for f in (night / "whole" / "common-out").glob("*-common") if built(f))
    return {"job": found[0].name, **leg(found[0])} if found else None


def same_run_baseline(night: Path) -> dict | None:
    """The legs of `night.sh whole` (both kinds built whole, no common part), or None where that run is missing."""
    folders = {kind: night / "whole" / "out" / kind for kind in WHOLE_KINDS}
    if not all(built(f) for f in folders.values()):
        return None
    found = {kind: leg(f) for kind, f in folders.items()}
    for kind, m in found.items():
        if m["common"]:
            sys.exit(f"{folders[kind]} was built on the common part {m['common']}: not a whole build")
    return {"name": SAME_RUN_NAME, "legs": found, "same_run": True}


DATED_BASELINE = {"name": DATED_NAME, "legs": DATED, "same_run": False}


def kind_of(job: str) -> str:
    return "linux-gfx1151" if job.startswith("linux-gfx") else job


def whole(job: str, measured: dict, base: dict, drift: float = 1.0) -> tuple[float, str]:
    """What JOB costs built whole, and where that figure comes from."""
    if job == "windows-cpu":
        return measured["total"], "this run (built whole in both shapes)"
    if base["same_run"] and job in base["legs"]:
        return base["legs"][job]["total"], "built whole in this rehearsal (night.sh whole)"
    kind = kind_of(job)
    if kind not in base["legs"]:
        raise SystemExit(f"no baseline for {job}")
    rest = base["legs"][kind]["cpu"] + base["legs"][kind]["rest"]
    where = "this rehearsal's whole" if base["same_run"] else "the dated baseline's"
    return rest * drift + measured["gpu"], f"this run's GPU library + {where} {kind} CPU modules and rest"


MATRIX_FILE: Path | None = None  # --matrix: the shipped matrix as `rockbuild matrix --format json` printed it


@functools.cache
def shipped_jobs() -> list[dict]:
    """The shipped matrix's jobs: --matrix FILE, else `rockbuild matrix --format json` run once."""
    if MATRIX_FILE is not None:
        return json.loads(MATRIX_FILE.read_text(encoding="utf-8"))
    out = subprocess.run(
        [sys.executable, "-m", "rockbuild", "matrix", "--format", "json"], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)


def project(measured: dict[str, dict], base: dict, drift: float = 1.0) -> dict:
    hip = {len(m["targets"]): m["gpu"] for j, m in measured.items() if j.startswith("linux-gfx") and m["targets"]}
    if 1 not in hip or len(hip) < 2:
        raise SystemExit(f"the projection needs a one-target and a multi-target ROCm leg; measured {sorted(hip)}")
    many = max(hip)
    per_target = (hip[many] - hip[1]) / (many - 1)

    def hip_of(n: int) -> float:
        return hip[1] + (n - 1) * per_target

    def rest_of(kind: str) -> float:
        return (base["legs"][kind]["cpu"] + base["legs"][kind]["rest"]) * drift

    common = next(m["total"] for j, m in measured.items() if j.endswith("-common"))
    vulkan = measured["linux-vulkan"]
    before = after = 0.0
    counts = {"rocm": 0, "vulkan": 0, "common": 0, "targets": 0}
    for job in shipped_jobs():
        backend = job.get("backend")
        if backend == "rocm":
            n = len(job.get("targets") or [])
            before += rest_of("linux-gfx1151") + hip_of(n)
            after += hip_of(n)
            counts["rocm"] += 1
            counts["targets"] += n
        elif backend == "vulkan":
            before += rest_of("linux-vulkan") + vulkan["gpu"]
            after += vulkan["total"]
            counts["vulkan"] += 1
        elif job["id"].endswith("-common"):
            after += common
            counts["common"] += 1
    return {
        "jobs": counts,
        "hip_one_target": round(hip[1], 1),
        "hip_per_extra_target": round(per_target, 1),
        "before": round(before),
        "after": round(after),
        "ratio": round(after / before, 3),
    }


def night_ratio(measured: dict[str, dict], base: dict, drift: float) -> dict:
    rows = []
    before = after = 0.0
    for job, m in measured.items():
        after += m["total"]
        if job.endswith("-common"):
            rows.append({"job": job, "after": m, "before": None, "source": "built once, for the OS's GPU legs"})
            continue
        cost, source = whole(job, m, base, drift)
        before += cost
        rows.append({"job": job, "after": m, "before": round(cost, 1), "source": source})
    common = next((m for j, m in measured.items() if j.endswith("-common")), None)
    gpu_legs = [m for j, m in measured.items() if m.get("common")]
    # the night's longest chain in step-seconds (legs run side by side, each on a runner of its own)
    chain_after = max(
        [(common["total"] if common else 0) + max((m["total"] for m in gpu_legs), default=0)]
        + [m["total"] for m in measured.values() if not m.get("common") and m is not common]
    )
    chain_before = max(whole(j, m, base, drift)[0] for j, m in measured.items() if not j.endswith("-common"))
    wall_after = max(
        [(common["wall"] or 0 if common else 0) + max((m["wall"] or 0 for m in gpu_legs), default=0)]
        + [m["wall"] or 0 for m in measured.values() if not m.get("common") and m is not common]
    )
    critical = {
        "before": round(chain_before),
        "after": round(chain_after),
        "ratio": round(chain_after / chain_before, 3),
    }
    return {
        "baseline": base["name"],
        "same_run": base["same_run"],
        "legs": rows,
        "before": round(before),
        "after": round(after),
        "ratio": round(after / before, 3),
        "critical_path_step_seconds": critical,
        "critical_path_wall_after": round(wall_after, 1),
    }


def dated(measured: dict[str, dict]) -> dict:
    """The night against the dated baseline, scaled by the windows-cpu control, and unscaled."""
    control = measured.get("windows-cpu", {}).get("total")
    drift = control / DATED["windows-cpu"]["total"] if control else 1.0
    result = night_ratio(measured, DATED_BASELINE, drift)
    raw = night_ratio(measured, DATED_BASELINE, 1.0)
    return {
        **result,
        "unscaled": {k: raw[k] for k in ("before", "after", "ratio")},
        "control_windows_cpu": {
            "this_run": control,
            "baseline": DATED["windows-cpu"]["total"],
            "drift": round(drift, 3),
        },
        "shipped_matrix": project(measured, DATED_BASELINE, drift),
        "shipped_matrix_unscaled": project(measured, DATED_BASELINE, 1.0),
    }


def with_common_alone(result: dict, measured: dict[str, dict], alone: dict | None) -> dict:
    """``result`` plus the night with the common part measured alone in place of night 1's common leg."""
    if alone is None or alone["job"] not in measured:
        return result
    after = result["after"] - measured[alone["job"]]["total"] + alone["total"]
    return {
        **result,
        "common_alone": {
            "job": alone["job"],
            "night_1": measured[alone["job"]]["total"],
            "alone": alone["total"],
            "wall": alone["wall"],
            "after": round(after),
            "ratio": round(after / result["before"], 3),
        },
    }


def report(night: Path) -> dict:
    measured = legs(night)
    alone = common_alone(night)
    base = same_run_baseline(night)
    if base is None:
        return with_common_alone(dated(measured), measured, alone)
    # the check that a GPU library compiles the same in both shapes (the gfx120X "before" rests on it)
    hip_whole, hip_common = base["legs"]["linux-gfx1151"]["gpu"], measured.get("linux-gfx1151", {}).get("gpu")
    result = {
        **night_ratio(measured, base, 1.0),
        "shipped_matrix": project(measured, base, 1.0),
        "whole_legs": base["legs"],
        "gpu_library_check": {
            "job": "linux-gfx1151",
            "whole": hip_whole,
            "on_common": hip_common,
            "ratio": round(hip_common / hip_whole, 3) if hip_common else None,
        },
        "dated_baseline": dated(measured),
    }
    return with_common_alone(result, measured, alone)


def print_rows(result: dict) -> None:
    for row in result["legs"]:
        m = row["after"]
        before = f"{row['before']:>9,.1f}" if row["before"] is not None else f"{'-':>9}"
        print(
            f"  {row['job']:<16} now {m['total']:>9,.1f} (gpu {m['gpu']:,.1f}, cpu {m['cpu']:,.1f}, rest "
            f"{m['rest']:,.1f}; compile {m['wall'] or 0:,.1f} s)  whole {before}  ({row['source']})"
        )


def print_dated(result: dict, indent: str = "  ") -> None:
    u, s = result["unscaled"], result["shipped_matrix"]
    print(
        f"{indent}the rehearsal's night: {result['after']:,} against {result['before']:,}: {result['ratio']}x "
        f"(goal <= 0.75x; unscaled: {u['after']:,} against {u['before']:,}: {u['ratio']}x); shipped matrix "
        f"{s['ratio']}x (unscaled {result['shipped_matrix_unscaled']['ratio']}x)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--night", type=Path, default=None, help="the rehearsal's folder (default: $ROCKBUILD_E2E/night)"
    )
    parser.add_argument("--run", action="store_true", help="run `tests/e2e/night.sh cold`, then `whole`, first")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--matrix",
        type=Path,
        default=None,
        help="the shipped matrix as `rockbuild matrix --format json` printed it (default: run it)",
    )
    args = parser.parse_args()
    global MATRIX_FILE
    MATRIX_FILE = args.matrix
    if args.run:
        run_e2e("night.sh", "cold")
        run_e2e("night.sh", "whole")
    result = report(args.night or e2e_root() / "night")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    if result["same_run"]:
        check = result["gpu_library_check"]
        print(
            f"night cost, cold, step-seconds (baseline: {result['baseline']}; linux-gfx1151's HIP library "
            f"{check['whole']:,} built whole, {check['on_common']:,} on the common part: x{check['ratio']})"
        )
    else:
        c = result["control_windows_cpu"]
        print(
            f"night cost, cold, step-seconds (baseline: {result['baseline']}; its figures scaled by the control, "
            f"windows-cpu built whole in both: {c['this_run']:,} now against {c['baseline']:,}: x{c['drift']})"
        )
    print_rows(result)
    goal = (
        f"(goal <= 0.75x; unscaled: {result['unscaled']['after']:,} against {result['unscaled']['before']:,}: "
        f"{result['unscaled']['ratio']}x)"
        if not result["same_run"]
        else "(goal <= 0.75x)"
    )
    print(f"  the rehearsal's night: {result['after']:,} against {result['before']:,}: {result['ratio']}x {goal}")
    if (alone := result.get("common_alone")) is not None:
        print(
            f"  with {alone['job']} measured again alone (night.sh whole: {alone['alone']:,} step-seconds, compile "
            f"{alone['wall'] or 0:,.1f} s, against {alone['night_1']:,} in night 1): {alone['after']:,} against "
            f"{result['before']:,}: {alone['ratio']}x"
        )
    cp = result["critical_path_step_seconds"]
    print(
        f"  critical path (longest chain of legs): {cp['after']:,} against {cp['before']:,} step-seconds: "
        f"{cp['ratio']}x; compile wall along it now {result['critical_path_wall_after']:,.1f} s"
    )
    s = result["shipped_matrix"]
    unscaled = "" if result["same_run"] else f" (unscaled {result['shipped_matrix_unscaled']['ratio']}x)"
    print(
        f"  projected to the shipped matrix ({s['jobs']['rocm']} ROCm jobs with {s['jobs']['targets']} targets, "
        f"{s['jobs']['vulkan']} Vulkan, {s['jobs']['common']} common parts; HIP {s['hip_one_target']:,} for one "
        f"target + {s['hip_per_extra_target']:,} per extra target): {s['after']:,} against {s['before']:,}: "
        f"{s['ratio']}x{unscaled}"
    )
    if result["same_run"]:
        d = result["dated_baseline"]
        print(f"  second opinion, {d['baseline']} scaled by windows-cpu x{d['control_windows_cpu']['drift']}:")
        print_dated(d, "    ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
