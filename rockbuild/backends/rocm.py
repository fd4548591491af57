"""The ROCm flavour: llama.cpp's HIP backend (``GGML_HIP``), compiled by the clang of a TheRock tarball (or /opt/rocm,
or Debian's ROCm) for exactly a job's gfx targets, one job per GPU family or target (or a list of them:
TheRock's multiarch tarball for a mixed-GPU job).

Per stage: the job's family, tarball group and targets (matrix); the toolchain, the ROCm variables and
``GPU_TARGETS`` (build); a bundle from the ROCm root with its closure, extras and kernel data, audited for kernel files
and device code of exactly the job's targets (bundle); the GPUs of the KFD topology and the ``ROCmN`` model buffers
(smoke); per-target assets ``llama-<tag>-<os>-rocm-<name>-x64`` (publish); kernels per GPU (doctor).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any

from rockbuild import console
from rockbuild.bundle.fatbin import read_fatbin
from rockbuild.bundle.kernels import target_order
from rockbuild.bundle.policy import name_matches
from rockbuild.bundle.pruning import with_pruning_proof
from rockbuild.core.errors import BundleError, ConfigError, LayoutError
from rockbuild.core.records import BundleRecord
from rockbuild.core.vocabulary import Check, Finding, SmokeDevices, Toolchain, ToolchainKind
from rockbuild.gpu import gpus_in_topology
from rockbuild.llamacpp.cmake import compose_definitions, compose_environment, host_build_variables
from rockbuild.process import first_line
from rockbuild.rocm.layout import LayoutKind, kernel_file_target
from rockbuild.smoke.parse import Placement, VerdictWords, combined_placement, format_buffers, judge, offload_claim

if TYPE_CHECKING:
    from rockbuild.bundle.fatbin import FatbinReport
    from rockbuild.bundle.policy import PlatformPolicy
    from rockbuild.core.jobs import FamilyTable, Job
    from rockbuild.core.records import BenchFigure, LoadReport, SmokeGpu
    from rockbuild.core.vocabulary import Check, Finding, Gpu
    from rockbuild.rocm.layout import RocmLayout

    from . import Backend

GGML_HIP = ("libggml-hip.so*", "ggml-hip.dll")
ROCM_DEVICE = re.compile(r"^ROCm\d+$")  # a model buffer on a ROCm GPU
KFD_TOPOLOGY = Path("/sys/class/kfd/kfd/topology/nodes")


# ---------------------------------------------------------------------------------------------------------------------
# Toolchain: the layout's compilers and prefix, as the build (running on the layout's platform) must spell them.

# a layout's kind as its toolchain records it (build.json's toolchain.kind): the same words
TOOLCHAIN_KINDS: dict[LayoutKind, ToolchainKind] = {
    LayoutKind.THEROCK: "therock",
    LayoutKind.OPT_ROCM: "opt-rocm",
    LayoutKind.DEBIAN: "debian",
}


def toolchain_from_layout(layout: RocmLayout) -> Toolchain:
    """The toolchain as a build running *in* the root sees it (a Debian chroot's /usr/lib/llvm-22/bin/clang)."""

    def seen(path: Path) -> str:
        return str(layout.in_root(path)) if layout.sysroot is not None else str(path)

    resource = layout.llvm_dir / "lib" / "clang"
    in_resource = layout.device_lib_dir is not None and layout.device_lib_dir.is_relative_to(resource)
    return Toolchain(
        platform=layout.platform,
        kind=TOOLCHAIN_KINDS[layout.kind],
        prefix=seen(layout.prefix),
        llvm_bin=seen(layout.llvm_dir / "bin"),
        c_compiler=seen(layout.clang),
        cxx_compiler=seen(layout.clangxx),
        device_lib_dir=seen(layout.device_lib_dir) if layout.device_lib_dir is not None else None,
        device_lib_in_resource_dir=in_resource,
    )


def check_runnable_here(layout: RocmLayout) -> None:
    """A chroot's compiler runs only inside the chroot: say how to build there instead of failing in CMake."""
    if layout.sysroot is not None:
        raise ConfigError(
            f"{layout.root} is a chroot: its compiler runs only inside it; run rockbuild in the root "
            f"(chroot {layout.sysroot}) with --rocm {layout.in_root(layout.prefix)}"
        )


HIP_FLAGS = "--offload-compress"


def cmake_definitions(
    toolchain: Toolchain,
    gpu_targets: Sequence[str],
    *,
    extra: Sequence[tuple[str, str]] = (),
    offline: bool = False,
    build_info: Mapping[str, str] | None = None,
    ccache: bool = False,
) -> list[tuple[str, str]]:
    """Every -D definition of a ROCm job's configure step: the seed flags (GGML_HIP), ROCm's clang for C, C++ and HIP,
    GPU_TARGETS, then the shared rules of :func:`rockbuild.llamacpp.cmake.compose_definitions`."""
    if not gpu_targets:
        raise ConfigError("a build needs at least one gfx target")
    cxx = toolchain.cmake_path(toolchain.cxx_compiler)
    own = {
        "CMAKE_C_COMPILER": toolchain.cmake_path(toolchain.c_compiler),
        "CMAKE_CXX_COMPILER": cxx,
        "CMAKE_HIP_COMPILER": cxx,
        "GPU_TARGETS": ";".join(gpu_targets),
        # libggml-hip's device code compressed (clang's CCOB bundles, which the HIP runtime reads since ROCm 6.2 and
        # the audit unpacks): about 55 MB of its 78 MB were code objects stored as they are
        "CMAKE_HIP_FLAGS": HIP_FLAGS,
    }
    return compose_definitions(
        own.items(),
        set_by="(from the job's targets, the ROCm root or the source)",
        extra=extra,
        offline=offline,
        build_info=build_info,
        ccache=ccache,
    )


def toolchain_variables(toolchain: Toolchain, ccache_dir: Path | str | None = None) -> dict[str, str]:
    """The variables rockbuild sets for the build (PATH aside).

    A distro (Debian) layout gets no ROCM_PATH/HIP_PATH/HIP_DEVICE_LIB_PATH at all: clang, hipconfig and llama.cpp's
    CMake find /usr and the bitcode in clang's resource dir by themselves, and ROCM_PATH=/usr even breaks clang
    ("cannot find ROCm device library": with ROCM_PATH set it looks only under $ROCM_PATH/amdgcn/bitcode). A TheRock
    or /opt/rocm tree gets its prefix, and HIP_DEVICE_LIB_PATH whenever ROCM_PATH points clang away from its default.
    """
    variables = {"HIP_PLATFORM": "amd", **host_build_variables(ccache_dir)}
    if toolchain.kind != str(LayoutKind.DEBIAN):
        variables["ROCM_PATH"] = variables["HIP_PATH"] = toolchain.prefix
        if toolchain.device_lib_dir:
            variables["HIP_DEVICE_LIB_PATH"] = toolchain.device_lib_dir
    bitcode = device_bitcode(toolchain.device_lib_dir) if ccache_dir is not None and toolchain.device_lib_dir else []
    if bitcode:
        # the device libraries every HIP object links are no header ccache sees: hashed with each compile, so that a
        # ROCm root kept at one path (rocm.fetch.stable_root) never serves an object built against other bitcode
        variables["CCACHE_EXTRAFILES"] = (";" if toolchain.windows else ":").join(bitcode)
    return variables


def device_bitcode(folder: str) -> list[str]:
    """The device libraries (``*.bc``) in ``folder``, sorted; none when it cannot be read."""
    try:
        return sorted(str(p) for p in Path(folder).glob("*.bc") if p.is_file())
    except OSError:
        return []


def toolchain_path_entries(toolchain: Toolchain) -> list[str]:
    """Directories put in front of PATH: ROCm's clang before any other clang, then the ROCm tools (hipconfig)."""
    if toolchain.windows:
        return [toolchain.llvm_bin, str(PureWindowsPath(toolchain.prefix) / "bin")]
    return [toolchain.llvm_bin, str(PurePosixPath(toolchain.prefix) / "bin")]


def build_environment(
    toolchain: Toolchain,
    *,
    base: Mapping[str, str] | None = None,
    msvc: Mapping[str, str] | None = None,
    ccache_dir: Path | str | None = None,
) -> dict[str, str]:
    """The complete environment of cmake and ninja: the allowlist of ``base``, the MSVC variables (Windows), the ROCm
    variables and PATH. Secrets never survive, wherever they came from."""
    return compose_environment(
        toolchain.windows,
        toolchain_variables(toolchain, ccache_dir),
        base=base,
        msvc=msvc,
        path_entries=toolchain_path_entries(toolchain),
    )


# ---------------------------------------------------------------------------------------------------------------------
# Audit: kernel files and device code for exactly the job's targets


def check_kernels(root: Path, names: set[str], targets: Sequence[str], policy: PlatformPolicy) -> Check:
    """Every job target has files in each kernel folder a shipped library uses, and no stray ``library/`` folder sits
    beside the libraries (it would win over ``rocblas/library``, bundling.md 4)."""
    failures, warnings = [], []
    details: dict[str, Any] = {}
    if (root / "library").is_dir():
        failures.append("a library/ folder sits beside the libraries: rocBLAS would take it before rocblas/library")
    if not targets:
        failures.append("the job's targets are unknown (no bundle.json): pass --targets")
    per_folder: list[tuple[Any, dict[str, int]]] = []
    for rule in policy.kernel_data:
        users = sorted(n for n in names if name_matches(n, rule.used_by, platform=policy.platform))
        folder = root / rule.dest
        if not folder.is_dir():
            if users:
                failures.append(f"{rule.dest}/ is missing although {users[0]} is shipped")
            continue
        per_target: dict[str, int] = {}
        generic = 0
        for _dirpath, _dirnames, filenames in os.walk(folder):
            for filename in filenames:
                target = kernel_file_target(filename)
                if target is None:
                    generic += 1
                else:
                    per_target[target] = per_target.get(target, 0) + 1
        details[rule.dest] = {"generic": generic, "per_target": dict(sorted(per_target.items()))}
        per_folder.append((rule, per_target))
        extra = sorted(set(per_target) - set(targets), key=target_order)
        if extra:
            warnings.append(f"{rule.dest}/ also carries files for {', '.join(extra)} (not job targets)")
        if not users:
            warnings.append(f"{rule.dest}/ is shipped but no library that uses it ({', '.join(rule.used_by)})")
        if rule.component == "kpack":
            warnings.append(
                f"{rule.dest}/ is found through the split libraries' .rocm_kpack_ref paths (made to name "
                "the bundle's, see the kpack-refs check); TheRock's loader reading it needs a GPU to prove"
            )
    packed = {t for rule, per_target in per_folder if rule.component == "kpack" for t in per_target}
    for rule, per_target in per_folder:
        for target in targets:
            if not per_target.get(target) and target not in packed:
                failures.append(f"{rule.dest}/ has no kernel files for {target}")
    return Check("kernel-data", not failures, tuple(failures), tuple(warnings), details)


def check_code_objects(
    root: Path, candidates: Sequence[Path], targets: Sequence[str], pruned: Sequence[str] = ()
) -> tuple[Check, list[FatbinReport]]:
    """libggml-hip (and every fat binary bundle.json says was pruned) must hold exactly the job's targets."""
    failures, warnings = [], []
    reports: list[FatbinReport] = []
    ggml = [
        p
        for p in candidates
        if p.parent == root and (name_matches(p.name, GGML_HIP, platform="linux") or p.name in pruned)
    ]
    if not any(name_matches(p.name, GGML_HIP, platform="linux") for p in ggml):
        warnings.append("no libggml-hip in the bundle: the GPU code of the build was not checked")
    for path in ggml:
        try:
            report = read_fatbin(path)
        except BundleError as exc:
            failures.append(f"{path.name}: {exc.message}")
            continue
        if report is None:
            failures.append(f"{path.name} has no {'.hip_fatbin'} section: it carries no GPU code")
            continue
        reports.append(report)
        got = set(report.targets)
        want = set(targets)
        if got != want:
            parts = []
            if want - got:
                parts.append(f"lacks {', '.join(sorted(want - got, key=target_order))}")
            if got - want:
                parts.append(f"also has {', '.join(sorted(got - want, key=target_order))}")
            failures.append(
                f"{path.name} has device code for {', '.join(report.targets) or 'nothing'}: {' and '.join(parts)}"
            )
    details = {"files": [r.summary().to_dict() for r in reports]}
    return Check("code-objects", not failures, tuple(failures), tuple(warnings), details), reports


def other_fat_binaries(root: Path, candidates: Sequence[Path]) -> list[FatbinReport]:
    """The GPU targets inside the other fat binaries (rocBLAS, rocSOLVER...): for the report, never a failure."""
    out = []
    for path in candidates:
        if name_matches(path.name, GGML_HIP, platform="linux"):
            continue
        try:
            report = read_fatbin(path)
        except BundleError:
            continue
        if report is not None:
            out.append(report)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Smoke: the GPUs of the KFD topology, the ROCmN model buffers


def kfd_gfx_targets(topology: Path = KFD_TOPOLOGY) -> list[str]:
    """gfx names of the GPUs the amdgpu kernel driver exposes (:mod:`rockbuild.gpu`'s reading of ``topology``)."""
    return [gpu.target for gpu in gpus_in_topology(topology)]


def decide_expectation(asked: str, targets: Sequence[str], devices: Sequence[str]) -> tuple[bool, str]:
    """(expect a GPU run?, why) for ``--expect-gpu auto|yes|no``."""
    if asked == "yes":
        return True, "--expect-gpu yes"
    if asked == "no":
        return False, "--expect-gpu no"
    matching = [d for d in devices if d in targets]
    if matching:
        return True, f"auto: a ROCm device of this bundle's targets is present ({', '.join(matching)})"
    if devices:
        return False, (
            f"auto: ROCm devices present ({', '.join(devices)}) but none is a target of this bundle "
            f"({', '.join(targets) or '?'})"
        )
    return False, "auto: no ROCm device found"


WORDS: dict[str, str] = {
    "gpu": "gpu: ROCm ({mib:.2f} MiB of weights on the GPU; offloaded {offloaded} layers)",
    "partial": "gpu: partial offload ({buffers}; offloaded {offloaded} layers)",
    "cpu": "gpu: absent (CPU run proves library loading only)",
    "partial_lacks": "not every layer on the GPU",
    "weights_on": "the GPU",
}


def rocm_verdict(loads: Sequence[LoadReport], *, expect_gpu: bool | None, texts: Sequence[str | None] = ()) -> SmokeGpu:
    """``gpu``: every load put weights in a ``ROCmN`` buffer and offloaded all layers (when the line is there);
    ``partial``: some weights on a ROCm device, not all layers; ``cpu``: no ROCm buffer (an ``offloaded N/N`` line
    next to CPU or RPC buffers is noted, never believed); ``unknown``: no buffer lines at all (no ``-lv 4`` log)."""
    notes: list[str] = []
    with_buffers = [load for load in loads if load.buffers]
    if not with_buffers:
        placement, gpu_mib, host_mib = "unknown", 0.0, 0.0
    else:
        placements = []
        gpu_mib = max(sum(b.mib for b in load.buffers if ROCM_DEVICE.match(b.device)) for load in with_buffers)
        host_mib = max(sum(b.mib for b in load.buffers if not ROCM_DEVICE.match(b.device)) for load in with_buffers)
        for load in with_buffers:
            on_gpu = any(ROCM_DEVICE.match(b.device) and b.mib > 0 for b in load.buffers)
            full = load.offloaded is None or load.offloaded[0] == load.offloaded[1]
            if on_gpu and full:
                placements.append("gpu")
            elif on_gpu:
                placements.append("partial")
            else:
                placements.append("cpu")
                others = [b for b in load.buffers if not b.device.startswith("CPU")]
                if note := offload_claim(
                    load, "ROCm", f" (non-GPU device: {format_buffers(others)})" if others else ""
                ):
                    notes.append(note)
        placement = combined_placement(placements)
    return judge(
        VerdictWords(**WORDS),
        Placement(placement, loads, gpu_mib=gpu_mib, host_mib=host_mib, notes=notes),
        expect_gpu=expect_gpu,
        texts=texts,
    )


# ---------------------------------------------------------------------------------------------------------------------
# The backend


class RocmBackend:
    name = "rocm"
    label = "ROCm"
    needs_rocm = True
    needs_gpu = True
    per_target = True
    ggml_libraries: tuple[str, ...] = GGML_HIP
    library_target: str | None = "ggml-hip"

    def job_fields(self, os_name: str, target: str, families: FamilyTable, origin: str) -> dict[str, Any]:
        sel = families.select(target, where=origin)
        group = sel.family.group_for(os_name)
        missing = sel.unpublished_on(os_name)
        if missing or group is None:
            part = missing[0] if missing else sel
            written = f"[{', '.join(p.short for p in sel.members)}]" if sel.members else target
            inside = f" (in {written})" if sel.members and part is not sel else ""
            raise ConfigError(
                f"{origin}: {part.short}{inside} cannot be built for {os_name}: TheRock publishes no {os_name} "
                f"tarball for {part.family.name}; exclude {{os: {os_name}, target: {written}}}"
            )
        assert group is not None
        return {
            "id": f"{os_name}-{sel.short}",
            "name": sel.short,
            "family": sel.family.name,
            "group": group,
            "legacy_groups": sel.family.legacy_groups,
            "targets": sel.targets,
        }

    # build
    def toolchain(self, job: Job, layout: RocmLayout | None) -> Toolchain:
        if layout is None:
            raise LayoutError(f"{job.id} is a ROCm job: it needs a ROCm root")
        if layout.platform != job.os:
            raise LayoutError(f"{layout.root} is a {layout.platform} ROCm root; job {job.id} needs {job.os}")
        check_runnable_here(layout)
        toolchain = toolchain_from_layout(layout)
        missing = [t for t in job.targets if layout.kernel_data and t not in layout.gfx_targets]
        if missing:
            console.warn(f"{layout.root} has no rocBLAS/hipBLASLt kernels for {', '.join(missing)}")
        return toolchain

    def build_environment(
        self,
        job: Job,
        toolchain: Toolchain | None,
        *,
        msvc: Mapping[str, str] | None = None,
        ccache_dir: Path | None = None,
        base: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, str], list[str]]:
        assert toolchain is not None
        env = build_environment(toolchain, base=base, msvc=msvc, ccache_dir=ccache_dir)
        return env, list(toolchain_variables(toolchain, ccache_dir))

    def compilers(
        self, job: Job, toolchain: Toolchain | None, env: Mapping[str, str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        assert toolchain is not None
        compilers = {
            "c": first_line([toolchain.c_compiler, "--version"], env),
            "cxx": first_line([toolchain.cxx_compiler, "--version"], env),
        }
        compilers["hip"] = compilers["cxx"]
        return compilers, {}

    def cmake_definitions(
        self, job: Job, toolchain: Toolchain | None, *, offline: bool, build_info: Mapping[str, str], ccache: bool
    ) -> list[tuple[str, str]]:
        assert toolchain is not None
        return cmake_definitions(
            toolchain, job.targets, extra=job.cmake, offline=offline, build_info=build_info, ccache=ccache
        )

    # bundle and audit
    def bundle_platform(self, layout: RocmLayout | None, targets: Sequence[str], platform: str | None) -> str:
        if layout is None:
            raise BundleError("a ROCm bundle needs the ROCm root it was built with; pass --rocm DIR")
        if not targets:
            raise BundleError("no GPU targets given; pass --targets gfx1151[,gfx...]")
        return layout.platform

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
        if windows:
            code, fat = check_code_objects(root, binaries, targets)
            return [check_kernels(root, {n.lower() for n in names}, targets, policy), code], fat

        pruned = [p.file for p in record.pruned_fatbins] if record is not None else []
        kernels = check_kernels(root, names, targets, policy)
        code, fat = check_code_objects(root, binaries, targets, pruned)
        code = with_pruning_proof(code, root, record)  # each pruned fat binary: its independent check, still valid
        return [kernels, code], fat + other_fat_binaries(root, [p for p in binaries if p.name not in pruned])

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
        devices = tuple(kfd_gfx_targets(kfd_topology) if kfd_topology else kfd_gfx_targets())
        expect, reason = decide_expectation(asked, targets, devices)
        return SmokeDevices(devices, expect, reason, device)

    def smoke_verdict(
        self,
        loads: Sequence[LoadReport],
        *,
        expect_gpu: bool | None,
        texts: Sequence[str | None],
        bench: Sequence[BenchFigure],
    ) -> SmokeGpu:
        return rocm_verdict(loads, expect_gpu=expect_gpu, texts=texts)

    def in_logs(self, loads: Sequence[LoadReport]) -> bool:
        return False  # the default: what logs that show no other backend are judged by

    # publish and install
    def asset_template(self, template: str) -> str:
        return template

    def release_isas(self, isas: Sequence[str]) -> list[str]:
        return list(isas)

    # doctor
    def doctor_findings(
        self, gpus: Sequence[Gpu], bundle: Path, targets: Sequence[str], env: Mapping[str, str]
    ) -> tuple[list[Finding], dict[str, Any]]:
        findings = []
        for gpu in gpus:
            if gpu.target in targets:
                findings.append(Finding("ok", "bundle", f"{bundle} has kernels for {gpu.target}"))
            else:
                findings.append(
                    Finding(
                        "error",
                        "bundle",
                        f"{bundle} has kernels for {', '.join(targets) or 'no target'}, not for {gpu.target}: "
                        "it would fail or run on the CPU there",
                        f"rockbuild install --target {gpu.target}",
                    )
                )
        return findings, {}


BACKEND: Backend = RocmBackend()
