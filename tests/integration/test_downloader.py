"""The downloader against a real, misbehaving HTTP server on 127.0.0.1 (tests/support/faultserver.py)."""

from __future__ import annotations

import hashlib
import json
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support.faultserver import Fault, FaultServer

from rockbuild import console
from rockbuild.core.errors import ChecksumError, FetchError, NotFoundError, UnreachableError
from rockbuild.downloader import (
    Download,
    Downloader,
    TransferPolicy,
    get_text,
    make_session,
    name_from_url,
    quote_url_path,
)

CHUNK = 16 * 1024
NAME = "therock-dist-linux-gfx1151-7.9.0rc20250101.tar.gz"


def blob(n: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(n)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def server():
    with FaultServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _quiet():
    """The console is quiet (rockbuild.console: what --json does) unless a test turns it on to read the output."""
    with console.quieted():
        yield


def make(cache: Path, *, durable: bool = True, progress_every: float = 10.0, **policy) -> Downloader:
    opts: dict = {"retries": 3, "backoff": 0.01, "timeout": (2.0, 2.0), "chunk_size": CHUNK, **policy}
    return Downloader(cache, policy=TransferPolicy(**opts), durable=durable, progress_every=progress_every)


class Collector:
    """A sink that keeps what it gets, and can fail after a given number of bytes."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.parts: list[bytes] = []
        self.fail_after = fail_after
        self.error = RuntimeError("extractor failed")

    def __call__(self, data: bytes) -> None:
        assert isinstance(data, bytes) and data
        self.parts.append(data)
        if self.fail_after is not None and len(self) >= self.fail_after:
            raise self.error

    def __len__(self) -> int:
        return sum(map(len, self.parts))

    def data(self) -> bytes:
        return b"".join(self.parts)


# ---------------------------------------------------------------------------------------------------------------------
# plain downloads and the cache


def test_plain_download_writes_file_and_sidecar(server, tmp_path):
    data = blob(300_000)
    url = server.add(NAME, data)
    d = make(tmp_path).fetch(url)
    assert d.path == tmp_path / NAME and d.path.read_bytes() == data
    assert (d.size, d.sha256, d.transferred) == (len(data), sha(data), len(data))
    assert not d.from_cache and d.resumed_from == 0
    meta = json.loads((tmp_path / f"{NAME}.json").read_text())
    assert meta["url"] == url and meta["size"] == len(data) and meta["sha256"] == sha(data)
    assert meta["etag"] and meta["last_modified"] and meta["completed_at"].endswith("+00:00")
    assert not (tmp_path / f"{NAME}.part").exists() and not (tmp_path / f"{NAME}.part.json").exists()
    assert server.stats(NAME).requests == 1
    assert json.loads(json.dumps(d.to_dict()))["path"] == str(tmp_path / NAME)


def test_cache_hit_makes_no_request(server, tmp_path):
    data = blob(200_000)
    url = server.add(NAME, data)
    make(tmp_path).fetch(url)
    before = server.total_requests()
    again = make(tmp_path).fetch(url, sha256=sha(data), size=len(data))
    assert again.from_cache and again.transferred == 0 and again.sha256 == sha(data)
    assert server.total_requests() == before


def test_cache_hit_feeds_the_sink(server, tmp_path):
    data = blob(100_000)
    url = server.add(NAME, data)
    make(tmp_path).fetch(url)
    got = Collector()
    before = server.total_requests()
    assert make(tmp_path).fetch(url, sink=got).from_cache
    assert got.data() == data and server.total_requests() == before


def test_cache_hit_with_a_sink_catches_a_rotten_file(server, tmp_path):
    data = blob(100_000)
    url = server.add(NAME, data)
    make(tmp_path).fetch(url)
    (tmp_path / NAME).write_bytes(b"\0" + data[1:])  # same size: only the bytes tell
    with pytest.raises(ChecksumError, match="does not match its recorded sha256"):
        make(tmp_path).fetch(url, sink=Collector())
    assert not (tmp_path / NAME).exists()
    assert make(tmp_path).fetch(url).path.read_bytes() == data


def test_unsynced_entry_is_rehashed_before_a_plain_hit(server, tmp_path):
    """durable=False skips the fsync; such an entry is trusted only after re-hashing (a crash may have torn it)."""
    data = blob(100_000)
    url = server.add(NAME, data)
    make(tmp_path, durable=False).fetch(url)
    assert json.loads((tmp_path / f"{NAME}.json").read_text())["synced"] is False
    (tmp_path / NAME).write_bytes(b"\0" + data[1:])  # torn: same size, other bytes
    before = server.total_requests()
    again = make(tmp_path).fetch(url)
    assert not again.from_cache and again.path.read_bytes() == data and server.total_requests() == before + 1
    assert json.loads((tmp_path / f"{NAME}.json").read_text())["synced"] is True
    hit = make(tmp_path).fetch(url)  # durable entries are trusted by their sidecar
    assert hit.from_cache and server.total_requests() == before + 1


def test_file_without_sidecar_or_with_wrong_size_is_downloaded_again(server, tmp_path):
    data = blob(120_000)
    url = server.add(NAME, data)
    make(tmp_path).fetch(url)
    (tmp_path / f"{NAME}.json").unlink()
    assert not make(tmp_path).fetch(url).from_cache
    (tmp_path / NAME).write_bytes(data[:-1])  # sidecar present, size differs
    d = make(tmp_path).fetch(url)
    assert not d.from_cache and d.path.read_bytes() == data
    assert server.stats(NAME).requests == 3


def test_changed_expected_sha256_is_not_a_cache_hit(server, tmp_path):
    old, new = blob(50_000, 1), blob(50_000, 2)
    url = server.add(NAME, old)
    make(tmp_path).fetch(url)
    server.add(NAME, new)
    d = make(tmp_path).fetch(url, sha256=sha(new))
    assert not d.from_cache and d.path.read_bytes() == new


# ---------------------------------------------------------------------------------------------------------------------
# faults


def test_cut_mid_body_resumes_with_range(server, tmp_path):
    data = blob(600_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.cut(after=250_000))
    d = make(tmp_path).fetch(url)
    assert d.path.read_bytes() == data and d.sha256 == sha(data)
    st = server.stats(NAME)
    assert st.requests == 2 and st.ranges[0] is None and st.ranges[1] == f"bytes={d.resumed_from}-"
    # A TCP reset discards what sat unread in our socket buffer, so the .part may end before byte 250_000.
    assert 0 < d.resumed_from <= 250_000
    second = server.requests_for(NAME)[1]
    assert second.status == 206 and second.bytes_sent == len(data) - d.resumed_from  # only the missing bytes
    assert d.transferred == len(data)  # bytes lost in the cut never reached us, so none was counted twice


def test_resume_after_the_process_was_killed(server, tmp_path):
    data = blob(1_500_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.slow(1_000_000, times=1))
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from rockbuild import console
        from rockbuild.downloader import Downloader, TransferPolicy
        console.set_quiet(True)
        Downloader(Path({str(tmp_path)!r}), policy=TransferPolicy(chunk_size={CHUNK})).fetch({url!r})
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    part = tmp_path / f"{NAME}.part"
    deadline = time.monotonic() + 20
    while not (part.exists() and part.stat().st_size >= 200_000):
        assert proc.poll() is None and time.monotonic() < deadline, "the child never got going"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = part.stat().st_size
    assert 0 < left < len(data) and part.read_bytes() == data[:left]

    got = Collector()
    d = make(tmp_path).fetch(url, sink=got)
    assert d.resumed_from == left and d.transferred == len(data) - left
    assert d.path.read_bytes() == data and d.sha256 == sha(data)
    assert got.data() == data  # the sink got the .part from disk first, then the network bytes
    last = server.requests_for(NAME)[-1]
    assert last.headers["Range"] == f"bytes={left}-" and last.headers["If-Range"].startswith('"')


def test_503_then_success(server, tmp_path):
    data = blob(100_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.status(503, times=2))
    d = make(tmp_path).fetch(url)
    assert d.path.read_bytes() == data
    assert server.stats(NAME).statuses == [503, 503, 200]


def test_persistent_503_is_a_fetch_error(server, tmp_path):
    url = server.add(NAME, blob(1000))
    server.inject(NAME, Fault.status(503, times=None))
    with pytest.raises(FetchError) as err:
        make(tmp_path, retries=2).fetch(url)
    assert "503" in str(err.value) and url in str(err.value)
    assert server.stats(NAME).requests == 3
    assert not (tmp_path / NAME).exists()


def test_range_ignored_restarts_from_zero(server, tmp_path):
    data = blob(400_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.cut(after=150_000), Fault.ignore_range())
    d = make(tmp_path).fetch(url)
    assert d.path.read_bytes() == data and d.resumed_from == 0
    st = server.stats(NAME)
    assert st.statuses == [200, 200] and st.ranges[1] is not None


@pytest.mark.parametrize("shift", [-1000, 1000])
def test_wrong_content_range_restarts_from_zero(server, tmp_path, capsys, shift):
    data = blob(400_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.short(after=150_000), Fault.wrong_range(shift=shift))
    with console.quieted(False):
        d = make(tmp_path).fetch(url)
    assert d.path.read_bytes() == data and d.sha256 == sha(data)
    st = server.stats(NAME)
    assert st.statuses == [200, 206, 200] and st.ranges == [None, "bytes=150000-", None]
    assert f"answered 'bytes {150_000 + shift}-399999/400000' to a request for bytes 150000-" in capsys.readouterr().err


def test_short_body_is_resumed(server, tmp_path):
    data = blob(300_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.short(after=100_000))
    d = make(tmp_path).fetch(url)
    assert d.path.read_bytes() == data and d.resumed_from == 100_000
    # A clean close loses nothing: each byte crossed the wire once (at most one chunk more would be acceptable).
    assert server.stats(NAME).bytes_sent == len(data) == d.transferred


def test_short_body_is_never_accepted(server, tmp_path):
    data = blob(300_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.short(after=100_000, times=None), Fault.ignore_range())
    with pytest.raises(FetchError) as err:
        make(tmp_path, retries=2).fetch(url)
    assert "short body" in str(err.value)
    assert not (tmp_path / NAME).exists() and not (tmp_path / f"{NAME}.json").exists()
    assert server.stats(NAME).requests == 4  # one with progress, then 3 without


def test_stall_is_retried(server, tmp_path):
    data = blob(200_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.stall(after=50_000, seconds=3))
    d = make(tmp_path, timeout=(2.0, 0.8)).fetch(url)
    assert d.path.read_bytes() == data and server.stats(NAME).requests == 2


def test_persistent_stall_is_a_one_line_fetch_error(server, tmp_path):
    url = server.add(NAME, blob(200_000))
    server.inject(NAME, Fault.stall(after=0, seconds=3, times=None))
    start = time.monotonic()
    with pytest.raises(FetchError) as err:
        make(tmp_path, retries=2, timeout=(2.0, 0.4)).fetch(url)
    message = str(err.value)
    assert "\n" not in message and "timed out" in message and url in message
    assert server.stats(NAME).requests == 3 and time.monotonic() - start < 2.9  # gave up, did not wait the stall out
    assert not (tmp_path / NAME).exists()


def test_sha256_mismatch_deletes_the_download(server, tmp_path):
    data = blob(100_000)
    url = server.add(NAME, data)
    with pytest.raises(ChecksumError) as err:
        make(tmp_path).fetch(url, sha256="0" * 64)
    assert sha(data) in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{NAME}.lock"]


def test_size_mismatch_is_a_checksum_error(server, tmp_path):
    url = server.add(NAME, blob(100_000))
    with pytest.raises(ChecksumError):
        make(tmp_path).fetch(url, size=99_999)
    assert not (tmp_path / NAME).exists() and not (tmp_path / f"{NAME}.part").exists()


def test_404_names_the_url(server, tmp_path):
    url = server.url_for("missing.tar.gz")
    with pytest.raises(NotFoundError) as err:
        make(tmp_path).fetch(url)
    assert url in str(err.value)
    with pytest.raises(NotFoundError, match="missing.tar.gz"):
        get_text(url)


def test_complete_part_left_before_the_rename_is_finished_without_transfer(server, tmp_path):
    data = blob(90_000)
    url = server.add(NAME, data)
    (tmp_path / f"{NAME}.part").write_bytes(data)
    (tmp_path / f"{NAME}.part.json").write_text(json.dumps({"url": url, "etag": None, "last_modified": None}))
    d = make(tmp_path).fetch(url, sha256=sha(data))
    assert d.transferred == 0 and d.path.read_bytes() == data
    assert server.stats(NAME).statuses == [416]


def test_part_of_another_url_is_not_resumed(server, tmp_path):
    data = blob(90_000)
    url = server.add(NAME, data)
    (tmp_path / f"{NAME}.part").write_bytes(b"x" * 1000)
    (tmp_path / f"{NAME}.part.json").write_text(json.dumps({"url": url + "?other", "etag": None}))
    d = make(tmp_path).fetch(url)
    assert d.path.read_bytes() == data and server.stats(NAME).ranges == [None]


def test_file_changed_on_the_server_between_runs(server, tmp_path):
    old, new = blob(300_000, 1), blob(300_000, 2)
    url = server.add(NAME, old)
    with pytest.raises(RuntimeError):
        make(tmp_path).fetch(url, sink=Collector(fail_after=100_000))
    assert (tmp_path / f"{NAME}.part").exists()
    server.add(NAME, new)  # a new nightly under the same name: If-Range makes the server send it whole
    d = make(tmp_path).fetch(url)
    assert d.path.read_bytes() == new and d.resumed_from == 0
    assert server.stats(NAME).statuses[-1] == 200


def test_file_changed_on_the_server_under_a_sink_is_an_error_not_a_splice(server, tmp_path):
    old, new = blob(300_000, 1), blob(300_000, 2)
    url = server.add(NAME, old)
    with pytest.raises(RuntimeError):
        make(tmp_path).fetch(url, sink=Collector(fail_after=100_000))
    server.add(NAME, new)
    got = Collector()
    with pytest.raises(FetchError, match="changed on the server"):
        make(tmp_path).fetch(url, sink=got)  # the sink already has old bytes: they cannot be taken back
    assert 0 < len(got) < len(old) and old.startswith(got.data())  # the old .part only: no new byte spliced on
    assert not (tmp_path / NAME).exists()
    d = make(tmp_path).fetch(url, sink=(fresh := Collector()))
    assert d.path.read_bytes() == new and fresh.data() == new


# ---------------------------------------------------------------------------------------------------------------------
# concurrency


def test_two_threads_one_download(server, tmp_path):
    data = blob(400_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.slow(1_000_000))
    results: list[Download] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(make(tmp_path).fetch(url))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert sorted(r.from_cache for r in results) == [False, True]
    assert all(r.path.read_bytes() == data for r in results)
    assert server.stats(NAME).requests == 1


def test_two_processes_one_download(server, tmp_path):
    data = blob(500_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.slow(1_000_000))
    script = textwrap.dedent(
        f"""
        import json
        from pathlib import Path
        from rockbuild import console
        from rockbuild.downloader import Downloader
        console.set_quiet(True)
        print(json.dumps(Downloader(Path({str(tmp_path)!r})).fetch({url!r}).to_dict()))
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(o["from_cache"] for o in outs) == [False, True]
    assert {o["sha256"] for o in outs} == {sha(data)}
    assert server.stats(NAME).requests == 1


# ---------------------------------------------------------------------------------------------------------------------
# the streaming sink


def test_sink_gets_every_byte_once_across_a_resume(server, tmp_path):
    data = blob(500_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.cut(after=170_000))
    got = Collector()
    d = make(tmp_path).fetch(url, sink=got)
    assert d.resumed_from > 0 and got.data() == data


def test_sink_gets_every_byte_once_across_a_range_ignored_restart(server, tmp_path):
    data = blob(500_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.short(after=170_001), Fault.ignore_range())  # not on a chunk boundary
    got = Collector()
    d = make(tmp_path).fetch(url, sink=got)
    assert d.resumed_from == 0 and d.transferred > len(data)  # the prefix came twice over the wire...
    assert got.data() == data  # ...but reached the sink once


def test_sink_raising_stops_the_download_and_propagates(server, tmp_path):
    data = blob(2_000_000)
    url = server.add(NAME, data)
    got = Collector(fail_after=100_000)
    with pytest.raises(RuntimeError) as err:
        make(tmp_path).fetch(url, sink=got)
    assert err.value is got.error
    assert len(got) < 100_000 + CHUNK  # nothing was fed after the failure
    part = tmp_path / f"{NAME}.part"
    left = part.stat().st_size
    assert 0 < left < len(data) and data.startswith(part.read_bytes())
    assert not (tmp_path / NAME).exists()
    d = make(tmp_path).fetch(url)  # the .part is kept for a resume
    assert d.resumed_from == left and d.path.read_bytes() == data


def test_sink_os_error_is_not_mistaken_for_a_network_error(server, tmp_path):
    url = server.add(NAME, blob(200_000))
    got = Collector(fail_after=10)
    got.error = BrokenPipeError("tar died")
    with pytest.raises(BrokenPipeError) as err:
        make(tmp_path).fetch(url, sink=got)
    assert err.value is got.error and server.stats(NAME).requests == 1


# ---------------------------------------------------------------------------------------------------------------------
# names, headers, output


def test_plus_goes_out_as_percent_2b():
    url = "https://h/v2/therock-dist-linux-gfx1151-6.4.0.dev0+8f6c.tar.gz?x=a+b"
    assert quote_url_path(url) == "https://h/v2/therock-dist-linux-gfx1151-6.4.0.dev0%2B8f6c.tar.gz?x=a+b"
    assert quote_url_path(quote_url_path(url)) == quote_url_path(url)
    assert quote_url_path("http://h/a b/%2B") == "http://h/a%20b/%2B"
    assert name_from_url("http://h/x/a%2Bb.tar.gz") == "a+b.tar.gz"


def test_plus_name_downloads_from_an_s3_like_server(tmp_path):
    name = "therock-dist-linux-gfx110X-dgpu-6.4.0.dev0+8f6cdfc0d95845f4ca5a46de59d58894972a29a9.tar.gz"
    data = blob(50_000)
    with FaultServer(s3_plus=True) as srv:
        url = srv.add(name, data)
        assert "+" in url
        d = make(tmp_path).fetch(url)
        assert d.path.name == name and d.path.read_bytes() == data
        assert "%2B" in srv.requests_for(name)[0].raw_path


def test_headers_are_sent_and_never_printed(server, tmp_path, capsys):
    url = server.add(NAME, blob(100_000))
    server.inject(NAME, Fault.cut(after=30_000))
    with console.quieted(False):
        make(tmp_path).fetch(url, headers={"Authorization": "Bearer s3cr3t-token"})
    assert all(r.headers.get("Authorization") == "Bearer s3cr3t-token" for r in server.requests_for(NAME))
    err = capsys.readouterr().err
    assert "resuming" in err and "s3cr3t" not in err


def test_progress_prints_plain_lines_when_not_interactive(server, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    data = blob(400_000)
    url = server.add(NAME, data)
    server.inject(NAME, Fault.slow(2_000_000))
    with console.quieted(False):
        make(tmp_path, progress_every=0.05).fetch(url)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if NAME in line and "/" in line]
    assert len(lines) >= 2 and "(100%)" in lines[-1] and "\r" not in err
    with console.quieted(False):
        make(tmp_path).fetch(url)
    assert "cached" in capsys.readouterr().err
    (tmp_path / NAME).unlink()
    make(tmp_path).fetch(url)  # quiet (the fixture): nothing printed
    assert capsys.readouterr().err == ""


def test_redirect_is_followed_and_a_token_does_not_leak_to_another_host(server, tmp_path):
    data = blob(80_000)
    server.add("store/asset.bin", data)
    elsewhere = server.url_for("store/asset.bin").replace("127.0.0.1", "localhost")
    url = server.redirect("releases/download/v1/llama.tar.gz", elsewhere)
    d = make(tmp_path).fetch(url, headers={"Authorization": "token s3cr3t"})
    assert d.path.name == "llama.tar.gz" and d.path.read_bytes() == data and d.url == url
    assert server.requests_for("releases/download/v1/llama.tar.gz")[0].headers["Authorization"] == "token s3cr3t"
    assert "Authorization" not in server.requests_for("store/asset.bin")[0].headers


def test_get_text_retries_a_503(server):
    url = server.add_text("index.html", "<a>x</a>")
    server.inject("index.html", Fault.status(503, times=1))
    assert get_text(url, session=make_session(backoff=0.01)) == "<a>x</a>"
    assert server.stats("index.html").statuses == [503, 200]


def test_get_text_decodes_utf8(server):
    url = server.add("index.html", "<p>gfx1151 – Strix Halo</p>".encode(), content_type="text/html")
    assert get_text(url) == "<p>gfx1151 – Strix Halo</p>"


# --- an unreachable host says why, at once ------------------------------------------------------------------------


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed: connect() is refused


def test_a_refused_connection_is_named_and_not_retried(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/{NAME}"
    start = time.monotonic()
    with pytest.raises(UnreachableError) as err:
        make(tmp_path).fetch(url)
    assert time.monotonic() - start < 2  # was 15.5 s of backoff for an answer that cannot change
    assert str(err.value) == f"could not download {url}: connection refused"
    start = time.monotonic()
    with pytest.raises(UnreachableError, match=r"cannot fetch .*: connection refused$"):
        get_text(url)
    assert time.monotonic() - start < 2


def test_an_unresolvable_name_is_named_and_not_retried(tmp_path):
    start = time.monotonic()
    with pytest.raises(
        UnreachableError, match=r"^cannot fetch http://rockbuild-test\.invalid/x: cannot resolve the host name$"
    ):
        get_text("http://rockbuild-test.invalid/x")
    assert time.monotonic() - start < 5


def test_describe_error_tells_name_refused_and_timeout_apart():
    """urllib3 2.x makes NameResolutionError and NewConnectionError subclasses of ConnectTimeoutError."""
    import socket

    import urllib3.exceptions as u3

    from rockbuild.downloader import describe_error, unreachable_reason

    no_name = u3.NameResolutionError("h.invalid", None, socket.gaierror(-2, "Name or service not known"))
    refused = u3.NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused")
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    unreachable = u3.NewConnectionError(None, "Failed to establish a new connection")
    unreachable.__cause__ = OSError(101, "Network is unreachable")
    timeout = u3.ConnectTimeoutError(None, "Connection to h timed out. (connect timeout=10)")
    wrapped = u3.MaxRetryError(None, "http://h/", refused)
    assert describe_error(no_name) == "cannot resolve the host name"
    assert describe_error(refused) == describe_error(wrapped) == "connection refused"
    assert describe_error(unreachable) == "cannot connect (network is unreachable)"
    assert describe_error(timeout) == "connection timed out after 10s"  # urllib3 names its timeout: so do we
    assert describe_error(u3.ReadTimeoutError(None, "/", "read timed out")) == "read timed out"
    assert (
        describe_error(u3.ReadTimeoutError(None, "/", "Read timed out. (read timeout=15)"))
        == "read timed out after 15s"
    )
    assert unreachable_reason(u3.ReadTimeoutError(None, "/", "read timed out")) is None
