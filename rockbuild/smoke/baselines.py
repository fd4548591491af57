"""The CPU's perplexity against a recorded baseline: the numerics step's ``cpu`` check (issue 39, item 3).

``config/baselines.yaml`` holds, per model file, text, context and chunks, the perplexity the CPU measured and where,
and one relative tolerance for all. A night whose CPU perplexity leaves the band fails its smoke with both figures and
the one command that re-baselines once a human has looked (``rockbuild baseline SMOKE_JSON``, which rewrites the
entry from that smoke.json). A model, text or context without an entry is "no baseline", never a pass of this gate.

Why a band and not an exact figure: one CPU variant with one compiler is deterministic, but another variant or a
compiler update on a runner moves the figure by up to 0.41 % (docs/numerics.md), so an exact match would fail on a
new runner image. The band catches what moves every backend alike far more than that (a model broken on every
backend: 1.5e15 for the sign-flipped SmolLM2), not a 20 % error in one layer (1.1-1.9 %): the cross-backend limits and
the known answers have that job.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rockbuild.core.data import YDict, YList, check_keys, data_path, expect_type, load_yaml, where
from rockbuild.core.errors import ConfigError
from rockbuild.core.jobs import OSES
from rockbuild.core.record import Record, json_form, json_key

if TYPE_CHECKING:
    from rockbuild.smoke.logprobs import Comparison, Window

BASELINES_FILE = "baselines.yaml"
DEFAULT_TOLERANCE = 0.02
_KEYS = ("model", "text", "ctx", "chunks", "ppl", "measured")
_REF_KEYS = (
    "model",
    "sha256",
    "text",
    "ctx",
    "os",
    "variant",
    "device",
    "file",
    "max_mean_kld",
    "min_same_top",
    "measured",
)
# the OS of a reference entry without ``os``: the entries made before the key were Linux runs
REFERENCE_OS = "linux"
# a new reference's limits when no entry had any: measured on SmolLM2 (docs/numerics.md, "Long prompts")
DEFAULT_REF_LIMITS = {"max_mean_kld": 0.001, "min_same_top": 99.0}
# a GPU's own: the H100 repeated its long run at mean KLD 0.000000 in every window, and a fault that moved its figure
# against the CPU by 0.0001 (mutant (e)) moved it against itself by 0.00045-0.00075 per window (docs/numerics.md)
DEFAULT_DEVICE_LIMITS = {"max_mean_kld": 0.0001, "min_same_top": 99.0}
HEADER = """\
# The CPU's perplexity per model file, text, context and chunks: the numerics step's `cpu` check judges each night's
# against it (rockbuild/smoke/baselines.py, docs/numerics.md). tolerance: relative, for every entry. Once a human has
# checked that a moved figure is right: `rockbuild baseline out/<job>/smoke.json` rewrites its entry here.
"""


@dataclass(frozen=True)
class Baseline(Record):
    model: str  # the model file's name (a glob)
    text: str  # the numerics text's file name
    ctx: int
    chunks: int
    ppl: float
    measured: str = ""  # where and when, with what

    def matches(self, model: str, text: str, ctx: int, chunks: int) -> bool:
        return fnmatchcase(model, self.model) and text == self.text and (ctx, chunks) == (self.ctx, self.chunks)


@dataclass(frozen=True)
class Reference(Record):
    """The long-context reference of one model, text and context: the last good build's CPU top-k
    (:mod:`rockbuild.smoke.logprobs`) and the limits of a night's CPU run against it (a record: ``rockbuild baseline
    --json`` names its file by its name alone)."""

    model: str  # the model file's name
    sha256: str  # and its sha256: a top-k belongs to one file's weights, not to every file of that name
    text: str
    ctx: int
    # the .topk file (relative names are beside baselines.yaml); its name alone in JSON
    file: Path = field(metadata=json_form(str, Path, lambda path: path.name))
    max_mean_kld: float
    min_same_top: float  # percent
    measured: str = ""
    # the OS of the bundles it judges: one CPU variant gives one answer across Linux compilers, but a Windows build's
    # (mingw-w64) differs from it by as much as a fault would (docs/numerics.md), so each OS has its own reference
    os: str = REFERENCE_OS
    # "": the long-context reference (the haswell module alone, numerics.long_context); a CPU variant's name: that
    # variant's own short reference, judged by the cpu_variants step (one module gives one answer on any machine)
    variant: str = ""
    # "": a CPU run's; a GPU device's description (a glob: "NVIDIA H200*"): that device's own long run, judged by
    # long_device (one GPU with one driver and one library repeats its numbers; another GPU does not)
    device: str = ""

    def matches(
        self, model: str, text: str, ctx: int, sha256: str, os_name: str | None, variant: str = "", device: str = ""
    ) -> bool:
        """Whether it is the reference of ``model``'s file on ``text`` at ``ctx`` tokens for ``os_name`` (None: on
        any OS), ``variant`` ("": the long-context one) and GPU ``device`` (its description; "": a CPU run)."""
        return (
            fnmatchcase(model, self.model)
            and sha256.lower() == self.sha256
            and text == self.text
            and ctx == self.ctx
            and os_name in (None, self.os)
            and variant == self.variant
            and (fnmatchcase(device, self.device) if self.device and device else device == self.device)
        )

    def missed(self, got: Comparison) -> tuple[bool, bool]:
        """Whether a run's comparison with this reference exceeds its mean KLD limit, and falls under its same-top
        limit, overall or in any window of positions (a NaN is neither: the caller says NaN)."""
        high = got.mean_kld > self.max_mean_kld or bool(self.over(got))
        low = got.same_top < self.min_same_top or any(w.same_top < self.min_same_top for w in got.windows)
        return high, low

    def over(self, got: Comparison) -> list[Window]:
        """The windows of positions (ubatches) whose mean KLD exceeds the limit: a fault in one region of the
        positions fails where its figure moved, however many positions it leaves alone."""
        return [w for w in got.windows if w.mean_kld > self.max_mean_kld]

    def problems(self, got: Comparison) -> list[str]:
        """What a run's comparison misses, in words naming the windows it failed in; [] when it passes."""
        if not math.isfinite(got.mean_kld):
            return ["NaN or inf in its numbers"]
        out = []
        high, low = self.missed(got)
        if high:
            many = len(got.windows) > 1  # one window is the whole run: nothing to say where
            bad = (self.over(got) or [max(got.windows, key=lambda w: w.mean_kld)]) if many else []
            at = ", ".join(f"from position {w.start}: {w.mean_kld:.5f}" for w in bad[:4])
            at += f" and {len(bad) - 4} more windows" if len(bad) > 4 else ""
            out.append(f"mean KLD {got.mean_kld:.5f} > {self.max_mean_kld:g}" + (f" ({at})" if at else ""))
        if low:
            worst = min(got.windows, key=lambda w: w.same_top) if len(got.windows) > 1 else None
            at = f" (from position {worst.start}: {worst.same_top:.1f} %)" if worst else ""
            out.append(f"same top token {got.same_top:.1f} % < {self.min_same_top:g} %{at}")
        return out

    def figures(self, got: Comparison) -> str:
        """``mean KLD 0.000000 (limit 0.001), same top token 100.0 % (limit 99 %) over 255 positions``."""
        return (
            f"mean KLD {got.mean_kld:.6f} (limit {self.max_mean_kld:g}), same top token {got.same_top:.1f} % "
            f"(limit {self.min_same_top:g} %) over {got.positions} positions"
        )

    @property
    def what(self) -> str:
        """``long-context reference``, ``reference of CPU variant zen4`` or ``long-context reference of GPU NVIDIA
        H200``: for messages."""
        if self.device:
            return f"long-context reference of GPU {self.device}"
        return f"reference of CPU variant {self.variant}" if self.variant else "long-context reference"


@dataclass(frozen=True)
class Baselines:
    entries: tuple[Baseline, ...] = ()
    tolerance: float = DEFAULT_TOLERANCE
    path: Path | None = None
    references: tuple[Reference, ...] = ()

    def find(self, model: str, text: str, ctx: int, chunks: int) -> Baseline | None:
        return next((b for b in self.entries if b.matches(model, text, ctx, chunks)), None)

    def reference(
        self, model: str, text: str, ctx: int, sha256: str, os_name: str, variant: str = "", device: str = ""
    ) -> Reference | None:
        """The reference of ``model``'s file (by ``sha256``) on ``text`` at ``ctx`` tokens for bundles of
        ``os_name`` (of CPU variant ``variant``; "": the long-context one; of GPU ``device``, its description), or
        None."""
        return next((r for r in self.references if r.matches(model, text, ctx, sha256, os_name, variant, device)), None)


def _positive(path: Path, node: Any, key: str, value: Any, what: str, kind: type) -> Any:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    ok = number and math.isfinite(float(value)) and float(value) > 0
    if not ok or (kind is int and not isinstance(value, int)):
        noun = "integer" if kind is int else "number"
        raise ConfigError(f"{where(path, node, key)}: {what} must be a positive {noun}, not {value!r}")
    return kind(value)


def parse_baselines(data: Any, path: Path) -> Baselines:
    """``baselines.yaml``'s parsed YAML; every mistake is a ConfigError naming ``file:line``."""
    if data is None:
        return Baselines((), DEFAULT_TOLERANCE, path)
    expect_type(path, None, None, data, (dict, YDict), "the baselines file")
    check_keys(path, data, ("tolerance", "baselines", "references"), "the baselines file")
    tolerance = _positive(path, data, "tolerance", data.get("tolerance", DEFAULT_TOLERANCE), "tolerance", float)
    if tolerance >= 1:
        raise ConfigError(f"{where(path, data, 'tolerance')}: tolerance is relative (0.02 is 2 %), not {tolerance!r}")
    entries = []
    for i, node in _entries(data, path, "baselines", _KEYS, ("model", "text")):
        entries.append(
            Baseline(
                model=node["model"].strip(),
                text=node["text"].strip(),
                ctx=_positive(path, node, "ctx", node.get("ctx"), f"baselines[{i}].ctx", int),
                chunks=_positive(path, node, "chunks", node.get("chunks"), f"baselines[{i}].chunks", int),
                ppl=_positive(path, node, "ppl", node.get("ppl"), f"baselines[{i}].ppl", float),
                measured=str(node.get("measured") or ""),
            )
        )
    return Baselines(tuple(entries), tolerance, path, _parse_references(data, path))


def _entries(data: Any, path: Path, name: str, keys: tuple[str, ...], texts: tuple[str, ...]) -> list[tuple[int, Any]]:
    """The list ``name`` of the file: each entry a mapping of known keys whose ``texts`` are non-empty strings."""
    items = data.get(name) or []
    expect_type(path, data, name, items, (list, YList), name)
    for i, node in enumerate(items):
        expect_type(path, items, i, node, (dict, YDict), f"{name}[{i}]")
        check_keys(path, node, keys, f"{name}[{i}]")
        for key in texts:
            if not isinstance(node.get(key), str) or not node[key].strip():
                raise ConfigError(
                    f"{where(path, node, key if key in node else None)}: {name}[{i}] needs a {key} (a non-empty string)"
                )
    return list(enumerate(items))


def _parse_references(data: Any, path: Path) -> tuple[Reference, ...]:
    out: list[Reference] = []
    for i, node in _entries(data, path, "references", _REF_KEYS, ("model", "text", "file")):
        digest = node.get("sha256")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
            raise ConfigError(
                f"{where(path, node, 'sha256' if 'sha256' in node else None)}: references[{i}] needs the "
                "model file's sha256 (64 hex digits)"
            )
        same_top = _positive(
            path, node, "min_same_top", node.get("min_same_top"), f"references[{i}].min_same_top", float
        )
        if same_top > 100:
            raise ConfigError(
                f"{where(path, node, 'min_same_top')}: references[{i}].min_same_top is a percentage, not {same_top!r}"
            )
        os_name = node.get("os", REFERENCE_OS)
        if os_name not in OSES:
            raise ConfigError(
                f"{where(path, node, 'os')}: references[{i}].os is one of {', '.join(OSES)}, not {os_name!r}"
            )
        variant = node.get("variant", "")
        if not isinstance(variant, str) or not re.fullmatch(r"[a-z0-9_]*", variant):
            raise ConfigError(
                f"{where(path, node, 'variant')}: references[{i}].variant is a CPU variant's name such as zen4, "
                f"not {variant!r}"
            )
        device = node.get("device", "")
        if not isinstance(device, str) or device != device.strip() or (device and variant):
            raise ConfigError(
                f"{where(path, node, 'device')}: references[{i}].device is a GPU device's description (a glob such "
                f"as 'NVIDIA H200*') of a long-context reference with no variant, not {device!r}"
            )
        file = Path(node["file"].strip())
        out.append(
            Reference(
                model=node["model"].strip(),
                sha256=digest.lower(),
                text=node["text"].strip(),
                ctx=_positive(path, node, "ctx", node.get("ctx"), f"references[{i}].ctx", int),
                file=file if file.is_absolute() else path.parent / file,
                max_mean_kld=_positive(
                    path, node, "max_mean_kld", node.get("max_mean_kld"), f"references[{i}].max_mean_kld", float
                ),
                min_same_top=same_top,
                measured=str(node.get("measured") or ""),
                os=os_name,
                variant=variant,
                device=device,
            )
        )
        new = out[-1]
        key = (new.model, new.sha256, new.text, new.ctx, new.os, new.variant, new.device)
        if any((r.model, r.sha256, r.text, r.ctx, r.os, r.variant, r.device) == key for r in out[:-1]):
            of = f", CPU variant {new.variant}" if new.variant else (f", GPU {new.device}" if new.device else "")
            raise ConfigError(
                f"{where(path, node, None)}: references[{i}] is a second reference of {new.model} on "
                f"{new.text}, {new.ctx} tokens, {new.os}{of}: one per model file, text, context, OS, variant and device"
            )
    return tuple(out)


def baselines_path(name: str | None, data_dir: Path | None = None) -> Path | None:
    """smoke.yaml's ``numerics.baselines`` (a file name beside smoke.yaml, or absolute); None: no baselines."""
    if not name:
        return None
    path = Path(name)
    return path if path.is_absolute() else (data_dir or data_path("config", "smoke.yaml").parent) / path


def load_baselines(path: Path | None) -> Baselines:
    return parse_baselines(load_yaml(path), path) if path is not None else Baselines()


def judge_ppl(ppl: float, model: str, text: str, ctx: int, chunks: int, baselines: Baselines) -> dict[str, Any]:
    """The ``cpu`` check's baseline part: {result: passed | failed | not checked, detail, baseline, deviation}."""
    found = baselines.find(model, text, ctx, chunks)
    if found is None:
        where_ = baselines.path.name if baselines.path is not None else "no baselines file"
        return {
            "result": "not checked",
            "detail": f"no baseline for {model} on {text}, {chunks} x {ctx} tokens ({where_})",
            "baseline": None,
            "deviation": None,
        }
    deviation = ppl / found.ppl - 1.0
    shown = f"{deviation * 100:+.2f} %" if abs(deviation) < 100 else f"x{ppl / found.ppl:.3g}"
    record = {"baseline": found.to_dict(), "deviation": deviation, "tolerance": baselines.tolerance}
    if abs(deviation) <= baselines.tolerance:
        return {
            **record,
            "result": "passed",
            "detail": f"{shown} from the baseline {found.ppl:.4f} (tolerance {baselines.tolerance:.0%})",
        }
    return {
        **record,
        "result": "failed",
        "detail": (
            f"perplexity {ppl:.6g} is {shown} from the baseline {found.ppl:.4f} for {model} on {text}, "
            f"{chunks} x {ctx} tokens (tolerance {baselines.tolerance:.0%}; measured "
            f"{found.measured or '?'}); once a human has checked the new figure is right: "
            "rockbuild baseline <its smoke.json>"
        ),
    }


def _line(b: Baseline) -> str:
    return (
        f"  - {{model: {json.dumps(b.model)}, text: {json.dumps(b.text)}, ctx: {b.ctx}, chunks: {b.chunks}, "
        f"ppl: {b.ppl!r},\n     measured: {json.dumps(b.measured)}}}\n"
    )


def _ref_line(r: Reference, folder: Path) -> str:
    file = r.file.relative_to(folder) if r.file.is_relative_to(folder) else r.file
    variant = f", variant: {r.variant}" if r.variant else ""
    variant += f", device: {json.dumps(r.device)}" if r.device else ""
    return (
        f"  - {{model: {json.dumps(r.model)}, sha256: {json.dumps(r.sha256)},\n     text: {json.dumps(r.text)}, "
        f"ctx: {r.ctx}, os: {r.os}{variant},\n     file: {json.dumps(str(file))},\n     max_mean_kld: "
        f"{r.max_mean_kld!r}, min_same_top: {r.min_same_top!r},\n     measured: {json.dumps(r.measured)}}}\n"
    )


def write_baselines(path: Path, baselines: Baselines) -> Path:
    """The file anew: its leading comment kept (else the standard one), then the tolerance and every entry."""
    old = path.read_text(encoding="utf-8").splitlines(keepends=True) if path.is_file() else []
    header = "".join(line for line in _leading_comments(old)) or HEADER
    text = header + f"tolerance: {baselines.tolerance!r}\nbaselines:\n" + "".join(_line(b) for b in baselines.entries)
    if baselines.references:
        text += "references:\n" + "".join(_ref_line(r, path.parent) for r in baselines.references)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def _leading_comments(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if not line.startswith("#"):
            break
        out.append(line)
    return out


@dataclass(frozen=True)
class _Replaced(Record):
    """What ``rockbuild baseline`` did to one entry: the file, the entry replaced (None: a new one) and the new one."""

    path: Path = field(metadata=json_key("file"))
    old: Any
    new: Any


@dataclass(frozen=True)
class Rebaselined(_Replaced):
    """A perplexity baseline (:class:`Baseline`) set."""

    old: Baseline | None
    new: Baseline

    def render(self) -> str:
        was = f"{self.old.ppl:.4f} -> " if self.old else "new: "
        return (
            f"{self.path}: {self.new.model} on {self.new.text}, {self.new.chunks} x {self.new.ctx} tokens: "
            f"{was}{self.new.ppl:.4f} ({self.new.measured or 'measured: not said'})"
        )


def rebaseline(path: Path, cpu: Mapping[str, Any], measured: str) -> Rebaselined:
    """Set the baseline of ``cpu`` (a smoke.json's ``numerics.cpu``: model, text, ctx, chunks, ppl) in ``path``. The
    model's entry keeps its glob when one matched."""
    try:
        model, text = str(cpu["model"]), str(cpu["text"])
        ctx, chunks, ppl = int(cpu["ctx"]), int(cpu["chunks"]), float(cpu["ppl"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(
            "the smoke.json has no CPU perplexity to take as a baseline (numerics.cpu needs model, text, "
            "ctx, chunks and a ppl): run `rockbuild smoke --model smollm2` first"
        ) from None
    if not math.isfinite(ppl) or ppl <= 0:
        raise ConfigError(f"the smoke.json's CPU perplexity is {ppl!r}: no baseline can be that")
    baselines = load_baselines(path) if path.is_file() else Baselines((), DEFAULT_TOLERANCE, path)
    old = baselines.find(model, text, ctx, chunks)
    new = Baseline(old.model if old else model, text, ctx, chunks, round(ppl, 4), measured)
    entries = [new if b is old else b for b in baselines.entries] if old else [*baselines.entries, new]
    write_baselines(path, Baselines(tuple(entries), baselines.tolerance, path, baselines.references))
    return Rebaselined(path, old, new)


@dataclass(frozen=True)
class Rereferenced(_Replaced):
    """A long-context reference (:class:`Reference`) set."""

    old: Reference | None
    new: Reference

    def render(self) -> str:
        return (
            f"{self.path}: {self.new.what} of {self.new.model} on {self.new.text}, {self.new.ctx} tokens, "
            f"{self.new.os}: "
            f"{'replaced' if self.old else 'new'}, {self.new.file.name} "
            f"({self.new.measured or 'measured: not said'})"
        )


def reference_name(
    model: str, text: str, ctx: int, os_name: str = REFERENCE_OS, variant: str = "", device: str = ""
) -> str:
    """The file a new reference is written to, beside baselines.yaml (a Linux one's name has no OS in it; a CPU
    variant's ends in its name, a GPU device's in its description)."""
    suffix = ("" if os_name == REFERENCE_OS else f"-{os_name}") + (f"-{variant}" if variant else "")
    suffix += f"-{device}" if device else ""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{model.removesuffix('.gguf')}-{Path(text).stem}-{ctx}{suffix}").strip("-")
    return f"references/{stem}.topk"


def rereference(path: Path, long_check: Mapping[str, Any], measured: str) -> Rereferenced:
    """Record the night's long-context top-k (a smoke.json's ``numerics.long_reference``: its ``topk`` file and
    ``about``), a CPU variant's own (``cpu_variants.variants[]``'s ``reference``, whose ``about`` names the
    ``variant``) or a GPU's own (``numerics.long_device``, whose ``about`` names the ``device``), as the reference of
    its model, text, context, OS, variant and device; an entry's limits are kept (a new entry starts from the limits
    of the same model's reference on another OS, else the defaults)."""
    topk = Path(str(long_check.get("topk") or ""))
    about = long_check.get("about") or {}
    try:
        model, text, ctx = str(about["model"]), str(about["text"]), int(about["ctx"])
        sha256 = str(about["model_sha256"]).lower()
        os_name = str(about.get("os", REFERENCE_OS))  # a smoke.json from before the key: a Linux run
        variant = str(about.get("variant") or "")
        device = str(about.get("device") or "")
        if not re.fullmatch(r"[0-9a-f]{64}", sha256) or os_name not in OSES:
            raise ValueError(sha256)
    except (KeyError, TypeError, ValueError):
        raise ConfigError(
            "the smoke.json has no long-context run to take as a reference (numerics.long_reference "
            f"needs its about: model, model_sha256, text, ctx, and an os of {', '.join(OSES)} if any)"
        ) from None
    if not topk.is_file():
        raise ConfigError(
            f"the smoke.json's long-context top-k {topk} is gone (it lives in the smoke's logs): run the smoke again"
        )
    baselines = load_baselines(path) if path.is_file() else Baselines((), DEFAULT_TOLERANCE, path)
    old = baselines.reference(model, text, ctx, sha256, os_name, variant, device)
    target = old.file if old else path.parent / reference_name(model, text, ctx, os_name, variant, device)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(topk, target)
    kin = old or next(
        (
            r
            for r in baselines.references
            if r.matches(model, text, ctx, sha256, None, variant, r.device) and bool(r.device) == bool(device)
        ),
        None,
    )
    default = DEFAULT_DEVICE_LIMITS if device else DEFAULT_REF_LIMITS
    limits = {"max_mean_kld": kin.max_mean_kld, "min_same_top": kin.min_same_top} if kin else default
    new = Reference(
        old.model if old else model,
        sha256,
        text,
        ctx,
        target,
        limits["max_mean_kld"],
        limits["min_same_top"],
        measured,
        os=os_name,
        variant=variant,
        device=device,
    )
    refs = [new if r is old else r for r in baselines.references] if old else [*baselines.references, new]
    write_baselines(path, Baselines(baselines.entries, baselines.tolerance, path, tuple(refs)))
    return Rereferenced(path, old, new)


@dataclass(frozen=True)
class Recorded:
    """What one ``rockbuild baseline`` recorded: a perplexity baseline, a long-context reference, or both."""

    items: tuple[Rebaselined | Rereferenced, ...]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i in self.items:
            if isinstance(i, Rereferenced) and i.new.variant:
                out.setdefault("variants", []).append(i.to_dict())
            elif isinstance(i, Rereferenced) and i.new.device:
                out["device"] = i.to_dict()
            else:
                out["reference" if isinstance(i, Rereferenced) else "baseline"] = i.to_dict()
        return out

    def render(self) -> str:
        return "\n".join(i.render() for i in self.items)
