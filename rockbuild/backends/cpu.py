"""The CPU flavour: llama.cpp with no GPU backend at all, only its CPU modules (``GGML_CPU_ALL_VARIANTS``), compiled
by the host's C/C++ compiler or a cross toolchain (``--cross mingw-w64``), one job per OS, no ROCm anywhere.

Not a release flavour: the default matrix has no ``backend: cpu`` entry. It is what the Windows end-to-end job builds
(``windows-cpu``, cross-built with mingw-w64 and run under wine, docs/e2e.md): every stage of a Windows asset (the PE
closure, the audit, the smoke test's programs, install) on something this project can run, with nothing of a GPU
driver in the way. A matrix may list it (``{os: linux, backend: cpu}``) for a CPU-only build.

Per stage: a job ``<os>-cpu`` with no family, tarball group or targets (matrix); nothing to resolve or fetch; the seed
flags without GGML_HIP (build); a bundle with nothing of ROCm or Vulkan in it (audit ``no-gpu-backend``); no device
to find, every run on the CPU (smoke); one asset per OS, ``llama-<tag>-<os>-cpu-x64`` (publish, install).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rockbuild.backends import ROCM_LIBRARIES, foreign_files
from rockbuild.bundle.policy import name_matches
from rockbuild.core.errors import BundleError
from rockbuild.core.records import BundleRecord
from rockbuild.core.vocabulary import Check, Finding, SmokeDevices
from rockbuild.llamacpp.cmake import compose_definitions, host_build_environment, host_build_variables, host_compilers
from rockbuild.smoke.parse import Placement, VerdictWords, judge

if TYPE_CHECKING:
    from rockbuild.bundle.fatbin import FatbinReport
    from rockbuild.bundle.policy import PlatformPolicy
    from rockbuild.core.jobs import FamilyTable, Job
    from rockbuild.core.records import BenchFigure, LoadReport, SmokeGpu
    from rockbuild.core.vocabulary import Gpu, Toolchain
    from rockbuild.rocm.layout import RocmLayout

    from . import Backend

NAME = "cpu"
# the GPU backends' libraries: none may be in a CPU bundle
GPU_BACKEND_LIBRARIES = (*ROCM_LIBRARIES, "libggml-vulkan.so*", "ggml-vulkan.dll", "libggml-cuda.so*", "ggml-cuda.dll")
GGML_CPU = ("libggml-cpu*.so*", "ggml-cpu*.dll")

CPU_SWAP: dict[str, str | None] = {"GGML_HIP": None, "GGML_HIP_ROCWMMA_FATTN": None}
CPU_RESERVED_DEFINITIONS = frozenset({"GGML_HIP", "GGML_VULKAN", "GGML_CUDA"})


def cpu_cmake_definitions(
    *,
    extra: Sequence[tuple[str, str]] = (),
    offline: bool = False,
    build_info: Mapping[str, str] | None = None,
    ccache: bool = False,
) -> list[tuple[str, str]]:
    """The -D definitions of a CPU job: the seed flags with no GPU backend switched on."""
    return compose_definitions(
        swap=CPU_SWAP,
        reserved=CPU_RESERVED_DEFINITIONS,
        set_by="for a CPU job (no GPU backend)",
        extra=extra,
        offline=offline,
        build_info=build_info,
        ccache=ccache,
    )


def check_no_gpu_backend(root: Path, names: set[str], policy: PlatformPolicy) -> Check:
    """A CPU bundle: no GPU backend library, nothing of ROCm, no kernel data, and its CPU modules present."""
    failures = foreign_files(
        root,
        names,
        policy,
        forbidden=GPU_BACKEND_LIBRARIES,
        why="is a GPU backend's library: a CPU bundle must not carry one",
        flavour="CPU",
    )
    cpu = sorted(n for n in names if name_matches(n, GGML_CPU, platform=policy.platform))
    warnings = () if cpu else ("no ggml-cpu library in the bundle: is this a llama.cpp build?",)
    return Check("no-gpu-backend", not failures, tuple(failures), warnings, {"ggml_cpu": cpu})


WORDS = VerdictWords(
    gpu="gpu: none (a CPU build)",
    partial="gpu: none (a CPU build)",
    cpu="gpu: none, a CPU build: every run on the CPU ({mib:.2f} MiB on the GPU)",
    partial_lacks="a CPU build has no GPU backend",
    weights_on="the CPU",
    unknown="gpu: none, a CPU build (no model buffer lines in the logs)",
    cpu_lacks="a CPU build has no GPU backend",
    unknown_lacks="a CPU build has no GPU backend",
)


class CpuBackend:
    name = NAME
    label = "CPU"
    needs_rocm = False
    needs_gpu = False
    per_target = False
    ggml_libraries: tuple[str, ...] = ()  # the CPU modules are in every bundle: a bundle's flavour is told by the
    #                                       absence of the others (bundle.json says it)
    library_target: str | None = None

    def job_fields(self, os_name: str, target: str, families: FamilyTable, origin: str) -> dict[str, Any]:
        return {"id": f"{os_name}-{NAME}", "name": NAME, "family": "", "group": "", "legacy_groups": (), "targets": ()}

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
        env = host_build_environment(job.os, base=base, msvc=msvc, ccache_dir=ccache_dir)
        return env, [*host_build_variables(ccache_dir), "CC", "CXX"]

    def compilers(
        self, job: Job, toolchain: Toolchain | None, env: Mapping[str, str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        return host_compilers(env, job.os == "windows"), {}

    def cmake_definitions(
        self, job: Job, toolchain: Toolchain | None, *, offline: bool, build_info: Mapping[str, str], ccache: bool
    ) -> list[tuple[str, str]]:
        return cpu_cmake_definitions(extra=job.cmake, offline=offline, build_info=build_info, ccache=ccache)

    def bundle_platform(self, layout: RocmLayout | None, targets: Sequence[str], platform: str | None) -> str:
        if targets:
            raise BundleError(f"a CPU bundle has no GPU targets, not {tuple(targets)}")
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
        return [check_no_gpu_backend(root, names, policy)], []

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
        preflight = "--expect-gpu yes on a CPU bundle: it has no GPU backend to run on" if asked == "yes" else None
        return SmokeDevices((), False, "a CPU build: no GPU backend", None, preflight)

    def smoke_verdict(
        self,
        loads: Sequence[LoadReport],
        *,
        expect_gpu: bool | None,
        texts: Sequence[str | None],
        bench: Sequence[BenchFigure],
    ) -> SmokeGpu:
        with_buffers = [load for load in loads if load.buffers]
        host_mib = max((sum(b.mib for b in load.buffers) for load in with_buffers), default=0.0)
        return judge(WORDS, Placement("cpu", loads, host_mib=host_mib), expect_gpu=False, texts=texts)

    def in_logs(self, loads: Sequence[LoadReport]) -> bool:
        return False

    def asset_template(self, template: str) -> str:
        return template.replace("rocm-{name}", NAME).replace("{name}", NAME)

    def release_isas(self, isas: Sequence[str]) -> list[str]:
        return ["none (CPU only)"]

    def doctor_findings(
        self, gpus: Sequence[Gpu], bundle: Path, targets: Sequence[str], env: Mapping[str, str]
    ) -> tuple[list[Finding], dict[str, Any]]:
        note = " (this machine's GPU goes unused: a ROCm or Vulkan build would use it)" if gpus else ""
        return [Finding("ok", "cpu", f"a CPU build: it needs no GPU driver{note}")], {}


BACKEND: Backend = CpuBackend()
