"""ROCm root layout detection: TheRock trees (Linux, Windows), /opt/rocm, a Debian chroot, and the real Debian root."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.files import touch

from rockbuild.core.errors import LayoutError
from rockbuild.rocm.layout import LayoutKind, detect_layout, kernel_file_target

REAL_ROCM_ROOT = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e")) / "rocm-root"
REAL_CLEAN_ROOT = REAL_ROCM_ROOT.parent / "clean-root"

HIP_VERSION_H = """\
#ifndef HIP_VERSION_H
#define HIP_VERSION_H
#define HIP_VERSION_MAJOR {major}
#define HIP_VERSION_MINOR {minor}
#define HIP_VERSION_PATCH {patch}
#define HIP_VERSION_GITHASH ""
#endif
"""


def link(path: Path, target: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def make_kernels(directory: Path, *names: str) -> None:
    for name in names:
        touch(directory / name)


# ------------------------------------------------------------------------------------------------ target tokens


@pytest.mark.parametrize(
    ("filename", "target"),
    [
        ("TensileLibrary_lazy_gfx1151.dat", "gfx1151"),
        ("Kernels.so-000-gfx1100.hsaco", "gfx1100"),
        ("TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_gfx90a-xnack+.co", "gfx90a"),
        ("Kernels.so-000-gfx942-xnack-.hsaco", "gfx942"),
        ("TensileLibrary_Type_ZZ_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat", None),
        ("hipblasltTransform.hsaco", None),
        ("blas_lib_gfx1151.kpack", "gfx1151"),
        ("blas_lib.kpm", None),
        # The LAST token decides (a name mentioning two targets serves the second).
        ("TensileLibrary_gfx1100_lazy_gfx1151.dat", "gfx1151"),
        # A token must end at '.', '_' or '-': "gfx1151x" or a bare trailing "gfx1151" is not one.
        ("notes_gfx1151", None),
    ],
)
def test_kernel_file_target(filename, target):
    assert kernel_file_target(filename) == target


# ------------------------------------------------------------------------------------------------ TheRock trees


def make_therock_linux(root: Path) -> Path:
    touch(root / ".info" / "version", "10.2.0\n")
    manifest = {
        "the_rock_commit": "89553ce3a5a4c5b8d0e1f2a3b4c5d6e7f8091a2b",
        "rocm_version": "10.2.0",
        "rocm_package_version": "10.2.0a20260915",
        "flags": {"KPACK_SPLIT_ARTIFACTS": True},
        "submodules": [],
    }
    touch(root / "share" / "therock" / "therock_manifest.json", json.dumps(manifest))
    touch(root / "lib" / "llvm" / "bin" / "clang", "#!/bin/sh\n", 0o755)
    link(root / "lib" / "llvm" / "bin" / "clang++", "clang")
    touch(root / "lib" / "llvm" / "bin" / "rocm.cfg", "--rocm-path='<CFGDIR>/../../..'\n")
    link(root / "llvm", "lib/llvm")
    link(root / "bin" / "amdclang", "../lib/llvm/bin/clang")
    touch(root / "bin" / "hipcc", "#!/bin/sh\n", 0o755)
    touch(root / "lib" / "llvm" / "amdgcn" / "bitcode" / "ocml.bc")
    touch(root / "include" / "hip" / "hip_version.h", HIP_VERSION_H.format(major=10, minor=2, patch=41234))
    touch(root / "lib" / "libamdhip64.so.7.2.0")
    touch(root / "lib" / "rocm_sysdeps" / "lib" / "librocm_sysdeps_elf.so.1")
    touch(root / "lib" / "llvm" / "lib" / "libLLVM.so.22")
    make_kernels(
        root / "lib" / "rocblas" / "library",
        "TensileLibrary_lazy_gfx1151.dat",
        "Kernels.so-000-gfx1151.hsaco",
        "TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat",
    )
    make_kernels(root / "lib" / "hipblaslt" / "library", "TensileLibrary_lazy_gfx1151.dat", "hipblasltTransform.hsaco")
    make_kernels(root / ".kpack", "blas_lib_gfx1151.kpack", "blas_lib_gfx1150.kpack", "blas_lib.kpm")
    return root


def test_therock_linux_tree(tmp_path):
    root = make_therock_linux(tmp_path / "therock")
    layout = detect_layout(root)
    assert (layout.kind, layout.platform, layout.prefix, layout.sysroot) == (LayoutKind.THEROCK, "linux", root, None)
    assert (layout.version, layout.package_version, layout.hip_version) == ("10.2.0", "10.2.0a20260915", "10.2.41234")
    assert layout.version_source == "share/therock/therock_manifest.json:rocm_version"
    assert layout.therock_commit == "89553ce3a5a4c5b8d0e1f2a3b4c5d6e7f8091a2b"
    assert layout.clang == root / "lib/llvm/bin/clang"
    assert layout.clangxx == root / "lib/llvm/bin/clang++"
    assert layout.hipcc == root / "bin/hipcc"
    assert layout.device_lib_dir == root / "lib/llvm/amdgcn/bitcode"
    assert layout.library_dirs == (root / "lib", root / "lib/llvm/lib", root / "lib/rocm_sysdeps/lib")
    assert layout.kernel_dirs == (root / "lib/rocblas/library", root / "lib/hipblaslt/library", root / ".kpack")
    assert layout.targets_of("rocblas") == ("gfx1151",)
    assert layout.targets_of("kpack") == ("gfx1150", "gfx1151")
    rocblas = layout.kernel_data[0]
    assert (rocblas.files, rocblas.generic_files) == (3, 1)
    assert layout.gfx_targets == ("gfx1150", "gfx1151")
    assert layout.in_root(layout.clang).as_posix() == str(root / "lib/llvm/bin/clang")
    data = json.loads(json.dumps(layout.to_dict()))
    assert data["kind"] == "therock" and data["kernel_data"][2]["component"] == "kpack"


def test_therock_version_falls_back_to_info_then_hip_header(tmp_path):
    root = make_therock_linux(tmp_path / "therock")
    (root / "share/therock/therock_manifest.json").write_text('{"the_rock_commit": "abc"}', encoding="utf-8")
    layout = detect_layout(root)
    assert (layout.version, layout.version_source, layout.package_version) == ("10.2.0", ".info/version", None)
    (root / ".info/version").unlink()
    layout = detect_layout(root)
    assert (layout.version, layout.version_source) == ("10.2.41234", "include/hip/hip_version.h")


def test_therock_windows_tree(tmp_path):
    root = tmp_path / "therock-win"
    touch(root / ".info" / "version", "10.2.0\n")
    touch(root / "share" / "therock" / "therock_manifest.json", json.dumps({"the_rock_commit": "deadbeef"}))
    touch(root / "lib" / "llvm" / "bin" / "clang.exe")
    touch(root / "lib" / "llvm" / "bin" / "clang++.exe")
    touch(root / "lib" / "llvm" / "amdgcn" / "bitcode" / "ocml.bc")
    touch(root / "bin" / "hipcc.exe")
    touch(root / "bin" / "amdhip64_7.dll")
    touch(root / "bin" / "amd_comgr0713.dll")
    make_kernels(
        root / "bin" / "rocblas" / "library", "TensileLibrary_lazy_gfx1151.dat", "Kernels.so-000-gfx1151.hsaco"
    )
    make_kernels(root / "bin" / "hipblaslt" / "library", "TensileLibrary_lazy_gfx1100.dat")
    layout = detect_layout(root)
    assert (layout.kind, layout.platform, layout.version) == (LayoutKind.THEROCK, "windows", "10.2.0")
    assert layout.clang == root / "lib/llvm/bin/clang.exe"
    assert layout.clangxx == root / "lib/llvm/bin/clang++.exe"
    assert layout.hipcc == root / "bin/hipcc.exe"
    assert root / "bin" in layout.library_dirs
    assert layout.kernel_dirs == (root / "bin/rocblas/library", root / "bin/hipblaslt/library")
    assert layout.gfx_targets == ("gfx1100", "gfx1151")
    assert layout.therock_commit == "deadbeef"


def test_opt_rocm_install_through_its_version_symlink(tmp_path):
    real = tmp_path / "opt" / "rocm-6.4.1"
    touch(real / ".info" / "version", "6.4.1-83\n")
    touch(real / "lib" / "llvm" / "bin" / "clang", "#!/bin/sh\n", 0o755)
    link(real / "lib" / "llvm" / "bin" / "clang++", "clang")
    link(real / "llvm", "lib/llvm")
    touch(real / "lib" / "llvm" / "amdgcn" / "bitcode" / "ockl.bc")
    touch(real / "bin" / "hipcc", "#!/bin/sh\n", 0o755)
    touch(real / "include" / "hip" / "hip_version.h", HIP_VERSION_H.format(major=6, minor=4, patch=43483))
    make_kernels(real / "lib" / "rocblas" / "library", "TensileLibrary_lazy_gfx1100.dat", "TensileLibrary_gfx90a.co")
    rocm = link(tmp_path / "opt" / "rocm", "rocm-6.4.1")
    layout = detect_layout(rocm)
    assert (layout.kind, layout.version, layout.version_source) == (LayoutKind.OPT_ROCM, "6.4.1-83", ".info/version")
    assert layout.root == rocm and layout.clang == rocm / "lib/llvm/bin/clang"
    assert layout.targets_of("rocblas") == ("gfx90a", "gfx1100")
    assert layout.therock_commit is None


# ------------------------------------------------------------------------------------------------ Debian


DPKG_STATUS = """\
Package: libamdhip64-6
Status: deinstall ok config-files
Architecture: amd64
Version: 6.4.0-1

Package: libamdhip64-7
Status: install ok installed
Priority: optional
Source: rocm-hipamd
Version: 7.2.4-1~exp2
Depends: libamd-comgr3 (>= 7.2.0~)
Description: HIP runtime for AMD GPUs - library
 The libamdhip64 library provides the implementation
 Version: 9.9.9 (a description line, not a field)

Package: hipcc
Status: install ok installed
Version: 7.2.4+dfsg-1~exp1
"""


def make_debian_root(root: Path) -> Path:
    """A Debian sid chroot as packages lay it out, with ABSOLUTE symlinks that only make sense inside the root."""
    usr = root / "usr"
    link(root / "lib", "usr/lib")  # merged /usr
    link(root / "bin", "usr/bin")
    touch(root / "var" / "lib" / "dpkg" / "status", DPKG_STATUS)
    triplet = usr / "lib" / "x86_64-linux-gnu"
    touch(triplet / "libamdhip64.so.7.2.53211")
    link(triplet / "libamdhip64.so.7", "libamdhip64.so.7.2.53211")
    touch(usr / "include" / "hip" / "hip_version.h", HIP_VERSION_H.format(major=7, minor=2, patch=53211))
    # llvm-22: the real clang is clang-22's target; clang/clang++ are absolute links into the root.
    touch(usr / "lib" / "llvm-22" / "bin" / "clang-22.real", "#!/bin/sh\n", 0o755)
    link(usr / "lib" / "llvm-22" / "bin" / "clang", "/usr/lib/llvm-22/bin/clang-22.real")
    link(usr / "lib" / "llvm-22" / "bin" / "clang++", "/usr/lib/llvm-22/bin/clang")
    link(usr / "bin" / "clang-22", "/usr/lib/llvm-22/bin/clang")
    # The resource dir is an absolute link to /usr/lib/clang/22, where rocm-device-libs-22 put the bitcode.
    touch(usr / "lib" / "clang" / "22" / "amdgcn" / "bitcode" / "ocml.bc")
    link(usr / "lib" / "llvm-22" / "lib" / "clang" / "22", "/usr/lib/clang/22")
    touch(usr / "lib" / "llvm-22" / "lib" / "libLLVM.so.22.1")
    # llvm-21: clang points at /usr/bin/env, which exists on the HOST but not in the root: it must not count.
    link(usr / "lib" / "llvm-21" / "bin" / "clang", "/usr/bin/env")
    link(usr / "lib" / "llvm-21" / "bin" / "clang++", "/usr/bin/env")
    # llvm-23: a newer clang without AMD device libraries: HIP does not compile with it.
    touch(usr / "lib" / "llvm-23" / "bin" / "clang", "#!/bin/sh\n", 0o755)
    link(usr / "lib" / "llvm-23" / "bin" / "clang++", "clang")
    # hipcc through a relative link that climbs above the root: it must stay inside (like the kernel does).
    touch(usr / "share" / "hipcc" / "hipcc.bin", "#!/bin/sh\n", 0o755)
    link(usr / "bin" / "hipcc", "../../../../../../../../usr/share/hipcc/hipcc.bin")
    make_kernels(
        triplet / "rocblas" / "5" / "library",
        "TensileLibrary_lazy_gfx1151.dat",
        "TensileLibrary_lazy_gfx1100.dat",
        "Kernels.so-000-gfx90a-xnack+.hsaco",
        "TensileLibrary_Type_ZZ_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat",
    )
    make_kernels(triplet / "hipblaslt" / "library", "TensileLibrary_lazy_gfx1151.dat", "hipblasltExtOpLibrary.dat")
    return root


def test_debian_chroot_resolves_absolute_links_inside_the_root(tmp_path):
    root = make_debian_root(tmp_path / "sid")
    layout = detect_layout(root)
    usr = root / "usr"
    assert (layout.kind, layout.platform, layout.prefix, layout.sysroot) == (LayoutKind.DEBIAN, "linux", usr, root)
    assert (layout.version, layout.version_source, layout.hip_version) == ("7.2.4", "dpkg:libamdhip64-7", "7.2.53211")
    assert layout.llvm_dir == usr / "lib/llvm-22"
    assert layout.clang == usr / "lib/llvm-22/bin/clang"
    assert layout.clangxx == usr / "lib/llvm-22/bin/clang++"
    # On the host these are dangling absolute links; inside the root they are the compiler.
    assert not layout.clang.exists()
    assert str(layout.in_root(layout.clang)) == "/usr/lib/llvm-22/bin/clang"
    assert layout.hipcc == usr / "bin/hipcc"
    assert layout.device_lib_dir == usr / "lib/llvm-22/lib/clang/22/amdgcn/bitcode"
    assert layout.library_dirs == (usr / "lib/x86_64-linux-gnu", usr / "lib/llvm-22/lib")
    assert layout.kernel_dirs == (
        usr / "lib/x86_64-linux-gnu/rocblas/5/library",
        usr / "lib/x86_64-linux-gnu/hipblaslt/library",
    )
    assert layout.targets_of("rocblas") == ("gfx90a", "gfx1100", "gfx1151")
    assert layout.targets_of("hipblaslt") == ("gfx1151",)
    assert layout.kernel_data[0].generic_files == 1


def test_debian_usr_as_root(tmp_path):
    root = make_debian_root(tmp_path / "sid")
    layout = detect_layout(root / "usr")
    assert (layout.prefix, layout.sysroot, layout.llvm_dir) == (root / "usr", root, root / "usr/lib/llvm-22")
    assert str(layout.in_root(layout.device_lib_dir)) == "/usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode"


def test_debian_version_from_hip_header_without_dpkg(tmp_path):
    root = make_debian_root(tmp_path / "sid")
    (root / "var/lib/dpkg/status").unlink()
    layout = detect_layout(root)
    assert (layout.version, layout.version_source) == ("7.2.53211", "include/hip/hip_version.h")


def test_symlink_loop_in_a_chroot_is_not_a_compiler(tmp_path):
    root = make_debian_root(tmp_path / "sid")
    for name in ("clang", "clang++"):
        (root / "usr/lib/llvm-22/bin" / name).unlink()
    link(root / "usr/lib/llvm-22/bin/clang", "/usr/lib/llvm-22/bin/clang++")
    link(root / "usr/lib/llvm-22/bin/clang++", "/usr/lib/llvm-22/bin/clang")
    # llvm-22 is now unusable; llvm-23 (no device libraries) is the only clang left.
    layout = detect_layout(root)
    assert layout.llvm_dir == root / "usr/lib/llvm-23" and layout.device_lib_dir is None


# ------------------------------------------------------------------------------------------------ errors


def test_not_a_rocm_root(tmp_path):
    with pytest.raises(LayoutError, match="is not a ROCm root"):
        detect_layout(tmp_path)
    with pytest.raises(LayoutError, match="does not exist"):
        detect_layout(tmp_path / "nope")


def test_therock_tree_without_compiler(tmp_path):
    root = make_therock_linux(tmp_path / "therock")
    (root / "lib/llvm/bin/clang++").unlink()
    with pytest.raises(LayoutError, match="no clang\\+\\+ next to it"):
        detect_layout(root)
    (root / "lib/llvm/bin/clang").unlink()
    with pytest.raises(LayoutError, match="has no clang in") as info:
        detect_layout(root)
    assert "\n" not in str(info.value)


def test_debian_root_without_hip_or_without_clang(tmp_path):
    root = make_debian_root(tmp_path / "sid")
    for llvm in ("llvm-21", "llvm-22", "llvm-23"):
        for name in ("clang", "clang++"):
            (root / "usr/lib" / llvm / "bin" / name).unlink()
    with pytest.raises(LayoutError, match="has HIP but no clang"):
        detect_layout(root)
    for p in (root / "usr/include/hip/hip_version.h", *root.glob("usr/lib/x86_64-linux-gnu/libamdhip64*")):
        p.unlink()
    with pytest.raises(LayoutError, match="without HIP"):
        detect_layout(root)


# ------------------------------------------------------------------------------------------------ the real root


def test_real_debian_rocm_root():
    if not (REAL_ROCM_ROOT / "usr").is_dir():
        pytest.skip(f"no Debian ROCm root at {REAL_ROCM_ROOT}; create it with tests/e2e/provision.sh (as root)")
    layout = detect_layout(REAL_ROCM_ROOT)
    assert layout.kind is LayoutKind.DEBIAN
    assert layout.version is not None and layout.version.startswith("7.2."), layout.version
    assert layout.hip_version is not None and layout.hip_version.startswith("7.2.")
    assert str(layout.in_root(layout.clang)) == "/usr/lib/llvm-22/bin/clang"
    assert str(layout.in_root(layout.clangxx)) == "/usr/lib/llvm-22/bin/clang++"
    assert layout.hipcc is not None
    assert layout.device_lib_dir is not None
    assert (layout.device_lib_dir / "ocml.bc").is_file()
    rocblas = layout.targets_of("rocblas")
    assert {"gfx1151", "gfx1100"} <= set(rocblas), rocblas
    assert "gfx1151" in layout.targets_of("hipblaslt")
    assert layout.kernel_dirs[0] == REAL_ROCM_ROOT / "usr/lib/x86_64-linux-gnu/rocblas/5/library"


def test_real_clean_root_is_not_a_rocm_root():
    if not (REAL_CLEAN_ROOT / "usr").is_dir():
        pytest.skip(f"no clean root at {REAL_CLEAN_ROOT}; create it with tests/e2e/provision.sh (as root)")
    with pytest.raises(LayoutError, match="without HIP"):
        detect_layout(REAL_CLEAN_ROOT)
