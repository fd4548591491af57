"""The bundle audit: is this folder self-contained, and does it carry exactly the job's GPU code?

Run at the end of every bundle (:mod:`.plan`), by ``rockbuild audit``, and on what ``rockbuild install`` and
``rockbuild doctor --bundle`` check. :func:`audit_bundle` returns an :class:`~rockbuild.core.records.AuditRecord` of
named checks (:class:`Check`; one failed check fails the audit, exit 10): the generic ones here (symlinks, file
formats, programs, architecture, needed libraries, run paths, kpack references, dlopen extras, CPU backends,
:func:`check_backend_abi`, symbol versions up to ``max_versions``), then the backend's own
(:meth:`.backend.BundleBackend.audit_checks`); pruned fat binaries are held to their proof (:mod:`.pruning`), checked
again when the ROCm root is given.

docs/commands.md ("Bundling") says what each check asks; docs/common-part.md explains ``backend-abi``."""

from __future__ import annotations

import os
import re
import stat
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rockbuild.bundle.policy import load_policy
from rockbuild.bundle.pruning import reverify_pruned
from rockbuild.core.errors import BundleError, UsageError
from rockbuild.core.records import AuditRecord, BundleRecord
from rockbuild.core.vocabulary import Backends, Check
from rockbuild.paths import inside
from rockbuild.smoke.parse import CPU_MODULE, DISABLED_CPU_VARIANTS

from .backend import BundleBackend
from .elf import ELF_MAGIC, ElfInfo, elf_machine, highest_versions, read_elf, version_key
from .fatbin import FatbinReport
from .kpack import kpack_refs
from .pe import PeInfo, is_pe, opened_pe, read_pe
from .policy import BundlePolicy, PlatformPolicy, name_matches

BUNDLE_JSON = "bundle.json"
HOST_MACHINES = {62, 183, 3}  # EM_X86_64, EM_AARCH64, EM_386; EM_AMDGPU (224) files are kernel data
# libX.so, libX.so.1, libX.so.1.2.3, libLLVM.so.19.1git; not rocBLAS's Kernels.so-000-gfx90a.hsaco
_SO_NAME_RE = re.compile(r"\.so(?:\.[0-9][^/]*)?$")
_PE_SUFFIXES = (".dll", ".exe")


def _bundle_files(root: Path) -> tuple[list[Path], list[Path]]:
    files, links = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        # the CPU variants `rockbuild doctor --fix-cpu` set aside: ggml never searches a subfolder, so they are not
        # part of the bundle until moved back
        if Path(dirpath) == root and DISABLED_CPU_VARIANTS in dirnames:
            dirnames.remove(DISABLED_CPU_VARIANTS)
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                links.append(path)
            elif name in filenames:
                files.append(path)
    return sorted(files), sorted(links)


# ---------------------------------------------------------------------------------------------------------------------
# File formats and programs: what cannot be read is a failed check, never an exception (exit 10, not 9)


def _describe(head: bytes, size: int) -> str:
    """What a file that is not the binary its name promises looks like, in a few words."""
    if size == 0:
        return "an empty file"
    if head.startswith(ELF_MAGIC):
        return "an ELF file"
    if head.startswith(b"MZ"):
        return "a Windows (MZ) file"
    if head.startswith(b"#!"):
        return "a script"
    if b"GNU ld script" in head or head.lstrip().startswith((b"INPUT", b"GROUP")):
        return "a linker script"
    if head.startswith(b"\x1f\x8b"):
        return "gzip data"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive"
    if all(32 <= b < 127 or b in b"\t\n\r" for b in head):
        return f"a text file of {size} bytes"
    return f"{size} bytes of unrecognised data starting {head[:4].hex(' ')}"


def _truncated(kind: str, size: int, need: int) -> str:
    return f"a truncated {kind} file ({size} of the {need} bytes its headers describe)"


def _elf_problem(path: Path, size: int) -> str | None:
    """Why the ELF file at ``path`` cannot be whole (its headers, program headers or section table reach past its
    end, or its identification is bad); None when they all fit. Only headers are read: cheap for kernel files too."""
    with open(path, "rb") as fh:
        head = fh.read(64)
        if len(head) < 16:
            return _truncated("ELF", size, 64)
        if head[4] not in (1, 2) or head[5] not in (1, 2):
            return f"a damaged ELF file (bad class {head[4]} or byte order {head[5]} in its identification)"
        wide, end = head[4] == 2, "<" if head[5] == 1 else ">"
        ehsize = 64 if wide else 52
        if size < ehsize:
            return _truncated("ELF", size, ehsize)
        if wide:
            phoff, shoff = struct.unpack(end + "QQ", head[32:48])
            phentsize, phnum, shentsize, shnum = struct.unpack(end + "HHHH", head[54:62])
        else:
            phoff, shoff = struct.unpack(end + "II", head[28:36])
            phentsize, phnum, shentsize, shnum = struct.unpack(end + "HHHH", head[42:50])
        need = ehsize
        if shoff:
            need = max(need, shoff + max(shnum, 1) * shentsize)  # shnum 0: extended numbering, entry 0 holds it
        if phnum and phnum != 0xFFFF:  # PN_XNUM: the count is in section 0; the section table is checked above
            if phentsize < (56 if wide else 32):
                return f"a damaged ELF file (program header entries of {phentsize} bytes)"
            need = max(need, phoff + phnum * phentsize)
            if phoff + phnum * phentsize <= size:  # the segments too, for the whole length the headers describe
                fh.seek(phoff)
                raw = fh.read(phnum * phentsize)
                for index in range(phnum):
                    entry = raw[index * phentsize :]
                    if wide:
                        _kind, _flags, offset, _vaddr, _paddr, filesz = struct.unpack(end + "IIQQQQ", entry[:40])
                    else:
                        _kind, offset, _vaddr, _paddr, filesz = struct.unpack(end + "IIIII", entry[:20])
                    if filesz:
                        need = max(need, offset + filesz)
    return _truncated("ELF", size, need) if need > size else None


def _pe_problem(path: Path, size: int) -> str | None:
    """Why the file at ``path`` (which starts with ``MZ``) is no whole PE file; None when its headers, sections and
    symbol table fit in it."""
    with open(path, "rb") as fh:
        head = fh.read(64)
        if len(head) < 64:
            return _truncated("PE", size, 64)
        pe_at = int.from_bytes(head[60:64], "little")
        fh.seek(pe_at)
        coff = fh.read(24)
        if len(coff) < 4:
            return _truncated("PE", size, pe_at + 24)
        if coff[:4] != b"PE\0\0":
            return "not a PE file (an MS-DOS header without a PE signature)"
        if len(coff) < 24:
            return _truncated("PE", size, pe_at + 24)
        sections, _stamp, symbols_at, symbols, optional = struct.unpack("<HIIIH", coff[6:22])
        table = pe_at + 24 + optional
        need = table + 40 * sections
        if need <= size:  # the sections' raw data too, for the whole length the headers describe
            fh.seek(table)
            raw = fh.read(40 * sections)
            for index in range(sections):
                raw_size, raw_at = struct.unpack("<II", raw[index * 40 + 16 : index * 40 + 24])
                if raw_size:
                    need = max(need, raw_at + raw_size)
        if symbols_at:
            need = max(need, symbols_at + 18 * symbols + 4)  # the COFF symbols, then the string table's size
    return _truncated("PE", size, need) if need > size else None


def _damaged(exc: BundleError, path: Path, rel: str, kind: str) -> str:
    """A reader's error about ``path`` as one failure line naming the file as the bundle holds it."""
    message = exc.message.replace(str(path), rel)
    if message.startswith(f"{rel} is "):
        return message
    return f"{rel} is a damaged {kind} file ({message.removeprefix(rel + ': ')})"


def _head(path: Path) -> tuple[bytes, int]:
    with open(path, "rb") as fh:
        return fh.read(512), os.fstat(fh.fileno()).st_size


def _screen(
    path: Path, rel: str, magic: bytes, named_like: str | None, problem: Callable[[Path, int], str | None]
) -> tuple[bool, str | None]:
    """Whether ``path`` starts with ``magic``, and why it fails the format check: named like ``named_like`` (a
    shared library, a DLL...) but of another format, unreadable, or (``problem``) truncated or damaged."""
    try:
        head, size = _head(path)
        if not head.startswith(magic):
            kind = "an ELF" if magic == ELF_MAGIC else "a PE"
            return False, (
                f"{rel} is named like {named_like} but is not {kind} file ({_describe(head, size)})"
                if named_like
                else None
            )
        why = problem(path, size)
    except OSError as exc:
        return False, f"{rel} cannot be read: {exc.strerror}"
    return True, f"{rel} is {why}" if why else None


def _read_binaries(root: Path, files: Sequence[Path], *, windows: bool) -> tuple[dict[Path, Any], list[str]]:
    """The bundle's binaries and the format failures: a file named like a library (or a .exe) that is not one, and
    any truncated or damaged binary. Linux: the loadable host ELF files (every one at the top, host machines below);
    Windows: the PE files (every .dll and .exe, and any PE file at the top)."""
    found: dict[Path, Any] = {}
    failures: list[str] = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        suffix = path.suffix.lower()
        if windows:
            if suffix not in _PE_SUFFIXES and (path.parent != root or not is_pe(path)):
                continue
            named = ("a DLL" if suffix == ".dll" else "a Windows program") if suffix in _PE_SUFFIXES else None
            ok, failure = _screen(path, rel, b"MZ", named, _pe_problem)
        else:
            named = "a shared library" if _SO_NAME_RE.search(path.name) else None
            ok, failure = _screen(path, rel, ELF_MAGIC, named, _elf_problem)
            machine = elf_machine(path) if ok and not failure else None
            ok = ok and (machine in HOST_MACHINES or (machine is not None and path.parent == root))
        if failure:
            failures.append(failure)
        if failure or not ok:
            continue
        try:
            info: PeInfo | ElfInfo | None = read_pe(path) if windows else read_elf(path)
        except BundleError as exc:
            failures.append(_damaged(exc, path, rel, "PE" if windows else "ELF"))
            continue
        if isinstance(info, PeInfo) or (isinstance(info, ElfInfo) and info.is_loadable):
            found[path] = info
    return found, failures


def _is_program(path: Path, info: ElfInfo) -> bool:
    """An ELF program: ET_EXEC, a PIE (ET_DYN with an interpreter, no SONAME), or a static PIE (ET_DYN without either,
    not named like a library, with the execute permission)."""
    if info.is_executable:
        return True
    if info.e_type != "ET_DYN" or info.interp is not None or info.soname or _SO_NAME_RE.search(path.name):
        return False
    try:
        return bool(path.stat().st_mode & 0o111)
    except OSError:
        return False


def _check_programs(
    root: Path, files: Sequence[Path], programs: Sequence[Path], libraries: int, *, windows: bool
) -> Check:
    """At least one program; on Linux each with the execute permission (what else would a user run?)."""
    failures = []
    content = [p for p in files if p != root / BUNDLE_JSON]
    if not programs:
        example = "llama-server.exe or llama-cli.exe" if windows else "llama-server or llama-cli"
        kind = "a .exe program" if windows else "an ELF executable"
        if not content:
            failures.append(f"the bundle is empty: no program (such as {example}) and no library")
        elif libraries:
            failures.append(
                f"no program: the bundle holds {libraries} librar{'y' if libraries == 1 else 'ies'} but "
                f"not {kind} (such as {example})"
            )
        else:
            failures.append(
                f"no program: the bundle holds {len(content)} file{'' if len(content) == 1 else 's'} but "
                f"not {kind} (such as {example})"
            )
    elif not windows and os.name == "posix":
        for path in programs:
            mode = stat.S_IMODE(path.stat().st_mode)
            if not mode & 0o111:
                failures.append(
                    f"{path.relative_to(root).as_posix()} is a program without the execute permission "
                    f"(mode {mode:o}): chmod +x it"
                )
    rels = [p.relative_to(root).as_posix() for p in programs]
    return Check("programs", not failures, tuple(failures), details={"programs": rels})


# GGML_BACKEND_DL: ggml_backend_load_best() loads (lib)ggml-cpu-<variant>.so/.dll by its name pattern, scores each
# with ggml_backend_score() and initialises the best with ggml_backend_init(); a plain (lib)ggml-cpu module is the
# fallback it loads only when no variant scores (a GGML_NATIVE build: the build host's CPU code).
_CPU_LINKED_RE = re.compile(r"^(?:lib)?ggml-cpu(?:\.so\.[0-9.]+|\.dll)$", re.I)
BACKEND_ENTRY_POINTS = ("ggml_backend_init", "ggml_backend_score")


def _dynamic_symbols(path: Path) -> tuple[set[str], dict[str, set[str]]] | None:
    """What a binary exports and what it imports: ELF, its defined dynamic symbols and its undefined non-weak ones
    under the key "" (ELF does not say from which library); PE, its export table and the names imported per DLL
    (lower case). None when unreadable (a damaged file is the file-formats check's finding)."""
    try:
        if is_pe(path):
            import pefile

            with opened_pe(path) as pe:
                pe.parse_data_directories(
                    directories=[
                        pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_EXPORT"],
                        pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
                    ]
                )
                exports = getattr(pe, "DIRECTORY_ENTRY_EXPORT", None)
                exported = {s.name.decode("ascii", "replace") for s in exports.symbols if s.name} if exports else set()
                imported: dict[str, set[str]] = {}
                for entry in getattr(pe, "DIRECTORY_ENTRY_IMPORT", ()):
                    names = {i.name.decode("ascii", "replace") for i in entry.imports if i.name}
                    imported.setdefault(entry.dll.decode("ascii", "replace").lower(), set()).update(names)
            return exported, imported
        from elftools.elf.elffile import ELFFile
        from elftools.elf.sections import SymbolTableSection

        with open(path, "rb") as fh:
            section = ELFFile(fh).get_section_by_name(".dynsym")
            if not isinstance(section, SymbolTableSection):
                return set(), {"": set()}
            symbols = [s for s in section.iter_symbols() if s.name]
        undefined = {s.name for s in symbols if s["st_shndx"] == "SHN_UNDEF" and s["st_info"]["bind"] == "STB_GLOBAL"}
        return {s.name for s in symbols if s["st_shndx"] != "SHN_UNDEF"}, {"": undefined}
    except Exception:
        return None


def exported_symbols(path: Path) -> set[str] | None:
    """The names a library exports (ELF: defined dynamic symbols; PE: the export table); None when unreadable."""
    symbols = _dynamic_symbols(path)
    return symbols[0] if symbols is not None else None


def imported_symbols(path: Path) -> dict[str, set[str]] | None:
    """What a binary takes from other libraries: ELF, its undefined non-weak dynamic symbols under the key ""; PE, the
    names imported per DLL (lower case). None when unreadable."""
    symbols = _dynamic_symbols(path)
    return symbols[1] if symbols is not None else None


# ggml's core libraries (the API every backend module links against) and its backend modules, by file name
_GGML_CORE_RE = re.compile(r"^(?:lib)?ggml(?:-base)?(?:\.so(?:\.[0-9.]+)?|\.dll)$", re.I)
_GGML_MODULE_RE = re.compile(r"^(?:lib)?ggml-(?!base\b)[a-z0-9_-]+(?:\.so(?:\.[0-9.]+)?|\.dll)$", re.I)
_GGML_API = ("ggml_", "gguf_")


def check_backend_abi(top: Sequence[Path]) -> Check:
    """Every ggml backend module of the bundle (``libggml-hip.so``, ``ggml-vulkan.dll``, the CPU variants) finds each
    ``ggml_``/``gguf_`` function it needs in the bundle's ggml core libraries (libggml-base, libggml): a module built
    from another tree or with other flags than the programs (a GPU job on a common part) fails here, not at load time
    on a user's machine. A bundle without ggml's core libraries has nothing to check."""
    core = sorted((p for p in top if _GGML_CORE_RE.match(p.name)), key=lambda p: p.name)
    modules = sorted(
        (p for p in top if _GGML_MODULE_RE.match(p.name) and not _GGML_CORE_RE.match(p.name)), key=lambda p: p.name
    )
    details: dict[str, Any] = {"core": [p.name for p in core], "modules": {}}
    if not core or not modules:
        return Check("backend-abi", True, (), (), details)
    defined: set[str] = set()
    by_name: dict[str, set[str]] = {}
    for path in core:
        exported = exported_symbols(path) or set()
        defined |= exported
        by_name[path.name.lower()] = exported
    failures = []
    for path in modules:
        imported = imported_symbols(path)
        if imported is None:
            continue  # file-formats says why
        if "" in imported:  # ELF: any core library may define it
            needed = {s for s in imported[""] if s.startswith(_GGML_API)}
            missing = sorted(needed - defined)
        else:  # PE: each name from the DLL it names
            needed = {s for dll, names in imported.items() if dll in by_name for s in names}
            missing = sorted(
                s for dll, names in imported.items() if dll in by_name for s in names if s not in by_name[dll]
            )
        details["modules"][path.name] = len(needed)
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            failures.append(
                f"{path.name} needs {missing[0]}{more}, which {', '.join(p.name for p in core)} do not "
                "define: it was built against another ggml than the bundle's programs (a GPU library and "
                "a common part of different trees or flags)"
            )
    return Check("backend-abi", not failures, tuple(failures), (), details)


def check_cpu_backends(root: Path, top: Sequence[Path], rules: PlatformPolicy, machine: str) -> Check:
    """The CPU backend of a GGML_CPU_ALL_VARIANTS bundle: every variant the policy lists for ``machine`` ships, each
    is a loadable backend module (exports ggml_backend_init and ggml_backend_score), and no plain one (tuned to one
    CPU: the build host's, with GGML_NATIVE) ships beside them. A bundle whose CPU backend is linked in (built without
    GGML_BACKEND_DL) passes with a warning: it runs the same CPU code on every machine."""
    variants: dict[str, Path] = {}
    plain: list[Path] = []
    linked = [p.name for p in top if _CPU_LINKED_RE.match(p.name)]
    for path in top:
        match = CPU_MODULE.match(path.name)
        if match:
            (
                plain.append(path)
                if match.group("variant") is None
                else variants.__setitem__(match.group("variant"), path)
            )
    expected = rules.cpu_variants_for(machine)
    details: dict[str, Any] = {"variants": sorted(variants), "expected": list(expected), "machine": machine}
    warnings: tuple[str, ...]
    if not variants and not plain:
        warnings = (
            (
                f"{linked[0]} is the one CPU backend, linked in (built without GGML_BACKEND_DL and "
                "GGML_CPU_ALL_VARIANTS): every machine runs the same CPU code",
            )
            if linked
            else ()
        )
        return Check("cpu-backends", True, (), warnings, details)
    failures: list[str] = []
    for path in plain:
        failures.append(
            f"{path.name} is a CPU backend built for one CPU (with GGML_NATIVE, the build host's) and "
            "loads wherever no variant scores: build with GGML_CPU_ALL_VARIANTS=ON, GGML_NATIVE=OFF"
        )
    aside_dir = root / DISABLED_CPU_VARIANTS
    aside = {
        m.group("variant")
        for p in (aside_dir.iterdir() if aside_dir.is_dir() else ())
        if (m := CPU_MODULE.match(p.name)) and m.group("variant")
    }
    missing = [v for v in expected if v not in variants and v not in aside]
    set_aside = [v for v in expected if v not in variants and v in aside]
    if missing:
        failures.append(
            f"CPU variant{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing (the bundle "
            f"policy lists {len(expected)} for {machine}): those CPUs would load a slower one"
        )
    if variants and expected and expected[0] not in variants:
        failures.append(f"no baseline CPU variant ({expected[0]}): a CPU older than every shipped variant runs nothing")
    for _name, path in sorted(variants.items()):
        symbols = exported_symbols(path)
        absent = [s for s in BACKEND_ENTRY_POINTS if symbols is not None and s not in symbols]
        if absent:
            failures.append(f"{path.name} is not a loadable backend module (it exports no {', '.join(absent)})")
    unknown = sorted(set(variants) - set(expected))
    warnings = (
        (
            f"CPU variant{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} not in the bundle policy's list "
            f"for {machine} (config/bundle-policy.yaml cpu_variants)",
        )
        if unknown and expected
        else ()
    )
    if not expected:
        warnings += (f"the bundle policy lists no CPU variants for {machine}: only their loadability was checked",)
    if set_aside:
        warnings += (
            f"CPU variant{'s' if len(set_aside) > 1 else ''} {', '.join(set_aside)} set aside in "
            f"{DISABLED_CPU_VARIANTS}/ (rockbuild doctor --fix-cpu: this machine's CPU cannot run "
            f"{'them' if len(set_aside) > 1 else 'it'}); move back to undo",
        )
        details["set_aside"] = set_aside
    return Check("cpu-backends", not failures, tuple(failures), warnings, details)


def parse_max_versions(items: Iterable[str]) -> dict[str, str]:
    """``--max-version`` values (``GLIBC=2.35``) as {family: version}; a UsageError names a malformed one."""
    ceilings = {}
    for item in items:
        family, sep, version = item.partition("=")
        if not sep or not version.replace(".", "").isdigit():
            raise UsageError(f"--max-version {item!r}: write FAMILY=VERSION, e.g. GLIBC=2.35")
        ceilings[family.strip().upper()] = version.strip()
    return ceilings


def _check_run_paths(root: Path, elves: Mapping[Path, ElfInfo], policy: PlatformPolicy) -> Check:
    failures, warnings = [], []
    for path, info in elves.items():
        rel = path.relative_to(root).as_posix()
        entries = [("RPATH", e) for e in info.rpath] + [("RUNPATH", e) for e in info.runpath]
        if info.rpath and info.runpath:
            warnings.append(f"{rel} has both RPATH and RUNPATH (RPATH is then ignored)")
        needs_bundle = [n for n in info.needed if policy.system_reason(n) is None]
        if not entries and needs_bundle:
            failures.append(f"{rel} has no RPATH/RUNPATH but needs {needs_bundle[0]} from the bundle")
        for tag, entry in entries:
            if "$ORIGIN" not in entry and "${ORIGIN}" not in entry:
                kind = "an absolute" if entry.startswith("/") else "a relative"
                failures.append(f"{rel} has {kind} {tag} entry {entry!r}")
                continue
            if "$LIB" in entry or "$PLATFORM" in entry or "${LIB}" in entry or "${PLATFORM}" in entry:
                failures.append(f"{rel} has {tag} entry {entry!r} with $LIB/$PLATFORM")
                continue
            expanded = Path(
                os.path.normpath(entry.replace("${ORIGIN}", str(path.parent)).replace("$ORIGIN", str(path.parent)))
            )
            if not inside(expanded, root):
                failures.append(f"{rel} has {tag} entry {entry!r}, which points outside the bundle")
    return Check("run-paths", not failures, tuple(failures), tuple(warnings))


def _run_path_dirs(path: Path, info: ElfInfo, root: Path) -> list[Path]:
    out = []
    for entry in (info.rpath if not info.runpath else ()) + info.runpath:
        if "ORIGIN" in entry:
            expanded = Path(
                os.path.normpath(entry.replace("${ORIGIN}", str(path.parent)).replace("$ORIGIN", str(path.parent)))
            )
            if inside(expanded, root):
                out.append(expanded)
    return out


def check_kpack_refs(root: Path, files: Iterable[Path]) -> Check:
    """TheRock's split libraries (:mod:`.kpack`): a library none of whose kpack references names a file of the bundle
    has no GPU code on any machine; one that also names files outside the bundle gets a warning."""
    failures: list[str] = []
    warnings: list[str] = []
    details: dict[str, Any] = {}
    for path in sorted(files):
        refs = kpack_refs(path)
        if not refs:
            continue
        rel = path.relative_to(root).as_posix()
        targets = {ref: path.parent / ref for ref in refs}
        outside = [ref for ref, target in targets.items() if not inside(target, root)]
        found = [ref for ref, target in targets.items() if ref not in outside and target.is_file()]
        details[rel] = {"refs": refs, "found": found}
        if not found:
            failures.append(
                f"{rel} looks for its GPU code in {', '.join(refs)}, which "
                f"{'points out of the bundle' if outside else 'is not in the bundle'}: no GPU kernels "
                "for it on any machine"
            )
        elif outside:
            warnings.append(f"{rel} also looks in {', '.join(outside)}, outside the bundle")
    return Check("kpack-refs", not failures, tuple(failures), tuple(warnings), details)


def _check_needed_elf(root: Path, elves: Mapping[Path, ElfInfo], policy: PlatformPolicy) -> Check:
    failures = []
    system: dict[str, str] = {}
    for path, info in elves.items():
        rel = path.relative_to(root).as_posix()
        dirs = _run_path_dirs(path, info, root)
        for name in info.needed:
            reason = policy.system_reason(name)
            if reason is not None:
                system.setdefault(name, reason)
                continue
            hit = None
            for directory in dirs:
                candidate = directory / name
                if candidate in elves and elves[candidate].compatible(info):
                    hit = candidate
                    break
            if hit is None:
                where = "; it is in the bundle but not on its run path" if (root / name).is_file() else ""
                failures.append(f"{name} (needed by {rel}) does not resolve inside the bundle{where}")
    return Check("needed", not failures, tuple(failures), details={"host_libraries": system})


def _check_needed_pe(root: Path, pes: Mapping[Path, PeInfo], policy: PlatformPolicy) -> Check:
    failures = []
    present = {p.name.lower() for p in pes if p.parent == root}
    system: dict[str, str] = {}
    for path, info in pes.items():
        rel = path.relative_to(root).as_posix()
        for name in info.needed:
            reason = policy.system_reason(name)
            if reason is not None:
                system.setdefault(name, reason)
            elif name.lower() not in present:
                kind = "delay-loads" if name in info.delay_imports else "imports"
                failures.append(f"{name} ({rel} {kind} it) is not in the bundle's top folder")
    return Check("needed", not failures, tuple(failures), details={"host_libraries": system})


def _check_extras(root: Path, names: set[str], policy: PlatformPolicy, record: BundleRecord | None) -> Check:
    failures = []
    rocm = record.rocm if record is not None else None
    version = (rocm.version if rocm is not None else None) or ""
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else None
    for extra in policy.extras_for(major, rocm.kind if rocm is not None else None):
        if not extra.required or not extra.when:
            continue
        users = sorted(n for n in names if name_matches(n, extra.when, platform=policy.platform))
        if users and not any(name_matches(n, extra.names, platform=policy.platform) for n in names):
            failures.append(f"{' or '.join(extra.names)} is missing although {users[0]} is shipped: {extra.reason}")
    return Check("extras", not failures, tuple(failures))


def _check_versions(
    elves: Mapping[Path, ElfInfo], max_versions: Mapping[str, str] | None
) -> tuple[Check, dict[str, tuple[str, str]]]:
    versions = highest_versions(elves.values())
    failures = []
    for family, ceiling in (max_versions or {}).items():
        if family in versions and version_key(versions[family][0]) > version_key(ceiling):
            version, file = versions[family]
            failures.append(f"{file} needs {family}_{version}, above the allowed {family}_{ceiling}")
    details = {k: {"version": v, "file": f} for k, (v, f) in versions.items()}
    return Check("symbol-versions", not failures, tuple(failures), details=details), versions


def audit_bundle(
    path: Path,
    targets: Sequence[str] | None = None,
    *,
    backends: Backends[BundleBackend],
    platform: str | None = None,
    policy: BundlePolicy | None = None,
    max_versions: Mapping[str, str] | None = None,
    backend: str | None = None,
    rocm: Path | None = None,
) -> AuditRecord:
    """Audit the bundle at ``path`` for ``targets`` (default: those recorded in its bundle.json).

    ``backend`` (one of ``backends``; default: bundle.json's, else the one whose llama.cpp library the bundle
    holds) adds its own checks:
    gfx targets, kernel data and code objects for ROCm, ``no-rocm`` for Vulkan. A pruned fat binary is held to the
    record of its independent check (:func:`pruning_proof`); with ``rocm``, the ROCm root the bundle was made from,
    that check is run again with the root's clang-offload-bundler against the originals there
    (:func:`reverify_pruned`)."""
    root = Path(path).absolute()
    if not root.is_dir():
        raise BundleError(f"{root} is not a folder; pass a bundle made by rockbuild bundle")
    record = BundleRecord.read(root / BUNDLE_JSON)
    targets = tuple(targets) if targets else (record.targets if record is not None else ())
    files, links = _bundle_files(root)
    top = [p for p in files if p.parent == root]
    if platform is None:
        platform = (record.platform if record is not None else None) or (
            "windows" if any(p.suffix.lower() in (".exe", ".dll") for p in top) else "linux"
        )
    policy_all = policy or load_policy()
    rules = policy_all.for_platform(platform)
    checks = [Check("no-symlinks", not links, tuple(f"{p.relative_to(root).as_posix()} is a symlink" for p in links))]
    names = {p.name for p in top}
    flavour = (
        backends.get(backend)
        if backend
        else backends.of_bundle(names, record.backend if record is not None else None, str(platform))
    )
    versions: dict[str, tuple[str, str]] = {}
    fat: list[FatbinReport] = []
    if platform == "windows":
        all_pes, format_failures = _read_binaries(root, files, windows=True)
        pes = {p: info for p, info in all_pes.items() if p.parent == root}
        checks.append(Check("file-formats", not format_failures, tuple(format_failures)))
        programs = [p for p, info in all_pes.items() if not info.is_dll and p.suffix.lower() == ".exe"]
        checks.append(_check_programs(root, files, programs, len(all_pes) - len(programs), windows=True))
        machines = {info.machine for info in pes.values()}
        checks.append(
            Check(
                "architecture",
                len(machines) <= 1,
                (f"mixed machines: {', '.join(sorted(machines))}",) if len(machines) > 1 else (),
            )
        )
        checks.append(_check_needed_pe(root, pes, rules))
        checks.append(_check_extras(root, {n.lower() for n in names}, rules, record))
        checks.append(check_cpu_backends(root, list(pes), rules, next(iter(machines), "AMD64")))
        checks.append(check_backend_abi(list(pes)))
        own, fat = flavour.audit_checks(root, names, targets, rules, list(pes), record=record, windows=True)
        checks += own
    else:
        elves, format_failures = _read_binaries(root, files, windows=False)
        checks.append(Check("file-formats", not format_failures, tuple(format_failures)))
        programs = [p for p, info in elves.items() if _is_program(p, info)]
        checks.append(_check_programs(root, files, programs, len(elves) - len(programs), windows=False))
        reference = next((i for i in elves.values() if i.is_executable), next(iter(elves.values()), None))
        mixed = [p.relative_to(root).as_posix() for p, i in elves.items() if reference and not i.compatible(reference)]
        checks.append(
            Check(
                "architecture",
                not mixed,
                tuple(f"{m} is not {reference.machine} ELF{reference.elf_class}" for m in mixed if reference),
            )
        )
        checks.append(_check_needed_elf(root, elves, rules))
        checks.append(_check_run_paths(root, elves, rules))
        checks.append(check_kpack_refs(root, elves))
        checks.append(_check_extras(root, names, rules, record))
        checks.append(
            check_cpu_backends(
                root, [p for p in elves if p.parent == root], rules, reference.machine if reference else "EM_X86_64"
            )
        )
        checks.append(check_backend_abi([p for p in elves if p.parent == root]))
        own, fat = flavour.audit_checks(
            root, names, targets, rules, [p for p in elves if p.parent == root], record=record, windows=False
        )
        checks += own
        version_check, versions = _check_versions(elves, max_versions)
        checks.append(version_check)
    if record is not None and record.pruned_fatbins:
        for index, check in enumerate(checks):
            if check.name == "code-objects":
                again, notes = (
                    reverify_pruned(root, record, targets, rocm)
                    if rocm is not None
                    else (
                        [],
                        [
                            "the pruned fat binaries' records were checked; rockbuild audit --rocm ROOT (the root "
                            "the bundle was made from) runs clang-offload-bundler on them again"
                        ],
                    )
                )
                checks[index] = Check(
                    check.name,
                    check.ok and not again,
                    check.failures + tuple(again),
                    check.warnings,
                    {**check.details, "checked_again": notes},
                )
    return AuditRecord.of(
        root,
        platform,
        flavour.name,
        targets,
        tuple(checks),
        versions=versions,
        fat_binaries=tuple(f.summary() for f in fat),
    )
