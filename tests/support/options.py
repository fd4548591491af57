"""The values the CLI hands the stages, made the way the CLI makes them (from Settings), for tests that call a stage
directly: the run's context, a night's data files, the job the build flags name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rockbuild.core.jobs import Job
from rockbuild.core.options import CompileFlags, GitHubTarget, ModelChoice, Pins
from rockbuild.matrix import load_regression_policy, split_list
from rockbuild.nightly import NightData, NightOptions
from rockbuild.settings import Settings


def settings(env: Mapping[str, str] | None = None, **flags: Any) -> Settings:
    """Settings as rockbuild's entry makes them (``env`` None: this process's environment)."""
    return Settings.from_environment(env, **flags)


def night_data(
    config: Path | None = None,
    oses: Sequence[str] = (),
    targets: Sequence[str] = (),
    publish_config: Path | None = None,
    policy: Path | None = None,
    programs: Path | None = None,
) -> NightData:
    files = settings(matrix_file=config, publish_file=publish_config, policy_file=policy, programs_file=programs)
    jobs = files.jobs(
        os_override=split_list(list(oses), aliases={"ubuntu": "linux"}), target_override=split_list(list(targets))
    )
    return NightData(
        jobs=tuple(jobs),
        publish=files.publish,
        smoke=files.smoke,
        policy=files.policy,
        programs=files.programs,
        patches=files.patch_series,
        regressions=load_regression_policy(files.matrix_file),
    )


_GROUPS = {
    "pins": (Pins, ("llama_ref", "rocm_version", "max_age_days", "index_url", "git_url")),
    "github": (GitHubTarget, ("repo", "api_url")),
    "model": (ModelChoice, ("spec", "vocab")),
    "compile": (CompileFlags, ("offline", "ccache_dir", "use_ccache", "prune_fatbin", "web_ui", "web_ui_dist")),
}


def night_options(
    *,
    config: Path | None = None,
    oses: Sequence[str] = (),
    targets: Sequence[str] = (),
    publish_config: Path | None = None,
    programs: Path | None = None,
    env: Mapping[str, str] | None = None,
    **values: Any,
) -> NightOptions:
    """NightOptions as ``rockbuild nightly`` makes them: -c, --os, --target and --publish-config (and ``programs``:
    another programs.yaml, Settings.programs_file) become its data, and
    the flags of each option group (``llama_ref=``, ``repo=``, ``model=`` (the spec), ``use_ccache=``...) its values."""
    if "model" in values and not isinstance(values["model"], ModelChoice):
        values["spec"] = values.pop("model")
    for group, (make, names) in _GROUPS.items():
        given = {name: values.pop(name) for name in names if name in values}
        if given:
            values[group] = make(**given)
    return NightOptions(
        **values, data=night_data(config, oses, targets, publish_config, programs=programs), context=settings(env)
    )


def resolve_job(
    *,
    target: str | None = None,
    family: str | None = None,
    job_id: str | None = None,
    config: Path | None = None,
    os_name: str | None = None,
) -> Job:
    """The job ``rockbuild build --target/--family/--job [-c FILE] [--os OS]`` builds."""
    return settings(matrix_file=config).job(target=target, family=family, job_id=job_id, os_name=os_name)


def context(env: Mapping[str, str] | None = None, **flags: Any) -> Settings:
    """The run's context a stage takes (``context=``): Settings, which extends it, as the CLI passes it."""
    return settings(env, **flags)
