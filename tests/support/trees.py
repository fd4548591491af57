"""Fake TheRock trees, as a folder or as a TheRock-style tarball.

* :func:`gcc_therock` lists the files of a TheRock tree whose ``lib/llvm/bin/clang{,++}`` exec the host's gcc/g++, so
  the build driver's real code path (layout -> toolchain -> cmake -> ninja) compiles with them;
  :func:`write_tree` writes such a listing to a folder and :func:`tar_tree` to a tarball (``./`` first, like TheRock's).
* :func:`therock_tree` is the smallest tree ``detect_layout`` takes for TheRock (compilers that are never run).

The tarball corpus of extraction tests (:func:`support.tarballs.therock_like_tarball`) is in support/tarballs.py.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from support.files import touch
from support.tarballs import TarBuilder

THEROCK_COMMIT = "89553ce3a5a4c5b8d0e1f2a3b4c5d6e7f8091a2b"

Files = Mapping[str, tuple[bytes, int]]
"""A tree's files in order: relative name -> (content, mode)."""


def gcc_therock(*, package_version: str = "7.2.0a20261128", before_exec: str = "", flags: str = "") -> Files:
    """ROCm 7.2.0 (HIP 7.2.53211, rocm_package_version ``package_version``) whose clang/clang++ are shell scripts
    that run ``before_exec`` (shell lines) and then exec the host's gcc/g++ with ``flags`` before their arguments."""
    files: dict[str, tuple[bytes, int]] = {}
    for name, compiler in (("clang", shutil.which("gcc")), ("clang++", shutil.which("g++"))):
        files[f"lib/llvm/bin/{name}"] = (f'#!/bin/sh\n{before_exec}exec {compiler} {flags}"$@"\n'.encode(), 0o755)
    files["lib/llvm/amdgcn/bitcode/ocml.bc"] = (b"", 0o644)
    files["bin/hipconfig"] = (b"#!/bin/sh\necho 7.2.0\n", 0o755)
    files["include/hip/hip_version.h"] = (
        b"#define HIP_VERSION_MAJOR 7\n#define HIP_VERSION_MINOR 2\n#define HIP_VERSION_PATCH 53211\n",
        0o644,
    )
    manifest = {"the_rock_commit": THEROCK_COMMIT, "rocm_version": "7.2.0", "rocm_package_version": package_version}
    files["share/therock/therock_manifest.json"] = (json.dumps(manifest).encode(), 0o644)
    return files


def write_tree(root: Path, files: Files) -> Path:
    """The tree ``files`` under the folder ``root``."""
    for name, (data, mode) in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    return root


def tar_tree(path: Path, files: Files) -> Path:
    """The tree ``files`` as a gzip tarball at ``path``, members named ``./...`` after a ``./`` root member."""
    with TarBuilder(path) as tar:
        tar.root()
        for name, (data, mode) in files.items():
            tar.file(name, data, mode=mode)
    return path


def therock_tree(root: Path, exe: str = "") -> Path:
    """The smallest TheRock tree (``exe``: the programs' suffix, ``.exe`` for Windows): clang, clang++, the device
    library folder and a manifest naming commit ``abc``."""
    touch(root / "lib" / "llvm" / "bin" / f"clang{exe}", "#!/bin/sh\n", 0o755)
    touch(root / "lib" / "llvm" / "bin" / f"clang++{exe}", "#!/bin/sh\n", 0o755)
    touch(root / "lib" / "llvm" / "amdgcn" / "bitcode" / "ocml.bc")
    touch(root / "share" / "therock" / "therock_manifest.json", json.dumps({"the_rock_commit": "abc"}))
    return root
