"""llama-server's web UI (its chat page): built once per llama.cpp tree with npm, then embedded as the tree's
prebuilt UI.

llama.cpp embeds the files of ``tools/ui/dist`` into llama-server when that folder holds a built UI (the first of
its three ways; the others are an npm build inside CMake and a download from Hugging Face, which rockbuild turns off
with ``LLAMA_USE_PREBUILT_UI=OFF``). This module makes that folder:

1. ``tools/ui`` is staged into a work folder; ``npm ci`` installs ``package-lock.json`` there once per lock file
   (``<cache>/node_modules-<sha256 of the lock>``, moved in and out, never shared by two builds at once);
2. ``npm run build`` writes the dist, kept as ``<cache>/dist-<key>`` where the key hashes the files of ``tools/ui``
   and the build number (the UI shows it): a second build of the same tree runs no npm at all;
3. the dist is checked for the files llama.cpp's ``ui_validate_assets`` requires (else CMake stops with a
   FATAL_ERROR) and copied into the tree's ``tools/ui/dist``, replacing whatever was there.

No npm, ``--offline`` with nothing cached, or npm failing is never a failed build: llama-server is then built
without its UI and the :class:`WebUi` record says why (build.json, manifest.json and the release notes repeat it).
``tools/ui/dist`` belongs to this step: a build without a web UI removes a stale one, so what the record says is what
llama-server serves.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from filelock import FileLock

from rockbuild import console
from rockbuild.core.errors import BuildError, ProcessError, UsageError
from rockbuild.core.record import INLINE, Record
from rockbuild.core.records import WebUi
from rockbuild.process import INHERITED, STREAMED, child_env, run

UI_DIR = Path("tools") / "ui"
DIST = "dist"
RECIPE = 1  # part of the dist's cache key: raise it when the way a dist is made changes

# What llama.cpp's scripts/ui-assets.cmake (ui_validate_assets) requires of a dist: exact names, then patterns.
REQUIRED_NAMES = ("index.html", "manifest.webmanifest", "sw.js", "build.json", "version.json")
REQUIRED_PATTERNS = (
    ("bundle[hash].js", re.compile(r"^bundle.*\.js$")),
    ("bundle[hash].css", re.compile(r"^bundle.*\.css$")),
    ("workbox[hash].js", re.compile(r"^workbox.*\.js$")),
)

# Not part of the UI's sources: outputs and installs (the cache key and the staging leave them out).
_NOT_SOURCES = frozenset({DIST, "node_modules", ".svelte-kit", "build", "dev-dist", "test-results", "storybook-static"})
# npm reads its registry and proxy from these; nothing else of ours reaches it (no token: child_env drops them)
NPM_INHERITED = (*INHERITED, "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "NPM_CONFIG_REGISTRY")
KEEP_NODE_MODULES = 2  # installs kept (one per package-lock.json): this llama.cpp's and the one before
KEEP_DISTS = 8


@dataclass(frozen=True)
class WebUiOptions:
    """How a build gets its web UI: built (default), a dist given (``--web-ui DIR``) or none (``--no-web-ui``)."""

    cache: Path  # <rockbuild cache>/webui
    enabled: bool = True
    dist: Path | None = None  # a prebuilt dist (a CI leg built it once for every build leg)
    offline: bool = False  # no npm ci (it downloads); a cached dist or node_modules still serve
    env: Mapping[str, str] | None = field(default=None, repr=False)  # what npm's environment is picked from
    timeout: float = 1800.0


def describe(web_ui: WebUi) -> str:
    """One line on a build's web UI, for the console."""
    if not web_ui.available:
        return f"web UI: none ({web_ui.reason})"
    size = console.human_bytes(web_ui.bytes or 0)
    where = f" -> {web_ui.embedded}" if web_ui.embedded else ""
    return (
        f"web UI: {web_ui.status}, {web_ui.files} files, {size}, sha256 {str(web_ui.sha256)[:12]}..., "
        f"{web_ui.seconds:.1f}s{where}"
    )


# ---------------------------------------------------------------------------------------------------------------------
# Dists: what one must hold, what it is


def _files(root: Path, skip: Iterable[str] = ()) -> list[Path]:
    """Every file under ``root`` (following no link out of it), sorted by relative name; top-level ``skip`` left out."""
    skipped = set(skip)
    out: list[Path] = []
    for dirpath, dirnames, names in os.walk(root):
        here = Path(dirpath)
        if here == root:
            dirnames[:] = [d for d in dirnames if d not in skipped]
        dirnames.sort()
        out.extend(here / n for n in names if (here / n).is_file())
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def dist_problems(dist: Path) -> list[str]:
    """What ``dist`` lacks of the files llama.cpp requires of a built UI (empty: none); an empty file counts as
    missing (CMake refuses to embed one)."""
    if not dist.is_dir():
        return [f"{dist} is not a folder"]
    names = {p.name for p in _files(dist) if p.stat().st_size > 0}
    missing = [n for n in REQUIRED_NAMES if n not in names]
    missing += [label for label, pattern in REQUIRED_PATTERNS if not any(pattern.match(n) for n in names)]
    return missing


def dist_digest(dist: Path) -> tuple[str, int, int]:
    """(sha256, file count, bytes) of a dist: the hash goes over each file's relative name and content, sorted."""
    digest = hashlib.sha256()
    count = size = 0
    for path in _files(dist):
        data = path.read_bytes()
        digest.update(path.relative_to(dist).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(data).digest())
        count, size = count + 1, size + len(data)
    return digest.hexdigest(), count, size


def lock_hash(ui_dir: Path) -> str:
    return hashlib.sha256((ui_dir / "package-lock.json").read_bytes()).hexdigest()


def source_key(ui_dir: Path, build_number: str) -> str:
    """The dist's cache key: every source file of ``tools/ui`` (names and contents), the build number, the recipe."""
    digest = hashlib.sha256(f"rockbuild-webui {RECIPE}\n{build_number}\n".encode())
    for path in _files(ui_dir, skip=_NOT_SOURCES):
        digest.update(path.relative_to(ui_dir).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------------------------
# The npm build


def npm_env(base: Mapping[str, str] | None, cache: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """npm's environment: the allowlist plus its proxy and registry, npm's own cache under ours, no telemetry, no
    browser downloads (the UI's test tools), never a token. Never NODE_ENV=production either: the UI's packages are
    all devDependencies, which npm ci would then leave out."""
    return child_env(
        {
            "npm_config_cache": str(cache / "npm-cache"),
            "npm_config_update_notifier": "false",
            "npm_config_fund": "false",
            "npm_config_audit": "false",
            "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1",
            **(extra or {}),
        },
        inherit=NPM_INHERITED,
        base=base,
    )


def _version(program: str, env: Mapping[str, str]) -> str | None:
    try:
        result = run([program, "--version"], env=env, timeout=60, check=False)
    except ProcessError:
        return None
    lines = [line.strip() for line in result.output.splitlines() if line.strip()]
    return lines[0] if result.returncode == 0 and lines else None


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


def _prune(cache: Path, prefix: str, keep: int) -> None:
    """Keep the ``keep`` most recently used ``prefix*`` folders of the cache."""
    found = sorted((p for p in cache.glob(f"{prefix}*") if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in found[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def _stage(ui_dir: Path, work: Path) -> None:
    """``tools/ui`` without its outputs and installs, copied to ``work`` (npm writes beside its sources)."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(
        ui_dir,
        work,
        symlinks=True,
        ignore=lambda d, names: [n for n in names if Path(d) == ui_dir and n in _NOT_SOURCES],
    )


def _none(reason: str, start: float, **facts: Any) -> WebUi:
    return WebUi(status="none", reason=reason, seconds=round(time.monotonic() - start, 3), **facts)


def build_dist(
    tree: Path, *, build_number: int | None, options: WebUiOptions, log: Path | None = None
) -> tuple[WebUi, Path | None]:
    """The web UI of the llama.cpp ``tree``: the cached dist of its ``tools/ui``, else one npm builds now.

    Returns the record and the dist folder (None with status ``none``: no tools/ui, no npm, offline with nothing
    cached, npm failing, or a dist without the files llama.cpp requires)."""
    start = time.monotonic()
    ui_dir = Path(tree) / UI_DIR
    if not (ui_dir / "package.json").is_file() or not (ui_dir / "package-lock.json").is_file():
        return _none(
            f"{UI_DIR.as_posix()} has no package.json and package-lock.json (a llama.cpp before the UI moved there?)",
            start,
        ), None
    number = str(build_number) if build_number is not None else "0"
    cache = Path(options.cache)
    cache.mkdir(parents=True, exist_ok=True)
    key = source_key(ui_dir, number)
    facts: dict[str, Any] = {"key": key, "build_number": number}
    dist = cache / f"dist-{key[:32]}"
    if dist.is_dir() and not dist_problems(dist):
        _touch(dist)
        return WebUi(status="cached", dist=str(dist), seconds=round(time.monotonic() - start, 3), **facts), dist

    env = npm_env(options.env, cache)
    npm = shutil.which("npm", path=env.get("PATH") or env.get("Path") or "")
    if npm is None:
        return _none("npm is not installed (not on PATH)", start, **facts), None
    facts.update(npm=_version(npm, env), node=_version("node", env))
    lock = lock_hash(ui_dir)
    installed = cache / f"node_modules-{lock[:32]}"
    if options.offline and not installed.is_dir():
        return _none("--offline and no cached web UI or node_modules for this llama.cpp", start, **facts), None

    with FileLock(str(cache / f".lock-{lock[:32]}")):
        if dist.is_dir() and not dist_problems(dist):  # another build made it while we waited
            return WebUi(status="cached", dist=str(dist), seconds=round(time.monotonic() - start, 3), **facts), dist
        work = cache / f"work-{key[:16]}"
        out = work / DIST
        _stage(ui_dir, work)
        modules_ok = installed.is_dir()  # only a complete install goes back to the cache
        try:
            if modules_ok:
                installed.rename(work / "node_modules")
            else:
                console.info(f"    npm ci in {work} (node_modules cached as {installed.name})")
                t0 = time.monotonic()
                try:
                    run(
                        [npm, "ci", "--no-audit", "--no-fund"],
                        cwd=work,
                        env=env,
                        log=log,
                        timeout=options.timeout,
                        output=STREAMED,
                    )
                except ProcessError as exc:
                    return _none(f"npm ci failed: {exc.message}", start, **facts), None
                facts["npm_ci_seconds"] = round(time.monotonic() - t0, 3)
                modules_ok = True
            version = f"b{number}" if number != "0" else ""
            build_env = npm_env(
                options.env,
                cache,
                {"LLAMA_UI_OUT_DIR": str(out), "LLAMA_UI_VERSION": version, "LLAMA_BUILD_NUMBER": number},
            )
            console.info(f"    npm run build (LLAMA_UI_VERSION={version or 'unset'}, LLAMA_BUILD_NUMBER={number})")
            t0 = time.monotonic()
            try:
                run([npm, "run", "build"], cwd=work, env=build_env, log=log, timeout=options.timeout, output=STREAMED)
            except ProcessError as exc:
                return _none(f"npm run build failed: {exc.message}", start, **facts), None
            facts["build_seconds"] = round(time.monotonic() - t0, 3)
            missing = dist_problems(out)
            if missing:
                return _none(f"npm run build made no usable dist (missing {', '.join(missing)})", start, **facts), None
            shutil.rmtree(dist, ignore_errors=True)
            out.rename(dist)
        finally:
            if modules_ok and (work / "node_modules").is_dir() and not installed.exists():
                (work / "node_modules").rename(installed)
            shutil.rmtree(work, ignore_errors=True)
        _touch(installed)
        _prune(cache, "node_modules-", KEEP_NODE_MODULES)
        _prune(cache, "dist-", KEEP_DISTS)
    return WebUi(status="built", dist=str(dist), seconds=round(time.monotonic() - start, 3), **facts), dist


# ---------------------------------------------------------------------------------------------------------------------
# Into the tree


def embed_dist(dist: Path, tree: Path) -> tuple[Path, bool]:
    """Copy ``dist`` to the tree's ``tools/ui/dist`` (llama.cpp's prebuilt UI), replacing what was there; the target
    and whether another dist was replaced. The same files already there are left as they are."""
    target = Path(tree) / UI_DIR / DIST
    if target.resolve() == Path(dist).resolve():
        return target, False
    if target.is_dir() and dist_digest(target)[0] == dist_digest(dist)[0]:
        return target, False
    replaced = target.exists()
    _replace_folder(dist, target)
    return target, replaced


def _replace_folder(source: Path, target: Path) -> None:
    """``target`` becomes a copy of ``source``: copied beside it first, so a failed copy leaves the old one whole."""
    staging = target.with_name(f".{target.name}.rockbuild-new")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)
    staging.rename(target)


def remove_embedded(tree: Path) -> bool:
    """Remove the tree's ``tools/ui/dist`` (a stale UI must not be embedded by a build that has none); True when
    there was one."""
    target = Path(tree) / UI_DIR / DIST
    if target.is_symlink() or target.is_file():
        target.unlink()
        return True
    if target.is_dir():
        shutil.rmtree(target)
        return True
    return False


def provide_web_ui(tree: Path, *, build_number: int | None, options: WebUiOptions, log: Path | None = None) -> WebUi:
    """The web UI of a build of ``tree``, embedded in it (see the module docstring). Never fails for want of npm
    (a warning and status ``none``); a ``--web-ui DIR`` that is not a built UI is a UsageError."""
    start = time.monotonic()
    if options.dist is not None:
        given = Path(options.dist).absolute()
        missing = dist_problems(given)
        if missing:
            raise UsageError(
                f"--web-ui {options.dist} is not a built llama.cpp web UI (missing {', '.join(missing)})",
                hint="pass the folder `rockbuild webui --out DIR` made",
            )
        record = WebUi(status="prebuilt", dist=str(given), build_number=str(build_number) if build_number else None)
        dist: Path | None = given
    elif not options.enabled:
        record, dist = WebUi(status="none", reason="--no-web-ui"), None
    else:
        record, dist = build_dist(tree, build_number=build_number, options=options, log=log)
    if dist is None:
        removed = remove_embedded(tree)
        if record.reason != "--no-web-ui":
            console.warn(f"llama-server is built without its web UI: {record.reason}")
        return _with(record, start, replaced=removed)
    sha256, count, size = dist_digest(dist)
    target, replaced = embed_dist(dist, tree)
    done = _with(record, start, sha256=sha256, files=count, bytes=size, embedded=str(target), replaced=replaced)
    console.info(f"    {describe(done)}")
    return done


def _with(record: WebUi, start: float, **changes: Any) -> WebUi:
    return replace(record, seconds=round(time.monotonic() - start, 3), **changes)


# ---------------------------------------------------------------------------------------------------------------------
# A dist for other builds (rockbuild webui: the workflow builds it once and hands it to every build leg)


@dataclass(frozen=True)
class Exported(Record):
    """``rockbuild webui``'s result: the web UI of a tree, copied to ``out`` for ``rockbuild build --web-ui`` (a
    record: its ``--json``, the two folders, then the web UI's keys)."""

    tree: Path
    out: Path
    web_ui: WebUi = field(metadata=INLINE)

    def render(self) -> str:
        return f"{describe(self.web_ui)}\n  dist: {self.out} (rockbuild build --web-ui {self.out})"


def export_web_ui(
    tree: Path, out: Path, *, build_number: int | None, options: WebUiOptions, log: Path | None = None
) -> Exported:
    """Build (or take from the cache) the web UI of ``tree`` and copy its dist to ``out``; a BuildError when npm
    cannot make it (this command has no other result), a UsageError when ``out`` holds something else."""
    out = Path(out).absolute()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and dist_problems(out))):
        raise UsageError(f"{out} exists and is not a web UI dist; give a new folder")
    record, dist = build_dist(tree, build_number=build_number, options=options, log=log)
    if dist is None:
        raise BuildError(
            f"no web UI for {tree}: {record.reason}", hint=f"npm's output is in {log}" if log is not None else None
        )
    sha256, count, size = dist_digest(dist)
    _replace_folder(dist, out)
    return Exported(
        Path(tree), out, _with(record, time.monotonic() - record.seconds, sha256=sha256, files=count, bytes=size)
    )
