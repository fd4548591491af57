"""Windows bundles: real PE files built with mingw-w64 (an exe importing a DLL that delay-loads another, a DLL
LoadLibrary'd by the HIP stand-in), the closure read with pefile, the bundle run under wine.

Needs the Debian packages gcc-mingw-w64-x86-64 and wine64 (--no-install-recommends); each test says which is missing.
"""

from __future__ import annotations

import gc
import shutil
import subprocess

import pytest
from support.bundles import make_bundle, tree_files
from support.pe import pe_tree, wine

from rockbuild.backends import REGISTRY
from rockbuild.bundle.audit import audit_bundle, exported_symbols
from rockbuild.bundle.fatbin import fatbin_section
from rockbuild.bundle.pe import PeResolver, pe_bin_roots, pe_closure, read_pe
from rockbuild.bundle.plan import BundleRequest, make_plan
from rockbuild.bundle.policy import load_policy
from rockbuild.core.records import MISSING, SHIPS, SYSTEM
from rockbuild.rocm.layout import detect_layout


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """The PE tree (support.pe.pe_tree), made once for the module."""
    return pe_tree(tmp_path_factory.mktemp("pe"))


def test_pefile_sees_imports_and_delay_imports(tree):
    info = read_pe(tree["bin"] / "ggml-hip.dll")
    assert info.machine == "AMD64" and info.is_dll
    assert "amdhip64_7.dll" in info.imports and info.delay_imports == ("hipblas.dll",)
    assert not read_pe(tree["bin"] / "app.exe").is_dll


def test_reading_pe_files_runs_no_garbage_collection(tree):
    """pefile's own PE.close() runs a full gc.collect() per file, 20-35 ms each in a process holding many objects (a
    Windows bundle's audit read its ~100 PE files ten times slower); every PE reader maps the file itself instead."""
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    dll = tree["bin"] / "ggml-hip.dll"
    gc.disable()  # only the collections a reader asks for are counted
    gc.callbacks.append(count)
    try:
        for _ in range(3):
            assert "amdhip64_7.dll" in read_pe(dll).imports
            assert exported_symbols(dll) == {"ggml_comgr", "ggml_value"}
            assert fatbin_section(dll) is not None  # its .hip_fat section
    finally:
        gc.callbacks.remove(count)
        gc.enable()
    assert collections == []


def test_pe_closure(tree):
    layout = detect_layout(tree["rocm"])
    assert layout.platform == "windows"
    roots, _ = pe_bin_roots(tree["bin"])
    closure = pe_closure(roots, PeResolver.for_host(layout.library_dirs, load_policy().windows))
    nodes = {e.name.lower(): e for e in closure.entries}
    assert nodes["hipblas.dll"].status == SHIPS and nodes["hipblas.dll"].via == "delay-import"
    assert nodes["rocblas.dll"].needed_by == ("hipblas.dll",)
    assert nodes["kernel32.dll"].status == SYSTEM and nodes["msvcrt.dll"].status == SYSTEM
    assert "amd_comgr0702.dll" not in nodes  # only LoadLibrary'd: the policy's extras add it


def test_bundle_runs_under_wine(tree, tmp_path):
    out = tmp_path / "bundle"
    report = make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out)
    assert report.audit.ok, report.audit.failures
    assert tree_files(out) == [
        "amd_comgr0702.dll",
        "amdhip64_7.dll",
        "app.exe",
        "bundle.json",
        "ggml-hip.dll",
        "hipblas.dll",
        "rocblas.dll",
        "rocblas/library/TensileLibrary_Type_ZZ_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat",
        "rocblas/library/TensileLibrary_lazy_gfx1151.dat",
    ]
    runner = wine()
    prefix = tmp_path / "wineprefix"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "WINEPREFIX": str(prefix),
        "WINEDEBUG": "-all",
        "WINEDLLOVERRIDES": "mscoree,mshtml=",
    }
    moved = tmp_path / "moved"
    shutil.move(out, moved)
    result = subprocess.run(
        [runner, str(moved / "app.exe")], capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path
    )
    assert result.stdout.replace("\r", "") == "ggml=47 comgr=7\n", result.stderr[-2000:]


def test_missing_delay_loaded_dll_is_an_error_naming_the_importer(tree, tmp_path):
    rocm = tmp_path / "rocm"
    shutil.copytree(tree["rocm"], rocm)
    (rocm / "bin" / "hipblas.dll").unlink()
    plan = make_plan(
        BundleRequest(tree["bin"], tmp_path / "o", load_policy(), detect_layout(rocm), ("gfx1151",), backends=REGISTRY)
    )
    assert any("hipblas.dll (needed by ggml-hip.dll)" in e for e in plan.errors), plan.errors
    nodes = {e.name: e for e in plan.closure.entries}
    assert nodes["hipblas.dll"].status == MISSING


def test_audit_of_a_windows_bundle_catches_a_missing_dll(tree, tmp_path):
    out = tmp_path / "bundle"
    make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out)
    (out / "hipblas.dll").unlink()
    report = audit_bundle(out, backends=REGISTRY)
    assert {c.name for c in report.checks if not c.ok} == {"needed"}
    assert report.check("needed").failures == (
        "hipblas.dll (ggml-hip.dll delay-loads it) is not in the bundle's top folder",
    )


def test_a_truncated_pe_file_is_an_audit_failure(tmp_path):
    from support.pe import build_pe

    exe = build_pe(tmp_path / "bundle" / "llama-server.exe", "int main(void){return 0;}\n", dll=False)
    shutil.rmtree(tmp_path / "bundle" / ".llama-server.exe.work", ignore_errors=True)
    report = audit_bundle(exe.parent, ["gfx1151"], backends=REGISTRY)
    assert report.check("file-formats").ok and report.check("programs").details == {"programs": ["llama-server.exe"]}
    data = exe.read_bytes()
    exe.write_bytes(data[: len(data) // 2])
    report = audit_bundle(exe.parent, ["gfx1151"], backends=REGISTRY)
    (failure,) = report.check("file-formats").failures
    assert failure.startswith(f"llama-server.exe is a truncated PE file ({len(data) // 2} of the ")
