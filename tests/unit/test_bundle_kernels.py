"""Kernel data pruned to the job's targets, on trees with TheRock's and Debian's real file-name patterns
(bundling.md 4), landing where the libraries look for it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.bundles import cc, make_bundle, run_clean, tree_files

from rockbuild.bundle.kernels import plan_kernel_data, prune_kernel_folder
from rockbuild.bundle.policy import load_policy
from rockbuild.core.records import FileCount, KernelsRecord
from rockbuild.rocm.layout import KernelData, detect_layout

# name -> size; the target is the last gfx token, files without one serve every target
ROCBLAS = {
    "TensileLibrary_lazy_gfx1151.dat": 11,
    "TensileLibrary_lazy_gfx1100.dat": 13,
    "TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_gfx1151.co": 101,
    "TensileLibrary_Type_HH_HPA_Contraction_l_Ailk_Bljk_Cijk_Dijk_gfx1151.dat": 103,
    "TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_CU104_gfx90a.dat": 107,
    "TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback_gfx90a-xnack+.hsaco": 109,
    "TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback_gfx90a-xnack-.hsaco": 113,
    "TensileLibrary_Type_DD_Contraction_l_Alik_Bljk_Cijk_Dijk_fallback_gfx1151.hsaco": 127,
    "Kernels.so-000-gfx1151.hsaco": 131,
    "Kernels.so-000-gfx1100.hsaco": 137,
    "TensileLibrary_Type_ZZ_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat": 139,
    "TensileLibrary_Type_CC_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat": 149,
}
HIPBLASLT = {
    "TensileLibrary_lazy_gfx1151.dat": 3,
    "TensileLibrary_lazy_gfx1200.dat": 5,
    "extop_gfx1151.co": 7,
    "extop_gfx1200.co": 11,
    "TensileLibrary_HH_HH_HA_Bias_SAB_SCD_SAV_UA_Type_HH_HPA_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1151.co": 13,
    "TensileLiteLibrary_lazy_Mapping.dat": 17,
    "hipblasltExtOpLibrary.dat": 19,
    "hipblasltTransform.hsaco": 23,
}
KPACK = {"blas_lib_gfx1151.kpack": 29, "blas_lib_gfx1100.kpack": 31, "blas_lib.kpm": 37, "fft_lib.kpm": 41}


def fill(folder: Path, files: dict[str, int]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, size in files.items():
        (folder / name).write_bytes(b"x" * size)
    return folder


def test_prune_keeps_the_target_and_generic_files(tmp_path):
    folder, copies = prune_kernel_folder("rocblas", fill(tmp_path / "library", ROCBLAS), "rocblas/library", ["gfx1151"])
    kept = sorted(dest.rsplit("/", 1)[1] for _, dest in copies)
    assert kept == sorted(n for n in ROCBLAS if "gfx1151" in n or n.endswith("_fallback.dat"))
    assert (folder.files_kept, folder.files_dropped, folder.generic_files) == (7, 5, 2)
    assert folder.bytes_kept == 11 + 101 + 103 + 127 + 131 + 139 + 149
    assert folder.bytes_dropped == sum(ROCBLAS.values()) - folder.bytes_kept
    assert folder.per_target == {"gfx1151": FileCount(5, 11 + 101 + 103 + 127 + 131)}
    assert all(dest.startswith("rocblas/library/") for _, dest in copies)


def test_xnack_variants_belong_to_their_base_target(tmp_path):
    folder, _ = prune_kernel_folder("rocblas", fill(tmp_path / "library", ROCBLAS), "rocblas/library", ["gfx90a"])
    assert folder.per_target == {"gfx90a": FileCount(3, 107 + 109 + 113)}


def test_a_token_never_matches_a_longer_target(tmp_path):
    # gfx110 is a prefix of gfx1100's token but not the same target
    folder, _ = prune_kernel_folder("rocblas", fill(tmp_path / "library", ROCBLAS), "rocblas/library", ["gfx110"])
    assert folder.per_target == {} and folder.files_kept == 2  # the generic fallbacks only


def test_subfolders_keep_their_relative_paths(tmp_path):
    source = fill(tmp_path / "library", {"a_gfx1151.dat": 1})
    fill(source / "sub" / "deeper", {"b_gfx1151.co": 1, "c_gfx1100.co": 1})
    _, copies = prune_kernel_folder("hipblaslt", source, "hipblaslt/library", ["gfx1151"])
    assert sorted(d for _, d in copies) == [
        "hipblaslt/library/a_gfx1151.dat",
        "hipblaslt/library/sub/deeper/b_gfx1151.co",
    ]


def test_therock_layout_folders_used_by_shipped_libraries(tmp_path):
    data = [
        KernelData("rocblas", fill(tmp_path / "lib/rocblas/library", ROCBLAS), ("gfx1100", "gfx1151"), 12, 2),
        KernelData("hipblaslt", fill(tmp_path / "lib/hipblaslt/library", HIPBLASLT), ("gfx1151", "gfx1200"), 8, 3),
        KernelData("kpack", fill(tmp_path / ".kpack", KPACK), ("gfx1100", "gfx1151"), 4, 2),
    ]
    shipped = ["llama-server", "librocblas.so.5", "libhipblaslt.so.1", "librocm_kpack.so.1"]
    report, copies = plan_kernel_data(data, shipped, ["gfx1151"], load_policy().linux)
    assert not report.errors and len(copies) == 7 + 6 + 3
    dests = {f.component: f for f in report.folders}
    assert {c: f.dest for c, f in dests.items()} == {
        "rocblas": "rocblas/library",
        "hipblaslt": "hipblaslt/library",
        "kpack": ".kpack",
    }
    assert (dests["hipblaslt"].files_kept, dests["hipblaslt"].generic_files) == (6, 3)
    assert (dests["kpack"].files_kept, dests["kpack"].files_dropped) == (3, 1)
    summary = report.to_dict()
    assert summary["kept"]["files"] == 7 + 6 + 3 and summary["dropped"]["files"] == 5 + 2 + 1
    # bundle.json's totals are the folders' sums, derived: a file's own numbers are not trusted on reading
    assert KernelsRecord.from_dict({**summary, "kept": {"files": 1, "bytes": 1}}) == report
    assert KernelsRecord.from_dict(summary).kept == FileCount(7 + 6 + 3, report.kept.bytes)


def test_folder_of_a_library_that_does_not_ship_is_skipped(tmp_path):
    data = [KernelData("hipblaslt", fill(tmp_path / "hipblaslt/library", HIPBLASLT), ("gfx1151",), 8, 3)]
    report, _ = plan_kernel_data(data, ["librocblas.so.5"], ["gfx1151"], load_policy().linux)
    assert report.folders == () and "no shipped library uses it" in report.skipped[0]


def test_a_target_without_files_is_an_error(tmp_path):
    data = [KernelData("rocblas", fill(tmp_path / "rocblas/library", ROCBLAS), ("gfx1100", "gfx1151"), 12, 2)]
    report, _ = plan_kernel_data(data, ["librocblas.so.5"], ["gfx1151", "gfx1201"], load_policy().linux)
    assert len(report.errors) == 1
    assert report.errors[0].startswith("rocblas kernel data at ") and "has no files for gfx1201" in report.errors[0]


def test_the_shipped_soversions_folder_is_preferred(tmp_path):
    data = [
        KernelData("rocblas", fill(tmp_path / "rocblas/4/library", {"old_gfx1151.dat": 1}), ("gfx1151",), 1, 0),
        KernelData("rocblas", fill(tmp_path / "rocblas/5/library", {"new_gfx1151.dat": 1}), ("gfx1151",), 1, 0),
    ]
    _, copies = plan_kernel_data(data, ["librocblas.so.5"], ["gfx1151"], load_policy().linux)
    assert [d for _, d in copies] == ["rocblas/library/new_gfx1151.dat"]


def test_debian_root_bundle_lands_rocblas_5_library_as_rocblas_library(tmp_path):
    """A Debian-style chroot: absolute symlinks inside the root, data in rocblas/5/library (bundling.md 4)."""
    root = tmp_path / "root"
    usr = root / "usr"
    libdir = usr / "lib" / "x86_64-linux-gnu"
    for tool in ("clang", "clang++"):
        path = usr / "lib" / "llvm-22" / "bin" / tool
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    hip = cc(
        libdir / "libamdhip64.so.7.2.53211", "int hip_value(void){return 42;}", shared=True, soname="libamdhip64.so.7"
    )
    (libdir / "libamdhip64.so.7").symlink_to("/usr/lib/x86_64-linux-gnu/libamdhip64.so.7.2.53211")
    comgr = cc(libdir / "libamd_comgr.so.3.0.0", "int c(void){return 1;}", shared=True, soname="libamd_comgr.so.3")
    (libdir / "libamd_comgr.so.3").symlink_to(comgr.name)
    blas = cc(libdir / "librocblas.so.5.2", "int blas_value(void){return 5;}", shared=True, soname="librocblas.so.5")
    (libdir / "librocblas.so.5").symlink_to(blas.name)
    fill(libdir / "rocblas" / "5" / "library", ROCBLAS)
    fill(libdir / "hipblaslt" / "library", HIPBLASLT)
    build = root / "build" / "bin"
    # the build ran inside the chroot: its RUNPATH names the chroot's paths
    cc(
        build / "llama-cli",
        "#include <stdio.h>\nint hip_value(void);int blas_value(void);\n"
        'int main(void){printf("%d\\n", hip_value()+blas_value());return 0;}',
        libs=(hip, blas),
        runpath=("/build/bin", "/usr/lib/x86_64-linux-gnu"),
    )
    layout = detect_layout(root)
    assert str(layout.kind) == "debian" and layout.sysroot == root
    out = tmp_path / "bundle"
    report = make_bundle(root / "build", layout, ["gfx1151"], out)
    assert tree_files(out) == sorted(
        ["bundle.json", "llama-cli", "libamd_comgr.so.3", "libamdhip64.so.7", "librocblas.so.5"]
        + [f"rocblas/library/{n}" for n in ROCBLAS if "gfx1151" in n or n.endswith("_fallback.dat")]
    )
    assert "hipblaslt" not in {f.component for f in report.plan.kernels.folders}  # Debian's rocBLAS never loads it
    assert report.audit.check("code-objects").warnings  # no libggml-hip in this build
    assert report.audit.ok, report.audit.failures
    assert run_clean(out / "llama-cli").stdout == "47\n"


@pytest.mark.skipif(
    not (Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e")) / "rocm-root").is_dir(),
    reason="the Debian ROCm root is absent (tests/e2e/provision.sh makes it)",
)
def test_real_debian_rocblas_folder_for_gfx1151():
    layout = detect_layout(Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e")) / "rocm-root")
    report, _ = plan_kernel_data(
        layout.kernel_data, ["librocblas.so.5"], ["gfx1151"], load_policy().linux, sysroot=layout.sysroot
    )
    (folder,) = report.folders
    # bundling.md 4: 96 gfx1151 files + 54 fallbacks = 150 files, 21,505,425 bytes, from rocblas/5/library
    assert folder.source.parts[-3:] == ("rocblas", "5", "library") and folder.dest == "rocblas/library"
    assert (folder.files_kept, folder.bytes_kept, folder.generic_files) == (150, 21_505_425, 54)
    assert folder.files_kept + folder.files_dropped == 1897


def test_kpack_covers_targets_missing_from_the_database_folders(tmp_path):
    # TheRock multi-arch: rocblas/library keeps generic files only, the per-target kernels are in .kpack archives
    data = [
        KernelData(
            "rocblas", fill(tmp_path / "lib/rocblas/library", {"TensileLibrary_Type_ZZ_fallback.dat": 1}), (), 1, 1
        ),
        KernelData("kpack", fill(tmp_path / ".kpack", KPACK), ("gfx1100", "gfx1151"), 4, 2),
    ]
    policy = load_policy().linux
    assert not plan_kernel_data(data, ["librocblas.so.5", "librocm_kpack.so.1"], ["gfx1151"], policy)[0].errors
    report, _ = plan_kernel_data(data, ["librocblas.so.5", "librocm_kpack.so.1"], ["gfx1201"], policy)
    assert len(report.errors) == 2  # neither the database folder nor the packs have gfx1201
