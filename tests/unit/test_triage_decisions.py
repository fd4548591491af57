"""The triage's decisions (rockbuild.nightly.triage): which input a failed job blames for each way its inputs moved
since the release where it last passed, how many builds it spends on that, and the bisect's halving and bounds.
The builds themselves run in tests/integration/test_triage.py."""

from __future__ import annotations

import pytest
from support.files import write

from rockbuild.core.errors import ConfigError
from rockbuild.core.options import RegressionPolicy
from rockbuild.core.records import InputsRocm, JobLastGood, TriageTrial
from rockbuild.llamacpp.source import pull_request
from rockbuild.matrix import load_matrix, load_regression_policy
from rockbuild.nightly.triage import after_fallback, bisect_commits, diagnose
from rockbuild.pipeline.stages import StagesOutcome

A, C = "a" * 40, "c" * 40
OLD, NEW = "therock-dist-linux-gfx1151-7.2.0a20261206.tar.gz", "therock-dist-linux-gfx1151-7.2.0a20261207.tar.gz"
FAILED = StagesOutcome("linux-gfx1151", True, "failed", {"build": "failed"}, "build", "compile failed")


def rocm(name: str = NEW) -> InputsRocm:
    return InputsRocm(key="k", os="linux", groups=("gfx1151",), channel="nightly", requested="latest", name=name)


def trial(commit: str, verdict: str) -> TriageTrial:
    return TriageTrial(
        llama_commit=commit,
        rocm=NEW,
        verdict=verdict,
        failed_stage=None if verdict == "good" else "build",
        message=None if verdict == "good" else "compile failed",
    )


class Builds:
    """The builds the triage asks for, answered as given."""

    def __init__(self, verdict: str = "good") -> None:
        self.verdict, self.asked = verdict, []

    def __call__(self, commit: str) -> TriageTrial:
        self.asked.append(commit)
        return trial(commit, self.verdict)


def test_only_llama_cpp_changed_blames_it_without_a_build():
    builds = Builds()
    found = diagnose(
        FAILED,
        C,
        rocm(),
        JobLastGood(release="b1000", llama_commit=A, rocm=NEW),
        can_fall_back=True,
        try_last_good=builds,
    )
    assert (found.cause, found.retry_rocm, builds.asked) == ("llama.cpp", False, [])
    assert "only llama.cpp changed since release b1000" in found.evidence


def test_only_rocm_changed_is_retried_on_the_last_good_rocm_without_another_build():
    builds = Builds()
    found = diagnose(
        FAILED,
        A,
        rocm(),
        JobLastGood(release="b1000", llama_commit=A, rocm=OLD),
        can_fall_back=True,
        try_last_good=builds,
    )
    assert (found.cause, found.retry_rocm, builds.asked) == ("rocm", True, [])
    assert after_fallback(found, True, JobLastGood(release="b1000", llama_commit=A, rocm=OLD), OLD)[0] == "rocm"
    # the same llama.cpp fails on the very tarball it passed on: not the inputs
    assert after_fallback(found, False, JobLastGood(release="b1000", llama_commit=A, rocm=OLD), OLD)[0] == "machine"


def test_both_changed_spends_one_build_on_the_last_good_llama_cpp():
    last = JobLastGood(release="b1000", llama_commit=A, rocm=OLD)
    builds = Builds("good")
    found = diagnose(FAILED, C, rocm(), last, can_fall_back=True, try_last_good=builds)
    assert (found.cause, found.retry_rocm, builds.asked) == ("llama.cpp", False, [A])
    assert found.trials == (trial(A, "good"),)

    builds = Builds("bad")  # the old llama.cpp fails on the new ROCm: ROCm is suspect, the retry decides
    found = diagnose(FAILED, C, rocm(), last, can_fall_back=True, try_last_good=builds)
    assert (found.cause, found.retry_rocm, builds.asked) == ("rocm", True, [A])
    assert after_fallback(found, True, last, OLD)[0] == "rocm"
    cause, why = after_fallback(found, False, last, OLD)  # and the new llama.cpp fails on the old ROCm: both
    assert cause == "unknown" and "both inputs broke something" in why


def test_unchanged_inputs_blame_the_machine_and_no_history_blames_nothing():
    builds = Builds()
    same = diagnose(
        FAILED,
        A,
        rocm(),
        JobLastGood(release="b1000", llama_commit=A, rocm=NEW),
        can_fall_back=True,
        try_last_good=builds,
    )
    assert (same.cause, same.retry_rocm) == ("machine", False) and "did not change" in same.evidence
    new = diagnose(FAILED, A, rocm(), None, can_fall_back=True, try_last_good=builds)
    assert (new.cause, new.retry_rocm) == ("unknown", True)  # a group's last good ROCm is still worth a retry
    vulkan = diagnose(
        FAILED, C, None, JobLastGood(release="b1000", llama_commit=A), can_fall_back=False, try_last_good=builds
    )
    assert vulkan.cause == "llama.cpp" and builds.asked == []
    fetch = diagnose(
        StagesOutcome("j", True, "failed", {}, "fetch", "404"),
        C,
        rocm(),
        None,
        can_fall_back=True,
        try_last_good=builds,
    )
    assert (fetch.cause, fetch.retry_rocm) == ("rocm", True)


COMMITS = [(f"{n:040x}", f"change {n} (#{100 + n})") for n in range(1, 9)]  # 8 commits after A; the 5th breaks


def verdicts(first_bad: int):
    tested = []

    def test(commit: str, subject: str) -> TriageTrial:
        tested.append(commit)
        return trial(commit, "bad" if int(commit, 16) >= first_bad else "good")

    return test, tested


@pytest.mark.parametrize("first_bad", range(1, 9))
def test_the_bisect_names_the_first_bad_commit_in_log2_builds(first_bad):
    test, tested = verdicts(first_bad)
    found = bisect_commits(COMMITS, A, test, steps=8, minutes=60)
    assert found.complete and found.first_bad.commit == COMMITS[first_bad - 1][0]
    assert found.first_bad.pr == 100 + first_bad and found.candidates == 8
    assert found.last_good.commit == (COMMITS[first_bad - 2][0] if first_bad > 1 else A)
    assert len(tested) <= 3  # 8 candidates, the last known bad: at most log2(8) builds


def test_the_bisect_stops_at_its_bounds_with_the_range_it_reached():
    test, tested = verdicts(5)
    found = bisect_commits(COMMITS, A, test, steps=1, minutes=60)
    assert not found.complete and found.stopped == "stopped after 1 build(s) (regressions.bisect_steps)"
    assert len(tested) == 1 and (found.last_good.commit, found.first_bad.commit) == (COMMITS[3][0], COMMITS[7][0])
    test, tested = verdicts(5)
    found = bisect_commits(COMMITS, A, test, steps=8, minutes=0)
    assert tested == [] and found.stopped == "stopped after 0 minutes (regressions.bisect_minutes)"
    one = bisect_commits(COMMITS[:1], A, verdicts(1)[0], steps=8, minutes=60)
    assert one.complete and one.trials == () and one.first_bad.commit == COMMITS[0][0]


def test_pull_requests_are_read_from_the_subjects_end():
    assert pull_request("ggml : fix the ROPE cache (#12345)") == 12345
    assert pull_request("revert (#1) and more") is None and pull_request(None) is None


def test_the_matrix_says_how_far_to_bisect_and_what_to_ship(tmp_path):
    shipped = load_regression_policy()
    assert shipped == RegressionPolicy(bisect_steps=8, bisect_minutes=120, ship="missing")
    base = "matrix:\n  os: [linux]\n  target: [gfx1151]\n"
    assert load_regression_policy(write(tmp_path / "none.yaml", base)) == RegressionPolicy()
    given = write(tmp_path / "given.yaml", base + "regressions:\n  bisect_steps: 0\n  ship: blocked\n")
    assert load_regression_policy(given) == RegressionPolicy(bisect_steps=0, ship="blocked")
    coherent = write(tmp_path / "coherent.yaml", base + "regressions:\n  ship: newest-good\n")
    assert load_regression_policy(coherent) == RegressionPolicy(ship="newest-good")
    for text, words in (
        (
            "regressions:\n  ship: mising\n",
            "regressions.ship must be one of missing, newest-good, blocked, not 'mising' (did you mean missing",
        ),
        ("regressions:\n  bisect_steps: -1\n", "regressions.bisect_steps must be a whole number"),
        (
            "regressions:\n  bisect_steps: 0\n  ship: newest-good\n",
            "regressions.ship newest-good builds from the commit before the first bad one, which only a "
            "bisect names: bisect_steps must be at least 1",
        ),
        ("regressions:\n  bisect_minute: 5\n", "unknown key 'bisect_minute' in regressions"),
        ("regressions: 3\n", "regressions must be a mapping"),
    ):
        bad = write(tmp_path / "bad.yaml", base + text)
        with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: ") as caught:
            load_matrix(bad)  # `rockbuild matrix` checks it with the rest of the file
        assert words in caught.value.message, caught.value.message


def test_newest_good_holds_back_only_a_required_job_with_a_named_first_bad_commit():
    from rockbuild.core.records import CommitRef, LlamaBisect
    from rockbuild.nightly.triage import ship_mode

    named = LlamaBisect(
        good=A,
        bad=C,
        candidates=5,
        complete=True,
        first_bad=CommitRef(commit="d" * 40),
        last_good=CommitRef(commit="b" * 40),
    )
    coherent, fresh = RegressionPolicy(ship="newest-good"), RegressionPolicy()
    assert ship_mode(coherent, named, required=True, held_back=False) == "newest-good"
    assert ship_mode(fresh, named, required=True, held_back=False) == "missing"
    assert ship_mode(RegressionPolicy(ship="blocked"), named, required=True, held_back=False) == "blocked"
    # an optional job never holds a release; a night already held back never is again; no named commit: no target
    assert ship_mode(coherent, named, required=False, held_back=False) == "missing"
    assert ship_mode(coherent, named, required=True, held_back=True) == "missing"
    stopped = LlamaBisect(
        good=A,
        bad=C,
        candidates=5,
        complete=False,
        stopped="after 1 build(s)",
        first_bad=CommitRef(commit=C),
        last_good=CommitRef(commit="b" * 40),
    )
    assert ship_mode(coherent, stopped, required=True, held_back=False) == "missing"
    assert ship_mode(coherent, None, required=True, held_back=False) == "missing"


def test_the_night_is_held_back_to_the_oldest_good_commit_its_jobs_name():
    from rockbuild.core.records import CommitRef, InputsLlama, LlamaBisect, TriageRecord
    from rockbuild.nightly.triage import held_back_of

    def triage(job: str, good: str, bad: str, ship: str = "newest-good", cause: str = "llama.cpp") -> TriageRecord:
        bisect = LlamaBisect(
            good=A,
            bad=C,
            candidates=9,
            complete=True,
            first_bad=CommitRef(commit=bad, pr=7),
            last_good=CommitRef(commit=good),
            failed_stage="smoke",
        )
        return TriageRecord(
            job=job, cause=cause, evidence="e", llama_commit=C, bisect=bisect, ship=ship, failed_stage="smoke"
        )

    tip = InputsLlama(ref="master", commit=C, build_number="b1005", url="u")
    asked: list[list[str]] = []

    def oldest(commits):
        asked.append(list(commits))
        return commits[-1]

    assert held_back_of([triage("x", "1" * 40, "2" * 40, ship="missing")], tip, oldest=oldest) is None
    assert held_back_of([triage("x", "1" * 40, "2" * 40, cause="rocm")], tip, oldest=oldest) is None
    one = held_back_of([triage("x", "1" * 40, "2" * 40), triage("y", "1" * 40, "2" * 40)], tip, oldest=oldest)
    assert asked == [] and one is not None and one.jobs == ("x", "y") and one.good.commit == "1" * 40
    assert (one.tip, one.tip_build_number, one.first_bad.pr, one.failed_stage) == (C, "b1005", 7, "smoke")
    two = held_back_of([triage("x", "5" * 40, "6" * 40), triage("y", "3" * 40, "4" * 40)], tip, oldest=oldest)
    assert asked == [["5" * 40, "3" * 40]] and two is not None
    assert (two.good.commit, two.first_bad.commit) == ("3" * 40, "4" * 40)
    assert two.describe() == (
        f"llama.cpp {'4' * 12} broke x, y at smoke: built from {'3' * 12}, the commit before it (tonight's is {C[:12]})"
    )
