"""A release is whole or it is not published: every bundle carries llama-server's chat page and every program
``config/programs.yaml`` lists.

What a bundle must carry, job by job (the jobs that ship, after the gate):

- **the chat page**: build.json's ``web_ui`` says it was built and embedded (not ``none``, not absent); where the
  smoke checked it (the server run's ``web_ui``), ``GET /`` answered the page (``passed``, HTTP 200). A smoke that
  did not check it (none ran, an informational runner smoke, a smoke from before the check) leaves build.json's word.
- **every listed program**: its file (``llama-cli``, ``llama-cli.exe``; or one of its older names) in the bundle's
  top folder. An optional program (``required: false``) that no bundle of the release has, because the night's
  llama.cpp does not define it (build.json's ``programs_unavailable``), is no hole: the release is the same
  everywhere. One that some bundle ships and another lacks is a hole, and a required one always is.

A release with a hole is refused before anything is written or uploaded, with one error naming every job and what it
lacks. ``--allow-partial REASON`` (an emergency: a release must go out without its chat page) publishes it anyway;
the reason and the holes go into manifest.json's ``partial`` and the release notes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from rockbuild.core.errors import PublishError
from rockbuild.core.programs import Program, ProgramList
from rockbuild.core.record import Record, json_key

from .jobs import BuiltJob

CHAT_PAGE = "the chat page"


@dataclass(frozen=True)
class Hole(Record):
    """What one job's bundle lacks: ``parts`` (the chat page, program names), each with why, as ``details``."""

    job: str = field(metadata=json_key("id"))
    parts: tuple[str, ...] = field(metadata=json_key("lacks"))
    details: tuple[str, ...]

    def words(self) -> str:
        return f"{self.job} lacks " + ", ".join(self.details)


@dataclass(frozen=True)
class Wholeness:
    """The verdict over a release's jobs: the holes (none: whole) and, when published anyway, the override's reason."""

    holes: tuple[Hole, ...] = ()
    allowed: str | None = None  # --allow-partial's reason

    @property
    def whole(self) -> bool:
        return not self.holes

    def partial(self) -> dict[str, Any] | None:
        """manifest.json's ``partial``: None for a whole release."""
        if self.whole:
            return None
        return {"reason": self.allowed, "jobs": [h.to_dict() for h in self.holes]}


def chat_page_hole(job: BuiltJob) -> str | None:
    """Why ``job``'s bundle lacks a working chat page, or None when it has one."""
    web_ui = job.web_ui
    if web_ui is None:
        return f"{CHAT_PAGE} (build.json does not record a web UI)"
    if not web_ui.available:
        return f"{CHAT_PAGE} (build.json web_ui: none: {web_ui.reason or 'no reason given'})"
    server = job.smoke.runs.get("server") if job.smoke is not None else None
    check = server.web_ui if server is not None else None
    if check is not None and check.result != "passed":
        return f"{CHAT_PAGE} (the smoke's GET /: {check.result}: {check.detail or 'no detail'})"
    return None


def _names(program: Program, os_name: str) -> tuple[str, ...]:
    names = [program.file_for(os_name)]
    if not program.file:  # an older target name is its file name too (rpc-server for ggml-rpc-server)
        names += [Program(alias).file_for(os_name) for alias in program.aliases]
    return tuple(names)


def shipped_programs(job: BuiltJob, programs: ProgramList) -> set[str]:
    """The listed programs (targets) whose file is in ``job``'s bundle."""
    if job.bundle is None or not job.bundle.is_dir():
        return set()
    present = {p.name for p in job.bundle.iterdir() if p.is_file()}
    return {p.target for p in programs.programs if any(name in present for name in _names(p, job.os))}


def missing_programs(job: BuiltJob, programs: ProgramList, elsewhere: Collection[str] = ()) -> tuple[str, ...]:
    """The listed programs ``job``'s bundle lacks: a required one, or an optional one that its tree defines or that
    another bundle of the release (``elsewhere``) ships."""
    shipped = shipped_programs(job, programs)
    undefined = set(job.programs_unavailable)
    return tuple(
        p.target
        for p in programs.programs
        if p.target not in shipped and (p.required or p.target not in undefined or p.target in elsewhere)
    )


def job_hole(job: BuiltJob, programs: ProgramList, elsewhere: Collection[str] = ()) -> Hole | None:
    parts: list[str] = []
    details: list[str] = []
    page = chat_page_hole(job)
    if page is not None:
        parts.append("web_ui")
        details.append(page)
    lacking = missing_programs(job, programs, elsewhere)
    if lacking:
        parts.extend(lacking)
        shown = ", ".join(lacking[:5]) + (f" and {len(lacking) - 5} more" if len(lacking) > 5 else "")
        details.append(f"{len(lacking)} of the {len(programs.programs)} programs of programs.yaml ({shown})")
    return Hole(job.id, tuple(parts), tuple(details)) if parts else None


def check_whole(jobs: Sequence[BuiltJob], programs: ProgramList, *, allow_partial: str | None = None) -> Wholeness:
    """The release's verdict. Raises PublishError naming every job and what it lacks when a bundle has a hole and
    ``allow_partial`` (the override's reason) is not given."""
    anywhere = {target for job in jobs for target in shipped_programs(job, programs)}
    holes = tuple(h for h in (job_hole(j, programs, anywhere) for j in jobs) if h is not None)
    reason = " ".join((allow_partial or "").split()) or None
    if holes and reason is None:
        raise PublishError(
            "the release is not whole: " + "; ".join(h.words() for h in holes) + "; nothing was published",
            hint="build the chat page with npm (rockbuild webui, then build --web-ui DIR) and every "
            "program; in an emergency, publish anyway with --allow-partial REASON",
        )
    return Wholeness(holes, reason if holes else None)
