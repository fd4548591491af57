"""``out/<job-id>/``: every path and file of one job, in one place.

The stages write here and publish, alert, doctor and the next night read here; none of them spells a file name of
the folder itself::

    out/<job-id>/build.json   what was built (the build driver; a failure before it: :meth:`JobFolder.record_failure`)
                 build.log    every command and its output
                 build/bin/   the compiled programs and libraries
                 bin/         a job built on its OS's common part: that part's programs and libraries + the job's own
                              library (rockbuild.llamacpp.common_part); the bundle step reads it instead of build/bin
                 bundle/      the self-contained folder (+ bundle/bundle.json, the bundle's own record and audit)
                 bundle.log   why the bundle could not be made
                 smoke.json   the smoke test's report (+ smoke-logs/)
                 gpu-smoke.json  the smoke test on a real GPU, with the release's llama-bench figures (CI's GPU leg)
                 stages.json  each stage's input fingerprint and result, (:class:`rockbuild.pipeline.stages.StageLog`)
                 fallback.json  the newest ROCm failed and the job ran on its group's last good one: what failed, why
                 triage.json  the job failed: which input broke it (llama.cpp, ROCm, the machine), the builds that
                              showed it, the llama.cpp bisect (rockbuild.nightly.triage)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rockbuild.core.records import (
    BUILD_SCHEMA,
    BuildErrorInfo,
    BuildPaths,
    BuildRecord,
    BundleRecord,
    FallbackRecord,
    LlamaCpp,
    SmokeRecord,
    StagesRecord,
    TriageRecord,
)

from . import __version__

if TYPE_CHECKING:
    from rockbuild.core.jobs import Job


class _At:
    """A path of the job folder, as a read-only attribute: ``folder.build_json`` is ``folder.path / "build.json"``."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, folder: JobFolder | None, owner: type) -> Path:
        if folder is None:
            raise AttributeError("a JobFolder path needs a folder")
        return folder.path.joinpath(*self.parts)


@dataclass(frozen=True)
class JobFolder:
    path: Path

    @classmethod
    def of(cls, out: Path | str, job_id: str) -> JobFolder:
        """The folder of ``job_id`` under the output folder ``out`` (made absolute: children change directory)."""
        return cls(Path(out).absolute() / job_id)

    @property
    def id(self) -> str:
        return self.path.name

    # -- paths (the layout in the module docstring) ---------------------------------------------------------------
    build_json = _At("build.json")
    build_log = _At("build.log")
    build_dir = _At("build")
    bin_dir = _At("build", "bin")
    assembled_dir = _At("bin")
    bundle_dir = _At("bundle")
    bundle_json = _At("bundle", "bundle.json")
    bundle_log = _At("bundle.log")
    smoke_json = _At("smoke.json")
    gpu_smoke_json = _At("gpu-smoke.json")  # the CI's GPU leg: rockbuild smoke --expect-gpu yes --bench gpu
    # the CI runner's smoke of a `runner_smoke: informational` job (an asset that cannot start there): never gates
    runner_smoke_json = _At("runner-smoke", "smoke.json")
    stages_json = _At("stages.json")
    legacy_stages_json = _At("night.json")  # the stage log's name before the rename (issue 40): read, then replaced
    fallback_json = _At("fallback.json")  # the night's retry on the last good ROCm (rockbuild.nightly.run)
    triage_json = _At("triage.json")  # which input broke the job, and the llama.cpp bisect (rockbuild.nightly.triage)

    def create(self) -> JobFolder:
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    # -- records (rockbuild.core.records): None when the file is missing, a RecordError when it is malformed -----
    def build(self) -> BuildRecord | None:
        return BuildRecord.read(self.build_json)

    def bundle_meta(self) -> BundleRecord | None:
        return BundleRecord.read(self.bundle_json)

    def smoke(self) -> SmokeRecord | None:
        return SmokeRecord.read(self.smoke_json)

    def gpu_smoke(self) -> SmokeRecord | None:
        return SmokeRecord.read(self.gpu_smoke_json)

    def runner_smoke(self) -> SmokeRecord | None:
        return SmokeRecord.read(self.runner_smoke_json)

    def stages(self) -> StagesRecord | None:
        """The stage log: stages.json, else a folder's from before the rename (night.json, the same record)."""
        record = StagesRecord.read(self.stages_json)
        if record is None:
            record = StagesRecord.read(self.legacy_stages_json)
        return record

    def fallback(self) -> FallbackRecord | None:
        return FallbackRecord.read(self.fallback_json)

    def triage(self) -> TriageRecord | None:
        return TriageRecord.read(self.triage_json)

    def programs_dir(self, build: BuildRecord | None = None) -> Path:
        """Where the job's programs and libraries are (``build``: its build.json, read when not given): bin/ for a
        job assembled on its OS's common part, else build/bin."""
        build = build if build is not None else self.build()
        return self.assembled_dir if build is not None and build.common is not None else self.bin_dir

    def built_from(self, commit: str) -> bool:
        """A successful build of ``commit`` whose programs are still here."""
        build = self.build()
        return build is not None and build.ok and build.commit == commit and self.programs_dir(build).is_dir()

    def write_build(self, record: BuildRecord) -> Path:
        """build.json: its one writer (the build driver's result, written once with the night's tarball in it, or
        :meth:`record_failure`)."""
        return record.write(self.build_json)

    def record_failure(self, job: Job, step: str, error: BuildErrorInfo, llama: LlamaCpp | None = None) -> None:
        """build.json and build.log for a job that failed before the build driver ran, so publish and alert see it.
        ``error``: what the driver would record (message, hint, exit code, type); ``llama``: the night's pinned commit
        and build number."""
        self.create()
        self.build_log.write_text(
            f"rockbuild {__version__}: {job.id} failed at {step}\n{error.message}\n", encoding="utf-8"
        )
        now = datetime.now(UTC).isoformat(timespec="seconds")
        self.write_build(
            BuildRecord(
                schema=BUILD_SCHEMA,
                rockbuild_version=__version__,
                status="failed",
                failed_step=step,
                error=error,
                job=job,
                gpu_targets=tuple(job.targets),
                llama_cpp=llama,
                rocm=None,
                paths=BuildPaths(job_dir=self.path, log=self.build_log),
                started=now,
                finished=now,
                keys=(
                    "schema",
                    "rockbuild_version",
                    "status",
                    "failed_step",
                    "error",
                    "job",
                    "gpu_targets",
                    "llama_cpp",
                    "rocm",
                    "paths",
                    "started",
                    "finished",
                ),
            )
        )
