"""The job folder and the one stage runner: reuse, recording, events and failures the same way for every stage."""

from __future__ import annotations

import json

from rockbuild.core.errors import BuildError, NotFoundError
from rockbuild.core.jobs import Job
from rockbuild.core.records import BuildErrorInfo, BuildRecord, LlamaCpp
from rockbuild.jobfolder import JobFolder
from rockbuild.pipeline.stages import Stage, StageLog, fingerprint, run_stages

JOB = Job(
    id="linux-gfx1151",
    os="linux",
    name="gfx1151",
    family="gfx1151",
    group="gfx1151",
    legacy_groups=(),
    targets=("gfx1151",),
    required=True,
    llama_ref="master",
    rocm_channel="nightly",
    rocm_version="latest",
    cmake=(),
    runner="ubuntu-22.04",
)


def stages(log: list[str], *, fail: str | None = None, gone: str | None = None):
    def make(name: str):
        def run():
            log.append(name)
            if name == fail:
                raise BuildError(f"{name} broke")
            return {"made": name}

        return lambda: Stage(name, fingerprint(name, 1), run, reusable=lambda entry: entry.get("made") != gone)

    return [make("fetch"), make("build"), make("bundle"), lambda: Stage("smoke", skip=True)]


def test_a_second_run_reuses_every_passed_stage_and_redoes_what_is_gone(tmp_path):
    folder = JobFolder.of(tmp_path, JOB.id)
    ran: list[str] = []
    events: list[tuple[str, str]] = []
    first = run_stages(JOB.id, True, folder, stages(ran), on_event=lambda j, s, e: events.append((s, e)))
    assert first.status == "ok" and ran == ["fetch", "build", "bundle"]
    assert first.stages == {"fetch": "done", "build": "done", "bundle": "done", "smoke": "skipped"}
    assert events[:2] == [("fetch", "start"), ("fetch", "done")]
    night = json.loads(folder.stages_json.read_text())
    assert night["job"] == JOB.id and night["stages"]["build"]["result"] == "ok"
    assert night["stages"]["build"]["made"] == "build"

    ran.clear()
    second = run_stages(JOB.id, True, folder, stages(ran, gone="build"))
    assert ran == ["build"] and second.stages["fetch"] == "reused" and second.stages["build"] == "done"


def test_a_failure_is_recorded_and_stops_the_job_without_raising(tmp_path, capsys):
    folder = JobFolder.of(tmp_path, JOB.id)
    ran: list[str] = []
    outcome = run_stages(JOB.id, True, folder, stages(ran, fail="build"))
    assert outcome.status == "failed" and outcome.failed_stage == "build" and outcome.message == "build broke"
    assert ran == ["fetch", "build"] and "bundle" not in outcome.stages
    assert StageLog(folder).stages["build"] == {
        "key": fingerprint("build", 1),
        "result": "failed",
        "seconds": StageLog(folder).stages["build"]["seconds"],
        "message": "build broke",
    }
    assert "linux-gfx1151: build failed: build broke" in capsys.readouterr().err
    # the failed stage runs again next time; the passed one before it does not
    ran.clear()
    assert run_stages(JOB.id, True, folder, stages(ran)).status == "ok" and ran == ["build", "bundle"]


def test_job_folder_records_a_failure_before_the_build(tmp_path):
    folder = JobFolder.of(tmp_path, JOB.id)
    assert folder.path == tmp_path.absolute() / JOB.id and folder.id == JOB.id
    assert (folder.bundle_json, folder.bin_dir) == (
        folder.path / "bundle" / "bundle.json",
        folder.path / "build" / "bin",
    )
    folder.record_failure(
        JOB,
        "rocm",
        BuildErrorInfo.of(NotFoundError("no tarball for gfx1151")),
        LlamaCpp(commit="c0ffee", build_number="b1"),
    )
    build = folder.build()
    assert build is not None and build.status == "failed" and build.failed_step == "rocm"
    assert build.llama_cpp == LlamaCpp(commit="c0ffee", build_number="b1") and build.job.id == JOB.id
    # the same `error` as the build driver's: message, hint, exit code, type (it was a bare string)
    assert json.loads(folder.build_json.read_text())["error"] == {
        "message": "no tarball for gfx1151",
        "hint": None,
        "exit_code": 4,
        "type": "NotFoundError",
    }
    assert folder.build_log.read_text().endswith("failed at rocm\nno tarball for gfx1151\n")
    assert not folder.built_from("c0ffee")

    folder.write_build(
        BuildRecord.from_dict(
            {"schema": 1, "status": "ok", "llama_cpp": {"commit": "c0ffee"}, "rocm": {"version": "7.2"}}
        )
    )
    assert not folder.built_from("c0ffee")  # no programs left
    folder.bin_dir.mkdir(parents=True)
    assert folder.built_from("c0ffee") and not folder.built_from("other")


def test_a_job_folder_from_before_the_rename_resumes_from_its_night_json(tmp_path):
    """Issue 40: the stage log is stages.json; a folder a night of an older rockbuild left keeps its night.json (the
    same record): read, its passed stages reused, then replaced by stages.json."""
    folder = JobFolder.of(tmp_path, JOB.id)
    run_stages(JOB.id, True, folder, stages([]))
    folder.stages_json.rename(folder.legacy_stages_json)
    ran: list[str] = []
    again = run_stages(JOB.id, True, folder, stages(ran, gone="bundle"))
    assert ran == ["bundle"] and again.stages["build"] == "reused"
    assert folder.stages_json.is_file() and not folder.legacy_stages_json.exists()
    assert folder.stages() is not None and folder.stages().stages["fetch"].result == "ok"
