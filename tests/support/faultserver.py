"""A real HTTP file server on 127.0.0.1 that misbehaves on request, for download tests.

Serves byte blobs registered by name, with ``Range`` / ``If-Range`` support, an ``ETag``, a ``Last-Modified`` and
``HEAD``; records every request; and injects faults per file, the way flaky mirrors and CDNs really fail::

    from support.faultserver import Fault, FaultServer

    with FaultServer() as srv:
        url = srv.add("rocm.tar.gz", blob)                      # -> http://127.0.0.1:PORT/rocm.tar.gz
        srv.inject("rocm.tar.gz", Fault.cut(after=100_000))     # first GET: connection reset after 100 kB
        srv.inject("rocm.tar.gz", Fault.status(503, times=2))   # the first two GETs (that reach it) answer 503
        ...
        assert srv.stats("rocm.tar.gz").requests == 4
        assert srv.stats("rocm.tar.gz").bytes_sent <= len(blob) + 100_000

Fault kinds (build them with the ``Fault.*`` constructors):

========================  ==============================================================================
``status(code)``          answer ``code`` (503 by default) with a tiny body instead of the file
``cut(after)``            send ``after`` body bytes, then reset the connection (TCP RST)
``short(after)``          send ``after`` body bytes, then close cleanly: Content-Length promised more
``stall(after, seconds)`` send ``after`` body bytes, then send nothing for ``seconds``, then close
``ignore_range()``        answer a ranged request with 200 and the whole file
``wrong_range(shift)``    answer a ranged request with 206 for a range starting ``shift`` bytes off
``slow(bytes_per_s)``     pace the body (to make transfers last long enough to race or watch progress)
========================  ==============================================================================

``after`` counts body bytes *of that response*, not file offsets. Each fault hits the first ``times`` GET requests of
its file (``times=None``: every request), counted per fault; several faults may hit the same request (``status``
wins over body faults; ``ignore_range`` combines with ``cut`` etc.). ``HEAD`` requests are answered but never
faulted. ``redirect(name, location)`` answers a path with a redirect (GitHub release assets
live behind one). Names may contain ``/`` (served under that path) and ``+``; with ``s3_plus=True`` a literal ``+`` in a
request path is read as a space, as S3 does, so only ``%2B`` reaches a ``+`` name.

Shutting down never waits for a stalled response: stalls wake up when the server stops. :class:`SilentServer` is
the other kind of broken: it accepts connections and never answers at all.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import http.server
import socket
import struct
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType

_PIECE = 64 * 1024  # body write granularity: fine enough to cut/stall at an exact byte count


@dataclass
class Fault:
    """One misbehaviour of the server for one file. Use the constructors below."""

    kind: str
    after: int = 0
    times: int | None = 1
    code: int = 503
    seconds: float = 0.0
    shift: int = 0
    rate: float = 0.0

    @classmethod
    def status(cls, code: int = 503, *, times: int | None = 1) -> Fault:
        return cls("status", code=code, times=times)

    @classmethod
    def cut(cls, after: int, *, times: int | None = 1) -> Fault:
        return cls("cut", after=after, times=times)

    @classmethod
    def short(cls, after: int, *, times: int | None = 1) -> Fault:
        return cls("short", after=after, times=times)

    @classmethod
    def stall(cls, after: int, seconds: float, *, times: int | None = 1) -> Fault:
        return cls("stall", after=after, seconds=seconds, times=times)

    @classmethod
    def ignore_range(cls, *, times: int | None = None) -> Fault:
        return cls("ignore_range", times=times)

    @classmethod
    def wrong_range(cls, shift: int = -1000, *, times: int | None = None) -> Fault:
        return cls("wrong_range", shift=shift, times=times)

    @classmethod
    def slow(cls, bytes_per_second: float, *, times: int | None = None) -> Fault:
        return cls("slow", rate=bytes_per_second, times=times)


@dataclass(frozen=True)
class RequestRecord:
    """What the server saw and did for one request."""

    method: str
    raw_path: str  # exactly as on the request line (so tests can check %2B quoting)
    headers: dict[str, str]
    status: int
    bytes_sent: int
    faults: tuple[str, ...]


@dataclass
class FileStats:
    requests: int = 0  # GET requests (HEAD not counted)
    bytes_sent: int = 0  # body bytes written to the socket for GETs
    statuses: list[int] = field(default_factory=list)
    ranges: list[str | None] = field(default_factory=list)  # the Range header of each GET


@dataclass
class _Blob:
    data: bytes
    etag: str
    last_modified: str
    content_type: str
    faults: list[Fault] = field(default_factory=list)
    stats: FileStats = field(default_factory=FileStats)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: FaultServer

    def handle_error(self, request: object, client_address: object) -> None:
        # A client hanging up mid-response (a cut, a sink that failed, a timeout) is normal here, not worth a trace.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output clean; the records hold everything

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, *, head: bool) -> None:
        owner = self.server.owner
        raw_path = self.path
        path = urllib.parse.urlsplit(raw_path).path
        if owner.s3_plus:
            path = path.replace("+", " ")
        name = urllib.parse.unquote(path.lstrip("/"))
        headers = {k: v for k, v in self.headers.items()}
        with owner._lock:
            blob = owner._blobs.get(name)
            location = owner._redirects.get(name)
            faults: list[Fault] = []
            if blob is not None and not head:
                for f in blob.faults:
                    if f.times is None or f.times > 0:
                        faults.append(f)
                        if f.times is not None:
                            f.times -= 1
                blob.stats.requests += 1
                blob.stats.ranges.append(self.headers.get("Range"))
        kinds = tuple(f.kind for f in faults)
        sent = 0
        status = 404
        try:
            if location is not None:
                status = location[1]
                self.send_response(status)
                self.send_header("Location", location[0])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if blob is None:
                status = 404
                self._send_small(404, b"not found\n")
                return
            status_fault = next((f for f in faults if f.kind == "status"), None)
            if status_fault is not None:
                status = status_fault.code
                self._send_small(status, b"injected failure\n")
                return
            status, start, end = self._choose_range(blob, faults)
            if status == 416:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(blob.data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(status)
            self.send_header("Content-Type", blob.content_type)
            self.send_header("Content-Length", str(end - start))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", blob.etag)
            self.send_header("Last-Modified", blob.last_modified)
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(blob.data)}")
            self.end_headers()
            if head:
                return
            sent = self._send_body(blob.data, start, end, faults)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away; that is its right
        finally:
            record = RequestRecord(self.command, raw_path, headers, status, sent, kinds)
            with owner._lock:
                owner.records.append(record)
                if blob is not None and not head:
                    blob.stats.statuses.append(status)
                    blob.stats.bytes_sent += sent

    def _send_small(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _choose_range(self, blob: _Blob, faults: list[Fault]) -> tuple[int, int, int]:
        size = len(blob.data)
        rng = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if not rng or any(f.kind == "ignore_range" for f in faults):
            return 200, 0, size
        if if_range is not None and if_range not in (blob.etag, blob.last_modified):
            return 200, 0, size  # RFC 9110: the validator no longer matches, send the whole new file
        unit, _, spec = rng.partition("=")
        first, _, last = spec.partition("-")
        if unit.strip() != "bytes" or "," in spec or not first.strip().isdigit():
            return 200, 0, size  # suffix and multi-ranges are not needed by anyone here
        start = int(first)
        end = min(int(last) + 1, size) if last.strip() else size
        if start >= size:
            return 416, 0, 0
        wrong = next((f for f in faults if f.kind == "wrong_range"), None)
        if wrong is not None:
            start = min(max(0, start + wrong.shift), size - 1)
        return 206, start, end

    def _send_body(self, data: bytes, start: int, end: int, faults: list[Fault]) -> int:
        stop_fault = next((f for f in faults if f.kind in ("cut", "short", "stall")), None)
        slow = next((f for f in faults if f.kind == "slow"), None)
        limit = end - start if stop_fault is None else min(stop_fault.after, end - start)
        view = memoryview(data)
        sent = 0
        began = time.monotonic()
        while sent < limit:
            n = min(_PIECE, limit - sent)
            self.wfile.write(view[start + sent : start + sent + n])
            sent += n
            if slow is not None and slow.rate > 0:
                due = began + sent / slow.rate
                self.server.owner._stopping.wait(max(0.0, due - time.monotonic()))
        if stop_fault is None or stop_fault.after >= end - start:
            return sent
        self.close_connection = True
        if stop_fault.kind == "stall":
            self.server.owner._stopping.wait(stop_fault.seconds)
        elif stop_fault.kind == "cut":
            # SO_LINGER 0 turns close() into a TCP RST: the client sees "connection reset", as from a dying proxy.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        return sent


class FaultServer:
    """A threaded HTTP server on 127.0.0.1 (a free port) serving registered blobs; a context manager."""

    def __init__(self, *, s3_plus: bool = False) -> None:
        self.s3_plus = s3_plus
        self.records: list[RequestRecord] = []
        self._blobs: dict[str, _Blob] = {}
        self._redirects: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> FaultServer:
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- content ---------------------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "FaultServer is not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def url_for(self, name: str) -> str:
        """The URL of ``name`` as an index page would print it: not percent-encoded (a ``+`` stays a ``+``)."""
        return f"{self.base_url}/{name}"

    def add(self, name: str, data: bytes, *, content_type: str = "application/octet-stream") -> str:
        """Serve ``data`` as ``name`` (replacing any earlier blob and its faults' effect on validators); its URL."""
        etag = '"' + hashlib.sha256(data).hexdigest()[:32] + '"'
        with self._lock:
            old = self._blobs.get(name)
            blob = _Blob(data, etag, email.utils.formatdate(time.time(), usegmt=True), content_type)
            if old is not None:  # replacing content keeps the history tests may assert on
                blob.faults, blob.stats = old.faults, old.stats
            self._blobs[name] = blob
        return self.url_for(name)

    def add_text(self, name: str, text: str, *, content_type: str = "text/html; charset=utf-8") -> str:
        return self.add(name, text.encode("utf-8"), content_type=content_type)

    def redirect(self, name: str, location: str, *, status: int = 302) -> str:
        """Answer requests for ``name`` with a redirect to ``location`` (an absolute URL); the URL of ``name``."""
        with self._lock:
            self._redirects[name] = (location, status)
        return self.url_for(name)

    def remove(self, name: str) -> None:
        with self._lock:
            self._blobs.pop(name, None)
            self._redirects.pop(name, None)

    def inject(self, name: str, *faults: Fault) -> None:
        """Add faults to an already added file; they apply to its next GET requests."""
        with self._lock:
            self._blobs[name].faults.extend(faults)

    def clear_faults(self, name: str) -> None:
        with self._lock:
            self._blobs[name].faults.clear()

    # -- observations ----------------------------------------------------------------------------------------------
    def stats(self, name: str) -> FileStats:
        """A snapshot of the counters of ``name``."""
        with self._lock:
            s = self._blobs[name].stats
            return FileStats(s.requests, s.bytes_sent, list(s.statuses), list(s.ranges))

    def requests_for(self, name: str) -> list[RequestRecord]:
        """Every request (GET and HEAD) whose path names ``name``, in order of completion."""
        with self._lock:
            out = []
            for r in self.records:
                path = urllib.parse.urlsplit(r.raw_path).path
                if self.s3_plus:
                    path = path.replace("+", " ")
                if urllib.parse.unquote(path.lstrip("/")) == name:
                    out.append(r)
            return out

    def total_requests(self) -> int:
        with self._lock:
            return len(self.records)


@contextlib.contextmanager
def serving(blobs: dict[str, bytes] | None = None, *, s3_plus: bool = False) -> Iterator[FaultServer]:
    """``with serving({"a.bin": data}) as srv:`` - shorthand for tests that need no fault set up first."""
    with FaultServer(s3_plus=s3_plus) as srv:
        for name, data in (blobs or {}).items():
            srv.add(name, data)
        yield srv


class SilentServer:
    """A server on 127.0.0.1 that accepts every connection and never answers (no status line, no byte): what a hung
    API or a dead proxy looks like from the client. ``connections`` counts the connections accepted, so a test can
    count a client's tries. A context manager; closing drops the held connections."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.05)
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self._held.append(conn)  # held open, never read from, never written to

    @property
    def base_url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``: how rockbuild's messages name it."""
        return self.base_url.removeprefix("http://")

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._held)

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        with self._lock:
            for conn in self._held:
                conn.close()
        self._sock.close()
