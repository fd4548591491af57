"""Whole nights end to end on this machine: a TheRock index page with small TheRock-layout tarballs whose "clang" is a
script running the host's gcc (so the build driver's real code path compiles the test's small CMake project), a bare
git repository standing in for llama.cpp with a bNNNN tag, and the local GitHub API server.

Smoke is left out here (``smoke=False`` / ``--no-smoke``): the stand-in project's programs are not llama.cpp; the smoke
runner is covered by tests/integration/test_smoke_run.py."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import rockbuild_exe
from support.files import write
from support.night import TOKEN, World, night_servers

from rockbuild.nightly import load_inputs, run_night
from rockbuild.pipeline.inputs import parse_ls_remote

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("cmake", "ninja", "gcc", "g++", "git")),
    reason="needs cmake, ninja, gcc, g++ and git on the host",
)


@pytest.fixture
def world(tmp_path, monkeypatch):
    with night_servers(tmp_path, monkeypatch, TOKEN) as (server, github):
        yield World(tmp_path, server, github)


def test_first_night_publishes_second_skips_without_download_changed_commit_rebuilds(world, tmp_path):
    out = tmp_path / "out"
    matrix = world.matrix("nightly.yaml")
    first = run_night(world.options(out, matrix))
    assert first.state == "published", first.message
    assert first.exit_code == 0
    assert [j.status for j in first.jobs] == ["ok", "ok"]
    assert world.tarball_requests() == 2
    compiles = world.compiles()
    assert compiles > 0
    inputs = load_inputs(out / "inputs.json")
    assert inputs.llama_cpp.build_number == "b1000"
    assert {r.name for r in inputs.rocm.values()} == set(world.tarballs)
    (release,) = world.github.state.releases.values()
    manifest = json.loads(next(a.data for a in release.assets if a.name == "manifest.json"))
    assert manifest["llama_cpp"]["commit"] == inputs.llama_cpp.commit
    assert {j["rocm"]["tarball"] for j in manifest["jobs"]} == set(world.tarballs)
    writes = len(world.github.writes)

    # the second night, run as users run it: same inputs -> unchanged, nothing downloaded, compiled or written
    env = {**os.environ, "GITHUB_TOKEN": TOKEN, "ROCKBUILD_CACHE": str(tmp_path / "cache")}
    second = subprocess.run(
        [
            rockbuild_exe(),
            "nightly",
            "-c",
            str(matrix),
            "--out",
            str(tmp_path / "out2"),
            "--index-url",
            world.index,
            "--git-url",
            str(world.bare),
            "--repo",
            world.github.full_name,
            "--api-url",
            world.github.api_url,
            "--no-smoke",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert report["state"] == "unchanged"
    assert world.tarball_requests() == 2
    assert world.compiles() == compiles
    assert len(world.github.writes) == writes
    assert TOKEN not in second.stderr + second.stdout

    # a new llama.cpp commit: rebuilt against the cached tarballs, published under the next tag
    first_source = json.loads((out / "linux-gfx1151" / "build.json").read_text())["llama_cpp"]["path"]
    commit = world.new_commit()
    third = run_night(world.options(out, matrix))
    # in the same source folder as the first night (ccache keys on absolute paths): one checkout per job
    third_build = json.loads((out / "linux-gfx1151" / "build.json").read_text())["llama_cpp"]
    assert third_build["path"] == first_source and third_build["commit"] == commit
    assert Path(first_source).name.startswith("linux-gfx1151-")
    assert third.state == "published", third.message
    assert any("llama.cpp" in c for c in third.changes)
    assert load_inputs(out / "inputs.json").llama_cpp.commit == commit
    assert load_inputs(out / "inputs.json").llama_cpp.build_number is None
    assert world.compiles() > compiles
    assert world.tarball_requests() == 2  # the extracted trees were reused
    assert all(j.stages["fetch"] == "reused" and j.stages["build"] == "done" for j in third.jobs)
    assert len([r for r in world.github.state.releases.values() if not r.draft]) == 2


def test_failing_optional_job_is_listed_and_does_not_block(world, tmp_path):
    report = run_night(world.options(tmp_path / "out", world.matrix("m.yaml", optional_fails=True)))
    assert report.state == "published", report.message
    failed = {j.id: j for j in report.jobs if j.status == "failed"}
    assert list(failed) == ["linux-gfx1150"]
    assert failed["linux-gfx1150"].failed_stage == "build"
    assert "linux-gfx1150" in report.message
    from rich.console import Console

    shown = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    shown.print(report.render_table())
    assert "FAILED at build" in shown.export_text()
    (release,) = world.github.state.releases.values()
    manifest = json.loads(next(a.data for a in release.assets if a.name == "manifest.json"))
    assert [j["id"] for j in manifest["failed_jobs"]] == ["linux-gfx1150"]
    assert "linux-gfx1150" in release.body
    assert not world.github.state.issues


def test_failing_required_job_blocks_and_alerts(world, tmp_path):
    summary = tmp_path / "summary.md"
    report = run_night(
        world.options(tmp_path / "out", world.matrix("m.yaml", required_fails=True), step_summary=summary)
    )
    assert report.state == "blocked"
    text = summary.read_text()
    assert "rockbuild nightly: blocked" in text and "| linux-gfx1151 | yes |" in text and "**failed** at build" in text
    assert report.exit_code == 1
    assert "linux-gfx1151" in report.message
    assert not world.github.state.releases
    (issue,) = world.github.state.issues.values()
    assert "linux-gfx1151" in issue.body + json.dumps(issue.comments)
    # public text names no runner path (issue 28, item 3): the log by its place in the artifacts, the quoted tail
    # with the output and cache folders shortened, a reason that stands alone
    assert str(tmp_path) not in issue.body, issue.body
    assert "Log: `linux-gfx1151/build.log`" in issue.body and ("<out>/" in issue.body or "<cache>/" in issue.body)
    assert "above" not in issue.body.split("<details>")[0] and "build.log in the job folder says why" in issue.body


def test_interrupted_night_resumes_without_redoing_completed_stages(world, tmp_path):
    out = tmp_path / "out"
    matrix = world.matrix("m.yaml")

    def interrupt(job_id: str, stage: str, status: str) -> None:
        if (job_id, stage, status) == ("linux-gfx1150", "build", "start"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_night(world.options(out, matrix, on_event=interrupt))
    assert not world.github.state.releases
    compiles = world.compiles()
    state = json.loads((out / "linux-gfx1151" / "stages.json").read_text())
    assert state["stages"]["build"]["result"] == "ok"

    resumed = run_night(world.options(out, matrix))
    assert resumed.state == "published", resumed.message
    done = {j.id: j.stages for j in resumed.jobs}
    assert done["linux-gfx1151"] == {"fetch": "reused", "build": "reused", "bundle": "reused", "smoke": "skipped"}
    assert done["linux-gfx1150"]["fetch"] == "reused" and done["linux-gfx1150"]["build"] == "done"
    assert world.tarball_requests() == 2
    # only the interrupted job compiled: its compile count equals the first job's
    assert world.compiles() == 2 * compiles


def test_stale_rocm_fails_only_its_jobs_and_names_group_and_date(world, tmp_path):
    # today as the night will see it (TODAY is fixed when the suite starts, which may be before midnight)
    old = datetime.datetime.now(datetime.UTC).date() - datetime.timedelta(days=9)
    name = f"therock-dist-linux-gfx1150-7.2.0a{old:%Y%m%d}.tar.gz"
    world.server.add(name, b"x")
    world.server.add_text("stale.html", f'<a href="{world.tarballs[0]}">a</a><a href="{name}">b</a>')
    out = tmp_path / "out"
    report = run_night(world.options(out, world.matrix("m.yaml"), index_url=world.server.url_for("stale.html")))
    assert report.state == "published", report.message
    stale = next(j for j in report.jobs if j.id == "linux-gfx1150")
    assert stale.status == "failed" and stale.failed_stage == "fetch"
    assert "gfx1150" in stale.message and "9 days old" in stale.message and f"{old:%Y%m%d}" in stale.message
    assert len(world.server.requests_for(name)) == 0


def test_resolve_cli_and_build_with_inputs(world, tmp_path, run_rockbuild):
    matrix = world.matrix("m.yaml")
    env = {"ROCKBUILD_CACHE": str(tmp_path / "cache")}
    resolved = run_rockbuild(
        "resolve",
        "-c",
        str(matrix),
        "--index-url",
        world.index,
        "--git-url",
        str(world.bare),
        "--llama-ref",
        "b1000",
        "--out",
        "inputs.json",
        env=env,
    )
    assert resolved.returncode == 0, resolved.stderr
    inputs = json.loads((tmp_path / "inputs.json").read_text())
    assert inputs["llama_cpp"]["build_number"] == "b1000"
    assert [j["id"] for j in inputs["jobs"]] == ["linux-gfx1151", "linux-gfx1150"]

    built = run_rockbuild(
        "build",
        "--job",
        "linux-gfx1151",
        "--inputs",
        "inputs.json",
        "--out",
        "out",
        "--no-ccache",
        "--no-bundle",
        env=env,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    build = json.loads((tmp_path / "out" / "linux-gfx1151" / "build.json").read_text())
    assert build["llama_cpp"]["commit"] == inputs["llama_cpp"]["commit"]
    assert build["rocm"]["tarball"]["name"] == world.tarballs[0]

    missing = run_rockbuild("build", "--job", "linux-gfx908", "--inputs", "inputs.json", env=env)
    assert missing.returncode == 2
    assert "not in inputs.json" in missing.stderr


def test_parse_ls_remote_prefers_the_peeled_commit_of_an_annotated_tag():
    text = "aaa\trefs/heads/master\nbbb\trefs/tags/b1\nccc\trefs/tags/b1^{}\n"
    assert parse_ls_remote(text) == {"refs/heads/master": "aaa", "refs/tags/b1": "ccc"}


VULKAN_MATRIX = """
matrix:
  os: [linux]
  target: [gfx1151]
  include:
    - {os: linux, backend: vulkan}
"""


def test_a_night_with_a_vulkan_job_builds_it_without_rocm_and_publishes_both_flavours(world, tmp_path, monkeypatch):
    sdk = tmp_path / "vulkan-sdk"  # glslc only has to exist: the stand-in project has no shaders
    write(sdk / "bin" / "glslc", "#!/bin/sh\necho 'shaderc v2026.4 v2026.4'\n", 0o755)
    monkeypatch.setenv("VULKAN_SDK", str(sdk))
    out = tmp_path / "out"
    matrix = write(tmp_path / "m.yaml", VULKAN_MATRIX)
    report = run_night(world.options(out, matrix))
    assert report.state == "published", report.message
    jobs = {j.id: j for j in report.jobs}
    assert jobs["linux-vulkan"].stages == {"fetch": "skipped", "build": "done", "bundle": "done", "smoke": "skipped"}
    assert jobs["linux-gfx1151"].stages["fetch"] == "done"
    assert world.tarball_requests() == 1  # only the ROCm job's tarball

    inputs = load_inputs(out / "inputs.json")
    assert inputs.rocm_for("linux-vulkan") is None and inputs.unresolved("linux-vulkan") is None
    raw = json.loads((out / "inputs.json").read_text())
    assert {j["id"]: j["rocm_key"] for j in raw["jobs"]}["linux-vulkan"] is None
    assert len(inputs.job_fingerprint("linux-vulkan")) == 16
    build = json.loads((out / "linux-vulkan" / "build.json").read_text())
    assert build["rocm"] is None and build["cmake_definitions"].get("GGML_VULKAN") == "ON"
    bundle = json.loads((out / "linux-vulkan" / "bundle" / "bundle.json").read_text())
    assert bundle["backend"] == "vulkan" and bundle["audit"]["ok"] is True

    (release,) = world.github.state.releases.values()
    names = {a.name for a in release.assets}
    tag = release.tag_name
    assert f"llama-{tag}-ubuntu-vulkan-x64.tar.gz" in names, names
    assert any(n.startswith(f"llama-{tag}-ubuntu-rocm-") for n in names), names
    manifest = json.loads(next(a.data for a in release.assets if a.name == "manifest.json"))
    assert {j["id"]: j.get("backend") for j in manifest["jobs"]} == {"linux-gfx1151": "rocm", "linux-vulkan": "vulkan"}

    # the next night with the same inputs: unchanged, the Vulkan job included (it has no tarball to compare)
    again = run_night(world.options(tmp_path / "out2", matrix))
    assert again.state == "unchanged", again.message


def test_build_with_inputs_of_a_vulkan_job_fetches_nothing(world, tmp_path, run_rockbuild, monkeypatch):
    sdk = tmp_path / "vulkan-sdk"
    write(sdk / "bin" / "glslc", "#!/bin/sh\necho 'shaderc v2026.4 v2026.4'\n", 0o755)
    matrix = write(tmp_path / "m.yaml", VULKAN_MATRIX)
    env = {"ROCKBUILD_CACHE": str(tmp_path / "cache"), "VULKAN_SDK": str(sdk)}
    resolved = run_rockbuild(
        "resolve",
        "-c",
        str(matrix),
        "--index-url",
        world.index,
        "--git-url",
        str(world.bare),
        "--out",
        "inputs.json",
        env=env,
    )
    assert resolved.returncode == 0, resolved.stderr
    assert "2 jobs, 1 ROCm tarball(s)" in resolved.stdout
    built = run_rockbuild(
        "build", "--job", "linux-vulkan", "--inputs", "inputs.json", "--out", "out", "--no-ccache", env=env, timeout=120
    )
    assert built.returncode == 0, built.stderr
    assert world.tarball_requests() == 0
    assert (tmp_path / "out" / "linux-vulkan" / "bundle" / "bundle.json").is_file()


def test_a_blocked_night_exits_1_from_the_command_line(world, tmp_path):
    """click returns (does not raise) ctx.exit's code without standalone mode: it must still reach the shell."""
    env = {**os.environ, "GITHUB_TOKEN": TOKEN, "ROCKBUILD_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(
        [
            rockbuild_exe(),
            "nightly",
            "-c",
            str(world.matrix("m.yaml", required_fails=True)),
            "--out",
            str(tmp_path / "out"),
            "--index-url",
            world.index,
            "--git-url",
            str(world.bare),
            "--repo",
            world.github.full_name,
            "--api-url",
            world.github.api_url,
            "--no-smoke",
            "--no-ccache",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=110,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert json.loads(result.stdout)["state"] == "blocked"


def test_the_ci_fan_out_is_the_same_night_in_three_modes(world, tmp_path):
    """prepare: `nightly --plan` (matrix + changed in $GITHUB_OUTPUT); each leg: `nightly --job ID`; publish:
    `nightly --release`. The next night's plan finds the release made from the same inputs: an empty matrix, no
    tarball fetched, nothing built."""
    matrix = world.matrix("nightly.yaml")
    env = {**os.environ, "GITHUB_TOKEN": TOKEN, "ROCKBUILD_CACHE": str(tmp_path / "cache")}
    common = [
        "-c",
        str(matrix),
        "--index-url",
        world.index,
        "--git-url",
        str(world.bare),
        "--repo",
        world.github.full_name,
        "--api-url",
        world.github.api_url,
    ]

    def nightly(*args: str, output: Path | None = None) -> subprocess.CompletedProcess:
        extra = {"GITHUB_OUTPUT": str(output)} if output else {}
        return subprocess.run(
            [rockbuild_exe(), "nightly", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**env, **extra},
            timeout=110,
        )

    output = tmp_path / "gh_output"
    plan = nightly("--plan", *common, "--inputs", "inputs.json", "--json", output=output)
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert planned["state"] == "changed" and planned["jobs"] == ["linux-gfx1151", "linux-gfx1150"]
    written = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert written["changed"] == "true"
    assert [j["id"] for j in json.loads(written["matrix"])["include"]] == ["linux-gfx1151", "linux-gfx1150"]
    assert world.tarball_requests() == 0  # planning downloads no tarball

    # the webui job's artifact (--web-ui DIR) reached one leg only; the other built llama-server without its page
    web_ui = {"linux-gfx1151": ["--web-ui", str(world.web_ui)], "linux-gfx1150": []}
    for job in ("linux-gfx1151", "linux-gfx1150"):  # two runners, each with its own out/ and cache
        leg = subprocess.run(
            [
                rockbuild_exe(),
                "nightly",
                "--job",
                job,
                "--inputs",
                "inputs.json",
                "--out",
                f"leg-{job}",
                "--no-smoke",
                "--no-ccache",
                *web_ui[job],
                "--json",
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**env, "ROCKBUILD_CACHE": str(tmp_path / f"cache-{job}")},
            timeout=110,
        )
        assert leg.returncode == 0, leg.stderr
        report = json.loads(leg.stdout)
        assert report["state"] == "built" and report["jobs"][0]["stages"] == {
            "fetch": "done",
            "build": "done",
            "bundle": "done",
            "smoke": "skipped",
        }
        shutil.copytree(tmp_path / f"leg-{job}" / job, tmp_path / "artifacts" / f"job-{job}")  # upload-artifact
    # a leg re-run (a retried runner) resumes: nothing redone
    again = nightly(
        "--job",
        "linux-gfx1151",
        "--inputs",
        "inputs.json",
        "--out",
        "leg-linux-gfx1151",
        "--no-smoke",
        "--no-ccache",
        "--json",
    )
    assert json.loads(again.stdout)["jobs"][0]["stages"]["build"] == "reused"

    # a release is whole or not published (test_publish_whole.py); the override publishes it and says so
    artifacts = [str(p) for p in sorted((tmp_path / "artifacts").iterdir())]
    base = [
        "--release",
        "--inputs",
        "inputs.json",
        "--repo",
        world.github.full_name,
        "--api-url",
        world.github.api_url,
        "--json",
        *artifacts,
    ]
    refused = nightly(*base)
    assert refused.returncode == 1 and json.loads(refused.stdout)["message"] == (
        "publishing failed: the release is not whole: linux-gfx1150 lacks the chat page (build.json web_ui: none: "
        "tools/ui has no package.json and package-lock.json (a llama.cpp before the UI moved there?)); nothing was "
        "published"
    )
    assert not world.github.state.releases
    release = nightly(*base, "--allow-partial", "the webui artifact did not reach linux-gfx1150")
    assert release.returncode == 0, release.stderr
    assert json.loads(release.stdout)["state"] == "published"
    (published,) = world.github.state.releases.values()
    assert not published.draft and published.tag_name == "b1000"
    manifest = json.loads(next(a for a in published.assets if a.name == "manifest.json").data)
    assert manifest["partial"]["reason"] == "the webui artifact did not reach linux-gfx1150"
    assert [(j["id"], j["lacks"]) for j in manifest["partial"]["jobs"]] == [("linux-gfx1150", ["web_ui"])]
    assert (
        "**Partial release**: published with `--allow-partial` (the webui artifact did not reach "
        "linux-gfx1150)" in published.body
    )
    writes, fetched = len(world.github.writes), world.tarball_requests()

    output.unlink()
    unchanged = nightly("--plan", *common, "--inputs", "inputs-2.json", "--json", output=output)
    assert unchanged.returncode == 0, unchanged.stderr
    assert json.loads(unchanged.stdout)["state"] == "unchanged"
    written = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert written == {
        "matrix": '{"include":[]}',
        "common_matrix": '{"include":[]}',
        "common": "false",
        "changed": "false",
        "gpu_matrix": '{"include":[]}',
        "gpu": "false",
    }  # no build leg starts
    assert len(world.github.writes) == writes and world.tarball_requests() == fetched


def test_the_modes_are_exclusive(run_rockbuild, tmp_path):
    both = run_rockbuild("nightly", "--plan", "--job", "linux-gfx1151")
    assert both.returncode == 2 and "give one of --plan, --job ID and --release" in both.stderr
    stray = run_rockbuild("nightly", "--plan", str(tmp_path))
    assert stray.returncode == 2 and "JOB_DIRs are for --release" in stray.stderr


def test_a_night_whose_publishing_fails_is_alerted_with_the_failure(world, tmp_path, run_rockbuild):
    """Issue 28, item 2: with the API answering 502 to POST /releases the night used to say "all 1 jobs passed; no
    alert". The release leg's failure is the alert, its title saying what failed; `rockbuild alert --failed-leg`
    reports a leg that left no job folder (the plan), once per run."""
    world.github.state.fail_release_create = 502
    report = run_night(world.options(tmp_path / "out", world.matrix("m.yaml")))
    assert report.state == "failed" and report.message.startswith("publishing failed: creating the draft release")
    assert report.alert is not None and report.alert.startswith("opened issue #"), report.alert
    (issue,) = world.github.state.issues.values()
    assert issue.title.endswith(": publish") and issue.title.startswith("Nightly build failed")
    assert "### The night's `publish` failed" in issue.body and "HTTP 502" in issue.body
    assert "was published" not in issue.body and TOKEN not in issue.body

    env = {"GITHUB_TOKEN": TOKEN}
    args = [
        "alert",
        "--repo",
        world.github.full_name,
        "--api-url",
        world.github.api_url,
        "--run-url",
        "https://ci.example/run/2",
        "--failed-leg",
        "prepare=resolving the inputs failed: git ls-remote timed out",
    ]
    first, again = run_rockbuild(*args, env=env), run_rockbuild(*args, env=env)
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    (issue,) = world.github.state.issues.values()  # the open issue gets a comment, once
    (comment,) = issue.comments
    assert "### The night's `prepare` failed" in comment["body"] and "git ls-remote timed out" in comment["body"]
    assert "already reported" in again.stdout + again.stderr
    refused = run_rockbuild("alert", "--repo", world.github.full_name, "--run-url", "https://ci.example/run/3", env=env)
    assert refused.returncode == 2 and "nothing to report" in refused.stderr


def test_the_carried_patch_series_is_part_of_the_nights_inputs(world, tmp_path):
    """Issue 38: the plan records the series' digest in inputs.json; a leg carrying another series refuses (exit 8);
    the release names the patch; the next plan with the same series is unchanged, with a changed patch it is not."""
    import difflib

    base = "int ggml_base(void) { return 41; }\n"
    series_dir = tmp_path / "series"

    def carry(comment: str) -> Path:
        after = base + f"// {comment}\n"
        write(
            series_dir / "note.patch",
            "".join(
                difflib.unified_diff(
                    base.splitlines(True), after.splitlines(True), "a/ggml/ggml-base.c", "b/ggml/ggml-base.c"
                )
            ),
        )
        return write(
            series_dir / "patches.yaml",
            """
            patches:
              - {id: note, file: note.patch, url: 'https://github.com/ggml-org/llama.cpp/pull/1', why: a note}
        """,
        )

    series = carry("first")
    matrix = world.matrix("nightly.yaml")
    env = {
        **os.environ,
        "GITHUB_TOKEN": TOKEN,
        "ROCKBUILD_CACHE": str(tmp_path / "cache"),
        "ROCKBUILD_PATCHES": str(series),
    }
    common = [
        "-c",
        str(matrix),
        "--index-url",
        world.index,
        "--git-url",
        str(world.bare),
        "--repo",
        world.github.full_name,
        "--api-url",
        world.github.api_url,
    ]

    def nightly(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [rockbuild_exe(), "nightly", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**env, **extra},
            timeout=110,
        )

    plan = nightly("--plan", *common, "--inputs", "inputs.json", "--json")
    assert plan.returncode == 0, plan.stderr
    digest = json.loads((tmp_path / "inputs.json").read_text())["patches"]
    assert digest == load_inputs(tmp_path / "inputs.json").patches and len(digest) == 16
    jobs = json.loads(plan.stdout)["jobs"]

    # a leg whose checkout carries another series than the plan's: it builds nothing
    other = nightly("--job", jobs[0], "--inputs", "inputs.json", "--out", "leg", "--no-smoke", "--no-patches")
    assert other.returncode == 8
    assert (
        f"error: inputs.json was planned with the carried patch series {digest}; this leg carries none"
    ) in other.stderr
    assert not (tmp_path / "leg" / jobs[0] / "build.json").exists()
    for job in jobs:
        leg = nightly(
            "--job",
            job,
            "--inputs",
            "inputs.json",
            "--out",
            "leg",
            "--no-smoke",
            "--no-ccache",
            "--web-ui",
            str(world.web_ui),
        )
        assert leg.returncode == 0, leg.stderr
    build = json.loads((tmp_path / "leg" / jobs[0] / "build.json").read_text())
    assert [(p["id"], p["status"]) for p in build["patches"]["patches"]] == [("note", "applied")]
    assert Path(build["llama_cpp"]["path"]).parent.name == "llama.cpp-patched"
    release = nightly(
        "--release",
        "--inputs",
        "inputs.json",
        "--repo",
        world.github.full_name,
        "--api-url",
        world.github.api_url,
        *(str(tmp_path / "leg" / job) for job in jobs),
    )
    assert release.returncode == 0, release.stderr
    (published,) = world.github.state.releases.values()
    assert "- `note` (https://github.com/ggml-org/llama.cpp/pull/1): a note" in published.body

    same = nightly("--plan", *common, "--inputs", "inputs-2.json", "--json")
    assert json.loads(same.stdout)["state"] == "unchanged", same.stderr
    carry("second")  # the same id, another fix: a changed night
    changed = json.loads(nightly("--plan", *common, "--inputs", "inputs-3.json", "--json").stdout)
    assert changed["state"] == "changed"
    assert any(c.startswith(f"{jobs[0]}: carried patches {digest} -> ") for c in changed["changes"]), changed


COMMON_MATRIX = """
options:
  common_part: true
  cmake: {cmake}
matrix:
  os: [linux]
  backend: [vulkan]
"""


def test_a_night_builds_the_common_part_once_and_the_gpu_job_on_it(world, tmp_path, monkeypatch):
    """Issue 41: the common part is a job of its own, built first and never published; the Vulkan job compiles only
    ggml-vulkan and assembles its bundle from it; a failed common part fails the job with the common part's reason."""
    sdk = tmp_path / "vulkan-sdk"
    write(sdk / "bin" / "glslc", "#!/bin/sh\necho 'shaderc v2026.4 v2026.4'\n", 0o755)
    monkeypatch.setenv("VULKAN_SDK", str(sdk))
    out = tmp_path / "out"
    report = run_night(world.options(out, write(tmp_path / "m.yaml", COMMON_MATRIX.format(cmake="{}"))))
    assert report.state == "published", report.message
    jobs = {j.id: j for j in report.jobs}
    assert list(jobs) == ["linux-common", "linux-vulkan"]
    assert jobs["linux-common"].stages == {"fetch": "skipped", "build": "done", "bundle": "skipped", "smoke": "skipped"}
    assert jobs["linux-vulkan"].stages == {"fetch": "skipped", "build": "done", "bundle": "done", "smoke": "skipped"}
    build = json.loads((out / "linux-vulkan" / "build.json").read_text())
    assert build["common"]["job"] == "linux-common" and build["job"]["common"] == "linux-common"
    assert build["compile_command"][build["compile_command"].index("--target") + 1] == "ggml-vulkan"
    assert build["web_ui"]["status"] != "none"  # the common part's llama-server, with its page
    bundle = json.loads((out / "linux-vulkan" / "bundle" / "bundle.json").read_text())
    assert bundle["audit"]["ok"] is True
    assert (out / "linux-vulkan" / "bundle" / "libggml-vulkan.so").is_file()
    assert (out / "linux-vulkan" / "bundle" / "llama-cli").is_file()  # the common part's program
    (release,) = world.github.state.releases.values()
    manifest = json.loads(next(a.data for a in release.assets if a.name == "manifest.json"))
    assert [j["id"] for j in manifest["jobs"]] == ["linux-vulkan"]  # the common part is no asset
    compilers = manifest["jobs"][0]["compilers"]
    assert compilers["common_part"] == "linux-common" and compilers["cpu"] == build["common"]["compilers"]
    assert compilers["gpu"] == build["compilers"]
    assert not any("common" in a.name for a in release.assets)
    # the same inputs again: nothing to do
    assert (
        run_night(world.options(tmp_path / "out2", write(tmp_path / "m.yaml", COMMON_MATRIX.format(cmake="{}")))).state
        == "unchanged"
    )

    # a common part that fails: its job fails with its reason, without fetching or compiling anything
    world.github.state.releases.clear()
    failed = run_night(
        world.options(
            tmp_path / "out3",
            write(tmp_path / "f.yaml", COMMON_MATRIX.format(cmake='{FAIL_COMPILE: "ON"}')),
            repo=None,
            publish=False,
        )
    )
    jobs = {j.id: j for j in failed.jobs}
    assert jobs["linux-common"].status == "failed" and jobs["linux-common"].failed_stage == "build"
    vulkan = jobs["linux-vulkan"]
    assert (vulkan.status, vulkan.failed_stage) == ("failed", "build")
    assert vulkan.message == (
        "the common part linux-common failed at compile: compile failed (exit code 1); "
        "build.log in the job folder says why"
    )
    record = json.loads((tmp_path / "out3" / "linux-vulkan" / "build.json").read_text())
    assert record["failed_step"] == "common" and record["error"]["message"] == vulkan.message
    assert failed.state == "blocked" and "linux-vulkan at build" in failed.message
