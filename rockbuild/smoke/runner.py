"""Running the three smoke targets from a bundle and writing ``smoke.json``."""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from rockbuild import __version__, console
from rockbuild.core.environment import environment, host_os
from rockbuild.core.errors import SmokeError
from rockbuild.core.jobs import OSES
from rockbuild.core.programs import Program
from rockbuild.core.records import (
    BenchFigure,
    BundleRecord,
    ExpectGpu,
    LoadReport,
    SmokeBackends,
    SmokeCheck,
    SmokeCpuVariants,
    SmokeGpu,
    SmokeHost,
    SmokeRecord,
    SmokeRun,
)
from rockbuild.core.vocabulary import Backends, GpuDevice, Os, SmokeDevices
from rockbuild.jobfolder import JobFolder
from rockbuild.process import find_wine, log_tail, spawn, stop
from rockbuild.smoke.browser import ChatPage, check_chat
from rockbuild.smoke.config import RunConfig, SmokeConfig, VariantReferenceShape
from rockbuild.smoke.models import ModelFile, check_gguf
from rockbuild.smoke.numerics import Numerics, NumericsConfig, Target, run_numerics
from rockbuild.smoke.ops import Ops, OpsConfig, find_op_test, run_ops
from rockbuild.smoke.probe import exit_reason, run_program, smoke_env
from rockbuild.smoke.variants import NONE as NO_CPU_VARIANTS
from rockbuild.smoke.variants import VariantReference, VariantRuns, run_cpu_variants, shipped_variants

from .backend import SmokeBackend
from .parse import (
    BackendLoads,
    Generation,
    cpu_backend_problem,
    cpu_variant_files,
    parse_backend_loads,
    parse_bench_json,
    parse_cli,
    parse_load,
    parse_server_reply,
    text_problem,
)

SCHEMA = 1
SMOKE_JSON = "smoke.json"
TAIL_LINES = 30


_RUN = RunConfig()  # an empty run section: the options' defaults are smoke.yaml's


@dataclass(frozen=True)
class SmokeOptions:
    prompt: str = _RUN.prompt
    n_predict: int = _RUN.n_predict
    ctx_size: int = _RUN.ctx_size
    threads: int = _RUN.threads
    seed: int = _RUN.seed
    gpu_layers: int = _RUN.gpu_layers
    # llama-bench: run.bench's settings, or run.gpu_bench's (rockbuild.smoke.config.BenchConfig says why each)
    bench_prompt: int = _RUN.bench.n_prompt
    bench_gen: int = _RUN.bench.n_gen
    bench_repetitions: int = _RUN.bench.repetitions
    bench_threads: int | None = _RUN.bench.threads  # capped at this machine's CPUs; None: the runs' threads
    bench_warmup: int = _RUN.bench.warmup
    timeouts: Mapping[str, float] = field(default_factory=lambda: dict(_RUN.timeouts))
    expect_gpu: Literal["auto", "yes", "no"] = "auto"
    runs: tuple[str, ...] = ("cli", "server", "bench")
    # "-dev NAME" for every run (e.g. Vulkan1); None: a Vulkan bundle expected on a GPU pins its first Vulkan device,
    # so a missing device fails in the command itself instead of falling back to the CPU with exit code 0
    device: str | None = None
    # every shipped program, each run from the bundle with its check arguments (config/programs.yaml); () = none
    programs: tuple[Program, ...] = ()
    program_timeout: float = 60.0
    # llama-server's chat page: whether the build has one (build.json's web_ui; None: it does not say) and why not;
    # ``browser``: a real browser chats with it too (--browser, smoke.yaml's run.browser.enabled)
    web_ui: bool | None = None
    web_ui_reason: str = ""
    browser: bool = _RUN.browser.enabled
    chat_page: ChatPage = _RUN.browser.page  # run.browser: the page's selectors, the timeout
    # the numerics step (smoke.yaml's numerics; rockbuild.smoke.numerics): None or disabled: not run
    numerics: NumericsConfig | None = None
    # the cpu_variants step (rockbuild.smoke.variants; smoke.yaml's run.cpu_variants, --cpu-variants): each CPU variant
    # module alone, all | picked | none, pp512 and a tg of cpu_variant_gen tokens, one repetition
    cpu_variants: str = _RUN.cpu_variants.check
    cpu_variant_gen: int = _RUN.cpu_variants.n_gen
    # each variant's short run against its own reference (run.cpu_variants.reference; None: not made)
    cpu_variant_reference: VariantReferenceShape | None = _RUN.cpu_variants.reference
    # the ops step (rockbuild.smoke.ops; smoke.yaml's ops): test-backend-ops on the GPU; None: not run
    ops: OpsConfig | None = None

    @classmethod
    def from_config(cls, config: SmokeConfig, *, bench_preset: str = "smoke", **overrides: Any) -> SmokeOptions:
        """The options of smoke.yaml as :func:`rockbuild.smoke.config.load_smoke_config` read and checked it (once,
        on load: nothing is parsed here); ``bench_preset`` ``gpu`` takes llama-bench's settings from
        ``run.gpu_bench`` (pp512/tg128, the figures a release publishes) instead of ``run.bench``. ``overrides``:
        the command line's flags, over smoke.yaml's values."""
        run = config.run
        bench = run.gpu_bench if bench_preset == "gpu" else run.bench
        smoke_yaml = cls(
            prompt=run.prompt,
            n_predict=run.n_predict,
            ctx_size=run.ctx_size,
            threads=run.threads,
            seed=run.seed,
            gpu_layers=run.gpu_layers,
            bench_prompt=bench.n_prompt,
            bench_gen=bench.n_gen,
            bench_repetitions=bench.repetitions,
            bench_threads=bench.threads,
            bench_warmup=bench.warmup,
            timeouts=run.timeouts,
            browser=run.browser.enabled,
            chat_page=run.browser.page,
            numerics=config.numerics,
            cpu_variants=run.cpu_variants.check,
            cpu_variant_gen=run.cpu_variants.n_gen,
            cpu_variant_reference=run.cpu_variants.reference,
            ops=config.ops,
        )
        return replace(smoke_yaml, **overrides)


@dataclass(frozen=True)
class SmokeReport:
    """A smoke test's outcome: smoke.json's record (made once, by :func:`run_smoke`) and what only the console needs
    beside it: the model file (its note), where the record was written, the ops' own lines."""

    record: SmokeRecord
    model: ModelFile
    report_path: Path | None = None
    ops: Ops | None = None  # test-backend-ops on the GPU (None: the step did not run)

    @property
    def ok(self) -> bool:
        return self.record.ok

    @property
    def failures(self) -> tuple[str, ...]:
        return self.record.failures

    @property
    def runs(self) -> tuple[SmokeRun, ...]:
        return tuple(self.record.runs.values())

    def to_dict(self) -> dict[str, Any]:
        """``rockbuild smoke --json``: smoke.json."""
        return self.record.to_dict()

    def raise_if_failed(self) -> None:
        """A SmokeError (exit 11) naming the first failure and where the details are, when a run failed."""
        if not self.ok:
            raise SmokeError(
                f"smoke test of {self.record.bundle} failed: {self.failures[0]}",
                hint=f"details and log tails in {self.report_path}",
            )

    def render(self) -> str:
        record, gpu = self.record, self.record.gpu or SmokeGpu()
        lines = [
            f"smoke of {record.bundle}: {'OK' if self.ok else 'FAILED'} (model {self.model.name}, "
            f"sha256 {self.model.sha256[:12]}...)"
        ]
        if self.model.note:
            lines.append(f"  note: {self.model.note}")
        if record.preflight:
            lines.append(f"  [FAIL] {record.preflight}")
        elif record.device:
            lines.append(f"  device: -dev {record.device} ({record.expect_gpu.reason if record.expect_gpu else ''})")
        for r in self.runs:
            rate = f", {r.tokens_per_second:.1f} tokens/s" if r.tokens_per_second else ""
            tokens = f", {r.tokens} tokens" if r.tokens is not None else ""
            lines.append(
                f"  [{'ok' if r.ok else 'FAIL'}] {r.name} in {r.seconds or 0:.1f}s{tokens}{rate}"
                + (f": {r.failure}" if r.failure else "")
            )
            for label, check in (("web UI (GET /)", r.web_ui), ("browser chat", r.browser)):
                if check is not None:
                    lines.append(f"         {label}: {check.result}: {check.detail}")
            for b in r.bench:
                lines.append(f"         {b.test}: {b.rate:.2f} ± {b.stddev or 0:.2f} t/s ({b.backends})")
            for what in ("cross_backend", "known_answers", "cpu"):
                step = r.extra.get(what) if r.name == "numerics" else None
                if isinstance(step, Mapping):
                    lines.append(f"         {what.replace('_', ' ')}: {step.get('result')}: {step.get('detail')}")
        if record.cpu_variants is not None and record.cpu_variants.ran:
            lines.extend(record.cpu_variants.render_lines())
        if self.ops is not None:
            lines.extend(self.ops.render_lines())
        backends = record.backends or SmokeBackends()
        if backends.cpu or backends.gpu:
            shown = f", GPU {backends.gpu} ({backends.gpu_file})" if backends.gpu else ""
            lines.append(
                f"  backends loaded: CPU {backends.cpu or 'none'}{shown}"
                + (f" (of {len(backends.shipped)} CPU variants shipped)" if backends.shipped else "")
            )
        lines.append(f"  {gpu.summary}")
        lines.extend(f"  note: {n}" for n in gpu.notes)
        if self.report_path is not None:
            lines.append(f"  smoke.json: {self.report_path}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------
# The bundle and the machine


def locate_bundle(path: Path) -> tuple[Path, Path | None]:
    """(bundle folder, job folder or None) for a bundle folder or a job folder ``out/<job-id>`` holding ``bundle/``."""
    path = path.absolute()
    if (path / "bundle").is_dir() and not (path / "bundle.json").exists():
        return path / "bundle", path
    parent = path.parent
    if (parent / "build.json").exists() or path.name == "bundle":
        return path, parent
    return path, None


def web_ui_facts(job_dir: Path | None) -> tuple[bool | None, str]:
    """(whether the build has llama-server's web UI, why not) from build.json; None: it does not say."""
    build = JobFolder(job_dir).build() if job_dir else None
    web_ui = build.web_ui if build is not None else None
    if web_ui is None:
        return None, ""
    return web_ui.available, web_ui.reason or ""


def bundle_facts(bundle: Path, job_dir: Path | None) -> tuple[Os, tuple[str, ...], str | None]:
    """(platform, gfx targets, job id) from bundle.json / build.json, guessed from the files when absent."""
    meta = BundleRecord.read(bundle / "bundle.json")
    build = JobFolder(job_dir).build() if job_dir else None
    job = build.job if build is not None else None
    recorded = (meta.platform if meta else None) or (job.os if job else None) or ""
    platform = next((os_name for os_name in OSES if os_name == recorded), None)
    if platform is None:
        if recorded:
            raise SmokeError(f"{bundle} is a {recorded} bundle; rockbuild smoke-tests {' and '.join(OSES)} bundles")
        platform = "windows" if (bundle / "llama-cli.exe").exists() else "linux"
    targets = (
        (meta.targets if meta else ()) or (build.gpu_targets if build else ()) or (job.targets if job else ()) or ()
    )
    return platform, targets, (job.id if job else None) or (job_dir.name if job_dir else None)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _exe(bundle: Path, name: str, platform: str) -> Path:
    return bundle / (f"{name}.exe" if platform == "windows" else name)


# ---------------------------------------------------------------------------------------------------------------------
# The three runs


def _run(
    name: str,
    command: Sequence[str],
    seconds: float,
    returncode: int | None,
    failure: str | None,
    log: Path,
    facts: Mapping[str, Any] | None = None,
    tail: Sequence[str] = (),
) -> SmokeRun:
    """A run as smoke.json has it: how it ended, then ``facts`` (what it saw, :func:`_seen`, and its own details: the
    server's port and checks, the programs, the numerics step's record, which restates ``ok`` and ``seconds``), then,
    when it failed, its log's ``tail``."""
    values = {
        "name": name,
        "command": tuple(command),
        "ok": failure is None,
        "seconds": round(seconds, 3),
        "returncode": returncode,
        "failure": failure,
        "log": str(log),
        **(facts or {}),
    }
    if failure is not None:
        values["log_tail"] = tuple(tail)
    return SmokeRun.keyed(values)


def _seen(
    backends: BackendLoads | None = None,
    generation: Generation | None = None,
    load: LoadReport | None = None,
    bench: Sequence[BenchFigure] = (),
) -> dict[str, Any]:
    """What a run saw, in smoke.json's order: the backends it loaded, what it generated, the model load, llama-bench's
    lines (each only when the run has it)."""
    facts: dict[str, Any] = {}
    if backends is not None:
        facts["backends"] = backends.summary()
    if generation is not None:
        facts.update(dataclasses.asdict(generation))
    if load is not None:
        facts["load"] = load
    if bench:
        facts["bench"] = tuple(bench)
    return facts


def _failed(
    name: str,
    command: Sequence[str],
    start: float,
    failure: str,
    log: Path,
    returncode: int | None = None,
    facts: Mapping[str, Any] | None = None,
) -> SmokeRun:
    return _run(
        name, command, time.monotonic() - start, returncode, failure, log, facts, tuple(log_tail(log, TAIL_LINES))
    )


def _device_args(options: SmokeOptions) -> list[str]:
    return ["-dev", options.device] if options.device else []


def _cpu_backend_failure(exe: Path, backends: BackendLoads, returncode: int | None) -> str | None:
    """The run's failure when its CPU backend is wrong: the CPU variant ggml picked died of SIGILL, or the bundle
    (``exe``'s folder) ships CPU variant modules and none was loaded."""
    shipped = cpu_variant_files(p.name for p in exe.parent.iterdir())
    return cpu_backend_problem(backends, returncode, shipped, exe.name)


def run_cli(
    exe: Path, model: ModelFile, options: SmokeOptions, *, cwd: Path, env: Mapping[str, str], logs: Path
) -> SmokeRun:
    log = logs / "llama-cli.log"
    args = [
        str(exe),
        "-m",
        str(model.path),
        "-p",
        options.prompt,
        "-n",
        str(options.n_predict),
        "-st",
        "-t",
        str(options.threads),
        "--temp",
        "0",
        "--seed",
        str(options.seed),
        "-c",
        str(options.ctx_size),
        "-ngl",
        str(options.gpu_layers),
        "-lv",
        "4",
        *_device_args(options),
    ]
    start = time.monotonic()
    output, rc, failure, seconds = run_program("cli", args, cwd=cwd, env=env, timeout=options.timeouts["cli"], log=log)
    text = output or ""
    generation, load = parse_cli(text, options.prompt), parse_load(text)
    backends = parse_backend_loads(text)
    if failure is None:
        if generation.tokens is not None and generation.tokens < 1:
            failure = "no tokens generated"
        elif problem := text_problem(generation.text):
            failure = problem
    failure = _cpu_backend_failure(exe, backends, rc) or failure
    seen = _seen(backends, generation, load)
    if failure:
        return _failed("cli", args, start, failure, log, rc, seen)
    return _run("cli", args, seconds, rc, None, log, seen)


def _http_json(method: str, url: str, body: Any = None, timeout: float = 5.0) -> tuple[int, Any]:
    import requests

    with requests.Session() as session:
        session.trust_env = False  # never through a proxy: this is our own child on 127.0.0.1
        resp = session.request(method, url, json=body, timeout=timeout)
        try:
            return resp.status_code, resp.json()
        except ValueError:
            return resp.status_code, resp.text


def run_server(
    exe: Path, model: ModelFile, options: SmokeOptions, *, cwd: Path, env: Mapping[str, str], logs: Path
) -> SmokeRun:
    """Start llama-server on a free 127.0.0.1 port, wait for /health, ask one chat completion, stop it by its PID."""
    import requests

    log = logs / "llama-server.log"
    log.unlink(missing_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = [
        str(exe),
        "-m",
        str(model.path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        str(options.threads),
        "-c",
        str(options.ctx_size),
        "-ngl",
        str(options.gpu_layers),
        "-np",
        "1",
        "-lv",
        "4",
        *_device_args(options),
    ]
    start = time.monotonic()
    try:
        proc = spawn(args, cwd=cwd, env=env, log=log)
    except OSError as exc:
        return _failed("server", args, start, f"cannot start {exe.name}: {exc.strerror}", log)
    details: dict[str, Any] = {"port": port, "pid": proc.pid}
    failure: str | None = None
    reply: Any = None
    generation: Generation | None = None
    try:
        deadline = start + options.timeouts["server_start"]
        healthy = False
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                failure = f"{exit_reason(proc.returncode)} before /health answered"
                break
            try:
                status, _ = _http_json("GET", f"{base}/health", timeout=2.0)
                if status == 200:
                    healthy = True
                    break
            except requests.RequestException:
                pass
            time.sleep(0.1)
        details["health_seconds"] = round(time.monotonic() - start, 3)
        if not healthy and failure is None:
            failure = f"/health did not answer 200 within {options.timeouts['server_start']:.0f}s"
        if healthy:
            body = {
                "messages": [{"role": "user", "content": options.prompt}],
                "max_tokens": options.n_predict,
                "temperature": 0,
                "seed": options.seed,
            }
            request_start = time.monotonic()
            try:
                status, reply = _http_json(
                    "POST", f"{base}/v1/chat/completions", body, timeout=options.timeouts["request"]
                )
                details["request_seconds"] = round(time.monotonic() - request_start, 3)
                if status != 200:
                    failure = f"/v1/chat/completions answered HTTP {status}"
                else:
                    generation = parse_server_reply(reply)
                    if not generation.tokens:
                        failure = "the server answered without generating tokens"
                    elif problem := text_problem(generation.text):
                        failure = problem
            except requests.Timeout:
                failure = f"/v1/chat/completions did not answer within {options.timeouts['request']:.0f}s"
            except requests.RequestException as exc:
                failure = f"/v1/chat/completions failed: {type(exc).__name__}"
        if healthy and failure is None:
            failure = check_pages(base, options, env=env, logs=logs, details=details)
    finally:
        details["stop_returncode"] = stop(proc)
    seconds = time.monotonic() - start
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    load = parse_load(text)
    if isinstance(reply, dict):
        details["reply_model"] = reply.get("model")
        details["system_fingerprint"] = reply.get("system_fingerprint")
    facts = {**_seen(generation=generation, load=load), **details}
    if failure:
        return _failed("server", args, start, failure, log, proc.returncode, facts)
    return _run("server", args, seconds, proc.returncode, None, log, facts)


def run_programs(
    bundle: Path,
    programs: Sequence[Program],
    options: SmokeOptions,
    *,
    platform: str,
    env: Mapping[str, str],
    logs: Path,
) -> SmokeRun:
    """Run every shipped program from the bundle with its check arguments (``--help``, ``--version``): each must
    exit as its entry says, within the timeout, and print what it expects. A required program missing from the bundle
    fails; an optional one the build did not have is listed as absent (build.json says why). A failure one of
    programs.yaml's ``known_failures`` describes, in a bundle of that kind, is listed as known and does not fail the
    run."""
    start = time.monotonic()
    folder = logs / "programs"
    folder.mkdir(parents=True, exist_ok=True)
    names = [p.name for p in bundle.iterdir()]
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    for program in programs:
        exe = bundle / program.file_for(platform)
        if not exe.is_file():
            results.append({"program": program.file_name, "status": "absent", "required": program.required})
            if program.required:
                failures.append(f"{program.file_name} is not in the bundle")
            continue
        known = next((k for k in program.known_failures if k.applies_to(names)), None)
        timeout = known.timeout if known and known.timeout else options.program_timeout
        log = folder / f"{program.file_name}.log"
        args = [str(exe), *program.check]
        output, rc, problem, seconds = run_program(
            program.file_name, args, cwd=bundle, env=env, timeout=timeout, log=log
        )
        if problem is not None and "timed out" in problem:
            pass
        elif rc == program.exit_code:
            problem = None
        else:
            problem = f"{exit_reason(rc) if rc is not None else problem} (expected exit code {program.exit_code})"
        # what the check expects (its usage line), or, with no expect, any output at all
        printed = bool(re.search(program.expect, output or "")) if program.expect else bool((output or "").strip())
        if problem is None and program.expect and not printed:
            problem = f"its output does not match {program.expect!r}"
        status = "ok" if problem is None else "failed"
        result = {
            "program": program.file_name,
            "status": status,
            "args": list(program.check),
            "returncode": rc,
            "seconds": round(seconds, 3),
            "failure": problem,
            "log": str(log),
        }
        if known is not None:
            if problem is not None and known.failure in problem and (printed or not known.after_output):
                result.update(status="known", known_reason=known.reason)
            elif problem is None:
                result["note"] = (
                    "its known failure did not happen this time (a race may hit only some runs); "
                    "once it never does, drop it from programs.yaml's known_failures"
                )
        results.append(result)
        if result["status"] == "failed":
            failures.append(" ".join([program.file_name, *program.check]) + f": {problem}")
    ran = sum(1 for r in results if r["status"] != "absent")
    details = {
        "programs": tuple(results),
        "checked": ran,
        "absent": tuple(r["program"] for r in results if r["status"] == "absent"),
        "known": tuple(r["program"] for r in results if r["status"] == "known"),
    }
    failure = None
    if failures:
        listed = ran + sum(1 for r in results if r["status"] == "absent" and r["required"])
        failure = f"{len(failures)} of {listed} programs failed: {failures[0]}" + (
            f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        )
    return _run("programs", [p.file_name for p in programs], time.monotonic() - start, None, failure, folder, details)


def run_numerics_step(
    bundle: Path,
    model: ModelFile,
    options: SmokeOptions,
    *,
    platform: str,
    backend: str,
    gpu: GpuDevice | None,
    env: Mapping[str, str],
    logs: Path,
) -> tuple[SmokeRun, Numerics]:
    """The numerics step (:mod:`rockbuild.smoke.numerics`) as a run of the smoke, on ``gpu`` (None: the CPU alone):
    its failure fails the smoke. The run, and the step's result (smoke.json's ``numerics``)."""
    assert options.numerics is not None
    start = time.monotonic()
    folder = logs / "numerics"
    perplexity = _exe(bundle, "llama-perplexity", platform)
    target = Target.of_bundle(
        bundle,
        platform=platform,
        model=model,
        backend=backend,
        gpu=gpu,
        gpu_layers=options.gpu_layers,
        seed=options.seed,
    )
    result = run_numerics(options.numerics, target, cwd=bundle, env=env, logs=folder)
    failure = None
    if result.failures:
        failure = result.failures[0] + (f" (and {len(result.failures) - 1} more)" if len(result.failures) > 1 else "")
    return _run(
        "numerics", [str(perplexity)], time.monotonic() - start, None, failure, folder, result.to_dict()
    ), result


def run_ops_step(
    bundle: Path,
    job_dir: Path | None,
    options: SmokeOptions,
    *,
    platform: str,
    devices: SmokeDevices,
    env: Mapping[str, str],
    logs: Path,
) -> Ops:
    """The ops step (:mod:`rockbuild.smoke.ops`): the job's test-backend-ops against the bundle's own backend on the
    smoke's GPU device (``devices.device``, named as test-backend-ops names it: ROCm0 for ROCm's default GPU); *not
    checked* (never passed) without a GPU device or without the binary, saying why."""
    assert options.ops is not None
    gpu = devices.gpu()
    if gpu is None:
        return Ops.not_checked(f"no GPU device to test ({devices.reason})")
    tool, why = find_op_test(job_dir, platform, JobFolder(job_dir).build() if job_dir else None)
    if tool is None:
        console.warn(f"ops: not checked: {why}")
        return Ops.not_checked(why, device=gpu.name)
    with console.step(f"smoke: every op on {gpu.name} (test-backend-ops)") as step:
        result = run_ops(
            options.ops,
            bundle=bundle,
            tool=tool,
            gpu=gpu,
            env=env,
            logs=logs / "ops",
            platform=platform,
            progress=console.info,
        )
        if not result.ok:
            step.fail()
    if not result.ok:
        console.warn(f"ops: {result.detail}; logs in {logs / 'ops'}")
    return result


VARIANT_THREADS = 16


def run_variants_step(
    bundle: Path, model: ModelFile, options: SmokeOptions, *, platform: str, env: Mapping[str, str], logs: Path
) -> SmokeCpuVariants:
    """The cpu_variants step (:mod:`rockbuild.smoke.variants`): each CPU variant module the bundle ships, alone, on a
    real batch with llama-bench's threads and timeout, and the model's known answers when it has some; a variant that
    crashes, is not the one loaded or answers wrong fails the smoke."""
    numerics = options.numerics
    # every CPU of the machine (up to 16): the step proves each variant runs and answers right, and fast enough to
    # run 14 of them every night (x64 alone does pp512 of Qwen3-0.6B at a few t/s on one thread); many threads also
    # take the paths one thread never does (the AMX tile permission is asked per thread)
    threads = max(bench_threads(options), min(os.cpu_count() or 1, VARIANT_THREADS))
    checked = numerics if numerics is not None and numerics.enabled else None
    shape, long = options.cpu_variant_reference, checked.long if checked is not None else None
    reference = None
    if shape is not None and checked is not None and long is not None:
        reference = VariantReference(
            text=long.text,
            ctx=shape.ctx,
            chunks=shape.chunks,
            baselines=checked.baselines,
            model_sha256=model.sha256,
            os_name=platform,
        )
    runs = VariantRuns(
        check=options.cpu_variants,
        n_gen=options.cpu_variant_gen,
        threads=threads,
        timeout=options.timeouts["bench"],
        answers=checked,
        reference=reference,
    )

    def run(progress: Callable[[str], None] | None = None) -> SmokeCpuVariants:
        return run_cpu_variants(
            bundle, model=model, runs=runs, platform=platform, env=env, logs=logs / "cpu-variants", progress=progress
        )

    if options.cpu_variants == NO_CPU_VARIANTS or not shipped_variants(bundle):
        return run()  # skipped, saying why
    with console.step("smoke: CPU variants") as step:
        result = run(console.info)
        if not result.ok:
            step.fail()
    for failure in result.failures:
        console.warn(f"{failure}; logs in {result.logs}")
    return result


def _not_checked(why: str) -> SmokeCheck:
    return SmokeCheck(result="not checked", detail=why, keys=("result", "detail"))


def check_pages(
    base: str, options: SmokeOptions, *, env: Mapping[str, str], logs: Path, details: dict[str, Any]
) -> str | None:
    """llama-server's chat page, when the build has one: ``GET /`` answers 200 with an HTML page, and with
    ``options.browser`` a browser chats with it (screenshot ``web-ui.png`` beside the logs). Recorded in ``details``
    (``web_ui``, ``browser``); the failure, or None. A build without one is *not checked*, never passed."""
    import requests

    if options.web_ui is False:
        why = "no web UI" + (f" ({options.web_ui_reason})" if options.web_ui_reason else "")
        details["web_ui"] = _not_checked(why)
        if options.browser:
            details["browser"] = _not_checked(why)
        return None
    start = time.monotonic()
    try:
        with requests.Session() as session:
            session.trust_env = False
            resp = session.get(f"{base}/", timeout=options.timeouts["request"])
        kind = resp.headers.get("Content-Type", "")
        html = resp.status_code == 200 and kind.startswith("text/html") and "<html" in resp.text[:4096].lower()
        detail = f"HTTP {resp.status_code}, {kind or 'no Content-Type'}, {len(resp.content)} bytes"
        page: dict[str, Any] = {
            "result": "passed" if html else "failed",
            "detail": detail,
            "status": resp.status_code,
            "content_type": kind,
        }
    except requests.RequestException as exc:
        page = {"result": "failed", "detail": f"no answer ({type(exc).__name__})"}
    if options.web_ui is None and page["result"] != "passed":
        # no build.json beside the bundle says (a bundle copied alone): what the server answers is recorded, never
        # a pass and never a failure
        why = f"no web UI recorded in build.json (GET / answered {page['detail']})"
        details["web_ui"] = _not_checked(why)
        if options.browser:
            details["browser"] = _not_checked(why)
        return None
    if options.web_ui is None:
        page["detail"] += " (build.json does not say; the page is there)"
    details["web_ui"] = SmokeCheck.keyed({**page, "url": f"{base}/", "seconds": round(time.monotonic() - start, 3)})
    if page["result"] != "passed":
        return f"GET / answered {page['detail']}, not the web UI the build has"
    if not options.browser:
        return None
    chat = check_chat(f"{base}/", options.chat_page, screenshot=logs / "web-ui.png", env=env)
    details["browser"] = chat
    if chat.result == "not checked":
        console.warn(f"browser check not run: {chat.detail}")
    return f"browser: {chat.detail}" if chat.result == "failed" else None


def bench_threads(options: SmokeOptions) -> int:
    """llama-bench's threads: ``bench_threads`` capped at this machine's CPUs, else the runs' ``threads``."""
    if options.bench_threads:
        return max(1, min(options.bench_threads, os.cpu_count() or 1))
    return options.threads


def run_bench(
    exe: Path, model: ModelFile, options: SmokeOptions, *, cwd: Path, env: Mapping[str, str], logs: Path
) -> SmokeRun:
    log = logs / "llama-bench.log"
    args = [
        str(exe),
        "-m",
        str(model.path),
        "-p",
        str(options.bench_prompt),
        "-n",
        str(options.bench_gen),
        "-r",
        str(options.bench_repetitions),
        "-t",
        str(bench_threads(options)),
        "-ngl",
        str(options.gpu_layers),
        *_device_args(options),
        "-o",
        "json",
    ]
    start = time.monotonic()
    for n in range(options.bench_warmup):  # the same command once, -r 1, its figures discarded
        warm = [*args]
        warm[warm.index("-r") + 1] = "1"
        warm_log = logs / f"llama-bench-warmup{n + 1}.log"
        _, rc, failure, _ = run_program(
            "bench", warm, cwd=cwd, env=env, timeout=options.timeouts["bench"], log=warm_log
        )
        if failure is not None:
            return _failed("bench", warm, start, f"warm-up run: {failure}", warm_log, rc)
    output, rc, failure, seconds = run_program(
        "bench", args, cwd=cwd, env=env, timeout=options.timeouts["bench"], log=log
    )
    results = tuple(replace(b, warmup=options.bench_warmup) for b in parse_bench_json(output or ""))
    backends = parse_backend_loads(output or "")
    if failure is None:
        tests = {(bool(b.n_prompt), bool(b.n_gen)) for b in results}
        if not results:
            failure = "no JSON results in the output"
        elif (True, False) not in tests or (False, True) not in tests:
            failure = "the results lack a pp or a tg test"
        elif any(b.rate <= 0 for b in results):
            failure = "a test reports 0 tokens/s"
    failure = _cpu_backend_failure(exe, backends, rc) or failure
    seen = _seen(backends, bench=results)
    if failure:
        return _failed("bench", args, start, failure, log, rc, seen)
    return _run("bench", args, seconds, rc, None, log, seen)


# ---------------------------------------------------------------------------------------------------------------------
# The whole smoke test


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def host_facts(sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc")) -> SmokeHost:
    """The kernel and the GPU driver this smoke ran on, as the kernel tells them (for the release's figures)."""
    import platform

    driver = None
    amdgpu = sys_root / "module" / "amdgpu"
    nvidia = proc_root / "driver" / "nvidia" / "version"
    try:
        if (amdgpu / "version").is_file():
            driver = f"amdgpu {(amdgpu / 'version').read_text().strip()}"
        elif amdgpu.is_dir():
            driver = "amdgpu (in-kernel)"
        elif nvidia.is_file():
            driver = nvidia.read_text().splitlines()[0].strip()
    except OSError:
        pass
    return SmokeHost(kernel=platform.release(), driver=driver)


@dataclass(frozen=True)
class SmokeBundle:
    """The bundle a smoke test runs, as :func:`check_bundle` found it."""

    bundle: Path  # the bundle folder
    job_dir: Path | None  # its job folder (out/<job-id>), when it sits in one
    platform: Os
    targets: tuple[str, ...]
    job_id: str | None
    host: str  # this machine's OS


def check_bundle(bundle_path: Path, runs: Sequence[str] = ("cli", "server", "bench")) -> SmokeBundle:
    """The bundle at ``bundle_path`` (a bundle folder or its job folder), checked for what the smoke's ``runs`` need
    before anything else happens (the model's download above all): a folder, of this machine's OS (a Windows bundle
    on Linux: under wine), holding llama-cli, llama-server and llama-bench; a SmokeError in one line otherwise."""
    bundle, job_dir = locate_bundle(Path(bundle_path))
    if not bundle.is_dir():
        raise SmokeError(f"{bundle} is not a folder; pass a bundle made by rockbuild bundle (or its job folder)")
    platform, targets, job_id = bundle_facts(bundle, job_dir)
    host = host_os()
    # a Windows bundle runs on Linux under wine (rockbuild.process.launch_command): the end-to-end test's host
    under_wine = platform == "windows" and host == "linux" and find_wine(environment()) is not None
    if platform != host and not under_wine:
        also = " (or install wine here: apt install wine64)" if platform == "windows" and host == "linux" else ""
        raise SmokeError(
            f"{bundle} is a {platform} bundle and this machine runs {host}; smoke-test it on {platform}{also}"
        )
    missing = [
        name
        for name, run_name in (("llama-cli", "cli"), ("llama-server", "server"), ("llama-bench", "bench"))
        if run_name in runs and not _exe(bundle, name, platform).is_file()
    ]
    if missing:
        what = "is empty" if not any(bundle.iterdir()) else f"has no {', '.join(missing)}"
        raise SmokeError(
            f"{bundle} {what}; is it a llama.cpp bundle?",
            hint="pass the bundle folder rockbuild build or rockbuild bundle made (out/<job-id>/bundle), "
            "or its job folder",
        )
    return SmokeBundle(bundle, job_dir, platform, tuple(targets), job_id, host)


def run_smoke(
    bundle_path: Path,
    model: ModelFile,
    options: SmokeOptions | None = None,
    *,
    backends: Backends[SmokeBackend],
    report_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    kfd_topology: Path | None = None,
) -> SmokeReport:
    """Smoke-test the bundle at ``bundle_path`` (a bundle folder or a job folder holding ``bundle/``) with ``model``,
    as its backend (one of ``backends``: bundle.json's, else the one whose llama.cpp library it holds) says.

    Writes ``smoke.json`` (default: in the job folder) whatever the outcome and returns the report; the caller
    decides what a failure means (the CLI exits non-zero). A Windows bundle runs on Linux only under wine, a
    Linux bundle never on Windows.
    """
    options = options or SmokeOptions()
    found_bundle = check_bundle(Path(bundle_path), options.runs)
    bundle, job_dir, platform = found_bundle.bundle, found_bundle.job_dir, found_bundle.platform
    targets, job_id = found_bundle.targets, found_bundle.job_id
    check_gguf(model.path, need_tensors=True)  # a corrupt model fails here in one line, before any program runs
    if report_path is None:
        report_path = (job_dir / SMOKE_JSON) if job_dir else bundle.parent / f"{bundle.name}.{SMOKE_JSON}"
    logs = report_path.parent / "smoke-logs"
    logs.mkdir(parents=True, exist_ok=True)
    child, removed = smoke_env(env)
    started, t0 = _now(), time.monotonic()

    names = (p.name for p in bundle.iterdir())
    recorded = BundleRecord.read(bundle / "bundle.json")
    backend = backends.of_bundle(names, recorded.backend if recorded is not None else None, platform)
    # the devices this bundle can use here, whether a GPU run is expected, the device to pin (a Vulkan bundle: ggml
    # skips CPU-type devices and falls back to the CPU with exit code 0, so the bundle is asked what it sees and a
    # missing device fails in the command itself), and why no run may start
    found = backend.smoke_devices(
        _exe(bundle, "llama-cli", platform),
        targets,
        asked=options.expect_gpu,
        device=options.device,
        env=child,
        logs=logs,
        kfd_topology=kfd_topology,
    )
    devices, expect, reason, preflight = found.devices, found.expect, found.reason, found.preflight
    has_web_ui, no_web_ui_reason = web_ui_facts(job_dir)
    options = replace(options, device=found.device, web_ui=has_web_ui, web_ui_reason=no_web_ui_reason)
    runners = {
        "cli": ("llama-cli", run_cli),
        "server": ("llama-server", run_server),
        "bench": ("llama-bench", run_bench),
    }
    records = []
    for name in options.runs if preflight is None else ():
        exe_name, runner = runners[name]
        with console.step(f"smoke: {exe_name}") as step:
            record = runner(_exe(bundle, exe_name, platform), model, options, cwd=bundle, env=child, logs=logs)
            if not record.ok:
                step.fail()
        if not record.ok:
            console.warn(f"{exe_name}: {record.failure}; last lines of {record.log}:")
            for line in record.log_tail[-15:]:
                console.info(f"    {line}")
        records.append(record)
    if options.programs and preflight is None:
        with console.step(f"smoke: {len(options.programs)} programs") as step:
            record = run_programs(bundle, options.programs, options, platform=platform, env=child, logs=logs)
            if not record.ok:
                step.fail()
        for item in record.programs:
            if item["status"] == "failed":
                console.warn(f"{item['program']}: {item['failure']}; log: {item['log']}")
            elif item["status"] == "known":
                console.info(f"{item['program']}: known failure ({item['failure']}): {item['known_reason']}")
            elif item.get("note"):
                console.info(f"{item['program']}: {item['note']}")
        records.append(record)
    numerics: Numerics | None = None
    variants = (
        run_variants_step(bundle, model, options, platform=platform, env=child, logs=logs)
        if preflight is None
        else None
    )
    if preflight is None and options.numerics is not None and options.numerics.enabled:
        with console.step("smoke: numerics") as step:
            record, numerics = run_numerics_step(
                bundle, model, options, platform=platform, backend=backend.name, gpu=found.gpu(), env=child, logs=logs
            )
            if not record.ok:
                step.fail()
        if not record.ok:
            console.warn(f"numerics: {record.failure}; logs in {record.log}")
        records.append(record)
    # test-backend-ops names the default GPU too: ROCm0
    ops = (
        run_ops_step(
            bundle,
            job_dir,
            options,
            platform=platform,
            devices=replace(found, device=found.device or f"{backend.label}0"),
            env=child,
            logs=logs,
        )
        if preflight is None and options.ops is not None
        else None
    )
    if ops is not None and not ops.ok:  # a CPU fault fails the op test too: say whose numbers are suspect
        ops = ops.against_cpu_reference(cpu_own_failures(numerics, variants))
        if ops.suspect:
            console.warn(f"ops: {ops.detail}")
    loads = [r.load for r in records if r.load is not None]
    bench = tuple(b for r in records for b in r.bench)
    verdict = gpu_verdict(
        loads,
        expect_gpu=expect,
        texts=[r.text for r in records if r.generated],
        bench=bench,
        default=backend.name,
        backends=backends,
    )
    failures = [preflight] if preflight else []
    failures += [f"{r.name}: {r.failure}" for r in records if not r.ok]
    failures += variants.failures if variants is not None else ()
    failures += [f"ops: {ops.detail}"] if ops is not None and not ops.ok else []
    failures += [verdict.summary or ""] if not verdict.ok else []
    smoke = SmokeRecord(
        schema=SCHEMA,
        tool="rockbuild",
        rockbuild_version=__version__,
        ok=not failures,
        failures=tuple(failures),
        bundle=str(bundle),
        platform=platform,
        targets=targets,
        job_id=job_id,
        model=model,
        device=options.device,
        preflight=preflight,
        expect_gpu=ExpectGpu(asked=options.expect_gpu, reason=reason, devices_found=tuple(devices)),
        gpu=verdict,
        runs={r.name or "": r for r in records},
        bench=bench,
        backends=bundle_backends(bundle, records),
        texts_agree=texts_agree(records),
        numerics=(numerics or Numerics.skipped(preflight or "not run", logs / "numerics")).to_dict(),
        cpu_variants=variants or SmokeCpuVariants.skipped(preflight or "not run"),
        ops=(ops or Ops.not_checked(preflight or "not run")).to_dict(),
        environment_removed=tuple(removed),
        started=started,
        finished=_now(),
        seconds=round(time.monotonic() - t0, 3),
        host=host_facts(),
    )
    smoke.write(report_path, ensure_ascii=False)
    return SmokeReport(smoke, model, report_path, ops=ops)


def cpu_own_failures(numerics: Numerics | None, variants: SmokeCpuVariants | None) -> list[str]:
    """The CPU's own checks that failed: its perplexity against its baseline (the numerics' ``cpu``) and each CPU
    variant alone against its reference. test-backend-ops takes the CPU backend as its reference, so when these
    failed, an op test failure is the CPU's."""
    found = []
    cpu = (numerics.checks.get("cpu") or {}) if numerics is not None else {}
    if cpu.get("result") == "failed":  # its first clause: "perplexity 25.9 is +4.58 % from the baseline ..."
        found.append(f"cpu: {str(cpu.get('detail')).split(' (')[0]}")
    return found + list(variants.failures if variants is not None else ())


def bundle_backends(bundle: Path, runs: Sequence[SmokeRun]) -> SmokeBackends:
    """What llama-bench loaded (a real batch ran on its CPU variant), else llama-cli, and the CPU variant modules the
    bundle ships."""
    loaded = {r.name: r.backends for r in runs if r.backends is not None and r.backends.loaded}
    shipped = cpu_variant_files(p.name for p in bundle.iterdir()) if bundle.is_dir() else ()
    return replace(loaded.get("bench") or loaded.get("cli") or SmokeBackends(), shipped=shipped, keys=())


def texts_agree(runs: Sequence[SmokeRun]) -> bool | None:
    """llama-cli and llama-server got the same prompt at temperature 0: the same text is expected (recorded, not
    required: GPU kernels need not be bit-identical across batch shapes)."""
    texts = {r.name: r.text for r in runs if r.text}
    return texts["cli"].strip() == texts["server"].strip() if {"cli", "server"} <= set(texts) else None


def gpu_verdict(
    loads: Sequence[LoadReport],
    *,
    backends: Backends[SmokeBackend],
    expect_gpu: bool | None,
    texts: Sequence[str | None] = (),
    backend: str | None = None,
    bench: Sequence[BenchFigure] = (),
    default: str | None = None,
) -> SmokeGpu:
    """Judge GPU use from the model buffers of every run that loaded the model (cli, server), by ``backend``'s rules
    (one of ``backends``: :meth:`.backend.SmokeBackend.smoke_verdict`): ``gpu``, ``partial``, ``cpu`` (an
    ``offloaded N/N`` line next to CPU or RPC buffers is noted, never believed) or ``unknown`` (no buffer lines at all:
    no ``-lv 4`` log).

    ``backend`` None: the backend the logs show at work (a Vulkan device, say), else ``default`` (the bundle's;
    None: the first of ``backends``, rockbuild's default, ROCm).
    """
    if backend is not None:
        judge_by = backends.get(backend)
    else:
        every = backends.all()
        shown = [b for b in every if b.in_logs(loads)]
        judge_by = shown[0] if shown else backends.get(default) if default else every[0]
    return judge_by.smoke_verdict(loads, expect_gpu=expect_gpu, texts=texts, bench=bench)
