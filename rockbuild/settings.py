"""Everything rockbuild takes from outside its command line, read in one place and resolved once.

:class:`Settings` is made at the CLI's entry (:meth:`Settings.from_environment`): the environment
(:class:`rockbuild.core.environment.Context`, which it extends: the one reader of the process environment), and
the data files shipped in ``config/`` or the flags that replace them. It sits above every stage and the night:
it calls down to the loader of the module that owns each file's meaning (:func:`rockbuild.matrix.expand_matrix`,
:func:`rockbuild.bundle.policy.parse_policy`, ...), the first time a command asks for it (``rockbuild --help`` reads
none), and the commands hand the stages the values (a Context, a policy, a family table), never Settings itself.
A broken file is a one-line ConfigError naming file and line.

Secrets (``GITHUB_TOKEN``/``GH_TOKEN``, ``HF_TOKEN``) are kept for the one call that needs each; they are never part
of a ``repr``, a log or a child's environment (:func:`rockbuild.process.child_env` drops them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from rockbuild.bundle.policy import BundlePolicy, load_policy
from rockbuild.core.environment import Context, environment
from rockbuild.core.jobs import FamilyTable, Job, load_families
from rockbuild.core.programs import ProgramList, load_programs
from rockbuild.llamacpp.patches import PatchSeries, load_patch_series
from rockbuild.matrix import load_matrix, select_job
from rockbuild.publish.config import PublishConfig, load_publish_config
from rockbuild.rocm.channels import Channel, load_channels
from rockbuild.smoke.config import load_smoke_config


@dataclass(frozen=True)
class Settings(Context):
    """The run's :class:`Context` and its data files (``None``: the shipped one), which load on first use."""

    matrix_file: Path | None = None  # -c FILE; None: the shipped config/nightly.yaml
    families_file: Path | None = None
    policy_file: Path | None = None  # --policy FILE
    smoke_file: Path | None = None
    publish_file: Path | None = None  # --publish-config FILE
    channels_file: Path | None = None
    programs_file: Path | None = None

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None, **flags: Any) -> Any:
        """:meth:`Context.from_environment`, and ``$ROCKBUILD_SMOKE_CONFIG``: another smoke.yaml (the model, the
        run, the numerics and ops sections) than the shipped one."""
        env = environment() if env is None else dict(env)
        smoke = env.get("ROCKBUILD_SMOKE_CONFIG", "").strip()
        return super().from_environment(env, **{"smoke_file": Path(smoke).expanduser() if smoke else None, **flags})

    @cached_property
    def families(self) -> FamilyTable:
        return load_families(self.families_file)

    @cached_property
    def policy(self) -> BundlePolicy:
        return load_policy(self.policy_file)

    @cached_property
    def smoke(self) -> dict[str, Any]:
        return load_smoke_config(self.smoke_file)

    @cached_property
    def publish(self) -> PublishConfig:
        return load_publish_config(self.publish_file)

    @cached_property
    def programs(self) -> ProgramList:
        return load_programs(self.programs_file)

    @cached_property
    def patch_series(self) -> PatchSeries:
        """The carried fixes (``patches_file``: $ROCKBUILD_PATCHES or --patches, else patches/patches.yaml)."""
        return load_patch_series(self.patches_file)

    @cached_property
    def channels(self) -> dict[str, Channel]:
        return load_channels(self.channels_file)

    def jobs(self, *, os_override: Sequence[str] = (), target_override: Sequence[str] = ()) -> list[Job]:
        """The jobs of the matrix file (-c, else the shipped one), with the dispatch inputs' axes."""
        return load_matrix(self.matrix_file, self.families, os_override=os_override,
                           target_override=target_override)

    def job(self, *, target: str | None = None, family: str | None = None, job_id: str | None = None,
            os_name: str | None = None) -> Job:
        """The job ``--target``, ``--family`` or ``--job`` names in the matrix file
        (:func:`rockbuild.matrix.select_job`; a target or family job for ``os_name``, default this machine's OS)."""
        return select_job(self.jobs, self.families, target=target, family=family, job_id=job_id,
                          os_name=os_name or ("" if job_id else self.host_os))
