"""The whole night: pin the inputs (:mod:`rockbuild.pipeline.inputs`), run every job through the one-job pipeline
(:mod:`rockbuild.pipeline.job`) with resume and fallback (:mod:`.run`), publish by
the gating rules, alert on failure.

Public API: :func:`resolve_inputs`, :func:`load_inputs`, :class:`InputsRecord`, :func:`run_night`,
:class:`NightOptions`, :class:`NightReport`, :func:`build_with_inputs`.
"""

from __future__ import annotations

from rockbuild.core.records import InputsLlama, InputsRecord, InputsRocm
from rockbuild.pipeline.inputs import DEFAULT_MAX_AGE_DAYS, load_inputs, resolve_inputs
from rockbuild.pipeline.job import build_with_inputs

from .run import (
    NightData,
    NightOptions,
    NightPlan,
    NightReport,
    plan_night,
    publish_dirs_for_inputs,
    release_night,
    run_night,
    run_night_job,
)

__all__ = [
    "DEFAULT_MAX_AGE_DAYS",
    "InputsLlama",
    "InputsRecord",
    "InputsRocm",
    "NightData",
    "NightOptions",
    "NightReport",
    "build_with_inputs",
    "load_inputs",
    "NightPlan",
    "plan_night",
    "publish_dirs_for_inputs",
    "release_night",
    "resolve_inputs",
    "run_night",
    "run_night_job",
]
