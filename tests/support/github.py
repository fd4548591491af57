"""A small GitHub REST server on 127.0.0.1 speaking the shapes PyGithub uses, for publisher and alert tests.

Base URL ``http://127.0.0.1:PORT/api/v3`` (GitHub Enterprise style); upload URLs point at ``/api/uploads/...`` on the
same server, release downloads at ``/<owner>/<repo>/releases/download/<tag>/<name>``. Covered: repository, releases
(list with Link pagination, by id, by tag, latest, create, update, delete), assets (list, get, download, upload with
a ``digest``, delete), tags and git refs, issues, labels, comments.

Every write (POST, PATCH, PUT, DELETE) is counted and logged, so a test can assert "no API writes". Drafts are only
visible with a token, as on GitHub. Faults: ``abort_upload_number = N`` cuts the connection in the middle of the N-th
upload and leaves a ``starter`` asset behind (what an interrupted upload leaves on GitHub).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WRITE_METHODS = ("POST", "PATCH", "PUT", "DELETE")


@dataclass
class Asset:
    id: int
    name: str
    label: str
    content_type: str
    data: bytes
    state: str = "uploaded"
    created_at: str = ""
    size_override: int | None = None

    @property
    def size(self) -> int:
        return self.size_override if self.size_override is not None else len(self.data)


@dataclass
class Release:
    id: int
    tag_name: str
    name: str
    body: str
    draft: bool
    prerelease: bool
    target_commitish: str
    created_at: str
    published_at: str | None = None
    assets: list[Asset] = field(default_factory=list)


@dataclass
class Issue:
    number: int
    title: str
    body: str
    labels: list[str]
    state: str = "open"
    comments: list[dict[str, Any]] = field(default_factory=list)
    created_at: str = ""


class GitHubState:
    def __init__(self, owner: str, repo: str, token: str | None) -> None:
        self.owner, self.repo, self.token = owner, repo, token
        self.releases: dict[int, Release] = {}
        self.tags: dict[str, str] = {}  # tag -> sha
        self.issues: dict[int, Issue] = {}
        self.labels: dict[str, dict[str, Any]] = {}
        self.latest_id: int | None = None
        self.next_id = 1
        self.clock = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
        self.writes: list[tuple[str, str]] = []
        self.requests: list[tuple[str, str]] = []
        self.abort_upload_number: int | None = None
        self.fail_release_create: int | None = None  # answer POST /releases with this status, creating nothing
        self.create_then_fail_releases = 0  # this many POST /releases create the release, then answer 502
        self.store_then_fail_upload_number: int | None = None  # the N-th upload is stored whole, answered 502
        self.uploads = 0
        self.lock = threading.RLock()

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def now(self) -> str:
        self.clock += datetime.timedelta(seconds=1)
        return self.clock.strftime("%Y-%m-%dT%H:%M:%SZ")

    # helpers for tests ------------------------------------------------------------------------------------------------
    def add_tag(self, name: str) -> None:
        self.tags[name] = hashlib.sha1(name.encode()).hexdigest()

    def add_release(
        self,
        tag: str,
        *,
        draft: bool = False,
        body: str = "",
        assets: dict[str, bytes] | None = None,
        prerelease: bool = False,
    ) -> Release:
        rel = Release(self.new_id(), tag, tag, body, draft, prerelease, "main", self.now())
        for name, data in (assets or {}).items():
            rel.assets.append(Asset(self.new_id(), name, "", "application/octet-stream", data, created_at=self.now()))
        self.releases[rel.id] = rel
        if not draft:
            self.publish(rel, "true")
        return rel

    def publish(self, rel: Release, make_latest: str | None) -> None:
        rel.draft = False
        rel.published_at = self.now()
        if rel.tag_name not in self.tags:
            self.add_tag(rel.tag_name)
        if make_latest != "false" and not rel.prerelease:
            self.latest_id = rel.id

    def release_by_tag(self, tag: str, *, drafts: bool = True) -> Release | None:
        for rel in self.releases.values():
            if rel.tag_name == tag and (drafts or not rel.draft):
                return rel
        return None

    def latest(self) -> Release | None:
        rel = self.releases.get(self.latest_id) if self.latest_id else None
        if rel is not None and not rel.draft:
            return rel
        published = [r for r in self.releases.values() if not r.draft and not r.prerelease]
        return max(published, key=lambda r: (r.published_at or "", r.id), default=None)


class GitHubAPIServer:
    """``with GitHubAPIServer(token="t") as gh: gh.api_url ...``; ``gh.state`` holds the data and the counters."""

    def __init__(self, owner: str = "rockbuild-test", repo: str = "llamacpp-rocm", token: str | None = None) -> None:
        self.state = GitHubState(owner, repo, token)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.base}/api/v3"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def full_name(self) -> str:
        return f"{self.state.owner}/{self.state.repo}"

    @property
    def writes(self) -> list[tuple[str, str]]:
        return list(self.state.writes)

    def __enter__(self) -> GitHubAPIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # JSON shapes ------------------------------------------------------------------------------------------------------
    def repo_url(self) -> str:
        return f"{self.api_url}/repos/{self.full_name}"

    def user(self) -> dict[str, Any]:
        return {"login": "rockbuild-bot", "id": 1, "type": "Bot", "url": f"{self.api_url}/users/rockbuild-bot"}

    def repo_json(self) -> dict[str, Any]:
        s = self.state
        return {
            "id": 1,
            "node_id": "R_1",
            "name": s.repo,
            "full_name": self.full_name,
            "private": False,
            "owner": {"login": s.owner, "id": 2, "type": "Organization"},
            "url": self.repo_url(),
            "html_url": f"{self.base}/{self.full_name}",
            "default_branch": "main",
            "releases_url": f"{self.repo_url()}/releases{{/id}}",
        }

    def asset_json(self, rel: Release, asset: Asset) -> dict[str, Any]:
        return {
            "url": f"{self.repo_url()}/releases/assets/{asset.id}",
            "id": asset.id,
            "node_id": f"RA_{asset.id}",
            "name": asset.name,
            "label": asset.label,
            "state": asset.state,
            "content_type": asset.content_type,
            "size": asset.size,
            "digest": "sha256:" + hashlib.sha256(asset.data).hexdigest() if asset.state == "uploaded" else None,
            "download_count": 0,
            "created_at": asset.created_at,
            "updated_at": asset.created_at,
            "uploader": self.user(),
            "browser_download_url": f"{self.base}/{self.full_name}/releases/download/{rel.tag_name}/{asset.name}",
        }

    def release_json(self, rel: Release) -> dict[str, Any]:
        url = f"{self.repo_url()}/releases/{rel.id}"
        html = (
            f"{self.base}/{self.full_name}/releases/untagged-{rel.id}"
            if rel.draft
            else f"{self.base}/{self.full_name}/releases/tag/{rel.tag_name}"
        )
        return {
            "url": url,
            "assets_url": f"{url}/assets",
            "html_url": html,
            "id": rel.id,
            "node_id": f"RE_{rel.id}",
            "upload_url": f"{self.base}/api/uploads/repos/{self.full_name}/releases/{rel.id}/assets{{?name,label}}",
            "tarball_url": f"{self.repo_url()}/tarball/{rel.tag_name}",
            "zipball_url": f"{self.repo_url()}/zipball/{rel.tag_name}",
            "tag_name": rel.tag_name,
            "target_commitish": rel.target_commitish,
            "name": rel.name,
            "body": rel.body,
            "draft": rel.draft,
            "prerelease": rel.prerelease,
            "immutable": False,
            "created_at": rel.created_at,
            "published_at": rel.published_at,
            "author": self.user(),
            "assets": [self.asset_json(rel, a) for a in rel.assets],
        }

    def issue_json(self, issue: Issue) -> dict[str, Any]:
        url = f"{self.repo_url()}/issues/{issue.number}"
        return {
            "url": url,
            "id": 1000 + issue.number,
            "node_id": f"I_{issue.number}",
            "number": issue.number,
            "title": issue.title,
            "body": issue.body,
            "state": issue.state,
            "user": self.user(),
            "labels": [self.state.labels.get(n) or self.label_json(n) for n in issue.labels],
            "comments": len(issue.comments),
            "comments_url": f"{url}/comments",
            "html_url": f"{self.base}/{self.full_name}/issues/{issue.number}",
            "created_at": issue.created_at,
            "updated_at": issue.created_at,
            "repository_url": self.repo_url(),
        }

    def label_json(self, name: str, color: str = "ededed", description: str = "") -> dict[str, Any]:
        return {
            "id": abs(hash(name)) % 10**6,
            "node_id": f"L_{name}",
            "name": name,
            "color": color,
            "description": description,
            "default": False,
            "url": f"{self.repo_url()}/labels/{urllib.parse.quote(name)}",
        }


def _make_handler(server: GitHubAPIServer) -> type[BaseHTTPRequestHandler]:
    state = server.state

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        # plumbing ---------------------------------------------------------------------------------------------------
        def _authed(self) -> bool:
            header = self.headers.get("Authorization", "")
            return state.token is not None and header in (f"token {state.token}", f"Bearer {state.token}")

        def _send(
            self, code: int, body: Any = None, headers: dict[str, str] | None = None, raw: bytes | None = None
        ) -> None:
            data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
            self.send_response(code)
            self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, message: str, errors: list[dict[str, Any]] | None = None) -> None:
            body: dict[str, Any] = {"message": message, "documentation_url": "https://docs.github.com/rest"}
            if errors:
                body["errors"] = errors
            self._send(code, body)

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _json_body(self) -> dict[str, Any]:
            data = self._body()
            return json.loads(data) if data else {}

        def _page(self, items: list[Any], query: dict[str, list[str]], path: str) -> None:
            per_page = int(query.get("per_page", ["30"])[0])
            page = int(query.get("page", ["1"])[0])
            chunk = items[(page - 1) * per_page : page * per_page]
            headers = {}
            if page * per_page < len(items):
                q = {k: v[0] for k, v in query.items()}
                q.update(page=str(page + 1), per_page=str(per_page))
                headers["Link"] = f'<{server.base}{path}?{urllib.parse.urlencode(q)}>; rel="next"'
            self._send(200, chunk, headers)

        def _dispatch(self, method: str) -> None:
            parsed = urllib.parse.urlsplit(self.path)
            path, query = parsed.path, urllib.parse.parse_qs(parsed.query)
            with state.lock:
                state.requests.append((method, path))
                if method in WRITE_METHODS:
                    state.writes.append((method, path))
                    if not self._authed():
                        self._body()
                        return self._error(401, "Requires authentication")
            with contextlib.suppress(BrokenPipeError):
                self._route(method, path, query)

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PATCH(self) -> None:
            self._dispatch("PATCH")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        # routes -----------------------------------------------------------------------------------------------------
        def _route(self, method: str, path: str, query: dict[str, list[str]]) -> None:
            repo = f"/repos/{state.owner}/{state.repo}"
            download = re.fullmatch(rf"/{state.owner}/{state.repo}/releases/download/([^/]+)/([^/]+)", path)
            if download and method == "GET":
                return self._download(*map(urllib.parse.unquote, download.groups()))
            upload = re.fullmatch(rf"/api/uploads{repo}/releases/(\d+)/assets", path)
            if upload and method == "POST":
                return self._upload(int(upload[1]), query)
            if not path.startswith("/api/v3" + repo):
                return self._error(404, "Not Found")
            rest = path[len("/api/v3" + repo) :]
            with state.lock:
                if rest == "" and method == "GET":
                    return self._send(200, server.repo_json())
                if rest.startswith("/releases"):
                    return self._releases(method, rest[len("/releases") :], query, path)
                if rest == "/tags" and method == "GET":
                    tags = [
                        {
                            "name": t,
                            "commit": {"sha": sha, "url": f"{server.repo_url()}/commits/{sha}"},
                            "zipball_url": "",
                            "tarball_url": "",
                            "node_id": f"T_{t}",
                        }
                        for t, sha in sorted(state.tags.items())
                    ]
                    return self._page(tags, query, path)
                if rest.startswith("/git/matching-refs/") and method == "GET":
                    prefix = urllib.parse.unquote(rest[len("/git/matching-refs/") :])
                    refs = [self._ref(t) for t in sorted(state.tags) if f"tags/{t}".startswith(prefix)]
                    return self._page(refs, query, path)
                if m := re.fullmatch(r"/git/refs/tags/(.+)", rest):
                    if method == "GET":
                        tag = urllib.parse.unquote(m[1])
                        return self._send(200, self._ref(tag)) if tag in state.tags else self._error(404, "Not Found")
                    if method == "DELETE":
                        state.tags.pop(urllib.parse.unquote(m[1]), None)
                        return self._send(204)
                if rest.startswith("/issues"):
                    return self._issues(method, rest[len("/issues") :], query, path)
                if rest.startswith("/labels"):
                    return self._labels(method, rest[len("/labels") :])
            return self._error(404, "Not Found")

        def _ref(self, tag: str) -> dict[str, Any]:
            sha = state.tags[tag]
            return {
                "ref": f"refs/tags/{tag}",
                "node_id": f"REF_{tag}",
                "url": f"{server.repo_url()}/git/refs/tags/{tag}",
                "object": {"sha": sha, "type": "commit", "url": f"{server.repo_url()}/git/commits/{sha}"},
            }

        def _visible(self, rel: Release) -> bool:
            return not rel.draft or self._authed()

        def _releases(self, method: str, rest: str, query: dict[str, list[str]], path: str) -> None:
            if rest == "" and method == "GET":
                rels = sorted(
                    (r for r in state.releases.values() if self._visible(r)),
                    key=lambda r: (r.created_at, r.id),
                    reverse=True,
                )
                return self._page([server.release_json(r) for r in rels], query, path)
            if rest == "" and method == "POST":
                body = self._json_body()
                if state.fail_release_create is not None:
                    return self._error(state.fail_release_create, "Server Error")
                tag = body["tag_name"]
                if any(r.tag_name == tag and not r.draft for r in state.releases.values()):
                    return self._error(
                        422,
                        "Validation Failed",
                        [{"resource": "Release", "code": "already_exists", "field": "tag_name"}],
                    )
                rel = Release(
                    state.new_id(),
                    tag,
                    body.get("name") or tag,
                    body.get("body") or "",
                    bool(body.get("draft")),
                    bool(body.get("prerelease")),
                    body.get("target_commitish") or "main",
                    state.now(),
                )
                state.releases[rel.id] = rel
                if state.create_then_fail_releases > 0:  # GitHub made it, and the answer got lost
                    state.create_then_fail_releases -= 1
                    return self._error(502, "Server Error")
                if not rel.draft:
                    state.publish(rel, body.get("make_latest"))
                return self._send(201, server.release_json(rel))
            if rest == "/latest" and method == "GET":
                rel = state.latest()
                return self._send(200, server.release_json(rel)) if rel else self._error(404, "Not Found")
            if m := re.fullmatch(r"/tags/(.+)", rest):
                rel = state.release_by_tag(urllib.parse.unquote(m[1]), drafts=False)
                return self._send(200, server.release_json(rel)) if rel else self._error(404, "Not Found")
            if m := re.fullmatch(r"/assets/(\d+)", rest):
                return self._asset(method, int(m[1]))
            if m := re.fullmatch(r"/(\d+)(/assets)?", rest):
                rel = state.releases.get(int(m[1]))
                if rel is None or not self._visible(rel):
                    return self._error(404, "Not Found")
                if m[2] and method == "GET":
                    return self._page([server.asset_json(rel, a) for a in rel.assets], query, path)
                if method == "GET":
                    return self._send(200, server.release_json(rel))
                if method == "PATCH":
                    body = self._json_body()
                    for key in ("tag_name", "name", "body", "target_commitish"):
                        if key in body and body[key] is not None:
                            setattr(rel, key, body[key])
                    if "prerelease" in body:
                        rel.prerelease = bool(body["prerelease"])
                    if rel.draft and body.get("draft") is False:
                        state.publish(rel, body.get("make_latest"))
                    elif not rel.draft and body.get("make_latest") == "true":
                        state.latest_id = rel.id
                    return self._send(200, server.release_json(rel))
                if method == "DELETE":
                    del state.releases[rel.id]
                    if state.latest_id == rel.id:
                        state.latest_id = None
                    return self._send(204)
            return self._error(404, "Not Found")

        def _find_asset(self, asset_id: int) -> tuple[Release, Asset] | None:
            for rel in state.releases.values():
                for asset in rel.assets:
                    if asset.id == asset_id:
                        return rel, asset
            return None

        def _asset(self, method: str, asset_id: int) -> None:
            found = self._find_asset(asset_id)
            if found is None or not self._visible(found[0]):
                return self._error(404, "Not Found")
            rel, asset = found
            if method == "GET":
                if "application/octet-stream" in self.headers.get("Accept", ""):
                    return self._send(200, raw=asset.data)
                return self._send(200, server.asset_json(rel, asset))
            if method == "PATCH":
                body = self._json_body()
                asset.name = body.get("name", asset.name)
                asset.label = body.get("label", asset.label)
                return self._send(200, server.asset_json(rel, asset))
            if method == "DELETE":
                rel.assets.remove(asset)
                return self._send(204)
            return self._error(404, "Not Found")

        def _upload(self, release_id: int, query: dict[str, list[str]]) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            with state.lock:
                state.uploads += 1
                number = state.uploads
                rel = state.releases.get(release_id)
            name = query.get("name", [""])[0]
            if rel is None:
                self.rfile.read(length)
                return self._error(404, "Not Found")
            if any(a.name == name for a in rel.assets):
                self.rfile.read(length)
                return self._error(
                    422, "Validation Failed", [{"resource": "ReleaseAsset", "code": "already_exists", "field": "name"}]
                )
            if state.abort_upload_number == number:
                part = self.rfile.read(max(1, length // 2))
                with state.lock:
                    rel.assets.append(
                        Asset(
                            state.new_id(),
                            name,
                            "",
                            self.headers.get("Content-Type", ""),
                            part,
                            state="starter",
                            created_at=state.now(),
                        )
                    )
                self.close_connection = True
                self.connection.shutdown(2)  # the client sees the connection die in the middle of its upload
                return None
            data = self.rfile.read(length)
            with state.lock:
                asset = Asset(
                    state.new_id(),
                    name,
                    query.get("label", [""])[0],
                    self.headers.get("Content-Type", "application/octet-stream"),
                    data,
                    created_at=state.now(),
                )
                rel.assets.append(asset)
            if state.store_then_fail_upload_number == number:  # stored, and then GitHub answers an error
                return self._error(502, "Server Error")
            return self._send(201, server.asset_json(rel, asset))

        def _download(self, tag: str, name: str) -> None:
            rel = state.release_by_tag(tag, drafts=False)
            asset = next((a for a in rel.assets if a.name == name), None) if rel else None
            if asset is None:
                return self._error(404, "Not Found")
            return self._send(200, raw=asset.data)

        def _issues(self, method: str, rest: str, query: dict[str, list[str]], path: str) -> None:
            if rest == "" and method == "GET":
                wanted_state = query.get("state", ["open"])[0]
                labels = [x for x in query.get("labels", [""])[0].split(",") if x]
                found = [
                    i
                    for i in sorted(state.issues.values(), key=lambda i: i.number, reverse=True)
                    if (wanted_state == "all" or i.state == wanted_state) and all(x in i.labels for x in labels)
                ]
                return self._page([server.issue_json(i) for i in found], query, path)
            if rest == "" and method == "POST":
                body = self._json_body()
                number = len(state.issues) + 1
                labels = [x if isinstance(x, str) else x["name"] for x in body.get("labels") or []]
                for x in labels:
                    state.labels.setdefault(x, server.label_json(x))
                issue = Issue(number, body["title"], body.get("body") or "", labels, created_at=state.now())
                state.issues[number] = issue
                return self._send(201, server.issue_json(issue))
            m = re.fullmatch(r"/(\d+)(/comments)?", rest)
            issue = state.issues.get(int(m[1])) if m else None
            if issue is None:
                return self._error(404, "Not Found")
            if not m[2] and method == "GET":
                return self._send(200, server.issue_json(issue))
            if m[2] and method == "GET":
                return self._page(issue.comments, query, path)
            if m[2] and method == "POST":
                body = self._json_body()
                cid = state.new_id()
                comment = {
                    "id": cid,
                    "node_id": f"IC_{cid}",
                    "body": body["body"],
                    "user": server.user(),
                    "url": f"{server.repo_url()}/issues/comments/{cid}",
                    "created_at": state.now(),
                    "updated_at": state.now(),
                    "issue_url": f"{server.repo_url()}/issues/{issue.number}",
                    "html_url": f"{server.base}/{server.full_name}/issues/{issue.number}#issuecomment-{cid}",
                }
                issue.comments.append(comment)
                return self._send(201, comment)
            return self._error(404, "Not Found")

        def _labels(self, method: str, rest: str) -> None:
            if rest == "" and method == "GET":
                return self._send(200, list(state.labels.values()))
            if rest == "" and method == "POST":
                body = self._json_body()
                if body["name"] in state.labels:
                    return self._error(422, "Validation Failed", [{"resource": "Label", "code": "already_exists"}])
                label = server.label_json(body["name"], body.get("color", "ededed"), body.get("description", ""))
                state.labels[body["name"]] = label
                return self._send(201, label)
            if m := re.fullmatch(r"/(.+)", rest):
                name = urllib.parse.unquote(m[1])
                if method == "GET":
                    label = state.labels.get(name)
                    return self._send(200, label) if label else self._error(404, "Not Found")
            return self._error(404, "Not Found")

    return Handler
