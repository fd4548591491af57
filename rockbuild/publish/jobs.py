"""A job folder ``out/<job-id>/`` as the publisher sees it: what was built from what, and whether it may ship.

Read defensively: any of build.json, bundle/, bundle.json, smoke.json may be missing or written by an older rockbuild.
A job whose build failed, whose bundle is missing or failed its audit, or whose smoke test failed is *failed* (with
the step and the log tail for the alert); it is never an exception here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rockbuild.jobfolder import JobFolder
from rockbuild.process import log_tail
from rockbuild.rocm.names import parse_rocm_version, parse_tarball_name


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class RocmInfo:
    version: str | None  # TheRock's package version (10.2.0a20261128) when known, else the ROCm version
    date: str | None  # the nightly's date, YYYY-MM-DD
    therock_commit: str | None
    tarball: str | None
    tarball_sha256: str | None
    group: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "date": self.date, "therock_commit": self.therock_commit,
                "tarball": self.tarball, "tarball_sha256": self.tarball_sha256, "group": self.group}


def rocm_info(rocm: Mapping[str, Any]) -> RocmInfo:
    tarball = _dict(rocm.get("tarball"))
    name = parse_tarball_name(str(tarball.get("name") or "")) if tarball.get("name") else None
    version = rocm.get("package_version") or (name.version.text if name else None) or rocm.get("version")
    date = name.date.isoformat() if name is not None and name.date else None
    for text in (rocm.get("package_version"), rocm.get("version")):
        parsed = parse_rocm_version(str(text)) if text else None
        if date is None and parsed is not None and parsed.date is not None:
            date = parsed.date.isoformat()
    return RocmInfo(str(version) if version else None, date, rocm.get("therock_commit"),
                    tarball.get("name"), tarball.get("sha256"), tarball.get("group") or rocm.get("group"))


@dataclass(frozen=True)
class JobRecord:
    dir: Path
    id: str
    os: str  # linux | windows
    name: str  # family short name or single target: the asset name's <name>
    targets: tuple[str, ...]
    required: bool
    status: str  # ok | failed
    failed_step: str | None = None
    reason: str | None = None
    log: Path | None = None
    log_tail: tuple[str, ...] = ()
    llama_commit: str | None = None
    llama_build: str | None = None
    llama_commit_time: int | None = None  # the commit's date (Unix time), when git knew it
    rocm: RocmInfo = field(default_factory=lambda: RocmInfo(None, None, None, None, None, None))
    cmake: Mapping[str, str] = field(default_factory=dict)
    isas: tuple[str, ...] = ()  # GPU code really inside libggml-hip (audit), else the job's targets
    bundle: Path | None = None
    audit: Mapping[str, Any] | None = None
    smoke: Mapping[str, Any] | None = None
    finished: str | None = None
    backend: str = "rocm"  # rocm | vulkan: the flavour (a vulkan asset is llama-<tag>-<os>-vulkan-x64)
    gpu_runner: tuple[str, ...] = ()  # the matrix's gpu_smoke runner labels (none: no GPU smoke configured)
    gpu_required: bool = False
    gpu_smoke: Mapping[str, Any] | None = None  # gpu-smoke.json, when the GPU leg ran
    fallback: Mapping[str, Any] | None = None  # fallback.json: the newest ROCm failed, this ran on the last good one

    @property
    def file_name(self) -> str:
        """The name as it appears in asset, path and package names: a mixed-GPU job's ``gfx1151+gfx1201`` becomes
        ``gfx1151-gfx1201`` (GitHub's upload API renames such characters; any but letters, digits, ``.``, ``_`` and
        ``-`` becomes ``-``)."""
        return "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in self.name)

    @property
    def flavour(self) -> str:
        from rockbuild.backends import get_backend

        return get_backend(self.backend).label

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def bench(self) -> list[dict[str, Any]]:
        return list((self.smoke or {}).get("bench") or [])

    def gpu_summary(self) -> dict[str, Any] | None:
        """What manifest.json says of the GPU smoke: verdict, GPU, driver, runner, and the llama-bench figures."""
        if self.gpu_smoke is None:
            return None
        bench = [b for b in self.gpu_smoke.get("bench") or [] if isinstance(b, dict)]
        host = _dict(self.gpu_smoke.get("host"))
        return {"ok": bool(self.gpu_smoke.get("ok")), "runner": list(self.gpu_runner),
                "gpu": next((str(b["gpu_info"]) for b in bench if b.get("gpu_info")), None),
                "backends": next((str(b["backends"]) for b in bench if b.get("backends")), None),
                "driver": host.get("driver"), "kernel": host.get("kernel"),
                "summary": _dict(self.gpu_smoke.get("gpu")).get("summary"),
                "bench": [{"test": b.get("test"), "tokens_per_second": b.get("tokens_per_second"),
                           "stddev": b.get("stddev")} for b in bench]}

    def smoke_summary(self) -> str:
        if self.smoke is None:
            return "not run"
        gpu = _dict(self.smoke.get("gpu"))
        placement = gpu.get("placement")
        verdict = {"gpu": self.flavour, "cpu": "CPU only", "partial": "partial offload"}.get(str(placement), "?")
        return f"{'passed' if self.smoke.get('ok') else 'FAILED'} ({verdict})"

    def fallback_summary(self) -> dict[str, Any] | None:
        """What manifest.json says of a fallback: the newest tarball that failed, where and why, and the release
        whose tarball was used instead."""
        if not self.fallback:
            return None
        newest = _dict(self.fallback.get("newest"))
        return {"newest": newest.get("name"), "newest_version": newest.get("version"),
                "newest_date": newest.get("date"), "failed_stage": self.fallback.get("failed_stage"),
                "reason": self.fallback.get("reason"),
                "last_good_release": _dict(self.fallback.get("last_good")).get("release")}

    def fallback_note(self) -> str | None:
        """``ROCm 10.1.0a20261128, newest 10.1.0a20261201 failed smoke: ...`` for the notes and the alert."""
        summary = self.fallback_summary()
        if summary is None:
            return None
        return (f"ROCm {self.rocm.version or '?'}, newest {summary['newest_version'] or summary['newest']} failed "
                f"{summary['failed_stage']}: {summary['reason']}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "os": self.os, "name": self.name, "backend": self.backend, "targets": list(self.targets),
                "required": self.required, "status": self.status, "failed_step": self.failed_step,
                "reason": self.reason, "llama_cpp": {"commit": self.llama_commit, "build_number": self.llama_build},
                "rocm": {**self.rocm.to_dict(), "fallback": self.fallback_summary()}, "isas": list(self.isas),
                "cmake": dict(self.cmake)}


def _isas(bundle_meta: Mapping[str, Any], targets: tuple[str, ...]) -> tuple[str, ...]:
    audit = _dict(bundle_meta.get("audit"))
    for fat in audit.get("fat_binaries") or []:
        if isinstance(fat, dict) and str(fat.get("file", "")).startswith(("libggml-hip", "ggml-hip")):
            found = tuple(str(t) for t in fat.get("targets") or ())
            if found:
                return found
    return targets


def _smoke_tail(smoke: Mapping[str, Any]) -> tuple[tuple[str, ...], Path | None]:
    for run in _dict(smoke.get("runs")).values():
        if isinstance(run, dict) and not run.get("ok"):
            return tuple(str(x) for x in run.get("log_tail") or ()), Path(run["log"]) if run.get("log") else None
    return (), None


def load_job(job_dir: Path, *, tail_lines: int = 40) -> JobRecord:
    """The job in ``job_dir`` (``out/<job-id>``), failed or not."""
    folder = JobFolder(Path(job_dir).absolute())
    job_dir, bundle_dir = folder.path, folder.bundle_dir
    build = folder.build()
    bundle_meta = folder.bundle_meta() or {}
    smoke = folder.smoke()
    gpu_smoke = folder.gpu_smoke()
    job = _dict((build or {}).get("job"))
    gpu_config = _dict(job.get("gpu_smoke"))
    job_id = str(job.get("id") or job_dir.name)
    os_name = str(job.get("os") or bundle_meta.get("platform") or job_id.split("-", 1)[0])
    name = str(job.get("name") or (job_id.split("-", 1)[1] if "-" in job_id else job_id))
    targets = tuple(str(t) for t in (job.get("targets") or (build or {}).get("gpu_targets")
                                     or bundle_meta.get("targets") or ()))
    # a build.json from before the field: the bundle's own record, else the job's name (linux-vulkan)
    backend = str(job.get("backend") or bundle_meta.get("backend") or ("vulkan" if name == "vulkan" else "rocm"))
    llama = _dict((build or {}).get("llama_cpp"))
    build_number = llama.get("build_number")
    common: dict[str, Any] = dict(
        dir=job_dir, id=job_id, os=os_name if os_name in ("linux", "windows") else "linux", name=name,
        targets=targets, required=bool(job.get("required", True)),
        llama_commit=llama.get("commit"), llama_build=str(build_number) if build_number is not None else None,
        llama_commit_time=llama["commit_time"] if isinstance(llama.get("commit_time"), int) else None,
        rocm=rocm_info(_dict((build or {}).get("rocm"))),
        cmake={str(k): str(v) for k, v in _dict((build or {}).get("cmake_definitions")).items()},
        isas=_isas(bundle_meta, targets), smoke=smoke, finished=(build or {}).get("finished"), backend=backend,
        gpu_runner=tuple(str(r) for r in gpu_config.get("runner") or ()),
        gpu_required=bool(gpu_config.get("required", False)), gpu_smoke=gpu_smoke, fallback=folder.fallback(),
    )
    build_log = Path(_dict((build or {}).get("paths")).get("log") or folder.build_log)

    def failed(step: str, reason: str, log: Path | None, tail: tuple[str, ...] | None = None) -> JobRecord:
        lines = tail if tail is not None else (tuple(log_tail(log, tail_lines)) if log else ())
        return JobRecord(**common, status="failed", failed_step=step, reason=reason, log=log,
                         log_tail=lines[-tail_lines:], bundle=bundle_dir if bundle_dir.is_dir() else None,
                         audit=_dict(bundle_meta.get("audit")) or None)

    if build is None and not bundle_dir.is_dir():
        return failed("build", f"no {folder.build_json.name} and no {bundle_dir.name}/ in {job_dir}", None)
    if build is not None and build.get("status") != "ok":
        step = str(build.get("failed_step") or "build")
        return failed(step, f"the build failed at step '{step}'", build_log)
    if not bundle_dir.is_dir():
        log = folder.bundle_log
        return failed("bundle", f"no {bundle_dir.name}/ folder: the bundle step did not run or failed",
                      log if log.exists() else None)
    audit = _dict(bundle_meta.get("audit"))
    if audit and audit.get("ok") is False:
        failures = [str(f) for f in audit.get("failures") or []]
        return failed("audit", "the bundle failed its audit: " + ("; ".join(failures[:3]) or "see bundle.json"),
                      folder.bundle_json, tuple(failures))
    if smoke is not None and smoke.get("ok") is False:
        failures = [str(f) for f in smoke.get("failures") or []]
        tail, smoke_log = _smoke_tail(smoke)
        return failed("smoke", "the smoke test failed: " + ("; ".join(failures[:3]) or "see smoke.json"), smoke_log,
                      tail or tuple(failures))
    if common["gpu_required"] and (gpu_smoke is None or gpu_smoke.get("ok") is not True):
        # the matrix says this asset ships only once it ran on a real GPU
        why = ("the GPU smoke test did not run (no gpu-smoke.json from the GPU leg)" if gpu_smoke is None else
               "the GPU smoke test failed: " + ("; ".join(str(f) for f in gpu_smoke.get("failures") or [])[:300]
                                                or "see gpu-smoke.json"))
        return failed("gpu-smoke", why, folder.gpu_smoke_json if gpu_smoke is not None else None)
    return JobRecord(**common, status="ok", bundle=bundle_dir, audit=audit or None)


def with_failure(job: JobRecord, step: str, reason: str) -> JobRecord:
    """``job`` marked failed by the publisher itself (e.g. a glibc floor above the configured one)."""
    from dataclasses import replace

    return replace(job, status="failed", failed_step=step, reason=reason, log_tail=(reason,))


