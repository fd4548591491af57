"""The flavours of llama.cpp that rockbuild builds, one module each, behind one small protocol.

As cibuildwheel keeps one module per platform, every backend of llama.cpp that rockbuild ships is one module of this
package (``rocm.py``: the HIP backend compiled by TheRock's clang for gfx targets; ``vulkan.py``: the Vulkan backend
compiled by the host's compiler, one build per OS). A module holds what its flavour does at each stage and exposes it
as ``BACKEND``, an object of the :class:`Backend` protocol, and never tests a backend's name. Adding a backend is one
new module here (its file name is its name) plus its tests.

The backends sit above the stages they serve and are made of those stages' pieces (the CMake definitions, the
policy's patterns, the smoke's log parsers). So the build, the bundle, the audit and the smoke never import this
package: each says what it asks of a backend in a small protocol of its own (``llamacpp/backend.py``,
``bundle/backend.py``, ``smoke/backend.py``, which :class:`Backend` joins) and is handed :data:`REGISTRY` by the
pipeline or the command that runs it. The layers above (the matrix, publishing, the doctor) ask
:func:`get_backend` here.

The registry is light: listing the names reads the package's file names, and a backend module is imported the first
time :func:`get_backend` asks for it, so ``rockbuild --help`` loads none of them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from rockbuild.bundle.backend import BundleBackend
from rockbuild.core.data import suggest
from rockbuild.core.errors import ConfigError
from rockbuild.core.jobs import DEFAULT_BACKEND
from rockbuild.core.vocabulary import Backends, SmokeDevices
from rockbuild.llamacpp.backend import BuildBackend
from rockbuild.smoke.backend import SmokeBackend

if TYPE_CHECKING:
    from rockbuild.bundle.policy import PlatformPolicy
    from rockbuild.core.jobs import FamilyTable
    from rockbuild.core.records import BundleRecord
    from rockbuild.core.vocabulary import Finding, Gpu

# what only a ROCm bundle carries: the HIP runtime and the libraries llama.cpp's HIP backend pulls in (the Vulkan
# backend audits their absence)
ROCM_LIBRARIES = (
    "libggml-hip.so*",
    "ggml-hip.dll",
    "libamdhip64.so*",
    "amdhip64*.dll",
    "libhiprtc*.so*",
    "hiprtc*.dll",
    "libhsa-runtime64.so*",
    "libamd_comgr*.so*",
    "amd_comgr*.dll",
    "librocblas.so*",
    "rocblas.dll",
    "libhipblas*.so*",
    "hipblas*.dll",
    "librocsolver.so*",
    "rocsolver.dll",
    "librocsparse.so*",
    "rocsparse.dll",
    "librocm_kpack.so*",
    "librocprofiler*.so*",
    "libroctx64.so*",
    "librocm-core.so*",
)


def foreign_files(
    root: Path, names: set[str], policy: PlatformPolicy, *, forbidden: Sequence[str], why: str, flavour: str
) -> list[str]:
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


class Backend(BuildBackend, BundleBackend, SmokeBackend, Protocol):
    """What the house asks of a flavour: what each stage asks (the build's, the bundle's and the smoke's own
    protocols, in their packages, which are handed the backends and never import them), and what the matrix, the
    publishing and the doctor ask, here. Attributes first, then one group of methods per stage."""

    needs_gpu: bool  # its bundle computes on a GPU (doctor: a machine without one is a problem only then)
    ggml_libraries: tuple[str, ...]  # llama.cpp's library of this backend (globs): tells a bundle's flavour

    # 1. matrix
    def job_fields(self, os_name: str, target: str, families: FamilyTable, origin: str) -> dict[str, Any]:
        """Job's id, name, family, group, legacy_groups and targets for ``os_name`` (and ``target``, "" for a
        backend that is not per target; a mixed-GPU job's members joined by ``+``, ``gfx1151+gfx1201``); a
        ConfigError naming ``origin`` when it cannot be built."""
        ...

    # 3. build (BuildBackend), 4. bundle and audit (BundleBackend), 5. smoke (SmokeBackend)

    # 5. publish and install
    def asset_template(self, template: str) -> str:
        """publish.yaml's asset name template (``llama-{tag}-{os}-rocm-{name}-x64``) for this flavour's jobs."""
        ...

    def release_isas(self, isas: Sequence[str]) -> list[str]:
        """The release notes' ISA column for a job whose bundle carries GPU code for ``isas``."""
        ...

    # users: doctor
    def doctor_findings(
        self, gpus: Sequence[Gpu], bundle: Path, targets: Sequence[str], env: Mapping[str, str]
    ) -> tuple[list[Finding], dict[str, Any]]:
        """What ``rockbuild doctor --bundle`` says of a bundle of this flavour on this machine's GPUs, and what it adds
        to the report's bundle section."""
        ...


# ---------------------------------------------------------------------------------------------------------------------
# The registry


def _shipped() -> tuple[str, ...]:
    """The backend modules of this package, by file name: the default first, then by name."""
    found = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    return tuple(sorted(found, key=lambda name: name != DEFAULT_BACKEND))


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

    recorded = meta.get("backend") if isinstance(meta, Mapping) else meta.backend if meta is not None else None
    if recorded:
        return str(recorded)
    names = list(names)

    def has(globs: Sequence[str]) -> bool:
        return any(name_matches(n, globs, platform=platform) for n in names)

    if not has(get_backend(DEFAULT_BACKEND).ggml_libraries):
        for backend in all_backends():
            if backend.name != DEFAULT_BACKEND and backend.ggml_libraries and has(backend.ggml_libraries):
                return backend.name
    return DEFAULT_BACKEND


class _Registry:
    """This package's backends as the stages take them (:class:`rockbuild.core.vocabulary.Backends`)."""

    def get(self, name: str) -> Backend:
        return get_backend(name)

    def all(self) -> list[Backend]:
        return all_backends()

    def of_bundle(self, names: Iterable[str], recorded: str | None, platform: str) -> Backend:
        return get_backend(bundle_backend(names, {"backend": recorded} if recorded else None, platform))


# what the pipeline and the commands hand the build, the bundle, the audit and the smoke: every backend, a registered
# one included
REGISTRY: Backends[Backend] = _Registry()


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
    "BACKENDS",
    "REGISTRY",
    "Backend",
    "SmokeDevices",
    "all_backends",
    "bundle_backend",
    "get_backend",
    "names",
    "register",
    "unregister",
]
