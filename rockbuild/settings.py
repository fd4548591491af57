"""Everything rockbuild takes from outside its command line, read in one place and resolved once.

:class:`Settings` is made at the CLI's entry (:meth:`Settings.from_environment`): the environment
(:class:`rockbuild.core.environment.Context`, which it extends: the one reader of the process environment), and
the data files shipped in ``config/`` or the flags that replace them. It sits above every stage and the night:
it imports and calls the loader of the module that owns each file's meaning (:func:`rockbuild.matrix.expand_matrix`,
:func:`rockbuild.bundle.policy.parse_policy`, ...) the first time a command asks for that file (``rockbuild --help``
imports none of them), and the commands hand the stages the values (a Context, a policy, a family table), never
Settings itself.
A broken file is a one-line ConfigError naming file and line.

Secrets (``GITHUB_TOKEN``/``GH_TOKEN``, ``HF_TOKEN``) are kept for the one call that needs each; they are never part
of a ``repr``, a log or a child's environment (:func:`rockbuild.process.child_env` drops them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rockbuild.core.environment import Context, environment

if TYPE_CHECKING:
    from rockbuild.bundle.policy import BundlePolicy
    from rockbuild.core.jobs import FamilyTable, Job
    from rockbuild.core.programs import ProgramList
    from rockbuild.llamacpp.patches import PatchSeries
    from rockbuild.publish.config import PublishConfig
    from rockbuild.rocm.channels import Channel
    from rockbuild.smoke.config import SmokeConfig


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
        from rockbuild.core.jobs import load_families

        return load_families(self.families_file)

    @cached_property
    def policy(self) -> BundlePolicy:
        from rockbuild.bundle.policy import load_policy

        return load_policy(self.policy_file)

    @cached_property
    def smoke(self) -> SmokeConfig:
        """smoke.yaml, read and checked once: its typed sections (``run``, ``numerics``, ``ops``) and, as a mapping,
        the document (the model pins and the tiny model's spec)."""
        from rockbuild.smoke.config import load_smoke_config

        return load_smoke_config(self.smoke_file)

    @cached_property
    def publish(self) -> PublishConfig:
        from rockbuild.publish.config import load_publish_config

        return load_publish_config(self.publish_file)

    @cached_property
    def programs(self) -> ProgramList:
        from rockbuild.core.programs import load_programs

        return load_programs(self.programs_file)

    @cached_property
    def patch_series(self) -> PatchSeries:
        """The carried fixes (``patches_file``: $ROCKBUILD_PATCHES or --patches, else patches/patches.yaml)."""
        from rockbuild.llamacpp.patches import load_patch_series

        return load_patch_series(self.patches_file)

    @cached_property
    def channels(self) -> dict[str, Channel]:
        from rockbuild.rocm.channels import load_channels

        return load_channels(self.channels_file)

    def jobs(self, *, os_override: Sequence[str] = (), target_override: Sequence[str] = ()) -> list[Job]:
        """The jobs of the matrix file (-c, else the shipped one), with the dispatch inputs' axes."""
        from rockbuild.matrix import load_matrix

        return load_matrix(self.matrix_file, self.families, os_override=os_override, target_override=target_override)

    def job(
        self,
        *,
        target: str | None = None,
        family: str | None = None,
        job_id: str | None = None,
        os_name: str | None = None,
    ) -> Job:
        """The job ``--target``, ``--family`` or ``--job`` names in the matrix file
        (:func:`rockbuild.matrix.select_job`; a target or family job for ``os_name``, default this machine's OS)."""
        from rockbuild.matrix import select_job

        return select_job(
            self.jobs,
            self.families,
            target=target,
            family=family,
            job_id=job_id,
            os_name=os_name or ("" if job_id else self.host_os),
        )
