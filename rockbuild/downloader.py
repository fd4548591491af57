"""The one downloader: resumable, verified, cached, locked and streaming.

Every byte rockbuild fetches (ROCm tarballs, models, release assets) comes through :class:`Downloader`:

* bytes stream into ``NAME.part`` in the cache folder, hashed (sha256) as they arrive, and are renamed to ``NAME`` only
  when complete and verified; ``NAME.json`` beside it records url, size, sha256, etag, last_modified, completed_at;
* a cut, a short body or a read timeout is retried with backoff and resumed with ``Range`` from the size of the
  ``.part`` (also in a later process); a server that ignores or mangles the range makes the download restart from 0;
* a cache hit (file + sidecar, size and expected sha256 agree) makes no HTTP request at all;
* ``NAME.lock`` (filelock) serialises concurrent runs on one cache: the second one waits and then hits the cache;
* a ``sink`` callable receives the file's bytes once each, in order, from offset 0, so callers can extract while the
  download runs (see :meth:`Downloader.fetch`).

Index pages and other small texts go through :func:`get_text`: a short timeout and few tries, where a download waits
longer for each piece and resumes. No wait is silent: each try again is one warning line naming the host, what failed
and when the next try starts, and a wait that lasts says so (:func:`rockbuild.console.waiting`). The timeouts and the
small requests' retries come from :class:`rockbuild.core.environment.HttpTimeouts`, set once at the CLI's entry
(:func:`configure`).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import http.client
import os
import re
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import requests
import urllib3.exceptions
from filelock import FileLock
from filelock import Timeout as LockTimeout
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from rockbuild import __version__, console
from rockbuild.core.data import read_json_object, write_json_atomic
from rockbuild.core.environment import HttpTimeouts
from rockbuild.core.errors import ChecksumError, FetchError, NotFoundError, UnreachableError
from rockbuild.core.record import Record

USER_AGENT = f"rockbuild/{__version__} (+requests)"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 60.0  # a server asking for an hour's pause would stall a nightly; we would rather fail and say so
MAX_BACKOFF = 30.0
# Characters left alone when quoting a URL path: RFC 3986 pchar minus "+" (S3 and its CDNs decode "+" in a path as a
# space, so TheRock's dev/BKC names must go out as %2B) plus "%" so that already quoted paths are not quoted twice.
_PATH_SAFE = "/:@!$&'()*,;=-._~%"

Sink = Callable[[bytes], None]
SMALL_BACKOFF = 0.5  # a small request's second retry waits 1 s, its third 2 s (urllib3: the first one at once)


class _Defaults:
    timeouts = HttpTimeouts()


def configure(timeouts: HttpTimeouts) -> None:
    """The network's timeouts and retries for this run (the CLI's entry, from the environment: ``$ROCKBUILD_HTTP_*``).
    What a caller passes explicitly (a ``timeout=``, a :class:`TransferPolicy`) still wins."""
    _Defaults.timeouts = timeouts


def timeouts() -> HttpTimeouts:
    """The run's network timeouts (:func:`configure`)."""
    return _Defaults.timeouts


# ---------------------------------------------------------------------------------------------------------------------
# URLs and sessions


def quote_url_path(url: str) -> str:
    """``url`` with its path percent-encoded for the wire: ``+`` -> ``%2B``, spaces and non-ASCII quoted; existing
    ``%XX`` escapes and the query string are kept as they are."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=urllib.parse.quote(parts.path, safe=_PATH_SAFE)))


def name_from_url(url: str) -> str:
    """The file name a URL points at: its last path segment, URL-decoded (``%2B`` -> ``+``)."""
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    _check_name(name, url)
    return name


def _check_name(name: str, url: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise FetchError(
            f"cannot use {name!r} as a cache file name for {url}", hint="pass name= with a plain file name"
        )


def host_of(url: str) -> str:
    """``host`` or ``host:port`` of a URL (no credentials), for messages."""
    netloc = urllib.parse.urlsplit(url).netloc
    return netloc.rpartition("@")[2] or url


def _pool_host(pool: Any, url: str | None) -> str:
    host, port = getattr(pool, "host", None), getattr(pool, "port", None)
    if not host:
        return host_of(url or "")
    default = {"http": 80, "https": 443}.get(getattr(pool, "scheme", ""))
    return f"{host}:{port}" if port and port != default else str(host)


class RetryAnnouncer(Retry):
    """A urllib3 Retry that says each try again in one warning line before it waits:
    ``api.github.com: read timed out after 15s (GET /repos/o/r/releases/latest); try 2 of 3 in 1s``. Mixed into the
    downloader's sessions and the GitHub client's (:mod:`rockbuild.publish.github`)."""

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: Any = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> Any:
        new = super().increment(method, url, response, error, _pool, _stacktrace)  # raises when no try is left
        if error is None and (response is None or response.status < 400):
            return new  # a redirect urllib3 follows itself, not a failure
        reason = describe_error(error) if error is not None else f"HTTP {response.status}"
        tries = len(new.history) + 1
        of = f" of {tries + new.total}" if isinstance(new.total, int) and not isinstance(new.total, bool) else ""
        after = new.get_retry_after(response) if response is not None and new.respect_retry_after_header else None
        delay = after if after is not None else new.get_backoff_time()
        what = f" ({method} {url})" if method and url else ""
        console.warn(
            f"{_pool_host(_pool, url)}: {reason}{what}; try {tries}{of} " + (f"in {delay:.3g}s" if delay else "now")
        )
        return new


class _Retry(RetryAnnouncer):
    def get_retry_after(self, response: Any) -> float | None:
        after = super().get_retry_after(response)
        return None if after is None else min(after, MAX_RETRY_AFTER)

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: Any = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> Any:
        # A name that does not resolve or a refused connection answers at once and will answer the same in 15 s:
        # fail now rather than back off through every retry (a connect *timeout* is still retried).
        if error is not None and unreachable_reason(error) in (_NO_NAME, _REFUSED):
            raise urllib3.exceptions.MaxRetryError(_pool, url or "", error) from error
        return super().increment(method, url, response, error, _pool, _stacktrace)


def make_session(retries: int = 5, backoff: float = 0.5) -> requests.Session:
    """A requests session that retries connection errors, errors before the response headers, and 429/5xx answers
    with exponential backoff (``backoff * 2**n`` seconds, capped). Errors in the middle of a body are the
    :class:`Downloader`'s job (it resumes instead of starting over)."""
    retry = _Retry(
        total=retries,
        connect=retries,
        read=retries,
        status=retries,
        backoff_factor=backoff,
        backoff_max=MAX_BACKOFF,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=frozenset({"GET", "HEAD"}),
        raise_on_status=False,  # the caller turns the final status into a typed error with the URL in it
        respect_retry_after_header=True,
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = USER_AGENT
    return session


def _raise_for_status(resp: requests.Response, url: str) -> None:
    code = resp.status_code
    if code < 400:
        return
    if code in (404, 410):
        raise NotFoundError(f"not found: {url} (HTTP {code})", hint="check the version/name, or look at the index page")
    if code in (401, 403):
        raise FetchError(
            f"access denied: {url} (HTTP {code})", hint="check that a token is set and allowed to read this file"
        )
    status = f"HTTP {code} {resp.reason or ''}".rstrip()
    raise FetchError(f"{status} from {url}", hint="the server keeps failing; try again later")


def get_text(
    url: str,
    *,
    session: requests.Session | None = None,
    timeout: tuple[float, float] | None = None,
    headers: Mapping[str, str] | None = None,
) -> str:
    """The body of a small text resource (an index page, a listing, an API answer). NotFoundError on 404,
    UnreachableError when the host cannot be reached, FetchError otherwise. Without ``session``/``timeout``: the
    run's small-request timeouts and retries (:func:`configure`), each try again announced."""
    own = session is None
    limits = _Defaults.timeouts
    timeout = timeout or limits.small
    sess = make_session(limits.retries, SMALL_BACKOFF) if session is None else session
    try:
        try:
            with console.waiting(f"{host_of(url)} (GET {_path_of(url)})", timeout=timeout[1]):
                resp = sess.get(quote_url_path(url), timeout=timeout, headers=dict(headers or {}))
        except requests.RequestException as exc:
            tries = limits.retries + 1 if own else None
            raise network_error(
                f"cannot fetch {url}", exc, "check the network and the URL", host=host_of(url), tries=tries
            ) from exc
        with contextlib.closing(resp):
            _raise_for_status(resp, url)
            if "charset" not in resp.headers.get("Content-Type", "").lower():
                resp.encoding = "utf-8"  # requests would guess ISO-8859-1 for text/*, which garbles UTF-8 listings
            try:
                return resp.text
            except requests.RequestException as exc:
                raise FetchError(f"cannot read {url}: {describe_error(exc)}", hint="try again") from exc
    finally:
        if own:
            sess.close()


def _path_of(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "") or "/"


def _exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """exc and what it wraps (cause, context, exception args, urllib3's .reason), breadth first."""
    seen: set[int] = set()
    todo = [exc]
    while todo and len(seen) < 16:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        for inner in (e.__cause__, e.__context__, getattr(e, "reason", None), *getattr(e, "args", ())):
            if isinstance(inner, BaseException):
                todo.append(inner)


_NO_NAME = "cannot resolve the host name"
_REFUSED = "connection refused"
_CONNECT_TIMEOUT = "connection timed out"


def _chain_has(exc: BaseException, *types: type[BaseException]) -> bool:
    return any(isinstance(e, types) for e in _exception_chain(exc))


def unreachable_reason(exc: BaseException) -> str | None:
    """Why the host could not be reached at all (no name, refused, connect timeout), or None if it was reached.

    Order matters: urllib3 2.x's NameResolutionError and NewConnectionError are subclasses of ConnectTimeoutError.
    """
    if _chain_has(exc, urllib3.exceptions.NameResolutionError, socket.gaierror):
        return _NO_NAME
    if _chain_has(exc, ConnectionRefusedError):
        return _REFUSED
    if _chain_has(exc, urllib3.exceptions.NewConnectionError):
        return "cannot connect"
    if _chain_has(exc, requests.exceptions.ConnectTimeout, urllib3.exceptions.ConnectTimeoutError):
        return _CONNECT_TIMEOUT
    return None


_TIMEOUT_VALUE = re.compile(r"\((?:read|connect) timeout=([0-9.]+)\)")


def _timeout_seconds(exc: BaseException) -> float | None:
    """The timeout urllib3 names in its message (``(read timeout=15)``), if it does."""
    for e in _exception_chain(exc):
        m = _TIMEOUT_VALUE.search(str(e))
        if m:
            with contextlib.suppress(ValueError):
                return float(m[1])
    return None


def _is_read_timeout(exc: BaseException) -> bool:
    return unreachable_reason(exc) is None and _chain_has(
        exc, requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError, TimeoutError, socket.timeout
    )


def describe_error(exc: BaseException) -> str:
    """A short, one-line reason for a network failure (no URL, no headers)."""
    unreachable = unreachable_reason(exc)
    seconds = _timeout_seconds(exc)
    after = f" after {seconds:g}s" if seconds is not None else ""
    if unreachable == "cannot connect":
        # NewConnectionError without a known cause: keep the OS's words ("[Errno 101] Network is unreachable")
        reasons = [e.strerror for e in _exception_chain(exc) if isinstance(e, OSError) and e.strerror]
        return f"cannot connect ({reasons[0].lower()})" if reasons else "cannot connect"
    if unreachable == _CONNECT_TIMEOUT:
        return f"{unreachable}{after}"
    if unreachable:
        return unreachable
    if _is_read_timeout(exc):
        return f"read timed out{after}"
    if _chain_has(exc, ConnectionResetError):
        return "connection reset by peer"
    if _chain_has(exc, urllib3.exceptions.IncompleteRead, http.client.IncompleteRead):
        return "connection closed before the announced length (short body)"
    if _chain_has(exc, urllib3.exceptions.SSLError, requests.exceptions.SSLError):
        return "TLS error"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:200].rstrip(": ")


def timed_out(exc: BaseException, host: str, tries: int | None = None) -> str | None:
    """What timed out, in words naming ``host`` (None: ``exc`` is no timeout): ``api.github.com did not answer within
    15s, 3 tries (read timed out)``, ``cannot connect to api.github.com within 5s, 3 tries (connection timed
    out)``."""
    seconds = _timeout_seconds(exc)
    within = f" within {seconds:g}s" if seconds is not None else ""
    count = f", {tries} tries" if tries and tries > 1 else ""
    if unreachable_reason(exc) == _CONNECT_TIMEOUT:
        return f"cannot connect to {host}{within}{count} (connection timed out)"
    if _is_read_timeout(exc):
        return f"{host} did not answer{within}{count} (read timed out)"
    return None


def timeout_hint(variable: str = "ROCKBUILD_HTTP_TIMEOUT") -> str:
    """What to do when a host does not answer in time (``variable``: the timeout that ran out)."""
    return f"check the network; to wait longer, set {variable}=SECONDS (docs/errors.md)"


TIMEOUT_HINT = timeout_hint()


def network_error(
    what: str,
    exc: BaseException,
    hint: str,
    *,
    host: str | None = None,
    tries: int | None = None,
    variable: str = "ROCKBUILD_HTTP_TIMEOUT",
) -> FetchError:
    """``what: reason`` as an UnreachableError when the host was never reached, else as a FetchError. With ``host``,
    a timeout says which host did not answer, how long each try waited and how many tries were made, and its hint
    names the ``variable`` that waits longer."""
    timeout = timed_out(exc, host, tries) if host else None
    if unreachable_reason(exc) is not None:
        return UnreachableError(
            f"{what}: {timeout or describe_error(exc)}",
            hint=timeout_hint(variable) if timeout else "check the network, the host name and any proxy",
        )
    return FetchError(f"{what}: {timeout or describe_error(exc)}", hint=timeout_hint(variable) if timeout else hint)


# ---------------------------------------------------------------------------------------------------------------------
# Results and sidecars


@dataclass(frozen=True)
class Download(Record):
    url: str
    path: Path
    size: int
    sha256: str
    transferred: int  # bytes received over the network in this call (0 on a cache hit)
    from_cache: bool
    resumed_from: int  # byte offset the first resume started at (0 if none)


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    """The sha256 of a file on disk (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def _unlink(*paths: Path) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.I)


def _parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """(first, last, total or None) of ``bytes first-last/total``; None when absent or malformed."""
    m = _CONTENT_RANGE.match(value or "")
    if not m:
        return None
    return int(m[1]), int(m[2]), None if m[3] == "*" else int(m[3])


def _strong_etag(etag: str | None) -> str | None:
    return etag if etag and not etag.startswith("W/") else None


# ---------------------------------------------------------------------------------------------------------------------
# The downloader


class _Retryable(Exception):
    """A failure worth another attempt (resuming from the current .part)."""


class _Restart(Exception):
    """The .part was truncated to 0: try again at once, this is not a failed attempt."""


class _Done(Exception):
    """The .part already holds the whole file (an earlier run stopped between the last byte and the rename)."""


@dataclass(frozen=True)
class TransferPolicy:
    """How each transfer is tried: ``retries`` failed attempts resumed after an exponential ``backoff`` (seconds,
    doubling), the (connect, read) ``timeout`` of each request (None: the run's download timeouts,
    :meth:`HttpTimeouts.large`), and the ``chunk_size`` read and hashed at a time."""

    retries: int = 5
    backoff: float = 0.5
    timeout: tuple[float, float] | None = None
    chunk_size: int = 1 << 20


class Downloader:
    """Downloads files into ``cache_dir`` (see the module docstring). One instance may serve many fetches."""

    def __init__(
        self,
        cache_dir: Path,
        *,
        policy: TransferPolicy | None = None,
        session: requests.Session | None = None,
        progress_every: float = 10.0,
        durable: bool = True,
    ) -> None:
        policy = policy or TransferPolicy()
        self.cache_dir = Path(cache_dir)
        self.retries = policy.retries
        self.backoff = policy.backoff
        self.timeout = policy.timeout or _Defaults.timeouts.large
        self.chunk_size = policy.chunk_size
        self.progress_every = progress_every
        # durable=False skips the fsync before the rename (seconds for a 2 GB tarball on a busy disk). Such entries
        # are marked "synced": false and re-hashed before any use, so a file torn by a crash is never trusted.
        self.durable = durable
        # Our own session already retries connection errors and 5xx with backoff; a caller's session may not.
        self._own_session = session is None
        self.session = make_session(policy.retries, policy.backoff) if session is None else session

    def close(self) -> None:
        if self._own_session:
            self.session.close()

    def __enter__(self) -> Downloader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def paths_for(self, name: str) -> tuple[Path, Path, Path, Path, Path]:
        """(file, sidecar, .part, .part's own sidecar, lock) of ``name`` in the cache."""
        d = self.cache_dir
        return d / name, d / f"{name}.json", d / f"{name}.part", d / f"{name}.part.json", d / f"{name}.lock"

    def discard(self, name: str) -> None:
        """Remove ``name``'s cache entry (the file, its sidecars, a partial download), under its lock."""
        *entry, lock = self.paths_for(name)
        if not any(p.exists() for p in (*entry, lock)):
            return
        with FileLock(str(lock)):
            for path in entry:
                path.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)

    def cached(
        self, url: str, *, name: str | None = None, sha256: str | None = None, size: int | None = None
    ) -> Download | None:
        """The cache entry :meth:`fetch` would reuse, without touching the network; None when it would download."""
        name = name or name_from_url(url)
        final, meta_path = self.paths_for(name)[:2]
        meta = read_json_object(meta_path)
        if meta is None or not final.is_file():
            return None
        rec_size, rec_sha = meta.get("size"), meta.get("sha256")
        if not isinstance(rec_size, int) or not isinstance(rec_sha, str) or len(rec_sha) != 64:
            return None
        if final.stat().st_size != rec_size or (size is not None and size != rec_size):
            return None
        if sha256 is not None and sha256.lower() != rec_sha.lower():
            return None
        return Download(url, final, rec_size, rec_sha.lower(), 0, True, 0)

    def fetch(
        self,
        url: str,
        *,
        name: str | None = None,
        sha256: str | None = None,
        size: int | None = None,
        headers: Mapping[str, str] | None = None,
        sink: Sink | None = None,
    ) -> Download:
        """``url`` as a verified file in the cache, downloading (or resuming) only when the cache cannot serve it.

        ``name`` defaults to the URL's last path segment, decoded. ``sha256``/``size``, when given, must match
        (ChecksumError otherwise; a bad download is deleted, never cached). ``headers`` go with every request (tokens:
        their values are never logged).

        ``sink`` receives the whole file as one stream from offset 0, each byte exactly once and in order: on a resume
        the existing ``.part`` bytes first (read from disk), then network bytes; after a restart from 0 the bytes it
        already got are skipped (and checked to be the same, else FetchError). On a cache hit it gets the cached file.
        An exception raised by the sink stops the fetch at once and propagates unchanged (the ``.part`` is kept for a
        later resume). If fetch raises ChecksumError after the sink saw every byte, the caller must discard what the
        sink made of them.
        """
        name = name or name_from_url(url)
        _check_name(name, url)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        lock_path = self.paths_for(name)[4]
        lock = FileLock(str(lock_path))
        try:
            lock.acquire(timeout=0.2)
        except LockTimeout:
            self._info(f"    waiting for another download of {name} ({lock_path})")
            with console.waiting(f"another download of {name}", idle=False):
                lock.acquire()
        try:
            hit = self.cached(url, name=name, sha256=sha256, size=size)
            if hit is not None and sink is None and not self._synced(name):
                hit = self._verified(hit)
            if hit is not None:
                if sink is not None:
                    self._feed_cached(hit, sink)
                self._info(f"    {name}: cached ({console.human_bytes(hit.size)}, sha256 {hit.sha256[:16]})")
                return hit
            return _Transfer(self, url, name, sha256, size, dict(headers or {}), sink).run()
        finally:
            lock.release()

    def _synced(self, name: str) -> bool:
        meta = read_json_object(self.paths_for(name)[1]) or {}
        return meta.get("synced", True) is not False

    def _verified(self, hit: Download) -> Download | None:
        """``hit`` after re-hashing it, or None (entry deleted: download again) when it does not match."""
        h = hashlib.sha256()
        with open(hit.path, "rb") as fh:
            while chunk := fh.read(self.chunk_size):
                h.update(chunk)
        if h.hexdigest() == hit.sha256:
            return hit
        _unlink(hit.path, self.paths_for(hit.path.name)[1])
        self._info(f"    cached {hit.path.name} did not match its recorded sha256; downloading it again")
        return None

    def _feed_cached(self, hit: Download, sink: Sink) -> None:
        # The sidecar's hash is trusted for plain hits (rehashing 2 GB costs seconds); when we read the file anyway
        # we check it, so an extractor never silently gets a file that rotted on disk.
        h = hashlib.sha256()
        with open(hit.path, "rb") as fh:
            while chunk := fh.read(self.chunk_size):
                h.update(chunk)
                sink(chunk)
        if h.hexdigest() != hit.sha256:
            _unlink(hit.path, self.paths_for(hit.path.name)[1])
            raise ChecksumError(
                f"cached {hit.path} does not match its recorded sha256 (disk corruption?); it was deleted",
                hint="run again to download it anew",
            )

    def _info(self, message: str) -> None:
        console.info(message)


class _Transfer:
    """One fetch that needs the network: the state kept across its attempts."""

    def __init__(
        self,
        dl: Downloader,
        url: str,
        name: str,
        sha256: str | None,
        size: int | None,
        headers: dict[str, str],
        sink: Sink | None,
    ) -> None:
        self.dl, self.url, self.name = dl, url, name
        self.wire_url = quote_url_path(url)
        self.expected_sha = sha256.lower() if sha256 else None
        self.expected_size = size
        self.headers = headers
        self.sink = sink
        self.final, self.meta_path, self.part, self.part_meta, _ = dl.paths_for(name)
        self.hasher = hashlib.sha256()
        self.have = 0  # bytes in .part, all of them in self.hasher
        self.total: int | None = None
        self.sink_fed = 0
        # After a restart from 0 the new stream must reproduce what the sink already got: the digest of that prefix.
        self.fed_digest: str | None = None
        self.fed_len = 0
        self.transferred = 0
        self.resumed_from = 0
        self.etag: str | None = None
        self.last_modified: str | None = None
        self.progress: console.Progress | None = None
        self.fh: IO[bytes] | None = None
        self.wait: console.Wait | None = None  # the attempt's wait, touched as bytes arrive

    # -- the loop ------------------------------------------------------------------------------------------------
    def run(self) -> Download:
        try:
            self.fh = self._open_part()
            failures = 0
            best = self.have
            while True:
                try:
                    with console.waiting(f"{host_of(self.url)} ({self.name})", timeout=self.dl.timeout[1]) as wait:
                        self.wait = wait
                        self._attempt()
                    break
                except _Restart as why:
                    self._warn(f"{why}; restarting from byte 0")
                    continue
                except _Retryable as why:
                    reason = str(why)
                if self.have > best:
                    best, failures = self.have, 0
                else:
                    failures += 1
                if failures > self.dl.retries:
                    raise FetchError(
                        f"could not download {self.url}: {reason} ({failures} tries without progress)",
                        hint="check the network or try later"
                        + (
                            f"; the {console.human_bytes(self.have)} in {self.part} will be resumed"
                            if self.have
                            else ""
                        ),
                    )
                delay = min(self.dl.backoff * 2 ** (failures - 1), MAX_BACKOFF) if failures else 0.0
                self._warn(f"{reason}; resuming at byte {self.have}" + (f" in {delay:.3g}s" if delay else ""))
                time.sleep(delay)
            return self._finish()
        finally:
            if self.fh is not None:
                self.fh.close()
            if self.progress is not None:
                self.progress.close()

    def _open_part(self) -> IO[bytes]:
        """Open .part for appending; adopt what an earlier run left there when it is the same URL's bytes."""
        meta = read_json_object(self.part_meta)
        existing = self.part.stat().st_size if self.part.is_file() else 0
        usable = (
            existing > 0
            and meta is not None
            and meta.get("url") == self.url
            and (self.expected_size is None or existing <= self.expected_size)
        )
        if not usable:
            _unlink(self.part, self.part_meta)
        fh = open(self.part, "ab")  # noqa: SIM115 - closed in run()
        if usable:
            assert meta is not None
            self.etag, self.last_modified = meta.get("etag"), meta.get("last_modified")
            self._absorb_part(existing)
        return fh

    def _absorb_part(self, length: int) -> None:
        """Hash (and hand to the sink) the bytes an earlier run left in .part, before asking for the rest."""
        with open(self.part, "rb") as fh:
            while self.have < length:
                chunk = fh.read(min(self.dl.chunk_size, length - self.have))
                if not chunk:
                    break
                self.hasher.update(chunk)
                self.have += len(chunk)
                if self.sink is not None:
                    self.sink_fed = self.have
                    self.sink(chunk)

    def _attempt(self) -> None:
        """One request; returns when the file is complete, raises _Retryable/_Restart/FetchError otherwise."""
        offset = self.have
        req_headers = {**self.headers, "Accept-Encoding": "identity"}
        if offset:
            req_headers["Range"] = f"bytes={offset}-"
            validator = _strong_etag(self.etag)
            if validator:
                req_headers["If-Range"] = validator  # a changed file then comes back whole (200), not spliced
        try:
            resp = self.dl.session.get(self.wire_url, headers=req_headers, stream=True, timeout=self.dl.timeout)
        except (requests.ConnectionError, requests.Timeout) as exc:
            if self.dl._own_session or unreachable_reason(exc) in (_NO_NAME, _REFUSED):
                # make_session's Retry already tried with backoff (or it would answer the same at once)
                raise network_error(
                    f"could not download {self.url}",
                    exc,
                    "check the network or try later",
                    host=host_of(self.url),
                    tries=self.dl.retries + 1 if self.dl._own_session else None,
                    variable="ROCKBUILD_DOWNLOAD_TIMEOUT",
                ) from exc
            raise _Retryable(describe_error(exc)) from exc
        except requests.RequestException as exc:
            raise FetchError(f"could not download {self.url}: {describe_error(exc)}") from exc
        with contextlib.closing(resp):
            try:
                self._accept_response(resp, offset)
            except _Done:
                return
            self._stream_body(resp)

    def _accept_response(self, resp: requests.Response, offset: int) -> None:
        """Check the status and range of a response and set up .part for its body (truncating on a restart)."""
        code = resp.status_code
        if code == 416 and offset:
            m = re.match(r"^\s*bytes\s+\*/(\d+)\s*$", resp.headers.get("Content-Range", ""))
            if m and int(m[1]) == offset:  # an earlier run got every byte but stopped before the rename
                self.total = offset
                raise _Done
            self._truncate()
            raise _Restart("the server cannot resume this file (HTTP 416)")
        if code in RETRY_STATUSES and not self.dl._own_session:
            raise _Retryable(f"HTTP {code}")
        _raise_for_status(resp, self.url)
        if code == 200:
            if offset:
                self._warn("the server ignored the byte range (HTTP 200); restarting from byte 0")
                self._truncate()
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        elif code == 206:
            content_range = _parse_content_range(resp.headers.get("Content-Range"))
            if content_range is None or content_range[0] != offset:
                got = resp.headers.get("Content-Range", "no Content-Range")
                if offset == 0:
                    raise _Retryable(f"the server answered {got!r} to a plain request")
                self._truncate()
                raise _Restart(f"the server answered {got!r} to a request for bytes {offset}-")
            new_etag = _strong_etag(resp.headers.get("ETag"))
            if offset and new_etag and _strong_etag(self.etag) and new_etag != self.etag:
                self._truncate()
                raise _Restart("the file changed on the server since the partial download")
            total = content_range[2]
            if offset and not self.resumed_from:
                self.resumed_from = offset
        else:
            raise FetchError(f"unexpected HTTP {code} from {self.url}", hint="report this server's behaviour")
        if self.have == 0:
            self.etag, self.last_modified = resp.headers.get("ETag"), resp.headers.get("Last-Modified")
            # Recorded before any body byte so a later run knows which URL (and version) the .part holds.
            write_json_atomic(self.part_meta, {"url": self.url, "etag": self.etag, "last_modified": self.last_modified})
        self._set_total(total)

    def _set_total(self, total: int | None) -> None:
        if total is not None and self.expected_size is not None and total != self.expected_size:
            self._discard()
            raise ChecksumError(
                f"{self.url} is {total} bytes, expected {self.expected_size}",
                hint="the upstream file changed or the expected size is stale",
            )
        if total is not None and self.have > total:
            self._truncate()
            raise _Restart(f"the partial download ({self.have} bytes) is longer than the file ({total} bytes)")
        if total is not None or self.have == 0:
            self.total = total
        if self.progress is None:
            self.progress = console.byte_progress(self.name, self.total, every=self.dl.progress_every)
        self.progress.reset(self.have, self.total)

    def _stream_body(self, resp: requests.Response) -> None:
        raw = resp.raw
        chunk_size = self.dl.chunk_size
        assert self.progress is not None
        while True:
            try:
                # raw, not iter_content: the entity bytes exactly as stored (never gunzip a .tar.gz a server marked
                # Content-Encoding: gzip); urllib3 raises IncompleteRead when the body is shorter than announced.
                chunk = raw.read(chunk_size, decode_content=False)
            except (urllib3.exceptions.HTTPError, requests.RequestException, OSError) as exc:
                where = f"at byte {self.have}" + (f" of {self.total}" if self.total is not None else "")
                raise _Retryable(f"{describe_error(exc)} {where}") from exc
            if not chunk:
                break
            self.transferred += len(chunk)
            self._consume(chunk)
            self.progress.advance(len(chunk))
            if self.wait is not None:
                self.wait.touch()
        if self.total is not None and self.have < self.total:
            raise _Retryable(f"the response ended at byte {self.have} of {self.total}")
        if self.total is not None and self.have > self.total:
            self._truncate()
            raise _Retryable(f"the server sent more bytes than the {self.total} it announced")

    def _consume(self, chunk: bytes) -> None:
        assert self.fh is not None
        try:
            self.fh.write(chunk)
        except OSError as exc:
            raise FetchError(f"cannot write {self.part}: {exc.strerror or exc}", hint="free some disk space") from exc
        start = self.have
        if self.fed_digest is not None and start < self.fed_len <= start + len(chunk):
            cut = self.fed_len - start
            self.hasher.update(chunk[:cut])
            if self.hasher.hexdigest() != self.fed_digest:
                raise FetchError(
                    f"{self.url} changed on the server during the download; the bytes already handed on are stale",
                    hint="run again",
                )
            self.fed_digest = None
            self.hasher.update(chunk[cut:])
        else:
            self.hasher.update(chunk)
        self.have = start + len(chunk)
        if self.sink is not None and self.have > self.sink_fed:
            piece = chunk if start >= self.sink_fed else chunk[self.sink_fed - start :]
            self.sink_fed = self.have
            self.sink(piece)  # outside every try: its exceptions must reach the caller untouched

    def _truncate(self) -> None:
        assert self.fh is not None
        if self.sink is not None and self.fed_digest is None and self.have == self.sink_fed and self.have:
            self.fed_digest, self.fed_len = self.hasher.hexdigest(), self.have
        self.fh.seek(0)
        self.fh.truncate()
        self.hasher = hashlib.sha256()
        self.have = 0
        self.etag = self.last_modified = None
        if self.progress is not None:
            self.progress.reset(0, self.total)

    def _discard(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None
        _unlink(self.part, self.part_meta)

    # -- the end ------------------------------------------------------------------------------------------------
    def _finish(self) -> Download:
        assert self.fh is not None
        self.fh.flush()
        if self.dl.durable:
            os.fsync(self.fh.fileno())
        self.fh.close()
        self.fh = None
        if self.fed_digest is not None:
            raise FetchError(f"{self.url} changed on the server during the download (it got shorter)", hint="run again")
        digest = self.hasher.hexdigest()
        if self.expected_size is not None and self.have != self.expected_size:
            self._discard()
            raise ChecksumError(
                f"{self.url} gave {self.have} bytes, expected {self.expected_size}; the download was deleted",
                hint="the upstream file changed or the expected size is stale",
            )
        if self.expected_sha is not None and digest != self.expected_sha:
            self._discard()
            raise ChecksumError(
                f"sha256 of {self.url} is {digest}, expected {self.expected_sha}; the download was deleted",
                hint="the upstream file changed or the expected checksum is stale",
            )
        _unlink(self.meta_path)  # a stale sidecar must never vouch for the new file, even for a moment
        os.replace(self.part, self.final)
        write_json_atomic(
            self.meta_path,
            {
                "url": self.url,
                "size": self.have,
                "sha256": digest,
                "etag": self.etag,
                "last_modified": self.last_modified,
                "completed_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "synced": self.dl.durable,
            },
        )
        _unlink(self.part_meta)
        return Download(self.url, self.final, self.have, digest, self.transferred, False, self.resumed_from)

    def _warn(self, message: str) -> None:
        console.warn(f"{self.name}: {message}")
