"""The one-job pipeline: a job's stages, fetch, build, bundle and smoke, each entered once, with resume
(:mod:`.stages`: each stage's fingerprint in the job folder's stages.json). What a stage makes reaches the next one
through the job folder's records (build.json, bundle.json) and, for the ROCm root and tarball, through the run.

The night runs it for every job (:mod:`rockbuild.nightly.run`: the fan-out, the fallback to the last good ROCm,
publishing); ``rockbuild build`` runs its build and bundle on a maintainer's machine (:func:`build_and_bundle`), from
the flags or from the night's pinned inputs (:mod:`.inputs`). It sits above the stages and below the night: it
imports no command and nothing of the night.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rockbuild import __version__, console
from rockbuild.archive import read_marker
from rockbuild.backends import REGISTRY
from rockbuild.bundle.plan import BundleReport, BundleRequest, bundle
from rockbuild.bundle.policy import BundlePolicy
from rockbuild.core.environment import Context
from rockbuild.core.errors import RockbuildError, SmokeError, UsageError
from rockbuild.core.jobs import Job
from rockbuild.core.options import CompileFlags
from rockbuild.core.programs import ProgramList, load_programs
from rockbuild.core.records import BuildErrorInfo, BuildRecord, InputsRecord, InputsRocm, LlamaCpp, Tarball
from rockbuild.jobfolder import JobFolder
from rockbuild.llamacpp.common_part import build_json_sha256, read_common
from rockbuild.llamacpp.driver import BuildOptions, BuildPlan, build_job, plan_build
from rockbuild.llamacpp.patches import NO_PATCHES, PatchSeries, load_patch_series
from rockbuild.rocm.fetch import fetch_pinned
from rockbuild.smoke.config import SmokeConfig
from rockbuild.smoke.runner import SmokeOptions, run_smoke

from .stages import EventHook, Stage, StagesOutcome, fingerprint, run_stages


def carried_patches(series: PatchSeries, flags: CompileFlags) -> str:
    """The digest of the patch series the builds carry (``none`` with --no-patches)."""
    return series.digest if flags.patches else NO_PATCHES


@dataclass(frozen=True)
class JobPipeline:
    """What every job of one run goes through its stages with: the pinned inputs, where job folders and caches go,
    the compile flags, the data files' values, the smoke model (one provider shared by the jobs)."""

    inputs: InputsRecord
    out: Path
    cache: Path
    context: Context
    model: Callable[[], Any]  # the smoke model (a ModelFile), provided once and shared by the jobs
    policy: BundlePolicy
    model_spec: str | None = None  # what it is (it keys the smoke stage)
    compile: CompileFlags = field(default_factory=CompileFlags)
    compile_jobs: int | None = None
    programs: ProgramList = field(default_factory=load_programs)
    patches: PatchSeries = field(default_factory=load_patch_series)
    smoke_config: SmokeConfig = field(default_factory=SmokeConfig)  # smoke.yaml, read once
    smoke: bool = True
    on_event: EventHook | None = None

    @property
    def carried_patches(self) -> str:
        return carried_patches(self.patches, self.compile)

    def run(self, job: Job, rocm: InputsRocm | None) -> StagesOutcome:
        """``job``'s stages with ``rocm`` (its pinned tarball, or its group's last good one; None: a job that takes
        no ROCm), reusing each whose inputs did not change. Never raises for a failure of the job itself: it is
        recorded in the job folder and in the outcome."""
        unfit = self.common_failure(job)
        if unfit is not None:  # nothing to fetch or build for: one line, in build.json as the build step's failure
            folder = JobFolder.of(self.out, job.id)
            folder.record_failure(
                job,
                "common",
                BuildErrorInfo(message=unfit, type="BuildError"),
                LlamaCpp.from_dict(self.inputs.llama_cpp.pin()),
            )
            console.warn(f"{job.id}: {unfit}")
            return StagesOutcome(
                job.id, job.required, "failed", {"fetch": "skipped", "build": "failed"}, "build", unfit
            )
        stages = _JobStages(job, self, rocm)
        return run_stages(
            job.id,
            job.required,
            stages.folder,
            (stages.fetch, stages.build, stages.bundle, stages.smoke),
            on_event=self.on_event,
        )

    def common_failure(self, job: Job) -> str | None:
        """Why ``job`` cannot be built on its common part (missing, failed, another OS: the common part's own one
        line), or None (a job built whole, or a usable common part)."""
        folder = self.common_dir(job)
        if folder is None:
            return None
        try:
            read_common(folder, os_name=job.os)
        except RockbuildError as exc:
            return exc.message
        return None

    def common_dir(self, job: Job) -> Path | None:
        """The common part ``job`` is built on: --common DIR (a CI leg, its artifact), else the night's own folder of
        it (OUT/<os>-common); None for a job built whole."""
        if not job.common:
            return None
        return Path(self.compile.common).absolute() if self.compile.common is not None else self.out / job.common


class _JobStages:
    """The four stages of one job: what each takes from the ones before (the ROCm root, the tarball, the keys)."""

    def __init__(self, job: Job, pipeline: JobPipeline, rocm: InputsRocm | None) -> None:
        self.job, self.pipeline, self.inputs = job, pipeline, pipeline.inputs
        self.rocm = rocm  # the pinned tarball, or its group's last good one on a retry
        self.folder = JobFolder.of(pipeline.out, job.id)
        self.root: Path | None = None
        self.tarball: Tarball | None = None
        self.keys: dict[str, str] = {}

    def fetch(self) -> Stage:  # the plan pins no tarball for a backend that needs no ROCm (Vulkan): nothing to fetch
        job, rocm = self.job, self.rocm
        key = self.keys["fetch"] = (
            fingerprint("fetch", rocm.name, rocm.url) if rocm else fingerprint("fetch", job.backend)
        )
        if rocm is None:
            return Stage("fetch", key, skip=True)

        def still_there(entry: dict[str, Any]) -> bool:
            marker = read_marker(Path(entry["root"]))
            return marker is not None and marker.get("name") == rocm.name

        def reuse(entry: dict[str, Any]) -> None:
            tarball = entry.get("tarball")
            self.root = Path(entry["root"])
            self.tarball = Tarball.from_dict(tarball, "stages.json: stages.fetch.tarball") if tarball else None

        def run() -> dict[str, Any]:
            with console.step(f"{job.id}: ROCm {rocm.version or ''}"):
                fetched = fetch_pinned(rocm, cache=self.pipeline.cache)
            self.root, self.tarball = fetched.root, fetched.tarball()
            return {"root": str(self.root), "tarball": self.tarball.to_dict(), "transferred": fetched.transferred}

        def failed(exc: RockbuildError) -> None:
            self.folder.record_failure(
                job, "rocm", BuildErrorInfo.of(exc), LlamaCpp.from_dict(self.inputs.llama_cpp.pin())
            )

        return Stage("fetch", key, run, still_there, reuse, failed)

    def build(self) -> Stage:
        options, inputs = self.pipeline, self.inputs
        sha256 = self.tarball.sha256 if self.tarball else None
        web_ui = () if options.compile.web_ui else ("no web UI",)  # the keys of earlier nights stay valid
        cross = (f"cross {options.compile.cross}",) if options.compile.cross else ()
        patches = options.carried_patches
        carried = () if patches == NO_PATCHES else (f"patches {patches}",)  # earlier nights' keys stay valid
        common_dir = options.common_dir(self.job)
        common = () if common_dir is None else (f"common {build_json_sha256(common_dir)}",)
        key = self.keys["build"] = fingerprint(
            "build",
            self.keys["fetch"],
            sha256,
            inputs.llama_cpp.to_dict(),
            self.job.to_dict(),
            __version__,
            options.compile.offline,
            *web_ui,
            *cross,
            *carried,
            *common,
        )

        def run() -> None:
            build_options = build_options_for_inputs(
                BuildOptions(
                    out_dir=self.pipeline.out,
                    offline=options.compile.offline,
                    jobs=options.compile_jobs,
                    use_ccache=options.compile.use_ccache,
                    ccache_dir=options.compile.ccache_dir,
                    cache=self.pipeline.cache,
                    web_ui=options.compile.web_ui,
                    web_ui_dist=options.compile.web_ui_dist,
                    context=options.context,
                    programs=options.programs,
                    cross=options.compile.cross,
                    patches=options.compile.patches,
                    patch_series=options.patches,
                    common=common_dir,
                ),
                inputs,
                self.root,
            )
            build_job(self.job, replace(build_options, rocm_tarball=self.tarball), backends=REGISTRY)

        return Stage("build", key, run, lambda _entry: self.folder.built_from(inputs.llama_cpp.commit))

    def bundle(self) -> Stage:
        folder, job = self.folder, self.job
        key = self.keys["bundle"] = fingerprint("bundle", self.keys["build"], self.pipeline.compile.prune_fatbin)
        if job.is_common_part:  # not an asset: the jobs built on it bundle its files
            return Stage("bundle", key, skip=True)

        def still_there(_entry: dict[str, Any]) -> bool:
            meta = folder.bundle_meta()
            return meta is not None and not meta.audit_failed

        def run() -> None:
            shutil.rmtree(folder.bundle_dir, ignore_errors=True)
            folder.bundle_log.unlink(missing_ok=True)
            with console.step(f"{job.id}: bundle ({', '.join(job.targets) or job.backend})"):
                built = folder.build()
                cross = built.cross if built is not None else None
                bundle(
                    BundleRequest.for_job(
                        job,
                        folder.programs_dir(built),
                        self.root,
                        folder.bundle_dir,
                        policy=self.pipeline.policy,
                        prune_fatbin=self.pipeline.compile.prune_fatbin,
                        library_dirs=cross.runtime_dirs if cross else (),
                        backends=REGISTRY,
                    )
                )

        def failed(exc: RockbuildError) -> None:
            folder.bundle_log.write_text(exc.message + "\n", encoding="utf-8")

        return Stage("bundle", key, run, still_there, on_failure=failed)

    def smoke(self) -> Stage:
        folder, options = self.folder, self.pipeline
        key = fingerprint("smoke", self.keys["bundle"], options.model_spec)
        if not options.smoke or self.job.is_common_part:
            folder.smoke_json.unlink(missing_ok=True)
            return Stage("smoke", key, skip=True)

        def run() -> None:
            folder.smoke_json.unlink(missing_ok=True)
            with console.step(f"{self.job.id}: smoke test") as step:
                report = run_smoke(
                    folder.path,
                    self.pipeline.model(),
                    SmokeOptions.from_config(options.smoke_config, programs=options.programs.programs),
                    backends=REGISTRY,
                    report_path=folder.smoke_json,
                )
                if not report.ok:
                    step.fail()
            if not report.ok:
                raise SmokeError(f"the smoke test failed: {report.failures[0]}")

        return Stage("smoke", key, run, lambda _entry: _smoke_passed(folder))


def _smoke_passed(folder: JobFolder) -> bool:
    smoke = folder.smoke()
    return smoke is not None and smoke.ok is True


# ---------------------------------------------------------------------------------------------------------------------
# A job's fetch and build from the pinned inputs, usable on their own (``rockbuild build --inputs``)


def build_options_for_inputs(options: BuildOptions, inputs: InputsRecord, rocm_dir: Path | None) -> BuildOptions:
    """``options`` (BuildOptions) pinned to the inputs: the commit (unless a --source tree is given), the ROCm root."""
    pinned: dict[str, Any] = {"rocm_dir": rocm_dir, "rocm_version": None}
    if options.source_dir is None:
        pinned.update(
            ref=inputs.llama_cpp.commit,
            git_url=inputs.llama_cpp.url,
            build_number=options.build_number or inputs.llama_cpp.build_number,
        )
    return replace(options, **pinned)


def build_with_inputs(job: Job, inputs: InputsRecord, options: BuildOptions) -> BuildRecord:
    """``rockbuild build --inputs``: the inputs' tarball (unless ``options.rocm_dir``; none for a job whose backend
    needs no ROCm), the inputs' commit."""
    folder = JobFolder.of(options.out_dir, job.id)
    tarball = None
    rocm_dir = options.rocm_dir
    rocm = inputs.rocm_for(job.id)
    if rocm_dir is None and rocm is not None:
        try:
            with console.step(f"ROCm {rocm.version or ''} for {job.id} (from inputs.json)"):
                fetched = fetch_pinned(rocm, cache=options.cache or options.context.cache)
        except RockbuildError as exc:
            folder.record_failure(job, "rocm", BuildErrorInfo.of(exc), LlamaCpp.from_dict(inputs.llama_cpp.pin()))
            raise
        rocm_dir, tarball = fetched.root, fetched.tarball()
    return build_job(
        job, replace(build_options_for_inputs(options, inputs, rocm_dir), rocm_tarball=tarball), backends=REGISTRY
    )


# ---------------------------------------------------------------------------------------------------------------------
# ``rockbuild build``: one job built and bundled outside the night


@dataclass(frozen=True)
class Built:
    """``rockbuild build``'s result: the build (build.json) and, unless --no-bundle, its bundle."""

    job: Job
    build: BuildRecord
    bundle: BundleReport | None

    def to_dict(self) -> dict[str, Any]:
        return {**self.build.to_dict(), "bundle": self.bundle.to_dict() if self.bundle else None}

    def render(self) -> str:
        source = self.build.llama_cpp
        what = f"build {source.build_number}, commit {source.short_commit}" if source else "?"
        lines = [
            f"{self.job.id}: llama.cpp ({what}) built for {', '.join(self.job.targets) or self.job.backend}",
            f"  binaries:   {self.build.paths.bin_dir if self.build.paths else '?'}",
            f"  build.json: {self.build.build_json}",
        ]
        if self.bundle is not None:
            lines.append(f"  bundle:     {self.build.job_dir / 'bundle' if self.build.job_dir else '?'} (audit passed)")
        return "\n".join(lines)


def build_and_bundle(
    options: BuildOptions,
    job: Job,
    *,
    policy: BundlePolicy,
    inputs: InputsRecord | None = None,
    make_bundle: bool = True,
    prune_fatbin: bool | None = None,
    git_url_flag: bool = False,
) -> Built:
    """``rockbuild build``: ``job`` (the one ``--target``/``--family``/``--job`` names; with ``inputs_file``, the
    night's record of it), its build (the inputs' commit and tarball with ``inputs``), then its bundle with
    ``policy``."""
    _check_request(options, inputs, git_url_flag)
    if inputs is not None:
        result = build_with_inputs(job, inputs, options)
    else:
        result = build_job(job, options, backends=REGISTRY)
    bundled = None
    if make_bundle:
        rocm_root = result.rocm.root if result.rocm is not None else None
        assert result.paths is not None and result.paths.bin_dir is not None and result.job_dir is not None
        with console.step(f"bundle ({', '.join(job.targets) or job.backend})"):
            request = BundleRequest.for_job(
                job,
                result.paths.bin_dir,
                Path(rocm_root) if rocm_root else None,
                result.job_dir / "bundle",
                policy=policy,
                prune_fatbin=prune_fatbin,
                library_dirs=result.cross.runtime_dirs if result.cross else (),
                backends=REGISTRY,
            )
            bundled = bundle(request)
    return Built(job, result, bundled)


def _check_request(options: BuildOptions, inputs: InputsRecord | None, git_url_flag: bool) -> None:
    if options.rocm_dir is not None and options.rocm_version is not None:
        raise UsageError("give --rocm DIR or --rocm-version V, not both")
    if inputs is not None and (options.ref or options.rocm_version or git_url_flag):
        raise UsageError("--inputs pins llama.cpp and ROCm; leave out --ref, --git-url and --rocm-version")


def plan_build_and_bundle(
    options: BuildOptions,
    job: Job,
    *,
    inputs: InputsRecord | None = None,
    make_bundle: bool = True,
    git_url_flag: bool = False,
) -> BuildPlan:
    """``rockbuild build --dry-run``: what :func:`build_and_bundle` would do (the inputs' commit and tarball with
    ``inputs``), refused for the same reasons, with nothing fetched, cloned or compiled."""
    _check_request(options, inputs, git_url_flag)
    pinned = None
    if inputs is not None:
        pinned = inputs.rocm_for(job.id) if options.rocm_dir is None else None
        options = build_options_for_inputs(options, inputs, options.rocm_dir)
    return plan_build(job, options, backends=REGISTRY, pinned=pinned, bundle=make_bundle)
