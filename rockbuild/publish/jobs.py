"""A job folder ``out/<job-id>/`` as the publisher sees it: what was built from what, and whether it may ship.

Read defensively: any of build.json, bundle/, bundle.json, smoke.json may be missing or written by an older rockbuild.
A job whose build failed, whose bundle is missing or failed its audit, or whose smoke test failed is *failed* (with
the step and the log tail for the alert); it is never an exception here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rockbuild.backends import get_backend
from rockbuild.core.errors import RecordError
from rockbuild.core.record import Record
from rockbuild.core.records import (
    AuditRecord,
    BenchFigure,
    BuildRecord,
    BuildRocm,
    BundleRecord,
    CommonPart,
    FailedJob,
    FallbackRecord,
    PatchSet,
    SmokeRecord,
    TriageRecord,
    WebUi,
)
from rockbuild.core.vocabulary import Os
from rockbuild.jobfolder import JobFolder
from rockbuild.process import log_tail
from rockbuild.rocm.names import parse_rocm_version, parse_tarball_name
from rockbuild.smoke.parse import cpu_variant_of


@dataclass(frozen=True)
class RocmInfo(Record):
    version: str | None  # TheRock's package version (10.2.0a20261128) when known, else the ROCm version
    date: str | None  # the nightly's date, YYYY-MM-DD
    therock_commit: str | None
    tarball: str | None
    tarball_sha256: str | None
    group: str | None


def rocm_info(rocm: BuildRocm | None) -> RocmInfo:
    rocm = rocm or BuildRocm()
    tarball = rocm.tarball
    tarball_name = tarball.name if tarball is not None else None
    name = parse_tarball_name(tarball_name) if tarball_name else None
    version = rocm.package_version or (name.version.text if name else None) or rocm.version
    date = name.date.isoformat() if name is not None and name.date else None
    for text in (rocm.package_version, rocm.version):
        parsed = parse_rocm_version(text) if text else None
        if date is None and parsed is not None and parsed.date is not None:
            date = parsed.date.isoformat()
    return RocmInfo(
        version or None,
        date,
        rocm.therock_commit,
        tarball_name,
        tarball.sha256 if tarball is not None else None,
        (tarball.group if tarball is not None else None) or rocm.group,
    )


def is_runner_path(value: str) -> bool:
    """An absolute path of the machine that built (a compiler in its cache, its ROCm root): never published."""
    return os.path.isabs(value) or bool(re.match(r"^[A-Za-z]:[\\/]", value))


def public_cmake(cmake: Mapping[str, str]) -> dict[str, str]:
    """A build's CMake definitions as a release states them: the runner's paths left out (the fingerprint of the
    inputs leaves them out too)."""
    return {k: v for k, v in sorted(cmake.items()) if not is_runner_path(v)}


@dataclass(frozen=True)
class BuiltJob:
    dir: Path
    id: str
    os: Os
    name: str  # family short name or single target: the asset name's <name>
    targets: tuple[str, ...]
    required: bool
    status: Literal["ok", "failed"]
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
    programs: tuple[str, ...] = ()  # the shipped programs' files (build.json), each run by the smoke
    programs_unavailable: tuple[str, ...] = ()  # listed optional programs the job's tree does not define (build.json)
    cpu_variants: tuple[str, ...] = ()  # the CPU backend variants in the bundle (libggml-cpu-<variant>.so)
    bundle: Path | None = None
    audit: AuditRecord | None = None
    smoke: SmokeRecord | None = None
    finished: str | None = None
    backend: str = "rocm"  # rocm | vulkan: the flavour (a vulkan asset is llama-<tag>-<os>-vulkan-x64)
    gpu_runner: tuple[str, ...] = ()  # the matrix's gpu_smoke runner labels (none: no GPU smoke configured)
    gpu_required: bool = False
    gpu_smoke: SmokeRecord | None = None  # gpu-smoke.json, when the GPU leg ran
    runner_smoke: SmokeRecord | None = None  # runner-smoke/smoke.json: the informational smoke on the CI runner
    fallback: FallbackRecord | None = None  # fallback.json: the newest ROCm failed, this ran on the last good one
    triage: TriageRecord | None = None  # triage.json: it failed; which input broke it, the llama.cpp bisect
    web_ui: WebUi | None = None  # build.json's web_ui: llama-server's chat page (None: not recorded)
    patches: PatchSet | None = None  # build.json's patches: the carried fixes (None: not recorded)
    compilers: Mapping[str, str] = field(default_factory=dict)  # build.json's: what compiled this job's own code
    common: CommonPart | None = None  # build.json's: the common part it was assembled from (None: built whole)

    @property
    def file_name(self) -> str:
        """The name as it appears in asset, path and package names: a mixed-GPU job's ``gfx1151+gfx1201`` becomes
        ``gfx1151-gfx1201`` (GitHub's upload API renames such characters; any but letters, digits, ``.``, ``_`` and
        ``-`` becomes ``-``)."""
        return "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in self.name)

    @property
    def flavour(self) -> str:
        return get_backend(self.backend).label

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def bench(self) -> tuple[BenchFigure, ...]:
        return self.smoke.bench if self.smoke is not None else ()

    @property
    def gpu_tested(self) -> bool:
        """The GPU smoke ran and passed."""
        return self.gpu_smoke is not None and self.gpu_smoke.ok

    def failure(self) -> FailedJob:
        """What manifest.json and ``rockbuild publish --json`` say of a job that failed: its id, whether it was
        required, the step and why."""
        values: dict[str, Any] = {
            "id": self.id,
            "required": self.required,
            "step": self.failed_step,
            "reason": self.reason,
        }
        triage = self.triage
        if triage is not None:  # which input broke it (a job without triage.json is written as before)
            bisect = triage.bisect
            first = bisect.first_bad if bisect is not None and bisect.complete else None
            values.update(
                cause=triage.cause, first_bad=first.to_dict() if first else None, last_release=triage.last_good_release
            )
        return FailedJob.from_dict(values, "a failed job")

    def blame_note(self) -> str | None:
        """What the notes say of a failed job's triage: the input at fault, the first bad llama.cpp commit, the release
        that last shipped the job (None: no triage)."""
        triage = self.triage
        if triage is None:
            return None
        words = {
            "llama.cpp": f"llama.cpp {(triage.llama_commit or '?')[:7]} broke it",
            "rocm": "the ROCm nightly broke it",
            "machine": "the machine broke it (the same inputs passed before)",
        }.get(triage.cause, "what broke it is not known")
        bisect = triage.bisect
        if bisect is not None and bisect.complete and bisect.first_bad is not None:
            first = bisect.first_bad
            words += f": first bad commit {first.commit[:7]}" + (f" (#{first.pr})" if first.pr else "")
        if triage.last_good_release and self.missing:
            words += f"; its last build is in release {triage.last_good_release}"
        return words

    @property
    def missing(self) -> bool:
        """A failed job the night ships as missing (llama.cpp broke it; the matrix's ``regressions.ship: missing``):
        it does not block the release, which names it and the release that last had it."""
        return not self.ok and self.triage is not None and self.triage.ship == "missing"

    def gpu_summary(self) -> dict[str, Any] | None:
        """What manifest.json says of the GPU smoke: verdict, GPU, driver, runner, and the llama-bench figures."""
        if self.gpu_smoke is None:
            return None
        bench = self.gpu_smoke.bench
        host, gpu = self.gpu_smoke.host, self.gpu_smoke.gpu
        return {
            "ok": bool(self.gpu_smoke.ok),
            "runner": list(self.gpu_runner),
            "gpu": next((b.gpu_info for b in bench if b.gpu_info), None),
            "backends": next((b.backends for b in bench if b.backends), None),
            "driver": host.driver if host else None,
            "kernel": host.kernel if host else None,
            "summary": gpu.summary if gpu else None,
            "numerics": _numerics_summary(self.gpu_smoke) or None,
            "ops": ops_summary(self.gpu_smoke) or None,
            "bench": [
                {
                    "test": b.test,
                    "tokens_per_second": b.tokens_per_second,
                    "stddev": b.stddev,
                    "spread_pct": b.spread,
                    "warmup": b.warmup,
                }
                for b in bench
            ],
        }

    def numerics(self) -> dict[str, Any]:
        """The smoke's numerics figures (rockbuild.smoke.numerics): GPU vs CPU KL divergence and same top token, the
        known answers, the CPU's perplexity; an older smoke.json, or none, says "not checked" for each."""
        summary, gpu = _numerics_summary(self.smoke), _numerics_summary(self.gpu_smoke)
        source = self.smoke
        if gpu.get("cross_backend") not in (None, "not checked"):  # the GPU leg compared a real GPU with the CPU
            summary, source = {**summary, **gpu}, self.gpu_smoke
        summary.setdefault("cross_backend", "not checked")
        summary.setdefault("known_answers", "not checked")
        if summary.get("cpu_ppl") is not None and source is not None and source.backends is not None:
            # the CPU variant that runner's CPU loaded: the CPU's figures compare across nights only within one
            summary.setdefault("cpu_variant", source.backends.cpu_variant)
        return summary

    def ops(self) -> dict[str, Any] | None:
        """The ops step's summary (rockbuild.smoke.ops: test-backend-ops' counts, the ops the backend leaves to the
        CPU): the GPU leg's when it checked there (a real GPU, the full test mode), else the smoke's (on CI: lavapipe's
        subset, or why not checked); None when no smoke.json has the step."""
        gpu, smoke = ops_summary(self.gpu_smoke), ops_summary(self.smoke)
        if gpu and (gpu.get("result") != "not checked" or not smoke):
            return {**gpu, "where": "gpu-smoke"}
        return {**smoke, "where": "smoke"} if smoke else None

    def ops_words(self) -> str | None:
        """``19011 passed, 0 failed, 1755 not supported on Vulkan0 (full test mode, the GPU leg); ops that fall back
        to the CPU on this backend: OUT_PROD (1344 cases), ...`` for the notes; None without the step."""
        ops = self.ops()
        if ops is None:
            return None
        if ops.get("result") == "not checked":
            return f"not checked: {ops.get('detail')}"
        where = ", the GPU leg" if ops.get("where") == "gpu-smoke" else ""
        words = (
            f"{ops.get('passed', 0)} passed, {ops.get('failed', 0)} failed, {ops.get('not_supported', 0)} not "
            f"supported on {ops.get('device')} ({ops.get('mode')} test mode{where})"
        )
        if ops.get("result") == "failed":
            words = f"FAILED: {ops.get('detail')}; {words}"
        fallback = ops.get("fallback_ops") or {}
        if fallback:
            top = ", ".join(f"{op} ({n} cases)" for op, n in list(fallback.items())[:6])
            more = f" and {len(fallback) - 6} more ops" if len(fallback) > 6 else ""
            words += f"; ops that fall back to the CPU on this backend: {top}{more}"
        return words

    def cpu_variant_runs(self) -> list[dict[str, Any]]:
        """Each smoke's per-variant step (rockbuild.smoke.variants) that ran: the CI runner's, then the GPU leg's
        (another CPU: the H200 host has AMX), as {where, result, picked, passed, failed, not_runnable, pp512}."""
        runs = []
        for where, smoke in (("smoke", self.smoke), ("gpu-smoke", self.gpu_smoke)):
            step = smoke.cpu_variants if smoke is not None else None
            if step is None or not step.ran:
                continue
            runs.append(
                {
                    "where": where,
                    "result": step.result,
                    "picked": step.picked,
                    **step.names_by_result(),
                    "pp512": {v.variant: v.pp512_tps for v in step.variants if v.pp512_tps is not None},
                }
            )
        return runs

    def cpu_variant_words(self) -> list[str]:
        """``13 of 14 CPU variants passed alone (pp512, known answers) on the smoke's CPU, where ggml picks zen4
        (pp512 t/s: zen4 201, ...); not runnable there: sapphirerapids`` per smoke that ran the step."""
        words = []
        for run in self.cpu_variant_runs():
            total = len(run["passed"]) + len(run["failed"]) + len(run["not_runnable"])
            host = "the GPU leg's host" if run["where"] == "gpu-smoke" else "the smoke's CPU"
            text = f"{len(run['passed'])} of {total} CPU variants passed alone on {host}" + (
                f", where ggml picks {run['picked']}" if run["picked"] else ""
            )
            if run["pp512"]:
                best = sorted(run["pp512"].items(), key=lambda kv: -kv[1])
                text += " (pp512 t/s: " + ", ".join(f"{v} {tps:.0f}" for v, tps in best) + ")"
            if run["failed"]:
                text += f"; FAILED: {', '.join(run['failed'])}"
            if run["not_runnable"]:
                text += f"; not runnable there: {', '.join(run['not_runnable'])}"
            words.append(text)
        return words

    def numerics_words(self) -> str:
        """``GPU vs CPU passed (mean KLD 0.0057, same top token 96.4 %); known answers passed (6/6)`` for the notes."""
        n = self.numerics()
        cross = f"GPU vs CPU {n['cross_backend']}"
        if n.get("mean_kld") is not None and n.get("same_top") is not None:
            cross += f" (mean KLD {n['mean_kld']:.4g}, same top token {n['same_top']:.1f} %)"
        answers = f"known answers {n['known_answers']}"
        if n.get("answers_total"):
            answers += f" ({n.get('answers_passed')}/{n['answers_total']}, {n.get('model')})"
        return f"{cross}; {answers}" + self._long_words(n)

    @staticmethod
    def _long_words(n: dict[str, Any]) -> str:
        """``; past one ubatch (4096 tokens, -b 2048 -ub 512): the CPU against the last good build passed (mean KLD
        0, same top token 100.0 %), GPU vs CPU passed (...), pass key passed (4813 prompt tokens)``; "" for a smoke
        before the long-context checks."""
        if n.get("long_reference") is None:
            return ""
        parts = []
        for label, result, kld, top in (
            (
                "the CPU against the last good build",
                n.get("long_reference"),
                n.get("long_reference_kld"),
                n.get("long_reference_same_top"),
            ),
            ("GPU vs CPU", n.get("long_cross_backend"), n.get("long_mean_kld"), n.get("long_same_top")),
            (
                "the GPU against its last good run",
                n.get("long_device"),
                n.get("long_device_kld"),
                n.get("long_device_same_top"),
            ),
        ):
            if label.startswith("the GPU against") and result in (None, "not checked"):
                continue  # a smoke before the check, or on a machine with no real GPU: nothing to say
            text = f"{label} {result or 'not checked'}"
            if kld is not None and top is not None:
                text += f" (mean KLD {kld:.4g}, same top token {top:.1f} %)"
            parts.append(text)
        answer = f"pass key {n.get('long_answer') or 'not checked'}"
        if n.get("long_answer_tokens"):
            answer += f" ({n['long_answer_tokens']} prompt tokens)"
        return f"; past one ubatch ({n.get('long_ctx') or '?'} tokens): " + ", ".join([*parts, answer])

    def smoke_summary(self) -> str:
        if self.smoke is None and self.runner_smoke is not None:
            runner = self.runner_smoke
            if runner.ok:
                return "passed on the CI runner (informational)"
            first = (runner.failures or ("see runner-smoke/smoke.json",))[0]
            return f"not gated: on the CI runner (informational) it failed: {first}"
        if self.smoke is None:
            return "not run"
        placement = self.smoke.gpu.placement if self.smoke.gpu is not None else None
        verdict = {"gpu": self.flavour, "cpu": "CPU only", "partial": "partial offload"}.get(str(placement), "?")
        return f"{'passed' if self.smoke.ok else 'FAILED'} ({verdict})"

    def fallback_summary(self) -> dict[str, Any] | None:
        """What manifest.json says of a fallback: the newest tarball that failed, where and why, and the release
        whose tarball was used instead."""
        if self.fallback is None:
            return None
        newest, last_good = self.fallback.newest, self.fallback.last_good
        return {
            "newest": newest.name,
            "newest_version": newest.version,
            "newest_date": newest.date,
            "failed_stage": self.fallback.failed_stage,
            "reason": self.fallback.reason,
            "last_good_release": last_good.release if last_good is not None else None,
        }

    def fallback_note(self) -> str | None:
        """``ROCm 10.1.0a20261128, newest 10.1.0a20261201 failed smoke: ...`` for the notes and the alert."""
        summary = self.fallback_summary()
        if summary is None:
            return None
        return (
            f"ROCm {self.rocm.version or '?'}, newest {summary['newest_version'] or summary['newest']} failed "
            f"{summary['failed_stage']}: {summary['reason']}"
        )

    def web_ui_summary(self) -> dict[str, Any] | None:
        """What manifest.json says of llama-server's web UI: built in (its sha256, files, bytes) or why not."""
        if self.web_ui is None:
            return None
        return {
            "status": self.web_ui.status,
            "reason": self.web_ui.reason,
            "sha256": self.web_ui.sha256,
            "files": self.web_ui.files,
            "bytes": self.web_ui.bytes,
            "build_number": self.web_ui.build_number,
        }

    def to_dict(self) -> dict[str, Any]:
        """The head of the job's manifest.json entry (:func:`~rockbuild.publish.manifest.build_manifest` adds the
        rest): what it is and was built from, a few of the job folder's many values, summarised."""
        return {
            "id": self.id,
            "os": self.os,
            "name": self.name,
            "backend": self.backend,
            "targets": list(self.targets),
            "required": self.required,
            "status": self.status,
            "failed_step": self.failed_step,
            "reason": self.reason,
            "llama_cpp": {"commit": self.llama_commit, "build_number": self.llama_build},
            "rocm": {**self.rocm.to_dict(), "fallback": self.fallback_summary()},
            "isas": list(self.isas),
            "programs": list(self.programs),
            "cpu_variants": list(self.cpu_variants),
            "cmake": public_cmake(self.cmake),
            "patches": self.patches_summary(),
            "compilers": self.compilers_summary(),
        }

    def compilers_summary(self) -> dict[str, Any] | None:
        """What manifest.json says compiled the bundle: its CPU code (the programs, libllama, the CPU modules) and its
        GPU library, by the same compilers for a job built whole, by its OS's common part's for one built on it."""
        if not self.compilers and self.common is None:
            return None
        cpu = dict(self.common.compilers) if self.common is not None else dict(self.compilers)
        return {
            "cpu": cpu,
            "gpu": dict(self.compilers) if self.backend != "cpu" else None,
            "common_part": self.common.job if self.common is not None else None,
        }

    def patches_summary(self) -> dict[str, Any] | None:
        """What manifest.json says of the carried fixes: the series' digest and every patch's outcome (the local
        paths of build.json left out)."""
        if self.patches is None:
            return None
        return {
            "digest": self.patches.digest,
            "disabled": self.patches.disabled,
            "patches": [p.to_dict() for p in self.patches.patches],
        }


def _isas(bundle_meta: BundleRecord | None, targets: tuple[str, ...]) -> tuple[str, ...]:
    audit = bundle_meta.audit if bundle_meta is not None else None
    for fat in audit.fat_binaries if audit is not None else ():
        if (fat.file or "").startswith(("libggml-hip", "ggml-hip")) and fat.targets:
            return fat.targets
    return targets


def cpu_variants(bundle_dir: Path) -> tuple[str, ...]:
    """The CPU backend variants a bundle folder holds, by name (x64, haswell, zen4, ...)."""
    if not bundle_dir.is_dir():
        return ()
    return tuple(sorted(v for p in bundle_dir.iterdir() if (v := cpu_variant_of(p.name)) is not None))


def ops_summary(smoke: SmokeRecord | None) -> dict[str, Any]:
    """A smoke.json's ops step (its ``ops.summary``); {} for none or a file from before the step."""
    return dict((smoke.ops or {}).get("summary") or {}) if smoke is not None else {}


def _numerics_summary(smoke: SmokeRecord | None) -> dict[str, Any]:
    """A smoke.json's numerics figures (its ``numerics.summary``); {} for none or an older file."""
    return dict((smoke.numerics or {}).get("summary") or {}) if smoke is not None else {}


def _smoke_tail(smoke: SmokeRecord) -> tuple[tuple[str, ...], Path | None]:
    for run in smoke.runs.values():
        if not run.ok:
            return run.log_tail, Path(run.log) if run.log else None
    return (), None


def _first(*values: Any) -> Any:
    """The first of ``values`` that is not empty (None, "", ())."""
    return next((v for v in values if v), None)


def load_job(job_dir: Path, *, tail_lines: int = 40) -> BuiltJob:
    """The job in ``job_dir`` (``out/<job-id>``), failed or not."""
    folder = JobFolder(Path(job_dir).absolute())
    job_dir, bundle_dir = folder.path, folder.bundle_dir
    broken: list[tuple[str, RecordError, Path]] = []  # a malformed record makes the job failed, never an exception

    def read(step: str, reader: Callable[[], Any], path: Path) -> Any:
        try:
            return reader()
        except RecordError as exc:
            broken.append((step, exc, path))
            return None

    build: BuildRecord | None = read("build", folder.build, folder.build_json)
    bundle_meta: BundleRecord | None = read("bundle", folder.bundle_meta, folder.bundle_json)
    smoke: SmokeRecord | None = read("smoke", folder.smoke, folder.smoke_json)
    gpu_smoke: SmokeRecord | None = read("gpu-smoke", folder.gpu_smoke, folder.gpu_smoke_json)
    runner_smoke: SmokeRecord | None = read("runner-smoke", folder.runner_smoke, folder.runner_smoke_json)
    fallback: FallbackRecord | None = read("fallback", folder.fallback, folder.fallback_json)
    triage: TriageRecord | None = read("triage", folder.triage, folder.triage_json)
    job = build.job if build is not None else None
    gpu_config = job.gpu_smoke if job is not None else None
    job_id = str(_first(job and job.id, job_dir.name))
    os_name = str(_first(job and job.os, bundle_meta and bundle_meta.platform, job_id.split("-", 1)[0]))
    name = str(_first(job and job.name, job_id.split("-", 1)[1] if "-" in job_id else job_id))
    targets = tuple(_first(job and job.targets, build and build.gpu_targets, bundle_meta and bundle_meta.targets) or ())
    # a build.json from before the field: the bundle's own record, else the job's name (linux-vulkan)
    backend = str(
        _first(job and job.backend, bundle_meta and bundle_meta.backend, "vulkan" if name == "vulkan" else "rocm")
    )
    llama = build.llama_cpp if build is not None else None
    build_number = llama.build_number if llama is not None else None
    common: dict[str, Any] = dict(
        dir=job_dir,
        id=job_id,
        os=os_name if os_name in ("linux", "windows") else "linux",
        name=name,
        targets=targets,
        required=job.required if job is not None else True,
        llama_commit=llama.commit if llama is not None else None,
        llama_build=str(build_number) if build_number is not None else None,
        llama_commit_time=llama.commit_time if llama is not None else None,
        rocm=rocm_info(build.rocm if build is not None else None),
        cmake=dict(build.cmake_definitions) if build is not None else {},
        isas=_isas(bundle_meta, targets),
        smoke=smoke,
        finished=build.finished if build is not None else None,
        backend=backend,
        gpu_runner=gpu_config.runner if gpu_config is not None else (),
        gpu_required=gpu_config.required if gpu_config is not None else False,
        gpu_smoke=gpu_smoke,
        fallback=fallback,
        triage=triage,
        web_ui=build.web_ui if build is not None else None,
        runner_smoke=runner_smoke,
        patches=build.patches if build is not None else None,
        compilers=dict(build.compilers) if build is not None else {},
        common=build.common if build is not None else None,
        programs=tuple(str(p.get("file") or p.get("target")) for p in (build.programs if build is not None else ())),
        programs_unavailable=build.programs_unavailable if build is not None else (),
        cpu_variants=cpu_variants(bundle_dir),
    )
    paths = build.paths if build is not None else None
    build_log = Path(paths.log) if paths is not None and paths.log else folder.build_log
    audit = bundle_meta.audit if bundle_meta is not None else None
    audit = audit if audit is not None and audit.to_dict() else None  # an empty audit is none

    def failed(step: str, reason: str, log: Path | None, tail: tuple[str, ...] | None = None) -> BuiltJob:
        lines = tail if tail is not None else (tuple(log_tail(log, tail_lines)) if log else ())
        return BuiltJob(
            **common,
            status="failed",
            failed_step=step,
            reason=reason,
            log=log,
            log_tail=lines[-tail_lines:],
            bundle=bundle_dir if bundle_dir.is_dir() else None,
            audit=audit,
        )

    if broken:
        step, exc, path = broken[0]
        return failed(step, exc.message, path, (exc.message,))
    if build is None and not bundle_dir.is_dir():
        return failed("build", f"no {folder.build_json.name} and no {bundle_dir.name}/ in {job_dir}", None)
    if build is not None and not build.ok:
        step = build.failed_step or "build"
        return failed(step, f"the build failed at step '{step}'", build_log)
    if not bundle_dir.is_dir():
        log = folder.bundle_log
        return failed(
            "bundle",
            f"no {bundle_dir.name}/ folder: the bundle step did not run or failed",
            log if log.exists() else None,
        )
    if audit is not None and audit.ok is False:
        failures = audit.failures
        return failed(
            "audit",
            "the bundle failed its audit: " + ("; ".join(failures[:3]) or "see bundle.json"),
            folder.bundle_json,
            failures,
        )
    if smoke is not None and smoke.ok is False:
        failures = smoke.failures
        tail, smoke_log = _smoke_tail(smoke)
        return failed(
            "smoke",
            "the smoke test failed: " + ("; ".join(failures[:3]) or "see smoke.json"),
            smoke_log,
            tail or failures,
        )
    if common["gpu_required"] and (gpu_smoke is None or gpu_smoke.ok is not True):
        # the matrix says this asset ships only once it ran on a real GPU
        why = (
            "the GPU smoke test did not run (no gpu-smoke.json from the GPU leg)"
            if gpu_smoke is None
            else "the GPU smoke test failed: " + ("; ".join(gpu_smoke.failures)[:300] or "see gpu-smoke.json")
        )
        return failed("gpu-smoke", why, folder.gpu_smoke_json if gpu_smoke is not None else None)
    return BuiltJob(**common, status="ok", bundle=bundle_dir, audit=audit)


def with_failure(job: BuiltJob, step: str, reason: str) -> BuiltJob:
    """``job`` marked failed by the publisher itself (e.g. a glibc floor above the configured one)."""
    from dataclasses import replace

    return replace(job, status="failed", failed_step=step, reason=reason, log_tail=(reason,))
