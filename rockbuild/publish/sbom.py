"""A CycloneDX SBOM per release asset: what is inside the archive and where each file came from.

The document names the asset (``metadata.component``), llama.cpp (commit and build number, the source of every
program and libggml/libllama), the ROCm it was built against (the TheRock tarball's name, sha256 and version, or the
installed ROCm root) and every file of the bundle with its sha256, nested under the package it came from (CycloneDX
``components`` of a component: what the package contributes to the asset). Origins come from the bundle's own
record (``bundle.json``: each shipped file's source path, each kernel folder's source), never from guessing by name.

It is written with ``cyclonedx-python-lib`` (spec 1.6) and is reproducible like the archives: no wall-clock time
(the timestamp is the archives'), a serial number derived from the asset's name and content, components sorted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rockbuild import __version__
from rockbuild.core.records import BUNDLE_FORMAT, BuildRocm, BundleRecord
from rockbuild.downloader import sha256_file
from rockbuild.jobfolder import JobFolder

from .jobs import BuiltJob

SBOM_SUFFIX = ".cdx.json"
LLAMA = "llama.cpp"
ROCM = "rocm"
ROCKBUILD = "rockbuild"


def _bundle_files(bundle: Path) -> Iterator[tuple[str, Path]]:
    for path in sorted(p for p in bundle.rglob("*") if p.is_file() and not p.is_symlink()):
        yield path.relative_to(bundle).as_posix(), path


def file_origins(job: BuiltJob) -> dict[str, str]:
    """Each bundled file (relative path) -> ``llama.cpp``, ``rocm`` or ``rockbuild``, from bundle.json."""
    assert job.bundle is not None
    meta = JobFolder(job.dir).bundle_meta() or BundleRecord(format=BUNDLE_FORMAT)
    build_dir = str(JobFolder(job.dir).build_dir)
    origins: dict[str, str] = {"bundle.json": ROCKBUILD}
    for entry in meta.files:
        source = str(entry.source)
        # a build in a chroot records the path as the chroot saw it (/e2e/out/<job>/build/...)
        built = source.startswith(build_dir + "/") or f"/{job.id}/build/" in source
        origins[entry.path] = LLAMA if built else ROCM
    for folder in meta.kernels.folders if meta.kernels is not None else ():
        if folder.dest:
            origins[f"{folder.dest}/"] = ROCM  # a prefix: every kernel file below it
    return origins


def _origin(rel: str, origins: Mapping[str, str]) -> str:
    if rel in origins:
        return origins[rel]
    return next((o for prefix, o in origins.items() if prefix.endswith("/") and rel.startswith(prefix)), "unknown")


def _pedigree(job: BuiltJob) -> Any:
    """llama.cpp's CycloneDX ``pedigree.patches``: each carried fix applied to its tree (an unofficial patch that
    resolves the defect its upstream PR or issue names); None when none was applied."""
    from cyclonedx.model import XsUri
    from cyclonedx.model.component import Patch, PatchClassification, Pedigree
    from cyclonedx.model.issue import IssueClassification, IssueType

    applied = job.patches.applied if job.patches is not None and not job.patches.disabled else ()
    if not applied:
        return None
    patches = [
        Patch(
            type=PatchClassification.UNOFFICIAL,
            resolves=[
                IssueType(
                    type=IssueClassification.DEFECT,
                    id=p.id,
                    name=p.id,
                    description=p.why or None,
                    references=[XsUri(p.url)] if p.url else None,
                )
            ],
        )
        for p in applied
    ]
    notes = "carried by rockbuild (patches/patches.yaml): " + ", ".join(
        f"{p.id} (sha256 {(p.sha256 or '?')[:16]})" for p in applied
    )
    return Pedigree(patches=patches, notes=notes)


def make_sbom(job: BuiltJob, asset: str, tag: str, *, timestamp: int) -> str:
    """The CycloneDX JSON of ``asset`` (an archive of ``job``'s bundle, released as ``tag``)."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    assert job.bundle is not None
    files = list(_bundle_files(job.bundle))
    hashes = {rel: sha256_file(path) for rel, path in files}
    origins = file_origins(job)

    def sha(value: str) -> list[HashType]:
        return [HashType(alg=HashAlgorithm.SHA_256, content=value)]

    asset_component = Component(
        type=ComponentType.APPLICATION,
        name=asset,
        version=tag,
        bom_ref="asset",
        description=f"llama.cpp {job.flavour} build for {', '.join(job.targets) or job.os} ({job.id})",
    )
    commit = job.llama_commit or "unknown"
    build = job.llama_build or ""
    build = f"b{build}" if build.isdigit() else build  # llama.cpp's own spelling of a build: b11312
    llama = Component(
        type=ComponentType.APPLICATION,
        name=LLAMA,
        version=build or commit[:12],
        bom_ref=LLAMA,
        purl=PackageURL("github", "ggml-org", "llama.cpp", commit) if job.llama_commit else None,
        properties=[
            Property(name="rockbuild:commit", value=commit),
            Property(name="rockbuild:build_number", value=build or "unknown"),
            *([Property(name="rockbuild:patches", value=job.patches.digest)] if job.patches else []),
        ],
        pedigree=_pedigree(job),
    )
    packages = {LLAMA: llama}
    if job.rocm.version or job.rocm.tarball:
        rocm = job.rocm
        recorded = JobFolder(job.dir).build()
        root = (recorded.rocm if recorded is not None else None) or BuildRocm()
        properties = [
            Property(name=f"rockbuild:{k}", value=str(v))
            for k, v in (
                ("tarball", rocm.tarball),
                ("therock_commit", rocm.therock_commit),
                ("group", rocm.group),
                ("date", rocm.date),
                ("root_kind", root.kind),
            )
            if v
        ]  # the root's path is the runner's
        packages[ROCM] = Component(
            type=ComponentType.FRAMEWORK,
            name=rocm.tarball.removesuffix(".tar.gz") if rocm.tarball else "rocm",
            version=rocm.version or "unknown",
            bom_ref=ROCM,
            properties=properties,
            hashes=sha(rocm.tarball_sha256) if rocm.tarball_sha256 else [],
        )
    packages[ROCKBUILD] = Component(
        type=ComponentType.APPLICATION, name=ROCKBUILD, version=__version__, bom_ref=ROCKBUILD
    )
    loose: list[Any] = []
    for rel, _path in files:
        origin = _origin(rel, origins)
        component = Component(
            type=ComponentType.FILE,
            name=rel,
            bom_ref=f"file:{rel}",
            hashes=sha(hashes[rel]),
            properties=[Property(name="rockbuild:from", value=origin)],
        )
        if origin in packages:
            packages[origin].components.add(component)
        else:
            loose.append(component)

    bom = Bom(components=[*packages.values(), *loose])
    bom.metadata.component = asset_component
    bom.metadata.timestamp = datetime.fromtimestamp(timestamp, UTC)
    bom.metadata.tools.components.add(Component(type=ComponentType.APPLICATION, name=ROCKBUILD, version=__version__))
    content = "\n".join(f"{rel} {hashes[rel]}" for rel, _ in files)
    bom.serial_number = uuid.uuid5(uuid.NAMESPACE_URL, f"rockbuild:{asset}:{tag}:{content}")
    for package in packages.values():
        bom.register_dependency(asset_component, [package])
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"
