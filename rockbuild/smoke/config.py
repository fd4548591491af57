"""The smoke test's configuration (``config/smoke.yaml``): the pinned model, the tiny model's spec, how each
program runs. Parsed here, its owner; :class:`rockbuild.settings.Settings` loads it on first use."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rockbuild.core.data import (
    YDict,
    check_keys,
    expect_type,
    kind_of,
    load_data_file,
    mapping,
    text,
    texts,
    where,
    whole,
)
from rockbuild.core.errors import ConfigError
from rockbuild.core.options import CPU_VARIANT_CHECKS
from rockbuild.smoke.numerics import parse_numerics_config
from rockbuild.smoke.ops import parse_ops_config

CPU_VARIANT_KEYS = ("check", "n_gen")


def parse_cpu_variants(node: Any, path: Path | str, parent: Any = None) -> dict[str, Any]:
    """``run.cpu_variants``: ``{check: all|picked|none, n_gen: N}`` (both optional); a mistake is a ConfigError
    naming ``file:line``."""
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise ConfigError(
            f"{where(path, parent, 'cpu_variants')}: run.cpu_variants must be a mapping such as "
            f"{{check: all, n_gen: 8}}, not {kind_of(node)}"
        )
    if isinstance(node, YDict):
        check_keys(path, node, CPU_VARIANT_KEYS, "run.cpu_variants")
    else:
        unknown = [k for k in node if k not in CPU_VARIANT_KEYS]
        if unknown:
            raise ConfigError(
                f"{path}: unknown key {unknown[0]!r} in run.cpu_variants; allowed: {', '.join(CPU_VARIANT_KEYS)}"
            )
    out: dict[str, Any] = {}
    if "check" in node:
        check = node["check"]
        if not isinstance(check, str) or check not in CPU_VARIANT_CHECKS:
            raise ConfigError(
                f"{where(path, node, 'check')}: run.cpu_variants.check must be one of "
                f"{', '.join(CPU_VARIANT_CHECKS)}, not {check!r}"
            )
        out["check"] = check
    if "n_gen" in node:
        n_gen = node["n_gen"]
        if isinstance(n_gen, bool) or not isinstance(n_gen, int) or n_gen < 1:
            raise ConfigError(
                f"{where(path, node, 'n_gen')}: run.cpu_variants.n_gen must be a whole number of "
                f"tokens, at least 1, not {n_gen!r}"
            )
        out["n_gen"] = n_gen
    return out


# smoke.yaml's run section: each whole-number setting and its least value (seed: any; gpu_layers: -1 is "all")
RUN_WHOLE = {"n_predict": 1, "ctx_size": 16, "threads": 1, "seed": None, "gpu_layers": -1}
RUN_KEYS = ("prompt", *RUN_WHOLE, "bench", "gpu_bench", "timeouts", "cpu_variants", "browser")
BENCH_WHOLE = {"n_prompt": 0, "n_gen": 0, "repetitions": 1, "threads": 1, "warmup": 0}
TIMEOUT_KEYS = ("cli", "server_start", "request", "bench")
BROWSER_KEYS = ("enabled", "input", "send", "answer", "message", "timeout", "settle")


def _whole(path: Path | str, node: Any, key: str, least: int | None, what: str) -> None:
    value = node[key]
    if isinstance(value, bool) or not isinstance(value, int) or (least is not None and value < least):
        floor = f", at least {least}" if least is not None else ""
        raise ConfigError(f"{where(path, node, key)}: {what}.{key} must be a whole number{floor}, not {value!r}")


def _seconds(path: Path | str, node: Any, key: str, what: str) -> None:
    value = node[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or value == float("inf"):
        raise ConfigError(f"{where(path, node, key)}: {what}.{key} must be seconds (a positive number), not {value!r}")


def _mapping(path: Path | str, parent: Any, key: str, what: str, keys: tuple[str, ...]) -> Any:
    node = parent.get(key)
    if node is None:
        return None
    if not isinstance(node, dict):
        raise ConfigError(f"{where(path, parent, key)}: {what} must be a mapping, not {node!r}")
    if isinstance(node, YDict):
        check_keys(path, node, keys, what)
    return node


def parse_run(run: Any, path: Path | str) -> None:
    """``run``: every key known, every value of its type and range; a mistake is a ConfigError naming ``file:line``
    and the key (``n_predict: many`` was a ValueError deep in the smoke, exit 70)."""
    if isinstance(run, YDict):
        check_keys(path, run, RUN_KEYS, "run")
    if "prompt" in run and (not isinstance(run["prompt"], str) or not run["prompt"].strip()):
        raise ConfigError(f"{where(path, run, 'prompt')}: run.prompt must be a text, not {run['prompt']!r}")
    for key, least in RUN_WHOLE.items():
        if key in run:
            _whole(path, run, key, least, "run")
    for section in ("bench", "gpu_bench"):
        node = _mapping(path, run, section, f"run.{section}", tuple(BENCH_WHOLE))
        for key, least in BENCH_WHOLE.items():
            if node is not None and key in node:
                _whole(path, node, key, least, f"run.{section}")
    timeouts = _mapping(path, run, "timeouts", "run.timeouts", TIMEOUT_KEYS)
    for key in timeouts or ():
        _seconds(path, timeouts, key, "run.timeouts")
    browser = _mapping(path, run, "browser", "run.browser", BROWSER_KEYS)
    if browser is not None:
        if "enabled" in browser and not isinstance(browser["enabled"], bool):
            raise ConfigError(
                f"{where(path, browser, 'enabled')}: run.browser.enabled must be true or false, "
                f"not {browser['enabled']!r}"
            )
        for key in ("timeout", "settle"):
            if key in browser:
                _seconds(path, browser, key, "run.browser")
        for key in ("input", "send", "answer", "message"):
            if key in browser and (not isinstance(browser[key], str) or not browser[key]):
                raise ConfigError(
                    f"{where(path, browser, key)}: run.browser.{key} must be a text, not {browser[key]!r}"
                )
    parse_cpu_variants(run.get("cpu_variants"), path, run)


TOP_KEYS = ("model", "models", "tiny", "run", "numerics", "ops")
MODEL_KEYS = ("name", "repository", "revision", "url", "sha256", "size")
PACKAGED_KEYS = ("name", "package", "url", "url_sha256", "url_size", "member", "sha256", "size")
TINY_KEYS = ("name", "seed", "vocab")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def _pin(path: Path | str, node: Any, what: str, keys: tuple[str, ...], needed: tuple[str, ...]) -> None:
    """A pinned download (``model``, each of ``models``): its keys, texts, sha256s and sizes."""
    check_keys(path, node, keys, what)
    for key in needed:
        if not isinstance(node.get(key), str) or not node[key].strip():
            raise ConfigError(
                f"{where(path, node, key if key in node else None)}: {what} needs {key} (a text), not {node.get(key)!r}"
            )
    for key in keys:
        if key.endswith("sha256") and not _SHA256.fullmatch(text(path, node, key, "0" * 64, what)):
            raise ConfigError(
                f"{where(path, node, key)}: {what}.{key} must be a sha256 (64 hex digits), not {node[key]!r}"
            )
        elif key.endswith("size") and node.get(key) is not None:
            whole(path, node, key, 0, what, least=1)
        elif key in node:
            text(path, node, key, "", what)


def parse_models(doc: Any, path: Path | str) -> None:
    """``model`` (the pinned smoke model), ``models`` (named packaged ones) and ``tiny`` (the generated model)."""
    _pin(path, doc["model"], "model", MODEL_KEYS, ("name", "url", "sha256"))
    models = mapping(path, doc, "models", "smoke.yaml")
    for key, entry in models.items():
        expect_type(path, models, key, entry, dict, f"models.{key}")
        _pin(path, entry, f"models.{key}", PACKAGED_KEYS, ("name", "url", "url_sha256", "member", "sha256"))
    tiny = mapping(path, doc, "tiny", "smoke.yaml")
    check_keys(path, tiny, TINY_KEYS, "tiny")
    text(path, tiny, "name", "tiny-qwen3.gguf", "tiny")
    whole(path, tiny, "seed", 0, "tiny", least=0)
    texts(path, tiny, "vocab", (), "tiny")


def parse_smoke_config(doc: Any, path: Path) -> dict[str, Any]:
    """The smoke configuration from a parsed ``smoke.yaml`` (read by :func:`load_smoke_config`): every section
    checked here, on load, so a mistake is one ConfigError naming ``file:line`` and the key."""
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{where(path, doc)}: expected the keys 'model' and 'run' (see the shipped config/smoke.yaml)"
        )
    check_keys(path, doc, TOP_KEYS, "smoke.yaml")
    for key in ("model", "run"):
        if not isinstance(doc.get(key), dict):
            raise ConfigError(
                f"{where(path, doc, key if key in doc else None)}: smoke.yaml needs '{key}' as a "
                f"mapping (see the shipped config/smoke.yaml), not {doc.get(key)!r}"
            )
    parse_models(doc, path)
    parse_run(doc["run"], path)
    # the smoke's steps read their sections when they run; a mistake in them is found here, on load, with its line
    for key in ("numerics", "ops"):
        if doc.get(key) is not None:
            expect_type(path, doc, key, doc[key], dict, key)
    parse_numerics_config(doc.get("numerics"), path=path)
    parse_ops_config(doc.get("ops"), path)
    return dict(doc)


def load_smoke_config(path: Path | None = None) -> dict[str, Any]:
    """The smoke configuration (default: the shipped ``config/smoke.yaml``)."""
    return load_data_file(path, "smoke.yaml", parse_smoke_config)
