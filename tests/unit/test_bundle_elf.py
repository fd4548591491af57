"""The ELF closure follows the loader's rules: each case is built with gcc, resolved from the files, and then the
real loader runs the program and must agree (found -> it runs; missing -> "cannot open shared object file")."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.bundles import cc, elf32_stub, run_clean, symlink_chain

from rockbuild.backends import REGISTRY
from rockbuild.bundle.elf import (
    ElfResolver,
    Root,
    SearchPaths,
    bin_roots,
    highest_versions,
    ld_so_conf_dirs,
    needed_closure,
    read_elf,
    resolve_in_root,
)
from rockbuild.bundle.policy import load_policy
from rockbuild.core.errors import BundleError
from rockbuild.core.records import MISSING, ROOT, SHIPS, SYSTEM

MAIN = 'int a_value(void);\n#include <stdio.h>\nint main(void){printf("%d\\n", a_value());return 0;}\n'


def closure_of(exe: Path, *, rocm_dirs=(), sysroot=None):
    info = read_elf(exe)
    resolver = ElfResolver(SearchPaths.for_root(sysroot, rocm_dirs), load_policy().linux)
    return needed_closure([Root(exe.name, exe, info, "bin")], resolver)


def by_name(closure):
    return {e.name: e for e in closure.entries}


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """dirA: liba.so.1 -> needs libb.so.1 (also in dirA, liba has no run path of its own)."""
    base = tmp_path_factory.mktemp("chain")
    b = cc(base / "dirA" / "libb.so.1", "int b_value(void){return 2;}", shared=True, soname="libb.so.1")
    a = cc(
        base / "dirA" / "liba.so.1",
        "int b_value(void);int a_value(void){return b_value()*21;}",
        shared=True,
        soname="liba.so.1",
        libs=(b,),
    )
    return base, a, b


def test_rpath_is_inherited_by_the_libraries_it_loads(chain):
    base, a, _ = chain
    exe = cc(base / "rpath-exe", MAIN, libs=(a,), rpath=(str(base / "dirA"),))
    assert read_elf(exe).rpath == (str(base / "dirA"),)
    nodes = by_name(closure_of(exe))
    assert nodes["liba.so.1"].status == SHIPS
    assert nodes["libb.so.1"].status == SHIPS and nodes["libb.so.1"].needed_by == ("liba.so.1",)
    assert run_clean(exe).stdout == "42\n"  # the loader agrees


def test_runpath_is_not_inherited(chain):
    base, a, _ = chain
    exe = cc(base / "runpath-exe", MAIN, libs=(a,), runpath=(str(base / "dirA"),))
    nodes = by_name(closure_of(exe))
    assert nodes["liba.so.1"].status == SHIPS
    assert nodes["libb.so.1"].status == MISSING and nodes["libb.so.1"].needed_by == ("liba.so.1",)
    result = run_clean(exe)
    assert result.returncode != 0 and "libb.so.1: cannot open shared object file" in result.stderr


def test_origin_in_a_library_run_path(tmp_path):
    c = cc(tmp_path / "c" / "libc1.so.1", "int c_value(void){return 6;}", shared=True, soname="libc1.so.1")
    a = cc(
        tmp_path / "a" / "liba.so.1",
        "int c_value(void);int a_value(void){return c_value()*7;}",
        shared=True,
        soname="liba.so.1",
        libs=(c,),
        runpath=("${ORIGIN}/../c",),
    )
    exe = cc(tmp_path / "exe", MAIN, libs=(a,), runpath=("$ORIGIN/a",))
    nodes = by_name(closure_of(exe))
    assert nodes["libc1.so.1"].status == SHIPS and nodes["libc1.so.1"].real_path == c
    assert run_clean(exe).stdout == "42\n"


def test_a_runpath_object_cuts_the_rpath_chain_for_its_own_needs(tmp_path):
    """glibc: an object with DT_RUNPATH ignores every DT_RPATH, the executable's included."""
    q = cc(tmp_path / "q" / "libq.so.1", "int q_value(void){return 1;}", shared=True, soname="libq.so.1")
    m1 = cc(
        tmp_path / "a" / "libm1.so.1",
        "int q_value(void);int a_value(void){return q_value();}",
        shared=True,
        soname="libm1.so.1",
        libs=(q,),
        runpath=(str(tmp_path / "nowhere"),),
    )
    m2 = cc(
        tmp_path / "a" / "libm2.so.1",
        "int q_value(void);int a_value(void){return q_value();}",
        shared=True,
        soname="libm2.so.1",
        libs=(q,),
    )
    exe1 = cc(tmp_path / "exe1", MAIN, libs=(m1,), rpath=(str(tmp_path / "a"), str(tmp_path / "q")))
    exe2 = cc(tmp_path / "exe2", MAIN, libs=(m2,), rpath=(str(tmp_path / "a"), str(tmp_path / "q")))
    assert by_name(closure_of(exe1))["libq.so.1"].status == MISSING
    assert "libq.so.1: cannot open" in run_clean(exe1).stderr
    assert by_name(closure_of(exe2))["libq.so.1"].status == SHIPS
    assert run_clean(exe2).returncode == 0


def test_wrong_elf_class_is_skipped_like_the_loader_does(chain):
    base, a, b = chain
    elf32_stub(base / "dir32" / "liba.so.1")
    exe = cc(base / "class-exe", MAIN, libs=(a,), rpath=(str(base / "dir32"), str(base / "dirA")))
    nodes = by_name(closure_of(exe))
    assert nodes["liba.so.1"].real_path == a
    assert run_clean(exe).stdout == "42\n"


def test_rocm_dirs_stand_where_ld_library_path_does(chain, tmp_path):
    base, a, _ = chain
    exe = cc(tmp_path / "exe", MAIN, libs=(a,))  # no run path at all: found only through the ROCm dirs
    nodes = by_name(closure_of(exe, rocm_dirs=(base / "dirA",)))
    assert nodes["liba.so.1"].status == SHIPS and nodes["libb.so.1"].status == SHIPS
    assert nodes["libc.so.6"].status == SYSTEM and "glibc" in nodes["libc.so.6"].reason
    assert by_name(closure_of(exe))["liba.so.1"].status == MISSING


def test_symlink_chain_resolves_to_one_real_file(tmp_path):
    real = cc(tmp_path / "lib" / "libX.so.1.2.3", "int a_value(void){return 42;}", shared=True, soname="libX.so.1")
    symlink_chain(real, "libX.so.1", "libX.so")
    exe = cc(tmp_path / "exe", MAIN, libs=(tmp_path / "lib" / "libX.so",), runpath=(str(tmp_path / "lib"),))
    assert read_elf(exe).needed[0] == "libX.so.1"
    node = by_name(closure_of(exe))["libX.so.1"]
    assert node.path == tmp_path / "lib" / "libX.so.1" and node.real_path == real
    assert node.soname == "libX.so.1"


def test_bin_roots_name_libraries_by_soname_and_skip_other_files(tmp_path):
    real = cc(tmp_path / "bin" / "libggml.so.0.9", "int g(void){return 1;}", shared=True, soname="libggml.so.0")
    symlink_chain(real, "libggml.so.0", "libggml.so")
    cc(tmp_path / "bin" / "tool", "int main(void){return 0;}")
    (tmp_path / "bin" / "README").write_text("hi")
    roots, skipped = bin_roots(tmp_path / "bin")
    assert [(r.name, r.info.is_executable) for r in roots] == [("tool", True), ("libggml.so.0", False)]
    assert set(roots[1].aliases) == {"libggml.so.0.9", "libggml.so.0", "libggml.so"}
    assert [p.name for p in skipped] == ["README"]


def test_two_files_claiming_one_soname_in_bin_is_an_error(tmp_path):
    cc(tmp_path / "bin" / "libg.so.0.1", "int g(void){return 1;}", shared=True, soname="libg.so.0")
    cc(tmp_path / "bin" / "libg.so.0.2", "int g(void){return 2;}", shared=True, soname="libg.so.0")
    with pytest.raises(BundleError, match="both want the name libg.so.0"):
        bin_roots(tmp_path / "bin")


def test_root_libraries_are_found_in_bin_whatever_the_stale_run_path_says(tmp_path):
    g = cc(tmp_path / "bin" / "libg.so.0", "int a_value(void){return 42;}", shared=True, soname="libg.so.0")
    exe = cc(tmp_path / "bin" / "exe", MAIN, libs=(g,), runpath=("/build/dir/that/moved",))
    roots, _ = bin_roots(tmp_path / "bin")
    resolver = ElfResolver(SearchPaths.for_root(None, ()), load_policy().linux)
    nodes = by_name(needed_closure(roots, resolver))
    assert nodes["libg.so.0"].status == ROOT and nodes["libg.so.0"].needed_by == ("exe",)
    assert exe.exists()


def test_chroot_paths_and_absolute_symlinks_resolve_inside_the_root(tmp_path):
    root = tmp_path / "root"
    libdir = root / "usr" / "lib" / "x86_64-linux-gnu"
    real = cc(libdir / "liba.so.1.0", "int a_value(void){return 42;}", shared=True, soname="liba.so.1")
    (libdir / "liba.so.1").symlink_to("/usr/lib/x86_64-linux-gnu/liba.so.1.0")  # absolute: inside the root
    (root / "etc" / "ld.so.conf.d").mkdir(parents=True)
    (root / "etc" / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc" / "ld.so.conf.d" / "x.conf").write_text("# multiarch\n/opt/extra/lib\n")
    assert ld_so_conf_dirs(root) == ["/opt/extra/lib"]
    assert resolve_in_root(libdir / "liba.so.1", root) == real
    exe = cc(tmp_path / "exe", MAIN, libs=(real,), runpath=("/usr/lib/x86_64-linux-gnu",))
    node = by_name(closure_of(exe, sysroot=root))["liba.so.1"]
    assert node.status == SHIPS and node.real_path == real


def test_highest_symbol_versions_come_from_version_needs(chain, tmp_path):
    exe = cc(tmp_path / "exe", '#include <stdio.h>\nint main(void){puts("x");return 0;}\n')
    versions = highest_versions([read_elf(exe)])
    assert "GLIBC" in versions and versions["GLIBC"][1] == "exe"
    assert tuple(int(x) for x in versions["GLIBC"][0].split(".")) >= (2, 2)


def test_a_broken_elf_is_a_clear_error(tmp_path):
    bad = tmp_path / "libbad.so"
    bad.write_bytes(b"\x7fELF" + b"\x02\x01\x01" + b"\0" * 20)
    with pytest.raises(BundleError, match="not a valid ELF file"):
        read_elf(bad)
    (tmp_path / "notes.txt").write_text("not an ELF file")
    assert read_elf(tmp_path / "notes.txt") is None


def test_real_debian_closure_of_hipblas_matches_the_reference(tmp_path):
    """bundling.md 2: hipBLAS -> rocSOLVER/rocBLAS -> HIP -> HSA, plus comgr (dlopen extra) and libLLVM's closure."""
    import os
    import shutil

    from rockbuild.bundle.plan import BundleRequest, make_plan
    from rockbuild.bundle.policy import load_policy
    from rockbuild.rocm.layout import detect_layout

    root = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e")) / "rocm-root"
    source = root / "usr" / "lib" / "x86_64-linux-gnu" / "libhipblas.so.3.2"
    if not source.is_file():
        pytest.skip(f"{source} is absent (tests/e2e/provision.sh makes that root)")
    (tmp_path / "bin").mkdir()
    shutil.copyfile(source, tmp_path / "bin" / source.name)
    plan = make_plan(
        BundleRequest(
            tmp_path / "bin", tmp_path / "out", load_policy(), detect_layout(root), ("gfx1151",), backends=REGISTRY
        )
    )
    assert not plan.errors
    assert {f.path for f in plan.files if f.kind != "data"} == {
        "libhipblas.so.3",
        "librocsolver.so.0",
        "librocblas.so.5",
        "libroctx64.so.4",
        "libfmt.so.11",
        "libamdhip64.so.7",
        "libhsa-runtime64.so.1",
        "libelf.so.1",
        "libdrm.so.2",
        "libdrm_amdgpu.so.1",
        "libnuma.so.1",
        "libz.so.1",
        "libzstd.so.1",
        "libamd_comgr.so.3",
        "libLLVM.so.22.1",
        "libz3.so.4",
        "libxml2.so.16",
        "libedit.so.2",
        "libtinfo.so.6",
        "libffi.so.8",
        "libbsd.so.0",
        "libmd.so.0",
    }
    assert {lib.name for lib in plan.closure.with_status(SYSTEM)} == {
        "libc.so.6",
        "libm.so.6",
        "libstdc++.so.6",
        "libgcc_s.so.1",
        "ld-linux-x86-64.so.2",
    }
    # 1.7 s alone; 7-43 s seen while a llama.cpp build shared the 2 cores: a bound that catches a planner gone
    # quadratic, not a busy machine
    assert plan.seconds < 90
