"""Stage 4, bundle: a self-contained folder from a llama.cpp build and a ROCm root.

The closure comes from the files (ELF: DT_NEEDED with the loader's search rules, :mod:`.elf`; PE: imports and
delay-load imports, :mod:`.pe`), never from running them; the never-ship list and the dlopen extras are data
(``matrices/bundle-policy.yaml``, :mod:`.policy`); kernel folders are pruned to the job's targets (:mod:`.kernels`);
the whole copy/patch plan is computed before anything is written (:mod:`.plan`), and :mod:`.audit` checks the result.

Public API: :func:`make_bundle`, :func:`audit_bundle` and their frozen reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rockbuild.errors import AuditError, BundleError

# Where a library came from / why it is (not) in the bundle.
ROOT = "root"  # a file of the build's bin/ (executables keep their names)
SHIPS = "ships"  # found by the closure or declared as an extra: copied
SYSTEM = "system"  # left to the host by the policy
MISSING = "missing"  # needed, not found anywhere: an error


@dataclass(frozen=True)
class Library:
    """One node of a closure, named as the loader asks for it (DT_NEEDED / import name / dlopen name)."""

    name: str
    status: str
    path: Path | None = None  # where it was found (as found: may be a symlink)
    real_path: Path | None = None  # the file whose bytes ship
    soname: str | None = None
    kind: str = "lib"  # lib | exe
    needed_by: tuple[str, ...] = ()
    via: str = ""  # DT_NEEDED, import, delay-import, extra, bin
    reason: str = ""  # why it is system, or which extra brought it
    size: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "status": self.status, "kind": self.kind,
            "path": str(self.path) if self.path else None,
            "real_path": str(self.real_path) if self.real_path else None,
            "soname": self.soname, "needed_by": list(self.needed_by), "via": self.via, "reason": self.reason,
            "size": self.size,
        }


@dataclass(frozen=True)
class Closure:
    """Everything the roots need: what ships (roots included), what the host provides, what is missing."""

    platform: str
    entries: tuple[Library, ...]
    machine: str = ""
    warnings: tuple[str, ...] = field(default=())

    def with_status(self, *status: str) -> tuple[Library, ...]:
        return tuple(e for e in self.entries if e.status in status)

    @property
    def shipped(self) -> tuple[Library, ...]:
        return self.with_status(ROOT, SHIPS)

    @property
    def missing(self) -> tuple[Library, ...]:
        return self.with_status(MISSING)

    def names(self) -> set[str]:
        return {e.name for e in self.shipped}

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform, "machine": self.machine,
            "ships": [e.to_dict() for e in self.shipped],
            "system": [e.to_dict() for e in self.with_status(SYSTEM)],
            "missing": [e.to_dict() for e in self.missing],
            "warnings": list(self.warnings),
        }


# The API, imported after the types above that the submodules use.
from .audit import AuditReport, audit_bundle, bundle_backend  # noqa: E402
from .plan import BundleReport, bundle_job, make_bundle  # noqa: E402

__all__ = [
    "AuditError", "AuditReport", "BundleError", "BundleReport", "Closure", "Library", "audit_bundle", "bundle_backend",
    "bundle_job", "make_bundle",
]
