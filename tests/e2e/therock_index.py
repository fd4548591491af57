#!/usr/bin/env python3
"""A local stand-in for TheRock's tarball host, for the night rehearsal (night.sh): 127.0.0.1, no network.

    python3 therock_index.py DIR --ready FILE [--port N] [--prefix /rocm/core/tarball/]

serves, as https://nightly.repo.amd.com/rocm/core/tarball/ does:

    GET <prefix>              the "Tarball index" page whose ``const files = [...]`` lists every *.tar.gz of DIR
                              (name, mtime, size: what TheRock's index_generation_s3_tar.py writes)
    GET <prefix><name>        the file (Range requests answered with 206, as a CDN does)
    GET /_stats               JSON: requests and body bytes sent, per path and in total (what night.sh reports as
                              "bytes fetched")

When listening, it writes {"url": <index url>, "port": N, "pid": P} to the --ready file. Stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

CHUNK = 1 << 20


def index_page(folder: Path) -> str:
    files = [
        {"name": p.name, "mtime": p.stat().st_mtime, "size": p.stat().st_size} for p in sorted(folder.glob("*.tar.gz"))
    ]
    rows = "".join(f'<li><a href="{quote(f["name"])}">{f["name"]}</a></li>\n' for f in files)
    return (
        '<html>\n<head>\n    <title>Tarball index</title>\n    <meta charset="utf-8"/>\n    <script>\n'
        f"        const files = {json.dumps(files)};\n"
        "        function applyFilter(fileList, filter) { return fileList; }\n    </script>\n</head>\n"
        f"<body>\n<ul>\n{rows}</ul>\n</body>\n</html>\n"
    )


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.paths: dict[str, dict[str, int]] = {}

    def add(self, path: str, sent: int) -> None:
        with self.lock:
            entry = self.paths.setdefault(path, {"requests": 0, "bytes": 0})
            entry["requests"] += 1
            entry["bytes"] += sent

    def to_dict(self) -> dict[str, object]:
        with self.lock:
            paths = {k: dict(v) for k, v in self.paths.items()}
        return {
            "paths": paths,
            "requests": sum(v["requests"] for v in paths.values()),
            "bytes": sum(v["bytes"] for v in paths.values()),
            "tarball_bytes": sum(v["bytes"] for k, v in paths.items() if k.endswith(".tar.gz")),
            "tarball_requests": sum(v["requests"] for k, v in paths.items() if k.endswith(".tar.gz")),
        }


def make_handler(folder: Path, prefix: str, stats: Stats) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _head(self, code: int, length: int, ctype: str, extra: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(length))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()

        def _bytes(self, code: int, data: bytes, ctype: str, path: str, head: bool) -> None:
            self._head(code, len(data), ctype)
            if not head:
                self.wfile.write(data)
                stats.add(path, len(data))
            else:
                stats.add(path, 0)

        def _serve(self, head: bool) -> None:
            path = urlsplit(self.path).path
            if path == "/_stats":  # not counted
                body = json.dumps(stats.to_dict()).encode()
                self._head(200, len(body), "application/json")
                if not head:
                    self.wfile.write(body)
                return None
            if path in (prefix, prefix.rstrip("/"), prefix + "index.html"):
                return self._bytes(200, index_page(folder).encode(), "text/html; charset=utf-8", path, head)
            name = unquote(path[len(prefix) :]) if path.startswith(prefix) else ""
            file = folder / name
            if not name or "/" in name or not name.endswith(".tar.gz") or not file.is_file():
                return self._bytes(404, b"Not Found\n", "text/plain", path, head)
            size = file.stat().st_size
            start, end, code = 0, size - 1, 200
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "").strip())
            extra = {"Accept-Ranges": "bytes", "ETag": f'"{int(file.stat().st_mtime)}-{size}"'}
            if m:
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                if start >= size:
                    self._head(416, 0, "application/gzip", {"Content-Range": f"bytes */{size}"})
                    return stats.add(path, 0)
                code = 206
                extra["Content-Range"] = f"bytes {start}-{end}/{size}"
            self._head(code, end - start + 1, "application/gzip", extra)
            sent = 0
            if not head:
                with open(file, "rb") as fh:
                    fh.seek(start)
                    left = end - start + 1
                    try:
                        while left > 0:
                            chunk = fh.read(min(CHUNK, left))
                            if not chunk:
                                break
                            self.wfile.write(chunk)
                            sent += len(chunk)
                            left -= len(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
            stats.add(path, sent)

        def do_GET(self) -> None:
            self._serve(head=False)

        def do_HEAD(self) -> None:
            self._serve(head=True)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--prefix", default="/rocm/core/tarball/")
    args = parser.parse_args()
    stats = Stats()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(args.folder.absolute(), args.prefix, stats))
    server.daemon_threads = True
    port = server.server_address[1]
    ready = {
        "url": f"http://127.0.0.1:{port}{args.prefix}",
        "port": port,
        "pid": os.getpid(),
        "stats": f"http://127.0.0.1:{port}/_stats",
    }
    tmp = args.ready.with_name(args.ready.name + ".partial")
    tmp.write_text(json.dumps(ready))
    os.replace(tmp, args.ready)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
