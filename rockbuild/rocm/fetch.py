"""Stage 2: provide ROCm: resolve a TheRock tarball, download it into the cache and extract it at the same time.

The tarball streams from the network into the cache (``NAME.part``, hashed as it arrives) and, chunk by chunk, into
the safe extractor (decompressed on the other core), so download, hashing, caching and extraction overlap. The tree is
moved into place only when the download verified and the extraction finished; a marker inside it records which
tarball (name + sha256) it came from, so a second fetch of the same version touches neither the tarball nor the tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from rockbuild import console
from rockbuild.archive import StreamExtractor, read_marker
from rockbuild.console import human_bytes
from rockbuild.core.errors import ConfigError, LayoutError, UnreachableError, UsageError
from rockbuild.core.jobs import FamilyTable, Job, Selection
from rockbuild.core.record import Record
from rockbuild.core.records import InputsRocm, Tarball
from rockbuild.downloader import Downloader, get_text

from .index import IndexSource, TarballEntry, list_tarballs, resolve_tarball
from .layout import RocmLayout, detect_layout
from .names import parse_tarball_name


@dataclass(frozen=True)
class FetchResult(Record):
    """A ROCm root ready to build against, and where it came from (a record: ``rockbuild fetch --json``)."""

    name: str  # tarball file name
    url: str
    version: str
    group: str
    platform: str
    size: int
    sha256: str
    root: Path
    transferred: int  # tarball bytes received over the network by this fetch
    extracted: bool  # False: the tree from an earlier fetch was reused
    seconds: float
    layout: RocmLayout | None
    layout_error: str | None = None
    resumed_from: int = 0  # byte offset where a resumed download picked up (0: none)

    def tarball(self) -> Tarball:
        """The tarball as build.json records it."""
        return Tarball(name=self.name, url=self.url, sha256=self.sha256, size=self.size, group=self.group)

    def render(self) -> str:
        lines = [
            f"ROCm {self.version} ({self.name})",
            f"  root:        {self.root}",
            f"  sha256:      {self.sha256}",
            f"  size:        {human_bytes(self.size)}; downloaded now: {human_bytes(self.transferred)}",
            f"  extracted:   {'yes' if self.extracted else 'no (already in place)'} in {self.seconds:.1f}s",
        ]
        if self.layout is not None:
            lines.append(f"  clang:       {self.layout.clang}")
            lines.append(f"  kernels for: {' '.join(self.layout.gfx_targets) or '(none found)'}")
        return "\n".join(lines)


OFFLINE_HINT = (
    "no network? build against an installed ROCm with --rocm DIR (e.g. /opt/rocm, or /usr with Debian's ROCm), "
    "or prove a build offline with tests/e2e/provision.sh and tests/e2e/run.sh (tests/e2e/README.md)"
)


@contextlib.contextmanager
def offline_routes() -> Iterator[None]:
    """An unreachable TheRock host names the ways to work without it."""
    try:
        yield
    except UnreachableError as e:
        raise UnreachableError(e.message, hint=OFFLINE_HINT) from e


def select_family(families: FamilyTable, family: str | None, target: str | None) -> Selection:
    if bool(family) == bool(target):
        raise UsageError("give exactly one of --family F or --target gfxN")
    name = family or target
    assert name is not None
    return families.select(name, where="--family" if family else "--target")


def tarball_groups(selection: Selection, os_name: str) -> list[str]:
    """The group to look for on ``os_name`` (then its legacy names); a clear error when TheRock has none."""
    fam = selection.family
    current = fam.group_for(os_name)
    if current is None:
        raise UsageError(f"TheRock publishes no {os_name} tarball for {fam.name} ({selection.short})")
    return [current, *fam.legacy_groups]


@dataclass(frozen=True)
class VersionList:
    """``rockbuild rocm list``: tarballs, newest first."""

    entries: tuple[TarballEntry, ...]

    def to_dict(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.entries]

    def render(self) -> str:
        lines = []
        for e in self.entries:
            day = e.name.date.isoformat() if e.name.date else "-"
            size = f"{e.size / 1e9:.2f} GB" if e.size else ""
            lines.append(f"{e.name.version.text:<28} {day:<10} {size:>9}  {e.name.filename}")
        return "\n".join(lines)


def job_groups(job: Job) -> list[str]:
    """The tarball groups a job's ROCm is published under: its group, then the legacy names."""
    return [job.group, *job.legacy_groups]


def list_rocm_versions(
    groups: Sequence[str],
    *,
    os_name: str,
    channel: str = "nightly",
    index_url: str | None = None,
) -> list[TarballEntry]:
    """Tarballs available for ``groups`` (see :func:`tarball_groups`) on the channel's current host, newest first."""
    with offline_routes():
        return list_tarballs(
            platform=os_name, groups=list(groups), channel=channel, index_url=index_url, fetch_text=get_text
        )


def _root_for(entry: TarballEntry, dest: Path | None, cache: Path) -> Path:
    if dest is not None:
        return dest
    return cache / "rocm" / entry.name.filename.removesuffix(".tar.gz")


def stable_root(entry: TarballEntry, cache: Path) -> Path:
    """The one folder of ``entry``'s OS and tarball group (``<cache>/rocm/therock-linux-gfx1151``), whichever nightly
    it holds: a night's builds extract there, so that every nightly is compiled against the same paths. ccache hashes
    include paths (and clang finds its own headers by its real path), so under a folder named after each nightly
    nothing would ever compile warm; here a nightly whose compiler, headers and device libraries did not change
    compiles from the cache. Its marker names the tarball it holds; another nightly of the group replaces it."""
    return cache / "rocm" / f"therock-{entry.name.platform}-{entry.name.group}"


def _lock_for(root: Path, cache: Path) -> Path:
    locks = cache / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(str(root.absolute()).encode()).hexdigest()[:16]
    return locks / f"rocm-{root.name}-{digest}.lock"


def _reusable(root: Path, entry: TarballEntry, expected_sha256: str | None) -> dict[str, Any] | None:
    marker = read_marker(root)
    if not marker or marker.get("name") != entry.name.filename:
        return None
    if expected_sha256 and marker.get("sha256") != expected_sha256:
        return None
    return marker


def pinned_entry(rocm: InputsRocm) -> TarballEntry:
    """The :class:`~rockbuild.rocm.index.TarballEntry` of a job's pinned tarball (inputs.json), for
    :func:`fetch_entry`; the input's own failure when resolve found none."""
    if rocm.error or not rocm.name or not rocm.url:
        raise rocm.failure()
    parsed = parse_tarball_name(rocm.name)
    if parsed is None:
        raise ConfigError(f"inputs.json names {rocm.name!r}, which is not a TheRock tarball name")
    return TarballEntry(name=parsed, url=rocm.url, mtime=rocm.mtime, size=rocm.size, index_url=rocm.index_url or "")


def fetch_pinned(rocm: InputsRocm, *, cache: Path) -> FetchResult:
    """A job's pinned tarball (inputs.json's, or its group's last good one), downloaded and extracted into its
    group's one folder (:func:`stable_root`: ccache stays warm across nightlies); the input's own failure
    (StaleInputError, NotFoundError) when resolve found none, a LayoutError when the tree is no usable ROCm root."""
    entry = pinned_entry(rocm)
    fetched = fetch_entry(entry, cache=cache, dest=stable_root(entry, cache))
    if fetched.layout is None:
        raise LayoutError(fetched.layout_error or f"{fetched.root} is not a usable ROCm root")
    return fetched


def find_tarball(
    groups: Sequence[str],
    *,
    os_name: str,
    version: str = "latest",
    channel: str = "nightly",
    index_url: str | None = None,
) -> TarballEntry:
    """The ROCm tarball of ``groups`` (the current name, then legacy names: :func:`tarball_groups`,
    :func:`job_groups`) for ``os_name``: ``version`` on ``channel``'s hosts, or on the index page ``index_url``."""
    with offline_routes():
        return resolve_tarball(
            platform=os_name,
            groups=list(groups),
            version=version,
            channel=channel,
            source=IndexSource(index_url=index_url, fetch_text=get_text),
        )


def fetch_rocm(
    groups: Sequence[str],
    *,
    os_name: str,
    version: str = "latest",
    channel: str = "nightly",
    index_url: str | None = None,
    cache: Path,
) -> FetchResult:
    """Find (:func:`find_tarball`), download and extract the ROCm tarball of ``groups`` for ``os_name`` into
    ``cache``."""
    start = time.monotonic()
    entry = find_tarball(groups, os_name=os_name, version=version, channel=channel, index_url=index_url)
    return fetch_entry(entry, cache=cache, started=start)


def fetch_entry(
    entry: TarballEntry,
    *,
    cache: Path,
    dest: Path | None = None,
    sha256: str | None = None,
    started: float | None = None,
) -> FetchResult:
    """Download and extract ``entry`` into ``cache`` (or ``dest``), refusing a tarball whose sha256 is not
    ``sha256``; the result's seconds count from ``started`` (a ``time.monotonic()``: the index read counts too; None:
    now)."""
    start = time.monotonic() if started is None else started
    root = _root_for(entry, dest, cache)
    console.info(f"    ROCm {entry.name.version.text} ({entry.name.filename}) from {entry.url}")

    # One fetch at a time per root: a second one waits, then finds the tree in place. The lock lives in the cache,
    # never beside a --dest folder, where an interrupted fetch would leave it behind.
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(_lock_for(root, cache))):
        marker = _reusable(root, entry, sha256)
        if marker is not None:
            console.info(f"    {root}: already extracted from {entry.name.filename}; nothing to download")
            return _result(entry, root, marker["sha256"], int(marker["size"]), 0, False, start)
        if root.exists() and read_marker(root) is None:
            raise UsageError(f"{root} exists and was not extracted by rockbuild; choose another --dest or remove it")
        # durable=False: no fsync of the 1-3 GB tarball before the tree is usable; the tree itself is never fsynced
        # either, and the tarball is re-hashed whenever it is read again (the downloader feeds cache hits through
        # the hash), so a crash can cost a re-download but never a wrong tree.
        with Downloader(cache / "tarballs", durable=False) as downloader:
            extractor = StreamExtractor(root, replace=True, label=entry.name.filename)
            try:
                download = downloader.fetch(entry.url, name=entry.name.filename, sha256=sha256, sink=extractor.feed)
                extractor.finish(
                    marker={
                        "name": entry.name.filename,
                        "url": entry.url,
                        "sha256": download.sha256,
                        "size": download.size,
                    }
                )
            except BaseException:
                extractor.abort()
                raise
    return _result(
        entry, root, download.sha256, download.size, download.transferred, True, start, download.resumed_from
    )


def _result(
    entry: TarballEntry,
    root: Path,
    sha256: str,
    size: int,
    transferred: int,
    extracted: bool,
    start: float,
    resumed_from: int = 0,
) -> FetchResult:
    layout: RocmLayout | None = None
    layout_error: str | None = None
    try:
        layout = detect_layout(root)
    except LayoutError as exc:
        layout_error = exc.message
        console.warn(f"{root} is not a usable ROCm root: {exc.message}")
    return FetchResult(
        name=entry.name.filename,
        url=entry.url,
        version=entry.name.version.text,
        group=entry.name.group,
        platform=entry.name.platform,
        size=size,
        sha256=sha256,
        root=root,
        transferred=transferred,
        extracted=extracted,
        seconds=round(time.monotonic() - start, 3),
        layout=layout,
        layout_error=layout_error,
        resumed_from=resumed_from,
    )
