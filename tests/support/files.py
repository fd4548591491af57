"""Small file writers: ``write`` (text dedented, for sources and YAML written inline) and ``touch`` (text as given)."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    """Write ``text`` dedented (leading newlines dropped) to ``path``, parents made, with ``mode``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    path.chmod(mode)
    return path


def touch(path: Path, text: str = "", mode: int = 0o644) -> Path:
    """Write ``text`` exactly as given (default: an empty file) to ``path``, parents made, with ``mode``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path
