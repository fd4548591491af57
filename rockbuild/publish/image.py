"""A container image per Linux asset of a release, made from the very bundle the archives hold, tested with podman,
and pushed to the repository's registry only with the release (docs/images.md).

* **What**: one image per Linux job (a ROCm image per GPU family, one Vulkan image). Windows gets none: a Windows
  container runs only on a Windows host, which has no GPU path for a container (no /dev/kfd, no /dev/dri; GPU-PV is
  DirectX only), and GitHub's registry users run Linux hosts.
* **Layers**: the base (:mod:`rockbuild.image.base`: the C runtime the bundle leaves to the system, CA certificates,
  the health probe; the Vulkan loader and Mesa for Vulkan; ``/etc/passwd`` with the non-root user, ``/models``,
  ``/tmp``), the bundle at ``/opt/llama`` byte for byte, and the SBOM at ``/usr/share/doc/rockbuild/``. Written by
  :mod:`rockbuild.image.oci`, reproducible: the same bundle and base give the same digest.
* **Runs**: ``llama-server`` as entrypoint, on 0.0.0.0:8080 (``LLAMA_ARG_HOST``/``LLAMA_ARG_PORT``, which its
  arguments override), a HEALTHCHECK on ``/health``, the user ``llama`` (10001), the model passed as ``-m
  /models/NAME.gguf`` from the volume.
* **Before a push**: the image must have passed :func:`check_image` (podman: /health, the chat page, a known answer
  of a real model, non-root, read-only root); a push that fails is a failed publish; a re-run sends only what is
  missing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rockbuild import __version__
from rockbuild.backends import get_backend
from rockbuild.bundle.elf import version_key
from rockbuild.core.data import YDict, check_keys, load_data_file, mapping, text, texts, whole
from rockbuild.core.errors import ConfigError, ImageError
from rockbuild.core.record import Record, written
from rockbuild.core.records import ManifestImage
from rockbuild.image import oci
from rockbuild.image.base import (
    Package,
    base_members,
    installed_packages,
    package_closure,
    provided_versions,
)
from rockbuild.image.podman import ImageTest, Podman, loaded, serve_and_check
from rockbuild.image.registry import PushResult, Reference, Registry, push_image

from .config import PublishConfig
from .deb import host_libraries
from .floor import bundle_floor
from .jobs import BuiltJob
from .sbom import make_sbom

PREFIX = "opt/llama"
SBOM_PATH = "usr/share/doc/rockbuild/sbom.cdx.json"
LABEL = "io.github.rockbuild"


@dataclass(frozen=True)
class ImagesConfig:
    """``config/images.yaml`` as a value."""

    packages: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # "all" and per backend
    never: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    user: str = "llama"
    uid: int = 10001
    port: int = 8080
    release_tag: str = "{flavour}-{tag}"
    moving_tag: str = "{flavour}"


def parse_images_config(doc: Any, path: Path) -> ImagesConfig:
    if not isinstance(doc, YDict):
        raise ConfigError(f"{path}: expected a mapping (see the shipped config/images.yaml)")
    check_keys(path, doc, ["packages", "never", "files", "user", "port", "tags"], "the images configuration")
    packages = mapping(path, doc, "packages", "images.yaml")
    user = mapping(path, doc, "user", "images.yaml")
    if isinstance(user, YDict):
        check_keys(path, user, ["name", "uid"], "images.yaml's user")
    tags = mapping(path, doc, "tags", "images.yaml")
    return ImagesConfig(
        packages={str(k): texts(path, packages, k, (), "packages") for k in packages},
        never=texts(path, doc, "never", (), "images.yaml"),
        files=texts(path, doc, "files", (), "images.yaml"),
        user=text(path, user, "name", "llama", "user"),
        uid=whole(path, user, "uid", 10001, "user", least=1),  # never 0: the image runs as non-root
        port=whole(path, doc, "port", 8080, "images.yaml", least=1, most=65535),
        release_tag=text(path, tags, "release", "{flavour}-{tag}", "tags"),
        moving_tag=text(path, tags, "moving", "{flavour}", "tags"),
    )


def load_images_config(path: Path | None = None) -> ImagesConfig:
    return load_data_file(path, "images.yaml", parse_images_config)


@dataclass(frozen=True)
class ImageOptions:
    """What ``--images``/``--image-*`` ask for (``rockbuild image``'s options too); None repository: build and test,
    push nowhere.

    ``test`` False builds without the podman test. The commands allow it only where nothing is pushed (``rockbuild
    image`` without ``--push``, ``publish --dry-run``); :func:`push_release_images` refuses an image whose test did
    not pass whenever ``test`` is on."""

    repository: str | None = None  # ghcr.io/<owner>/<name>
    model: Path | None = None  # the .gguf the podman test serves (a real model: the known answer)
    prompt: str = "The capital of France is"
    expect: str = r"\s*Paris"
    base_root: Path = Path("/")  # whose installed packages make the base: a build root, or this machine
    runtime: str | None = None  # podman --runtime (runc where crun refuses the cgroups)
    user: str | None = None  # the registry user (ghcr.io: any name with GITHUB_TOKEN)
    token: str | None = field(default=None, repr=False)
    level: int = 6  # gzip
    test: bool = True  # the podman test before a push (off: build only)
    config: ImagesConfig | None = field(default=None, repr=False)  # None: the shipped config/images.yaml

    def images_config(self) -> ImagesConfig:
        """``config``, or the shipped config/images.yaml when none was given."""
        return self.config if self.config is not None else load_images_config()


@dataclass(frozen=True)
class ReleaseImage:
    """One image of a release: where it is on disk, what it is, how to run it, and what its test and push saw."""

    job: str
    flavour: str  # rocm-gfx1151 | vulkan
    backend: str
    folder: Path
    digest: str
    image_id: str
    compressed_bytes: int
    unpacked_bytes: int
    repository: str | None
    tags: tuple[str, ...]  # the release's, then the moving one
    packages: tuple[Package, ...]
    run_command: str
    test: ImageTest | None = None
    push: PushResult | None = None

    @property
    def reference(self) -> str:
        return f"{self.repository or 'IMAGE'}:{self.tags[0]}"

    @property
    def record(self) -> ManifestImage:
        """What manifest.json says of the image: what it is, not what its test saw (timings) nor its push."""
        return ManifestImage(
            job=self.job,
            flavour=self.flavour,
            repository=self.repository,
            tags=self.tags,
            digest=self.digest,
            image_id=self.image_id,
            compressed_bytes=self.compressed_bytes,
            unpacked_bytes=self.unpacked_bytes,
            run=self.run_command,
            base_packages=tuple(p.to_dict() for p in self.packages),
        )

    def to_dict(self) -> dict[str, Any]:
        """``--json``: the manifest's record, and what the test and the push saw."""
        return {
            **self.record.to_dict(),
            "test": self.test.to_dict() if self.test else None,
            "push": self.push.to_dict() if self.push else None,
        }


def image_flavour(job: BuiltJob) -> str:
    """``rocm-gfx1151`` (a per-target backend: one image per GPU family) or ``vulkan``."""
    return flavour_name(job.backend, job.file_name)


def image_tags(job: BuiltJob, tag: str, config: ImagesConfig) -> tuple[str, str]:
    flavour = image_flavour(job)
    return config.release_tag.format(flavour=flavour, tag=tag), config.moving_tag.format(flavour=flavour)


def flavour_name(backend: str, name: str) -> str:
    """An image's flavour: ``rocm-gfx1151`` (a per-target backend: one image per GPU family, the job's file name) or
    ``vulkan``; lower case, as registries want tags. What ``rockbuild doctor`` names for a GPU too."""
    flavour = get_backend(backend)
    return f"{flavour.name}-{name}".lower() if flavour.per_target else flavour.name


def podman_run(needs_rocm: bool, reference: str, port: int = 8080) -> str:
    """The one command that runs an image: the devices the flavour needs (ROCm: /dev/kfd and /dev/dri; Vulkan:
    /dev/dri), the user's groups for them, the port, the model folder."""
    devices = "--device /dev/kfd --device /dev/dri" if needs_rocm else "--device /dev/dri"
    return (
        f"podman run -d --name llama-server {devices} --group-add keep-groups -p {port}:{port} "
        f"-v ~/models:/models:ro,Z {reference} -m /models/MODEL.gguf"
    )


def run_command(job: BuiltJob, reference: str, config: ImagesConfig) -> str:
    """The one command the notes give for ``job``'s image."""
    return podman_run(get_backend(job.backend).needs_rocm, reference, config.port)


def base_packages(
    job: BuiltJob, publish: PublishConfig, config: ImagesConfig, installed: Mapping[str, Package]
) -> list[Package]:
    """The Debian packages of the job's base: those of the libraries its bundle leaves to the system (the .deb's
    Depends), the images config's for every image and for the job's backend, and what they depend on."""
    assert job.bundle is not None
    roots: set[str] = set()
    for library, needed_by in host_libraries(job.bundle).items():
        package = publish.deb_packages.get(library)
        if package is None:
            raise ImageError(
                f"job {job.id}: {needed_by} needs {library}, which publish.yaml's deb_packages maps to "
                "no Debian package, so the image's base cannot provide it"
            )
        roots.add(package)
    roots.update(config.packages.get("all", ()))
    roots.update(config.packages.get(job.backend, ()))
    return package_closure(sorted(roots), installed, never=config.never)


def check_base_floor(job: BuiltJob, members: Sequence[oci.Member]) -> None:
    """Refuse a base whose C runtime is older than the bundle needs (the bundle would not start in it)."""
    assert job.bundle is not None
    provided = provided_versions(members)
    for family, (version, file) in sorted(bundle_floor(job.bundle).items()):
        have = provided.get(family)
        if have is not None and version_key(version) > version_key(have):
            raise ImageError(
                f"job {job.id}: {file} needs {family}_{version}, but the image's base gives {family}_{have}",
                hint="make the base from the root the bundle was built in "
                "(--image-base-root) or publish from a newer machine",
            )


def _system_files(config: ImagesConfig) -> list[oci.Member]:
    uid = config.uid
    passwd = (
        f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"{config.user}:x:{uid}:{uid}:llama-server:/home/{config.user}:/usr/sbin/nologin\n"
    )
    group = f"root:x:0:\n{config.user}:x:{uid}:\n"
    return [
        oci.Member("etc/passwd", "file", 0o644, data=passwd.encode()),
        oci.Member("etc/group", "file", 0o644, data=group.encode()),
        oci.Member("tmp", "dir", 0o1777),
        oci.Member("models", "dir", 0o755, uid=uid, gid=uid),
        oci.Member(f"home/{config.user}", "dir", 0o755, uid=uid, gid=uid),
    ]


def image_sbom(job: BuiltJob, name: str, tag: str, packages: Sequence[Package], *, timestamp: int) -> bytes:
    """The release asset's CycloneDX SBOM (the bundle, llama.cpp, ROCm: :func:`~.sbom.make_sbom`) for the image,
    with the base's Debian packages added as components."""
    document = json.loads(make_sbom(job, name, tag, timestamp=timestamp))
    for p in packages:
        document.setdefault("components", []).append(
            {
                "type": "library",
                "bom-ref": f"deb:{p.name}",
                "name": p.name,
                "version": p.version,
                "purl": f"pkg:deb/debian/{p.name}@{p.version}?arch={p.architecture}",
                "properties": [{"name": "rockbuild:from", "value": "image-base"}],
            }
        )
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()


def image_labels(
    job: BuiltJob, tag: str, repo: str | None, packages: Sequence[Package], created: int
) -> dict[str, str]:
    backend = get_backend(job.backend)
    labels = {
        "org.opencontainers.image.title": f"llama.cpp {job.flavour} ({job.name}) by rockbuild",
        "org.opencontainers.image.description": f"llama-server from the rockbuild release {tag}, asset "
        f"{job.id}: {', '.join(backend.release_isas(job.isas))}",
        "org.opencontainers.image.version": tag,
        "org.opencontainers.image.revision": job.llama_commit or "unknown",
        "org.opencontainers.image.licenses": "MIT",
        "org.opencontainers.image.created": datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "org.opencontainers.image.vendor": "rockbuild",
        f"{LABEL}.release": tag,
        f"{LABEL}.job": job.id,
        f"{LABEL}.llama-cpp.commit": job.llama_commit or "unknown",
        f"{LABEL}.llama-cpp.build": job.llama_build or "unknown",
        f"{LABEL}.rocm.version": job.rocm.version or "none",
        f"{LABEL}.sbom": f"/{SBOM_PATH}",
        f"{LABEL}.base": ", ".join(f"{p.name}={p.version}" for p in packages),
        f"{LABEL}.version": __version__,
    }
    if repo:
        labels["org.opencontainers.image.source"] = f"https://github.com/{repo}"
        labels["org.opencontainers.image.url"] = f"https://github.com/{repo}/releases/tag/{tag}"
    if job.rocm.tarball:
        labels[f"{LABEL}.rocm.tarball"] = job.rocm.tarball
    return labels


def build_image(
    job: BuiltJob,
    tag: str,
    folder: Path,
    *,
    publish: PublishConfig,
    options: ImageOptions,
    mtime: int,
    repo: str | None,
    installed: Mapping[str, Package] | None = None,
) -> ReleaseImage:
    """The image of ``job``'s bundle in ``folder`` (a ``dir:`` layout), as ``options`` and their images config say;
    ``repo`` (owner/name) is the source the labels name."""
    config = options.images_config()
    if job.os != "linux" or job.bundle is None:
        raise ImageError(f"job {job.id}: only a Linux bundle makes an image (Windows: docs/images.md says why)")
    installed = installed if installed is not None else installed_packages(options.base_root)
    packages = base_packages(job, publish, config, installed)
    members = base_members(packages, config.files, options.base_root)
    check_base_floor(job, members)
    folder.mkdir(parents=True, exist_ok=True)
    release_tag, moving = image_tags(job, tag, config)
    repository = str(Reference.parse(options.repository)) if options.repository else None
    layers = [
        oci.write_layer(
            [*members, *_system_files(config)],
            folder,
            mtime=mtime,
            level=options.level,
            comment=f"base: {', '.join(p.name for p in packages)}",
        ),
        oci.write_layer(
            oci.tree_members(job.bundle, PREFIX),
            folder,
            mtime=mtime,
            level=options.level,
            comment=f"bundle of {job.id} (llama.cpp {job.llama_build or '?'})",
        ),
        oci.write_layer(
            [
                oci.Member(
                    SBOM_PATH,
                    "file",
                    0o644,
                    data=image_sbom(job, f"image {release_tag}", tag, packages, timestamp=mtime),
                )
            ],
            folder,
            mtime=mtime,
            level=options.level,
            comment="CycloneDX SBOM",
        ),
    ]
    port = config.port
    image_config = oci.ContainerSetup(
        entrypoint=(f"/{PREFIX}/llama-server",),
        env=(
            "PATH=/opt/llama:/usr/bin:/bin",
            "LLAMA_ARG_HOST=0.0.0.0",
            f"LLAMA_ARG_PORT={port}",
            f"HOME=/home/{config.user}",
            "LLAMA_CACHE=/tmp/llama.cpp",
        ),
        user=f"{config.uid}:{config.uid}",
        working_dir=f"/{PREFIX}",
        exposed_ports=(f"{port}/tcp",),
        volumes=("/models",),
        labels=image_labels(job, tag, repo, packages, mtime),
        healthcheck=("CMD", "/usr/bin/busybox", "wget", "-q", "-O", "/dev/null", f"http://127.0.0.1:{port}/health"),
    )
    layout = oci.write_image(folder, layers, image_config, created=mtime)
    reference = f"{repository or 'IMAGE'}:{release_tag}"
    return ReleaseImage(
        job=job.id,
        flavour=image_flavour(job),
        backend=job.backend,
        folder=folder,
        digest=layout.digest,
        image_id=layout.image_id,
        compressed_bytes=layout.compressed_size,
        unpacked_bytes=layout.unpacked_size,
        repository=repository,
        tags=(release_tag, moving),
        packages=tuple(packages),
        run_command=run_command(job, reference, config),
    )


def check_image(image: ReleaseImage, job: BuiltJob, options: ImageOptions) -> ReleaseImage:
    """``image`` with its podman test's result; an ImageError when podman or the model is missing or the test
    fails (an untested image is never pushed)."""
    podman = Podman.find(options.runtime)
    if podman is None:
        raise ImageError(
            "podman is not installed, so the images cannot be tested and are not pushed",
            hint="apt-get install podman (and runc where crun refuses the cgroups: --image-runtime runc)",
        )
    if options.model is None or not options.model.is_file():
        raise ImageError(f"the image test needs a real model file (--image-model), not {options.model}")
    with loaded(podman, image.folder) as image_id:  # podman's store is left as it was
        if f"sha256:{image_id}" != image.image_id:
            raise ImageError(f"podman loaded {image.folder} as {image_id[:12]}, not {image.image_id[7:19]}")
        chat_page = job.web_ui is not None and job.web_ui.available
        test = serve_and_check(
            podman, image_id, options.model, prompt=options.prompt, expect=options.expect, chat_page=chat_page
        )
    if not test.ok:
        raise ImageError(f"image {image.flavour} failed its podman test: {test.failure}")
    return replace(image, test=test)


def push_release_images(
    images: Sequence[ReleaseImage], options: ImageOptions, say: Callable[[str], None] = lambda m: None
) -> list[ReleaseImage]:
    """Push every tested image under its tags; any failure is an ImageError (a failed publish). With ``options.test``
    (the default) an image whose podman test did not pass is refused before anything is sent."""
    if not options.repository:
        return list(images)
    untested = [i.flavour for i in images if i.test is None or not i.test.ok]
    if untested and options.test:
        raise ImageError(f"image {untested[0]} was not tested with podman; an untested image is never pushed")
    registry = Registry(Reference.parse(options.repository), user=options.user, token=options.token)
    out = []
    try:
        for image in images:
            say(f"  pushing {image.reference} ({image.digest[:19]})")
            try:
                pushed = push_image(image.folder, registry, image.tags, say=say)
            except ImageError as exc:  # which image, in the one line
                raise ImageError(f"pushing {image.reference}: {exc.message}", hint=exc.hint) from None
            out.append(replace(image, push=pushed))
    finally:
        registry.close()
    return out


def notes_rows(images: Sequence[ReleaseImage], asset_of: Mapping[str, str]) -> list[dict[str, Any]]:
    """What the release notes' "Container images" section shows per image."""
    return [
        {
            "flavour": i.flavour,
            "asset": asset_of.get(i.job, i.job),
            "reference": i.reference,
            "moving": f"{i.repository or 'IMAGE'}:{i.tags[1]}",
            "digest": i.digest,
            "run": i.run_command,
            "size": i.compressed_bytes,
            "tested": i.test is not None and i.test.ok,
        }
        for i in images
    ]


def manifest_entries(images: Sequence[ReleaseImage]) -> list[dict[str, Any]]:
    """manifest.json's ``images`` (:class:`~rockbuild.core.records.ManifestImage`): what each image is, not what its
    test saw (timings) nor its push, so that a re-run writes the same manifest.json (and the dry run's attested one
    is the one uploaded)."""
    return [i.record.to_dict() for i in images]


_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def image_folder(out_dir: Path, image_flavour_name: str) -> Path:
    return out_dir / "images" / _SAFE.sub("-", image_flavour_name)


IMAGES = written(lambda images: [i.to_dict() for i in images])
"""A report's images (:meth:`ReleaseImage.to_dict`: the manifest's record, what the test and the push saw)."""


@dataclass(frozen=True)
class ImagesReport(Record):
    """What ``rockbuild image`` did: each image, and what was skipped (a Windows job) and why (a record: its
    ``--json``)."""

    tag: str
    images: tuple[ReleaseImage, ...] = field(metadata=IMAGES)
    skipped: tuple[tuple[str, str], ...] = field(  # (job, why)
        default=(), metadata=written(lambda skipped: [{"job": j, "why": w} for j, w in skipped])
    )

    def render(self) -> str:
        lines = []
        for i in self.images:
            lines.append(
                f"{i.flavour}: {i.digest} ({i.compressed_bytes / 1e6:.1f} MB compressed, "
                f"{i.unpacked_bytes / 1e6:.1f} MB unpacked) in {i.folder}"
            )
            if i.test is not None:
                lines.append(
                    f"  tested: /health after {i.test.seconds_to_health or 0:.1f} s, user {i.test.user}, "
                    f"read-only root, chat page {i.test.chat_page}, answer {i.test.completion!r}"
                )
            if i.push is not None:
                lines.append(f"  pushed: {', '.join(f'{i.push.reference}:{t} ({a})' for t, a in i.push.tags)}")
            lines.append(f"  run: {i.run_command}")
        lines.extend(f"{job}: no image ({why})" for job, why in self.skipped)
        return "\n".join(lines)


WINDOWS_WHY = (
    "a Windows container runs only on a Windows host, which gives a container no AMD GPU "
    "(no /dev/kfd or /dev/dri; GPU-PV is DirectX only)"
)


def release_images(
    jobs: Sequence[BuiltJob],
    tag: str,
    out_dir: Path,
    *,
    publish: PublishConfig,
    options: ImageOptions,
    mtime_of: Callable[[BuiltJob], int],
    repo: str | None,
    say: Callable[[str], None] = lambda m: None,
) -> ImagesReport:
    """An image per Linux job in ``out_dir/images/<flavour>``, each tested with podman when ``options.test``
    (pushing needs it); nothing is pushed here (:func:`push_release_images` does, with the release)."""
    installed = installed_packages(options.base_root)
    options = replace(options, config=options.images_config())  # read once for every job
    images, skipped = [], []
    for job in jobs:
        if job.os != "linux" or job.bundle is None:
            skipped.append((job.id, WINDOWS_WHY if job.os == "windows" else "no bundle"))
            continue
        say(f"image {image_flavour(job)}: building from {job.bundle}")
        image = build_image(
            job,
            tag,
            image_folder(out_dir, image_flavour(job)),
            publish=publish,
            options=options,
            mtime=mtime_of(job),
            repo=repo,
            installed=installed,
        )
        if options.test:
            say(f"image {image.flavour}: testing {image.digest[:19]} with podman")
            image = check_image(image, job, options)
        images.append(image)
    return ImagesReport(tag, tuple(images), tuple(skipped))
