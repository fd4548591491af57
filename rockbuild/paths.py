"""Paths inside a root that is not ours: a chroot whose symlinks are absolute (``/usr/lib/llvm-22/bin/clang``).

Used by the ROCm layout detection and by the lib-gatherer, which both look at roots such as the Debian ROCm chroot
from outside: an absolute link target must resolve inside the root, never against the host's ``/``.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

MAX_SYMLINK_HOPS = 40  # Linux's limit


def follow_in_root(path: Path, sysroot: Path) -> Path | None:
    """``path`` (under ``sysroot``) with every symlink followed as a process inside ``sysroot`` would follow it.

    Absolute link targets restart at ``sysroot``; ``..`` never climbs above it. Returns the final path whether or not
    it exists (callers decide), or None on a symlink loop.
    """
    current = sysroot
    pending = list(PurePosixPath(path.relative_to(sysroot).as_posix()).parts)
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", ".", "/"):
            continue
        if part == "..":
            # `current` never contains a symlink, so its parent is the real parent
            current = current.parent if current != sysroot else current
            continue
        candidate = current / part
        if candidate.is_symlink():
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                return None
            target = PurePosixPath(os.readlink(candidate))
            if target.is_absolute():
                current, pending = sysroot, list(target.parts[1:]) + pending
            else:
                pending = list(target.parts) + pending
            continue
        current = candidate
    return current


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or below it, by their normalised spelling (no file is read)."""
    return os.path.normpath(path).startswith(os.path.normpath(root) + os.sep) or os.path.normpath(
        path
    ) == os.path.normpath(root)
