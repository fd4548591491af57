"""Publishing one night's jobs as one GitHub release that is never half and never changes once published.

1. Read the job folders; gate: every required job must have passed (failed optional jobs are listed in the notes);
   a Linux bundle above the glibc floor fails its job; llama.cpp must be the same build for every job; every bundle
   must be whole (the chat page, every program of programs.yaml: ``whole.py``) unless ``--allow-partial REASON``.
2. Pick the tag: the release already made from the same inputs (its notes carry a fingerprint), else ``--tag``, else
   the next ``b####`` after the highest among tags and releases (or the llama.cpp-aligned tag).
3. A *published* release is never touched: same inputs -> "nothing changed"; other assets under that tag -> refused.
4. Write the archives (refusing any over 2 GiB), manifest.json, SHA256SUMS and the notes, all reproducible.
   With ``--images REGISTRY/NAME`` (:mod:`.image`), an image per Linux asset is made from the same bundle and tested
   with podman here, before anything is written to GitHub; each image's digest and tags go into manifest.json and its
   run command into the notes.
5. Create the release as a draft (or reuse the draft a crashed run left), upload what is missing, replace what
   differs (drafts only, our own names only), verify every asset (size, and sha256 where the API reports a digest),
   push the images (a blob or tag the registry has is not sent again), then publish in one call, so
   ``releases/latest`` never shows a release that lacks an asset or an image: a failed push leaves the draft, and a
   re-run completes it.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import shutil
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rockbuild import console
from rockbuild.backends import get_backend
from rockbuild.core.environment import Context
from rockbuild.core.errors import PublishError
from rockbuild.core.programs import ProgramList, load_programs
from rockbuild.core.record import Record, json_key, written
from rockbuild.core.records import HeldBack
from rockbuild.downloader import sha256_file
from rockbuild.rocm.names import parse_rocm_version

from .archives import check_asset_size, collect_entries, write_tar_gz, write_zip
from .config import PublishConfig, load_publish_config
from .deb import write_deb
from .floor import bundle_floor, floor_violations
from .github import GitHub
from .image import (
    IMAGES,
    ImageOptions,
    ReleaseImage,
    manifest_entries,
    notes_rows,
    push_release_images,
    release_images,
)
from .jobs import BuiltJob, load_job, with_failure
from .manifest import AssetFile, AssetKind, ReleaseContent, build_manifest, fingerprint, sha256sums, write_json
from .notes import notes_context, read_marker, render
from .sbom import SBOM_SUFFIX, make_sbom
from .tags import llama_tag, next_sequential_tag
from .whole import check_whole

MANIFEST, CHECKSUMS, NOTES = "manifest.json", "SHA256SUMS", "release-notes.md"
_DEFAULT_MTIME = 1_704_067_200  # 2024-01-01: used when a job does not say when it was built


@dataclass(frozen=True)
class PublishOptions:
    job_dirs: tuple[Path, ...]
    repo: str | None = None
    api_url: str | None = None
    tag: str | None = None
    scheme: str | None = None  # sequential | llama (default: the config's)
    draft: bool = False
    dry_run: bool = False
    keep: int | None = None
    out: Path | None = None
    token: str | None = None  # default: $GITHUB_TOKEN / $GH_TOKEN
    run_url: str | None = None
    step_summary: Path | None = None  # default: $GITHUB_STEP_SUMMARY
    throttle: bool = True  # PyGithub's pause between writes (GitHub asks for it); tests turn it off
    allow_partial: str | None = None  # the emergency override's reason: publish a release that is not whole (whole.py)
    images: ImageOptions | None = None  # --images: an image per Linux asset, tested, pushed with the release (image.py)
    held_back: HeldBack | None = None  # the night's llama.cpp was held back (regressions.ship: newest-good): why
    tool_wheel: Path | None = None  # rockbuild's own wheel, attached for the release's users (doctor, install)
    context: Context = field(kw_only=True, repr=False, compare=False)  # GitHub's context, SOURCE_DATE_EPOCH


PublishState = Literal["published", "draft", "unchanged", "dry-run"]


@dataclass(frozen=True, kw_only=True)
class PublishReport(Record):
    """What ``rockbuild publish`` did (a record: its ``--json``): each asset as manifest.json has it, each failed job
    as its ``failed_jobs``."""

    tag: str
    state: PublishState
    message: str
    fingerprint: str
    release_url: str | None = None
    assets: tuple[AssetFile, ...] = field(default=(), metadata=written(lambda assets: [a.record for a in assets]))
    actions: tuple[tuple[str, str], ...] = field(  # (asset name, uploaded | replaced | kept | would upload ...)
        default=(), metadata=written(lambda actions: [{"asset": n, "action": a} for n, a in actions])
    )
    jobs: tuple[str, ...] = ()
    failed: tuple[BuiltJob, ...] = field(
        default=(), metadata={**json_key("failed_jobs"), **written(lambda failed: [j.failure() for j in failed])}
    )
    out_dir: Path | None = None
    pruned: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    images: tuple[ReleaseImage, ...] = field(default=(), metadata=IMAGES)  # with --images: each image, its test, push

    def render(self) -> str:
        lines = [f"{self.tag}: {self.state}: {self.message}"]
        if self.release_url:
            lines.append(f"  release: {self.release_url}")
        for name, action in self.actions:
            lines.append(f"  {action:<14} {name}")
        for job in self.failed:
            lines.append(
                f"  not shipped: {job.id}{'' if job.required else ' (optional)'}: {job.failed_step}: {job.reason}"
            )
        for image in self.images:
            pushed = f"pushed as {', '.join(t for t, _ in image.push.tags)}" if image.push is not None else "not pushed"
            tested = "tested" if image.test is not None and image.test.ok else "untested"
            lines.append(f"  image {image.reference} {image.digest} ({tested}, {pushed})")
        lines.extend(f"  pruned {tag}" for tag in self.pruned)
        lines.extend(f"  warning: {w}" for w in self.warnings)
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------
# Jobs and gating


def gate_jobs(
    jobs: Sequence[BuiltJob], config: PublishConfig
) -> tuple[list[BuiltJob], list[BuiltJob], dict[str, dict[str, tuple[str, str]]]]:
    """(jobs that ship, jobs that failed, glibc floor per Linux job). Raises when a required job failed."""
    ids = [j.id for j in jobs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise PublishError(f"job {dupes[0]} is given twice; pass each job folder once")
    floors: dict[str, dict[str, tuple[str, str]]] = {}
    checked = []
    for job in jobs:
        if job.ok and job.os == "linux" and job.bundle is not None:
            floors[job.id] = bundle_floor(job.bundle)
            violations = floor_violations(floors[job.id], config.glibc_floor)
            if violations:
                job = with_failure(job, "glibc-floor", f"{violations[0]} (configured in publish.yaml glibc_floor)")
        checked.append(job)
    ok = [j for j in checked if j.ok]
    failed = [j for j in checked if not j.ok]
    required = [j for j in failed if j.required and not j.missing]  # llama.cpp broke a missing one: it goes out
    if required:
        first = required[0]
        more = f" (and {len(required) - 1} more: {', '.join(j.id for j in required[1:])})" if len(required) > 1 else ""
        raise PublishError(
            f"required job {first.id} failed at {first.failed_step}: {first.reason}{more}; nothing was published",
            hint="fix the job, or mark it 'required: false' in the matrix",
        )
    if not ok:
        raise PublishError("no job passed, so there is nothing to publish", hint="rockbuild alert reports the failures")
    builds = {(j.llama_commit, j.llama_build) for j in ok}
    if len(builds) > 1:
        detail = "; ".join(f"{j.id}: {j.llama_commit} (build {j.llama_build})" for j in ok)
        raise PublishError(
            f"the jobs were built from different llama.cpp commits ({detail}); one release holds one",
            hint="pin llama.cpp for the night (rockbuild resolve) and rebuild",
        )
    return ok, failed, floors


def archive_mtime(job: BuiltJob, source_date_epoch: int | None) -> int:
    """The one timestamp of every archive member, so that the same bundle gives the same bytes whenever and
    wherever it is archived: ``SOURCE_DATE_EPOCH`` when set, else the llama.cpp commit's date, else (a tree git
    could not date) when the build finished."""
    if source_date_epoch is not None:
        return source_date_epoch
    if job.llama_commit_time is not None:
        return job.llama_commit_time
    if job.finished:
        with contextlib.suppress(ValueError):
            return int(datetime.datetime.fromisoformat(job.finished).timestamp())
    return _DEFAULT_MTIME


# ---------------------------------------------------------------------------------------------------------------------
# Local files


def asset_base(config: PublishConfig, tag: str, job: BuiltJob) -> str:
    """``llama-<tag>-<os>-rocm-<name>-x64``; a Vulkan job has no per-target name: ``llama-<tag>-<os>-vulkan-x64``
    (the backend's :meth:`~rockbuild.backends.Backend.asset_template`, what :func:`rockbuild.install.asset_name_pattern`
    looks for).

    A mixed-GPU job's name joins its members with ``+`` (gfx1151+gfx1201), which GitHub's upload API would rename,
    so the re-upload by name and ``rockbuild install``'s matching would miss the asset: the name is the job's
    :attr:`~rockbuild.publish.jobs.BuiltJob.file_name` (``...-rocm-gfx1151-gfx1201-x64``)."""
    template = get_backend(job.backend).asset_template(config.asset_name)
    return template.format(tag=tag, os=config.os_words.get(job.os, job.os), name=job.file_name)


def _cached(dest: Path, key: dict[str, Any]) -> bool:
    sidecar = dest.with_name(dest.name + ".key.json")
    try:
        return dest.is_file() and json.loads(sidecar.read_text()) == key
    except (OSError, ValueError):
        return False


def _remember(dest: Path, key: dict[str, Any]) -> None:
    dest.with_name(dest.name + ".key.json").write_text(json.dumps(key))


def write_job_archives(
    job: BuiltJob, tag: str, folder: Path, config: PublishConfig, source_date_epoch: int | None = None
) -> tuple[list[AssetFile], list[str]]:
    """The job's zip (and tar.gz, and .deb), refusing any over the size limit; (assets, notes about replaced
    symlinks)."""
    assert job.bundle is not None
    entries, notes = collect_entries(job.bundle)
    mtime = archive_mtime(job, source_date_epoch)
    key_base = {
        "entries": [[e.arcname, e.size, e.mode, e.source.stat().st_mtime_ns] for e in entries],
        "mtime": mtime,
        "level": config.compress_level,
    }
    base = asset_base(config, tag, job)
    kinds: list[tuple[AssetKind, Callable[..., Path]]] = [("zip", write_zip)]
    if job.os in config.tar_gz_for:
        kinds.append(("tar.gz", write_tar_gz))
    out = []
    for kind, writer in kinds:
        dest = folder / f"{base}.{kind}"
        key = {**key_base, "kind": kind}
        if not _cached(dest, key):
            with console.step(f"archive {dest.name}"):
                writer(entries, dest, mtime=mtime, level=config.compress_level)
            _remember(dest, key)
        check_asset_size(dest, config.max_bytes)
        out.append(AssetFile(dest.name, dest, dest.stat().st_size, sha256_file(dest), kind, job.id))
    if job.os in config.deb_for:  # the same files as a Debian package (publish/deb.py)
        deb = folder / f"{base}.deb"
        key = {
            **key_base,
            "kind": "deb",
            "tag": tag,
            "deb": [config.deb_maintainer, config.deb_homepage, sorted(config.deb_packages.items())],
        }
        if not _cached(deb, key):
            with console.step(f"package {deb.name}"):
                write_deb(job, tag, deb, config, mtime=mtime)
            _remember(deb, key)
        check_asset_size(deb, config.max_bytes)
        out.append(AssetFile(deb.name, deb, deb.stat().st_size, sha256_file(deb), "deb", job.id))
    sbom = folder / f"{base}{SBOM_SUFFIX}"  # what the archives hold, file by file, and where each file came from
    sbom.write_text(make_sbom(job, base, tag, timestamp=mtime), encoding="utf-8")
    out.append(AssetFile(sbom.name, sbom, sbom.stat().st_size, sha256_file(sbom), "sbom", job.id))
    return out, notes


# ---------------------------------------------------------------------------------------------------------------------
# Tags


def _rocm_for_tag(jobs: Sequence[BuiltJob], warnings: list[str]) -> str | None:
    versions = sorted({j.rocm.version for j in jobs if j.rocm.version})
    if len(versions) <= 1:
        return versions[0] if versions else None

    def key(text: str) -> tuple[Any, ...]:
        parsed = parse_rocm_version(text)
        return parsed.version_key if parsed else ()

    newest = max(versions, key=key)
    warnings.append(
        f"the jobs used different ROCm versions ({', '.join(versions)}); the tag names the newest, "
        "the notes and manifest.json give each job's own"
    )
    return newest


def _fingerprint_of(body: str | None) -> Any:
    """The fingerprint in a release's marker (None: no marker)."""
    marker = read_marker(body)
    return marker.get("fingerprint") if marker is not None else None


def choose_tag(
    options: PublishOptions,
    config: PublishConfig,
    jobs: Sequence[BuiltJob],
    fp: str,
    releases: Sequence[Any],
    tags: Sequence[str],
    warnings: list[str],
) -> str:
    if options.tag:
        return options.tag
    ours = [r for r in releases if _fingerprint_of(r.body) == fp]
    if ours:
        # the release (or the draft a crashed run left) made from these very inputs
        return sorted(ours, key=lambda r: (not r.draft, r.created_at))[-1].tag_name
    scheme = options.scheme or config.tag_scheme
    if scheme == "llama":
        return llama_tag(config.llama_tag, build=jobs[0].llama_build, rocm=_rocm_for_tag(jobs, warnings))
    return next_sequential_tag([*tags, *(r.tag_name for r in releases)], first=config.tag_first, width=config.tag_width)


def _is_ours(name: str, tag: str, planned: set[str]) -> bool:
    return name in planned or name in (MANIFEST, CHECKSUMS) or name.startswith(f"llama-{tag}-")


def _digest(asset: Any) -> str | None:
    value = getattr(asset, "digest", None)
    if isinstance(value, str) and value.startswith("sha256:"):
        return value.removeprefix("sha256:").lower()
    return None


def _matches(remote: Any, local: AssetFile) -> tuple[bool, str]:
    """(same?, why not) for an uploaded asset against our file."""
    if remote.state != "uploaded":
        return False, f"state {remote.state} (an interrupted upload)"
    if remote.size != local.size:
        return False, f"{remote.size:,} bytes, ours {local.size:,}"
    digest = _digest(remote)
    if digest is None:
        return False, "the API reports no digest, so its content cannot be verified"
    if digest != local.sha256:
        return False, f"sha256 {digest[:12]}..., ours {local.sha256[:12]}..."
    return True, ""


# ---------------------------------------------------------------------------------------------------------------------
# The release


def _write_summary(path: Path | None, text: str) -> None:
    if path is None:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def publish(
    options: PublishOptions, config: PublishConfig | None = None, programs: ProgramList | None = None
) -> PublishReport:
    """Publish the jobs in ``options.job_dirs`` (see the module docstring). Raises PublishError when refused."""
    config = config or load_publish_config()
    if not options.job_dirs:
        raise PublishError("no job folders given; pass the out/<job-id> folders of the night's jobs")
    say = console.info
    warnings: list[str] = []
    jobs = [load_job(Path(d), tail_lines=config.alert_log_lines) for d in options.job_dirs]
    shipped, failed, floors = gate_jobs(jobs, config)
    for job in failed:
        why = f"missing: {job.blame_note()}" if job.missing else "optional"
        console.warn(f"{job.id} is left out ({why}): {job.failed_step}: {job.reason}")
    wholeness = check_whole(shipped, programs or load_programs(), allow_partial=options.allow_partial)
    for hole in wholeness.holes:  # only with --allow-partial: check_whole refused otherwise
        console.warn(f"published partial ({wholeness.allowed}): {hole.words()}")
        warnings.append(f"partial release ({wholeness.allowed}): {hole.words()}")
    if options.tool_wheel is not None:
        check_tool_wheel(options.tool_wheel)  # before anything is written
    fp = fingerprint(shipped)
    github = options.context.github
    repo = options.repo or github.repository
    token = options.token if options.token is not None else github.token
    run_url = options.run_url or github.run_url
    summary_path = options.step_summary or github.step_summary
    if repo is None and not options.dry_run:
        raise PublishError("no repository to publish to", hint="pass --repo OWNER/NAME (or use --dry-run)")
    if repo is not None and not token and not options.dry_run:
        raise PublishError(
            "no GitHub token: set GITHUB_TOKEN or GH_TOKEN (contents: write)",
            hint="--dry-run shows what would be published without one",
        )
    gh = GitHub(repo, api_url=options.api_url, token=token, throttle=options.throttle) if repo else None
    try:
        releases = gh.releases() if gh else []
        tags = gh.tag_names("b") if gh else []
        tag = choose_tag(options, config, shipped, fp, releases, tags, warnings)
        same_tag = [r for r in releases if r.tag_name == tag]
        existing = sorted(same_tag, key=lambda r: (not r.draft, r.created_at))[-1] if same_tag else None
        base_report: dict[str, Any] = dict(
            tag=tag, fingerprint=fp, jobs=tuple(j.id for j in shipped), failed=tuple(failed)
        )
        same_inputs = _fingerprint_of(existing.body) == fp if existing is not None else False
        if existing is not None and not existing.draft and same_inputs and not options.tag:
            # a re-run of a published night; with an explicit --tag the bytes are compared instead (below)
            message = f"already published from these inputs (fingerprint {fp}); nothing changed"
            say(f"{tag}: {message}")
            return PublishReport(
                state="unchanged",
                message=message,
                release_url=existing.html_url,
                warnings=tuple(warnings),
                **base_report,
            )
        out_dir = (options.out or Path(options.job_dirs[0]).absolute().parent / "release") / tag
        out_dir.mkdir(parents=True, exist_ok=True)
        assets: list[AssetFile] = []
        for job in shipped:
            made, link_notes = write_job_archives(job, tag, out_dir, config, options.context.source_date_epoch)
            assets.extend(made)
            for note in link_notes:
                console.warn(f"{job.id}: {note}")
                warnings.append(f"{job.id}: {note}")
        if options.tool_wheel is not None:
            assets.append(attach_tool_wheel(options.tool_wheel, out_dir))
        # the images, made and tested before anything is written to GitHub (pushed only with the release, below)
        image_options = _image_options(options.images, repo, token)
        images = _release_images(image_options, shipped, tag, out_dir, config, options, repo, say)
        content = ReleaseContent(
            tag=tag,
            fingerprint=fp,
            jobs=shipped,
            failed=failed,
            assets=tuple(assets),
            repo=repo,
            partial=wholeness.partial(),
            held_back=options.held_back,
        )
        manifest = build_manifest(
            content,
            floors=floors,
            floor_config=config.glibc_floor,
            images=manifest_entries(images) if image_options is not None else None,
        )
        manifest_path = write_json(out_dir / MANIFEST, manifest)
        assets.append(
            AssetFile(MANIFEST, manifest_path, manifest_path.stat().st_size, sha256_file(manifest_path), "manifest")
        )
        sums_path = out_dir / CHECKSUMS
        sums_path.write_text(sha256sums(assets), encoding="utf-8")
        assets.append(AssetFile(CHECKSUMS, sums_path, sums_path.stat().st_size, sha256_file(sums_path), "checksums"))
        context = notes_context(
            replace(content, assets=tuple(assets)),
            known_issues=config.known_issues,
            os_words=config.os_words,
            run_url=run_url,
            images=notes_rows(images, {a.job: a.name for a in assets if a.job and a.kind == "zip"}),
        )
        notes = render("release-notes.md.j2", **context)
        (out_dir / NOTES).write_text(notes, encoding="utf-8")
        base_report.update(assets=tuple(assets), out_dir=out_dir, images=tuple(images))

        if existing is not None and not existing.draft:
            return _published_elsewhere(gh, existing, assets, base_report, warnings, say)  # type: ignore[arg-type]
        if options.dry_run or gh is None:
            actions = _dry_actions(gh, existing, assets, tag)
            verb = "would complete the draft" if existing is not None else "would create the draft"
            where = f" in {repo}" if repo else ""
            message = (
                f"{verb} {tag}{where}, upload {sum(a != 'unchanged' for _, a in actions)} asset(s) "
                f"and publish it; files in {out_dir}"
            )
            _write_summary(summary_path, render("step-summary.md.j2", **{**context, "state": "dry run"}))
            return PublishReport(
                state="dry-run", message=message, actions=tuple(actions), warnings=tuple(warnings), **base_report
            )
        release, actions = _complete_draft(gh, existing, tag, notes, assets, warnings, say)
        state: PublishState
        if options.draft:
            state, message = (
                "draft",
                f"draft {tag} holds every asset; run without --draft to publish it"
                + (" and push its images" if images and image_options and image_options.repository else ""),
            )
        else:
            if images and image_options is not None:
                # before the release is public: a failed push leaves the draft (a re-run sends only what is missing)
                images = push_release_images(images, image_options, say)
                base_report["images"] = tuple(images)
            release = gh.call(
                f"publishing {tag}",
                lambda: release.update_release(
                    name=tag,
                    message=notes,
                    draft=False,
                    prerelease=False,
                    make_latest="true" if config.make_latest else "false",
                ),
            )
            if release.draft:
                raise PublishError(f"the API left {tag} a draft after publishing it", hint="look at the release page")
            state, message = "published", f"published with {len(assets)} assets"
        say(f"{tag}: {message}")
        pruned: tuple[str, ...] = ()
        if options.keep is not None and state == "published":
            pruned = prune_releases(gh, options.keep, config.protect, keep_tag=tag, say=say)
        _write_summary(
            summary_path, render("step-summary.md.j2", **{**context, "state": state, "release_url": release.html_url})
        )
        return PublishReport(
            state=state,
            message=message,
            release_url=release.html_url,
            actions=tuple(actions),
            pruned=pruned,
            warnings=tuple(warnings),
            **base_report,
        )
    finally:
        if gh is not None:
            gh.close()


def _image_options(images: ImageOptions | None, repo: str | None, token: str | None) -> ImageOptions | None:
    """``images`` with the registry's credentials filled in: the repository owner and the GitHub token (ghcr.io takes
    the workflow's GITHUB_TOKEN with ``packages: write``), unless given; the shipped images.yaml unless another."""
    if images is None:
        return None
    return replace(
        images,
        user=images.user or (repo.split("/")[0] if repo else None),
        token=images.token if images.token is not None else token,
        config=images.images_config(),
    )


def _release_images(
    images: ImageOptions | None,
    shipped: Sequence[BuiltJob],
    tag: str,
    out_dir: Path,
    config: PublishConfig,
    options: PublishOptions,
    repo: str | None,
    say: Any,
) -> list[ReleaseImage]:
    """An image of each shipped Linux job (none without ``--images``), tested with podman unless the options say
    not to (:func:`.image.release_images`)."""
    if images is None:
        return []
    assert images.config is not None
    report = release_images(
        shipped,
        tag,
        out_dir,
        publish=config,
        options=images,
        mtime_of=lambda job: archive_mtime(job, options.context.source_date_epoch),
        repo=repo,
        say=say,
    )
    for job, why in report.skipped:
        say(f"{job}: no image ({why})")
    return list(report.images)


def _published_elsewhere(
    gh: GitHub, existing: Any, assets: Sequence[AssetFile], base_report: dict[str, Any], warnings: list[str], say: Any
) -> PublishReport:
    """A published release under our tag that was not made from these inputs: identical assets -> nothing to do;
    anything else -> refused (published assets never change: consumers pin their sha256)."""
    tag = existing.tag_name
    remote = {a.name: a for a in gh.assets(existing)}
    problems = []
    for local in assets:
        if local.name not in remote:
            problems.append(f"{local.name} is not in it")
            continue
        same, why = _matches(remote[local.name], local)
        if not same:
            problems.append(f"{local.name} differs ({why})")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PublishError(
            f"release {tag} is already published and its assets are immutable: {problems[0]}{more}; "
            "nothing was changed",
            hint="publish under a new tag (leave out --tag for the next one)",
        )
    message = "already published with identical assets; nothing changed"
    say(f"{tag}: {message}")
    return PublishReport(
        state="unchanged", message=message, release_url=existing.html_url, warnings=tuple(warnings), **base_report
    )


def _dry_actions(gh: GitHub | None, existing: Any, assets: Sequence[AssetFile], tag: str) -> list[tuple[str, str]]:
    remote = {a.name: a for a in gh.assets(existing)} if gh is not None and existing is not None else {}
    actions = []
    for local in assets:
        if local.name in remote:
            same, _ = _matches(remote[local.name], local)
            actions.append((local.name, "unchanged" if same else "would replace"))
        else:
            actions.append((local.name, "would upload"))
    return actions


TOOL_WHEEL_RE = re.compile(r"rockbuild-[0-9][0-9A-Za-z.+!_]*-py3-none-any\.whl")


def check_tool_wheel(wheel: Path) -> None:
    """``--tool-wheel``: rockbuild's own wheel, or a PublishError."""
    if not TOOL_WHEEL_RE.fullmatch(wheel.name):
        raise PublishError(
            f"--tool-wheel {wheel.name}: not rockbuild's wheel (rockbuild-VERSION-py3-none-any.whl)",
            hint="make it with: python -m pip wheel --no-deps -w dist .",
        )
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
    except (OSError, zipfile.BadZipFile) as exc:
        raise PublishError(f"--tool-wheel {wheel}: not a wheel ({exc})") from None
    if "rockbuild/cli.py" not in names:
        raise PublishError(f"--tool-wheel {wheel.name}: holds no rockbuild package")


def attach_tool_wheel(wheel: Path, out_dir: Path) -> AssetFile:
    """rockbuild's own wheel (``pip wheel --no-deps .``) as an asset of the release (kind ``tool``): what its users
    install ``doctor`` and ``install`` from (checked by :func:`check_tool_wheel` before anything was written)."""
    dest = out_dir / wheel.name
    shutil.copyfile(wheel, dest)
    return AssetFile(dest.name, dest, dest.stat().st_size, sha256_file(dest), "tool")


def _complete_draft(
    gh: GitHub, existing: Any, tag: str, notes: str, assets: Sequence[AssetFile], warnings: list[str], say: Any
) -> tuple[Any, list[tuple[str, str]]]:
    """The draft for ``tag`` holding exactly our verified assets (created, or completed when a run left one)."""
    if existing is None:
        release = _create_draft(gh, tag, notes, say)
    else:
        release = existing
        say(f"{tag}: completing the draft a previous run left")
        if (release.body or "") != notes or release.name != tag:
            release = gh.call(
                f"updating the draft {tag}",
                lambda: release.update_release(name=tag, message=notes, draft=True, prerelease=False),
            )
    planned = {a.name: a for a in assets}
    actions: dict[str, str] = {}
    for remote in gh.assets(release):
        if remote.name in planned:
            same, why = _matches(remote, planned[remote.name])
            if same and remote.name not in actions:
                actions[remote.name] = "kept"
                continue
            say(f"    replacing {remote.name} in the draft: {why or 'a duplicate'}")
            gh.call(f"deleting {remote.name} from the draft {tag}", remote.delete_asset)
            actions[remote.name] = "replaced"
        elif _is_ours(remote.name, tag, set(planned)):
            say(f"    deleting {remote.name} from the draft: not part of this release")
            gh.call(f"deleting {remote.name} from the draft {tag}", remote.delete_asset)
        else:
            warnings.append(f"{remote.name} in the draft {tag} was not made by rockbuild; left as it is")
    for local in assets:
        if actions.get(local.name) == "kept":
            continue
        say(f"    uploading {local.name} ({local.size:,} bytes)")
        uploaded = _upload(gh, release, local, tag, say)
        same, why = _matches(uploaded, local)
        if not same and _digest(uploaded) is not None:
            raise PublishError(
                f"{local.name} was uploaded to the draft {tag} but the API reports {why}",
                hint="run the same command again; the draft stays unpublished",
            )
        actions[local.name] = "replaced" if actions.get(local.name) == "replaced" else "uploaded"
    _verify_draft(gh, release, assets)
    return release, [(a.name, actions[a.name]) for a in assets]


def _create_draft(gh: GitHub, tag: str, notes: str, say: Any) -> Any:
    """The new draft for ``tag`` (there was none). GitHub sometimes creates the release and answers 5xx, and
    PyGithub's retries post again: each such post left a draft. The one answered, else the first made, is kept (found
    by its tag) and the others are deleted."""
    answered: Any = None
    try:
        answered = gh.call(
            f"creating the draft release {tag}",
            lambda: gh.repo.create_git_release(tag, name=tag, message=notes, draft=True, prerelease=False),
        )
    except PublishError as failure:
        error: PublishError | None = failure
    else:
        error = None
    made = sorted((r for r in gh.releases() if r.draft and r.tag_name == tag), key=lambda r: (r.created_at, r.id))
    release = answered or (made[0] if made else None)
    if release is None:
        assert error is not None
        raise error
    if error is not None:
        say(f"{tag}: GitHub created the draft although it answered an error ({error.message}); using it")
    else:
        say(f"{tag}: created a draft release")
    for duplicate in (r for r in made if r.id != release.id):
        say(f"{tag}: deleting a duplicate draft an answered-with-an-error request made")
        gh.call(f"deleting a duplicate draft {tag}", duplicate.delete_release)
    return release


def _upload(gh: GitHub, release: Any, local: AssetFile, tag: str, say: Any) -> Any:
    """Upload ``local`` to the draft. GitHub sometimes stores an upload and answers 5xx (a retry then gets 422
    already_exists): when the stored asset is ours (name, size and, when reported, sha256), it is taken."""
    try:
        return gh.call(
            f"uploading {local.name} to the draft {tag} (the draft stays unpublished; run the same "
            "command again to complete it)",
            _uploader(release, local),
        )
    except PublishError as failure:
        stored = next((a for a in gh.assets(release) if a.name == local.name), None)
        if stored is None or not _matches(stored, local)[0]:
            raise
        say(f"    {local.name}: GitHub stored it although it answered an error ({failure.message}); it is ours")
        return stored


def _uploader(release: Any, local: AssetFile) -> Any:
    return lambda: release.upload_asset(str(local.path), label="", content_type=local.content_type, name=local.name)


def _verify_draft(gh: GitHub, release: Any, assets: Sequence[AssetFile]) -> None:
    """Every asset exactly once, uploaded, of our size, and of our sha256 when the API reports a digest."""
    remote = gh.assets(release)
    for local in assets:
        found = [r for r in remote if r.name == local.name]
        if len(found) != 1:
            raise PublishError(
                f"the draft {release.tag_name} has {len(found)} copies of {local.name}; not published",
                hint="run the same command again to complete the draft",
            )
        r = found[0]
        if r.state != "uploaded" or r.size != local.size or (_digest(r) not in (None, local.sha256)):
            _, why = _matches(r, local)
            raise PublishError(
                f"{local.name} in the draft {release.tag_name} does not match ours ({why}); not published",
                hint="run the same command again to complete the draft",
            )


def prune_releases(gh: GitHub, keep: int, protect: Sequence[str], *, keep_tag: str, say: Any) -> tuple[str, ...]:
    """Delete published releases made by rockbuild beyond the newest ``keep`` (tags stay, so the sequence goes on;
    releases of other tools and protected tags are never touched)."""
    ours = [r for r in gh.releases() if not r.draft and read_marker(r.body) is not None and r.tag_name not in protect]
    ours.sort(key=lambda r: (r.tag_name == keep_tag, r.published_at or r.created_at, r.id), reverse=True)
    pruned = []
    for release in ours[max(keep, 1) :]:
        gh.call(f"deleting the old release {release.tag_name}", release.delete_release)
        say(f"    pruned the old release {release.tag_name}")
        pruned.append(release.tag_name)
    return tuple(pruned)
