"""When a night breaks, the right input is blamed (issue 60): whole nights on this machine in the world of
tests/support/night_world.py (a TheRock-style index, a fake GitHub, the stand-in llama.cpp in a bare git repository),
where a llama.cpp commit in the middle of the night's range breaks one job's compile, or only its numbers."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support.files import write
from support.night import night_servers
from support.night_world import TODAY, TOKEN, World

from rockbuild.core.errors import UsageError
from rockbuild.core.records import TriageRecord
from rockbuild.llamacpp.source import commits_between, oldest_commit
from rockbuild.nightly import load_inputs, plan_night, run_night

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("cmake", "ninja", "gcc", "g++", "git")),
    reason="needs cmake, ninja, gcc, g++ and git on the host",
)

TWO_JOBS = """
options:
  common_part: false
matrix:
  os: [linux]
  target: [gfx1151, gfx1150]
"""
GROUPS = ("gfx1151", "gfx1150")
YESTERDAY = TODAY - datetime.timedelta(days=1)


@pytest.fixture
def world(tmp_path, monkeypatch):
    with night_servers(tmp_path, monkeypatch, TOKEN) as (server, github):
        yield World(tmp_path, server, github, matrix=TWO_JOBS)


def five_commits(world: World, *, define: str) -> list[str]:
    """A..C: two harmless commits, the one that breaks gfx1151 (``define`` on its compile), two more."""
    return [
        world.new_commit("docs : one (#101)"),
        world.new_commit("server : two (#102)"),
        world.new_commit("ggml : the fast path (#103)", only_for="gfx1151", define=define),
        world.new_commit("cli : four (#104)"),
        world.new_commit("model : five (#105)"),
    ]


def test_a_commit_that_breaks_one_jobs_build_is_named_and_the_rest_ships(world, tmp_path, run_rockbuild):
    out = tmp_path / "out"
    first = run_night(world.options(out, world.publish_tarballs({YESTERDAY: False}, "n1.html", GROUPS)))
    assert first.state == "published", first.message
    tag1 = first.release["tag"]
    good = load_inputs(out / "inputs.json").llama_cpp.commit

    commits = five_commits(world, define="FAIL_COMPILE")
    index = world.publish_tarballs({YESTERDAY: False, TODAY: False}, "n2.html", GROUPS)  # a new, healthy nightly
    second = run_night(world.options(out, index))
    assert second.state == "published", second.message
    jobs = {j.id: j for j in second.jobs}
    assert jobs["linux-gfx1150"].status == "ok"
    broken = jobs["linux-gfx1151"]
    assert (broken.status, broken.failed_stage, broken.cause, broken.ship) == (
        "failed",
        "build",
        "llama.cpp",
        "missing",
    )
    # no retry on the last good ROCm: llama.cpp was at fault
    assert not list(out.glob("linux-gfx1151@rocm-*"))
    assert load_inputs(out / "inputs.json").entry("linux-gfx1151").last_good.release == tag1

    triage = TriageRecord.read(out / "linux-gfx1151" / "triage.json")
    assert triage.cause == "llama.cpp" and triage.ship == "missing" and triage.last_good_release == tag1
    assert triage.last_good_llama == good and triage.llama_commit == commits[-1]
    # both inputs changed: one extra build, the last good llama.cpp on tonight's ROCm, passed
    (tried,) = triage.trials
    assert (tried.llama_commit, tried.verdict, tried.rocm) == (good, "good", world.name(TODAY))
    bisect = triage.bisect
    assert bisect.complete and bisect.candidates == 5
    assert (bisect.first_bad.commit, bisect.first_bad.pr) == (commits[2], 103)
    assert bisect.first_bad.subject == "ggml : the fast path (#103)" and bisect.last_good.commit == commits[1]
    assert [(t.llama_commit, t.verdict) for t in bisect.trials] == [(commits[1], "good"), (commits[2], "bad")]
    assert bisect.failed_stage == "build" and any("compile fails on purpose" in line for line in bisect.log_tail)
    # each step an incremental build in one folder: the second step recompiled only what its commit changed
    assert {t.folder for t in (tried, *bisect.trials)} == {str(out / "bisect-llama.cpp" / "linux-gfx1151")}

    # the release went out without it, and says where its last build is
    tag2 = second.release["tag"]
    manifest = world.manifest(tag2)
    assert [j["id"] for j in manifest["jobs"]] == ["linux-gfx1150"]
    (missing,) = manifest["failed_jobs"]
    assert missing["id"] == "linux-gfx1151" and missing["required"] is True and missing["cause"] == "llama.cpp"
    assert missing["first_bad"]["commit"] == commits[2] and missing["last_release"] == tag1
    body = next(r for r in world.github.state.releases.values() if r.tag_name == tag2).body
    assert (
        f"llama.cpp {commits[-1][:7]} broke it: first bad commit {commits[2][:7]} (#103); its last build is in "
        f"release {tag1}"
    ) in body

    # the alert names llama.cpp, the range and the first bad commit, and suggests no ROCm bisect
    (issue,) = world.github.state.issues.values()
    assert issue.title == (
        f"llama.cpp {commits[-1][:7]} broke linux-gfx1151 at build: first bad commit {commits[2][:7]} (#103)"
    )
    assert "### `linux-gfx1151`: llama.cpp broke it at `build`" in issue.body
    assert f"**First bad commit: `{commits[2][:12]}`** ggml : the fast path (#103)" in issue.body
    assert f"the one before it, `{commits[1][:12]}`, passes (5 commit(s) in the range, 3 build(s)" in issue.body
    assert f"its last build is in release {tag1}" in issue.body
    assert f"rockbuild build --job linux-gfx1151 --ref {commits[2]} --rocm-version" in issue.body
    assert "rockbuild bisect --job" not in issue.body and "ROCm nightly" not in issue.title
    assert TOKEN not in issue.body and str(out) not in issue.body

    # a user's `rockbuild install` still finds a gfx1151 build: the latest release lacks it, its last one has it
    result = run_rockbuild(
        "install",
        "--repo",
        world.github.full_name,
        "--api-url",
        world.github.api_url,
        "--target",
        "gfx1151",
        "--os",
        "linux",
        "--dest",
        str(tmp_path / "llama"),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert (
        f"warning: release {tag2} went out without linux-gfx1151 (llama.cpp broke it: the build failed at step "
        f"'compile'); installing its last build, from release {tag1}"
    ) in result.stderr
    installed = json.loads(result.stdout)
    assert installed["tag"] == tag1 and installed["asset"]["name"] == f"llama-{tag1}-ubuntu-rocm-gfx1151-x64.tar.gz"
    other = run_rockbuild(
        "install",
        "--repo",
        world.github.full_name,
        "--api-url",
        world.github.api_url,
        "--target",
        "gfx1150",
        "--os",
        "linux",
        "--dest",
        str(tmp_path / "other"),
        "--json",
    )
    assert other.returncode == 0 and json.loads(other.stdout)["tag"] == tag2, other.stderr

    # the next night, same inputs: unchanged, nothing built, nothing written
    writes = len(world.github.writes)
    plan = plan_night(world.options(out, index))
    assert plan.unchanged_since == tag2, plan.changes
    assert len(world.github.writes) == writes


def test_newest_good_builds_every_job_again_from_the_commit_before_the_first_bad_one(world, tmp_path, run_rockbuild):
    """``regressions.ship: newest-good``: the release is coherent (every job from one commit, the one before the
    first bad one), says why, and the next night with the same tip is unchanged."""
    matrix = write(tmp_path / "coherent.yaml", TWO_JOBS + "regressions:\n  ship: newest-good\n")
    out = tmp_path / "out"
    index = world.publish_tarballs({TODAY: False}, "one.html", GROUPS)
    first = run_night(world.options(out, index, config=matrix))
    assert first.state == "published", first.message
    commits = five_commits(world, define="FAIL_COMPILE")
    second = run_night(world.options(out, index, config=matrix))
    assert second.state == "published", second.message
    assert second.message.startswith(
        f"held back: llama.cpp {commits[2][:12]} broke linux-gfx1151 at build: built "
        f"from {commits[1][:12]}, the commit before it (tonight's is "
        f"{commits[-1][:12]})"
    ), second.message
    assert {j.id: j.status for j in second.jobs} == {"linux-gfx1151": "ok", "linux-gfx1150": "ok"}
    assert second.held_back is not None and second.held_back.good.commit == commits[1]
    # tonight's failed folder is kept beside the job's, with its verdict; held-back.json says what was done
    kept = TriageRecord.read(out / f"linux-gfx1151@llama-{commits[-1][:12]}" / "triage.json")
    assert kept.ship == "newest-good" and kept.bisect.first_bad.commit == commits[2]
    held = json.loads((out / "held-back.json").read_text())
    assert (held["tip"], held["good"]["commit"], held["first_bad"]["pr"], held["jobs"]) == (
        commits[-1],
        commits[1],
        103,
        ["linux-gfx1151"],
    )

    tag2 = second.release["tag"]
    manifest = world.manifest(tag2)
    assert sorted(j["id"] for j in manifest["jobs"]) == ["linux-gfx1150", "linux-gfx1151"]
    assert manifest["failed_jobs"] == [] and manifest["llama_cpp"]["commit"] == commits[1]
    assert manifest["llama_cpp"]["held_back"]["tip"] == commits[-1]
    assert {j["llama_cpp"]["commit"] for j in manifest["jobs"]} == {commits[1]}
    body = next(r for r in world.github.state.releases.values() if r.tag_name == tag2).body
    assert f"**Held back**: built from llama.cpp [`{commits[1][:7]}`]" in body
    assert f"which broke `linux-gfx1151` at build; the night's llama.cpp was [`{commits[-1][:7]}`]" in body
    (issue,) = world.github.state.issues.values()
    assert issue.title.startswith(
        f"llama.cpp {commits[-1][:7]} broke linux-gfx1151 at build: first bad commit {commits[2][:7]} (#103)"
    )
    assert f"every job is built again from `{commits[1][:12]}`, the commit before the first bad one" in issue.body

    # the next night, the same tip: unchanged, nothing built
    writes = len(world.github.writes)
    plan = plan_night(world.options(out, index, config=matrix))
    assert plan.unchanged_since == tag2, plan.changes
    assert len(world.github.writes) == writes

    # the CI fan-out's rerun: --plan --held-back FILE pins the good commit and carries the record in inputs.json
    args = [
        "nightly",
        "--plan",
        "-c",
        str(matrix),
        "--index-url",
        index,
        "--git-url",
        str(world.bare),
        "--no-publish",
        "--inputs",
        str(tmp_path / "rerun.json"),
        "--held-back",
        str(out / "held-back.json"),
    ]
    planned = run_rockbuild(*args)
    assert planned.returncode == 0, planned.stderr
    rerun = load_inputs(tmp_path / "rerun.json")
    assert rerun.llama_cpp.commit == commits[1] and rerun.llama_cpp.held_back.tip == commits[-1]
    for bad_args, words in ((["--llama-ref", commits[3]], "--held-back builds llama.cpp"),):
        refused = run_rockbuild(*args, *bad_args)
        assert refused.returncode != 0 and words in refused.stderr and "Traceback" not in refused.stderr
    leg = run_rockbuild(
        "nightly",
        "--job",
        "linux-gfx1151",
        "--inputs",
        str(tmp_path / "rerun.json"),
        "--held-back",
        str(out / "held-back.json"),
    )
    assert leg.returncode != 0 and "--held-back is for --plan (or the whole night), not --job" in leg.stderr


def test_a_commit_that_breaks_only_the_numbers_is_named_without_an_extra_build(world, tmp_path):
    """ROCm did not change since the last release: llama.cpp is at fault with no extra build, and the bisect is judged
    by the same smoke (the known answers). ``regressions.ship: blocked`` keeps the old gate."""
    matrix = write(tmp_path / "blocked.yaml", TWO_JOBS + "regressions:\n  bisect_steps: 4\n  ship: blocked\n")
    out = tmp_path / "out"
    index = world.publish_tarballs({TODAY: False}, "one.html", GROUPS)
    first = run_night(world.options(out, index, config=matrix))
    assert first.state == "published", first.message
    commits = five_commits(world, define="ROCM_WRONG")
    second = run_night(world.options(out, index, config=matrix))
    assert second.state == "blocked", second.message
    broken = {j.id: j for j in second.jobs}["linux-gfx1151"]
    assert (broken.failed_stage, broken.cause, broken.ship) == ("smoke", "llama.cpp", "blocked")
    triage = json.loads((out / "linux-gfx1151" / "triage.json").read_text())
    assert triage["trials"] == [] and "only llama.cpp changed" in triage["evidence"]
    bisect = triage["bisect"]
    assert bisect["complete"] and bisect["first_bad"]["commit"] == commits[2] and bisect["failed_stage"] == "smoke"
    assert [t["verdict"] for t in bisect["trials"]] == ["good", "bad"]
    assert "known answers wrong" in bisect["trials"][1]["message"]
    (issue,) = world.github.state.issues.values()
    assert issue.title.startswith(
        f"llama.cpp {commits[-1][:7]} broke linux-gfx1151 at smoke: first bad commit {commits[2][:7]}"
    )
    assert "The release is blocked" in issue.body


def test_a_bisect_stops_at_its_bound_and_says_the_range(world, tmp_path):
    matrix = write(tmp_path / "bounded.yaml", TWO_JOBS + "regressions:\n  bisect_steps: 1\n")
    out = tmp_path / "out"
    index = world.publish_tarballs({TODAY: False}, "one.html", GROUPS)
    assert run_night(world.options(out, index, config=matrix)).state == "published"
    commits = five_commits(world, define="FAIL_COMPILE")
    second = run_night(world.options(out, index, config=matrix))
    assert second.state == "published", second.message
    bisect = TriageRecord.read(out / "linux-gfx1151" / "triage.json").bisect
    assert not bisect.complete and bisect.stopped == "stopped after 1 build(s) (regressions.bisect_steps)"
    assert (bisect.last_good.commit, bisect.first_bad.commit) == (commits[1], commits[-1])
    (issue,) = world.github.state.issues.values()
    assert "(somewhere in" in issue.title
    assert "The bisect stopped after 1 build(s)" in issue.body


def test_bisect_llama_names_the_commit_from_the_command_line(world, tmp_path, run_rockbuild):
    index = world.publish_tarballs({TODAY: False}, "one.html", GROUPS)
    commits = five_commits(world, define="FAIL_COMPILE")
    args = [
        "bisect",
        "--job",
        "linux-gfx1151",
        "-c",
        str(world.matrix),
        "--index-url",
        index,
        "--git-url",
        str(world.bare),
        "--out",
        str(tmp_path / "bisect"),
        "--model",
        str(world.model),
        "--no-ccache",
    ]
    result = run_rockbuild(*args, "--llama", "b1000..master", "--check-ends", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["job"] == "linux-gfx1151" and report["ends_tested"] is True
    bisect = report["bisect"]
    assert bisect["complete"] and bisect["candidates"] == 5 and bisect["first_bad"]["commit"] == commits[2]
    assert bisect["first_bad"]["pr"] == 103 and bisect["failed_stage"] == "build"
    assert {t["folder"] for t in bisect["trials"]} == {str(tmp_path / "bisect" / "linux-gfx1151")}
    text = run_rockbuild(*args, "--llama", f"{commits[1][:10]}..{commits[3]}")
    assert text.returncode == 0, text.stderr
    assert f"first bad commit: {commits[2]} ggml : the fast path (#103), failing at build" in text.stdout

    for bad_args, words in (
        (["--llama", "b1000"], "is not a range"),
        (["--llama", "b1000..master", "--good", "2026-12-01"], "not both"),
        ([], "give --good and --bad"),
        (["--llama", f"{commits[3]}..{commits[1]}"], "is not an ancestor of"),
        (["--llama", "b1000..master", "--check-ends", "--only-x"], "No such option"),
    ):
        failed = run_rockbuild(*args, *bad_args)
        assert failed.returncode != 0 and words in failed.stderr, (bad_args, failed.stderr)
        errors = [line for line in failed.stderr.splitlines() if line.startswith(("error:", "Error:"))]
        assert "Traceback" not in failed.stderr and len(errors) == 1, failed.stderr
    # a GOOD end that fails is refused with --check-ends
    refused = run_rockbuild(*args, "--llama", f"{commits[2]}..master", "--check-ends")
    assert refused.returncode != 0 and "--llama's GOOD end" in refused.stderr and "is not good" in refused.stderr


def test_commits_between_lists_the_first_parent_line_and_refuses_a_backwards_range(tmp_path):
    work = tmp_path / "w"
    work.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=work,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "-q", "-b", "master")
    made = []
    for n in range(4):
        write(work / "f", str(n))
        git("add", "f")
        git("commit", "-qm", f"c{n} (#{n})")
        made.append(git("rev-parse", "HEAD"))
    git("tag", "b1000", made[0])
    cache = tmp_path / "cache"
    listed = commits_between("b1000", "master", url=str(work), cache=cache)
    assert listed == [(made[1], "c1 (#1)"), (made[2], "c2 (#2)"), (made[3], "c3 (#3)")]
    assert commits_between(made[1][:10], made[3], url=str(work), cache=cache) == listed[1:]  # an abbreviation
    # the oldest of several jobs' good commits (regressions.ship: newest-good holds the night back to it)
    assert oldest_commit([made[3], made[1], made[2]], url=str(work), cache=cache) == made[1]
    assert oldest_commit([made[2]], url=str(work), cache=tmp_path / "none") == made[2]
    with pytest.raises(UsageError, match="is not an ancestor of"):
        commits_between(made[3], made[1], url=str(work), cache=cache)
    # a repository that is shallow itself (the e2e's tree from a packaged source is): its roots are handed on
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "3", f"file://{work}", str(shallow)], check=True)
    assert commits_between(made[1], "master", url=str(shallow), cache=tmp_path / "cache2") == listed[1:]
    assert not list(Path(cache / "llama.cpp-history").glob("*/objects/*/*.pack.tmp"))
