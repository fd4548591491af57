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
from pathlib import Path

from rockbuild.core.records import FileCount, KernelFolder, KernelsRecord
from rockbuild.rocm.layout import KernelData, kernel_file_target, target_order

from .elf import resolve_in_root
from .policy import PlatformPolicy, name_matches

Copies = tuple[tuple[Path, str], ...]
"""The files a kernel folder ships: (real source file, path in the bundle). bundle.json counts them (thousands)."""


def prune_kernel_folder(
    component: str, source: Path, dest: str, targets: Sequence[str], sysroot: Path | None = None
) -> tuple[KernelFolder, Copies]:
    """The files of ``source`` that serve ``targets`` (plus generic ones), mapped to ``dest`` (relative paths kept):
    the folder's record and its files to copy."""
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
    by_target = {t: FileCount(c[0], c[1]) for t, c in sorted(per_target.items(), key=lambda kv: target_order(kv[0]))}
    return KernelFolder(
        component=component,
        source=source,
        dest=dest,
        kept=FileCount(kept, kept_bytes),
        dropped=FileCount(dropped, dropped_bytes),
        generic_files=generic,
        per_target=by_target,
    ), tuple(copies)


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
    kernel_data: Iterable[KernelData],
    shipped: Iterable[str],
    targets: Sequence[str],
    policy: PlatformPolicy,
    *,
    sysroot: Path | None = None,
) -> tuple[KernelsRecord, Copies]:
    """The kernel folders the bundle needs (a shipped library uses them), pruned to ``targets``: bundle.json's record
    of them and every file to copy."""
    shipped = list(shipped)
    by_component: dict[str, list[KernelData]] = {}
    for data in kernel_data:
        by_component.setdefault(data.component, []).append(data)
    folders: list[KernelFolder] = []
    copies: list[tuple[Path, str]] = []
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
        folder, files = prune_kernel_folder(component, source.path, rule.dest, targets, sysroot)
        folders.append(folder)
        copies += files
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
    return KernelsRecord(folders=tuple(folders), errors=tuple(errors), skipped=tuple(skipped)), tuple(copies)
