"""The words every layer shares: a check and its findings, a GPU, the devices a smoke test runs on and the model it
runs, a compiler toolchain, the backends a stage is handed, and the fixed sets of names (statuses, severities, steps)
that records and reports use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath
from typing import Any, Literal, Protocol, TypeVar

from rockbuild.core.record import HEX, Record

Os = Literal["linux", "windows"]  # a job's, a bundle's, a toolchain's operating system
ToolchainKind = Literal["therock", "opt-rocm", "debian"]  # the ROCm layout a toolchain is from (rocm.layout.LayoutKind)


@dataclass(frozen=True)
class Check(Record):
    """One check of an audit or of the doctor: its verdict, why it failed, what it warns of, what it saw (a record:
    bundle.json's ``audit.checks`` holds them)."""

    name: str
    ok: bool
    failures: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Gpu(Record):
    """One GPU of the KFD topology (a record: the doctor's report lists them)."""

    index: int  # ROCm's device index (GPU nodes in node order)
    node: int  # the KFD topology node
    target: str  # gfx1151
    products: str  # from the family table, "" when unknown
    integrated: bool
    integrated_reason: str
    compute_units: int
    simd_count: int
    device_id: int = field(metadata=HEX)  # the PCI device id, 0x1586 in JSON
    drm_render_minor: int | None
    local_mem_bytes: int  # VRAM (a dGPU) or the BIOS carve-out (an APU), from the node's memory banks

    @property
    def label(self) -> str:
        kind = "iGPU" if self.integrated else "dGPU"
        what = f" ({self.products})" if self.products else ""
        return f"GPU {self.index}: {self.target} {kind}{what}"


@dataclass(frozen=True)
class Finding(Record):
    severity: Literal["ok", "info", "warning", "error"]
    topic: Literal["gpu", "access", "override", "memory", "kernel", "bundle", "vulkan", "dll", "cpu"]
    message: str
    action: str = ""  # one line: what to do


@dataclass(frozen=True)
class GpuDevice:
    """The GPU device a smoke step runs on: ggml's name for it (``-dev Vulkan0``, ``-b ROCm0``; "" the backend's
    default GPU) and its description as the bundle lists it (``Vulkan0: llvmpipe ...``: thresholds and the ops' modes
    match on it; "" when it lists none)."""

    name: str
    description: str = ""


@dataclass(frozen=True)
class SmokeDevices:
    """What a backend's smoke test found before any run: the devices, whether a GPU run is expected and why, the
    ``-dev`` every run gets, and why no run may start (``preflight``)."""

    devices: tuple[str, ...]  # as the report lists them: gfx targets (ROCm), "Vulkan0: llvmpipe ..." (Vulkan)
    expect: bool
    reason: str
    device: str | None = None
    preflight: str | None = None

    def gpu(self, default: str = "") -> GpuDevice | None:
        """The GPU device a step runs on: the pinned ``device``, else ``default``; None when no GPU run is expected."""
        if not self.expect:
            return None
        name = self.device or default
        return GpuDevice(name, next((d for d in self.devices if name and d.startswith(f"{name}:")), ""))


@dataclass(frozen=True)
class ModelFile(Record):
    """The model a smoke run used."""

    name: str
    path: Path
    sha256: str
    size: int
    source: Literal["default", "url", "path", "tiny", "package"]  # where it came from
    url: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Toolchain(Record):
    """The compiler toolchain of a ROCm build (build.json's ``toolchain``): ROCm's clang and where its parts are."""

    platform: Os
    kind: ToolchainKind
    prefix: str  # the real ROCm prefix (/usr on Debian)
    llvm_bin: str
    c_compiler: str
    cxx_compiler: str
    device_lib_dir: str | None
    device_lib_in_resource_dir: bool  # informational: where clang looks when ROCM_PATH is not set

    @property
    def windows(self) -> bool:
        return self.platform == "windows"

    def cmake_path(self, path: str) -> str:
        """Forward slashes on Windows too: a backslash in a CMake string is an escape character."""
        return PureWindowsPath(path).as_posix() if self.windows else path


B_co = TypeVar("B_co", covariant=True)


class Backends(Protocol[B_co]):
    """The backends a stage may meet, handed to it as a value: the stages that take a job or a bundle (the build, the
    bundle and its audit, the smoke) ask it for the job's or the bundle's flavour and never import
    :mod:`rockbuild.backends`, which sits above them and is made of their pieces. ``B_co`` is what the stage asks of a
    backend (its own small protocol: :class:`rockbuild.llamacpp.backend.BuildBackend`, ...); the pipeline and the
    commands hand them :data:`rockbuild.backends.REGISTRY`, a test may hand its own."""

    def get(self, name: str) -> B_co:
        """The backend called ``name``; a ConfigError for one not known."""
        ...

    def all(self) -> Sequence[B_co]:
        """Every backend, the default first."""
        ...

    def of_bundle(self, names: Iterable[str], recorded: str | None, platform: str) -> B_co:
        """A bundle's backend: ``recorded`` (its bundle.json's), else the one whose llama.cpp library is among its
        top-level files ``names`` (the default when none is)."""
        ...
