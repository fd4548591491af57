"""The values the command line's option groups yield: each group of flags that several commands share comes to the
command as one frozen value (as cibuildwheel's options are one object), which the stages and the night take whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

DEFAULT_MAX_AGE_DAYS = 3  # a group whose newest nightly is older fails its jobs (stale inputs)
# smoke.yaml's run.cpu_variants.check and ``--cpu-variants``: every CPU variant module this machine runs, the one ggml
# picks, or none (rockbuild.smoke.variants)
CPU_VARIANT_CHECKS = ("all", "picked", "none")


@dataclass(frozen=True)
class JobSelection:
    """``-c FILE --only GLOB --os OS --target NAME``: which jobs of which matrix file."""

    matrix_file: Path | None = None  # None: the shipped config/nightly.yaml
    only: tuple[str, ...] = ()  # fnmatch globs over job ids, {a,b} braces
    oses: tuple[str, ...] = ()  # replaces the matrix's os axis
    targets: tuple[str, ...] = ()  # replaces the matrix's target axis


@dataclass(frozen=True)
class Pins:
    """``--llama-ref --rocm-version --max-age-days --index-url --git-url``: what a night builds from."""

    llama_ref: str | None = None  # None: the matrix's llama_ref
    rocm_version: str | None = None  # 'latest' or an exact TheRock version for every job
    max_age_days: int | None = DEFAULT_MAX_AGE_DAYS
    index_url: str | None = None  # a TheRock index page instead of the channels' hosts
    git_url: str | None = None  # None: the upstream llama.cpp repository


@dataclass(frozen=True)
class GitHubTarget:
    """``--repo --api-url``: where releases and issues live (None: $GITHUB_REPOSITORY, api.github.com)."""

    repo: str | None = None
    api_url: str | None = None


@dataclass(frozen=True)
class ModelChoice:
    """``--model --vocab``: the smoke model (None: the pinned one; ``tiny``, a path or a URL)."""

    spec: str | None = None
    vocab: Path | None = None  # llama.cpp's ggml-vocab-qwen2.gguf, for the tiny model


@dataclass(frozen=True)
class CompileFlags:
    """``--offline --ccache-dir --no-ccache --prune-fatbin --web-ui DIR --no-web-ui --cross --patches FILE
    --no-patches --common DIR``: how a build compiles and bundles."""

    offline: bool = False  # system OpenSSL instead of BoringSSL's configure-time clone
    ccache_dir: Path | None = None  # None: <cache>/ccache
    use_ccache: bool = True
    prune_fatbin: bool | None = None  # None: prune when the ROCm root can prove it
    web_ui: bool = True  # False: llama-server without its chat page (--no-web-ui)
    web_ui_dist: Path | None = None  # a prebuilt web UI (rockbuild webui --out DIR) instead of building it
    cross: str | None = None  # a cross toolchain (mingw-w64) for a job of another OS than this machine's
    patches: bool = True  # False: the pristine llama.cpp tree, no carried fix (--no-patches)
    patch_series: Path | None = None  # another patch series (--patches FILE); None: patches/patches.yaml
    common: Path | None = None  # --common DIR: the job folder of the OS's common part; compile the GPU library alone


ShipMode = Literal["missing", "newest-good", "blocked"]
SHIP_MODES: tuple[ShipMode, ...] = get_args(ShipMode)
"""What a night does with a job that llama.cpp broke (the matrix's ``regressions: ship``): ``missing`` publishes the
other jobs, the failed one named with the release that last had it (fresh: the other families get tonight's commit);
``newest-good`` builds every job again from the commit before the first bad one its bisect named (coherent: one commit
for every family, at the cost of a second build of each job); ``blocked``: a required job blocks the release."""


@dataclass(frozen=True)
class RegressionPolicy:
    """The matrix's ``regressions:`` (docs/commands.md, "When a night breaks"): how far a night bisects llama.cpp for
    a job that tonight's commit broke (at most ``bisect_steps`` builds and ``bisect_minutes`` minutes; 0 steps: no
    bisect) and what it ships (one of :data:`SHIP_MODES`)."""

    bisect_steps: int = 8
    bisect_minutes: int = 120
    ship: ShipMode = "missing"
