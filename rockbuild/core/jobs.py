"""The jobs rockbuild builds and the GPU-family table they come from: typed, frozen values every layer shares.

:mod:`rockbuild.matrix` makes the :class:`Job` values from the matrix file; every later stage reads a Job, never the
YAML or the environment again.
"""

from __future__ import annotations

import contextlib
import datetime
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from rockbuild.core.data import YDict, YList, check_keys, expect_type, load_data_file, suggest, where
from rockbuild.core.errors import ConfigError
from rockbuild.core.record import DATE, PAIRS, Record
from rockbuild.core.vocabulary import Os

OSES: tuple[Os, ...] = get_args(Os)
JobOs = Literal["", Os]  # a job's os: "" only in a partial file (a build.json written by hand)
GFX_TARGET_RE = re.compile(r"^gfx[0-9]{2,3}[0-9a-f]$")
# the backend (rockbuild.backends) a matrix without a backend axis, a bundle without bundle.json and `--backend` mean
DEFAULT_BACKEND = "rocm"
MIX = "+"  # joins the members of a mixed-GPU job's name: gfx1151+gfx1201 (linux-gfx1151+gfx1201)
# a family's `source.ref`: a TheRock issue or pull request, or a file of ROCm/TheRock
SOURCE_REF_RE = re.compile(r"^(TheRock#[0-9]+|[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*\.(py|cmake|md|toml|yml|yaml))$")

# ---------------------------------------------------------------------------------------------------------------------
# GPU families


@dataclass(frozen=True)
class Family(Record):
    """A TheRock GPU family: the gfx targets its tarball carries and the tarball group per OS (a record: ``rockbuild
    matrix --families --json``)."""

    name: str  # TheRock's family/group name, e.g. gfx110X-all
    short: str  # the name used in job ids and asset names, e.g. gfx110X
    targets: tuple[str, ...]
    gpus: Mapping[str, str]  # target -> products
    groups: Mapping[str, str | None]  # os -> tarball group (None: not published for that OS)
    legacy_groups: tuple[str, ...]
    aliases: tuple[str, ...]
    resolve_targets: bool  # may a single target resolve to this family?
    note: str = ""
    source: FamilySource | None = None  # where TheRock publishes it from (families.yaml's `source`)

    def group_for(self, os_name: str) -> str | None:
        return self.groups.get(os_name)


@dataclass(frozen=True)
class FamilySource(Record):
    """Where a family comes from in TheRock: an issue (``TheRock#5744``) or a file of its repository, and the date its
    tarball group appeared (None: the reference gives none)."""

    ref: str
    since: datetime.date | None = field(metadata=DATE)

    def __str__(self) -> str:
        return f"{self.ref}, since {self.since.isoformat()}" if self.since else f"{self.ref} (date not recorded)"


@dataclass(frozen=True)
class Selection:
    """What a matrix entry (family, alias, single target, or a list of those: a mixed-GPU job) means."""

    family: Family  # whose tarball the job builds from (a mix of families: one carrying them all, e.g. multiarch)
    targets: tuple[str, ...]
    short: str  # name for ids/assets: the family's short name, the single target, or the members' joined by "+"
    members: tuple[Selection, ...] = ()  # a mixed selection's parts, in the order written; () for a plain one

    @property
    def parts(self) -> tuple[Selection, ...]:
        return self.members or (self,)

    def unpublished_on(self, os_name: str) -> list[Selection]:
        """The parts whose family TheRock publishes no ``os_name`` tarball for (a multiarch tarball holds only the
        targets TheRock builds for that OS), then the chosen family itself when it has none."""
        missing = [p for p in self.parts if p.family.group_for(os_name) is None]
        if not missing and self.family.group_for(os_name) is None:
            missing.append(self)
        return missing


@dataclass(frozen=True)
class FamilyTable:
    families: tuple[Family, ...]
    source: str = ""
    _by_name: Mapping[str, Family] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, Family] = {}
        for fam in self.families:
            for name in (fam.name, fam.short, *fam.aliases):
                index.setdefault(name, fam)
        object.__setattr__(self, "_by_name", index)

    @property
    def known_names(self) -> list[str]:
        targets = {t for fam in self.families for t in fam.targets}
        return sorted(set(self._by_name) | targets)

    def family(self, name: str) -> Family | None:
        return self._by_name.get(name)

    def family_of_target(self, target: str) -> Family | None:
        """The smallest published family whose tarball contains ``target``."""
        candidates = [f for f in self.families if target in f.targets and f.resolve_targets]
        if not candidates:
            return None
        return min(candidates, key=lambda f: (len(f.targets), f.name))

    def select(self, name: str, *, where: str = "") -> Selection:
        if MIX in name:
            return self.select_many(name.split(MIX), where=where)
        fam = self.family(name)
        if fam is not None:
            # a family named after its only target (gfx1151) is the same as that target
            return Selection(fam, fam.targets, fam.short)
        if GFX_TARGET_RE.match(name):
            fam = self.family_of_target(name)
            if fam is not None:
                return Selection(fam, (name,), name)
        prefix = f"{where}: " if where else ""
        raise ConfigError(f"{prefix}unknown GPU family or target {name!r}{suggest(name, self.known_names)}")

    def select_many(self, names: Sequence[str], *, where: str = "", wheres: Sequence[str] = ()) -> Selection:
        """A mixed-GPU selection: the union of ``names`` (families or targets, ``wheres`` naming where each was
        written), in order, deduplicated, from the smallest family whose tarball carries every one of them (one
        family's members: that family; several: TheRock's multiarch). One name is that name's plain selection."""
        prefix = f"{where}: " if where else ""
        if not names:
            raise ConfigError(f"{prefix}an empty target list builds nothing; give one or more families or gfx targets")
        parts = [
            self.select(str(n).strip(), where=wheres[i] if i < len(wheres) else where) for i, n in enumerate(names)
        ]
        if len(parts) == 1:
            return parts[0]
        written = f"[{', '.join(p.short for p in parts)}]"
        for i, part in enumerate(parts):
            others = {t for j, p in enumerate(parts) if j != i for t in p.targets}
            if set(part.targets) <= others:
                where_i = wheres[i] if i < len(wheres) else where
                covering = [p.short for j, p in enumerate(parts) if j != i and set(p.targets) & set(part.targets)]
                raise ConfigError(
                    f"{where_i + ': ' if where_i else ''}{part.short} adds no target to {written}: "
                    f"{', '.join(covering)} already build{'s' if len(covering) == 1 else ''} "
                    f"{', '.join(part.targets)}; drop it from the list"
                )
        targets = tuple(dict.fromkeys(t for p in parts for t in p.targets))
        carriers = [f for f in self.families if set(targets) <= set(f.targets)]
        if not carriers:
            raise ConfigError(
                f"{prefix}no TheRock tarball in the family table carries all of {', '.join(targets)}; "
                "a mixed-GPU job needs a family with every target (multiarch)"
            )
        family = min(carriers, key=lambda f: (len(f.targets), f.name))
        return Selection(family, targets, MIX.join(p.short for p in parts), tuple(parts))

    def groups_for_lookup(self, fam: Family, os_name: str) -> list[str]:
        """Tarball groups to accept when reading an index: the current one, then legacy names."""
        current = fam.group_for(os_name)
        return [g for g in [current, *fam.legacy_groups] if g]


def parse_families(doc: Any, path: Path) -> FamilyTable:
    """The family table from a parsed ``families.yaml`` (see :func:`load_families`)."""
    if not isinstance(doc, YDict) or "families" not in doc:
        raise ConfigError(f"{where(path, doc)}: expected a mapping with a 'families' key")
    check_keys(path, doc, ["families"], "the family table")
    fams = doc["families"]
    expect_type(path, doc, "families", fams, YDict, "'families'")
    out: list[Family] = []
    for name, body in fams.items():
        expect_type(path, fams, name, body, YDict, f"family {name!r}")
        check_keys(
            path,
            body,
            ["short", "targets", "groups", "legacy_groups", "aliases", "resolve_targets", "source", "note"],
            f"family {name!r}",
        )
        targets = body.get("targets")
        expect_type(path, body, "targets", targets, YDict, f"{name}.targets (target: GPUs)")
        for t in targets:
            if not GFX_TARGET_RE.match(str(t)):
                raise ConfigError(f"{where(path, targets, t)}: {t!r} is not a gfx target name")
        groups = body.get("groups")
        expect_type(path, body, "groups", groups, YDict, f"{name}.groups")
        check_keys(path, groups, OSES, f"{name}.groups")
        for os_name in OSES:
            if os_name not in groups:
                raise ConfigError(f"{where(path, groups)}: {name}.groups needs '{os_name}' (use null: not published)")
            if groups[os_name] is not None and not isinstance(groups[os_name], str):
                raise ConfigError(f"{where(path, groups, os_name)}: {name}.groups.{os_name} must be a name or null")
        source = _parse_source(path, body, str(name))
        legacy = body.get("legacy_groups", YList())
        aliases = body.get("aliases", YList())
        expect_type(path, body, "legacy_groups", legacy, list, f"{name}.legacy_groups")
        expect_type(path, body, "aliases", aliases, list, f"{name}.aliases")
        short = body.get("short", name)
        out.append(
            Family(
                name=str(name),
                short=str(short),
                targets=tuple(str(t) for t in targets),
                gpus={str(t): str(v or "") for t, v in targets.items()},
                groups={os_name: groups[os_name] for os_name in OSES},
                legacy_groups=tuple(str(g) for g in legacy),
                aliases=tuple(str(a) for a in aliases),
                resolve_targets=bool(body.get("resolve_targets", True)),
                note=str(body.get("note", "")),
                source=source,
            )
        )
    if not out:
        raise ConfigError(f"{where(path, fams)}: the family table is empty")
    return FamilyTable(tuple(out), source=str(path))


def _parse_source(path: Path, body: YDict, name: str) -> FamilySource:
    """``source: {ref: TheRock#5744, since: 2026-06-16}``: required, so that every family says where it comes from
    (``since: null`` when the reference gives no date)."""
    if "source" not in body:
        raise ConfigError(
            f"{where(path, body)}: family {name!r} needs a 'source' ({{ref: TheRock#N or a TheRock file, "
            "since: YYYY-MM-DD or null}}): where TheRock publishes it from"
        )
    source = body["source"]
    expect_type(path, body, "source", source, YDict, f"{name}.source ({{ref: ..., since: ...}})")
    check_keys(path, source, ["ref", "since"], f"{name}.source")
    ref = source.get("ref")
    if not isinstance(ref, str) or not SOURCE_REF_RE.match(ref):
        at = where(path, source, "ref") if "ref" in source else where(path, source)
        raise ConfigError(
            f"{at}: {name}.source.ref must be a TheRock issue (TheRock#5744) or a file of ROCm/TheRock "
            f"(build_tools/github_actions/amdgpu_family_matrix.py), not {ref!r}"
        )
    if "since" not in source:
        raise ConfigError(
            f"{where(path, source)}: {name}.source needs 'since' (the date the group appeared, "
            "YYYY-MM-DD, or null when not known)"
        )
    since = source["since"]
    if isinstance(since, str):
        with contextlib.suppress(ValueError):
            since = datetime.date.fromisoformat(since)
    if since is not None and (not isinstance(since, datetime.date) or isinstance(since, datetime.datetime)):
        raise ConfigError(
            f"{where(path, source, 'since')}: {name}.source.since must be a date (YYYY-MM-DD) or null, "
            f"not {source['since']!r}"
        )
    return FamilySource(ref, since)


def load_families(path: Path | None = None) -> FamilyTable:
    """The GPU-family table (default: the shipped ``config/families.yaml``)."""
    return load_data_file(path, "families.yaml", parse_families)


# ---------------------------------------------------------------------------------------------------------------------
# A job: everything later stages need, resolved once.

DEFAULT_RUNNERS = {"linux": "ubuntu-22.04", "windows": "windows-2022"}
RUNNER_SMOKE_MODES = ("gate", "informational")  # matrix `runner_smoke:` (Job.runner_smoke), the default first


@dataclass(frozen=True, kw_only=True)
class GpuSmoke(Record):
    """The matrix's ``gpu_smoke:`` of a job: the GPU runner's labels and whether the asset waits for its smoke test."""

    runner: tuple[str, ...] = ()
    required: bool = False


@dataclass(frozen=True)
class Job(Record):
    """One build job, as the matrix resolves it; the same record is the ``job`` of build.json and of inputs.json's
    ``jobs[]`` (Job.to_dict() / Job.from_dict(); older files lack the later keys: their defaults)."""

    id: str  # stable: <os>-<short>, e.g. linux-gfx1151, windows-gfx110X
    os: JobOs = ""
    name: str = ""  # the family short name or single target the job builds for (used in ids and asset names)
    family: str = ""  # TheRock family, e.g. gfx110X-all ("": a Vulkan job)
    group: str = ""  # TheRock tarball group for this OS ("": a Vulkan job)
    legacy_groups: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()  # exactly the gfx targets compiled and shipped
    gpu_targets: str = field(init=False, default="")  # the value for CMake's GPU_TARGETS (derived: targets joined)
    required: bool = True
    llama_ref: str = "master"
    rocm_channel: str = "nightly"
    rocm_version: str = "latest"
    cmake: tuple[tuple[str, str], ...] = field(default=(), metadata=PAIRS)  # extra -D definitions, in order
    runner: str = ""
    # the flavour (rockbuild.backends): rocm, or vulkan (id <os>-vulkan, name "vulkan", family/group "" and no
    # targets: no ROCm tarball, no gfx code)
    backend: str = DEFAULT_BACKEND
    # a smoke test on a real GPU after the build (matrix `gpu_smoke:`): the CI runner's labels, and whether it gates
    gpu_smoke: GpuSmoke | None = None
    # matrix `required: when-proven`: optional until the job passed its smoke test in a published release, required
    # from then on (the night's plan sets ``required``; rockbuild.nightly.run.promote_proven)
    when_proven: bool = False
    # matrix `runner_smoke:`: what the CPU smoke on the CI runner that built the job means. gate (the default): it
    # runs in the leg and a failure fails the job; informational: for an asset that cannot start on that runner (no
    # driver there), it runs after the leg, its record goes to runner-smoke/smoke.json and never gates
    runner_smoke: str = RUNNER_SMOKE_MODES[0]
    # matrix option `common_part` (docs/common-part.md): the id of its OS's common part that a night builds this job
    # on (it compiles only its GPU library); "" builds whole. A maintainer's `rockbuild build` builds whole unless
    # given --common DIR
    common: str = ""
    # a common part (a night's <os>-common job: the cpu backend, no asset of its own): the jobs built on it
    common_for: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu_targets", ";".join(self.targets))

    @property
    def is_common_part(self) -> bool:
        return bool(self.common_for)

    @property
    def gpu_runner(self) -> tuple[str, ...]:
        return self.gpu_smoke.runner if self.gpu_smoke is not None else ()

    @property
    def gpu_required(self) -> bool:
        return self.gpu_smoke is not None and self.gpu_smoke.required
