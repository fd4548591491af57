"""How long ``rockbuild`` takes to start and answer, now against a baseline commit, both measured in this run, in turn.

Baseline: the tree at ``--base`` (default 5db8755, before the CLI imported each data file's reader lazily), checked
out in a git worktree; now: this checkout's working tree. Each command is ``python -m rockbuild ARGS`` with
PYTHONPATH set to its tree (each side imports its own rockbuild), run ``--runs`` times per side, the sides alternating.
Printed per command: the median wall time of each side and their ratio (now / base: below 1 is faster). The test suite
starts rockbuild as a process several hundred times, so this is also part of its time.

    python bench/cli_start.py [--base REV] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from suite import REPO, imported_from, worktree

DEFAULT_BASE = "5db8755"  # stop 53: every command imported every stage's reader at start
COMMANDS = (("--version",), ("--help",), ("matrix", "--format", "json"))


def timed(tree: Path, args: tuple[str, ...]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "rockbuild", *args],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=DEFAULT_BASE, help=f"the baseline commit (default {DEFAULT_BASE})")
    parser.add_argument("--runs", type=int, default=15, help="runs of each command on each side (default 15)")
    args = parser.parse_args()
    base_rev = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    with worktree(base_rev) as base_tree:
        for side, tree in (("now", REPO), ("base", base_tree)):
            if imported_from(tree).resolve() != (tree / "rockbuild").resolve():
                raise SystemExit(f"error: the {side} run would not import its own rockbuild ({imported_from(tree)})")
        print(f"now: the working tree; base: {base_rev}; {args.runs} runs of each command per side, alternating")
        for command in COMMANDS:
            now: list[float] = []
            base: list[float] = []
            timed(REPO, command), timed(base_tree, command)  # warm the page cache and the bytecode of both
            for _ in range(args.runs):
                now.append(timed(REPO, command))
                base.append(timed(base_tree, command))
            n, b = statistics.median(now), statistics.median(base)
            print(
                f"  rockbuild {' '.join(command):24} now {n * 1000:6.0f} ms   base {b * 1000:6.0f} ms   "
                f"now / base {n / b:.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
