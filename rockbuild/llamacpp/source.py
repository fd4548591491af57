"""The llama.cpp tree a build compiles: an existing directory, or a shallow clone of exactly one ref, and what it is.

What a tree *is* (full commit, build number ``bNNNN``) is recorded only when known: from git when the tree is its own
checkout, from a ``bNNNN`` tag that points at the commit, from ``git rev-list --count`` only when the history is
complete, or from the caller. Otherwise it is "unknown": a shallow clone counts 1 commit, and reporting "b1" is the
lie the seed pipeline told.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from filelock import FileLock

from rockbuild import console
from rockbuild.core.data import read_json_object
from rockbuild.core.errors import FetchError, UsageError
from rockbuild.core.records import LlamaCpp
from rockbuild.process import ProcessError, child_env, run

DEFAULT_GIT_URL = "https://github.com/ggml-org/llama.cpp"
UNKNOWN: Final = "unknown"

FULL_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_SHORT_COMMIT_RE = re.compile(r"^[0-9a-f]{7,39}$")
_BUILD_TAG_RE = re.compile(r"^b([0-9]+)$")
_MARKER = "rockbuild-source.json"  # inside .git, so the work tree stays clean
GIT_TIMEOUT = 1800.0  # a depth-1 fetch of llama.cpp is ~60 MB
GIT_QUICK_TIMEOUT = 120.0


@dataclass(frozen=True, kw_only=True)
class LlamaSource(LlamaCpp):
    """A llama.cpp source tree and what it is: build.json's ``llama_cpp`` (read back as its base,
    :class:`~rockbuild.core.records.LlamaCpp`)."""

    path: Path
    commit: str  # full commit (or what the caller gave), else "unknown"
    commit_source: Literal["git", "given", "unknown"]
    build_number: str  # "b1234" or "unknown"
    build_number_source: str  # "tag b1234" | rev-list | given | unknown
    origin: str  # tree (--source) | clone (--ref)
    ref: str | None = None
    url: str | None = None
    ref_kind: str | None = None  # tag | branch | commit (clones only)
    shallow: bool | None = None  # None: not a git checkout
    reused: bool = False  # a clone already in the cache was used without fetching
    commit_time: int | None = None  # the commit's committer date (Unix time): archives' timestamp, reproducibly
    patched_from: Path | None = None  # ``path`` is a patched mirror of this tree (rockbuild.llamacpp.patches)

    @property
    def build_number_value(self) -> int | None:
        match = _BUILD_TAG_RE.match(self.build_number)
        return int(match.group(1)) if match else None

    def cmake_build_info(self) -> dict[str, str]:
        """LLAMA_BUILD_NUMBER/LLAMA_BUILD_COMMIT: always passed, so llama.cpp never counts a shallow history itself.

        Unknown values are llama.cpp's own defaults for a tree without git (0 and "unknown").
        """
        number = self.build_number_value
        return {
            "LLAMA_BUILD_NUMBER": str(number) if number is not None else "0",
            "LLAMA_BUILD_COMMIT": self.short_commit or UNKNOWN,
        }


def git_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for git: never prompts for credentials (a private URL fails instead of hanging CI)."""
    return child_env({"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never"}, base=base)


def _git(
    args: list[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    timeout: float = GIT_QUICK_TIMEOUT,
    check: bool = True,
) -> str:
    # safe.directory: reading the commit of a tree unpacked by another user must not fail on "dubious ownership".
    result = run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=cwd,
        env=env if env is not None else git_env(),
        log=log,
        timeout=timeout,
        check=check,
    )
    return result.output.strip() if result.returncode == 0 else ""


def normalize_build_number(value: str | int) -> str:
    """``11312``, ``"11312"`` or ``"b11312"`` -> ``"b11312"``."""
    text = str(value).strip()
    digits = text[1:] if text[:1] in ("b", "B") else text
    if not digits.isdigit():
        raise UsageError(f"build number {value!r} is not a number like 11312 or b11312")
    return f"b{int(digits)}"


def build_number_from_tags(tags: list[str]) -> str | None:
    """The highest ``bNNNN`` among tag names (two build tags on one commit: the later build)."""
    numbers = [int(m.group(1)) for t in tags if (m := _BUILD_TAG_RE.match(t.strip()))]
    return f"b{max(numbers)}" if numbers else None


def check_llama_tree(path: Path) -> Path:
    """The tree's real path. Never a symlink: llama.cpp makes build.ninja depend on ``<source>/../../.git/...``
    (a submodule's gitdir) and ninja drops ``..`` textually, so through a symlink that file never exists and
    ninja re-runs CMake forever ("manifest 'build.ninja' still dirty after 100 tries")."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise UsageError(f"llama.cpp source {path} does not exist or is not a directory")
    if not (path / "CMakeLists.txt").is_file() or not (path / "ggml").is_dir():
        raise UsageError(f"{path} is not a llama.cpp source tree (expected CMakeLists.txt and ggml/ at its top)")
    return path


def _apply_given(source: LlamaSource, build_number: str | int | None, commit: str | None) -> LlamaSource:
    """The caller's build number / commit win; a given commit that contradicts git is a mistake, not an override."""
    fields: dict[str, Any] = {}
    if commit:
        given = commit.strip().lower()
        if source.commit_source == "git" and not source.commit.startswith(given):
            raise UsageError(f"--commit {commit} does not match the tree's git commit {source.commit}")
        if source.commit_source != "git":
            fields.update(commit=given, commit_source="given")
    if build_number is not None and str(build_number).strip():
        fields.update(build_number=normalize_build_number(build_number), build_number_source="given")
    return dataclasses.replace(source, **fields)


def _commit_time(repo: Path, env: Mapping[str, str] | None, log: Path | None) -> int | None:
    stamp = _git(["log", "-1", "--format=%ct", "HEAD"], cwd=repo, env=env, log=log, check=False)
    return int(stamp) if stamp.isdigit() else None


def describe_tree(
    path: Path,
    *,
    build_number: str | int | None = None,
    commit: str | None = None,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> LlamaSource:
    """What the llama.cpp tree at ``path`` is. Git facts count only when ``path`` is the top of its own checkout."""
    path = check_llama_tree(path)
    source = LlamaSource(
        path=path,
        commit=UNKNOWN,
        commit_source=UNKNOWN,
        build_number=UNKNOWN,
        build_number_source=UNKNOWN,
        origin="tree",
    )
    try:
        lines = _git(
            ["rev-parse", "--show-toplevel", "HEAD", "--is-shallow-repository"],
            cwd=path,
            env=env,
            log=log,
            check=False,
        ).splitlines()
    except ProcessError as exc:  # git itself is missing
        console.warn(f"cannot ask git about {path} ({exc.message}); commit and build number are unknown")
        lines = []
    top_ok = len(lines) == 3 and Path(lines[0]).resolve() == path.resolve() and FULL_COMMIT_RE.match(lines[1])
    if top_ok:
        head, shallow = lines[1], lines[2] == "true"
        number = build_number_from_tags(
            _git(["tag", "--points-at", "HEAD", "--list", "b[0-9]*"], cwd=path, env=env, log=log).splitlines()
        )
        number_source = f"tag {number}" if number else UNKNOWN
        if number is None and not shallow:
            count = _git(["rev-list", "--count", "HEAD"], cwd=path, env=env, log=log)
            if count.isdigit():
                number, number_source = f"b{count}", "rev-list"
        source = LlamaSource(
            path=path,
            commit=head,
            commit_source="git",
            build_number=number or UNKNOWN,
            build_number_source=number_source,
            origin="tree",
            shallow=shallow,
            commit_time=_commit_time(path, env, log),
        )
    return _apply_given(source, build_number, commit)


# ---------------------------------------------------------------------------------------------------------------------
# Clones of one ref


CLONES_FOLDER = "llama.cpp"  # <cache>/llama.cpp/: the checkouts of checkout_ref
PATCHED_FOLDER = "llama.cpp-patched"  # <cache>/llama.cpp-patched/<job id>: a build's patched mirror of its tree


def clone_dir_for(url: str, key: str, cache: Path) -> Path:
    """``<cache>/llama.cpp/<key>-<hash of url and key>``: one checkout per (url, key), readable by people. The key is
    the ref, or a slot such as a job id (see :func:`checkout_ref`)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("._")[:48] or "ref"
    digest = hashlib.sha256(f"{url}\n{key}".encode()).hexdigest()[:10]
    return cache / CLONES_FOLDER / f"{slug}-{digest}"


def cached_trees(cache: Path) -> list[Path]:
    """The llama.cpp trees a build left in ``cache`` (the checkouts of :func:`checkout_ref` and the builds' patched
    mirrors), the most recently changed first; only folders that hold a llama.cpp tree (CMakeLists.txt and ggml/)."""
    found: list[tuple[float, str, Path]] = []
    for folder in (CLONES_FOLDER, PATCHED_FOLDER):
        try:
            entries = list((cache / folder).iterdir())
        except OSError:  # no such folder yet, or unreadable: no tree there
            continue
        for tree in entries:
            try:
                if tree.is_dir() and (tree / "CMakeLists.txt").is_file() and (tree / "ggml").is_dir():
                    found.append((tree.stat().st_mtime, str(tree), tree))
            except OSError:
                continue
    return [tree for _, _, tree in sorted(found, key=lambda t: (-t[0], t[1]))]


def ref_kind_from_fetch_head(text: str) -> str:
    """git writes what it fetched into FETCH_HEAD: ``<sha>\\t\\ttag 'b1234' of URL`` / ``branch 'x' of`` / a sha."""
    first = text.splitlines()[0] if text.strip() else ""
    description = first.split("\t")[-1]
    if description.startswith("tag '"):
        return "tag"
    if description.startswith("branch '"):
        return "branch"
    return "commit"


def build_number_from_ls_remote(text: str, commit: str) -> str | None:
    """The ``bNNNN`` tag of ``commit`` in ``git ls-remote --tags`` output (annotated tags via their ``^{}`` line)."""
    tags = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2 or parts[0] != commit:
            continue
        name = parts[1].removeprefix("refs/tags/").removesuffix("^{}")
        tags.append(name)
    return build_number_from_tags(tags)


def cached_checkout(
    ref: str, *, url: str = DEFAULT_GIT_URL, cache: Path, slot: str | None = None
) -> LlamaSource | None:
    """The checkout of ``ref`` that :func:`checkout_ref` would reuse without fetching (a tag or a full commit it
    fetched before into the same folder), as its marker describes it: no git process, no network (what ``rockbuild
    build --dry-run`` can say of a ref). None when a build would fetch."""
    ref = ref.strip()
    repo = clone_dir_for(url, slot or ref, cache)
    marker = read_json_object(repo / ".git" / _MARKER) or {}
    if not (
        marker.get("url") == url
        and marker.get("ref") == ref
        and marker.get("kind") in ("tag", "commit")
        and FULL_COMMIT_RE.match(str(marker.get("commit", "")))
    ):
        return None
    return LlamaSource(
        path=repo,
        commit=str(marker["commit"]),
        commit_source="git",
        build_number=marker.get("build_number") or UNKNOWN,
        build_number_source=marker.get("build_number_source") or UNKNOWN,
        origin="clone",
        ref=ref,
        url=url,
        ref_kind=str(marker["kind"]),
        shallow=True,
        reused=True,
    )


def checkout_ref(
    ref: str,
    *,
    url: str = DEFAULT_GIT_URL,
    cache: Path,
    build_number: str | int | None = None,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    slot: str | None = None,
) -> LlamaSource:
    """A work tree at ``ref`` (tag, branch or full commit) from ``url``: ``git init`` + ``fetch --depth 1`` of the ref.

    A re-run reuses the checkout: a tag or a commit is not fetched again; a branch is (it moves).

    ``slot`` (e.g. the job id) keeps one checkout per (url, slot) that moves from ref to ref, instead of one per ref:
    the sources keep the same absolute path from night to night, and ``checkout`` rewrites only the files that
    changed, so ccache (which hashes absolute paths) hits for everything else. With a checkout per ref every new
    commit would land in a new folder and miss the whole cache.
    """
    ref = ref.strip()
    if not ref or ref.startswith("-"):
        raise UsageError(f"--ref {ref!r} is not a tag, branch or commit")
    env = env if env is not None else git_env()
    repo = clone_dir_for(url, slot or ref, cache)
    repo.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(repo.parent / f".{repo.name}.lock")):
        marker = read_json_object(repo / ".git" / _MARKER) or {}
        reusable = (
            marker.get("url") == url
            and marker.get("ref") == ref
            and marker.get("kind") in ("tag", "commit")
            and FULL_COMMIT_RE.match(str(marker.get("commit", "")))
        )
        if reusable:
            head = _git(["rev-parse", "HEAD"], cwd=repo, env=env, log=log, check=False)
            dirty = _git(["status", "--porcelain", "--untracked-files=no"], cwd=repo, env=env, log=log, check=False)
            if head == marker["commit"] and not dirty:
                console.info(f"    {repo}: {ref} already checked out ({head[:12]}); not fetching")
                source = LlamaSource(
                    path=repo,
                    commit=head,
                    commit_source="git",
                    build_number=marker.get("build_number") or UNKNOWN,
                    build_number_source=marker.get("build_number_source") or UNKNOWN,
                    origin="clone",
                    ref=ref,
                    url=url,
                    ref_kind=marker["kind"],
                    shallow=True,
                    reused=True,
                    commit_time=_commit_time(repo, env, log),
                )
                return _apply_given(source, build_number, None)
        if not (repo / ".git").is_dir():
            repo.mkdir(parents=True, exist_ok=True)
            _git(["init", "--quiet", str(repo)], env=env, log=log)
        console.info(f"    fetching {ref} from {url} (depth 1)")
        try:
            _git(["fetch", "--depth", "1", "--no-tags", url, ref], cwd=repo, env=env, log=log, timeout=GIT_TIMEOUT)
        except ProcessError as exc:
            hint = None
            if _SHORT_COMMIT_RE.match(ref) and not _BUILD_TAG_RE.match(ref):
                hint = "a shallow fetch needs the full 40-character commit, not an abbreviation"
            tail = f": {exc.tail[-1]}" if exc.tail else ""
            raise FetchError(f"cannot fetch {ref!r} from {url}{tail}", hint=hint) from None
        kind = ref_kind_from_fetch_head((repo / ".git" / "FETCH_HEAD").read_text(encoding="utf-8", errors="replace"))
        commit = _git(["rev-parse", "FETCH_HEAD^{commit}"], cwd=repo, env=env, log=log)
        _git(
            ["-c", "advice.detachedHead=false", "checkout", "--quiet", "--force", "--detach", commit],
            cwd=repo,
            env=env,
            log=log,
            timeout=GIT_TIMEOUT,
        )

        number: str | None = None
        number_source = UNKNOWN
        if kind == "tag" and (tag_number := build_number_from_tags([ref])):
            number, number_source = tag_number, f"tag {tag_number}"
        else:
            # A shallow clone has no history to count: only a build tag on this very commit can name its number.
            try:
                listing = _git(["ls-remote", "--tags", url, "b*"], env=env, log=log, timeout=GIT_QUICK_TIMEOUT)
                number = build_number_from_ls_remote(listing, commit)
                number_source = f"tag {number}" if number else UNKNOWN
            except ProcessError:
                console.warn(f"cannot list the tags of {url}; the build number of {commit[:12]} is unknown")
        (repo / ".git" / _MARKER).write_text(
            json.dumps(
                {
                    "url": url,
                    "ref": ref,
                    "kind": kind,
                    "commit": commit,
                    "build_number": number,
                    "build_number_source": number_source,
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
    source = LlamaSource(
        path=repo,
        commit=commit,
        commit_source="git",
        build_number=number or UNKNOWN,
        build_number_source=number_source,
        origin="clone",
        ref=ref,
        url=url,
        ref_kind=kind,
        shallow=True,
        reused=False,
        commit_time=_commit_time(repo, env, log),
    )
    return _apply_given(source, build_number, None)


# ---------------------------------------------------------------------------------------------------------------------
# History: the commits between two (a llama.cpp bisect)

PR_RE = re.compile(r"\(#(\d+)\)\s*$")
"""A squash-merged subject's pull request: ``ggml : fix the ROPE cache (#12345)``."""


def pull_request(subject: str | None) -> int | None:
    """The pull request a commit's subject names at its end, or None."""
    m = PR_RE.search(subject or "")
    return int(m[1]) if m else None


def history_dir(url: str, cache: Path) -> Path:
    """``<cache>/llama.cpp-history/<hash of url>``: a bare repository with the commits (no trees: ``--filter=tree:0``)
    of ``url``, for listing a range and its subjects."""
    return cache / "llama.cpp-history" / hashlib.sha256(url.encode()).hexdigest()[:12]


def oldest_commit(commits: Sequence[str], *, url: str, cache: Path) -> str:
    """The oldest of ``commits`` (full commits of ``url`` that a bisect fetched into :func:`history_dir`): the one
    that is an ancestor of all the others; the first given when none is (or the history is not here)."""
    if len(set(commits)) == 1:
        return commits[0]
    env = {**git_env(), "GIT_NO_LAZY_FETCH": "1"}
    repo = history_dir(url, cache)
    if not (repo / "HEAD").is_file():
        return commits[0]
    base = _git(["merge-base", "--octopus", *commits], cwd=repo, env=env, check=False)
    return base if base in commits else commits[0]


def commits_between(
    good: str, bad: str, *, url: str, cache: Path, log: Path | None = None, env: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """(commit, subject) of each commit after ``good`` up to and including ``bad`` on ``bad``'s first-parent line,
    oldest first (``good`` and ``bad``: full commits, tags or branches of ``url``). Fetches only commits, once; a
    ``good`` that is not an ancestor of ``bad`` is a UsageError."""
    # never a lazy fetch of the trees a filtered history lacks: nothing here reads them (git >= 2.44 honours it)
    env = {**(env if env is not None else git_env()), "GIT_NO_LAZY_FETCH": "1"}
    repo = history_dir(url, cache)
    repo.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(repo.parent / f".{repo.name}.lock")):
        if not (repo / "HEAD").is_file():
            _git(["init", "--quiet", "--bare", str(repo)], env=env, log=log)
        # a named remote: a filtered fetch makes it the promisor of the missing trees (a URL alone is refused)
        if _git(["remote", "get-url", "origin"], cwd=repo, env=env, log=log, check=False) != url:
            _git(["remote", "remove", "origin"], cwd=repo, env=env, log=log, check=False)
            _git(["remote", "add", "origin", url], cwd=repo, env=env, log=log)

        def resolved(ref: str) -> str:
            return _git(
                ["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=repo, env=env, log=log, check=False
            )

        def fetch(ref: str) -> str:
            known = resolved(ref) if _SHORT_COMMIT_RE.match(ref.lower()) or FULL_COMMIT_RE.match(ref.lower()) else ""
            if known:  # a commit fetched before (an abbreviation too, once its history is here)
                return known
            try:  # a bisect reads subjects and parents, never files
                # --update-shallow: a repository that is shallow itself (a packaged tree's) hands on its roots. The
                # commits alone from a remote host; a local repository gives everything (no network to save, and
                # git 2.39 loops forever on a filtered fetch from a shallow local one)
                remote = "://" in url and not url.startswith("file://")
                _git(
                    [
                        "fetch",
                        "--quiet",
                        *(["--filter=tree:0"] if remote else []),
                        "--no-tags",
                        "--update-shallow",
                        "origin",
                        ref,
                    ],
                    cwd=repo,
                    env=env,
                    log=log,
                    timeout=GIT_TIMEOUT,
                )
            except ProcessError as exc:
                tail = f": {exc.tail[-1]}" if exc.tail else ""
                raise FetchError(
                    f"cannot fetch {ref!r} from {url}{tail}",
                    hint="give full commits, or tags or branches of the repository",
                ) from None
            return _git(["rev-parse", "FETCH_HEAD^{commit}"], cwd=repo, env=env, log=log)

        bad_commit = fetch(bad)
        good_commit = fetch(good)
        ancestor = run(
            ["git", "-c", "safe.directory=*", "merge-base", "--is-ancestor", good_commit, bad_commit],
            cwd=repo,
            env=env,
            log=log,
            timeout=GIT_QUICK_TIMEOUT,
            check=False,
        )
        if ancestor.returncode != 0:
            raise UsageError(
                f"llama.cpp {good_commit[:12]} is not an ancestor of {bad_commit[:12]}: no range to bisect",
                hint="give the older, good commit first: GOOD..BAD",
            )
        listing = _git(
            ["log", "--first-parent", "--reverse", "--format=%H%x09%s", f"{good_commit}..{bad_commit}"],
            cwd=repo,
            env=env,
            log=log,
            timeout=GIT_TIMEOUT,
        )
    return [
        (line.split("\t", 1)[0], line.split("\t", 1)[1] if "\t" in line else "")
        for line in listing.splitlines()
        if line.strip()
    ]
