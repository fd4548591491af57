"""PE (Windows) files and their DLL closure, read with pefile: imports and delay-load imports, never by running them.

Windows looks for a DLL first in the application's folder, so a bundle is flat: every DLL next to the executables.
While bundling, a DLL is looked for in the build's bin/ (the future application folder), then in the ROCm root's
DLL folders (``bin/``, ``lib/llvm/bin``), then, on a Windows build machine, in System32. Names compare
case-insensitively, as on Windows. System DLLs (the policy's ``windows.system`` rules, ``api-ms-win-*``,
``ext-ms-*``, anything found only in System32) never ship.
"""

from __future__ import annotations

import mmap
import os
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pefile

from rockbuild.core.environment import environment
from rockbuild.core.errors import BundleError
from rockbuild.core.records import MISSING, ROOT, SHIPS, SYSTEM, Closure, Library, LibraryKind, LibraryStatus, RootVia

from .policy import PlatformPolicy, name_matches

MACHINES = {0x8664: "AMD64", 0x14C: "I386", 0xAA64: "ARM64"}
_IMPORT_DIRECTORIES = [
    pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
    pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"],
]


@dataclass(frozen=True)
class PeInfo:
    path: Path
    machine: str
    is_dll: bool
    imports: tuple[str, ...]
    delay_imports: tuple[str, ...]

    @property
    def needed(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.imports, *self.delay_imports)))


def is_pe(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if head[:2] != b"MZ" or len(head) < 64:
                return False
            fh.seek(int.from_bytes(head[60:64], "little"))
            return fh.read(4) == b"PE\0\0"
    except OSError:
        return False


@contextmanager
def opened_pe(path: Path) -> Iterator[pefile.PE]:
    """``path``'s headers parsed by pefile (fast_load: parse the directories you need) over a read-only map of the
    file, which is closed afterwards. Not pefile's own file opening: its PE.close() runs a full garbage collection
    each time, 20-35 ms in a process holding many objects, which made reading a Windows bundle's PE files take
    ten times as long. Raises pefile.PEFormatError for a file that is not one."""
    with open(path, "rb") as fh:
        try:
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file
            raise pefile.PEFormatError("empty file") from None
        with mapped:
            yield pefile.PE(data=mapped, fast_load=True)


def read_pe(path: Path) -> PeInfo | None:
    """Imports and delay-load imports of a PE file; None when it is not one. A broken PE is a BundleError."""
    if not is_pe(path):
        return None
    try:
        with opened_pe(path) as pe:
            pe.parse_data_directories(directories=_IMPORT_DIRECTORIES)
            imports = tuple(e.dll.decode("ascii", "replace") for e in getattr(pe, "DIRECTORY_ENTRY_IMPORT", []))
            delay = tuple(e.dll.decode("ascii", "replace") for e in getattr(pe, "DIRECTORY_ENTRY_DELAY_IMPORT", []))
            machine = MACHINES.get(pe.FILE_HEADER.Machine, hex(pe.FILE_HEADER.Machine))
            is_dll = bool(pe.FILE_HEADER.Characteristics & pefile.IMAGE_CHARACTERISTICS["IMAGE_FILE_DLL"])
    except pefile.PEFormatError as exc:
        raise BundleError(f"{path} is not a valid PE file ({exc}); is the build complete?") from None
    return PeInfo(path, machine, is_dll, imports, delay)


@dataclass(frozen=True)
class PeRoot:
    name: str
    path: Path
    info: PeInfo
    via: RootVia
    reason: str = ""


class PeResolver:
    """Case-insensitive DLL lookup in the bundle's source folders, with caches."""

    def __init__(self, dirs: Sequence[Path], policy: PlatformPolicy, system_dirs: Sequence[Path] = ()) -> None:
        self.dirs = tuple(dirs)
        self.system_dirs = tuple(system_dirs)
        self.policy = policy
        self._listings: dict[Path, dict[str, str]] = {}
        self._infos: dict[Path, PeInfo | None] = {}

    @classmethod
    def for_host(cls, dirs: Sequence[Path], policy: PlatformPolicy) -> PeResolver:
        """On a Windows build machine, System32 counts as the system; elsewhere only the policy's names do."""
        env = environment()
        system_root = env.get("SYSTEMROOT") or env.get("WINDIR")
        system = [Path(system_root) / "System32"] if os.name == "nt" and system_root else []
        return cls(dirs, policy, system)

    def listing(self, directory: Path) -> dict[str, str]:
        if directory not in self._listings:
            try:
                self._listings[directory] = {n.lower(): n for n in os.listdir(directory)}
            except OSError:
                self._listings[directory] = {}
        return self._listings[directory]

    def info(self, path: Path) -> PeInfo | None:
        real = path.resolve()
        if real not in self._infos:
            self._infos[real] = read_pe(real)
        return self._infos[real]

    def find(self, name: str, dirs: Iterable[Path]) -> Path | None:
        for directory in dirs:
            actual = self.listing(directory).get(name.lower())
            if actual is not None and (directory / actual).is_file():
                return directory / actual
        return None

    def system_reason(self, name: str) -> str | None:
        reason = self.policy.system_reason(name)
        if reason is None and self.find(name, self.system_dirs) is not None:
            reason = "found in System32 of the build machine: part of Windows or its drivers"
        return reason


def pe_bin_roots(build_bin: Path) -> tuple[list[PeRoot], list[Path]]:
    """The .exe and .dll files of a build's bin/ (each keeps its name) and the files skipped."""
    if not build_bin.is_dir():
        raise BundleError(f"{build_bin} is not a directory; pass the build tree (its bin/ holds llama-server.exe)")
    roots: list[PeRoot] = []
    skipped: list[Path] = []
    for entry in sorted(build_bin.iterdir()):
        if not entry.is_file() or entry.suffix.lower() not in (".exe", ".dll"):
            if entry.is_file():
                skipped.append(entry)
            continue
        info = read_pe(entry)
        if info is None:
            skipped.append(entry)
            continue
        roots.append(PeRoot(entry.name, entry, info, "bin"))
    roots.sort(key=lambda r: (r.info.is_dll, r.name.lower()))
    return roots, skipped


def pe_closure(roots: Sequence[PeRoot], resolver: PeResolver) -> Closure:
    """Every DLL the roots import or delay-load, classified ships/system/missing; names as the importers spell them."""
    if not roots:
        return Closure.of("windows")
    machine = roots[0].info.machine
    for root in roots:
        if root.info.machine != machine:
            raise BundleError(
                f"{root.path} is a {root.info.machine} file, the rest is {machine}; a bundle holds one architecture"
            )
    nodes: dict[str, dict] = {}  # lower-case name -> node
    provided = {r.name.lower(): r for r in roots}
    for root in roots:
        nodes[root.name.lower()] = {
            "name": root.name,
            "status": ROOT if root.via == "bin" else SHIPS,
            "path": root.path,
            "info": root.info,
            "via": root.via,
            "reason": root.reason,
            "needed_by": [],
        }

    def record(name: str, status: str, by: str, **kw: object) -> None:
        key = name.lower()
        node = nodes.get(key)
        if node is None:
            node = nodes[key] = {
                "name": name,
                "status": status,
                "needed_by": [],
                "via": "",
                "reason": "",
                "path": None,
                "info": None,
                **kw,
            }
        if by not in node["needed_by"]:
            node["needed_by"].append(by)

    queue: deque[tuple[str, PeInfo]] = deque((r.name, r.info) for r in roots)
    seen = {r.name.lower() for r in roots}
    while queue:
        owner, info = queue.popleft()
        for name in info.needed:
            via = "delay-import" if name in info.delay_imports and name not in info.imports else "import"
            key = name.lower()
            if key in seen:
                record(name, nodes[key]["status"], owner)
                continue
            seen.add(key)
            reason = resolver.system_reason(name)
            if reason is not None:
                record(name, SYSTEM, owner, reason=reason, via=via)
                continue
            if key in provided:
                path: Path | None = provided[key].path
            else:
                path = resolver.find(name, resolver.dirs)
            dll = resolver.info(path) if path is not None else None
            if path is None or dll is None:
                record(name, MISSING, owner, via=via)
                continue
            if dll.machine != machine:
                raise BundleError(f"{path} is a {dll.machine} DLL but {owner} is {machine}; check the ROCm root")
            record(name, SHIPS, owner, path=path, info=dll, via=via)
            queue.append((path.name, dll))

    entries = []
    for node in nodes.values():
        path = node["path"]
        status: LibraryStatus = node["status"]
        real = path.resolve() if path is not None else None
        kind: LibraryKind = "lib" if node["info"] is None or node["info"].is_dll else "exe"
        # a DLL is stored under its file name on disk; Windows matches the importer's spelling case-insensitively
        name = path.name if path is not None and status in (ROOT, SHIPS) else node["name"]
        entries.append(
            Library(
                name=name,
                status=status,
                path=path,
                real_path=real,
                kind=kind,
                needed_by=tuple(node["needed_by"]),
                via=node["via"],
                reason=node["reason"],
                size=real.stat().st_size if real and status != SYSTEM else 0,
            )
        )
    return Closure.of("windows", tuple(entries), machine=machine)


def find_extra_dlls(patterns: Sequence[str], resolver: PeResolver) -> list[Path]:
    """DLLs matching the globs in the first ROCm folder that has any."""
    for directory in resolver.dirs:
        matches = [
            directory / actual
            for lower, actual in sorted(resolver.listing(directory).items())
            if name_matches(lower, patterns, platform="windows") and (directory / actual).is_file()
        ]
        if matches:
            return matches
    return []
