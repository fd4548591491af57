"""Which input broke a failed job, found with the fewest extra builds, and the llama.cpp bisect that names the commit.

A night's job has three inputs that change under it: llama.cpp's commit, the ROCm nightly and the machine. When the
job fails, its triage compares tonight's inputs with those of the release where it last passed (inputs.json's
``last_good``, from that release's manifest.json):

- only llama.cpp changed: llama.cpp broke it; no extra build;
- only ROCm changed: ROCm is suspect; the night's retry on the last good ROCm (rockbuild.nightly.run) confirms it;
- neither changed: the machine (the same inputs passed before);
- both changed: one extra build, the last good llama.cpp on tonight's ROCm. It passes: llama.cpp broke it. It fails:
  ROCm is suspect, and the retry on the last good ROCm decides. That build is made in the bisect's folder, so the
  bisect that follows starts from it.

When llama.cpp broke it, :func:`bisect_commits` halves the commits between the last good one and tonight's, each step
an incremental build of the job in one folder (``OUT/bisect-llama.cpp/<job-id>``, ccache warm) judged by the same
stages (build, bundle, smoke), within the matrix's ``regressions:`` bounds, and names the first bad commit, its
subject and its pull request. Everything lands in the job folder's ``triage.json`` for publish, the notes and the
alert. docs/commands.md, "When a night breaks", tells the same for people.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rockbuild import console
from rockbuild.core.jobs import Job
from rockbuild.core.options import RegressionPolicy
from rockbuild.core.records import (
    TRIAGE_SCHEMA,
    Cause,
    CommitRef,
    HeldBack,
    InputsLlama,
    InputsRocm,
    JobLastGood,
    LlamaBisect,
    Ship,
    TriageRecord,
    TriageTrial,
    Verdict,
)
from rockbuild.jobfolder import JobFolder
from rockbuild.llamacpp.source import commits_between, pull_request
from rockbuild.pipeline.job import JobPipeline
from rockbuild.pipeline.stages import StagesOutcome
from rockbuild.publish.jobs import load_job

BISECT_DIR = "bisect-llama.cpp"  # OUT/bisect-llama.cpp/<job-id>: the one build folder of a job's trials


def short(commit: str | None) -> str:
    return (commit or "?")[:12]


def trial_out(out: Path) -> Path:
    """Where a night's trials of other llama.cpp commits build (one job folder per job below it)."""
    return Path(out) / BISECT_DIR


@dataclass(frozen=True)
class Trials:
    """Where and what a job's trials of other llama.cpp commits build: ``job`` (built whole: a common part is
    tonight's commit's) on ``rocm`` through ``pipeline``, in ``out``'s one folder of the job."""

    pipeline: JobPipeline
    job: Job
    rocm: InputsRocm | None
    out: Path
    tail_lines: int = 40

    def run(self, commit: str, subject: str | None = None) -> tuple[TriageTrial, tuple[str, ...]]:
        """The job built, bundled and smoke-tested from llama.cpp ``commit``: the trial and, when it failed, its
        log's tail."""
        job, rocm, inputs = self.job, self.rocm, self.pipeline.inputs
        pinned = replace(inputs, llama_cpp=replace(inputs.llama_cpp, ref=commit, commit=commit, build_number=None))
        rocm_label = rocm.describe() if rocm is not None else "no ROCm"
        with console.step(f"{job.id}: llama.cpp {short(commit)} on {rocm_label}") as step:
            outcome = replace(self.pipeline, inputs=pinned, out=self.out).run(replace(job, common=""), rocm)
            if outcome.status != "ok":
                step.fail()
        folder = JobFolder.of(self.out, job.id)
        build = folder.build()
        tail: tuple[str, ...] = ()
        if outcome.status != "ok":
            tail = load_job(folder.path, tail_lines=self.tail_lines).log_tail
        verdict: Verdict = "good" if outcome.status == "ok" else "bad"
        console.info(
            f"    {job.id}: llama.cpp {short(commit)}: {verdict}"
            + (f" ({outcome.failed_stage}: {outcome.message})" if verdict == "bad" else "")
        )
        return TriageTrial(
            llama_commit=commit,
            rocm=rocm.name if rocm is not None else None,
            verdict=verdict,
            failed_stage=outcome.failed_stage,
            message=outcome.message,
            seconds=round(outcome.seconds, 3),
            subject=subject,
            folder=str(folder.path),
            ccache=build.ccache if build is not None else None,
        ), tail


@dataclass(frozen=True)
class Failure:
    """A job that failed tonight, as its triage starts from it: how it failed, what it was built from (tonight's
    llama.cpp and ROCm), the release where it last passed, and its log's tail."""

    job: Job
    outcome: StagesOutcome
    llama: InputsLlama
    rocm: InputsRocm | None
    last: JobLastGood | None
    log_tail: tuple[str, ...] = ()

    def bad_end(self) -> TriageTrial:
        """Tonight's build as the bisect's known bad end."""
        return TriageTrial(
            llama_commit=self.llama.commit,
            rocm=self.rocm.name if self.rocm else None,
            verdict="bad",
            failed_stage=self.outcome.failed_stage,
            message=self.outcome.message,
            seconds=self.outcome.seconds,
        )

    def record(
        self,
        cause: Cause,
        evidence: str,
        *,
        ship: Ship,
        trials: tuple[TriageTrial, ...] = (),
        bisect: LlamaBisect | None = None,
    ) -> TriageRecord:
        """triage.json's record of the verdict."""
        last = self.last
        return TriageRecord(
            schema=TRIAGE_SCHEMA,
            job=self.job.id,
            cause=cause,
            evidence=evidence,
            failed_stage=self.outcome.failed_stage,
            reason=self.outcome.message,
            log_tail=self.log_tail,
            llama_commit=self.llama.commit,
            llama_url=self.llama.url,
            rocm=self.rocm.name if self.rocm is not None else None,
            last_good_release=last.release if last else None,
            last_good_llama=last.llama_commit if last else None,
            last_good_rocm=last.rocm if last else None,
            trials=trials,
            bisect=bisect,
            ship=ship,
        )


@dataclass(frozen=True)
class Diagnosis:
    """What the first look found: the input blamed (``rocm`` still to be confirmed on the last good ROCm when
    ``retry_rocm``), why, and the build it made."""

    cause: Cause
    evidence: str
    trials: tuple[TriageTrial, ...] = ()
    retry_rocm: bool = False


def diagnose(
    failed: StagesOutcome,
    tonight: str,
    rocm: InputsRocm | None,
    last: JobLastGood | None,
    *,
    can_fall_back: bool,
    try_last_good: Callable[[str], TriageTrial],
) -> Diagnosis:
    """Which input broke the job tonight (llama.cpp ``tonight`` on ``rocm``; see the module docstring): at most one
    extra build, ``try_last_good(commit)``, the last good llama.cpp on tonight's ROCm."""
    if failed.failed_stage in (None, "fetch"):  # the tarball could not be had: the retry takes the last good one
        return Diagnosis(
            "rocm", f"tonight's ROCm {rocm.name if rocm else ''} could not be fetched".strip(), retry_rocm=can_fall_back
        )
    if last is None:
        why = "the job passed in no published release read, so there is nothing to compare tonight's inputs with"
        return Diagnosis("unknown", why, retry_rocm=can_fall_back)
    llama_changed = bool(last.llama_commit) and last.llama_commit != tonight
    rocm_changed = rocm is not None and last.rocm != rocm.name
    where = f"release {last.release}"
    if not llama_changed and not rocm_changed:
        return Diagnosis(
            "machine",
            f"the same llama.cpp {short(tonight)} and ROCm {last.rocm or '(none)'} passed in "
            f"{where}: the inputs did not change",
        )
    if llama_changed and not rocm_changed:
        what = f"ROCm {rocm.name}" if rocm is not None else "the job takes no ROCm"
        return Diagnosis(
            "llama.cpp",
            f"only llama.cpp changed since {where} ({short(last.llama_commit)} -> "
            f"{short(tonight)}; {what} is the one it passed on)",
        )
    if rocm_changed and not llama_changed:
        return Diagnosis(
            "rocm",
            f"only ROCm changed since {where} ({last.rocm} -> {rocm.name if rocm else ''})",
            retry_rocm=can_fall_back,
        )
    # both changed: the last good llama.cpp on tonight's ROCm says which (in the bisect's folder: it starts there)
    assert last.llama_commit is not None
    console.info(
        f"    {failed.id}: llama.cpp and ROCm both changed since {where}; trying the last good llama.cpp "
        f"{short(last.llama_commit)} on tonight's ROCm"
    )
    tried = try_last_good(last.llama_commit)
    if tried.verdict == "good":
        return Diagnosis(
            "llama.cpp",
            f"the last good llama.cpp {short(last.llama_commit)} (of {where}) passes on "
            f"tonight's ROCm {rocm.name if rocm else ''}; tonight's {short(tonight)} fails",
            (tried,),
        )
    return Diagnosis(
        "rocm",
        f"the last good llama.cpp {short(last.llama_commit)} (of {where}) fails on tonight's "
        f"ROCm {rocm.name if rocm else ''} too ({tried.failed_stage}: {tried.message})",
        (tried,),
        retry_rocm=can_fall_back,
    )


def after_fallback(
    diagnosis: Diagnosis, fallback_ok: bool, last: JobLastGood | None, fallback_rocm: str | None
) -> tuple[Cause, str]:
    """The cause once tonight's llama.cpp ran on the last good ROCm (``fallback_ok``: it passed there)."""
    if fallback_ok:
        return "rocm", f"{diagnosis.evidence}; tonight's llama.cpp passes on the last good ROCm {fallback_rocm}"
    if diagnosis.cause == "rocm" and diagnosis.trials:  # the old llama.cpp fails on the new ROCm, the new on the old
        return "unknown", (
            f"{diagnosis.evidence}, and tonight's llama.cpp fails on the last good ROCm "
            f"{fallback_rocm} as well: both inputs broke something"
        )
    if last is not None and last.rocm == fallback_rocm and diagnosis.cause == "rocm":
        return "machine", (
            f"{diagnosis.evidence}, but tonight's llama.cpp fails on {fallback_rocm}, which passed "
            f"in release {last.release} with it: not the inputs"
        )
    return "unknown", f"{diagnosis.evidence}; it fails on the last good ROCm {fallback_rocm} too"


# ---------------------------------------------------------------------------------------------------------------------
# The llama.cpp bisect


def bisect_commits(
    commits: Sequence[tuple[str, str]],
    good: str,
    test: Callable[[str, str], TriageTrial],
    *,
    steps: int,
    minutes: float,
    bad_end: TriageTrial | None = None,
    tails: dict[str, tuple[str, ...]] | None = None,
) -> LlamaBisect:
    """Halve ``commits`` (after ``good``, up to the known bad last one; oldest first) with ``test(commit, subject)``
    until the first bad one is named, or ``steps`` builds or ``minutes`` are spent (then the narrowest range)."""
    start = time.monotonic()
    trials: list[TriageTrial] = []
    lo, hi = -1, len(commits) - 1  # commits[lo] (or good) passes, commits[hi] fails
    stopped = None
    while hi - lo > 1:
        if len(trials) >= steps:
            stopped = f"stopped after {steps} build(s) (regressions.bisect_steps)"
            break
        if time.monotonic() - start >= minutes * 60:
            stopped = f"stopped after {minutes:g} minutes (regressions.bisect_minutes)"
            break
        mid = (lo + hi) // 2
        trial = test(*commits[mid])
        trials.append(trial)
        if trial.verdict == "good":
            lo = mid
        else:
            hi = mid
    first = commits[hi]
    tested = {t.llama_commit: t for t in trials}
    failing = tested.get(first[0]) or bad_end
    last_good = (
        CommitRef(commit=commits[lo][0], subject=commits[lo][1], pr=pull_request(commits[lo][1]))
        if lo >= 0
        else CommitRef(commit=good)
    )
    return LlamaBisect(
        good=good,
        bad=commits[-1][0],
        candidates=len(commits),
        first_bad=CommitRef(commit=first[0], subject=first[1], pr=pull_request(first[1])),
        last_good=last_good,
        complete=stopped is None,
        stopped=stopped,
        failed_stage=failing.failed_stage if failing else None,
        log_tail=(tails or {}).get(first[0], ()),
        trials=tuple(trials),
        seconds=round(time.monotonic() - start, 3),
    )


def bisect_job(
    trials: Trials,
    good: str,
    bad: str,
    *,
    policy: RegressionPolicy,
    bad_end: TriageTrial | None = None,
    bad_tail: tuple[str, ...] = (),
) -> LlamaBisect:
    """The llama.cpp bisect of ``trials``' job between the ``good`` and ``bad`` commits (both taken as given)."""
    url = trials.pipeline.inputs.llama_cpp.url
    commits = commits_between(good, bad, url=url, cache=trials.pipeline.cache)
    if not commits:
        return LlamaBisect(good=good, bad=bad, candidates=0, complete=False, stopped="no commit between the two")
    console.info(
        f"    {trials.job.id}: bisecting {len(commits)} llama.cpp commit(s) {short(good)}..{short(bad)} "
        f"(at most {policy.bisect_steps} builds, {policy.bisect_minutes} minutes)"
    )
    tails: dict[str, tuple[str, ...]] = {commits[-1][0]: bad_tail}

    def test(commit: str, subject: str) -> TriageTrial:
        trial, tails[commit] = trials.run(commit, subject)
        return trial

    return bisect_commits(
        commits, good, test, steps=policy.bisect_steps, minutes=policy.bisect_minutes, bad_end=bad_end, tails=tails
    )


def ship_mode(policy: RegressionPolicy, bisect: LlamaBisect | None, *, required: bool, held_back: bool) -> Ship:
    """What the night does with a job that llama.cpp broke: the matrix's ``regressions.ship``, except that
    ``newest-good`` needs a required job (an optional one never holds a release) and a bisect that named the first bad
    commit and the one before it, on a night not already held back (it never holds back twice): else ``missing``."""
    if policy.ship != "newest-good":
        return policy.ship
    named = bisect is not None and bisect.complete and bisect.first_bad is not None and bisect.last_good is not None
    return "newest-good" if required and named and not held_back else "missing"


def held_back_of(
    triages: Sequence[TriageRecord], tip: InputsLlama, *, oldest: Callable[[Sequence[str]], str]
) -> HeldBack | None:
    """The night held back to the newest llama.cpp commit that passes every required job (``ship: newest-good``):
    the commit before the first bad one of each such job's bisect, the oldest of them (``oldest``) when the jobs name
    different ones; None when no job asks for it."""
    held = [
        t
        for t in triages
        if t.cause == "llama.cpp"
        and t.ship == "newest-good"
        and t.bisect is not None
        and t.bisect.first_bad is not None
        and t.bisect.last_good is not None
    ]
    if not held:
        return None
    goods = list(dict.fromkeys(t.bisect.last_good.commit for t in held if t.bisect and t.bisect.last_good))
    good = goods[0] if len(goods) == 1 else oldest(goods)
    head = next(t for t in held if t.bisect and t.bisect.last_good and t.bisect.last_good.commit == good)
    assert head.bisect is not None and head.bisect.last_good is not None and head.bisect.first_bad is not None
    return HeldBack(
        tip=tip.commit,
        tip_build_number=tip.build_number,
        good=head.bisect.last_good,
        first_bad=head.bisect.first_bad,
        jobs=tuple(t.job for t in held),
        failed_stage=head.bisect.failed_stage or head.failed_stage,
    )
