"""The installed `rockbuild` command, run as users run it: exit codes, one-line errors, formats, imports, workflows."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from rockbuild import __version__

STAGES = ["matrix", "fetch", "rocm", "build", "bundle", "audit", "smoke", "publish", "nightly", "doctor", "install"]


def test_version(run_rockbuild):
    result = run_rockbuild("--version")
    assert result.returncode == 0 and __version__ in result.stdout


def test_help_lists_every_stage_in_pipeline_order(run_rockbuild):
    result = run_rockbuild("--help")
    assert result.returncode == 0
    positions = [result.stdout.index(f"  {stage} ") for stage in STAGES]
    assert positions[:6] == sorted(positions[:6])


def test_no_stage_is_a_stub_any_more(run_rockbuild):
    result = run_rockbuild("--help")
    assert result.returncode == 0 and "not implemented yet" not in result.stdout


def test_help_does_not_import_heavy_modules():
    """`rockbuild --help` (and so every command's start) must stay fast: no requests, PyGithub, jinja2 or elftools
    behind it, and no stage's reader of a data file (rockbuild.settings imports each the first time a command asks
    for its file): those took 200 of the CLI's 320 ms of imports."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import sys; from rockbuild.cli import main; main(['--help'])"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "rockbuild.cli" in imported
    for heavy in ("requests", "github", "jinja2", "elftools"):
        assert not any(m == heavy or m.startswith(heavy + ".") for m in imported), f"--help imported {heavy}"
    readers = (
        "rockbuild.matrix",
        "rockbuild.core.records",
        "rockbuild.core.programs",
        "rockbuild.bundle.policy",
        "rockbuild.llamacpp.patches",
        "rockbuild.publish.config",
        "rockbuild.rocm.channels",
        "rockbuild.smoke.config",
        "rockbuild.smoke.numerics",
    )
    assert sorted(imported.intersection(readers)) == []


def test_matrix_table_json_and_github(run_rockbuild, tmp_path):
    table = run_rockbuild("matrix")
    assert table.returncode == 0 and "linux-gfx1151" in table.stdout and "28 jobs" in table.stdout  # 2 common parts

    as_json = json.loads(run_rockbuild("matrix", "--format", "json", "--os", "linux").stdout)
    assert [j["id"] for j in as_json][:3] == ["linux-common", "linux-gfx1151", "linux-gfx1150"]
    assert all(j["os"] == "linux" for j in as_json)
    assert json.loads(run_rockbuild("matrix", "--json", "--os", "linux").stdout) == as_json
    both = run_rockbuild("matrix", "--json", "--format", "github")
    assert both.returncode == 2 and both.stderr.startswith("error: --json and --format github ask for two outputs")

    out = tmp_path / "gh_output"
    result = run_rockbuild("matrix", "--format", "github", env={"GITHUB_OUTPUT": str(out)})
    assert result.returncode == 0
    printed = json.loads(result.stdout)
    assert len(printed["include"]) >= 18
    written = out.read_text().splitlines()
    assert written == ["matrix=" + json.dumps(printed, separators=(",", ":"))]


def test_matrix_takes_the_seed_dispatch_inputs(run_rockbuild):
    result = run_rockbuild("matrix", "--format", "json", "--os", "windows,ubuntu", "--target", "gfx1151,gfx110X")
    ids = [j["id"] for j in json.loads(result.stdout)]
    assert ids == [
        "windows-common",
        "linux-common",
        "windows-gfx1151",
        "windows-gfx110X",
        "linux-gfx1151",
        "linux-gfx110X",
    ]


def test_matrix_only_with_braces(run_rockbuild):
    result = run_rockbuild("matrix", "--format", "json", "--only", "linux-gfx11{50,51}")
    assert [j["id"] for j in json.loads(result.stdout)] == ["linux-common", "linux-gfx1151", "linux-gfx1150"]


def test_config_error_is_one_line_exit_2_and_traceback_only_with_debug(run_rockbuild, write):
    path = write("m.yaml", "matrix:\n  os: [linux]\n  target: [gfx1160]\n")
    result = run_rockbuild("matrix", "-c", str(path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: {path}:3: unknown GPU family")
    assert result.stdout == ""
    debug = run_rockbuild("--debug", "matrix", "-c", str(path))
    assert debug.returncode == 2 and "Traceback" in debug.stderr and "ConfigError" in debug.stderr


def test_click_usage_errors_exit_2(run_rockbuild):
    result = run_rockbuild("matrix", "--format", "yaml")
    assert result.returncode == 2 and "Invalid value" in result.stderr


def test_python_dash_m_works(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "rockbuild", "--version"], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0 and __version__ in result.stdout


def _actionlint() -> str:
    exe = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which("actionlint")
    if not exe:
        pytest.fail("actionlint is not installed; it comes with the test extra: pip install '.[test]'")
    return exe


@pytest.mark.parametrize("workflow", ["ci.yml", "nightly.yml"])
def test_workflows_pass_actionlint(workflow):
    path = REPO / ".github" / "workflows" / workflow
    result = subprocess.run([_actionlint(), "-no-color", str(path)], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_nightly_workflow_keeps_the_seed_dispatch_inputs_and_schedule():
    import yaml

    wf = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    on = wf[True]  # PyYAML reads the bare key `on` as a boolean
    inputs = on["workflow_dispatch"]["inputs"]
    assert inputs["operating_systems"]["default"] == "windows,ubuntu"
    # the seed's targets, and the Vulkan flavour (a manual night without it would publish a release without Vulkan)
    assert inputs["gfx_target"]["default"] == "gfx1151,gfx1150,gfx120X,gfx110X,gfx103X,gfx90a,gfx908,vulkan"
    assert inputs["rocm_version"]["default"] == "latest" and inputs["llamacpp_version"]["default"] == "latest"
    assert inputs["create_release"]["type"] == "boolean" and inputs["create_release"]["default"] is True
    assert on["schedule"] == [{"cron": "0 13 * * *"}]
    assert set(wf["jobs"]) == {"prepare", "common", "build", "gpu-smoke", "publish", "attest-images", "alert"}
    assert wf["jobs"]["build"]["strategy"]["matrix"] == "${{ fromJson(needs.prepare.outputs.matrix) }}"
    assert {wf["jobs"]["build"]["runs-on"]} == {"${{ matrix.runner }}"}


def test_every_nightly_leg_is_a_mode_of_rockbuild_nightly_and_an_unchanged_night_starts_no_build():
    """One night, one code path (issue 18): prepare plans, each build leg runs one job, publish releases; the
    only other rockbuild calls are the informational runner smoke (matrix `runner_smoke: informational`) and the
    alert."""
    import re

    import yaml

    wf = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    jobs = wf["jobs"]

    def rockbuild_calls(job: str) -> list[str]:
        calls = []
        for step in jobs[job]["steps"]:
            for line in str(step.get("run", "")).splitlines():
                if re.match(r"\s*rockbuild\s", line):
                    calls.append(" ".join(line.split()[:3]))
        return calls

    # the plan, and llama-server's web UI built once for every leg (issue 27): never gating, handed on as an artifact
    assert rockbuild_calls("prepare") == ["rockbuild nightly --plan", "rockbuild webui --inputs"]
    webui = next(s for s in jobs["prepare"]["steps"] if s.get("id") == "webui")
    assert webui["continue-on-error"] is True and webui["if"] == "steps.plan.outputs.changed == 'true'"
    upload = next(s for s in jobs["prepare"]["steps"] if s.get("with", {}).get("name") == "webui")
    assert upload["if"] == "steps.webui.outcome == 'success'"
    download = next(s for s in jobs["build"]["steps"] if s.get("with", {}).get("name") == "webui")
    assert download["continue-on-error"] is True
    leg = next(s for s in jobs["build"]["steps"] if "rockbuild nightly --job" in str(s.get("run", "")))
    assert "--web-ui webui" in leg["run"]
    assert rockbuild_calls("build") == ["rockbuild nightly --job", 'rockbuild smoke "out/$JOB_ID"']
    # each OS's common part (issue 41): a leg of its own before the build legs, which take it as an artifact
    assert rockbuild_calls("common") == ["rockbuild nightly --job"]
    assert jobs["common"]["strategy"]["matrix"] == "${{ fromJson(needs.prepare.outputs.common_matrix) }}"
    assert jobs["build"]["needs"] == ["prepare", "common"] and jobs["build"]["if"].startswith("!cancelled()")
    runner_smoke = next(s for s in jobs["build"]["steps"] if "rockbuild smoke" in str(s.get("run", "")))
    assert runner_smoke["if"] == "matrix.runner_smoke == 'informational'" and runner_smoke["continue-on-error"] is True
    assert "runner-smoke/smoke.json" in runner_smoke["run"]
    # the release's container images (issue 42): made by the same two calls (the dry run's manifest.json, which is
    # attested, names their digests), tested with podman and pushed by `nightly --release` before it publishes
    assert rockbuild_calls("publish") == ["rockbuild publish --dry-run", "rockbuild nightly --release"]
    files_step = next(s for s in jobs["publish"]["steps"] if s.get("name") == "Make the release files")
    release_step = next(s for s in jobs["publish"]["steps"] if s.get("name") == "Publish the release")
    assert '--images "ghcr.io/${REPO,,}" --no-image-test' in files_step["run"]
    assert '--images "ghcr.io/${REPO,,}"' in release_step["run"] and "--no-image-test" not in release_step["run"]
    steps_before = [s.get("name") for s in jobs["publish"]["steps"]]
    assert steps_before.index("podman and the images' base packages") < steps_before.index("Make the release files")
    assert jobs["publish"]["outputs"] == {"images": "${{ steps.release.outputs.images }}"}
    # each pushed image's provenance, from the digests `nightly --release` wrote into $GITHUB_OUTPUT
    attest_images = jobs["attest-images"]
    assert attest_images["needs"] == "publish" and "needs.publish.outputs.images != '[]'" in attest_images["if"]
    assert attest_images["strategy"]["matrix"]["include"] == "${{ fromJson(needs.publish.outputs.images) }}"
    provenance = next(
        s for s in attest_images["steps"] if str(s.get("uses", "")).startswith("actions/attest-build-provenance@")
    )
    assert provenance["with"] == {
        "subject-name": "${{ matrix.name }}",
        "subject-digest": "${{ matrix.digest }}",
        "push-to-registry": True,
    }
    assert attest_images["permissions"] == {"packages": "write", "id-token": "write", "attestations": "write"}
    assert "attest-images" in jobs["alert"]["needs"]
    assert rockbuild_calls("alert") == ["rockbuild alert --repo"]
    plan = next(s for s in jobs["prepare"]["steps"] if s.get("id") == "plan")
    assert jobs["prepare"]["outputs"] == {
        "matrix": "${{ steps.plan.outputs.matrix }}",
        "common_matrix": "${{ steps.plan.outputs.common_matrix }}",
        "common": "${{ steps.plan.outputs.common }}",
        "changed": "${{ steps.plan.outputs.changed }}",
        "gpu_matrix": "${{ steps.plan.outputs.gpu_matrix }}",
        "gpu": "${{ steps.plan.outputs.gpu }}",
    }
    assert "--inputs inputs.json" in plan["run"]
    # an unchanged night: `changed` is false, so neither a build leg nor publish starts
    assert jobs["build"]["if"] == (
        "!cancelled() && needs.prepare.result == 'success' && needs.prepare.outputs.changed == 'true'"
    )
    assert jobs["common"]["if"] == ("needs.prepare.outputs.changed == 'true' && needs.prepare.outputs.common == 'true'")
    assert "needs.prepare.outputs.changed == 'true'" in jobs["publish"]["if"]
    # the GPU legs (issue 19): only the matrix's gpu_smoke jobs, on their own runners, before publish
    gpu = jobs["gpu-smoke"]
    assert rockbuild_calls("gpu-smoke") == ['rockbuild smoke "out/$JOB_ID"']
    smoke_step = next(s for s in gpu["steps"] if "rockbuild smoke" in str(s.get("run", "")))
    assert "--expect-gpu yes --bench gpu --report" in smoke_step["run"]
    assert "needs.prepare.outputs.gpu == 'true'" in gpu["if"] and gpu["runs-on"] == "${{ matrix.gpu_runner }}"
    assert gpu["continue-on-error"] == "${{ !matrix.gpu_required }}"
    assert "gpu-smoke" in jobs["publish"]["needs"]
    # every published asset gets GitHub's build provenance (rockbuild install verifies it with gh)
    assert jobs["publish"]["permissions"] == {
        "contents": "write",
        "id-token": "write",
        "attestations": "write",
        "packages": "write",  # the images go to ghcr.io
        "actions": "write",
    }  # a held-back night dispatches itself again
    attest = next(
        s for s in jobs["publish"]["steps"] if str(s.get("uses", "")).startswith("actions/attest-build-provenance@")
    )
    # every asset (the .deb and SHA256SUMS too) is attested before the release is published (issue 28, item 9)
    for subject in ("zip", "tar.gz", "deb", "cdx.json"):
        assert f"out/release/*/llama-*.{subject}" in attest["with"]["subject-path"]
    assert "out/release/*/SHA256SUMS" in attest["with"]["subject-path"]
    steps = [s.get("name") for s in jobs["publish"]["steps"]]
    assert (
        steps.index("Make the release files")
        < steps.index("Attest the assets' build provenance")
        < steps.index("Publish the release")
    )


def test_ci_run_calls_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    found = re.search(r"&& (\.venv/bin/pytest[^#\n]*?)\s*(#|$)", readme, re.MULTILINE)
    assert found, "the README's quick start has no test command"
    assert found.group(1) in [line.strip() for line in ci.splitlines()], f".ci/run does not run {found.group(1)!r}"


@pytest.mark.parametrize(
    "args, says",
    [
        (["fetch", "--bogus"], "No such option '--bogus'"),
        (["fetch", "--os", "macos"], "Invalid value for '--os'"),
        (["bundle"], "Missing argument"),
        (["no-such-command"], "No such command 'no-such-command'"),
    ],
)
def test_usage_errors_are_one_line_naming_the_help(run_rockbuild, args, says):
    result = run_rockbuild(*args)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: ") and says in result.stderr and "--help')" in result.stderr


def test_a_group_alone_still_shows_its_help(run_rockbuild):
    result = run_rockbuild("rocm")
    assert "Usage: rockbuild rocm" in result.stdout + result.stderr and "error:" not in result.stderr


@pytest.mark.parametrize(
    ("runner_os", "vk", "runner_smoke", "expect"),
    [
        ("Linux", "0", "gate", ["--model", "smollm2"]),
        ("Linux", "", "gate", []),
        ("Windows", "", "gate", []),
        ("Windows", "", "", []),
        ("Windows", "", "informational", ["--no-smoke"]),
    ],
)
def test_the_linux_vulkan_leg_smokes_the_real_model(tmp_path, runner_os, vk, runner_smoke, expect):
    """Issue 26: lavapipe runs the numerics step in CI's Vulkan leg, on SmolLM2 (known answers, a measured floor);
    the ROCm legs keep the pinned Qwen3-0.6B. Issue 29: a Windows leg runs the gated CPU smoke too, unless the
    matrix says `runner_smoke: informational`. The leg's own script, run by bash."""
    import yaml

    wf = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    leg = next(s for s in wf["jobs"]["build"]["steps"] if "rockbuild nightly --job" in str(s.get("run", "")))
    assert leg["env"]["GGML_VK_VISIBLE_DEVICES"] == (
        "${{ matrix.backend == 'vulkan' && runner.os == 'Linux' && '0' || '' }}"
    )
    assert leg["env"]["RUNNER_SMOKE"] == "${{ matrix.runner_smoke }}"
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "rockbuild").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    (shim / "rockbuild").chmod(0o755)
    env = {
        "PATH": f"{shim}:/usr/bin:/bin",
        "RUNNER_OS": runner_os,
        "GGML_VK_VISIBLE_DEVICES": vk,
        "JOB_ID": "linux-vulkan",
        "ARGS_OUT": str(tmp_path / "args"),
        "RUNNER_SMOKE": runner_smoke,
    }
    subprocess.run(["bash", "-euo", "pipefail", "-c", leg["run"]], cwd=tmp_path, env=env, check=True, timeout=30)
    args = (tmp_path / "args").read_text().split()
    assert args[:3] == ["nightly", "--job", "linux-vulkan"]
    assert args[9:] == expect


def test_a_build_leg_takes_its_common_part_as_the_common_leg_packed_it(tmp_path):
    """Issue 41: the common leg packs its build (modes and links kept: an artifact keeps neither), the build leg
    unpacks it and passes --common; the workflow's own scripts, run by bash."""
    import yaml

    wf = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    pack = next(s for s in wf["jobs"]["common"]["steps"] if s.get("name") == "Pack the common part")
    unpack = next(s for s in wf["jobs"]["build"]["steps"] if s.get("name") == "The common part ${{ matrix.common }}")
    leg = next(s for s in wf["jobs"]["build"]["steps"] if "rockbuild nightly --job" in str(s.get("run", "")))
    runner = tmp_path / "common-runner"
    bin_dir = runner / "out" / "linux-common" / "build" / "bin"
    bin_dir.mkdir(parents=True)
    (runner / "out" / "linux-common" / "build.json").write_text("{}")
    (runner / "out" / "linux-common" / "build" / "CMakeCache.txt").write_text("not shipped")
    (bin_dir / "llama-cli").write_text("#!/bin/sh\n")
    (bin_dir / "llama-cli").chmod(0o755)
    (bin_dir / "libllama.so.0").write_text("elf")
    (bin_dir / "libllama.so").symlink_to("libllama.so.0")
    bash = ["bash", "-euo", "pipefail", "-c"]
    env = {"PATH": "/usr/bin:/bin", "JOB_ID": "linux-common"}
    subprocess.run([*bash, pack["run"]], cwd=runner, env=env, check=True, timeout=30)
    leg_dir = tmp_path / "build-runner"
    (leg_dir / "common-part").mkdir(parents=True)
    shutil.copy(runner / "linux-common.tar", leg_dir / "common-part" / "linux-common.tar")  # the artifact
    subprocess.run([*bash, unpack["run"]], cwd=leg_dir, env={**env, "COMMON": "linux-common"}, check=True, timeout=30)
    got = leg_dir / "common-part" / "linux-common"
    assert (got / "build" / "bin" / "llama-cli").stat().st_mode & 0o111
    assert os.readlink(got / "build" / "bin" / "libllama.so") == "libllama.so.0"
    assert (got / "build.json").is_file() and not (got / "build" / "CMakeCache.txt").exists()
    # no artifact (the common leg failed before packing): an empty folder, whose missing build.json the leg reports
    subprocess.run(
        [*bash, unpack["run"]], cwd=tmp_path, env={**env, "COMMON": "windows-common"}, check=True, timeout=30
    )
    assert (tmp_path / "common-part" / "windows-common").is_dir()
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "rockbuild").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    (shim / "rockbuild").chmod(0o755)
    subprocess.run(
        [*bash, leg["run"]],
        cwd=leg_dir,
        check=True,
        timeout=30,
        env={
            "PATH": f"{shim}:/usr/bin:/bin",
            "RUNNER_OS": "Linux",
            "GGML_VK_VISIBLE_DEVICES": "",
            "JOB_ID": "linux-gfx1151",
            "ARGS_OUT": str(tmp_path / "args"),
            "RUNNER_SMOKE": "gate",
            "COMMON": "linux-common",
        },
    )
    assert (tmp_path / "args").read_text().split()[-2:] == ["--common", "common-part/linux-common"]


@pytest.mark.parametrize("event", ["schedule", "workflow_dispatch"])
def test_a_held_back_night_dispatches_itself_again_and_its_plan_takes_the_record(tmp_path, event):
    """regressions.ship: newest-good in the CI fan-out: the publish job dispatches the workflow again with the
    commit before the first bad one and held-back.json; that run's plan passes it on with --held-back (the two
    steps' own scripts, run by bash with rockbuild and gh stand-ins)."""
    import yaml

    wf = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    assert "held_back" in wf[True]["workflow_dispatch"]["inputs"]
    again = next(
        s
        for s in wf["jobs"]["publish"]["steps"]
        if s.get("name") == "Run the night again from the newest good llama.cpp commit"
    )
    assert again["if"] == "steps.release.outputs.held_back_ref != ''"
    shim = tmp_path / "bin"
    shim.mkdir()
    for tool in ("gh", "rockbuild"):
        (shim / tool).write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT.{tool}"\n')
        (shim / tool).chmod(0o755)
    record = '{"tip": "c", "good": {"commit": "b"}, "first_bad": {"commit": "d"}}'
    (tmp_path / "held-back.json").write_text(record + "\n")
    dispatched = {
        "schedule": {"OSES": "", "TARGETS": ""},
        "workflow_dispatch": {"OSES": "ubuntu", "TARGETS": "gfx1151"},
    }[event]
    env = {
        "PATH": f"{shim}:/usr/bin:/bin",
        "ARGS_OUT": str(tmp_path / "args"),
        "EVENT": event,
        "REF": "b",
        "HELD_BACK": str(tmp_path / "held-back.json"),
        "ROCM_VERSION": "latest",
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_REF_NAME": "main",
        **dispatched,
    }
    subprocess.run(["bash", "-euo", "pipefail", "-c", again["run"]], cwd=tmp_path, env=env, check=True, timeout=30)
    gh = (tmp_path / "args.gh").read_text().splitlines()
    assert gh[:3] == ["workflow", "run", "nightly.yml"] and "llamacpp_version=b" in gh
    assert f"held_back={record}" in gh
    assert f"operating_systems={dispatched['OSES']}" in gh and f"gfx_target={dispatched['TARGETS']}" in gh

    # the dispatched run's plan: the record to a file, --held-back, and the whole matrix when the axes are empty
    plan = next(s for s in wf["jobs"]["prepare"]["steps"] if s.get("id") == "plan")
    env = {
        "PATH": f"{shim}:/usr/bin:/bin",
        "ARGS_OUT": str(tmp_path / "args"),
        "EVENT": "workflow_dispatch",
        "LLAMA_REF": "b",
        "HELD_BACK": record,
        "RELEASE": "true",
        "REPO": "o/r",
        "ROCM_VERSION": "latest",
        **dispatched,
    }
    subprocess.run(["bash", "-euo", "pipefail", "-c", plan["run"]], cwd=tmp_path, env=env, check=True, timeout=30)
    args = (tmp_path / "args.rockbuild").read_text().splitlines()
    assert args[:2] == ["nightly", "--plan"] and args[args.index("--held-back") + 1] == "held-back.json"
    assert ("--os" in args) == (event == "workflow_dispatch") and args[args.index("--llama-ref") + 1] == "b"
    assert (tmp_path / "held-back.json").read_text() == record + "\n"
