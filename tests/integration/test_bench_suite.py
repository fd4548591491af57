"""bench/suite.py: the suite now against a baseline commit, in turn, on a small repository of its own shape (a
rockbuild package and tests, in git) where the working tree made one test slower than the commit before it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from support.paths import REPO

SCRIPT = REPO / "bench" / "suite.py"


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def test_it_runs_each_side_with_its_own_package_and_names_the_file_that_slowed(tmp_path):
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "bench" / "suite.py")
    (repo / "rockbuild").mkdir()
    (repo / "rockbuild" / "__init__.py").write_text("DELAY = 0.0\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_fast.py").write_text("def test_fast():\n    assert True\n")
    # the test sleeps for the package's DELAY: it shows which tree's rockbuild each side imported
    (repo / "tests" / "test_slow.py").write_text(
        "import time\nimport rockbuild\n\ndef test_slow():\n    time.sleep(rockbuild.DELAY)\n"
    )
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    (repo / "rockbuild" / "__init__.py").write_text("DELAY = 1.5\n")  # now: slower, uncommitted
    # now, too: test_fast moved to a folder of its own (still the same test), and one test is new
    (repo / "tests" / "sub").mkdir()
    (repo / "tests" / "test_fast.py").rename(repo / "tests" / "sub" / "test_fast.py")
    (repo / "tests" / "test_new.py").write_text("def test_new():\n    assert True\n")

    saved = tmp_path / "runs.json"
    result = subprocess.run(
        [
            sys.executable,
            str(repo / "bench" / "suite.py"),
            "--base",
            "HEAD",
            "--pairs",
            "1",
            "--save",
            str(saved),
            "tests",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    out = result.stdout
    assert "3 passed" in out and "2 passed" in out and "now / base: " in out
    ratio = float(out.split("now / base: ")[1].split()[0])
    assert ratio > 1.0, out
    moved = out.split("test files that moved most")[1].splitlines()
    assert moved[1].startswith("  tests/test_slow.py: 0.0 -> 1.5 s"), out
    # the tests both sides run: test_slow and the moved test_fast; test_new only now
    both = out.split("the 2 tests both sides run")[1].splitlines()[0]
    assert float(both.split("now / base: ")[1]) > 10, out
    assert "tests only now: 1," in out and "tests only in base: 0," in out, out
    assert "  only now: tests/test_new.py: " in out, out
    assert "  slower: tests/test_slow.py::test_slow: 0.0 -> 1.5 s" in out, out
    # --save: each run's seconds per test
    runs = json.loads(saved.read_text())["runs"]
    assert [r["side"] for r in runs] == ["now", "base"]
    assert runs[0]["tests"]["tests/test_slow.py::test_slow"] > 1.4 > runs[1]["tests"]["tests/test_slow.py::test_slow"]
    assert "tests/sub/test_fast.py::test_fast" in runs[0]["tests"] and "tests/test_new.py::test_new" in runs[0]["tests"]
    # the baseline's worktree is gone again
    listed = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True, check=True)
    assert len(listed.stdout.splitlines()) == 1


def test_cli_start_times_each_sides_own_rockbuild(tmp_path):
    """bench/cli_start.py: `python -m rockbuild ARGS` in each tree; the side whose rockbuild starts slower has the
    larger median, and the ratio says so."""
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    for script in ("suite.py", "cli_start.py"):
        shutil.copy(REPO / "bench" / script, repo / "bench" / script)
    (repo / "rockbuild").mkdir()
    (repo / "rockbuild" / "__init__.py").write_text("DELAY = 0.0\n")
    (repo / "rockbuild" / "__main__.py").write_text("import time\nimport rockbuild\ntime.sleep(rockbuild.DELAY)\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    (repo / "rockbuild" / "__init__.py").write_text("DELAY = 0.2\n")  # now: slower to start, uncommitted

    result = subprocess.run(
        [sys.executable, str(repo / "bench" / "cli_start.py"), "--base", "HEAD", "--runs", "2"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("  rockbuild ")]
    assert [row.split()[1] for row in rows] == ["--version", "--help", "matrix"], result.stdout
    assert all(float(row.rsplit(" ", 1)[1]) > 1.5 for row in rows), result.stdout
    listed = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True, check=True)
    assert len(listed.stdout.splitlines()) == 1
