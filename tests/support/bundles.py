"""Helpers for the bundle tests: real ELF files made with gcc, offload bundles, a ROCm-like tree.

Every file is built by the test session itself: small C sources compiled with the host's gcc, so the loader can run
them and tell whether a closure computed from the files is right.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rockbuild.backends import REGISTRY
from rockbuild.bundle.plan import BundleReport, BundleRequest, bundle
from rockbuild.bundle.policy import BundlePolicy, load_policy
from rockbuild.rocm.layout import RocmLayout

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def need_tool(name: str, package: str) -> str:
    """The tool's path, or skip the test saying which package is missing (never a silent pass)."""
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (apt-get install {package})")
    return found


def cc(
    out: Path,
    source: str,
    *,
    shared: bool = False,
    soname: str | None = None,
    libs: tuple[Path, ...] = (),
    rpath: tuple[str, ...] = (),
    runpath: tuple[str, ...] = (),
    flags: tuple[str, ...] = (),
) -> Path:
    """Compile one C source to ``out`` with gcc; DT_RPATH from ``rpath``, DT_RUNPATH from ``runpath``."""
    gcc = need_tool("gcc", "gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_name(out.name + ".c")
    src.write_text(source, encoding="utf-8")
    args = [gcc, "-O1", "-o", str(out), str(src), "-fPIC"]
    if shared:
        args.append("-shared")
    else:
        args.append("-Wl,--allow-shlib-undefined")
    if soname:
        args.append(f"-Wl,-soname,{soname}")
    if rpath:
        args.append("-Wl,--disable-new-dtags,-rpath," + ":".join(rpath))
    if runpath:
        args.append("-Wl,--enable-new-dtags,-rpath," + ":".join(runpath))
    args += [str(lib) for lib in libs]
    args += list(flags)
    subprocess.run(args, check=True, capture_output=True, text=True)
    src.unlink()
    return out


def symlink_chain(real: Path, *names: str) -> None:
    """libX.so -> libX.so.1 -> libX.so.1.2.3 style: each name points at the previous one (the first at ``real``)."""
    target = real.name
    for name in names:
        link = real.with_name(name)
        link.symlink_to(target)
        target = name


def run_clean(exe: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a program with an empty environment (no LD_LIBRARY_PATH), as a user of a bundle would."""
    return subprocess.run([str(exe)], env=env or {}, capture_output=True, text=True, timeout=30, cwd=cwd)


def elf32_stub(path: Path, soname_like: str = "") -> Path:
    """A minimal ELF32/i386 shared-object header: the loader (and our resolver) must skip it on x86_64."""
    ident = b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack("<HHIIIIIHHHHHH", 3, 3, 1, 0, 0, 0, 0, 52, 32, 0, 40, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((header + soname_like.encode()).ljust(512, b"\0"))  # the loader reads a whole Elf64 header
    return path


# ------------------------------------------------------------------------------------------------ offload bundles


def offload_bundle(targets: list[str], *, payload: int = 64, host: bool = True) -> bytes:
    """An uncompressed clang offload bundle with a host entry and one code object per gfx target."""
    entries = ([("host-x86_64-unknown-linux-gnu-", b"")] if host else []) + [
        (f"hipv4-amdgcn-amd-amdhsa--{t}", (t.encode() * payload)[:payload]) for t in targets
    ]
    header_size = 24 + 8 + sum(24 + len(triple) for triple, _ in entries)
    offset = (header_size + 15) // 16 * 16
    out = bytearray(BUNDLE_MAGIC + struct.pack("<Q", len(entries)))
    blobs = bytearray()
    for triple, blob in entries:
        out += struct.pack("<QQQ", offset + len(blobs), len(blob), len(triple)) + triple.encode()
        blobs += blob
    out += bytes(offset - len(out))
    return bytes(out + blobs)


def ccob(bundle: bytes, *, version: int = 3, method: str = "zstd") -> bytes:
    """A compressed (CCOB) offload bundle as clang writes it (v2: u32 sizes, v3: u64 sizes)."""
    if method == "zstd":
        zstandard = pytest.importorskip("zstandard", reason="zstandard is not installed (pip install zstandard)")
        body, code = zstandard.ZstdCompressor(level=3).compress(bundle), 1
    else:
        body, code = zlib.compress(bundle), 0
    if version == 3:
        header = b"CCOB" + struct.pack("<HHQQQ", 3, code, 32 + len(body), len(bundle), 0x1234)
    elif version == 2:
        header = b"CCOB" + struct.pack("<HHIIQ", 2, code, 24 + len(body), len(bundle), 0x1234)
    else:
        raise ValueError(version)
    return header + body


def fatbin_source(blobs: list[bytes], *, align: int = 4096) -> str:
    """C source placing the offload bundles in a ``.hip_fatbin`` section, each aligned like clang's."""
    data = bytearray()
    for blob in blobs:
        data += bytes((-len(data)) % align) + blob
    body = ",".join(str(b) for b in data)
    return (
        f'__attribute__((section(".hip_fatbin"), used, aligned({align})))\n'
        f"static const unsigned char hip_fatbin[{len(data)}] = {{{body}}};\n"
    )


# ------------------------------------------------------------------------------------------------ a ROCm-like tree


KERNEL_FILES = {
    # TheRock's rocblas/library names (bundling.md 4): per-target, xnack variants, generic fallbacks
    "TensileLibrary_lazy_gfx1151.dat": 300,
    "TensileLibrary_lazy_gfx1100.dat": 200,
    "TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_gfx1151.co": 1000,
    "TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_gfx1100.co": 900,
    "TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_fallback_gfx1151.hsaco": 700,
    "Kernels.so-000-gfx90a-xnack+.hsaco": 500,
    "TensileLibrary_Type_ZZ_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat": 50,
}

APP = r"""
#include <dlfcn.h>
#include <stdio.h>
int base_value(void);
int ggml_hip_value(void);
int hip_comgr_value(void);
int main(void) {
    int plug = -1;
    void *h = dlopen("libplug.so.1", RTLD_NOW);
    if (h) { int (*f)(void) = (int (*)(void))dlsym(h, "plug_value"); plug = f ? f() : -2; }
    printf("base=%d hip=%d comgr=%d plug=%d\n", base_value(), ggml_hip_value(), hip_comgr_value(), plug);
    return 0;
}
"""

HIP = r"""
#include <dlfcn.h>
int hsa_value(void);
int hip_value(void) { return hsa_value() + 2; }
int hip_comgr_value(void) {
    void *h = dlopen("libamd_comgr.so.3", RTLD_NOW);
    if (!h) return -1;
    int (*f)(void) = (int (*)(void))dlsym(h, "comgr_value");
    return f ? f() : -2;
}
"""


def make_tree(base: Path, *, fatbin_targets: tuple[str, ...] = ("gfx1151",), rocm_version: str = "7.12.0") -> dict:
    """A TheRock-like ROCm tree and a llama.cpp-like build tree whose app runs on this machine.

    rocm/lib: libamdhip64 (a symlink chain; needs sub/libhsa.so.1 through RUNPATH $ORIGIN/sub; dlopens
    libamd_comgr.so.3), libamd_comgr (needs llvm/lib/libzz.so.1 through RPATH $ORIGIN/llvm/lib), librocblas,
    libplug (dlopen'ed by the app), rocblas/library kernel files. build/bin: app (absolute RUNPATH to build/bin and
    rocm/lib), libggml-base and libggml-hip (a symlink chain each; libggml-hip has a .hip_fatbin).
    """
    rocm = base / "rocm"
    lib = rocm / "lib"
    bindir = base / "build" / "bin"
    for tool in ("clang", "clang++"):
        path = lib / "llvm" / "bin" / tool
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    (rocm / ".info").mkdir(parents=True)
    (rocm / ".info" / "version").write_text(rocm_version + "\n")
    manifest = rocm / "share" / "therock" / "therock_manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"rocm_version": rocm_version, "the_rock_commit": "0" * 40}))

    hsa = cc(lib / "sub" / "libhsa.so.1", "int hsa_value(void){return 40;}", shared=True, soname="libhsa.so.1")
    hip = cc(
        lib / "libamdhip64.so.7.1.0", HIP, shared=True, soname="libamdhip64.so.7", libs=(hsa,), runpath=("$ORIGIN/sub",)
    )
    symlink_chain(hip, "libamdhip64.so.7", "libamdhip64.so")
    zz = cc(lib / "llvm" / "lib" / "libzz.so.1", "int zz_value(void){return 1;}", shared=True, soname="libzz.so.1")
    comgr = cc(
        lib / "libamd_comgr.so.3.0.0",
        "int zz_value(void);\nint comgr_value(void){return zz_value()*7;}",
        shared=True,
        soname="libamd_comgr.so.3",
        libs=(zz,),
        rpath=("$ORIGIN/llvm/lib",),
    )
    symlink_chain(comgr, "libamd_comgr.so.3", "libamd_comgr.so")
    # a fat binary like Debian's rocBLAS: compressed bundles with several targets, one uncompressed
    blas_fat = fatbin_source(
        [
            ccob(offload_bundle(["gfx1100", "gfx1151", "gfx90a:xnack+"], payload=3000)),
            offload_bundle(["gfx1100", "gfx1151"], payload=5000),
        ]
    )
    blas = cc(
        lib / "librocblas.so.5.0", blas_fat + "int blas_value(void){return 5;}", shared=True, soname="librocblas.so.5"
    )
    symlink_chain(blas, "librocblas.so.5", "librocblas.so")
    cc(lib / "libplug.so.1", "int plug_value(void){return 3;}", shared=True, soname="libplug.so.1")
    kernels = lib / "rocblas" / "library"
    kernels.mkdir(parents=True)
    for name, size in KERNEL_FILES.items():
        (kernels / name).write_bytes(b"k" * size)

    ggml_base = cc(
        bindir / "libggml-base.so.0.1.0", "int base_value(void){return 1;}", shared=True, soname="libggml-base.so.0"
    )
    symlink_chain(ggml_base, "libggml-base.so.0", "libggml-base.so")
    fat = fatbin_source([offload_bundle(list(fatbin_targets))])
    ggml_hip = cc(
        bindir / "libggml-hip.so.0.1.0",
        fat + "int hip_value(void);int blas_value(void);\nint ggml_hip_value(void){return hip_value()+blas_value();}",
        shared=True,
        soname="libggml-hip.so.0",
        libs=(hip, blas),
        runpath=(str(lib),),
    )
    symlink_chain(ggml_hip, "libggml-hip.so.0", "libggml-hip.so")
    app = cc(bindir / "app", APP, libs=(ggml_base, ggml_hip, hip), runpath=(str(bindir), str(lib)))
    (bindir / "notes.txt").write_text("not a program\n")
    return {"rocm": rocm, "build": base / "build", "bin": bindir, "app": app, "lib": lib}


POLICY_WITH_PLUGIN = """
format: 1
linux:
  rpath: {rpath}
  never_ship:
    - names: [ld-linux*.so*, libc.so.6, libm.so.6, libdl.so.2, libpthread.so.0, libgcc_s.so.1]
      reason: glibc and the compiler runtime come from the host
  extras:
    - names: [libamd_comgr.so.*]
      when: [libamdhip64.so*]
      required: true
      reason: dlopen'ed by the HIP runtime
    - names: [libplug.so*]
      when: [app]
      required: true
      reason: the app dlopens its plugin by name
  kernel_data:
    rocblas:
      dest: rocblas/library
      used_by: [librocblas.so*]
      reason: beside librocblas
windows: {{}}
"""


def write_policy(path: Path, *, rpath: str = "RPATH") -> Path:
    path.write_text(POLICY_WITH_PLUGIN.format(rpath=rpath), encoding="utf-8")
    return path


def tree_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink())


def no_loader_env() -> dict[str, str]:
    """An environment with nothing that steers the loader."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LD_")}


def make_bundle(
    build_bin: Path,
    layout: RocmLayout | None,
    targets: Sequence[str],
    out: Path,
    *,
    policy: BundlePolicy | None = None,
    **flags: Any,
) -> BundleReport:
    """rockbuild's one way in to bundling (``bundle(BundleRequest(...))``) with the arguments as positions, the
    shipped policy by default: what most bundle tests need."""
    return bundle(
        BundleRequest(
            Path(build_bin), Path(out), policy or load_policy(), layout, tuple(targets), backends=REGISTRY, **flags
        )
    )
