"""The flavours of llama.cpp that rockbuild builds, one module each, behind one small protocol.

As cibuildwheel keeps one module per platform, every backend of llama.cpp that rockbuild ships is one module of this
package (``rocm.py``: the HIP backend compiled by TheRock's clang for gfx targets; ``vulkan.py``: the Vulkan backend
compiled by the host's compiler, one build per OS). A module holds what its flavour does at each stage and exposes it
as ``BACKEND``, an object of the :class:`Backend` protocol; the stages ask ``get_backend(job.backend)`` and never test
a backend's name. Adding a backend is one new module here (its file name is its name) plus its tests.

The registry is light: listing the names reads the package's file names, a backend module is imported the first time
:func:`get_backend` asks for it, and those modules import the stages they call into only inside their methods, so
``rockbuild --help`` loads none of them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from rockbuild.core.data import suggest
from rockbuild.core.errors import ConfigError
from rockbuild.core.records import BundleRecord
from rockbuild.core.vocabulary import SmokeDevices

if TYPE_CHECKING:
    from rockbuild.bundle.fatbin import FatbinReport
    from rockbuild.bundle.policy import PlatformPolicy
    from rockbuild.core.jobs import FamilyTable, Job
    from rockbuild.core.records import BenchFigure, LoadReport, SmokeGpu
    from rockbuild.core.vocabulary import Check, Finding, Gpu, Toolchain
    from rockbuild.rocm.layout import RocmLayout

# what only a ROCm bundle carries: the HIP runtime and the libraries llama.cpp's HIP backend pulls in (the Vulkan
# backend audits their absence)
ROCM_LIBRARIES = (
    "libggml-hip.so*", "ggml-hip.dll", "libamdhip64.so*", "amdhip64*.dll", "libhiprtc*.so*", "hiprtc*.dll",
    "libhsa-runtime64.so*", "libamd_comgr*.so*", "amd_comgr*.dll", "librocblas.so*", "rocblas.dll",
    "libhipblas*.so*", "hipblas*.dll", "librocsolver.so*", "rocsolver.dll", "librocsparse.so*", "rocsparse.dll",
    "librocm_kpack.so*", "librocprofiler*.so*", "libroctx64.so*", "librocm-core.so*",
)

def foreign_files(root: Path, names: set[str], policy: PlatformPolicy, *, forbidden: Sequence[str], why: str,
                  flavour: str) -> list[str]:
    """The audit's failures for a bundle without ROCm: a top-level file matching ``forbidden`` (``{name} {why}``), one
    the policy says never ships, or a ROCm kernel data folder."""
    from rockbuild.bundle.policy import name_matches

    failures = []
    for name in sorted(names):
        if name_matches(name, forbidden, platform=policy.platform):
            failures.append(f"{name} {why}")
        elif (reason := policy.system_reason(name)) is not None:
            failures.append(f"{name} ships although it never may: {reason}")
    for folder in [*(rule.dest for rule in policy.kernel_data), "library"]:
        if (root / folder).is_dir():
            failures.append(f"{folder}/ (ROCm kernel data) is in a {flavour} bundle")
    return failures


DEFAULT = "rocm"  # what a matrix without a backend axis, a bundle without bundle.json and `--backend`'s default mean


class Backend(Protocol):
    """What a stage asks of a flavour. Attributes first, then one group of methods per stage."""

    name: str  # Job.backend, the matrix's backend axis, bundle.json's backend: rocm
    label: str  # the flavour for people: ROCm
    needs_rocm: bool  # resolve and fetch a TheRock tarball, build from its root, bundle its closure
    needs_gpu: bool  # its bundle computes on a GPU (doctor: a machine without one is a problem only then)
    per_target: bool  # one job per gfx family or target (the matrix's target axis) with GPU code for exactly those;
    #                   else one job per OS with no gfx targets
    ggml_libraries: tuple[str, ...]  # llama.cpp's library of this backend (globs): tells a bundle's flavour
    # the CMake target of that library (ggml-hip): all a job built on its OS's common part compiles (the common part
    # brings the programs, libllama, libggml-base and the CPU modules); None: a backend with no library of its own
    # (cpu), which builds whole
    library_target: str | None

    # 1. matrix
    def job_fields(self, os_name: str, target: str, families: FamilyTable, origin: str) -> dict[str, Any]:
        """Job's id, name, family, group, legacy_groups and targets for ``os_name`` (and ``target``, "" for a
        backend that is not per target; a mixed-GPU job's members joined by ``+``, ``gfx1151+gfx1201``); a
        ConfigError naming ``origin`` when it cannot be built."""
        ...

    # 3. build
    def toolchain(self, job: Job, layout: RocmLayout | None) -> Toolchain | None:
        """The compilers of the build (from the job's ROCm root, checked), or None: the host's."""
        ...

    def build_environment(
        self, job: Job, toolchain: Toolchain | None, *, msvc: Mapping[str, str] | None = None,
        ccache_dir: Path | None = None, base: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, str], list[str]]:
        """The environment of cmake and ninja, and the names of the variables rockbuild sets or passes on in it
        (build.json shows them; a change of one configures again)."""
        ...

    def compilers(self, job: Job, toolchain: Toolchain | None,
                  env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """The compilers' versions (build.json's ``compilers``) and the backend's own tools' (added to ``tools``);
        a BuildError when one is missing."""
        ...

    def cmake_definitions(self, job: Job, toolchain: Toolchain | None, *, offline: bool,
                          build_info: Mapping[str, str], ccache: bool) -> list[tuple[str, str]]:
        """Every -D definition of the configure step, in order
        (:func:`rockbuild.llamacpp.cmake.compose_definitions`)."""
        ...

    # 4. bundle and audit
    def bundle_platform(self, layout: RocmLayout | None, targets: Sequence[str], platform: str | None) -> str:
        """The platform of the bundle once its inputs are checked (a ROCm root and gfx targets, or neither); a
        BundleError when they do not fit."""
        ...

    def audit_checks(
        self, root: Path, names: set[str], targets: Sequence[str], policy: PlatformPolicy, binaries: Sequence[Path],
        *, record: BundleRecord | None, windows: bool,
    ) -> tuple[list[Check], list[FatbinReport]]:
        """The audit's checks of this flavour (after the shared ones) over the bundle's top-level ``names`` and
        ``binaries``, and the fat binaries it read."""
        ...

    # 5. smoke
    def smoke_devices(
        self, cli: Path, targets: Sequence[str], *, asked: str, device: str | None, env: Mapping[str, str],
        logs: Path, kfd_topology: Path | None,
    ) -> SmokeDevices:
        """Which devices the bundle (its llama-cli is ``cli``) can use here, whether a GPU run is expected
        (``asked``: auto, yes or no) and the device to pin."""
        ...

    def smoke_verdict(self, loads: Sequence[LoadReport], *, expect_gpu: bool | None, texts: Sequence[str | None],
                      bench: Sequence[BenchFigure]) -> SmokeGpu:
        """Where the model went, by this backend's buffers (ROCm0, Vulkan0), and whether that is what was expected."""
        ...

    def in_logs(self, loads: Sequence[LoadReport]) -> bool:
        """Do the logs show this backend at work, so that they are judged by it whatever the bundle claims?"""
        ...

    # 5. publish and install
    def asset_template(self, template: str) -> str:
        """publish.yaml's asset name template (``llama-{tag}-{os}-rocm-{name}-x64``) for this flavour's jobs."""
        ...

    def release_isas(self, isas: Sequence[str]) -> list[str]:
        """The release notes' ISA column for a job whose bundle carries GPU code for ``isas``."""
        ...

    # users: doctor
    def doctor_findings(self, gpus: Sequence[Gpu], bundle: Path, targets: Sequence[str],
                        env: Mapping[str, str]) -> tuple[list[Finding], dict[str, Any]]:
        """What ``rockbuild doctor --bundle`` says of a bundle of this flavour on this machine's GPUs, and what it adds
        to the report's bundle section."""
        ...


# ---------------------------------------------------------------------------------------------------------------------
# The registry


def _shipped() -> tuple[str, ...]:
    """The backend modules of this package, by file name: the default first, then by name."""
    found = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    return tuple(sorted(found, key=lambda name: name != DEFAULT))


BACKENDS: tuple[str, ...] = _shipped()  # the backends rockbuild ships: rocm, vulkan
_loaded: dict[str, Backend] = {}
_registered: dict[str, Backend] = {}


def names() -> tuple[str, ...]:
    """Every backend's name: those shipped (:data:`BACKENDS`), then those :func:`register` added."""
    return (*BACKENDS, *(name for name in _registered if name not in BACKENDS))


def get_backend(name: str) -> Backend:
    """The backend called ``name``; a ConfigError for one rockbuild does not know."""
    if name in _registered:
        return _registered[name]
    if name in BACKENDS:
        if name not in _loaded:
            _loaded[name] = cast("Backend", importlib.import_module(f"{__name__}.{name}").BACKEND)
        return _loaded[name]
    known = names()
    raise ConfigError(f"unknown backend {name!r}{suggest(name, known)}; known: {', '.join(known)}")


def all_backends() -> list[Backend]:
    """Every backend, in :func:`names` order."""
    return [get_backend(name) for name in names()]


def bundle_backend(names: Iterable[str], meta: BundleRecord | Mapping[str, Any] | None, platform: str) -> str:
    """The bundle's backend: bundle.json's ``backend``, else (a bundle written before the field existed, or a plain
    build folder) the default (``rocm``) unless the top-level files ``names`` lack its llama.cpp library and hold
    another backend's (libggml-vulkan: ``vulkan``). The audit and the smoke ask it of a bundle they are handed."""
    from rockbuild.bundle.policy import name_matches

    recorded = meta.backend if isinstance(meta, BundleRecord) else meta.get("backend") if meta else None
    if recorded:
        return str(recorded)
    names = list(names)

    def has(globs: Sequence[str]) -> bool:
        return any(name_matches(n, globs, platform=platform) for n in names)

    if not has(get_backend(DEFAULT).ggml_libraries):
        for backend in all_backends():
            if backend.name != DEFAULT and backend.ggml_libraries and has(backend.ggml_libraries):
                return backend.name
    return DEFAULT


def register(backend: Backend) -> Backend:
    """Add a backend that lives outside this package (a plugin, a test); it answers to its ``name`` from now on."""
    if backend.name in BACKENDS:
        raise ValueError(f"backend {backend.name!r} is one of rockbuild's own")
    _registered[backend.name] = backend
    return backend


def unregister(name: str) -> None:
    """Forget a backend :func:`register` added."""
    _registered.pop(name, None)


__all__ = [
    "BACKENDS", "DEFAULT", "Backend", "SmokeDevices", "all_backends", "bundle_backend", "get_backend", "names",
    "register", "unregister",
]
