"""The third backend of the backend tests (tests/unit/test_backends.py, tests/integration/test_backends_build.py):
llama.cpp's CPU backend alone, one class registered through the public API, that works in the matrix, the build, the
bundle command, the night's inputs and the asset names without a line of any stage module knowing it."""

from __future__ import annotations

from rockbuild.core.errors import BundleError
from rockbuild.core.vocabulary import SmokeDevices
from rockbuild.llamacpp.cmake import (
    HOST_BUILD_INHERITED,
    compose_definitions,
    host_build_environment,
    host_build_variables,
)


class CpuBackend:
    """llama.cpp's CPU backend alone: no ROCm, no GPU, one job per OS, built with the host's compiler."""

    name = "blas"
    label = "BLAS"
    needs_rocm = False
    needs_gpu = False
    per_target = False
    ggml_libraries: tuple[str, ...] = ()  # libggml-blas ships in every bundle: only bundle.json tells a CPU one
    library_target = "ggml-blas"  # the stand-in tree builds it with GGML_BLAS=ON (a job on a common part: only it)

    def job_fields(self, os_name, target, families, origin):
        return {"id": f"{os_name}-blas", "name": "blas", "family": "", "group": "", "legacy_groups": (), "targets": ()}

    def toolchain(self, job, layout):
        return None

    def build_environment(self, job, toolchain, *, msvc=None, ccache_dir=None, base=None):
        env = host_build_environment(job.os, base=base, msvc=msvc, ccache_dir=ccache_dir)
        return env, [*host_build_variables(ccache_dir), *HOST_BUILD_INHERITED]

    def compilers(self, job, toolchain, env):
        from rockbuild.llamacpp.cmake import host_compilers

        return host_compilers(env, job.os == "windows"), {}

    def cmake_definitions(self, job, toolchain, *, offline, build_info, ccache):
        return compose_definitions(
            swap={"GGML_HIP": "GGML_BLAS", "GGML_HIP_ROCWMMA_FATTN": None},
            reserved={"GGML_HIP", "GGML_VULKAN"},
            set_by="for a CPU job",
            extra=job.cmake,
            offline=offline,
            build_info=build_info,
            ccache=ccache,
        )

    def bundle_platform(self, layout, targets, platform):
        if targets:
            raise BundleError(f"a CPU bundle has no GPU targets, not {tuple(targets)}")
        return platform or "linux"

    def audit_checks(self, root, names, targets, policy, binaries, *, record, windows):
        return [], []

    def smoke_devices(self, cli, targets, *, asked, device, env, logs, kfd_topology):
        return SmokeDevices((), False, "a CPU build: no GPU run to expect", device)

    def smoke_verdict(self, loads, *, expect_gpu, texts, bench):
        from rockbuild.smoke.parse import Placement, VerdictWords, judge

        with_buffers = [load for load in loads if load.buffers]
        words = VerdictWords(
            gpu="gpu: none",
            partial="gpu: none",
            cpu="gpu: none (a CPU build)",
            partial_lacks="a GPU",
            weights_on="the CPU",
        )
        host = max((sum(b.mib for b in load.buffers) for load in with_buffers), default=0.0)
        return judge(
            words,
            Placement("blas" if with_buffers else "unknown", loads, host_mib=host),
            expect_gpu=expect_gpu,
            texts=texts,
        )

    def in_logs(self, loads):
        return False

    def asset_template(self, template):
        return template.replace("rocm-{name}", "blas").replace("{name}", "blas")

    def release_isas(self, isas):
        return ["x86-64 (AVX2)"]

    def doctor_findings(self, gpus, bundle, targets, env):
        return [], {}
