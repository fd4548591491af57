"""Benchmark what the people who download the builds install (issue 57): rockbuild's wheel alone (``doctor`` and
``install``: pyproject's ``dependencies``) against the baseline, the same wheel with the ``build`` extra (everything
``pip install .`` brought before the split). Both into a new venv, from the same package index and pip cache, in this
run: packages installed (pip list, pip itself included; and beyond what a new venv has), the venv's size, and the
seconds ``pip install`` took. Goal: the user install at most a third of the baseline on each. Then
``rockbuild doctor --json`` runs from the user venv, to show it works with that alone.

    python bench/user_install.py            # the figures and the ratios
    python bench/user_install.py --json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOAL_RATIO = 1 / 3


def venv_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def measure(base: Path, name: str, requirement: str | None) -> dict[str, float]:
    """A new venv with ``requirement`` installed (None: nothing, the empty venv's own pip and setuptools)."""
    venv = base / name
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    start = time.monotonic()
    if requirement is not None:
        subprocess.run([*pip, "install", "-q", requirement], check=True, capture_output=True)
    seconds = time.monotonic() - start
    listed = subprocess.run([*pip, "list", "--format=json"], check=True, capture_output=True, text=True).stdout
    rows = next(line for line in listed.splitlines() if line.startswith("["))  # past any pip warnings
    return {"packages": len(json.loads(rows)), "mb": venv_size(venv) / 1e6, "seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rockbuild-user-install-") as tmp:
        base = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(base / "dist"), str(REPO)],
            check=True,
            capture_output=True,
        )
        (wheel,) = (base / "dist").glob("rockbuild-*.whl")
        # the baseline first: it fills pip's cache with every package the user install takes too
        baseline = measure(base, "baseline", f"{wheel}[build]")
        user = measure(base, "user", str(wheel))
        empty = measure(base, "empty", None)
        doctor = subprocess.run(
            [str(base / "user" / "bin" / "rockbuild"), "doctor", "--json"], capture_output=True, text=True, cwd=base
        )
        works = "Traceback" not in doctor.stderr and doctor.stdout.lstrip().startswith("{")
    ratios = {k: user[k] / baseline[k] for k in ("packages", "mb", "seconds")}
    # what each install adds to a new venv (which has pip and setuptools already)
    added = {k: (user[k] - empty[k]) / (baseline[k] - empty[k]) for k in ("packages", "mb")}
    result = {
        "baseline": baseline,
        "user": user,
        "empty_venv": empty,
        "ratio": ratios,
        "ratio_added": added,
        "goal": GOAL_RATIO,
        "doctor_runs": works,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{'':10} {'packages':>9} {'venv MB':>9} {'seconds':>9}")
        for name, row in (("baseline", baseline), ("user", user)):
            print(f"{name:10} {row['packages']:9d} {row['mb']:9.1f} {row['seconds']:9.1f}")
        print(
            f"{'ratio':10} {ratios['packages']:9.2f} {ratios['mb']:9.2f} {ratios['seconds']:9.2f}"
            f"   (goal <= {GOAL_RATIO:.2f} each)"
        )
        print(
            f"{'added':10} {added['packages']:9.2f} {added['mb']:9.2f} {'':>9}   (beyond a new venv's "
            f"{empty['packages']:.0f} packages, {empty['mb']:.1f} MB)"
        )
        print(f"rockbuild doctor --json from the user venv: {'runs' if works else 'FAILS: ' + doctor.stderr[-300:]}")
    return 0 if works and all(r <= GOAL_RATIO for r in (*added.values(), ratios["mb"], ratios["seconds"])) else 1


if __name__ == "__main__":
    sys.exit(main())
