"""``SHA256SUMS`` and ``manifest.json``: what every asset holds and what it was built from.

Both are deterministic for the same inputs (no wall-clock time inside), so a re-run produces the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rockbuild import __version__
from rockbuild.core.data import write_json_atomic
from rockbuild.core.records import MANIFEST_SCHEMA, HeldBack, ManifestAsset, SmokeGpu

from .jobs import BuiltJob, ops_summary, public_cmake

SCHEMA = MANIFEST_SCHEMA
# what a release asset is: a bundle's archive (zip, tar.gz), its .deb and SBOM, manifest.json, SHA256SUMS, or
# rockbuild's own wheel (tool)
AssetKind = Literal["zip", "tar.gz", "deb", "sbom", "manifest", "checksums", "tool"]
CONTENT_TYPES = {
    ".zip": "application/zip",
    ".tar.gz": "application/gzip",
    ".json": "application/json",
    ".deb": "application/vnd.debian.binary-package",
    "SHA256SUMS": "text/plain",
    ".whl": "application/zip",
}


@dataclass(frozen=True)
class AssetFile:
    """One file of a release, where it is here; what manifest.json says of it is its :attr:`record`."""

    name: str
    path: Path
    size: int
    sha256: str
    kind: AssetKind
    job: str | None = None

    @property
    def content_type(self) -> str:
        for suffix, value in CONTENT_TYPES.items():
            if self.name.endswith(suffix):
                return value
        return "application/octet-stream"

    @property
    def record(self) -> ManifestAsset:
        return ManifestAsset(name=self.name, size=self.size, sha256=self.sha256, kind=self.kind, job=self.job)


def fingerprint(jobs: Sequence[BuiltJob]) -> str:
    """What the release is made from, as one hash: llama.cpp commit and build, and per shipped job its targets,
    ROCm tarball, CMake definitions, carried patches. The same inputs on a re-run give the same fingerprint (the
    release is found)."""
    data = [
        {
            "id": j.id,
            "targets": list(j.targets),
            "llama": [j.llama_commit, j.llama_build],
            "rocm": [j.rocm.version, j.rocm.tarball, j.rocm.tarball_sha256],
            "cmake": public_cmake(j.cmake),
            # the carried fixes are what it is made from too (absent from jobs built before them: same hash)
            **({"patches": j.patches.digest} if j.patches is not None else {}),
        }
        for j in sorted(jobs, key=lambda j: j.id)
    ]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def sha256sums(assets: Sequence[AssetFile]) -> str:
    """``sha256sum -c`` format, sorted by name."""
    return "".join(f"{a.sha256}  {a.name}\n" for a in sorted(assets, key=lambda a: a.name))


def bundle_files(bundle: Path) -> list[dict[str, Any]]:
    out = []
    for dirpath, dirnames, files in os.walk(bundle):
        dirnames.sort()
        for name in sorted(files):
            path = Path(dirpath) / name
            out.append({"path": path.relative_to(bundle).as_posix(), "size": path.stat().st_size})
    return out


def _smoke(job: BuiltJob) -> dict[str, Any] | None:
    smoke = job.smoke
    if smoke is None:
        return None
    model, gpu = smoke.model, smoke.gpu or SmokeGpu()
    server = smoke.runs.get("server")
    found = {"web_ui": server.web_ui, "browser": server.browser} if server is not None else {}
    checks = {
        what: f"{check.result}: {check.detail}" if check.detail else check.result
        for what, check in found.items()
        if check is not None
    }
    return {
        "ok": smoke.ok,
        "gpu": gpu.summary,
        "placement": gpu.placement,
        "model": {key: getattr(model, key) if model else None for key in ("name", "sha256", "source")},
        **checks,
        "numerics": job.numerics(),
        "cpu_variants": job.cpu_variant_runs(),
        "ops": ops_summary(smoke) or None,
    }


@dataclass(frozen=True)
class ReleaseContent:
    """What a release is, as its manifest and its notes both tell it: the tag, the inputs' fingerprint, the jobs
    that ship and those that failed, the assets, the repository, and (published with --allow-partial) what it lacks."""

    tag: str
    fingerprint: str
    jobs: Sequence[BuiltJob]
    failed: Sequence[BuiltJob]
    assets: Sequence[AssetFile]
    repo: str | None
    partial: Mapping[str, Any] | None = None
    held_back: HeldBack | None = None  # built from an older llama.cpp commit than the night's (ship: newest-good)


def build_manifest(
    content: ReleaseContent,
    *,
    floors: Mapping[str, Mapping[str, tuple[str, str]]],
    floor_config: Mapping[str, str],
    images: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The manifest of a release: every job that ships, with its assets, and every job that failed; with ``images``
    (``--images``; None: the key is left out, as before images) each container image's digest and tags."""
    tag, fingerprint_value, jobs, failed, assets, repo, partial = (
        content.tag,
        content.fingerprint,
        content.jobs,
        content.failed,
        content.assets,
        content.repo,
        content.partial,
    )
    by_job: dict[str, list[AssetFile]] = {}
    for a in assets:
        if a.job:
            by_job.setdefault(a.job, []).append(a)
    shipped = []
    for job in jobs:
        files = bundle_files(job.bundle) if job.bundle else []
        entry: dict[str, Any] = {
            **job.to_dict(),
            "assets": [a.record.to_dict() for a in by_job.get(job.id, [])],
            "bundle": {"files": files, "file_count": len(files), "total_bytes": sum(f["size"] for f in files)},
            "audit": {"ok": job.audit.ok, "failures": list(job.audit.failures), "warnings": list(job.audit.warnings)}
            if job.audit is not None
            else None,
            "smoke": _smoke(job),
            "bench": [b.to_dict() for b in job.bench],
            "gpu_smoke": job.gpu_summary(),  # the real-GPU figures `rockbuild perf` tracks
            "web_ui": job.web_ui_summary(),  # llama-server's chat page, or why it has none
        }
        if job.os == "linux":
            entry["glibc_floor"] = {k: {"version": v, "file": f} for k, (v, f) in (floors.get(job.id) or {}).items()}
        shipped.append(entry)
    first = jobs[0] if jobs else None
    manifest = {
        "schema": SCHEMA,
        "tool": "rockbuild",
        "rockbuild_version": __version__,
        "tag": tag,
        "repository": repo,
        "fingerprint": fingerprint_value,
        "llama_cpp": {
            "commit": first.llama_commit if first else None,
            "build_number": first.llama_build if first else None,
            **({"held_back": content.held_back.to_dict()} if content.held_back is not None else {}),
        },
        "patches": release_patches(jobs),
        "glibc_floor_allowed": dict(floor_config),
        "assets": [a.record.to_dict() for a in assets],
        "jobs": shipped,
        "not_gpu_tested": [j.id for j in jobs if not j.gpu_tested],
        # None: whole (every bundle has the chat page and every program); else published with --allow-partial
        "partial": dict(partial) if partial is not None else None,
        "failed_jobs": [j.failure().to_dict() for j in failed],
    }
    if images is not None:
        manifest["images"] = [dict(i) for i in images]
    return manifest


def release_patches(jobs: Sequence[BuiltJob]) -> dict[str, Any] | None:
    """manifest.json's ``patches``: the series' digest (when every job carried the same) and each patch applied in
    any shipped job; each job's own outcomes are in its entry. None when no job recorded its patches."""
    recorded = [j.patches for j in jobs if j.patches is not None]
    if not recorded:
        return None
    digests = {p.digest for p in recorded}
    applied: dict[str, dict[str, Any]] = {}
    for patches in recorded:
        for p in patches.applied:
            applied.setdefault(p.id, p.to_dict())
    return {
        "digest": digests.pop() if len(digests) == 1 else "mixed",
        "disabled": all(p.disabled for p in recorded),
        "patches": list(applied.values()),
    }


def write_json(path: Path, data: Mapping[str, Any]) -> Path:
    return write_json_atomic(path, data, ensure_ascii=False)
