"""What every proof of the harness shares: one error for a step that cannot go on, and running a program that must
succeed. Standard library only (provision.py runs before any venv exists)."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence


class Failed(Exception):
    """A step that cannot go on: one line, printed as ``error: ...``."""


def run(args: Sequence[object], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """A program that must succeed; its failure is one line naming it."""
    argv = [str(a) for a in args]
    done = subprocess.run(argv, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise Failed(f"{shlex.join(argv[:4])}{' ...' if len(argv) > 4 else ''} exited {done.returncode}")
    return done
