"""What a person (or a CI log) sees while the night runs: one line per stage change, and the summary table at the end.

On a terminal the line carries the job's row (stage, elapsed); on GitHub Actions each stage is already a
``::group::`` fold (console.step), so the lines stay outside the folds and read as the night's timeline.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rockbuild import console

_SHOWN = {"done": "done", "reused": "reused (inputs unchanged)", "failed": "FAILED", "skipped": "skipped"}


class Overview:
    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.rows: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._start = time.monotonic()

    def __enter__(self) -> Overview:
        self._start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def on_event(self, job_id: str, stage: str, status: str) -> None:
        with self._lock:
            row = self.rows.setdefault(job_id, {"start": time.monotonic(), "stage": stage, "result": ""})
            row["stage"], row["result"] = stage, status
            row["elapsed"] = time.monotonic() - row["start"]
            if not self.enabled or status == "start":
                return
            if console.interactive():
                self._print_board()
            else:
                console.info(f"[{job_id}] {stage}: {_SHOWN.get(status, status)} ({row['elapsed']:.1f}s into the job)")

    def _print_board(self) -> None:
        """The board, printed again at each change: a rich Live display cannot run beside the compile's own
        progress bar (rich allows one live display at a time)."""
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"night overview ({time.monotonic() - self._start:.0f}s)", title_justify="left")
        for column in ("job", "stage", "elapsed", "result"):
            table.add_column(column, no_wrap=True)
        for job_id, row in self.rows.items():
            result = _SHOWN.get(row["result"], "running" if row["result"] == "start" else row["result"])
            table.add_row(job_id, row["stage"], f"{row['elapsed']:.0f}s", result)
        Console(stderr=True).print(table)

    def print_summary(self, report: Any) -> None:
        if not self.enabled or not report.jobs:
            return
        from rich.console import Console

        Console(stderr=True, width=None if console.interactive() else 160).print(report.render_table())
