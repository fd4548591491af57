"""An image written byte for byte in Python, so that the same files give the same digest on every run.

Why not ``podman build``: its layers carry the build's clock and the files' owners and mtimes unless every one is
pinned (``--timestamp`` pins the clock, not the order tar walks a folder or the gzip stream of another podman), it
needs a base image from a registry (this machine reaches none), and it wants a container runtime on the publishing
machine just to copy files. Here a layer is a tar whose members are sorted by path, owned by root (or the image's
user, where named), stamped with one time (``SOURCE_DATE_EPOCH`` or the llama.cpp commit's date, as the archives),
compressed by gzip with no name and no time in its header; the config and the manifest are JSON written with fixed
key order. Same inputs, same bytes, same digest.

The manifest is Docker's schema 2 (``application/vnd.docker.distribution.manifest.v2+json``), not OCI's: only a
Docker config carries ``Healthcheck``, and podman and docker both drop a HEALTHCHECK from an OCI image. Every
registry (ghcr.io, Docker Hub, the distribution registry) serves both.

On disk an image is a folder in the ``dir:`` transport's layout of containers/image (podman, skopeo, buildah):
``manifest.json``, ``version`` and each blob under its hex digest; ``podman pull dir:FOLDER`` reads it as it is.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DIR_VERSION = "Directory Transport Version: 1.1\n"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Member:
    """One entry of a layer: ``path`` relative to the image's root (``opt/llama/llama-server``)."""

    path: str
    kind: Literal["file", "dir", "symlink"]
    mode: int = 0o644
    source: Path | None = None  # a file's content on this machine
    data: bytes | None = None  # or the content itself
    target: str = ""  # a symlink's
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class Blob:
    digest: str  # sha256:<hex>
    size: int
    media_type: str

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "size": self.size, "digest": self.digest}


@dataclass(frozen=True)
class Layer:
    blob: Blob  # the gzip stream, as a registry stores it
    diff_id: str  # sha256 of the uncompressed tar, as the config names it
    tar_size: int
    comment: str  # the config's history entry


@dataclass(frozen=True)
class ContainerSetup:
    """What the container runs with: the Docker image config's ``config`` object, as values."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    user: str = ""
    working_dir: str = "/"
    exposed_ports: tuple[str, ...] = ()  # 8080/tcp
    volumes: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    healthcheck: tuple[str, ...] = ()  # the exec form: CMD, program, args...
    health_interval_s: int = 30
    health_timeout_s: int = 5
    health_start_period_s: int = 300
    health_retries: int = 3

    def to_docker(self) -> dict[str, Any]:
        ns = 1_000_000_000
        out: dict[str, Any] = {
            "User": self.user,
            "ExposedPorts": {p: {} for p in self.exposed_ports},
            "Env": list(self.env),
            "Entrypoint": list(self.entrypoint),
            "Cmd": list(self.cmd) or None,
            "WorkingDir": self.working_dir,
            "Volumes": {v: {} for v in self.volumes},
            "Labels": dict(sorted(self.labels.items())),
            "StopSignal": "SIGTERM",
        }
        if self.healthcheck:
            out["Healthcheck"] = {
                "Test": list(self.healthcheck),
                "Interval": self.health_interval_s * ns,
                "Timeout": self.health_timeout_s * ns,
                "StartPeriod": self.health_start_period_s * ns,
                "Retries": self.health_retries,
            }
        return out


@dataclass(frozen=True)
class ImageLayout:
    """An image written by :func:`write_image`: the folder, the manifest's digest and what it points to."""

    folder: Path
    digest: str  # the manifest's: what a registry serves for the image (sha256:...)
    config: Blob
    layers: tuple[Layer, ...]
    manifest_size: int

    @property
    def image_id(self) -> str:
        """podman's and docker's image ID: the config's digest."""
        return self.config.digest

    @property
    def compressed_size(self) -> int:
        return sum(layer.blob.size for layer in self.layers) + self.config.size

    @property
    def unpacked_size(self) -> int:
        return sum(layer.tar_size for layer in self.layers)


class _Hashing(io.RawIOBase):
    """A writable stream that hashes and counts what passes through to ``sink``."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha.update(view)
        self.size += len(view)
        self.sink.write(view)
        return len(view)


def with_parents(members: Iterable[Member]) -> list[Member]:
    """``members`` plus a ``dir`` entry (root's, 0755) for every parent folder none names, sorted by path: the order a
    layer's tar has, whatever order the files were found in."""
    by_path: dict[str, Member] = {}
    for m in members:
        path = m.path.strip("/")
        if not path:
            continue
        by_path[path] = Member(**{**m.__dict__, "path": path})
    for path in list(by_path):
        parent = os.path.dirname(path)
        while parent and parent not in by_path:
            by_path[parent] = Member(parent, "dir", 0o755)
            parent = os.path.dirname(parent)
    return [by_path[p] for p in sorted(by_path)]


def _tar_info(m: Member, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(m.path + ("/" if m.kind == "dir" else ""))
    info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, m.uid, m.gid, "", ""
    info.mode = m.mode & 0o7777
    if m.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif m.kind == "symlink":
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, m.target, 0o777
    else:
        info.type = tarfile.REGTYPE
        info.size = len(m.data) if m.data is not None else (m.source.stat().st_size if m.source else 0)
    return info


def write_layer(members: Sequence[Member], blobs: Path, *, mtime: int, level: int, comment: str) -> Layer:
    """One gzip-compressed tar layer of ``members`` (parents added, sorted), written into ``blobs`` under its hex
    digest; the tar is hashed as it streams (its diff_id) and never lands on disk uncompressed."""
    blobs.mkdir(parents=True, exist_ok=True)
    partial = blobs / f".layer-{os.getpid()}.partial"
    with open(partial, "wb") as raw:
        compressed = _Hashing(raw)
        with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, compresslevel=level, mtime=0) as gz:
            plain = _Hashing(gz)  # type: ignore[arg-type]
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for m in with_parents(members):
                    info = _tar_info(m, mtime)
                    if info.isreg():
                        if m.data is not None:
                            tar.addfile(info, io.BytesIO(m.data))
                        else:
                            assert m.source is not None
                            with open(m.source, "rb") as fh:
                                tar.addfile(info, fh)
                    else:
                        tar.addfile(info)
    hexdigest = compressed.sha.hexdigest()
    partial.replace(blobs / hexdigest)
    return Layer(
        Blob(f"sha256:{hexdigest}", compressed.size, LAYER_TYPE), f"sha256:{plain.sha.hexdigest()}", plain.size, comment
    )


def tree_members(root: Path, prefix: str, *, uid: int = 0, gid: int = 0) -> list[Member]:
    """Every file, symlink and folder below ``root`` as members under ``prefix``, modes kept less group/other write
    (a bundle's files are the release's, whatever umask the runner had)."""
    out = [Member(prefix, "dir", 0o755, uid=uid, gid=gid)]
    for dirpath, dirnames, files in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(files):
            path = Path(dirpath) / name
            rel = f"{prefix}/{path.relative_to(root).as_posix()}"
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out.append(Member(rel, "symlink", target=os.readlink(path), uid=uid, gid=gid))
            elif stat.S_ISDIR(st.st_mode):
                out.append(Member(rel, "dir", 0o755, uid=uid, gid=gid))
            elif stat.S_ISREG(st.st_mode):
                out.append(Member(rel, "file", (st.st_mode & 0o7777) & ~0o022, source=path, uid=uid, gid=gid))
    return out


def _json_bytes(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def write_image(
    folder: Path, layers: Sequence[Layer], config: ContainerSetup, *, created: int, architecture: str = "amd64"
) -> ImageLayout:
    """The config and manifest over ``layers`` (already in ``folder``), and the ``dir:`` layout's ``version``;
    blobs of an earlier write that this image no longer names are removed."""
    when = datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    document = {
        "architecture": architecture,
        "os": "linux",
        "created": when,
        "config": config.to_docker(),
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": when, "created_by": f"rockbuild: {layer.comment}"} for layer in layers],
    }
    config_bytes = _json_bytes(document)
    config_blob = Blob(f"sha256:{hashlib.sha256(config_bytes).hexdigest()}", len(config_bytes), CONFIG_TYPE)
    (folder / config_blob.digest.removeprefix("sha256:")).write_bytes(config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": config_blob.descriptor(),
        "layers": [layer.blob.descriptor() for layer in layers],
    }
    manifest_bytes = _json_bytes(manifest)
    (folder / "manifest.json").write_bytes(manifest_bytes)
    (folder / "version").write_text(DIR_VERSION)
    named = {b.digest.removeprefix("sha256:") for b in (config_blob, *(layer.blob for layer in layers))}
    for stale in folder.iterdir():
        if stale.is_file() and len(stale.name) == 64 and stale.name not in named:
            stale.unlink()
    return ImageLayout(
        folder, f"sha256:{hashlib.sha256(manifest_bytes).hexdigest()}", config_blob, tuple(layers), len(manifest_bytes)
    )


def read_layout(folder: Path) -> tuple[bytes, dict[str, Any]]:
    """(the manifest's bytes, the manifest) of an image folder written by :func:`write_image`."""
    raw = (folder / "manifest.json").read_bytes()
    return raw, json.loads(raw)


def layout_digest(folder: Path) -> str:
    return f"sha256:{hashlib.sha256(read_layout(folder)[0]).hexdigest()}"
