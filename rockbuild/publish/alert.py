"""``rockbuild alert``: tell the issue tracker that a nightly failed, once per run.

The open issue labelled ``nightly-failure`` gets a comment; when there is none, an issue "Nightly build failed
(YYYY-MM-DD)" is opened with that label. Each failed job is listed with the failing step and its log tail. The text
carries the run URL in a hidden marker, so running the alert twice for one run writes nothing the second time.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rockbuild import console
from rockbuild.core.environment import Context
from rockbuild.core.errors import PublishError
from rockbuild.core.record import Record, json_key

from .config import PublishConfig, load_publish_config
from .github import GitHub, redact
from .jobs import BuiltJob, load_job
from .notes import marker, read_marker, render


@dataclass(frozen=True)
class AlertReport(Record):
    """What ``rockbuild alert`` did (a record: its ``--json``)."""

    action: Literal["commented", "opened", "already-reported", "nothing-failed"]
    message: str
    issue_number: int | None = field(default=None, metadata=json_key("issue"))
    issue_url: str | None = None
    failed: tuple[str, ...] = field(default=(), metadata=json_key("failed_jobs"))

    def render(self) -> str:
        return self.message


@dataclass(frozen=True)
class LegFailure:
    """A leg of the night that failed outside any job folder: the plan, the GPU leg, gating, publishing."""

    leg: str  # plan | build | gpu-smoke | publish | ...
    reason: str  # one line, as the leg said it (or where to read it: the run's log)

    @classmethod
    def parse(cls, text: str) -> LegFailure:
        """``LEG`` or ``LEG=REASON`` (``rockbuild alert --failed-leg``)."""
        leg, _, reason = text.partition("=")
        return cls(leg.strip(), reason.strip() or f"the {leg.strip()} leg failed; its log in the run says why")


def shortener(places: Mapping[str, Path | None]) -> Callable[[str], str]:
    """Replaces each of ``places``' folders (the night's output, the cache) by its short name in a quoted log line:
    public text names no runner path. The longest folder first (the cache may live inside the output)."""
    spelled = sorted(
        (
            (str(path).rstrip("/"), name)
            for name, path in places.items()
            if path is not None and str(path) not in ("", "/")
        ),
        key=lambda item: -len(item[0]),
    )

    def shorten(line: str) -> str:
        for folder, name in spelled:
            line = line.replace(folder, name)
        return line

    return shorten


def _log_name(job: BuiltJob) -> str | None:
    """The job's log as the night's artifacts name it (``linux-gfx1151/build.log``), never the runner's path."""
    if job.log is None:
        return None
    try:
        return job.log.relative_to(job.dir.parent).as_posix()
    except ValueError:
        return f"{job.id}/{job.log.name}"


def alert_body(
    failed: Sequence[BuiltJob],
    *,
    run_url: str,
    date: str,
    token: str | None = None,
    fell_back: Sequence[BuiltJob] = (),
    legs: Sequence[LegFailure] = (),
    published: bool = True,
    shorten: Callable[[str], str] = lambda line: line,
) -> str:
    def quoted(line: str) -> str:
        return shorten(redact(line, token))

    blamed = [blame(j, quoted=quoted) for j in failed if _llama_broke(j)]
    jobs = [
        {
            "id": j.id,
            "required": j.required,
            "step": j.failed_step or "?",
            "reason": quoted(j.reason or ""),
            "log": _log_name(j),
            "tail": [quoted(line) for line in j.log_tail],
            "evidence": quoted(j.triage.evidence) if j.triage is not None else None,
            "cause": j.triage.cause if j.triage is not None else None,
        }
        for j in failed
        if not _llama_broke(j)
    ]
    fallbacks = []
    for j in fell_back:
        summary, record = j.fallback_summary(), j.fallback
        if summary is None or record is None:
            continue
        good = record.last_good  # the manifest's summary names its release, the alert its date too
        fallbacks.append(
            {
                "id": j.id,
                "ok": j.ok,
                "step": summary["failed_stage"] or "?",
                "reason": quoted(summary["reason"] or ""),
                "newest": summary["newest"],
                "newest_version": summary["newest_version"],
                "newest_date": summary["newest_date"],
                "release": summary["last_good_release"],
                "used": good.version if good else None,
                "good_date": good.date if good else None,
                "tail": [quoted(line) for line in record.log_tail],
                "cause": j.triage.cause if j.triage is not None else None,
                "evidence": quoted(j.triage.evidence) if j.triage is not None else None,
            }
        )
    text = render(
        "alert.md.j2",
        failed=jobs,
        blamed=blamed,
        fallbacks=fallbacks,
        run_url=run_url,
        date=date,
        legs=[{"leg": leg.leg, "reason": quoted(leg.reason)} for leg in legs],
        published=published and not legs,
        marker=marker({"run": run_url}),
    )
    return redact(text, token)


def web_url(url: str | None) -> str | None:
    """The web page of a git repository on GitHub (``https://github.com/ggml-org/llama.cpp``), for links; None for a
    repository elsewhere (a local path)."""
    if not url or not url.startswith("https://github.com/"):
        return None
    return url.removesuffix("/").removesuffix(".git")


def _commit(url: str | None, commit: str | None) -> str:
    """A commit as the alert shows it: a link to it on GitHub, else its first 12 characters."""
    if not commit:
        return "?"
    web = web_url(url)
    return f"[`{commit[:7]}`]({web}/commit/{commit})" if web else f"`{commit[:12]}`"


def blame(job: BuiltJob, *, quoted: Callable[[str], str]) -> dict[str, Any]:
    """What the alert says of a job that llama.cpp broke (its triage.json): the range, the first bad commit with its
    subject and pull request, the builds that showed it, and a report for upstream."""
    triage = job.triage
    assert triage is not None
    url, web = triage.llama_url, web_url(triage.llama_url)
    bisect = triage.bisect
    first = bisect.first_bad if bisect is not None else None
    good = bisect.last_good if bisect is not None else None
    pr = first.pr if first is not None else None
    builds = len(triage.trials) + (len(bisect.trials) if bisect is not None else 0)
    minutes = (sum(t.seconds for t in triage.trials) + (bisect.seconds if bisect is not None else 0.0)) / 60
    step = triage.failed_stage or job.failed_step or "?"
    rocm = triage.rocm or "no ROCm (its backend takes none)"
    reproduce = [
        f"rockbuild build --job {job.id} --ref {first.commit if first else triage.llama_commit}"
        + (f" --rocm-version {job.rocm.version}" if job.rocm.version else "")
    ]
    if step in ("smoke", "audit", "bundle"):
        reproduce.append(f"rockbuild smoke out/{job.id}")
    if triage.last_good_release:
        reproduce.append(
            f"rockbuild install --tag {triage.last_good_release} --dest good  # the last build that passed, to compare"
        )
    return {
        "id": job.id,
        "step": step,
        "targets": ", ".join(job.targets) or job.backend,
        "os": job.os,
        "rocm": rocm,
        "evidence": quoted(triage.evidence),
        "reason": quoted(triage.reason or job.reason or ""),
        "tonight": _commit(url, triage.llama_commit),
        "good": _commit(url, triage.last_good_llama),
        "release": triage.last_good_release,
        "ship": triage.ship,
        "compare": f"{web}/compare/{triage.last_good_llama}...{triage.llama_commit}"
        if web and triage.last_good_llama
        else None,
        "complete": bisect is not None and bisect.complete,
        "bisected": bisect is not None,
        "stopped": quoted(bisect.stopped) if bisect is not None and bisect.stopped else None,
        "candidates": bisect.candidates if bisect is not None else None,
        "first_bad": _commit(url, first.commit) if first else None,
        "subject": first.subject if first else None,
        "pr": pr,
        "pr_url": f"{web}/pull/{pr}" if web and pr else None,
        "last_good": _commit(url, good.commit) if good else None,
        "builds": builds,
        "minutes": round(minutes, 1),
        "tail": [
            quoted(line) for line in (bisect.log_tail if bisect is not None and bisect.log_tail else triage.log_tail)
        ],
        "reproduce": reproduce,
        "first_sha": first.commit if first else None,
        "good_sha": good.commit if good else triage.last_good_llama,
        "tonight_sha": triage.llama_commit,
    }


def blame_title(blamed: Sequence[BuiltJob]) -> str:
    """``llama.cpp 81ed4ba broke linux-gfx1151 at build: first bad commit d301d2c (#12345)``: the alert's title when
    llama.cpp broke a job (the first such job names the commit; the others are listed)."""
    head = blamed[0]
    triage = head.triage
    assert triage is not None
    jobs = ", ".join(j.id for j in blamed)
    title = f"llama.cpp {triage.llama_commit[:7]} broke {jobs} at {triage.failed_stage or head.failed_step or '?'}"
    bisect = triage.bisect
    if bisect is not None and bisect.complete and bisect.first_bad is not None:
        first = bisect.first_bad
        title += f": first bad commit {first.commit[:7]}" + (f" (#{first.pr})" if first.pr else "")
    elif triage.last_good_llama:
        title += f" (somewhere in {triage.last_good_llama[:7]}..{triage.llama_commit[:7]})"
    return title


def fallback_title(fell_back: Sequence[BuiltJob]) -> str:
    """``ROCm nightly 2026-12-01 broke linux-gfx1150``: the alert's title when nothing failed but a job fell back."""
    dates = sorted({(j.fallback.newest.date if j.fallback else None) or "?" for j in fell_back})
    return f"ROCm nightly {', '.join(dates)} broke {', '.join(j.id for j in fell_back)}"


def _llama_broke(job: BuiltJob) -> bool:
    return not job.ok and job.triage is not None and job.triage.cause == "llama.cpp"


def _reported(text: str | None, run_url: str) -> bool:
    marker = read_marker(text)
    return marker is not None and marker.get("run") == run_url


@dataclass(frozen=True)
class AlertTarget:
    """Where a night's alert goes and what it says of itself: the run that failed, the repository whose issues it
    files (each None: the context's GitHub: this run's page, GITHUB_REPOSITORY, GITHUB_TOKEN/GH_TOKEN), the API, the
    day it names (None: today) and whether the API is throttled (tests turn it off)."""

    run_url: str | None = None
    repo: str | None = None
    api_url: str | None = None
    token: str | None = None
    date: str | None = None
    throttle: bool = True


def send_alert(
    job_dirs: Sequence[Path],
    target: AlertTarget,
    *,
    context: Context,
    config: PublishConfig | None = None,
    legs: Sequence[LegFailure] = (),
    published: bool = True,
) -> AlertReport:
    """Open (or comment on) the night's failure issue: for its failed jobs, its jobs that fell back to the last good
    ROCm, and its ``legs`` that failed outside any job (the plan, publishing: ``published`` False says the release
    was not made), in ``target``'s repository."""
    config = config or load_publish_config()
    say = console.info
    run_url = target.run_url or context.github.run_url or ""
    if not run_url:
        raise PublishError("no run URL", hint="pass --run-url (the CI run that failed)")
    jobs = [load_job(Path(d), tail_lines=config.alert_log_lines) for d in job_dirs]
    failed = [j for j in jobs if not j.ok]
    # the newest ROCm broke them: worth an issue even when published
    fell_back = [j for j in jobs if j.fallback is not None]
    if not failed and not fell_back and not legs:
        message = f"all {len(jobs)} jobs passed; no alert"
        say(message)
        return AlertReport("nothing-failed", message)
    repo = target.repo or context.github.repository
    token = target.token if target.token is not None else context.github.token
    if not repo:
        raise PublishError("no repository for the alert", hint="pass --repo OWNER/NAME")
    if not token:
        raise PublishError("no GitHub token: set GITHUB_TOKEN or GH_TOKEN (issues: write)")
    day = target.date or datetime.datetime.now(datetime.UTC).date().isoformat()
    outs = {Path(d).absolute().parent for d in job_dirs}
    places: dict[str, Path | None] = {"<cache>": context.cache, "~": Path.home()}
    if len(outs) == 1:  # the night's output folder (the job folders' parent)
        places["<out>"] = next(iter(outs))
    body = alert_body(
        failed,
        run_url=run_url,
        date=day,
        token=token,
        fell_back=fell_back,
        legs=legs,
        published=published,
        shorten=shortener(places),
    )
    ids = tuple(dict.fromkeys([*(f"{leg.leg} leg" for leg in legs), *(j.id for j in (*failed, *fell_back))]))
    what = ", ".join(
        x
        for x in (
            ", ".join(f"the {leg.leg} leg failed" for leg in legs),
            f"{len(failed)} failed job(s)" if failed else "",
            f"{len(fell_back)} on the last good ROCm" if fell_back else "",
        )
        if x
    )
    gh = GitHub(repo, api_url=target.api_url, token=token, throttle=target.throttle)
    try:
        if legs:  # what failed, in the title: "Nightly failed (2026-12-01): publish"
            title = f"{config.alert_title.format(date=day)}: {', '.join(leg.leg for leg in legs)}"
        elif any(_llama_broke(j) for j in failed):  # name the input at fault, not the night
            title = blame_title([j for j in failed if _llama_broke(j)])
        else:
            title = config.alert_title.format(date=day) if failed else fallback_title(fell_back)
        return file_issue(
            gh,
            IssueReport(
                label=config.alert_label,
                color=config.alert_label_color,
                title=title,
                body=body,
                what=what,
                reported=lambda text: _reported(text, run_url),
                items=ids,
                already=f"run {run_url} is already reported",
            ),
            say=say,
        )
    finally:
        gh.close()


@dataclass(frozen=True)
class IssueReport:
    """What to file under ``label`` (made with ``color``): the issue's ``title`` and ``body`` (or the comment's),
    ``what`` it reports and its ``items`` for the console, and how to tell it is in an issue already (``reported``
    reads an issue's or comment's text; ``already`` says so)."""

    label: str
    color: str
    title: str
    body: str
    what: str
    reported: Callable[[str | None], bool]
    items: tuple[str, ...] = ()
    already: str = "already reported"


def file_issue(gh: GitHub, report: IssueReport, *, say: Callable[[str], None] = console.info) -> AlertReport:
    """Comment on the open issue labelled ``report.label``, or open one (and the label): unless ``report.reported``
    finds this report in it already (a re-run writes nothing)."""
    label, title, body, what, items, reported = (
        report.label,
        report.title,
        report.body,
        report.what,
        report.items,
        report.reported,
    )
    open_issues = gh.call(
        f"listing open '{label}' issues", lambda: list(gh.repo.get_issues(state="open", labels=[label]))
    )
    if open_issues:
        issue = open_issues[0]
        comments = gh.call("reading the issue's comments", lambda: list(issue.get_comments()))
        if reported(issue.body) or any(reported(c.body) for c in comments):
            message = f"{report.already} on issue #{issue.number}; nothing written"
            say(message)
            return AlertReport("already-reported", message, issue.number, issue.html_url, items)
        gh.call(f"commenting on issue #{issue.number}", lambda: issue.create_comment(body))
        message = f"commented on issue #{issue.number}: {what}"
        say(message)
        return AlertReport("commented", message, issue.number, issue.html_url, items)
    _ensure_label(gh, label, report.color)
    issue = gh.call("opening the issue", lambda: gh.repo.create_issue(title=title, body=body, labels=[label]))
    message = f'opened issue #{issue.number} "{title}": {what}'
    say(message)
    return AlertReport("opened", message, issue.number, issue.html_url, items)


def _ensure_label(gh: GitHub, name: str, color: str) -> None:
    from github import UnknownObjectException

    try:
        gh.repo.get_label(name)
    except UnknownObjectException:
        gh.call(
            f"creating the label {name}", lambda: gh.repo.create_label(name, color, "Opened by rockbuild (alert, perf)")
        )
    except Exception as exc:
        with gh.errors(f"reading the label {name}"):
            raise exc
