"""A closure: the libraries a build's programs need, named as the loader asks for them, each with where it comes
from and whether it ships (the ELF and PE gatherers, :mod:`.elf` and :mod:`.pe`, make it; :mod:`.plan` copies it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
