"""The glibc floor of a Linux bundle: the highest GLIBC_/GLIBCXX_/CXXABI_/GCC_ version any of its programs and
libraries needs (``.gnu.version_r``), and which file needs it. Read with the bundle stage's ELF reader."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from rockbuild.bundle.elf import elf_machine, highest_versions, read_elf, version_key

_HOST_MACHINES = {3, 62, 183}  # EM_386, EM_X86_64, EM_AARCH64; AMDGPU code objects (224) in kernel folders are data


def host_elf(path: Path) -> bool:
    return elf_machine(path) in _HOST_MACHINES


def bundle_floor(bundle: Path) -> dict[str, tuple[str, str]]:
    """{family: (version, relative path of the file needing it)} over the bundle's host ELF files."""
    infos = []
    for dirpath, _dirs, files in os.walk(bundle):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink() or not host_elf(path):
                continue
            info = read_elf(path)
            if info is not None and info.is_loadable:
                infos.append(info)
    found = highest_versions(infos)
    by_name = {info.path.name: info.path for info in infos}
    return {
        family: (version, by_name[file].relative_to(bundle).as_posix() if file in by_name else file)
        for family, (version, file) in found.items()
    }


def floor_violations(floor: Mapping[str, tuple[str, str]], ceiling: Mapping[str, str]) -> list[str]:
    """One text per family whose need is above the configured floor, naming the file that raised it."""
    out = []
    for family, allowed in ceiling.items():
        if family in floor and version_key(floor[family][0]) > version_key(allowed):
            version, file = floor[family]
            out.append(f"{file} needs {family}_{version}, above the floor {family}_{allowed}")
    return out
