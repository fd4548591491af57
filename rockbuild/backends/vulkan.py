"""The Vulkan flavour: llama.cpp's Vulkan backend (``GGML_VULKAN``), compiled by the host's C/C++ compiler and glslc,
one job per OS (SPIR-V is not per GPU target), no ROCm anywhere (docs/vulkan.md).

Per stage: a job ``<os>-vulkan`` with no family, tarball group or targets (matrix); nothing to resolve or fetch; the
seed flags with GGML_VULKAN in place of GGML_HIP, the host's compiler and glslc, the Vulkan SDK passed on (build); a
bundle with the Vulkan loader and drivers left to the host and nothing of ROCm in it (bundle, audit ``no-rocm``); the
devices the bundle itself lists, the first pinned with ``-dev``, and the ``VulkanN`` model and KV buffers (smoke);
one asset per OS, ``llama-<tag>-<os>-vulkan-x64`` (publish, install); the devices the host gives it (doctor).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rockbuild.backends import ROCM_LIBRARIES, foreign_files
from rockbuild.bundle.policy import name_matches
from rockbuild.core.errors import BuildError, BundleError
from rockbuild.core.records import BundleRecord
from rockbuild.core.vocabulary import Check, Finding, SmokeDevices
from rockbuild.llamacpp.cmake import compose_definitions, host_build_environment, host_build_variables, host_compilers
from rockbuild.llamacpp.shader_cache import DEFAULT_SIZE_MIB, install_wrapper
from rockbuild.process import first_line
from rockbuild.smoke.parse import Placement, VerdictWords, combined_placement, judge, offload_claim
from rockbuild.smoke.probe import bundle_program, list_devices, smoke_env

if TYPE_CHECKING:
    from rockbuild.bundle.fatbin import FatbinReport
    from rockbuild.bundle.policy import PlatformPolicy
    from rockbuild.core.jobs import FamilyTable, Job
    from rockbuild.core.records import BenchFigure, LoadReport, SmokeGpu
    from rockbuild.core.vocabulary import Check, Finding, Gpu, Toolchain
    from rockbuild.rocm.layout import RocmLayout

    from . import Backend

NAME = "vulkan"  # the backend, and the name of every Vulkan job (id <os>-vulkan, assets ...-vulkan-x64)
GGML_VULKAN = ("libggml-vulkan.so*", "ggml-vulkan.dll")
VULKAN_DEVICE = re.compile(r"^Vulkan\d+$")  # a model or KV buffer on a Vulkan device

# ---------------------------------------------------------------------------------------------------------------------
# Build: the seed flags with GGML_VULKAN in place of GGML_HIP (and its HIP-only options), no GPU_TARGETS (SPIR-V runs
# on any Vulkan device) and no compiler: CMake takes the host's default C/C++ compiler. Building needs glslc and Vulkan
# headers with VK_EXT_layer_settings (>= 1.3.2xx; Debian 12's 1.3.239 lack it: vulkan-on-lavapipe.md).

VULKAN_SWAP: dict[str, str | None] = {"GGML_HIP": "GGML_VULKAN", "GGML_HIP_ROCWMMA_FATTN": None}
VULKAN_RESERVED_DEFINITIONS = frozenset({"GGML_HIP", "GGML_VULKAN"})
# the default compiler launchers of every CMake project the build configures (vulkan-shaders-gen's too), with ccache
VULKAN_LAUNCHERS = {"CMAKE_C_COMPILER_LAUNCHER": "ccache", "CMAKE_CXX_COMPILER_LAUNCHER": "ccache"}
# the Vulkan SDK (FindVulkan reads $VULKAN_SDK; llama.cpp's Windows release job sets it), and CC/CXX
VULKAN_BUILD_INHERITED = ("VULKAN_SDK", "CC", "CXX")


def vulkan_cmake_definitions(
    *,
    extra: Sequence[tuple[str, str]] = (),
    offline: bool = False,
    build_info: Mapping[str, str] | None = None,
    ccache: bool = False,
) -> list[tuple[str, str]]:
    """The -D definitions of a Vulkan job's configure step, by the rules of
    :func:`rockbuild.llamacpp.cmake.compose_definitions`."""
    return compose_definitions(
        swap=VULKAN_SWAP,
        reserved=VULKAN_RESERVED_DEFINITIONS,
        set_by="for a Vulkan job (the backend, the host's compiler or the source)",
        extra=extra,
        offline=offline,
        build_info=build_info,
        ccache=ccache,
    )


def find_glslc(env: Mapping[str, str]) -> str:
    """glslc, which the Vulkan backend needs to compile its shaders: on PATH, or in $VULKAN_SDK/bin (Windows SDK)."""
    found = shutil.which("glslc", path=env.get("PATH") or env.get("Path") or "")
    sdk = env.get("VULKAN_SDK")
    if found is None and sdk:
        found = shutil.which("glslc", path=os.pathsep.join([str(Path(sdk) / "bin"), str(Path(sdk) / "Bin")]))
    if found is None:
        raise BuildError(
            "glslc is not installed (not on PATH): a Vulkan build compiles its shaders with it; install "
            "glslc, libvulkan-dev and spirv-headers (Vulkan headers >= 1.3.2xx) or the LunarG Vulkan SDK"
        )
    return found


def glslc_definitions(
    env: Mapping[str, str], build_dir: Path, cache_dir: Path | None, *, size_mib: int = DEFAULT_SIZE_MIB
) -> tuple[list[tuple[str, str]], dict[str, Any] | None]:
    """``-DVulkan_GLSLC_EXECUTABLE`` and what build.json records of the shader cache: with ``cache_dir``, the
    wrapper that keeps glslc's outputs there across build trees (:mod:`rockbuild.llamacpp.shader_cache`); without, the
    real glslc (so a tree configured with the wrapper before drops it). Nothing on Windows, whose vulkan-shaders-gen
    runs glslc with CreateProcess (an .exe only)."""
    if os.name == "nt":
        return [], None
    glslc = find_glslc(env)
    if cache_dir is None:
        return [("Vulkan_GLSLC_EXECUTABLE", glslc)], {"enabled": False, "dir": None}
    wrapper = install_wrapper(build_dir, glslc, cache_dir, size=size_mib)
    return [("Vulkan_GLSLC_EXECUTABLE", wrapper)], {
        "enabled": True,
        "dir": str(cache_dir),
        "glslc": glslc,
        "size_mib": size_mib,
    }


# ---------------------------------------------------------------------------------------------------------------------
# Audit


def check_no_rocm(root: Path, names: set[str], policy: PlatformPolicy) -> Check:
    """A Vulkan bundle: nothing of ROCm in it, and no library the host must provide (the Vulkan loader, a driver)."""
    failures = foreign_files(
        root,
        names,
        policy,
        forbidden=ROCM_LIBRARIES,
        why="is a ROCm library: a Vulkan bundle must not carry ROCm",
        flavour="Vulkan",
    )
    vulkan = sorted(n for n in names if name_matches(n, GGML_VULKAN, platform=policy.platform))
    warnings = () if vulkan else ("no libggml-vulkan in the bundle: is this a Vulkan build?",)
    return Check("no-rocm", not failures, tuple(failures), warnings, {"ggml_vulkan": vulkan})


# ---------------------------------------------------------------------------------------------------------------------
# Smoke (shared/reference/vulkan-on-lavapipe.md): ggml-vulkan falls back to the CPU with exit code 0 when there is no
# driver, a wrong ICD, or a CPU-type device (lavapipe) not listed in GGML_VK_VISIBLE_DEVICES, and "offloaded N/N
# layers to GPU" is printed all the same. So the bundle is asked which devices it sees, the first is pinned with -dev
# when a GPU run is expected (a missing one then fails in the command itself), and only VulkanN *model* and *KV*
# buffers prove that layers ran on the device.


def decide_vulkan_expectation(asked: str, devices: Sequence[str]) -> tuple[bool, str]:
    """(expect a GPU run?, why) for a Vulkan bundle; ``devices`` as ``llama-cli --list-devices`` printed them."""
    if asked == "yes":
        return True, "--expect-gpu yes"
    if asked == "no":
        return False, "--expect-gpu no"
    if devices:
        return True, f"auto: the bundle sees a Vulkan device ({devices[0]})"
    return False, (
        "auto: the bundle sees no Vulkan device (a CPU device like lavapipe is only used when "
        "GGML_VK_VISIBLE_DEVICES lists it)"
    )


def no_vulkan_device(probe_error: str | None, env: Mapping[str, str]) -> str:
    """One line: why the bundle sees no Vulkan device, and what to check first."""
    if probe_error:
        return (
            f"the Vulkan bundle cannot start: {probe_error}; the host needs the Vulkan loader (libvulkan1 / "
            "vulkan-1.dll) and a driver"
        )
    pinned = [f"{name}={env[name]}" for name in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES") if env.get(name)]
    if pinned:
        advice = f"{' and '.join(pinned)} limits the Vulkan loader to those driver files; check they exist, or unset it"
    elif env.get("GGML_VK_VISIBLE_DEVICES") is not None:
        advice = (
            f"GGML_VK_VISIBLE_DEVICES={env['GGML_VK_VISIBLE_DEVICES']} lists no usable device; check "
            "`vulkaninfo --summary`"
        )
    else:
        advice = (
            "install a Vulkan driver (Mesa RADV or AMD's) and check `vulkaninfo --summary`; for Mesa's "
            "lavapipe (a CPU device) set GGML_VK_VISIBLE_DEVICES=0"
        )
    return (
        "no Vulkan device visible to the bundle (llama-cli --list-devices lists none) where one is required: " + advice
    )


def vulkan_bench_problem(results: Sequence[BenchFigure]) -> str | None:
    """Why llama-bench results do not prove a Vulkan run (None when they do): no results, a CPU backend, an empty
    ``gpu_info`` (no device), or ``n_gpu_layers`` 0 (the JSON still says Vulkan then)."""
    if not results:
        return "llama-bench gave no results"
    for b in results:
        if "Vulkan" not in (b.backends or "").split(","):
            return f"llama-bench ran on backend {b.backends or '?'!r}, not Vulkan"
        if not b.gpu_info:
            return "llama-bench reports no GPU (gpu_info is empty): no Vulkan device was used"
        if b.n_gpu_layers == 0:
            return "llama-bench ran with -ngl 0: no layer on the Vulkan device"
    return None


WORDS: dict[str, str] = {
    "gpu": "gpu: Vulkan ({mib:.2f} MiB of weights and the KV cache on the Vulkan device)",
    "partial": "gpu: partial Vulkan offload ({buffers}; offloaded {offloaded} layers)",
    "cpu": "gpu: absent, no Vulkan model buffer (CPU run proves library loading only)",
    "partial_lacks": "not every layer and the KV cache on the Vulkan device",
    "weights_on": "the Vulkan device",
}


def vulkan_verdict(
    loads: Sequence[LoadReport],
    *,
    expect_gpu: bool | None,
    texts: Sequence[str | None] = (),
    bench: Sequence[BenchFigure] = (),
) -> SmokeGpu:
    """Judge a Vulkan bundle's run: ``gpu`` when every load put weights in a ``VulkanN`` model buffer and its KV cache
    in a ``VulkanN`` KV buffer; ``partial`` with Vulkan weights but a KV cache elsewhere or fewer layers than all;
    ``cpu`` otherwise. The output layer may stay in ``CPU_Mapped`` on a ``gpu`` run (lavapipe's 128 MiB storage
    buffer limit). Fallback warnings and llama-bench's ``backends``/``gpu_info`` are notes, or failures when a GPU
    run was expected."""
    notes: list[str] = []
    fallbacks = list(dict.fromkeys(f for load in loads if load.vulkan for f in load.vulkan.fallbacks))
    with_buffers = [load for load in loads if load.buffers]
    placements: list[str] = []
    gpu_mib = host_mib = 0.0
    for load in with_buffers:
        kv = load.vulkan.kv_buffers if load.vulkan else ()
        vk_mib = sum(b.mib for b in load.buffers if VULKAN_DEVICE.match(b.device))
        gpu_mib = max(gpu_mib, vk_mib)
        host_mib = max(host_mib, sum(b.mib for b in load.buffers if not VULKAN_DEVICE.match(b.device)))
        kv_on_device = any(VULKAN_DEVICE.match(b.device) and b.mib > 0 for b in kv)
        fewer = load.offloaded is not None and load.offloaded[0] < load.offloaded[1]
        if vk_mib > 0 and kv_on_device and not fewer:
            placements.append("gpu")
        elif vk_mib > 0:
            placements.append("partial")
        else:
            placements.append("cpu")
            if note := offload_claim(load, "Vulkan"):
                notes.append(note)
    placement = combined_placement(placements) if placements else ("cpu" if fallbacks else "unknown")
    notes.extend(fallbacks)
    bench_problem = vulkan_bench_problem(bench) if bench else None
    if bench_problem:
        notes.append(bench_problem)
    if any(load.vulkan and load.vulkan.cpu_type_device for load in loads):
        notes.append("the Vulkan device is a CPU-type device (lavapipe/llvmpipe)")
    found = Placement(
        placement,
        loads,
        gpu_mib=gpu_mib,
        host_mib=host_mib,
        notes=notes,
        fallback=fallbacks[0] if fallbacks else None,
        failures=[bench_problem] if bench_problem else [],
    )
    return judge(VerdictWords(**WORDS), found, expect_gpu=expect_gpu, texts=texts)


# ---------------------------------------------------------------------------------------------------------------------
# Doctor


def check_vulkan_host(gpus: Sequence[Gpu], bundle: Path, env: Mapping[str, str]) -> tuple[list[Finding], list[str]]:
    """A Vulkan bundle brings no driver: ask the bundle itself (``llama-cli --list-devices``, the smoke test's probe)
    which Vulkan devices this host's loader and drivers give it."""
    import tempfile

    exe = bundle_program(bundle, "llama-cli")
    if not exe.is_file():
        return [
            Finding(
                "error",
                "bundle",
                f"{bundle} has no {exe.name}: cannot ask it for its Vulkan devices",
                "pass the folder rockbuild install made",
            )
        ], []
    child, _ = smoke_env(env)
    with tempfile.TemporaryDirectory(prefix="rockbuild-doctor-") as tmp:
        found, problem = list_devices(exe, cwd=bundle, env=child, log=Path(tmp) / "list-devices.log", timeout=60)
    devices = [f"{name}: {desc}" for name, desc in found if name.startswith("Vulkan")]
    if problem:
        loader = "libvulkan" in problem or "vulkan-1.dll" in problem
        return [
            Finding(
                "error",
                "vulkan",
                f"the Vulkan build cannot start: {problem}",
                "install the Vulkan loader (Debian/Ubuntu: apt install libvulkan1; Windows: update the GPU driver)"
                if loader
                else "run it by hand to see why",
            )
        ], devices
    if devices:
        return [Finding("ok", "vulkan", f"the Vulkan build sees {d}") for d in devices], devices
    return [
        Finding(
            "error" if gpus else "warning",
            "vulkan",
            "the Vulkan build sees no Vulkan device"
            + (" although an AMD GPU is present" if gpus else "")
            + ": it would run on the CPU",
            "install a Vulkan driver (Mesa RADV: apt install mesa-vulkan-drivers; or AMD's) and check "
            "`vulkaninfo --summary`",
        )
    ], devices


# ---------------------------------------------------------------------------------------------------------------------
# The backend


class VulkanBackend:
    name = NAME
    label = "Vulkan"
    needs_rocm = False
    needs_gpu = True
    per_target = False
    ggml_libraries: tuple[str, ...] = GGML_VULKAN
    library_target: str | None = "ggml-vulkan"

    def job_fields(self, os_name: str, target: str, families: FamilyTable, origin: str) -> dict[str, Any]:
        # one Vulkan job per OS: no family, tarball group or gfx targets (the ROCm options stay, unused)
        return {"id": f"{os_name}-{NAME}", "name": NAME, "family": "", "group": "", "legacy_groups": (), "targets": ()}

    # build: the host's compiler, so no toolchain; build.json's rocm and toolchain stay null
    def toolchain(self, job: Job, layout: RocmLayout | None) -> Toolchain | None:
        return None

    def build_environment(
        self,
        job: Job,
        toolchain: Toolchain | None,
        *,
        msvc: Mapping[str, str] | None = None,
        ccache_dir: Path | None = None,
        base: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, str], list[str]]:
        # PATH as it is: the host's compiler, glslc and the Vulkan SDK are found where the host put them
        env = host_build_environment(
            job.os, base=base, msvc=msvc, ccache_dir=ccache_dir, inherit=VULKAN_BUILD_INHERITED
        )
        variables = [*host_build_variables(ccache_dir), *VULKAN_BUILD_INHERITED]
        if ccache_dir is not None and job.os != "windows":
            # vulkan-shaders-gen is an ExternalProject, configured at build time without GGML_CCACHE's launcher:
            # CMake's default launcher (these variables) puts ccache in front of its compile too (17 s of a warm
            # leg on 2 cores, every night, otherwise)
            env.update(VULKAN_LAUNCHERS)
            variables += list(VULKAN_LAUNCHERS)
        return env, variables

    def glslc_definitions(
        self, env: Mapping[str, str], build_dir: Path, cache_dir: Path | None, *, size_mib: int = DEFAULT_SIZE_MIB
    ) -> tuple[list[tuple[str, str]], dict[str, Any] | None]:
        # the shader cache (rockbuild.llamacpp.shader_cache): glslc through a wrapper that keeps its outputs
        return glslc_definitions(env, build_dir, cache_dir, size_mib=size_mib)

    def compilers(
        self, job: Job, toolchain: Toolchain | None, env: Mapping[str, str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        tools = {"glslc": first_line([find_glslc(env), "--version"], env)}
        return host_compilers(env, job.os == "windows"), tools

    def cmake_definitions(
        self, job: Job, toolchain: Toolchain | None, *, offline: bool, build_info: Mapping[str, str], ccache: bool
    ) -> list[tuple[str, str]]:
        return vulkan_cmake_definitions(extra=job.cmake, offline=offline, build_info=build_info, ccache=ccache)

    # bundle and audit: the Vulkan loader and drivers are host libraries by policy
    def bundle_platform(self, layout: RocmLayout | None, targets: Sequence[str], platform: str | None) -> str:
        if targets:
            raise BundleError(
                f"a Vulkan bundle has no GPU targets (SPIR-V runs on any Vulkan GPU), not {tuple(targets)}"
            )
        return platform or ("windows" if os.name == "nt" else "linux")

    def audit_checks(
        self,
        root: Path,
        names: set[str],
        targets: Sequence[str],
        policy: PlatformPolicy,
        binaries: Sequence[Path],
        *,
        record: BundleRecord | None,
        windows: bool,
    ) -> tuple[list[Check], list[FatbinReport]]:
        return [check_no_rocm(root, names, policy)], []

    # smoke
    def smoke_devices(
        self,
        cli: Path,
        targets: Sequence[str],
        *,
        asked: str,
        device: str | None,
        env: Mapping[str, str],
        logs: Path,
        kfd_topology: Path | None,
    ) -> SmokeDevices:
        found, probe_error = list_devices(cli, cwd=cli.parent, env=env, log=logs / "list-devices.log")
        vk = [(name, desc) for name, desc in found if name.startswith("Vulkan")]
        devices = tuple(f"{name}: {desc}" for name, desc in vk)
        expect, reason = decide_vulkan_expectation(asked, devices)
        if expect and device is None:
            device = vk[0][0] if vk else "Vulkan0"
        preflight = None
        if probe_error or (expect and not vk):  # a bundle that cannot start fails whatever was expected
            preflight = no_vulkan_device(probe_error, env)
        return SmokeDevices(devices, expect, reason, device, preflight)

    def smoke_verdict(
        self,
        loads: Sequence[LoadReport],
        *,
        expect_gpu: bool | None,
        texts: Sequence[str | None],
        bench: Sequence[BenchFigure],
    ) -> SmokeGpu:
        return vulkan_verdict(loads, expect_gpu=expect_gpu, texts=texts, bench=bench)

    def in_logs(self, loads: Sequence[LoadReport]) -> bool:
        return any(load.vulkan and load.vulkan.seen for load in loads)

    # publish and install: no per-target name
    def asset_template(self, template: str) -> str:
        return template.replace("rocm-{name}", NAME).replace("{name}", NAME)

    def release_isas(self, isas: Sequence[str]) -> list[str]:
        # SPIR-V shaders, compiled by the user's Vulkan driver for whatever GPU it finds
        return ["SPIR-V (any Vulkan GPU)"]

    # doctor: SPIR-V has no per-GPU kernels; does the host give the bundle a Vulkan device?
    def doctor_findings(
        self, gpus: Sequence[Gpu], bundle: Path, targets: Sequence[str], env: Mapping[str, str]
    ) -> tuple[list[Finding], dict[str, Any]]:
        findings, devices = check_vulkan_host(gpus, bundle, env)
        return findings, {"vulkan_devices": devices}


BACKEND: Backend = VulkanBackend()
