"""bench/night_cost.py on a night folder made here: each leg's .ninja_log and build.json as the rehearsal leaves them,
read as step-seconds, the whole-night baseline scaled by the windows-cpu control, the shipped matrix projected."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from support.paths import REPO

SCRIPT = REPO / "bench" / "night_cost.py"


def leg(folder, steps, *, targets=(), common=None, compile_s=10.0):
    """A job folder: build/.ninja_log (v6: start end mtime output hash, in ms) and build.json."""
    (folder / "build").mkdir(parents=True)
    lines, start = ["# ninja log v6"], 0
    for i, (output, seconds) in enumerate(steps):
        end = start + int(seconds * 1000)
        lines.append(f"{start}\t{end}\t0\t{output}\t{i:016x}")
        start = end
    (folder / "build" / ".ninja_log").write_text("\n".join(lines) + "\n")
    record = {
        "gpu_targets": list(targets),
        "durations": {"compile": compile_s},
        "common": {"job": common} if common else None,
    }
    (folder / "build.json").write_text(json.dumps(record))


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """The shipped matrix printed once for the module (each bench run would print it again)."""
    out = subprocess.run(
        [sys.executable, "-m", "rockbuild", "matrix", "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout
    path = tmp_path_factory.mktemp("matrix") / "matrix.json"
    path.write_text(out)
    return path


@pytest.fixture
def run(matrix):
    def bench(night, *args):
        return subprocess.run(
            [sys.executable, str(SCRIPT), "--night", str(night), "--matrix", str(matrix), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )

    return bench


def make_night(night, windows=1898.0):
    leg(night / "n1" / "common-out" / "linux-common", [("ggml/src/ggml-cpu/x.o", 600.0), ("tools/cli/cli.o", 500.0)])
    out = night / "n1" / "out"
    leg(
        out / "linux-gfx1151",
        [("ggml/src/ggml-hip/a.o", 1000.0), ("bin/libggml-hip.so", 10.0)],
        targets=["gfx1151"],
        common="linux-common",
    )
    leg(
        out / "linux-gfx120X",
        [("ggml/src/ggml-hip/a.o", 1800.0)],
        targets=["gfx1200", "gfx1201"],
        common="linux-common",
    )
    leg(out / "linux-vulkan", [("ggml/src/ggml-vulkan/v.o", 200.0)], common="linux-common")
    leg(out / "windows-cpu", [("ggml/src/ggml-cpu/x.o", windows / 2), ("tools/cli/cli.o", windows / 2)])


def test_the_night_against_the_whole_night_scaled_by_the_control(tmp_path, run):
    make_night(tmp_path, windows=949.0)  # the control ran twice as fast as in the baseline
    result = run(tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["control_windows_cpu"]["drift"] == 0.5
    rows = {r["job"]: r for r in data["legs"]}
    assert list(rows) == ["linux-common", "linux-gfx1151", "linux-gfx120X", "linux-vulkan", "windows-cpu"]
    assert rows["linux-common"]["before"] is None and rows["linux-common"]["after"]["cpu"] == 600.0
    # built whole: this run's GPU library + the baseline's CPU and rest of that kind of job, halved
    assert rows["linux-gfx1151"]["before"] == 1000.0 + (546 + 559) / 2
    assert rows["linux-gfx120X"]["before"] == 1800.0 + (546 + 559) / 2
    assert rows["linux-vulkan"]["before"] == 200.0 + (640 + 671) / 2
    assert rows["windows-cpu"]["before"] == 949.0
    after = 1100 + 1010 + 1800 + 200 + 949
    assert data["after"] == after and data["ratio"] == round(after / data["before"], 3)
    assert data["unscaled"]["ratio"] < data["ratio"]  # the unscaled baseline flatters the common part
    # the shipped matrix: HIP grows by 800 per extra target; every ROCm job drops the CPU and rest it repeated
    shipped = data["shipped_matrix"]
    assert shipped["hip_one_target"] == 1000.0 and shipped["hip_per_extra_target"] == 800.0
    assert shipped["jobs"]["common"] == 2 and shipped["jobs"]["rocm"] >= 20 and shipped["ratio"] < 1


def test_the_printed_lines_name_the_baseline_and_the_goal(tmp_path, run):
    make_night(tmp_path)
    result = run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tests/e2e/night.sh cold of 2026-12-04" in result.stdout and "x1.0)" in result.stdout
    assert "(goal <= 0.75x" in result.stdout and "projected to the shipped matrix" in result.stdout


def test_a_night_without_legs_is_refused_in_one_line(tmp_path, run):
    result = run(tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"no legs with a .ninja_log under {tmp_path}/n1: run `tests/e2e/night.sh cold` (or --run) first"
    )


def make_whole(night, *, common=None):
    """night.sh whole's legs: linux-gfx1151 and linux-vulkan built whole (no common part)."""
    out = night / "whole" / "out"
    leg(
        out / "linux-gfx1151",
        [("ggml/src/ggml-hip/a.o", 1100.0), ("ggml/src/ggml-cpu/x.o", 500.0), ("tools/cli/cli.o", 400.0)],
        targets=["gfx1151"],
        common=common,
    )
    leg(
        out / "linux-vulkan",
        [("ggml/src/ggml-vulkan/v.o", 210.0), ("ggml/src/ggml-cpu/x.o", 600.0), ("tools/cli/cli.o", 590.0)],
        common=common,
    )


def test_a_same_run_whole_night_is_the_baseline_unscaled(tmp_path, run):
    make_night(tmp_path, windows=949.0)
    make_whole(tmp_path)
    result = run(tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["same_run"] is True and "night.sh whole" in data["baseline"]
    rows = {r["job"]: r for r in data["legs"]}
    # measured whole where night.sh whole built the job; gfx120X: its own HIP + the whole gfx1151's CPU and rest
    assert rows["linux-gfx1151"]["before"] == 2000.0 and rows["linux-vulkan"]["before"] == 1400.0
    assert rows["linux-gfx120X"]["before"] == 1800.0 + 900.0
    assert rows["windows-cpu"]["before"] == 949.0
    assert data["before"] == 2000 + 2700 + 1400 + 949
    assert data["ratio"] == round((1100 + 1010 + 1800 + 200 + 949) / data["before"], 3)
    assert data["critical_path_step_seconds"]["before"] == 2700
    assert data["gpu_library_check"] == {"job": "linux-gfx1151", "whole": 1100.0, "on_common": 1000.0, "ratio": 0.909}
    # the shipped matrix takes the whole legs' CPU and rest, and the dated baseline stays as a second opinion
    assert data["shipped_matrix"]["ratio"] < 1
    assert data["dated_baseline"]["control_windows_cpu"]["drift"] == 0.5
    printed = run(tmp_path)
    assert printed.returncode == 0, printed.stderr
    assert "built whole in this rehearsal (night.sh whole)" in printed.stdout
    assert "second opinion, the night built whole, tests/e2e/night.sh cold of 2026-12-04" in printed.stdout


def test_a_whole_leg_built_on_a_common_part_is_refused(tmp_path, run):
    make_night(tmp_path)
    make_whole(tmp_path, common="linux-common")
    result = run(tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().endswith("was built on the common part linux-common: not a whole build")


def test_half_a_whole_run_falls_back_to_the_dated_baseline(tmp_path, run):
    make_night(tmp_path)
    make_whole(tmp_path)
    (tmp_path / "whole" / "out" / "linux-vulkan" / "build.json").unlink()  # night.sh whole stopped half-way
    data = json.loads(run(tmp_path, "--json").stdout)
    assert data["same_run"] is False and "2026-12-04" in data["baseline"]


def test_the_common_part_measured_again_alone_is_a_second_after(tmp_path, run):
    make_night(tmp_path, windows=949.0)
    make_whole(tmp_path)
    leg(
        tmp_path / "whole" / "common-out" / "linux-common",
        [("ggml/src/ggml-cpu/x.o", 500.0), ("tools/cli/cli.o", 400.0)],
        compile_s=450.0,
    )
    data = json.loads(run(tmp_path, "--json").stdout)
    first = 1100 + 1010 + 1800 + 200 + 949  # night 1's own legs stay the night's figure
    assert data["after"] == first and data["ratio"] == round(first / data["before"], 3)
    assert data["common_alone"] == {
        "job": "linux-common",
        "night_1": 1100.0,
        "alone": 900.0,
        "wall": 450.0,
        "after": first - 200,
        "ratio": round((first - 200) / data["before"], 3),
    }
    printed = run(tmp_path)
    assert printed.returncode == 0, printed.stderr
    assert "with linux-common measured again alone (night.sh whole: 900.0 step-seconds" in printed.stdout
    # without it, no such line and no such key
    shutil.rmtree(tmp_path / "whole" / "common-out")
    assert "common_alone" not in json.loads(run(tmp_path, "--json").stdout)


def test_without_matrix_it_prints_the_shipped_matrix_itself_the_same(tmp_path, run):
    make_night(tmp_path, windows=949.0)
    given = json.loads(run(tmp_path, "--json").stdout)
    itself = subprocess.run(
        [sys.executable, str(SCRIPT), "--night", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert itself.returncode == 0, itself.stderr
    assert json.loads(itself.stdout) == given and given["shipped_matrix"]["ratio"] < 1
