"""Pushing an image folder (:mod:`.oci`) to a registry by the distribution API (the OCI distribution spec): the bytes
on disk are the bytes served, so the digest in manifest.json and the notes is the one ``podman pull`` reports.

A push is idempotent: a blob the repository has (``HEAD``) is not sent again, a tag that already names our digest is
not written again; so a re-run after a failure sends only what is missing and leaves no duplicate. Authentication is
the registry's: a Bearer challenge is answered at its token endpoint with the user and token (ghcr.io: any user name
and the workflow's GITHUB_TOKEN with ``packages: write``), a Basic one directly. The token is sent in a header only,
never logged, never handed to a child. Plain HTTP is used for a registry on the loopback address only (the tests'
and the rehearsal's local registry); everywhere else HTTPS.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from rockbuild.core.errors import ImageError
from rockbuild.core.record import PAIRS, Record
from rockbuild.downloader import make_session

from .oci import MANIFEST_TYPE, read_layout

_LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$")
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
_ACCEPT = ", ".join([MANIFEST_TYPE, "application/vnd.oci.image.manifest.v1+json"])


@dataclass(frozen=True)
class Reference:
    """``host[:port]/path`` (a repository), lower case as registries want it."""

    host: str
    path: str

    @classmethod
    def parse(cls, text: str) -> Reference:
        text = text.strip().removeprefix("docker://").rstrip("/")
        host, _, path = text.partition("/")
        if not path or "." not in host and ":" not in host and host != "localhost":
            raise ImageError(f"{text!r} is not an image repository like ghcr.io/OWNER/NAME or 127.0.0.1:5000/NAME")
        if ":" in path or "@" in path:
            raise ImageError(f"{text!r}: give the repository without a tag; rockbuild names the tags")
        if not re.fullmatch(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*", path.lower()):
            raise ImageError(f"{text!r}: {path!r} is not a valid repository path")
        return cls(host.lower(), path.lower())

    @property
    def base_url(self) -> str:
        scheme = "http" if _LOOPBACK.match(self.host) else "https"
        return f"{scheme}://{self.host}/v2/{self.path}"

    def __str__(self) -> str:
        return f"{self.host}/{self.path}"


@dataclass(frozen=True)
class PushResult(Record):
    reference: str
    digest: str
    blobs_sent: tuple[str, ...]
    blobs_present: tuple[str, ...]
    tags: tuple[tuple[str, str], ...] = field(metadata=PAIRS)  # (tag, pushed | unchanged): an object in JSON


class Registry:
    """One repository of one registry, with its credentials (user, token)."""

    def __init__(
        self,
        reference: Reference,
        *,
        user: str | None = None,
        token: str | None = None,
        timeout: float = 300.0,
        session: requests.Session | None = None,
    ) -> None:
        self.reference, self._user, self._token, self.timeout = reference, user, token, timeout
        self._session = session or make_session(retries=3)
        self._auth: str | None = None

    def close(self) -> None:
        self._session.close()

    def _authorize(self, response: requests.Response) -> bool:
        """Answer a 401's challenge; False when there is nothing more to try."""
        challenge = response.headers.get("WWW-Authenticate", "")
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic" and self._token and not (self._auth or "").startswith("Basic"):
            import base64

            pair = f"{self._user or 'rockbuild'}:{self._token}".encode()
            self._auth = "Basic " + base64.b64encode(pair).decode()
            return True
        if scheme != "bearer" or (self._auth or "").startswith("Bearer"):
            return False
        params = dict(_CHALLENGE.findall(challenge))
        realm = params.pop("realm", "")
        if not realm:
            return False
        params["scope"] = f"repository:{self.reference.path}:pull,push"
        auth = (self._user or "rockbuild", self._token) if self._token else None
        try:
            answer = self._session.get(realm, params=params, auth=auth, timeout=60)
        except requests.RequestException as exc:
            raise ImageError(
                f"{self.reference.host}: the token endpoint {realm} cannot be reached: {type(exc).__name__}"
            ) from None
        if answer.status_code != 200:
            raise ImageError(
                f"{self.reference.host} refused a push token for {self.reference.path} (HTTP {answer.status_code})",
                hint="in CI the job needs 'permissions: packages: write' and GITHUB_TOKEN",
            )
        body = answer.json()
        token = body.get("token") or body.get("access_token")
        if not token:
            return False
        self._auth = f"Bearer {token}"
        return True

    def request(
        self,
        method: str,
        url: str,
        *,
        what: str,
        ok: Sequence[int],
        data: Any = None,
        headers: dict[str, str] | None = None,
        retries: int = 3,
    ) -> requests.Response:
        """``method url``, authenticated, retried on a connection error or a 5xx; an answer outside ``ok`` is an
        ImageError naming ``what``."""
        for attempt in range(retries):
            body = data() if callable(data) else data  # a file is opened anew for each attempt
            try:
                merged = {**(headers or {}), **({"Authorization": self._auth} if self._auth else {})}
                response = self._session.request(
                    method, url, data=body, headers=merged, timeout=self.timeout, allow_redirects=True
                )
            except requests.RequestException as exc:
                if attempt + 1 == retries:
                    raise ImageError(
                        f"{what}: {self.reference.host} cannot be reached ({type(exc).__name__})",
                        hint="run the same command again: what was pushed is not sent twice",
                    ) from None
                time.sleep(2**attempt)
                continue
            finally:
                if hasattr(body, "close"):
                    body.close()
            if response.status_code == 401 and self._authorize(response):
                continue
            if response.status_code >= 500 and attempt + 1 < retries:
                time.sleep(2**attempt)
                continue
            if response.status_code not in ok:
                detail = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
                raise ImageError(
                    f"{what}: {self.reference} answered HTTP {response.status_code}"
                    + (f" ({detail})" if detail else ""),
                    hint="run the same command again: what was pushed is not sent twice",
                )
            return response
        raise ImageError(
            f"{what}: {self.reference} kept refusing (HTTP 401)",
            hint="check the registry credentials (CI: packages: write)",
        )

    def has_blob(self, digest: str) -> bool:
        response = self.request(
            "HEAD", f"{self.reference.base_url}/blobs/{digest}", what=f"checking {digest[:19]}", ok=(200, 404)
        )
        return response.status_code == 200

    def push_blob(self, path: Path, digest: str, size: int) -> None:
        start = self.request(
            "POST", f"{self.reference.base_url}/blobs/uploads/", what=f"starting {digest[:19]}", ok=(202,), data=b""
        )
        location = start.headers.get("Location", "")
        if not location:
            raise ImageError(f"{self.reference}: the registry started an upload without a Location")
        if location.startswith("/"):
            location = self.reference.base_url.split("/v2/")[0] + location
        url = f"{location}{'&' if '?' in location else '?'}digest={digest}"
        self.request(
            "PUT",
            url,
            what=f"uploading {digest[:19]} ({size:,} bytes)",
            ok=(201, 204),
            data=lambda: open(path, "rb"),  # noqa: SIM115 - closed by request()
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
        )

    def tag_digest(self, tag: str) -> str | None:
        response = self.request(
            "HEAD",
            f"{self.reference.base_url}/manifests/{tag}",
            what=f"reading the tag {tag}",
            ok=(200, 404),
            headers={"Accept": _ACCEPT},
        )
        return response.headers.get("Docker-Content-Digest") if response.status_code == 200 else None

    def put_manifest(self, tag: str, manifest: bytes, digest: str) -> None:
        response = self.request(
            "PUT",
            f"{self.reference.base_url}/manifests/{tag}",
            what=f"writing the tag {tag}",
            ok=(200, 201),
            data=manifest,
            headers={"Content-Type": MANIFEST_TYPE},
        )
        served = response.headers.get("Docker-Content-Digest")
        if served and served != digest:
            raise ImageError(f"{self.reference}:{tag}: the registry stored the manifest as {served}, not {digest}")


def push_image(
    folder: Path, registry: Registry, tags: Sequence[str], *, say: Callable[[str], None] = lambda m: None
) -> PushResult:
    """Push the image in ``folder`` under each of ``tags`` (the release's tag first, the moving one after, so a
    moving tag never names an image whose release tag failed), then read every tag back: it must name our digest."""
    raw, manifest = read_layout(folder)
    import hashlib

    digest = f"sha256:{hashlib.sha256(raw).hexdigest()}"
    sent, present = [], []
    for descriptor in [manifest["config"], *manifest["layers"]]:
        blob = descriptor["digest"]
        if registry.has_blob(blob):
            present.append(blob)
            continue
        say(f"    pushing {blob[:19]} ({descriptor['size']:,} bytes)")
        registry.push_blob(folder / blob.removeprefix("sha256:"), blob, int(descriptor["size"]))
        sent.append(blob)
    actions = []
    for tag in tags:
        if registry.tag_digest(tag) == digest:
            actions.append((tag, "unchanged"))
            continue
        registry.put_manifest(tag, raw, digest)
        actions.append((tag, "pushed"))
    for tag in tags:
        found = registry.tag_digest(tag)
        if found != digest:
            raise ImageError(
                f"{registry.reference}:{tag} names {found or 'nothing'} after the push, not {digest}",
                hint="run the same command again",
            )
    return PushResult(str(registry.reference), digest, tuple(sent), tuple(present), tuple(actions))
