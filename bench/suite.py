"""How long the test suite takes now against a baseline commit, both measured in this run, in turn, on this machine.

Baseline: the tree at ``--base`` (default 9c70116, the commit issue 40 was filed at), checked out in a git worktree;
now: this checkout's working tree. Each run is ``python -m pytest -q -p no:cacheprovider --durations=0
--durations-min=0 [PATHS]`` in its tree with PYTHONPATH set to it, so the tree's own rockbuild is imported (also by
the ``rockbuild`` processes the tests start). The runs alternate, now first, ``--pairs`` times. Printed: each run's
wall seconds and outcome, the median wall of each side and their ratio (now / base: below 1 is faster), the tests
that failed, the tests both sides run (a test is the same test in a file that moved to another folder: same file
name, same test name) summed on each side with their ratio, the tests only one side has, and the test files whose
summed durations moved most (a file of only one side is listed as new or gone).

    python bench/suite.py [--base REV] [--pairs N] [PATHS...]   # PATHS default: the README's command (everything)
    python bench/suite.py --pairs 3 tests/unit                   # the unit suite alone
    python bench/suite.py --save runs.json                       # also every run's seconds per test, as JSON

The two sides run different tests where the suite changed between them: the whole-suite ratio counts the tests added
since the baseline; the ratio of the tests both run does not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_BASE = "9c70116"  # issue 40 filed: the suite before its changes

_DURATION = re.compile(r"^(\d+\.\d+)s (?:setup|call|teardown)\s+(\S+?)::(\S.*)$")
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)")
_OUTCOME = re.compile(r"^=*\s*(.*\b(?:passed|failed|error)\b.*) in ([\d.]+)s")


@dataclass
class Run:
    side: str
    wall: float
    rc: int
    outcome: str
    files: dict[str, float] = field(default_factory=dict)
    tests: dict[str, float] = field(default_factory=dict)  # node id -> summed setup, call and teardown
    failed: list[str] = field(default_factory=list)


def imported_from(tree: Path) -> Path:
    """Where a process with the run's environment imports rockbuild from: it must be ``tree``'s own."""
    out = subprocess.run(
        [sys.executable, "-c", "import rockbuild; print(rockbuild.__file__)"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip()).parent


@contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """``rev`` checked out in a temporary git worktree of this repository, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="rockbuild-bench-") as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), rev], cwd=REPO, check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)


def run_suite(side: str, tree: Path, paths: list[str]) -> Run:
    if imported_from(tree).resolve() != (tree / "rockbuild").resolve():
        raise SystemExit(f"error: the {side} run would not import its own rockbuild ({imported_from(tree)})")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--durations=0",
        "--durations-min=0",
        *paths,
    ]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    files: dict[str, float] = defaultdict(float)
    tests: dict[str, float] = defaultdict(float)
    failed: list[str] = []
    outcome = ""
    for line in proc.stdout.splitlines():
        if m := _DURATION.match(line):
            files[m.group(2)] += float(m.group(1))
            tests[f"{m.group(2)}::{m.group(3).strip()}"] += float(m.group(1))
        elif m := _FAILED.match(line):
            failed.append(m.group(1))
        elif m := _OUTCOME.match(line):
            outcome = m.group(1).strip("= ")
    run = Run(side, wall, proc.returncode, outcome or f"rc {proc.returncode}", dict(files), dict(tests), failed)
    print(f"  {side:4} {wall:8.1f} s  rc {proc.returncode}  {run.outcome}", flush=True)
    return run


def paired(now: dict[str, float], base: dict[str, float]) -> dict[str, str]:
    """The tests both sides run, as now's node id -> base's: the same id, or else the same file name and test name in
    another folder (a file that moved, tests/unit/test_x.py -> tests/integration/test_x.py), where that is one test."""

    def moved(node: str) -> str:  # the file's name without its folder, and the test
        path, test = node.split("::", 1)
        return f"{Path(path).name}::{test}"

    pairs = {t: t for t in now if t in base}
    by_name: dict[str, list[str]] = defaultdict(list)
    for t in base.keys() - pairs.keys():
        by_name[moved(t)].append(t)
    for t in now.keys() - pairs.keys():
        if len(same := by_name.get(moved(t), [])) == 1:
            pairs[t] = same[0]
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=DEFAULT_BASE, help=f"the baseline commit (default {DEFAULT_BASE})")
    parser.add_argument("--pairs", type=int, default=2, help="runs of each side, in turn (default 2)")
    parser.add_argument("--top", type=int, default=12, help="test files listed by how far they moved (default 12)")
    parser.add_argument("--save", type=Path, help="also write every run's per-test seconds to this JSON file")
    parser.add_argument("paths", nargs="*", help="what pytest runs (default: its testpaths, the README's command)")
    args = parser.parse_args()

    base_rev = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    with worktree(base_rev) as base_tree:
        print(
            f"now: the working tree at {head}; base: {base_rev}; pytest {' '.join(args.paths) or '(testpaths)'}; "
            f"{args.pairs} pair(s), now first",
            flush=True,
        )
        runs: list[Run] = []
        for _ in range(args.pairs):
            runs.append(run_suite("now", REPO, args.paths))
            runs.append(run_suite("base", base_tree, args.paths))

    if args.save:
        args.save.write_text(json.dumps({"now": head, "base": base_rev, "runs": [asdict(r) for r in runs]}, indent=1))
    now = [r for r in runs if r.side == "now"]
    base = [r for r in runs if r.side == "base"]
    now_wall, base_wall = statistics.median(r.wall for r in now), statistics.median(r.wall for r in base)
    print(f"\nmedian wall: now {now_wall:.1f} s ({now[0].outcome}), base {base_wall:.1f} s ({base[0].outcome})")
    pairs = ", ".join(f"{n.wall / b.wall:.3f}" for n, b in zip(now, base, strict=True))
    print(f"now / base: {now_wall / base_wall:.3f}" + (f" (each pair: {pairs})" if len(now) > 1 else ""))

    for side in (now, base):
        for name in sorted({f for r in side for f in r.failed}):
            print(f"  failed ({side[0].side}): {name}")

    def medians(side: list[Run], seconds: str) -> dict[str, float]:  # seconds: "files" or "tests"
        names = {name for r in side for name in getattr(r, seconds)}
        return {name: statistics.median(getattr(r, seconds).get(name, 0.0) for r in side) for name in names}

    now_tests, base_tests = medians(now, "tests"), medians(base, "tests")
    both = paired(now_tests, base_tests)
    only_now = set(now_tests) - set(both)
    only_base = set(base_tests) - set(both.values())
    common_now = sum(now_tests[t] for t in both)
    common_base = sum(base_tests[t] for t in both.values())
    print(
        f"\nthe {len(both)} tests both sides run (summed setup, call and teardown; median over the runs): "
        f"now {common_now:.1f} s, base {common_base:.1f} s, now / base: {common_now / max(common_base, 1e-9):.3f}"
    )
    print(
        f"tests only now: {len(only_now)}, {sum(now_tests[t] for t in only_now):.1f} s; tests only in base: "
        f"{len(only_base)}, {sum(base_tests[t] for t in only_base):.1f} s"
    )
    by_file: dict[str, float] = defaultdict(float)
    for t in only_now:
        by_file[t.split("::")[0]] += now_tests[t]
    for name, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  only now: {name}: {seconds:.1f} s")
    slower = sorted(both, key=lambda t: -(now_tests[t] - base_tests[both[t]]))
    for t in slower[: args.top]:
        delta = now_tests[t] - base_tests[both[t]]
        if delta > 0.5:
            print(f"  slower: {t}: {base_tests[both[t]]:.1f} -> {now_tests[t]:.1f} s ({delta:+.1f})")

    now_files, base_files = medians(now, "files"), medians(base, "files")
    moved = sorted(set(now_files) | set(base_files), key=lambda f: -abs(now_files.get(f, 0.0) - base_files.get(f, 0.0)))
    print("\ntest files that moved most (summed setup, call and teardown; median over the runs):")
    for name in moved[: args.top]:
        n, b = now_files.get(name), base_files.get(name)
        if b is None:
            print(f"  {name}: new, {n:.1f} s")
        elif n is None:
            print(f"  {name}: gone (base {b:.1f} s)")
        else:
            print(f"  {name}: {b:.1f} -> {n:.1f} s ({n - b:+.1f})")
    print(f"  all files: base {sum(base_files.values()):.1f} s, now {sum(now_files.values()):.1f} s")
    return 0 if all(r.rc == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
