"""What the smoke test asks of a backend (:func:`rockbuild.smoke.runner.run_smoke` is handed them as
:class:`rockbuild.core.vocabulary.Backends`): the devices a bundle can use here, and the verdict on where the model
went. The backends (:mod:`rockbuild.backends`) answer it; this package never imports them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rockbuild.core.records import BenchFigure, LoadReport, SmokeGpu
    from rockbuild.core.vocabulary import SmokeDevices


class SmokeBackend(Protocol):
    """A flavour of llama.cpp as the smoke test sees it."""

    name: str  # bundle.json's backend: rocm
    label: str  # the flavour for people, and its devices' prefix: ROCm (ROCm0)

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
        """Which devices the bundle (its llama-cli is ``cli``) can use here, whether a GPU run is expected
        (``asked``: auto, yes or no) and the device to pin."""
        ...

    def smoke_verdict(
        self,
        loads: Sequence[LoadReport],
        *,
        expect_gpu: bool | None,
        texts: Sequence[str | None],
        bench: Sequence[BenchFigure],
    ) -> SmokeGpu:
        """Where the model went, by this backend's buffers (ROCm0, Vulkan0), and whether that is what was expected."""
        ...

    def in_logs(self, loads: Sequence[LoadReport]) -> bool:
        """Do the logs show this backend at work, so that they are judged by it whatever the bundle claims?"""
        ...
