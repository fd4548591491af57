"""Pin the night's inputs once for every job: one llama.cpp commit, and per (OS, tarball group) one ROCm tarball.
A job whose backend takes no ROCm (Vulkan) has a null ``rocm_key`` and is built from the commit alone.

``inputs.json`` carries them with the expanded matrix (one record, :class:`~rockbuild.core.records.InputsRecord`,
from :func:`resolve_inputs` to :func:`load_inputs`), so every later command (``build --inputs``, ``publish
--inputs``, the CI fan-out) builds the same commit against the same tarball. A group whose newest tarball is older
than ``max_age_days`` (a frozen host, a renamed group) fails only its own jobs: their entry names the group and the
date found, and building them refuses.

Each tarball also carries its group's *last good* one (:func:`attach_last_good`): the newest tarball of the same
(OS, group) that passed the smoke test in a published release (read from the releases' manifest.json). A job that
fails with the newest ROCm is retried once with it (:mod:`rockbuild.nightly.run`).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rockbuild import __version__, console
from rockbuild.backends import get_backend
from rockbuild.core.errors import ConfigError, FetchError, NotFoundError, RockbuildError, StaleInputError, UsageError
from rockbuild.core.jobs import Job
from rockbuild.core.options import DEFAULT_MAX_AGE_DAYS, Pins
from rockbuild.core.records import (
    INPUTS_SCHEMA,
    InputsJob,
    InputsLlama,
    InputsRecord,
    InputsRocm,
    JobLastGood,
    ManifestJob,
    ManifestRecord,
)
from rockbuild.downloader import get_text, host_of
from rockbuild.llamacpp.source import DEFAULT_GIT_URL, FULL_COMMIT_RE, build_number_from_tags, git_env
from rockbuild.process import ProcessError, run
from rockbuild.rocm.index import IndexSource, resolve_tarball
from rockbuild.rocm.names import parse_tarball_name

SCHEMA = INPUTS_SCHEMA
_LATEST_ALIASES = ("latest", "")
GIT_TIMEOUT = 120  # seconds git ls-remote may take (it has no read timeout of its own)


def rocm_key(job: Job, version: str) -> str:
    return f"{job.os}-{job.group}-{job.rocm_channel}-{version}"


def inputs_record(
    llama: InputsLlama,
    rocm: Mapping[str, InputsRocm],
    jobs: Iterable[InputsJob],
    *,
    resolved_at: str = "",
    max_age_days: int | None = DEFAULT_MAX_AGE_DAYS,
    index_url: str | None = None,
    patches: str | None = None,
) -> InputsRecord:
    """inputs.json's record, as this rockbuild writes it: the commit, the tarballs by key, each job with its key."""
    return InputsRecord(
        schema=SCHEMA,
        tool="rockbuild",
        rockbuild_version=__version__,
        resolved_at=resolved_at,
        max_age_days=max_age_days,
        index_url=index_url,
        llama_cpp=llama,
        patches=patches,
        rocm=dict(rocm),
        jobs=tuple(jobs),
    )


def read_inputs(data: Any, source: str = "inputs.json") -> InputsRecord:
    """The record of an inputs file's JSON: written by rockbuild resolve, of this schema, well formed (a RecordError
    names the key), and whole: every job's ROCm key is one of its tarballs, and a job whose backend takes ROCm has
    one (a ConfigError before any job is built)."""
    if not isinstance(data, dict) or data.get("tool") != "rockbuild" or "llama_cpp" not in data:
        raise ConfigError(f"{source} is not an inputs file written by rockbuild resolve")
    if data.get("schema") != SCHEMA:
        raise ConfigError(
            f"{source} has schema {data.get('schema')!r}; this rockbuild reads {SCHEMA}",
            hint="write it again with this rockbuild's `rockbuild resolve`",
        )
    record = InputsRecord.from_dict(data, source)  # a RecordError when a key is missing or of the wrong type
    for job in record.jobs:
        if job.rocm_key is None and get_backend(job.backend).needs_rocm:
            raise ConfigError(f"{source} has no ROCm tarball for {job.id}; write it again with rockbuild resolve")
        if job.rocm_key is not None and job.rocm_key not in record.rocm:
            raise ConfigError(
                f"{source}: {job.id}'s rocm_key {job.rocm_key!r} is none of its rocm tarballs; write "
                "it again with rockbuild resolve"
            )
    return record


def load_inputs(path: Path) -> InputsRecord:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--inputs {path}: no such file; write it with `rockbuild resolve --out {path}`") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--inputs {path} cannot be read as JSON: {exc}") from None
    return read_inputs(data, str(path))


# ---------------------------------------------------------------------------------------------------------------------
# llama.cpp


def parse_ls_remote(text: str) -> dict[str, str]:
    """``refs/...`` -> commit from ``git ls-remote`` output; an annotated tag maps to its commit (the ``^{}`` line)."""
    refs: dict[str, str] = {}
    peeled: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        sha, ref = parts
        if ref.endswith("^{}"):
            peeled[ref.removesuffix("^{}")] = sha
        else:
            refs[ref] = sha
    refs.update(peeled)
    return refs


def resolve_llama(ref: str, url: str, *, run_git: Callable[[list[str]], str] | None = None) -> InputsLlama:
    """The commit of ``ref`` (tag, branch, or a full commit taken as is) and its ``bNNNN`` tag when it has one."""
    ref = ref.strip()
    if ref in _LATEST_ALIASES:
        ref = "master"
    if ref.startswith("-"):
        raise UsageError(f"--llama-ref {ref!r} is not a tag, branch or commit")
    git = run_git or _ls_remote
    listing = parse_ls_remote(git(["ls-remote", "--heads", "--tags", url]))
    if FULL_COMMIT_RE.match(ref.lower()):
        commit = ref.lower()
    else:
        candidates = (f"refs/tags/{ref}", f"refs/heads/{ref}", ref if ref.startswith("refs/") else "")
        commit = next((listing[c] for c in candidates if c and c in listing), "")
        if not commit:
            hint = (
                "a commit must be given in full (40 hex digits)"
                if all(ch in "0123456789abcdef" for ch in ref.lower())
                else "check the branch or tag name"
            )
            raise NotFoundError(f"llama.cpp ref {ref!r} is not a branch or tag of {url}", hint=hint)
    tags = [r.removeprefix("refs/tags/") for r, sha in listing.items() if r.startswith("refs/tags/") and sha == commit]
    return InputsLlama(ref=ref, commit=commit, build_number=build_number_from_tags(tags), url=url)


def _ls_remote(args: list[str]) -> str:
    try:
        with console.waiting(f"{host_of(args[-1])} (git {args[0]})", timeout=GIT_TIMEOUT):
            result = run(["git", *args], env=git_env(), timeout=GIT_TIMEOUT, log=None)
    except ProcessError as exc:
        tail = f": {exc.tail[-1]}" if exc.tail else ""
        raise FetchError(
            f"git {' '.join(args[:1])} {args[-1]} failed{tail}", hint="check --git-url and the network"
        ) from None
    return result.output


# ---------------------------------------------------------------------------------------------------------------------
# ROCm


def _memo(fetch_text: Callable[[str], str]) -> Callable[[str], str]:
    """One GET per index page for the whole resolve (every group of an OS reads the same page)."""
    seen: dict[str, str] = {}

    def get(url: str) -> str:
        if url not in seen:
            seen[url] = fetch_text(url)
        return seen[url]

    return get


def resolve_rocm(
    job: Job,
    *,
    version: str,
    index_url: str | None,
    max_age_days: int | None,
    fetch_text: Callable[[str], str],
    today: datetime.date | None = None,
) -> InputsRocm:
    groups = (job.group, *job.legacy_groups)
    base = InputsRocm(key=rocm_key(job, version), os=job.os, groups=groups, channel=job.rocm_channel, requested=version)
    try:
        entry = resolve_tarball(
            platform=job.os,
            groups=groups,
            version=version,
            channel=job.rocm_channel,
            today=today,
            max_age_days=max_age_days,
            source=IndexSource(index_url=index_url, fetch_text=fetch_text),
        )
    except StaleInputError as exc:
        return _with(base, error=exc.message, error_kind="stale")
    except NotFoundError as exc:
        return _with(base, error=exc.message, error_kind="not-found")
    return _with(base, **tarball_fields(entry))


def tarball_fields(entry: Any) -> dict[str, Any]:
    """A :class:`~rockbuild.rocm.index.TarballEntry` as :class:`~rockbuild.core.records.InputsRocm`'s tarball fields
    (:data:`~rockbuild.core.records.TARBALL_FIELDS`)."""
    return {
        "name": entry.name.filename,
        "url": entry.url,
        "version": entry.name.version.text,
        "date": entry.name.date.isoformat() if entry.name.date else None,
        "size": entry.size,
        "mtime": entry.mtime,
        "index_url": entry.index_url,
    }


def _with(base: InputsRocm, **changes: Any) -> InputsRocm:
    return replace(base, **changes)


def resolve_inputs(
    jobs: Sequence[Job],
    pins: Pins | None = None,
    *,
    fetch_text: Callable[[str], str] | None = None,
    today: datetime.date | None = None,
    patches: str | None = None,
) -> InputsRecord:
    """Resolve the llama.cpp commit once and the ROCm tarball once per (OS, group, channel, version), as ``pins``
    (None: the matrix's ref and versions, the default age limit) pin them; ``patches`` (the carried patch series'
    digest) is recorded as it is, for every leg to build with."""
    pins = pins or Pins()
    llama_ref, rocm_version, max_age_days = pins.llama_ref, pins.rocm_version, pins.max_age_days
    index_url, git_url = pins.index_url, pins.git_url
    if not jobs:
        raise UsageError("no job to resolve inputs for")
    say = console.info
    refs = sorted({j.llama_ref for j in jobs})
    if llama_ref is None and len(refs) > 1:
        raise ConfigError(
            f"the jobs ask for different llama.cpp refs ({', '.join(refs)}); one night builds one commit",
            hint="give --llama-ref, or one llama_ref in the matrix options",
        )
    url = git_url or DEFAULT_GIT_URL
    llama = resolve_llama(llama_ref or refs[0], url)
    say(
        f"llama.cpp {llama.ref}: commit {llama.commit}"
        + (f" (build {llama.build_number})" if llama.build_number else " (no bNNNN tag on it)")
    )
    get = _memo(fetch_text or get_text)
    rocm: dict[str, InputsRocm] = {}
    pinned: list[InputsJob] = []
    for job in jobs:
        if not get_backend(job.backend).needs_rocm:  # built from the commit alone (Vulkan: loader, driver: the host's)
            pinned.append(InputsJob.of(job, None))
            continue
        version = (rocm_version or job.rocm_version or "latest").strip() or "latest"
        key = rocm_key(job, version)
        if key not in rocm:
            rocm[key] = resolve_rocm(
                job, version=version, index_url=index_url, max_age_days=max_age_days, fetch_text=get, today=today
            )
            found = rocm[key]
            if found.error:
                console.warn(f"ROCm for {job.os} {job.group}: {found.error}")
            else:
                say(f"ROCm for {job.os} {job.group}: {found.version} ({found.name})")
        pinned.append(InputsJob.of(job, key))
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return inputs_record(
        llama, rocm, pinned, resolved_at=now, max_age_days=max_age_days, index_url=index_url, patches=patches
    )


# ---------------------------------------------------------------------------------------------------------------------
# Last good tarballs


def smoke_passed(manifest: ManifestRecord | Mapping[str, Any]) -> list[ManifestJob]:
    """The jobs of a release's manifest.json that passed their smoke test (one shipped without it proves nothing)."""
    return [job for job in ManifestRecord.of(manifest).jobs if job.smoke is not None and job.smoke.ok is True]


def last_good_tarballs(
    manifests: Iterable[tuple[str, ManifestRecord | Mapping[str, Any]]],
) -> dict[tuple[str, str], dict[str, Any]]:
    """(OS, group) -> the newest tarball that passed the smoke test in a published release: ``manifests`` are
    (tag, manifest.json), newest release first."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for tag, manifest in manifests:
        for job in smoke_passed(manifest):
            parsed = parse_tarball_name((job.rocm.tarball if job.rocm is not None else None) or "")
            if parsed is None:
                continue
            key = (parsed.platform, parsed.group)
            if key not in found:
                found[key] = {
                    "name": parsed.filename,
                    "version": parsed.version.text,
                    "date": parsed.date.isoformat() if parsed.date else None,
                    "release": tag,
                }
    return found


def last_good_jobs(manifests: Iterable[tuple[str, ManifestRecord | Mapping[str, Any]]]) -> dict[str, JobLastGood]:
    """Job id -> the newest release in which it passed its smoke test, with the llama.cpp commit and ROCm tarball it
    was built from: ``manifests`` are (tag, manifest.json), newest release first."""
    found: dict[str, JobLastGood] = {}
    for tag, manifest in manifests:
        record = ManifestRecord.of(manifest)
        for job in smoke_passed(record):
            llama = job.llama_cpp or record.llama_cpp
            found.setdefault(
                job.id,
                JobLastGood(
                    release=tag,
                    llama_commit=llama.commit if llama else None,
                    rocm=job.rocm.tarball if job.rocm is not None else None,
                ),
            )
    return found


def attach_job_last_good(inputs: InputsRecord, known: Mapping[str, JobLastGood]) -> InputsRecord:
    """``inputs`` with each job's last good release (:func:`last_good_jobs`): what a failed job's triage compares
    tonight's inputs with."""
    return replace(inputs, jobs=tuple(replace(j, last_good=known.get(j.id)) for j in inputs.jobs))


def attach_last_good(
    inputs: InputsRecord,
    known: dict[tuple[str, str], dict[str, Any]],
    *,
    fetch_text: Callable[[str], str] | None = None,
) -> InputsRecord:
    """``inputs`` with each tarball's last good one (from :func:`last_good_tarballs`) looked up in the index, so a
    retry can download it. One that is no longer listed is left out with a warning."""
    get = _memo(fetch_text or get_text)
    rocm = dict(inputs.rocm)
    for key, entry in inputs.rocm.items():
        good = next((known[(entry.os, g)] for g in entry.groups if (entry.os, g) in known), None)
        if entry.error or good is None or good["name"] == entry.name:
            continue  # nothing pinned, nothing known good, or the newest is the last good one
        try:
            found = resolve_tarball(
                platform=entry.os,
                groups=entry.groups,
                version=good["version"],
                channel=entry.channel,
                source=IndexSource(index_url=inputs.index_url, fetch_text=get),
            )
        except RockbuildError as exc:
            console.warn(
                f"ROCm for {entry.os} {entry.groups[0]}: the last good tarball {good['name']} (release "
                f"{good['release']}) cannot be found: {exc.message}; no fallback"
            )
            continue
        rocm[key] = _with(entry, last_good={**good, **tarball_fields(found)})
        console.info(f"ROCm for {entry.os} {entry.groups[0]}: last good {good['version']} (release {good['release']})")
    return replace(inputs, rocm=rocm)


# ---------------------------------------------------------------------------------------------------------------------
# The last release


def manifest_differences(
    inputs: InputsRecord, manifest: ManifestRecord | Mapping[str, Any], job_ids: Sequence[str]
) -> list[str]:
    """Why ``job_ids`` built from ``inputs`` would not be what ``manifest`` (a release's manifest.json) holds;
    empty when nothing changed.

    A job the last release listed as failed counts as unchanged when the rest is: its tarball is not recorded, and
    building the same commit again against the same night's ROCm fails the same way.
    """
    why: list[str] = []
    if (manifest.tool if isinstance(manifest, ManifestRecord) else manifest.get("tool")) != "rockbuild":
        return ["the last release has no rockbuild manifest.json"]
    record = ManifestRecord.of(manifest)
    commit = record.llama_cpp.commit if record.llama_cpp is not None else None
    held = record.llama_cpp.held_back if record.llama_cpp is not None else None
    if held is not None and held.tip == inputs.llama_cpp.commit:
        commit = held.tip  # built from the commit before that one's first bad one (ship: newest-good): unchanged
    if commit != inputs.llama_cpp.commit:
        why.append(f"llama.cpp {str(commit)[:12]} -> {inputs.llama_cpp.commit[:12]}")
    shipped = {j.id: j for j in record.jobs}
    failed = {j.id for j in record.failed_jobs}
    for job_id in job_ids:
        job = inputs.job(job_id)
        if job.is_common_part:  # no asset: built from the commit, patches and flags its jobs are compared on
            continue
        rocm = inputs.rocm_for(job_id)  # None for a Vulkan job: the commit and the job are all it is built from
        entry = shipped.get(job_id)
        if entry is None:
            if job_id not in failed:
                why.append(f"{job_id} is new")
            continue
        tarball = entry.rocm.tarball if entry.rocm is not None else None
        # a job published on its last good ROCm because the newest failed: unchanged while the newest is the same
        fallback = entry.rocm.fallback if entry.rocm is not None else None
        newest_failed = fallback.get("newest") if fallback else None
        if rocm is not None and tarball != rocm.name and newest_failed != rocm.name:
            why.append(f"{job_id}: ROCm {tarball} -> {rocm.name}")
        if list(entry.targets) != list(job.targets):
            why.append(f"{job_id}: targets {','.join(entry.targets)} -> {','.join(job.targets)}")
        changed = [k for k, v in job.cmake if entry.cmake.get(k) != v]
        if changed:
            why.append(f"{job_id}: CMake {', '.join(changed)} changed")
        shipped_patches = entry.patches.digest if entry.patches is not None else None
        if inputs.patches is not None and shipped_patches != inputs.patches:
            why.append(f"{job_id}: carried patches {shipped_patches or 'not recorded'} -> {inputs.patches}")
    return why
