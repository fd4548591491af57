"""llama-perplexity's log-probability files, kept small: the long-context reference of the numerics step (issue 39).

``llama-perplexity --kl-divergence-base FILE`` writes, for each scored position of each chunk, the whole vocabulary's
log-probabilities (tools/perplexity/perplexity.cpp): ``_logits_``, ``n_ctx`` (u32), ``n_vocab`` and ``n_chunk`` (i32),
the evaluated tokens (i32, ``n_ctx * n_chunk``), then per chunk ``n_ctx - 1 - n_ctx/2`` rows of ``nv`` u16, where
``nv = 2 * ((n_vocab + 1) / 2) + 4``: the row's ``scale`` and ``min_log_prob`` as two f32, then one u16 per token,
``log p = q * scale + min_log_prob``. That is 200 MB per 4,096 tokens of SmolLM2's 49k vocabulary: far too much to
keep from one night to the next.

A :class:`TopK` keeps, per position, the k most likely tokens and their log-probabilities (k = 16: 0.26 MB before
compression for 4,096 tokens), the sha256 of the evaluated tokens, and what made it. :func:`compare` measures a new
run's full distributions against it: the KL divergence of the two distributions folded onto the reference's k tokens
plus one bin for all the rest (the data-processing inequality makes that a lower bound of the true KL divergence, and
it is exact where the reference's k tokens hold all the mass), the share of positions whose top token is the
reference's (a tie of two tokens counts as the same answer: on a GPU, ties at the top of a row are common), and
the mean divergence per ubatch-sized window of positions, which shows *where* a long prompt goes wrong.
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rockbuild.core.errors import ConfigError
from rockbuild.core.record import Record, json_key

if TYPE_CHECKING:  # numpy is imported where it is used: the CLI starts without it (a command that never reads one)
    import numpy as np

MAGIC = b"_logits_"
TOPK_MAGIC = b"rockbuild-topk 1\n"  # inside the xz stream (Python's own lzma: nothing to install where it is read)
DEFAULT_K = 16
_BLOCK = 256  # rows at a time: 256 x 49k u16 is 25 MB


class LogProbsError(ConfigError):
    """A log-probability or reference file that cannot be read (one line, names the file)."""


@dataclass(frozen=True)
class BaseFile:
    """An open ``--kl-divergence-base`` file: its header and its rows as one read-only array (a memory map)."""

    path: Path
    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: np.ndarray  # i32, n_ctx * n_chunk
    rows: np.ndarray  # u16, (n_chunk * (n_ctx - 1 - n_ctx // 2), nv)

    @property
    def scored_per_chunk(self) -> int:
        return self.n_ctx - 1 - self.n_ctx // 2

    @property
    def tokens_sha256(self) -> str:
        return hashlib.sha256(self.tokens.astype("<i4").tobytes()).hexdigest()

    def blocks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(first row, log-probabilities f32 (rows, n_vocab), argmax per row) for each block of rows."""
        import numpy as np

        for start in range(0, self.rows.shape[0], _BLOCK):
            raw = np.asarray(self.rows[start : start + _BLOCK])
            head = np.ascontiguousarray(raw[:, :4]).view("<f4")  # scale, min_log_prob
            q = raw[:, 4 : 4 + self.n_vocab]
            logp = q.astype(np.float32) * head[:, :1] + head[:, 1:2]
            yield start, logp, q.argmax(axis=1)


def read_base(path: Path) -> BaseFile:
    """Open a ``--kl-divergence-base`` file; a LogProbsError for anything that is not one, or a truncated one."""
    import numpy as np

    try:
        with path.open("rb") as f:
            head = f.read(20)
    except OSError as exc:
        raise LogProbsError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if len(head) < 20 or head[:8] != MAGIC:
        raise LogProbsError(f"{path} is not a llama-perplexity log-probability file (--kl-divergence-base)")
    n_ctx, n_vocab, n_chunk = struct.unpack("<Iii", head[8:20])
    if n_ctx < 2 or n_vocab < 1 or n_chunk < 1:
        raise LogProbsError(f"{path}: a header of n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk}")
    nv = 2 * ((n_vocab + 1) // 2) + 4
    n_rows = n_chunk * (n_ctx - 1 - n_ctx // 2)
    token_bytes = 4 * n_ctx * n_chunk
    need = 20 + token_bytes + 2 * nv * n_rows
    size = path.stat().st_size
    if size < need:
        raise LogProbsError(f"{path} is truncated: {size} bytes, its header says {need}")
    tokens = np.fromfile(path, dtype="<i4", count=n_ctx * n_chunk, offset=20)
    rows = np.memmap(path, dtype="<u2", mode="r", offset=20 + token_bytes, shape=(n_rows, nv))
    return BaseFile(path, n_ctx, n_vocab, n_chunk, tokens, rows)


@dataclass(frozen=True)
class TopK:
    """Per scored position, the reference's k most likely tokens (most likely first) and their log-probabilities."""

    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens_sha256: str
    ids: np.ndarray  # i32 (rows, k)
    logp: np.ndarray  # f32 (rows, k)
    about: dict[str, Any]  # what made it: model, text, build, device, date

    @property
    def k(self) -> int:
        return int(self.ids.shape[1])

    def header(self) -> dict[str, Any]:
        return {
            "n_ctx": self.n_ctx,
            "n_vocab": self.n_vocab,
            "n_chunk": self.n_chunk,
            "k": self.k,
            "rows": int(self.ids.shape[0]),
            "tokens_sha256": self.tokens_sha256,
            "about": self.about,
        }


def top_k(base: BaseFile, k: int = DEFAULT_K, about: dict[str, Any] | None = None) -> TopK:
    """The k most likely tokens of every position of ``base``."""
    import numpy as np

    if k < 1:
        raise LogProbsError(f"top-k of {k}: at least one token per position")
    k = min(k, base.n_vocab)
    ids, logp = [], []
    for _, block, _ in base.blocks():
        part = np.argpartition(-block, k - 1, axis=1)[:, :k]
        values = np.take_along_axis(block, part, axis=1)
        # most likely first, a tie (two tokens of one quantized log-probability) by the lower id: argmax's choice
        order = np.lexsort((part, -values), axis=1)
        ids.append(np.take_along_axis(part, order, axis=1).astype("<i4"))
        logp.append(np.take_along_axis(values, order, axis=1).astype("<f4"))
    return TopK(
        base.n_ctx,
        base.n_vocab,
        base.n_chunk,
        base.tokens_sha256,
        np.concatenate(ids),
        np.concatenate(logp),
        dict(about or {}),
    )


def write_topk(topk: TopK, path: Path) -> Path:
    """The reference file: xz of a magic line, a JSON header line, then ids (i32) and log-probabilities (f32)."""
    import numpy as np

    raw = io.BytesIO()
    raw.write(TOPK_MAGIC)
    raw.write(json.dumps(topk.header(), sort_keys=True).encode() + b"\n")
    raw.write(np.ascontiguousarray(topk.ids, dtype="<i4").tobytes())
    raw.write(np.ascontiguousarray(topk.logp, dtype="<f4").tobytes())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(lzma.compress(raw.getvalue(), preset=9))
    tmp.replace(path)
    return path


def read_topk(path: Path) -> TopK:
    import numpy as np

    try:
        data = lzma.decompress(path.read_bytes())
    except OSError as exc:
        raise LogProbsError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except lzma.LZMAError:
        raise LogProbsError(f"{path} is not a rockbuild top-k reference (not xz)") from None
    if not data.startswith(TOPK_MAGIC):
        raise LogProbsError(f"{path} is not a rockbuild top-k reference")
    end = data.index(b"\n", len(TOPK_MAGIC)) if b"\n" in data[len(TOPK_MAGIC) :] else -1
    try:
        header = json.loads(data[len(TOPK_MAGIC) : end])
        rows, k = int(header["rows"]), int(header["k"])
        body = data[end + 1 :]
        if len(body) != rows * k * 8:
            raise ValueError(f"{len(body)} bytes of tables for {rows} x {k}")
        ids = np.frombuffer(body, dtype="<i4", count=rows * k).reshape(rows, k)
        logp = np.frombuffer(body, dtype="<f4", count=rows * k, offset=rows * k * 4).reshape(rows, k)
        return TopK(
            int(header["n_ctx"]),
            int(header["n_vocab"]),
            int(header["n_chunk"]),
            str(header["tokens_sha256"]),
            ids,
            logp,
            dict(header.get("about") or {}),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise LogProbsError(f"{path}: a damaged top-k reference ({exc})") from None


@dataclass(frozen=True)
class Window(Record):
    """One window of a comparison (a ubatch of positions): where it starts in the sequence, its mean KLD and its
    top-token agreement."""

    start: int = field(metadata=json_key("from"))  # the first position in the sequence
    mean_kld: float
    same_top: float  # percent


@dataclass(frozen=True)
class Comparison(Record):
    """A run against a reference: the folded KL divergence and the top-token agreement, overall and per window (a
    record: smoke.json's ``numerics.long_reference.figures``)."""

    positions: int
    mean_kld: float
    max_kld: float
    p99_kld: float
    same_top: float  # percent
    window: int  # positions per window (the ubatch)
    windows: tuple[Window, ...]
    worst_position: int  # in the sequence (0-based token index) of the largest divergence


def compare(base: BaseFile, ref: TopK, *, window: int = 512) -> Comparison:
    """How far ``base`` (a new run's full distributions) is from ``ref``. A different context, vocabulary or token
    sequence is a LogProbsError: they are different experiments, not a small divergence."""
    import numpy as np

    if (base.n_ctx, base.n_vocab, base.n_chunk) != (ref.n_ctx, ref.n_vocab, ref.n_chunk):
        raise LogProbsError(
            f"{base.path} holds {base.n_chunk} x {base.n_ctx} tokens of a {base.n_vocab}-token "
            f"vocabulary, the reference {ref.n_chunk} x {ref.n_ctx} of {ref.n_vocab}"
        )
    if base.tokens_sha256 != ref.tokens_sha256:
        raise LogProbsError(
            f"{base.path}: the evaluated tokens differ from the reference's (a changed text or "
            "tokenizer): record a new reference once a human has looked"
        )
    klds = np.empty(base.rows.shape[0], dtype=np.float64)
    same = np.empty(base.rows.shape[0], dtype=bool)
    for start, logp, _ in base.blocks():
        n = logp.shape[0]
        a = ref.logp[start : start + n].astype(np.float64)
        b = np.take_along_axis(logp, ref.ids[start : start + n].astype(np.int64), axis=1).astype(np.float64)
        p, q = np.exp(a), np.exp(b)
        p_rest = np.clip(1.0 - p.sum(axis=1), 0.0, 1.0)
        q_rest = np.clip(1.0 - q.sum(axis=1), 1e-12, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            rest = np.where(p_rest > 1e-12, p_rest * (np.log(np.maximum(p_rest, 1e-12)) - np.log(q_rest)), 0.0)
        klds[start : start + n] = (p * (a - b)).sum(axis=1) + rest
        # the reference's top token is (one of) the run's most likely: a tie is the same answer, whichever id won it
        same[start : start + n] = b[:, 0] >= logp.max(axis=1)
    finite = bool(np.isfinite(klds).all())
    scored = base.scored_per_chunk
    # position in the sequence of row r of a chunk: the chunk's second half, first scored token at n_ctx // 2 + 1
    positions = np.arange(klds.size) % scored + base.n_ctx // 2 + 1
    windows = []
    for first in range(0, base.n_ctx, window):
        mask = (positions >= first) & (positions < first + window)
        if mask.any():
            windows.append(Window(first, float(klds[mask].mean()), float(same[mask].mean() * 100)))
    worst = int(np.nanargmax(np.where(np.isfinite(klds), klds, np.inf))) if klds.size else 0
    nan = math.nan
    return Comparison(
        positions=int(klds.size),
        mean_kld=float(klds.mean()) if finite else nan,
        max_kld=float(klds.max()) if finite else nan,
        p99_kld=float(np.percentile(klds, 99)) if finite else nan,
        same_top=float(same.mean() * 100),
        window=window,
        windows=tuple(windows),
        worst_position=int(positions[worst]) if klds.size else 0,
    )
