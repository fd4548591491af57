"""A GPU job built on its OS's common part: what it may take from there, checked, and the folder it assembles.

A night builds what does not depend on the GPU once per OS (the *common part*: a build of the same llama.cpp tree,
patches and flags with no GPU backend: the programs, libllama, libggml, libggml-base, every CPU module, the chat page
in llama-server) and each GPU job then compiles only its backend's library (``libggml-hip.so``, ``ggml-vulkan.dll``).
ggml loads that library at run time (``GGML_BACKEND_DL``), so the job's ``bin/`` is the common part's files plus its
own library. What makes that safe is checked here, before and after the compile: the same OS, llama.cpp commit and
carried patches, and the same ``GGML_*`` definitions; the bundle's audit then checks the binary interface itself
(every ``ggml_*`` symbol the backend library needs is defined by the common part's core libraries).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from rockbuild.core.errors import BuildError
from rockbuild.core.records import BuildRecord, CommonPart

# definitions that may differ between the common part and a job on it: the compilers and their launcher, the
# toolchain, and the backends' own switches and options (each side has only its own)
_OWN_PREFIXES = (
    "CMAKE_",
    "GGML_HIP",
    "GGML_VULKAN",
    "GGML_CUDA",
    "GGML_BLAS",
    "GGML_CCACHE",
    "GPU_TARGETS",
    "AMDGPU_TARGETS",
    "Vulkan_",
)


def read_common(folder: Path, *, os_name: str) -> BuildRecord:
    """The build.json of the common part in ``folder``, checked to be one this ``os_name`` job can build on: a
    BuildError naming what is wrong (missing, failed, another OS, a GPU build)."""
    path = folder / BuildRecord.FILE
    record = BuildRecord.read(path)
    if record is None:
        raise BuildError(
            f"{folder} holds no build.json: build the common part first "
            f"(rockbuild build --job {os_name}-common --out ...)"
        )
    job = record.job
    name = job.id if job is not None else folder.name
    if not record.ok:
        why = record.error.message if record.error is not None else "no reason recorded"
        raise BuildError(f"the common part {name} failed at {record.failed_step or 'an unknown step'}: {why}")
    if job is None or job.os != os_name:
        raise BuildError(
            f"the common part {name} is a {job.os if job else 'unknown'} build; this job builds for {os_name}"
        )
    if not bin_dir_of(folder, record).is_dir():
        raise BuildError(f"the common part {name} has no programs folder (build/bin) in {folder}")
    return record


def bin_dir_of(folder: Path, record: BuildRecord) -> Path:
    """The common part's programs: where its build.json says, moved with its folder (a CI artifact lands elsewhere)."""
    recorded = Path(record.paths.bin_dir) if record.paths and record.paths.bin_dir else folder / "build" / "bin"
    job_dir = Path(record.paths.job_dir) if record.paths and record.paths.job_dir else None
    if job_dir is not None:
        try:
            return folder / recorded.relative_to(job_dir)
        except ValueError:
            pass
    return recorded


def check_source(record: BuildRecord, *, commit: str | None, patches: str | None, cross: str | None) -> None:
    """The same llama.cpp commit, carried patches and cross toolchain as the job's."""
    name = record.job.id if record.job else "the common part"
    theirs_cross = record.cross.name if record.cross is not None else None
    if theirs_cross != cross:

        def how(toolchain: str | None) -> str:
            return f"with --cross {toolchain}" if toolchain else "natively"

        raise BuildError(
            f"the common part {name} was built {how(theirs_cross)}, this job {how(cross)}: build both the same way"
        )
    if record.commit != commit:
        raise BuildError(
            f"the common part {name} was built from llama.cpp {record.commit}, this job builds "
            f"{commit}: build the common part of this commit first"
        )
    theirs = record.patches.digest if record.patches is not None else None
    if patches is not None and theirs is not None and theirs != patches:
        raise BuildError(
            f"the common part {name} carries the patch series {theirs[:12]}, this job {patches[:12]}: "
            "build both with the same patches/patches.yaml"
        )


def check_definitions(record: BuildRecord, ours: Mapping[str, str]) -> None:
    """The same ``GGML_*``/``LLAMA_*`` definitions on both sides, but each backend's own switches and options."""
    theirs = record.cmake_definitions
    name = record.job.id if record.job else "the common part"
    for key in sorted(set(theirs) | set(ours)):
        if key.startswith(_OWN_PREFIXES) or not key.startswith(("GGML_", "LLAMA_")):
            continue
        if theirs.get(key) != ours.get(key):
            raise BuildError(
                f"the common part {name} was configured with {_said(key, theirs.get(key))}, this job "
                f"with {_said(key, ours.get(key))}: a library of one does not fit the other (build it "
                "whole, or both with the same cmake options)"
            )


def _said(key: str, value: str | None) -> str:
    return f"{key}={value}" if value is not None else f"no {key}"


def library_files(bin_dir: Path, target: str, *, windows: bool) -> list[Path]:
    """The files of CMake target ``target``'s shared library in ``bin_dir`` (``libggml-hip.so*`` or ``ggml-hip.dll``;
    its versioned names and links too)."""
    pattern = f"{target}.dll" if windows else f"lib{target}.so*"
    return sorted(p for p in bin_dir.iterdir() if fnmatch.fnmatchcase(p.name, pattern)) if bin_dir.is_dir() else []


def _place(source: Path, dest: Path) -> None:
    if source.is_symlink():
        os.symlink(os.readlink(source), dest)
        return
    try:
        os.link(source, dest)  # the same bytes, no copy (a later build replaces build/bin's file, never writes it)
    except OSError:
        shutil.copy2(source, dest)


def assemble(common_bin: Path, own: list[Path], out: Path) -> list[str]:
    """``out`` made afresh: every file of ``common_bin`` but those ``own`` replaces (same name), then ``own``. The
    names taken from the common part, sorted."""
    if out.exists() or out.is_symlink():
        shutil.rmtree(out) if out.is_dir() and not out.is_symlink() else out.unlink()
    out.mkdir(parents=True)
    mine = {p.name for p in own}
    taken = []
    for path in sorted(common_bin.iterdir()):
        if path.name in mine or path.is_dir():
            continue
        _place(path, out / path.name)
        taken.append(path.name)
    for path in own:
        _place(path, out / path.name)
    return taken


def build_json_sha256(folder: Path) -> str:
    """The sha256 of the common part's build.json (``missing`` when there is none): what a job on it was checked
    against, and what keys the night's builds on it."""
    try:
        return hashlib.sha256((folder / BuildRecord.FILE).read_bytes()).hexdigest()
    except OSError:
        return "missing"


def describe(folder: Path, record: BuildRecord, taken: list[str]) -> CommonPart:
    """build.json's ``common``."""
    digest = build_json_sha256(folder)
    return CommonPart(
        job=record.job.id if record.job else folder.name,
        path=str(folder),
        build_json_sha256=digest,
        commit=record.commit,
        compilers=dict(record.compilers),
        cross=record.cross.name if record.cross is not None else None,
        files=tuple(taken),
    )
