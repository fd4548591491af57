"""ELF files and their dependency closure, read with pyelftools and resolved the way glibc's loader would.

Never by running anything (lddtree's approach, as auditwheel does). For a DT_NEEDED name asked for by object L
(glibc ``elf/dl-load.c``, ``_dl_map_object``):

1. a name with a ``/`` is a path;
2. unless L has DT_RUNPATH: the DT_RPATH of L, then of the object that loaded L, and so on up to the executable
   (an object that has DT_RUNPATH contributes no RPATH);
3. LD_LIBRARY_PATH: here the ROCm root's library dirs stand, as the seed pipeline exported them at build time;
4. DT_RUNPATH of L only (never inherited);
5. the ld.so.conf directories (what ld.so.cache holds), then the default directories.

``$ORIGIN`` is the directory of the object as it was found (the executable's: its real location, glibc reads
/proc/self/exe). A candidate of another ELF class or machine is skipped and the search goes on, as the loader does.
Inside a chroot-style root (a Debian ROCm root) absolute paths and absolute symlinks resolve inside that root.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from elftools.common.exceptions import ELFError
from elftools.common.utils import struct_parse
from elftools.elf.structs import ELFStructs

from rockbuild.core.errors import BundleError
from rockbuild.core.records import MISSING, ROOT, SHIPS, SYSTEM, Closure, Library, LibraryKind, LibraryStatus, RootVia
from rockbuild.paths import MAX_SYMLINK_HOPS as _MAX_SYMLINK_HOPS
from rockbuild.paths import follow_in_root

from .policy import PlatformPolicy, name_matches

ELF_MAGIC = b"\x7fELF"
_ORIGIN_RE = re.compile(r"\$(?:ORIGIN\b|\{ORIGIN\})")
_OTHER_TOKEN_RE = re.compile(r"\$(?:\{?(LIB|PLATFORM)\}?)")
TRIPLETS = {"EM_X86_64": "x86_64-linux-gnu", "EM_AARCH64": "aarch64-linux-gnu", "EM_386": "i386-linux-gnu"}


def elf_machine(path: Path) -> int | None:
    """e_machine from the header (cheap): tells host ELFs from AMDGPU code objects in the kernel folders."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(20)
    except OSError:
        return None
    if head[:4] != ELF_MAGIC or len(head) < 20:
        return None
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


@dataclass(frozen=True)
class ElfInfo:
    """What the loader reads from one ELF file."""

    path: Path
    elf_class: int
    machine: str
    e_type: str
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    interp: str | None
    version_needs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    dynamic: bool = True  # has a PT_DYNAMIC segment (False: a static program, nothing for the loader to do)

    @property
    def is_executable(self) -> bool:
        """A program (ET_EXEC, or a PIE: ET_DYN with an interpreter and no SONAME), not a library."""
        return self.e_type == "ET_EXEC" or (self.e_type == "ET_DYN" and self.interp is not None and not self.soname)

    @property
    def is_loadable(self) -> bool:
        return self.e_type in ("ET_EXEC", "ET_DYN")

    def compatible(self, other: ElfInfo) -> bool:
        return self.elf_class == other.elf_class and self.machine == other.machine


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 5, 10, 14, 15, 29
DT_VERNEED, DT_VERNEEDNUM = 0x6FFFFFFE, 0x6FFFFFFF


def read_elf(path: Path) -> ElfInfo | None:
    """The dynamic-linking facts of ``path``; None when it is not an ELF file. A broken ELF is a BundleError.

    Cached by file identity (device, inode, size, mtime): planning reads each file more than once, and a file
    rewritten by patchelf is read again.
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror}") from None
    return _read_elf_cached(str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8192)
def _read_elf_cached(path: str, _dev: int, _ino: int, _size: int, _mtime: int) -> ElfInfo | None:
    return _read_elf(Path(path))


def _read_elf(path: Path) -> ElfInfo | None:
    """Read ``path`` (uncached); see :func:`read_elf`.

    pyelftools reads the ELF and program headers; the dynamic table, its strings and the version needs are then read
    through the program headers, as the loader does. (pyelftools' DynamicSegment would first build every section
    object, GNU hash tables included, which made the closure of a llama.cpp build 3x slower.)
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror}") from None
    with fh:
        if fh.read(4) != ELF_MAGIC:
            return None
        fh.seek(0)
        try:
            return _read_dynamic(path, fh, _ElfHeader(fh))
        except BundleError:
            raise
        except (ELFError, ValueError, KeyError, AssertionError, struct.error, IndexError) as exc:
            raise BundleError(f"{path} is not a valid ELF file ({exc}); is the build complete?") from None
        except Exception as exc:  # pyelftools raises construct errors on truncated files
            raise BundleError(f"{path} is not a valid ELF file ({type(exc).__name__}: {exc})") from None


@functools.lru_cache(maxsize=64)
def _elf_structs(little_endian: bool, elfclass: int, e_type: str, e_machine: str, e_osabi: str) -> ELFStructs:
    """pyelftools' struct definitions for one kind of file, built once (building them is most of ELFFile's cost)."""
    structs = ELFStructs(little_endian, elfclass)
    structs.create_basic_structs()
    structs.create_advanced_structs(e_type, e_machine, e_osabi)
    return structs


class _ElfHeader:
    """The ELF header parsed with pyelftools' (cached) structs: what :class:`ELFFile` gives, without its set-up cost."""

    def __init__(self, fh: IO[bytes]) -> None:
        ident = fh.read(16)
        if len(ident) < 16 or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise ELFError("bad ELF identification")
        self.elfclass = 32 if ident[4] == 1 else 64
        self.little_endian = ident[5] == 1
        basic = _elf_structs(self.little_endian, self.elfclass, "", "", "")
        header = struct_parse(basic.Elf_Ehdr, fh, 0)
        self.structs = _elf_structs(
            self.little_endian, self.elfclass, header["e_type"], header["e_machine"], header["e_ident"]["EI_OSABI"]
        )
        self.header = header

    def __getitem__(self, name: str) -> Any:
        return self.header[name]


def _read_dynamic(path: Path, fh: IO[bytes], elf: _ElfHeader) -> ElfInfo:
    little = elf.little_endian
    end = "<" if little else ">"
    wide = elf.elfclass == 64
    loads: list[tuple[int, int, int]] = []  # (vaddr, filesz, offset)
    dynamic: tuple[int, int] | None = None
    interp = None
    for index in range(elf["e_phnum"]):
        header = struct_parse(elf.structs.Elf_Phdr, fh, elf["e_phoff"] + index * elf["e_phentsize"])
        kind = header["p_type"]
        if kind == "PT_LOAD":
            loads.append((header["p_vaddr"], header["p_filesz"], header["p_offset"]))
        elif kind == "PT_DYNAMIC":
            dynamic = (header["p_offset"], header["p_filesz"])
        elif kind == "PT_INTERP":
            fh.seek(header["p_offset"])
            interp = fh.read(header["p_filesz"]).split(b"\0", 1)[0].decode("utf-8", "replace")
    machine, e_type = str(elf["e_machine"]), str(elf["e_type"])
    if dynamic is None:
        return ElfInfo(path, elf.elfclass, machine, e_type, None, (), (), (), interp, dynamic=False)

    def file_offset(address: int) -> int:
        for vaddr, filesz, offset in loads:
            if vaddr <= address < vaddr + filesz:
                return address - vaddr + offset
        raise BundleError(f"{path}: dynamic table points at {address:#x}, outside every PT_LOAD; damaged file")

    entry = struct.Struct(end + ("qQ" if wide else "iI"))
    fh.seek(dynamic[0])
    raw = fh.read(dynamic[1])
    tags: list[tuple[int, int]] = []
    for tag, value in entry.iter_unpack(raw[: len(raw) // entry.size * entry.size]):
        if tag == 0:
            break
        tags.append((tag, value))
    values = dict(tags)
    if DT_STRTAB not in values:
        raise BundleError(f"{path}: dynamic table without DT_STRTAB; damaged file")
    strtab = file_offset(values[DT_STRTAB])
    strsz = values.get(DT_STRSZ, 1 << 20)

    def string(offset: int) -> str:
        # a few short reads: libLLVM's whole .dynstr is megabytes of symbol names we never need
        out = b""
        while offset < strsz:
            fh.seek(strtab + offset)
            chunk = fh.read(min(256, strsz - offset))
            stop = chunk.find(b"\0")
            if stop >= 0 or not chunk:
                out += chunk[:stop] if stop >= 0 else chunk
                break
            out += chunk
            offset += len(chunk)
        return out.decode("utf-8", "replace")

    needed = tuple(string(v) for t, v in tags if t == DT_NEEDED)
    soname = next((string(v) for t, v in tags if t == DT_SONAME), None)
    rpath = tuple(p for t, v in tags if t == DT_RPATH for p in string(v).split(":") if p)
    runpath = tuple(p for t, v in tags if t == DT_RUNPATH for p in string(v).split(":") if p)
    version_needs: list[tuple[str, tuple[str, ...]]] = []
    if DT_VERNEED in values:
        verneed = struct.Struct(end + "HHIII")  # vn_version, vn_cnt, vn_file, vn_aux, vn_next
        vernaux = struct.Struct(end + "IHHII")  # vna_hash, vna_flags, vna_other, vna_name, vna_next
        position = file_offset(values[DT_VERNEED])
        for _ in range(values.get(DT_VERNEEDNUM, 0)):
            fh.seek(position)
            _version, count, file, aux, following = verneed.unpack(fh.read(verneed.size))
            names = []
            aux_position = position + aux
            for _ in range(count):
                fh.seek(aux_position)
                _hash, _flags, _other, name, aux_next = vernaux.unpack(fh.read(vernaux.size))
                names.append(string(name))
                if not aux_next:
                    break
                aux_position += aux_next
            version_needs.append((string(file), tuple(names)))
            if not following:
                break
            position += following
    return ElfInfo(path, elf.elfclass, machine, e_type, soname, needed, rpath, runpath, interp, tuple(version_needs))


# ---------------------------------------------------------------------------------------------------------------------
# Paths inside a root


def resolve_in_root(path: Path, sysroot: Path | None) -> Path | None:
    """``path`` with every symlink followed (absolute targets inside ``sysroot``); None if missing or a loop."""
    if sysroot is None or not path.is_relative_to(sysroot):
        try:
            return path.resolve(strict=True)
        except (OSError, RuntimeError):
            return None
    if path != sysroot:
        # the folder is walked once (cached); the file's own symlink chain usually stays in that folder
        folder = _resolve_folder_in_root(path.parent, sysroot)
        if folder is None:
            return None
        candidate = folder / path.name
        for _ in range(_MAX_SYMLINK_HOPS):
            if not candidate.is_symlink():
                return candidate if candidate.exists() else None
            target = os.readlink(candidate)
            if target.startswith("/"):
                return resolve_in_root(in_root(target, sysroot), sysroot)
            if "/" in target:
                return _resolve_walk(candidate, sysroot)
            candidate = candidate.parent / target  # libX.so.1 -> libX.so.1.2.3: same folder, already resolved
        return None
    return _resolve_walk(path, sysroot)


@functools.lru_cache(maxsize=4096)
def _resolve_folder_in_root(folder: Path, sysroot: Path) -> Path | None:
    return _resolve_walk(folder, sysroot)


def _resolve_walk(path: Path, sysroot: Path) -> Path | None:
    real = follow_in_root(path, sysroot)
    return real if real is not None and real.exists() else None


def in_root(path: str, sysroot: Path | None) -> Path:
    """An absolute path as a program inside the root sees it, as a path on this machine."""
    if sysroot is None:
        return Path(path)
    return sysroot / path.lstrip("/")


def ld_so_conf_dirs(sysroot: Path | None) -> list[str]:
    """Directories listed by ``/etc/ld.so.conf`` and its includes, as the root sees them."""
    out: list[str] = []
    seen: set[Path] = set()

    def read(conf: Path, depth: int) -> None:
        real = resolve_in_root(conf, sysroot)
        if real is None or real in seen or depth > 10:
            return
        seen.add(real)
        try:
            lines = real.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("hwcap "):
                continue
            if line.startswith("include "):
                for pattern in line.split()[1:]:
                    if not pattern.startswith("/"):
                        pattern = str(PurePosixPath("/etc") / pattern)
                    root_pattern = str(in_root(pattern, sysroot))
                    for match in sorted(glob.glob(root_pattern)):
                        read(Path(match), depth + 1)
                continue
            for entry in re.split(r"[\s:,]+", line):
                entry = entry.split("=", 1)[0]
                if entry.startswith("/") and entry not in out:
                    out.append(entry)

    read(in_root("/etc/ld.so.conf", sysroot), 0)
    return out


def default_lib_dirs(machine: str, elf_class: int) -> list[str]:
    """glibc's built-in directories (Debian multiarch first), as the root sees them."""
    triplet = TRIPLETS.get(machine)
    dirs = [f"/lib/{triplet}", f"/usr/lib/{triplet}"] if triplet else []
    if elf_class == 64:
        dirs += ["/lib64", "/usr/lib64"]
    return dirs + ["/lib", "/usr/lib"]


@dataclass(frozen=True)
class SearchPaths:
    """Where libraries are looked for besides the objects' own RPATH/RUNPATH (all paths on this machine)."""

    sysroot: Path | None
    rocm_dirs: tuple[Path, ...]
    system_dirs: tuple[Path, ...]

    @classmethod
    def for_root(
        cls,
        sysroot: Path | None,
        rocm_dirs: Sequence[Path],
        *,
        machine: str = "EM_X86_64",
        elf_class: int = 64,
        system: bool = True,
    ) -> SearchPaths:
        """The search paths of a machine whose / is ``sysroot`` (None: this machine) plus the ROCm library dirs."""
        system_dirs: list[Path] = []
        if system:
            for entry in ld_so_conf_dirs(sysroot) + default_lib_dirs(machine, elf_class):
                path = in_root(entry, sysroot)
                if path not in system_dirs:
                    system_dirs.append(path)
        return cls(sysroot, tuple(rocm_dirs), tuple(system_dirs))


# ---------------------------------------------------------------------------------------------------------------------
# The closure


@dataclass(frozen=True)
class Root:
    """A starting point of the closure: a file of the build's bin/, or an extra (dlopen'ed) library."""

    name: str  # the name it is stored under
    path: Path
    info: ElfInfo
    via: RootVia
    reason: str = ""
    aliases: tuple[str, ...] = ()  # other names it is known by (symlinks in bin/, its file name)


@dataclass
class _Node:
    name: str
    status: LibraryStatus
    path: Path | None = None
    real: Path | None = None
    info: ElfInfo | None = None
    via: str = ""
    reason: str = ""
    needed_by: list[str] = field(default_factory=list)


@dataclass
class _Loaded:
    name: str
    path: Path  # as found: $ORIGIN comes from it
    info: ElfInfo
    inherited_rpath: tuple[Path, ...]  # RPATH dirs of the loader chain (objects with RUNPATH contribute none)


class ElfResolver:
    """Loader-rule resolution with caches of ELF headers and directory listings (one per bundle run)."""

    def __init__(self, search: SearchPaths, policy: PlatformPolicy) -> None:
        self.search = search
        self.policy = policy
        self._infos: dict[Path, ElfInfo | None] = {}
        self._listings: dict[Path, frozenset[str]] = {}
        self.warnings: list[str] = []

    def info(self, real: Path) -> ElfInfo | None:
        if real not in self._infos:
            self._infos[real] = read_elf(real)
        return self._infos[real]

    def listing(self, directory: Path) -> frozenset[str]:
        if directory not in self._listings:
            real = resolve_in_root(directory, self.search.sysroot)
            try:
                names = frozenset(os.listdir(real)) if real is not None and real.is_dir() else frozenset()
            except OSError:
                names = frozenset()
            self._listings[directory] = names
        return self._listings[directory]

    def expand(self, entries: Iterable[str], origin: Path, owner: str) -> tuple[Path, ...]:
        """RPATH/RUNPATH entries as paths on this machine: ``$ORIGIN`` expanded, absolute ones inside the root."""
        out: list[Path] = []
        for entry in entries:
            if _OTHER_TOKEN_RE.search(entry):
                self.warnings.append(f"{owner}: run path entry {entry!r} uses $LIB/$PLATFORM; ignored")
                continue
            if _ORIGIN_RE.search(entry):
                out.append(Path(os.path.normpath(_ORIGIN_RE.sub(str(origin).replace("\\", "/"), entry))))
            elif entry.startswith("/"):
                out.append(in_root(entry, self.search.sysroot))
            else:
                self.warnings.append(f"{owner}: relative run path entry {entry!r} depends on the working dir; ignored")
        return tuple(out)

    def find(self, name: str, dirs: Iterable[Path], want: ElfInfo) -> tuple[Path, Path, ElfInfo] | None:
        """The first ``dirs/name`` that is an ELF of ``want``'s class and machine: (as found, real, info)."""
        for directory in dirs:
            if name not in self.listing(directory):
                continue
            candidate = directory / name
            real = resolve_in_root(candidate, self.search.sysroot)
            if real is None or not real.is_file():
                continue
            info = self.info(real)
            if info is not None and info.is_loadable and info.compatible(want):
                return candidate, real, info
        return None

    def origin_of(self, path: Path, info: ElfInfo, *, main: bool) -> Path:
        if main:  # glibc takes the executable's origin from /proc/self/exe: its real location
            real = resolve_in_root(path, self.search.sysroot)
            return (real or path).parent
        return path.parent


def needed_closure(roots: Sequence[Root], resolver: ElfResolver) -> Closure:
    """Every library the roots load, by loader rules; each named as asked for, classified ships/system/missing."""
    if not roots:
        return Closure.of("linux")
    reference = next((r.info for r in roots if r.info.is_executable), roots[0].info)
    for root in roots:
        if not root.info.compatible(reference):
            raise BundleError(
                f"{root.path} is ELF{root.info.elf_class} {root.info.machine}, the rest is "
                f"ELF{reference.elf_class} {reference.machine}; a bundle holds one architecture"
            )
    policy = resolver.policy
    nodes: dict[str, _Node] = {}
    provided: dict[str, Root] = {}  # names under which a root is available in the bundle
    for root in roots:
        nodes[root.name] = _Node(
            root.name,
            ROOT if root.via == "bin" else SHIPS,
            root.path,
            resolve_in_root(root.path, resolver.search.sysroot),
            root.info,
            root.via,
            root.reason,
        )
        for alias in (root.name, *root.aliases, root.info.soname or ""):
            if alias:
                provided.setdefault(alias, root)

    def record(name: str, status: LibraryStatus, by: str, **kw: object) -> _Node:
        node = nodes.get(name)
        if node is None:
            node = nodes[name] = _Node(name, status, **kw)  # type: ignore[arg-type]
        elif node.status == MISSING and status == SHIPS:
            # another process found it; in the bundle every file sits in one folder, so all of them will
            node.status, node.path, node.real, node.info = SHIPS, kw.get("path"), kw.get("real"), kw.get("info")  # type: ignore[assignment]
        elif "real" in kw and status == SHIPS and node.status in (ROOT, SHIPS) and node.real != kw["real"]:
            first = node.needed_by[0] if node.needed_by else node.via
            raise BundleError(
                f"two different files are loaded as {name}: {node.real} (for {first}) and {kw.get('real')} "
                f"(for {by}); fix the RPATHs or the ROCm root so that one {name} serves both"
            )
        if by and by not in node.needed_by:
            node.needed_by.append(by)
        return node

    for root in roots:
        # One process per root: the executable (or the dlopen'ed library) and what it loads, breadth first.
        is_main = root.info.is_executable
        loaded: set[str] = {root.name, *(a for a in (root.info.soname, root.path.name) if a)}
        queue = deque([_Loaded(root.name, root.path, root.info, ())])
        while queue:
            obj = queue.popleft()
            origin = resolver.origin_of(obj.path, obj.info, main=is_main and obj.name == root.name)
            own_rpath = () if obj.info.runpath else resolver.expand(obj.info.rpath, origin, obj.name)
            rpath_dirs = () if obj.info.runpath else own_rpath + obj.inherited_rpath
            runpath_dirs = resolver.expand(obj.info.runpath, origin, obj.name)
            for name in obj.info.needed:
                if name in loaded:
                    if name in nodes:
                        record(name, nodes[name].status, obj.name)
                    continue
                loaded.add(name)
                reason = policy.system_reason(name)
                if reason is not None:
                    record(name, SYSTEM, obj.name, reason=reason, via="DT_NEEDED")
                    continue
                found: tuple[Path, Path, ElfInfo] | None = None
                if "/" in name:
                    path = Path(name) if not name.startswith("/") else in_root(name, resolver.search.sysroot)
                    real = resolve_in_root(path, resolver.search.sysroot)
                    info = resolver.info(real) if real else None
                    found = (path, real, info) if real and info else None
                elif name in provided:
                    # A file of bin/ (or an extra): the bundle holds it, whatever the build tree's RPATH says.
                    prov = provided[name]
                    found = (prov.path, nodes[prov.name].real or prov.path, prov.info)
                else:
                    dirs = (*rpath_dirs, *resolver.search.rocm_dirs, *runpath_dirs, *resolver.search.system_dirs)
                    found = resolver.find(name, dirs, reference)
                if found is None:
                    record(name, MISSING, obj.name, via="DT_NEEDED")
                    continue
                path, real, info = found
                status = (
                    ROOT if name in provided and provided[name].name == name and provided[name].via == "bin" else SHIPS
                )
                record(name, status, obj.name, path=path, real=real, info=info, via="DT_NEEDED")
                if info.soname:
                    loaded.add(info.soname)
                queue.append(_Loaded(name, path, info, own_rpath + obj.inherited_rpath))

    entries = []
    for node in nodes.values():
        kind: LibraryKind = "exe" if node.info is not None and node.info.is_executable else "lib"
        size = node.real.stat().st_size if node.real is not None and node.status in (ROOT, SHIPS) else 0
        entries.append(
            Library(
                name=node.name,
                status=node.status,
                path=node.path,
                real_path=node.real,
                soname=node.info.soname if node.info else None,
                kind=kind,
                needed_by=tuple(node.needed_by),
                via=node.via,
                reason=node.reason,
                size=size,
            )
        )
    warnings = list(dict.fromkeys(resolver.warnings))
    by_real: dict[Path, list[str]] = {}
    for entry in entries:
        if entry.status in (ROOT, SHIPS) and entry.real_path is not None:
            by_real.setdefault(entry.real_path, []).append(entry.name)
    for real, names in by_real.items():
        if len(names) > 1:
            warnings.append(f"{real.name} is asked for as {', '.join(names)}: stored once per name (no symlinks)")
    return Closure.of("linux", tuple(entries), machine=reference.machine, warnings=tuple(warnings))


# ---------------------------------------------------------------------------------------------------------------------
# Roots and extras


def bin_roots(build_bin: Path) -> tuple[list[Root], list[Path]]:
    """The ELF executables and libraries of a build's bin/ (real files; symlinks become aliases) and the skipped files.

    Executables keep their names; a library is stored under its SONAME (the name DT_NEEDED entries carry).
    """
    if not build_bin.is_dir():
        raise BundleError(f"{build_bin} is not a directory; pass the build tree (its bin/ holds llama-server)")
    roots: dict[Path, Root] = {}
    skipped: list[Path] = []
    links: list[Path] = []
    for entry in sorted(build_bin.iterdir()):
        if entry.is_symlink():
            links.append(entry)
            continue
        if not entry.is_file():
            continue
        info = read_elf(entry)
        if info is None or not info.is_loadable:
            skipped.append(entry)
            continue
        name = entry.name if info.is_executable else (info.soname or entry.name)
        roots[entry.resolve()] = Root(name, entry, info, "bin", aliases=(entry.name,) if name != entry.name else ())
    for link in links:
        target = link.resolve()
        if target in roots:
            root = roots[target]
            roots[target] = Root(
                root.name, root.path, root.info, root.via, root.reason, tuple(dict.fromkeys((*root.aliases, link.name)))
            )
        else:
            skipped.append(link)
    names: dict[str, Path] = {}
    for root in roots.values():
        if root.name in names:
            raise BundleError(
                f"{names[root.name].name} and {root.path.name} in {build_bin} both want the name {root.name}; "
                "remove the stale one (a previous build's library?) and bundle again"
            )
        names[root.name] = root.path
    ordered = sorted(roots.values(), key=lambda r: (not r.info.is_executable, r.name))
    return ordered, skipped


def find_extra_files(
    patterns: Sequence[str], resolver: ElfResolver, reference: ElfInfo
) -> list[tuple[Path, Path, ElfInfo]]:
    """Files matching the globs in the first directory that has any (ROCm dirs, then system dirs), one per real file."""
    for directory in (*resolver.search.rocm_dirs, *resolver.search.system_dirs):
        matches = sorted(n for n in resolver.listing(directory) if name_matches(n, patterns, platform="linux"))
        found: dict[Path, tuple[Path, Path, ElfInfo]] = {}
        for name in matches:
            candidate = directory / name
            real = resolve_in_root(candidate, resolver.search.sysroot)
            if real is None or not real.is_file() or real in found:
                continue
            info = resolver.info(real)
            if info is not None and info.is_loadable and info.compatible(reference):
                found[real] = (candidate, real, info)
        for real, (_, _, info) in list(found.items()):
            # report it under the name that equals its SONAME (libX.so.3, not libX.so or libX.so.3.0.0)
            if info.soname and info.soname in matches:
                found[real] = (directory / info.soname, real, info)
        if found:
            return list(found.values())
    return []


# ---------------------------------------------------------------------------------------------------------------------
# Symbol versions


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


_VERSION_RE = re.compile(r"^(GLIBC|GLIBCXX|CXXABI|GCC)_(\d+(?:\.\d+)*)$")


def highest_versions(infos: Iterable[ElfInfo]) -> dict[str, tuple[str, str]]:
    """The highest GLIBC_/GLIBCXX_/CXXABI_/GCC_ version any file needs: {family: (version, file name)}."""
    best: dict[str, tuple[str, str]] = {}
    for info in infos:
        for _library, versions in info.version_needs:
            for version in versions:
                m = _VERSION_RE.match(version)
                if not m:
                    continue
                family, number = m.groups()
                if family not in best or version_key(number) > version_key(best[family][0]):
                    best[family] = (number, info.path.name)
    return dict(sorted(best.items()))
