"""Reading what llama-cli, llama-server and llama-bench print: buffers, offload lines, timings, replies, bench JSON.

The GPU verdict never trusts ``offloaded N/N layers to GPU``: llama.cpp prints it whenever any offload device exists,
an RPC client on a CPU-only build included. It comes from where the model buffers went (``ROCm0 model buffer size``)
and from the generated text itself. ``</think>`` is never a criterion: with ``-v`` the log echoes the chat template.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rockbuild.core.records import BenchFigure, Buffer, LoadReport, SmokeBackends, SmokeGpu, VulkanLoad

# "0.00.487.887 I " (default), "I " (--no-log-timestamps) or nothing (--no-log-prefix)
LOG_PREFIX = re.compile(r"^(?:\d+\.\d+\.\d+\.\d+ )?[IWEDT] (?=\S)")
_TIMESTAMP_ANYWHERE = re.compile(r"\d+\.\d{2}\.\d{3}\.\d{3} [IWEDT] ")
_BUFFER = re.compile(r"load_tensors:\s+(?P<device>\S+)\s+model buffer size\s*=\s*(?P<mib>[0-9.]+)\s*MiB")
_OFFLOADED = re.compile(r"offloaded (?P<n>\d+)/(?P<m>\d+) layers to GPU")
_LOADING = re.compile(r"load_tensors: loading model tensors")
# one level of nested parentheses: "Vulkan0 (llvmpipe (LLVM 22.1.8, 256 bits))"
_USING_DEVICE = re.compile(r"using device (?P<device>\S+) \((?P<desc>(?:[^()]|\([^()]*\))*)\)")
_ROCM_DEVICE = re.compile(r"Device (?P<index>\d+): (?P<desc>.+?), (?P<isa>gfx[0-9a-f]+)")
_CLI_RATES = re.compile(r"\[ Prompt: (?P<prompt>[0-9.]+|inf) t/s \| Generation: (?P<gen>[0-9.]+|inf) t/s \]")
_SLOT_EVAL = re.compile(
    r"print_timing:.*?\|\s+eval time =\s*(?P<ms>[0-9.]+) ms /\s*(?P<n>\d+) tokens"
    r" \(\s*[0-9.]+ ms per token,\s*(?P<tps>[0-9.]+|inf) tokens per second\)"
)
_PERF_EVAL = re.compile(
    r"common_perf_print:\s+eval time =\s*(?P<ms>[0-9.]+) ms /\s*(?P<n>\d+) runs"
    r"\s+\(\s*[0-9.]+ ms per token,\s*(?P<tps>[0-9.]+|inf) tokens per second\)"
)


def strip_log_prefix(line: str) -> str:
    return LOG_PREFIX.sub("", line.rstrip("\r\n"), count=1)


def _number(text: str) -> float | None:
    return None if text == "inf" else float(text)


def parse_load(text: str) -> LoadReport:
    """Buffers and the offload line of the last model load in ``text``; devices seen anywhere."""
    blocks: list[tuple[list[Buffer], tuple[int, int] | None]] = []
    current: list[Buffer] = []
    offloaded: tuple[int, int] | None = None
    devices: list[str] = []
    isas: list[str] = []
    started = False
    for raw in text.splitlines():
        line = strip_log_prefix(raw)
        if _LOADING.search(line):
            if started and (current or offloaded):
                blocks.append((current, offloaded))
            current, offloaded, started = [], None, True
            continue
        if m := _OFFLOADED.search(line):
            if current and offloaded is not None:  # a second load without a "loading model tensors" line
                blocks.append((current, offloaded))
                current = []
            offloaded, started = (int(m["n"]), int(m["m"])), True
        elif m := _BUFFER.search(line):
            current.append(Buffer(m["device"], float(m["mib"])))
            started = True
        elif m := _USING_DEVICE.search(line):
            devices.append(f"{m['device']} ({m['desc']})")
        elif m := _ROCM_DEVICE.search(line):
            isas.append(m["isa"])
    if current or offloaded:
        blocks.append((current, offloaded))
    real = [b for b in blocks if any(buf.mib > 0 for buf in b[0])] or blocks
    buffers, last_offload = real[-1] if real else ([], None)
    return LoadReport(
        tuple(buffers),
        last_offload,
        tuple(dict.fromkeys(devices)),
        tuple(dict.fromkeys(isas)),
        parse_vulkan(text),
        keys=LoadReport.KEYS,
    )


# ---------------------------------------------------------------------------------------------------------------------
# llama-cli


@dataclass(frozen=True)
class Generation:
    text: str | None
    tokens: int | None
    tokens_per_second: float | None
    prompt_tokens_per_second: float | None = None


def parse_cli(output: str, prompt: str | None = None) -> Generation:
    """The reply of ``llama-cli -st``: the text between the echoed ``> prompt`` and the ``[ Prompt: ... ]`` line,
    the generation rate of that line, and the token count of the server slot's timing (``-lv 4``).

    On a merged stdout+stderr stream a log line can start in the middle of a reply line (stdout has no newline
    there yet); the text before it is kept and the next text fragment continues it."""
    text_lines: list[str] | None = None
    done = join_next = False
    prompt_rate = gen_rate = slot_rate = None
    tokens = None
    for raw in output.replace("\b", "").splitlines():
        if m := _SLOT_EVAL.search(raw):
            tokens, slot_rate = int(m["n"]), _number(m["tps"])
        if m := _CLI_RATES.search(raw):
            prompt_rate, gen_rate, done = _number(m["prompt"]), _number(m["gen"]), True
            continue
        cut = _TIMESTAMP_ANYWHERE.search(raw)
        if done or (cut is not None and cut.start() == 0):
            continue  # a whole log line of the embedded server
        text = raw if cut is None else raw[: cut.start()]
        if text_lines is None:
            if text.startswith("> ") and (prompt is None or text[2:].strip() == prompt.strip()):
                text_lines = []
            continue
        if join_next and text_lines:
            text_lines[-1] += text
        else:
            text_lines.append(text)
        join_next = cut is not None
    text_out = "\n".join(text_lines).strip() if text_lines is not None else None
    return Generation(text_out, tokens, gen_rate if gen_rate is not None else slot_rate, prompt_rate)


def parse_completion_perf(output: str) -> Generation:
    """Token count and rate from llama-completion's ``common_perf_print: eval time`` line (text is not parsed)."""
    for raw in reversed(output.splitlines()):
        if m := _PERF_EVAL.search(raw):
            return Generation(None, int(m["n"]), _number(m["tps"]))
    return Generation(None, None, None)


# ---------------------------------------------------------------------------------------------------------------------
# llama-server


def parse_server_reply(reply: Any) -> Generation:
    """An OpenAI-style ``/v1/chat/completions`` answer: content, completion tokens, llama.cpp's timings."""
    if not isinstance(reply, dict):
        return Generation(None, None, None)
    choices = reply.get("choices") or []
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(message, dict) and not content and message.get("reasoning_content"):
        content = message.get("reasoning_content")  # a thinking model may answer only there at small -n
    usage: dict[str, Any] = reply["usage"] if isinstance(reply.get("usage"), dict) else {}
    timings: dict[str, Any] = reply["timings"] if isinstance(reply.get("timings"), dict) else {}
    tokens = usage.get("completion_tokens", timings.get("predicted_n"))
    rate = timings.get("predicted_per_second")
    prompt_rate = timings.get("prompt_per_second")
    return Generation(
        content if isinstance(content, str) else None,
        int(tokens) if tokens is not None else None,
        float(rate) if rate is not None else None,
        float(prompt_rate) if prompt_rate is not None else None,
    )


# ---------------------------------------------------------------------------------------------------------------------
# llama-bench


def _json_array(text: str) -> list[Any] | None:
    decoder = json.JSONDecoder()
    for m in re.finditer(r"^\[", text, re.M):
        try:
            value, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(value, list):
            return value
    return None


def parse_bench_json(output: str) -> list[BenchFigure]:
    """The results of ``llama-bench -o json`` (the JSON array may sit among log lines on the same stream)."""
    data = _json_array(output)
    if data is None:
        return []
    results = []
    for item in data:
        if not isinstance(item, dict):
            continue
        n_prompt, n_gen = int(item.get("n_prompt") or 0), int(item.get("n_gen") or 0)
        parts = [f"pp{n_prompt}"] * bool(n_prompt) + [f"tg{n_gen}"] * bool(n_gen)
        ngl = item.get("n_gpu_layers")
        commit, number = item.get("build_commit", ""), item.get("build_number", "")
        rate, stddev = float(item.get("avg_ts") or 0.0), float(item.get("stddev_ts") or 0.0)
        results.append(
            BenchFigure(
                test="+".join(parts) or "?",
                n_prompt=n_prompt,
                n_gen=n_gen,
                tokens_per_second=rate,
                stddev=stddev,
                # the repetitions' standard deviation in per cent of their mean (None without a mean)
                spread_pct=round(100.0 * stddev / rate, 2) if rate > 0 else None,
                warmup=0,
                backends=str(item.get("backends", "")),
                gpu_info=str(item.get("gpu_info", "")),
                n_gpu_layers=int(ngl) if isinstance(ngl, int | float) else None,
                model_type=str(item.get("model_type", "")),
                build=f"{commit} ({number})" if commit else str(number),
            )
        )
    return results


# ---------------------------------------------------------------------------------------------------------------------
# Verdicts


def text_problem(text: str | None) -> str | None:
    """Why generated text cannot count as generation (None when it can): empty, or one symbol repeated, which is
    what a GPU kernel producing NaNs or zeros decodes to. Random-weight output is noise but passes."""
    if text is None:
        return "no generated text found in the output"
    stripped = text.strip()
    if not stripped:
        return "the generated text is empty"
    compact = "".join(stripped.split())
    if len(compact) >= 8 and len(set(compact)) <= 2:
        return f"the generated text is one symbol repeated ({compact[:12]!r}...)"
    words = stripped.split()
    if len(words) >= 6 and len(set(words)) == 1:
        return f"the generated text repeats one word ({words[0][:20]!r} x{len(words)})"
    return None


def format_buffers(buffers: Iterable[Buffer]) -> str:
    return ", ".join(f"{b.device} {b.mib:.2f} MiB" for b in buffers) or "none"


def combined_placement(placements: Sequence[str]) -> str:
    """The placement of all loads together: theirs when they agree, else ``partial``."""
    return placements[0] if all(p == placements[0] for p in placements) else "partial"


def offload_claim(load: LoadReport, label: str, where: str = "") -> str | None:
    """The note for a load that says it offloaded layers while no ``label`` buffer holds weights."""
    if not (load.offloaded and load.offloaded[0] > 0):
        return None
    return (
        f"the log says 'offloaded {load.offloaded[0]}/{load.offloaded[1]} layers to GPU' "
        f"but no {label} buffer holds weights{where}: not a GPU run"
    )


@dataclass(frozen=True)
class VerdictWords:
    """How a backend words its verdict, by placement: the summaries ({mib}, {offloaded} and {buffers} filled in) and,
    when a GPU run was expected, what a placement short of ``gpu`` lacks."""

    gpu: str
    partial: str
    cpu: str
    partial_lacks: str
    weights_on: str  # where a gpu run puts the weights: "the GPU"
    unknown: str = "gpu: unknown (no model buffer lines in the logs)"
    cpu_lacks: str = "silent CPU fallback"
    unknown_lacks: str = "no model buffer lines to prove GPU use"


@dataclass(frozen=True)
class Placement:
    """Where a backend found the model in the runs' logs, with what it noticed on the way: ``where`` (gpu, partial,
    cpu or unknown), the MiB of weights on the GPU and on the host (the largest load's), notes, the fallback warning
    that explains a CPU run (if any) and the failures that fail even a ``gpu`` run when one was expected."""

    where: str
    loads: Sequence[LoadReport]
    gpu_mib: float = 0.0
    host_mib: float = 0.0
    notes: Sequence[str] = ()
    fallback: str | None = None
    failures: Sequence[str] = ()

    @property
    def with_buffers(self) -> list[LoadReport]:
        """The loads that logged their model buffers."""
        return [load for load in self.loads if load.buffers]


def judge(
    words: VerdictWords, placement: Placement, *, expect_gpu: bool | None, texts: Sequence[str | None]
) -> SmokeGpu:
    """The verdict on ``placement``, in a backend's ``words``. When a GPU run was expected, anything but ``gpu`` fails
    for the placement's fallback or for what it lacks; a ``gpu`` run fails for the first of its failures, then for
    generated text that is not generation."""
    with_buffers = placement.with_buffers
    last = with_buffers[-1] if with_buffers else None
    offloaded = f"{last.offloaded[0]}/{last.offloaded[1]}" if last and last.offloaded else None
    buffers_text = format_buffers(last.buffers) if last else "none"
    where, gpu_mib, failures = placement.where, placement.gpu_mib, placement.failures
    summary = getattr(words, where).format(mib=gpu_mib, offloaded=offloaded or "?", buffers=buffers_text)
    ok = True
    if expect_gpu:
        problems = [f"weights on {words.weights_on} but {p}" for t in texts if (p := text_problem(t))]
        if where != "gpu":
            ok = False
            why = placement.fallback or getattr(words, f"{where}_lacks")
            summary = f"gpu: FAILED, {why} (model buffers: {buffers_text})"
        elif failures or problems:
            ok = False
            summary = f"gpu: FAILED, {[*failures, *problems][0]}"
    devices = tuple(dict.fromkeys(d for load in placement.loads for d in load.devices))
    return SmokeGpu(
        placement=where,
        expected=expect_gpu,
        ok=ok,
        summary=summary,
        gpu_mib=round(gpu_mib, 2),
        host_mib=round(placement.host_mib, 2),
        offloaded=offloaded,
        devices=devices,
        notes=tuple(dict.fromkeys(placement.notes)),
    )


# ---------------------------------------------------------------------------------------------------------------------
# Vulkan (shared/reference/vulkan-on-lavapipe.md)
#
# ggml-vulkan falls back to the CPU with exit code 0 when there is no driver, a wrong ICD, or a CPU-type device
# (lavapipe) not listed in GGML_VK_VISIBLE_DEVICES, and "offloaded N/N layers to GPU" is printed all the same. With
# -ngl 0 a "Vulkan0 compute buffer" still appears (big batches are op-offloaded). Only VulkanN *model* and *KV*
# buffers prove that layers run on the device. What a log says is read here; the verdict on it is the Vulkan
# backend's (rockbuild.backends.vulkan).

_KV_BUFFER = re.compile(r"(?P<device>\S+) KV buffer size\s*=\s*(?P<mib>[0-9.]+)\s*MiB")
_VK_DEVICE_LINE = re.compile(r"ggml_vulkan: (?P<index>\d+) = (?P<desc>[^|]+?)\s*(?:\||$)")
_VULKAN_HINT = re.compile(r"\bVulkan\d+\b|Vulkan_Host|ggml_vulkan:|libvulkan\.so|vkCreateInstance")
# (pattern, what it means for the user); any of these means the run did not use a Vulkan device
VULKAN_FALLBACKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"no usable GPU found"), "llama.cpp found no usable GPU and ran on the CPU"),
    (
        re.compile(r"ggml_vulkan: No devices found"),
        "ggml_vulkan found no device (a CPU-type device such as lavapipe needs GGML_VK_VISIBLE_DEVICES)",
    ),
    (re.compile(r"invalid device: Vulkan\d+"), "the Vulkan device asked for with -dev does not exist"),
    (re.compile(r"vkCreateInstance: Found no drivers"), "the Vulkan loader found no driver (ICD)"),
    (
        re.compile(r"libvulkan\.so\.1: cannot open shared object file"),
        "libvulkan.so.1 (the Vulkan loader, package libvulkan1) is not installed",
    ),
)
_VK_CPU_DEVICE = re.compile(r"ggml_vulkan: Warning: Device type is CPU")


def parse_vulkan(text: str) -> VulkanLoad | None:
    """Vulkan facts of ``text`` (KV buffers of the last load), or None when it shows neither Vulkan nor a fallback."""
    kv: list[Buffer] = []
    devices: list[str] = []
    fallbacks: list[str] = []
    seen = cpu_type = False
    for raw in text.splitlines():
        line = strip_log_prefix(raw)
        if _LOADING.search(line):
            kv = []
        if _VULKAN_HINT.search(line):
            seen = True
        if m := _KV_BUFFER.search(line):
            kv.append(Buffer(m["device"], float(m["mib"])))
        elif m := _VK_DEVICE_LINE.search(line):
            devices.append(f"{m['index']} = {m['desc'].strip()}")
        cpu_type = cpu_type or bool(_VK_CPU_DEVICE.search(line))
        fallbacks.extend(meaning for pattern, meaning in VULKAN_FALLBACKS if pattern.search(line))
    if not seen and not fallbacks:
        return None
    return VulkanLoad(seen, tuple(kv), tuple(dict.fromkeys(devices)), tuple(dict.fromkeys(fallbacks)), cpu_type)


_LISTED_DEVICE = re.compile(
    r"^\s+(?P<name>[A-Za-z_]+\d+): (?P<desc>.+?)(?: \((?P<total>\d+) MiB, (?P<free>\d+) MiB free\))?$"
)


def parse_list_devices(output: str) -> list[tuple[str, str]]:
    """``(name, description)`` of each device in the output of ``llama-cli --list-devices`` (``Vulkan0: llvmpipe
    (LLVM 22.1.8, 256 bits) (24105 MiB, 23528 MiB free)``); empty for ``(none)``. Lines before ``Available
    devices:`` (ggml's own logging) are ignored."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Available devices:"), None)
    if start is None:
        return []
    found = []
    for line in lines[start + 1 :]:
        match = _LISTED_DEVICE.match(line)
        if match is None:
            if line.strip() and not line.startswith((" ", "\t")):
                break  # the list is over
            continue
        found.append((match["name"], match["desc"].strip()))
    return found


# ---------------------------------------------------------------------------------------------------------------------
# Backend modules (GGML_BACKEND_DL)
#
# ggml_backend_load_all() dlopen()s, per backend name, every (lib)ggml-<name>-*.so/.dll in the executable's folder and
# in the current working folder, keeps the one whose ggml_backend_score() is highest (0: this CPU cannot run it) and
# falls back to plain (lib)ggml-<name>.so; each module it keeps is logged (GGML_LOG_INFO, stderr) as
# "load_backend: loaded <reg name> backend from <path>", the reg name being CPU, ROCm (HIP), Vulkan, RPC, BLAS, ...
# (ggml/src/ggml-backend-reg.cpp). No environment variable skips a CPU variant: removing its file is the only way.

_LOADED_BACKEND = re.compile(r"load_backend: loaded (?P<name>\S+) backend from (?P<path>.+?)\s*$")
# the same pattern as the audit's cpu-backends check: plain (lib)ggml-cpu.so is the module without a variant
CPU_MODULE = re.compile(r"^(?:lib)?ggml-cpu(?:-(?P<variant>[A-Za-z0-9_.]+?))?\.(?:so|dll)$", re.I)
# where ``rockbuild doctor --fix-cpu`` moves a CPU variant this CPU cannot run: ggml never looks into a subfolder
DISABLED_CPU_VARIANTS = "disabled-cpu-variants"
# the names ggml_backend_load_all() searches, in its order: a (lib)ggml-<name>(-*).so/.dll in the current folder
# is loaded (its constructors run) by every program started there
BACKEND_SEARCH_NAMES = (
    "blas",
    "zendnn",
    "cann",
    "cuda",
    "hip",
    "metal",
    "rpc",
    "sycl",
    "vulkan",
    "virtgpu",
    "opencl",
    "hexagon",
    "musa",
    "openvino",
    "cpu",
)
_BACKEND_FILE = re.compile(rf"^(?:lib)?ggml-(?:{'|'.join(BACKEND_SEARCH_NAMES)})(?:-[^/\\]*)?\.(?:so|dll)$", re.I)
# reg names of the backends that run on a GPU (the others, RPC and BLAS, are neither the CPU nor a GPU)
GPU_BACKENDS = ("ROCm", "Vulkan", "CUDA", "MUSA", "SYCL", "Metal", "OpenCL", "CANN", "WebGPU")


def _file_name(path: str) -> str:
    return re.split(r"[/\\]", path)[-1]


def cpu_variant_of(file_name: str) -> str | None:
    """``zen4`` for ``libggml-cpu-zen4.so`` (or ``ggml-cpu-zen4.dll``); None for another file or plain libggml-cpu."""
    match = CPU_MODULE.match(file_name)
    return match["variant"] if match else None


def cpu_variant_files(names: Iterable[str]) -> tuple[str, ...]:
    """The CPU variant modules among a folder's file ``names`` (libggml-cpu-<variant>.so), sorted."""
    return tuple(sorted(n for n in names if cpu_variant_of(n) is not None))


def is_backend_file(file_name: str) -> bool:
    """Would ggml_backend_load_all() load a file of this name from a folder it searches?"""
    return _BACKEND_FILE.match(file_name) is not None


@dataclass(frozen=True)
class LoadedBackend:
    """One ``load_backend: loaded X backend from PATH`` line."""

    name: str  # the backend's reg name: CPU, ROCm, Vulkan, RPC, ...
    path: str

    @property
    def file(self) -> str:
        return _file_name(self.path)


@dataclass(frozen=True)
class BackendLoads:
    """Which backend modules a program loaded, as its log says: the CPU variant file, the GPU backend, the others.
    Empty for a program whose backends are linked in (built without GGML_BACKEND_DL): it prints no such line."""

    loaded: tuple[LoadedBackend, ...] = ()

    def _first(self, names: Iterable[str]) -> LoadedBackend | None:
        wanted = set(names)
        return next((b for b in self.loaded if b.name in wanted), None)

    @property
    def cpu(self) -> LoadedBackend | None:
        return self._first(("CPU",))

    @property
    def cpu_file(self) -> str | None:
        return self.cpu.file if self.cpu else None

    @property
    def cpu_variant(self) -> str | None:
        """``zen4``; None when no CPU module was loaded or it was plain libggml-cpu.so."""
        return cpu_variant_of(self.cpu.file) if self.cpu else None

    @property
    def gpu(self) -> LoadedBackend | None:
        return self._first(GPU_BACKENDS)

    @property
    def others(self) -> tuple[LoadedBackend, ...]:
        return tuple(b for b in self.loaded if b.name != "CPU" and b.name not in GPU_BACKENDS)

    def summary(self) -> SmokeBackends:
        """What a run's record says of them (its ``backends``: no ``shipped``, a property of the bundle)."""
        gpu = self.gpu
        return SmokeBackends(
            cpu=self.cpu_file,
            cpu_variant=self.cpu_variant,
            gpu=gpu.name if gpu else None,
            gpu_file=gpu.file if gpu else None,
            others=tuple(b.name for b in self.others),
            keys=("cpu", "cpu_variant", "gpu", "gpu_file", "others"),
        )


def parse_backend_loads(text: str) -> BackendLoads:
    """The ``load_backend: loaded ...`` lines of a program's output (stderr, with or without a log prefix); a
    backend logged twice counts once, with its first path."""
    found: dict[str, LoadedBackend] = {}
    for raw in text.splitlines():
        if m := _LOADED_BACKEND.search(strip_log_prefix(raw)):
            found.setdefault(m["name"], LoadedBackend(m["name"], m["path"]))
    return BackendLoads(tuple(found.values()))


# a program killed by SIGILL: -4 from subprocess, 132 (128 + 4) through a shell; on Windows the process ends with
# STATUS_ILLEGAL_INSTRUCTION
SIGILL_EXIT_CODES = (-int(signal.SIGILL), 128 + int(signal.SIGILL), 0xC000001D)
CPU_SIGILL_FIX = "remove it from the bundle folder (the next best variant then loads)"


def died_of_sigill(returncode: int | None) -> bool:
    return returncode in SIGILL_EXIT_CODES


def cpu_backend_problem(
    loads: BackendLoads, returncode: int | None, shipped: Sequence[str], program: str
) -> str | None:
    """Why a run's CPU backend is wrong (None when it is not): it died of SIGILL (the CPU variant ggml picked runs an
    instruction this CPU lacks), or the bundle ships CPU variant modules (``shipped``), or the log shows other backend
    modules loaded, and no CPU backend was loaded (none scored on this CPU, or none could be dlopen()ed). A run that
    exited 0 and logged no backend at all is not judged (llama-cli prints none)."""
    if died_of_sigill(returncode):
        if loads.cpu_variant is not None:
            return (
                f"the CPU variant {loads.cpu_file} picked on this machine died of SIGILL on a real batch: "
                f"{CPU_SIGILL_FIX}"
            )
        which = f" (its CPU backend: {loads.cpu_file})" if loads.cpu_file else ""
        return f"{program} died of SIGILL, an instruction this CPU cannot run{which}"
    if loads.cpu is not None or returncode is None or (returncode == 0 and not loads.loaded):
        # a run that worked and logged no load_backend line at all says nothing either way: llama-cli loads its
        # backends before its log is set up and prints none (measured, b11312); llama-bench and llama-completion
        # print every one
        return None
    if shipped:
        modules = (
            f"{len(shipped)} CPU variant modules ({shipped[0]}, ...)"
            if len(shipped) > 1
            else (f"a CPU variant module ({shipped[0]})")
        )
        return (
            f"the bundle ships {modules} but the {program} log shows "
            "no CPU backend loaded: none scored on this CPU, or none could be loaded"
        )
    if loads.loaded:
        names = ", ".join(b.name for b in loads.loaded)
        return f"the {program} log shows backend modules loaded ({names}) but no CPU backend"
    return None
