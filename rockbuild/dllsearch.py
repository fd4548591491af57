"""Which copy of a HIP runtime DLL Windows loads for a bundle: the bundle's own, or a stale one that shadows it.

A driver or an old HIP SDK leaves ``amdhip64_7.dll`` (``amd_comgr*.dll``, ``hiprtc*.dll``) in ``System32`` or on
``PATH``, and llama.cpp crashes on a copy it was not built with. This module models Windows' standard DLL search order
(:func:`search_folders`, :func:`locate`; names matched case-insensitively) for ``rockbuild doctor --bundle`` and
``--loader`` (:func:`resolve_bundle_dlls`) and for ``rockbuild install`` on Windows (:func:`outside_shadows`,
:func:`shadow_lines`). It reads no environment: ``SystemRoot`` and ``PATH`` come in as a
:class:`~rockbuild.core.environment.WindowsHost` (``Settings.windows``). tests/integration/test_dllsearch.py proves
each case with wine's loader.

docs/commands.md ("Windows: HIP DLLs that shadow the bundle's") gives the order, who wins in each case and what is not
modelled."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rockbuild.core.environment import WindowsHost
from rockbuild.core.record import Record

HIP_DLL_PATTERNS = ("amdhip64*.dll", "amd_comgr*.dll", "hiprtc*.dll")
# what a fix says about a copy in the system folders, which no PATH order or current folder can beat
_SYSTEM_FIX = (
    "start the bundle's own program (e.g. llama-server.exe: its folder is searched before the system "
    "folders), or have {loader} load {dll} with LoadLibraryEx(..., LOAD_WITH_ALTERED_SEARCH_PATH); "
    "moving the bundle up PATH cannot help"
)


@dataclass(frozen=True)
class Resolution(Record):
    """Where the loader finds one of the bundle's HIP DLLs for one way of starting: ``loaded`` None when nowhere (a
    record: the doctor's and install's reports list them)."""

    name: str  # as the bundle spells it
    bundled: Path  # the bundle's copy
    loaded: Path | None  # the file the loader takes
    where: str  # application folder | System32 | 16-bit system folder | Windows folder | current folder | PATH | ""
    start: str  # who loads it, in words
    shadowed: bool = field(init=False)  # another copy is loaded (derived)
    missing: bool = field(init=False)  # none is found (derived)
    fix: str = ""  # one line, when the bundle's copy is not the one loaded

    def __post_init__(self) -> None:
        object.__setattr__(self, "shadowed", self.loaded is not None and not same_file(self.loaded, self.bundled))
        object.__setattr__(self, "missing", self.loaded is None)

    @property
    def message(self) -> str:
        if self.missing:
            return f"{self.start} finds no {self.name}: the bundle's {self.bundled} is not on its DLL search path"
        if self.shadowed:
            return (
                f"{self.loaded} ({self.where}) shadows the bundle's {self.bundled} for {self.start}: llama.cpp "
                "would run on another HIP runtime and crash"
            )
        return f"{self.start} loads the bundle's own {self.name} ({self.where})"


def same_file(a: Path, b: Path) -> bool:
    """Paths of one file, compared as Windows does (case-insensitive there)."""
    return os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


def _entries(folder: Path) -> dict[str, Path]:
    """A folder's entries by lower-case name (empty when it is not a readable folder)."""
    try:
        return {p.name.lower(): p for p in folder.iterdir()}
    except OSError:
        return {}


def _child(folder: Path, name: str) -> Path:
    """``folder/name`` as the file system spells it (System32 is system32 in a wine prefix)."""
    return _entries(folder).get(name.lower(), folder / name)


def is_hip_dll(name: str) -> bool:
    return any(fnmatch.fnmatch(name.lower(), p) for p in HIP_DLL_PATTERNS)


def bundled_hip_dlls(bundle: Path) -> list[Path]:
    """The HIP runtime DLLs in the bundle's top folder (where its programs and their DLLs are), by name."""
    return sorted(
        (p for p in _entries(bundle).values() if p.is_file() and is_hip_dll(p.name)), key=lambda p: p.name.lower()
    )


def search_folders(host: WindowsHost, *, app_folder: Path | None, cwd: Path | None) -> list[tuple[str, Path]]:
    """The folders searched for a DLL named without a path, in order, each with its name in the search order
    (see the module docstring); ``app_folder``/``cwd`` None: left out (unknown)."""
    root = host.system_root
    folders: list[tuple[str, Path]] = []
    if app_folder is not None:
        folders.append(("application folder", app_folder))
    folders += [
        ("System32", _child(root, "System32")),
        ("16-bit system folder", _child(root, "System")),
        ("Windows folder", root),
    ]
    if cwd is not None:
        folders.append(("current folder", cwd))
    folders += [("PATH", p) for p in host.path]
    return folders


def locate(name: str, folders: Iterable[tuple[str, Path]]) -> tuple[str, Path] | None:
    """The first of ``folders`` holding a file ``name`` (any case): (what that folder is, the file)."""
    cache: dict[Path, dict[str, Path]] = {}
    for kind, folder in folders:
        found = cache.setdefault(folder, _entries(folder)).get(name.lower())
        if found is not None and found.is_file():
            return kind, found
    return None


def _fix(bundle: Path, dll: str, where: str, found: Path | None, loader: str) -> str:
    if found is None:
        return (
            f"put {bundle} on PATH, or have {loader} load the bundle's DLLs with LoadLibraryEx(..., "
            "LOAD_WITH_ALTERED_SEARCH_PATH)"
        )
    if where == "PATH":
        return f"put {bundle} before {found.parent} on PATH, or take {found.parent} off PATH"
    if where == "current folder":
        return f"start {loader} from another folder than {found.parent} (it is searched before PATH)"
    if where == "application folder":
        return f"remove {found} from {loader}'s folder, or start the bundle's own program (e.g. llama-server.exe)"
    return _SYSTEM_FIX.format(loader=loader, dll=dll)


def resolve_bundle_dlls(
    bundle: Path,
    host: WindowsHost,
    *,
    loader: Path | None = None,
    loads: Path | None = None,
    altered: bool = False,
    cwd: Path | None = None,
) -> list[Resolution]:
    """Which copy of each of the bundle's HIP DLLs the loader takes for one way of starting:

    * ``loader`` None: a program of the bundle (its folder is the application folder);
    * ``loader`` an exe outside the bundle that loads ``loads`` (a DLL of the bundle, e.g. ggml-hip.dll) by full
      path: its dependencies are searched from ``loader``'s folder, or from the bundle (``altered``: with
      LOAD_WITH_ALTERED_SEARCH_PATH);
    * ``cwd``: the program's current folder (None: unknown, left out of the search).
    """
    bundle = Path(bundle)
    if loader is None:
        app_folder, start, who = bundle, f"the programs in {bundle}", "the program"
    else:
        app_folder = bundle if altered else Path(loader).parent
        what = loads.name if loads is not None else "the bundle's DLLs"
        start = f"{loader} loading {what}" + (" with LOAD_WITH_ALTERED_SEARCH_PATH" if altered else "")
        who = str(loader)
    folders = search_folders(host, app_folder=app_folder, cwd=cwd)
    out: list[Resolution] = []
    for dll in bundled_hip_dlls(bundle):
        hit = locate(dll.name, folders)
        where, found = hit if hit else ("", None)
        ok = found is not None and same_file(found, dll)
        out.append(
            Resolution(
                dll.name,
                dll,
                found,
                where,
                start,
                "" if ok else _fix(bundle, loads.name if loads else "them", where, found, who),
            )
        )
    return out


def outside_shadows(bundle: Path, host: WindowsHost) -> list[Resolution]:
    """The copies that would shadow the bundle's HIP DLLs for any program outside the bundle folder that loads them
    (its own folder and current folder holding none): those in the system folders, and those on PATH ahead of the
    bundle's entry. The bundle's own programs are not affected."""
    start = "a program outside the bundle that loads its DLLs"
    folders = search_folders(host, app_folder=None, cwd=None)
    out = []
    for dll in bundled_hip_dlls(bundle):
        hit = locate(dll.name, folders)
        if hit is not None and not same_file(hit[1], dll):
            out.append(
                Resolution(
                    dll.name,
                    dll,
                    hit[1],
                    hit[0],
                    start,
                    _fix(bundle, "the bundle's DLLs", hit[0], hit[1], "that program"),
                )
            )
    return out


def shadow_lines(resolutions: Sequence[Resolution]) -> list[str]:
    """One line per problem: the file, what it shadows, the fix."""
    return [f"{r.message}; fix: {r.fix}" for r in resolutions if r.shadowed or r.missing]
