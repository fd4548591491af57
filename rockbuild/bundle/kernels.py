"""Kernel data (rocBLAS/hipBLASLt databases, TheRock's ``.kpack/``) pruned to the job's gfx targets.

A file serves the target named by the LAST ``gfx…`` token of its name (``rocm.layout.kernel_file_target``); files
without a token (``…_fallback.dat``, ``hipblasltTransform.hsaco``, ``*.kpm``) serve every target and always ship.
Each folder lands where the policy says (``rocblas/library`` for Debian's ``rocblas/5/library`` too, bundling.md 4),
and only when a shipped library uses it. A job target with no file in a used folder is an error: rocBLAS would fail
at run time on that GPU.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rockbuild.rocm.layout import KernelData, kernel_file_target, target_order

from .elf import resolve_in_root
from .policy import PlatformPolicy, name_matches


@dataclass(frozen=True)
class KernelFolder:
    """One kernel folder: where it comes from, where it goes, what was kept and dropped."""

    component: str
    source: Path
    dest: str
    files_kept: int
    bytes_kept: int
    files_dropped: int
    bytes_dropped: int
    generic_files: int
    per_target: dict[str, tuple[int, int]]  # kept target -> (files, bytes)
    copies: tuple[tuple[Path, str], ...] = field(default=(), repr=False)  # (real source file, path in the bundle)

    def to_dict(self) -> dict[str, Any]:
        return {
            "component": self.component, "source": str(self.source), "dest": self.dest,
            "kept": {"files": self.files_kept, "bytes": self.bytes_kept},
            "dropped": {"files": self.files_dropped, "bytes": self.bytes_dropped},
            "generic_files": self.generic_files,
            "per_target": {t: {"files": f, "bytes": b} for t, (f, b) in self.per_target.items()},
        }


@dataclass(frozen=True)
class KernelReport:
    folders: tuple[KernelFolder, ...]
    errors: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # folders of the root that no shipped library uses

    @property
    def files_kept(self) -> int:
        return sum(f.files_kept for f in self.folders)

    @property
    def bytes_kept(self) -> int:
        return sum(f.bytes_kept for f in self.folders)

    def to_dict(self) -> dict[str, Any]:
        return {
            "folders": [f.to_dict() for f in self.folders],
            "errors": list(self.errors),
            "skipped": list(self.skipped),
            "kept": {"files": self.files_kept, "bytes": self.bytes_kept},
            "dropped": {"files": sum(f.files_dropped for f in self.folders),
                        "bytes": sum(f.bytes_dropped for f in self.folders)},
        }


def prune_kernel_folder(
    component: str, source: Path, dest: str, targets: Sequence[str], sysroot: Path | None = None
) -> KernelFolder:
    """The files of ``source`` that serve ``targets`` (plus generic ones), mapped to ``dest`` (relative paths kept)."""
    wanted = set(targets)
    real_source = resolve_in_root(source, sysroot) or source
    copies: list[tuple[Path, str]] = []
    kept = kept_bytes = dropped = dropped_bytes = generic = 0
    per_target: dict[str, list[int]] = {}
    for dirpath, dirnames, filenames in os.walk(real_source):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            real = resolve_in_root(path, sysroot) if path.is_symlink() else path
            if real is None or not real.is_file():
                continue
            size = real.stat().st_size
            target = kernel_file_target(filename)
            if target is not None and target not in wanted:
                dropped += 1
                dropped_bytes += size
                continue
            kept += 1
            kept_bytes += size
            if target is None:
                generic += 1
            else:
                counts = per_target.setdefault(target, [0, 0])
                counts[0] += 1
                counts[1] += size
            rel = path.relative_to(real_source).as_posix()
            copies.append((real, f"{dest}/{rel}"))
    return KernelFolder(
        component, source, dest, kept, kept_bytes, dropped, dropped_bytes, generic,
        {t: (c[0], c[1]) for t, c in sorted(per_target.items(), key=lambda kv: target_order(kv[0]))}, tuple(copies),
    )


def _soversion(name: str) -> str | None:
    m = re.search(r"\.so\.(\d+)", name)
    return m.group(1) if m else None


def _pick_source(sources: Sequence[KernelData], users: Sequence[str]) -> KernelData:
    """Of several folders for one component (rocblas/4/library and rocblas/5/library), the shipped soversion's."""
    if len(sources) > 1:
        for user in users:
            version = _soversion(user)
            for source in sources:
                if version is not None and version in source.path.parts:
                    return source
    return sources[0]


def plan_kernel_data(
    kernel_data: Iterable[KernelData], shipped: Iterable[str], targets: Sequence[str], policy: PlatformPolicy,
    *, sysroot: Path | None = None,
) -> KernelReport:
    """The kernel folders the bundle needs (a shipped library uses them), pruned to ``targets``."""
    shipped = list(shipped)
    by_component: dict[str, list[KernelData]] = {}
    for data in kernel_data:
        by_component.setdefault(data.component, []).append(data)
    folders: list[KernelFolder] = []
    errors: list[str] = []
    skipped: list[str] = []
    for component, sources in by_component.items():
        rule = policy.kernel_rule(component)
        if rule is None:
            skipped.append(f"{sources[0].path}: the bundle policy has no kernel_data rule for {component!r}")
            continue
        users = [n for n in shipped if name_matches(n, rule.used_by, platform=policy.platform)]
        if not users:
            skipped.append(f"{sources[0].path}: no shipped library uses it ({', '.join(rule.used_by)})")
            continue
        source = _pick_source(sources, users)
        folders.append(prune_kernel_folder(component, source.path, rule.dest, targets, sysroot))
    # TheRock's multi-arch trees keep the per-target kernels in .kpack/ archives; a target they cover is covered
    packed = {t for f in folders if f.component == "kpack" for t in f.per_target}
    for folder in folders:
        lacking = [t for t in targets if t not in folder.per_target and t not in packed]
        if lacking:
            has = ", ".join(folder.per_target) or "none"
            errors.append(
                f"{folder.component} kernel data at {folder.source} has no files for {', '.join(lacking)} "
                f"(kept: {has}); the library would fail on that GPU: use a ROCm build for that target"
            )
    return KernelReport(tuple(folders), tuple(errors), tuple(skipped))
