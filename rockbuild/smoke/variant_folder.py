"""A folder of a bundle with one CPU variant module alone: the smoke's per-variant step (:mod:`.variants`) and the
numerics step's long CPU run (:mod:`.numerics`) run ggml there, so that it can load that module only."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from rockbuild.smoke.parse import cpu_variant_files, cpu_variant_of


def _link_or_copy(src: str | Path, dst: str | Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(src, dst)


def one_variant_folder(bundle: Path, variant_file: str, dest: Path) -> Path:
    """``dest``: the bundle with ``variant_file`` as its only CPU variant module, so that ggml_backend_load_all(),
    which searches the executable's folder and the current folder, can load only it. The files are hard-linked (a
    copy across file systems): a program's folder is its link's, /proc/self/exe does not lead back to the bundle.
    Subfolders (rocBLAS' kernels, ``disabled-cpu-variants/``) become symbolic links to the bundle's: ggml never looks
    into a subfolder, and the libraries that do find the same files there."""
    dest.mkdir(parents=True)
    for path in bundle.iterdir():
        if cpu_variant_of(path.name) is not None and path.name != variant_file:
            continue
        if path.is_symlink():
            (dest / path.name).symlink_to(os.readlink(path))
        elif path.is_dir():
            (dest / path.name).symlink_to(path.absolute(), target_is_directory=True)
        else:
            _link_or_copy(path, dest / path.name)
    return dest


def work_folder(bundle: Path, fallback: Path) -> Path:
    """A new hidden folder for the one-variant folders: beside the bundle, so that hard links work, else (a bundle in
    a folder this user cannot write) under ``fallback``."""
    for parent in (bundle.parent, fallback):
        try:
            parent.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix=".cpu-variants-", dir=parent))
        except OSError:
            continue
    return Path(tempfile.mkdtemp(prefix="rockbuild-cpu-variants-"))


def shipped_variants(bundle: Path) -> dict[str, str]:
    """The bundle's CPU variant modules: variant -> file name (``zen4`` -> ``libggml-cpu-zen4.so``), by file name."""
    return {str(cpu_variant_of(name)): name for name in cpu_variant_files(p.name for p in bundle.iterdir())}
