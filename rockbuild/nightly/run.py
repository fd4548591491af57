"""Run the night: every job's stages (fetch, build, bundle, smoke) with resume, then publish by the gating rules.

Each job folder ``out/<job-id>/`` keeps ``stages.json``: per stage, the fingerprint of its inputs and its result. A
re-run redoes a stage only when its fingerprint changed or it did not pass (the fingerprints chain, so a new tarball
redoes fetch, build, bundle and smoke; a new model redoes smoke only). Before anything is downloaded the resolved
inputs are compared with the last published release's ``manifest.json``: the same inputs end the night at once.

Last known good ROCm: when a job fails with the newest tarball of its group (at any stage) and an older tarball of
that group passed the smoke test in a published release, the job is retried once on that one. The failed attempt's
folder is kept beside the job's (``out/<job-id>@rocm-<version>``) and ``fallback.json`` in the job folder says what
failed and what was used instead, for publish (manifest, notes) and alert.

A job that fails for another reason is triaged (rockbuild.nightly.triage): the input at fault, and for llama.cpp the
first bad commit. With the matrix's ``regressions: ship: newest-good`` the night is then held back:
``OUT/held-back.json`` names the commit before the first bad one and every job is built again from it (the whole
night here; in the CI fan-out the workflow dispatches itself again with ``--held-back``).
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rockbuild import console, matrix
from rockbuild.bundle.policy import BundlePolicy
from rockbuild.core.environment import Context
from rockbuild.core.errors import (
    PublishError,
    RockbuildError,
    StaleInputError,
    UsageError,
)
from rockbuild.core.jobs import Job
from rockbuild.core.options import CompileFlags, GitHubTarget, ModelChoice, Pins, RegressionPolicy
from rockbuild.core.programs import ProgramList, load_programs
from rockbuild.core.record import SECONDS, Record
from rockbuild.core.records import (
    FALLBACK_SCHEMA,
    FallbackRecord,
    HeldBack,
    InputsRecord,
    InputsRocm,
    LlamaBisect,
    ManifestRecord,
    Ship,
    TarballRef,
    TriageRecord,
)
from rockbuild.jobfolder import JobFolder
from rockbuild.llamacpp.cross import cross_spec
from rockbuild.llamacpp.patches import PatchSeries, load_patch_series
from rockbuild.llamacpp.source import oldest_commit
from rockbuild.matrix import github_matrix
from rockbuild.pipeline.inputs import (
    attach_job_last_good,
    attach_last_good,
    last_good_jobs,
    last_good_tarballs,
    load_inputs,
    manifest_differences,
    resolve_inputs,
    smoke_passed,
)
from rockbuild.pipeline.job import JobPipeline, carried_patches
from rockbuild.pipeline.stages import STAGES, EventHook, StagesOutcome
from rockbuild.publish.alert import AlertTarget, LegFailure, send_alert
from rockbuild.publish.config import PublishConfig
from rockbuild.publish.github import GitHub
from rockbuild.publish.image import ImageOptions
from rockbuild.publish.jobs import load_job
from rockbuild.publish.release import PublishOptions, publish
from rockbuild.smoke.config import SmokeConfig
from rockbuild.smoke.models import provide_model

from .triage import (
    Failure,
    Trials,
    after_fallback,
    bisect_job,
    diagnose,
    held_back_of,
    ship_mode,
    trial_out,
)

INPUTS_FILE = "inputs.json"


# ---------------------------------------------------------------------------------------------------------------------
# Per-job state


@dataclass(frozen=True)
class NightData:
    """What a night reads from the data files, loaded by its caller (the CLI's Settings): the matrix's jobs (with the
    dispatch inputs' OS and target axes applied), the publishing and smoke configurations and the bundle policy."""

    jobs: tuple[Job, ...]
    publish: PublishConfig
    smoke: SmokeConfig  # config/smoke.yaml, read and checked once
    policy: BundlePolicy
    programs: ProgramList = field(default_factory=load_programs)  # config/programs.yaml
    patches: PatchSeries = field(default_factory=load_patch_series)  # patches/patches.yaml, or --patches FILE
    regressions: RegressionPolicy = field(default_factory=RegressionPolicy)  # the matrix's regressions:


@dataclass(frozen=True)
class NightOptions:
    """How a night runs: the option groups of ``rockbuild nightly`` (pins, GitHub, model, compile flags) and its own
    flags, with the data files (:class:`NightData`) and the run's context."""

    only: tuple[str, ...] = ()  # --only globs over the data's jobs
    pins: Pins = field(default_factory=Pins)  # the llama.cpp ref, ROCm version, index and repository
    github: GitHubTarget = field(default_factory=GitHubTarget)  # where the release goes (None: no publishing)
    model: ModelChoice = field(default_factory=ModelChoice)  # the smoke model
    compile: CompileFlags = field(default_factory=CompileFlags)  # offline, ccache, fat-binary pruning
    out: Path = Path("out")
    publish: bool | None = None  # None: publish when a repository is known
    token: str | None = None  # default $GITHUB_TOKEN / $GH_TOKEN
    parallel: int = 1  # jobs at a time
    compile_jobs: int | None = None
    smoke: bool = True
    cache: Path | None = None
    run_url: str | None = None
    step_summary: Path | None = None
    throttle: bool = True
    on_event: EventHook | None = None
    allow_partial: str | None = None  # publish a release that is not whole, for this reason (rockbuild.publish.whole)
    images: ImageOptions | None = None  # --images: an image per Linux asset, tested and pushed with the release
    # --held-back FILE: a night held back to the commit before tonight's first bad one (pins.llama_ref is that commit)
    held_back: HeldBack | None = None
    tool_wheel: Path | None = None  # --tool-wheel: rockbuild's own wheel, attached to the release for its users
    data: NightData = field(kw_only=True, repr=False, compare=False)
    context: Context = field(kw_only=True, repr=False, compare=False)  # the cache, GitHub's context, the host OS


# how a night (or one of its CI modes) ended; exit 0 for the first six
NightState = Literal["unchanged", "published", "draft", "dry-run", "built", "held-back", "blocked", "failed"]


@dataclass(frozen=True)
class NightReport(Record):
    """How the night (or one of its CI modes) ended (a record: ``rockbuild nightly --json``)."""

    state: NightState
    message: str
    exit_code: int = field(init=False)  # 0 for a night that did what it should (derived from the state)
    inputs: Path | None
    llama_commit: str
    jobs: tuple[StagesOutcome, ...] = ()
    not_here: tuple[str, ...] = ()  # jobs for another OS
    release: dict[str, Any] | None = None
    alert: str | None = None
    seconds: float = field(default=0.0, metadata=SECONDS)
    changes: tuple[str, ...] = ()
    held_back: HeldBack | None = None  # state held-back: the night is built again from held_back.good

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "exit_code",
            0 if self.state in ("unchanged", "published", "draft", "built", "dry-run", "held-back") else 1,
        )

    def render(self) -> str:
        return f"night: {self.state}: {self.message}"

    def render_table(self) -> Any:
        from rich.table import Table

        table = Table(title=f"night: {self.state}", title_justify="left")
        for column in ("job", "required", *STAGES, "result", "time"):
            table.add_column(column, no_wrap=True)
        for job in self.jobs:
            result = (
                "ok"
                if job.status == "ok"
                else f"FAILED at {job.failed_stage}"
                if job.status == "failed"
                else job.status
            )
            result += " (last good ROCm)" if job.fallback else ""
            result += (
                f" ({job.cause}{', left out' if job.ship == 'missing' else ''})"
                if job.status == "failed" and job.cause
                else ""
            )
            table.add_row(
                job.id,
                "yes" if job.required else "no",
                *(job.stages.get(s, "-") for s in STAGES),
                result,
                f"{job.seconds:.1f}s",
            )
        return table

    def render_markdown(self) -> str:
        lines = [
            f"## rockbuild nightly: {self.state}",
            "",
            self.message,
            "",
            "| job | required | " + " | ".join(STAGES) + " | result | time |",
            "|---|---|" + "---|" * len(STAGES) + "---|---|",
        ]
        for job in self.jobs:
            result = "ok" if job.status == "ok" else f"**failed** at {job.failed_stage}: {job.message or ''}"
            result += f" ({job.fallback})" if job.fallback else ""
            lines.append(
                f"| {job.id} | {'yes' if job.required else 'no'} | "
                + " | ".join(job.stages.get(s, "-") for s in STAGES)
                + f" | {result} | {job.seconds:.0f}s |"
            )
        return "\n".join(lines) + "\n"


class Night:
    """The state shared by the jobs of one night."""

    def __init__(self, options: NightOptions, inputs: InputsRecord) -> None:
        self.options = options
        self.inputs = inputs
        self.out = Path(options.out).absolute()
        self.cache = options.cache or options.context.cache
        self._model: Any = None
        self._model_lock = threading.Lock()
        data = options.data
        self.pipeline = JobPipeline(
            inputs=inputs,
            out=self.out,
            cache=self.cache,
            context=options.context,
            model=self.model,
            policy=data.policy,
            model_spec=options.model.spec,
            compile=options.compile,
            compile_jobs=options.compile_jobs,
            programs=data.programs,
            patches=data.patches,
            smoke_config=data.smoke,
            smoke=options.smoke,
            on_event=options.on_event,
        )

    def event(self, job_id: str, stage: str, status: str) -> None:
        if self.options.on_event is not None:
            self.options.on_event(job_id, stage, status)

    def model(self) -> Any:
        with self._model_lock:
            if self._model is None:
                self._model = provide_model(
                    self.options.model.spec,
                    vocab=self.options.model.vocab,
                    cache=self.cache,
                    context=self.options.context,
                    smoke=self.options.data.smoke,
                )
            return self._model


def run_job(job: Job, night: Night) -> StagesOutcome:
    """Fetch, build, bundle and smoke one job, reusing every stage whose inputs did not change; when it fails with
    the newest ROCm and its group has a last good tarball, once more on that one (see the module docstring). Never
    raises for a failure of the job itself (it is recorded in the job folder for publish and alert)."""
    folder = JobFolder.of(night.out, job.id)
    rocm = night.inputs.rocm_for(job.id)
    fallback = rocm.fallback() if rocm is not None else None
    record = folder.fallback()
    if rocm is not None and fallback is not None and record is not None and record.newest.name == rocm.name:
        # a resumed night: the newest already failed here; go on with the last good one
        return _on_last_good(job, night, folder, record, fallback)
    folder.fallback_json.unlink(missing_ok=True)
    outcome = night.pipeline.run(job, rocm)
    if outcome.status == "ok" or night.pipeline.common_failure(job) is not None:
        folder.triage_json.unlink(missing_ok=True)  # a job whose common part failed: that part's triage says why
        return outcome
    return _triage(job, night, folder, outcome, rocm, fallback)


def _triage(
    job: Job,
    night: Night,
    folder: JobFolder,
    failed: StagesOutcome,
    rocm: InputsRocm | None,
    fallback: InputsRocm | None,
) -> StagesOutcome:
    """Which input broke ``job`` (rockbuild.nightly.triage): ROCm, retried on the last good one; llama.cpp, bisected
    to the commit; the machine. The verdict goes to triage.json; the outcome carries it to the release."""
    policy = night.options.data.regressions
    tonight = night.inputs.llama_cpp
    previous = _read_triage(folder)
    if (
        previous is not None
        and previous.llama_commit == tonight.commit
        and previous.cause == "llama.cpp"
        and previous.rocm == (rocm.name if rocm else None)
        and previous.failed_stage == failed.failed_stage
    ):
        console.info(f"    {job.id}: triage.json already names llama.cpp for these inputs; not built again")
        return _blamed(failed, previous)
    tail_lines = night.options.data.publish.alert_log_lines
    failure = Failure(
        job,
        failed,
        tonight,
        rocm,
        night.inputs.entry(job.id).last_good,
        load_job(folder.path, tail_lines=tail_lines).log_tail,
    )
    trials = Trials(night.pipeline, job, rocm, trial_out(night.out), tail_lines)
    diagnosis = diagnose(
        failed,
        tonight.commit,
        rocm,
        failure.last,
        try_last_good=lambda c: trials.run(c)[0],
        can_fall_back=fallback is not None and rocm is not None,
    )
    if diagnosis.retry_rocm:
        assert rocm is not None and fallback is not None
        outcome = _fall_back(job, night, folder, failed, rocm, fallback)
        cause, evidence = after_fallback(diagnosis, outcome.status == "ok", failure.last, fallback.name)
        ship: Ship = "fallback" if outcome.status == "ok" else "blocked"
        failure.record(cause, evidence, ship=ship, trials=diagnosis.trials).write(folder.triage_json)
        console.info(f"    {job.id}: {cause} at fault: {evidence}")
        return replace(outcome, cause=cause, ship=ship)
    bisect = None
    last = failure.last
    if diagnosis.cause == "llama.cpp" and last is not None and last.llama_commit and policy.bisect_steps > 0:
        try:
            bisect = bisect_job(
                trials,
                last.llama_commit,
                tonight.commit,
                policy=policy,
                bad_end=failure.bad_end(),
                bad_tail=failure.log_tail,
            )
        except RockbuildError as exc:  # the history could not be read: the verdict stands without a commit
            console.warn(f"{job.id}: the llama.cpp bisect stopped: {exc.message}")
            bisect = LlamaBisect(good=last.llama_commit, bad=tonight.commit, candidates=0, stopped=exc.message)
    ship = (
        ship_mode(policy, bisect, required=job.required, held_back=tonight.held_back is not None)
        if diagnosis.cause == "llama.cpp"
        else "blocked"
    )
    record = failure.record(diagnosis.cause, diagnosis.evidence, ship=ship, trials=diagnosis.trials, bisect=bisect)
    record.write(folder.triage_json)
    console.warn(
        f"{job.id}: {record.cause} at fault: {record.evidence}"
        + (
            f"; first bad commit {record.bisect.first_bad.commit[:12]}"
            if record.bisect and record.bisect.complete and record.bisect.first_bad
            else ""
        )
    )
    return _blamed(failed, record)


def _read_triage(folder: JobFolder) -> TriageRecord | None:
    try:
        return folder.triage()
    except RockbuildError:  # a malformed one is made again
        return None


def _blamed(failed: StagesOutcome, record: TriageRecord) -> StagesOutcome:
    bisect = record.bisect
    first = (
        f"; first bad llama.cpp commit {bisect.first_bad.commit[:12]}"
        if bisect is not None and bisect.complete and bisect.first_bad
        else ""
    )
    said = f" ({record.cause} at fault{first})" if record.cause != "unknown" else ""
    return replace(failed, cause=record.cause, ship=record.ship, message=f"{failed.message}{said}")


def _llama_broke(folder: JobFolder) -> bool:
    record = _read_triage(folder)
    return record is not None and record.cause == "llama.cpp"


def _fall_back(
    job: Job, night: Night, folder: JobFolder, failed: StagesOutcome, newest: InputsRocm, good: InputsRocm
) -> StagesOutcome:
    """Keep the failed attempt beside the job folder, record why, and run the job again on the last good ROCm."""
    attempt = load_job(folder.path, tail_lines=night.options.data.publish.alert_log_lines)
    kept = folder.path.with_name(f"{job.id}@rocm-{newest.version or 'newest'}")
    shutil.rmtree(kept, ignore_errors=True)
    folder.path.rename(kept)
    last_good = dict(newest.last_good or {})
    record = FallbackRecord(
        schema=FALLBACK_SCHEMA,
        newest=TarballRef(name=newest.name, version=newest.version, date=newest.date),
        failed_stage=failed.failed_stage,
        reason=failed.message or attempt.reason,
        log_tail=attempt.log_tail,
        attempt_dir=str(kept),
        last_good=TarballRef.from_dict(
            {k: last_good.get(k) for k in ("name", "version", "date", "release")}, "the last good tarball"
        ),
        keys=("schema", "newest", "failed_stage", "reason", "log_tail", "attempt_dir", "last_good"),
    )
    console.warn(
        f"{job.id}: failed at {failed.failed_stage} with the newest ROCm {newest.describe()}; retrying once "
        f"with the last good {good.describe()} (release {last_good.get('release')})"
    )
    folder.create()
    record.write(folder.fallback_json)
    return _on_last_good(job, night, folder, record, good, first=failed)


def _on_last_good(
    job: Job,
    night: Night,
    folder: JobFolder,
    record: FallbackRecord,
    good: InputsRocm,
    first: StagesOutcome | None = None,
) -> StagesOutcome:
    outcome = night.pipeline.run(job, good)
    note = f"ROCm {good.describe()}, newest {record.newest.version} failed {record.failed_stage}: {record.reason}"
    replace(record, result=outcome.status).write(folder.fallback_json)
    seconds = outcome.seconds + (first.seconds if first else 0.0)
    if outcome.status == "ok":
        return replace(outcome, fallback=note, seconds=seconds)
    return replace(
        outcome,
        fallback=note,
        seconds=seconds,
        message=f"{outcome.message} (also with the last good ROCm {good.describe()}; the newest "
        f"{record.newest.version} failed {record.failed_stage}: {record.reason})",
    )


# ---------------------------------------------------------------------------------------------------------------------
# The last release


def latest_manifest(
    repo: str, *, api_url: str | None = None, token: str | None = None
) -> tuple[str | None, ManifestRecord | None]:
    """The tag of the repository's latest published release (None: there is none) and its manifest.json (None:
    missing, or invalid: said in one warning)."""
    from github import GithubException

    gh = GitHub(repo, api_url=api_url, token=token, throttle=False, timeout=None)
    try:
        with gh.errors(f"reading the latest release of {repo}"):  # the network's failures too, in one line
            try:
                release = gh.repo.get_latest_release()
            except GithubException as exc:
                if exc.status == 404:
                    return None, None
                raise
        return str(release.tag_name), gh.release_manifest(release)
    finally:
        gh.close()


def release_manifests(
    repo: str,
    *,
    api_url: str | None = None,
    token: str | None = None,
    limit: int = 20,
    read: Mapping[str, ManifestRecord | None] | None = None,
) -> Iterator[tuple[str, ManifestRecord]]:
    """(tag, manifest.json) of the repository's published releases, newest first, at most ``limit``; read one at a
    time, so a caller that has what it needs stops early. ``read``: manifests already read, by tag (not read or
    warned about twice)."""
    gh = GitHub(repo, api_url=api_url, token=token, throttle=False, timeout=None)
    try:
        yield from gh.manifests(limit, read)
    finally:
        gh.close()


def known_good(
    inputs: InputsRecord, manifests: Iterable[tuple[str, ManifestRecord | Mapping[str, Any]]]
) -> tuple[dict[tuple[str, str], dict[str, Any]], list[tuple[str, ManifestRecord | Mapping[str, Any]]]]:
    """The last good tarball of each (OS, group) the inputs pin, and the manifests read for it: ``manifests``
    (newest first) are read only until every group has one and every ``required: when-proven`` job has passed
    (:func:`promote_proven` takes the same)."""
    wanted = {(r.os, g) for r in inputs.rocm.values() if not r.error for g in r.groups[:1]}
    unproven = {j.id for j in inputs.jobs if j.when_proven and not j.required}
    # each job's last pass too: what a failed job's triage compares tonight's inputs with (rockbuild.nightly.triage)
    unpassed = {j.id for j in inputs.jobs if not j.is_common_part}
    seen: list[tuple[str, ManifestRecord | Mapping[str, Any]]] = []
    for item in manifests:
        seen.append(item)
        passed = {e.id for e in smoke_passed(item[1])}
        unproven -= passed
        unpassed -= passed
        if wanted <= set(last_good_tarballs(seen)) and not unproven and not unpassed:
            break
    return last_good_tarballs(seen), seen


# ---------------------------------------------------------------------------------------------------------------------
# The night


def publish_dirs_for_inputs(
    inputs: InputsRecord, job_dirs: Sequence[Path], default_out: Path = Path("out")
) -> tuple[Path, ...]:
    """The job folders to publish for ``inputs``: each given folder matched to its job (by build.json, or its name
    with or without the artifact's ``job-`` prefix), and for a job without one a folder that does not exist, so the
    publisher counts it as failed. A folder built from another commit is refused. A common part is no asset: its
    folder is left out (the jobs built on it carry its files, and its failure as theirs)."""
    found: dict[str, Path] = {}
    for directory in job_dirs:
        build = JobFolder(Path(directory)).build()
        job_id = build.job.id if build is not None and build.job is not None else ""
        job_id = job_id or Path(directory).name.removeprefix("job-")
        commit = build.commit if build is not None else None
        if build is not None and commit and build.ok and commit != inputs.llama_cpp.commit:
            raise UsageError(
                f"{directory} was built from llama.cpp {commit[:12]}, not the inputs' {inputs.llama_cpp.commit[:12]}",
                hint="rebuild it with --inputs, or leave it out",
            )
        if inputs.job(job_id).is_common_part:
            continue
        found[job_id] = Path(directory)
    return tuple(found.get(job.id, Path(default_out) / job.id) for job in inputs.jobs if not job.is_common_part)


def job_dirs_to_publish(inputs_file: Path | None, job_dirs: Sequence[Path]) -> tuple[Path, ...]:
    """``rockbuild publish``'s folders: with the night's inputs every job of it (:func:`publish_dirs_for_inputs`),
    else the folders given, of which there must be one."""
    if inputs_file is not None:
        return publish_dirs_for_inputs(load_inputs(inputs_file), job_dirs)
    if not job_dirs:
        raise UsageError("give the job folders to publish (out/<job-id>), or --inputs inputs.json")
    return tuple(job_dirs)


def select_night_jobs(options: NightOptions) -> list[Job]:
    return matrix.select_jobs(list(options.data.jobs), options.only)


@dataclass(frozen=True)
class NightPlan:
    """What a night has to do, decided before anything is downloaded: the pinned inputs, and whether the last
    release was made from them (then nothing is built: the matrix is empty)."""

    inputs: InputsRecord
    inputs_path: Path
    jobs: tuple[Job, ...]  # the selection (every OS when planning for the CI fan-out)
    changes: tuple[str, ...] = ()  # what differs from the last release
    unchanged_since: str | None = None  # the tag of the release made from these inputs

    @property
    def build(self) -> tuple[Job, ...]:
        """The jobs to build: none when the last release has these inputs."""
        return () if self.unchanged_since else self.jobs

    def github_matrix(self) -> dict[str, Any]:
        """The build legs: every job to build but the common parts (their own legs come first)."""
        return github_matrix([j for j in self.build if not j.is_common_part])

    def common_matrix(self) -> dict[str, Any]:
        """The common parts' legs (docs/common-part.md): one per OS whose GPU jobs build on one."""
        return github_matrix([j for j in self.build if j.is_common_part])

    def gpu_matrix(self) -> dict[str, Any]:
        """The GPU smoke legs: one per job built with a ``gpu_smoke`` runner (its labels, whether it gates)."""
        return {
            "include": [
                {"id": j.id, "gpu_runner": list(j.gpu_runner), "gpu_required": j.gpu_required}
                for j in self.build
                if j.gpu_runner
            ]
        }

    def write_github_output(self, path: Path) -> None:
        """``matrix=``/``changed=`` for the build legs (none when unchanged) and ``gpu_matrix=``/``gpu=`` for the
        GPU smoke legs (none without a ``gpu_smoke`` runner): GitHub refuses an empty matrix, so each has a flag."""
        gpu, common = self.gpu_matrix(), self.common_matrix()
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"matrix={json.dumps(self.github_matrix(), separators=(',', ':'))}\n")
            fh.write(f"common_matrix={json.dumps(common, separators=(',', ':'))}\n")
            fh.write(f"common={'true' if common['include'] else 'false'}\n")
            fh.write(f"changed={'false' if self.unchanged_since else 'true'}\n")
            fh.write(f"gpu_matrix={json.dumps(gpu, separators=(',', ':'))}\n")
            fh.write(f"gpu={'true' if gpu['include'] else 'false'}\n")

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": "unchanged" if self.unchanged_since else "changed",
            "inputs": str(self.inputs_path),
            "llama_commit": self.inputs.llama_cpp.commit,
            "release": self.unchanged_since,
            "changes": list(self.changes),
            "jobs": [j.id for j in self.build],
            "matrix": self.github_matrix(),
            "common_matrix": self.common_matrix(),
            "gpu_matrix": self.gpu_matrix(),
        }

    def render(self) -> str:
        commit = self.inputs.llama_cpp.commit[:12]
        if self.unchanged_since:
            return (
                f"night: unchanged: the last release {self.unchanged_since} was made from these inputs "
                f"(llama.cpp {commit}, same ROCm tarballs); nothing to build"
            )
        return f"night: {len(self.build)} job(s) to build from llama.cpp {commit} ({self.inputs_path})"


def _repo_and_token(options: NightOptions) -> tuple[str | None, str | None, bool]:
    github = options.context.github
    token = options.token if options.token is not None else github.token
    repo = options.github.repo or github.repository
    publishing = options.publish if options.publish is not None else repo is not None
    if publishing and repo is None:
        raise UsageError("--publish needs a repository", hint="pass --repo OWNER/NAME, or --no-publish")
    return repo, token, publishing


def night_patches(options: NightOptions) -> str:
    """The digest of the patch series this night carries (``none`` with --no-patches)."""
    return carried_patches(options.data.patches, options.compile)


def _inputs_file(options: NightOptions, inputs_file: Path | None) -> Path:
    return Path(inputs_file) if inputs_file is not None else Path(options.out).absolute() / INPUTS_FILE


def plan_night(options: NightOptions, *, inputs_file: Path | None = None, host: str | None = None) -> NightPlan:
    """``rockbuild nightly --plan``: resolve the inputs once (written to ``inputs_file``, default OUT/inputs.json)
    and compare them with the last release's manifest when publishing. ``host``: only that OS's jobs count (a whole
    night on one machine); None: every job (the CI fan-out plans for all runners)."""
    say = console.info
    repo, token, publishing = _repo_and_token(options)
    jobs = select_night_jobs(options)
    with console.step("resolve the night's inputs"):
        inputs = resolve_inputs(jobs, options.pins, patches=night_patches(options))
        if options.held_back is not None:
            inputs = replace(inputs, llama_cpp=replace(inputs.llama_cpp, held_back=_held_back_to(options, inputs)))
        path = inputs.write(_inputs_file(options, inputs_file))
    counted = [j for j in jobs if host is None or j.os == host]
    plan = NightPlan(inputs, path, tuple(counted))
    if not publishing:
        return plan
    assert repo is not None
    latest, manifest = latest_manifest(repo, api_url=options.github.api_url, token=token)
    if latest is None:
        return plan  # no release yet: nothing to compare with, no last good tarball to find
    buildable = [j.id for j in counted if not inputs.unresolved(j.id)]
    if manifest is None:  # the newest release says nothing usable: build, and look further back for the last good
        changes: tuple[str, ...] = (f"the latest release {latest} has no valid manifest.json",)
    else:
        changes = tuple(manifest_differences(inputs, manifest, buildable))
    if not changes and buildable:
        plan = replace(plan, unchanged_since=latest)
        say(plan.render())
        return plan
    say(
        f"changed since {latest}: {'; '.join(changes[:5])}"
        + (f" (and {len(changes) - 5} more)" if len(changes) > 5 else "")
    )
    # each group's last good tarball, for a job that fails with the newest (the inputs file carries it to the legs),
    # and the `required: when-proven` jobs that passed their smoke test in a release read for it
    good, read = known_good(
        inputs, release_manifests(repo, api_url=options.github.api_url, token=token, read={latest: manifest})
    )
    inputs = attach_job_last_good(promote_proven(attach_last_good(inputs, good), read), last_good_jobs(read))
    inputs.write(path)
    return replace(plan, inputs=inputs, changes=changes, jobs=tuple(inputs.job(j.id) for j in plan.jobs))


def _held_back_to(options: NightOptions, inputs: InputsRecord) -> HeldBack:
    """--held-back's record, once the night resolved its commit (it must be the record's good one)."""
    held = options.held_back
    assert held is not None
    if inputs.llama_cpp.commit != held.good.commit:
        raise UsageError(
            f"--held-back builds llama.cpp {held.good.commit[:12]}, but --llama-ref "
            f"{inputs.llama_cpp.ref} is {inputs.llama_cpp.commit[:12]}",
            hint="leave --llama-ref out (or give the held-back commit)",
        )
    return held


def promote_proven(
    inputs: InputsRecord, manifests: Sequence[tuple[str, ManifestRecord | Mapping[str, Any]]]
) -> InputsRecord:
    """``inputs`` with every ``required: when-proven`` job required once it passed its smoke test in one of
    ``manifests`` (published releases, newest first): from then on a failure blocks the release."""
    passed: dict[str, str] = {}
    for tag, manifest in reversed(manifests):  # oldest first: the first release that proved it
        for entry in smoke_passed(manifest):
            passed.setdefault(entry.id, tag)
    jobs = []
    for job in inputs.jobs:
        if job.when_proven and not job.required and job.id in passed:
            job = replace(job, required=True)
            console.info(
                f"{job.id} is required: it passed its smoke test in release {passed[job.id]} (required: when-proven)"
            )
        jobs.append(job)
    return replace(inputs, jobs=tuple(jobs))


def run_night_job(options: NightOptions, job_id: str, *, inputs_file: Path | None = None) -> NightReport:
    """``rockbuild nightly --job ID``: one job of a planned night (a CI leg): fetch, build, bundle and smoke with
    resume, through the same stages as the whole night. Fails (exit 1) when the job failed."""
    start = time.monotonic()
    path = _inputs_file(options, inputs_file)
    inputs = load_inputs(path)
    job = inputs.job(job_id)
    if inputs.patches is not None and inputs.patches != night_patches(options):
        raise StaleInputError(
            f"{path} was planned with the carried patch series {inputs.patches}; this leg carries "
            f"{night_patches(options)}",
            hint="every leg builds what the plan resolved: run the leg from the same "
            "rockbuild checkout and flags (--patches/--no-patches) as --plan, or plan again",
        )
    if options.compile.cross is not None:
        cross_spec(options.compile.cross, job.os)  # an unknown toolchain, or one for another OS, stops here
    elif job.os != options.context.host_os:
        raise UsageError(f"job {job.id} builds for {job.os}; run it on a {job.os} machine")
    outcome = _run_guarded(job, Night(options, inputs))
    state: NightState = "built" if outcome.status == "ok" else "failed"
    message = (
        f"{job.id}: every stage passed"
        if outcome.status == "ok"
        else f"{job.id} failed at {outcome.failed_stage}: {outcome.message}"
    )
    report = NightReport(state, message, path, inputs.llama_cpp.commit, (outcome,), seconds=time.monotonic() - start)
    _write_step_summary(options, report)
    return report


def release_night(
    options: NightOptions,
    job_dirs: Sequence[Path],
    *,
    inputs_file: Path | None = None,
    outcomes: Sequence[StagesOutcome] = (),
    changes: tuple[str, ...] = (),
    summary: bool = True,
) -> NightReport:
    """``rockbuild nightly --release JOB_DIR...``: publish the planned night's job folders by the gating rules (every
    job of the inputs counts; one without a folder failed) and alert when the night failed."""
    start = time.monotonic()
    path = _inputs_file(options, inputs_file)
    inputs = load_inputs(path)
    repo, token, publishing = _repo_and_token(options)
    dirs = publish_dirs_for_inputs(inputs, job_dirs, default_out=Path(options.out).absolute())
    if inputs.llama_cpp.held_back is None:  # a night held back once is never held back again
        hold = held_back_of(
            [t for t in (_read_triage(JobFolder(Path(d))) for d in dirs) if t is not None],
            inputs.llama_cpp,
            oldest=lambda commits: oldest_commit(
                commits, url=inputs.llama_cpp.url, cache=options.cache or options.context.cache
            ),
        )
        if hold is not None:
            report = _hold_back(options, inputs, path, dirs, hold, outcomes=tuple(outcomes), changes=changes)
            report = replace(report, seconds=time.monotonic() - start)
            if summary:
                _write_step_summary(options, report)
            return report
    # a required job that llama.cpp broke ships as missing (the matrix's regressions.ship): the release goes out
    missing = [o for o in outcomes if o.status != "ok" and o.required and o.ship == "missing"]
    failed_required = [o for o in outcomes if o.status != "ok" and o.required and o.ship != "missing"]
    failed_optional = [o for o in outcomes if o.status != "ok" and not o.required]
    release: dict[str, Any] | None = None
    legs: list[LegFailure] = []
    state: NightState = "built"
    message = f"{sum(o.status == 'ok' for o in outcomes)} of {len(outcomes)} jobs passed"
    if failed_optional:
        message += f"; optional jobs failed: {', '.join(o.id for o in failed_optional)}"
    if missing:
        message += f"; left out, llama.cpp broke them: {', '.join(o.id for o in missing)}"
    if failed_required:
        state = "blocked"
        message = (
            f"required job(s) failed: {', '.join(f'{o.id} at {o.failed_stage}' for o in failed_required)}; "
            "nothing published"
        )
    elif publishing:
        try:
            with console.step("publish"):
                result = publish(
                    PublishOptions(
                        job_dirs=dirs,
                        repo=repo,
                        api_url=options.github.api_url,
                        token=token,
                        out=Path(options.out).absolute() / "release",
                        run_url=options.run_url,
                        step_summary=options.step_summary,
                        throttle=options.throttle,
                        allow_partial=options.allow_partial,
                        images=options.images,
                        held_back=inputs.llama_cpp.held_back,
                        tool_wheel=options.tool_wheel,
                        context=options.context,
                    ),
                    options.data.publish,
                    options.data.programs,
                )
            release = result.to_dict()
            state, message = (
                result.state,
                f"{result.tag}: {result.message}"
                + (f"; optional jobs failed: {', '.join(o.id for o in failed_optional)}" if failed_optional else "")
                + (f"; left out, llama.cpp broke them: {', '.join(o.id for o in missing)}" if missing else ""),
            )
        except PublishError as exc:
            state, message = "failed", f"publishing failed: {exc.message}"
            legs.append(LegFailure("publish", message + (f" (hint: {exc.hint})" if exc.hint else "")))
    alert = None
    fell_back = [d for d in dirs if JobFolder(Path(d)).fallback()]
    blamed = [d for d in dirs if _llama_broke(JobFolder(Path(d)))]  # worth an issue even when published
    if (state in ("blocked", "failed") or fell_back or blamed) and publishing:
        # a fallback names the ROCm nightly that broke the job; a failed leg says what failed
        alert = _send_alert(dirs, options, repo, token, legs=legs, published=release is not None)
    report = NightReport(
        state,
        message,
        path,
        inputs.llama_cpp.commit,
        tuple(outcomes),
        (),
        release,
        alert,
        time.monotonic() - start,
        changes,
    )
    if summary:
        _write_step_summary(options, report)
    return report


def _hold_back(
    options: NightOptions,
    inputs: InputsRecord,
    path: Path,
    dirs: Sequence[Path],
    hold: HeldBack,
    *,
    outcomes: tuple[StagesOutcome, ...],
    changes: tuple[str, ...],
) -> NightReport:
    """``ship: newest-good``: publish nothing from tonight's commit; write ``OUT/held-back.json`` (what the night is
    built again from: here by :func:`run_night`, in the CI fan-out by the workflow, see the command's GitHub output),
    and alert upstream's regression now."""
    hold.write(Path(options.out).absolute() / HeldBack.FILE)
    console.warn(
        f"held back: {hold.describe()} (regressions.ship: newest-good); every job is built again from "
        f"{hold.good.commit[:12]}"
    )
    repo, token, publishing = _repo_and_token(options)
    alert = _send_alert(dirs, options, repo, token, published=False) if publishing else None
    return NightReport(
        "held-back",
        hold.describe(),
        path,
        inputs.llama_cpp.commit,
        outcomes,
        alert=alert,
        changes=changes,
        held_back=hold,
    )


def run_night(options: NightOptions) -> NightReport:
    """The whole night on one machine: plan (stop when the last release was made from the same inputs), run every
    job of this machine's OS, then release (publish by the gating rules when publishing, alert on failure); a night
    held back (``ship: newest-good``) runs once more from the commit before the first bad one."""
    start = time.monotonic()
    report = _whole_night(options)
    if report.held_back is not None and options.held_back is None:
        first = report
        report = _again_held_back(options, report.held_back, Path(options.out).absolute())
        report = replace(report, alert=report.alert or first.alert)
    report = replace(report, seconds=time.monotonic() - start)
    _write_step_summary(options, report)
    return report


def _whole_night(options: NightOptions) -> NightReport:
    start = time.monotonic()
    say = console.info
    host = options.context.host_os
    plan = plan_night(options, host=host)
    here = list(plan.jobs)
    not_here = tuple(j.id for j in plan.inputs.jobs if j.os != host)
    if not_here:
        say(f"not built on this {host} machine: {', '.join(not_here)}")
    if not here:
        raise UsageError(f"no job of the selection builds on {host}", hint="use --os or --only")
    if plan.unchanged_since:
        message = plan.render().removeprefix("night: unchanged: ")
        return NightReport(
            "unchanged",
            message,
            plan.inputs_path,
            plan.inputs.llama_cpp.commit,
            not_here=not_here,
            seconds=time.monotonic() - start,
            held_back=plan.inputs.llama_cpp.held_back,
        )

    night = Night(options, plan.inputs)
    with ThreadPoolExecutor(max_workers=max(1, options.parallel)) as pool:
        # each OS's common part first: the jobs built on it take its files (docs/common-part.md)
        first = [j for j in here if j.is_common_part]
        outcomes = list(pool.map(lambda job: _run_guarded(job, night), first))
        outcomes += list(pool.map(lambda job: _run_guarded(job, night), [j for j in here if not j.is_common_part]))
    order = {j.id: i for i, j in enumerate(here)}
    outcomes.sort(key=lambda o: order[o.id])
    out = Path(options.out).absolute()
    report = release_night(
        options,
        [out / j.id for j in here],
        inputs_file=plan.inputs_path,
        outcomes=outcomes,
        changes=plan.changes,
        summary=False,
    )
    return replace(
        report,
        not_here=not_here,
        seconds=time.monotonic() - start,
        held_back=report.held_back or plan.inputs.llama_cpp.held_back,
    )


def _again_held_back(options: NightOptions, hold: HeldBack, out: Path) -> NightReport:
    """The whole night once more from ``hold.good``: each job that tonight's commit broke keeps its folder beside
    the job's (``OUT/<job-id>@llama-<commit>``, its triage.json with it); every job is built again (incrementally)."""
    for job_id in hold.jobs:
        kept = out / f"{job_id}@llama-{hold.tip[:12]}"
        shutil.rmtree(kept, ignore_errors=True)
        if (out / job_id).is_dir():
            (out / job_id).rename(kept)
    again = replace(options, pins=replace(options.pins, llama_ref=hold.good.commit), held_back=hold)
    console.info(f"the night again from llama.cpp {hold.good.commit[:12]}, the commit before the first bad one")
    report = _whole_night(again)
    return replace(report, message=f"held back: {hold.describe()}; {report.message}", held_back=hold)


def _run_guarded(job: Job, night: Night) -> StagesOutcome:
    try:
        return run_job(job, night)
    except RockbuildError as exc:  # e.g. the job folder cannot be written: the job failed, the night goes on
        console.warn(f"{job.id}: {exc.message}")
        return StagesOutcome(job.id, job.required, "failed", {}, "setup", exc.message)


def _send_alert(
    dirs: Sequence[Path],
    options: NightOptions,
    repo: str | None,
    token: str | None,
    *,
    legs: Sequence[LegFailure] = (),
    published: bool = True,
) -> str:
    # off GitHub Actions no URL names the run: the host does (a file:// URL would be this machine's path)
    run_url = options.run_url or options.context.github.run_url or f"rockbuild nightly on {socket.gethostname()}"
    try:
        with console.step("alert"):
            target = AlertTarget(
                run_url=run_url, repo=repo, api_url=options.github.api_url, token=token, throttle=options.throttle
            )
            report = send_alert(
                dirs,
                target,
                context=options.context.but(cache=options.cache),
                config=options.data.publish,
                legs=legs,
                published=published,
            )
        return report.message
    except RockbuildError as exc:
        console.warn(f"the alert was not sent: {exc.message}")
        return f"not sent: {exc.message}"


def _write_step_summary(options: NightOptions, report: NightReport) -> None:
    path = options.step_summary or options.context.github.step_summary
    if path is None:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(report.render_markdown())
