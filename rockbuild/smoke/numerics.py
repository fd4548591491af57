"""Right answers, not just tokens: the smoke test's numerics step (``smoke.yaml``'s ``numerics`` section).

Three checks, each ``passed``, ``failed`` or ``not checked`` (with why), never a pass by default:

* **cross-backend**: the bundle's own ``llama-perplexity`` on a fixed English text (``config/numerics.txt``), once
  on the CPU backend (``-dev none``: no op offload either) saving its log-probabilities (``--kl-divergence-base``),
  then on the GPU device of the smoke (``--kl-divergence``), on the same tokens. The KL divergence of the GPU's
  distributions from the CPU's and the share of positions where both pick the same top token are judged by the first
  threshold of ``numerics.thresholds`` whose backend, model and device match, each set from a measured noise floor
  that the entry names. A wrong GPU kernel, a miscompiling ROCm nightly or a broken code object fails here. No GPU
  device (a ROCm bundle on a CI runner): not checked.
* **known answers**: greedy completions (``llama-completion --temp 0``) of a few prompts on a real model, on the CPU
  and on the GPU when there is one; each must match its expected answer. A llama.cpp commit that breaks the model on
  every backend, which the cross-backend check cannot see, fails here. A model with no known answers (the tiny
  random one, a user's file): not checked.
* **the CPU's figure**: the CPU run's perplexity on the text, recorded for the release (``manifest.json``) so that
  ``rockbuild perf`` follows it from night to night (it reports, it does not gate: see docs/numerics.md).

* **past one ubatch** (``numerics.long_context``, :mod:`rockbuild.smoke.longctx`): one 4,096-token sequence with
  llama-server's batches on the CPU against the last good build's reference, on the GPU against the CPU and against
  the same device's own last good run, and a pass key through llama-server's HTTP API (``long_reference``,
  ``long_cross_backend``, ``long_device``, ``long_answer``).

NaN or inf anywhere in a figure fails: a NaN never compares above a threshold.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Final

from rockbuild.core.data import check_keys, data_path, expect_type, flag, mapping, number, text, where, whole
from rockbuild.core.errors import ConfigError
from rockbuild.core.record import Record
from rockbuild.core.vocabulary import GpuDevice, ModelFile
from rockbuild.smoke.baselines import Baselines, baselines_path, judge_ppl, load_baselines
from rockbuild.smoke.longctx import (
    LongContextConfig,
    ServerCommand,
    parse_long_context,
    passkey_check,
    read_text,
    reference_check,
)
from rockbuild.smoke.probe import run_program
from rockbuild.smoke.variant_folder import one_variant_folder, shipped_variants, work_folder

PASSED: Final = "passed"
FAILED: Final = "failed"
NOT_CHECKED: Final = "not checked"
LONG_CHECKS = ("long_reference", "long_cross_backend", "long_device", "long_answer")  # rockbuild.smoke.longctx
_NUMBER = r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|-?inf))"


# ---------------------------------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class Threshold(Record):
    """The limits of the GPU-vs-CPU comparison for one backend and model (and device, a glob on its description)."""

    backend: str  # rocm | vulkan | *
    model: str  # the model file's name (glob), * for any
    max_mean_kld: float
    min_same_top: float  # percent
    device: str = "*"  # glob on the device's description ("*llvmpipe*"), * for any
    floor: str = ""  # the noise floor it was set from, and where that was measured

    def matches(self, backend: str, model: str, device: str) -> bool:
        return (
            fnmatchcase(backend, self.backend)
            and fnmatchcase(model, self.model)
            and fnmatchcase(device.lower(), self.device.lower())
        )


@dataclass(frozen=True)
class KnownAnswer(Record):
    prompt: str
    expect: str  # a regular expression the completion (without the prompt) must match at its start


@dataclass(frozen=True)
class NumericsConfig:
    text: Path
    ctx: int = 256
    chunks: int = 8
    threads: int = 2
    timeout: float = 900.0
    n_predict: int = 8
    thresholds: tuple[Threshold, ...] = ()
    answers: Mapping[str, tuple[KnownAnswer, ...]] = field(default_factory=dict)  # model file name -> its answers
    enabled: bool = True
    baselines: Baselines = field(default_factory=Baselines)  # the CPU's perplexity per model (baselines.yaml)
    long: LongContextConfig | None = None  # the checks past one ubatch (rockbuild.smoke.longctx); None: not configured

    def threshold(self, backend: str, model: str, device: str) -> Threshold | None:
        return next((t for t in self.thresholds if t.matches(backend, model, device)), None)

    def answers_for(self, model: str) -> tuple[KnownAnswer, ...]:
        return next((a for pattern, a in self.answers.items() if fnmatchcase(model, pattern)), ())

    @property
    def run_threads(self) -> int:
        return max(1, min(self.threads, os.cpu_count() or 1))


_KEYS = (
    "enabled",
    "text",
    "ctx",
    "chunks",
    "threads",
    "timeout",
    "n_predict",
    "thresholds",
    "known_answers",
    "baselines",
    "long_context",
)
_THRESHOLD_KEYS = ("backend", "model", "device", "floor", "max_mean_kld", "min_same_top")


def parse_numerics_config(section: Any, *, path: Path | None = None, data_dir: Path | None = None) -> NumericsConfig:
    """``smoke.yaml``'s ``numerics`` section; a mistake is a ConfigError naming ``file:line`` and the key. ``path``:
    the smoke.yaml it came from, for the messages (default: the shipped one); the text and baselines are looked up
    beside the shipped data files (``data_dir`` overrides) unless absolute."""
    folder = data_dir or data_path("config", "smoke.yaml").parent
    where_file = path or folder / "smoke.yaml"
    what = "numerics"
    if section is None:
        return NumericsConfig(text=Path(), enabled=False)
    if not isinstance(section, Mapping):
        raise ConfigError(
            f"{where(where_file, section)}: numerics must be a mapping (see the shipped "
            f"config/smoke.yaml), not {section!r}"
        )
    check_keys(where_file, section, _KEYS, what)
    text_name = Path(text(where_file, section, "text", "numerics.txt", what) or "numerics.txt")
    thresholds = []
    items = section.get("thresholds") or []
    expect_type(where_file, section, "thresholds", items, list, "numerics.thresholds")
    for i, item in enumerate(items):
        at = f"numerics.thresholds[{i}]"
        expect_type(where_file, items, i, item, Mapping, at)
        check_keys(where_file, item, _THRESHOLD_KEYS, at)
        if "max_mean_kld" not in item or "min_same_top" not in item:
            raise ConfigError(f"{where(where_file, items, i)}: {at} needs max_mean_kld and min_same_top")
        thresholds.append(
            Threshold(
                backend=text(where_file, item, "backend", "*", at),
                model=text(where_file, item, "model", "*", at),
                device=text(where_file, item, "device", "*", at),
                floor=text(where_file, item, "floor", "", at),
                max_mean_kld=number(where_file, item, "max_mean_kld", 0, at),
                min_same_top=number(where_file, item, "min_same_top", 0, at),
            )
        )
    answers: dict[str, tuple[KnownAnswer, ...]] = {}
    known = mapping(where_file, section, "known_answers", what)
    for model, entries in known.items():
        at = f"numerics.known_answers[{model!r}]"
        if not isinstance(entries, list):
            raise ConfigError(
                f"{where(where_file, known, model)}: {at} must be a list of {{prompt, expect}}, not {entries!r}"
            )
        parsed = []
        for i, item in enumerate(entries):
            if (
                not isinstance(item, Mapping)
                or not isinstance(item.get("prompt"), str)
                or not item.get("prompt")
                or not isinstance(item.get("expect"), str)
                or not item.get("expect")
            ):
                raise ConfigError(
                    f"{where(where_file, entries, i)}: {at}: every entry needs a prompt and an expect (texts)"
                )
            try:
                re.compile(item["expect"])
            except re.error as exc:
                raise ConfigError(
                    f"{where(where_file, item, 'expect')}: {at}: expect {item['expect']!r} is not a "
                    f"regular expression ({exc})"
                ) from None
            parsed.append(KnownAnswer(item["prompt"], item["expect"]))
        answers[str(model)] = tuple(parsed)
    long_context = section.get("long_context")
    if long_context is not None:
        expect_type(where_file, section, "long_context", long_context, Mapping, "numerics.long_context")
    baselines = section.get("baselines")
    if baselines is not None and not isinstance(baselines, str):
        raise ConfigError(
            f"{where(where_file, section, 'baselines')}: numerics.baselines must name a file, not {baselines!r}"
        )
    baselines_file = baselines_path(baselines, folder)
    if baselines_file is not None and not baselines_file.is_file():
        raise ConfigError(
            f"{where(where_file, section, 'baselines')}: numerics.baselines: {baselines_file} is not a file"
        )
    return NumericsConfig(
        text=text_name if text_name.is_absolute() else folder / text_name,
        ctx=whole(where_file, section, "ctx", 256, what, least=16),
        chunks=whole(where_file, section, "chunks", 8, what, least=1),
        threads=whole(where_file, section, "threads", 2, what, least=1),
        timeout=number(where_file, section, "timeout", 900, what, positive=True),
        n_predict=whole(where_file, section, "n_predict", 8, what, least=1),
        thresholds=tuple(thresholds),
        answers=answers,
        enabled=flag(where_file, section, "enabled", True, what),
        baselines=load_baselines(baselines_file),
        long=parse_long_context(long_context, where_file, folder),
    )


# ---------------------------------------------------------------------------------------------------------------------
# llama-perplexity's output


@dataclass(frozen=True)
class Divergence(Record):
    """What ``llama-perplexity --kl-divergence`` prints at its end (tools/perplexity/perplexity.cpp)."""

    mean_kld: float
    max_kld: float | None
    p99_kld: float | None
    same_top: float  # percent
    ppl: float | None  # PPL(Q): the GPU run's perplexity
    ppl_base: float | None  # PPL(base): the CPU run's, from the base file


def _find(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m[1]) if m else None


def parse_final_ppl(text: str) -> float | None:
    """The CPU base run's ``Final estimate: PPL = 11.2345 +/- 0.1``."""
    return _find(rf"Final estimate: PPL = {_NUMBER}", text)


def parse_divergence(text: str) -> Divergence | None:
    """The KL divergence statistics of a ``--kl-divergence`` run, None when the block is missing."""
    mean = _find(rf"Mean\s+KLD:\s*{_NUMBER}", text)
    same = _find(rf"Same top p:\s*{_NUMBER}", text)
    if mean is None or same is None:
        return None
    return Divergence(
        mean_kld=mean,
        max_kld=_find(rf"Maximum KLD:\s*{_NUMBER}", text),
        p99_kld=_find(rf"99\.0%\s+KLD:\s*{_NUMBER}", text),
        same_top=same,
        ppl=_find(rf"Mean PPL\(Q\)\s*:\s*{_NUMBER}", text),
        ppl_base=_find(rf"Mean PPL\(base\)\s*:\s*{_NUMBER}", text),
    )


def judge_divergence(div: Divergence, limit: Threshold) -> str | None:
    """Why the GPU's numbers are wrong, or None."""
    figures = [div.mean_kld, div.same_top] + [v for v in (div.max_kld, div.ppl) if v is not None]
    if not all(math.isfinite(v) for v in figures):
        return f"NaN or inf in the GPU's numbers (mean KLD {div.mean_kld}, same top token {div.same_top} %)"
    problems = []
    if div.mean_kld > limit.max_mean_kld:
        problems.append(f"mean KLD {div.mean_kld:.5f} > {limit.max_mean_kld:g}")
    if div.same_top < limit.min_same_top:
        problems.append(f"same top token {div.same_top:.1f} % < {limit.min_same_top:g} %")
    if not problems:
        return None
    return (
        "wrong numbers against the CPU: "
        + ", ".join(problems)
        + (f" (noise floor: {limit.floor})" if limit.floor else "")
    )


# ---------------------------------------------------------------------------------------------------------------------
# The runs


@dataclass(frozen=True)
class Target:
    """Where the numerics run: the bundle's programs, the model, the GPU device (None: no GPU run)."""

    perplexity: Path | None  # None: the bundle has no llama-perplexity
    completion: Path | None
    model: Path
    model_name: str
    backend: str  # the bundle's: rocm | vulkan
    gpu_device: str | None  # "-dev" of the GPU run (Vulkan0), "" for the default GPU (ROCm); None: no GPU here
    device_description: str = ""
    gpu_layers: int = 99
    seed: int = 42
    server: Path | None = None  # llama-server: the long known answer goes through its HTTP API
    model_sha256: str = ""  # the long-context reference belongs to one model file
    platform: str = "linux"  # the bundle's OS: the long-context reference is one per OS

    @classmethod
    def of_bundle(
        cls,
        bundle: Path,
        *,
        platform: str,
        model: ModelFile,
        backend: str,
        gpu: GpuDevice | None,
        gpu_layers: int = 99,
        seed: int = 42,
    ) -> Target:
        """The bundle's own llama-perplexity and llama-completion (None where it lacks one) on ``model``, the GPU
        run on ``gpu`` (None: none)."""
        suffix = ".exe" if platform == "windows" else ""
        perplexity, completion = bundle / f"llama-perplexity{suffix}", bundle / f"llama-completion{suffix}"
        server = bundle / f"llama-server{suffix}"
        return cls(
            perplexity=perplexity if perplexity.is_file() else None,
            server=server if server.is_file() else None,
            completion=completion if completion.is_file() else None,
            model=model.path,
            model_name=model.name,
            backend=backend,
            gpu_device=gpu.name if gpu else None,
            device_description=gpu.description if gpu else "",
            gpu_layers=gpu_layers,
            seed=seed,
            model_sha256=model.sha256,
            platform=platform,
        )


@dataclass(frozen=True)
class Numerics:
    """The step's result: ``checks`` holds cross_backend, known_answers and cpu, each with its ``result``."""

    checks: Mapping[str, Mapping[str, Any]]
    seconds: float
    logs: Path

    @property
    def failures(self) -> tuple[str, ...]:
        return tuple(
            f"{name}: {check['detail']}" for name, check in self.checks.items() if check.get("result") == FAILED
        )

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> dict[str, Any]:
        """The figures a release carries (manifest.json, notes, perf)."""
        cross, answers, cpu = (self.checks.get(k) or {} for k in ("cross_backend", "known_answers", "cpu"))
        figures = cross.get("figures") or {}
        ref, long_cross, long_own, long_answer = (self.checks.get(k) or {} for k in LONG_CHECKS)
        long = {
            "long_ctx": ref.get("ctx") or long_cross.get("ctx"),
            "long_reference": ref.get("result", NOT_CHECKED),
            "long_reference_kld": (ref.get("figures") or {}).get("mean_kld"),
            "long_reference_same_top": (ref.get("figures") or {}).get("same_top"),
            "long_cross_backend": long_cross.get("result", NOT_CHECKED),
            "long_mean_kld": (long_cross.get("figures") or {}).get("mean_kld"),
            "long_same_top": (long_cross.get("figures") or {}).get("same_top"),
            "long_device": long_own.get("result", NOT_CHECKED),
            "long_device_kld": (long_own.get("figures") or {}).get("mean_kld"),
            "long_device_same_top": (long_own.get("figures") or {}).get("same_top"),
            "long_answer": long_answer.get("result", NOT_CHECKED),
            "long_answer_tokens": long_answer.get("prompt_tokens"),
        }
        return {
            **long,
            "cross_backend": cross.get("result", NOT_CHECKED),
            "mean_kld": figures.get("mean_kld"),
            "max_kld": figures.get("max_kld"),
            "same_top": figures.get("same_top"),
            "known_answers": answers.get("result", NOT_CHECKED),
            "answers_passed": answers.get("passed"),
            "answers_total": answers.get("total"),
            "cpu_ppl": cpu.get("ppl"),
            "model": answers.get("model") or cpu.get("model"),
            "cpu_baseline": (cpu.get("baseline") or {}).get("result", NOT_CHECKED),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "failures": list(self.failures),
            "seconds": round(self.seconds, 3),
            "logs": str(self.logs),
            **{k: dict(v) for k, v in self.checks.items()},
            "summary": self.summary(),
        }

    @classmethod
    def skipped(cls, why: str, logs: Path) -> Numerics:
        """The step's record when it did not run (a preflight failure, numerics disabled)."""
        return cls(
            {
                "cross_backend": not_checked(why),
                "known_answers": not_checked(why),
                **{name: not_checked(why) for name in LONG_CHECKS},
            },
            0.0,
            logs,
        )


def not_checked(detail: str) -> dict[str, Any]:
    return {"result": NOT_CHECKED, "detail": detail}


def _ppl_args(config: NumericsConfig, target: Target) -> list[str]:
    return [
        str(target.perplexity),
        "-m",
        str(target.model),
        "-c",
        str(config.ctx),
        "-b",
        str(config.ctx),
        "--chunks",
        str(config.chunks),
        "-t",
        str(config.run_threads),
        "--seed",
        str(target.seed),
    ]


def _cpu_args() -> list[str]:
    return ["-ngl", "0", "-dev", "none"]


def _gpu_args(target: Target) -> list[str]:
    return ["-ngl", str(target.gpu_layers), *(["-dev", target.gpu_device] if target.gpu_device else [])]


def run_cross_backend(
    config: NumericsConfig, target: Target, *, cwd: Path, env: Mapping[str, str], logs: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(cpu, cross_backend): the CPU base run (its perplexity), then the GPU run against it. The CPU's
    log-probabilities (hundreds of MB) are removed whatever happens: the figures are what is kept."""
    base = logs / "cpu.kld"
    try:
        return _cross_backend(config, target, base, cwd=cwd, env=env, logs=logs)
    finally:
        base.unlink(missing_ok=True)


def _cross_backend(
    config: NumericsConfig, target: Target, base: Path, *, cwd: Path, env: Mapping[str, str], logs: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    if target.perplexity is None:
        why = "llama-perplexity is not in the bundle"
        return not_checked(why), not_checked(why)
    if not config.text.is_file():
        why = f"the numerics text {config.text} is missing"
        return {"result": FAILED, "detail": why}, not_checked(why)
    args = [*_ppl_args(config, target), "-f", str(config.text), "--kl-divergence-base", str(base), *_cpu_args()]
    output, rc, failure, seconds = run_program(
        "perplexity", args, cwd=cwd, env=env, timeout=config.timeout, log=logs / "perplexity-cpu.log"
    )
    ppl = parse_final_ppl(output or "")
    cpu: dict[str, Any] = {
        "command": args,
        "seconds": round(seconds, 3),
        "log": str(logs / "perplexity-cpu.log"),
        "model": target.model_name,
        "ppl": ppl,
        "ctx": config.ctx,
        "chunks": config.chunks,
        "text": config.text.name,
    }
    if failure is None and (ppl is None or not math.isfinite(ppl)):
        failure = "no finite 'Final estimate: PPL' in its output" if ppl is None else f"perplexity {ppl}"
    if failure is not None:
        cpu.update(result=FAILED, detail=f"llama-perplexity on the CPU: {failure}")
        return cpu, not_checked("the CPU reference run failed")
    # against the recorded baseline (baselines.yaml): a figure out of the band fails the check; the GPU is still
    # compared with this CPU run, which is what it is
    assert ppl is not None  # a run without a finite perplexity failed above
    judged = judge_ppl(ppl, target.model_name, config.text.name, config.ctx, config.chunks, config.baselines)
    cpu["baseline"] = judged
    if judged["result"] == FAILED:
        cpu.update(result=FAILED, detail=judged["detail"])
    else:
        cpu.update(
            result=PASSED,
            detail=f"perplexity {ppl:.4f} on {config.chunks} x {config.ctx} tokens; baseline: {judged['detail']}",
        )
    if target.gpu_device is None:
        return cpu, not_checked("no GPU device on this machine: the GPU's numbers were not compared")
    limit = config.threshold(target.backend, target.model_name, target.device_description)
    if limit is None:
        return cpu, not_checked(f"no threshold in smoke.yaml for backend {target.backend}, model {target.model_name}")
    args = [*_ppl_args(config, target), "--kl-divergence-base", str(base), "--kl-divergence", *_gpu_args(target)]
    log = logs / "perplexity-gpu.log"
    output, rc, failure, seconds = run_program("perplexity", args, cwd=cwd, env=env, timeout=config.timeout, log=log)
    cross: dict[str, Any] = {
        "command": args,
        "seconds": round(seconds, 3),
        "log": str(log),
        "device": target.gpu_device or "(default GPU)",
        "threshold": limit.to_dict(),
    }
    div = parse_divergence(output or "")
    if failure is None and div is None:
        failure = "no KL divergence statistics in its output"
        if re.search(r"\bnan\b", output or "", re.IGNORECASE):
            failure = "NaN in the GPU's numbers (no KL divergence statistics)"
    if failure is not None:
        cross.update(result=FAILED, detail=f"llama-perplexity on {cross['device']}: {failure}")
        return cpu, cross
    assert div is not None
    cross["figures"] = div.to_dict()
    problem = judge_divergence(div, limit)
    shown = (
        f"mean KLD {div.mean_kld:.5f} (limit {limit.max_mean_kld:g}), same top token {div.same_top:.1f} % "
        f"(limit {limit.min_same_top:g} %)"
    )
    cross.update(result=FAILED if problem else PASSED, detail=problem or shown)
    return cpu, cross


def completion_text(output: str, prompt: str) -> str | None:
    """The text llama-completion generated after ``prompt`` in its merged output (stdout: the prompt, then each
    token; stderr: logs), up to a blank line, ``[end of text]`` or the performance lines; None without the prompt."""
    at = output.rfind(prompt)
    if at < 0:
        return None
    text = output[at + len(prompt) :]
    for end in ("\n\n", "[end of text]", "\nllama_perf", "\ncommon_perf"):
        text = text.split(end, 1)[0]
    return text


def run_known_answers(
    config: NumericsConfig, target: Target, *, cwd: Path, env: Mapping[str, str], logs: Path
) -> dict[str, Any]:
    """Each known prompt, greedy, on the CPU and on the GPU (when there is one): every completion must match."""
    answers = config.answers_for(target.model_name)
    if not answers:
        return not_checked(
            f"no known answers for {target.model_name} in smoke.yaml (a real model has them: "
            "rockbuild smoke --model smollm2)"
        )
    if target.completion is None:
        return {"result": FAILED, "detail": "llama-completion is not in the bundle"}
    places = [("cpu", _cpu_args())]
    if target.gpu_device is not None:
        places.append(("gpu", _gpu_args(target)))
    results: list[dict[str, Any]] = []
    for place, device_args in places:
        for i, answer in enumerate(answers):
            log = logs / f"answer-{place}-{i}.log"
            args = [
                str(target.completion),
                "-m",
                str(target.model),
                "-p",
                answer.prompt,
                "-n",
                str(config.n_predict),
                "--temp",
                "0",
                "--seed",
                str(target.seed),
                "-no-cnv",
                "--no-warmup",
                "-t",
                str(config.run_threads),
                "-c",
                "512",
                *device_args,
            ]
            output, rc, failure, seconds = run_program(
                "completion", args, cwd=cwd, env=env, timeout=config.timeout, log=log
            )
            got = completion_text(output or "", answer.prompt)
            if failure is None and got is None:
                failure = "the prompt is not in its output"
            text = got or ""
            ok = failure is None and re.match(answer.expect, text) is not None
            results.append(
                {
                    "on": place,
                    "prompt": answer.prompt,
                    "expect": answer.expect,
                    "got": text[:200],
                    "ok": ok,
                    "failure": failure,
                    "seconds": round(seconds, 3),
                    "log": str(log),
                }
            )
    wrong = [r for r in results if not r["ok"]]
    out: dict[str, Any] = {
        "model": target.model_name,
        "answers": results,
        "passed": len(results) - len(wrong),
        "total": len(results),
    }
    if wrong:
        first = wrong[0]
        said = first["failure"] or f"answered {first['got']!r}, expected {first['expect']!r}"
        out.update(
            result=FAILED,
            detail=f"{len(wrong)} of {len(results)} known answers wrong: "
            f"{first['prompt']!r} on the {first['on'].upper()} {said}",
        )
    else:
        out.update(
            result=PASSED,
            detail=f"{len(results)} of {len(results)} known answers right "
            f"({', '.join(sorted({r['on'].upper() for r in results}))})",
        )
    return out


def run_numerics(config: NumericsConfig, target: Target, *, cwd: Path, env: Mapping[str, str], logs: Path) -> Numerics:
    """The whole step (see the module docstring); writes its logs under ``logs``."""
    logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    cpu, cross = run_cross_backend(config, target, cwd=cwd, env=env, logs=logs)
    answers = run_known_answers(config, target, cwd=cwd, env=env, logs=logs)
    checks = {"cross_backend": cross, "known_answers": answers, "cpu": cpu}
    if config.long is not None and config.long.enabled:
        checks.update(run_long_context(config, config.long, target, cwd=cwd, env=env, logs=logs))
    return Numerics(checks, time.monotonic() - start, logs)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _one_variant(program: Path, variant: str | None, logs: Path) -> Iterator[tuple[Path, str | None]]:
    """(the program to run, the CPU variant it will load): ``program`` from a folder of the bundle with ``variant``'s
    module alone (rockbuild.smoke.variants), removed afterwards; the bundle's own program and None (ggml's pick)
    when no variant is asked for or the bundle ships none of that name."""
    bundle = program.parent
    shipped = shipped_variants(bundle) if variant else {}
    if not variant or variant not in shipped:
        yield program, None
        return
    work = work_folder(bundle, logs)
    try:
        folder = one_variant_folder(bundle, shipped[variant], work / variant)
        yield folder / program.name, variant
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_long_context(
    config: NumericsConfig, long: LongContextConfig, target: Target, *, cwd: Path, env: Mapping[str, str], logs: Path
) -> dict[str, dict[str, Any]]:
    """The checks past one ubatch (:mod:`rockbuild.smoke.longctx`): the CPU's long run against the last good build's
    reference, the GPU's against the CPU's and against its own last good run, and the pass key through llama-server.
    The full log-probabilities (200 MB per 4,096 tokens) are removed whatever happens; the runs' top-k stay in the
    logs."""
    base = logs / "long-cpu.kld"
    try:
        return _long_context(config, long, target, base, cwd=cwd, env=env, logs=logs)
    finally:
        base.unlink(missing_ok=True)
        (logs / "long-gpu.kld").unlink(missing_ok=True)


def _long_context(
    config: NumericsConfig,
    long: LongContextConfig,
    target: Target,
    base: Path,
    *,
    cwd: Path,
    env: Mapping[str, str],
    logs: Path,
) -> dict[str, dict[str, Any]]:
    text, why = read_text(long)
    if text is None:
        assert why is not None
        return {name: {"result": FAILED, "detail": why} for name in LONG_CHECKS}
    software = target.gpu_device is not None and long.software(target.device_description)
    on = "GPU" if target.gpu_device is not None and not software else "CPU"
    server = ServerCommand(
        target.server,
        target.model,
        on,
        tuple(_gpu_args(target) if on == "GPU" else _cpu_args()),
        threads=config.run_threads,
        port=_free_port(),
        seed=target.seed,
    )
    answer = passkey_check(long, text, server, cwd=cwd, env=env, logs=logs)
    if target.perplexity is None:
        why = "llama-perplexity is not in the bundle"
        return {"long_reference": not_checked(why), "long_answer": answer, **_long_gpu_not_checked(why)}
    shape = ["-c", str(long.ctx), "-b", str(long.batch), "-ub", str(long.ubatch), "--chunks", "1"]
    common = [*shape, "-t", str(config.run_threads), "--seed", str(target.seed)]
    with _one_variant(target.perplexity, long.cpu_variant, logs) as (cpu_program, variant):
        about = {
            "model": target.model_name,
            "model_sha256": target.model_sha256,
            "text": long.text.name,
            "ctx": long.ctx,
            "batch": long.batch,
            "ubatch": long.ubatch,
            "cpu_variant": variant,
            "os": target.platform,
        }
        args = [
            str(cpu_program),
            "-m",
            str(target.model),
            *common,
            "-f",
            str(long.text),
            "--kl-divergence-base",
            str(base),
            *_cpu_args(),
        ]
        # from the one-variant folder: ggml also loads CPU modules from the current folder, which for the bundle
        # would bring every variant back (and its best one wins)
        run, failure = _long_run(args, about, cwd=cpu_program.parent, env=env, long=long, log=logs / "long-cpu.log")
    if failure is not None:
        ref = {**run, "result": FAILED, "detail": f"llama-perplexity on the CPU, {long.ctx} tokens: {failure}"}
        return {"long_reference": ref, "long_answer": answer, **_long_gpu_not_checked("the CPU's long run failed")}
    reference = config.baselines.reference(
        target.model_name, long.text.name, long.ctx, target.model_sha256, target.platform
    )
    ref = {**run, **reference_check(base, reference, logs=logs, about=about)}
    if target.gpu_device is None:
        why = "no GPU device on this machine: the GPU's numbers were not compared"
        return {"long_reference": ref, "long_answer": answer, **_long_gpu_not_checked(why)}
    if software:
        why = (
            f"{target.device_description or target.gpu_device} is a software device: its long runs are not made "
            "(the pass key ran on the CPU); a real GPU's smoke compares them"
        )
        return {"long_reference": ref, "long_answer": answer, **_long_gpu_not_checked(why)}
    own = _long_device(config, long, target, common, about, cwd=cwd, env=env, logs=logs)
    limit = config.threshold(target.backend, target.model_name, target.device_description)
    if limit is None:
        return {
            "long_reference": ref,
            "long_answer": answer,
            "long_device": own,
            "long_cross_backend": not_checked(
                f"no threshold in smoke.yaml for backend {target.backend}, model {target.model_name}"
            ),
        }
    args = [
        str(target.perplexity),
        "-m",
        str(target.model),
        *common,
        "--kl-divergence-base",
        str(base),
        "--kl-divergence",
        *_gpu_args(target),
    ]
    log = logs / "long-gpu.log"
    output, _, failure, seconds = run_program("perplexity", args, cwd=cwd, env=env, timeout=long.timeout, log=log)
    cross: dict[str, Any] = {
        "command": args,
        "seconds": round(seconds, 3),
        "log": str(log),
        "ctx": long.ctx,
        "device": target.gpu_device or "(default GPU)",
        "threshold": limit.to_dict(),
    }
    div = parse_divergence(output or "")
    if failure is None and div is None:
        failure = "no KL divergence statistics in its output"
    if failure is not None or div is None:
        cross.update(result=FAILED, detail=f"llama-perplexity on {cross['device']}, {long.ctx} tokens: {failure}")
    else:
        cross["figures"] = div.to_dict()
        problem = judge_divergence(div, limit)
        cross.update(
            result=FAILED if problem else PASSED,
            detail=(
                f"{long.ctx} tokens (-b {long.batch} -ub {long.ubatch}): {problem}"
                if problem
                else f"{long.ctx} tokens (-b {long.batch} -ub {long.ubatch}): mean KLD {div.mean_kld:.5f} "
                f"(limit {limit.max_mean_kld:g}), same top token {div.same_top:.1f} % "
                f"(limit {limit.min_same_top:g} %)"
            ),
        )
    return {"long_reference": ref, "long_cross_backend": cross, "long_device": own, "long_answer": answer}


def _long_run(
    args: list[str], about: Mapping[str, Any], *, cwd: Path, env: Mapping[str, str], long: LongContextConfig, log: Path
) -> tuple[dict[str, Any], str | None]:
    """One long llama-perplexity run that writes its distributions (``--kl-divergence-base``): its record (the
    command, seconds, log, perplexity and what it was) and why it failed, None when it printed a finite perplexity."""
    output, _, failure, seconds = run_program("perplexity", args, cwd=cwd, env=env, timeout=long.timeout, log=log)
    ppl = parse_final_ppl(output or "")
    if failure is None and (ppl is None or not math.isfinite(ppl)):
        failure = "no finite 'Final estimate: PPL' in its output" if ppl is None else f"perplexity {ppl}"
    run = {"command": args, "seconds": round(seconds, 3), "log": str(log), "ppl": ppl, "about": about, **about}
    return run, failure


def _long_gpu_not_checked(why: str) -> dict[str, dict[str, Any]]:
    return {"long_cross_backend": not_checked(why), "long_device": not_checked(why)}


def _long_device(
    config: NumericsConfig,
    long: LongContextConfig,
    target: Target,
    common: list[str],
    cpu_about: Mapping[str, Any],
    *,
    cwd: Path,
    env: Mapping[str, str],
    logs: Path,
) -> dict[str, Any]:
    """The GPU's long run against this device's own last good run (``baselines.yaml``'s reference with its
    ``device``), per window of ``ubatch`` positions: one GPU, driver and library repeat their numbers far more
    closely than the GPU matches the CPU, so a fault in one region of the positions fails where its figure moved."""
    base = logs / "long-gpu.kld"
    # the device as the bundle lists it, without ggml's name for it (Vulkan0: NVIDIA H200 -> NVIDIA H200)
    device = target.device_description.removeprefix(f"{target.gpu_device}: ") or target.gpu_device or ""
    about = {k: v for k, v in cpu_about.items() if k != "cpu_variant"} | {"device": device}
    args = [str(target.perplexity), "-m", str(target.model), *common, "-f", str(long.text)]
    args += ["--kl-divergence-base", str(base), *_gpu_args(target)]
    run, failure = _long_run(args, about, cwd=cwd, env=env, long=long, log=logs / "long-gpu-own.log")
    if failure is not None:
        return {**run, "result": FAILED, "detail": f"llama-perplexity on {device}, {long.ctx} tokens: {failure}"}
    reference = config.baselines.reference(
        target.model_name, long.text.name, long.ctx, target.model_sha256, target.platform, device=device
    )
    try:
        return {**run, **reference_check(base, reference, logs=logs, about=about, on="GPU")}
    finally:
        base.unlink(missing_ok=True)
