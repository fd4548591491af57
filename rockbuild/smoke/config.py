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
            raise ConfigError(f"{where(path, browser, 'enabled')}: run.browser.enabled must be true or false, "
                              f"not {browser['enabled']!r}")
        for key in ("timeout", "settle"):
            if key in browser:
                _seconds(path, browser, key, "run.browser")
        for key in ("input", "send", "answer", "message"):
            if key in browser and (not isinstance(browser[key], str) or not browser[key]):
                raise ConfigError(f"{where(path, browser, key)}: run.browser.{key} must be a text, "
                                  f"not {browser[key]!r}")
    parse_cpu_variants(run.get("cpu_variants"), path, run)


def parse_smoke_config(doc: Any, path: Path) -> dict[str, Any]:
    """The smoke configuration from a parsed ``smoke.yaml`` (read by :func:`load_smoke_config`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict) or not isinstance(doc.get("run"), dict):
        raise ConfigError(f"{path}: expected the keys 'model' and 'run' (see the shipped matrices/smoke.yaml)")
    parse_run(doc["run"], path)
    return dict(doc)


def load_smoke_config(path: Path | None = None) -> dict[str, Any]:
    """The smoke configuration (default: the shipped ``matrices/smoke.yaml``)."""
    return load_data_file(path, "smoke.yaml", parse_smoke_config)
