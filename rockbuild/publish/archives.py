"""The release assets of one bundle: a flat ``.zip`` (every OS) and a flat ``.tar.gz`` (Linux), same bytes in both.

* Flat root: ``llama-server``, ``llama-cli``, libraries, ``rocblas/library/`` at the top, as the seed's assets.
* Zip entries record Unix modes (``create_system`` 3, mode in ``external_attr``), so ``unzip`` restores exec bits.
* No symlinks are stored. A bundle has none; if one is found, the file it points to is stored under the link's name
  (and the caller is told), so both formats hold plain files. A link out of the bundle or to a folder is refused.
* Reproducible: sorted entries, one timestamp for every entry, uid/gid 0, gzip header without name and time. The
  same bundle gives byte-identical archives, so a re-run finds the assets it uploaded before.
"""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import tarfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rockbuild.console import human_bytes
from rockbuild.core.errors import PublishError

_EPOCH_1980 = 315532800  # the earliest time a zip entry can carry


@dataclass(frozen=True)
class Entry:
    arcname: str  # posix path inside the archive
    source: Path  # the file whose bytes are stored (the link target for a symlink)
    mode: int  # permission bits
    size: int
    is_dir: bool = False
    link: str | None = None  # the symlink's own target text, when the entry replaced a symlink


def collect_entries(bundle: Path) -> tuple[list[Entry], list[str]]:
    """Every file and folder of ``bundle`` as archive entries (sorted), and notes about replaced symlinks."""
    root = bundle.absolute()
    entries: list[Entry] = []
    notes: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        here = Path(dirpath)
        for name in list(dirnames):
            path = here / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                raise PublishError(
                    f"{rel} in {root} is a symlink to a folder ({os.readlink(path)}); a bundle must hold plain folders",
                    hint="re-run rockbuild bundle",
                )
            entries.append(Entry(rel, path, stat.S_IMODE(path.stat().st_mode), 0, is_dir=True))
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                target = path.resolve()
                if not target.is_file() or not target.is_relative_to(root):
                    raise PublishError(
                        f"{rel} in {root} is a symlink to {os.readlink(path)}, which is not a file inside the bundle",
                        hint="re-run rockbuild bundle: bundles hold no symlinks",
                    )
                st = target.stat()
                entries.append(Entry(rel, target, stat.S_IMODE(st.st_mode), st.st_size, link=os.readlink(path)))
                notes.append(
                    f"{rel} is a symlink to {os.readlink(path)}: stored the file it points to under the link's name"
                )
            elif path.is_file():
                st = path.stat()
                entries.append(Entry(rel, path, stat.S_IMODE(st.st_mode), st.st_size))
            else:
                raise PublishError(f"{rel} in {root} is not a regular file; a bundle holds files and folders only")
    entries.sort(key=lambda e: e.arcname)
    return entries, notes


def _zip_time(mtime: int) -> tuple[int, int, int, int, int, int]:
    t = time.gmtime(max(mtime, _EPOCH_1980))
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec - t.tm_sec % 2)


def write_zip(entries: Sequence[Entry], dest: Path, *, mtime: int, level: int = 6) -> Path:
    """A zip of ``entries`` whose every entry records its Unix mode."""
    tmp = dest.with_name(dest.name + ".partial")
    date_time = _zip_time(mtime)
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=level) as zf:
        for e in entries:
            if e.is_dir:
                info = zipfile.ZipInfo(e.arcname + "/", date_time)
                info.create_system = 3
                info.external_attr = ((stat.S_IFDIR | e.mode) << 16) | 0x10  # 0x10: MS-DOS directory bit
                zf.writestr(info, b"")
                continue
            info = zipfile.ZipInfo(e.arcname, date_time)
            info.create_system = 3  # Unix: unzip applies the mode in the high 16 bits
            info.external_attr = (stat.S_IFREG | e.mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.file_size = e.size
            with open(e.source, "rb") as src, zf.open(info, "w", force_zip64=e.size >= zipfile.ZIP64_LIMIT) as out:
                shutil.copyfileobj(src, out, 1 << 20)
    os.replace(tmp, dest)
    return dest


def write_tar_gz(entries: Sequence[Entry], dest: Path, *, mtime: int, level: int = 6) -> Path:
    """A gzip'ed tar of ``entries``: regular files and folders only, owner root, one timestamp."""
    tmp = dest.with_name(dest.name + ".partial")
    with (
        open(tmp, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=level) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar,
    ):
        for e in entries:
            info = tarfile.TarInfo(e.arcname)
            info.mode, info.mtime = e.mode, mtime
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if e.is_dir:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = e.size
                with open(e.source, "rb") as src:
                    tar.addfile(info, src)
    os.replace(tmp, dest)
    return dest


def check_asset_size(path: Path, max_bytes: int) -> None:
    """Refuse an asset of ``max_bytes`` or more (GitHub wants each under 2 GiB), before anything is uploaded."""
    size = path.stat().st_size
    if size >= max_bytes:
        raise PublishError(
            f"{path.name} is {human_bytes(size)} ({size:,} bytes), over the {human_bytes(max_bytes)} limit for a "
            "GitHub release asset; nothing was uploaded",
            hint="ship fewer GPU targets per asset, or prune the bundle's fat binaries (rockbuild bundle "
            "--prune-fatbin)",
        )
