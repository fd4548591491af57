"""``rockbuild perf``: each asset's llama-bench figures on a real GPU, release after release, and the drops.

A maintainer's command, run after the night has published: :func:`read_perf` reads the ``manifest.json`` of the last
N published releases and returns a :class:`PerfReport`: per job and test, the GPU smoke's pp512 and tg128
(``jobs[].gpu_smoke.bench``), a figure more than the threshold (default 5 %) below the median of the seven releases
before it flagged as a :class:`Drop` (a noisy one, beyond ``--max-spread``, never), the CPU's numerics
(:func:`numerics_changes`: reported, never failing) and the op test's counts (``jobs[].gpu_smoke.ops``, else
``jobs[].smoke.ops``). A drop exits 1 (:class:`PerfRegression`); ``--alert`` files it as one issue.

docs/gpu.md ("Speed, release after release") explains the figures and their spread; docs/numerics.md the numerics and
the op test."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rockbuild.core.environment import Context
from rockbuild.core.errors import PublishError, RockbuildError
from rockbuild.core.record import JsonForm, Record, json_form, json_key, written
from rockbuild.core.records import ManifestRecord
from rockbuild.publish.alert import IssueReport, file_issue
from rockbuild.publish.github import GitHub
from rockbuild.publish.notes import marker, read_marker

DEFAULT_THRESHOLD = 5.0  # per cent below the median of the previous releases
WINDOW = 7  # previous releases the median is taken over
DEFAULT_MAX_SPREAD = DEFAULT_THRESHOLD  # per cent: a noisier figure is not flagged (module docstring)
NUMERICS_NOTICE = 0.5  # per cent: a CPU perplexity that moved more (same model, same CPU variant) is reported
BARS = "▁▂▃▄▅▆▇█"
LABEL, LABEL_COLOR = "performance-regression", "fbca04"


class PerfRegression(RockbuildError):
    """A figure dropped beyond the threshold (exit 1, like a failed check)."""

    exit_code = 1


def _rounded(digits: int) -> dict[str, JsonForm]:
    """A figure written to ``digits`` decimals."""
    return json_form(float, float, lambda value: round(value, digits))


@dataclass(frozen=True)
class Point(Record):
    tag: str
    tokens_per_second: float
    gpu: str | None = None
    spread_pct: float | None = None  # the repetitions' standard deviation, per cent of the mean; None: not published

    def noisy(self, max_spread: float) -> bool:
        return self.spread_pct is not None and self.spread_pct > max_spread


@dataclass(frozen=True)
class Drop(Record):
    job: str
    test: str
    tag: str
    value: float = field(metadata=json_key("tokens_per_second"))
    median: float = field(metadata=json_key("median_before"))
    percent: float = field(init=False, default=0.0, metadata=_rounded(2))  # derived: below the median

    def __post_init__(self) -> None:
        object.__setattr__(self, "percent", 100.0 * (self.median - self.value) / self.median)

    def render(self) -> str:
        return (
            f"{self.job} {self.test}: {self.value:.1f} t/s in {self.tag}, {self.percent:.1f} % below the median "
            f"{self.median:.1f} t/s of the {WINDOW} releases before"
        )


@dataclass(frozen=True)
class Series(Record):
    job: str  # the job id (one asset family: linux-gfx1151, linux-vulkan ...)
    test: str  # pp512 | tg128
    points: tuple[Point, ...]  # oldest first

    def baseline(self, max_spread: float = DEFAULT_MAX_SPREAD) -> float | None:
        """The median of up to WINDOW figures before the newest, noisy ones left out; None: none to compare."""
        before = [p.tokens_per_second for p in self.points[:-1] if not p.noisy(max_spread)][-WINDOW:]
        return statistics.median(before) if before else None

    def drop(self, threshold: float, max_spread: float = DEFAULT_MAX_SPREAD) -> Drop | None:
        """The newest figure, when it is more than ``threshold`` % below the baseline and not noisy itself."""
        if len(self.points) < 2 or self.points[-1].noisy(max_spread):
            return None
        last, median = self.points[-1], self.baseline(max_spread)
        if median is not None and median > 0 and last.tokens_per_second < median * (1 - threshold / 100.0):
            return Drop(self.job, self.test, last.tag, last.tokens_per_second, median)
        return None

    def sparkline(self) -> str:
        values = [p.tokens_per_second for p in self.points]
        low, high = min(values), max(values)
        span = (high - low) or 1.0
        return "".join(BARS[min(len(BARS) - 1, int((v - low) / span * (len(BARS) - 1) + 0.5))] for v in values)


@dataclass(frozen=True)
class NumericsPoint(Record):
    """One release's numbers for one job (manifest.json ``jobs[].smoke.numerics``)."""

    tag: str
    model: str | None = None
    cpu_ppl: float | None = None
    cpu_variant: str | None = None
    mean_kld: float | None = None
    same_top: float | None = None
    cross_backend: str | None = None
    known_answers: str | None = None


@dataclass(frozen=True)
class NumericsChange(Record):
    job: str
    tag: str
    before_tag: str
    ppl: float = field(metadata=json_key("cpu_ppl"))
    before: float
    percent: float = field(init=False, default=0.0, metadata=_rounded(3))  # derived: from ``before``
    model: str | None
    cpu_variant: str | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "percent", 100.0 * (self.ppl - self.before) / self.before)

    def render(self) -> str:
        return (
            f"{self.job}: the CPU's perplexity {self.ppl:.4f} in {self.tag} is {self.percent:+.2f} % from "
            f"{self.before:.4f} in {self.before_tag} ({self.model}, CPU variant {self.cpu_variant or '?'})"
        )


def numerics_changes(
    history: Mapping[str, Sequence[NumericsPoint]], notice: float = NUMERICS_NOTICE
) -> tuple[NumericsChange, ...]:
    """Per job, the newest CPU perplexity against the last release before it with the same model and CPU variant."""
    out = []
    for job, points in history.items():
        if not points or points[-1].cpu_ppl is None:
            continue
        last = points[-1]
        same = [p for p in points[:-1] if p.cpu_ppl and p.model == last.model and p.cpu_variant == last.cpu_variant]
        if same:
            before = same[-1]
            assert last.cpu_ppl is not None and before.cpu_ppl is not None
            if abs(last.cpu_ppl - before.cpu_ppl) > before.cpu_ppl * notice / 100.0:
                out.append(
                    NumericsChange(
                        job, last.tag, before.tag, last.cpu_ppl, before.cpu_ppl, last.model, last.cpu_variant
                    )
                )
    return tuple(out)


@dataclass(frozen=True)
class OpsPoint(Record):
    """One release's test-backend-ops counts for one job (rockbuild.smoke.ops' summary in manifest.json: the GPU
    leg's ``jobs[].gpu_smoke.ops`` when it checked, else the smoke's ``jobs[].smoke.ops``). A failed case is flagged."""

    tag: str
    result: str | None
    passed: int = 0
    failed: int = 0
    not_supported: int = 0
    device: str | None = None
    mode: str | None = None

    def cell(self) -> str:
        if self.result == "not checked":
            return "not checked"
        text = f"{self.passed}/{self.failed}/{self.not_supported}"
        return f"[bold red]{text} FAILED[/]" if self.failed or self.result == "failed" else text


def ops_from_manifests(
    manifests: Sequence[tuple[str, ManifestRecord | Mapping[str, Any]]],
) -> dict[str, tuple[OpsPoint, ...]]:
    """Each job's test-backend-ops counts over ``manifests`` (oldest first); releases without the step left out."""
    out: dict[str, list[OpsPoint]] = {}
    for tag, manifest in manifests:
        for job in ManifestRecord.of(manifest, f"{tag}'s manifest.json").jobs:
            gpu = (job.gpu_smoke.ops if job.gpu_smoke is not None else None) or {}
            smoke = (job.smoke.ops if job.smoke is not None else None) or {}
            ops = gpu if gpu and (gpu.get("result") != "not checked" or not smoke) else smoke
            if not job.id or not ops:
                continue

            def count(key: str, ops: Mapping[str, Any] = ops) -> int:
                value = ops.get(key)
                return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0

            out.setdefault(job.id, []).append(
                OpsPoint(
                    tag,
                    str(ops.get("result")) if ops.get("result") is not None else None,
                    count("passed"),
                    count("failed"),
                    count("not_supported"),
                    ops.get("device"),
                    ops.get("mode"),
                )
            )
    return {job: tuple(points) for job, points in sorted(out.items())}


@dataclass(frozen=True, kw_only=True)
class PerfReport(Record):
    """``rockbuild perf``'s result (a record: its ``--json``); the drops, the noisy figures, the numerics changes and
    the failed op tests are derived from the histories."""

    repo: str
    releases: tuple[str, ...]  # oldest first
    threshold: float = field(default=DEFAULT_THRESHOLD, metadata=json_key("threshold_percent"))
    max_spread: float = field(default=DEFAULT_MAX_SPREAD, metadata=json_key("max_spread_percent"))
    series: tuple[Series, ...]
    noisy: tuple[tuple[Series, Point], ...] = field(  # the newest figures whose spread is beyond the limit: not judged
        init=False,
        default=(),
        metadata=written(
            lambda noisy: [{"job": s.job, "test": s.test, "tag": p.tag, "spread_pct": p.spread_pct} for s, p in noisy]
        ),
    )
    numerics: Mapping[str, tuple[NumericsPoint, ...]] = field(default_factory=dict)  # job -> oldest first
    numerics_changes: tuple[NumericsChange, ...] = field(init=False, default=())
    ops: Mapping[str, tuple[OpsPoint, ...]] = field(default_factory=dict)  # job -> test-backend-ops, oldest first
    ops_failed: tuple[tuple[str, OpsPoint], ...] = field(  # (job, point): a test-backend-ops case (or the step) failed
        init=False,
        default=(),
        metadata=written(
            lambda failed: [{"job": j, "tag": p.tag, "failed": p.failed, "device": p.device} for j, p in failed]
        ),
    )
    drops: tuple[Drop, ...] = field(init=False, default=())
    untested: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # release -> jobs shipped without GPU figures
    alert: str | None = None

    def __post_init__(self) -> None:
        derived = {
            "noisy": tuple((s, s.points[-1]) for s in self.series if s.points and s.points[-1].noisy(self.max_spread)),
            "numerics_changes": numerics_changes(self.numerics),
            "ops_failed": tuple(
                (job, p) for job, points in self.ops.items() for p in points if p.failed or p.result == "failed"
            ),
            "drops": tuple(d for s in self.series if (d := s.drop(self.threshold, self.max_spread)) is not None),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def _ops_table(self) -> str:
        from rich.table import Table

        tags = self.releases[-6:]
        table = Table(title="every op (test-backend-ops): passed/failed/not supported", title_justify="left")
        for column in ("job", "device", "mode", *tags):
            table.add_column(column, no_wrap=True)
        for job, points in self.ops.items():
            by_tag = {p.tag: p for p in points}
            table.add_row(
                job,
                points[-1].device or "?",
                points[-1].mode or "?",
                *(by_tag[t].cell() if t in by_tag else "-" for t in tags),
            )
        return _text(table)

    def _numerics_table(self) -> str:
        from rich.table import Table

        tags = self.releases[-6:]
        table = Table(
            title="numbers: the CPU's perplexity on the numerics text, the GPU's mean KLD from the CPU, the "
            "known answers",
            title_justify="left",
        )
        for column in ("job", "model", "CPU variant", *tags):
            table.add_column(column, no_wrap=True)
        for job, points in self.numerics.items():
            by_tag = {p.tag: p for p in points}
            last = points[-1]
            table.add_row(
                job, last.model or "?", last.cpu_variant or "?", *(_numerics_cell(by_tag.get(t)) for t in tags)
            )
        return _text(table)

    def render(self) -> str:
        from rich.table import Table

        table = Table(
            title=f"{self.repo}: GPU llama-bench over {len(self.releases)} release(s) (t/s)", title_justify="left"
        )
        for column in ("job", "test", "GPU", "history", *self.releases[-6:], "change"):
            table.add_column(column, no_wrap=True)
        drops = {(d.job, d.test) for d in self.drops}
        for s in self.series:
            by_tag = {p.tag: p.tokens_per_second for p in s.points}
            median = s.baseline(self.max_spread) if len(s.points) > 1 else None
            change = f"{100.0 * (s.points[-1].tokens_per_second - median) / median:+.1f} %" if median else ""
            if (s.job, s.test) in drops:
                change = f"[bold red]{change} DROP[/]"
            elif s.points[-1].noisy(self.max_spread):
                change = f"{change} noisy".strip()
            table.add_row(
                s.job,
                s.test,
                s.points[-1].gpu or "?",
                s.sparkline(),
                *(f"{by_tag[t]:.1f}" if t in by_tag else "-" for t in self.releases[-6:]),
                change,
            )
        lines = [_text(table)]
        if not self.series:
            lines.append("no release carries GPU smoke figures yet (jobs[].gpu_smoke.bench in manifest.json)")
        lines.extend(f"drop: {d.render()}" for d in self.drops)
        lines.extend(
            f"noisy: {s.job} {s.test} in {p.tag}: spread {p.spread_pct:.1f} % over its repetitions, beyond "
            f"the {self.max_spread:g} % limit; not judged"
            for s, p in self.noisy
        )
        if any(self.numerics.values()):
            lines.append(self._numerics_table())
        lines.extend(f"numerics change (reported, not gating): {c.render()}" for c in self.numerics_changes)
        if self.ops:
            lines.append(self._ops_table())
        lines.extend(
            f"ops FAILED: {job} in {p.tag}: {p.failed} test-backend-ops case(s) failed on {p.device or '?'}"
            for job, p in self.ops_failed
        )
        if self.alert:
            lines.append(f"alert: {self.alert}")
        return "\n".join(lines)


def _text(table: Any) -> str:
    """A rich table as plain text, 200 columns wide."""
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    Console(file=out, width=200, force_terminal=False).print(table)
    return out.getvalue().rstrip()


def _numerics_cell(p: NumericsPoint | None) -> str:
    if p is None:
        return "-"
    ppl = f"{p.cpu_ppl:.3f}" if p.cpu_ppl is not None else "-"
    kld = f" kld {p.mean_kld:.4f}" if p.mean_kld is not None else ""
    answers = {"passed": " ok", "failed": " WRONG"}.get(str(p.known_answers), "")
    return ppl + kld + answers


def numerics_from_manifests(
    manifests: Sequence[tuple[str, ManifestRecord | Mapping[str, Any]]],
) -> dict[str, tuple[NumericsPoint, ...]]:
    """Each job's numbers over ``manifests`` (oldest first); releases without figures are left out."""
    out: dict[str, list[NumericsPoint]] = {}
    for tag, manifest in manifests:
        for job in ManifestRecord.of(manifest, f"{tag}'s manifest.json").jobs:
            n = (job.smoke.numerics if job.smoke is not None else None) or {}
            if not job.id or not any(n.get(k) is not None for k in ("cpu_ppl", "mean_kld", "answers_total")):
                continue

            def num(key: str, n: Mapping[str, Any] = n) -> float | None:
                value = n.get(key)
                return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

            def text(key: str, n: Mapping[str, Any] = n) -> str | None:
                value = n.get(key)
                return str(value) if value is not None else None

            out.setdefault(job.id, []).append(
                NumericsPoint(
                    tag,
                    model=text("model"),
                    cpu_ppl=num("cpu_ppl"),
                    cpu_variant=text("cpu_variant"),
                    mean_kld=num("mean_kld"),
                    same_top=num("same_top"),
                    cross_backend=text("cross_backend"),
                    known_answers=text("known_answers"),
                )
            )
    return {job: tuple(points) for job, points in sorted(out.items())}


def series_from_manifests(
    manifests: Sequence[tuple[str, ManifestRecord | Mapping[str, Any]]],
) -> tuple[tuple[Series, ...], dict[str, tuple[str, ...]]]:
    """Each (job, test)'s figures over ``manifests`` ((tag, manifest), oldest first), and per release the jobs
    that shipped without GPU figures."""
    points: dict[tuple[str, str], list[Point]] = {}
    untested: dict[str, tuple[str, ...]] = {}
    for tag, manifest in manifests:
        missing = []
        for job in ManifestRecord.of(manifest, f"{tag}'s manifest.json").jobs:
            if not job.id:
                continue
            gpu = job.gpu_smoke
            if gpu is None or not gpu.ok or not gpu.bench:
                missing.append(job.id)
                continue
            for entry in gpu.bench:
                value = entry.tokens_per_second
                if value is not None and entry.test:
                    points.setdefault((job.id, entry.test), []).append(Point(tag, float(value), gpu.gpu, entry.spread))
        if missing:
            untested[tag] = tuple(missing)
    series = tuple(Series(job, test, tuple(pts)) for (job, test), pts in sorted(points.items()))
    return series, untested


def read_perf(
    repo: str,
    *,
    context: Context,
    api_url: str | None = None,
    last: int = 30,
    threshold: float = DEFAULT_THRESHOLD,
    alert: bool = False,
    max_spread: float = DEFAULT_MAX_SPREAD,
) -> PerfReport:
    """The history of the last ``last`` published releases of ``repo`` (see the module docstring)."""
    token = context.github.token
    gh = GitHub(repo, api_url=api_url, token=token, throttle=False, timeout=None)
    try:
        manifests = list(gh.manifests(last))[::-1]  # oldest first
        series, untested = series_from_manifests(manifests)
        report = PerfReport(
            repo=repo,
            releases=tuple(tag for tag, _ in manifests),
            series=series,
            threshold=threshold,
            untested=untested,
            max_spread=max_spread,
            numerics=numerics_from_manifests(manifests),
            ops=ops_from_manifests(manifests),
        )
        if alert and report.drops:
            report = _file_alert(gh, report, context)
        return report
    finally:
        gh.close()


def _file_alert(gh: Any, report: PerfReport, context: Context) -> PerfReport:
    from dataclasses import replace

    if not context.github.token:
        raise PublishError("--alert needs a GitHub token (issues: write): set GITHUB_TOKEN or GH_TOKEN")
    newest = report.releases[-1]
    body = "\n".join(
        [
            f"llama-bench figures of {newest} dropped more than {report.threshold:g} % below the median "
            f"of the {WINDOW} releases before (`rockbuild perf`):",
            "",
            *(f"- {d.render()}" for d in report.drops),
            "",
            marker({"perf": newest}),
        ]
    )
    filed = file_issue(
        gh,
        IssueReport(
            label=LABEL,
            color=LABEL_COLOR,
            title=f"Performance regression in {newest}",
            body=body,
            what=f"{len(report.drops)} drop(s) in {newest}",
            reported=lambda text: (read_marker(text) or {"perf": None})["perf"] == newest,
            items=tuple(f"{d.job} {d.test}" for d in report.drops),
            already=f"{newest}'s drops are already reported",
        ),
        say=lambda m: None,
    )  # the report says it once (render's "alert:" line)
    return replace(report, alert=filed.message)
