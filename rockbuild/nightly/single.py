"""``rockbuild build``: one job built outside the night, from the flags or from the night's pinned inputs, then
bundled: what a maintainer runs on their own machine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rockbuild.build.driver import BuildOptions, build_job
from rockbuild.bundle.plan import BundleReport, BundleRequest, bundle
from rockbuild.bundle.policy import BundlePolicy
from rockbuild.console import step
from rockbuild.core.errors import UsageError
from rockbuild.core.jobs import Job
from rockbuild.core.records import BuildRecord

from .resolve import Inputs
from .run import build_with_inputs


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
        lines = [f"{self.job.id}: llama.cpp ({what}) built for {', '.join(self.job.targets) or self.job.backend}",
                 f"  binaries:   {self.build.paths.bin_dir if self.build.paths else '?'}",
                 f"  build.json: {self.build.build_json}"]
        if self.bundle is not None:
            lines.append(f"  bundle:     {self.build.job_dir / 'bundle' if self.build.job_dir else '?'} (audit passed)")
        return "\n".join(lines)


def build_and_bundle(
    options: BuildOptions, job: Job, *, policy: BundlePolicy, inputs: Inputs | None = None,
    make_bundle: bool = True, prune_fatbin: bool | None = None, quiet: bool = False, git_url_flag: bool = False,
) -> Built:
    """``rockbuild build``: ``job`` (the one ``--target``/``--family``/``--job`` names; with ``inputs_file``, the
    night's record of it), its build (the inputs' commit and tarball with ``inputs``), then its bundle with
    ``policy``."""
    if options.rocm_dir is not None and options.rocm_version is not None:
        raise UsageError("give --rocm DIR or --rocm-version V, not both")
    if inputs is not None:
        if options.ref or options.rocm_version or git_url_flag:
            raise UsageError("--inputs pins llama.cpp and ROCm; leave out --ref, --git-url and --rocm-version")
        result = build_with_inputs(job, inputs, options, quiet=quiet)
    else:
        result = build_job(job, options)
    bundled = None
    if make_bundle:
        rocm_root = result.rocm.root if result.rocm is not None else None
        assert result.paths is not None and result.paths.bin_dir is not None and result.job_dir is not None
        with step(f"bundle ({', '.join(job.targets) or job.backend})"):
            request = BundleRequest.for_job(job, result.paths.bin_dir, Path(rocm_root) if rocm_root else None,
                                            result.job_dir / "bundle", policy=policy, prune_fatbin=prune_fatbin,
                                            quiet=quiet, library_dirs=result.cross.runtime_dirs if result.cross else ())
            bundled = bundle(request)
    return Built(job, result, bundled)
