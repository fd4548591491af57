"""Windows PE files built with mingw-w64 for the bundle tests, and the PE tree (a ROCm-like rocm/bin and a llama.cpp-like
build/bin) that test_bundle_pe and test_dllsearch bundle and run under wine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pefile
import pytest

from support.bundles import fatbin_source, offload_bundle

MINGW = "x86_64-w64-mingw32-gcc"
DLLTOOL = "x86_64-w64-mingw32-dlltool"
# binutils 2.40's ld links mingw's delay-load thunks but leaves the PE delay-import directory empty (MSVC's and
# lld's linkers fill it, and ROCm's DLLs have it): place 32 zero bytes after the descriptors (.text$2) as the
# array's terminator, and point the directory at them after linking.
TERMINATOR = '__asm__(".section .text$3,\\"xr\\"\\n\\t.balign 4\\n\\t.zero 32\\n\\t.text\\n");\n'


def mingw() -> str:
    found = shutil.which(MINGW)
    if not found or not shutil.which(DLLTOOL):
        pytest.skip(f"{MINGW} is not installed (apt-get install gcc-mingw-w64-x86-64)")
    return found


def wine() -> str:
    for candidate in (shutil.which("wine64"), "/usr/lib/wine/wine64", shutil.which("wine")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("wine is not installed (apt-get install --no-install-recommends wine64)")


def build_pe(out: Path, source: str, *, dll: bool, imports=(), delay=()) -> Path:
    """Compile with mingw-w64; ``imports`` are DLL paths linked normally, ``delay`` DLL paths delay-loaded."""
    gcc = mingw()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.parent / f".{out.name}.work"
    work.mkdir(exist_ok=True)
    src = work / "main.c"
    src.write_text(source + (TERMINATOR if delay else ""), encoding="utf-8")
    # image section names cut to 8 bytes (.hip_fatbin -> .hip_fat), as MSVC's and lld's linkers write them
    args = [gcc, "-O1", "-o", str(out), str(src), "-Wl,--disable-long-section-names"] + (["-shared"] if dll else [])
    args += [str(p) for p in imports]
    for target in delay:
        pe = pefile.PE(str(target))
        names = [e.name.decode() for e in pe.DIRECTORY_ENTRY_EXPORT.symbols if e.name]
        pe.close()
        definition = work / f"{target.stem}.def"
        definition.write_text(f"LIBRARY {target.name}\nEXPORTS\n" + "".join(f"  {n}\n" for n in names))
        lib = work / f"lib{target.stem}_delay.a"
        subprocess.run(
            [DLLTOOL, "-d", str(definition), "-y", str(lib), "-D", target.name], check=True, capture_output=True
        )
        args.append(str(lib))
    if delay:
        args.append(f"-Wl,-Map,{work / 'map.txt'}")
    subprocess.run(args, check=True, capture_output=True, text=True)
    if delay:
        text = (work / "map.txt").read_text()
        address = int(re.search(r"0x([0-9a-f]+)\s+__DELAY_IMPORT_DESCRIPTOR_", text).group(1), 16)
        pe = pefile.PE(str(out))
        entry = pe.OPTIONAL_HEADER.DATA_DIRECTORY[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"]]
        entry.VirtualAddress = address - pe.OPTIONAL_HEADER.ImageBase
        entry.Size = 32 * (len(delay) + 1)
        data = pe.write()
        pe.close()
        out.write_bytes(data)
    shutil.rmtree(work)
    return out


def pe_tree(base: Path) -> dict:
    """rocm/bin: amdhip64_7.dll (LoadLibrary's amd_comgr0702.dll), hipblas.dll -> rocblas.dll, rocblas/library;
    build/bin: app.exe -> ggml-hip.dll, which imports amdhip64_7.dll and delay-loads hipblas.dll."""
    rocm = base / "rocm"
    for tool in ("clang.exe", "clang++.exe"):
        (rocm / "lib" / "llvm" / "bin").mkdir(parents=True, exist_ok=True)
        (rocm / "lib" / "llvm" / "bin" / tool).write_bytes(b"MZ")
    (rocm / ".info").mkdir()
    (rocm / ".info" / "version").write_text("7.12.0\n")
    rbin = rocm / "bin"
    build_pe(rbin / "amd_comgr0702.dll", "__declspec(dllexport) int comgr_value(void){return 7;}", dll=True)
    build_pe(
        rbin / "amdhip64_7.dll",
        r"""
#include <windows.h>
__declspec(dllexport) int hip_value(void){return 42;}
__declspec(dllexport) int hip_comgr_value(void){
    HMODULE h = LoadLibraryA("amd_comgr0702.dll");
    if (!h) return -1;
    FARPROC f = GetProcAddress(h, "comgr_value");
    return f ? ((int (*)(void))f)() : -2;
}""",
        dll=True,
    )
    rocblas = build_pe(rbin / "rocblas.dll", "__declspec(dllexport) int blas_value(void){return 5;}", dll=True)
    hipblas = build_pe(
        rbin / "hipblas.dll",
        "__declspec(dllimport) int blas_value(void);\n"
        "__declspec(dllexport) int hipblas_value(void){return blas_value();}",
        dll=True,
        imports=(rocblas,),
    )
    (rbin / "rocblas" / "library").mkdir(parents=True)
    for name in (
        "TensileLibrary_lazy_gfx1151.dat",
        "TensileLibrary_lazy_gfx1100.dat",
        "TensileLibrary_Type_ZZ_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat",
    ):
        (rbin / "rocblas" / "library" / name).write_bytes(b"k")
    bindir = base / "build" / "bin"
    ggml = build_pe(
        bindir / "ggml-hip.dll",
        fatbin_source([offload_bundle(["gfx1151"])])
        + r"""
__declspec(dllimport) int hip_value(void);
__declspec(dllimport) int hip_comgr_value(void);
int hipblas_value(void);
__declspec(dllexport) int ggml_value(void){return hip_value() + hipblas_value();}
__declspec(dllexport) int ggml_comgr(void){return hip_comgr_value();}
""",
        dll=True,
        imports=(rbin / "amdhip64_7.dll",),
        delay=(hipblas,),
    )
    build_pe(
        bindir / "app.exe",
        r"""
#include <stdio.h>
__declspec(dllimport) int ggml_value(void);
__declspec(dllimport) int ggml_comgr(void);
int main(void){printf("ggml=%d comgr=%d\n", ggml_value(), ggml_comgr()); return 0;}
""",
        dll=False,
        imports=(ggml,),
    )
    return {"rocm": rocm, "build": base / "build", "bin": bindir}
