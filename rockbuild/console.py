"""Output for people and for CI logs: steps, folds, progress, waits.

On a terminal long work shows a rich progress bar; elsewhere (CI, pipes) it prints a plain line every few seconds so
logs stay readable. On GitHub Actions each step is folded with ``::group::``. Everything goes to stderr so that
stdout stays clean for ``--json`` and other machine output. A wait on something outside (:func:`waiting`: a server
that does not answer) is never silent for long: a line that says what is awaited, kept up to date in place on a
terminal, and printed again after every ten seconds without output elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO


def _stream() -> TextIO:
    return sys.stderr


class _Mode:
    github_actions = False  # ::group:: folds and ::warning:: annotations
    ci = False  # no progress bars even on a terminal
    quiet = False  # --json: no steps, progress or info lines; warnings and errors only (stdout holds the result)
    last_said = 0.0  # time.monotonic() of the last line printed, a wait's own lines aside (it speaks after a silence)
    status = ""  # the line a wait keeps up to date in place on a terminal (erased before any other line)
    live = 0  # rich progress bars on screen (a wait's status line would fight them)


_LOCK = threading.RLock()  # a wait speaks from its own thread
_WATCHING = threading.local()  # this thread's wait (waits do not nest)


def _emit(line: str, *, own: bool = False) -> None:
    """Print one line on stderr, erasing a wait's status line first (``own``: a wait's line)."""
    with _LOCK:
        out = _stream()
        if _Mode.status:
            out.write("\r\x1b[K")
            _Mode.status = ""
        print(line, file=out, flush=True)
        if not own:
            _Mode.last_said = time.monotonic()


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
        _emit(message)


def warn(message: str) -> None:
    _emit(f"::warning::{message}" if on_github_actions() else f"warning: {message}")


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
        _emit(f"::group::{title}")
    else:
        info(f"==> {title}")
    handle = Step()
    ok = False
    try:
        yield handle
        ok = not handle.failed
    finally:
        if on_github_actions():
            _emit("::endgroup::")
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
        with _LOCK:
            if _Mode.status:
                _stream().write("\r\x1b[K")
                _Mode.status = ""
            _Mode.live += 1
        self._p.start()
        self._task = self._p.add_task(label, total=total)

    def advance(self, n: int) -> None:
        self._p.advance(self._task, n)

    def reset(self, completed: int = 0, total: int | None = None) -> None:
        self._p.update(self._task, completed=completed, total=total)

    def close(self) -> None:
        self._p.stop()
        with _LOCK:
            _Mode.live -= 1


def _has_rich() -> bool:
    import importlib.util

    return importlib.util.find_spec("rich") is not None


def byte_progress(label: str, total: int | None, *, every: float = 10.0) -> Progress:
    """A progress sink for a transfer of ``total`` bytes (None when unknown); none when quiet."""
    if _Mode.quiet:
        return _NullProgress()
    if interactive() and _has_rich():  # an install without the build extra draws no bar: the log lines below
        return _RichProgress(label, total)
    return _PlainProgress(label, total, every)


# ---------------------------------------------------------------------------------------------------------------------
# Waits


class Wait:
    """What ``with waiting(...) as w`` gets: ``w.touch()`` says that something arrived (a download's bytes), so the
    silence it reports starts again."""

    def __init__(self) -> None:
        self.last_touch = time.monotonic()

    def touch(self) -> None:
        self.last_touch = time.monotonic()


def _terminal_width() -> int:
    """The width of the terminal stderr is (a status line must fit one screen line, or the erasing ``\r`` would leave
    its wrapped part behind)."""
    try:
        return os.get_terminal_size(_stream().fileno()).columns
    except (OSError, ValueError):
        return DEFAULT_TABLE_WIDTH


class _Watch(threading.Thread):
    """What :func:`waiting` runs beside its block (see there)."""

    def __init__(self, what: str, timeout: float | None, after: float, every: float, idle: bool) -> None:
        super().__init__(name="rockbuild-wait", daemon=True)
        self.what, self.timeout, self.after, self.every, self.idle = what, timeout, after, every, idle
        self.handle = Wait()
        self.began = self.handle.last_touch
        self.said = 0.0  # when this watch last printed its line
        self.done = threading.Event()

    def line(self, silent: float, width: int | None = None) -> str:
        """The line, no longer than ``width`` (a terminal's status line: ``what`` is shortened, the seconds kept)."""
        limit = f" ({self.timeout:g}s timeout)" if self.timeout else ""
        if not self.idle:  # a call that may be busy sending (an upload): its time, not a silence
            tail = f": {time.monotonic() - self.began:.0f}s so far{limit}"
        else:
            tail = f": nothing for {silent:.0f}s{limit}"
        what, head = self.what, "    waiting for "
        if width is not None and len(head) + len(what) + len(tail) >= width:
            what = what[: max(width - 2 - len(head) - len(tail), 1)] + "…"
        return f"{head}{what}{tail}"

    def run(self) -> None:
        tty = interactive()
        while not self.done.wait(0.25):
            with _LOCK:
                if self.done.is_set():
                    return
                now = time.monotonic()
                silent = now - max(self.handle.last_touch, _Mode.last_said)  # since the last try, byte or line
                if tty:
                    shown = silent >= min(1.0, self.after) and not _Mode.live
                    self._show(self.line(silent, _terminal_width()) if shown else "")
                elif now - max(self.handle.last_touch, _Mode.last_said, self.said) >= (
                    self.every if self.said > max(self.handle.last_touch, _Mode.last_said) else self.after
                ):
                    _emit(self.line(silent), own=True)
                    self.said = now

    @staticmethod
    def _show(status: str) -> None:
        if status == _Mode.status:
            return
        out = _stream()
        out.write(f"\r\x1b[K{status}")
        out.flush()
        _Mode.status = status

    def stop(self) -> None:
        with _LOCK:
            self.done.set()
            self._show("")
        self.join()


@contextlib.contextmanager
def waiting(
    what: str, *, timeout: float | None = None, after: float = 5.0, every: float = 8.0, idle: bool = True
) -> Iterator[Wait]:
    """While the block waits on ``what`` (``api.github.com (GET /repos/o/r/releases/latest)``), say so. In a log: a
    line ``    waiting for WHAT: nothing for 5s (15s timeout)`` once nothing has arrived and nothing was printed for
    ``after`` seconds, then again every ``every`` seconds of that (a retry's warning starts the count again, and so
    does :meth:`Wait.touch`); on a terminal the same words as a status line kept up to date in place, erased at the
    end. ``timeout``: how long one try waits. ``idle=False``: the block may be busy rather than waiting (a call that
    uploads), so the line says how long it has taken (``40s so far``). Nothing when quiet (--json)."""
    outer: Wait | None = getattr(_WATCHING, "wait", None)
    if outer is not None or _Mode.quiet:  # a wait inside a wait (a call inside a GitHub call): the outer one speaks
        yield outer or Wait()
        return
    watch = _Watch(what, timeout, after, every, idle)
    watch.start()
    _WATCHING.wait = watch.handle
    try:
        yield watch.handle
    finally:
        _WATCHING.wait = None
        watch.stop()


# ---------------------------------------------------------------------------------------------------------------------
# Tables that fit


DEFAULT_TABLE_WIDTH = 80  # a terminal whose width cannot be read


def table_width(columns: int | None, *, wide: bool = False) -> int | None:
    """How wide a table printed on stdout may be: ``$COLUMNS`` (``columns``) when set, else the terminal's width
    when stdout is one, else None: as wide as the table needs (a pipe, a file). ``wide`` (--wide): as wide as it
    needs, always."""
    if wide:
        return None
    if columns:
        return columns
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else None
    except (OSError, ValueError):
        return DEFAULT_TABLE_WIDTH if sys.stdout.isatty() else None


@dataclass(frozen=True)
class Column:
    """One column of a table that fits (:func:`fit_table`). ``rank``: which columns go first when the width is short
    (the highest rank is dropped first; rank 0 is never dropped and never cut: an id that an option takes).
    ``wrap``: the cells may wrap at their spaces (and at ``split``, the separator of a list such as
    ``gfx1100,gfx1101``), down to ``narrow`` characters. ``fold``: on a narrow table a column with one value in every
    row (``-`` aside) is said once above it instead."""

    header: str
    cells: tuple[str, ...]
    rank: int = 0
    wrap: bool = False
    narrow: int = 0
    fold: bool = False
    split: str | None = None

    @property
    def natural(self) -> int:
        return max((len(line) for cell in (self.header, *self.cells) for line in cell.splitlines()), default=0)

    @property
    def least(self) -> int:
        return min(self.natural, max(self.narrow, len(self.header))) if self.wrap else self.natural

    def only_value(self) -> str | None:
        """The one value every row has (``-``: none), or None when the rows differ."""
        values = {c for c in self.cells if c != "-"}
        return values.pop() if len(values) == 1 else None


@dataclass(frozen=True)
class FittedTable:
    """What :func:`fit_table` chose: the columns shown (in their order), the ones said once (header, value) and
    the ones left out."""

    shown: tuple[Column, ...]
    folded: tuple[tuple[str, str], ...]
    dropped: tuple[Column, ...]


def _table_width(widths: Sequence[int]) -> int:
    return sum(widths) + 3 * len(widths) + 1  # rich's box: a border and one space either side of each cell


def fit_table(columns: Sequence[Column], width: int | None) -> FittedTable:
    """The columns that fit in ``width`` characters (None: all of them, as they are): rank 0 always; the others in
    the order of their rank while they fit, each wrappable one counted at its narrowest; a foldable column with a
    single value is said above the table instead. What is left out is named by :func:`render_table`."""
    if width is None:
        return FittedTable(tuple(columns), (), ())
    folded = tuple(c for c in columns if c.fold and c.rank and c.only_value() is not None)
    candidates = [c for c in columns if c not in folded]
    chosen = [c for c in candidates if c.rank == 0]
    for column in sorted((c for c in candidates if c.rank), key=lambda c: c.rank):
        if _table_width([c.least for c in (*chosen, column)]) <= width:
            chosen.append(column)
    shown = tuple(c for c in candidates if c in chosen)
    return FittedTable(
        shown, tuple((c.header, c.only_value() or "") for c in folded), tuple(c for c in candidates if c not in chosen)
    )


def render_table(title: str, columns: Sequence[Column], width: int | None, *, wide_option: str = "--wide") -> str:
    """``title`` and the table of ``columns`` as plain text no wider than ``width`` (None: as wide as it needs),
    the columns that do not fit left out and named under it; a rank-0 column is never cut."""
    import io

    from rich.console import Console
    from rich.table import Table

    fitted = fit_table(columns, width)
    natural = _table_width([c.natural for c in fitted.shown])
    squeeze = width is not None and natural > width
    table = Table(title_justify="left")
    for column in fitted.shown:
        if column.wrap:
            table.add_column(column.header, overflow="fold", min_width=column.least)
        else:
            table.add_column(column.header, no_wrap=True, min_width=column.natural)
    for row in zip(*(c.cells for c in fitted.shown), strict=True):
        table.add_row(
            *(
                (cell.replace(c.split, " ") if squeeze and c.wrap and c.split else cell)
                for c, cell in zip(fitted.shown, row, strict=True)
            )
        )
    out = io.StringIO()
    least = _table_width([c.least for c in fitted.shown])  # the ids alone may need more than a tiny screen has
    Console(
        file=out,
        width=natural if width is None else min(natural, max(width, least)),
        color_system=None,
        markup=False,
        emoji=False,
        highlight=False,
        legacy_windows=False,
        soft_wrap=False,
    ).print(table)
    import textwrap

    def fill(text: str) -> list[str]:  # at the width, where there are spaces (a long path stays whole)
        return (
            textwrap.wrap(text, width=max(width, 40), break_long_words=False, break_on_hyphens=False)
            if width is not None
            else [text]
        )

    lines = [
        *fill(title + "".join(f"; {header}: {value}" for header, value in fitted.folded)),
        *out.getvalue().splitlines(),
    ]
    if fitted.dropped:
        names = ", ".join(c.header for c in fitted.dropped)
        lines += fill(f"not shown at {width} columns: {names} ({wide_option} shows every column)")
    return "\n".join(line.rstrip() for line in lines)
