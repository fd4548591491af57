"""How many CPU threads the GPU smoke leg's llama-bench should use: pp512/tg128 on a GPU with 1, 2, 4, 8 threads,
each repeated, and the spread of the repetitions. The figures every release publishes (and ``rockbuild perf`` alerts
on at 5 %) come from this run, so its noise must sit well below 5 %.

Baseline: 1 thread, what the smoke test used for every run until now. Printed per thread count: the mean t/s and
its ratio to the baseline's, and the coefficient of variation (stddev / mean over the repetitions) and its ratio to
the baseline's. Needs a GPU bundle and a model; standard library only (it runs on the lent GPU machine as it is):

    python bench/gpu_threads.py BUNDLE MODEL [--threads 1,2,4,8] [-r 5] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

TESTS = {"pp512": ("-p", "512", "-n", "0"), "tg128": ("-p", "0", "-n", "128")}


def bench(bundle: Path, model: Path, threads: int, reps: int, test: str) -> list[float]:
    """The t/s of each repetition of one llama-bench test (after llama-bench's own warm-up run)."""
    args = [
        str(bundle / "llama-bench"),
        "-m",
        str(model),
        *TESTS[test],
        "-r",
        str(reps),
        "-t",
        str(threads),
        "-ngl",
        "99",
        "-o",
        "json",
    ]
    result = subprocess.run(args, capture_output=True, text=True, timeout=1200, env=dict(os.environ))
    if result.returncode != 0:
        sys.exit(f"error: llama-bench -t {threads} {test} failed ({result.returncode}): {result.stderr[-400:]}")
    (row,) = json.loads(result.stdout)
    return [float(x) for x in row["samples_ts"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("model", type=Path)
    parser.add_argument("--threads", default="1,2,4,8")
    parser.add_argument("-r", "--repetitions", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    rows = []
    for test in TESTS:
        for threads in counts:
            samples = bench(args.bundle, args.model, threads, args.repetitions, test)
            mean = statistics.fmean(samples)
            cv = statistics.stdev(samples) / mean if len(samples) > 1 else 0.0
            rows.append({"test": test, "threads": threads, "mean": mean, "cv": cv, "samples": samples})
    print(f"{'test':6} {'threads':>7} {'t/s':>10} {'vs 1 thread':>12} {'cv %':>7} {'cv vs 1 thread':>15}")
    for row in rows:
        base = next(r for r in rows if r["test"] == row["test"] and r["threads"] == counts[0])
        cv_ratio = row["cv"] / base["cv"] if base["cv"] else float("nan")
        row["ratio"], row["cv_ratio"] = row["mean"] / base["mean"], cv_ratio
        print(
            f"{row['test']:6} {row['threads']:>7} {row['mean']:>10.1f} {row['ratio']:>11.2f}x {100 * row['cv']:>6.1f}"
            f" {cv_ratio:>14.2f}x"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"baseline_threads": counts[0], "repetitions": args.repetitions, "rows": rows}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
