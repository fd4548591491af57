"""TheRock's release channels (``config/rocm-channels.yaml``): which index hosts publish each channel's tarballs,
and from when to when. Parsed here, its owner; :mod:`.index` reads the hosts' listings."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from rockbuild.core.data import YDict, check_keys, load_data_file, text, where
from rockbuild.core.errors import ConfigError, UsageError
from rockbuild.core.record import DATE, Record, json_key

LISTINGS = ("html", "s3", "s3v2")


@dataclass(frozen=True)
class IndexHost(Record):
    """One index URL and the dates of the nightlies it holds (inclusive; None = open-ended; JSON's ``from`` and
    ``until``)."""

    url: str
    since: datetime.date | None = field(default=None, metadata={**DATE, **json_key("from")})
    until: datetime.date | None = field(default=None, metadata=DATE)
    listing: str = "html"
    key_prefix: str = ""

    def covers(self, day: datetime.date) -> bool:
        return (self.since is None or day >= self.since) and (self.until is None or day <= self.until)

    def days_outside(self, day: datetime.date) -> int:
        """0 when the host covers ``day``, else how many days ``day`` lies outside the host's range."""
        if self.since is not None and day < self.since:
            return (self.since - day).days
        if self.until is not None and day > self.until:
            return (day - self.until).days
        return 0

    def listing_url(self, platform: str) -> str:
        """The URL to GET first: the page itself, or an S3 listing narrowed to one platform's names."""
        if self.listing == "html":
            return self.url
        params = {"prefix": f"{self.key_prefix}therock-dist-{platform}-"}
        if self.listing == "s3v2":
            params["list-type"] = "2"
        return with_query(self.url, params)


@dataclass(frozen=True)
class Channel(Record):
    name: str
    hosts: tuple[IndexHost, ...]

    def host_for(self, day: datetime.date) -> IndexHost:
        """The host that published on ``day``: the first listed one that covers it (the current one for today)."""
        return self.hosts_for(day)[0]

    def hosts_for(self, day: datetime.date | None) -> list[IndexHost]:
        """Hosts to try for a version from ``day``: those covering it (in file order), then the nearest others.

        Boundaries are approximate (multi-arch started "~2026-04-27"), so a miss on the covering host falls back to
        the others rather than failing. An undated version (stable, rcN, dev) tries the hosts in file order.
        """
        if day is None:
            return list(self.hosts)
        return sorted(self.hosts, key=lambda h: h.days_outside(day))  # sorted() is stable: file order among equals


def _config_date(path: Path, host: Any, key: str, what: str) -> datetime.date | None:
    value = host.get(key)
    if value is None:
        return None
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(str(value))
    except ValueError:
        raise ConfigError(
            f"{where(path, host, key)}: {what}.{key}: {value!r} is not a date (expected YYYY-MM-DD)"
        ) from None


def parse_channels(data: Any, path: Path) -> dict[str, Channel]:
    """The channels of a parsed ``rocm-channels.yaml`` (read by :func:`load_channels`); a mistake is a ConfigError
    naming ``file:line``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where(path, data)}: expected a top-level 'channels:' mapping of channel name -> hosts")
    check_keys(path, data, ("channels",), "rocm-channels.yaml")
    if not isinstance(data.get("channels"), dict) or not data["channels"]:
        raise ConfigError(
            f"{where(path, data, 'channels')}: expected a top-level 'channels:' mapping of channel name -> hosts"
        )
    channels = {}
    for name, body in data["channels"].items():
        what = f"channel {name!r}"
        hosts_data = body.get("hosts") if isinstance(body, dict) else None
        if not isinstance(hosts_data, list) or not hosts_data:
            at = where(path, body, "hosts") if isinstance(body, dict) else where(path, data["channels"], name)
            raise ConfigError(f"{at}: {what} needs a non-empty 'hosts:' list")
        hosts = []
        for i, h in enumerate(hosts_data):
            host_what = f"{what}, host #{i + 1}"
            if isinstance(h, str):
                h = {"url": h}
            if not isinstance(h, dict) or not isinstance(h.get("url"), str) or not h["url"].strip():
                at = where(path, h, "url") if isinstance(h, YDict) else where(path, hosts_data, i)
                raise ConfigError(f"{at}: {host_what}: each host needs a 'url:'")
            check_keys(path, h, ("url", "from", "until", "listing", "key_prefix"), host_what)
            listing = h.get("listing", "html")
            if listing not in LISTINGS:
                raise ConfigError(
                    f"{where(path, h, 'listing')}: {host_what}: listing {listing!r} is not one of {', '.join(LISTINGS)}"
                )
            hosts.append(
                IndexHost(
                    url=directory_url(h["url"].strip()),
                    since=_config_date(path, h, "from", host_what),
                    until=_config_date(path, h, "until", host_what),
                    listing=listing,
                    key_prefix=text(path, h, "key_prefix", "", host_what),
                )
            )
        channels[str(name)] = Channel(name=str(name), hosts=tuple(hosts))
    return channels


def load_channels(path: Path | None = None) -> dict[str, Channel]:
    """The ROCm channels (default: the shipped ``config/rocm-channels.yaml``)."""
    return load_data_file(path, "rocm-channels.yaml", parse_channels)


def get_channel(channel: str, channels_file: Path | None = None) -> Channel:
    channels = load_channels(channels_file)
    if channel not in channels:
        raise UsageError(f"unknown ROCm channel {channel!r}; known channels: {', '.join(channels)}")
    return channels[channel]


def with_query(url: str, params: dict[str, str]) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    query.extend(params.items())
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote, safe="/")))


def directory_url(url: str) -> str:
    """``url`` with a trailing slash when its last segment looks like a directory, so relative links resolve in it."""
    parts = urlsplit(url)
    last = parts.path.rsplit("/", 1)[-1]
    if parts.path.endswith("/") or "." in last or parts.query:
        return url
    return urlunsplit(parts._replace(path=parts.path + "/"))
