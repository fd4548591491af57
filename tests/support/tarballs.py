"""Test tarballs, built member by member with :mod:`tarfile` (no tree on disk first, so any member can be forged).

* :class:`TarBuilder` writes a gzip tarball one member at a time, TheRock style (``./`` prefix) by default.
* :func:`therock_like_tarball` makes a small tree in the layout of TheRock's ROCm tarballs; :data:`THEROCK_TREE`
  describes what it contains, so tests can check an extraction against it.
* :data:`MALICIOUS` maps an attack name to an :class:`Attack`: a builder for a tarball that tries one way of writing
  outside the extraction root (or of creating something that must never be extracted), the offending member's name,
  and whether extraction must refuse it (``setuid_file`` is extracted with the special bits stripped).

Attack builders take ``(tarball, outside, dest)``: ``outside`` is a directory the archive must not touch (tests put a
sentinel file ``outside/target`` in it) and ``dest`` the directory the archive will be extracted to; relative escapes
are computed from ``dest`` to ``outside``. rockbuild stages extractions in a sibling of ``dest``, so those relative
paths reach ``outside`` from the staging directory too.

Import it as ``from support.tarballs import ...`` (tests/conftest.py puts ``tests/`` on sys.path).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MTIME = 1_760_000_000
"""mtime of every member built here (2025-10-09), so tests can check mtimes survive extraction."""


class TarBuilder:
    """Write a gzip tarball member by member::

        with TarBuilder(path) as tb:
            tb.dir("bin")
            tb.file("bin/tool", b"#!/bin/sh\\n", mode=0o755)
            tb.symlink("tool2", "bin/tool")

    Names are written as given after ``prefix`` (default ``./``, like ``tar cfz out .``); pass ``prefix=""`` and any
    raw name to forge absolute or ``..`` paths. Nothing is normalised or checked: that is the point.
    """

    def __init__(
        self,
        path: Path,
        *,
        prefix: str = "./",
        mtime: int = MTIME,
        compresslevel: int = 1,
        format: int = tarfile.GNU_FORMAT,
    ) -> None:
        self.path = Path(path)
        self.prefix = prefix
        self.mtime = mtime
        self._tf = tarfile.open(self.path, "w:gz", compresslevel=compresslevel, format=format)  # noqa: SIM115

    def __enter__(self) -> TarBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._tf.close()

    def _info(self, name: str, type_: bytes, mode: int) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(self.prefix + name)
        ti.type = type_
        ti.mode = mode
        ti.mtime = self.mtime
        ti.uname = ti.gname = "root"
        return ti

    def root(self, mode: int = 0o755) -> None:
        """The ``./`` member that ``tar cfz out .`` writes first."""
        ti = tarfile.TarInfo(".")
        ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, mode, self.mtime
        self._tf.addfile(ti)

    def dir(self, name: str, mode: int = 0o755) -> None:
        self._tf.addfile(self._info(name, tarfile.DIRTYPE, mode))

    def file(self, name: str, data: bytes = b"", mode: int = 0o644) -> None:
        ti = self._info(name, tarfile.REGTYPE, mode)
        ti.size = len(data)
        self._tf.addfile(ti, io.BytesIO(data))

    def big_file(self, name: str, size: int, *, seed: int = 0, mode: int = 0o644) -> None:
        """A file of ``size`` pseudo-random (incompressible) bytes, streamed without holding it in memory."""
        ti = self._info(name, tarfile.REGTYPE, mode)
        ti.size = size
        self._tf.addfile(ti, _RandomStream(size, seed))

    def symlink(self, name: str, target: str) -> None:
        ti = self._info(name, tarfile.SYMTYPE, 0o777)
        ti.linkname = target
        self._tf.addfile(ti)

    def hardlink(self, name: str, target: str, *, target_prefix: str | None = None) -> None:
        """A hard link to the member named ``target`` (written with ``target_prefix``, default this builder's)."""
        ti = self._info(name, tarfile.LNKTYPE, 0o644)
        ti.linkname = (self.prefix if target_prefix is None else target_prefix) + target
        self._tf.addfile(ti)

    def device(self, name: str, *, char: bool = True, major: int = 1, minor: int = 3) -> None:
        ti = self._info(name, tarfile.CHRTYPE if char else tarfile.BLKTYPE, 0o666)
        ti.devmajor, ti.devminor = major, minor
        self._tf.addfile(ti)

    def fifo(self, name: str) -> None:
        self._tf.addfile(self._info(name, tarfile.FIFOTYPE, 0o644))

    def raw(self, ti: tarfile.TarInfo, data: bytes | None = None) -> None:
        """Any member, exactly as given."""
        self._tf.addfile(ti, io.BytesIO(data) if data is not None else None)


class _RandomStream(io.RawIOBase):
    def __init__(self, size: int, seed: int) -> None:
        import random

        self._left = size
        self._rng = random.Random(seed)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        self._left -= n
        return self._rng.randbytes(n)


# ----------------------------------------------------------------------------------------------------------------------
# A TheRock-like tarball
# ----------------------------------------------------------------------------------------------------------------------

THEROCK_COMMIT = "0123456789abcdef0123456789abcdef01234567"

THEROCK_TREE: dict[str, tuple[Any, ...]] = {
    # path: ("dir", mode) | ("file", mode, data) | ("symlink", target) | ("hardlink", path of the file it shares)
    ".info": ("dir", 0o755),
    ".info/version": ("file", 0o644, b"10.2.0\n"),
    "bin": ("dir", 0o755),
    "bin/hipcc": ("file", 0o755, b'#!/bin/sh\nexec "$(dirname "$0")/../lib/llvm/bin/clang" "$@"\n'),
    "bin/amdclang": ("symlink", "../lib/llvm/bin/clang"),
    "bin/amdclang++": ("symlink", "../lib/llvm/bin/clang++"),
    "include": ("dir", 0o755),
    "include/hip": ("dir", 0o755),
    "include/hip/hip_runtime.h": ("file", 0o644, b"#pragma once\n"),
    "lib": ("dir", 0o755),
    "lib/llvm": ("dir", 0o755),
    "lib/llvm/bin": ("dir", 0o755),
    "lib/llvm/bin/clang": ("file", 0o755, b"\x7fELF fake clang\n" * 64),
    "lib/llvm/bin/clang++": ("symlink", "clang"),
    "lib/llvm/bin/lld": ("file", 0o755, b"\x7fELF fake lld\n" * 32),
    "lib/llvm/bin/ld.lld": ("hardlink", "lib/llvm/bin/lld"),
    "lib/llvm/bin/rocm.cfg": ("file", 0o644, b"--rocm-path='<CFGDIR>/../../..'\n"),
    "lib/llvm/amdgcn": ("dir", 0o755),
    "lib/llvm/amdgcn/bitcode": ("dir", 0o755),
    "lib/llvm/amdgcn/bitcode/ocml.bc": ("file", 0o644, b"BC\xc0\xde" * 100),
    "lib/libamdhip64.so.7.2.0": ("file", 0o755, b"\x7fELF fake hip\n" * 16),
    "lib/libamdhip64.so.7": ("symlink", "libamdhip64.so.7.2.0"),
    "lib/libamdhip64.so": ("symlink", "libamdhip64.so.7"),
    "lib/rocblas": ("dir", 0o755),
    "lib/rocblas/library": ("dir", 0o755),
    "lib/rocblas/library/TensileLibrary_lazy_gfx1151.dat": ("file", 0o644, b"tensile\x00" * 50),
    "llvm": ("symlink", "lib/llvm"),
    "amdgcn": ("symlink", "lib/llvm/amdgcn"),
    "share": ("dir", 0o755),
    "share/therock": ("dir", 0o755),
    "share/therock/dist_info.json": ("file", 0o644, b'{"dist_amdgpu_targets": "gfx1151"}\n'),
    "share/therock/therock_manifest.json": (
        "file",
        0o644,
        json.dumps(
            {"the_rock_commit": THEROCK_COMMIT, "rocm_package_version": "10.2.0a20260915", "submodules": []}, indent=2
        ).encode()
        + b"\n",
    ),
}
"""Everything :func:`therock_like_tarball` writes by default, in archive order (dirs before their contents)."""


def therock_like_tarball(
    path: Path,
    *,
    files: Mapping[str, bytes | tuple[bytes, int]] | None = None,
    symlinks: Mapping[str, str] | None = None,
    manifest: Mapping[str, object] | None = None,
    version: str | None = None,
    omit: tuple[str, ...] = (),
    big_files: Mapping[str, int] | None = None,
) -> Path:
    """Write a small tarball in TheRock's layout (see :data:`THEROCK_TREE`) to ``path`` and return ``path``.

    ``files`` adds or replaces files (``data`` or ``(data, mode)``; parent dirs are added as members), ``symlinks``
    adds links, ``manifest`` replaces ``share/therock/therock_manifest.json``'s content, ``version`` the content of
    ``.info/version``, ``omit`` drops entries of :data:`THEROCK_TREE` (with everything under them) and ``big_files``
    adds files of pseudo-random bytes of the given sizes.
    """
    tree: dict[str, tuple[Any, ...]] = {
        k: v for k, v in THEROCK_TREE.items() if not any(k == o or k.startswith(o + "/") for o in omit)
    }
    if version is not None:
        tree[".info/version"] = ("file", 0o644, version.encode() + b"\n")
    if manifest is not None:
        tree["share/therock/therock_manifest.json"] = ("file", 0o644, json.dumps(dict(manifest)).encode())
    extra: dict[str, tuple[Any, ...]] = {}
    for name, content in (files or {}).items():
        data, mode = content if isinstance(content, tuple) else (content, 0o644)
        extra[name] = ("file", mode, data)
    for name, target in (symlinks or {}).items():
        extra[name] = ("symlink", target)
    for name, size in (big_files or {}).items():
        extra[name] = ("big", 0o644, size)
    for name in extra:
        for parent in _parents(name):
            if parent not in tree:
                tree[parent] = ("dir", 0o755)
    tree.update(extra)
    with TarBuilder(path) as tb:
        tb.root()
        for name, spec in tree.items():
            kind = spec[0]
            if kind == "dir":
                tb.dir(name, spec[1])
            elif kind == "file":
                tb.file(name, spec[2], spec[1])
            elif kind == "big":
                tb.big_file(name, spec[2], seed=len(name), mode=spec[1])
            elif kind == "symlink":
                tb.symlink(name, spec[1])
            elif kind == "hardlink":
                tb.hardlink(name, spec[1])
    return Path(path)


def _parents(name: str) -> list[str]:
    parts = name.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


# ----------------------------------------------------------------------------------------------------------------------
# Malicious corpus
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attack:
    """One hostile tarball: ``build(tarball, outside, dest)`` writes it; extracting it into ``dest`` must raise
    UnsafeArchiveError naming ``member`` when ``refused`` (else it extracts, made harmless)."""

    name: str
    description: str
    member: str
    build: Callable[[Path, Path, Path], None]
    refused: bool = True


def _rel(outside: Path, dest: Path) -> str:
    return os.path.relpath(outside, dest)


def _with_filler(tb: TarBuilder) -> None:
    """Ordinary members first, so a refusal happens mid-stream, after files were already written to staging."""
    tb.root()
    tb.dir("lib")
    tb.file("lib/libfoo.so.1.2.3", b"\x7fELF foo\n", 0o755)
    tb.symlink("lib/libfoo.so.1", "libfoo.so.1.2.3")


def _attack(write: Callable[[TarBuilder, Path, Path], None]) -> Callable[[Path, Path, Path], None]:
    """An attack builder ``(tarball, outside, dest)`` from ``write(tb, outside, dest)``, which adds the attack's
    members after the ordinary ones of :func:`_with_filler`."""

    def build(t: Path, outside: Path, dest: Path) -> None:
        with TarBuilder(t) as tb:
            _with_filler(tb)
            write(tb, outside, dest)

    build.__name__ = build.__qualname__ = write.__name__
    return build


@_attack
def _absolute_path(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.prefix = ""
    tb.file(f"{outside}/pwned", b"pwned\n")


@_attack
def _dotdot_escape(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.file(f"{_rel(outside, dest)}/pwned", b"pwned\n")


@_attack
def _dotdot_inside(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.file("lib/../innocent", b"stays inside, but '..' is never needed\n")


@_attack
def _symlink_escape_absolute(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.symlink("evil", str(outside))
    tb.file("evil/pwned", b"pwned\n")


@_attack
def _symlink_escape_relative(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.symlink("lib/evil", f"../{_rel(outside, dest)}")
    tb.file("lib/evil/pwned", b"pwned\n")


@_attack
def _symlink_to_parent(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.symlink("up", "..")


@_attack
def _symlink_chain_escape(tb: TarBuilder, outside: Path, dest: Path) -> None:
    # Lexically x -> y/../outside is "outside" inside the root; physically y is the root, so y/.. is its parent.
    tb.symlink("y", ".")
    tb.symlink("x", f"y/{_rel(outside, dest)}")
    tb.file("x/pwned", b"pwned\n")


@_attack
def _symlink_chain_escape_late(tb: TarBuilder, outside: Path, dest: Path) -> None:
    # Same chain, links in the other order: x is harmless when it is created; only the final check can see it.
    tb.symlink("x", f"y/{_rel(outside, dest)}/target")
    tb.symlink("y", ".")


@_attack
def _write_through_symlinked_dir(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.symlink("libdir", "lib")
    tb.file("libdir/libinjected.so", b"through a symlink\n")


@_attack
def _path_through_file(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.file("lib/libfoo.so.1.2.3/sub", b"a file is not a directory\n")


@_attack
def _hardlink_outside_absolute(tb: TarBuilder, outside: Path, dest: Path) -> None:
    # tar would link to the outside file, then the second member would write into that shared inode.
    tb.hardlink("h", str(outside / "target"), target_prefix="")
    tb.file("h", b"pwned\n")


@_attack
def _hardlink_outside_relative(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.hardlink("h", f"{_rel(outside, dest)}/target")
    tb.file("h", b"pwned\n")


@_attack
def _hardlink_to_symlink(tb: TarBuilder, outside: Path, dest: Path) -> None:
    # s only escapes once y exists; a hard link made by following s would be a link to outside/target.
    tb.symlink("s", f"y/{_rel(outside, dest)}/target")
    tb.hardlink("h", "s")
    tb.symlink("y", ".")


@_attack
def _hardlink_before_target(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.hardlink("h", "later")
    tb.file("later", b"late\n")


@_attack
def _device_node(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.dir("dev")
    tb.device("dev/sda", char=False, major=8, minor=0)


@_attack
def _char_device(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.dir("dev")
    tb.device("dev/mem", char=True, major=1, minor=1)


@_attack
def _fifo(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.fifo("lib/pipe")


@_attack
def _setuid_file(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.dir("bin")
    tb.file("bin/su", b"#!/bin/sh\nid\n", 0o4755)
    tb.file("bin/sg", b"#!/bin/sh\nid\n", 0o2711)
    tb.dir("tmp", 0o1777)
    tb.dir("shared", 0o2775)


@_attack
def _duplicate_over_symlink(tb: TarBuilder, outside: Path, dest: Path) -> None:
    # tar replaces an earlier member with a later one of the same name; naive code opens the path and writes
    # through the symlink that is already there.
    tb.symlink("lib/libfoo.so", "libfoo.so.1")
    tb.file("lib/libfoo.so", b"replaces the link, or writes through it\n")


@_attack
def _duplicate_file(tb: TarBuilder, outside: Path, dest: Path) -> None:
    tb.file("lib/libfoo.so.1.2.3", b"second copy\n")


def _pax_absolute_path(t: Path, outside: Path, dest: Path) -> None:
    # The ustar name looks harmless; the pax "path" record, which wins, is absolute.
    with TarBuilder(t, format=tarfile.PAX_FORMAT) as tb:
        _with_filler(tb)
        ti = tarfile.TarInfo("./harmless")
        ti.pax_headers = {"path": f"{outside}/pwned"}
        ti.size, ti.mtime = 6, MTIME
        tb.raw(ti, b"pwned\n")


@_attack
def _root_as_file(tb: TarBuilder, outside: Path, dest: Path) -> None:
    ti = tarfile.TarInfo("./")
    ti.size, ti.mtime = 3, MTIME
    tb.raw(ti, b"hi\n")


MALICIOUS: dict[str, Attack] = {
    a.name: a
    for a in (
        Attack("absolute_path", "file with an absolute path into outside/", "{outside}/pwned", _absolute_path),
        Attack("dotdot_escape", "file whose path climbs out with ../", "./{rel}/pwned", _dotdot_escape),
        Attack("dotdot_inside", "file with a '..' component that stays inside", "./lib/../innocent", _dotdot_inside),
        Attack(
            "symlink_escape_absolute",
            "symlink to an absolute path, then a file through it",
            "./evil",
            _symlink_escape_absolute,
        ),
        Attack(
            "symlink_escape_relative",
            "symlink climbing out with ../, then a file through it",
            "./lib/evil",
            _symlink_escape_relative,
        ),
        Attack("symlink_to_parent", "symlink to ..", "./up", _symlink_to_parent),
        Attack(
            "symlink_chain_escape", "y -> . then x -> y/../outside, then a file through x", "./x", _symlink_chain_escape
        ),
        Attack(
            "symlink_chain_escape_late",
            "x -> y/../outside/target first, y -> . after",
            "./x",
            _symlink_chain_escape_late,
        ),
        Attack(
            "write_through_symlinked_dir",
            "libdir -> lib, then libdir/file",
            "./libdir/libinjected.so",
            _write_through_symlinked_dir,
        ),
        Attack("path_through_file", "a member below a regular file", "./lib/libfoo.so.1.2.3/sub", _path_through_file),
        Attack(
            "hardlink_outside_absolute",
            "hard link to an absolute outside path, then a write to it",
            "./h",
            _hardlink_outside_absolute,
        ),
        Attack(
            "hardlink_outside_relative",
            "hard link to ../outside/target, then a write to it",
            "./h",
            _hardlink_outside_relative,
        ),
        Attack(
            "hardlink_to_symlink", "hard link to a symlink that ends up pointing outside", "./h", _hardlink_to_symlink
        ),
        Attack("hardlink_before_target", "hard link to a member that comes later", "./h", _hardlink_before_target),
        Attack("block_device", "block device node", "./dev/sda", _device_node),
        Attack("char_device", "character device node", "./dev/mem", _char_device),
        Attack("fifo", "named pipe", "./lib/pipe", _fifo),
        Attack(
            "setuid_file",
            "setuid/setgid files, sticky and setgid dirs (extracted, bits stripped)",
            "./bin/su",
            _setuid_file,
            refused=False,
        ),
        Attack(
            "duplicate_over_symlink",
            "a file member replacing an earlier symlink of the same path",
            "./lib/libfoo.so",
            _duplicate_over_symlink,
        ),
        Attack("duplicate_file", "the same file path twice", "./lib/libfoo.so.1.2.3", _duplicate_file),
        Attack("pax_absolute_path", "pax 'path' header with an absolute path", "{outside}/pwned", _pax_absolute_path),
        Attack("root_as_file", "the root member ./ as a regular file", "./", _root_as_file),
    )
}
"""Every attack by name. ``member`` may contain ``{outside}`` and ``{rel}``: see :func:`expected_member`."""


def expected_member(attack: Attack, outside: Path, dest: Path) -> str:
    """The offending member's name as it appears in the archive (and in the refusal message)."""
    return attack.member.format(outside=outside, rel=_rel(outside, dest))
