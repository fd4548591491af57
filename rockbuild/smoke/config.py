"""The smoke test's configuration (``matrices/smoke.yaml``): the pinned model, the tiny model's spec, how each
program runs. Parsed here, its owner; :class:`rockbuild.settings.Settings` loads it on first use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rockbuild.core.data import YDict, check_keys, load_data_file, where
from rockbuild.core.errors import ConfigError

# run.cpu_variants.check (and rockbuild smoke --cpu-variants): every CPU variant module this machine runs, the one
# ggml picks, or none (rockbuild.smoke.variants)
CPU_VARIANT_CHECKS = ("all", "picked", "none")
CPU_VARIANT_KEYS = ("check", "n_gen")


def parse_cpu_variants(node: Any, path: Path | str, parent: Any = None) -> dict[str, Any]:
    """``run.cpu_variants``: ``{check: all|picked|none, n_gen: N}`` (both optional); a mistake is a ConfigError
    naming ``file:line``."""
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise ConfigError(f"{where(path, parent, 'cpu_variants')}: run.cpu_variants must be a mapping such as "
                          f"{{check: all, n_gen: 8}}, not {type(node).__name__}")
    if isinstance(node, YDict):
        check_keys(path, node, CPU_VARIANT_KEYS, "run.cpu_variants")
    else:
        unknown = [k for k in node if k not in CPU_VARIANT_KEYS]
        if unknown:
            raise ConfigError(f"{path}: unknown key {unknown[0]!r} in run.cpu_variants; allowed: "
                              f"{', '.join(CPU_VARIANT_KEYS)}")
    out: dict[str, Any] = {}
    if "check" in node:
        check = node["check"]
        if not isinstance(check, str) or check not in CPU_VARIANT_CHECKS:
            raise ConfigError(f"{where(path, node, 'check')}: run.cpu_variants.check must be one of "
                              f"{', '.join(CPU_VARIANT_CHECKS)}, not {check!r}")
        out["check"] = check
    if "n_gen" in node:
        n_gen = node["n_gen"]
        if isinstance(n_gen, bool) or not isinstance(n_gen, int) or n_gen < 1:
            raise ConfigError(f"{where(path, node, 'n_gen')}: run.cpu_variants.n_gen must be a whole number of "
                              f"tokens, at least 1, not {n_gen!r}")
        out["n_gen"] = n_gen
    return out


def parse_smoke_config(doc: Any, path: Path) -> dict[str, Any]:
    """The smoke configuration from a parsed ``smoke.yaml`` (read by :func:`load_smoke_config`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict) or not isinstance(doc.get("run"), dict):
        raise ConfigError(f"{path}: expected the keys 'model' and 'run' (see the shipped matrices/smoke.yaml)")
    parse_cpu_variants(doc["run"].get("cpu_variants"), path, doc["run"])
    return dict(doc)


def load_smoke_config(path: Path | None = None) -> dict[str, Any]:
    """The smoke configuration (default: the shipped ``matrices/smoke.yaml``)."""
    return load_data_file(path, "smoke.yaml", parse_smoke_config)
