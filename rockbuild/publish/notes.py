"""Release notes, the GitHub step summary and the alert text, rendered from the jinja2 templates in ``templates/``."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rockbuild.backends import get_backend
from rockbuild.console import human_bytes
from rockbuild.core.data import data_path

from .jobs import BuiltJob
from .manifest import AssetFile, ReleaseContent

MARKER = "rockbuild"
_MARKER_RE = re.compile(r"<!--\s*rockbuild\s+(\{.*?\})\s*-->", re.S)


def marker(data: Mapping[str, Any]) -> str:
    """The hidden line that says a release (or an alert) was made by rockbuild, and from what."""
    return f"<!-- {MARKER} {json.dumps(dict(data), sort_keys=True)} -->"


def read_marker(body: str | None) -> dict[str, Any] | None:
    m = _MARKER_RE.search(body or "")
    if not m:
        return None
    try:
        data = json.loads(m[1])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_path("templates"))),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(**context)


def _bench(job: BuiltJob, kind: str) -> str:
    for b in job.bench:
        if kind == "pp" and b.n_prompt and not b.n_gen:
            return f"{float(b.tokens_per_second or 0):.1f}"
        if kind == "tg" and b.n_gen and not b.n_prompt:
            return f"{float(b.tokens_per_second or 0):.1f}"
    return "-"


def job_row(job: BuiltJob, assets: Sequence[AssetFile], os_words: Mapping[str, str]) -> dict[str, Any]:
    model = job.smoke.model if job.smoke is not None else None
    backend = get_backend(job.backend)
    return {
        "id": job.id,
        "os": os_words.get(job.os, job.os),
        "name": job.name,
        "flavour": job.flavour,
        "isas": backend.release_isas(job.isas),
        "rocm_version": job.rocm.version or ("?" if backend.needs_rocm else "-"),
        "rocm_date": job.rocm.date or ("?" if backend.needs_rocm else "no ROCm"),
        "therock_commit": (job.rocm.therock_commit or "")[:10] or "?",
        "required": job.required,
        "status": job.status,
        "step": job.failed_step,
        "reason": job.reason,
        "smoke": job.smoke_summary(),
        "model": (model.name if model is not None else None) or "-",
        "pp": _bench(job, "pp"),
        "tg": _bench(job, "tg"),
        "assets": [a.name for a in assets if a.job == job.id],
        "asset": next((a.name for a in assets if a.job == job.id and a.kind == "zip"), job.id),
        "gpu": _gpu_row(job),
        "numerics": job.numerics_words() if job.smoke is not None else None,
        "cpu_variant_runs": job.cpu_variant_words(),
        "ops": job.ops_words(),  # test-backend-ops (rockbuild.smoke.ops): counts, CPU fallbacks, or why not checked
        "fallback": job.fallback_note(),
        "blame": job.blame_note(),  # a failed job: the input at fault, the first bad llama.cpp commit, where to get it
        # what ran again on the last good ROCm: a night without the smoke stage did not test it
        "again": (
            "built, bundled and smoke-tested" if job.smoke is not None else "built and bundled (no smoke test ran)"
        ),
    }


def _gpu_row(job: BuiltJob) -> dict[str, Any] | None:
    """The GPU smoke's line of the notes: where it ran and its pp512/tg128, or None when it did not pass."""
    summary = job.gpu_summary()
    if not summary or not summary["ok"]:
        return None
    figures = {str(b["test"]): b["tokens_per_second"] for b in summary["bench"] if b.get("tokens_per_second")}
    return {
        "gpu": summary["gpu"] or "?",
        "driver": summary["driver"] or "?",
        "figures": ", ".join(f"{test} {value:.1f} t/s" for test, value in sorted(figures.items())),
    }


def notes_context(
    content: ReleaseContent,
    *,
    known_issues: Sequence[str],
    os_words: Mapping[str, str],
    run_url: str | None,
    release_url: str | None = None,
    state: str = "",
    images: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """What release-notes.md.j2 is given: the release (``content``), the known issues, the words for each OS, the
    run's and the release's pages, and the images' rows."""
    tag, fingerprint_value, jobs, failed, assets, repo, partial = (
        content.tag,
        content.fingerprint,
        content.jobs,
        content.failed,
        content.assets,
        content.repo,
        content.partial,
    )
    first = jobs[0] if jobs else (failed[0] if failed else None)
    commit = (first.llama_commit if first else None) or "unknown"
    finished = sorted(j.finished for j in jobs if j.finished)
    return {
        "tag": tag,
        "repo": repo,
        "run_url": run_url,
        "release_url": release_url,
        "state": state,
        "build_date": (finished[-1].replace("T", " ").split("+")[0] + " UTC") if finished else "unknown",
        "oses": sorted({os_words.get(j.os, j.os) for j in jobs}),
        "names": list(dict.fromkeys(j.name for j in jobs if get_backend(j.backend).per_target)),
        "flavours": list(dict.fromkeys(j.flavour for j in sorted(jobs, key=lambda j: j.backend))),
        "llama": {"commit": commit, "short": commit[:7], "build": (first.llama_build if first else None) or "?"},
        # built from an older commit than the night's (regressions.ship: newest-good): which one broke which jobs
        "held_back": content.held_back.to_dict() if content.held_back is not None else None,
        "jobs": [job_row(j, assets, os_words) for j in jobs],
        "failed": [job_row(j, assets, os_words) for j in failed],
        "assets": [{"name": a.name, "size": human_bytes(a.size), "sha256": a.sha256} for a in assets],
        "debs": any(a.kind == "deb" for a in assets),
        "tool_wheel": next((a.name for a in assets if a.kind == "tool"), None),  # rockbuild's wheel: doctor, install
        "known_issues": list(known_issues),
        "fallbacks": [row for row in (job_row(j, assets, os_words) for j in jobs) if row["fallback"]],
        "gpu_tested": [row for row in (job_row(j, assets, os_words) for j in jobs) if row["gpu"]],
        "not_gpu_tested": [job_row(j, assets, os_words)["asset"] for j in jobs if not j.gpu_tested],
        # llama-server's chat page: the assets that have it, and those without it with the reason (never silent)
        "with_web_ui": [
            row["asset"]
            for j, row in ((j, job_row(j, assets, os_words)) for j in jobs)
            if j.web_ui is not None and j.web_ui.available
        ],
        "no_web_ui": [
            {"asset": job_row(j, assets, os_words)["asset"], "reason": j.web_ui.reason or "?"}
            for j in jobs
            if j.web_ui is not None and not j.web_ui.available
        ],
        "marker": marker({"fingerprint": fingerprint_value, "tag": tag}),
        "partial": partial,  # published with --allow-partial (publish/whole.py): the reason and each job's holes
        # the container images (publish/image.py: notes_rows): reference, digest, the run command
        "images": [{**dict(i), "size": human_bytes(int(i["size"]))} for i in images],
        "programs": _shared(j.programs for j in jobs),
        "cpu_variants": _shared(j.cpu_variants for j in jobs),
        "patches": carried_patches(jobs),
        "no_patches": [
            job_row(j, assets, os_words)["asset"] for j in jobs if j.patches is not None and j.patches.disabled
        ],
    }


def carried_patches(jobs: Sequence[BuiltJob]) -> list[dict[str, Any]]:
    """The fixes the release's llama.cpp carries: each patch applied in any job, with its link and why, and the
    jobs it was applied in when not all of them."""
    found: dict[str, dict[str, Any]] = {}
    recorded = [j for j in jobs if j.patches is not None and not j.patches.disabled]
    for job in recorded:
        assert job.patches is not None
        for p in job.patches.applied:
            entry = found.setdefault(p.id, {"id": p.id, "url": p.url or "", "why": p.why or "", "jobs": []})
            entry["jobs"].append(job.id)
    for entry in found.values():
        entry["everywhere"] = len(entry["jobs"]) == len(jobs)
    return list(found.values())


def _shared(values: Any) -> list[str]:
    """What every shipped job has (the programs, the CPU variants), in the first job's order."""
    lists = [list(v) for v in values]
    if not lists:
        return []
    return [item for item in lists[0] if all(item in other for other in lists[1:])]
