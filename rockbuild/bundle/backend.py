"""What the bundle and its audit ask of a backend (:func:`rockbuild.bundle.plan.bundle` and
:func:`rockbuild.bundle.audit.audit_bundle` are handed them as :class:`rockbuild.core.vocabulary.Backends`): the
platform its inputs make, and its own checks of a bundle. The backends (:mod:`rockbuild.backends`) answer it; this
package never imports them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rockbuild.core.records import BundleRecord
    from rockbuild.core.vocabulary import Check
    from rockbuild.rocm.layout import RocmLayout

    from .fatbin import FatbinReport
    from .policy import PlatformPolicy


class BundleBackend(Protocol):
    """A flavour of llama.cpp as the bundle and the audit see it."""

    name: str  # bundle.json's backend: rocm
    label: str  # the flavour for people: ROCm
    needs_rocm: bool  # a bundle of the ROCm closure and kernel data, from the root the build used
    per_target: bool  # GPU code for exactly the job's gfx targets; else no gfx targets

    def bundle_platform(self, layout: RocmLayout | None, targets: Sequence[str], platform: str | None) -> str:
        """The platform of the bundle once its inputs are checked (a ROCm root and gfx targets, or neither); a
        BundleError when they do not fit."""
        ...

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
        """The audit's checks of this flavour (after the shared ones) over the bundle's top-level ``names`` and
        ``binaries``, and the fat binaries it read."""
        ...
