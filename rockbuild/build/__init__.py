"""Stage 3: compile llama.cpp for a job: GGML_HIP for its gfx targets (ROCm), or GGML_VULKAN (Vulkan).

``source`` provides the llama.cpp tree (an existing one, or a shallow clone of one ref) and what it is (commit, build
number); ``cmake`` holds the CMake command line and the child environment every build shares (Linux, and Windows with
the MSVC environment from vcvars64.bat), to which the job's backend (:mod:`rockbuild.backends`) adds its toolchain,
definitions and variables; ``driver`` runs provide-ROCm -> checkout -> configure -> compile and writes
``out/<job-id>/build.json`` and ``build.log``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rockbuild.bundle import BundleReport
    from rockbuild.config import Job

    from .driver import BuildOptions, BuildResult


@dataclass(frozen=True)
class Built:
    """``rockbuild build``'s result: the build (build.json) and, unless --no-bundle, its bundle."""

    job: Job
    build: BuildResult
    bundle: BundleReport | None

    def to_dict(self) -> dict[str, Any]:
        return {**self.build.to_dict(), "bundle": self.bundle.to_dict() if self.bundle else None}

    def render(self) -> str:
        source = self.build.source
        what = f"build {source.build_number}, commit {source.short_commit}" if source else "?"
        lines = [f"{self.job.id}: llama.cpp ({what}) built for {', '.join(self.job.targets) or self.job.backend}",
                 f"  binaries:   {self.build.build_dir / 'bin'}", f"  build.json: {self.build.build_json}"]
        if self.bundle is not None:
            lines.append(f"  bundle:     {self.build.job_dir / 'bundle'} (audit passed)")
        return "\n".join(lines)


def build_and_bundle(
    options: BuildOptions, *, target: str | None = None, family: str | None = None, job_id: str | None = None,
    config: Path | None = None, os_name: str | None = None, inputs_file: Path | None = None,
    make_bundle: bool = True, prune_fatbin: bool | None = None, quiet: bool = False, git_url_flag: bool = False,
) -> Built:
    """``rockbuild build``: the job (``--target``/``--family``/``--job``, from the night's inputs when given), its
    build (the inputs' commit and tarball with ``inputs_file``), then its bundle."""
    from rockbuild.errors import UsageError

    from .driver import build_job, resolve_job

    if options.rocm_dir is not None and options.rocm_version is not None:
        raise UsageError("give --rocm DIR or --rocm-version V, not both")
    settings = options.settings
    if inputs_file is not None:
        from rockbuild.nightly import build_with_inputs, load_inputs

        if options.ref or options.rocm_version or git_url_flag:
            raise UsageError("--inputs pins llama.cpp and ROCm; leave out --ref, --git-url and --rocm-version")
        inputs = load_inputs(inputs_file)
        wanted = job_id or resolve_job(target=target, family=family, config=config, os_name=os_name,
                                       settings=settings).id
        job = inputs.job(wanted)
        result = build_with_inputs(job, inputs, options, quiet=quiet)
    else:
        job = resolve_job(target=target, family=family, job_id=job_id, config=config, os_name=os_name,
                          settings=settings)
        result = build_job(job, options)
    bundled = None
    if make_bundle:
        from rockbuild.bundle import bundle_job
        from rockbuild.console import step

        rocm_root = (result.rocm or {}).get("root")
        with step(f"bundle ({', '.join(job.targets) or job.backend})"):
            bundled = bundle_job(job, result.build_dir / "bin", Path(rocm_root) if rocm_root else None,
                                 result.job_dir / "bundle", prune_fatbin=prune_fatbin, quiet=quiet)
    return Built(job, result, bundled)
