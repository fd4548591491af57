"""The smoke test's configuration (``matrices/smoke.yaml``): the pinned model, the tiny model's spec, how each
program runs. Parsed here, its owner; :class:`rockbuild.settings.Settings` loads it on first use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rockbuild.core.data import load_data_file
from rockbuild.core.errors import ConfigError


def parse_smoke_config(doc: Any, path: Path) -> dict[str, Any]:
    """The smoke configuration from a parsed ``smoke.yaml`` (read by :func:`load_smoke_config`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict) or not isinstance(doc.get("run"), dict):
        raise ConfigError(f"{path}: expected the keys 'model' and 'run' (see the shipped matrices/smoke.yaml)")
    return dict(doc)


def load_smoke_config(path: Path | None = None) -> dict[str, Any]:
    """The smoke configuration (default: the shipped ``matrices/smoke.yaml``)."""
    return load_data_file(path, "smoke.yaml", parse_smoke_config)
