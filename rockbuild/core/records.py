"""The files of a job folder and of a release, as typed, frozen records: one class per file.

Each record is written with :meth:`Record.to_dict` (or :meth:`Record.write`) and read back with
:meth:`Record.from_dict` (or :meth:`Record.read`), which *rejects* what is malformed: not a JSON object, a required key
missing, a value of the wrong type. The :class:`~rockbuild.core.errors.RecordError` names the file and the key path in
one line (``out/linux-gfx1151/build.json: llama_cpp.commit must be a string, not int``).

Tolerant where the files legitimately vary: keys newer than a file are optional (an older rockbuild did not write
them), and keys a record does not know are kept (``extra``) and written back, for forward compatibility. A record read
from a file writes its keys back in the file's order, so reading and writing a file changes only what was changed.

The records hold plain data (core imports nothing above core); a stage makes its file's record itself (no result
class of its own copied into one field by field), and its readers load that same class back. Their JSON Schemas are
docs/schemas/<file>.schema.json (tests/unit/test_records.py keeps both in step).

=================  ===================  =====================================================================
file               record               writer
=================  ===================  =====================================================================
build.json         :class:`BuildRecord`     the build driver; a failure before it: JobFolder.record_failure
bundle.json        :class:`BundleRecord`    rockbuild.bundle.plan (bundle_record)
smoke.json         :class:`SmokeRecord`     rockbuild.smoke.runner (run_smoke)
gpu-smoke.json     :class:`SmokeRecord`     the same (rockbuild smoke --report gpu-smoke.json on the GPU leg)
stages.json        :class:`StagesRecord`    rockbuild.pipeline.stages.StageLog
fallback.json      :class:`FallbackRecord`  rockbuild.nightly.run (the retry on the last good ROCm)
inputs.json        :class:`InputsRecord`    rockbuild.pipeline.inputs (resolve_inputs)
manifest.json      :class:`ManifestRecord`  rockbuild.publish.manifest (build_manifest)
=================  ===================  =====================================================================
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, get_args

from rockbuild.core.data import suggest
from rockbuild.core.errors import (
    BUG_EXIT_CODE,
    AuditError,
    NotFoundError,
    RockbuildError,
    StaleInputError,
    UsageError,
)
from rockbuild.core.jobs import Job
from rockbuild.core.record import Record, json_form, json_key
from rockbuild.core.vocabulary import Check, ModelFile, Toolchain

BUILD_SCHEMA = 1
"""build.json's ``schema`` (the build driver and JobFolder.record_failure both write this one)."""
STAGES_SCHEMA = 1
FALLBACK_SCHEMA = 1
TRIAGE_SCHEMA = 1
INPUTS_SCHEMA = 1
MANIFEST_SCHEMA = 1
SMOKE_SCHEMA = 1
BUNDLE_FORMAT = 1

# ---------------------------------------------------------------------------------------------------------------------
# build.json


@dataclass(frozen=True, kw_only=True)
class LlamaCpp(Record):
    """The llama.cpp a job was built from (LlamaSource.to_dict(), or the night's pin)."""

    commit: str | None = None
    build_number: str | int | None = None
    commit_time: int | None = None

    @property
    def short_commit(self) -> str | None:
        """What llama.cpp shows in ``--version`` (``git rev-parse --short``: 7 characters of a full commit)."""
        full = self.commit is not None and len(self.commit) == 40 and all(c in "0123456789abcdef" for c in self.commit)
        return self.commit[:7] if full and self.commit is not None else self.commit


# What became of a carried fix on a tree ("": no outcome recorded)
PatchStatus = Literal["", "applied", "upstream", "not for this tree"]


@dataclass(frozen=True, kw_only=True)
class PatchEntry(Record):
    """One carried fix and what became of it on a tree (rockbuild.llamacpp.patches makes it)."""

    id: str
    url: str = ""
    why: str = ""
    status: PatchStatus = ""
    note: str = ""
    files: tuple[str, ...] = ()  # the tree's files it changes
    sha256: str = ""


@dataclass(frozen=True, kw_only=True)
class PatchSet(Record):
    """The carried fixes of a build (build.json's and a manifest job's ``patches``): the series' digest, whether
    --no-patches turned them off, and each patch's outcome; for the build, the tree to compile (the patched mirror, or
    the pristine tree when nothing applied) and the mirror's files written this time."""

    digest: str
    disabled: bool = False
    tree: Path | None = None  # the tree compiled (the patched mirror)
    pristine: Path | None = None  # the tree it mirrors
    patches: tuple[PatchEntry, ...] = ()
    rewritten: tuple[str, ...] = ()  # the mirror's files written this time (new content): what ninja will see

    @property
    def applied(self) -> tuple[PatchEntry, ...]:
        return tuple(p for p in self.patches if p.status == "applied")

    @classmethod
    def off(cls, digest: str) -> PatchSet:
        """--no-patches: none carried (build.json says only that)."""
        return cls(digest=digest, disabled=True, keys=("digest", "disabled", "patches"))


@dataclass(frozen=True, kw_only=True)
class Tarball(Record):
    """A ROCm tarball: its name, where from, its sha256 and size, its group."""

    name: str | None = None
    url: str | None = None
    sha256: str | None = None
    size: int | None = None
    group: str | None = None


@dataclass(frozen=True, kw_only=True)
class BuildRocm(Record):
    """The ROCm a job was built with (RocmLayout.record, + the tarball the night fetched): build.json's ``rocm``, and
    bundle.json's, the root whose closure and kernel data the bundle took (no tarball there)."""

    root: str | None = None
    kind: str | None = None
    platform: str | None = None
    version: str | None = None
    version_source: str | None = None
    hip_version: str | None = None
    package_version: str | None = None
    therock_commit: str | None = None
    group: str | None = None
    tarball: Tarball | None = None


@dataclass(frozen=True, kw_only=True)
class BuildErrorInfo(Record):
    """Why a build failed: the message and hint the user saw, the exit code and the exception's type."""

    message: str
    hint: str | None = None
    exit_code: int | None = None
    type: str | None = None

    @classmethod
    def of(cls, exc: BaseException) -> BuildErrorInfo:
        """What build.json says of ``exc``: the message and hint the user sees, or (not a RockbuildError) the bug."""
        if isinstance(exc, RockbuildError):
            return cls(message=exc.message, hint=exc.hint, exit_code=exc.exit_code, type=type(exc).__name__)
        return cls(
            message=f"internal error: {type(exc).__name__}: {exc}",
            hint=None,
            exit_code=BUG_EXIT_CODE,
            type=type(exc).__name__,
        )


@dataclass(frozen=True, kw_only=True)
class BuildPaths(Record):
    job_dir: Path | None = None
    build_dir: Path | None = None
    log: Path | None = None
    bin_dir: Path | None = None


@dataclass(frozen=True, kw_only=True)
class CrossToolchain(Record):
    """build.json's ``cross``: the checked cross toolchain of a build for another OS than the machine's (made by
    rockbuild.llamacpp.cross)."""

    name: str
    system: str | None = None
    toolchain_file: Path | None = None
    compilers: Mapping[str, str] = field(default_factory=dict)  # c, cxx: their --version's first line
    runtime_dirs: tuple[Path, ...] = ()  # where the toolchain's runtime DLLs are: the bundle's closure searches them

    def definitions(self) -> list[tuple[str, str]]:
        """What CMake is given for it."""
        return [("CMAKE_TOOLCHAIN_FILE", str(self.toolchain_file))]


@dataclass(frozen=True, kw_only=True)
class WebUi(Record):
    """build.json's ``web_ui`` (made by rockbuild.llamacpp.webui) and, its paths left out, manifest.json's: whether
    llama-server embeds its chat page (status built | cached | prebuilt) or not (none, and the reason)."""

    status: str
    reason: str | None = None
    sha256: str | None = None  # over the dist's sorted file names and contents (rockbuild.llamacpp.webui)
    files: int | None = None
    bytes: int | None = None
    seconds: float = 0.0
    npm: str | None = None
    node: str | None = None
    build_number: str | None = None  # what the UI shows as its version (LLAMA_BUILD_NUMBER)
    key: str | None = None  # the dist's cache key
    dist: str | None = None  # where the dist came from (the cache, or the folder given)
    embedded: str | None = None  # the tree's tools/ui/dist it was copied to
    replaced: bool = False  # another dist was there and was replaced (or, with none, removed)
    npm_ci_seconds: float | None = None  # None: node_modules came from the cache (or npm ci did not run)
    build_seconds: float | None = None  # None: the dist came from the cache

    @property
    def available(self) -> bool:
        return self.status != "none"


@dataclass(frozen=True, kw_only=True)
class OpTestRecord(Record):
    """build.json's ``test_backend_ops``: llama.cpp's op-level test, built from the same tree and flags as the bundle
    and kept in the job folder (``path``, relative to it: tools/test-backend-ops), never in the bundle; or why the
    build has none (``status`` absent, ``reason``). The smoke's ops step runs it (rockbuild.smoke.ops)."""

    status: Literal["built", "absent"]
    path: str | None = None
    reason: str | None = None
    seconds: float | None = None
    size: int | None = None


@dataclass(frozen=True, kw_only=True)
class CommonPart(Record):
    """build.json's ``common``: the common part a job was assembled from (its OS's build of everything that does not
    depend on the GPU: the programs, libllama, libggml-base, the CPU modules, the chat page), when the job compiled
    only its backend's library. ``compilers`` is what compiled the common part (the CPU code of the bundle)."""

    job: str  # the common part's job id: linux-common
    path: str  # its job folder
    build_json_sha256: str  # the build.json it was checked against
    commit: str | None = None
    compilers: Mapping[str, str] = field(default_factory=dict)
    cross: str | None = None  # its cross toolchain (mingw-w64), if any
    files: tuple[str, ...] = ()  # what the job's bin/ took from it


@dataclass(frozen=True, kw_only=True)
class BuildRecord(Record):
    """``out/<job-id>/build.json``: what was built from what, and how it went."""

    FILE: ClassVar[str] = "build.json"

    schema: int | None = None  # BUILD_SCHEMA; absent in the oldest files
    rockbuild_version: str | None = None
    status: Literal["ok", "failed"]
    failed_step: str | None = None
    error: BuildErrorInfo | None = None
    job: Job | None = None
    gpu_targets: tuple[str, ...] = ()
    build_targets: tuple[str, ...] = ()
    programs: tuple[Mapping[str, Any], ...] = ()  # Program.to_dict of each program built
    programs_unavailable: tuple[str, ...] = ()
    dropped_definitions: tuple[str, ...] = ()
    llama_cpp: LlamaCpp | None = None
    rocm: BuildRocm | None = None
    toolchain: Toolchain | None = None  # ROCm's clang (None: a Vulkan or CPU build, the host's compilers)
    compilers: Mapping[str, str] = field(default_factory=dict)
    tools: Mapping[str, Any] = field(default_factory=dict)
    offline: bool | None = None
    cmake_definitions: Mapping[str, str] = field(default_factory=dict)
    cmake_command: tuple[str, ...] = ()
    compile_command: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    configure_skipped: bool = False
    warnings: tuple[str, ...] = ()
    web_ui: WebUi | None = None  # absent in files from before the web UI step
    cross: CrossToolchain | None = None  # a cross build (--cross mingw-w64); absent in a native build's older files
    patches: PatchSet | None = None  # the carried fixes (absent in files from before them)
    test_backend_ops: OpTestRecord | None = None  # the op test beside the bundle (absent in files from before it)
    # a job built on its OS's common part: what it took from there (None: built whole, or a file from before)
    common: CommonPart | None = None
    durations: Mapping[str, float] = field(default_factory=dict)
    ccache: Mapping[str, Any] | None = None
    shader_cache: Mapping[str, Any] | None = None  # Vulkan: glslc's outputs across trees (llamacpp.shader_cache)
    ninja: Mapping[str, Any] | None = None
    binaries: tuple[Mapping[str, Any], ...] = ()
    paths: BuildPaths | None = None
    started: str | None = None
    finished: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def commit(self) -> str | None:
        return self.llama_cpp.commit if self.llama_cpp is not None else None

    # where the build left things (build.json's paths; None in a file without them)
    @property
    def job_dir(self) -> Path | None:
        return self.paths.job_dir if self.paths is not None else None

    @property
    def build_dir(self) -> Path | None:
        return self.paths.build_dir if self.paths is not None else None

    @property
    def log(self) -> Path | None:
        return self.paths.log if self.paths is not None else None

    @property
    def build_json(self) -> Path | None:
        return self.job_dir / self.FILE if self.job_dir is not None else None


# ---------------------------------------------------------------------------------------------------------------------
# bundle.json


@dataclass(frozen=True, kw_only=True)
class FatBinary(Record):
    """A shipped fat binary (rocBLAS, rocSOLVER: ``.hip_fatbin``): its offload bundles and the GPU targets they hold
    (rockbuild.bundle.fatbin.FatbinReport.summary)."""

    file: str | None = None
    section_bytes: int | None = None
    bundles: int | None = None  # how many offload bundles
    compressed_bundles: int | None = None
    targets: tuple[str, ...] = ()
    device_bytes: Mapping[str, int] = field(default_factory=dict)  # gfx target -> bytes of its code objects


@dataclass(frozen=True, kw_only=True)
class NeededVersion(Record):
    """The highest version of a symbol family (GLIBC, GLIBCXX) the bundle needs, and the file that needs it."""

    version: str
    file: str


def _read_versions(value: Mapping[str, NeededVersion]) -> dict[str, tuple[str, str]]:
    return {k: (v.version, v.file) for k, v in value.items()}


def _write_versions(value: Mapping[str, tuple[str, str]]) -> dict[str, dict[str, str]]:
    return {k: {"version": version, "file": file} for k, (version, file) in value.items()}


_VERSIONS = json_form(Mapping[str, NeededVersion], _read_versions, _write_versions)
"""GLIBC -> (2.38, libamdhip64.so.7) in Python, GLIBC -> {version, file} in JSON."""


@dataclass(frozen=True, kw_only=True)
class AuditRecord(Record):
    """An audit of a bundle (rockbuild.bundle.audit.audit_bundle makes it; bundle.json's ``audit``): each check, the
    verdict, what failed and warned, the symbol versions the bundle needs, its fat binaries' GPU code."""

    path: Path | None = None  # the bundle audited
    platform: str | None = None
    backend: str | None = None
    ok: bool | None = None  # every check passed (None: a file that does not say)
    targets: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()  # "<check>: <failure>"
    warnings: tuple[str, ...] = ()
    versions: Mapping[str, tuple[str, str]] = field(default_factory=dict, metadata=_VERSIONS)  # GLIBC: (2.38, file)
    fat_binaries: tuple[FatBinary, ...] = ()
    checks: tuple[Check, ...] = ()

    @classmethod
    def of(
        cls,
        path: Path,
        platform: str,
        backend: str,
        targets: tuple[str, ...],
        checks: tuple[Check, ...],
        *,
        versions: Mapping[str, tuple[str, str]] | None = None,
        fat_binaries: tuple[FatBinary, ...] = (),
    ) -> AuditRecord:
        """The audit of these checks: its verdict, failures and warnings are theirs."""
        return cls(
            path=path,
            platform=platform,
            backend=backend,
            ok=all(c.ok for c in checks),
            targets=targets,
            failures=tuple(f"{c.name}: {f}" for c in checks for f in c.failures),
            warnings=tuple(f"{c.name}: {w}" for c in checks for w in c.warnings),
            versions=dict(versions or {}),
            fat_binaries=fat_binaries,
            checks=checks,
        )

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def raise_if_failed(self, where: Path | str) -> None:
        """An AuditError (exit 10) naming ``where``, the count and the first failure, when a check failed."""
        if self.ok is False:
            raise AuditError(f"{where}: {len(self.failures)} audit failure(s), first: {self.failures[0]}")

    def render(self) -> str:
        lines = [f"audit of {self.path}: {'OK' if self.ok else 'FAILED'} (targets {','.join(self.targets) or '?'})"]
        for c in self.checks:
            lines.append(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}")
            lines.extend(f"         {f}" for f in c.failures)
            lines.extend(f"         warning: {w}" for w in c.warnings)
        for family, (version, file) in self.versions.items():
            lines.append(f"  needs {family}_{version} (highest, from {file})")
        for fat in self.fat_binaries:
            lines.append(f"  {fat.file}: {fat.bundles} offload bundles, targets {' '.join(fat.targets)}")
        proofs = next((c.details.get("pruned") for c in self.checks if c.name == "code-objects"), None) or []
        for proof in proofs:
            lines.append(f"  {proof['file']}: {proof['summary']}")
        notes = next((c.details.get("checked_again") for c in self.checks if c.name == "code-objects"), None) or []
        lines.extend(f"  {note}" for note in notes)
        return "\n".join(lines)


@dataclass(frozen=True)
class FileCount(Record):
    """A number of files and their bytes."""

    files: int = 0
    bytes: int = 0


@dataclass(frozen=True, kw_only=True)
class KernelFolder(Record):
    """One kernel data folder of a bundle (rockbuild.bundle.kernels.prune_kernel_folder): where it comes from, where
    it goes, what was kept and dropped for the job's targets."""

    component: str = ""  # rocblas, hipblaslt, kpack
    source: Path | None = None
    dest: str = ""  # rocblas/library: its place in the bundle
    kept: FileCount = field(default_factory=FileCount)
    dropped: FileCount = field(default_factory=FileCount)
    generic_files: int = 0  # files for every target (no gfx token in the name): always kept
    per_target: Mapping[str, FileCount] = field(default_factory=dict)  # a kept target -> its files

    @property
    def files_kept(self) -> int:
        return self.kept.files

    @property
    def bytes_kept(self) -> int:
        return self.kept.bytes

    @property
    def files_dropped(self) -> int:
        return self.dropped.files

    @property
    def bytes_dropped(self) -> int:
        return self.dropped.bytes


@dataclass(frozen=True, kw_only=True)
class KernelsRecord(Record):
    """bundle.json's ``kernels`` (rockbuild.bundle.kernels.plan_kernel_data makes it): the kernel folders a bundle
    ships, pruned to its targets, why it lacks some (``errors``) or leaves some out (``skipped``), their totals."""

    folders: tuple[KernelFolder, ...] = ()
    errors: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # folders of the root that no shipped library uses
    kept: FileCount = field(init=False, default_factory=FileCount)  # derived: the folders' sums
    dropped: FileCount = field(init=False, default_factory=FileCount)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "kept", FileCount(sum(f.kept.files for f in self.folders), sum(f.kept.bytes for f in self.folders))
        )
        object.__setattr__(
            self,
            "dropped",
            FileCount(sum(f.dropped.files for f in self.folders), sum(f.dropped.bytes for f in self.folders)),
        )


# ---------------------------------------------------------------------------------------------------------------------
# bundle.json's closure: the libraries a build's programs need (rockbuild.bundle.elf and .pe make it)

# Where a library came from / why it is (not) in the bundle.
LibraryStatus = Literal["root", "ships", "system", "missing"]
LibraryKind = Literal["lib", "exe"]
RootVia = Literal["bin", "extra"]  # how a root of the closure came: a file of bin/, or an extra (dlopen'ed) library
ROOT: Literal["root"] = "root"  # a file of the build's bin/ (executables keep their names)
SHIPS: Literal["ships"] = "ships"  # found by the closure or declared as an extra: copied
SYSTEM: Literal["system"] = "system"  # left to the host by the policy
MISSING: Literal["missing"] = "missing"  # needed, not found anywhere: an error


@dataclass(frozen=True, kw_only=True)
class Library(Record):
    """One node of a closure, named as the loader asks for it (DT_NEEDED / import name / dlopen name)."""

    name: str
    status: LibraryStatus
    kind: LibraryKind = "lib"
    path: Path | None = None  # where it was found (as found: may be a symlink)
    real_path: Path | None = None  # the file whose bytes ship
    soname: str | None = None
    needed_by: tuple[str, ...] = ()
    via: str = ""  # DT_NEEDED, import, delay-import, extra, bin
    reason: str = ""  # why it is system, or which extra brought it
    size: int = 0


@dataclass(frozen=True, kw_only=True)
class Closure(Record):
    """Everything the roots need, as bundle.json holds it: what ships (the build's own files included), what the
    host provides, what is missing (:meth:`of` sorts a gatherer's libraries by their status)."""

    platform: str
    machine: str = ""
    ships: tuple[Library, ...] = ()  # root and ships, in the order found
    system: tuple[Library, ...] = ()
    missing: tuple[Library, ...] = ()
    warnings: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, platform: str, libraries: tuple[Library, ...] = (), *, machine: str = "", warnings: tuple[str, ...] = ()
    ) -> Closure:
        return cls(
            platform=platform,
            machine=machine,
            warnings=warnings,
            ships=tuple(e for e in libraries if e.status in (ROOT, SHIPS)),
            system=tuple(e for e in libraries if e.status == SYSTEM),
            missing=tuple(e for e in libraries if e.status == MISSING),
        )

    @property
    def entries(self) -> tuple[Library, ...]:
        return self.ships + self.system + self.missing

    def with_status(self, *status: str) -> tuple[Library, ...]:
        return tuple(e for e in self.entries if e.status in status)

    @property
    def shipped(self) -> tuple[Library, ...]:
        return self.ships

    def names(self) -> set[str]:
        return {e.name for e in self.ships}


@dataclass(frozen=True, kw_only=True)
class PlannedFile(Record):
    """One file of a bundle (rockbuild.bundle.plan makes it): where it comes from and what is done to it; bundle.json
    lists the programs and libraries (``files``), the kernel data files are counted (``data_files``)."""

    path: str  # inside the bundle (posix)
    kind: Literal["exe", "lib", "data"]
    size: int
    source: Path  # the real file whose bytes are copied
    mode: int = 0o644
    found_as: Path | None = None  # the path it was found under when not its real path (a symlink, a chroot path)
    patchelf: tuple[str, ...] = ()  # patchelf's arguments, () when none is needed
    strip: bool = False
    prune_targets: tuple[str, ...] = ()  # GPU targets dropped from its .hip_fatbin (--no-prune-fatbin: none)


@dataclass(frozen=True, kw_only=True)
class PruneProof(Record):
    """The independent check of one pruned fat binary against its original (rockbuild.bundle.fatbin.verify_pruned
    makes it): LLVM's tools listed the same host entry and job targets and unbundled byte-identical code objects; the
    ELF identity (SONAME, NEEDED, dynamic symbols, other sections) is the original's."""

    ok: bool
    tools: Mapping[str, Any] = field(default_factory=dict)  # the bundler's path and version
    original: str = ""
    original_sha256: str | None = None
    sha256: str | None = None  # of the verified (shipped) file
    bundles: int = 0
    bundles_rewritten: int = 0
    kept: tuple[str, ...] = ()  # the triples LLVM's tool lists in the pruned library
    kept_targets: tuple[str, ...] = ()  # their gfx targets
    code_objects: int = 0  # kept code objects unbundled from both and compared byte for byte
    code_object_bytes: int = 0
    identity: Mapping[str, Any] = field(default_factory=dict)  # the original's (the pruned matched it when ok)
    cross_check: str | None = None  # what rockbuild's own reader of the original said
    failures: tuple[str, ...] = ()
    seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class PrunedFatbin(Record):
    """One shipped library whose fat binary lost the other GPU targets' code (rockbuild.bundle.fatbin.prune_fatbin),
    with its proof once it ran (``verification``; None: not verified, which the audit fails)."""

    file: str  # librocblas.so.5, in the bundle's top folder
    bundles: int
    rewritten: int
    section_bytes: int
    bytes_before: int  # bytes of bundles in the section before (compressed as stored)
    bytes_after: int
    entries_dropped: int
    bytes_in_holes: int = 0  # zero blocks left unallocated in the shipped file (sparse), once it was written
    verification: PruneProof | None = None
    bytes_zeroed: int = field(init=False, default=0)  # derived

    def __post_init__(self) -> None:
        object.__setattr__(self, "bytes_zeroed", self.bytes_before - self.bytes_after)


@dataclass(frozen=True, kw_only=True)
class FatbinPruning(Record):
    """bundle.json's ``fatbin_pruning``: what was asked (on, auto, off), which libraries hold other targets' code,
    whether they were pruned, with which tools, or why not."""

    asked: str | None = None
    libraries: tuple[str, ...] = ()
    done: bool | None = None
    reason: str | None = None
    tools: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class KpackRef(Record):
    """A kpack reference in a bundled library's ``.rocm_kpack_ref`` section, rewritten for the bundle's flat layout
    (rockbuild.bundle.kpack.flatten_refs): the file, and the reference before and after."""

    file: str
    before: str = field(metadata=json_key("from"))
    after: str = field(metadata=json_key("to"))


@dataclass(frozen=True, kw_only=True)
class BundleRecord(Record):
    """``bundle/bundle.json``: the bundle's own record: files, sizes, sources, closure, kernels, audit."""

    FILE: ClassVar[str] = "bundle.json"

    format: int | None = None  # BUNDLE_FORMAT
    tool: str | None = None
    dry_run: bool | None = None
    out: str | None = None
    platform: str | None = None
    backend: str | None = None
    targets: tuple[str, ...] = ()
    files: tuple[PlannedFile, ...] = ()
    data_files: int | None = None
    total_bytes: int | None = None
    closure: Closure | None = None
    kernels: KernelsRecord | None = None
    skipped: tuple[str, ...] = ()
    rocm: BuildRocm | None = None  # None in a bundle without ROCm (Vulkan, CPU)
    policy: str | None = None
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    plan_seconds: float | None = None
    fatbin_pruning: FatbinPruning | None = None
    pruned_fatbins: tuple[PrunedFatbin, ...] = ()
    kpack_refs: tuple[KpackRef, ...] = ()
    audit: AuditRecord | None = None
    seconds: Mapping[str, float] = field(default_factory=dict)

    @property
    def audit_failed(self) -> bool:
        return self.audit is not None and self.audit.ok is False


# ---------------------------------------------------------------------------------------------------------------------
# smoke.json and gpu-smoke.json


@dataclass(frozen=True, kw_only=True)
class ExpectGpu(Record):
    """Whether the smoke required a GPU run: what was asked (auto | yes | no), why it was decided so, and the devices
    the bundle saw."""

    asked: str | None = None
    reason: str | None = None
    devices_found: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SmokeGpu(Record):
    """The smoke's GPU verdict (each backend's rules judge it: rockbuild.backends): where the weights went
    (``placement`` gpu | partial | cpu | unknown), whether a GPU run was required (``expected``; None: not decided)
    and was had (``ok``), the one-line summary, the MiB of weights on the device and on the host."""

    placement: str | None = None
    expected: bool | None = None
    ok: bool | None = None
    summary: str | None = None
    gpu_mib: float | None = None
    host_mib: float | None = None
    offloaded: str | None = None
    devices: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Buffer(Record):
    """One ``<device> model buffer size = X MiB`` line (or a KV buffer's): where part of the weights went."""

    device: str  # CPU_Mapped, CPU, ROCm0, Vulkan0, RPC0[127.0.0.1:49619], ...
    mib: float


@dataclass(frozen=True)
class VulkanLoad(Record):
    """What a log says about Vulkan: KV buffers of the last load, ggml_vulkan's devices, fallback warnings."""

    seen: bool  # the log mentions a Vulkan device, buffer, ggml_vulkan or the loader
    kv_buffers: tuple[Buffer, ...] = ()
    devices: tuple[str, ...] = ()  # "0 = llvmpipe (LLVM 22.1.8, 256 bits) (llvmpipe)"
    fallbacks: tuple[str, ...] = ()  # user-facing meanings of the VULKAN_FALLBACKS lines found
    cpu_type_device: bool = False  # "Device type is CPU": lavapipe/llvmpipe, fine for a smoke test


def _read_offload(text: str | None) -> tuple[int, int] | None:
    done, _, total = (text or "").partition("/")
    return (int(done), int(total)) if done.isdigit() and total.isdigit() else None


_OFFLOAD = json_form(str | None, _read_offload, lambda pair: f"{pair[0]}/{pair[1]}" if pair else None)
"""``offloaded N/M layers to GPU``: a pair in Python, ``"N/M"`` in JSON."""


@dataclass(frozen=True)
class LoadReport(Record):
    """The model load as a run's log tells it (the last load when there are several, e.g. llama-cli's fit probe);
    ``vulkan`` is written only when the log shows Vulkan or a CPU-fallback warning."""

    buffers: tuple[Buffer, ...] = ()
    offloaded: tuple[int, int] | None = field(default=None, metadata=_OFFLOAD)
    devices: tuple[str, ...] = ()  # "ROCm0 (AMD Radeon Graphics)" from "using device ..." lines
    isas: tuple[str, ...] = ()  # gfx targets of the devices ggml_cuda_init found
    vulkan: VulkanLoad | None = None

    KEYS: ClassVar[tuple[str, ...]] = ("buffers", "offloaded", "devices", "isas")  # vulkan: written when set


@dataclass(frozen=True, kw_only=True)
class SmokeBackends(Record):
    """The ggml backend modules a run loaded (its ``load_backend: loaded X backend from PATH`` lines): the CPU variant
    file, the GPU backend; at the top of smoke.json also the CPU variant modules the bundle ships."""

    cpu: str | None = None  # libggml-cpu-zen4.so
    cpu_variant: str | None = None  # zen4 (None: plain libggml-cpu.so, or no CPU module loaded)
    gpu: str | None = None  # the GPU backend's name: ROCm | Vulkan
    gpu_file: str | None = None  # libggml-hip.so
    others: tuple[str, ...] = ()  # RPC, BLAS
    shipped: tuple[str, ...] = ()  # the bundle's libggml-cpu-<variant>.so files

    @property
    def loaded(self) -> bool:
        """Did the run log any backend module?"""
        return bool(self.cpu or self.gpu or self.others)


@dataclass(frozen=True, kw_only=True)
class SmokeCheck(Record):
    """A check the smoke makes of some bundles only (llama-server's web UI: ``GET /``, the browser's chat):
    ``result`` passed | failed | not checked, ``detail`` what was seen or why it was not checked."""

    result: str
    detail: str | None = None
    seconds: float | None = None
    url: str | None = None
    status: int | None = None  # GET /: the HTTP status
    content_type: str | None = None
    screenshot: str | None = None  # the browser: a PNG of the page with the model's answer
    answer: str | None = None  # the browser: the start of the answer as the page shows it
    browser: str | None = None  # the browser's name and version


@dataclass(frozen=True, kw_only=True)
class BenchFigure(Record):
    """A llama-bench line: the test (pp512, tg128), tokens per second and its spread, the GPU and backends."""

    test: str | None = None
    n_prompt: int | None = None
    n_gen: int | None = None
    tokens_per_second: float | None = None
    stddev: float | None = None
    spread_pct: float | None = None  # stddev in per cent of the mean (rockbuild perf's noise limit reads it)
    warmup: int | None = None  # discarded runs before the measured one (the GPU bench warms up)
    backends: str | None = None
    gpu_info: str | None = None
    n_gpu_layers: int | None = None
    model_type: str | None = None
    build: str | None = None  # llama.cpp's commit and build number as llama-bench reports them

    @property
    def spread(self) -> float | None:
        """``spread_pct``, else computed from ``stddev`` (manifests from before the field)."""
        if self.spread_pct is not None:
            return self.spread_pct
        if self.stddev is not None and self.tokens_per_second:
            return round(100.0 * self.stddev / self.tokens_per_second, 2)
        return None

    @property
    def rate(self) -> float:
        """Tokens per second, 0 when the line had none."""
        return self.tokens_per_second or 0.0


@dataclass(frozen=True, kw_only=True)
class SmokeRun(Record):
    """One of the smoke's runs (cli, server, bench, programs, numerics): its verdict, log and, when it failed, the
    log's tail; what it saw (the backends it loaded, the text it generated, the model load, llama-bench's lines) and
    its own facts. A run has only the keys that apply to it (:meth:`Record.keyed`): the generation's when it generated,
    ``log_tail`` when it failed; the server's port, pid and timings and the numerics step's record are kept as they
    are (``extra``)."""

    name: str | None = None
    command: tuple[str, ...] = ()
    ok: bool | None = None
    seconds: float | None = None
    returncode: int | None = None
    failure: str | None = None
    log: str | None = None
    backends: SmokeBackends | None = None
    text: str | None = None  # what it generated (llama-cli, llama-server)
    tokens: int | None = None
    tokens_per_second: float | None = None
    prompt_tokens_per_second: float | None = None
    load: LoadReport | None = None
    bench: tuple[BenchFigure, ...] = ()
    web_ui: SmokeCheck | None = None  # the server run: GET / of a build with a web UI
    browser: SmokeCheck | None = None  # the server run, with --browser: a message typed into the chat page
    # the programs run (rockbuild.smoke.runner.run_programs): each one's status, arguments, exit code and log
    programs: tuple[Mapping[str, Any], ...] = ()
    checked: int | None = None
    absent: tuple[str, ...] = ()
    known: tuple[str, ...] = ()  # programs that failed as programs.yaml's known_failures say
    log_tail: tuple[str, ...] = ()

    @property
    def generated(self) -> bool:
        """Did the run get to generate? Its record has the generation's keys then (``text`` None: none was found)."""
        return "text" in self.keys or self.text is not None


# the cpu_variants step's words (rockbuild.smoke.variants uses them too)
_PASSED: Final = "passed"
_FAILED: Final = "failed"
_SKIPPED: Final = "skipped"
NOT_RUNNABLE: Final = "not runnable here"  # a CPU variant ggml's scorer does not load on this CPU: not failed
NOT_RUN: Final = "not run"  # known answers: the model has none, or numerics are off


@dataclass(frozen=True, kw_only=True)
class VariantReferenceCheck(Record):
    """One CPU variant's short run against its own reference (rockbuild.smoke.variants makes it): the verdict, the
    figures, and the top-k it kept in the smoke logs (what ``rockbuild baseline`` records)."""

    result: Literal["passed", "failed", "not checked"]
    detail: str = ""
    mean_kld: float | None = None  # folded onto the reference's top-k: a lower bound of the true KL divergence
    same_top: float | None = None  # percent of positions whose top token is the reference's
    positions: int | None = None
    topk: str | None = None
    about: dict[str, Any] = field(default_factory=dict)  # model, model_sha256, text, ctx, variant, os
    seconds: float | None = None  # the run's (what the check adds to the variant's time)


@dataclass(frozen=True, kw_only=True)
class SmokeCpuVariant(Record):
    """One CPU variant module run alone (rockbuild.smoke.variants makes it): whether ggml runs it here, its figures,
    why it failed."""

    variant: str  # zen4
    runnable: bool  # ggml's scorer loaded it on this CPU
    result: Literal["passed", "failed", "not runnable here"]
    pp512_tps: float | None = None
    tg_tps: float | None = None
    known_answers: Literal["passed", "failed", "not run"] | None = NOT_RUN
    seconds: float | None = 0.0
    failure: str | None = None  # "llama-bench died of SIGILL (illegal instruction) on pp512"
    reference: VariantReferenceCheck | None = None  # its numbers against its own reference (None: not made)

    def describe(self, tg_test: str = "tg") -> str:
        """``passed (pp512 230.1 t/s, tg8 23.4 t/s, known answers passed) in 12.3s``, ``not runnable here``, or the
        result with why it failed."""
        if not self.runnable and self.result != _FAILED:
            return NOT_RUNNABLE
        parts = [
            f"{name} {tps:.1f} t/s"
            for name, tps in (("pp512", self.pp512_tps), (tg_test, self.tg_tps))
            if tps is not None
        ]
        if self.known_answers not in (None, NOT_RUN):
            parts.append(f"known answers {self.known_answers}")
        if self.reference is not None and self.reference.mean_kld is not None:
            parts.append(f"KLD {self.reference.mean_kld:.6f} against its reference")
        elif self.reference is not None:
            parts.append(f"reference {self.reference.result}")
        figures = f" ({', '.join(parts)})" if parts else ""
        return f"{self.result}{figures} in {self.seconds or 0:.1f}s" + (f": {self.failure}" if self.failure else "")


@dataclass(frozen=True, kw_only=True)
class SmokeCpuVariants(Record):
    """The smoke's cpu_variants step: every CPU variant this machine runs, each alone, and the one ggml picks from
    the whole bundle (rockbuild.smoke.variants makes it; a skipped step has the first four keys alone)."""

    result: Literal["passed", "failed", "skipped"]
    detail: str | None = None
    picked: str | None = None  # the variant the default dispatch (the whole bundle) loads here
    variants: tuple[SmokeCpuVariant, ...] = ()
    problem: str | None = None  # a failure of the step as a whole (no variant loads from the whole bundle)
    seconds: float | None = None
    logs: Path | None = None  # one folder per variant
    tg_test: str | None = None  # tg8: the tg test each variant ran (what tg_tps measured)

    @classmethod
    def skipped(cls, why: str, picked: str | None = None) -> SmokeCpuVariants:
        """The step when it did not run, and why."""
        return cls.keyed({"result": _SKIPPED, "detail": why, "picked": picked, "variants": ()})

    @property
    def ran(self) -> bool:
        return self.result != _SKIPPED

    def names_by_result(self) -> dict[str, list[str]]:
        """The variants' names under ``passed``, ``failed`` and ``not_runnable`` (ggml does not load it here)."""
        return {
            key: [v.variant for v in self.variants if v.result == result]
            for key, result in (("passed", _PASSED), ("failed", _FAILED), ("not_runnable", NOT_RUNNABLE))
        }

    @property
    def failures(self) -> tuple[str, ...]:
        """One line per failed variant (``CPU variant sapphirerapids: llama-bench died of SIGILL ...``), after the
        step's own failure."""
        out = [f"CPU variants: {self.problem}"] if self.problem else []
        return tuple(out + [f"CPU variant {v.variant}: {v.failure}" for v in self.variants if v.result == _FAILED])

    @property
    def ok(self) -> bool:
        return not self.failures

    def render_lines(self) -> list[str]:
        """The human lines: the verdict, then one line per variant with its t/s."""
        mark = {_PASSED: "ok", _FAILED: "FAIL"}.get(self.result, "skip")
        lines = [
            f"  [{mark}] cpu variants" + (f" in {self.seconds or 0:.1f}s" if self.variants else "") + f": {self.detail}"
        ]
        for v in self.variants:
            label = v.variant + (" (picked)" if v.variant == self.picked else "")
            lines.append(f"         {label}: {v.describe(self.tg_test or 'tg')}")
        if self.logs is not None and self.variants:
            lines.append(f"         logs: {self.logs}")
        return lines


@dataclass(frozen=True, kw_only=True)
class SmokeHost(Record):
    """The machine the smoke ran on: its kernel and GPU driver, as the kernel tells them (for the release's figures)."""

    kernel: str | None = None
    driver: str | None = None


@dataclass(frozen=True, kw_only=True)
class SmokeRecord(Record):
    """``smoke.json`` (and the GPU leg's ``gpu-smoke.json``): the smoke test's report."""

    FILE: ClassVar[str] = "smoke.json"

    schema: int | None = None
    tool: str | None = None
    rockbuild_version: str | None = None
    ok: bool
    failures: tuple[str, ...] = ()
    bundle: str | None = None
    platform: str | None = None
    targets: tuple[str, ...] = ()
    job_id: str | None = None
    model: ModelFile | None = None  # the model the run used (the model step's record)
    expect_gpu: ExpectGpu | None = None
    device: str | None = None
    preflight: str | None = None
    gpu: SmokeGpu | None = None
    runs: Mapping[str, SmokeRun] = field(default_factory=dict)
    bench: tuple[BenchFigure, ...] = ()
    backends: SmokeBackends | None = None  # what llama-cli and llama-bench loaded, and what the bundle ships
    texts_agree: bool | None = None
    numerics: Mapping[str, Any] = field(default_factory=dict)  # rockbuild.smoke.numerics: cross-backend, answers
    cpu_variants: SmokeCpuVariants | None = None  # rockbuild.smoke.variants: each CPU variant alone
    ops: Mapping[str, Any] = field(default_factory=dict)  # rockbuild.smoke.ops: test-backend-ops on the GPU
    environment_removed: tuple[str, ...] = ()
    started: str | None = None
    finished: str | None = None
    seconds: float | None = None
    host: SmokeHost | None = None


# ---------------------------------------------------------------------------------------------------------------------
# stages.json and fallback.json


@dataclass(frozen=True, kw_only=True)
class StageEntry(Record):
    """A stage's line in stages.json: the fingerprint of its inputs, its result, how long; more detail per stage."""

    key: str
    result: str
    seconds: float | None = None


@dataclass(frozen=True, kw_only=True)
class StagesRecord(Record):
    """``out/<job-id>/stages.json``: each stage's input fingerprint and result (rockbuild.pipeline.stages.StageLog)."""

    FILE: ClassVar[str] = "stages.json"

    schema: int | None = None
    job: str | None = None
    stages: Mapping[str, StageEntry] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class TarballRef(Record):
    """A ROCm nightly by name, version and date (and, for the last good one, the release that proved it)."""

    name: str | None = None
    version: str | None = None
    date: str | None = None
    release: str | None = None


@dataclass(frozen=True, kw_only=True)
class FallbackRecord(Record):
    """``out/<job-id>/fallback.json``: the newest ROCm failed and the job ran again on its group's last good one."""

    FILE: ClassVar[str] = "fallback.json"

    schema: int | None = None
    newest: TarballRef
    failed_stage: str | None = None
    reason: str | None = None
    log_tail: tuple[str, ...] = ()
    attempt_dir: str | None = None
    last_good: TarballRef | None = None
    result: str | None = None


Verdict = Literal["good", "bad"]
Ship = Literal["missing", "newest-good", "blocked", "fallback"]
Cause = Literal["llama.cpp", "rocm", "machine", "unknown"]
CAUSES: tuple[Cause, ...] = get_args(Cause)
"""What a failed job's triage can blame (rockbuild.nightly.triage): the llama.cpp commit, the ROCm nightly, the machine
(the same inputs passed before), or nothing it could prove."""


@dataclass(frozen=True, kw_only=True)
class TriageTrial(Record):
    """One build the triage or a llama.cpp bisect made: which llama.cpp on which ROCm, and how it ended."""

    llama_commit: str
    rocm: str | None = None  # the tarball's name (None: a job that takes no ROCm)
    verdict: Verdict
    failed_stage: str | None = None
    message: str | None = None
    seconds: float = 0.0
    subject: str | None = None  # the commit's subject line (a bisect step)
    folder: str | None = None
    ccache: Mapping[str, Any] | None = None  # build.json's ccache figures of the step: hits, misses, hit rate


@dataclass(frozen=True, kw_only=True)
class CommitRef(Record):
    """A llama.cpp commit as an alert names it: the full commit, its subject and its pull request (``(#12345)`` at the
    end of a squash-merged subject; None: none named)."""

    commit: str
    subject: str | None = None
    pr: int | None = None


@dataclass(frozen=True, kw_only=True)
class HeldBack(Record):
    """``OUT/held-back.json``: a night held back to an older llama.cpp commit (the matrix's ``regressions: ship:
    newest-good``). Tonight's commit (``tip``) broke the required ``jobs``; their bisect named ``first_bad``; the
    release is built again, every job, from ``good``, the commit before it. inputs.json and manifest.json carry it
    under ``llama_cpp``; the next night compares its commit with ``tip`` (the same tip: nothing changed)."""

    FILE: ClassVar[str] = "held-back.json"

    tip: str
    tip_build_number: str | None = None
    good: CommitRef  # what the release is built from
    first_bad: CommitRef
    jobs: tuple[str, ...] = ()
    failed_stage: str | None = None  # where the first bad commit failed (the first job's)

    def describe(self) -> str:
        """One line for notes, reports and logs."""
        return (
            f"llama.cpp {self.first_bad.commit[:12]} broke {', '.join(self.jobs)}"
            + (f" at {self.failed_stage}" if self.failed_stage else "")
            + f": built from {self.good.commit[:12]}, the commit before it (tonight's is {self.tip[:12]})"
        )


@dataclass(frozen=True, kw_only=True)
class LlamaBisect(Record):
    """A llama.cpp bisect of one job between a good and a bad commit on one ROCm (rockbuild.nightly.triage): the first
    bad commit when it got there (``complete``), else the narrowest range it reached within its bounds."""

    good: str  # the commit known good (the last release that passed)
    bad: str  # the commit known bad (tonight's)
    candidates: int  # commits after ``good`` up to ``bad``
    first_bad: CommitRef | None = None  # complete: the first bad commit; else the bad end of the range reached
    last_good: CommitRef | None = None
    complete: bool = False
    stopped: str | None = None  # why it stopped before naming one commit (its step or minute bound)
    failed_stage: str | None = None  # the first bad commit's failing stage
    log_tail: tuple[str, ...] = ()
    trials: tuple[TriageTrial, ...] = ()
    seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class TriageRecord(Record):
    """``out/<job-id>/triage.json``: which input broke a failed job (``cause``), the builds that showed it
    (``trials``), the llama.cpp bisect when llama.cpp is at fault, and what the night does with the job (``ship``:
    ``missing``, the release goes out without it; ``blocked``; ``fallback``, it ships on the last good ROCm)."""

    FILE: ClassVar[str] = "triage.json"

    schema: int | None = None
    job: str
    cause: Cause
    evidence: str  # one sentence: why that input
    failed_stage: str | None = None
    reason: str | None = None
    log_tail: tuple[str, ...] = ()
    llama_commit: str  # tonight's
    llama_url: str | None = None  # the repository it came from (the alert links its commits)
    rocm: str | None = None  # tonight's tarball
    last_good_release: str | None = None  # the release where the job last passed its smoke test
    last_good_llama: str | None = None
    last_good_rocm: str | None = None
    trials: tuple[TriageTrial, ...] = ()
    bisect: LlamaBisect | None = None
    ship: Ship = "blocked"


# ---------------------------------------------------------------------------------------------------------------------
# inputs.json


def _build_number(value: str | int | None) -> str | None:
    return str(value) if value is not None else None


@dataclass(frozen=True, kw_only=True)
class InputsLlama(Record):
    """The llama.cpp commit every job of the night builds (rockbuild.pipeline.inputs.resolve_llama)."""

    ref: str
    commit: str
    # bNNNN (None: no such tag on the commit); a number in a file written by hand is read as its text
    build_number: str | None = field(default=None, metadata=json_form(str | int | None, _build_number, _build_number))
    url: str
    held_back: HeldBack | None = None  # a night built again from the commit before tonight's first bad one

    def pin(self) -> dict[str, Any]:
        """The commit and build number, as build.json's ``llama_cpp`` records them for a job that never built."""
        return {"commit": self.commit, "build_number": self.build_number}


TARBALL_FIELDS = ("name", "url", "version", "date", "size", "mtime", "index_url")
"""The fields of :class:`InputsRocm` that name one tarball (rockbuild.pipeline.inputs.tarball_fields fills them)."""


@dataclass(frozen=True, kw_only=True)
class InputsRocm(Record):
    """The ROCm tarball of one (OS, group, channel, version), or why there is none (``error``)."""

    key: str
    os: str
    groups: tuple[str, ...]  # asked for: current name, then legacy names
    channel: str
    requested: str  # latest or an exact version
    name: str | None = None  # tarball file name
    url: str | None = None
    version: str | None = None
    date: str | None = None
    size: int | None = None
    mtime: float | None = None
    index_url: str | None = None
    error: str | None = None
    error_kind: Literal["stale", "not-found"] | None = None
    # the newest tarball of this (OS, group) that passed smoke in a published release, when it is not this one:
    # {name, url, version, date, size, mtime, index_url, release}
    last_good: Mapping[str, Any] | None = None

    def fallback(self) -> InputsRocm | None:
        """The last good tarball as an input of its own (same key), or None when there is none."""
        good = self.last_good
        if not good or not good.get("name") or not good.get("url") or good.get("name") == self.name:
            return None
        tarball: dict[str, Any] = {k: good.get(k) for k in TARBALL_FIELDS}
        return replace(self, **tarball, error=None, error_kind=None, last_good=None)

    def describe(self) -> str:
        """``10.1.0a20261201 (2026-12-01)``: the version and its nightly date, for notes and alerts."""
        return f"{self.version or self.name}" + (f" ({self.date})" if self.date else "")

    def failure(self) -> StaleInputError | NotFoundError:
        """Why this job cannot be built: the tarball is too old, or none was found."""
        message = self.error or f"no ROCm tarball was resolved for {self.key}"
        if self.error_kind == "stale":
            return StaleInputError(
                message,
                hint="the host may have stopped publishing: check rocm-channels.yaml "
                "or pin a version with --rocm-version",
            )
        return NotFoundError(message)


@dataclass(frozen=True, kw_only=True)
class InputsJob(Job):
    """A job of inputs.json: the job (all of Job.to_dict()) and the key of its ROCm tarball (None: its backend takes
    none)."""

    rocm_key: str | None = None
    last_good: JobLastGood | None = None  # the release where this job last passed its smoke test (the night's plan)

    @classmethod
    def of(cls, job: Job, rocm_key: str | None) -> InputsJob:
        """``job`` with the key of its tarball in :attr:`InputsRecord.rocm`."""
        return cls(**{f.name: getattr(job, f.name) for f in Job._inputs()}, rocm_key=rocm_key)


@dataclass(frozen=True, kw_only=True)
class InputsRecord(Record):
    """``inputs.json``: what the night builds (rockbuild resolve): the llama.cpp commit, the ROCm tarballs, the jobs."""

    FILE: ClassVar[str] = "inputs.json"

    schema: int
    tool: str
    rockbuild_version: str | None = None
    resolved_at: str | None = None
    max_age_days: int | None = None
    index_url: str | None = None
    llama_cpp: InputsLlama
    patches: str | None = None  # the carried patch series' digest every leg builds with ("none": --no-patches)
    rocm: Mapping[str, InputsRocm] = field(default_factory=dict)
    jobs: tuple[InputsJob, ...] = ()

    def entry(self, job_id: str) -> InputsJob:
        """The job ``job_id`` as inputs.json has it (with its ROCm key); a UsageError naming the jobs when absent."""
        for job in self.jobs:
            if job.id == job_id:
                return job
        ids = [j.id for j in self.jobs]
        raise UsageError(
            f"job {job_id!r} is not in inputs.json{suggest(job_id, ids)}; its jobs: {', '.join(ids)}",
            hint="resolve the inputs for that job (rockbuild resolve --only ...) or leave --inputs out",
        )

    def job(self, job_id: str) -> Job:
        """The job ``job_id`` as the matrix has it (without its ROCm key: the job build.json records)."""
        return self.entry(job_id).narrow(Job)

    def rocm_for(self, job_id: str) -> InputsRocm | None:
        """The job's ROCm tarball; None for a job whose backend uses no ROCm (a Vulkan job: its ``rocm_key`` is
        null; rockbuild.pipeline.inputs.load_inputs refuses a file where a ROCm job has none)."""
        key = self.entry(job_id).rocm_key
        return self.rocm[key] if key is not None else None

    def unresolved(self, job_id: str) -> InputsRocm | None:
        """The job's ROCm input when resolve found no tarball for it (the job cannot be built), else None."""
        rocm = self.rocm_for(job_id)
        return rocm if rocm is not None and rocm.error else None

    def job_fingerprint(self, job_id: str) -> str:
        """A hash of everything this job is built from (the job, the commit, the tarball)."""
        rocm = self.rocm_for(job_id)
        data = {
            "job": self.job(job_id).to_dict(),
            "llama": self.llama_cpp.to_dict(),
            "rocm": rocm.to_dict() if rocm is not None else None,
            **({"patches": self.patches} if self.patches is not None else {}),
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def render(self) -> str:
        """What ``rockbuild resolve`` pinned, in two lines."""
        llama = self.llama_cpp
        text = (
            f"inputs: llama.cpp {llama.commit[:12]} (build {llama.build_number or 'unknown'}), "
            f"{len(self.jobs)} jobs, {len(self.rocm)} ROCm tarball(s)"
        )
        failed = [j.id for j in self.jobs if self.unresolved(j.id)]
        return text + (f"\n  no usable ROCm (these jobs will fail): {', '.join(failed)}" if failed else "")


# ---------------------------------------------------------------------------------------------------------------------
# manifest.json


@dataclass(frozen=True, kw_only=True)
class ManifestRocm(Record):
    version: str | None = None
    date: str | None = None
    therock_commit: str | None = None
    tarball: str | None = None
    tarball_sha256: str | None = None
    group: str | None = None
    fallback: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class ManifestAsset(Record):
    name: str
    size: int | None = None
    sha256: str | None = None
    kind: str | None = None
    job: str | None = None


@dataclass(frozen=True, kw_only=True)
class ManifestSmoke(Record):
    ok: bool | None = None
    gpu: str | None = None
    placement: str | None = None
    model: Mapping[str, Any] | None = None
    web_ui: str | None = None  # "passed", "not checked: no web UI", ...
    browser: str | None = None
    numerics: Mapping[str, Any] | None = None  # BuiltJob.numerics(): cross_backend, known_answers and their figures
    cpu_variants: tuple[Mapping[str, Any], ...] = ()  # BuiltJob.cpu_variant_runs(): each variant alone, per smoke
    ops: Mapping[str, Any] | None = None  # rockbuild.smoke.ops' summary: test-backend-ops' counts, the CPU fallbacks


@dataclass(frozen=True, kw_only=True)
class ManifestGpuSmoke(Record):
    """What a release says of a job's smoke on a real GPU: the verdict, the GPU, the driver, the llama-bench figures."""

    ok: bool | None = None
    runner: tuple[str, ...] = ()
    gpu: str | None = None
    backends: str | None = None
    driver: str | None = None
    kernel: str | None = None
    summary: str | None = None
    numerics: Mapping[str, Any] | None = None  # the GPU run against the CPU (rockbuild.smoke.numerics)
    ops: Mapping[str, Any] | None = None  # test-backend-ops on the real GPU (rockbuild.smoke.ops' summary)
    bench: tuple[BenchFigure, ...] = ()


@dataclass(frozen=True, kw_only=True)
class JobLastGood(Record):
    """The newest published release in which a job passed its smoke test: the llama.cpp commit and ROCm tarball it
    was built from (rockbuild.nightly.run.plan_night reads it from the releases' manifest.json)."""

    release: str
    llama_commit: str | None = None
    rocm: str | None = None  # the tarball's name (None: a job that takes no ROCm)


@dataclass(frozen=True, kw_only=True)
class ManifestJob(Record):
    """A job a release ships: what it is, what it was built from, its assets, audit, smoke and GPU figures."""

    id: str
    os: str | None = None
    name: str | None = None
    backend: str | None = None
    targets: tuple[str, ...] = ()
    required: bool | None = None
    status: str | None = None
    failed_step: str | None = None
    reason: str | None = None
    llama_cpp: LlamaCpp | None = None
    rocm: ManifestRocm | None = None
    isas: tuple[str, ...] = ()
    programs: tuple[str, ...] = ()  # the programs the asset ships (config/programs.yaml, as the tree had them)
    cpu_variants: tuple[str, ...] = ()  # the CPU backend variants it ships (GGML_CPU_ALL_VARIANTS)
    cmake: Mapping[str, str] = field(default_factory=dict)
    assets: tuple[ManifestAsset, ...] = ()
    bundle: Mapping[str, Any] | None = None
    audit: AuditRecord | None = None
    smoke: ManifestSmoke | None = None
    bench: tuple[BenchFigure, ...] = ()
    gpu_smoke: ManifestGpuSmoke | None = None
    glibc_floor: Mapping[str, Mapping[str, str]] | None = None
    web_ui: WebUi | None = None  # llama-server's chat page: built in, or why not
    patches: PatchSet | None = None  # the carried fixes applied to its llama.cpp tree, and those skipped
    # what compiled the bundle: cpu (the programs, libllama, the CPU modules: its OS's common part's compilers for a
    # job built on one), gpu (its GPU library), common_part (that part's job id, or None: built whole)
    compilers: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class FailedJob(Record):
    id: str
    required: bool | None = None
    step: str | None = None
    reason: str | None = None
    cause: str | None = None  # what its triage blamed (triage.json): llama.cpp | rocm | machine | unknown
    first_bad: CommitRef | None = None  # llama.cpp's first bad commit, when a bisect named it
    last_release: str | None = None  # the release that last shipped this job (a user's install takes it from there)


@dataclass(frozen=True, kw_only=True)
class PartialJob(Record):
    """A job of a release published not whole (rockbuild.publish.whole): what its bundle lacks (``web_ui``, program
    names) and, for each, why."""

    id: str
    lacks: tuple[str, ...] = ()
    details: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ManifestPartial(Record):
    """manifest.json's ``partial``: the release was published with ``--allow-partial REASON`` although these jobs'
    bundles lack the chat page or a listed program."""

    reason: str | None = None
    jobs: tuple[PartialJob, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ManifestImage(Record):
    """A container image a release comes with (rockbuild.publish.image): made from one Linux job's bundle, named by
    its digest (the same bundle and base give the same digest), pushed under its tags when the release was published.
    What the podman test saw is not here (it has timings: manifest.json stays the same bytes on a re-run); the notes
    and ``--json`` say it."""

    job: str
    flavour: str | None = None  # rocm-gfx1151 | vulkan
    repository: str | None = None  # ghcr.io/owner/name (None: built, pushed nowhere)
    tags: tuple[str, ...] = ()  # the release's tag, then the flavour's moving tag
    digest: str
    image_id: str | None = None  # the config's digest (what podman load reports)
    compressed_bytes: int | None = None
    unpacked_bytes: int | None = None
    run: str | None = None  # the one command that runs it
    base_packages: tuple[Mapping[str, str], ...] = ()  # the base's Debian packages: name, version, architecture


@dataclass(frozen=True, kw_only=True)
class ManifestLlama(LlamaCpp):
    """manifest.json's ``llama_cpp``: the commit every shipped job was built from and, when the night was held back
    to it (the matrix's ``regressions: ship: newest-good``), why: the night's own commit broke a required job."""

    held_back: HeldBack | None = None


@dataclass(frozen=True, kw_only=True)
class ManifestRecord(Record):
    """A release's ``manifest.json``: every job it ships with its assets, and every job that failed."""

    FILE: ClassVar[str] = "manifest.json"

    schema: int
    tool: str | None = None
    rockbuild_version: str | None = None
    tag: str | None = None
    repository: str | None = None
    fingerprint: str | None = None
    llama_cpp: ManifestLlama | None = None
    patches: PatchSet | None = None  # the carried fixes applied in any shipped job (each job's are in its entry)
    glibc_floor_allowed: Mapping[str, str] = field(default_factory=dict)
    assets: tuple[ManifestAsset, ...] = ()
    jobs: tuple[ManifestJob, ...]
    not_gpu_tested: tuple[str, ...] = ()
    partial: ManifestPartial | None = None  # None: whole; else published with --allow-partial (the reason, the holes)
    failed_jobs: tuple[FailedJob, ...] = ()
    images: tuple[ManifestImage, ...] = ()  # absent before issue 42 and in a release published without --images

    def job(self, job_id: str) -> ManifestJob | None:
        return next((j for j in self.jobs if j.id == job_id), None)

    @classmethod
    def of(cls, manifest: ManifestRecord | Mapping[str, Any], source: str = "manifest.json") -> ManifestRecord:
        """``manifest`` as a record (a release's manifest.json as the GitHub API gave it, or already one)."""
        return manifest if isinstance(manifest, ManifestRecord) else cls.from_dict(manifest, source)


RECORDS: dict[str, type[Record]] = {
    "build.json": BuildRecord,
    "bundle.json": BundleRecord,
    "smoke.json": SmokeRecord,
    "gpu-smoke.json": SmokeRecord,
    "stages.json": StagesRecord,
    "fallback.json": FallbackRecord,
    "triage.json": TriageRecord,
    "held-back.json": HeldBack,
    "inputs.json": InputsRecord,
    "manifest.json": ManifestRecord,
}
"""Each file's record, by file name."""
