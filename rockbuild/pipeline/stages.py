"""One way to run a job's stages (fetch, build, bundle, smoke), for the night and each of its CI legs alike.

Each stage declares the fingerprint of its inputs (``key``), whether what a passed run left in the job folder can
still be used (``reusable``), and how to run. :func:`run_stages` does the rest the same way for every stage: reuse a
stage whose inputs did not change since it passed, record each result in ``stages.json``
(:class:`StageLog`), report events (start, done, reused, skipped, failed) to whoever watches, and turn a failure into
the job's :class:`StagesOutcome` instead of an exception, so one failed job never stops the others.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from rockbuild import console
from rockbuild.core.errors import RockbuildError
from rockbuild.core.record import SECONDS, Record
from rockbuild.core.records import STAGES_SCHEMA, Cause, Ship, StagesRecord
from rockbuild.jobfolder import JobFolder

STAGES = ("fetch", "build", "bundle", "smoke")
STATE_SCHEMA = STAGES_SCHEMA

EventHook = Callable[[str, str, str], None]  # (job id, stage, status)


def fingerprint(*parts: Any) -> str:
    """A stable key for a stage's inputs (JSON of ``parts``, sorted keys)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


class StageLog:
    """``stages.json`` of a job folder: each stage's input fingerprint and result."""

    def __init__(self, folder: JobFolder) -> None:
        self.path = folder.stages_json
        self.job_id = folder.id
        record = folder.stages()
        self.legacy = folder.legacy_stages_json
        self.stages: dict[str, dict[str, Any]] = (
            {k: v.to_dict() for k, v in record.stages.items()} if record is not None else {}
        )

    def passed(self, stage: str, key: str) -> dict[str, Any] | None:
        entry = self.stages.get(stage)
        if isinstance(entry, dict) and entry.get("key") == key and entry.get("result") == "ok":
            return entry
        return None

    def record(self, stage: str, key: str, result: str, seconds: float, **detail: Any) -> None:
        self.stages[stage] = {"key": key, "result": result, "seconds": round(seconds, 3), **detail}
        StagesRecord.from_dict({"schema": STATE_SCHEMA, "job": self.job_id, "stages": self.stages}, self.path).write(
            self.path
        )
        self.legacy.unlink(missing_ok=True)  # a folder from before the rename: its night.json is stages.json now


@dataclass(frozen=True)
class StagesOutcome(Record):
    """How one job's stages ended (a record: the night's report lists them)."""

    id: str
    required: bool
    status: Literal["ok", "failed", "not-run"]
    stages: dict[str, str]  # stage -> done | reused | failed | skipped
    failed_stage: str | None = None
    message: str | None = None
    seconds: float = field(default=0.0, metadata=SECONDS)
    fallback: str | None = None  # ran on its group's last good ROCm because the newest failed: what and why
    cause: Cause | None = None  # a failed job's triage (triage.json)
    ship: Ship | None = None  # what the night does with it (missing: the release goes without it)


def _never(_entry: dict[str, Any]) -> None:
    return None


def _always(_entry: dict[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Stage:
    """One stage of one job, made once the stages before it have run (its key may depend on their results)."""

    name: str
    key: str = ""
    run: Callable[[], dict[str, Any] | None] = dict  # the work; returns details for stages.json; raises on failure
    reusable: Callable[[dict[str, Any]], bool] = _always  # is a passed run's result still in the folder?
    reuse: Callable[[dict[str, Any]], None] = _never  # adopt what a passed run recorded (e.g. the ROCm root)
    on_failure: Callable[[RockbuildError], None] | None = None  # leave a record for publish and alert
    skip: bool = False  # nothing to do for this job (a Vulkan job's fetch, --no-smoke)


def run_stages(
    job_id: str,
    required: bool,
    folder: JobFolder,
    stages: Iterable[Callable[[], Stage]],
    *,
    on_event: EventHook | None = None,
) -> StagesOutcome:
    """Run ``stages`` in order (each a factory called when its turn comes); stop at the first failure."""
    folder.create()
    state = StageLog(folder)
    shown: dict[str, str] = {}
    start = time.monotonic()

    def event(stage: str, status: str) -> None:
        if status != "start":
            shown[stage] = status
        if on_event is not None:
            on_event(job_id, stage, status)

    for make in stages:
        stage = make()
        if stage.skip:
            event(stage.name, "skipped")
            continue
        previous = state.passed(stage.name, stage.key)
        if previous is not None and stage.reusable(previous):
            stage.reuse(previous)
            event(stage.name, "reused")
            console.info(f"    {job_id}: {stage.name}: inputs unchanged since the last run; not redone")
            continue
        event(stage.name, "start")
        t0 = time.monotonic()
        try:
            detail = stage.run() or {}
        except RockbuildError as exc:
            if stage.on_failure is not None:
                stage.on_failure(exc)
            state.record(stage.name, stage.key, "failed", time.monotonic() - t0, message=exc.message)
            event(stage.name, "failed")
            console.warn(f"{job_id}: {stage.name} failed: {exc.message}")
            return StagesOutcome(job_id, required, "failed", shown, stage.name, exc.message, time.monotonic() - start)
        state.record(stage.name, stage.key, "ok", time.monotonic() - t0, **detail)
        event(stage.name, "done")
    return StagesOutcome(job_id, required, "ok", shown, seconds=time.monotonic() - start)
