"""Long prompts: the numerics step's checks past one ubatch (issue 39, item 1).

The step's other checks run chunks of 256 tokens: one ubatch each, blind by construction to everything that goes
wrong *between* the ubatches of one prompt, the class of the gfx1151 race (llama.cpp #24233, reverted by #28604: the
HIP backend read inputs from pinned host buffers the host was already refilling with the next ubatch; users saw
gibberish from about 4-5K tokens with llama-server's defaults). Three checks, each passed / failed / not checked:

* **long_reference**: the bundle's llama-perplexity on one sequence of ``ctx`` tokens of a long public-domain text
  (``moby-dick.txt``, pinned by sha256) with llama-server's defaults ``-b 2048 -ub 512``, on the CPU, against the
  top-k reference recorded from the last good build (``baselines.yaml``'s ``references``,
  :mod:`rockbuild.smoke.logprobs`). A fault in code every backend runs (positions, KV-cache bookkeeping, batching on
  the host) moves the perplexity 0.05 % (inside any baseline's tolerance) but not the distributions: this sees it.
* **long_cross_backend**: the same sequence on the GPU against that CPU run, judged by the numerics thresholds.
* **long_device**: on a real GPU, the same sequence again, against this device's own last good run (a reference with
  ``device:``), per window of ``ubatch`` positions: one GPU repeats its numbers far more closely than it matches the
  CPU, so a fault in the GPU's code at some positions fails where it moved (issue 59).
* **long_answer**: a pass key placed early in a prompt of several thousand tokens, asked for at its end, through
  llama-server's HTTP API (``/completion``, greedy) on the GPU (on the CPU where there is none): the path users take.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rockbuild.core.data import check_keys, seconds, where, whole
from rockbuild.core.errors import ConfigError
from rockbuild.core.record import Record
from rockbuild.process import spawn, stop

from .logprobs import DEFAULT_K, LogProbsError, compare, read_base, read_topk, top_k, write_topk
from .probe import exit_reason

PASSED, FAILED, NOT_CHECKED = "passed", "failed", "not checked"
TOPK_NAME = "long-cpu.topk"  # the night's own top-k, kept in the logs: `rockbuild baseline` records it
DEVICE_TOPK_NAME = "long-gpu.topk"  # the GPU's own, kept beside it: recorded as that device's reference


@dataclass(frozen=True)
class Passkey(Record):
    """The long known answer: ``key`` after ``at`` characters of a ``chars``-character stretch of the text."""

    key: str = "71432"
    chars: int = 20000
    at: int = 300
    min_tokens: int = 3000  # the prompt must really be long: fewer evaluated tokens fails
    n_predict: int = 8
    server_ctx: int = 8192

    def prompt(self, text: str) -> str:
        filler = text[: self.chars]
        return (
            "There is an important number hidden in the long text below. Find it and remember it.\n\n"
            + filler[: self.at]
            + f"\n\nThe pass key is {self.key}. Remember it. {self.key} is the pass key.\n\n"
            + filler[self.at :]
            + "\n\nWhat is the pass key? The pass key is"
        )


@dataclass(frozen=True)
class LongContextConfig:
    """smoke.yaml's ``numerics.long_context``."""

    text: Path
    sha256: str
    source: str = ""
    ctx: int = 4096
    batch: int = 2048  # llama-server's default -b
    ubatch: int = 512  # and -ub
    timeout: float = 1200.0
    passkey: Passkey | None = Passkey()
    enabled: bool = True
    # the CPU's long run uses this CPU variant module alone, as its reference did: two variants of one build differ
    # (AVX-512 against AVX2 kernels: mean KLD 0.003 on SmolLM2), one variant on two machines does not. None: ggml's pick
    cpu_variant: str | None = "haswell"
    # a Vulkan device on the CPU (lavapipe, llvmpipe): the GPU's long runs are not made there (on 2 cores the pass key
    # alone took 553 s on lavapipe, 50 s on the CPU): the pass key goes to the CPU, the GPU comparison is not checked
    software_devices: tuple[str, ...] = ("llvmpipe", "lavapipe", "swiftshader")

    def software(self, description: str) -> bool:
        return any(name in description.lower() for name in self.software_devices)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text.name,
            "sha256": self.sha256,
            "ctx": self.ctx,
            "batch": self.batch,
            "ubatch": self.ubatch,
            "cpu_variant": self.cpu_variant,
            "passkey": self.passkey.to_dict() if self.passkey else None,
        }


_LONG_KEYS = (
    "enabled",
    "text",
    "sha256",
    "source",
    "ctx",
    "batch",
    "ubatch",
    "timeout",
    "passkey",
    "cpu_variant",
    "software_devices",
)
_PASSKEY_KEYS = ("key", "chars", "at", "min_tokens", "n_predict", "server_ctx")


def parse_long_context(node: Any, path: Path, folder: Path) -> LongContextConfig | None:
    """``numerics.long_context`` (None: absent); a mistake is a ConfigError naming ``file:line`` and the key."""
    what = "numerics.long_context"
    if node is None:
        return None
    if not isinstance(node, Mapping):
        raise ConfigError(f"{path}: {what} must be a mapping (see the shipped config/smoke.yaml)")
    check_keys(path, node, _LONG_KEYS, what)
    name, digest = node.get("text"), node.get("sha256")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(
            f"{where(path, node, 'text' if 'text' in node else None)}: {what}.text must name the long text's file"
        )
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ConfigError(
            f"{where(path, node, 'sha256' if 'sha256' in node else None)}: {what}.sha256 must be the "
            "text's sha256 (64 hex digits)"
        )
    ctx = whole(path, node, "ctx", 4096, what, least=64)
    batch = whole(path, node, "batch", 2048, what, least=1)
    ubatch = whole(path, node, "ubatch", 512, what, least=1)
    if ubatch > batch:
        raise ConfigError(f"{where(path, node, 'ubatch')}: {what}.ubatch ({ubatch}) cannot exceed batch ({batch})")
    timeout = seconds(path, node, "timeout", 1200, what)
    passkey: Passkey | None = None
    pk = node.get("passkey")
    if pk is not None:
        if not isinstance(pk, Mapping):
            raise ConfigError(
                f"{where(path, node, 'passkey')}: {what}.passkey must be a mapping such as "
                "{key: '71432', chars: 20000}"
            )
        check_keys(path, pk, _PASSKEY_KEYS, f"{what}.passkey")
        key = pk.get("key", Passkey.key)
        if not isinstance(key, str | int) or isinstance(key, bool) or not re.fullmatch(r"\d{3,12}", str(key)):
            raise ConfigError(
                f"{where(path, pk, 'key')}: {what}.passkey.key must be a number of 3 to 12 digits (quoted), not {key!r}"
            )
        chars = whole(path, pk, "chars", Passkey.chars, f"{what}.passkey", least=1000)
        at = whole(path, pk, "at", Passkey.at, f"{what}.passkey", least=0)
        if at >= chars:
            raise ConfigError(f"{where(path, pk, 'at')}: {what}.passkey.at ({at}) must lie inside its chars ({chars})")
        passkey = Passkey(
            key=str(key),
            chars=chars,
            at=at,
            min_tokens=whole(path, pk, "min_tokens", Passkey.min_tokens, f"{what}.passkey", least=1),
            n_predict=whole(path, pk, "n_predict", Passkey.n_predict, f"{what}.passkey", least=1),
            server_ctx=whole(path, pk, "server_ctx", Passkey.server_ctx, f"{what}.passkey", least=64),
        )
    variant = node.get("cpu_variant", LongContextConfig.cpu_variant)
    if variant is not None and (not isinstance(variant, str) or not re.fullmatch(r"[a-z0-9_]+", variant)):
        raise ConfigError(
            f"{where(path, node, 'cpu_variant')}: {what}.cpu_variant must name a CPU variant module "
            f"(haswell for libggml-cpu-haswell), or be null for ggml's pick, not {variant!r}"
        )
    software = node.get("software_devices", list(LongContextConfig.software_devices))
    if not isinstance(software, list) or not all(isinstance(s, str) and s for s in software):
        raise ConfigError(
            f"{where(path, node, 'software_devices')}: {what}.software_devices must be a list of names "
            f"a software device's description contains (llvmpipe), not {software!r}"
        )
    text = Path(name.strip())
    return LongContextConfig(
        text=text if text.is_absolute() else folder / text,
        sha256=digest,
        cpu_variant=variant,
        software_devices=tuple(s.lower() for s in software),
        source=str(node.get("source") or ""),
        ctx=ctx,
        batch=batch,
        ubatch=ubatch,
        timeout=float(timeout),
        passkey=passkey,
        enabled=bool(node.get("enabled", True)),
    )


def not_checked(detail: str) -> dict[str, Any]:
    return {"result": NOT_CHECKED, "detail": detail}


def read_text(config: LongContextConfig) -> tuple[str | None, str | None]:
    """(the long text, None) or (None, why it cannot be used): missing, or not the pinned one."""
    try:
        data = config.text.read_bytes()
    except OSError as exc:
        return None, f"the long text {config.text} cannot be read ({exc.strerror or exc})"
    digest = hashlib.sha256(data).hexdigest()
    if digest != config.sha256:
        return None, (
            f"the long text {config.text.name} is not the pinned one (sha256 {digest[:16]}..., pinned "
            f"{config.sha256[:16]}...)"
        )
    return data.decode("utf-8"), None


# ---------------------------------------------------------------------------------------------------------------------
# The CPU's long run against the last good build's reference


def reference_check(
    base: Path, reference: Any, *, logs: Path, about: Mapping[str, Any], on: str = "CPU"
) -> dict[str, Any]:
    """Keep this run's top-k (``logs/long-cpu.topk``, ``long-gpu.topk`` for a GPU's run: what ``rockbuild baseline``
    records once a human has looked), then judge it against ``reference`` (a
    :class:`rockbuild.smoke.baselines.Reference`, or None) overall and per window of ``ubatch`` positions. ``on``:
    CPU (the last good build's CPU run) or GPU (``about`` names the device: its own last good run)."""
    topk = logs / (DEVICE_TOPK_NAME if on == "GPU" else TOPK_NAME)
    try:
        night = read_base(base)
        write_topk(top_k(night, DEFAULT_K, dict(about)), topk)
    except LogProbsError as exc:
        return {"result": FAILED, "detail": f"the {on}'s long run left no usable log-probabilities: {exc}"}
    out: dict[str, Any] = {"topk": str(topk)}
    if reference is None:
        device = f", GPU {about.get('device')}" if on == "GPU" else ""
        out.update(
            not_checked(
                f"no reference for {about.get('model')} (sha256 {str(about.get('model_sha256'))[:12]}) "
                f"on {about.get('text')}, {about.get('ctx')} tokens, {about.get('os')}{device}, in "
                "baselines.yaml (record one: rockbuild baseline <smoke.json>)"
            )
        )
        return out
    out["reference"] = reference.to_dict()
    try:
        recorded = read_topk(reference.file)
        if recorded.about.get("cpu_variant") != about.get("cpu_variant"):
            had = about.get("cpu_variant") or "ggml's pick (the bundle ships no such module)"
            out.update(
                not_checked(
                    f"the reference was recorded with CPU variant {recorded.about.get('cpu_variant')}, "
                    f"this run had {had}: two variants differ by design"
                )
            )
            return out
        got = compare(night, recorded, window=int(about.get("ubatch") or 512))
    except LogProbsError as exc:
        out.update(result=FAILED, detail=f"against the reference {reference.file.name}: {exc}")
        return out
    out["figures"] = got.to_dict()
    problems = reference.problems(got)
    shown = f"{reference.figures(got)} against the reference ({reference.measured or reference.file.name})"
    if problems:
        whose = "this GPU's last good run" if on == "GPU" else "the last good build's"
        out.update(
            result=FAILED,
            detail=f"the {on}'s long context differs from {whose}: "
            + ", ".join(problems)
            + f" (reference: {reference.measured or reference.file.name})",
        )
    else:
        out.update(result=PASSED, detail=shown)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# The long known answer through llama-server


@contextlib.contextmanager
def serving(
    args: list[str], *, cwd: Path, env: Mapping[str, str], log: Path, base: str, timeout: float
) -> Iterator[str | None]:
    """llama-server started with ``args``: yields None once /health answers 200, else why not; stopped at the end."""
    import requests

    log.unlink(missing_ok=True)
    try:
        proc = spawn(args, cwd=cwd, env=env, log=log)
    except OSError as exc:
        yield f"cannot start {Path(args[0]).name}: {exc.strerror}"
        return
    try:
        deadline = time.monotonic() + timeout
        why: str | None = f"/health did not answer 200 within {timeout:.0f}s"
        with requests.Session() as session:
            session.trust_env = False
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    why = f"{exit_reason(proc.returncode)} before /health answered"
                    break
                try:
                    if session.get(f"{base}/health", timeout=2.0).status_code == 200:
                        why = None
                        break
                except requests.RequestException:
                    pass
                time.sleep(0.1)  # as run_server polls /health
        yield why
    finally:
        stop(proc)


@dataclass(frozen=True)
class ServerCommand:
    """The bundle's llama-server as the pass key asks it: on ``on`` (GPU or CPU, by ``device_args``) with ``model``,
    listening on ``port``; ``program`` None: the bundle has no llama-server."""

    program: Path | None
    model: Path
    on: str  # GPU | CPU
    device_args: tuple[str, ...]
    threads: int
    port: int
    seed: int = 42

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def args(self, ctx: int) -> list[str]:
        return [
            str(self.program),
            "-m",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-c",
            str(ctx),
            "-np",
            "1",
            "-t",
            str(self.threads),
            *self.device_args,
        ]


_TRAINED_RE = re.compile(r"exceeds the training context of the model \((\d+)\)")


def _model_context(reply: Any, log: Path) -> int | None:
    """The context the model was trained on, when llama-server refused the prompt for it: its error says the context
    is too small (``exceed_context_size_error``) and its log that it capped the context at the model's training
    context, the same number. None otherwise (a context smaller than asked for any other reason is a fault)."""
    error = reply.get("error") if isinstance(reply, dict) else None
    if not isinstance(error, dict) or error.get("type") != "exceed_context_size_error":
        return None
    try:
        capped = _TRAINED_RE.search(log.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    n_ctx = error.get("n_ctx")
    return n_ctx if capped is not None and isinstance(n_ctx, int) and int(capped.group(1)) == n_ctx else None


def passkey_check(
    config: LongContextConfig, text: str, server: ServerCommand, *, cwd: Path, env: Mapping[str, str], logs: Path
) -> dict[str, Any]:
    """Ask the bundle's llama-server, on ``server.on`` (GPU or CPU), for the pass key at the end of a long prompt."""
    import requests

    pk = config.passkey
    if pk is None:
        return not_checked("no passkey in smoke.yaml's numerics.long_context")
    if server.program is None:
        return {"result": FAILED, "detail": "llama-server is not in the bundle"}
    on, base, log = server.on, server.base, logs / "long-server.log"
    args = server.args(pk.server_ctx)
    out: dict[str, Any] = {"on": on, "command": args, "log": str(log), "passkey": pk.to_dict()}
    start = time.monotonic()
    with serving(args, cwd=cwd, env=env, log=log, base=base, timeout=config.timeout) as why:
        if why is not None:
            out.update(result=FAILED, detail=f"llama-server on the {on}: {why}")
            return out
        body = {
            "prompt": pk.prompt(text),
            "n_predict": pk.n_predict,
            "temperature": 0,
            "top_k": 1,
            "seed": server.seed,
            "cache_prompt": False,
        }
        try:
            with requests.Session() as session:
                session.trust_env = False
                resp = session.post(f"{base}/completion", json=body, timeout=config.timeout)
            reply = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
        except requests.Timeout:
            out.update(result=FAILED, detail=f"/completion did not answer within {config.timeout:.0f}s on the {on}")
            return out
        except (requests.RequestException, ValueError) as exc:
            out.update(result=FAILED, detail=f"/completion failed on the {on}: {type(exc).__name__}")
            return out
    out["seconds"] = round(time.monotonic() - start, 3)
    short = _model_context(reply, log) if resp.status_code == 400 else None
    if short is not None and short < pk.server_ctx:
        return {
            **out,
            **not_checked(
                f"the model was trained on {short} tokens of context, fewer than the pass-key "
                f"prompt's {reply['error'].get('n_prompt_tokens')}: llama-server caps its "
                "context there (a model with a longer context checks it: --model smollm2)"
            ),
        }
    if resp.status_code != 200 or not isinstance(reply, dict):
        out.update(result=FAILED, detail=f"/completion answered HTTP {resp.status_code} on the {on}")
        return out
    content, evaluated = str(reply.get("content") or ""), reply.get("tokens_evaluated")
    out.update(got=content[:200], prompt_tokens=evaluated)
    if not isinstance(evaluated, int) or evaluated < pk.min_tokens:
        out.update(
            result=FAILED,
            detail=f"the prompt was {evaluated} tokens, fewer than {pk.min_tokens}: not a long "
            "prompt (the text or the tokenizer changed)",
        )
    elif re.match(rf"\s*{pk.key}\b", content):
        out.update(
            result=PASSED,
            detail=f"the pass key {pk.key} recalled after {evaluated} prompt tokens on the {on} "
            "(llama-server, /completion)",
        )
    else:
        out.update(
            result=FAILED,
            detail=f"asked for the pass key {pk.key} after {evaluated} prompt tokens, "
            f"llama-server on the {on} answered {content[:60]!r}",
        )
    return out
