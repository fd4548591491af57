"""The GitHub API through PyGithub: connect, read releases and tags, and the few writes the publisher makes.

``api_url`` serves GitHub Enterprise (``https://HOST/api/v3``) and tests (a local server). Uploads go to the
``upload_url`` the API returns for the release. The token comes from ``GITHUB_TOKEN`` or ``GH_TOKEN``; it is handed
to PyGithub only, and every message that leaves this module passes :func:`redact`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from rockbuild import console
from rockbuild.core.errors import FetchError, PublishError, RecordError
from rockbuild.core.records import ManifestRecord
from rockbuild.downloader import (
    SMALL_BACKOFF,
    TIMEOUT_HINT,
    RetryAnnouncer,
    describe_error,
    get_text,
    host_of,
    timed_out,
    timeouts,
)

DEFAULT_API_URL = "https://api.github.com"
T = TypeVar("T")


def redact(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


def describe(exc: BaseException, token: str | None) -> str:
    """A one-line reason for an API failure, without the token."""
    import requests
    from github import GithubException

    status = _status_after_retries(exc)
    if status is not None:
        text = f"HTTP {status} (still failing after retries)"
    elif isinstance(exc, requests.RequestException):
        text = describe_error(exc)
    elif isinstance(exc, GithubException):
        data = exc.data if isinstance(exc.data, dict) else {}
        message = str(data.get("message") or "")
        errors = data.get("errors") or []
        codes = ", ".join(str(e.get("code")) for e in errors if isinstance(e, dict) and e.get("code"))
        text = f"HTTP {exc.status}" + (f" {message}" if message else "") + (f" ({codes})" if codes else "")
    else:
        first = str(exc).splitlines()[0] if str(exc) else ""
        text = f"{type(exc).__name__}: {first}"[:300]
    return redact(text, token)


def _status_after_retries(exc: BaseException) -> int | None:
    """The HTTP status that made PyGithub's retries give up (requests' RetryError), else None."""
    import re

    import requests

    if not isinstance(exc, requests.exceptions.RetryError):
        return None
    m = re.search(r"too many (\d{3}) error responses", str(exc))
    return int(m[1]) if m else None


def _announced_retry(**kwargs: Any) -> Any:
    """PyGithub's retry (rate limits, 5xx) saying each try again in one warning line, as the downloader's does."""
    from github import GithubRetry

    class AnnouncedGithubRetry(RetryAnnouncer, GithubRetry):
        pass

    return AnnouncedGithubRetry(**kwargs)


class GitHub:
    """One repository on one GitHub API, with the error translation the publisher and the alert need."""

    def __init__(
        self,
        repo: str,
        *,
        api_url: str | None = None,
        token: str | None = None,
        throttle: bool = True,
        timeout: float | None = 120,
    ) -> None:
        """``timeout``: seconds each call may wait (a release's writes and uploads, tried again as PyGithub does);
        None: the run's small-request timeouts and retries (a reader's few JSON answers: ``$ROCKBUILD_HTTP_*``)."""
        from github import Auth, Github

        if "/" not in repo or repo.count("/") != 1:
            raise PublishError(f"--repo {repo!r}: write OWNER/NAME")
        self.repo_name = repo
        self.api_url = (api_url or DEFAULT_API_URL).rstrip("/")
        self.token = token
        limits = timeouts()
        self.tries = limits.retries + 1 if timeout is None else None
        kwargs: dict[str, Any] = {
            # PyGithub takes whole seconds, one value for the connection and the answer
            "base_url": self.api_url,
            "timeout": math.ceil(limits.request if timeout is None else timeout),
            "per_page": 100,
            "retry": _announced_retry()
            if timeout is not None
            else _announced_retry(total=limits.retries, backoff_factor=SMALL_BACKOFF),
        }
        self.wait_limit = limits.request if timeout is None else timeout
        if not throttle:
            kwargs.update(seconds_between_requests=None, seconds_between_writes=None)
        self._gh = Github(auth=Auth.Token(token) if token else None, **kwargs)
        self._repo: Any = None

    def close(self) -> None:
        self._gh.close()

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """Turn API and network failures into one-line PublishErrors naming ``what`` was being done."""
        from github import GithubException

        try:
            with console.waiting(f"{host_of(self.api_url)} ({what})", timeout=self.wait_limit, idle=False):
                yield
        except PublishError:
            raise
        except (GithubException, OSError, ValueError, AssertionError) as exc:
            timeout = timed_out(exc, host_of(self.api_url), self.tries)
            raise PublishError(f"{what} failed: {timeout or describe(exc, self.token)}", hint=self._hint(exc)) from None

    def _hint(self, exc: BaseException) -> str:
        """What to do about a failed call: the network, an outage, or the request (repo, URL, token)."""
        import requests
        from github import GithubException

        status = exc.status if isinstance(exc, GithubException) else _status_after_retries(exc)
        if self.tries is not None and timed_out(exc, self.api_url):
            return TIMEOUT_HINT
        if status is None and isinstance(exc, requests.RequestException):  # an OSError too: test it before OSError
            return f"the API at {self.api_url} could not be reached; check the network and try again"
        if status is not None and (status >= 500 or status == 429):
            return f"the API answered HTTP {status}: an outage or a rate limit, not your request; try again later"
        if status in (401, 403):
            return "check that the token is set and may write contents (permissions: contents: write)"
        if status == 404:
            return f"check --repo ({self.repo_name}) and --api-url, and that the token can see the repository"
        return "check --repo, --api-url and the token's permissions (contents: write)"

    def call(self, what: str, func: Callable[[], T]) -> T:
        with self.errors(what):
            return func()

    @property
    def repo(self) -> Any:
        if self._repo is None:
            self._repo = self.call(
                f"reading the repository {self.repo_name}", lambda: self._gh.get_repo(self.repo_name)
            )
        return self._repo

    def releases(self) -> list[Any]:
        """Every release, drafts included (drafts are only listed to a token with push access)."""
        return self.call("listing releases", lambda: list(self.repo.get_releases()))

    def manifests(
        self,
        limit: int,
        read: Mapping[str, ManifestRecord | None] | None = None,
    ) -> Iterator[tuple[str, ManifestRecord]]:
        """(tag, manifest.json) of the newest ``limit`` published releases, newest first, read one at a time (a
        caller that has what it needs stops early). A release's manifest is outside input: one that is missing or
        not a valid manifest.json is skipped with one warning naming the release and why, and the others still
        count. ``read``: the manifests the caller already has by tag (None: it was unusable and said so), neither
        downloaded nor warned about again."""
        read = read or {}
        published = sorted(
            (r for r in self.releases() if not r.draft),
            key=lambda r: (r.published_at or r.created_at, r.id),
            reverse=True,
        )[:limit]
        for release in published:
            tag = str(release.tag_name)
            manifest = read[tag] if tag in read else self.release_manifest(release)
            if manifest is not None:
                yield tag, manifest

    def release_manifest(self, release: Any) -> ManifestRecord | None:
        """``release``'s manifest.json, checked against its record; None (with a warning when it is there but
        invalid) when it cannot be used. The API or the network failing is a PublishError, as for every call."""
        text = self.asset_text(release, "manifest.json")
        if text is None:
            console.warn(f"release {release.tag_name} has no manifest.json; that release is skipped")
            return None
        try:
            return ManifestRecord.loads(text, f"manifest.json of release {release.tag_name}")
        except RecordError as exc:
            console.warn(f"{exc.message}; that release is skipped")
            return None

    def tag_names(self, prefix: str = "") -> list[str]:
        def read() -> list[str]:
            refs = self.repo.get_git_matching_refs(f"tags/{prefix}")
            return [ref.ref.removeprefix("refs/tags/") for ref in refs]

        return self.call("listing tags", read)

    def assets(self, release: Any) -> list[Any]:
        return self.call(f"listing the assets of {release.tag_name}", lambda: list(release.get_assets()))

    def asset_text(self, release: Any, name: str) -> str | None:
        """The text of ``release``'s asset ``name`` (manifest.json), None when there is no such asset. A server that
        answered with something unreadable is not a network failure: the caller judges the text."""
        asset = next((a for a in self.assets(release) if a.name == name), None)
        if asset is None:
            return None
        headers = {"Accept": "application/octet-stream"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:  # a small request: the run's timeouts and retries, each announced (the token never leaves a header)
            return get_text(asset.url, headers=headers)
        except FetchError as exc:
            raise PublishError(
                f"reading {name} of {release.tag_name} failed: {redact(exc.message, self.token)}", hint=exc.hint
            ) from None
