"""HIP fat binaries: the clang offload bundles in an ELF's ``.hip_fatbin`` section, and the GPU targets inside.

``.hip_fatbin`` holds one bundle per translation unit, each aligned, padded with zeros (bundling.md 5):

* uncompressed: ``__CLANG_OFFLOAD_BUNDLE__`` (24 bytes), u64 entry count, then per entry u64 offset (from the
  bundle's start), u64 size, u64 triple length and the triple (``hipv4-amdgcn-amd-amdhsa--gfx1151``,
  ``host-x86_64-unknown-linux-gnu-``);
* compressed: ``CCOB``, u16 version, u16 method (0 zlib, 1 zstd), then v1: u32 uncompressed size; v2: u32 total
  size, u32 uncompressed size; v3: u64 total size, u64 uncompressed size; then a u64 hash and the compressed
  stream, which decompresses to an uncompressed bundle as above. Only its header is decompressed here.
"""

from __future__ import annotations

import io
import mmap
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from elftools.elf.elffile import ELFFile

from rockbuild.core.errors import BundleError
from rockbuild.core.record import Record
from rockbuild.core.records import FatBinary, PrunedFatbin, PruneProof
from rockbuild.paths import follow_in_root
from rockbuild.process import ProcessError, child_env, run
from rockbuild.rocm.layout import target_order

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
SECTION = ".hip_fatbin"


@dataclass(frozen=True)
class BundleEntry:
    triple: str
    offset: int
    size: int

    @property
    def target(self) -> str | None:
        """The GPU target id of a device entry (``gfx90a:xnack+``), None for the host entry."""
        parts = self.triple.split("-", 5)
        if len(parts) == 6 and parts[1].startswith("amdgcn") and parts[5]:
            return parts[5]
        return None

    @property
    def gfx(self) -> str | None:
        target = self.target
        return target.split(":", 1)[0] if target else None


@dataclass(frozen=True)
class OffloadBundle:
    offset: int  # in the section
    size: int  # bytes it occupies in the section (compressed size for CCOB)
    compression: str | None  # None, zlib, zstd
    version: int | None
    uncompressed_size: int
    entries: tuple[BundleEntry, ...]


@dataclass(frozen=True)
class FatbinReport:
    path: Path
    section_offset: int
    section_size: int
    bundles: tuple[OffloadBundle, ...]

    @property
    def targets(self) -> tuple[str, ...]:
        found = {e.gfx for b in self.bundles for e in b.entries if e.gfx}
        return tuple(sorted((t for t in found if t), key=target_order))

    @property
    def compressed(self) -> int:
        return sum(1 for b in self.bundles if b.compression)

    def device_bytes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for bundle in self.bundles:
            for entry in bundle.entries:
                if entry.gfx:
                    out[entry.gfx] = out.get(entry.gfx, 0) + entry.size
        return dict(sorted(out.items(), key=lambda kv: (len(kv[0]), kv[0])))

    def summary(self) -> FatBinary:
        """What the audit records of it (bundle.json's ``audit.fat_binaries``)."""
        return FatBinary(
            file=self.path.name,
            section_bytes=self.section_size,
            bundles=len(self.bundles),
            compressed_bundles=self.compressed,
            targets=self.targets,
            device_bytes=self.device_bytes(),
        )


class _Short(Exception):
    def __init__(self, need: int) -> None:
        self.need = need


def _parse_header(data: bytes, where: str) -> tuple[tuple[BundleEntry, ...], int]:
    """Entries of an uncompressed bundle header at ``data[0:]`` and the bundle's end (max offset + size).

    Raises _Short(n) when ``data`` is too short to hold the whole header (the caller reads n bytes and retries).
    """
    if len(data) < 32:
        raise _Short(32)
    if data[:24] != BUNDLE_MAGIC:
        raise BundleError(f"{where}: not a clang offload bundle")
    (count,) = struct.unpack_from("<Q", data, 24)
    if count > 100_000:
        raise BundleError(f"{where}: offload bundle claims {count} entries; the file is damaged")
    pos = 32
    entries = []
    end = pos
    for _ in range(count):
        if pos + 24 > len(data):
            raise _Short(pos + 24)
        offset, size, triple_len = struct.unpack_from("<QQQ", data, pos)
        pos += 24
        if triple_len > 4096:
            raise BundleError(f"{where}: offload bundle entry with a {triple_len}-byte triple; the file is damaged")
        if pos + triple_len > len(data):
            raise _Short(pos + triple_len)
        triple = data[pos : pos + triple_len].decode("ascii", "replace")
        pos += triple_len
        entries.append(BundleEntry(triple, offset, size))
        end = max(end, offset + size)
    return tuple(entries), max(end, pos)


class _Section:
    """Byte access to one section of a mapped file; slices are copies, so the map can always be closed."""

    def __init__(self, mm: mmap.mmap | bytes, base: int, size: int) -> None:
        self.mm, self.base, self.size = mm, base, size

    def get(self, start: int, length: int) -> bytes:
        start = min(max(start, 0), self.size)
        return self.mm[self.base + start : self.base + min(start + length, self.size)]

    def first_nonzero(self, start: int) -> int:
        """Offset of the first non-zero byte at or after ``start`` (``size`` when none)."""
        chunk = 1 << 16
        pos = start
        while pos < self.size:
            block = self.get(pos, chunk)
            stripped = block.lstrip(b"\0")
            if stripped:
                return pos + len(block) - len(stripped)
            pos += len(block)
        return self.size

    def reader(self, start: int, end: int) -> _SectionReader:
        return _SectionReader(self, start, end)


class _SectionReader(io.RawIOBase):
    def __init__(self, section: _Section, start: int, end: int) -> None:
        self.section, self.pos, self.end = section, start, end

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.end - self.pos
        data = self.section.get(self.pos, min(n, self.end - self.pos))
        self.pos += len(data)
        return data


def _decompress_head(method: int, payload: _SectionReader, length: int, where: str) -> bytes:
    """The first ``length`` bytes of a compressed bundle's content."""
    if method == 0:
        dec = zlib.decompressobj()
        out = b""
        while len(out) < length:
            chunk = payload.read(1 << 16)
            if not chunk:
                break
            out += dec.decompress(chunk, length - len(out))
        return out
    if method == 1:
        try:
            import zstandard
        except ImportError:  # pragma: no cover - zstandard is a dependency
            raise BundleError(
                f"{where}: a zstd-compressed offload bundle needs the 'zstandard' package; pip install zstandard"
            ) from None
        source = cast(IO[bytes], payload)  # a RawIOBase: read() is all zstandard uses
        with zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=False, closefd=False) as reader:
            out = b""
            while len(out) < length:
                chunk = reader.read(length - len(out))
                if not chunk:
                    break
                out += chunk
            return out
    raise BundleError(f"{where}: unknown offload-bundle compression method {method}")


def _ccob(section: _Section, at: int, where: str) -> OffloadBundle:
    head = section.get(at, 32)
    if len(head) < 20:
        raise BundleError(f"{where}: compressed offload bundle at {at:#x} is truncated")
    version, method = struct.unpack_from("<HH", head, 4)
    total: int | None
    if version == 1:
        (raw_size,) = struct.unpack_from("<I", head, 8)
        header, total = 20, None
    elif version == 2:
        total, raw_size = struct.unpack_from("<II", head, 8)
        header = 24
    elif version == 3:
        total, raw_size = struct.unpack_from("<QQ", head, 8)
        header = 32
    else:
        raise BundleError(f"{where}: compressed offload bundle version {version} is not known to rockbuild")
    payload_end = at + total if total else section.size
    if payload_end > section.size:
        raise BundleError(f"{where}: compressed offload bundle at {at:#x} runs past the end of {SECTION}")
    length = min(1 << 16, raw_size)
    while True:
        head = _decompress_head(method, section.reader(at + header, payload_end), length, where)
        try:
            entries, _end = _parse_header(head, where)
            break
        except _Short as short:
            if length >= raw_size or len(head) < length:
                raise BundleError(f"{where}: compressed offload bundle header at {at:#x} is truncated") from None
            length = min(max(short.need, length * 4), raw_size)
    if total is None:  # v1 carries no size: find the stream's end by decompressing it (old compilers only)
        if method != 0:
            raise BundleError(f"{where}: CCOB v1 with zstd is not supported; rebuild with a newer compiler")
        dec = zlib.decompressobj()
        payload = section.get(at + header, section.size)
        dec.decompress(payload)
        total = header + len(payload) - len(dec.unused_data)
    return OffloadBundle(at, total, "zstd" if method == 1 else "zlib", version, raw_size, entries)


def iter_bundles(section: _Section, where: str) -> Iterator[OffloadBundle]:
    pos = 0
    while True:
        pos = section.first_nonzero(pos)  # bundles are aligned; the gaps are zero padding
        if pos >= section.size:
            return
        magic = section.get(pos, 24)
        if magic == BUNDLE_MAGIC:
            length = 4096
            while True:
                try:
                    entries, end = _parse_header(section.get(pos, length), where)
                    break
                except _Short as short:
                    if pos + length >= section.size:
                        raise BundleError(f"{where}: offload bundle at {pos:#x} is truncated") from None
                    length = max(short.need, length * 4)
            if pos + end > section.size:
                raise BundleError(f"{where}: offload bundle at {pos:#x} runs past the end of {SECTION}")
            yield OffloadBundle(pos, end, None, None, end, entries)
            pos += end
        elif magic[:4] == CCOB_MAGIC:
            bundle = _ccob(section, pos, where)
            yield bundle
            pos += bundle.size
        else:
            raise BundleError(f"{where}: unexpected bytes at {pos:#x} of {SECTION} (not an offload bundle)")


def fatbin_section(path: Path) -> tuple[int, int] | None:
    """File offset and size of the HIP fat-binary section (ELF ``.hip_fatbin``; PE ``.hip_fat``, names are cut to
    8 bytes in images), or None."""
    with open(path, "rb") as fh:
        if fh.read(2) == b"MZ":
            import pefile

            from .pe import opened_pe

            try:
                with opened_pe(path) as pe:
                    for sec in pe.sections:
                        if sec.Name.rstrip(b"\0").decode("ascii", "replace") in (SECTION, SECTION[:8]):
                            return (
                                sec.PointerToRawData,
                                min(sec.Misc_VirtualSize or sec.SizeOfRawData, sec.SizeOfRawData),
                            )
                    return None
            except pefile.PEFormatError as exc:
                raise BundleError(f"{path}: cannot read its sections ({exc})") from None
        fh.seek(0)
        try:
            section = ELFFile(fh).get_section_by_name(SECTION)
        except Exception as exc:
            raise BundleError(f"{path}: cannot read its sections ({exc})") from None
        if section is None or section["sh_type"] == "SHT_NOBITS":
            return None
        return section["sh_offset"], section["sh_size"]


def read_fatbin(path: Path) -> FatbinReport | None:
    """The offload bundles in ``path``'s ``.hip_fatbin`` (None when it has none), reading only their headers."""
    located = fatbin_section(path)
    if located is None:
        return None
    offset, size = located
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        bundles = tuple(iter_bundles(_Section(mm, offset, size), path.name))
    return FatbinReport(path, offset, size, bundles)


# ---------------------------------------------------------------------------------------------------------------------
# Pruning: keep only the job's targets in a shipped library's offload bundles, in place.
#
# .hip_fatbin is an allocated section and every bundle is referenced by address from .hipFatBinSegment, so nothing
# may move: each bundle is rewritten at its own offset with only the host entry and the job's targets, and the rest of
# its span is zero-filled (the file keeps its size; the zeros vanish in the archive). The HIP runtime reads a
# compressed bundle's totalSize from its header and hands exactly that many bytes to comgr's unbundle action, and an
# uncompressed bundle's header to comgr's lookup (clr hipamd/src/hip_code_object.cpp), so shorter bundles followed by
# zeros are what it expects.

ALIGN = 4096  # clang aligns HIP code objects in a bundle to 4096 bytes


def _keep(entry: BundleEntry, targets: set[str]) -> bool:
    return entry.gfx is None or entry.gfx in targets


def build_bundle(entries: list[tuple[str, bytes]], align: int = ALIGN) -> bytes:
    """An uncompressed offload bundle holding ``entries`` (triple, code), code objects aligned like clang's."""
    header = len(BUNDLE_MAGIC) + 8 + sum(24 + len(t.encode()) for t, _ in entries)
    offsets, pos = [], header
    for _, blob in entries:
        if blob:
            pos = (pos + align - 1) // align * align
        offsets.append(pos)
        pos += len(blob)
    out = bytearray(BUNDLE_MAGIC + struct.pack("<Q", len(entries)))
    for (triple, blob), offset in zip(entries, offsets, strict=True):
        out += struct.pack("<QQQ", offset, len(blob), len(triple.encode())) + triple.encode()
    for (_, blob), offset in zip(entries, offsets, strict=True):
        out += bytes(offset - len(out)) + blob if blob else b""
    return bytes(out)


def compress_bundle(bundle: bytes, *, version: int = 3, level: int = 9) -> bytes:
    """A CCOB (zstd) blob as clang writes it; the hash is the low 64 bits of the MD5 of the content, as LLVM's."""
    import hashlib

    import zstandard

    body = zstandard.ZstdCompressor(level=level).compress(bundle)
    digest = int.from_bytes(hashlib.md5(bundle).digest()[:8], "little")
    if version == 2:
        if 24 + len(body) > 0xFFFFFFFF or len(bundle) > 0xFFFFFFFF:
            raise BundleError("offload bundle too large for CCOB v2")
        return CCOB_MAGIC + struct.pack("<HHIIQ", 2, 1, 24 + len(body), len(bundle), digest) + body
    return CCOB_MAGIC + struct.pack("<HHQQQ", 3, 1, 32 + len(body), len(bundle), digest) + body


def _decompress_all(blob: bytes, method: int, raw_size: int, where: str) -> bytes:
    if method == 0:
        return zlib.decompress(blob)
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(blob, read_across_frames=True) as reader:
        data = reader.read(raw_size)
    if len(data) != raw_size:
        raise BundleError(f"{where}: compressed offload bundle decompressed to {len(data)} bytes, not {raw_size}")
    return data


def prune_fatbin(path: Path, targets: Sequence[str], *, level: int = 9) -> PrunedFatbin | None:
    """Rewrite ``path``'s offload bundles in place with only ``targets`` (and the host entry); None: no fatbin."""
    report = read_fatbin(path)
    if report is None:
        return None
    wanted = set(targets)
    before = after = dropped = rewritten = 0
    with open(path, "r+b") as fh:
        for bundle in report.bundles:
            before += bundle.size
            keep = [e for e in bundle.entries if _keep(e, wanted)]
            if len(keep) == len(bundle.entries):
                after += bundle.size
                continue
            start = report.section_offset + bundle.offset
            fh.seek(start)
            stored = fh.read(bundle.size)
            if bundle.compression is None:
                new = build_header_in_place(keep)
                zero_ranges = [(e.offset, e.offset + e.size) for e in bundle.entries if not _keep(e, wanted)]
                image = bytearray(stored)
                header_end = len(BUNDLE_MAGIC) + 8 + sum(24 + len(e.triple.encode()) for e in bundle.entries)
                image[:header_end] = new.ljust(header_end, b"\0")
                for lo, hi in zero_ranges:
                    image[lo:hi] = bytes(hi - lo)
                end = max([len(new)] + [e.offset + e.size for e in keep])
                image[end:] = bytes(len(image) - end)
                fh.seek(start)
                fh.write(image)
                after += end
            else:
                version, method = struct.unpack_from("<HH", stored, 4)
                header = {1: 20, 2: 24, 3: 32}[version]
                content = _decompress_all(stored[header:], method, bundle.uncompressed_size, path.name)
                entries = [(e.triple, content[e.offset : e.offset + e.size]) for e in keep]
                new = compress_bundle(build_bundle(entries), version=3 if version == 3 else 2, level=level)
                if len(new) > bundle.size:  # never grow: leave this bundle as it was
                    after += bundle.size
                    continue
                fh.seek(start)
                fh.write(new + bytes(bundle.size - len(new)))
                after += len(new)
            rewritten += 1
            dropped += len(bundle.entries) - len(keep)
    return PrunedFatbin(
        file=path.name,
        bundles=len(report.bundles),
        rewritten=rewritten,
        section_bytes=report.section_size,
        bytes_before=before,
        bytes_after=after,
        entries_dropped=dropped,
    )


def build_header_in_place(entries: Sequence[BundleEntry]) -> bytes:
    """An uncompressed bundle header listing ``entries`` at their current offsets (their code stays where it is)."""
    out = bytearray(BUNDLE_MAGIC + struct.pack("<Q", len(entries)))
    for e in entries:
        out += struct.pack("<QQQ", e.offset, e.size, len(e.triple.encode())) + e.triple.encode()
    return bytes(out)


# ---------------------------------------------------------------------------------------------------------------------
# The proof without a GPU: LLVM's own tools, from the ROCm root, read every pruned library as they read the original.
#
# For each offload bundle of a pruned library, clang-offload-bundler --list gives the triples of the original blob and
# of the pruned one (the pruned must be exactly the original's host entry and job targets), and --unbundle gives their
# code objects (each kept one must be byte-identical to the original's, and to what our own reader decompresses from
# the original, so that a tool reading the wrong bytes the same way twice cannot pass). pyelftools compares what the
# loader sees: SONAME, NEEDED, the init/fini entries, every dynamic symbol (name, value, size, kind, section, version)
# and the bytes of every other allocated section. The result, with the verified file's sha256, goes to bundle.json;
# the audit holds the bundle to it.
#
# Not llvm-objdump --offloading: LLVM 22's lists the triples of compressed bundles but writes code objects read from
# the wrong file offsets (host code, not the device code: checked on the e2e root), and its walk of the section skips
# an uncompressed bundle that follows compressed ones.

BUNDLER = "clang-offload-bundler"
# what patchelf --set-rpath rewrites (the run path string, DT_RUNPATH, the section numbering in st_shndx): compared
# through elf_identity's SONAME/NEEDED/dynamic entries and symbol table instead of byte for byte
PATCHELF_SECTIONS = frozenset({".dynsym", ".dynstr", ".dynamic"})
_DYNAMIC_TAGS = (
    "DT_FLAGS",
    "DT_FLAGS_1",
    "DT_INIT",
    "DT_FINI",
    "DT_INIT_ARRAY",
    "DT_INIT_ARRAYSZ",
    "DT_FINI_ARRAY",
    "DT_FINI_ARRAYSZ",
)
_SHF_ALLOC = 0x2
_TRIPLE = re.compile(r"[A-Za-z0-9_.:+-]+-[A-Za-z0-9_.:+-]*")
TOOL_TIMEOUT = 600


@dataclass(frozen=True, kw_only=True)
class OffloadTools(Record):
    """The clang-offload-bundler of a ROCm root, and how to run it from here: a chroot's programs run through the
    root's own loader and libraries (``loader``), a TheRock tree's directly."""

    bundler: Path
    version: str
    loader: tuple[str, ...]

    def argv(self, *args: str) -> list[str]:
        return [*self.loader, str(self.bundler), *args]


def find_offload_tools(layout: Any) -> tuple[OffloadTools | None, str]:
    """The clang-offload-bundler of ``layout`` (a :class:`~rockbuild.rocm.layout.RocmLayout`), checked by running
    ``--version``; (None, why) when the root has none that runs here."""
    if layout.platform != "linux":
        return None, f"{layout.root} is a {layout.platform} root: its {BUNDLER} does not run here"
    sysroot = layout.sysroot

    def real(path: Path) -> Path | None:
        found = follow_in_root(path, sysroot) if sysroot is not None else path.resolve()
        return found if found is not None and found.is_file() else None

    bindir = layout.llvm_dir / "bin"
    bundler = real(bindir / BUNDLER)
    if bundler is None:
        return None, f"{layout.root} has no {bindir / BUNDLER}"
    loader: tuple[str, ...] = ()
    if sysroot is not None:
        dirs = [d for d in layout.library_dirs if d.is_dir()]
        found = next((real(p) for d in dirs for p in sorted(d.glob("ld-linux*.so*")) if real(p)), None)
        if found is None:
            return None, f"{layout.root} is a chroot without its own ld-linux to run {BUNDLER} from here"
        loader = (str(found), "--library-path", ":".join(str(d) for d in dirs))
    try:
        result = run([*loader, str(bundler), "--version"], env=child_env(), timeout=60, check=False)
    except ProcessError as exc:
        return None, f"{bundler} does not run here: {exc.message}"
    lines = [line.strip() for line in result.output.splitlines() if line.strip()]
    if result.returncode != 0 or not lines:
        return None, f"{bundler} does not run here (exit {result.returncode}: {lines[-1] if lines else 'no output'})"
    version = next((line for line in lines if "version" in line), lines[0])
    return OffloadTools(bundler=bundler, version=version, loader=loader), ""


def _symbol_versions(elf: ELFFile) -> dict[int, str]:
    """Symbol index -> the version name ``.gnu.version`` gives it (only versioned symbols)."""
    names: dict[int, str] = {}
    for section_name, index_key in ((".gnu.version_r", "vna_other"), (".gnu.version_d", "vd_ndx")):
        section = elf.get_section_by_name(section_name)
        if section is None:
            continue
        for version, auxiliaries in section.iter_versions():  # type: ignore[attr-defined]
            for aux in auxiliaries:
                key = aux.entry[index_key] if index_key == "vna_other" else version.entry[index_key]
                names.setdefault(int(key), aux.name)
                if index_key == "vd_ndx":
                    break
    versym = elf.get_section_by_name(".gnu.version")
    out: dict[int, str] = {}
    if versym is not None:
        for index in range(versym.num_symbols()):  # type: ignore[attr-defined]
            ndx = versym.get_symbol(index).entry["ndx"]  # type: ignore[attr-defined]
            if isinstance(ndx, int) and (ndx & 0x7FFF) in names:
                out[index] = names[ndx & 0x7FFF] + ("(hidden)" if ndx & 0x8000 else "")
    return out


def elf_identity(path: Path) -> dict[str, Any]:
    """What the loader and the HIP runtime see of ``path`` apart from its run path and its fat binary's contents:
    SONAME, NEEDED (in order), the init/fini and flags entries, the dynamic symbols (a count and a digest of every
    name, value, size, kind, binding, visibility, section name and version), a digest of each other allocated
    section, and where ``.hip_fatbin`` is (address, size)."""
    import hashlib
    import json

    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            sections = list(elf.iter_sections())
            names = {index: s.name for index, s in enumerate(sections)}
            soname: str | None = None
            needed: list[str] = []
            dynamic: dict[str, int] = {}
            dyn = elf.get_section_by_name(".dynamic")
            for tag in dyn.iter_tags() if dyn is not None else ():  # type: ignore[attr-defined]
                kind = tag.entry.d_tag
                if kind == "DT_NEEDED":
                    needed.append(tag.needed)
                elif kind == "DT_SONAME":
                    soname = tag.soname
                elif kind in _DYNAMIC_TAGS:
                    dynamic[kind] = int(tag.entry.d_val)
            versions = _symbol_versions(elf)
            digest = hashlib.sha256()
            count = 0
            dynsym = elf.get_section_by_name(".dynsym")
            for index, sym in enumerate(dynsym.iter_symbols() if dynsym is not None else ()):  # type: ignore[attr-defined]
                shndx = sym["st_shndx"]
                row = [
                    sym.name,
                    sym["st_value"],
                    sym["st_size"],
                    sym["st_info"]["bind"],
                    sym["st_info"]["type"],
                    sym["st_other"]["visibility"],
                    names.get(shndx, str(shndx)) if isinstance(shndx, int) else shndx,
                    versions.get(index),
                ]
                digest.update(json.dumps(row).encode() + b"\n")
                count += 1
            contents: dict[str, str] = {}
            fatbin = None
            for section in sections:
                if section.name == SECTION:
                    fatbin = {"address": section["sh_addr"], "size": section["sh_size"]}
                    continue
                if (
                    not section["sh_flags"] & _SHF_ALLOC
                    or section.name in PATCHELF_SECTIONS
                    or section["sh_type"] == "SHT_NOBITS"
                ):
                    continue
                key, n = section.name, 1
                while key in contents:
                    n += 1
                    key = f"{section.name}#{n}"
                contents[key] = hashlib.sha256(section.data()).hexdigest()
    except BundleError:
        raise
    except Exception as exc:
        raise BundleError(f"{path}: cannot read its ELF headers ({exc})") from None
    return {
        "soname": soname,
        "needed": needed,
        "dynamic": dynamic,
        "dynsym": count,
        "dynsym_sha256": digest.hexdigest(),
        "sections": contents,
        "fatbin": fatbin,
    }


def identity_differences(original: dict[str, Any], pruned: dict[str, Any]) -> list[str]:
    """How ``pruned``'s :func:`elf_identity` differs from ``original``'s, in words ([] when it does not)."""
    out = []
    if original.get("soname") != pruned.get("soname"):
        out.append(f"SONAME {pruned.get('soname')!r} is not the original's {original.get('soname')!r}")
    if original.get("needed") != pruned.get("needed"):
        out.append(f"NEEDED {pruned.get('needed')} is not the original's {original.get('needed')}")
    if original.get("dynamic") != pruned.get("dynamic"):
        before, after = original.get("dynamic") or {}, pruned.get("dynamic") or {}
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        out.append(f"dynamic entries {', '.join(changed)} differ from the original's")
    if (original.get("dynsym"), original.get("dynsym_sha256")) != (pruned.get("dynsym"), pruned.get("dynsym_sha256")):
        out.append(
            f"the dynamic symbols differ from the original's ({pruned.get('dynsym')} symbols, "
            f"{original.get('dynsym')} in the original)"
        )
    theirs = pruned.get("sections") or {}
    for name, digest in (original.get("sections") or {}).items():
        if name not in theirs:
            out.append(f"section {name} is missing")
        elif theirs[name] != digest:
            out.append(f"section {name} differs from the original's")
    if original.get("fatbin") != pruned.get("fatbin"):
        out.append(f"{SECTION} moved or changed size ({pruned.get('fatbin')}, originally {original.get('fatbin')})")
    return out


def file_sha256(path: Path) -> str:
    import hashlib

    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


class _ToolRun:
    """clang-offload-bundler on blobs written to a scratch folder."""

    def __init__(self, tools: OffloadTools, scratch: Path) -> None:
        self.tools, self.scratch, self.env = tools, scratch, child_env()

    def _run(self, args: list[str], what: str) -> str:
        try:
            return run(self.tools.argv(*args), env=self.env, timeout=TOOL_TIMEOUT).output
        except ProcessError as exc:
            tail = "; ".join(line for line in exc.tail[-2:] if line.strip())
            raise BundleError(f"{BUNDLER} failed on {what}" + (f": {tail}" if tail else f" ({exc.message})")) from None

    def listed(self, blob: Path, what: str) -> list[str]:
        output = self._run(["--list", "--type=o", f"--input={blob}"], what)
        return [line.strip() for line in output.splitlines() if _TRIPLE.fullmatch(line.strip())]

    def unbundled(self, blob: Path, triples: Sequence[str], what: str) -> dict[str, bytes]:
        if not triples:
            return {}
        outs = [blob.with_name(f"{blob.name}.{n}.co") for n in range(len(triples))]
        self._run(
            [
                "--unbundle",
                "--type=o",
                f"--targets={','.join(triples)}",
                f"--input={blob}",
                *(f"--output={o}" for o in outs),
            ],
            what,
        )
        got = {}
        for triple, out in zip(triples, outs, strict=True):
            got[triple] = out.read_bytes()
            out.unlink()
        return got


def _check_bundle(
    index: int,
    original: bytes,
    pruned: bytes,
    targets: set[str],
    ours: tuple[list[str], list[str]],
    ours_code: dict[str, bytes],
    runner: _ToolRun,
    name: str,
) -> tuple[list[str], list[str], dict[str, str], int]:
    """One bundle pair: (failures, triples the tool lists in the pruned, device triple -> sha256, bytes compared).
    ``ours``: the triples our reader found in the original and the pruned blob; ``ours_code``: the code objects it
    decompressed from the original."""
    import hashlib

    where = f"{name} bundle {index}"
    folder = runner.scratch / str(index)
    folder.mkdir()
    try:
        failures: list[str] = []
        blob_o, blob_p = folder / "original.bin", folder / "pruned.bin"
        blob_o.write_bytes(original)
        blob_p.write_bytes(pruned)
        listed_o = runner.listed(blob_o, f"{where} (original)")
        listed_p = runner.listed(blob_p, f"{where} (pruned)")
        for label, tool_view, our_view in (("original", listed_o, ours[0]), ("pruned", listed_p, ours[1])):
            if sorted(tool_view) != sorted(our_view):
                failures.append(
                    f"{where}: {BUNDLER} lists {sorted(tool_view)} in the {label}, rockbuild read {sorted(our_view)}"
                )
        expected = [t for t in listed_o if BundleEntry(t, 0, 0).gfx is None or BundleEntry(t, 0, 0).gfx in targets]
        if sorted(listed_p) != sorted(expected):
            failures.append(
                f"{where}: {BUNDLER} lists {sorted(listed_p)} in the pruned library, expected the "
                f"original's host entry and job targets {sorted(expected)}"
            )
        device = [t for t in listed_p if t in expected and BundleEntry(t, 0, 0).gfx]
        from_p = runner.unbundled(blob_p, device, f"{where} (pruned)")
        from_o = from_p if original == pruned else runner.unbundled(blob_o, device, f"{where} (original)")
        hashes, compared = {}, 0
        for triple in device:
            if from_p[triple] != from_o[triple]:
                failures.append(
                    f"{where}: the {triple} code object differs from the original's "
                    f"({len(from_p[triple])} vs {len(from_o[triple])} bytes)"
                )
            elif not from_p[triple]:
                failures.append(f"{where}: the {triple} code object is empty")
            elif ours_code.get(triple) != from_o[triple]:
                failures.append(
                    f"{where}: {BUNDLER} and rockbuild's reader disagree on the original's {triple} code object"
                )
            hashes[triple] = hashlib.sha256(from_p[triple]).hexdigest()
            compared += len(from_p[triple])
        return failures, listed_p, hashes, compared
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def _code_objects(blob: bytes, bundle: OffloadBundle, targets: set[str], where: str) -> dict[str, bytes]:
    """Our own reading of a blob's code objects for ``targets`` (triple -> bytes), decompressing a CCOB one."""
    if bundle.compression is not None:
        version, method = struct.unpack_from("<HH", blob, 4)
        content = _decompress_all(blob[{1: 20, 2: 24, 3: 32}[version] :], method, bundle.uncompressed_size, where)
    else:
        content = blob
    return {e.triple: content[e.offset : e.offset + e.size] for e in bundle.entries if e.gfx in targets}


def verify_pruned(
    original: Path,
    pruned: Path,
    targets: Sequence[str],
    tools: OffloadTools,
    *,
    scratch: Path | None = None,
    jobs: int | None = None,
) -> PruneProof:
    """Check ``pruned`` (the shipped, patched copy) against ``original`` with LLVM's tools (see the section comment):
    never raises for a difference, every one is a failure of the returned verification."""
    import concurrent.futures
    import os
    import tempfile
    import time

    start = time.monotonic()
    name = pruned.name
    failures: list[str] = []
    identity = elf_identity(original)
    failures += [f"{name}: {d}" for d in identity_differences(identity, elf_identity(pruned))]
    before, after = read_fatbin(original), read_fatbin(pruned)
    kept: set[str] = set()
    compared = compared_bytes = rewritten = 0
    if before is None or after is None:
        failures.append(f"{name}: {'the original' if before is None else 'the pruned copy'} has no {SECTION}")
    elif [b.offset for b in before.bundles] != [b.offset for b in after.bundles]:
        failures.append(
            f"{name}: the pruned copy's {len(after.bundles)} offload bundles do not start where the "
            f"original's {len(before.bundles)} do"
        )
    else:
        wanted = set(targets)
        with (
            tempfile.TemporaryDirectory(prefix=".rockbuild-verify-", dir=scratch) as tmp,
            open(original, "rb") as fo,
            open(pruned, "rb") as fp,
        ):
            runner = _ToolRun(tools, Path(tmp))

            def task(index: int) -> tuple[tuple[list[str], list[str], dict[str, str], int], bool]:
                b, a = before.bundles[index], after.bundles[index]
                blob_o = os.pread(fo.fileno(), b.size, before.section_offset + b.offset)
                blob_p = os.pread(fp.fileno(), a.size, after.section_offset + a.offset)
                ours = ([e.triple for e in b.entries], [e.triple for e in a.entries])
                code = _code_objects(blob_o, b, wanted, name)
                return _check_bundle(index, blob_o, blob_p, wanted, ours, code, runner, name), blob_o != blob_p

            workers = jobs or max(1, min(4, os.cpu_count() or 1))
            try:
                with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
                    for (bad, listed, hashes, size), changed in pool.map(task, range(len(before.bundles))):
                        failures += bad
                        kept.update(listed)
                        compared += len(hashes)
                        compared_bytes += size
                        rewritten += changed
            except BundleError as exc:
                failures.append(exc.message)
    gfx = {BundleEntry(t, 0, 0).gfx for t in kept}
    return PruneProof(
        ok=not failures,
        tools=tools.to_dict(),
        original=str(original),
        original_sha256=file_sha256(original),
        sha256=file_sha256(pruned),
        bundles=len(after.bundles) if after else 0,
        bundles_rewritten=rewritten,
        kept=tuple(sorted(kept)),
        kept_targets=tuple(sorted((t for t in gfx if t), key=target_order)),
        code_objects=compared,
        code_object_bytes=compared_bytes,
        identity=identity,
        cross_check=f"rockbuild's reader decompressed the same {compared} code objects from the original",
        failures=tuple(failures),
        seconds=round(time.monotonic() - start, 3),
    )
