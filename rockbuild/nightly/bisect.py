"""``rockbuild bisect``: which ROCm nightly broke a job, or (``--llama GOOD..BAD``) which llama.cpp commit.

The job's tarball group lists one tarball per nightly date in the index. Between a date known good and a date known
bad, bisect builds, bundles and smoke-tests the job on the middle date, keeps the half that holds the change, and
stops when the good and the bad date are neighbours: the bad one is the first bad nightly. The end dates are taken as
given (``check_ends`` tests them first). Each date's job folder is ``OUT/<version>/<job-id>``, with the night's
resume: a second bisect over the same dates reuses every stage that passed, and ccache keeps the compiles of one
date for the next.

``--llama GOOD..BAD`` halves llama.cpp's commits instead, on the job's newest ROCm, every step an incremental build of
the job in one folder (``OUT/<job-id>``), the same bisect a night runs by itself when llama.cpp broke a job
(rockbuild.nightly.triage).
"""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rockbuild import console
from rockbuild.backends import get_backend
from rockbuild.core.errors import FetchError, NotFoundError, UsageError
from rockbuild.core.options import RegressionPolicy
from rockbuild.core.record import SECONDS, Record
from rockbuild.core.records import InputsJob, InputsRocm, LlamaBisect, Verdict
from rockbuild.downloader import get_text
from rockbuild.llamacpp.source import DEFAULT_GIT_URL, commits_between
from rockbuild.matrix import find_job
from rockbuild.pipeline.inputs import inputs_record, resolve_inputs, resolve_llama, rocm_key, tarball_fields
from rockbuild.rocm.index import list_tarballs
from rockbuild.rocm.names import parse_rocm_version

from .run import Night, NightOptions, select_night_jobs
from .triage import Trials, bisect_job

_DATE_RE = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})$")


def parse_date(text: str, what: str) -> datetime.date:
    """``2026-11-28``, ``20261128``, or a nightly version such as ``10.1.0a20261128``."""
    value = text.strip()
    version = parse_rocm_version(value)
    if version is not None and version.date is not None:
        return version.date
    m = _DATE_RE.match(value)
    if m:
        try:
            return datetime.date(int(m[1]), int(m[2]), int(m[3]))
        except ValueError:
            pass
    raise UsageError(f"{what} {text!r} is not a date (YYYY-MM-DD) or a nightly version (10.1.0a20261128)")


@dataclass(frozen=True)
class Trial(Record):
    """One nightly the bisect built and smoke-tested (a record: ``rockbuild bisect --json``'s ``trials``)."""

    version: str
    date: str
    tarball: str
    verdict: Verdict
    failed_stage: str | None = None
    message: str | None = None
    seconds: float = field(default=0.0, metadata=SECONDS)
    folder: str = ""


@dataclass(frozen=True)
class BisectReport(Record):
    """``rockbuild bisect``'s result (a record: its ``--json``)."""

    job: str
    llama_commit: str
    candidates: tuple[str, ...]  # the nightly versions from the good date to the bad date, oldest first
    last_good: str
    first_bad: str
    trials: tuple[Trial, ...]
    ends_tested: bool
    seconds: float = field(default=0.0, metadata=SECONDS)

    @property
    def exit_code(self) -> int:
        return 0

    def render(self) -> str:
        lines = [
            f"bisect {self.job}: {len(self.candidates)} nightlies, {len(self.trials)} tested"
            f" (llama.cpp {self.llama_commit[:12]})"
        ]
        for trial in self.trials:
            why = f": failed {trial.failed_stage}: {trial.message}" if trial.verdict == "bad" else ""
            lines.append(f"  {trial.date} {trial.version}: {trial.verdict}{why}")
        ends = "" if self.ends_tested else " (the --good and --bad dates taken as given)"
        lines.append(f"first bad nightly: {self.first_bad}; last good: {self.last_good}{ends}")
        return "\n".join(lines)


def nightly_tarballs(
    job: Any, good: datetime.date, bad: datetime.date, *, index_url: str | None, fetch_text: Any = None
) -> list[InputsRocm]:
    """One tarball per nightly date of the job's group from ``good`` to ``bad`` (the newest of a date), oldest
    first; both ends must be there."""
    listed = list_tarballs(
        platform=job.os,
        groups=(job.group, *job.legacy_groups),
        channel=job.rocm_channel,
        index_url=index_url,
        fetch_text=fetch_text or get_text,
        on_date=bad,
    )
    by_date: dict[datetime.date, Any] = {}
    for entry in listed:  # newest first: the first of a date is that night's newest
        if entry.name.date is not None:
            by_date.setdefault(entry.name.date, entry)
    for day, what in ((good, "--good"), (bad, "--bad")):
        if day not in by_date:
            near = sorted(by_date, key=lambda d: abs((d - day).days))[:3]
            shown = ", ".join(d.isoformat() for d in sorted(near)) or "none"
            raise NotFoundError(
                f"{what} {day.isoformat()}: no {job.os} {job.group} nightly of that date in the index; nearest: {shown}"
            )
    chosen = [by_date[d] for d in sorted(by_date) if good <= d <= bad]
    return [
        InputsRocm(
            key=rocm_key(job, e.name.version.text),
            os=job.os,
            groups=(job.group, *job.legacy_groups),
            channel=job.rocm_channel,
            requested=e.name.version.text,
            **tarball_fields(e),
        )
        for e in chosen
    ]


def bisect_rocm(
    options: NightOptions,
    job_id: str,
    good: datetime.date,
    bad: datetime.date,
    *,
    check_ends: bool = False,
    fetch_text: Any = None,
) -> BisectReport:
    """Name the first nightly between ``good`` and ``bad`` on which ``job_id`` fails (see the module docstring)."""
    start = time.monotonic()
    if good >= bad:
        raise UsageError(f"--good {good.isoformat()} must be before --bad {bad.isoformat()}")
    # each trial builds the job whole: one folder per nightly, no common part built beside it
    job = replace(find_job(select_night_jobs(options), job_id), common="")
    if not get_backend(job.backend).needs_rocm:
        raise UsageError(f"{job.id} is a {job.backend} job: it uses no ROCm, so there is no ROCm nightly to bisect")
    candidates = nightly_tarballs(job, good, bad, index_url=options.pins.index_url, fetch_text=fetch_text)
    llama = resolve_llama(options.pins.llama_ref or job.llama_ref, options.pins.git_url or DEFAULT_GIT_URL)
    say = console.info
    say(f"bisect {job.id}: {len(candidates)} nightlies from {good} to {bad}, llama.cpp {llama.commit[:12]}")
    trials: list[Trial] = []

    def test(rocm: InputsRocm) -> bool:
        out = Path(options.out).absolute() / str(rocm.version)
        inputs = inputs_record(
            llama, {rocm.key: rocm}, (InputsJob.of(job, rocm.key),), index_url=options.pins.index_url
        )
        with console.step(f"{job.id} on ROCm {rocm.describe()}") as step:
            outcome = Night(replace(options, out=out), inputs).pipeline.run(job, rocm)
            if outcome.status != "ok":
                step.fail()
        if outcome.failed_stage == "fetch":  # not a verdict on the nightly: it could not be tried
            raise FetchError(
                f"{rocm.name} could not be fetched: {outcome.message}",
                hint="check the index and the network, then run bisect again (it resumes)",
            )
        verdict: Verdict = "good" if outcome.status == "ok" else "bad"
        trials.append(
            Trial(
                str(rocm.version),
                str(rocm.date),
                str(rocm.name),
                verdict,
                outcome.failed_stage,
                outcome.message,
                outcome.seconds,
                str(out / job.id),
            )
        )
        say(f"  {rocm.date} {rocm.version}: {verdict}")
        return verdict == "good"

    lo, hi = 0, len(candidates) - 1
    if check_ends:
        if not test(candidates[lo]):
            raise UsageError(
                f"--good {good.isoformat()} is not good: {job.id} fails there too "
                f"({trials[-1].failed_stage}: {trials[-1].message})",
                hint="pick an earlier --good date",
            )
        if test(candidates[hi]):
            raise UsageError(
                f"--bad {bad.isoformat()} is not bad: {job.id} passes there",
                hint="the failure is not in these nightlies (or it is flaky)",
            )
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if test(candidates[mid]):
            lo = mid
        else:
            hi = mid
    return BisectReport(
        job.id,
        llama.commit,
        tuple(str(c.version) for c in candidates),
        _label(candidates[lo]),
        _label(candidates[hi]),
        tuple(trials),
        check_ends,
        time.monotonic() - start,
    )


def _label(rocm: InputsRocm) -> str:
    return f"{rocm.version} ({rocm.date})"


# ---------------------------------------------------------------------------------------------------------------------
# llama.cpp commits (rockbuild bisect --llama GOOD..BAD)


@dataclass(frozen=True)
class LlamaBisectReport(Record):
    """``rockbuild bisect --llama``'s result (a record: its ``--json``): the job, the ROCm it built on, the bisect."""

    job: str
    rocm: str | None
    bisect: LlamaBisect
    ends_tested: bool
    seconds: float = field(default=0.0, metadata=SECONDS)

    @property
    def exit_code(self) -> int:
        return 0

    def render(self) -> str:
        b = self.bisect
        lines = [
            f"bisect {self.job}: {b.candidates} llama.cpp commit(s) {b.good[:12]}..{b.bad[:12]} on "
            f"{self.rocm or 'no ROCm'}, {len(b.trials)} built"
        ]
        for trial in b.trials:
            why = f" ({trial.failed_stage}: {trial.message})" if trial.verdict == "bad" else ""
            lines.append(f"  {trial.llama_commit[:12]} {trial.subject or ''}: {trial.verdict}{why}")
        first, good = b.first_bad, b.last_good
        ends = "" if self.ends_tested else " (the ends taken as given)"
        if b.complete and first is not None:
            lines.append(
                f"first bad commit: {first.commit} {first.subject or ''}, failing at "
                f"{b.failed_stage or '?'}; last good: {good.commit[:12] if good else b.good[:12]}{ends}"
            )
        else:
            lines.append(
                f"{b.stopped or 'stopped'}: the first bad commit is after "
                f"{good.commit[:12] if good else b.good[:12]} and at or before "
                f"{first.commit[:12] if first else b.bad[:12]}{ends}"
            )
        return "\n".join(lines)


def parse_range(text: str) -> tuple[str, str | None]:
    """``GOOD..BAD`` (``GOOD..``: up to the job's llama_ref): two commits, tags or branches of llama.cpp."""
    good, sep, bad = text.strip().partition("..")
    if not sep or not good or bad.startswith("."):
        raise UsageError(
            f"--llama {text!r} is not a range: give GOOD..BAD (commits, tags or branches), or GOOD.. "
            "for everything since GOOD"
        )
    return good, bad or None


def bisect_llama(
    options: NightOptions, job_id: str, commits: str, *, check_ends: bool = False, fetch_text: Any = None
) -> LlamaBisectReport:
    """Name the first llama.cpp commit of ``commits`` (``GOOD..BAD``) on which ``job_id`` fails, on the job's newest
    ROCm (or ``--rocm-version``): each step an incremental build of the job in one folder, ``OUT/<job-id>``."""
    start = time.monotonic()
    good, bad = parse_range(commits)
    job = replace(find_job(select_night_jobs(options), job_id), common="")  # each step builds the job whole
    url = options.pins.git_url or DEFAULT_GIT_URL
    bad_commit = resolve_llama(bad or options.pins.llama_ref or job.llama_ref, url).commit
    commits_between(good, bad_commit, url=url, cache=options.cache or options.context.cache)  # a bad range stops here
    inputs = resolve_inputs([job], replace(options.pins, llama_ref=bad_commit), fetch_text=fetch_text)
    unresolved = inputs.unresolved(job.id)
    if unresolved is not None:
        raise unresolved.failure()
    rocm = inputs.rocm_for(job.id)
    trials = Trials(Night(options, inputs).pipeline, job, rocm, Path(options.out).absolute())
    unbounded = RegressionPolicy(bisect_steps=10_000, bisect_minutes=10_000_000)
    if check_ends:
        for commit, want in ((good, "good"), (bad_commit, "bad")):
            trial, _tail = trials.run(commit)
            if trial.verdict != want:
                end = "--llama's GOOD end" if want == "good" else "--llama's BAD end"
                raise UsageError(
                    f"{end} {commit[:12]} is not {want}: {job.id} "
                    + (
                        f"fails there too ({trial.failed_stage}: {trial.message})" if want == "good" else "passes there"
                    ),
                    hint="pick an older GOOD commit"
                    if want == "good"
                    else "the failure is not in this range (or it is flaky)",
                )
    bisected = bisect_job(trials, good, bad_commit, policy=unbounded)
    return LlamaBisectReport(
        job.id, rocm.describe() if rocm is not None else None, bisected, check_ends, time.monotonic() - start
    )
