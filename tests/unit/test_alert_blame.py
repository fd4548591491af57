"""What the alert says of a job that llama.cpp broke (rockbuild.publish.alert.blame): the title names the input and the
first bad commit, the body links the range, the commits and the pull request on GitHub, and carries a report for
upstream. The whole night that files it runs in tests/integration/test_triage.py (with a local repository: no links)."""

from __future__ import annotations

from pathlib import Path

from rockbuild.core.records import CommitRef, LlamaBisect, TriageRecord, TriageTrial
from rockbuild.publish.alert import alert_body, blame_title, web_url
from rockbuild.publish.jobs import BuiltJob, RocmInfo

URL = "https://github.com/ggml-org/llama.cpp"
GOOD, BEFORE, FIRST, TONIGHT = "a" * 40, "b" * 40, "d301d2c" + "0" * 33, "81ed4ba" + "1" * 33


def job(bisect: LlamaBisect | None, *, ship: str = "missing") -> BuiltJob:
    triage = TriageRecord(
        job="linux-gfx1151",
        cause="llama.cpp",
        evidence="only llama.cpp changed since release b1000",
        failed_stage="build",
        reason="compile failed (exit code 1)",
        llama_commit=TONIGHT,
        llama_url=URL + ".git",
        rocm="therock-dist-linux-gfx1151-7.2.0a20261207.tar.gz",
        last_good_release="b1000",
        last_good_llama=GOOD,
        bisect=bisect,
        ship=ship,
        log_tail=("ggml-hip.cu:12: error: planted",),
    )
    return BuiltJob(
        dir=Path("/out/linux-gfx1151"),
        id="linux-gfx1151",
        os="linux",
        name="gfx1151",
        targets=("gfx1151",),
        required=True,
        status="failed",
        failed_step="compile",
        reason="the build failed at step 'compile'",
        rocm=RocmInfo("7.2.0a20261207", "2026-12-07", None, None, None, "gfx1151"),
        triage=triage,
    )


def bisected(complete: bool = True) -> LlamaBisect:
    trial = TriageTrial(llama_commit=BEFORE, verdict="good", seconds=90.0)
    return LlamaBisect(
        good=GOOD,
        bad=TONIGHT,
        candidates=5,
        complete=complete,
        first_bad=CommitRef(commit=FIRST if complete else TONIGHT, subject="ggml : the fast path (#12345)", pr=12345),
        last_good=CommitRef(commit=BEFORE),
        failed_stage="build",
        trials=(trial,),
        seconds=180.0,
        stopped=None if complete else "stopped after 1 build(s) (regressions.bisect_steps)",
    )


def test_the_title_names_llama_cpp_and_the_first_bad_commit():
    assert blame_title([job(bisected())]) == (
        "llama.cpp 81ed4ba broke linux-gfx1151 at build: first bad commit d301d2c (#12345)"
    )
    assert blame_title([job(bisected(complete=False))]) == (
        "llama.cpp 81ed4ba broke linux-gfx1151 at build (somewhere in aaaaaaa..81ed4ba)"
    )


def test_the_body_links_the_range_the_commits_and_the_pull_request():
    body = alert_body([job(bisected())], run_url="https://github.com/o/r/actions/runs/1", date="2026-12-07")
    assert f"([the changes]({URL}/compare/{GOOD}...{TONIGHT}))" in body
    assert (
        f"**First bad commit: [`d301d2c`]({URL}/commit/{FIRST})** ggml : the fast path (#12345) "
        f"([#12345]({URL}/pull/12345))" in body
    )
    assert "(5 commit(s) in the range, 1 build(s), 3.0 min)" in body  # the bisect's builds and minutes
    assert "The release goes out without this job; its last build is in release b1000" in body
    # the report for upstream: plain commits (GitHub links them), the target, the ROCm, the commands
    assert (
        f"**build fails for gfx1151 (linux, HIP backend, ROCm therock-dist-linux-gfx1151-7.2.0a20261207.tar.gz) "
        f"since {FIRST} (#12345)**"
    ) in body
    assert f"rockbuild build --job linux-gfx1151 --ref {FIRST} --rocm-version 7.2.0a20261207" in body
    assert "rockbuild install --tag b1000 --dest good" in body
    assert "ggml-hip.cu:12: error: planted" in body and "rockbuild bisect --job" not in body
    blocked = alert_body([job(bisected(), ship="blocked")], run_url="r", date="2026-12-07", published=False)
    assert "The release is blocked" in blocked and "llama.cpp broke 1 job(s) of the nightly build" in blocked


def test_links_only_for_github():
    assert web_url("https://github.com/ggml-org/llama.cpp.git") == URL and web_url(URL + "/") == URL
    assert web_url("/srv/llama.cpp.git") is None and web_url("git@github.com:ggml-org/llama.cpp") is None
