"""The build stage: provide ROCm -> llama.cpp source -> configure -> compile -> ``out/<job-id>/build.json``.

What differs between flavours (the ROCm root and its toolchain, or the host's compiler; the definitions; the
environment) comes from the job's backend (:mod:`rockbuild.backends`). Everything the build runs goes through
:func:`rockbuild.process.run` with an environment the backend computes (never the caller's whole environment, never a
token); all of it is appended to ``out/<job-id>/build.log``.
A re-run uses the same build directory, so it only recompiles what changed (and skips configure when the command and
environment are the ones the build directory was configured with).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rockbuild import __version__, console
from rockbuild.archive import read_marker
from rockbuild.core.data import write_json_atomic
from rockbuild.core.environment import Context
from rockbuild.core.errors import BuildError, BuildFailed, LayoutError, UsageError
from rockbuild.core.jobs import Job
from rockbuild.core.programs import OP_TEST_PROGRAM, ProgramList, Selection, load_programs
from rockbuild.core.record import Record
from rockbuild.core.records import (
    BUILD_SCHEMA,
    BuildErrorInfo,
    BuildPaths,
    BuildRecord,
    BuildRocm,
    InputsRocm,
    OpTestRecord,
    PatchSet,
    Tarball,
)
from rockbuild.jobfolder import JobFolder
from rockbuild.process import STREAMED, Output, ProcessError, first_line, log_tail, run
from rockbuild.rocm.fetch import fetch_rocm, job_groups, pinned_entry, stable_root
from rockbuild.rocm.layout import RocmLayout, detect_layout
from rockbuild.rocm.names import parse_tarball_name, tarball_filename

from . import common_part
from .backend import BuildBackend
from .cmake import (
    UnusedVariables,
    capture_msvc_environment,
    check_definitions,
    compile_command,
    configure_command,
    configured_targets,
    executable_targets,
    targets_command,
    tree_variables,
)
from .cross import cross_spec, provide_cross
from .patches import NO_PATCHES, PatchSeries, apply_patch_series, load_patch_series, patch_summary
from .shader_cache import SHADER_CACHE_FOLDER, log_counts, log_offset
from .shader_cache import disabled as shader_cache_disabled
from .shader_cache import size_mib as shader_cache_size
from .source import (
    DEFAULT_GIT_URL,
    FULL_COMMIT_RE,
    PATCHED_FOLDER,
    LlamaSource,
    cached_checkout,
    checkout_ref,
    clone_dir_for,
    describe_tree,
    normalize_build_number,
)
from .webui import WebUiOptions, provide_web_ui

if TYPE_CHECKING:
    from rockbuild.core.vocabulary import Backends, Toolchain

TAIL_LINES = 40
_CONFIGURE_STAMP = ".rockbuild-configure.json"
_ROCM_STAMP = ".rockbuild-rocm.json"  # which ROCm tree the folder's objects were compiled against

# Output lines that change what ships although the build succeeds: said once as a warning, recorded in build.json.
NOTICES: tuple[tuple[str, str], ...] = (
    (
        "HTTPS support disabled",
        "llama.cpp is built without HTTPS (OpenSSL not found): install the OpenSSL headers (libssl-dev) or build "
        "without --offline (BoringSSL)",
    ),
    ("OpenMP not found", "OpenMP was asked for but not found; the CPU backend runs without it"),
    ("ccache not found", "llama.cpp's CMake did not find ccache; rebuilds are not cached"),
    # LLAMA_USE_PREBUILT_UI=OFF (no download at build time) and no npm build: llama-server serves the API only
    (
        "UI: no assets available",
        "llama-server is built without its embedded web UI (no prebuilt UI assets in tools/ui/dist)",
    ),
)


class Notices:
    """Collects the :data:`NOTICES` a build's output triggers, warning once each."""

    def __init__(self, known: tuple[str, ...] = ()) -> None:
        self.messages: list[str] = list(known)

    def on_line(self, line: str) -> None:
        for needle, message in NOTICES:
            if needle in line and message not in self.messages:
                self.messages.append(message)
                console.warn(message)


@dataclass(frozen=True)
class BuildOptions:
    out_dir: Path = Path("out")
    rocm_dir: Path | None = None  # an existing ROCm root; else fetch the job's (or rocm_version's) tarball
    rocm_tarball: Any = None  # the tarball rocm_dir was extracted from (a night's fetch): build.json records it
    rocm_version: str | None = None
    source_dir: Path | None = None  # an existing llama.cpp tree; else clone `ref` (default: the job's llama_ref)
    ref: str | None = None
    git_url: str = DEFAULT_GIT_URL
    build_number: str | None = None  # known build number / commit of a tree git cannot tell (the pinned sdist)
    commit: str | None = None
    offline: bool = False  # system OpenSSL instead of BoringSSL's configure-time git clone
    jobs: int | None = None
    use_ccache: bool = True
    ccache_dir: Path | None = None  # default <cache>/ccache
    cache: Path | None = None  # default: the context's cache
    vcvars: Path | None = None  # Windows: vcvars64.bat (default: found with vswhere)
    cross: str | None = None  # a cross toolchain (rockbuild.llamacpp.cross: mingw-w64) for a job of another OS
    web_ui: bool = True  # --no-web-ui: llama-server without its chat page
    web_ui_dist: Path | None = None  # --web-ui DIR: a dist built once for every build leg (rockbuild webui)
    patches: bool = True  # --no-patches: the pristine tree, without the carried fixes of patches/patches.yaml
    patch_series: PatchSeries | None = None  # default: the series rockbuild ships
    # the job folder of this OS's common part (a build of the same tree with no GPU backend: the programs, libllama,
    # libggml-base, the CPU modules, the chat page): compile only the backend's library and assemble <job>/bin/ from
    # both. None: build the whole of llama.cpp
    common: Path | None = None
    configure_timeout: float = 1800.0
    compile_timeout: float = 6 * 3600.0
    context: Context = field(kw_only=True, repr=False, compare=False)  # the cache, the host OS
    # the programs to build (Settings.programs: config/programs.yaml)
    programs: ProgramList = field(default_factory=load_programs, kw_only=True, repr=False, compare=False)


# ---------------------------------------------------------------------------------------------------------------------
# ccache


@dataclass(frozen=True)
class CcacheCounts:
    hits: int
    misses: int


_PRINT_STATS_HITS = ("direct_cache_hit", "preprocessed_cache_hit")
_TEXT_PATTERNS = {  # ccache 3.x / 4.x `-s` wording
    "hits": (r"^cache hit \(direct\)\s+(\d+)", r"^cache hit \(preprocessed\)\s+(\d+)", r"^\s*Hits:\s+(\d+)"),
    "misses": (r"^cache miss\s+(\d+)", r"^\s*Misses:\s+(\d+)"),
}


def parse_ccache_stats(text: str) -> CcacheCounts | None:
    """Hits and misses from ``ccache --print-stats`` (``name<TAB>value`` lines) or, failing that, ``ccache -s``."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.strip().split("\t")
        if len(parts) == 2 and parts[1].strip().isdigit():
            values[parts[0].strip()] = int(parts[1])
    if "cache_miss" in values:
        return CcacheCounts(sum(values.get(k, 0) for k in _PRINT_STATS_HITS), values["cache_miss"])
    found: dict[str, int] = {}
    for what, patterns in _TEXT_PATTERNS.items():
        for pattern in patterns:
            for match in re.finditer(pattern, text, re.M):
                found[what] = found.get(what, 0) + int(match.group(1))
            if what in found and pattern.startswith(r"^\s*"):
                break
    if "hits" in found or "misses" in found:
        return CcacheCounts(found.get("hits", 0), found.get("misses", 0))
    return None


def ccache_counts(ccache: str, env: Mapping[str, str]) -> CcacheCounts | None:
    for flag in ("--print-stats", "-s"):
        result = run([ccache, flag], env=env, timeout=60, check=False)
        if result.returncode == 0:
            counts = parse_ccache_stats(result.output)
            if counts is not None:
                return counts
    return None


def ccache_report(before: CcacheCounts | None, after: CcacheCounts | None, ccache_dir: Path) -> dict[str, Any]:
    """This build's share of the cache's counters (a build sharing the cache at the same time is counted too)."""
    if before is None or after is None:
        return {"enabled": True, "dir": str(ccache_dir), "hits": None, "misses": None, "hit_rate": None}
    hits, misses = after.hits - before.hits, after.misses - before.misses
    rate = round(hits / (hits + misses), 4) if hits + misses > 0 else None
    return {"enabled": True, "dir": str(ccache_dir), "hits": hits, "misses": misses, "hit_rate": rate}


# ---------------------------------------------------------------------------------------------------------------------
# Ninja progress

_NINJA_STATUS_RE = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)$")
_OBJECT_RE = re.compile(r"^Building (\w+) object ")


class NinjaProgress:
    """Reads ninja's ``[n/N] ...`` lines: a live bar on a terminal, a plain line every ``every`` seconds elsewhere."""

    def __init__(self, label: str = "compile", *, interactive: bool | None = None, every: float = 30.0) -> None:
        self.label = label
        self.finished = 0
        self.total = 0
        self.objects: Counter[str] = Counter()
        self.no_work = False
        self._every = every
        self._start = self._last = time.monotonic()
        self._bar: Any = None
        self._task: Any = None
        if console.interactive() if interactive is None else interactive:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("    {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[what]}"),
                console=_stderr_console(),
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(label, total=None, what="")

    def on_line(self, line: str) -> None:
        if line.startswith("ninja: no work to do"):
            self.no_work = True
            return
        match = _NINJA_STATUS_RE.match(line)
        if not match:
            return
        self.finished, self.total = max(self.finished, int(match.group(1))), int(match.group(2))
        what = match.group(3)
        obj = _OBJECT_RE.match(what)
        if obj:
            self.objects[obj.group(1)] += 1
        if self._bar is not None:
            short = what if len(what) <= 60 else "..." + what[-57:]
            self._bar.update(self._task, completed=self.finished, total=self.total, what=short)
            return
        now = time.monotonic()
        if now - self._last >= self._every:
            self._last = now
            self._plain_line()

    def _plain_line(self) -> None:
        pct = 100.0 * self.finished / self.total if self.total else 0.0
        console.info(f"    {self.label}: [{self.finished}/{self.total}] {pct:.0f}% after {self.elapsed():.0f}s")

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def summary(self) -> dict[str, Any]:
        return {
            "steps": self.finished,
            "total": self.total,
            "objects": dict(sorted(self.objects.items())),
            "no_work": self.no_work,
        }


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


# ---------------------------------------------------------------------------------------------------------------------
# Steps


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _log_header(log: Path, text: str) -> None:
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"\n==> {text}\n")


def rocm_report_tarball(fetched: Any) -> Tarball:
    """build.json's ``rocm.tarball``: a fetched tarball's (or a Tarball record's) name, URL, sha256, size, group."""
    return Tarball(name=fetched.name, url=fetched.url, sha256=fetched.sha256, size=fetched.size, group=fetched.group)


def rocm_report(layout: RocmLayout, fetched: Any = None) -> BuildRocm:
    """build.json's ``rocm``: the root a job was built with and what it is (and the tarball it came from)."""
    return replace(layout.record(), tarball=rocm_report_tarball(fetched) if fetched is not None else None)


def _provide_rocm(job: Job, options: BuildOptions) -> tuple[RocmLayout, BuildRocm]:
    if options.rocm_dir is not None:
        layout = detect_layout(options.rocm_dir)
        console.info(f"    {layout.root}: {layout.kind} ROCm {layout.version or '(version unknown)'}")
        return layout, rocm_report(layout, options.rocm_tarball)

    fetched = fetch_rocm(
        job_groups(job),
        os_name=job.os,
        version=options.rocm_version or job.rocm_version,
        channel=job.rocm_channel,
        cache=options.cache or options.context.cache,
    )
    if fetched.layout is None:
        raise LayoutError(fetched.layout_error or f"{fetched.root} is not a usable ROCm root")
    return fetched.layout, rocm_report(fetched.layout, fetched)


def _provide_source(options: BuildOptions, job: Job, log: Path) -> LlamaSource:
    check_source_options(options)
    if options.source_dir is not None:
        source = describe_tree(options.source_dir, build_number=options.build_number, commit=options.commit, log=log)
    else:
        # one checkout per job that follows the ref: a stable source path keeps ccache hitting across commits
        source = checkout_ref(
            options.ref or job.llama_ref,
            url=options.git_url,
            cache=options.cache or options.context.cache,
            build_number=options.build_number,
            log=log,
            slot=job.id,
        )
    console.info(f"    llama.cpp build {source.build_number}, commit {source.commit}, at {source.path}")
    return source


def _configure_fingerprint(command: list[str], env: Mapping[str, str], variables: list[str]) -> dict[str, Any]:
    keys = [*variables, "PATH", "Path", "INCLUDE", "LIB"]
    return {"command": command, "env": {k: env[k] for k in keys if k in env}}


def job_label(job: Job, backend: BuildBackend, cross: str | None = None) -> str:
    """What a job builds, for log lines: its gfx targets, or its ``backend`` (with the host's compiler, or
    ``cross``)."""
    compiler = f"{cross} cross compiler" if cross else "host compiler"
    return ", ".join(job.targets) if backend.per_target else f"{backend.label}, {compiler}"


def _list_binaries(bin_dir: Path, job_dir: Path, files: list[str], windows: bool) -> list[dict[str, Any]]:
    """build.json's ``binaries``: the programs' ``files`` (each must be there) and every library of ``bin_dir``."""
    suffix = ".exe" if windows else ""
    missing = [t for t in files if not (bin_dir / f"{t}{suffix}").is_file()]
    if missing:
        raise BuildError(f"the build finished but {', '.join(missing)} is missing from {bin_dir}")
    out = []
    for path in sorted(bin_dir.iterdir()) if bin_dir.is_dir() else []:
        name = path.name
        if name.removesuffix(suffix) in files:
            kind = "executable"
        elif name.endswith(".dll") or ".so" in name or name.endswith(".dylib"):
            kind = "library"
        else:
            continue
        entry: dict[str, Any] = {"name": name, "path": str(path.relative_to(job_dir)), "kind": kind}
        if path.is_symlink():
            entry["link"] = os.readlink(path)
        else:
            entry["size"] = path.stat().st_size
        out.append(entry)
    return out


def rocm_identity(prefix: str | None) -> str | None:
    """What the ROCm tree at ``prefix`` holds: the sha256 of the tarball rockbuild extracted there (its marker);
    None for no ROCm, or one rockbuild did not extract (an installed /opt/rocm or Debian's /usr)."""
    marker = read_marker(Path(prefix)) if prefix else None
    return str(marker["sha256"]) if marker and marker.get("sha256") else None


def empty_for_another_rocm(build_dir: Path, identity: str | None) -> bool:
    """Empty ``build_dir`` when its objects were compiled against another ROCm tree than ``identity``: a night keeps
    each group's tree at one path (rocm.fetch.stable_root), and behind an unchanged path neither CMake nor ninja sees
    a new clang or new device libraries, so an object of the last nightly would be linked into this one's build.
    ccache makes the full rebuild cheap wherever nothing changed. True when the folder was emptied."""
    stamp = build_dir / _ROCM_STAMP
    try:
        previous = json.loads(stamp.read_text(encoding="utf-8"))["rocm"]
    except (OSError, ValueError, KeyError, TypeError):
        previous = None  # a folder from before the stamp: its ROCm folder was named after its nightly
    emptied = previous != identity and build_dir.is_dir() and any(build_dir.iterdir())
    if emptied:
        shutil.rmtree(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    if identity is not None or stamp.exists():
        write_json_atomic(stamp, {"rocm": identity})
    return emptied


def _forget_other_source(build_dir: Path, source: Path) -> bool:
    """CMake refuses a build folder configured from another source folder (each llama.cpp commit is its own clone):
    drop that configuration, keep the objects (ninja decides what to recompile). True when something was dropped."""
    try:
        text = (build_dir / "CMakeCache.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", text, re.M)
    if m is None or Path(m.group(1)).resolve() == Path(source).resolve():
        return False
    (build_dir / "CMakeCache.txt").unlink(missing_ok=True)
    shutil.rmtree(build_dir / "CMakeFiles", ignore_errors=True)
    return True


def _failure(step: str, exc: ProcessError, log: Path) -> BuildFailed:
    tail = log_tail(log, TAIL_LINES) or list(exc.tail)[-TAIL_LINES:]
    console.info(f"---- last {len(tail)} lines of {log} ----")
    for line in tail:
        console.info(line)
    console.info("----")
    timed_out = re.search(r"timed out after \d+s", exc.message)
    what = timed_out.group(0) if timed_out else f"exit code {exc.returncode}"
    # the message stands alone (records, notes and alerts quote it): it names the log by its place in the job folder
    return BuildFailed(
        f"{step} failed ({what}); build.log in the job folder says why",
        step=step,
        log=log,
        tail=tail,
        hint=f"its last lines are printed above; the whole log: {log}",
    )


@dataclass
class _Build:
    """One build as its steps fill it in: what they share (the environment, ccache, the notices seen so far) and
    what build.json records (``recorded``: BuildRecord's fields)."""

    job: Job
    options: BuildOptions
    backend: BuildBackend
    job_dir: Path
    build_dir: Path
    log: Path
    recorded: dict[str, Any] = field(default_factory=dict)
    toolchain: Toolchain | None = None
    source: LlamaSource | None = None
    targets: tuple[str, ...] = ()
    selection: Selection | None = None
    env: dict[str, str] = field(default_factory=dict)
    ccache: str | None = None  # the ccache program, when used
    ccache_dir: Path | None = None
    shader_cache: dict[str, Any] | None = None  # a Vulkan build's glslc cache (enabled, dir), before its counts
    notices: Notices = field(default_factory=Notices)
    common: BuildRecord | None = None  # the common part's build.json (options.common), once checked
    common_bin: Path | None = None  # its programs and libraries

    @property
    def bin_dir(self) -> Path:
        """Where the job's programs and libraries are: ninja's build/bin, or bin/ assembled with the common part."""
        return JobFolder(self.job_dir).assembled_dir if self.common is not None else self.build_dir / "bin"

    @property
    def windows(self) -> bool:
        return self.job.os == "windows"


def _common_step(b: _Build) -> None:
    """--common DIR: the common part this job builds on, checked before anything is fetched or compiled."""
    if b.options.common is None:
        return
    library = b.backend.library_target
    if library is None:
        raise UsageError(
            f"{b.job.id} is a {b.backend.label} job: it has no library of its own to build on a common "
            "part; build it whole (leave out --common)"
        )
    folder = b.options.common.absolute()
    with console.step(f"common part ({folder})"):
        b.common = common_part.read_common(folder, os_name=b.job.os)
        b.common_bin = common_part.bin_dir_of(folder, b.common)
        compilers = ", ".join(b.common.compilers.values()) or "compilers not recorded"
        console.info(
            f"    {b.common.job.id if b.common.job else folder.name}: llama.cpp {b.common.commit}, "
            f"CPU code by {compilers}; this job compiles {library} alone"
        )


def _provide_rocm_step(b: _Build) -> None:
    job, options = b.job, b.options
    if b.backend.needs_rocm:
        if options.rocm_tarball is not None:  # known before the root is read: a failure below still names it
            b.recorded.update(rocm=BuildRocm(tarball=rocm_report_tarball(options.rocm_tarball)))
        with console.step(f"ROCm for {job.id}"):
            layout, rocm = _provide_rocm(job, options)
            b.toolchain = b.backend.toolchain(job, layout)
        b.recorded.update(rocm=rocm, toolchain=b.toolchain)
        return
    # build.json's rocm stays null: the job uses no ROCm (and ships none)
    if options.rocm_dir is not None or options.rocm_version:
        console.warn(f"{job.id} is a {b.backend.label} job: it uses no ROCm, --rocm/--rocm-version are ignored")
    b.toolchain = b.backend.toolchain(job, None)
    b.recorded.update(toolchain=b.toolchain)


def _source_step(b: _Build) -> None:
    with console.step("llama.cpp source"):
        _log_header(b.log, "llama.cpp source")
        b.source = _provide_source(b.options, b.job, b.log)
        b.source = _patch_source(b, b.source)
        if b.common is not None:
            patches = b.recorded.get("patches")
            common_part.check_source(
                b.common,
                commit=b.source.commit,
                cross=b.options.cross,
                patches=patches.digest if patches is not None else None,
            )
        # what the tree defines, whatever the configuration: a required program it lacks fails here, before configure
        _select(b, executable_targets(b.source.path))


def patched_tree_dir(cache: Path, slot: str) -> Path:
    """Where a job's patched mirror of llama.cpp lives: one per job id, the same path every night (ccache)."""
    return cache / PATCHED_FOLDER / slot


def _patch_source(b: _Build, source: LlamaSource) -> LlamaSource:
    """The carried fixes applied to a mirror of the tree (the tree itself is never written); the source to build."""
    options = b.options
    if not options.patches:
        console.info("    carried patches: none (--no-patches: the pristine tree)")
        b.recorded.update(patches=PatchSet.off(NO_PATCHES))
        return source
    series = (
        options.patch_series if options.patch_series is not None else load_patch_series(options.context.patches_file)
    )
    label = f"llama.cpp {source.build_number} ({source.short_commit})"
    _log_header(b.log, f"carried patches ({series.path})")
    patched = apply_patch_series(
        series,
        source.path,
        patched_tree_dir(options.cache or options.context.cache, b.job.id),
        build_number=source.build_number_value,
        tree_label=label,
        os_name=b.job.os,
        backend=b.job.backend,
        log=b.log,
    )
    b.recorded.update(patches=patched)
    if series.patches:
        console.info(f"    carried patches: {patch_summary(patched.patches)}")
        with open(b.log, "a", encoding="utf-8") as fh:
            fh.write(f"carried patches: {patch_summary(patched.patches)}\n")
    if patched.tree is None or patched.tree == source.path:
        return source
    return dataclasses.replace(source, path=patched.tree, patched_from=source.path)


def _select(b: _Build, available: set[str]) -> None:
    assert b.source is not None
    b.selection = b.options.programs.select(available, f"{b.source.path} (tools/, examples/, app/)")
    b.targets = b.selection.targets
    b.recorded.update(
        llama_cpp=b.source,
        build_targets=b.targets,
        programs=tuple(p.to_dict() for p in b.selection.programs),
        programs_unavailable=b.selection.unavailable,
    )


def _web_ui_step(b: _Build) -> None:
    """llama-server's chat page, built once per tree and embedded as its prebuilt UI; none (with a warning and the
    reason in build.json) when npm cannot make it: never a failed build."""
    options, source = b.options, b.source
    assert source is not None
    if b.common is not None:  # llama-server is the common part's, with its page (or without, as it says)
        b.recorded["web_ui"] = b.common.web_ui
        return
    web_ui = WebUiOptions(
        cache=(options.cache or options.context.cache) / "webui",
        enabled=options.web_ui,
        dist=options.web_ui_dist,
        offline=options.offline,
        env=options.context.env,
    )
    with console.step("web UI"):
        _log_header(b.log, "web UI")
        b.recorded["web_ui"] = provide_web_ui(
            source.path, build_number=source.build_number_value, options=web_ui, log=b.log
        )


def _configure_step(b: _Build) -> None:
    job, options, backend, build_dir, log = b.job, b.options, b.backend, b.build_dir, b.log
    assert b.source is not None
    with console.step(f"configure ({job_label(job, backend, options.cross)})"):
        native_windows = b.windows and options.cross is None
        msvc = capture_msvc_environment(b.job_dir, vcvars=options.vcvars, log=log) if native_windows else None
        cache = options.cache or options.context.cache

        def environment(ccache_dir: Path | None = None) -> tuple[dict[str, str], list[str]]:
            return backend.build_environment(job, b.toolchain, msvc=msvc, ccache_dir=ccache_dir)

        env, variables = environment()
        path = env.get("PATH") or env.get("Path") or ""
        for tool, package in (("cmake", "cmake"), ("ninja", "ninja-build")):
            if shutil.which(tool, path=path) is None:
                raise BuildError(f"{tool} is not installed (not on PATH); install {package}")
        b.ccache = shutil.which("ccache", path=path) if options.use_ccache else None
        b.ccache_dir = Path(options.ccache_dir or cache / "ccache").absolute()
        if b.ccache:
            b.ccache_dir.mkdir(parents=True, exist_ok=True)
            env, variables = environment(b.ccache_dir)
        elif options.use_ccache:
            console.info("    ccache not found: compiling without a cache (install ccache for fast rebuilds)")
        b.env = env
        tools = {"cmake": first_line(["cmake", "--version"], env), "ninja": first_line(["ninja", "--version"], env)}
        if b.ccache:
            tools["ccache"] = first_line([b.ccache, "--version"], env)
        compilers, own_tools = backend.compilers(job, b.toolchain, env)
        tools.update(own_tools)
        cross_definitions: list[tuple[str, str]] = []
        if options.cross is not None:
            cross = provide_cross(options.cross, job.os, b.job_dir, env)
            compilers = dict(cross.compilers)
            cross_definitions = cross.definitions()
            b.recorded["cross"] = cross
            console.info(f"    cross toolchain {cross.name}: {compilers.get('cxx')}")
        # Vulkan: glslc through the shader cache, <ccache-dir>/glslc (kept wherever ccache is kept: CI's cache of
        # .ccache carries it), off with --no-ccache or ROCKBUILD_SHADER_CACHE=0; first, so that a matrix's own
        # Vulkan_GLSLC_EXECUTABLE still wins
        shader_definitions: list[tuple[str, str]] = []
        glslc_definitions = getattr(backend, "glslc_definitions", None)
        if glslc_definitions is not None:
            use = options.use_ccache and not shader_cache_disabled(options.context.env)
            shader_dir = b.ccache_dir / SHADER_CACHE_FOLDER if use else None
            shader_definitions, b.shader_cache = glslc_definitions(
                env, build_dir, shader_dir, size_mib=shader_cache_size(options.context.env)
            )
        checked = check_definitions(
            [
                *shader_definitions,
                *backend.cmake_definitions(
                    job,
                    b.toolchain,
                    offline=options.offline,
                    build_info=b.source.cmake_build_info(),
                    ccache=bool(b.ccache),
                ),
                *cross_definitions,
            ],
            tree_variables(b.source.path),
            extra=[name for name, _ in job.cmake],
        )
        definitions = list(checked.definitions)
        if checked.dropped:
            console.info(f"    not passed (this tree no longer defines them): {', '.join(checked.dropped)}")
        for message in checked.warnings():
            if message not in b.notices.messages:
                b.notices.messages.append(message)
                console.warn(message)
        b.recorded["dropped_definitions"] = checked.dropped
        command = configure_command(b.source.path, build_dir, definitions)
        ours = [*variables, "PATH", "Path"]
        b.recorded.update(
            compilers=compilers,
            tools=tools,
            cmake_definitions=dict(definitions),
            cmake_command=tuple(command),
            environment={k: env[k] for k in ours if k in env},
        )
        if empty_for_another_rocm(build_dir, rocm_identity(b.toolchain.prefix if b.toolchain else None)):
            console.info(
                f"    {build_dir} was compiled against another ROCm tree; building afresh (ccache keeps "
                "what did not change)"
            )
        stamp = build_dir / _CONFIGURE_STAMP
        fingerprint = _configure_fingerprint(command, env, variables)
        configured = (build_dir / "CMakeCache.txt").is_file() and (build_dir / "build.ninja").is_file()
        previous = json.loads(stamp.read_text(encoding="utf-8")) if configured and stamp.is_file() else {}
        if {k: previous.get(k) for k in fingerprint} == fingerprint:
            console.info(f"    {build_dir} is configured with this command already; not configuring again")
            b.recorded["configure_skipped"] = True
            b.notices = Notices(tuple(dict.fromkeys((*b.notices.messages, *previous.get("warnings", ())))))
            for message in b.notices.messages:
                console.warn(message)
            _log_header(log, "configure: skipped (same command and environment as the last configure)")
        else:
            stamp.unlink(missing_ok=True)
            build_dir.mkdir(parents=True, exist_ok=True)
            if _forget_other_source(build_dir, b.source.path):
                console.info(f"    {build_dir} was configured from another source tree; configuring afresh")
            _log_header(log, "configure: " + " ".join(command))
            unused = UnusedVariables()

            def on_line(line: str) -> None:
                b.notices.on_line(line)
                unused.on_line(line)

            try:
                run(
                    command,
                    env=env,
                    log=log,
                    timeout=options.configure_timeout,
                    output=Output(capture=False, on_line=on_line),
                )
            except ProcessError as exc:
                b.recorded["warnings"] = tuple(b.notices.messages)
                raise _failure("configure", exc, log) from None
            matrix_names = {name.upper() for name, _ in job.cmake}
            named = [n for n, _ in definitions if n.upper() not in matrix_names] + list(checked.unknown)
            for message in unused.warnings(ours=named):  # a name already warned of is said once
                if message not in b.notices.messages:
                    b.notices.messages.append(message)
                    console.warn(message)
            write_json_atomic(stamp, {**fingerprint, "warnings": b.notices.messages})
        b.recorded["warnings"] = tuple(b.notices.messages)
        if b.common is not None:
            common_part.check_definitions(b.common, dict(definitions))
        # what this configuration builds (llama-convert-llama2c-to-ggml is not built with GGML_BACKEND_DL, say)
        listed = run(targets_command(build_dir), env=env, log=None, timeout=120, check=False)
        if listed.returncode == 0:
            _select(b, executable_targets(b.source.path) & configured_targets(listed.output))


def _compile_step(b: _Build) -> None:
    jobs = b.options.jobs or os.cpu_count() or 2
    library = b.backend.library_target
    if b.common is not None and library is not None:
        common = b.common.job.id if b.common.job else "the common part"
        targets, what = [library], f"{library} alone: the rest is {common}'s"
    else:
        targets, what = list(b.targets), f"{len(b.targets)} programs"
    build = compile_command(b.build_dir, targets, jobs=jobs)
    b.recorded["compile_command"] = tuple(build)
    with console.step(f"compile ({what}, -j{jobs})"):
        if b.selection is not None and b.selection.unavailable:
            console.info(f"    not in this tree: {', '.join(b.selection.unavailable)}")
        console.info(f"    targets: {' '.join(targets)}")
        before = ccache_counts(b.ccache, b.env) if b.ccache else None
        glslc_log = log_offset(b.build_dir)
        _log_header(b.log, "compile: " + " ".join(build))
        progress = NinjaProgress("compile")

        def on_line(line: str) -> None:
            progress.on_line(line)
            b.notices.on_line(line)

        try:
            run(
                build,
                env=b.env,
                log=b.log,
                timeout=b.options.compile_timeout,
                output=Output(capture=False, on_line=on_line),
            )
        except ProcessError as exc:
            progress.close()
            b.recorded.update(ninja=progress.summary(), warnings=tuple(b.notices.messages))
            raise _failure("compile", exc, b.log) from None
        progress.close()
        b.recorded.update(ninja=progress.summary(), warnings=tuple(b.notices.messages))
        if b.ccache:
            assert b.ccache_dir is not None
            ccache = ccache_report(before, ccache_counts(b.ccache, b.env), b.ccache_dir)
        else:
            ccache = {"enabled": False, "dir": None, "hits": None, "misses": None, "hit_rate": None}
        b.recorded["ccache"] = ccache
        if b.shader_cache is not None:
            shaders = {**b.shader_cache, **(log_counts(b.build_dir, glslc_log) if b.shader_cache["enabled"] else {})}
            b.recorded["shader_cache"] = shaders
            if shaders.get("hits") or shaders.get("misses"):
                console.info(f"    shader cache: {shaders['hits']} hits, {shaders['misses']} misses (glslc)")
        objects = ", ".join(f"{n} {lang}" for lang, n in sorted(progress.objects.items())) or "no"
        rate = ccache["hit_rate"]
        did = "ninja: no work to do" if progress.no_work else f"{progress.finished} steps, {objects} objects"
        console.info(f"    {did}" + (f"; ccache hit rate {rate:.0%}" if rate is not None else ""))
        if b.common is None:
            b.recorded["binaries"] = tuple(_list_binaries(b.bin_dir, b.job_dir, _program_files(b), b.windows))


def _program_files(b: _Build) -> list[str]:
    assert b.selection is not None
    return [p.file_name for p in b.selection.programs]


OP_TEST_DIR = "tools"  # <job>/tools/: beside bundle/, never in it


def _op_test_step(b: _Build) -> None:
    """llama.cpp's op test, ``test-backend-ops``, from the same configured tree: one more ninja target, moved out of
    build/bin (whose every ELF the bundle step takes) into ``<job>/tools/``. A tree or configuration that cannot make
    it costs the build nothing: build.json says why it is absent and the smoke's ops step says *not checked*."""
    suffix = ".exe" if b.windows else ""
    tools = b.job_dir / OP_TEST_DIR
    placed = tools / f"{OP_TEST_PROGRAM}{suffix}"
    placed.unlink(missing_ok=True)  # never a stale one from an earlier build of another tree
    if b.common is not None:
        _op_test_from_common(b, placed)
        return

    def absent(reason: str) -> None:
        b.recorded["test_backend_ops"] = OpTestRecord(status="absent", reason=reason)
        console.warn(f"{OP_TEST_PROGRAM} is not built: {reason} (the smoke's ops step will say not checked)")

    listed = run(targets_command(b.build_dir), env=b.env, log=None, timeout=120, check=False)
    if listed.returncode != 0 or OP_TEST_PROGRAM not in configured_targets(listed.output):
        absent("this llama.cpp tree (configured with LLAMA_BUILD_TESTS=ON) has no test-backend-ops target")
        return
    jobs = b.options.jobs or os.cpu_count() or 2
    command = compile_command(b.build_dir, [OP_TEST_PROGRAM], jobs=jobs)
    start = time.monotonic()
    with console.step(f"compile {OP_TEST_PROGRAM} (kept in {OP_TEST_DIR}/, not shipped)"):
        _log_header(b.log, "compile: " + " ".join(command))
        try:
            run(command, env=b.env, log=b.log, timeout=b.options.compile_timeout, output=STREAMED)
        except ProcessError as exc:
            timed_out = re.search(r"timed out after \d+s", exc.message)
            absent(
                f"its compile failed ({timed_out.group(0) if timed_out else f'exit code {exc.returncode}'}); "
                "build.log in the job folder says why"
            )
            return
        built = b.build_dir / "bin" / placed.name
        if not built.is_file():
            absent(f"the compile finished but {built} is not there")
            return
        tools.mkdir(parents=True, exist_ok=True)
        shutil.move(built, placed)
    b.recorded["test_backend_ops"] = OpTestRecord(
        status="built",
        path=f"{OP_TEST_DIR}/{placed.name}",
        seconds=round(time.monotonic() - start, 3),
        size=placed.stat().st_size,
    )


def _assemble_step(b: _Build) -> None:
    """A job on a common part: <job>/bin/ is the common part's programs and libraries plus this job's library."""
    if b.common is None:
        return
    assert b.common_bin is not None and b.options.common is not None and b.backend.library_target is not None
    own = common_part.library_files(b.build_dir / "bin", b.backend.library_target, windows=b.windows)
    if not own:
        raise BuildError(f"the compile finished but {b.build_dir / 'bin'} has no {b.backend.library_target} library")
    with console.step(f"assemble {b.bin_dir.name}/ (the common part + {', '.join(p.name for p in own)})"):
        taken = common_part.assemble(b.common_bin, own, b.bin_dir)
        b.recorded["common"] = common_part.describe(b.options.common.absolute(), b.common, taken)
        b.recorded["binaries"] = tuple(_list_binaries(b.bin_dir, b.job_dir, _program_files(b), b.windows))
        console.info(f"    {len(taken)} files from {b.recorded['common'].job}, {len(own)} of this job's")


def _op_test_from_common(b: _Build, placed: Path) -> None:
    """The common part's op test (it loads whichever backend module sits beside it, as the programs do)."""
    assert b.common is not None and b.options.common is not None
    theirs = b.common.test_backend_ops
    if theirs is None or theirs.status != "built" or not theirs.path:
        reason = theirs.reason if theirs is not None and theirs.reason else "the common part has none"
        b.recorded["test_backend_ops"] = OpTestRecord(status="absent", reason=reason)
        console.warn(f"{OP_TEST_PROGRAM} is not here: {reason} (the smoke's ops step will say not checked)")
        return
    source = b.options.common.absolute() / theirs.path
    if not source.is_file():
        raise BuildError(f"the common part's {OP_TEST_PROGRAM} is missing: {source}")
    placed.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, placed)
    b.recorded["test_backend_ops"] = replace(theirs, path=f"{OP_TEST_DIR}/{placed.name}")


# A build's steps, in order: each fills in the build and records into build.json; the first to fail is its
# failed_step (build.json, build.log's last line).
COMMON_ONLY_STEPS = frozenset({"common", "assemble"})  # a whole build has no such step (nor its duration)
BUILD_STEPS: tuple[tuple[str, Callable[[_Build], None]], ...] = (
    ("common", _common_step),
    ("rocm", _provide_rocm_step),
    ("source", _source_step),
    ("web_ui", _web_ui_step),
    ("configure", _configure_step),
    ("compile", _compile_step),
    ("assemble", _assemble_step),
    ("test_backend_ops", _op_test_step),
)


def build_job(job: Job, options: BuildOptions, *, backends: Backends[BuildBackend]) -> BuildRecord:
    """Build ``job`` as its backend (one of ``backends``) says: ROCm, source, configure, compile;
    ``out/<job-id>/build.json`` and ``build.log`` either way."""
    check_host(job, options)
    started, start = _now(), time.monotonic()
    job_dir = Path(options.out_dir).absolute() / job.id
    b = _Build(job, options, backends.get(job.backend), job_dir, job_dir / "build", job_dir / "build.log")
    job_dir.mkdir(parents=True, exist_ok=True)
    b.log.write_text(
        f"rockbuild {__version__}: build {job.id} ({job_label(job, b.backend)}), started {started}\n", encoding="utf-8"
    )
    durations: dict[str, float] = {}

    def result(
        status: Literal["ok", "failed"], failed_step: str | None = None, error: BuildErrorInfo | None = None
    ) -> BuildRecord:
        durations["total"] = round(time.monotonic() - start, 3)
        paths = BuildPaths(job_dir=job_dir, build_dir=b.build_dir, log=b.log, bin_dir=b.bin_dir)
        return BuildRecord(
            schema=BUILD_SCHEMA,
            rockbuild_version=__version__,
            status=status,
            failed_step=failed_step,
            error=error,
            job=job,
            gpu_targets=job.targets,
            offline=options.offline,
            durations=dict(durations),
            paths=paths,
            started=started,
            finished=_now(),
            **b.recorded,
        )

    for name, step in BUILD_STEPS:
        if name in COMMON_ONLY_STEPS and options.common is None:
            continue
        t0 = time.monotonic()
        try:
            step(b)
        except Exception as exc:
            durations[name] = round(time.monotonic() - t0, 3)
            error = BuildErrorInfo.of(exc)
            with open(b.log, "a", encoding="utf-8") as fh:
                fh.write(f"\n==> failed at step {name}: {error.message}\n")
                if error.hint:
                    fh.write(f"hint: {error.hint}\n")
            JobFolder(job_dir).write_build(result("failed", name, error))
            raise
        durations[name] = round(time.monotonic() - t0, 3)

    done = result("ok")
    JobFolder(job_dir).write_build(done)
    console.info(f"    {job.id}: build.json and build.log in {job_dir}")
    return done


# ---------------------------------------------------------------------------------------------------------------------
# The plan (``rockbuild build --dry-run``): what a build would take and pass to CMake, found with no download, no
# clone and no compile. What only the build itself can know (the tip of a branch, the newest ROCm nightly, the root's
# compilers before it is extracted) is said to be known then, never guessed.

ROCM_ROOT = "<ROCm root>"  # in a definition whose value comes from a ROCm root not yet extracted
AT_BUILD_TIME = "at build time"


@dataclass(frozen=True, kw_only=True)
class PlannedSource(Record):
    """The llama.cpp tree a build would compile, as far as it is known before anything is fetched."""

    origin: str  # tree (--source) | clone (--ref, the job's llama_ref, inputs.json's commit)
    path: Path  # the tree, or the job's checkout in the cache (<cache>/llama.cpp/<job>-<hash>)
    ref: str | None = None
    url: str | None = None
    commit: str | None = None  # None: known once the ref is fetched
    build_number: str | None = None
    how: str  # where the commit comes from, in words


@dataclass(frozen=True, kw_only=True)
class PlannedRocm(Record):
    """The ROCm a build would use: a given root, or a TheRock tarball (pinned by inputs.json, exact, or the newest)."""

    version: str  # an exact version, or latest (resolved when the build reads the index)
    channel: str
    groups: tuple[str, ...]  # the tarball groups looked up, the current name first
    tarball: str | None = None  # its file name (None: a given root, or the newest, named when the index is read)
    url: str | None = None
    root: Path | None = None  # where it is or will be extracted (a given root: that root)
    cached: bool = False  # extracted there already: nothing to download
    how: str


@dataclass(frozen=True, kw_only=True)
class BuildPlan(Record):
    """What ``rockbuild build`` would do for a job (``--dry-run``): the tree, the ROCm, the carried patches, every
    CMake definition, the folders. ``at_build_time`` names the definitions whose value only the build can know."""

    job: Job
    builds: str  # the gfx targets, or the backend and its compiler
    source: PlannedSource
    rocm: PlannedRocm | None = None
    patches: str
    cmake_definitions: Mapping[str, str]
    at_build_time: tuple[str, ...] = ()
    cmake_command: tuple[str, ...]
    job_dir: Path
    build_dir: Path
    bundle_dir: Path | None = None
    jobs: int
    ccache: Path | None = None  # the ccache folder, when ccache is used
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        source = self.source
        lines = [f"{self.job.id} ({self.builds}): the build it would run; nothing is fetched, cloned or compiled"]
        if source.origin == "tree":
            lines.append(
                f"  llama.cpp:  the tree {source.path}: commit {source.commit or 'unknown'}, build "
                f"{source.build_number or 'unknown'} ({source.how})"
            )
        else:
            known = (
                f"commit {source.commit}, build {source.build_number or 'unknown'} ({source.how})"
                if source.commit
                else source.how
            )
            lines += [f"  llama.cpp:  {source.ref} of {source.url}: {known}", f"              into {source.path}"]
        if self.rocm is not None:
            rocm = self.rocm
            name = rocm.tarball or f"the newest TheRock {rocm.channel} tarball of {rocm.groups[0]} ({self.job.os})"
            lines.append(f"  ROCm:       {name}: {rocm.how}")
            if rocm.root is not None:
                lines.append(f"              {rocm.root}" + (" (extracted already)" if rocm.cached else ""))
        lines += [
            f"  patches:    {self.patches}",
            f"  build:      {self.build_dir} ({self.jobs} compile jobs"
            + (f", ccache in {self.ccache})" if self.ccache else ", no ccache)"),
            f"  job folder: {self.job_dir} (build.json, build.log)",
        ]
        if self.bundle_dir is not None:
            lines.append(f"  bundle:     {self.bundle_dir}")
        lines.append("  configure:  " + " ".join(self.cmake_command[:7]))
        lines += [f"                -D{name}={value}" for name, value in self.cmake_definitions.items()]
        if self.at_build_time:
            lines.append(f"  known at build time: {', '.join(self.at_build_time)}")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def check_host(job: Job, options: BuildOptions) -> None:
    """A job of another OS is built with a cross toolchain (``--cross``) or not at all."""
    if options.cross is not None:
        cross_spec(options.cross, job.os)  # an unknown toolchain, or one for another OS, stops here
    elif job.os != options.context.host_os:
        raise UsageError(
            f"job {job.id} builds for {job.os}; run it on a {job.os} machine"
            + (" (or cross-build it: --cross mingw-w64)" if job.os == "windows" else "")
        )


def check_source_options(options: BuildOptions) -> None:
    """--source and --ref exclude each other; --commit describes a --source tree."""
    if options.source_dir is not None and options.ref:
        raise UsageError("give --source DIR or --ref REF, not both")
    if options.source_dir is None and options.commit:
        raise UsageError("--commit describes a --source tree; a --ref clone knows its commit")


def _planned_source(job: Job, options: BuildOptions, cache: Path) -> tuple[PlannedSource, LlamaSource | None]:
    """The tree (and, when it is here already, what it is) without a fetch."""
    if options.source_dir is not None:
        tree = describe_tree(options.source_dir, build_number=options.build_number, commit=options.commit)
        commit = None if tree.commit == "unknown" else tree.commit
        return PlannedSource(
            origin="tree",
            path=tree.path,
            commit=commit,
            build_number=tree.build_number,
            how=f"commit: {tree.commit_source}, build number: {tree.build_number_source}",
        ), tree
    ref = options.ref or job.llama_ref
    cached = cached_checkout(ref, url=options.git_url, cache=cache, slot=job.id)
    if cached is not None:
        cached = (
            dataclasses.replace(cached, build_number=normalize_build_number(options.build_number))
            if options.build_number
            else cached
        )
        return PlannedSource(
            origin="clone",
            path=cached.path,
            ref=ref,
            url=options.git_url,
            commit=cached.commit,
            build_number=cached.build_number,
            how=f"the {cached.ref_kind} checked out in the cache already: no fetch",
        ), cached
    path = clone_dir_for(options.git_url, job.id, cache)
    number = normalize_build_number(options.build_number) if options.build_number else None
    if FULL_COMMIT_RE.match(ref.lower()):
        return PlannedSource(
            origin="clone",
            path=path,
            ref=ref,
            url=options.git_url,
            commit=ref.lower(),
            build_number=number,
            how=f"a full commit, fetched (depth 1) {AT_BUILD_TIME}",
        ), None
    return PlannedSource(
        origin="clone",
        path=path,
        ref=ref,
        url=options.git_url,
        build_number=number,
        how=f"its commit is fetched (depth 1) {AT_BUILD_TIME}: a branch's tip then, or a tag's",
    ), None


def _toolchain_to_come(job: Job) -> Toolchain:
    """The compilers of a TheRock root not extracted yet (its layout: lib/llvm/bin), named under :data:`ROCM_ROOT`."""
    from rockbuild.core.vocabulary import Os, Toolchain

    platform: Os = "windows" if job.os == "windows" else "linux"  # a job's os is "" only in a hand-written build.json
    exe = ".exe" if platform == "windows" else ""
    llvm = f"{ROCM_ROOT}/lib/llvm/bin"
    return Toolchain(
        platform=platform,
        kind="therock",
        prefix=ROCM_ROOT,
        llvm_bin=llvm,
        c_compiler=f"{llvm}/clang{exe}",
        cxx_compiler=f"{llvm}/clang++{exe}",
        device_lib_dir=f"{ROCM_ROOT}/lib/llvm/amdgcn/bitcode",
        device_lib_in_resource_dir=False,
    )


def _newest_cached_root(job: Job, cache: Path) -> tuple[str, Path] | None:
    """(tarball name, root) of the newest TheRock tarball of the job's OS and groups extracted in the cache."""
    groups = set(job_groups(job))
    found = []
    try:
        roots = [p for p in (cache / "rocm").iterdir() if p.is_dir()]
    except OSError:
        return None
    for root in roots:
        name = parse_tarball_name(str((read_marker(root) or {}).get("name") or ""))
        if name is not None and name.platform == job.os and name.group in groups:
            found.append((name.version.version_key, name.filename, root))
    return max(found)[1:] if found else None


def _planned_rocm(
    job: Job, options: BuildOptions, backend: BuildBackend, cache: Path, pinned: InputsRocm | None
) -> tuple[PlannedRocm, Toolchain | None]:
    """The ROCm root or tarball a build would use, without reading an index or downloading; and its compilers (from
    the root when it is here, else named under :data:`ROCM_ROOT`)."""
    groups = tuple(job_groups(job))
    if options.rocm_dir is not None:
        layout = detect_layout(options.rocm_dir)
        planned = PlannedRocm(
            version=layout.version or "unknown",
            channel=job.rocm_channel,
            groups=groups,
            root=layout.root,
            cached=True,
            how=f"the given {layout.kind} root",
        )
        return planned, backend.toolchain(job, layout)
    if pinned is not None:
        entry = pinned_entry(pinned)  # the input's own failure when resolve found no tarball
        name, url, version, root = entry.name.filename, entry.url, entry.name.version.text, stable_root(entry, cache)
        how = "pinned by inputs.json"
    else:
        version = options.rocm_version or job.rocm_version
        if version == "latest":
            newest = _newest_cached_root(job, cache)
            now = f"; the newest extracted here now: {newest[0]}" if newest else ""
            planned = PlannedRocm(
                version=version,
                channel=job.rocm_channel,
                groups=groups,
                how=f"resolved {AT_BUILD_TIME} (the index is read then){now}",
            )
            return planned, _toolchain_to_come(job)
        name, url = tarball_filename(job.os, job.group, version), None
        root = cache / "rocm" / name.removesuffix(".tar.gz")
        how = f"its URL is read from the {job.rocm_channel} channel's index {AT_BUILD_TIME}"
    cached = (read_marker(root) or {}).get("name") == name
    if cached:
        how += "; extracted already, nothing to download"
    planned = PlannedRocm(
        version=version,
        channel=job.rocm_channel,
        groups=groups,
        tarball=name,
        url=url,
        root=root,
        cached=cached,
        how=how,
    )
    return planned, backend.toolchain(job, detect_layout(root)) if cached else _toolchain_to_come(job)


def plan_build(
    job: Job,
    options: BuildOptions,
    *,
    backends: Backends[BuildBackend],
    pinned: InputsRocm | None = None,
    bundle: bool = True,
) -> BuildPlan:
    """What :func:`build_job` would do for ``job`` with ``options`` (``pinned``: the job's tarball of inputs.json),
    with the checks that stop it before it starts; reads only local files (a --source tree's git, the cache)."""
    check_host(job, options)
    check_source_options(options)
    backend = backends.get(job.backend)
    cache = options.cache or options.context.cache
    job_dir = Path(options.out_dir).absolute() / job.id
    build_dir = job_dir / "build"
    notes: list[str] = []
    pending: list[str] = []
    source, tree = _planned_source(job, options, cache)
    rocm: PlannedRocm | None = None
    if backend.needs_rocm:
        rocm, toolchain = _planned_rocm(job, options, backend, cache, pinned)
    else:
        toolchain = backend.toolchain(job, None)
        if options.rocm_dir is not None or options.rocm_version:
            notes.append(f"{job.id} is a {backend.label} job: it uses no ROCm, --rocm/--rocm-version are ignored")
    if tree is not None:  # a --source tree (what it is, known or not, is what the build passes), a cached checkout
        build_info = tree.cmake_build_info()
    elif source.commit is not None:  # a full commit to fetch
        number = source.build_number[1:] if source.build_number else ""
        build_info = {
            "LLAMA_BUILD_NUMBER": number if number.isdigit() else "0",
            "LLAMA_BUILD_COMMIT": source.commit[:7],
        }
    else:
        build_info = {
            "LLAMA_BUILD_NUMBER": "<the checkout's build number>",
            "LLAMA_BUILD_COMMIT": "<the checkout's commit>",
        }
        pending += list(build_info)
    env, _variables = backend.build_environment(job, toolchain)
    path = env.get("PATH") or env.get("Path") or ""
    ccache = shutil.which("ccache", path=path) if options.use_ccache else None
    if options.use_ccache and ccache is None:
        notes.append("ccache is not on PATH: the build compiles without a cache")
    shader: list[tuple[str, str]] = []
    if getattr(backend, "glslc_definitions", None) is not None and options.context.host_os != "windows":
        shader = [("Vulkan_GLSLC_EXECUTABLE", "<glslc, through the shader cache's wrapper in the build folder>")]
        pending.append("Vulkan_GLSLC_EXECUTABLE")
    cross = (
        [("CMAKE_TOOLCHAIN_FILE", str(job_dir / f"{cross_spec(options.cross, job.os).name}.cmake"))]
        if options.cross is not None
        else []
    )
    definitions = [
        *shader,
        *backend.cmake_definitions(
            job, toolchain, offline=options.offline, build_info=build_info, ccache=ccache is not None
        ),
        *cross,
    ]
    if rocm is not None and not rocm.cached:
        pending += [name for name, value in definitions if ROCM_ROOT in value]
    if tree is not None and tree.path.is_dir():
        checked = check_definitions(definitions, tree_variables(tree.path), extra=[name for name, _ in job.cmake])
        definitions = list(checked.definitions)
        if checked.dropped:
            notes.append(f"not passed (this tree no longer defines them): {', '.join(checked.dropped)}")
        notes += checked.warnings()
    else:
        notes.append("the definitions are checked against the tree's CMake files once it is fetched")
    if options.patches:
        series = (
            options.patch_series
            if options.patch_series is not None
            else load_patch_series(options.context.patches_file)
        )
        patches = (
            f"{len(series.patches)} carried fix(es) of {series.path}, each applied where it fits the tree, to "
            f"a mirror of it ({patched_tree_dir(cache, job.id)})"
            if series.patches
            else f"none ({series.path} lists none)"
        )
        configured = patched_tree_dir(cache, job.id) if series.patches else source.path
    else:
        patches, configured = "none (--no-patches: the pristine tree)", source.path
    if options.common is not None:
        library = backend.library_target
        if library is None:
            raise UsageError(
                f"{job.id} is a {backend.label} job: it has no library of its own to build on a common "
                "part; build it whole (leave out --common)"
            )
        notes.append(f"built on the common part {options.common.absolute()}: compiles {library} alone")
    return BuildPlan(
        job=job,
        builds=job_label(job, backend, options.cross),
        source=source,
        rocm=rocm,
        patches=patches,
        cmake_definitions=dict(definitions),
        at_build_time=tuple(dict.fromkeys(pending)),
        cmake_command=tuple(configure_command(configured, build_dir, definitions)),
        job_dir=job_dir,
        build_dir=build_dir,
        bundle_dir=job_dir / "bundle" if bundle else None,
        jobs=options.jobs or os.cpu_count() or 2,
        ccache=Path(options.ccache_dir or cache / "ccache").absolute() if ccache else None,
        notes=tuple(notes),
    )
