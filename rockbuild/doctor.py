"""``rockbuild doctor``: what this machine's AMD GPUs are and what would make a build look slow or absent on it.

Everything is read from files, never from ROCm: the KFD topology in sysfs names the GPUs, ``/dev`` says whether this
user may open them, the environment holds the overrides people copy from forum posts, the ttm/amdgpu module
parameters bound how much RAM an APU's GPU may use. Each problem is a :class:`Finding` with a severity and one line
of what to do; an ``error`` finding makes the command fail. The text report names each finding once: the line the
CLI prints on failure (:meth:`DoctorReport.failure`) only counts them. With no AMD GPU there is one finding, saying
what was looked at (the KFD topology, ``/dev/kfd``) and what to do, and the report still says which build to try.

The GPUs come from :mod:`rockbuild.gpu`, the one reader of the KFD topology.
"""

from __future__ import annotations

import filecmp
import grp
import os
import platform
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rockbuild.backends import REGISTRY, get_backend
from rockbuild.bundle.audit import audit_bundle
from rockbuild.core.environment import WindowsHost, environment
from rockbuild.core.errors import RockbuildError
from rockbuild.core.jobs import DEFAULT_BACKEND, MIX, FamilyTable, load_families
from rockbuild.core.record import Record
from rockbuild.core.vocabulary import Finding, Gpu
from rockbuild.gpu import kfd_nodes_dir, read_kfd_gpus
from rockbuild.install import DEFAULT_REPO
from rockbuild.publish.image import ImagesConfig, flavour_name, podman_run
from rockbuild.smoke.models import check_gguf
from rockbuild.smoke.parse import (
    CPU_SIGILL_FIX,
    DISABLED_CPU_VARIANTS,
    BackendLoads,
    cpu_backend_problem,
    cpu_variant_files,
    died_of_sigill,
    is_backend_file,
    parse_backend_loads,
    parse_bench_json,
)
from rockbuild.smoke.probe import bundle_program, run_program, smoke_env

from .dllsearch import outside_shadows, resolve_bundle_dlls

SEVERITIES = ("ok", "info", "warning", "error")
PAGE = 4096  # ttm.pages_limit counts 4 KiB pages
# Variables that pick or hide GPUs: an old value left in a shell profile silently moves llama.cpp to the CPU.
VISIBILITY_VARIABLES = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")
# Workarounds that change how ROCm runs; worth knowing they are set when something misbehaves.
OTHER_OVERRIDES = (
    "HSA_ENABLE_SDMA",
    "HSA_XNACK",
    "HSA_NO_SCRATCH_RECLAIM",
    "AMD_SERIALIZE_KERNEL",
    "GGML_VK_VISIBLE_DEVICES",
    "HCC_AMDGPU_TARGET",
)
# When the GTT limit of an APU is below this share of RAM, big models fail to load on its GPU.
GTT_SHARE_WANTED = 0.75
VULKAN_INSTALL = "rockbuild install --backend vulkan"
# the container images of the release repository `rockbuild install` reads (docs/images.md), by their moving tags
IMAGE_REPOSITORY = f"ghcr.io/{DEFAULT_REPO.lower()}"
# What to try on a machine without an AMD GPU. ggml-vulkan skips CPU-type Vulkan devices unless
# GGML_VK_VISIBLE_DEVICES lists one (the smoke test's and compare's rule), so without a GPU the build runs on ggml's CPU
# backend, or on lavapipe when asked to.
NO_GPU_RECOMMENDATION_REASON = (
    "the ROCm builds need one; the Vulkan build runs on any GPU with a Vulkan driver, "
    "else on the CPU; Mesa's lavapipe is used only with GGML_VK_VISIBLE_DEVICES=0"
)


def gfx_from_override(value: str) -> str | None:
    """The gfx target an ``HSA_OVERRIDE_GFX_VERSION`` value (``11.0.0``) stands for, or None when malformed."""
    parts = value.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    major, minor, stepping = (int(p) for p in parts)
    if minor > 15 or stepping > 15:
        return None
    return f"gfx{major}{minor:x}{stepping:x}"


@dataclass(frozen=True)
class Recommendation(Record):
    target: str
    flavour: Literal["rocm", "vulkan", "both"]
    reason: str
    command: str  # what to run
    images: tuple[str, ...] = ()  # the container images that fit, the one to try first first (Linux only)
    image_command: str = ""  # the podman command that runs the first


@dataclass(frozen=True, kw_only=True)
class DoctorReport(Record):
    """What ``rockbuild doctor`` found (a record: its ``--json``)."""

    ok: bool = field(init=False)  # no finding is an error (derived)
    kernel: str
    gpus: tuple[Gpu, ...]
    findings: tuple[Finding, ...]
    recommendations: tuple[Recommendation, ...]
    bundle: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", not self.errors)

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    def render(self) -> str:
        lines = [f"GPUs ({len(self.gpus)}):"]
        lines += [f"  {g.label}, {g.compute_units} CUs, KFD node {g.node}" for g in self.gpus] or ["  none"]
        lines.append("Findings:")
        for f in self.findings:
            lines.append(f"  [{f.severity}] {f.message}")
            if f.action:
                lines.append(f"      -> {f.action}")
        if self.recommendations:
            lines.append("Which build to try first:")
            for r in self.recommendations:
                lines.append(f"  {r.target or 'no AMD GPU'}: {r.flavour} ({r.reason})")
                lines.append(f"      $ {r.command}")
                if r.images:
                    more = "".join(f" (or {i})" for i in r.images[1:])
                    lines.append(f"      container: {r.images[0]}{more}")
                    lines.append(f"      $ {r.image_command}")
        return "\n".join(lines)

    def failure(self) -> RockbuildError | None:
        """The error the command exits with (exit code 1), None when no finding is an error.

        One wording after the text report and after ``--json``: it counts the problems and names their topics, and
        says where what to do is (each problem's finding, ``[error]`` in the text, severity ``error`` in the JSON,
        carries its action). It never repeats a finding: the report already says each one once."""
        errors = self.errors
        if not errors:
            return None
        one = len(errors) == 1
        topics = ", ".join(dict.fromkeys(f.topic for f in errors))
        return RockbuildError(
            f"{len(errors)} problem{'' if one else 's'} found ({topics}): the finding"
            f"{' marked error says' if one else 's marked error say'} what to do"
        )


# ---------------------------------------------------------------------------------------------------------------------
# Reading sysfs


# ---------------------------------------------------------------------------------------------------------------------
# Checks


def _gib(n: float) -> str:
    return f"{n / 1024**3:.1f} GiB"


def _device_access(path: Path, what: str) -> Finding:
    try:
        st = path.stat()
    except FileNotFoundError:
        return Finding(
            "error",
            "access",
            f"{path} does not exist: ROCm cannot reach {what}",
            "in a container pass --device /dev/kfd --device /dev/dri; on the host check that the amdgpu "
            "driver is loaded (lsmod | grep amdgpu)",
        )
    except OSError as exc:
        return Finding("error", "access", f"cannot stat {path}: {exc.strerror}", "check the device node")
    if os.access(path, os.R_OK | os.W_OK):
        return Finding("ok", "access", f"{path} ({what}) can be opened by this user")
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    mode = stat.filemode(st.st_mode)
    return Finding(
        "error",
        "access",
        f"this user cannot open {path} ({mode}, group {group}): ROCm sees no GPU and llama.cpp silently "
        "runs on the CPU",
        f"sudo usermod -aG {group} $USER (render and video on most distributions), then log out and in",
    )


def check_no_gpu(sysfs_root: Path = Path("/sys"), dev_root: Path = Path("/dev")) -> Finding:
    """The one finding for a machine whose KFD topology names no GPU: what was looked at, what was found, what to do.

    The KFD topology is part of the amdgpu driver: without it the driver is not loaded (or not installed); with only
    CPU nodes it is loaded but drives no GPU. ``/dev/kfd`` is said too, since that is what ROCm opens."""
    kfd_class = sysfs_root / "class" / "kfd"
    nodes = kfd_nodes_dir(sysfs_root)
    kfd = dev_root / "kfd"
    device = f"{kfd} exists" if kfd.exists() else f"{kfd} is missing"
    vm = "in a VM, pass the GPU through to the guest"
    if nodes.is_dir():
        return Finding(
            "error",
            "gpu",
            f"no AMD GPU found: the KFD topology ({nodes}) lists only CPU nodes and "
            f"{device}: the amdgpu driver is loaded but drives no GPU",
            "check that the GPU is enabled in the firmware and that your kernel's amdgpu supports it "
            f"(sudo dmesg | grep -i amdgpu); {vm}",
        )
    topology = f"{kfd_class} has no topology" if kfd_class.exists() else f"{kfd_class} does not exist"
    return Finding(
        "error",
        "gpu",
        f"no AMD GPU found: {topology} and {device}: the amdgpu kernel driver is not loaded (or has no KFD)",
        "install or load the amdgpu kernel driver: lsmod | grep amdgpu shows "
        f"whether it is loaded, sudo dmesg | grep -i amdgpu why it is not; {vm}",
    )


def check_device_access(gpus: Sequence[Gpu], dev_root: Path = Path("/dev")) -> list[Finding]:
    """Can this user open ``/dev/kfd`` and each GPU's render node?"""
    if not gpus:
        return []
    findings = [_device_access(dev_root / "kfd", "the compute driver, /dev/kfd")]
    for gpu in gpus:
        if gpu.drm_render_minor is None:
            findings.append(
                Finding(
                    "warning",
                    "access",
                    f"{gpu.label}: its KFD node names no render node",
                    "update the kernel; ROCm needs a render node per GPU",
                )
            )
            continue
        findings.append(
            _device_access(dev_root / "dri" / f"renderD{gpu.drm_render_minor}", f"{gpu.target}'s render node")
        )
    return findings


def _selected(value: str) -> list[int] | None:
    """GPU indexes a visibility variable selects; None when it is not a plain index list (UUIDs...)."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not all(v.isdigit() for v in items):
        return None
    return [int(v) for v in items]


def check_overrides(gpus: Sequence[Gpu], env: Mapping[str, str], table: FamilyTable) -> list[Finding]:
    """Variables that change which GPUs ROCm shows or what it believes they are."""
    findings: list[Finding] = []
    override = env.get("HSA_OVERRIDE_GFX_VERSION")
    if override is not None:
        fake = gfx_from_override(override)
        if fake is None:
            findings.append(
                Finding(
                    "warning",
                    "override",
                    f"HSA_OVERRIDE_GFX_VERSION={override!r} is not MAJOR.MINOR.STEPPING (e.g. 11.0.0)",
                    "unset HSA_OVERRIDE_GFX_VERSION",
                )
            )
        else:
            built = [g.target for g in gpus if g.target != fake and table.family_of_target(g.target) is not None]
            if built:
                findings.append(
                    Finding(
                        "warning",
                        "override",
                        f"HSA_OVERRIDE_GFX_VERSION={override} makes ROCm run {fake} code on {', '.join(built)}, "
                        "for which real builds exist",
                        "unset HSA_OVERRIDE_GFX_VERSION and install the asset for your GPU "
                        f"(rockbuild install --target {built[0]})",
                    )
                )
            else:
                findings.append(
                    Finding(
                        "info",
                        "override",
                        f"HSA_OVERRIDE_GFX_VERSION={override} makes ROCm treat every GPU as {fake}",
                        "fine for a GPU without its own build; if it crashes or prints garbage, use the Vulkan build",
                    )
                )
    visibility = {name: env[name] for name in VISIBILITY_VARIABLES if name in env}
    for name, value in visibility.items():
        indexes = _selected(value)
        if value.strip() == "" or (indexes is not None and gpus and not any(i < len(gpus) for i in indexes)):
            findings.append(
                Finding(
                    "error",
                    "override",
                    f"{name}={value!r} hides every GPU: llama.cpp will run on the CPU",
                    f"unset {name} or set it to an index below {len(gpus)}",
                )
            )
        elif indexes is not None and gpus:
            chosen = ", ".join(gpus[i].target for i in indexes if i < len(gpus))
            findings.append(
                Finding("info", "override", f"{name}={value} selects {chosen}", f"unset {name} to use every GPU")
            )
        else:
            findings.append(Finding("info", "override", f"{name}={value} is set", f"unset {name} to use every GPU"))
    for name in OTHER_OVERRIDES:
        if name in env:
            findings.append(
                Finding(
                    "info", "override", f"{name}={env[name]} is set (a workaround)", f"unset {name} unless you need it"
                )
            )
    integrated = [g for g in gpus if g.integrated]
    discrete = [g for g in gpus if not g.integrated]
    if integrated and discrete and not visibility:
        pin = ",".join(str(g.index) for g in discrete)
        findings.append(
            Finding(
                "warning",
                "override",
                f"an iGPU ({', '.join(g.target for g in integrated)}) is visible beside the dGPU "
                f"({', '.join(g.target for g in discrete)}): llama.cpp would split the model across both, and a build "
                "without the iGPU's target fails on it",
                f"pin the dGPU: export HIP_VISIBLE_DEVICES={pin}",
            )
        )
    return findings


def read_meminfo_total(proc_root: Path = Path("/proc")) -> int | None:
    """MemTotal in bytes, or None when unreadable."""
    try:
        for line in (proc_root / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def check_apu_memory(
    gpus: Sequence[Gpu], sysfs_root: Path = Path("/sys"), proc_root: Path = Path("/proc")
) -> list[Finding]:
    """How much RAM an APU's GPU may map (GTT), from ttm.pages_limit and amdgpu.gttsize."""
    apus = [g for g in gpus if g.integrated]
    if not apus or len(apus) < len(gpus):
        return []  # with a dGPU in the machine the model goes there (see the iGPU warning); GTT does not matter
    names = ", ".join(g.target for g in apus)
    total = read_meminfo_total(proc_root)
    pages = _read_int(sysfs_root / "module" / "ttm" / "parameters" / "pages_limit")
    gttsize = _read_int(sysfs_root / "module" / "amdgpu" / "parameters" / "gttsize")
    findings: list[Finding] = []
    for g in apus:
        if g.local_mem_bytes:
            findings.append(
                Finding(
                    "info",
                    "memory",
                    f"{g.target}: {_gib(g.local_mem_bytes)} of RAM reserved as VRAM by the firmware (UMA frame buffer)",
                    "a small carve-out is fine: the GPU maps the rest of RAM through GTT",
                )
            )
    if pages is None and gttsize is None:
        findings.append(
            Finding(
                "info",
                "memory",
                f"{names}: the ttm and amdgpu module parameters are not readable; the GTT limit is unknown",
                "",
            )
        )
        return findings
    limits = []
    if pages:
        limits.append(pages * PAGE)
    elif total:
        limits.append(total // 2)  # ttm's default: half of RAM
    if gttsize is not None and gttsize > 0:
        limits.append(gttsize * 1024**2)
        findings.append(
            Finding(
                "info",
                "memory",
                f"amdgpu.gttsize={gttsize} (MiB) is set",
                "newer kernels size GTT from ttm.pages_limit; amdgpu.gttsize is deprecated",
            )
        )
    limit = min(limits) if limits else None
    if limit is None or not total:
        findings.append(
            Finding("info", "memory", f"{names}: GTT limit {_gib(limit) if limit else 'unknown'}, RAM size unknown", "")
        )
        return findings
    wanted_pages = int(total * 0.9) // PAGE
    if limit < GTT_SHARE_WANTED * total:
        findings.append(
            Finding(
                "warning",
                "memory",
                f"{names}: the GPU may map only {_gib(limit)} of {_gib(total)} RAM (GTT limit); larger models fail to "
                "load or fall back to the CPU",
                f"add ttm.pages_limit={wanted_pages} (90% of RAM in 4 KiB pages) to the kernel command line and reboot",
            )
        )
    else:
        findings.append(Finding("ok", "memory", f"{names}: the GPU may map {_gib(limit)} of {_gib(total)} RAM (GTT)"))
    return findings


def check_bundle(
    gpus: Sequence[Gpu], bundle: Path, env: Mapping[str, str] | None = None
) -> tuple[list[Finding], dict[str, Any]]:
    """Does the bundle carry kernels for each GPU found (a Vulkan bundle: does it see a Vulkan device), and does its
    audit pass?"""
    try:
        report = audit_bundle(bundle, backends=REGISTRY)
    except RockbuildError as exc:
        return [
            Finding(
                "error",
                "bundle",
                f"cannot audit {bundle}: {exc.message}",
                "pass the folder rockbuild install or rockbuild bundle made",
            )
        ], {"path": str(bundle)}

    # per flavour: kernels for each GPU found (ROCm), or the devices the host gives the bundle (Vulkan: SPIR-V has no
    # per-GPU kernels, the host's driver compiles them)
    findings, more = get_backend(report.backend or DEFAULT_BACKEND).doctor_findings(
        gpus, bundle, report.targets, environment() if env is None else env
    )
    if report.ok:
        findings.append(Finding("ok", "bundle", f"{bundle}: audit passed"))
    else:
        findings.append(
            Finding(
                "error",
                "bundle",
                f"{bundle}: audit failed ({len(report.failures)}): {report.failures[0]}",
                "download the asset again (rockbuild install)",
            )
        )
    info = {
        "path": str(bundle),
        "backend": report.backend,
        "targets": list(report.targets),
        "audit_ok": report.ok,
        "failures": list(report.failures),
        **more,
    }
    return findings, info


# ---------------------------------------------------------------------------------------------------------------------
# The CPU backend: which of the bundle's CPU variants ggml picks on this CPU, and whether this CPU runs it

CPU_BATCH = 512  # the real batch: pp512 died of SIGILL on the lent H200 host where -p 8 ran
CPU_RUN_TIMEOUT = 300.0


@dataclass(frozen=True)
class CpuRun:
    """One run of the bundle's llama-bench: what it loaded, how it ended, its last line worth quoting."""

    loads: BackendLoads
    returncode: int | None
    failure: str | None  # exit code N, killed by SIGILL, timed out
    last_line: str
    batch_tps: float | None  # pp512's t/s


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else "")


def run_cpu_probe(exe: Path, model: Path | None, *, env: Mapping[str, str], timeout: float = CPU_RUN_TIMEOUT) -> CpuRun:
    """Run the bundle's llama-bench from its folder: on a real batch (``-p 512``, no GPU device, so the CPU variant
    does the matrix products) with ``model``, else ``--list-devices``, which loads the backends and runs nothing."""
    if model is not None:
        threads = str(max(1, min(4, os.cpu_count() or 1)))
        args = [
            str(exe),
            "-m",
            str(model),
            "-p",
            str(CPU_BATCH),
            "-n",
            "0",
            "-r",
            "1",
            "-t",
            threads,
            "-dev",
            "none",
            "-ngl",
            "0",
            "-o",
            "json",
        ]
    else:
        args = [str(exe), "--list-devices"]
    child, _ = smoke_env(env)
    with tempfile.TemporaryDirectory(prefix="rockbuild-doctor-") as tmp:
        output, rc, failure, _ = run_program(
            "cpu", args, cwd=exe.parent, env=child, timeout=timeout, log=Path(tmp) / "llama-bench.log"
        )
    text = output or ""
    batch = next((r.tokens_per_second for r in parse_bench_json(text) if r.n_prompt == CPU_BATCH), None)
    return CpuRun(parse_backend_loads(text), rc, failure, _last_line(text), batch)


def _fix_hint(bundle: Path, model: Path | None) -> str:
    model_arg = f" --model {model}" if model else " --model MODEL.gguf"
    return f"rockbuild doctor --bundle {bundle}{model_arg} --fix-cpu moves it into {DISABLED_CPU_VARIANTS}/"


def check_cpu_variants(
    bundle: Path,
    *,
    model: Path | None = None,
    env: Mapping[str, str] | None = None,
    fix: bool = False,
    timeout: float = CPU_RUN_TIMEOUT,
) -> tuple[list[Finding], dict[str, Any]]:
    """Which of the bundle's CPU variants (libggml-cpu-<variant>.so, GGML_CPU_ALL_VARIANTS) ggml picks on this CPU,
    read from the bundle's own llama-bench, and, with ``model``, whether it survives a real batch. A variant that dies
    of SIGILL is named with the fix (remove its file: no environment variable skips it); ``fix`` moves it into
    ``disabled-cpu-variants/`` and runs again, until a variant runs or one is left."""
    env = environment() if env is None else env
    if not bundle.is_dir():
        return [], {}
    shipped = cpu_variant_files(p.name for p in bundle.iterdir())
    disabled_dir = bundle / DISABLED_CPU_VARIANTS
    disabled = cpu_variant_files(p.name for p in disabled_dir.iterdir()) if disabled_dir.is_dir() else ()
    info: dict[str, Any] = {
        "shipped": list(shipped),
        "disabled": list(disabled),
        "loaded": None,
        "variant": None,
        "gpu": None,
        "batch": model is not None,
        "moved": [],
    }
    findings: list[Finding] = []
    if disabled:
        findings.append(
            Finding(
                "info",
                "cpu",
                f"{len(disabled)} CPU variant(s) set aside in {disabled_dir} "
                f"({', '.join(disabled)}): ggml does not load them",
                f"to bring one back: mv {disabled_dir}/FILE {bundle}/",
            )
        )
    if not shipped:
        return findings, info  # a CPU backend linked in (the audit says so) or a bundle of another kind
    exe = bundle_program(bundle, "llama-bench")
    if not exe.is_file():
        findings.append(
            Finding(
                "info",
                "cpu",
                f"{bundle} has no {exe.name} to run here: which of its "
                f"{len(shipped)} CPU variants this CPU gets was not checked",
                "",
            )
        )
        return findings, info
    if model is not None:
        check_gguf(model, need_tensors=True)
    while True:
        run = run_cpu_probe(exe, model, env=env, timeout=timeout)
        problem = cpu_backend_problem(run.loads, run.returncode, shipped, exe.name)
        picked = run.loads.cpu_file
        info.update(loaded=picked, variant=run.loads.cpu_variant, gpu=run.loads.gpu.name if run.loads.gpu else None)
        # set aside only a variant of the bundle's own that died here, and never the last one
        if (
            picked is None
            or not fix
            or not died_of_sigill(run.returncode)
            or picked not in shipped
            or not (bundle / picked).is_file()
            or len(shipped) < 2
        ):
            break
        disabled_dir.mkdir(exist_ok=True)
        os.replace(bundle / picked, disabled_dir / picked)
        info["moved"].append(picked)
        findings.append(
            Finding(
                "warning",
                "cpu",
                f"moved {picked} into {disabled_dir}/: the CPU variant ggml "
                "picked on this machine died of SIGILL on a real batch",
                f"to undo: mv {disabled_dir}/{picked} {bundle}/",
            )
        )
        shipped = tuple(n for n in shipped if n != picked)
    of = f"{len(shipped)} CPU variants shipped" if len(shipped) > 1 else "the one CPU variant shipped"
    if problem is not None and died_of_sigill(run.returncode) and run.loads.cpu_variant is not None:
        action = CPU_SIGILL_FIX if len(shipped) > 1 else "this CPU runs none of the bundle's CPU variants: report it"
        if len(shipped) > 1 and not fix:
            action += f": {_fix_hint(bundle, model)}"
        findings.append(
            Finding(
                "error",
                "cpu",
                f"the CPU variant {picked} picked on this machine died of SIGILL on a real batch",
                action,
            )
        )
    elif problem is not None:
        findings.append(
            Finding(
                "error",
                "cpu",
                problem,
                "download the asset again (rockbuild install); if that "
                "does not help, report it with the output of rockbuild doctor --json",
            )
        )
    elif run.failure is not None:
        what = f"a {CPU_BATCH}-token batch" if model else "--list-devices"
        findings.append(
            Finding(
                "error",
                "cpu",
                f"the bundle's {exe.name} failed on {what} ({run.failure})"
                + (f": {run.last_line}" if run.last_line else ""),
                "check the model file" if model else "run it by hand to see why",
            )
        )
    elif model is not None:
        rate = f", {run.batch_tps:.1f} t/s" if run.batch_tps else ""
        findings.append(
            Finding(
                "ok",
                "cpu",
                f"the bundle's programs load {picked} on this CPU (of {of}) and it ran a {CPU_BATCH}-token batch{rate}",
            )
        )
    else:
        findings.append(
            Finding(
                "info",
                "cpu",
                f"the bundle's programs load {picked} on this CPU (of {of}); only a "
                "real batch shows whether this CPU runs it",
                f"rockbuild doctor --bundle {bundle} --model MODEL.gguf runs a {CPU_BATCH}-token batch on it",
            )
        )
    return findings, info


def check_cwd_backends(bundle: Path, cwd: Path | None) -> list[Finding]:
    """ggml_backend_load_all() also loads (lib)ggml-<backend>(-*).so from the current folder: files there that are
    not the bundle's own are loaded (their code run) by a program started there, and a higher-scoring CPU variant
    among them wins over the bundle's."""
    if cwd is None:
        return []
    try:
        if cwd.resolve() == bundle.resolve():
            return []
        entries = sorted(p for p in cwd.iterdir() if is_backend_file(p.name) and p.is_file())
    except OSError:
        return []
    stray = [
        p.name for p in entries if not ((bundle / p.name).is_file() and filecmp.cmp(p, bundle / p.name, shallow=False))
    ]
    if not stray:
        return []
    names = ", ".join(stray[:3]) + (f" and {len(stray) - 3} more" if len(stray) > 3 else "")
    return [
        Finding(
            "warning",
            "cpu",
            f"the current folder {cwd} holds {len(stray)} ggml backend module(s) that are "
            f"not the bundle's ({names}): ggml loads backends from the current folder too, so a program "
            "started here may load one of them",
            "start the bundle's programs from another folder, or move those files away",
        )
    ]


def check_dll_shadowing(
    bundle: Path, windows: WindowsHost, *, loader: Path | None = None, cwd: Path | None = None
) -> list[Finding]:
    """Windows: which amdhip64/amd_comgr/hiprtc DLL the loader takes instead of the bundle's (see
    :mod:`rockbuild.dllsearch`). The bundle's own programs always get its copies (their folder is searched first), so
    a copy in System32 or on PATH is an error only for ``loader``, a program outside the bundle that loads its DLLs;
    without one it is named as information, with the fix for such a program."""
    if loader is None:
        own = resolve_bundle_dlls(bundle, windows, cwd=cwd)
        findings = [Finding("error", "dll", r.message, r.fix) for r in own if r.shadowed or r.missing]
        if own and not findings:
            findings.append(
                Finding(
                    "ok",
                    "dll",
                    f"the programs in {bundle} load its own "
                    f"{', '.join(r.name for r in own)} (their folder is searched first)",
                )
            )
        for r in outside_shadows(bundle, windows):
            findings.append(
                Finding(
                    "info",
                    "dll",
                    f"{r.loaded} ({r.where}) would shadow the bundle's {r.name} for "
                    "a program outside the bundle that loads its DLLs (a wrapper, a game engine); the "
                    "bundle's own programs are not affected",
                    f"{r.fix}; rockbuild doctor --loader EXE checks such a program",
                )
            )
        return findings
    loads = next((p for p in sorted(bundle.iterdir()) if p.name.lower() == "ggml-hip.dll"), None)
    resolved = resolve_bundle_dlls(bundle, windows, loader=loader, loads=loads, cwd=cwd)
    findings = [Finding("error", "dll", r.message, r.fix) for r in resolved if r.shadowed or r.missing]
    if resolved and not findings:
        findings.append(
            Finding(
                "ok",
                "dll",
                f"{loader} loads the bundle's own {', '.join(r.name for r in resolved)} ({resolved[0].where})",
            )
        )
    return findings


def _instinct(products: str) -> bool:
    return "Instinct" in products


def compare_command(target: str) -> str:
    return (
        f"rockbuild install --target {target} --dest llama-rocm-{target} && "
        f"rockbuild install --backend vulkan --dest llama-vulkan && "
        f"rockbuild compare llama-rocm-{target} llama-vulkan --model MODEL.gguf"
    )


def image_reference(backend: str, name: str = "") -> str:
    """The image of a flavour by its moving tag: ``ghcr.io/OWNER/NAME:rocm-gfx110x`` (one per GPU family, named as
    publish names it) or ``...:vulkan``."""
    return f"{IMAGE_REPOSITORY}:{ImagesConfig().moving_tag.format(flavour=flavour_name(backend, name))}"


def with_images(rec: Recommendation, table: FamilyTable) -> Recommendation:
    """``rec`` with the container images that fit its GPU: the ROCm image of its family and/or the Vulkan image, in
    the order of the recommendation (a mixed-GPU bundle has none: no release builds it)."""
    family = table.family_of_target(rec.target) if rec.target else None
    rocm = (image_reference("rocm", family.short),) if family is not None else ()
    vulkan = (image_reference("vulkan"),)
    images = {"rocm": rocm, "vulkan": vulkan, "both": rocm + vulkan}.get(rec.flavour, ())
    if not images or MIX in rec.target:
        return rec
    needs_rocm = images[0] in rocm
    return replace(rec, images=images, image_command=podman_run(needs_rocm, images[0]))


def recommend_flavours(gpus: Sequence[Gpu], table: FamilyTable, *, images: bool = True) -> list[Recommendation]:
    """Which build to try first per GPU: ROCm, Vulkan, or both with a benchmark (issue 12's rules), and with
    ``images`` (a Linux host) the container images that fit. Without an AMD GPU: Vulkan (target ""), since no ROCm
    build can run."""
    found = _recommend(gpus, table)
    return [with_images(r, table) for r in found] if images else found


def _recommend(gpus: Sequence[Gpu], table: FamilyTable) -> list[Recommendation]:
    if not gpus:
        return [Recommendation("", "vulkan", NO_GPU_RECOMMENDATION_REASON, VULKAN_INSTALL)]
    out: list[Recommendation] = []
    for gpu in gpus:
        t = gpu.target
        vulkan = VULKAN_INSTALL
        if table.family_of_target(t) is None:
            out.append(Recommendation(t, "vulkan", f"no ROCm build exists for {t}", vulkan))
        elif _instinct(gpu.products) and not gpu.integrated and t.startswith("gfx9"):
            out.append(
                Recommendation(
                    t, "rocm", "an Instinct accelerator: ROCm is its native stack", f"rockbuild install --target {t}"
                )
            )
        elif gpu.integrated or t.startswith(("gfx11", "gfx12")):
            kind = "an APU" if gpu.integrated else ("RDNA4" if t.startswith("gfx12") else "RDNA3")
            out.append(Recommendation(t, "both", f"{kind}: either can be faster, benchmark both", compare_command(t)))
        else:
            out.append(
                Recommendation(
                    t,
                    "vulkan",
                    f"an older Radeon: Vulkan is the simpler working path; ROCm builds for {t} exist as a fallback",
                    vulkan,
                )
            )
    mixed = recommend_mixed_bundle(gpus, table)
    return out + ([mixed] if mixed else [])


def recommend_mixed_bundle(gpus: Sequence[Gpu], table: FamilyTable, os_name: str = "linux") -> Recommendation | None:
    """GPUs of two or more families (an APU beside a dGPU of another generation): one mixed-GPU bundle carries
    exactly their targets, so llama.cpp runs on all of them from one build (matrix ``target: [gfxA, gfxB]``, job
    ``<os>-gfxA+gfxB``, asset ``...-rocm-gfxA-gfxB-x64``). None when they share a family or lack ROCm builds."""
    families = {g.target: fam.short for g in gpus if (fam := table.family_of_target(g.target)) is not None}
    if len(set(families.values())) < 2:
        return None
    targets = sorted(families)
    job = f"{os_name}-{MIX.join(targets)}"
    which = ", ".join(f"{t} ({families[t]})" for t in targets)
    return Recommendation(
        MIX.join(targets),
        "rocm",
        f"GPUs of {len(set(families.values()))} families, {which}: to use them together, one "
        f"mixed-GPU bundle carries exactly these targets (job {job}, asset "
        f"...-rocm-{'-'.join(targets)}-x64)",
        f"add '- target: [{', '.join(targets)}]' to the matrix, then rockbuild build --job {job}",
    )


@dataclass(frozen=True)
class Machine:
    """The machine the doctor looks at: where its kernel's trees are (a test passes synthetic ones), its environment
    (None: this process's), its kernel release (None: this one's) and, on Windows, the host (``Settings.windows``)."""

    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    proc_root: Path = Path("/proc")
    env: Mapping[str, str] | None = None
    kernel: str | None = None
    windows: WindowsHost | None = None


@dataclass(frozen=True)
class BundleCheck:
    """``--bundle DIR`` and how it is checked: the Windows program whose DLL search is checked (``loader``; None: the
    bundle's own), the folder it runs from (``cwd``), the model of the CPU variants' real batch, and whether a variant
    that dies of SIGILL is set aside (``fix_cpu``)."""

    bundle: Path
    loader: Path | None = None
    cwd: Path | None = None
    model: Path | None = None
    fix_cpu: bool = False


def run_doctor(
    machine: Machine, *, bundle: BundleCheck | None = None, table: FamilyTable | None = None
) -> DoctorReport:
    """Every check, in the order a user should fix things. On Windows (``machine.windows``: ``Settings.windows``, or
    passed in by a test) the DLL shadowing check of ``bundle`` is added, for its own programs or for its ``loader``.
    With ``bundle`` the CPU variant its programs load here is checked (on a real batch with its ``model``;
    ``fix_cpu`` sets aside a variant that dies of SIGILL), and backend modules in its ``cwd`` that are not the
    bundle's are named."""
    sysfs_root, dev_root, proc_root, windows = machine.sysfs_root, machine.dev_root, machine.proc_root, machine.windows
    table = table or load_families()
    env = environment() if machine.env is None else machine.env
    kernel = machine.kernel or platform.release()
    gpus = read_kfd_gpus(sysfs_root, table)
    findings: list[Finding] = [] if gpus else [check_no_gpu(sysfs_root, dev_root)]
    for gpu in gpus:
        have = table.family_of_target(gpu.target)
        findings.append(
            Finding(
                "ok" if have else "warning",
                "gpu",
                f"{gpu.label}, {gpu.compute_units} CUs" + ("" if have else f": no ROCm build exists for {gpu.target}"),
                "" if have else "use the Vulkan build (rockbuild install --backend vulkan)",
            )
        )
    findings += check_device_access(gpus, dev_root)
    findings += check_overrides(gpus, env, table)
    findings += check_apu_memory(gpus, sysfs_root, proc_root)
    findings.append(Finding("info", "kernel", f"Linux kernel {kernel}", ""))
    bundle_info = None
    if bundle is not None:
        more, bundle_info = check_bundle(gpus, bundle.bundle, env)
        findings += more
        devices = bundle_info.get("vulkan_devices")
        if not gpus and devices:
            # a Vulkan bundle that runs on this machine's GPU (another vendor's, or AMD's without KFD): the missing
            # AMD GPU is worth knowing, not a problem
            findings[0] = Finding(
                "info",
                "gpu",
                findings[0].message.replace("no AMD GPU found", "no AMD GPU", 1),
                f"nothing to do for the Vulkan build, which runs on {', '.join(devices)}",
            )
        elif not gpus and not get_backend(bundle_info["backend"]).needs_gpu:
            # a CPU build needs no GPU at all (the Windows end-to-end job's flavour)
            findings[0] = Finding(
                "info",
                "gpu",
                findings[0].message.replace("no AMD GPU found", "no AMD GPU", 1),
                "nothing to do for a CPU build",
            )
        if windows is not None:
            findings += check_dll_shadowing(bundle.bundle, windows, loader=bundle.loader, cwd=bundle.cwd)
        cpu, bundle_info["cpu"] = check_cpu_variants(bundle.bundle, model=bundle.model, env=env, fix=bundle.fix_cpu)
        findings += cpu + check_cwd_backends(bundle.bundle, bundle.cwd)
    recommendations = recommend_flavours(gpus, table, images=windows is None)  # images are Linux's only
    return DoctorReport(
        kernel=kernel,
        gpus=tuple(gpus),
        findings=tuple(findings),
        recommendations=tuple(recommendations),
        bundle=bundle_info,
    )
