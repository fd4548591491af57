"""The grammar of TheRock's tarball names: ``therock-dist-<platform>-<group>[-tests]-<version>.tar.gz``.

Groups contain hyphens (``gfx110X-all``, ``gfx94X-dcgpu``) and versions come in several shapes, so a name is parsed by
matching the version at the anchored end, never by splitting on ``-``. See docs in therock.md §3 for the sources.
"""

from __future__ import annotations

import datetime
import enum
import re
from dataclasses import dataclass, field
from typing import Any

from rockbuild.core.record import DATE, Record, json_form

PLATFORMS = ("linux", "windows")

_NAME_RE = re.compile(
    r"^therock-dist-(?P<platform>linux|windows)-(?P<slot>.+?)(?P<tests>-tests)?-"
    r"(?P<version>\d+\.\d+\.\d+(?:a\d{8}(?:\+bkc\.\d{8})?|rc\d{8}|rc\d{1,3}|\.dev0\+[0-9a-f]+)?)\.tar\.gz$"
)
_VERSION_RE = re.compile(
    r"^(?P<base>\d+\.\d+\.\d+)"
    r"(?:a(?P<nightly>\d{8})(?:\+bkc\.(?P<bkc>\d{8}))?|rc(?P<rcdate>\d{8})|rc(?P<rc>\d{1,3})|\.dev0\+(?P<sha>[0-9a-f]+))?$"
)
# TheRock's group suffixes are lower case (-all, -dgpu, -dcgpu, -igpu); a suffix token that is not, such as the legacy
# ``-ADHOCBUILD`` package suffix, starts a build variant, which is not a release and must never be picked as "latest".
_GROUP_RE = re.compile(r"^(?P<group>[a-z][0-9A-Za-z]*(?:-[a-z][0-9a-z]*)*)(?:-(?P<variant>.+))?$")


class VersionKind(enum.StrEnum):
    NIGHTLY = "nightly"  # X.Y.ZaYYYYMMDD (since 2025-10-09)
    NIGHTLY_RC = "nightly-rc"  # X.Y.ZrcYYYYMMDD (nightlies until 2025-10-08)
    PRERELEASE = "prerelease"  # X.Y.ZrcN
    DEV = "dev"  # X.Y.Z.dev0+<sha>
    BKC = "bkc"  # X.Y.ZaYYYYMMDD+bkc.YYYYMMDD
    STABLE = "stable"  # X.Y.Z


# Release stage order within one base version, after PEP 440: dev < a < rc < final.
_STAGE_RANK = {
    VersionKind.DEV: 0,
    VersionKind.NIGHTLY: 1,
    VersionKind.BKC: 1,
    VersionKind.NIGHTLY_RC: 2,
    VersionKind.PRERELEASE: 2,
    VersionKind.STABLE: 3,
}


def _date(yyyymmdd: str) -> datetime.date | None:
    try:
        return datetime.date(int(yyyymmdd[:4]), int(yyyymmdd[4:6]), int(yyyymmdd[6:]))
    except ValueError:
        return None


def _base(text: str) -> tuple[int, int, int]:
    major, minor, patch = (int(part) for part in text.split("."))
    return major, minor, patch


_KIND = json_form(str, VersionKind, str)
_BASE = json_form(str, _base, lambda base: ".".join(map(str, base)))


@dataclass(frozen=True)
class RocmVersion(Record):
    """A TheRock package version such as ``10.2.0a20260915`` or ``7.14.0rc2`` (a record: ``rockbuild rocm list
    --json``'s ``version``; its base ``10.2.0`` and its dates are strings in JSON)."""

    text: str
    kind: VersionKind = field(metadata=_KIND)
    base: tuple[int, int, int] = field(metadata=_BASE)
    date: datetime.date | None = field(metadata=DATE)
    """The build date: the nightly date, or for a BKC build the ``+bkc.`` date (its nightly's date is ``base_date``)."""
    base_date: datetime.date | None = field(default=None, metadata=DATE)
    rc: int | None = None
    sha: str | None = None

    @property
    def version_key(self) -> tuple[int, ...]:
        """Orders versions numerically (10.2.0a… after 7.9.0rc…), then by stage and number within one base."""
        if self.kind is VersionKind.BKC:
            number = int(f"{self.base_date:%Y%m%d}{self.date:%Y%m%d}")
        elif self.date is not None:
            number = int(f"{self.date:%Y%m%d}")
        else:
            number = self.rc or 0
        return (*self.base, _STAGE_RANK[self.kind], number)


def parse_rocm_version(text: str) -> RocmVersion | None:
    """The parsed version, or None when ``text`` is not one of TheRock's version shapes (or carries a bad date)."""
    m = _VERSION_RE.match(text)
    if not m:
        return None
    base = tuple(int(p) for p in m["base"].split("."))
    assert len(base) == 3
    if m["bkc"]:
        date, base_date = _date(m["bkc"]), _date(m["nightly"])
        if date is None or base_date is None:
            return None
        return RocmVersion(text, VersionKind.BKC, base, date, base_date=base_date)
    if m["nightly"] or m["rcdate"]:
        date = _date(m["nightly"] or m["rcdate"])
        if date is None:
            return None
        kind = VersionKind.NIGHTLY if m["nightly"] else VersionKind.NIGHTLY_RC
        return RocmVersion(text, kind, base, date, base_date=date)
    if m["rc"]:
        return RocmVersion(text, VersionKind.PRERELEASE, base, None, rc=int(m["rc"]))
    if m["sha"]:
        return RocmVersion(text, VersionKind.DEV, base, None, sha=m["sha"])
    return RocmVersion(text, VersionKind.STABLE, base, None)


def _version(text: str) -> RocmVersion:
    version = parse_rocm_version(text)
    if version is None:
        raise ValueError(f"{text!r} is no TheRock version")
    return version


@dataclass(frozen=True, kw_only=True)
class TarballName(Record):
    """One parsed ``therock-dist-…`` file name (a record: ``rockbuild rocm list --json``'s entry has its keys; the
    version is its text there, with its kind, date and base version beside it)."""

    filename: str
    platform: str
    group: str
    """The GPU group (``gfx1151``, ``gfx110X-all``, ``multiarch``); for an unknown variant the part before it."""
    tests: bool
    """True for the ``-tests-`` twin, which carries test clients rather than a runtime."""
    variant: str | None = None
    """An unknown suffix after the group (``ADHOCBUILD``): not a release; listings skip it."""
    version: RocmVersion = field(metadata=json_form(str, _version, lambda version: version.text))
    kind: VersionKind = field(init=False, metadata=_KIND)  # derived: the version's
    date: datetime.date | None = field(init=False, metadata=DATE)
    base_version: tuple[int, int, int] = field(init=False, metadata=_BASE)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", self.version.kind)
        object.__setattr__(self, "date", self.version.date)
        object.__setattr__(self, "base_version", self.version.base)

    @property
    def is_release(self) -> bool:
        """True for the runtime tarball of a real group: not a ``-tests-`` twin, not an ad-hoc variant."""
        return not self.tests and self.variant is None

    def sort_key(self, mtime: float | None = None) -> tuple[Any, ...]:
        """Larger is newer: the date in the version, then the upload time, then the version.

        Undated versions (stable, rcN, dev) compare by version before upload time, because a later upload of an older
        patch release (7.14.1 after 10.0.0) is not the newer ROCm.
        """
        date = self.date or datetime.date.min
        undated_version = self.version.version_key if self.date is None else ()
        return (date, undated_version, mtime if mtime is not None else float("-inf"), self.version.version_key)


def parse_tarball_name(filename: str) -> TarballName | None:
    """The parsed name, or None when ``filename`` is not a TheRock dist tarball name."""
    m = _NAME_RE.match(filename)
    if not m:
        return None
    version = parse_rocm_version(m["version"])
    if version is None:
        return None
    slot = m["slot"]
    g = _GROUP_RE.match(slot)
    group, variant = (g["group"], g["variant"]) if g else (slot, None)
    return TarballName(
        filename=filename,
        platform=m["platform"],
        group=group,
        tests=m["tests"] is not None,
        version=version,
        variant=variant,
    )


def tarball_filename(platform: str, group: str, version: str, *, tests: bool = False) -> str:
    """The file name TheRock gives a tarball (the inverse of :func:`parse_tarball_name`)."""
    return f"therock-dist-{platform}-{group}{'-tests' if tests else ''}-{version}.tar.gz"
