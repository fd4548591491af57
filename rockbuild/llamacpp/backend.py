"""What the build asks of a backend (:func:`rockbuild.llamacpp.driver.build_job` is handed them as
:class:`rockbuild.core.vocabulary.Backends`): its compilers, their environment and the configure step's definitions.
The backends (:mod:`rockbuild.backends`) answer it; this package never imports them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rockbuild.core.jobs import Job
    from rockbuild.core.vocabulary import Toolchain
    from rockbuild.rocm.layout import RocmLayout


class BuildBackend(Protocol):
    """A flavour of llama.cpp as the build sees it."""

    name: str  # Job.backend, the matrix's backend axis, bundle.json's backend: rocm
    label: str  # the flavour for people: ROCm
    needs_rocm: bool  # resolve and fetch a TheRock tarball, build from its root, bundle its closure
    per_target: bool  # one job per gfx family or target (the matrix's target axis) with GPU code for exactly those;
    #                   else one job per OS with no gfx targets
    # the CMake target of the backend's library (ggml-hip): all a job built on its OS's common part compiles (the
    # common part brings the programs, libllama, libggml-base and the CPU modules); None: a backend with no library of
    # its own (cpu), which builds whole
    library_target: str | None

    def toolchain(self, job: Job, layout: RocmLayout | None) -> Toolchain | None:
        """The compilers of the build (from the job's ROCm root, checked), or None: the host's."""
        ...

    def build_environment(
        self,
        job: Job,
        toolchain: Toolchain | None,
        *,
        msvc: Mapping[str, str] | None = None,
        ccache_dir: Path | None = None,
        base: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, str], list[str]]:
        """The environment of cmake and ninja, and the names of the variables rockbuild sets or passes on in it
        (build.json shows them; a change of one configures again)."""
        ...

    def compilers(
        self, job: Job, toolchain: Toolchain | None, env: Mapping[str, str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """The compilers' versions (build.json's ``compilers``) and the backend's own tools' (added to ``tools``);
        a BuildError when one is missing."""
        ...

    def cmake_definitions(
        self, job: Job, toolchain: Toolchain | None, *, offline: bool, build_info: Mapping[str, str], ccache: bool
    ) -> list[tuple[str, str]]:
        """Every -D definition of the configure step, in order
        (:func:`rockbuild.llamacpp.cmake.compose_definitions`)."""
        ...
