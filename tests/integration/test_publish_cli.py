"""`rockbuild publish` and `rockbuild alert` as users run them: the installed command, the token in the environment,
and the token in no output line, no log and no file written."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import rockbuild_exe
from support.github import GitHubAPIServer
from support.publishing import TOKEN, make_job, smoke_ok


def run(args: list[str], env_extra: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GITHUB_TOKEN", "GH_TOKEN", "GITHUB_REPOSITORY", "GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS")
    }
    env.update(env_extra)
    return subprocess.run([rockbuild_exe(), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def every_file_text(root: Path) -> str:
    chunks = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            chunks.append((Path(dirpath) / name).read_bytes().decode("latin-1"))
    return "\n".join(chunks)


def test_publish_and_alert_never_show_the_token(tmp_path):
    out = tmp_path / "out"
    ok = make_job(out, "linux-gfx1151", smoke=smoke_ok())
    bad = make_job(out, "linux-gfx1153", required=False, status="failed", failed_step="compile")
    summary = tmp_path / "summary.md"
    with GitHubAPIServer(token=TOKEN) as gh:
        common = ["--repo", gh.full_name, "--api-url", gh.api_url]
        env = {"GH_TOKEN": TOKEN, "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTIONS": "true"}
        first = run(["publish", str(ok), str(bad), *common, "--json"], env, tmp_path)
        assert first.returncode == 0, first.stderr
        report = json.loads(first.stdout)
        assert report["state"] == "published" and report["tag"] == "b1000"
        assert "::warning::linux-gfx1153 is left out (optional): compile" in first.stderr
        again = run(["publish", str(ok), str(bad), *common], env, tmp_path)
        assert again.returncode == 0 and "b1000: unchanged: already published from these inputs" in again.stdout
        refused = run(["publish", str(ok), *common, "--tag", "b1000"], env, tmp_path)
        assert refused.returncode == 12 and "error: release b1000 is already published" in refused.stderr
        wrong_repo = run(["publish", str(ok), "--repo", "someone/else", "--api-url", gh.api_url], env, tmp_path)
        assert (
            wrong_repo.returncode == 12 and "reading the repository someone/else failed: HTTP 404" in wrong_repo.stderr
        )
        no_token = run(["publish", str(ok), *common], {}, tmp_path)
        assert no_token.returncode == 12 and "no GitHub token" in no_token.stderr
        alerted = run(["alert", str(ok), str(bad), "--run-url", "https://ci/run/1", *common], env, tmp_path)
        assert alerted.returncode == 0 and "opened issue #1" in alerted.stdout
        assert len(gh.state.releases) == 1
        written = every_file_text(tmp_path) + "".join(
            a.data.decode("latin-1") for r in gh.state.releases.values() for a in r.assets
        )
        written += "".join(i.body for i in gh.state.issues.values())
    for proc in (first, again, refused, wrong_repo, no_token, alerted):
        for line in (proc.stdout + proc.stderr).splitlines():
            assert TOKEN not in line
    assert TOKEN not in written
    assert "## rockbuild publish: b1000 (published)" in summary.read_text()


def test_publish_dry_run_needs_no_token_and_writes_nothing(tmp_path):
    job = make_job(tmp_path / "out", "windows-gfx120X", targets=("gfx1200", "gfx1201"))
    with GitHubAPIServer(token=TOKEN) as gh:
        proc = run(["publish", str(job), "--repo", gh.full_name, "--api-url", gh.api_url, "--dry-run"], {}, tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert gh.writes == []
    assert "b1000: dry-run: would create the draft b1000" in proc.stdout
    assert "would upload   llama-b1000-windows-rocm-gfx120X-x64.zip" in proc.stdout
    assert (tmp_path / "out/release/b1000/llama-b1000-windows-rocm-gfx120X-x64.zip").is_file()
    assert not (tmp_path / "out/release/b1000/llama-b1000-windows-rocm-gfx120X-x64.tar.gz").exists()


def test_publish_config_flag_is_read_and_named_when_broken(tmp_path, run_rockbuild):
    """--publish-config replaces the shipped publish.yaml (the e2e rehearsal raises its glibc floor this way)."""
    from support.publishing import make_job

    job = make_job(tmp_path / "out", "linux-gfx1151")
    bad = tmp_path / "publish.yaml"
    bad.write_text("tags: [\n")
    result = run_rockbuild("publish", "--dry-run", "--publish-config", str(bad), str(job))
    assert result.returncode == 2 and result.stderr.startswith(f"error: {bad}:") and "invalid YAML" in result.stderr
