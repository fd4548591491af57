"""A multi-arch TheRock-like tree for the bundle tests (test_mixed, test_bundle_kpack): support.bundles' tree with a
rocBLAS for four targets of two families and a ``.kpack/`` of kernel packs, and the policy that ships them."""

from __future__ import annotations

from pathlib import Path

from support.bundles import cc, ccob, fatbin_source, make_tree, offload_bundle
from support.offload import LIBDIR, fake_offload_bundler, real_offload_bundler

MIXED = ("gfx1151", "gfx1201")
FOUR = ["gfx1100", "gfx1151", "gfx1200", "gfx1201"]

POLICY = """
format: 1
linux:
  rpath: RPATH
  never_ship:
    - names: [ld-linux*.so*, libc.so.6, libm.so.6, libdl.so.2, libpthread.so.0, libgcc_s.so.1]
      reason: glibc and the compiler runtime come from the host
  extras:
    - names: [libamd_comgr.so.*]
      when: [libamdhip64.so*]
      required: true
      reason: dlopen'ed by the HIP runtime
    - names: [librocm_kpack.so*]
      when: [libamdhip64.so*]
      required: true
      reason: the kernel-pack loader
  kernel_data:
    rocblas:
      dest: rocblas/library
      used_by: [librocblas.so*]
      reason: beside librocblas
    kpack:
      dest: .kpack
      used_by: [librocm_kpack.so*]
      reason: multi-arch kernel packs
windows: {}
"""


def kpack_tree(base: Path) -> dict:
    """make_tree's TheRock-like tree turned multi-arch: a rocBLAS fat binary and kernel files for four targets of two
    families, a ``.kpack/`` with an archive per target and a generic manifest, and librocm_kpack."""
    tree = make_tree(base, fatbin_targets=MIXED)
    lib = tree["lib"]
    blas_fat = fatbin_source([ccob(offload_bundle(FOUR, payload=3000)), offload_bundle(FOUR, payload=5000)])
    (lib / "librocblas.so.5.0").unlink()
    cc(lib / "librocblas.so.5.0", blas_fat + "int blas_value(void){return 5;}", shared=True, soname="librocblas.so.5")
    for target in ("gfx1200", "gfx1201"):
        (lib / "rocblas" / "library" / f"TensileLibrary_lazy_{target}.dat").write_bytes(b"k" * 100)
    kpack = tree["rocm"] / ".kpack"
    kpack.mkdir()
    for target in FOUR:
        (kpack / f"blas_lib_{target}.kpack").write_bytes(target.encode() * 50)
    (kpack / "blas_lib.kpm").write_bytes(b"manifest")
    cc(lib / "librocm_kpack.so.1", "int kpack_value(void){return 2;}", shared=True, soname="librocm_kpack.so.1")
    return tree


def offload_tool(bindir: Path) -> None:
    """The e2e root's clang-offload-bundler when this machine has it, else the test stand-in."""
    if (LIBDIR.parent.parent / "lib" / "llvm-22" / "bin" / "clang-offload-bundler").exists():
        real_offload_bundler(bindir)
    else:
        fake_offload_bundler(bindir)
