"""rockbuild alert against the local GitHub API server: open, comment, once per run, nothing when nothing failed."""

from __future__ import annotations

import pytest
from support.github import Issue
from support.options import context
from support.publishing import TOKEN, make_job

from rockbuild.core.errors import PublishError
from rockbuild.publish.alert import AlertTarget, send_alert

RUN = "https://github.com/rockbuild-test/llamacpp-rocm/actions/runs/1234"


@pytest.fixture
def night(tmp_path):
    out = tmp_path / "out"
    return [
        make_job(out, "linux-gfx1151"),
        make_job(out, "windows-gfx110X", status="failed", failed_step="compile"),
        make_job(
            out,
            "linux-gfx1153",
            required=False,
            smoke={
                "ok": False,
                "failures": ["cli: timed out after 300s"],
                "runs": {
                    "cli": {
                        "ok": False,
                        "log": "/w/out/linux-gfx1153/smoke-logs/llama-cli.log",
                        "log_tail": ["Loading model...", "ggml_cuda_init: found 1 ROCm devices"],
                    }
                },
            },
        ),
    ]


def alert(gh, jobs, **kw):
    target = AlertTarget(
        run_url=kw.pop("run_url", RUN),
        repo=gh.full_name,
        api_url=gh.api_url,
        token=TOKEN,
        throttle=False,
        date="2026-11-29",
    )
    return send_alert(jobs, target, context=kw.pop("context", context()), **kw)


def test_opens_an_issue_listing_each_failed_job(gh, night):
    report = alert(gh, night)
    assert report.action == "opened" and report.failed == ("windows-gfx110X", "linux-gfx1153")
    issue = gh.state.issues[1]
    assert issue.title == "Nightly build failed (2026-11-29)" and issue.labels == ["nightly-failure"]
    assert "nightly-failure" in gh.state.labels
    body = issue.body
    assert RUN in body
    assert "### `windows-gfx110X`: failed at `compile`" in body
    assert "error: out of memory" in body and "[49/363] Building HIP object" in body  # the build log's tail
    assert "### `linux-gfx1153` (optional): failed at `smoke`" in body and "cli: timed out after 300s" in body
    assert "ggml_cuda_init: found 1 ROCm devices" in body
    assert "linux-gfx1151" not in body
    assert [w[0] for w in gh.writes] == ["POST", "POST"]  # the label, the issue


def test_comments_on_the_open_issue_once_per_run(gh, night):
    gh.state.labels["nightly-failure"] = {"name": "nightly-failure"}
    gh.state.issues[1] = Issue(1, "Nightly build failed (2026-11-28)", "yesterday", ["nightly-failure"])
    gh.state.issues[2] = Issue(2, "unrelated", "x", ["bug"])
    report = alert(gh, night)
    assert report.action == "commented" and report.issue_number == 1
    assert len(gh.state.issues[1].comments) == 1 and "failed at `compile`" in gh.state.issues[1].comments[0]["body"]
    writes = len(gh.writes)
    again = alert(gh, night)
    assert again.action == "already-reported" and len(gh.writes) == writes
    other = alert(gh, night, run_url=RUN.replace("1234", "1235"))
    assert other.action == "commented" and len(gh.state.issues[1].comments) == 2


def test_a_closed_issue_is_not_reused(gh, night):
    gh.state.issues[1] = Issue(1, "Nightly build failed (2026-11-01)", "old", ["nightly-failure"], state="closed")
    assert alert(gh, night).action == "opened" and len(gh.state.issues) == 2


def test_nothing_failed_writes_nothing(gh, tmp_path):
    jobs = [make_job(tmp_path / "out", "linux-gfx1151")]
    report = alert(gh, jobs)
    assert report.action == "nothing-failed" and gh.state.requests == []


def test_the_token_is_never_in_the_issue(gh, tmp_path):
    job = make_job(tmp_path / "out", "linux-gfx1151", status="failed", failed_step="source")
    (job / "build.log").write_text(f"fatal: could not read from https://x-access-token:{TOKEN}@github.com/\n")
    alert(gh, [job])
    assert TOKEN not in gh.state.issues[1].body and "x-access-token:***@github.com" in gh.state.issues[1].body


def test_no_token_is_refused(gh, night, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GH_TOKEN", raising=False)
    with pytest.raises(PublishError, match="no GitHub token"):
        send_alert(night, AlertTarget(run_url=RUN, repo=gh.full_name, api_url=gh.api_url), context=context())
