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
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from elftools.elf.elffile import ELFFile

from rockbuild.rocm.layout import target_order

from . import BundleError

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.path.name, "section_bytes": self.section_size, "bundles": len(self.bundles),
            "compressed_bundles": self.compressed, "targets": list(self.targets),
            "device_bytes": self.device_bytes(),
        }


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
        triple = data[pos:pos + triple_len].decode("ascii", "replace")
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
        return self.mm[self.base + start:self.base + min(start + length, self.size)]

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

            try:
                pe = pefile.PE(str(path), fast_load=True)
            except pefile.PEFormatError as exc:
                raise BundleError(f"{path}: cannot read its sections ({exc})") from None
            try:
                for sec in pe.sections:
                    if sec.Name.rstrip(b"\0").decode("ascii", "replace") in (SECTION, SECTION[:8]):
                        return sec.PointerToRawData, min(sec.Misc_VirtualSize or sec.SizeOfRawData, sec.SizeOfRawData)
                return None
            finally:
                pe.close()
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


@dataclass(frozen=True)
class PruneReport:
    path: Path
    bundles: int
    rewritten: int
    section_bytes: int
    bytes_before: int  # bytes of bundles in the section before (compressed as stored)
    bytes_after: int
    entries_dropped: int

    @property
    def bytes_zeroed(self) -> int:
        return self.bytes_before - self.bytes_after

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.path.name, "bundles": self.bundles, "rewritten": self.rewritten,
                "section_bytes": self.section_bytes, "bytes_before": self.bytes_before,
                "bytes_after": self.bytes_after, "bytes_zeroed": self.bytes_zeroed,
                "entries_dropped": self.entries_dropped}


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


def prune_fatbin(path: Path, targets: Sequence[str], *, level: int = 9) -> PruneReport | None:
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
                entries = [(e.triple, content[e.offset:e.offset + e.size]) for e in keep]
                new = compress_bundle(build_bundle(entries), version=3 if version == 3 else 2, level=level)
                if len(new) > bundle.size:  # never grow: leave this bundle as it was
                    after += bundle.size
                    continue
                fh.seek(start)
                fh.write(new + bytes(bundle.size - len(new)))
                after += len(new)
            rewritten += 1
            dropped += len(bundle.entries) - len(keep)
    return PruneReport(path, len(report.bundles), rewritten, report.section_size, before, after, dropped)


def build_header_in_place(entries: Sequence[BundleEntry]) -> bytes:
    """An uncompressed bundle header listing ``entries`` at their current offsets (their code stays where it is)."""
    out = bytearray(BUNDLE_MAGIC + struct.pack("<Q", len(entries)))
    for e in entries:
        out += struct.pack("<QQQ", e.offset, e.size, len(e.triple.encode())) + e.triple.encode()
    return bytes(out)
