"""Every op on the GPU: llama.cpp's own op-level test, ``test-backend-ops``, run against the bundle's backend.

The ``ops`` step of the smoke (:mod:`rockbuild.smoke.runner`, after numerics): :func:`find_op_test` finds the binary
the job's build left in ``<job>/tools/`` (never shipped), :func:`op_test_folder` runs it from a folder of links to
the bundle so that ggml loads the bundle's own backend modules, and :func:`run_ops` runs ``test`` (a real GPU: every
case; lavapipe/llvmpipe: smoke.yaml's ``ops.subset``) and ``support``, parsed by :func:`parse_test_output` and
:func:`parse_support_output` into :class:`Ops` (smoke.json's ``ops``). One failed case, a crash, a timeout or an
empty subset fails the smoke; no GPU device or no binary is *not checked*, never a pass. :func:`parse_ops_config`
reads smoke.yaml's ``ops``.

docs/numerics.md ("Every op: test-backend-ops") explains the modes, the subset and its figures."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rockbuild.core.data import YList, check_keys, kind_of, seconds, where, whole
from rockbuild.core.errors import ConfigError
from rockbuild.core.programs import OP_TEST_PROGRAM
from rockbuild.core.record import SECONDS, Record
from rockbuild.core.records import BuildRecord
from rockbuild.core.vocabulary import GpuDevice
from rockbuild.smoke.probe import exit_reason, run_program

PASSED, FAILED, NOT_CHECKED = "passed", "failed", "not checked"
MODES = ("full", "subset", "none")
DEVICE_KINDS = ("gpu", "software")  # a real GPU; a Vulkan device on the CPU (lavapipe)
CONFIG_KEYS = ("enabled", "mode", "software_devices", "jobs", "timeouts", "subset")
TIMEOUT_KEYS = ("full", "op", "support")
TOOLS_DIR = "tools"  # <job>/tools/: where the build puts it, beside bundle/ and never inside it
MAX_LISTED = 100  # failed cases kept in smoke.json (their count is always whole)


# ---------------------------------------------------------------------------------------------------------------------
# Configuration: smoke.yaml's ``ops``


@dataclass(frozen=True)
class SubsetEntry:
    """One run of the subset: ``-o OP`` and, when given, ``-p PARAMS`` (a regex on the case's parameters)."""

    op: str
    params: str = ""

    def args(self) -> list[str]:
        return ["-o", self.op, *(["-p", self.params] if self.params else [])]

    def label(self) -> str:
        return self.op + (f" -p '{self.params}'" if self.params else "")


@dataclass(frozen=True)
class OpsConfig:
    """What the ops step runs on each kind of device, and for how long at most."""

    enabled: bool = True
    mode: Mapping[str, str] = field(default_factory=lambda: {"gpu": "full", "software": "subset"})
    # a device whose description contains one of these (case-insensitive) is a software one
    software_devices: tuple[str, ...] = ("llvmpipe", "lavapipe", "swiftshader")
    jobs: int = 1  # test-backend-ops -j in full mode (capped at this machine's CPUs)
    timeouts: Mapping[str, float] = field(default_factory=lambda: {"full": 1800.0, "op": 300.0, "support": 120.0})
    subset: tuple[SubsetEntry, ...] = ()

    def kind_of(self, description: str) -> str:
        low = description.lower()
        return "software" if any(name.lower() in low for name in self.software_devices) else "gpu"


def parse_ops_config(node: Any, path: Path | str = "smoke.yaml") -> OpsConfig:
    """smoke.yaml's ``ops`` section (None: the defaults, with no subset); a mistake is one ConfigError naming
    ``file:line`` and the key."""
    defaults = OpsConfig()
    if node is None:
        return defaults
    if not isinstance(node, Mapping):
        raise ConfigError(
            f"{where(path, node)}: ops must be a mapping (mode, subset, timeouts...), not {kind_of(node)}"
        )
    check_keys(path, node, CONFIG_KEYS, "ops")
    values: dict[str, Any] = {}
    if "enabled" in node:
        if not isinstance(node["enabled"], bool):
            raise ConfigError(
                f"{where(path, node, 'enabled')}: ops.enabled must be true or false, not {node['enabled']!r}"
            )
        values["enabled"] = node["enabled"]
    if "mode" in node:
        mode = node["mode"]
        if not isinstance(mode, Mapping):
            raise ConfigError(
                f"{where(path, node, 'mode')}: ops.mode must map a device kind "
                f"({', '.join(DEVICE_KINDS)}) to {'|'.join(MODES)}, not {mode!r}"
            )
        check_keys(path, mode, DEVICE_KINDS, "ops.mode")
        for kind, value in mode.items():
            if value not in MODES:
                raise ConfigError(
                    f"{where(path, mode, kind)}: ops.mode.{kind} must be one of {', '.join(MODES)}, not {value!r}"
                )
        values["mode"] = {**defaults.mode, **{str(k): str(v) for k, v in mode.items()}}
    if "software_devices" in node:
        names = node["software_devices"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(
                f"{where(path, node, 'software_devices')}: ops.software_devices must be a list of "
                f"device description words such as [llvmpipe], not {names!r}"
            )
        values["software_devices"] = tuple(names)
    if "jobs" in node:
        values["jobs"] = whole(path, node, "jobs", defaults.jobs, "ops", least=1)
    if "timeouts" in node:
        timeouts = node["timeouts"]
        if not isinstance(timeouts, Mapping):
            raise ConfigError(
                f"{where(path, node, 'timeouts')}: ops.timeouts must be a mapping such as "
                f"{{full: 1800, op: 300, support: 120}}, not {timeouts!r}"
            )
        check_keys(path, timeouts, TIMEOUT_KEYS, "ops.timeouts")
        values["timeouts"] = {
            **defaults.timeouts,
            **{str(k): seconds(path, timeouts, k, 0.0, "ops.timeouts") for k in timeouts},
        }
    if "subset" in node:
        values["subset"] = _parse_subset(node["subset"], path, node)
    return OpsConfig(**{**defaults.__dict__, **values})


def _parse_subset(items: Any, path: Path | str, parent: Any) -> tuple[SubsetEntry, ...]:
    if not isinstance(items, list):
        raise ConfigError(
            f"{where(path, parent, 'subset')}: ops.subset must be a list of {{op: NAME, params: REGEX}}, "
            f"not {kind_of(items)}"
        )
    out: list[SubsetEntry] = []
    for i, item in enumerate(items):
        at = where(path, items, i) if isinstance(items, YList) else f"{path}: ops.subset[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(
                f"{at}: each ops.subset entry must be a mapping {{op: NAME, params: REGEX}}, not {item!r}"
            )
        check_keys(path, item, ("op", "params"), "ops.subset[]")
        op = item.get("op")
        if not isinstance(op, str) or not re.fullmatch(r"[A-Z][A-Z0-9_]*", op):
            raise ConfigError(f"{at}: ops.subset[{i}].op must be a ggml op name such as MUL_MAT, not {op!r}")
        params = item.get("params", "")
        if not isinstance(params, str):
            raise ConfigError(f"{at}: ops.subset[{i}].params must be a regular expression (a string), not {params!r}")
        try:
            re.compile(params)
        except re.error as exc:
            raise ConfigError(f"{at}: ops.subset[{i}].params {params!r} is not a regular expression ({exc})") from None
        out.append(SubsetEntry(op, params))
    return tuple(out)


# ---------------------------------------------------------------------------------------------------------------------
# test-backend-ops' console output

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# "  MUL_MAT(type_a=q4_0,...): OK"; a failed compare prints its error first, on the same line:
# "[MUL_MAT] NMSE = 0.069 > 0.0005   MUL_MAT(type_a=q4_0,...): FAIL"
_CASE = re.compile(r"(?:^|\s)(?P<op>[A-Z][A-Z0-9_]*)\((?P<params>[^()]*)\): (?P<rest>.*)$")
_SUMMARY = re.compile(r"^\s*(\d+)/(\d+) tests passed")
_BACKEND = re.compile(r"^\s*Backend (\d+)/(\d+): (\S+)")
_SKIPPING = re.compile(r"^\s*Skipping")


@dataclass
class OpCounts:
    passed: int = 0
    failed: int = 0
    not_supported: int = 0

    @property
    def cases(self) -> int:
        return self.passed + self.failed + self.not_supported

    def add(self, other: OpCounts) -> None:
        self.passed += other.passed
        self.failed += other.failed
        self.not_supported += other.not_supported

    def to_dict(self) -> dict[str, int]:
        return {"passed": self.passed, "failed": self.failed, "not_supported": self.not_supported}


@dataclass
class TestOutput:
    """What one ``test-backend-ops test`` run printed: counts per op, the failed cases' full strings, the last case
    that finished (a crash is in the one after it), the summary line, and whether the device was tested at all."""

    ops: dict[str, OpCounts] = field(default_factory=dict)
    failed_cases: list[str] = field(default_factory=list)
    last_case: str | None = None
    summary: tuple[int, int] | None = None  # "N/M tests passed"
    tested: list[str] = field(default_factory=list)  # the backends it initialised (not "Skipping")
    errors: list[str] = field(default_factory=list)  # the NMSE/ERR lines of failed cases

    def totals(self) -> OpCounts:
        total = OpCounts()
        for counts in self.ops.values():
            total.add(counts)
        return total


def _status(rest: str) -> str | None:
    rest = rest.strip()
    if rest.startswith("not supported") or rest == "NOT SUPPORTED":
        return "not_supported"
    if rest.endswith("FAIL"):
        return "failed"
    if rest.endswith("OK") or rest == "SUPPORTED":
        return "passed"
    return None


def parse_test_output(text: str) -> TestOutput:
    """The cases of a ``test-backend-ops test`` console output (colour codes, the loader's lines and stderr mixed in
    are ignored); the "Failing tests:" list, when the run got that far, adds the cases whose lines were mangled."""
    out = TestOutput()
    failing: list[str] = []
    in_failing = False
    pending: tuple[str, str] | None = None  # a case line whose status came on a later line (stderr in between)
    backend_line: str | None = None
    for raw in text.splitlines():
        line = _ANSI.sub("", raw)
        if in_failing:
            stripped = line.strip()
            if stripped and re.fullmatch(r"[A-Z][A-Z0-9_]*\(.*\)", stripped):
                failing.append(stripped)
                continue
            in_failing = False
        if line.strip() == "Failing tests:":
            in_failing = True
            continue
        if m := _BACKEND.match(line):
            backend_line = m.group(3)
            continue
        if backend_line is not None and line.strip():
            if not _SKIPPING.match(line) and backend_line not in out.tested:
                out.tested.append(backend_line)
            backend_line = None
        if m := _SUMMARY.match(line):
            out.summary = (int(m.group(1)), int(m.group(2)))
            continue
        m = _CASE.search(line)
        if m is not None:
            status = _status(m.group("rest"))
            if status is None:
                pending = (m.group("op"), m.group("params"))
                continue
            _count(out, m.group("op"), m.group("params"), status, line[: m.start("op")].strip())
            pending = None
            continue
        if pending is not None and line.strip() in ("OK", "FAIL"):
            _count(out, *pending, "passed" if line.strip() == "OK" else "failed", "")
            pending = None
    for case in failing:  # a failed case whose own line was mangled (-j: workers' printf calls interleave)
        if case not in out.failed_cases:
            op = case.split("(", 1)[0]
            out.ops.setdefault(op, OpCounts()).failed += 1
            out.failed_cases.append(case)
    return out


def _count(out: TestOutput, op: str, params: str, status: str, error: str) -> None:
    counts = out.ops.setdefault(op, OpCounts())
    case = f"{op}({params})"
    if status == "passed":
        counts.passed += 1
    elif status == "failed":
        counts.failed += 1
        out.failed_cases.append(case)
        if error:
            out.errors.append(f"{case}: {error}")
    else:
        counts.not_supported += 1
    if status != "not_supported":
        out.last_case = case


def parse_support_output(text: str) -> dict[str, OpCounts]:
    """``test-backend-ops support``'s list, per op: cases supported (``passed``) and not (``not_supported``)."""
    ops: dict[str, OpCounts] = {}
    for raw in text.splitlines():
        line = _ANSI.sub("", raw)
        m = _CASE.search(line)
        if m is None:
            continue
        rest = m.group("rest").strip()
        counts = ops.setdefault(m.group("op"), OpCounts())
        if rest == "NOT SUPPORTED" or rest.startswith("not supported"):
            counts.not_supported += 1
        elif rest == "SUPPORTED":
            counts.passed += 1
    return ops


def fallback_summary(support: Mapping[str, OpCounts]) -> dict[str, Any]:
    """The ops the backend leaves to the CPU, per op name (``{op: {not_supported, cases}}``, most cases first), and
    the totals: what the notes' "ops that fall back to the CPU" line says, not the 20,000-line list."""
    ops = {
        op: {"not_supported": c.not_supported, "cases": c.cases}
        for op, c in sorted(support.items(), key=lambda kv: (-kv[1].not_supported, kv[0]))
        if c.not_supported
    }
    return {
        "cases": sum(c.cases for c in support.values()),
        "not_supported": sum(c.not_supported for c in support.values()),
        "ops_listed": len(support),
        "ops": ops,
    }


# ---------------------------------------------------------------------------------------------------------------------
# The binary and its folder


def op_test_file(platform: str) -> str:
    return f"{OP_TEST_PROGRAM}.exe" if platform == "windows" else OP_TEST_PROGRAM


def find_op_test(job_dir: Path | None, platform: str, build: BuildRecord | None = None) -> tuple[Path | None, str]:
    """(the job's test-backend-ops, "") or (None, why there is none): build.json's ``test_backend_ops`` says where
    the build put it or why it did not; a job folder from before that record is looked into (``tools/``)."""
    if job_dir is None:
        return None, f"no job folder beside the bundle (the build puts {OP_TEST_PROGRAM} in <job>/{TOOLS_DIR}/)"
    recorded = build.test_backend_ops if build is not None else None
    if recorded is not None and recorded.path:
        tool = job_dir / recorded.path
        if tool.is_file():
            return tool, ""
        return None, (
            f"{tool} is missing (build.json says the build made it; the job folder came without {TOOLS_DIR}/?)"
        )
    tool = job_dir / TOOLS_DIR / op_test_file(platform)
    if tool.is_file():
        return tool, ""
    if recorded is not None:
        return None, f"the build did not make {OP_TEST_PROGRAM}: {recorded.reason or recorded.status}"
    return None, f"no {TOOLS_DIR}/{op_test_file(platform)} in {job_dir} and build.json does not record it"


def op_test_folder(bundle: Path, tool: Path, dest: Path) -> Path:
    """``dest``: a symbolic link to every file of the bundle and a copy of ``tool``. ggml looks for its backend
    modules in the folder of the running executable, which the kernel tells by its real path: a link to the binary
    would load from the job's tools/ folder, so the binary is copied; the bundle's files only need to be found."""
    dest.mkdir(parents=True)
    for path in bundle.iterdir():
        if path.name == tool.name:
            continue
        (dest / path.name).symlink_to(path.absolute(), target_is_directory=path.is_dir())
    copy = Path(shutil.copy2(tool, dest / tool.name))
    # a CI artifact drops the exec bits (upload-artifact): the copy is this step's own program, so it is made runnable
    copy.chmod(copy.stat().st_mode | 0o755)
    return dest


# ---------------------------------------------------------------------------------------------------------------------
# The step


@dataclass(frozen=True, kw_only=True)
class OpRun(Record):
    """One run of test-backend-ops: its arguments, how it ended, its cases."""

    label: str  # "full", "MUL_MAT -p '...'", "support"
    args: tuple[str, ...]
    returncode: int | None
    seconds: float = field(metadata=SECONDS)
    cases: int = 0
    failure: str | None = None
    log: str


@dataclass(frozen=True)
class Ops:
    """The step's result: passed | failed | not checked (with why), the device and mode, the counts per op, the
    failed cases, what the backend does not support."""

    result: str
    detail: str
    device: str | None = None
    description: str = ""
    kind: str | None = None  # gpu | software
    mode: str | None = None  # full | subset
    ops: Mapping[str, OpCounts] = field(default_factory=dict)
    failed_cases: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    runs: tuple[OpRun, ...] = ()
    fallback: Mapping[str, Any] | None = None
    tool: str | None = None
    seconds: float = 0.0
    suspect: str | None = None  # "cpu": the CPU's own checks failed too, so its reference numbers are the suspect

    @classmethod
    def not_checked(cls, why: str, **extra: Any) -> Ops:
        return cls(NOT_CHECKED, why, **extra)

    def against_cpu_reference(self, cpu_failures: Sequence[str]) -> Ops:
        """This failed run told again when the CPU's own checks failed as well (``cpu_failures``): test-backend-ops
        judges the device against the CPU backend, so a CPU fault shows up as the device's failed cases; the
        failure is reported as the CPU reference's."""
        if self.result != FAILED or not cpu_failures:
            return self
        device = self.device or "the GPU"
        return replace(
            self,
            suspect="cpu",
            detail=(
                f"the CPU reference is suspect, not {device}: the CPU's own checks failed ({cpu_failures[0]}), and "
                f"test-backend-ops judges {device} against the CPU: {self.detail}"
            ),
        )

    @property
    def ok(self) -> bool:
        return self.result != FAILED

    def totals(self) -> OpCounts:
        total = OpCounts()
        for counts in self.ops.values():
            total.add(counts)
        return total

    def summary(self) -> dict[str, Any]:
        """What a release keeps (manifest.json, the notes, perf): the verdict, the totals, a few failed cases, the ops
        that fall back to the CPU by name."""
        totals = self.totals()
        fallback = self.fallback or {}
        return {
            "result": self.result,
            "detail": self.detail,
            "device": self.device,
            "mode": self.mode,
            **totals.to_dict(),
            "cases": totals.cases,
            "seconds": round(self.seconds, 1),
            "failed_cases": list(self.failed_cases[:5]),
            "fallback_ops": {op: v["not_supported"] for op, v in (fallback.get("ops") or {}).items()},
        }

    def to_dict(self) -> dict[str, Any]:
        totals = self.totals()
        return {
            "result": self.result,
            "detail": self.detail,
            "device": self.device,
            "description": self.description,
            "kind": self.kind,
            "mode": self.mode,
            "tool": self.tool,
            "seconds": round(self.seconds, 3),
            "totals": {**totals.to_dict(), "cases": totals.cases},
            "ops": {op: c.to_dict() for op, c in sorted(self.ops.items())},
            "failed_cases": list(self.failed_cases[:MAX_LISTED]),
            "failed_count": len(self.failed_cases),
            "failures": list(self.failures),
            "runs": [r.to_dict() for r in self.runs],
            "fallback": dict(self.fallback) if self.fallback is not None else None,
            "summary": self.summary(),
            **({"suspect": self.suspect} if self.suspect else {}),
        }

    def render_lines(self) -> list[str]:
        mark = {PASSED: "ok", FAILED: "FAIL"}.get(self.result, "skip")
        lines = [f"  [{mark}] ops ({OP_TEST_PROGRAM}) in {self.seconds:.1f}s: {self.detail}"]
        failing = [(op, c) for op, c in sorted(self.ops.items()) if c.failed]
        for op, c in failing[:10]:
            lines.append(f"         {op}: {c.failed} failed, {c.passed} passed")
        fallback = (self.fallback or {}).get("ops") or {}
        if fallback:
            top = ", ".join(f"{op} ({v['not_supported']})" for op, v in list(fallback.items())[:6])
            lines.append(
                f"         not supported on {self.device} (the CPU runs them): {top}"
                + (f" and {len(fallback) - 6} more ops" if len(fallback) > 6 else "")
            )
        return lines


def _detail(counts: OpCounts, device: str, mode: str, seconds: float) -> str:
    return (
        f"{counts.passed} cases passed, {counts.failed} failed, {counts.not_supported} not supported on {device} "
        f"({mode} test mode) in {seconds:.0f}s"
    )


def run_ops(
    config: OpsConfig,
    *,
    bundle: Path,
    tool: Path,
    gpu: GpuDevice,
    env: Mapping[str, str],
    logs: Path,
    platform: str = "linux",
    progress: Callable[[str], None] | None = None,
) -> Ops:
    """Run test-backend-ops from a folder of the bundle's files on ``gpu`` (``Vulkan0``, ``ROCm0``): the full test
    mode or the subset, by the kind its description tells, then ``support`` mode. ``logs`` gets one log per run."""
    start = time.monotonic()
    device, description = gpu.name, gpu.description
    kind = config.kind_of(description)
    mode = config.mode.get(kind, "none")
    common: dict[str, Any] = {
        "device": device,
        "description": description,
        "kind": kind,
        "mode": mode,
        "tool": str(tool),
    }
    if not config.enabled or mode == "none":
        why = "ops.enabled is false" if not config.enabled else f"ops.mode.{kind} is none"
        return Ops.not_checked(f"{why} in smoke.yaml", **common)
    if mode == "subset" and not config.subset:
        return Ops.not_checked(
            f"the {kind} device {device} gets the subset and ops.subset is empty in smoke.yaml", **common
        )
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rockbuild-ops-"))
    try:
        folder = op_test_folder(bundle, tool, work / "bundle")
        exe = folder / tool.name
        child = dict(env)
        if platform != "windows":
            # the binary's run path names the build tree it was linked in; the bundle's libraries come first
            child["LD_LIBRARY_PATH"] = str(folder)
        plan: list[tuple[str, list[str], float]]
        if mode == "full":
            jobs = max(1, min(config.jobs, os.cpu_count() or 1))
            plan = [("full", ["test", "-b", device, *(["-j", str(jobs)] if jobs > 1 else [])], config.timeouts["full"])]
        else:
            plan = [(e.label(), ["test", "-b", device, *e.args()], config.timeouts["op"]) for e in config.subset]
        ops: dict[str, OpCounts] = {}
        failed: list[str] = []
        failures: list[str] = []
        runs: list[OpRun] = []
        for n, (label, args, timeout) in enumerate(plan):
            if progress is not None:
                progress(f"    {OP_TEST_PROGRAM} {' '.join(args)}")
            log = logs / f"test-{n:02d}.log"
            output, rc, problem, seconds = run_program(
                "ops", [str(exe), *args], cwd=folder, env=child, timeout=timeout, log=log
            )
            parsed = parse_test_output(output or "")
            for op, counts in parsed.ops.items():
                ops.setdefault(op, OpCounts()).add(counts)
            failed.extend(parsed.failed_cases)
            cases = parsed.totals().cases
            failure = _run_failure(label, parsed, rc, problem, device, timeout, output or "")
            if failure is not None:
                failures.append(failure)
            runs.append(
                OpRun(
                    label=label,
                    args=tuple(args),
                    returncode=rc,
                    seconds=seconds,
                    cases=cases,
                    failure=failure,
                    log=str(log),
                )
            )
        support_log = logs / "support.log"
        output, rc, problem, seconds = run_program(
            "ops",
            [str(exe), "support", "-b", device],
            cwd=folder,
            env=child,
            timeout=config.timeouts["support"],
            log=support_log,
        )
        support = parse_support_output(output or "")
        fallback = fallback_summary(support) if support and problem is None else None
        runs.append(
            OpRun(
                label="support",
                args=("support", "-b", device),
                returncode=rc,
                seconds=seconds,
                cases=sum(c.cases for c in support.values()),
                failure=problem,
                log=str(support_log),
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds = time.monotonic() - start
    counts = OpCounts()
    for c in ops.values():
        counts.add(c)
    if failures:
        first = failures[0] + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else "")
        return Ops(
            FAILED,
            first,
            ops=ops,
            failed_cases=tuple(failed),
            failures=tuple(failures),
            runs=tuple(runs),
            fallback=fallback,
            seconds=seconds,
            **common,
        )
    return Ops(
        PASSED,
        _detail(counts, device, mode, seconds),
        ops=ops,
        failed_cases=(),
        runs=tuple(runs),
        fallback=fallback,
        seconds=seconds,
        **common,
    )


def _run_failure(
    label: str, parsed: TestOutput, rc: int | None, problem: str | None, device: str, timeout: float, output: str
) -> str | None:
    """Why one test run fails the step, in one line naming the op and its parameters; None when it passed."""
    what = "" if label == "full" else f" -o {label}"
    after = f" after {parsed.last_case}, the last case to finish" if parsed.last_case else " before any case finished"
    if problem is not None and "timed out" in problem:
        return f"{OP_TEST_PROGRAM}{what} timed out after {timeout:.0f}s{after}"
    if rc is not None and rc < 0:
        return f"{OP_TEST_PROGRAM}{what} was {exit_reason(rc)}{after}"
    if parsed.failed_cases:
        total = parsed.totals()
        first = parsed.failed_cases[0]
        more = f" (and {len(parsed.failed_cases) - 1} more)" if len(parsed.failed_cases) > 1 else ""
        return f"{len(parsed.failed_cases)} of {total.passed + total.failed} cases failed on {device}: {first}{more}"
    if device not in parsed.tested:
        last = next((ln.strip() for ln in reversed(output.splitlines()) if ln.strip()), "no output")
        return (
            f"{OP_TEST_PROGRAM} did not test {device} (the devices it has: "
            f"{_devices(output) or 'none'}; last line: {_ANSI.sub('', last)[:200]})"
        )
    if rc not in (0, None) or problem is not None:
        last = next((ln.strip() for ln in reversed(output.splitlines()) if ln.strip()), "no output")
        return f"{OP_TEST_PROGRAM}{what} ended with {problem or exit_reason(rc or 0)}: {_ANSI.sub('', last)[:200]}"
    if parsed.totals().cases == 0:
        return (
            f"{OP_TEST_PROGRAM}{what} selected no case on {device}: the op or its params regex matches nothing "
            "in this llama.cpp (smoke.yaml's ops.subset)"
        )
    return None


def _devices(output: str) -> str:
    return ", ".join(m.group(3) for m in (_BACKEND.match(_ANSI.sub("", ln)) for ln in output.splitlines()) if m)
