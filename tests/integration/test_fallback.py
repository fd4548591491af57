"""Last known good ROCm and ``rockbuild bisect``, on whole nights run on this machine.

The stand-in llama.cpp (tests/support/llama.py's CMake project) builds real programs that hand over to the smoke
test's stand-ins (tests/support/smoke.py: they print output captured from llama.cpp), so the smoke stage really runs.
A "broken" ROCm nightly is a TheRock-layout tarball whose clang++ adds ``-DROCM_BROKEN``: the programs it compiles
die of SIGSEGV at start, as llama.cpp did when an HSA regression landed in a nightly. It builds and bundles; only the
smoke test catches it.
"""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import pytest
from conftest import rockbuild_exe
from support.files import write
from support.night import night_servers
from support.night_world import MATRIX, TODAY, TOKEN, World, version

from rockbuild.core.errors import NotFoundError, UsageError
from rockbuild.nightly import load_inputs, plan_night, run_night
from rockbuild.nightly.bisect import bisect_rocm, parse_date

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("cmake", "ninja", "gcc", "g++", "git")),
    reason="needs cmake, ninja, gcc, g++ and git on the host",
)


@pytest.fixture
def world(tmp_path, monkeypatch):
    with night_servers(tmp_path, monkeypatch, TOKEN) as (server, github):
        yield World(tmp_path, server, github)


def test_a_broken_newest_nightly_is_published_on_the_last_good_one_with_notes_and_alert(world, tmp_path, run_rockbuild):
    good, bad = TODAY - datetime.timedelta(days=1), TODAY
    out = tmp_path / "out"
    # night 1: only the good nightly exists; the job passes its smoke test and is published
    first = run_night(world.options(out, world.publish_tarballs({good: False}, "night1.html")))
    assert first.state == "published", first.message
    tag1 = first.release["tag"]
    assert world.manifest(tag1)["jobs"][0]["smoke"]["ok"] is True

    # night 2: a new llama.cpp commit and a new nightly that breaks every program at start
    world.new_commit()
    index = world.publish_tarballs({good: False, bad: True}, "night2.html")
    second = run_night(world.options(out, index, step_summary=tmp_path / "summary.md"))
    assert second.state == "published", second.message
    assert (
        f"| ok (ROCm {version(good)} ({good}), newest {version(bad)} failed smoke:"
        in (tmp_path / "summary.md").read_text()
    )
    (job,) = second.jobs
    assert job.status == "ok"
    assert job.fallback.startswith(f"ROCm {version(good)} ({good}), newest {version(bad)} failed smoke")
    inputs = load_inputs(out / "inputs.json")
    (rocm,) = inputs.rocm.values()
    assert rocm.name == world.name(bad) and rocm.last_good["name"] == world.name(good)
    assert rocm.last_good["release"] == tag1

    tag2 = second.release["tag"]
    assert tag2 != tag1
    manifest = world.manifest(tag2)
    (shipped,) = manifest["jobs"]
    assert shipped["rocm"]["tarball"] == world.name(good)
    fallback = shipped["rocm"]["fallback"]
    assert fallback["newest"] == world.name(bad) and fallback["failed_stage"] == "smoke"
    assert fallback["newest_date"] == bad.isoformat() and fallback["last_good_release"] == tag1
    assert fallback["reason"] == "the smoke test failed: cli: killed by SIGSEGV (exit code -11)", fallback["reason"]
    body = next(r for r in world.github.state.releases.values() if r.tag_name == tag2).body
    # public text names no runner path (issue 28, item 3): not the compilers in the cache (manifest's cmake), not
    # the ROCm root (the SBOM), not the failed attempt's log (the fallback's reason, the notes)
    release2 = next(r for r in world.github.state.releases.values() if r.tag_name == tag2)
    for asset in release2.assets:
        if asset.name.endswith((".json", ".txt")):
            assert str(tmp_path) not in asset.data.decode(), asset.name
    assert str(tmp_path) not in body and "above" not in fallback["reason"]
    assert "### Built on the last good ROCm" in body
    assert (
        f"gfx1151 (`llama-{tag2}-ubuntu-rocm-gfx1151-x64.zip`, built, bundled and smoke-tested): ROCm "
        f"{version(good)}, newest {version(bad)} failed smoke:" in body
    )
    # the failed attempt is kept beside the job folder, whole
    kept = out / f"linux-gfx1151@rocm-{version(bad)}"
    assert json.loads((kept / "smoke.json").read_text())["ok"] is False
    assert json.loads((out / "linux-gfx1151" / "fallback.json").read_text())["attempt_dir"] == str(kept)
    # the alert names the nightly that broke it, and how to find the first bad one
    (issue,) = world.github.state.issues.values()
    assert issue.title == f"ROCm nightly {bad.isoformat()} broke linux-gfx1151"
    assert f"ROCm nightly {bad.isoformat()} broke it at `smoke`" in issue.body
    assert f"--good {good.isoformat()} --bad {bad.isoformat()}" in issue.body
    assert TOKEN not in issue.body

    # night 3, same inputs: the newest is known to fail with this commit; nothing is built again
    writes = len(world.github.writes)
    plan = plan_night(world.options(out, index))
    assert plan.unchanged_since == tag2, plan.changes
    assert len(world.github.writes) == writes

    # `rockbuild resolve --repo` records the same last good tarball (the second release passed smoke on it too)
    result = run_rockbuild(
        "resolve",
        "-c",
        str(world.matrix),
        "--index-url",
        index,
        "--git-url",
        str(world.bare),
        "--repo",
        world.github.full_name,
        "--api-url",
        world.github.api_url,
        "--out",
        str(tmp_path / "pinned.json"),
        env={"GITHUB_TOKEN": TOKEN},
    )
    assert result.returncode == 0, result.stderr
    (pinned,) = load_inputs(tmp_path / "pinned.json").rocm.values()
    assert pinned.last_good["name"] == world.name(good) and pinned.last_good["release"] == tag2
    assert TOKEN not in result.stdout + result.stderr


def test_a_nightly_that_computes_wrong_ships_on_the_last_good_one(world, tmp_path):
    """Wrong numbers are a failure like a crash (issue 26): a nightly whose programs run but answer wrong fails the
    smoke's known answers, and the job is published on the last good ROCm, the figures in the fallback's reason."""
    good, bad = TODAY - datetime.timedelta(days=1), TODAY
    out = tmp_path / "out"
    first = run_night(world.options(out, world.publish_tarballs({good: False}, "n1.html")))
    assert first.state == "published", first.message
    smoke = json.loads((out / "linux-gfx1151" / "smoke.json").read_text())
    assert smoke["numerics"]["known_answers"]["result"] == "passed"
    world.new_commit()
    second = run_night(world.options(out, world.publish_tarballs({good: False, bad: "wrong"}, "n2.html")))
    assert second.state == "published", second.message
    (job,) = second.jobs
    assert job.status == "ok" and job.fallback.startswith(
        f"ROCm {version(good)} ({good}), newest {version(bad)} failed smoke"
    )
    fallback = world.manifest(second.release["tag"])["jobs"][0]["rocm"]["fallback"]
    assert fallback["newest"] == world.name(bad) and fallback["failed_stage"] == "smoke"
    assert fallback["reason"].startswith(
        "the smoke test failed: numerics: known_answers: 3 of 3 known answers wrong: "
        "'The capital of France is' on the CPU answered ' 1111 sum sum sum'"
    ), fallback["reason"]
    # what a user of the release reads: the answers of the job that shipped, in manifest.json and the notes
    (shipped,) = world.manifest(second.release["tag"])["jobs"]
    numerics = shipped["smoke"]["numerics"]
    assert numerics["known_answers"] == "passed" and (numerics["answers_passed"], numerics["answers_total"]) == (3, 3)
    assert numerics["cross_backend"] == "not checked"  # no GPU here: never a pass
    body = next(r for r in world.github.state.releases.values() if r.tag_name == second.release["tag"]).body
    assert "GPU vs CPU not checked; known answers passed (3/3, SmolLM2-135M-Instruct.Q4_1.gguf)" in body
    kept = json.loads((out / f"linux-gfx1151@rocm-{version(bad)}" / "smoke.json").read_text())
    assert kept["runs"]["cli"]["ok"] and kept["runs"]["numerics"]["ok"] is False  # it ran; its answers were wrong


def test_a_group_with_no_good_tarball_fails_as_before(world, tmp_path):
    index = world.publish_tarballs({TODAY: True}, "broken.html")
    report = run_night(world.options(tmp_path / "out", index))
    assert report.state == "blocked", report.message
    (job,) = report.jobs
    assert job.status == "failed" and job.failed_stage == "smoke" and job.fallback is None
    assert not list((tmp_path / "out").glob("linux-gfx1151@*"))
    assert (
        load_inputs(tmp_path / "out" / "inputs.json")
        .rocm[next(iter(load_inputs(tmp_path / "out" / "inputs.json").rocm))]
        .last_good
        is None
    )
    (issue,) = world.github.state.issues.values()
    assert issue.title.startswith("Nightly build failed")


def test_bisect_names_the_first_bad_nightly_of_four(world, tmp_path, run_rockbuild):
    days = [TODAY - datetime.timedelta(days=n) for n in (3, 2, 1, 0)]
    index = world.publish_tarballs(dict(zip(days, (False, False, True, True), strict=True)), "four.html")
    out = tmp_path / "bisect"
    report = bisect_rocm(world.options(out, index, publish=False), "linux-gfx1151", days[0], days[3])
    assert report.first_bad == f"{version(days[2])} ({days[2]})"
    assert report.last_good == f"{version(days[1])} ({days[1]})"
    assert [(t.date, t.verdict) for t in report.trials] == [(days[1].isoformat(), "good"), (days[2].isoformat(), "bad")]
    bad_trial = report.trials[1]
    assert bad_trial.failed_stage == "smoke" and Path(bad_trial.folder, "smoke.json").is_file()
    # the untested ends were never downloaded
    assert not world.server.requests_for(world.name(days[0])) and not world.server.requests_for(world.name(days[3]))

    # the command line, again over the same folders: every stage is reused, the answer is the same
    result = run_rockbuild(
        "bisect",
        "--job",
        "linux-gfx1151",
        "--good",
        version(days[0]),
        "--bad",
        days[3].isoformat(),
        "-c",
        str(world.matrix),
        "--index-url",
        index,
        "--git-url",
        str(world.bare),
        "--out",
        str(out),
        "--model",
        str(world.model),
        "--no-ccache",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["first_bad"] == report.first_bad and len(data["trials"]) == 2
    assert all(t["seconds"] < 5 for t in data["trials"]), data["trials"]


def test_bisect_takes_a_nightly_that_computes_wrong_as_bad(world, tmp_path):
    days = [TODAY - datetime.timedelta(days=n) for n in (2, 1, 0)]
    index = world.publish_tarballs(dict(zip(days, (False, "wrong", "wrong"), strict=True)), "wrong.html")
    report = bisect_rocm(world.options(tmp_path / "bisect", index, publish=False), "linux-gfx1151", days[0], days[2])
    assert report.first_bad == f"{version(days[1])} ({days[1]})"
    (trial,) = report.trials
    assert trial.verdict == "bad" and trial.failed_stage == "smoke"
    assert "known answers wrong" in (trial.message or ""), trial.message


def test_bisect_errors_are_one_line(world, tmp_path, run_rockbuild):
    days = [TODAY - datetime.timedelta(days=n) for n in (2, 0)]
    index = world.publish_tarballs(dict.fromkeys(days, False), "two.html")
    with pytest.raises(NotFoundError, match=r"--good .*: no linux gfx1151 nightly of that date in the index; nearest"):
        bisect_rocm(world.options(tmp_path / "b", index), "linux-gfx1151", TODAY - datetime.timedelta(days=1), TODAY)
    with pytest.raises(UsageError, match="must be before"):
        bisect_rocm(world.options(tmp_path / "b", index), "linux-gfx1151", TODAY, days[0])
    with pytest.raises(UsageError, match="is not a date"):
        parse_date("yesterday", "--good")
    assert parse_date("10.1.0a20261128", "--good") == datetime.date(2026, 11, 28)
    result = run_rockbuild(
        "bisect",
        "--job",
        "linux-gfx9999",
        "--good",
        "2026-11-01",
        "--bad",
        "2026-11-02",
        "-c",
        str(world.matrix),
        "--index-url",
        index,
    )
    assert result.returncode != 0
    assert result.stderr.count("\n") <= 2 and "linux-gfx9999" in result.stderr and "Traceback" not in result.stderr
    assert rockbuild_exe()


def test_a_when_proven_job_is_optional_until_its_smoke_passes_in_a_release(world, tmp_path):
    matrix = write(tmp_path / "proven.yaml", MATRIX + "  include:\n    - {target: gfx1151, required: when-proven}\n")
    index = world.publish_tarballs({TODAY: False}, "proven.html")
    out = tmp_path / "out"
    first = run_night(world.options(out, index, config=matrix))
    assert first.state == "published", first.message
    assert [(j.id, j.required) for j in first.jobs] == [("linux-gfx1151", False)]
    job = load_inputs(out / "inputs.json").job("linux-gfx1151")
    assert job.when_proven and not job.required

    world.new_commit()  # the next night has something to build: its plan reads the releases and promotes the job
    plan = plan_night(world.options(out, index, config=matrix))
    assert [(j.id, j.required) for j in plan.build] == [("linux-gfx1151", True)]
    assert load_inputs(out / "inputs.json").job("linux-gfx1151").required is True
    assert plan.github_matrix()["include"][0]["required"] is True


def test_bad_manifests_in_later_releases_are_skipped_and_the_last_good_still_found(world, tmp_path, run_rockbuild):
    """A release's manifest.json is outside input (issue 28, items 1 and 4): a truncated one, an HTML error page,
    another tool's JSON and a release without any are each skipped with one warning naming the release, and the last good tarball still comes from the valid release behind them."""
    good = TODAY - datetime.timedelta(days=1)
    out = tmp_path / "out"
    index = world.publish_tarballs({good: False}, "night1.html")
    first = run_night(world.options(out, index))
    assert first.state == "published", first.message
    tag1 = first.release["tag"]
    valid = json.dumps(world.manifest(tag1)).encode()
    state = world.github.state
    state.add_release("b7001", assets={"manifest.json": valid[: len(valid) // 2]})  # truncated
    state.add_release("b7002", assets={"manifest.json": b"<html><body>502 Bad Gateway</body></html>"})
    state.add_release("b7003", assets={"manifest.json": b'{"jobs": 3}'})  # another tool's JSON
    state.add_release("b7004", assets={"notes.txt": b"no manifest"})  # the newest: no manifest at all
    world.new_commit()
    index = world.publish_tarballs({good: False, TODAY: False}, "night2.html")  # a newer nightly to fall back from

    result = run_rockbuild(
        "nightly",
        "--plan",
        "-c",
        str(world.matrix),
        "--index-url",
        index,
        "--git-url",
        str(world.bare),
        "--repo",
        world.github.full_name,
        "--api-url",
        world.github.api_url,
        "--inputs",
        str(tmp_path / "plan.json"),
        "--out",
        str(out),
        "--json",
        env={"GITHUB_TOKEN": TOKEN},
    )
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "that release is skipped" in line]
    assert len(warnings) == 4, result.stderr  # one per release, though the plan reads the newest one twice
    assert "warning: release b7004 has no manifest.json; that release is skipped" in warnings
    for tag, why in (("b7001", "not valid JSON"), ("b7002", "not valid JSON"), ("b7003", "schema is missing")):
        assert any(f"manifest.json of release {tag}: {why}" in line for line in warnings), (tag, warnings)
    assert "JSONDecodeError" not in result.stderr and "check the network" not in result.stderr
    plan = json.loads(result.stdout)
    assert "the latest release b7004 has no valid manifest.json" in plan["changes"], plan["changes"]
    (rocm,) = load_inputs(tmp_path / "plan.json").rocm.values()
    assert rocm.last_good is not None and rocm.last_good["release"] == tag1  # found behind the four bad releases
    assert TOKEN not in result.stdout + result.stderr
