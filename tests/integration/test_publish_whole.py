"""A release is whole or it is not published (issue 41, item 4): every bundle carries llama-server's chat page and
every program of programs.yaml, else `rockbuild publish` refuses before anything is written or uploaded, naming the
jobs and what each lacks; `--allow-partial REASON` publishes anyway and says so in the notes and manifest.json.

Against the local GitHub API server, with job folders shaped like the night's (support/publishing.py); the command
as users run it where the exit code and the one-line error matter."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import rockbuild_exe
from support.options import context
from support.publishing import TOKEN, make_job, smoke_ok

from rockbuild.core.errors import PublishError
from rockbuild.core.programs import load_programs
from rockbuild.publish.jobs import load_job
from rockbuild.publish.release import PublishOptions, publish
from rockbuild.publish.whole import check_whole

PROGRAMS = load_programs()


def _smoke_with_page(result: str, detail: str) -> dict:
    """A passing smoke whose server run checked GET / (rockbuild.smoke.runner.check_pages)."""
    return {
        **smoke_ok("gpu"),
        "runs": {"server": {"name": "server", "ok": True, "web_ui": {"result": result, "detail": detail}}},
    }


@pytest.fixture
def night(tmp_path):
    """A night as a rehearsal root without npm leaves it: the Vulkan job's bundle has no chat page."""
    out = tmp_path / "out"
    return [
        make_job(out, "linux-gfx1151", smoke=_smoke_with_page("passed", "HTTP 200, text/html, 1843211 bytes")),
        make_job(out, "linux-gfx110X", targets=("gfx1100", "gfx1101"), smoke=smoke_ok(), web_ui=False),
        make_job(out, "windows-gfx1151"),
    ]


def _options(gh, jobs, tmp_path, **kw) -> PublishOptions:
    return PublishOptions(
        context=context(),
        job_dirs=tuple(jobs),
        repo=gh.full_name,
        api_url=gh.api_url,
        token=TOKEN,
        throttle=False,
        out=tmp_path / "release",
        **kw,
    )


def test_publish_refuses_a_night_whose_bundle_lacks_the_chat_page_before_anything_is_uploaded(gh, night, tmp_path):
    with pytest.raises(PublishError) as err:
        publish(_options(gh, night, tmp_path))
    message = err.value.message
    assert message == (
        "the release is not whole: linux-gfx110X lacks the chat page (build.json web_ui: none: npm is "
        "not installed (not on PATH)); nothing was published"
    )
    assert "--allow-partial REASON" in (err.value.hint or "")
    assert gh.writes == [] and gh.state.releases == {}  # no draft, no asset
    assert not (tmp_path / "release").exists()  # not even the archives


def test_every_job_and_what_it_lacks_is_named_in_one_line(gh, night, tmp_path):
    """A smoke whose GET / did not answer the page, a build.json from before the web UI step, a bundle without most
    programs: each job once, with each hole."""
    build = json.loads((night[2] / "build.json").read_text())
    del build["web_ui"]
    (night[2] / "build.json").write_text(json.dumps(build))
    (night[0] / "smoke.json").write_text(json.dumps(_smoke_with_page("not checked", "no answer (ConnectionError)")))
    (night[0] / "bundle" / "llama-tts").unlink()
    thin = make_job(tmp_path / "out", "linux-gfx1201", programs=("llama-cli", "llama-server", "llama-bench"))
    with pytest.raises(PublishError) as err:
        publish(_options(gh, [*night, thin], tmp_path))
    message = err.value.message
    assert "\n" not in message
    assert (
        "linux-gfx1151 lacks the chat page (the smoke's GET /: not checked: no answer (ConnectionError)), "
        "1 of the 37 programs of programs.yaml (llama-tts)"
    ) in message
    assert "linux-gfx110X lacks the chat page (build.json web_ui: none: " in message
    assert "windows-gfx1151 lacks the chat page (build.json does not record a web UI)" in message
    assert message.endswith(
        "; linux-gfx1201 lacks 34 of the 37 programs of programs.yaml (ggml-rpc-server, "
        "llama-completion, llama-mtmd-cli, llama-app, llama-quantize and 29 more); nothing was "
        "published"
    )
    assert gh.writes == []


def test_an_optional_program_no_bundle_has_is_no_hole_one_bundle_lacking_it_is(tmp_path):
    """An optional program the night's llama.cpp does not define is in no bundle: the release is the same everywhere.
    One that a bundle ships and another's configuration did not define is a hole; a required one always is."""
    out = tmp_path / "out"
    jobs = [make_job(out, "linux-gfx1151"), make_job(out, "linux-vulkan")]
    for job_dir in jobs:  # an older tree: no llama-idle
        build = json.loads((job_dir / "build.json").read_text())
        build["programs_unavailable"] = ["llama-idle"]
        (job_dir / "build.json").write_text(json.dumps(build))
        (job_dir / "bundle" / "llama-idle").unlink()
    assert check_whole([load_job(j) for j in jobs], PROGRAMS).whole
    (jobs[0] / "bundle" / "llama-idle").write_bytes(b"idle")  # one bundle has it after all
    with pytest.raises(
        PublishError,
        match=r"^the release is not whole: linux-vulkan lacks 1 of the 37 programs of "
        r"programs.yaml \(llama-idle\); nothing was published$",
    ):
        check_whole([load_job(j) for j in jobs], PROGRAMS)
    (jobs[1] / "bundle" / "llama-cli").unlink()  # required: a hole whatever build.json says
    build = json.loads((jobs[1] / "build.json").read_text())
    (jobs[1] / "build.json").write_text(json.dumps({**build, "programs_unavailable": ["llama-idle", "llama-cli"]}))
    with pytest.raises(
        PublishError,
        match=r"linux-vulkan lacks 2 of the 37 programs of programs.yaml "
        r"\(llama-cli, llama-idle\)",
    ):
        check_whole([load_job(j) for j in jobs], PROGRAMS)
    # the RPC server under its older name (rpc-server) is the program too
    (jobs[0] / "bundle" / "ggml-rpc-server").rename(jobs[0] / "bundle" / "rpc-server")
    assert check_whole([load_job(jobs[0])], PROGRAMS).whole


def test_the_override_publishes_and_says_so_in_the_notes_and_the_manifest(gh, night, tmp_path):
    reason = "the web UI's npm build is broken upstream (llama.cpp#99999)"
    report = publish(_options(gh, night, tmp_path, allow_partial=reason))
    assert report.state == "published"
    assert any(w.startswith(f"partial release ({reason}): linux-gfx110X lacks the chat page") for w in report.warnings)
    manifest = json.loads((report.out_dir / "manifest.json").read_text())
    assert manifest["partial"] == {
        "reason": reason,
        "jobs": [
            {
                "id": "linux-gfx110X",
                "lacks": ["web_ui"],
                "details": ["the chat page (build.json web_ui: none: npm is not installed (not on PATH))"],
            }
        ],
    }
    (release,) = gh.state.releases.values()
    assert (
        f"**Partial release**: published with `--allow-partial` ({reason}) although `linux-gfx110X` lacks the "
        "chat page" in release.body
    )
    uploaded = json.loads(next(a for a in release.assets if a.name == "manifest.json").data)
    assert uploaded["partial"]["reason"] == reason
    # a whole night says nothing of it
    for job in night[1:2]:
        build = json.loads((job / "build.json").read_text())
        (job / "build.json").write_text(json.dumps({**build, "web_ui": {"status": "built", "sha256": "ab" * 32}}))
    whole = publish(_options(gh, night, tmp_path, tag="b2000", dry_run=True))
    assert json.loads((whole.out_dir / "manifest.json").read_text())["partial"] is None
    assert "Partial release" not in (whole.out_dir / "release-notes.md").read_text()


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GH_"))}
    return subprocess.run(
        [rockbuild_exe(), *args], capture_output=True, text=True, env={**env, "GH_TOKEN": TOKEN}, cwd=cwd, timeout=120
    )


def test_the_command_refuses_in_one_line_with_exit_12_and_takes_the_override(gh, night, tmp_path):
    common = [*map(str, night), "--repo", gh.full_name, "--api-url", gh.api_url]
    refused = _run(["publish", *common], tmp_path)
    assert refused.returncode == 12
    lines = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert lines == [
        "error: the release is not whole: linux-gfx110X lacks the chat page (build.json web_ui: none: "
        "npm is not installed (not on PATH)); nothing was published"
    ]
    assert gh.writes == []
    allowed = _run(["publish", *common, "--allow-partial", "npm registry down", "--json"], tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["state"] == "published"
    assert "published partial (npm registry down): linux-gfx110X lacks the chat page" in allowed.stderr
