"""Output for people and for CI logs: steps, folds, progress.

On a terminal long work shows a rich progress bar; elsewhere (CI, pipes) it prints a plain line every few seconds so
logs stay readable. On GitHub Actions each step is folded with ``::group::``. Everything goes to stderr so that
stdout stays clean for ``--json`` and other machine output.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Protocol, TextIO


def _stream() -> TextIO:
    return sys.stderr


class _Mode:
    github_actions = False  # ::group:: folds and ::warning:: annotations
    ci = False  # no progress bars even on a terminal
    quiet = False  # --json: no steps, progress or info lines; warnings and errors only (stdout holds the result)


def configure(*, github_actions: bool, ci: bool, quiet: bool = False) -> None:
    """Set once at the CLI's entry from :class:`rockbuild.settings.Settings` (GITHUB_ACTIONS, CI); ``quiet`` is
    turned on by a command's --json (:func:`set_quiet`)."""
    _Mode.github_actions, _Mode.ci, _Mode.quiet = github_actions, ci, quiet


def set_quiet(on: bool) -> None:
    """Steps, progress and info lines off (on: a command's --json) or on again; warnings always print."""
    _Mode.quiet = on


def is_quiet() -> bool:
    return _Mode.quiet


@contextlib.contextmanager
def quieted(on: bool = True) -> Iterator[None]:
    """:func:`set_quiet` for a block (a nested run whose chatter would repeat its caller's), restored after."""
    before = _Mode.quiet
    _Mode.quiet = on
    try:
        yield
    finally:
        _Mode.quiet = before


def on_github_actions() -> bool:
    return _Mode.github_actions


def interactive() -> bool:
    """True when a person watches: stderr is a terminal and we are not in CI."""
    if _Mode.ci:
        return False
    return _stream().isatty()


def info(message: str) -> None:
    if not _Mode.quiet:
        print(message, file=_stream(), flush=True)


def warn(message: str) -> None:
    if on_github_actions():
        print(f"::warning::{message}", file=_stream(), flush=True)
    else:
        print(f"warning: {message}", file=_stream(), flush=True)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class Step:
    """What ``with step(...) as s`` gets: ``s.fail()`` marks the step failed when the block handles (records) a
    failure itself instead of raising it."""

    def __init__(self) -> None:
        self.failed = False

    def fail(self) -> None:
        self.failed = True


@contextlib.contextmanager
def step(title: str) -> Iterator[Step]:
    """One pipeline step: a fold on GitHub Actions, a header line elsewhere, at the end ``done`` or ``failed`` (the
    block raised, or called :meth:`Step.fail`) and its duration."""
    if _Mode.quiet:
        yield Step()
        return
    start = time.monotonic()
    if on_github_actions():
        print(f"::group::{title}", file=_stream(), flush=True)
    else:
        info(f"==> {title}")
    handle = Step()
    ok = False
    try:
        yield handle
        ok = not handle.failed
    finally:
        if on_github_actions():
            print("::endgroup::", file=_stream(), flush=True)
        took = time.monotonic() - start
        info(f"    {title}: {'done' if ok else 'failed'} in {took:.1f}s")


class Progress(Protocol):
    def advance(self, n: int) -> None: ...
    def reset(self, completed: int = 0, total: int | None = None) -> None: ...
    def close(self) -> None: ...


class _NullProgress:
    def advance(self, n: int) -> None:
        pass

    def reset(self, completed: int = 0, total: int | None = None) -> None:
        pass

    def close(self) -> None:
        pass


class _PlainProgress:
    """Periodic plain lines: for CI logs, where a bar would print thousands of carriage returns."""

    def __init__(self, label: str, total: int | None, every: float) -> None:
        self.label, self.total, self.every = label, total, every
        self.done = 0
        self.start = self.last = time.monotonic()

    def _line(self) -> None:
        elapsed = max(time.monotonic() - self.start, 1e-6)
        rate = self.done / elapsed
        if self.total:
            pct = 100.0 * self.done / self.total
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            info(
                f"    {self.label}: {human_bytes(self.done)} / {human_bytes(self.total)} ({pct:.0f}%), "
                f"{human_bytes(rate)}/s, ETA {eta:.0f}s"
            )
        else:
            info(f"    {self.label}: {human_bytes(self.done)}, {human_bytes(rate)}/s")

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self._line()

    def reset(self, completed: int = 0, total: int | None = None) -> None:
        self.done = completed
        if total is not None:
            self.total = total

    def close(self) -> None:
        self._line()


class _RichProgress:
    def __init__(self, label: str, total: int | None) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )
        from rich.progress import Progress as RichProgress

        self._p = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            transient=False,
        )
        self._p.start()
        self._task = self._p.add_task(label, total=total)

    def advance(self, n: int) -> None:
        self._p.advance(self._task, n)

    def reset(self, completed: int = 0, total: int | None = None) -> None:
        self._p.update(self._task, completed=completed, total=total)

    def close(self) -> None:
        self._p.stop()


def byte_progress(label: str, total: int | None, *, every: float = 10.0) -> Progress:
    """A progress sink for a transfer of ``total`` bytes (None when unknown); none when quiet."""
    if _Mode.quiet:
        return _NullProgress()
    if interactive():
        return _RichProgress(label, total)
    return _PlainProgress(label, total, every)
