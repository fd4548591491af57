"""Stage 1: OS x GPU-family YAML in, build jobs out.

The matrix file has global ``options`` and a ``matrix`` with the axes ``os``, ``target`` and (optional, default
``rocm``) ``backend`` plus GitHub-style
``include``/``exclude`` (same rules as GitHub Actions: an include whose axis values match existing combinations adds
its options to them, otherwise it adds a new combination; original axis values are never overwritten).
A backend that is not per target (:mod:`rockbuild.backends`: ``vulkan``) has no target: it is one job per OS
(``<os>-vulkan``), e.g. ``include: [{os: linux, backend: vulkan}]``; each backend makes its jobs' ids, names and
targets. A target may be a list (``[gfx1151, gfx1201]``): one mixed-GPU job, ``<os>-gfx1151+gfx1201``, with the union
of its members' targets (:meth:`rockbuild.core.jobs.FamilyTable.select_many`).
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import bracex

from rockbuild.core.data import YDict, YList, check_keys, expect_type, kind_of, load_data_file, suggest, where
from rockbuild.core.errors import ConfigError, UsageError
from rockbuild.core.jobs import (
    DEFAULT_BACKEND,
    DEFAULT_RUNNERS,
    GFX_TARGET_RE,
    MIX,
    OSES,
    RUNNER_SMOKE_MODES,
    FamilyTable,
    GpuSmoke,
    Job,
    JobOs,
    load_families,
)
from rockbuild.core.options import SHIP_MODES, RegressionPolicy

from .backends import get_backend
from .backends import names as backend_names
from .console import Column, render_table, warn

AXES = ("os", "target", "backend")
WHEN_PROVEN = "when-proven"  # required: optional until its smoke test passed in a published release
OPTION_KEYS = ("llama_ref", "rocm", "cmake", "required", "runner", "gpu_smoke", "runner_smoke", "common_part")
COMMON = "common"  # a common part's job id: <os>-common (docs/common-part.md)
GPU_SMOKE_KEYS = ("runner", "required")
ROCM_KEYS = ("channel", "version")
ROCM_CHANNELS = ("nightly", "dev", "stable", "prerelease")
CMAKE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BUILTIN_OPTIONS: dict[str, Any] = {
    "llama_ref": "master",
    "rocm": {"channel": "nightly", "version": "latest"},
    "cmake": {},
    "required": True,
    "runner": dict(DEFAULT_RUNNERS),
    "gpu_smoke": None,  # {runner: [self-hosted, gfx1151], required: true}: a smoke test on that runner's GPU
    "runner_smoke": RUNNER_SMOKE_MODES[0],
    "common_part": False,  # build what does not depend on the GPU once per OS (docs/common-part.md)
}


@dataclass
class _Combo:
    os: str
    target: str  # short name after resolution (gfx110X, gfx1100, gfx1151+gfx1201); "" for a backend not per target
    options: dict[str, Any]
    origin: str  # file:line that created it
    backend: str = DEFAULT_BACKEND


def _check_options(path: Path, node: YDict, what: str) -> dict[str, Any]:
    """Validate option keys/values of ``node`` (global options or an include entry) and return them as plain data."""
    out: dict[str, Any] = {}
    for key in OPTION_KEYS:
        if key not in node:
            continue
        value = node[key]
        if key == "llama_ref":
            if not isinstance(value, str | int) or not str(value).strip():
                raise ConfigError(f"{where(path, node, key)}: {what}.llama_ref must be a tag, branch or commit")
            out[key] = str(value).strip()
        elif key == "required":
            if value != WHEN_PROVEN and not isinstance(value, bool):
                raise ConfigError(
                    f"{where(path, node, key)}: {what}.required must be true, false or {WHEN_PROVEN}, not {value!r}"
                )
            out[key] = value
        elif key == "rocm":
            expect_type(path, node, key, value, YDict, f"{what}.rocm")
            check_keys(path, value, ROCM_KEYS, f"{what}.rocm")
            rocm: dict[str, str] = {}
            if "channel" in value:
                channel = value["channel"]
                if channel not in ROCM_CHANNELS:
                    raise ConfigError(
                        f"{where(path, value, 'channel')}: unknown ROCm channel {channel!r}"
                        f"{suggest(str(channel), ROCM_CHANNELS)}; known: {', '.join(ROCM_CHANNELS)}"
                    )
                rocm["channel"] = channel
            if "version" in value:
                version = value["version"]
                if not isinstance(version, str | int | float) or not str(version).strip():
                    raise ConfigError(
                        f"{where(path, value, 'version')}: {what}.rocm.version must be 'latest' or a version"
                    )
                rocm["version"] = str(version).strip()
            out[key] = rocm
        elif key == "cmake":
            expect_type(path, node, key, value, YDict, f"{what}.cmake (NAME: value)")
            cmake: dict[str, str] = {}
            for name, val in value.items():
                if not isinstance(name, str) or not CMAKE_NAME_RE.match(name):
                    raise ConfigError(f"{where(path, value, name)}: {name!r} is not a CMake variable name")
                if isinstance(val, bool):
                    cmake[name] = "ON" if val else "OFF"
                elif isinstance(val, str | int | float):
                    cmake[name] = str(val)
                else:
                    raise ConfigError(f"{where(path, value, name)}: cmake {name} must be a string, number or boolean")
            out[key] = cmake
        elif key == "gpu_smoke":
            out[key] = _check_gpu_smoke(path, node, value, what)
        elif key == "common_part":
            if not isinstance(value, bool):
                raise ConfigError(f"{where(path, node, key)}: {what}.common_part must be true or false, not {value!r}")
            out[key] = value
        elif key == "runner_smoke":
            if value not in RUNNER_SMOKE_MODES:
                raise ConfigError(
                    f"{where(path, node, key)}: {what}.runner_smoke must be gate or informational, "
                    f"not {value!r}{suggest(str(value), RUNNER_SMOKE_MODES)}"
                )
            out[key] = value
        elif key == "runner":
            if isinstance(value, str):
                out[key] = value
            else:
                expect_type(path, node, key, value, (str, YDict), f"{what}.runner")
                check_keys(path, value, OSES, f"{what}.runner")
                out[key] = {k: str(v) for k, v in value.items()}
    return out


def _check_gpu_smoke(path: Path, node: YDict, value: Any, what: str) -> dict[str, Any] | None:
    """``gpu_smoke: {runner: LABEL or [LABELS], required: BOOL}`` (required by default), or null for none."""
    if value is None:
        return None
    expect_type(path, node, "gpu_smoke", value, YDict, f"{what}.gpu_smoke ({{runner: [labels], required: true}})")
    check_keys(path, value, GPU_SMOKE_KEYS, f"{what}.gpu_smoke")
    runner = value.get("runner")
    labels = [runner] if isinstance(runner, str) else runner
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) and x.strip() for x in labels):
        raise ConfigError(
            f"{where(path, value, 'runner')}: {what}.gpu_smoke.runner must be a runner label or a "
            "list of labels, e.g. [self-hosted, gfx1151]"
        )
    required = value.get("required", True)
    expect_type(path, value, "required", required, bool, f"{what}.gpu_smoke.required")
    return {"runner": [x.strip() for x in labels], "required": required}


def _merge_options(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if key in ("rocm", "cmake", "runner") and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _axis_values(path: Path, matrix: YDict, key: str) -> YList:
    values = matrix.get(key)
    if values is None:
        raise ConfigError(f"{where(path, matrix)}: the matrix needs a '{key}' list")
    if isinstance(values, str):
        values = YList([values])
        values.line, values.lines = matrix.lines[key], [matrix.lines[key]]
    expect_type(path, matrix, key, values, list, f"matrix.{key}")
    return values


def _check_backend(path: Path | str, node: Any, key: Any, value: Any) -> str:
    known = backend_names()
    if value not in known:
        raise ConfigError(
            f"{where(path, node, key)}: unknown backend {value!r}{suggest(str(value), known)}; "
            f"known: {', '.join(known)}"
        )
    return str(value)


def _check_os(path: Path | str, node: Any, key: Any, value: Any) -> str:
    if value not in OSES:
        raise ConfigError(
            f"{where(path, node, key)}: unknown os {value!r}{suggest(str(value), OSES)}; known: linux, windows"
        )
    return str(value)


def expand_matrix(
    doc: Any,
    path: Path,
    families: FamilyTable,
    *,
    os_override: Sequence[str] = (),
    target_override: Sequence[str] = (),
) -> list[Job]:
    """The jobs of a parsed matrix file (read by :func:`load_matrix`), in matrix order, with
    stable ids.

    ``os_override``/``target_override`` replace the matrix's axes (the workflow's dispatch inputs); combinations they
    create that TheRock does not publish are dropped with a warning instead of failing. Jobs an ``include`` adds are
    kept for the OSes asked for, unless ``target_override`` names the targets to build.
    """
    if doc is None:
        raise ConfigError(f"{path}: the matrix file is empty")
    if not isinstance(doc, YDict):
        raise ConfigError(f"{where(path, doc)}: a matrix file is a mapping with 'options' and 'matrix'")
    check_keys(path, doc, ("options", "matrix", "regressions"), "the matrix file")
    if "regressions" in doc:
        regression_policy(doc, path)  # checked with the rest: `rockbuild matrix` names a bad value
    if "matrix" not in doc:
        raise ConfigError(f"{where(path, doc)}: the matrix file needs a 'matrix' section")

    options = BUILTIN_OPTIONS
    if "options" in doc and doc["options"] is not None:
        expect_type(path, doc, "options", doc["options"], YDict, "options")
        check_keys(path, doc["options"], OPTION_KEYS, "options")
        options = _merge_options(BUILTIN_OPTIONS, _check_options(path, doc["options"], "options"))

    matrix = doc["matrix"]
    expect_type(path, doc, "matrix", matrix, YDict, "matrix")
    check_keys(path, matrix, (*AXES, "include", "exclude"), "matrix")

    def resolve_target(node: Any, key: Any, value: Any) -> str:
        """The short name of a target, or of a list of them (a mixed-GPU job: ``gfx1151+gfx1201``)."""
        if isinstance(value, list):
            for i, member in enumerate(value):
                if not isinstance(member, str | int):
                    raise ConfigError(
                        f"{where(path, value, i)}: a member of a target list is a family or gfx name, "
                        f"not {kind_of(member)}"
                    )
            return families.select_many(
                [str(m) for m in value],
                where=where(path, node, key),
                wheres=[where(path, value, i) for i in range(len(value))],
            ).short
        if not isinstance(value, str | int):
            raise ConfigError(f"{where(path, node, key)}: a target is a family or gfx name, not {kind_of(value)}")
        return families.select(str(value), where=where(path, node, key)).short

    os_node = _axis_values(path, matrix, "os")
    os_values = [_check_os(path, os_node, i, x) for i, x in enumerate(os_node)]
    backends = [DEFAULT_BACKEND]  # absent: every matrix written before the axis existed keeps its meaning
    if "backend" in matrix:
        backend_node = _axis_values(path, matrix, "backend")
        backends = [_check_backend(path, backend_node, i, x) for i, x in enumerate(backend_node)]
    per_target = {name: get_backend(name).per_target for name in backend_names()}
    # a matrix of backends that are not per target (Vulkan: one job per OS) needs no target list
    target_node = (
        _axis_values(path, matrix, "target") if any(per_target[b] for b in backends) or "target" in matrix else YList()
    )
    targets = [resolve_target(target_node, i, x) for i, x in enumerate(target_node)]
    if os_override:
        os_values = [_check_os("--os", None, None, o) for o in dict.fromkeys(os_override)]
    # --target may name a backend that is not per target (vulkan) beside GPU families: keep that backend's jobs
    flavours = [t for t in dict.fromkeys(target_override) if t in per_target and not per_target[t]]
    target_names = [t for t in dict.fromkeys(target_override) if t not in flavours]
    if target_override:
        targets = [families.select(t, where="--target").short for t in target_names]
    combos: list[_Combo] = []
    for name in (b for b in backend_names() if b in backends):  # rockbuild's order of backends, not the axis's
        if per_target[name]:
            # a mixed-GPU entry (a nested list) is named by its own line, the plain ones by the axis's
            origins = (
                [
                    where(path, target_node, i) if isinstance(x, list) else f"{path}:{target_node.line}"
                    for i, x in enumerate(target_node)
                ]
                if not target_override
                else []
            )
            combos += [
                _Combo(o, t, dict(options), origins[i] if i < len(origins) else f"{path}:{target_node.line}", name)
                for o, (i, t) in itertools.product(os_values, enumerate(targets))
            ]
        else:
            combos += [_Combo(o, "", dict(options), where(path, matrix, "backend"), name) for o in os_values]

    def axis_filter(entry: YDict, label: str) -> dict[str, str]:
        wanted: dict[str, str] = {}
        if "os" in entry:
            wanted["os"] = _check_os(path, entry, "os", entry["os"])
        if "backend" in entry:
            wanted["backend"] = _check_backend(path, entry, "backend", entry["backend"])
        if "target" in entry:
            backend = get_backend(wanted.get("backend", DEFAULT_BACKEND))
            if not backend.per_target:
                raise ConfigError(
                    f"{where(path, entry, 'target')}: a {backend.label} job is one per OS, not per GPU "
                    f"target; drop 'target' from this {label} entry"
                )
            wanted["target"] = resolve_target(entry, "target", entry["target"])
        return wanted

    def matches(combo: _Combo, wanted: dict[str, str]) -> bool:
        return all(getattr(combo, k) == v for k, v in wanted.items())

    excludes = matrix.get("exclude") or YList()
    expect_type(path, matrix, "exclude", excludes, list, "matrix.exclude")
    for i, entry in enumerate(excludes):
        expect_type(path, excludes, i, entry, YDict, "an exclude entry")
        check_keys(path, entry, AXES, "an exclude entry")
        if not entry:
            raise ConfigError(f"{where(path, excludes, i)}: an empty exclude entry would remove every job")
        wanted = axis_filter(entry, "exclude")
        combos = [c for c in combos if not matches(c, wanted)]

    includes = matrix.get("include") or YList()
    expect_type(path, matrix, "include", includes, list, "matrix.include")
    for i, entry in enumerate(includes):
        expect_type(path, includes, i, entry, YDict, "an include entry")
        check_keys(path, entry, (*AXES, *OPTION_KEYS), "an include entry")
        wanted = axis_filter(entry, "include")
        extra = _check_options(path, entry, "include")
        hit = [c for c in combos if matches(c, wanted)]
        if hit:
            for combo in hit:
                combo.options = _merge_options(combo.options, extra)
            continue
        wanted.setdefault("backend", DEFAULT_BACKEND)
        needed = ("os", "target") if per_target[wanted["backend"]] else ("os",)
        missing = [a for a in needed if a not in wanted]
        if missing and (os_override or target_override):
            continue  # options for jobs the override left out
        if missing:
            raise ConfigError(
                f"{where(path, includes, i)}: this include matches no job, so it adds one, but it lacks "
                f"{' and '.join(repr(m) for m in missing)}"
            )
        combos.append(
            _Combo(
                wanted["os"],
                wanted.get("target", ""),
                _merge_options(options, extra),
                where(path, includes, i),
                wanted["backend"],
            )
        )

    if os_override or target_override:
        # a --target override asks for builds of those targets: jobs of backends that are not per target stay only
        # when it names them too (--target gfx1151,vulkan)
        combos = [
            c
            for c in combos
            if c.os in os_values
            and (
                (c.target in targets or not target_override)
                if per_target[c.backend]
                else not target_override or c.backend in flavours
            )
        ]
    if not combos:
        raise ConfigError(f"{path}: the matrix is empty: no job is left after include/exclude")

    jobs: list[Job] = []
    made: list[tuple[Job, _Combo]] = []
    seen: dict[str, str] = {}
    for combo in combos:
        if (
            (os_override or target_override)
            and per_target[combo.backend]
            and families.select(combo.target).unpublished_on(combo.os)
        ):
            warn(f"skipping {combo.os}-{combo.target}: TheRock publishes no {combo.os} tarball for it")
            continue
        job = _make_job(combo, families)
        if job.id in seen:
            raise ConfigError(f"{combo.origin}: job {job.id} is defined twice (also at {seen[job.id]})")
        seen[job.id] = combo.origin
        made.append((job, combo))
    if not made:
        raise ConfigError(f"{path}: the matrix is empty: no job can be built for the requested OS and targets")
    jobs = _with_common_parts(made, options)
    for job in jobs:
        if job.is_common_part and job.id in seen:
            raise ConfigError(
                f"{seen[job.id]}: job {job.id} is the name of {job.os}'s common part (common_part: "
                "true); name it otherwise"
            )
    return jobs


def _with_common_parts(made: Sequence[tuple[Job, _Combo]], options: dict[str, Any]) -> list[Job]:
    """The jobs, each GPU job whose options ask for it (``common_part: true``) and match the matrix's own (cmake,
    llama_ref: what reaches ggml) built on its OS's common part, that part's job (``<os>-common``, the cpu backend,
    first in the list: a night builds it before them) added once per OS. Any other job builds whole."""
    on_common: dict[JobOs, list[str]] = {}
    jobs: list[Job] = []
    for job, combo in made:
        opts = combo.options
        if (
            opts.get("common_part")
            and get_backend(job.backend).library_target is not None
            and opts["cmake"] == options["cmake"]
            and opts["llama_ref"] == options["llama_ref"]
        ):
            job = replace(job, common=f"{job.os}-{COMMON}")
            on_common.setdefault(job.os, []).append(job.id)
        jobs.append(job)
    commons = [
        Job(
            id=f"{os_name}-{COMMON}",
            os=os_name,
            name=COMMON,
            backend="cpu",
            required=False,
            llama_ref=str(options["llama_ref"]),
            rocm_channel=options["rocm"]["channel"],
            rocm_version=options["rocm"]["version"],
            cmake=tuple(options["cmake"].items()),
            runner=_runner_for(options, os_name),
            common_for=tuple(ids),
        )
        for os_name, ids in on_common.items()
    ]
    return [*commons, *jobs]


def regression_policy(doc: Any, path: Path) -> RegressionPolicy:
    """The matrix file's ``regressions:`` section (absent: the defaults), checked key by key."""
    node = doc.get("regressions") if isinstance(doc, YDict) else None
    if node is None:
        return RegressionPolicy()
    expect_type(path, doc, "regressions", node, YDict, "regressions")
    check_keys(path, node, ("bisect_steps", "bisect_minutes", "ship"), "regressions")
    values: dict[str, Any] = {}
    for key in ("bisect_steps", "bisect_minutes"):
        if key in node:
            value = node[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(
                    f"{where(path, node, key)}: regressions.{key} must be a whole number >= 0, not {value!r}"
                )
            values[key] = value
    if "ship" in node:
        if node["ship"] not in SHIP_MODES:
            raise ConfigError(
                f"{where(path, node, 'ship')}: regressions.ship must be one of "
                f"{', '.join(SHIP_MODES)}, not {node['ship']!r}{suggest(str(node['ship']), SHIP_MODES)}"
            )
        values["ship"] = str(node["ship"])
    if values.get("ship") == "newest-good" and values.get("bisect_steps", RegressionPolicy.bisect_steps) == 0:
        raise ConfigError(
            f"{where(path, node, 'ship')}: regressions.ship newest-good builds from the commit before "
            "the first bad one, which only a bisect names: bisect_steps must be at least 1"
        )
    return RegressionPolicy(**values)


def load_regression_policy(path: Path | None = None) -> RegressionPolicy:
    """The ``regressions:`` of a matrix file (default: the shipped ``config/nightly.yaml``)."""
    return load_data_file(path, "nightly.yaml", regression_policy)


def load_matrix(
    path: Path | None = None,
    families: FamilyTable | None = None,
    *,
    os_override: Sequence[str] = (),
    target_override: Sequence[str] = (),
) -> list[Job]:
    """The jobs of a matrix file (default: the shipped ``config/nightly.yaml``); see :func:`expand_matrix`."""
    return load_data_file(
        path,
        "nightly.yaml",
        lambda doc, where: expand_matrix(
            doc, where, families or load_families(), os_override=os_override, target_override=target_override
        ),
    )


def _make_job(combo: _Combo, families: FamilyTable) -> Job:
    """The job of a combination: its id, name, family, group and targets from its backend, the rest from the OS and
    the matrix options."""
    fields = get_backend(combo.backend).job_fields(combo.os, combo.target, families, combo.origin)
    return Job(**fields, backend=combo.backend, **_option_fields(combo))


def _option_fields(combo: _Combo) -> dict[str, Any]:
    """The Job fields every job takes from its OS and the matrix options, whatever its backend."""
    opts = combo.options
    gpu_smoke = opts.get("gpu_smoke") or {}
    return {
        "os": combo.os,
        "required": opts["required"] is True,
        "when_proven": opts["required"] == WHEN_PROVEN,
        "llama_ref": str(opts["llama_ref"]),
        "rocm_channel": opts["rocm"]["channel"],
        "rocm_version": opts["rocm"]["version"],
        "cmake": tuple(opts["cmake"].items()),
        "runner": _runner_for(opts, combo.os),
        "gpu_smoke": GpuSmoke(runner=tuple(gpu_smoke["runner"]), required=bool(gpu_smoke.get("required", False)))
        if gpu_smoke.get("runner")
        else None,
        "runner_smoke": str(opts["runner_smoke"]),
    }


def _runner_for(opts: dict[str, Any], os_name: str) -> str:
    """The CI runner label: one string for every OS, or a per-OS mapping over the defaults."""
    runner = opts["runner"]
    if isinstance(runner, dict):
        runner = runner.get(os_name, DEFAULT_RUNNERS[os_name])
    return str(runner)


def split_list(values: Iterable[str], aliases: dict[str, str] | None = None) -> list[str]:
    """Flatten repeated and comma-separated CLI values (``--os windows,ubuntu``), trimmed and de-quoted."""
    out: list[str] = []
    for value in values:
        for item in value.split(","):
            item = item.strip().strip("'\"").strip()
            if item:
                out.append(aliases.get(item, item) if aliases else item)
    return out


def select_jobs(jobs: Sequence[Job], only: Iterable[str] = (), os_name: str | None = None) -> list[Job]:
    """Keep jobs whose id matches any ``--only`` glob (fnmatch with ``{a,b}`` braces) and the ``os_name`` filter."""
    selected = list(jobs)
    patterns = [p for p in only if p]
    if patterns:
        keep: set[str] = set()
        for pattern in patterns:
            expanded = bracex.expand(pattern, limit=1000) or [pattern]
            hits = {j.id for j in jobs if any(fnmatch.fnmatchcase(j.id, p) for p in expanded)}
            if not hits:
                ids = [j.id for j in jobs]
                raise UsageError(f"--only {pattern!r} matches no job{suggest(pattern, ids)}; jobs: {', '.join(ids)}")
            keep |= hits
        selected = [j for j in selected if j.id in keep]
    if os_name:
        selected = [j for j in selected if j.os == os_name]
    if not selected:
        raise UsageError("no job is left after --only/--os; run `rockbuild matrix` to see the job ids")
    # a selected job built on a common part brings that part along
    wanted = {j.common for j in selected if j.common} - {j.id for j in selected}
    return [j for j in jobs if j.id in wanted] + selected if wanted else selected


def find_job(jobs: Sequence[Job], job_id: str) -> Job:
    for job in jobs:
        if job.id == job_id:
            return job
    raise UsageError(f"no job {job_id!r} in the matrix{suggest(job_id, [j.id for j in jobs])}")


def select_job(
    jobs: Callable[..., list[Job]],
    families: FamilyTable,
    *,
    target: str | None = None,
    family: str | None = None,
    job_id: str | None = None,
    os_name: str,
) -> Job:
    """The job to build: one of ``--target gfxN`` (exactly that target), ``--family F`` or ``--job ID``, from the
    matrix's ``jobs`` (``jobs(os_override=..., target_override=...)``: Settings.jobs), so its per-job cmake extras
    and ROCm pins apply; ``os_name``: the OS of a target or family job (``--os``, else this machine's).
    """
    given = [name for name, value in (("--target", target), ("--family", family), ("--job", job_id)) if value]
    if len(given) != 1:
        raise UsageError("give exactly one of --target gfxN, --family F or --job ID")
    if job_id:
        job = find_job(jobs(), job_id)
        if os_name and job.os != os_name:
            raise UsageError(f"job {job_id} is a {job.os} job, not {os_name}")
        return job
    name = (target or family or "").strip()
    # several targets joined by "+" are a mixed-GPU job (gfx1151+gfx1201), as a matrix's target list makes it
    if target and not all(GFX_TARGET_RE.match(part) for part in name.split(MIX)):
        raise UsageError(
            f"--target takes one gfx target such as gfx1151 (or several joined by '+': "
            f"gfx1151+gfx1201), not {name!r}; use --family for a family"
        )
    selection = families.select(name, where="--target" if target else "--family")
    return find_job(jobs(os_override=[os_name], target_override=[name]), f"{os_name}-{selection.short}")


def github_matrix(jobs: Sequence[Job]) -> dict[str, Any]:
    """``{"include": [...]}`` for ``strategy.matrix: ${{ fromJson(...) }}``."""
    return {"include": [job.to_dict() for job in jobs]}


def write_github_output(jobs: Sequence[Job], output_file: str | os.PathLike[str]) -> None:
    """Append ``matrix=<json>`` to the $GITHUB_OUTPUT file (one line: compact JSON has no newlines)."""
    line = json.dumps(github_matrix(jobs), separators=(",", ":"))
    with open(output_file, "a", encoding="utf-8") as fh:
        fh.write(f"matrix={line}\n")


TARGETS_NARROW = 16  # two gfx targets a line on a narrow table ("gfx1100 gfx1101")


def job_columns(jobs: Sequence[Job]) -> list[Column]:
    """The matrix table's columns, in their order; ``rank`` says which go first on a narrow screen: the id (what
    ``--job`` takes) is never dropped nor cut, then the targets, whether the job is required, the family, ..."""
    rows = []
    for job in jobs:
        rocm = f"{job.rocm_channel}/{job.rocm_version}" if get_backend(job.backend).needs_rocm else "-"
        extra = " ".join(f"-D{k}={v}" for k, v in job.cmake)
        family = f"common part of {len(job.common_for)}" if job.is_common_part else job.family or job.backend
        rows.append(
            (
                job.id,
                family,
                job.group or "-",
                ",".join(job.targets) or "-",
                "yes"
                if job.required
                else "when proven"
                if job.when_proven
                else "no"
                if not job.is_common_part
                else "-",
                job.llama_ref + (f" {extra}" if extra else ""),
                rocm,
                job.common or "-",
                job.runner,
            )
        )
    cells = list(zip(*rows, strict=True)) if rows else [()] * 9
    return [
        Column("id", tuple(cells[0]), rank=0),
        Column("family", tuple(cells[1]), rank=3),
        Column("tarball group", tuple(cells[2]), rank=7),
        Column("gfx targets", tuple(cells[3]), rank=1, wrap=True, narrow=TARGETS_NARROW, split=","),
        Column("required", tuple(cells[4]), rank=2),
        Column("llama.cpp", tuple(cells[5]), rank=8, fold=True),
        Column("ROCm", tuple(cells[6]), rank=4, fold=True),
        Column("built on", tuple(cells[7]), rank=6),
        Column("runner", tuple(cells[8]), rank=5),
    ]


def render_jobs(jobs: Sequence[Job], width: int | None = None) -> str:
    """The matrix as a table for people, no wider than ``width`` (None: every column, as wide as it needs)."""
    return render_table(f"{len(jobs)} jobs", job_columns(jobs), width)


def print_jobs(jobs: Sequence[Job], fmt: str, github_output: Path | None = None, width: int | None = None) -> None:
    """``rockbuild matrix``: ``table`` for people (no wider than ``width``: None, every column), ``json`` a list of
    jobs, ``github`` ``{"include": [...]}`` for fromJson, also written to ``$GITHUB_OUTPUT`` as ``matrix=...`` when
    given."""
    if fmt == "json":
        print(json.dumps([job.to_dict() for job in jobs], indent=2))
    elif fmt == "github":
        print(json.dumps(github_matrix(jobs), separators=(",", ":")))
        if github_output is not None:
            write_github_output(jobs, github_output)
    else:
        print(render_jobs(jobs, width))


def family_columns(table: FamilyTable) -> list[Column]:
    """The family table's columns: the family (what ``--target`` and families.yaml name) is never dropped nor cut."""
    fams = table.families
    return [
        Column("family", tuple(f.name for f in fams), rank=0),
        Column("short", tuple(f.short for f in fams), rank=2),
        Column(
            "gfx targets", tuple(",".join(f.targets) for f in fams), rank=1, wrap=True, narrow=TARGETS_NARROW, split=","
        ),
        Column("linux", tuple(f.group_for("linux") or "-" for f in fams), rank=3),
        Column("windows", tuple(f.group_for("windows") or "-" for f in fams), rank=4),
        Column("source", tuple(str(f.source) if f.source else "-" for f in fams), rank=5, wrap=True, narrow=16),
    ]


def print_families(table: FamilyTable, fmt: str, width: int | None = None) -> None:
    """``rockbuild matrix --families``: every family of the table, its targets, tarball group per OS and where TheRock
    publishes it from, no wider than ``width`` (None: every column; ``json``: the families as data)."""
    if fmt != "table":
        print(json.dumps([fam.to_dict() for fam in table.families], indent=2))
        return
    # the file's name only: a whole path outgrows a narrow terminal (`rockbuild --debug` names the file read)
    name = Path(table.source).name if table.source else "families.yaml"
    print(render_table(f"{len(table.families)} GPU families ({name})", family_columns(table), width))
