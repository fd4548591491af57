"""``out/<job-id>/``: every path and file of one job, in one place.

The stages write here and publish, alert, doctor and the next night read here; none of them spells a file name of
the folder itself::

    out/<job-id>/build.json   what was built (the build driver; a failure before it: :meth:`JobFolder.record_failure`)
                 build.log    every command and its output
                 build/bin/   the compiled programs and libraries
                 bundle/      the self-contained folder (+ bundle/bundle.json, the bundle's own record and audit)
                 bundle.log   why the bundle could not be made
                 smoke.json   the smoke test's report (+ smoke-logs/)
                 gpu-smoke.json  the smoke test on a real GPU, with the release's llama-bench figures (CI's GPU leg)
                 night.json   each stage's input fingerprint and result, (:class:`rockbuild.nightly.stages.JobState`)
                 fallback.json  the newest ROCm failed and the job ran on its group's last good one: what failed, why
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rockbuild.core.data import read_json_object, write_json_atomic

from . import __version__

if TYPE_CHECKING:
    from rockbuild.core.jobs import Job

BUILD_SCHEMA = 1


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
    bundle_dir = _At("bundle")
    bundle_json = _At("bundle", "bundle.json")
    bundle_log = _At("bundle.log")
    smoke_json = _At("smoke.json")
    gpu_smoke_json = _At("gpu-smoke.json")  # the CI's GPU leg: rockbuild smoke --expect-gpu yes --bench gpu
    night_json = _At("night.json")
    fallback_json = _At("fallback.json")  # the night's retry on the last good ROCm (rockbuild.nightly.run)

    def create(self) -> JobFolder:
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    # -- records ------------------------------------------------------------------------------------------------------
    def build(self) -> dict[str, Any] | None:
        """build.json, or None when missing or unreadable."""
        return read_json_object(self.build_json)

    def bundle_meta(self) -> dict[str, Any] | None:
        return read_json_object(self.bundle_json)

    def smoke(self) -> dict[str, Any] | None:
        return read_json_object(self.smoke_json)

    def gpu_smoke(self) -> dict[str, Any] | None:
        return read_json_object(self.gpu_smoke_json)

    def fallback(self) -> dict[str, Any] | None:
        return read_json_object(self.fallback_json)

    def built_from(self, commit: str) -> bool:
        """A successful build of ``commit`` whose programs are still here."""
        build = self.build() or {}
        return (build.get("status") == "ok" and (build.get("llama_cpp") or {}).get("commit") == commit
                and self.bin_dir.is_dir())

    def write_build(self, data: dict[str, Any]) -> Path:
        return write_json_atomic(self.build_json, data)

    def record_failure(self, job: Job, step: str, message: str, llama: dict[str, Any] | None = None) -> None:
        """build.json and build.log for a job that failed before the build driver ran, so publish and alert see it.
        ``llama``: the night's pinned commit and build number."""
        self.create()
        self.build_log.write_text(f"rockbuild {__version__}: {job.id} failed at {step}\n{message}\n", encoding="utf-8")
        now = datetime.now(UTC).isoformat(timespec="seconds")
        self.write_build({
            "schema": BUILD_SCHEMA, "rockbuild_version": __version__, "status": "failed", "failed_step": step,
            "job": job.to_dict(), "gpu_targets": list(job.targets), "error": message, "llama_cpp": llama,
            "rocm": None, "paths": {"job_dir": str(self.path), "log": str(self.build_log)}, "started": now,
            "finished": now,
        })

    def record_tarball(self, tarball: dict[str, Any] | None) -> None:
        """Put the ROCm tarball's name and sha256 into build.json (the driver saw only a ROCm folder): the release
        notes, manifest.json and the next night's unchanged check read them."""
        data = self.build()
        if data is None or tarball is None:
            return
        rocm = data.get("rocm")
        data["rocm"] = {**(rocm if isinstance(rocm, dict) else {}), "tarball": tarball}
        self.write_build(data)
