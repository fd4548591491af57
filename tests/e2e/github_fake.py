#!/usr/bin/env python3
"""The GitHub API of the night rehearsal (night.sh): the project's own test fake, tests/support/github.py, on 127.0.0.1
(the chroots share the host's network), seeded with a release ``b1290`` a previous night made.

    python3 github_fake.py --ready FILE [--owner O] [--repo R] [--token T]     # serve until SIGTERM
    python3 github_fake.py --dump URL                                          # print the state (JSON)

``--ready FILE`` gets {"api_url", "repo", "token", "control", "pid"} once listening. The control URL answers
``GET /state``: every release (tag, draft, latest, assets with size and sha256), the tags, and the API's counters
(requests, writes, uploads), which night.sh reads before and after each step to tell what a step uploaded.
The state is also written to ``<ready>.state.json`` at exit.

b1290 carries a manifest.json of an older llama.cpp commit, SHA256SUMS and a small asset: the first night's plan
must see "changed" against it and publish b1291 next to it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for support.github

from support.github import GitHubAPIServer  # noqa: E402

OLD_COMMIT = "5d4d7a2b7c0f9e8d6c5b4a3928170615f4e3d2c1"  # a made-up earlier llama.cpp commit
OLD_TARBALL = "therock-dist-linux-gfx1151-7.2.4a20261128.tar.gz"


def seed(github: GitHubAPIServer) -> None:
    """The release of a previous night: b1290, rockbuild's asset names, a manifest.json of an older commit."""
    asset = b"placeholder: the previous night's bundle is not part of the rehearsal\n"
    name = "llama-b1290-ubuntu-rocm-gfx1151-x64.tar.gz"
    manifest = {
        "schema": 1,
        "tool": "rockbuild",
        "tag": "b1290",
        "repository": github.full_name,
        "fingerprint": "0" * 16,
        "llama_cpp": {"commit": OLD_COMMIT, "build_number": "b11300"},
        "assets": [
            {"name": name, "size": len(asset), "sha256": hashlib.sha256(asset).hexdigest(), "job": "linux-gfx1151"}
        ],
        "jobs": [
            {
                "id": "linux-gfx1151",
                "os": "linux",
                "name": "gfx1151",
                "targets": ["gfx1151"],
                "backend": "rocm",
                "rocm": {"tarball": OLD_TARBALL, "version": "7.2.4"},
                "cmake": {},
            }
        ],
        "failed_jobs": [],
    }
    data = json.dumps(manifest, indent=2).encode()
    sums = "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in ((name, asset), ("manifest.json", data)))
    github.state.add_release(
        "b1290",
        body="b1290: a previous night (seeded by tests/e2e/github_fake.py)",
        assets={name: asset, "manifest.json": data, "SHA256SUMS": sums.encode()},
    )


class Digests:
    """sha256 of each asset, computed once (the assets of a night are ~1 GB)."""

    def __init__(self) -> None:
        self.known: dict[tuple[int, int], str] = {}

    def of(self, asset: Any) -> str:
        key = (asset.id, len(asset.data))
        if key not in self.known:
            self.known[key] = hashlib.sha256(asset.data).hexdigest()
        return self.known[key]


def dump(github: GitHubAPIServer, digests: Digests) -> dict[str, Any]:
    state = github.state
    with state.lock:
        latest = state.latest()
        releases = [
            {
                "id": r.id,
                "tag": r.tag_name,
                "draft": r.draft,
                "prerelease": r.prerelease,
                "published_at": r.published_at,
                "latest": latest is not None and latest.id == r.id,
                "body_bytes": len(r.body or ""),
                "assets": [
                    {"name": a.name, "size": a.size, "state": a.state, "sha256": digests.of(a)} for a in r.assets
                ],
            }
            for r in sorted(state.releases.values(), key=lambda r: r.id)
        ]
        return {
            "api_url": github.api_url,
            "repo": github.full_name,
            "releases": releases,
            "tags": sorted(state.tags),
            "requests": len(state.requests),
            "writes": len(state.writes),
            "uploads": state.uploads,
            "write_log": [f"{m} {p}" for m, p in state.writes],
            "issues": [
                {"number": i.number, "title": i.title, "comments": len(i.comments)} for i in state.issues.values()
            ],
        }


def control_server(github: GitHubAPIServer, digests: Digests) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path != "/state":
                self.send_error(404)
                return
            body = json.dumps(dump(github, digests)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    return server


def serve(args: argparse.Namespace) -> None:
    digests = Digests()
    with GitHubAPIServer(args.owner, args.repo, token=args.token) as github:
        seed(github)
        control = control_server(github, digests)
        threading.Thread(target=control.serve_forever, daemon=True).start()
        ready = {
            "api_url": github.api_url,
            "repo": github.full_name,
            "token": args.token,
            "pid": os.getpid(),
            "control": f"http://127.0.0.1:{control.server_address[1]}/state",
        }
        tmp = args.ready.with_name(args.ready.name + ".partial")
        tmp.write_text(json.dumps(ready))
        os.replace(tmp, args.ready)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        stop.wait()
        control.shutdown()
        final = args.ready.with_name(args.ready.name.removesuffix(".json") + ".state.json")
        final.write_text(json.dumps(dump(github, digests), indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--owner", default="rockbuild-rehearsal")
    parser.add_argument("--repo", default="llamacpp-rocm")
    parser.add_argument("--token", default="ghp_RehearsalToken0000000000000000NOTSECRET")
    parser.add_argument("--dump", metavar="URL", help="print the state of a running fake (its control URL)")
    args = parser.parse_args()
    if args.dump:
        with urllib.request.urlopen(args.dump, timeout=30) as response:
            sys.stdout.write(response.read().decode() + "\n")
        return
    if args.ready is None:
        parser.error("--ready FILE is needed to serve")
    serve(args)


if __name__ == "__main__":
    main()
