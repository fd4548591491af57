"""``rockbuild compare``: llama-bench on several bundles with identical settings, pp and tg side by side.

On a user's AMD GPU this compares the ROCm and the Vulkan flavour of one release (which one to keep is a measurement,
not a rule); on a machine without a GPU it compares the CPU path with Mesa's lavapipe. Each bundle runs from its own
folder with the smoke test's environment (no ROCm paths, no LD_LIBRARY_PATH), so its own run paths do the work.
The spread shown is llama-bench's own standard deviation over the ``-r`` repetitions.

``--numerics`` adds the smoke's numerics step (:mod:`rockbuild.smoke.numerics`) for each bundle on the same model:
its llama-perplexity on the CPU and on the device llama-bench used (KL divergence, same top token, judged by
smoke.yaml's thresholds), and the model's known answers. Speed is only worth comparing between builds that compute
the same numbers.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rockbuild import __version__, console
from rockbuild.core.environment import environment, host_os
from rockbuild.core.errors import ProcessError, SmokeError, UsageError
from rockbuild.core.record import SECONDS, Record, json_form, json_key, written
from rockbuild.core.records import BenchFigure
from rockbuild.core.vocabulary import GpuDevice
from rockbuild.process import log_tail, run
from rockbuild.smoke.models import ModelFile
from rockbuild.smoke.numerics import Numerics, NumericsConfig, Target, run_numerics
from rockbuild.smoke.parse import parse_bench_json
from rockbuild.smoke.probe import bundle_program, smoke_env
from rockbuild.smoke.runner import locate_bundle

SCHEMA = 1
# Device selection (not library paths): a user comparing flavours may need these, e.g. lavapipe is only used when
# GGML_VK_VISIBLE_DEVICES lists it, and a warm Mesa shader cache keeps the first run from compiling pipelines.


def default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class CompareOptions(Record):
    """The settings every bundle gets, identical by construction (one argument list, only the binary differs); a
    record: ``compare --json``'s ``settings``, the threads as resolved."""

    n_prompt: int = 512
    n_gen: int = 128
    repetitions: int = 5
    threads: int = field(default=0, metadata=json_form(int, int, lambda threads: threads or default_threads()))
    """0: default_threads(), written as the number it is."""
    gpu_layers: int = 99
    flash_attn: int | None = None  # None: llama-bench's default
    timeout: float = 1800.0

    def bench_args(self, model: Path) -> list[str]:
        args = [
            "-m",
            str(model),
            "-p",
            str(self.n_prompt),
            "-n",
            str(self.n_gen),
            "-r",
            str(self.repetitions),
            "-t",
            str(self.threads or default_threads()),
            "-ngl",
            str(self.gpu_layers),
        ]
        if self.flash_attn is not None:
            args += ["-fa", str(self.flash_attn)]
        return args + ["-o", "json"]


@dataclass(frozen=True, kw_only=True)
class BundleBench(Record):
    """One bundle's llama-bench run (a record: ``compare --json``'s ``bundles[]``)."""

    label: str
    bundle: Path
    command: tuple[str, ...]
    seconds: float = field(metadata=SECONDS)
    # derived from the results: llama-bench's backends ("?": none said), its gpu_info (empty: no GPU device was used,
    # a CPU run or a silent fallback), the first line's GPU layers and build
    backends: str = field(init=False, default="?")
    gpu_info: str = field(init=False, default="")
    n_gpu_layers: int | None = field(init=False, default=None)
    build: str | None = field(init=False, default="")
    log: Path
    results: tuple[BenchFigure, ...]
    numerics: Numerics | None = field(  # --numerics: the smoke's numerics step on this bundle
        default=None, metadata=written(lambda numerics: numerics.to_dict() if numerics is not None else None)
    )

    def __post_init__(self) -> None:
        first = self.results[0] if self.results else None
        object.__setattr__(
            self, "backends", ",".join(dict.fromkeys(b.backends for b in self.results if b.backends)) or "?"
        )
        object.__setattr__(self, "gpu_info", next((b.gpu_info for b in self.results if b.gpu_info), None) or "")
        object.__setattr__(self, "n_gpu_layers", first.n_gpu_layers if first is not None else None)
        object.__setattr__(self, "build", first.build if first is not None else "")

    @property
    def device(self) -> str:
        """llama-bench's ``gpu_info``; empty means no GPU device was used (a CPU run or a silent fallback)."""
        return self.gpu_info

    def result(self, test: str) -> BenchFigure | None:
        return next((b for b in self.results if b.test == test), None)

    @property
    def backend(self) -> str:
        """The GPU backend llama-bench reported, as smoke.yaml's thresholds name it (rocm, vulkan), else cpu."""
        names = self.backends.lower()
        return "rocm" if "rocm" in names or "hip" in names else "vulkan" if "vulkan" in names else "cpu"


def _figures(line: BenchFigure | None) -> dict[str, float | None] | None:
    return None if line is None else {"tokens_per_second": line.tokens_per_second, "stddev": line.stddev}


@dataclass(frozen=True, kw_only=True)
class Comparison(Record):
    """``rockbuild compare``'s result (a record: its ``--json``): the model, the settings, each bundle's run, and its
    figures side by side (``tests``: test -> bundle label -> tokens per second and stddev, or None)."""

    schema: int = field(init=False, default=SCHEMA)
    tool: str = field(init=False, default="rockbuild")
    rockbuild_version: str = field(init=False, default=__version__)
    model: ModelFile
    options: CompareOptions = field(metadata=json_key("settings"))
    runs: tuple[BundleBench, ...] = field(metadata=json_key("bundles"))
    table: Mapping[str, Mapping[str, Any]] = field(
        init=False, default_factory=dict, hash=False, metadata=json_key("tests")
    )
    notes: tuple[str, ...] = field(init=False, default=())  # derived: see _notes
    env_removed: tuple[str, ...] = field(default=(), metadata=json_key("environment_removed"))

    def __post_init__(self) -> None:
        table = {test: {r.label: _figures(r.result(test)) for r in self.runs} for test in self.tests}
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "notes", self._notes())

    @property
    def tests(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.test or "?" for r in self.runs for b in r.results))

    def _notes(self) -> tuple[str, ...]:
        """A GPU backend that used no GPU device: ggml fell back to the CPU with exit code 0, so those figures are the
        CPU's, whatever the column says."""
        if self.options.gpu_layers == 0:
            return ()
        out = []
        for r in self.runs:
            if r.device or r.backends in ("CPU", "?", ""):
                continue
            hint = (
                " (a CPU-type Vulkan device such as lavapipe is used only when GGML_VK_VISIBLE_DEVICES lists it; "
                "check `vulkaninfo --summary`)"
                if "Vulkan" in r.backends
                else ""
            )
            out.append(
                f"{r.label}: the {r.backends} build used no GPU device (llama-bench reports no gpu_info): "
                f"its figures are the CPU's{hint}"
            )
        return tuple(out)

    def raise_if_wrong(self) -> None:
        """SmokeError (exit like a failed smoke) when a bundle's numbers are wrong (--numerics)."""
        wrong = [r for r in self.runs if r.numerics is not None and not r.numerics.ok]
        if wrong:
            first = wrong[0]
            assert first.numerics is not None
            more = f" (and {len(wrong) - 1} more bundle(s))" if len(wrong) > 1 else ""
            raise SmokeError(
                f"the numbers of {first.label} are wrong: {first.numerics.failures[0]}{more}",
                hint=f"logs: {first.numerics.logs}",
            )

    def render(self) -> str:
        """pp and tg side by side (mean ± stddev over the repetitions), the first bundle as the 1.00x reference."""
        o = self.options
        fa = f" -fa {o.flash_attn}" if o.flash_attn is not None else ""
        head = (
            f"compare: model {self.model.name} (sha256 {self.model.sha256[:12]}...), -p {o.n_prompt} "
            f"-n {o.n_gen} -r {o.repetitions} -t {o.threads or default_threads()} -ngl {o.gpu_layers}{fa}"
        )
        rows: list[list[str]] = [
            ["", *[r.label for r in self.runs]],
            ["backend", *[r.backends for r in self.runs]],
            ["device", *[r.device or "none (CPU)" for r in self.runs]],
        ]
        for test in self.tests:
            first = self.runs[0].result(test)
            cells = []
            for i, r in enumerate(self.runs):
                b = r.result(test)
                if b is None:
                    cells.append("-")
                    continue
                cell = f"{b.tokens_per_second:.2f} ± {b.stddev:.2f} t/s"
                if i and first is not None and first.rate > 0:
                    cell += f" ({b.rate / first.rate:.2f}x)"
                cells.append(cell)
            rows.append([test, *cells])
        if any(r.numerics is not None for r in self.runs):
            rows += _numerics_rows(self.runs)
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [head] + [
            "  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
        ]
        lines += [f"  {r.label}: {r.bundle}" for r in self.runs]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _numerics_rows(runs: Sequence[BundleBench]) -> list[list[str]]:
    """The numerics figures under the speed: each bundle's device against its own CPU, and its known answers."""

    def cells(fmt: Callable[[Mapping[str, Any]], str]) -> list[str]:
        return [fmt(r.numerics.summary()) if r.numerics is not None else "-" for r in runs]

    def kld(s: Mapping[str, Any]) -> str:
        return s["cross_backend"] if s["mean_kld"] is None else f"{s['mean_kld']:.5f} ({s['cross_backend']})"

    def answers(s: Mapping[str, Any]) -> str:
        if s["answers_total"] is None:
            return s["known_answers"]
        return f"{s['answers_passed']}/{s['answers_total']} ({s['known_answers']})"

    return [
        ["mean KLD vs CPU", *cells(kld)],
        ["same top token", *cells(lambda s: "-" if s["same_top"] is None else f"{s['same_top']:.1f} %")],
        ["known answers", *cells(answers)],
        ["CPU perplexity", *cells(lambda s: "-" if s["cpu_ppl"] is None else f"{s['cpu_ppl']:.4f}")],
    ]


def compare_numerics(
    run: BundleBench, model: ModelFile, config: NumericsConfig, *, gpu_layers: int, env: Mapping[str, str], logs: Path
) -> Numerics:
    """The smoke's numerics step on one bundle: its llama-perplexity on the CPU, then on the device llama-bench used
    (none: the GPU half is not checked), and the model's known answers."""
    target = Target.of_bundle(
        run.bundle,
        platform=host_os(),
        model=model,
        backend=run.backend,
        gpu=GpuDevice("", run.device) if run.device and gpu_layers else None,
        gpu_layers=gpu_layers,
    )
    return run_numerics(config, target, cwd=run.bundle, env=env, logs=logs)


def bench_exe(bundle: Path) -> Path:
    return bundle_program(bundle, "llama-bench")


def _labels(bundles: Sequence[Path]) -> list[str]:
    """Column names: the bundle folder's name (its job folder's for ``.../bundle``), made unique."""
    labels: list[str] = []
    for bundle in bundles:
        name = bundle.parent.name if bundle.name == "bundle" and bundle.parent.name else bundle.name
        label, n = name, 2
        while label in labels:
            label, n = f"{name}#{n}", n + 1
        labels.append(label)
    return labels


def bench_bundle(
    bundle: Path, label: str, model: ModelFile, options: CompareOptions, *, env: Mapping[str, str], log: Path
) -> BundleBench:
    """Run llama-bench from ``bundle`` once; raises SmokeError (one line, log in the hint) when it yields nothing."""
    args = [str(bench_exe(bundle)), *options.bench_args(model.path)]
    log.unlink(missing_ok=True)
    try:
        result = run(args, cwd=bundle, env=env, timeout=options.timeout, log=log, check=False)
    except ProcessError as exc:
        if "timed out" in exc.message:
            raise SmokeError(
                f"llama-bench of {label} timed out after {options.timeout:.0f}s",
                hint=f"raise --timeout, or lower -r/-p/-n; log: {log}",
            ) from None
        raise SmokeError(
            f"llama-bench of {label} could not run: {exc.message}", hint=f"is {bundle} a bundle for this machine?"
        ) from None
    results = tuple(parse_bench_json(result.output))
    tail = [line for line in log_tail(log, 20) if line.strip()]
    last = f": {tail[-1].strip()}" if tail else ""
    if result.returncode != 0:
        raise SmokeError(
            f"llama-bench of {label} failed with exit code {result.returncode}{last}", hint=f"full log: {log}"
        )
    if not results:
        raise SmokeError(f"llama-bench of {label} printed no JSON results{last}", hint=f"full log: {log}")
    return BundleBench(
        label=label, bundle=bundle, command=tuple(args), seconds=result.seconds, results=results, log=log
    )


def bundle_folders(bundles: Sequence[Path]) -> list[Path]:
    """The bundle folder of each of ``bundles`` (a bundle folder or a job folder holding ``bundle/``), each checked
    for its llama-bench: the command calls it before the model is provided (downloaded), :func:`run_compare` again."""
    if not bundles:
        raise UsageError("give at least one bundle folder to compare")
    folders = [locate_bundle(Path(b))[0] for b in bundles]
    for folder in folders:
        if not bench_exe(folder).is_file():
            raise UsageError(f"{folder} has no {bench_exe(folder).name}; pass bundle folders made by rockbuild bundle")
    return folders


def run_compare(
    bundles: Sequence[Path],
    model: ModelFile,
    options: CompareOptions | None = None,
    *,
    env: Mapping[str, str] | None = None,
    logs: Path | None = None,
    numerics: NumericsConfig | None = None,
) -> Comparison:
    """Benchmark every bundle (a bundle folder or a job folder holding ``bundle/``) in order with the same settings;
    with ``numerics``, then the numerics step on each (the module docstring)."""
    options = options or CompareOptions()
    folders = bundle_folders(bundles)
    source = environment() if env is None else env
    child, removed = smoke_env(source)  # device selection (GGML_VK_VISIBLE_DEVICES...) passes through
    logs = logs or Path(tempfile.mkdtemp(prefix="rockbuild-compare-"))
    logs.mkdir(parents=True, exist_ok=True)
    runs = []
    for i, (folder, label) in enumerate(zip(folders, _labels(folders), strict=True), 1):
        log = logs / f"{i}-{label.replace('#', '-')}.llama-bench.log"
        with console.step(f"compare: llama-bench of {label} ({i}/{len(folders)})"):
            runs.append(bench_bundle(folder, label, model, options, env=child, log=log))
    if numerics is not None:
        for i, run_ in enumerate(list(runs)):
            folder = logs / f"{i + 1}-{run_.label.replace('#', '-')}.numerics"
            with console.step(f"compare: numerics of {run_.label}"):
                checked = compare_numerics(run_, model, numerics, gpu_layers=options.gpu_layers, env=child, logs=folder)
            runs[i] = replace(run_, numerics=checked)
    return Comparison(model=model, options=options, runs=tuple(runs), env_removed=tuple(removed))
