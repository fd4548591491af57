"""Carried fixes: patches on llama.cpp as data (``patches/patches.yaml``), applied to a copy of the tree.

A release engineer ships a fix before upstream merges it, sees which fixes a release carries, and drops each one when
upstream has it. Each entry of the series names its patch file, the upstream PR or issue, one line of why, which
trees it is for (build numbers, OS, backend) and how to tell that upstream has it (the first build that has it, the
commit, and/or a text the fixed file contains). The tree a build compiles is never the user's: the series is applied
to ``<cache>/llama.cpp-patched/<slot>``, a mirror of the pristine tree made of hard links (copies across file
systems) in which only the patched files are real files. The mirror keeps its path from build to build, and a file is
rewritten only when its content changes, so ninja and ccache see only what really changed.

Outcomes per patch: ``applied``; ``upstream`` (skipped: the tree already has the fix, with a note saying since when);
``not for this tree`` (outside the entry's build range, OS or backend). A patch that neither applies nor is already
in the tree fails the build with its id and the file it failed on (:class:`PatchError`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rockbuild.core.data import YDict, YList, check_keys, data_path, expect_type, load_yaml, where
from rockbuild.core.errors import BuildError, ConfigError, ProcessError
from rockbuild.core.record import Record, json_form
from rockbuild.core.records import PatchEntry, PatchSet, PatchStatus
from rockbuild.process import child_env, run

SERIES_FILE = "patches.yaml"
APPLIED: Literal["applied"] = "applied"
UPSTREAM: Literal["upstream"] = "upstream"
NOT_FOR_TREE: Literal["not for this tree"] = "not for this tree"
NO_PATCHES = "none"  # the digest of an empty series (or --no-patches)

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_BUILD_RE = re.compile(r"^b?([0-9]+)$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{7,40}$")
_DIFF_PATH_RE = re.compile(r"^\+\+\+ (?:b/)?(\S+)")
_OLD_PATH_RE = re.compile(r"^--- (?:a/)?(\S+)")
# git apply's words for the file it stopped on
_FAILED_FILE_RES = (
    re.compile(r"^error: patch failed: (.+?):\d+$"),
    re.compile(r"^error: (.+?): does not exist in index$"),
    re.compile(r"^error: (.+?): No such file or directory$"),
    re.compile(r"^error: (.+?): patch does not apply$"),
    re.compile(r"^error: (.+?): already exists in working directory$"),
)
GIT_APPLY_TIMEOUT = 120.0


class PatchError(BuildError):
    """A carried patch does not apply to the tree (and the tree does not already have it)."""


def patch_error(patch_id: str, file: str, tree: str) -> PatchError:
    return PatchError(
        f"patch {patch_id} does not apply to {file} of {tree}",
        hint=f"refresh it against this tree, or drop it from patches/{SERIES_FILE} if upstream has the fix; "
        "`--no-patches` builds the pristine tree",
    )


# ---------------------------------------------------------------------------------------------------------------------
# The series (data)


# a llama.cpp build number: 11312 in Python, "b11312" in JSON
_BUILD = json_form(
    str | None,
    lambda text: int(text.removeprefix("b")) if text is not None else None,
    lambda number: f"b{number}" if number is not None else None,
)


@dataclass(frozen=True)
class Upstream(Record):
    """How to tell that the tree already has a patch's fix (a record: the patch series' ``upstream``)."""

    build: int | None = field(default=None, metadata=_BUILD)  # the first llama.cpp build (bNNNN) that has it
    commit: str | None = None  # the upstream commit that brought it
    file: str | None = None  # with ``contains``: the fixed file holds this text
    contains: str | None = None

    def since(self) -> str:
        """'since b12345 (commit abc1234)', or '' when the series does not say."""
        parts = [f"b{self.build}"] if self.build is not None else []
        if self.commit:
            parts.append(f"commit {self.commit[:12]}")
        if not parts:
            return ""
        return f"since {parts[0]}" + (f" ({parts[1]})" if len(parts) > 1 else "")


@dataclass(frozen=True)
class Patch:
    """One carried fix: its file and what the series says of it."""

    id: str
    path: Path
    url: str
    why: str
    see: tuple[str, ...] = ()
    from_build: int | None = None
    until_build: int | None = None  # the last build it is for
    os: tuple[str, ...] = ()  # empty: every OS
    backends: tuple[str, ...] = ()  # empty: every backend
    upstream: Upstream = field(default_factory=Upstream)

    @property
    def data(self) -> bytes:
        return self.path.read_bytes()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def files(self) -> tuple[str, ...]:
        """The tree's files the patch changes (its ``+++``/``---`` paths)."""
        return patch_files(self.data.decode("utf-8", errors="replace"))

    def outcome(self, status: PatchStatus, note: str = "") -> PatchEntry:
        return PatchEntry(
            id=self.id, url=self.url, why=self.why, status=status, note=note, files=self.files, sha256=self.sha256
        )

    def for_tree(self, build_number: int | None, os_name: str | None, backend: str | None) -> str | None:
        """Why the patch is not for this tree, or None when it is (an unknown build number is in every range)."""
        if build_number is not None:
            if self.from_build is not None and build_number < self.from_build:
                return f"for b{self.from_build} and later; this tree is b{build_number}"
            if self.until_build is not None and build_number > self.until_build:
                return f"for b{self.until_build} and earlier; this tree is b{build_number}"
        if self.os and os_name and os_name not in self.os:
            return f"for {', '.join(self.os)} only, not {os_name}"
        if self.backends and backend and backend not in self.backends:
            return f"for the {', '.join(self.backends)} backend(s) only, not {backend}"
        return None


@dataclass(frozen=True)
class PatchSeries:
    """The patches a build carries, in the order they are applied."""

    patches: tuple[Patch, ...] = ()
    path: Path | None = None

    @property
    def digest(self) -> str:
        """What identifies the series: each patch's id, file content and applicability, in order. It joins the
        source's cache keys and the night's "unchanged" decision; ``none`` for no patches."""
        if not self.patches:
            return NO_PATCHES
        h = hashlib.sha256()
        for p in self.patches:
            h.update(
                f"{p.id}\0{p.sha256}\0{p.from_build}\0{p.until_build}\0{','.join(p.os)}\0"
                f"{','.join(p.backends)}\0{p.upstream.build}\0{p.upstream.file}\0{p.upstream.contains}\n".encode()
            )
        return h.hexdigest()[:16]


def patch_files(text: str) -> tuple[str, ...]:
    """The files a unified diff changes, in order (a deleted file by its old name)."""
    files: list[str] = []
    old: str | None = None
    for line in text.splitlines():
        if m := _OLD_PATH_RE.match(line):
            old = m.group(1)
        elif m := _DIFF_PATH_RE.match(line):
            name = m.group(1) if m.group(1) != "/dev/null" else old
            if name and name != "/dev/null" and name not in files:
                files.append(name)
    return tuple(files)


def _build_value(path: Path, node: YDict, key: str) -> int | None:
    value = node.get(key)
    if value is None:
        return None
    m = _BUILD_RE.match(str(value).strip())
    if not m or isinstance(value, bool):
        raise ConfigError(f"{where(path, node, key)}: {key} must be a llama.cpp build like b7000, not {value!r}")
    return int(m.group(1))


def _strings(path: Path, node: YDict, key: str, what: str) -> tuple[str, ...]:
    value = node.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    expect_type(path, node, key, value, (list, YList), what)
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"{where(path, value, i)}: {what} must hold non-empty strings, not {item!r}")
    return tuple(v.strip() for v in value)


def _text(path: Path, node: YDict, key: str, what: str, *, required: bool = True) -> str | None:
    value = node.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{where(path, node, key if key in node else None)}: {what} ({key}) must be a non-empty "
            f"string{'' if key in node else ', and it is missing'}"
        )
    return " ".join(value.split())


_PATCH_KEYS = ("id", "file", "url", "why", "see", "applies_to", "upstream")
_APPLIES_KEYS = ("from", "until", "os", "backends")
_UPSTREAM_KEYS = ("build", "commit", "file", "contains")


def parse_patch_series(data: Any, path: Path) -> PatchSeries:
    """The series from ``patches.yaml``'s parsed YAML; every mistake is a ConfigError naming ``file:line``."""
    if data is None:
        return PatchSeries((), path)
    expect_type(path, None, None, data, (dict, YDict), "the patch series file")
    check_keys(path, data, ("patches",), "the patch series file")
    items = data.get("patches") or []
    expect_type(path, data, "patches", items, (list, YList), "patches")
    patches: list[Patch] = []
    seen: set[str] = set()
    for i, node in enumerate(items):
        expect_type(path, items, i, node, (dict, YDict), f"patches[{i}]")
        check_keys(path, node, _PATCH_KEYS, f"patch {node.get('id', i)!r}")
        pid = _text(path, node, "id", "a patch's id") or ""
        if not _ID_RE.match(pid):
            raise ConfigError(
                f"{where(path, node, 'id')}: patch id {pid!r} must be lower-case letters, digits, '.', '_' or '-'"
            )
        if pid in seen:
            raise ConfigError(f"{where(path, node, 'id')}: patch id {pid!r} is listed twice")
        seen.add(pid)
        file = _text(path, node, "file", f"patch {pid}'s file") or ""
        patch_path = (path.parent / file).resolve()
        if not patch_path.is_file():
            raise ConfigError(
                f"{where(path, node, 'file')}: patch {pid}'s file {file} does not exist (next to {path.name})"
            )
        if not patch_files(patch_path.read_text(encoding="utf-8", errors="replace")):
            raise ConfigError(f"{where(path, node, 'file')}: {file} is not a unified diff (no '+++ b/...' line)")
        url = _text(path, node, "url", f"patch {pid}'s upstream link") or ""
        if not url.startswith(("https://", "http://")):
            raise ConfigError(
                f"{where(path, node, 'url')}: patch {pid}'s url must be a link to the upstream PR or issue, not {url!r}"
            )
        applies = node.get("applies_to") or YDict()
        expect_type(path, node, "applies_to", applies, (dict, YDict), f"patch {pid}'s applies_to")
        check_keys(path, applies, _APPLIES_KEYS, f"patch {pid}'s applies_to")
        up = node.get("upstream") or YDict()
        expect_type(path, node, "upstream", up, (dict, YDict), f"patch {pid}'s upstream")
        check_keys(path, up, _UPSTREAM_KEYS, f"patch {pid}'s upstream")
        commit = _text(path, up, "commit", f"patch {pid}'s upstream commit", required=False)
        if commit is not None and not _COMMIT_RE.match(commit):
            raise ConfigError(f"{where(path, up, 'commit')}: {commit!r} is not a git commit")
        up_file = _text(path, up, "file", f"patch {pid}'s upstream file", required=False)
        contains = _text(path, up, "contains", f"patch {pid}'s upstream text", required=False)
        if (up_file is None) != (contains is None):
            raise ConfigError(
                f"{where(path, node, 'upstream')}: patch {pid}'s upstream check needs both file and "
                "contains (the fixed file and a text only the fixed file holds)"
            )
        from_build, until_build = _build_value(path, applies, "from"), _build_value(path, applies, "until")
        if from_build is not None and until_build is not None and until_build < from_build:
            raise ConfigError(f"{where(path, applies, 'until')}: until b{until_build} is before from b{from_build}")
        patches.append(
            Patch(
                id=pid,
                path=patch_path,
                url=url,
                why=_text(path, node, "why", f"patch {pid}'s reason") or "",
                see=_strings(path, node, "see", f"patch {pid}'s see"),
                from_build=from_build,
                until_build=until_build,
                os=_strings(path, applies, "os", f"patch {pid}'s os"),
                backends=_strings(path, applies, "backends", f"patch {pid}'s backends"),
                upstream=Upstream(_build_value(path, up, "build"), commit, up_file, contains),
            )
        )
    return PatchSeries(tuple(patches), path)


def load_patch_series(path: Path | None = None) -> PatchSeries:
    """The series in ``path``, by default the one rockbuild ships (``patches/patches.yaml``)."""
    path = path or data_path("patches", SERIES_FILE)
    return parse_patch_series(load_yaml(path), path)


# ---------------------------------------------------------------------------------------------------------------------
# Applying a series to a copy of a tree


def _git_apply_env(staging: Path) -> dict[str, str]:
    # a staging folder inside someone's git checkout must not make git apply paths relative to that repository
    return child_env({"GIT_CEILING_DIRECTORIES": str(staging.parent), "GIT_TERMINAL_PROMPT": "0"})


def _git_apply(staging: Path, patch: Path, *extra: str, log: Path | None) -> tuple[bool, str]:
    try:
        result = run(
            ["git", "apply", "--whitespace=nowarn", *extra, str(patch)],
            cwd=staging,
            env=_git_apply_env(staging),
            log=log,
            timeout=GIT_APPLY_TIMEOUT,
            check=False,
        )
    except ProcessError as exc:  # git itself is missing or hung
        raise BuildError(
            f"cannot run git apply for {patch.name}: {exc.message}",
            hint="carried patches need git; `--no-patches` builds the pristine tree",
        ) from None
    return result.returncode == 0, result.output


def failed_file(output: str, files: Sequence[str]) -> str:
    """The file git apply stopped on, from its errors (else the patch's first file)."""
    for line in output.splitlines():
        for pattern in _FAILED_FILE_RES:
            if m := pattern.match(line.strip()):
                return m.group(1)
    return files[0] if files else "?"


def _upstream_has(patch: Patch, tree: Path, build_number: int | None) -> str | None:
    """The note when the series says the tree already has the fix, else None."""
    up = patch.upstream
    since = up.since()
    if up.build is not None and build_number is not None and build_number >= up.build:
        return f"upstream has it {since}; this tree is b{build_number}"
    if up.file and up.contains:
        try:
            text = (tree / up.file).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        if up.contains in " ".join(text.split()):
            return f"upstream has it{' ' + since if since else ''}: {up.file} holds the fix"
    return None


def _tree_files(root: Path) -> dict[str, Path]:
    """Every file and symlink of a llama.cpp tree by relative path, without .git and build folders (a folder with a
    CMakeCache.txt: a user's checkout may hold its own build)."""
    found: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        keep = []
        for d in dirnames:
            full = here / d
            if d == ".git" or (full / "CMakeCache.txt").exists():
                continue
            if full.is_symlink():
                filenames.append(d)
                continue
            keep.append(d)
        dirnames[:] = sorted(keep)
        for f in filenames:
            if f == ".git":
                continue
            full = here / f
            found[full.relative_to(root).as_posix()] = full
    return found


def _same_file(a: Path, b: Path) -> bool:
    try:
        sa, sb = a.lstat(), b.lstat()
    except OSError:
        return False
    if stat.S_ISLNK(sa.st_mode) or stat.S_ISLNK(sb.st_mode):
        return stat.S_ISLNK(sa.st_mode) and stat.S_ISLNK(sb.st_mode) and os.readlink(a) == os.readlink(b)
    if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
        return True
    # a copy (another file system) is current when size and mtime match (copy2 keeps the mtime); a file restored
    # from a patched one (see _restore_one) has its own mtime and the pristine bytes
    if sa.st_size != sb.st_size:
        return False
    return sa.st_mtime_ns == sb.st_mtime_ns or a.read_bytes() == b.read_bytes()


def _beside(dst: Path) -> Path:
    """A free temporary name next to ``dst``: each file of the mirror is made there, then renamed over ``dst``
    (never written through, so a hard link to the pristine tree is replaced, not changed)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.rockbuild-tmp")
    if tmp.exists() or tmp.is_symlink():
        tmp.unlink()
    return tmp


def _mirror_one(src: Path, dst: Path) -> None:
    tmp = _beside(dst)
    if src.is_symlink():
        os.symlink(os.readlink(src), tmp)
    else:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def _restore_one(src: Path, dst: Path) -> None:
    """``dst`` (a file that was patched, or an older copy) becomes a copy of ``src`` with the mtime of now: a hard
    link would bring back the pristine file's older mtime, and ninja, which rebuilds what is *newer* than its
    output, would keep the objects compiled from the patched file (a series that drops a patch, a mutant build)."""
    tmp = _beside(dst)
    shutil.copyfile(src, tmp)
    with contextlib.suppress(OSError):
        shutil.copymode(src, tmp)
    os.replace(tmp, dst)


def _write_if_changed(content: bytes, src: Path | None, dst: Path) -> bool:
    """Write ``content`` at ``dst`` unless it is there (``src``: the pristine file it replaces, None for a file a
    patch adds). The mtime of a rewritten file is now; an unchanged one keeps its own, so ninja rebuilds only what
    changed."""
    try:
        linked = src is not None and os.path.samefile(src, dst)
        if not dst.is_symlink() and not linked and dst.read_bytes() == content:
            return False
    except OSError:
        pass
    tmp = _beside(dst)
    tmp.write_bytes(content)
    if src is not None:
        with contextlib.suppress(OSError):
            shutil.copymode(src, tmp)
    os.replace(tmp, dst)
    return True


# what the build's own steps write into the tree it compiles: the mirror leaves it to them (the web UI step embeds
# llama-server's chat page there, or removes a stale one; rewriting it every time would re-embed it every build)
BUILD_OWNED = ("tools/ui/dist/",)


def _owned(rel: str) -> bool:
    return any(rel.startswith(prefix) for prefix in BUILD_OWNED)


def mirror_tree(pristine: Path, dest: Path, overrides: Mapping[str, bytes]) -> tuple[str, ...]:
    """Make ``dest`` the pristine tree with ``overrides`` (relative path -> content) in place of those files:
    hard links where possible; files no longer in the tree removed (what the build writes there, BUILD_OWNED, is
    left alone). Returns the overridden files written anew."""
    pristine, dest = pristine.resolve(), Path(dest)
    if dest.resolve() == pristine or dest.resolve().is_relative_to(pristine):
        raise BuildError(
            f"the patched copy {dest} would be inside the llama.cpp tree {pristine}", hint="use another --cache folder"
        )
    dest.mkdir(parents=True, exist_ok=True)
    wanted = _tree_files(pristine)
    for rel, current in _tree_files(dest).items():
        if rel not in wanted and rel not in overrides and not _owned(rel):
            current.unlink()
    for rel, src in wanted.items():
        dst = dest / rel
        if rel in overrides or (_owned(rel) and dst.parent.exists()):
            continue
        if not _same_file(src, dst):
            restore = dst.is_file() and not dst.is_symlink() and not src.is_symlink()
            (_restore_one if restore else _mirror_one)(src, dst)
    # the patched files, in the tree's order, then the files a patch adds
    patched = [*(rel for rel in wanted if rel in overrides), *(rel for rel in overrides if rel not in wanted)]
    rewritten = [rel for rel in patched if _write_if_changed(overrides[rel], wanted.get(rel), dest / rel)]
    for dirpath, dirnames, filenames in os.walk(dest, topdown=False):
        if not dirnames and not filenames and Path(dirpath) != dest:
            with contextlib.suppress(OSError):
                Path(dirpath).rmdir()
    return tuple(rewritten)


def apply_patch_series(
    series: PatchSeries,
    tree: Path,
    dest: Path,
    *,
    build_number: int | None,
    tree_label: str,
    os_name: str | None = None,
    backend: str | None = None,
    log: Path | None = None,
) -> PatchSet:
    """Apply ``series`` to a mirror of ``tree`` at ``dest`` (``tree`` is never written).

    With nothing to apply the pristine tree is built as it is (no mirror). ``tree_label`` names the tree in errors
    (``llama.cpp b11312 (0c1e57098bba)``).
    """
    tree = Path(tree).resolve()
    outcomes: list[PatchEntry] = []
    todo: list[Patch] = []
    for patch in series.patches:
        if (why_not := patch.for_tree(build_number, os_name, backend)) is not None:
            outcomes.append(patch.outcome(NOT_FOR_TREE, why_not))
        elif (note := _upstream_has(patch, tree, build_number)) is not None:
            outcomes.append(patch.outcome(UPSTREAM, note))
        else:
            todo.append(patch)
            outcomes.append(patch.outcome(APPLIED))
    if not todo:
        return PatchSet(digest=series.digest, tree=tree, pristine=tree, patches=tuple(outcomes))

    overrides: dict[str, bytes] = {}
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".patching-", dir=dest.parent) as tmp:
        staging = Path(tmp) / "tree"
        staging.mkdir()
        touched = list(dict.fromkeys(f for p in todo for f in p.files))
        for rel in touched:
            src = tree / rel
            if src.is_file():
                (staging / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, staging / rel)
        for patch in todo:
            ok, output = _git_apply(staging, patch.path, "--check", log=log)
            if not ok:
                if _git_apply(staging, patch.path, "--reverse", "--check", log=log)[0]:
                    since = patch.upstream.since()
                    i = next(i for i, o in enumerate(outcomes) if o.id == patch.id)
                    outcomes[i] = replace(
                        outcomes[i],
                        status=UPSTREAM,
                        note="the tree already has this change (the patch reverse-applies)"
                        + (f"; upstream has it {since}" if since else ""),
                    )
                    continue
                raise patch_error(patch.id, failed_file(output, patch.files), tree_label)
            ok, output = _git_apply(staging, patch.path, log=log)
            if not ok:
                raise patch_error(patch.id, failed_file(output, patch.files), tree_label)
        deleted = []
        for rel in touched:
            staged, pristine = staging / rel, tree / rel
            if not staged.is_file():
                deleted.append(rel)
            elif not pristine.is_file() or staged.read_bytes() != pristine.read_bytes():
                overrides[rel] = staged.read_bytes()  # only what the patches changed: the rest stays a hard link
    rewritten = mirror_tree(tree, dest, overrides)
    for rel in deleted:  # a patch that deletes a file
        if (dest / rel).exists():
            (dest / rel).unlink()
    if not any(o.status == APPLIED for o in outcomes):
        return PatchSet(digest=series.digest, tree=tree, pristine=tree, patches=tuple(outcomes))
    return PatchSet(
        digest=series.digest, tree=dest.resolve(), pristine=tree, patches=tuple(outcomes), rewritten=rewritten
    )


def patch_summary(outcomes: Iterable[PatchEntry]) -> str:
    """One line for logs: 'applied amx-tile-config, x86-os-state; skipped: foo (upstream has it since b12000)'."""
    outcomes = list(outcomes)
    applied = [o.id for o in outcomes if o.status == APPLIED]
    skipped = [f"{o.id} ({o.note})" for o in outcomes if o.status != APPLIED]
    parts = [f"applied {', '.join(applied)}" if applied else "none applied"]
    if skipped:
        parts.append(f"skipped: {'; '.join(skipped)}")
    return "; ".join(parts)
