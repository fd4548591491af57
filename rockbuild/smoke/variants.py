"""Every CPU variant this machine can run, proved one at a time: the smoke test's ``cpu_variants`` step.

A GGML_CPU_ALL_VARIANTS bundle ships its CPU backend as one module per x86-64 generation
(``libggml-cpu-<variant>.so``, ``ggml-cpu-<variant>.dll``) and ggml loads the one scoring highest on the CPU at
hand. A variant compiled wrong (the AMX sapphirerapids one built by GCC 12 dies of SIGILL on every AMX machine) shows
only on a CPU that picks it, so the rest of the smoke, which runs whatever ggml picks here, cannot see it. This step
links the bundle into a temporary folder holding that one variant module and no other (:func:`one_variant_folder`)
and, from there:

* asks ggml whether this machine runs it (``llama-bench --list-devices``: ggml's own scorer decides; no CPU backend
  loaded means *not runnable here*, skipped, never failed);
* runs a real batch on it (``llama-bench -p 512 -n N -r 1 -dev none -ngl 0``: the CPU variant does every matrix
  product; pp512 is where the sapphirerapids variant died while ``-p 8`` ran);
* with a model that has known answers (smoke.yaml's ``numerics.known_answers``), checks them with that variant only;
* with ``run.cpu_variants.reference`` and a reference of that variant in baselines.yaml, compares a short run of the
  long-context text (one chunk of 512 tokens) with the variant's own top-k from the last good build: one variant
  module gives one answer on any machine, so a tight limit catches a few-percent fault in a variant this machine
  does not pick (docs/numerics.md, "Every CPU variant against its own reference").

A crash, a variant other than the one meant being loaded, or a wrong answer fails the smoke with one line naming the
variant. The variant the whole bundle's default dispatch picks is recorded too. The step makes smoke.json's record
itself (:class:`~rockbuild.core.records.SmokeCpuVariants`, one :class:`~rockbuild.core.records.SmokeCpuVariant` per
variant).
"""

from __future__ import annotations

import math
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rockbuild.core.errors import ConfigError
from rockbuild.core.options import CPU_VARIANT_CHECKS
from rockbuild.core.records import NOT_RUNNABLE, SmokeCpuVariant, SmokeCpuVariants, VariantReferenceCheck
from rockbuild.core.vocabulary import ModelFile
from rockbuild.smoke.baselines import Baselines
from rockbuild.smoke.numerics import FAILED, NOT_CHECKED, PASSED, NumericsConfig, Target, run_known_answers
from rockbuild.smoke.parse import (
    BackendLoads,
    died_of_sigill,
    parse_backend_loads,
    parse_bench_json,
)
from rockbuild.smoke.probe import run_program
from rockbuild.smoke.variant_folder import one_variant_folder, shipped_variants, work_folder

# what the step checks (smoke.yaml's run.cpu_variants.check, rockbuild smoke --cpu-variants)
ALL, PICKED, NONE = CPU_VARIANT_CHECKS
# the real batch: the sapphirerapids variant died of SIGILL on pp512 on the lent H200 host while -p 8 ran
BATCH = 512
LIST_TIMEOUT = 120.0
_EXIT_CODE = re.compile(r"exit code (-?\d+)\)?$")  # the end of run_program's failure: killed by X (exit code -4)
# "llama-bench: benchmark 1/2: prompt run 1/1" (--progress, on stderr): the last one before a crash says where it died
_PROGRESS_LINE = re.compile(r"llama-bench: benchmark \d+/\d+: [^\n]*\n?")
_PROGRESS = re.compile(r"llama-bench: benchmark \d+/\d+: (?:warmup )?(?P<what>prompt|generation|depth) run")


@dataclass(frozen=True)
class VariantRuns:
    """How each variant is run (from smoke.yaml's run.cpu_variants and --cpu-variants): which variants, llama-bench's
    tg length and threads, its timeout, and the known answers (None: the model has none, or numerics are off)."""

    check: str = ALL  # all | picked | none
    n_gen: int = 8
    threads: int = 1
    timeout: float = 600.0
    answers: NumericsConfig | None = None
    reference: VariantReference | None = None


@dataclass(frozen=True)
class VariantReference:
    """Each variant's short run against its own reference: the text (the long-context one), its shape, and where
    the references are (baselines.yaml), for the model file (by sha256) and the bundle's OS."""

    text: Path
    ctx: int
    chunks: int
    baselines: Baselines
    model_sha256: str
    os_name: str

    def about(self, model: str, variant: str) -> dict[str, Any]:
        """What a top-k of this run says it is (``rockbuild baseline`` files it by these)."""
        return {
            "model": model,
            "model_sha256": self.model_sha256,
            "text": self.text.name,
            "ctx": self.ctx,
            "chunks": self.chunks,
            "cpu_variant": variant,
            "variant": variant,
            "os": self.os_name,
        }


@dataclass(frozen=True)
class CpuVariant:
    """One CPU variant module a bundle ships: ggml's name for it and its file."""

    name: str  # sapphirerapids
    file: str  # libggml-cpu-sapphirerapids.so, ggml-cpu-sapphirerapids.dll


# ---------------------------------------------------------------------------------------------------------------------
# A folder with one CPU variant


# ---------------------------------------------------------------------------------------------------------------------
# The runs


def _program(folder: Path, name: str, platform: str) -> Path:
    return folder / (f"{name}.exe" if platform == "windows" else name)


def _last_error(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in reversed(lines) if "error" in line.lower()), "")


def _how_it_ended(program: str, returncode: int | None, failure: str, output: str) -> str:
    """``llama-bench died of SIGILL (illegal instruction)``, ``llama-bench failed (exit code 1): <its error line>``,
    ``llama-bench timed out after 600s``."""
    if died_of_sigill(returncode):
        return f"{program} died of SIGILL (illegal instruction)"
    if "timed out" in failure:
        return f"{program} {failure}"
    if failure.startswith("killed by"):
        return f"{program} was {failure}"
    error = _last_error(output)
    return f"{program} failed ({failure})" + (f": {error}" if error else "")


def _wrong_variant(program: str, loads: BackendLoads, variant_file: str) -> str | None:
    if loads.cpu_file == variant_file:
        return None
    return f"{program} loaded {loads.cpu_file or 'no CPU backend'}, not {variant_file}"


def list_cpu_backend(
    exe: Path, *, cwd: Path, env: Mapping[str, str], log: Path, timeout: float = LIST_TIMEOUT
) -> tuple[BackendLoads, int | None, str | None, str]:
    """What ``exe --list-devices`` loads when started in ``cwd``: ggml scores every CPU variant module it finds and
    loads the best (none: this CPU runs none of them). (loads, return code, failure, output)."""
    output, rc, failure, _ = run_program(
        "devices", [str(exe), "--list-devices"], cwd=cwd, env=env, timeout=timeout, log=log
    )
    return parse_backend_loads(output or ""), rc, failure, output or ""


def without_progress(output: str) -> str:
    """llama-bench's output less its ``--progress`` lines: they go to stderr while the JSON printer writes each test's
    object to stdout as the test ends (its closing brace without a newline), so in one pipe the next test's progress
    line lands inside the JSON array, even in the middle of a line (``  }llama-bench: benchmark 2/2: starting``)."""
    return _PROGRESS_LINE.sub("", output)


def _where_it_died(output: str, n_gen: int) -> str:
    """The test llama-bench was running when it ended: its last ``--progress`` line, else pp512 (run first)."""
    steps = _PROGRESS.findall(output)
    if steps and steps[-1] == "generation":
        return f"tg{n_gen}"
    if not steps and any(r.n_prompt == BATCH for r in parse_bench_json(without_progress(output))):
        return f"tg{n_gen}"
    return f"pp{BATCH}"


def run_variant(
    bundle: Path,
    variant: CpuVariant,
    *,
    model: ModelFile,
    runs: VariantRuns,
    platform: str,
    env: Mapping[str, str],
    work: Path,
    logs: Path,
) -> SmokeCpuVariant:
    """One variant alone in a folder linked from ``bundle`` under ``work`` (removed afterwards): runnable here? then
    the real batch and the known answers."""
    start = time.monotonic()
    logs.mkdir(parents=True, exist_ok=True)
    folder = one_variant_folder(bundle, variant.file, work / variant.name)
    try:
        return _run_variant(folder, variant, model=model, runs=runs, platform=platform, env=env, logs=logs, start=start)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_variant(
    folder: Path,
    variant: CpuVariant,
    *,
    model: ModelFile,
    runs: VariantRuns,
    platform: str,
    env: Mapping[str, str],
    logs: Path,
    start: float,
) -> SmokeCpuVariant:
    def ended(**values: Any) -> SmokeCpuVariant:
        return SmokeCpuVariant(variant=variant.name, seconds=round(time.monotonic() - start, 3), **values)

    exe = _program(folder, "llama-bench", platform)
    loads, rc, failure, output = list_cpu_backend(exe, cwd=folder, env=env, log=logs / "list-devices.log")
    if failure is not None:
        return ended(
            runnable=False, result=FAILED, failure=_how_it_ended(exe.name, rc, failure, output) + " on --list-devices"
        )
    if loads.cpu_variant is None:  # ggml's scorer: this CPU lacks an instruction set the variant needs
        return ended(runnable=False, result=NOT_RUNNABLE)
    if wrong := _wrong_variant(exe.name, loads, variant.file):
        return ended(runnable=False, result=FAILED, failure=wrong)

    log = logs / "llama-bench.log"
    args = [
        str(exe),
        "-m",
        str(model.path),
        "-p",
        str(BATCH),
        "-n",
        str(runs.n_gen),
        "-r",
        "1",
        "-t",
        str(runs.threads),
        "-dev",
        "none",
        "-ngl",
        "0",
        "--no-warmup",
        "--progress",
        "-o",
        "json",
    ]
    printed, rc, failure, _ = run_program("bench", args, cwd=folder, env=env, timeout=runs.timeout, log=log)
    text = printed or ""
    results = parse_bench_json(without_progress(text))
    pp = next((r.tokens_per_second for r in results if r.n_prompt == BATCH and not r.n_gen), None)
    tg = next((r.tokens_per_second for r in results if r.n_gen == runs.n_gen and not r.n_prompt), None)
    figures = {"pp512_tps": pp, "tg_tps": tg}
    if failure is not None:
        where = _where_it_died(text, runs.n_gen)
        return ended(
            runnable=True, result=FAILED, failure=f"{_how_it_ended(exe.name, rc, failure, text)} on {where}", **figures
        )
    if wrong := _wrong_variant(exe.name, parse_backend_loads(text), variant.file):
        return ended(runnable=True, result=FAILED, failure=wrong, **figures)
    if pp is None or tg is None or pp <= 0 or tg <= 0:
        return ended(
            runnable=True,
            result=FAILED,
            failure=f"{exe.name} printed no pp{BATCH} and tg{runs.n_gen} figures above 0 t/s",
            **figures,
        )

    config = runs.answers
    answered: dict[str, Any] = {}
    if config is not None and config.answers_for(model.name):
        target = Target.of_bundle(folder, platform=platform, model=model, backend="cpu", gpu=None)
        answers = run_known_answers(config, target, cwd=folder, env=env, logs=logs)
        problem = _answers_problem(answers, variant.file)
        if problem is not None:
            return ended(runnable=True, result=FAILED, known_answers=FAILED, failure=problem, **figures)
        answered = {"known_answers": PASSED}
    if runs.reference is None:
        return ended(runnable=True, result=PASSED, **answered, **figures)
    check = against_reference(folder, variant.name, model=model, runs=runs, platform=platform, env=env, logs=logs)
    failure = None if check.result != FAILED else f"its numbers differ from its own reference: {check.detail}"
    return ended(
        runnable=True, result=FAILED if failure else PASSED, failure=failure, reference=check, **answered, **figures
    )


def against_reference(
    folder: Path,
    variant: str,
    *,
    model: ModelFile,
    runs: VariantRuns,
    platform: str,
    env: Mapping[str, str],
    logs: Path,
) -> VariantReferenceCheck:
    """The variant alone (``folder``) on ``chunks`` x ``ctx`` tokens of the text, its top-k kept in ``logs``, judged
    against the variant's own reference in baselines.yaml (none: not checked, and the top-k is there to record)."""
    from rockbuild.smoke.logprobs import DEFAULT_K, compare, read_base, read_topk, top_k, write_topk
    from rockbuild.smoke.numerics import parse_final_ppl

    ref = runs.reference
    assert ref is not None
    about = ref.about(model.name, variant)
    if not ref.text.is_file():
        return VariantReferenceCheck(result=NOT_CHECKED, detail=f"no text {ref.text}", about=about)
    exe = _program(folder, "llama-perplexity", platform)
    if not exe.is_file():
        return VariantReferenceCheck(result=NOT_CHECKED, detail=f"the bundle has no {exe.name}", about=about)
    base = logs / "reference.kld"  # the whole vocabulary per position (25 MB a chunk of SmolLM2): folded, deleted
    shape = ["-c", str(ref.ctx), "-b", str(ref.ctx), "-ub", str(ref.ctx), "--chunks", str(ref.chunks)]
    args = [str(exe), "-m", str(model.path), "-f", str(ref.text), *shape, "-t", str(runs.threads)]
    args += ["-ngl", "0", "-dev", "none", "--kl-divergence-base", str(base)]
    log = logs / "reference.log"
    took: float | None = None
    try:
        output, rc, failure, seconds = run_program(
            "perplexity", args, cwd=folder, env=env, timeout=runs.timeout, log=log
        )
        took = round(seconds, 3)
        ppl = parse_final_ppl(output or "")
        if failure is None and (ppl is None or not math.isfinite(ppl)):
            failure = "printed no finite perplexity"
        if failure is not None:
            return VariantReferenceCheck(
                result=FAILED,
                detail=_how_it_ended(exe.name, rc, failure, output or "") + " on its short run",
                about=about,
                seconds=took,
            )
        night = read_base(base)
        topk = write_topk(top_k(night, DEFAULT_K, about), logs / "reference.topk")
        entry = ref.baselines.reference(model.name, ref.text.name, ref.ctx, ref.model_sha256, ref.os_name, variant)
        if entry is None:
            return VariantReferenceCheck(
                result=NOT_CHECKED,
                detail=f"no reference of CPU variant {variant} for {model.name} on {ref.text.name}, {ref.ctx} "
                f"tokens, {ref.os_name} (record one: rockbuild baseline <smoke.json>)",
                topk=str(topk),
                about=about,
                seconds=took,
            )
        got = compare(night, read_topk(entry.file), window=ref.ctx)
    except ConfigError as exc:  # LogProbsError: a damaged file, other tokens, another shape
        return VariantReferenceCheck(result=FAILED, detail=str(exc), about=about, seconds=took)
    finally:
        base.unlink(missing_ok=True)
    problems = entry.problems(got)
    whose = f"(reference: {entry.measured or entry.file.name})"
    return VariantReferenceCheck(
        result=FAILED if problems else PASSED,
        detail=f"{', '.join(problems)} over {got.positions} positions {whose}"
        if problems
        else f"{entry.figures(got)} {whose}",
        mean_kld=got.mean_kld,
        same_top=got.same_top,
        positions=got.positions,
        topk=str(topk),
        about=about,
        seconds=took,
    )


def _answers_problem(answers: Mapping[str, Any], variant_file: str) -> str | None:
    """Why the known answers with this variant only are wrong: a crash, another variant loaded, a wrong answer."""
    if answers.get("result") == FAILED and not answers.get("answers"):
        return str(answers.get("detail"))
    for item in answers.get("answers") or ():
        log = Path(item["log"])
        text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
        program = "llama-completion"
        if item.get("failure"):
            code = _EXIT_CODE.search(item["failure"])
            rc = int(code[1]) if code else None
            return f"{_how_it_ended(program, rc, item['failure'], text)} on known answer {item['prompt']!r}"
        # llama-completion (b11312) loads the backends before its log is set up and prints no load_backend line: a
        # line naming another module is wrong; none at all is this folder's one module, which llama-bench loaded
        loads = parse_backend_loads(text)
        if loads.cpu_file is not None and (wrong := _wrong_variant(program, loads, variant_file)):
            return wrong
        if not item.get("ok"):
            return f"known answer {item['prompt']!r} wrong: answered {item['got']!r}, expected {item['expect']!r}"
    return None


def run_cpu_variants(
    bundle: Path,
    *,
    model: ModelFile,
    runs: VariantRuns,
    platform: str,
    env: Mapping[str, str],
    logs: Path,
    progress: Callable[[str], None] | None = None,
) -> SmokeCpuVariants:
    """The step (see the module docstring) on ``bundle`` with ``model``; logs under ``logs`` (one folder per variant).
    ``progress(line)``, when given, is told each variant's verdict as it comes."""
    start = time.monotonic()
    if runs.check == NONE:
        return SmokeCpuVariants.skipped(
            "turned off (--cpu-variants none, or smoke.yaml's run.cpu_variants.check: none)"
        )
    shipped = shipped_variants(bundle)
    if not shipped:
        return SmokeCpuVariants.skipped(
            "the bundle ships no CPU variant modules (libggml-cpu-<variant>.so): its CPU "
            "backend is linked in or built for one CPU"
        )
    exe = _program(bundle, "llama-bench", platform)
    if not exe.is_file():
        return SmokeCpuVariants.skipped(f"the bundle has no {exe.name} to run its {len(shipped)} CPU variants with")
    logs.mkdir(parents=True, exist_ok=True)
    loads, rc, failure, output = list_cpu_backend(exe, cwd=bundle, env=env, log=logs / "bundle-list-devices.log")
    picked = loads.cpu_variant if failure is None else None
    if failure is not None:
        problem = f"the whole bundle's {_how_it_ended(exe.name, rc, failure, output)} on --list-devices"
    elif picked is None:
        problem = (
            f"the whole bundle loads no CPU variant here ({exe.name} --list-devices): ggml scored none of its "
            f"{len(shipped)} CPU variant modules on this CPU"
        )
    else:
        problem = None
    wanted = sorted(shipped) if runs.check == ALL else [v for v in shipped if v == picked]
    work = work_folder(bundle, logs)
    results: list[SmokeCpuVariant] = []
    try:
        for variant in wanted:
            result = run_variant(
                bundle,
                CpuVariant(variant, shipped[variant]),
                model=model,
                runs=runs,
                platform=platform,
                env=env,
                work=work,
                logs=logs / variant,
            )
            results.append(result)
            if progress is not None:
                progress(f"CPU variant {variant}: {result.describe(f'tg{runs.n_gen}')}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if problem is None and results and not any(r.runnable for r in results):
        problem = f"this CPU runs none of the {len(results)} CPU variants checked"
    failed = problem is not None or any(r.result == FAILED for r in results)
    return SmokeCpuVariants(
        result=FAILED if failed else PASSED,
        detail=_summary(results, picked, runs.check, len(shipped)),
        picked=picked,
        variants=tuple(results),
        problem=problem,
        seconds=round(time.monotonic() - start, 3),
        logs=logs,
        tg_test=f"tg{runs.n_gen}",
    )


def _summary(results: Sequence[SmokeCpuVariant], picked: str | None, check: str, shipped: int) -> str:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.result] = counts.get(r.result, 0) + 1
    said = ", ".join(f"{n} {what}" for what in (PASSED, FAILED, NOT_RUNNABLE) if (n := counts.get(what)))
    of = f"{len(results)} of {shipped} CPU variants" if check == PICKED else f"{shipped} CPU variants"
    dispatch = f"ggml picks {picked} from the whole bundle" if picked else "ggml picks none from the whole bundle"
    only = " (--cpu-variants picked: the others not checked)" if check == PICKED else ""
    return f"{of}: {said or 'none checked'}; {dispatch}{only}"
