"""What a ROCm root holds and where: TheRock tarball trees, /opt/rocm installs and Debian/Ubuntu distro installs.

The build stage needs the compiler, the device libraries and the library dirs; the bundle stage needs the kernel data
and the GPU targets it covers. A Debian root is often a chroot whose symlinks are absolute
(``/usr/bin/clang-22 -> /usr/lib/llvm-22/bin/clang``): those resolve against the chroot, never against the host's /.
"""

from __future__ import annotations

import enum
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from rockbuild.core.errors import LayoutError
from rockbuild.core.record import Record, json_form
from rockbuild.core.records import BuildRocm
from rockbuild.core.vocabulary import Os
from rockbuild.paths import follow_in_root

# The GPU target a kernel file serves is the LAST token of its name (TensileLibrary_…_gfx90a-xnack+.dat); files
# without a token (…_fallback.dat, hipblasltTransform.hsaco) are generic and serve every target.
_TARGET_TOKEN_RE = re.compile(r"(gfx[0-9a-f]+)(?:-xnack[+-])?(?=[._-])")
_HIP_VERSION_RE = re.compile(r"^\s*#\s*define\s+HIP_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)", re.M)


class LayoutKind(enum.StrEnum):
    THEROCK = "therock"  # an extracted TheRock tarball
    OPT_ROCM = "opt-rocm"  # AMD's packaged install (/opt/rocm, /opt/rocm-X.Y.Z)
    DEBIAN = "debian"  # Debian/Ubuntu packages: /usr, or a chroot holding usr/


def kernel_file_target(filename: str) -> str | None:
    """The gfx target a kernel-data file serves (its last target token), or None for a generic file."""
    tokens = _TARGET_TOKEN_RE.findall(filename)
    return tokens[-1] if tokens else None


def target_order(target: str) -> tuple[int, str]:
    return (len(target), target)  # gfx803 < gfx90a < gfx1100


@dataclass(frozen=True)
class KernelData(Record):
    """One directory of precompiled GPU kernels (rocBLAS/hipBLASLt databases, or TheRock's ``.kpack``)."""

    component: str
    path: Path
    targets: tuple[str, ...]
    files: int
    generic_files: int


@dataclass(frozen=True)
class RocmLayout(Record):
    """What a ROCm root holds and where (a record: ``rockbuild rocm info --json``, the fetch's ``layout``)."""

    root: Path
    kind: LayoutKind = field(metadata=json_form(str, LayoutKind, str))
    platform: Os
    """``linux`` or ``windows`` (a Windows TheRock tree extracted anywhere)."""
    prefix: Path
    """The directory holding bin/, include/, lib/: the root itself, or root/usr for a Debian chroot."""
    sysroot: Path | None
    """For a Debian layout, the directory that stands for / (absolute symlinks resolve against it); else None."""
    version: str | None
    version_source: str | None
    hip_version: str | None
    """From include/hip/hip_version.h (7.2.53211); ``version`` is the ROCm release (7.2.4) when the root says."""
    package_version: str | None
    """TheRock's full package version (``10.2.0a20260915``) when its manifest says; ``version`` lacks the date."""
    therock_commit: str | None
    llvm_dir: Path
    clang: Path
    clangxx: Path
    hipcc: Path | None
    device_lib_dir: Path | None
    include_dir: Path | None
    library_dirs: tuple[Path, ...]
    kernel_data: tuple[KernelData, ...]
    gfx_targets: tuple[str, ...] = field(init=False)
    """Every gfx target some kernel data covers (derived)."""

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "gfx_targets", tuple(sorted({t for k in self.kernel_data for t in k.targets}, key=target_order))
        )

    @property
    def kernel_dirs(self) -> tuple[Path, ...]:
        return tuple(k.path for k in self.kernel_data)

    def targets_of(self, component: str) -> tuple[str, ...]:
        return tuple(
            sorted({t for k in self.kernel_data if k.component == component for t in k.targets}, key=target_order)
        )

    def in_root(self, path: Path) -> PurePosixPath:
        """``path`` as a program running inside the root sees it (``/usr/lib/llvm-22/bin/clang`` in a chroot)."""
        if self.sysroot is None:
            return PurePosixPath(path.as_posix())
        return PurePosixPath("/") / path.relative_to(self.sysroot).as_posix()

    def record(self) -> BuildRocm:
        """What this root is, as build.json and bundle.json record it (their ``rocm``; no tarball: the fetch adds
        the one it came from)."""
        return BuildRocm(
            root=str(self.root),
            kind=str(self.kind),
            platform=self.platform,
            version=self.version,
            version_source=self.version_source,
            hip_version=self.hip_version,
            package_version=self.package_version,
            therock_commit=self.therock_commit,
        )

    def render(self) -> str:
        """``key: value`` lines of :meth:`to_dict` (lists joined, folders by path)."""
        lines = []
        for key, value in self.to_dict().items():
            if isinstance(value, list):
                value = ", ".join(str(v) if not isinstance(v, dict) else v.get("path", str(v)) for v in value) or "-"
            lines.append(f"{key + ':':<18} {value if value is not None else '-'}")
        return "\n".join(lines)


class _Root:
    """Filesystem questions about paths under a root, following symlinks the way a process inside the root would."""

    def __init__(self, sysroot: Path | None) -> None:
        self.sysroot = sysroot

    def resolve(self, path: Path) -> Path | None:
        """``path`` with every symlink followed; absolute targets are taken relative to the sysroot. None on a loop."""
        if self.sysroot is None:
            try:
                return path.resolve()
            except (OSError, RuntimeError):
                return None
        return follow_in_root(path, self.sysroot)

    def is_file(self, path: Path) -> bool:
        real = self.resolve(path)
        return real is not None and real.is_file()

    def is_dir(self, path: Path) -> bool:
        real = self.resolve(path)
        return real is not None and real.is_dir()

    def children(self, path: Path) -> list[Path]:
        """Entries of a directory, named under ``path`` (not under its resolved location); [] when not a directory."""
        real = self.resolve(path)
        if real is None or not real.is_dir():
            return []
        return sorted(path / name for name in os.listdir(real))

    def first_file(self, *candidates: Path) -> Path | None:
        return next((c for c in candidates if self.is_file(c)), None)

    def first_dir(self, *candidates: Path) -> Path | None:
        return next((c for c in candidates if self.is_dir(c)), None)

    def read_text(self, path: Path) -> str | None:
        real = self.resolve(path)
        try:
            return real.read_text(encoding="utf-8", errors="replace") if real is not None and real.is_file() else None
        except OSError:
            return None


def _scan_kernel_dir(fs: _Root, component: str, path: Path) -> KernelData:
    real = fs.resolve(path)
    assert real is not None
    targets: set[str] = set()
    files = generic = 0
    for _dirpath, _dirnames, filenames in os.walk(real):
        for filename in filenames:
            files += 1
            target = kernel_file_target(filename)
            if target is None:
                generic += 1
            else:
                targets.add(target)
    return KernelData(component, path, tuple(sorted(targets, key=target_order)), files, generic)


def _hip_header_version(fs: _Root, include_dir: Path | None) -> str | None:
    if include_dir is None:
        return None
    text = fs.read_text(include_dir / "hip" / "hip_version.h")
    if text is None:
        return None
    parts = dict(_HIP_VERSION_RE.findall(text))
    if not {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        return None
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def _therock_manifest(fs: _Root, prefix: Path) -> dict[str, Any]:
    text = fs.read_text(prefix / "share" / "therock" / "therock_manifest.json")
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise LayoutError(
            f"{prefix / 'share/therock/therock_manifest.json'} is not valid JSON; re-extract the tarball"
        ) from None
    return data if isinstance(data, dict) else {}


def _version(
    fs: _Root, prefix: Path, include_dir: Path | None, manifest: dict[str, Any]
) -> tuple[str | None, str | None]:
    for key in ("rocm_version", "rocm_package_version"):
        if isinstance(manifest.get(key), str) and manifest[key].strip():
            return manifest[key].strip(), f"share/therock/therock_manifest.json:{key}"
    info = fs.read_text(prefix / ".info" / "version")
    if info and info.strip():
        return info.strip().splitlines()[0].strip(), ".info/version"
    hip = _hip_header_version(fs, include_dir)
    if hip:
        return hip, "include/hip/hip_version.h"
    return None, None


_HIP_RUNTIME_PACKAGE_RE = re.compile(r"libamdhip64-\d+")


def _dpkg_rocm_version(fs: _Root, sysroot: Path) -> tuple[str | None, str | None]:
    """The ROCm release of a Debian root, from the installed HIP runtime package (7.2.4-1~exp2 -> 7.2.4)."""
    status = fs.read_text(sysroot / "var" / "lib" / "dpkg" / "status") or ""
    for stanza in status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        package = fields.get("Package", "")
        if not _HIP_RUNTIME_PACKAGE_RE.fullmatch(package) or fields.get("Status") != "install ok installed":
            continue
        upstream = fields.get("Version", "").split(":", 1)[-1].rsplit("-", 1)[0]
        release = re.match(r"\d+\.\d+\.\d+", upstream)
        if release:
            return release.group(0), f"dpkg:{package}"
    return None, None


def _detect_rocm_tree(root: Path) -> RocmLayout | None:
    """A TheRock tree or an /opt/rocm install: the compiler is in ``lib/llvm/bin`` (older /opt/rocm: ``llvm/bin``)."""
    fs = _Root(None)
    llvm_dir = fs.first_dir(root / "lib" / "llvm", root / "llvm")
    if llvm_dir is None:
        return None
    platform: Os
    if fs.is_file(llvm_dir / "bin" / "clang.exe"):
        platform, exe = "windows", ".exe"
    elif fs.is_file(llvm_dir / "bin" / "clang"):
        platform, exe = "linux", ""
    else:
        raise LayoutError(
            f"{root} looks like a ROCm tree but has no clang in {llvm_dir / 'bin'}; is the extraction complete?"
        )
    clangxx = llvm_dir / "bin" / f"clang++{exe}"
    if not fs.is_file(clangxx):
        raise LayoutError(
            f"{root} has {llvm_dir / 'bin' / ('clang' + exe)} but no clang++{exe} next to it; re-extract the tarball"
        )

    manifest = _therock_manifest(fs, root)
    is_therock = bool(manifest) or fs.is_dir(root / "share" / "therock")
    kind = LayoutKind.THEROCK if is_therock else LayoutKind.OPT_ROCM
    include_dir = fs.first_dir(root / "include")
    version, version_source = _version(fs, root, include_dir, manifest)
    hipcc_names = ("hipcc.exe", "hipcc.bat", "hipcc") if platform == "windows" else ("hipcc",)
    hipcc = fs.first_file(*(root / "bin" / n for n in hipcc_names))
    device_lib_dir = fs.first_dir(llvm_dir / "amdgcn" / "bitcode", root / "amdgcn" / "bitcode")

    if platform == "windows":
        lib_candidates = [root / "bin", llvm_dir / "bin"]
        blas_base = root / "bin"
    else:
        lib_candidates = [root / "lib", root / "lib64", llvm_dir / "lib", root / "lib" / "rocm_sysdeps" / "lib"]
        blas_base = root / "lib"
    library_dirs = tuple(p for p in lib_candidates if fs.is_dir(p))
    kernel_data = []
    for component in ("rocblas", "hipblaslt"):
        path = blas_base / component / "library"
        if fs.is_dir(path):
            kernel_data.append(_scan_kernel_dir(fs, component, path))
    if fs.is_dir(root / ".kpack"):
        kernel_data.append(_scan_kernel_dir(fs, "kpack", root / ".kpack"))

    commit = manifest.get("the_rock_commit")
    package_version = manifest.get("rocm_package_version")
    return RocmLayout(
        root=root,
        kind=kind,
        platform=platform,
        prefix=root,
        sysroot=None,
        version=version,
        version_source=version_source,
        hip_version=_hip_header_version(fs, include_dir),
        package_version=package_version if isinstance(package_version, str) else None,
        therock_commit=commit if isinstance(commit, str) else None,
        llvm_dir=llvm_dir,
        clang=llvm_dir / "bin" / f"clang{exe}",
        clangxx=clangxx,
        hipcc=hipcc,
        device_lib_dir=device_lib_dir,
        include_dir=include_dir,
        library_dirs=library_dirs,
        kernel_data=tuple(kernel_data),
    )


def _llvm_major(path: Path) -> int:
    suffix = path.name.removeprefix("llvm-")
    return int(suffix) if suffix.isdigit() else -1


def _detect_debian(root: Path) -> RocmLayout | None:
    """Debian/Ubuntu packages: ``<prefix>/lib/<triplet>`` libraries, clang in ``<prefix>/lib/llvm-N/bin``."""
    if root.name == "usr":
        prefix, sysroot = root, root.parent
    elif (root / "usr" / "lib").is_dir() or (root / "usr").is_symlink():
        prefix, sysroot = root / "usr", root
    else:
        return None
    fs = _Root(None if sysroot == Path("/") else sysroot)
    triplet_dirs = [p for p in fs.children(prefix / "lib") if p.name.endswith("-linux-gnu") and fs.is_dir(p)]
    if not triplet_dirs:
        return None
    hip_libs = [d for d in triplet_dirs if any(c.name.startswith("libamdhip64.so") for c in fs.children(d))]
    include_dir = fs.first_dir(prefix / "include")
    has_hip_header = include_dir is not None and fs.is_file(include_dir / "hip" / "hip_version.h")
    if not hip_libs and not has_hip_header:
        raise LayoutError(
            f"{root} is a Debian-style root without HIP (no libamdhip64, no hip/hip_version.h); install libamdhip64-dev"
        )

    def bitcode_dir(llvm: Path) -> Path | None:
        for resource in reversed(fs.children(llvm / "lib" / "clang")):
            if fs.is_dir(resource / "amdgcn" / "bitcode"):
                return resource / "amdgcn" / "bitcode"
        return None

    llvms = [p for p in fs.children(prefix / "lib") if p.name.startswith("llvm-") and _llvm_major(p) >= 0]
    llvms = [p for p in llvms if fs.is_file(p / "bin" / "clang") and fs.is_file(p / "bin" / "clang++")]
    if not llvms:
        raise LayoutError(
            f"{root} has HIP but no clang in {prefix / 'lib' / 'llvm-N' / 'bin'}; install hipcc (it pulls clang-N)"
        )
    # The LLVM that has the AMD device libraries (rocm-device-libs-N) is the one HIP compiles with.
    llvm_dir = max(llvms, key=lambda p: (bitcode_dir(p) is not None, _llvm_major(p)))
    device_lib_dir = bitcode_dir(llvm_dir) or fs.first_dir(prefix / "lib" / "amdgcn" / "bitcode")

    triplet = hip_libs[0] if hip_libs else triplet_dirs[0]
    kernel_data = []
    for component in ("rocblas", "hipblaslt"):
        base = triplet / component
        # Debian puts rocBLAS data under its soversion (rocblas/5/library) and hipBLASLt's directly (hipblaslt/library).
        for path in [base / "library", *(c / "library" for c in fs.children(base) if c.name != "library")]:
            if fs.is_dir(path):
                kernel_data.append(_scan_kernel_dir(fs, component, path))

    version, version_source = _dpkg_rocm_version(fs, sysroot)
    if version is None:
        version, version_source = _version(fs, prefix, include_dir, {})
    return RocmLayout(
        root=root,
        kind=LayoutKind.DEBIAN,
        platform="linux",
        prefix=prefix,
        sysroot=sysroot if fs.sysroot is not None else None,
        version=version,
        version_source=version_source,
        hip_version=_hip_header_version(fs, include_dir),
        package_version=None,
        therock_commit=None,
        llvm_dir=llvm_dir,
        clang=llvm_dir / "bin" / "clang",
        clangxx=llvm_dir / "bin" / "clang++",
        hipcc=fs.first_file(prefix / "bin" / "hipcc"),
        device_lib_dir=device_lib_dir,
        include_dir=include_dir,
        library_dirs=tuple(p for p in (triplet, llvm_dir / "lib") if fs.is_dir(p)),
        kernel_data=tuple(kernel_data),
    )


def detect_layout(root: Path) -> RocmLayout:
    """The layout of the ROCm root at ``root``; LayoutError when it is not one or has no compiler."""
    root = Path(root).absolute()
    if not root.is_dir():
        raise LayoutError(f"ROCm root {root} does not exist or is not a directory")
    layout = _detect_rocm_tree(root) or _detect_debian(root)
    if layout is None:
        raise LayoutError(
            f"{root} is not a ROCm root (expected lib/llvm/bin/clang, or a Debian usr/ with lib/llvm-N and HIP)"
        )
    return layout
