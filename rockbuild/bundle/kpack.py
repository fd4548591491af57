"""TheRock's kpack references: where a split library looks for its GPU code, and making that work in a flat bundle.

A multi-arch TheRock tree keeps the GPU code of its fat-binary libraries out of them, in ``.kpack/`` at the top of
the tree; each split library carries a ``.rocm_kpack_ref`` section (MessagePack) whose search paths are relative to
the library's own folder: ``../`` once per folder level, then ``.kpack/<name>`` (``lib/librocblas.so.5`` ->
``../.kpack/blas_lib.kpm``; TheRock's RFC0008 and kpack design note; therock.md section 4). A bundle is flat: every
library sits at its top, beside ``.kpack/``, so ``../.kpack`` would point out of the bundle and the HIP runtime would
find no GPU code for the library; nothing fails until a kernel is launched on a GPU, which no CPU smoke test does.

:func:`flatten_refs` rewrites each ``../`` run in place to ``.`` and as many ``/`` (the same length: nothing else of
the file moves, no offset or MessagePack length changes): ``../.kpack/blas_lib.kpm`` becomes
``.//.kpack/blas_lib.kpm``, which names the bundle's own ``.kpack/`` (a path's repeated slashes are one). The
audit's ``kpack-refs`` check (:mod:`rockbuild.bundle.audit`) resolves every reference of every shipped library
against the bundle. What is not proved here: TheRock's loader itself (it needs a GPU); the paths are read as the
design notes describe them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rockbuild.core.errors import BundleError

SECTION = ".rocm_kpack_ref"
_UP_THEN_KPACK = re.compile(rb"((?:\.\./)+)(?=\.kpack/)")
_REF = re.compile(rb"[A-Za-z0-9_.+/-]*\.kpack/[A-Za-z0-9_.+-]+")


@dataclass(frozen=True)
class RefSection:
    offset: int  # file offset of the section's bytes
    data: bytes


def read_section(path: Path) -> RefSection | None:
    """The ``.rocm_kpack_ref`` section of an ELF file, None when it has none (or is not ELF)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                return None
            fh.seek(0)
            section = ELFFile(fh).get_section_by_name(SECTION)
            if section is None or section["sh_type"] == "SHT_NOBITS":
                return None
            return RefSection(int(section["sh_offset"]), section.data())
    except (OSError, ELFError, ValueError) as exc:
        raise BundleError(f"cannot read the {SECTION} section of {path}: {exc}") from None


def kpack_refs(path: Path) -> list[str]:
    """The kpack paths ``path`` names in its ``.rocm_kpack_ref`` section, in order; [] when it has none."""
    section = read_section(path)
    if section is None:
        return []
    return [m.decode("utf-8", "replace") for m in _REF.findall(section.data)]


def flatten_refs(path: Path) -> list[dict[str, str]]:
    """Make the kpack references of ``path`` (a library at the top of a bundle) name the bundle's ``.kpack/``:
    each ``../`` run before ``.kpack/`` becomes ``.`` and slashes, in place. Returns what changed ({from, to})."""
    section = read_section(path)
    if section is None or not _UP_THEN_KPACK.search(section.data):
        return []

    def flat(m: re.Match[bytes]) -> bytes:
        return b"." + b"/" * (len(m[1]) - 1)

    data = _UP_THEN_KPACK.sub(flat, section.data)
    assert len(data) == len(section.data)
    before, after = _REF.findall(section.data), _REF.findall(data)
    changes = [
        {"from": a.decode("utf-8", "replace"), "to": b.decode("utf-8", "replace")}
        for a, b in zip(before, after, strict=True)
        if a != b
    ]
    with open(path, "r+b") as fh:
        fh.seek(section.offset)
        fh.write(data)
    return changes
