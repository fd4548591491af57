"""``rockbuild install``: the release asset that fits this machine's GPU, verified, extracted safely and audited.

1. The target: ``--target gfxN``, or (``auto``) the first discrete GPU of the KFD topology that has a ROCm build, else
   the first GPU that has one (see :mod:`rockbuild.doctor`).
2. The release: ``GET /repos/OWNER/NAME/releases/latest`` or ``/releases/tags/TAG`` (no token: releases are public).
3. The asset: the release's ``manifest.json`` lists each job's ISAs (what ``libggml-hip`` really carries); the
   smallest job of the wanted OS whose ISAs contain the target wins. Without a manifest (the seed's releases) the
   asset is found by name, as Lemonade does: gfx1030..1036 -> gfx103X, gfx1100..1103 -> gfx110X, gfx1200/1201 ->
   gfx120X, any other target verbatim; a warning says its ISAs are not listed (the seed's gfx103X lacks gfx1033,
   gfx1035 and gfx1036). On Linux the ``.tar.gz`` is preferred; the ``.zip`` is extracted by
   :func:`extract_zip_safely`, with the rules of :mod:`rockbuild.archive`.
4. The bytes: the sha256 comes from the release's ``SHA256SUMS`` (and must agree with the API's asset digest when the
   API gives one); the downloader refuses anything else and keeps nothing of a bad download.
5. The audit of the extracted folder, then the exact command that starts ``llama-server`` on the GPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import stat
import string
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rockbuild.archive import copy_sparse, extract_tarball
from rockbuild.bundle.audit import audit_bundle
from rockbuild.core.data import suggest
from rockbuild.core.environment import Context
from rockbuild.core.errors import (
    AuditError,
    ChecksumError,
    CorruptArchiveError,
    ExtractionError,
    FetchError,
    NotFoundError,
    RecordError,
    UnsafeArchiveError,
    UsageError,
)
from rockbuild.core.jobs import DEFAULT_BACKEND, FamilyTable
from rockbuild.core.record import Record
from rockbuild.core.records import FailedJob, ManifestRecord
from rockbuild.dllsearch import outside_shadows, shadow_lines
from rockbuild.downloader import Downloader, get_text
from rockbuild.gpu import read_kfd_gpus
from rockbuild.process import ProcessError, child_env, run
from rockbuild.publish.config import load_publish_config

from . import console
from .backends import REGISTRY, get_backend
from .backends import names as backend_names

if TYPE_CHECKING:
    from rockbuild.core.environment import WindowsHost

DEFAULT_REPO = "lemonade-sdk/llamacpp-rocm"  # the seed's release repository, whose asset names rockbuild keeps
DEFAULT_API_URL = "https://api.github.com"
SUMS_NAME = "SHA256SUMS"
MANIFEST_NAME = "manifest.json"
ARCHIVE_SUFFIXES = (".tar.gz", ".zip")
_LEMONADE_FAMILIES = {
    **{f"gfx103{d}": "gfx103X" for d in "0123456"},
    **{f"gfx110{d}": "gfx110X" for d in "0123"},
    "gfx1200": "gfx120X",
    "gfx1201": "gfx120X",
}
AssetSource = Literal["manifest", "name"]  # how an asset was chosen: its job in manifest.json, or its name alone


def asset_family(target: str) -> str:
    """The asset name Lemonade downloads for ``target`` (rocm_asset_families): gfx1036 -> gfx103X, gfx1151 verbatim."""
    return _LEMONADE_FAMILIES.get(target, target)


# ---------------------------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class AssetChoice(Record):
    """The release asset chosen (a record: ``install --json``'s ``asset``)."""

    name: str
    url: str
    size: int | None
    digest: str | None  # the API's sha256 of the asset, when it gives one
    isas: tuple[str, ...]  # the gfx targets the asset carries (empty: not listed)
    source: AssetSource


@dataclass(frozen=True, kw_only=True)
class InstallReport(Record):
    """What ``rockbuild install`` did (a record: its ``--json``)."""

    repo: str
    tag: str
    target: str | None
    backend: str
    asset: AssetChoice
    sha256: str
    dest: Path
    audit_ok: bool
    visible_devices: str | None
    command: str
    attestation: str = "not checked"  # verified | not checked (why)
    warnings: tuple[str, ...] = ()

    def render(self) -> str:
        isas = ", ".join(self.asset.isas) or "not listed"
        lines = [
            f"installed {self.asset.name} ({self.repo} {self.tag}; ISAs: {isas})",
            f"  into:   {self.dest} (sha256 {self.sha256[:16]}..., audit passed)",
            f"  provenance: {self.attestation}",
            "  start the server with:",
            f"    {self.command}",
        ]
        return "\n".join(lines)


@dataclass(frozen=True)
class InstallOptions:
    repo: str = DEFAULT_REPO
    tag: str = "latest"
    target: str = "auto"
    backend: str = DEFAULT_BACKEND  # rocm | vulkan
    dest: Path | None = None
    api_url: str = DEFAULT_API_URL
    os_name: str | None = None  # default: this machine's
    sysfs_root: Path = Path("/sys")
    cache: Path | None = None  # default: <cache>/releases
    require_attestation: bool = False  # refuse unless GitHub's build provenance is verified (needs gh)
    upgrade: bool = False  # replace an existing --dest, once the new bundle is verified and audited
    families: FamilyTable = field(kw_only=True, repr=False, compare=False)  # which GPUs a target runs on
    context: Context = field(kw_only=True, repr=False, compare=False)  # the cache, GitHub's token, Windows' PATH


# ---------------------------------------------------------------------------------------------------------------------
# The GitHub release


def fetch_release(api_url: str, repo: str, tag: str) -> dict[str, Any]:
    """The release JSON of ``tag`` (``latest``: the newest published one)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        raise UsageError(f"--repo {repo!r}: write OWNER/NAME")
    where = "releases/latest" if tag == "latest" else f"releases/tags/{tag}"
    url = f"{api_url.rstrip('/')}/repos/{repo}/{where}"
    try:
        text = get_text(url, headers={"Accept": "application/vnd.github+json"})
    except NotFoundError:
        what = "no published release" if tag == "latest" else f"no release tagged {tag}"
        raise NotFoundError(
            f"{repo} has {what}", hint="check --repo and --tag (see the repository's releases page)"
        ) from None
    try:
        data = json.loads(text)
    except ValueError:
        raise FetchError(f"{url} did not answer with JSON", hint="check --api-url") from None
    if not isinstance(data, dict) or not isinstance(data.get("assets"), list):
        raise FetchError(f"{url} did not answer with a release", hint="check --api-url")
    return data


def parse_sha256sums(text: str) -> dict[str, str]:
    """``sha256sum`` output (``HEX  NAME`` or ``HEX *NAME``) as {name: hex}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([0-9a-fA-F]{64}) [ *](.+)", line.strip())
        if m:
            out[m[2]] = m[1].lower()
    return out


def _asset_url(asset: Mapping[str, Any]) -> str:
    return str(asset.get("browser_download_url") or "")


def _text_asset(assets: Mapping[str, Mapping[str, Any]], name: str) -> str | None:
    asset = assets.get(name)
    return get_text(_asset_url(asset)) if asset else None


def asset_name_pattern(template: str, *, tag: str, os_word: str, backend: str) -> re.Pattern[str]:
    """A regex over archive names made from publish.yaml's asset template (as ``backend`` spells it); group ``name``
    is the job's name.

    The Vulkan flavour has no per-target name: ``llama-{tag}-{os}-rocm-{name}-x64`` becomes ``...-{os}-vulkan-x64``.
    """
    template = get_backend(backend).asset_template(template)
    parts = []
    for literal, field_name, _spec, _conv in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field_name == "tag":
            parts.append(re.escape(tag))
        elif field_name == "os":
            parts.append(re.escape(os_word))
        elif field_name == "name":
            # a mixed-GPU job's name is its members joined by "-" in asset names (gfx1151-gfx1201)
            parts.append(r"(?P<name>[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*)")
        elif field_name is not None:
            parts.append(r"[^/]+")
    return re.compile("".join(parts) + r"(?P<suffix>\.tar\.gz|\.zip)")


def _preferred(names: Sequence[str], os_name: str) -> str | None:
    """tar.gz before zip on Linux (the extractor streams it); Windows assets are zips."""
    order = (".tar.gz", ".zip") if os_name == "linux" else (".zip", ".tar.gz")
    for suffix in order:
        for name in sorted(names):
            if name.endswith(suffix):
                return name
    return None


def choose_asset(
    release: Mapping[str, Any],
    manifest: ManifestRecord | Mapping[str, Any] | None,
    *,
    target: str | None,
    os_name: str,
    backend: str = DEFAULT_BACKEND,
    template: str | None = None,
    os_words: Mapping[str, str] | None = None,
) -> tuple[AssetChoice, list[str]]:
    """The asset of ``release`` for ``target`` on ``os_name`` (see the module docstring) and warnings."""
    if template is None or os_words is None:
        config = load_publish_config()
        template, os_words = template or config.asset_name, os_words or config.os_words
    tag = str(release.get("tag_name") or "")
    assets = {str(a.get("name")): a for a in release.get("assets") or [] if isinstance(a, Mapping)}
    pattern = asset_name_pattern(template, tag=tag, os_word=os_words.get(os_name, os_name), backend=backend)
    archives = {n: pattern.fullmatch(n) for n in assets}
    ours = {n: m for n, m in archives.items() if m}
    warnings: list[str] = []

    def choice(names: Sequence[str], isas: Sequence[str], source: AssetSource) -> AssetChoice | None:
        name = _preferred([n for n in names if n in ours], os_name)
        if name is None:
            return None
        asset = assets[name]
        digest = str(asset.get("digest") or "")
        return AssetChoice(
            name,
            _asset_url(asset),
            asset.get("size"),
            digest.split(":", 1)[1].lower() if digest.startswith("sha256:") else None,
            tuple(isas),
            source,
        )

    flavour = get_backend(backend)
    if not flavour.per_target:  # one asset per OS: its name says it all
        found = choice(list(ours), (), "name")
        if found is None:
            raise NotFoundError(
                f"release {tag} has no {os_name} {flavour.label} asset; its assets: "
                f"{', '.join(sorted(assets)) or 'none'}",
                hint=f"try --backend {DEFAULT_BACKEND}",
            )
        return found, warnings
    assert target is not None
    jobs = ManifestRecord.of(manifest, f"{tag}'s {MANIFEST_NAME}").jobs if manifest is not None else ()
    covering = [
        j
        for j in jobs
        if j.os == os_name and (j.backend or DEFAULT_BACKEND) == flavour.name and target in (j.isas or j.targets)
    ]
    covering.sort(key=lambda j: len(j.isas or j.targets))
    for job in covering:
        names = [a.name for a in job.assets]
        found = choice(names, list(job.isas or job.targets), "manifest")
        if found is not None:
            return found, warnings
    if not jobs:
        for wanted in dict.fromkeys([target, asset_family(target)]):
            found = choice([n for n, m in ours.items() if m["name"] == wanted], (), "name")
            if found is not None:
                warnings.append(
                    f"{tag} has no {MANIFEST_NAME}: {found.name} was chosen by its name and its ISAs "
                    f"are not listed; if it fails on {target} ('invalid device function'), try "
                    "--backend vulkan"
                )
                return found, warnings
    listed = ", ".join(sorted(ours)) or "none"
    raise NotFoundError(
        f"release {tag} has no {os_name} {flavour.label} asset for {target}; its {os_name} assets: {listed}",
        hint="pass another --target or --tag, or try the Vulkan build (--backend vulkan)",
    )


# ---------------------------------------------------------------------------------------------------------------------
# Safe zip extraction (archive.py only reads tarballs)


def _zip_member_key(name: str) -> str:
    """The member's path, checked: no absolute path, drive, backslash, NUL or ``..``; '' for the root itself."""
    if "\0" in name or "\\" in name:
        raise UnsafeArchiveError(f"zip member {name!r} has a NUL or backslash in its name")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise UnsafeArchiveError(f"zip member {name!r} has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"zip member {name!r} leads out of the folder ('..')")
    return "/".join(parts)


def extract_zip_safely(path: Path, dest: Path) -> int:
    """Extract the zip at ``path`` into ``dest`` (which must not exist); returns the number of files.

    Same refusals as :mod:`rockbuild.archive`: absolute paths, ``..``, symlinks, devices, FIFOs, a second member
    with the path of an earlier one, and a file where a folder is needed. Permission bits are kept (setuid, setgid
    and sticky dropped); all-zero 4 KiB blocks are left as holes, as the tar extractor does. Work happens in a
    staging folder beside ``dest``, renamed into place only when every member was written and its CRC checked; any
    refusal or error removes it.
    """
    dest = Path(dest).absolute()
    if os.path.lexists(dest):
        raise ExtractionError(f"{dest} already exists; not extracting over it", hint="delete it or pass --dest")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging-", dir=dest.parent))
    kinds: dict[str, str] = {"": "dir"}
    files = 0
    try:
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise CorruptArchiveError(
                f"{path.name} is not a readable zip ({exc})", hint="delete the download and run again"
            ) from None
        with zf:
            for info in zf.infolist():
                key = _zip_member_key(info.filename)
                mode = info.external_attr >> 16 if info.create_system == 3 else 0
                kind = "dir" if info.is_dir() else "file"
                if mode and stat.S_ISLNK(mode):
                    raise UnsafeArchiveError(f"zip member {info.filename!r} is a symlink; release assets hold none")
                if mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    raise UnsafeArchiveError(f"zip member {info.filename!r} is a device, FIFO or socket")
                if not key:
                    continue
                parents = key.split("/")[:-1]
                for i in range(len(parents)):
                    parent = "/".join(parents[: i + 1])
                    if kinds.setdefault(parent, "dir") != "dir":
                        raise UnsafeArchiveError(f"zip member {info.filename!r} goes through the file {parent!r}")
                    (staging / parent).mkdir(exist_ok=True)
                if key in kinds and (kind == "file" or kinds[key] != "dir"):
                    raise UnsafeArchiveError(f"zip member {info.filename!r} appears twice")
                kinds[key] = kind
                target = staging / key
                if kind == "dir":
                    target.mkdir(exist_ok=True)
                    continue
                perms = (stat.S_IMODE(mode) & 0o777) if mode else 0o644
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as out, zf.open(info) as src:
                    copy_sparse(src.read, out.fileno())  # zero blocks (pruned fat binaries) stay holes
                os.chmod(target, perms)
                files += 1
        os.rename(staging, dest)
    except zipfile.BadZipFile as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise CorruptArchiveError(f"{path.name} is damaged: {exc}", hint="delete the download and run again") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return files


# ---------------------------------------------------------------------------------------------------------------------
# The whole install


def auto_target(sysfs_root: Path, table: FamilyTable) -> str:
    """This machine's GPU to install for: a discrete GPU with a ROCm build first, then any GPU with one."""
    gpus = read_kfd_gpus(sysfs_root, table)
    if not gpus:
        raise UsageError(
            "no AMD GPU found in the KFD topology (/sys/class/kfd); pass --target gfxN to choose a build",
            hint="rockbuild doctor tells why no GPU is seen",
        )
    built = [g for g in gpus if table.family_of_target(g.target) is not None]
    if not built:
        raise UsageError(
            f"no ROCm build exists for {', '.join(g.target for g in gpus)}; use the Vulkan build",
            hint="rockbuild install --backend vulkan",
        )
    return sorted(built, key=lambda g: (g.integrated, g.index))[0].target


def check_target(target: str, table: FamilyTable) -> str:
    """``--target`` when a ROCm build of it exists (a target of ``table``, config/families.yaml: the releases carry
    nothing else), checked before any request goes out; else a UsageError naming the closest targets, or a family's
    targets when ``target`` names a family."""
    name = target.strip()
    for candidate in dict.fromkeys((name, name.lower())):
        if table.family_of_target(candidate) is not None:
            return candidate
    family = table.family(name)
    if family is not None:
        raise UsageError(f"--target {name} is a GPU family; give one of its targets: {', '.join(family.targets)}")
    targets = sorted({t for f in table.families if f.resolve_targets for t in f.targets})
    raise UsageError(
        f"--target {name!r} is not a GPU target rockbuild builds for{suggest(name, targets)}",
        hint="rockbuild doctor names this machine's GPUs, rockbuild matrix --families the targets with "
        "a build; rockbuild install --backend vulkan runs on any GPU with a Vulkan driver",
    )


def visible_devices(sysfs_root: Path, isas: Sequence[str], target: str | None) -> str | None:
    """HIP_VISIBLE_DEVICES for the GPUs the asset can run on, when others are present; None when all fit."""
    gpus = read_kfd_gpus(sysfs_root)
    covered = set(isas) or ({target} if target else set())
    keep = [g.index for g in gpus if g.target in covered]
    if not gpus or not keep or len(keep) == len(gpus):
        return None
    return ",".join(str(i) for i in keep)


def server_command(dest: Path, os_name: str, visible: str | None) -> str:
    """The command line that starts llama-server from ``dest`` with every layer on the GPU."""
    if os_name == "windows":
        exe = f'"{dest / "llama-server.exe"}"'
        prefix = f'set "HIP_VISIBLE_DEVICES={visible}" && ' if visible else ""  # quoted: no trailing space
    else:
        exe = shlex.quote(str(dest / "llama-server"))
        prefix = f"HIP_VISIBLE_DEVICES={visible} " if visible else ""
    return f"{prefix}{exe} -m MODEL.gguf -ngl 999 --host 127.0.0.1 --port 8080"


def windows_dll_warnings(dest: Path, windows: WindowsHost) -> list[str]:
    """One line per HIP DLL in System32 or on PATH that shadows the installed bundle's copy for a program outside it
    (see :mod:`rockbuild.dllsearch`). A warning, not a refusal: the command install prints starts the bundle's own
    llama-server.exe, whose folder is searched before System32 and PATH, so it always gets the bundle's DLLs."""
    return [
        f"{line} (llama-server.exe started from {dest} is not affected)"
        for line in shadow_lines(outside_shadows(dest, windows))
    ]


def _discard(downloader_cache: Path, name: str) -> None:
    for suffix in ("", ".json", ".part", ".part.json", ".lock"):
        with contextlib.suppress(OSError):
            (downloader_cache / f"{name}{suffix}").unlink()


def _move_into_place(staging: Path, dest: Path) -> None:
    """``staging`` becomes ``dest``; an existing ``dest`` (an upgrade) is moved aside first and removed after."""
    old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
    if os.path.lexists(dest):
        os.replace(dest, old)
    try:
        os.replace(staging, dest)
    except OSError:
        if os.path.lexists(old):
            os.replace(old, dest)  # put the old install back
        raise
    shutil.rmtree(old, ignore_errors=True)


def _gh(context: Context) -> str | None:
    """GitHub's CLI on the PATH rockbuild was given, which verifies the build provenance."""
    return shutil.which("gh", path=context.env.get("PATH"))


def _no_gh(asset: str, after: str = "") -> ChecksumError:
    return ChecksumError(
        f"--require-attestation: gh (GitHub's CLI) is not installed, so the build provenance of "
        f"{asset} cannot be verified{after}",
        hint="install gh (https://cli.github.com)",
    )


def verify_attestation(
    asset: Path, repo: str, context: Context, *, required: bool = False, api_url: str = DEFAULT_API_URL
) -> str:
    """GitHub's build provenance of ``asset`` (the nightly workflow attests every asset), checked with ``gh
    attestation verify`` when gh is installed: "verified", or why it was not checked. A failed verification is a
    ChecksumError; so is a missing gh when ``required``. gh gets the GitHub token, and only it."""
    gh = _gh(context)
    if gh is None:
        if required:
            raise _no_gh(asset.name)
        return "not checked (gh is not installed; SHA256SUMS verified)"
    env = child_env(base=context.env, inherit=("PATH", "HOME", "LANG", "SSL_CERT_FILE", "XDG_CONFIG_HOME"))
    if api_url.rstrip("/") != DEFAULT_API_URL:
        env["GH_HOST"] = re.sub(r"^https?://([^/]+).*$", r"\1", api_url)
    token = {"GH_TOKEN": context.github.token} if context.github.token else {}
    try:  # the one child that gets the token, on purpose: it asks GitHub for the attestations
        result = run(
            [gh, "attestation", "verify", str(asset), "--repo", repo],
            env=env,
            timeout=120,
            check=False,
            log=None,
            secrets=token,
        )
    except ProcessError as exc:
        raise ChecksumError(f"gh attestation verify could not run: {exc.message}") from None
    if result.returncode != 0:
        why = next((line for line in reversed(result.output.splitlines()) if line.strip()), "no output")
        raise ChecksumError(
            f"{asset.name}: its build provenance does not verify against {repo} ({why[:200]}): refused",
            hint="report it to the release's maintainers; do not run this asset",
        )
    return f"verified with gh attestation verify --repo {repo}"


def _release_and_manifest(api_url: str, repo: str, tag: str) -> tuple[dict[str, Any], ManifestRecord | None]:
    """The release ``tag`` and its manifest.json (None: none, or not a valid one: said in a warning)."""
    release = fetch_release(api_url, repo, tag)
    assets = {str(a.get("name")): a for a in release["assets"] if isinstance(a, Mapping)}
    if MANIFEST_NAME not in assets:
        return release, None
    try:  # outside input: one that is not a valid manifest.json is set aside, with a warning
        return release, ManifestRecord.loads(
            _text_asset(assets, MANIFEST_NAME) or "", f"{MANIFEST_NAME} of {release.get('tag_name')}"
        )
    except RecordError as exc:
        console.warn(f"{exc.message}; choosing the asset by its name")
        return release, None


def missing_job(manifest: ManifestRecord | None, *, target: str | None, os_name: str) -> FailedJob | None:
    """The job of ``manifest``'s failed ones that would have covered ``target`` on ``os_name`` (its id names the
    target or its family), or None."""
    if manifest is None or target is None:
        return None
    ids = {f"{os_name}-{target}", f"{os_name}-{asset_family(target)}"}
    return next((j for j in manifest.failed_jobs if j.id in ids), None)


def install(options: InstallOptions) -> InstallReport:
    """Install the asset that fits (see the module docstring). Raises a RockbuildError, one line, on any refusal."""
    known = backend_names()
    if options.backend not in known:
        raise UsageError(f"--backend {options.backend!r}: choose {', '.join(known[:-1])} or {known[-1]}")
    flavour = get_backend(options.backend)
    os_name = options.os_name or options.context.host_os
    table = options.families
    target: str | None = None
    if flavour.per_target:
        target = (
            auto_target(options.sysfs_root, table) if options.target == "auto" else check_target(options.target, table)
        )
    say = console.info
    release, manifest = _release_and_manifest(options.api_url, options.repo, options.tag)
    tag = str(release.get("tag_name"))
    try:
        chosen, warnings = choose_asset(release, manifest, target=target, os_name=os_name, backend=options.backend)
    except NotFoundError:
        # the newest release went out without this job (llama.cpp broke it): its last build is in the release named
        missing = missing_job(manifest, target=target, os_name=os_name) if options.tag == "latest" else None
        if missing is None or not missing.last_release:
            raise
        console.warn(
            f"release {tag} went out without {missing.id} ({missing.cause or 'it'} broke it: "
            f"{missing.reason}); installing its last build, from release {missing.last_release}"
        )
        release, manifest = _release_and_manifest(options.api_url, options.repo, missing.last_release)
        tag = str(release.get("tag_name"))
        chosen, warnings = choose_asset(release, manifest, target=target, os_name=os_name, backend=options.backend)
    assets = {str(a.get("name")): a for a in release["assets"] if isinstance(a, Mapping)}
    for w in warnings:
        console.warn(w)
    base = chosen.name[: -len(".tar.gz")] if chosen.name.endswith(".tar.gz") else chosen.name[: -len(".zip")]
    dest = (options.dest or Path.cwd() / base).absolute()
    if os.path.lexists(dest) and not options.upgrade:
        raise UsageError(
            f"{dest} already exists; not installing over it",
            hint="pass --upgrade to replace it once the new one is verified and audited, or another --dest",
        )
    if options.require_attestation and _gh(options.context) is None:
        # refused before anything is downloaded: the provenance could not be checked afterwards either
        raise _no_gh(chosen.name, "; nothing was downloaded")
    sums_text = _text_asset(assets, SUMS_NAME)
    if sums_text is None:
        raise ChecksumError(
            f"release {tag} has no {SUMS_NAME}: refusing to install bytes nobody vouched for",
            hint="choose a release with checksums (--tag)",
        )
    expected = parse_sha256sums(sums_text).get(chosen.name)
    if expected is None:
        raise ChecksumError(f"{SUMS_NAME} of {tag} does not list {chosen.name}: refusing it", hint="report it")
    if chosen.digest and chosen.digest != expected:
        raise ChecksumError(
            f"{chosen.name}: {SUMS_NAME} says sha256 {expected[:16]}..., GitHub says "
            f"{chosen.digest[:16]}...: refusing it",
            hint="report it to the release's maintainers",
        )
    cache = options.cache or options.context.cache / "releases"
    say(f"==> {chosen.name} ({options.repo} {tag}) for {target or options.backend}")
    with Downloader(cache) as dl:
        try:
            got = dl.fetch(chosen.url, name=chosen.name, sha256=expected, size=chosen.size)
        except ChecksumError as exc:
            _discard(cache, chosen.name)
            raise ChecksumError(
                f"{chosen.name} does not match {SUMS_NAME} of {tag}: refused, nothing was kept ({exc.message})",
                hint="run again; if it repeats, report it",
            ) from None
    attestation = verify_attestation(
        got.path, options.repo, options.context, required=options.require_attestation, api_url=options.api_url
    )
    # extracted and audited beside the destination; only a bundle that passed is moved into place (an upgrade keeps
    # the old install until then), and a refused one leaves nothing behind, in the cache neither
    staging = dest.with_name(f".{dest.name}.new-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        if chosen.name.endswith(".tar.gz"):
            extract_tarball(got.path, staging)
        else:
            extract_zip_safely(got.path, staging)
    except UnsafeArchiveError:
        _discard(cache, chosen.name)
        raise
    report = audit_bundle(staging, platform=os_name, backends=REGISTRY)
    if not report.ok:
        shutil.rmtree(staging, ignore_errors=True)
        raise AuditError(
            f"{chosen.name}: its audit failed ({len(report.failures)}): {report.failures[0]}; "
            f"nothing was installed{' (the old install is kept)' if os.path.lexists(dest) else ''}",
            hint="report it to the release's maintainers",
        )
    _move_into_place(staging, dest)
    if os_name == "windows" and options.context.windows is not None:
        for line in windows_dll_warnings(dest, options.context.windows):
            console.warn(line)
            warnings.append(line)
    visible = visible_devices(options.sysfs_root, chosen.isas, target) if os_name == options.context.host_os else None
    if not flavour.needs_rocm:  # HIP_VISIBLE_DEVICES means nothing to it
        visible = None
    return InstallReport(
        repo=options.repo,
        tag=tag,
        target=target,
        backend=options.backend,
        asset=chosen,
        sha256=got.sha256,
        dest=dest,
        audit_ok=True,
        visible_devices=visible,
        command=server_command(dest, os_name, visible),
        attestation=attestation,
        warnings=tuple(warnings),
    )
