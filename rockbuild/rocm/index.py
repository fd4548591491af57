"""Find TheRock tarballs: read a channel's index (HTML page or S3 ListBucket XML) and pick a tarball from it.

TheRock moved its nightlies twice without mirroring old files (therock.md §2), so the host is chosen by the date in
the version; which hosts exist is data (``config/rocm-channels.yaml``), the choosing is here. Network access goes
through an injected ``fetch_text(url) -> str`` so callers decide on retries, caching and tokens.
"""

from __future__ import annotations

import datetime
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urljoin, urlsplit, urlunsplit

from rockbuild.core.errors import FetchError, NotFoundError, StaleInputError, UsageError
from rockbuild.core.record import INLINE, Record
from rockbuild.downloader import get_text
from rockbuild.rocm.channels import IndexHost, directory_url, get_channel, with_query
from rockbuild.rocm.names import PLATFORMS, TarballName, parse_rocm_version, parse_tarball_name

FetchText = Callable[[str], str]

_CONST_FILES_RE = re.compile(r"const files = (\[.*?\]);", re.S)
_HREF_RE = re.compile(r"""href\s*=\s*["']([^"']+)["']""", re.I)
_BARE_NAME_RE = re.compile(r"therock-dist-[A-Za-z0-9._+%-]+?\.tar\.gz")
_NEAREST_SHOWN = 5


# --------------------------------------------------------------------------------------------------------- channels


# ------------------------------------------------------------------------------------------------------- listing


@dataclass(frozen=True, kw_only=True)
class TarballEntry(Record):
    """One tarball as an index lists it (a record: ``rockbuild rocm list --json``'s entry, its name's keys first)."""

    name: TarballName = field(metadata=INLINE)
    url: str
    mtime: float | None = None
    size: int | None = None
    index_url: str = ""
    """The index page (or S3 listing) the entry was read from."""

    @property
    def sort_key(self) -> tuple[Any, ...]:
        return self.name.sort_key(self.mtime)


def _file_url(base: str, name_or_href: str) -> str:
    """An absolute URL for a listed file; ``+`` (dev and BKC versions) must travel as ``%2B`` (TheRock #6823)."""
    joined = urljoin(base, name_or_href)
    parts = urlsplit(joined)
    return urlunsplit(parts._replace(path=parts.path.replace("+", "%2B")))


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.datetime.fromisoformat(iso.strip()).timestamp()
    except ValueError:
        return None


def parse_index_page(html: str, index_url: str) -> list[TarballEntry]:
    """Entries of a TheRock index page: the ``const files`` JSON, else every ``therock-dist-…`` link or name."""
    entries: dict[str, TarballEntry] = {}
    m = _CONST_FILES_RE.search(html)
    if m:
        try:
            files = json.loads(m.group(1))
        except json.JSONDecodeError as e:
            raise FetchError(f"the index {index_url} has a malformed file list ({e.msg} at char {e.pos})") from None
        for item in files if isinstance(files, list) else []:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                continue
            basename = item["name"].rsplit("/", 1)[-1]
            name = parse_tarball_name(basename)
            if name is None:
                continue
            mtime = item.get("mtime")
            size = item.get("size")
            entries[basename] = TarballEntry(
                name=name,
                url=_file_url(index_url, quote(item["name"])),
                mtime=float(mtime) if isinstance(mtime, int | float) else None,
                size=int(size) if isinstance(size, int) else None,
                index_url=index_url,
            )
        return list(entries.values())
    # A plain directory listing: prefer the real link target, then bare names anywhere in the page.
    for href in _HREF_RE.findall(html):
        path = urlsplit(href).path
        basename = unquote(path.rsplit("/", 1)[-1])
        name = parse_tarball_name(basename)
        if name is not None and basename not in entries:
            entries[basename] = TarballEntry(name=name, url=_file_url(index_url, href), index_url=index_url)
    for raw in _BARE_NAME_RE.findall(html):
        basename = unquote(raw)
        name = parse_tarball_name(basename)
        if name is not None and basename not in entries:
            entries[basename] = TarballEntry(name=name, url=_file_url(index_url, quote(basename)), index_url=index_url)
    return list(entries.values())


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_s3_listing(xml_text: str, listing_url: str) -> tuple[list[TarballEntry], dict[str, str] | None]:
    """Entries of one S3 ListBucketResult page, and the query parameters of the next page (None on the last page)."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as e:
        raise FetchError(f"the S3 listing {listing_url} is not valid XML ({e})") from None
    if _local(root.tag) != "ListBucketResult":
        raise FetchError(f"{listing_url} answered <{_local(root.tag)}>, not an S3 ListBucketResult")
    fields: dict[str, str] = {}
    contents: list[dict[str, str]] = []
    for child in root:
        tag = _local(child.tag)
        if tag == "Contents":
            contents.append({_local(c.tag): (c.text or "") for c in child})
        else:
            fields[tag] = child.text or ""
    parts = urlsplit(listing_url)
    # Keys are relative to the bucket root; a path-style listing URL (s3.amazonaws.com/<bucket>) lacks the slash.
    bucket_path = parts.path if parts.path.endswith("/") else parts.path + "/"
    bucket_base = urlunsplit(parts._replace(path=bucket_path, query="", fragment=""))
    entries = []
    for c in contents:
        key = c.get("Key", "")
        name = parse_tarball_name(key.rsplit("/", 1)[-1])
        if name is None:
            continue
        size = c.get("Size", "")
        entries.append(
            TarballEntry(
                name=name,
                url=_file_url(bucket_base, quote(key, safe="/")),
                mtime=_epoch(c.get("LastModified")),
                size=int(size) if size.isdigit() else None,
                index_url=listing_url,
            )
        )
    if fields.get("IsTruncated", "").strip().lower() != "true":
        return entries, None
    is_v2 = dict(parse_qsl(parts.query)).get("list-type") == "2" or "NextContinuationToken" in fields
    if is_v2:
        token = fields.get("NextContinuationToken")
        if not token:
            raise FetchError(f"the S3 listing {listing_url} is truncated but has no NextContinuationToken")
        return entries, {"continuation-token": token}
    # v1 sends NextMarker only with a delimiter; otherwise the next page starts after the last key.
    marker = fields.get("NextMarker") or (contents[-1].get("Key") if contents else None)
    if not marker:
        raise FetchError(f"the S3 listing {listing_url} is truncated but names no next marker")
    return entries, {"marker": marker}


_MAX_S3_PAGES = 1000


def read_index(url: str, *, fetch_text: FetchText) -> list[TarballEntry]:
    """Every TheRock tarball ``url`` lists (all pages of an S3 listing), unfiltered and unsorted."""
    text = fetch_text(url)
    if "<ListBucketResult" not in text[:2048]:
        entries = parse_index_page(text, url)
        if not entries and "therock-dist-" not in text:
            raise FetchError(f"{url} lists no therock-dist tarballs; is it a TheRock tarball index?")
        return entries
    entries = []
    page_url = url
    for _ in range(_MAX_S3_PAGES):
        page, next_params = parse_s3_listing(text, page_url)
        entries.extend(page)
        if next_params is None:
            return entries
        page_url = with_query(url, next_params)
        text = fetch_text(page_url)
    raise FetchError(f"the S3 listing {url} did not end after {_MAX_S3_PAGES} pages")


# ------------------------------------------------------------------------------------------------------ selection


def _as_groups(groups: str | Sequence[str]) -> tuple[str, ...]:
    result = (groups,) if isinstance(groups, str) else tuple(groups)
    if not result or not all(g for g in result):
        raise UsageError("no GPU group given to look up ROCm tarballs for")
    return result


def _check_platform(platform: str) -> None:
    if platform not in PLATFORMS:
        raise UsageError(f"unknown platform {platform!r} for ROCm tarballs; expected one of {', '.join(PLATFORMS)}")


def _newest_first(entries: Iterable[TarballEntry]) -> list[TarballEntry]:
    return sorted(entries, key=lambda e: e.sort_key, reverse=True)


def _matching(entries: Iterable[TarballEntry], platform: str, groups: tuple[str, ...]) -> list[TarballEntry]:
    return [e for e in entries if e.name.platform == platform and e.name.is_release and e.name.group in groups]


def _groups_in(entries: Iterable[TarballEntry], platform: str) -> list[str]:
    return sorted({e.name.group for e in entries if e.name.platform == platform and e.name.is_release})


def _no_group_error(
    platform: str, groups: tuple[str, ...], urls: Sequence[str], available: Iterable[str]
) -> NotFoundError:
    wanted = " / ".join(groups)
    shown = ", ".join(sorted(set(available))) or "none"
    return NotFoundError(
        f"no {platform} tarball for group {wanted} in {' or '.join(urls)}; groups there for {platform}: {shown}",
        hint="check the GPU family name (groups are renamed now and then) or the channel",
    )


def _listing_url(host: IndexHost | str, platform: str) -> str:
    return host if isinstance(host, str) else host.listing_url(platform)


def list_tarballs(
    *,
    platform: str,
    groups: str | Sequence[str],
    channel: str = "nightly",
    index_url: str | None = None,
    fetch_text: FetchText = get_text,
    on_date: datetime.date | None = None,
    channels_file: Path | None = None,
) -> list[TarballEntry]:
    """Runtime tarballs of ``groups`` (current name first, then legacy names) for ``platform``, newest first.

    Reads one index: ``index_url`` when given, else the channel's host that published on ``on_date`` (default today,
    i.e. the current host). ``-tests-`` twins and ad-hoc variants are left out. Raises NotFoundError naming the
    groups the index does have when none of ``groups`` is there.
    """
    _check_platform(platform)
    wanted = _as_groups(groups)
    if index_url:
        url = directory_url(index_url)
    else:
        day = on_date or datetime.datetime.now(datetime.UTC).date()
        url = get_channel(channel, channels_file).host_for(day).listing_url(platform)
    entries = read_index(url, fetch_text=fetch_text)
    found = _matching(entries, platform, wanted)
    if not found:
        raise _no_group_error(platform, wanted, [url], _groups_in(entries, platform))
    return _newest_first(found)


def _nearest_versions(entries: Sequence[TarballEntry], wanted_date: datetime.date | None) -> list[str]:
    if wanted_date is not None:
        dated = [e for e in entries if e.name.date is not None]
        # Equally near: the newer first.
        dated.sort(key=lambda e: (abs((e.name.date - wanted_date).days), -e.name.date.toordinal()))  # type: ignore[operator,union-attr]
        ordered = dated + [e for e in _newest_first(entries) if e.name.date is None]
    else:
        ordered = _newest_first(entries)
    seen: list[str] = []
    for e in ordered:
        if e.name.version.text not in seen:
            seen.append(e.name.version.text)
        if len(seen) == _NEAREST_SHOWN:
            break
    return seen


@dataclass(frozen=True)
class IndexSource:
    """Where the tarballs are listed and how a page is read: the channel's hosts from ``channels_file`` (None: the
    shipped rocm-channels.yaml), or one index page ``index_url`` that replaces them entirely; each page read through
    ``fetch_text``."""

    index_url: str | None = None
    channels_file: Path | None = None
    fetch_text: FetchText = get_text


def resolve_tarball(
    *,
    platform: str,
    groups: str | Sequence[str],
    version: str = "latest",
    channel: str = "nightly",
    source: IndexSource | None = None,
    today: datetime.date | None = None,
    max_age_days: int | None = None,
) -> TarballEntry:
    """The one tarball to build against, listed on ``source`` (None: the channel's hosts, read with get_text).

    ``latest``: the newest runtime tarball of ``groups`` on the channel's current host (the host covering ``today``);
    with ``max_age_days`` a newest file older than that raises StaleInputError, because frozen hosts keep answering.
    An explicit version: the hosts covering its date first, then the others; the error names the nearest versions.
    """
    source = source or IndexSource()
    index_url, fetch_text, channels_file = source.index_url, source.fetch_text, source.channels_file
    _check_platform(platform)
    wanted = _as_groups(groups)
    today = today or datetime.datetime.now(datetime.UTC).date()

    if version == "latest":
        newest = list_tarballs(
            platform=platform,
            groups=wanted,
            channel=channel,
            index_url=index_url,
            fetch_text=fetch_text,
            on_date=today,
            channels_file=channels_file,
        )[0]
        if max_age_days is not None and newest.name.date is not None:
            age = (today - newest.name.date).days
            if age > max_age_days:
                raise StaleInputError(
                    f"the newest {platform} {newest.name.group} tarball at {newest.index_url} is {age} days old "
                    f"({newest.name.filename}); allowed: {max_age_days}",
                    hint="the host may have stopped publishing: check rocm-channels.yaml or pin a version",
                )
        return newest

    parsed = parse_rocm_version(version)
    if parsed is None:
        raise UsageError(
            f"{version!r} is not a TheRock ROCm version; expected 'latest' or e.g. 10.2.0a20260915, 7.14.1, 7.14.0rc2"
        )
    candidates: list[IndexHost | str] = (
        [directory_url(index_url)] if index_url else list(get_channel(channel, channels_file).hosts_for(parsed.date))
    )
    tried: list[str] = []
    errors: list[FetchError] = []
    listed: list[TarballEntry] = []
    available_groups: set[str] = set()
    for host in candidates:
        url = _listing_url(host, platform)
        tried.append(url)
        try:
            entries = read_index(url, fetch_text=fetch_text)
        except FetchError as e:
            errors.append(e)
            continue
        available_groups.update(_groups_in(entries, platform))
        matching = _matching(entries, platform, wanted)
        listed.extend(matching)
        hits = [e for e in matching if e.name.version.text == version]
        if hits:
            # A current and a legacy group name may both hold this version: prefer the earlier name in `groups`.
            return min(hits, key=lambda e: wanted.index(e.name.group))
    # A host that could not be read may be the one holding the version: say so rather than only "not found".
    unread = f" ({len(errors)} host(s) could not be read: {errors[0].message})" if errors else ""
    if not listed:
        if errors and not available_groups:
            first = errors[0]
            raise type(first)(
                f"cannot look up ROCm {version}: {first.message}"
                + (f" (and {len(errors) - 1} more host(s) failed)" if len(errors) > 1 else ""),
                hint=first.hint,
            )
        error = _no_group_error(platform, wanted, tried, available_groups)
        raise NotFoundError(error.message + unread, hint=error.hint)
    nearest = _nearest_versions(listed, parsed.date)
    raise NotFoundError(
        f"ROCm {version} for {platform} {' / '.join(wanted)} is not in {' or '.join(tried)}; "
        f"nearest available: {', '.join(nearest)}{unread}",
        hint="pick one of the listed versions, or 'latest'",
    )
