"""make_bundle / `rockbuild bundle` on a gcc-built ROCm-like tree: the bundle is flat, has no symlinks, every ELF
runs from $ORIGIN, the absolute build-dir run path is gone, extras bring their closure, and the moved bundle runs
with an empty environment."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from support.bundles import cc, make_bundle, make_tree, need_tool, run_clean, tree_files, write_policy

from rockbuild.backends import REGISTRY
from rockbuild.bundle.elf import read_elf
from rockbuild.bundle.plan import BundleRequest, make_plan
from rockbuild.bundle.policy import load_policy
from rockbuild.core.errors import AuditError, BundleError, ConfigError
from rockbuild.core.records import BundleRecord
from rockbuild.core.vocabulary import Check
from rockbuild.rocm.layout import detect_layout

EXPECTED = "base=1 hip=47 comgr=7 plug=3\n"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("tree"))


@pytest.fixture(scope="module")
def plugin_policy(tmp_path_factory):
    return load_policy(write_policy(tmp_path_factory.mktemp("policy") / "policy.yaml"))


@pytest.fixture(scope="module")
def bundled(tree, plugin_policy, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundles") / "bundle"
    report = make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, policy=plugin_policy)
    return report, out


def test_the_build_tree_itself_cannot_find_comgr(tree):
    # the premise: comgr is dlopen'ed, its loader's RUNPATH ($ORIGIN/sub) cannot find it; the bundle must fix that
    assert run_clean(tree["app"]).stdout == "base=1 hip=47 comgr=-1 plug=3\n"


def test_bundle_is_flat_without_symlinks_and_named_by_soname(bundled):
    report, out = bundled
    assert tree_files(out) == [
        "app",
        "bundle.json",
        "libamd_comgr.so.3",
        "libamdhip64.so.7",
        "libggml-base.so.0",
        "libggml-hip.so.0",
        "libhsa.so.1",
        "libplug.so.1",
        "librocblas.so.5",
        "libzz.so.1",
        "rocblas/library/TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_gfx1151.co",
        "rocblas/library/TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_fallback_gfx1151.hsaco",
        "rocblas/library/TensileLibrary_Type_ZZ_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat",
        "rocblas/library/TensileLibrary_lazy_gfx1151.dat",
    ]
    assert not any(p.is_symlink() for p in out.rglob("*"))
    assert report.audit is not None and report.audit.ok, report.audit.failures
    assert [p.name for p in report.plan.skipped] == ["notes.txt"]


def test_every_elf_has_exactly_origin_and_the_build_dir_path_is_gone(bundled, tree):
    _, out = bundled
    assert str(tree["bin"]) in read_elf(tree["app"]).runpath
    for name in ("app", "libamdhip64.so.7", "libamd_comgr.so.3", "libzz.so.1", "libggml-hip.so.0"):
        info = read_elf(out / name)
        assert (info.rpath, info.runpath) == (("$ORIGIN",), ()), name
    assert (out / "app").stat().st_mode & 0o111


def test_moved_bundle_runs_with_an_empty_environment(bundled, tmp_path):
    _, out = bundled
    moved = tmp_path / "elsewhere" / "llama"
    shutil.copytree(out, moved, symlinks=True)
    result = run_clean(moved / "app", cwd=tmp_path)
    assert result.stdout == EXPECTED, result.stderr


def test_rpath_beats_a_users_ld_library_path(bundled, tree, tmp_path):
    _, out = bundled
    decoy = tmp_path / "decoy"
    cc(decoy / "libggml-base.so.0", "int base_value(void){return 666;}", shared=True, soname="libggml-base.so.0")
    result = run_clean(out / "app", env={"LD_LIBRARY_PATH": str(decoy)})
    assert result.stdout == EXPECTED


def test_runpath_policy_would_let_ld_library_path_win(tree, tmp_path):
    # the reason the shipped policy writes RPATH: with RUNPATH a stray LD_LIBRARY_PATH replaces the bundle's files
    policy = load_policy(write_policy(tmp_path / "p.yaml", rpath="RUNPATH"))
    out = tmp_path / "b"
    make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, policy=policy)
    assert read_elf(out / "app").runpath == ("$ORIGIN",) and not read_elf(out / "app").rpath
    decoy = tmp_path / "decoy"
    cc(decoy / "libggml-base.so.0", "int base_value(void){return 666;}", shared=True, soname="libggml-base.so.0")
    assert run_clean(out / "app").stdout == EXPECTED
    assert run_clean(out / "app", env={"LD_LIBRARY_PATH": str(decoy)}).stdout.startswith("base=666")


def test_bundle_json_records_files_sources_closure_kernels_and_audit(bundled, tree):
    _, out = bundled
    data = json.loads((out / "bundle.json").read_text())
    files = {f["path"]: f for f in data["files"]}
    assert files["libamdhip64.so.7"]["source"] == str(tree["lib"] / "libamdhip64.so.7.1.0")
    assert files["libamdhip64.so.7"]["found_as"] == str(tree["lib"] / "libamdhip64.so.7")
    assert files["app"]["patchelf"] == ["--force-rpath", "--set-rpath", "$ORIGIN"]
    ships = {e["name"]: e for e in data["closure"]["ships"]}
    assert ships["libamd_comgr.so.3"]["via"] == "extra" and ships["libzz.so.1"]["needed_by"] == ["libamd_comgr.so.3"]
    assert ships["libhsa.so.1"]["needed_by"] == ["libamdhip64.so.7"]
    assert {e["name"] for e in data["closure"]["system"]} >= {"libc.so.6"}
    folder = data["kernels"]["folders"][0]
    assert folder["dest"] == "rocblas/library" and folder["kept"]["files"] == 4 and folder["dropped"]["files"] == 3
    assert folder["dropped"]["bytes"] == 200 + 900 + 500
    assert data["audit"]["ok"] and data["targets"] == ["gfx1151"]
    assert data["rocm"]["version"] == "7.12.0" and data["rocm"]["kind"] == "therock"
    assert data["total_bytes"] == sum(f["size"] for f in data["files"]) + folder["kept"]["bytes"]


def test_the_audit_in_bundle_json_is_the_audits_record_read_back(bundled):
    # one class for the audit, from audit_bundle to bundle.json's reader: its checks, versions and verdict are typed
    report, out = bundled
    record = BundleRecord.read(out / "bundle.json")
    assert record is not None and record.audit is not None and report.audit is not None
    assert record.audit.to_dict() == report.audit.to_dict() and record.audit.render() == report.audit.render()
    assert record.audit.check("needed").ok and record.audit.versions["GLIBC"] == report.audit.versions["GLIBC"]
    assert isinstance(record.audit.check("needed"), Check) and record.audit.path == out


def test_shipped_policy_ships_comgr_but_not_an_undeclared_plugin(tree, tmp_path):
    out = tmp_path / "b"
    make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out)
    assert (out / "libamd_comgr.so.3").is_file() and not (out / "libplug.so.1").exists()
    assert run_clean(out / "app").stdout == "base=1 hip=47 comgr=7 plug=-1\n"


def test_dry_run_writes_nothing_and_shows_the_plan(tree, plugin_policy, tmp_path):
    out = tmp_path / "b"
    report = make_bundle(
        tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, dry_run=True, policy=plugin_policy
    )
    assert not out.exists() and not out.with_name("b.partial").exists()
    text = report.plan.render()
    assert "libamdhip64.so.7" in text and "set RPATH" in text and "rocblas/library/" in text
    assert "3 files" in text and "dropped" in text and "host libc.so.6" in text


def test_missing_library_is_an_error_naming_who_needs_it(tree, tmp_path):
    broken = tmp_path / "t"
    shutil.copytree(tree["rocm"], broken / "rocm", symlinks=True)
    shutil.copytree(tree["build"], broken / "build", symlinks=True)
    (broken / "rocm" / "lib" / "sub" / "libhsa.so.1").unlink()
    plan = make_plan(
        BundleRequest(
            broken / "build" / "bin",
            tmp_path / "o",
            load_policy(),
            detect_layout(broken / "rocm"),
            ("gfx1151",),
            backends=REGISTRY,
        )
    )
    assert any("libhsa.so.1 (needed by libamdhip64.so.7)" in e for e in plan.errors)
    with pytest.raises(BundleError, match=r"libhsa.so.1 \(needed by libamdhip64.so.7\)"):
        make_bundle(broken / "build", detect_layout(broken / "rocm"), ["gfx1151"], tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_required_extra_missing_is_an_error(tree, tmp_path):
    broken = tmp_path / "rocm"
    shutil.copytree(tree["rocm"], broken, symlinks=True)
    for p in broken.joinpath("lib").glob("libamd_comgr.so*"):
        p.unlink()
    plan = make_plan(
        BundleRequest(
            tree["bin"], tmp_path / "o", load_policy(), detect_layout(broken), ("gfx1151",), backends=REGISTRY
        )
    )
    assert any("libamd_comgr.so.* (declared extra, for libamdhip64.so.7)" in e for e in plan.errors), plan.errors


def test_target_without_kernel_files_is_an_error(tree, tmp_path):
    plan = make_plan(
        BundleRequest(
            tree["bin"],
            tmp_path / "o",
            load_policy(),
            detect_layout(tree["rocm"]),
            ("gfx1151", "gfx1201"),
            backends=REGISTRY,
        )
    )
    assert any("no files for gfx1201" in e for e in plan.errors), plan.errors


def test_out_folder_that_is_not_a_bundle_is_never_replaced(tree, tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(BundleError, match="refusing to replace it"):
        make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out)
    assert (out / "thesis.tex").read_text() == "years of work"


def test_rebundling_replaces_an_earlier_bundle(bundled, tree, plugin_policy, tmp_path):
    out = tmp_path / "b"
    for _ in range(2):
        make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, policy=plugin_policy)
    assert tree_files(out) == tree_files(bundled[1])


def test_audit_failure_at_the_end_of_bundling_raises_and_keeps_the_bundle(tree, plugin_policy, tmp_path):
    # libggml-hip carries gfx1151 code; a job for gfx1100 (which has kernel data) must fail the code-object check
    out = tmp_path / "b"
    with pytest.raises(AuditError, match="code-objects: libggml-hip.so.0 has device code for gfx1151"):
        make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1100"], out, policy=plugin_policy)
    data = json.loads((out / "bundle.json").read_text())
    assert data["audit"]["ok"] is False


def test_static_program_ships_unpatched(tree, plugin_policy, tmp_path):
    out = tmp_path / "b"
    try:
        cc(tmp_path / "st" / "bin" / "static", "int main(void){return 0;}", flags=("-static",))
    except subprocess.CalledProcessError as exc:
        if "cannot find -lc" not in exc.stderr:
            raise  # a compile failure of any other kind is a failure of this test, not a missing package
        pytest.skip("no static libc (apt-get install libc6-dev)")
    report = make_bundle(
        tmp_path / "st", detect_layout(tree["rocm"]), ["gfx1151"], out, policy=plugin_policy, audit=False
    )
    assert [f.patchelf for f in report.plan.files] == [()]
    assert run_clean(out / "static").returncode == 0


def test_strip_removes_debug_sections(tree, plugin_policy, tmp_path):
    need_tool("strip", "binutils")
    out = tmp_path / "b"
    cc(tmp_path / "dbg" / "bin" / "dbgapp", "int main(void){return 0;}", flags=("-g",))
    layout = detect_layout(tree["rocm"])
    make_bundle(tmp_path / "dbg", layout, ["gfx1151"], out, policy=plugin_policy, strip=True, audit=False)
    from elftools.elf.elffile import ELFFile

    with open(out / "dbgapp", "rb") as fh:
        assert ELFFile(fh).get_section_by_name(".debug_info") is None
    assert run_clean(out / "dbgapp").returncode == 0


def test_policy_file_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("format: 1\nlinux:\n  never_ship:\n    - names: [libc.so.6]\n")
    with pytest.raises(ConfigError, match=r"p.yaml:4: never_ship\[0\] needs a 'reason'"):
        load_policy(bad)
    bad.write_text("format: 1\nlinux:\n  extras:\n    - names: [x]\n      wehn: [y]\n      reason: r\n")
    with pytest.raises(ConfigError, match=r"p.yaml:5: unknown key 'wehn'.*did you mean when"):
        load_policy(bad)


def test_shipped_policy_keeps_glibc_and_compiler_runtime_on_the_host():
    policy = load_policy().linux
    for name in ("libc.so.6", "ld-linux-x86-64.so.2", "libstdc++.so.6", "libgcc_s.so.1", "libm.so.6"):
        assert policy.system_reason(name), name
    for name in ("libz.so.1", "libatomic.so.1", "libdrm.so.2", "libamdhip64.so.7", "libnuma.so.1"):
        assert policy.system_reason(name) is None, name
    debian = {e.names[0] for e in policy.extras_for(7, "debian")}
    therock = {e.names[0] for e in policy.extras_for(7, "therock")}
    assert "libamd_comgr.so.*" in debian and "libhipblaslt.so*" not in debian
    assert {"libamd_comgr.so.*", "librocm_kpack.so*", "libhipblaslt.so*", "libatomic.so.1"} <= therock
    assert {e.names[0] for e in policy.extras_for(11, "therock")} == therock  # a newer major: the newest's


def test_cli_bundle_and_audit(tree, tmp_path, run_rockbuild):
    out = tmp_path / "b"
    policy = write_policy(tmp_path / "p.yaml")
    dry = run_rockbuild(
        "bundle",
        str(tree["build"]),
        "--rocm",
        str(tree["rocm"]),
        "--targets",
        "gfx1151",
        "--out",
        str(out),
        "--dry-run",
        "--policy",
        str(policy),
    )
    assert dry.returncode == 0, dry.stderr
    assert "libamd_comgr.so.3" in dry.stdout and not out.exists()
    made = run_rockbuild(
        "bundle",
        str(tree["build"]),
        "--rocm",
        str(tree["rocm"]),
        "--targets",
        "gfx1151",
        "--out",
        str(out),
        "--json",
        "--policy",
        str(policy),
    )
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["audit"]["ok"] is True
    audit = run_rockbuild("audit", str(out), "--json", "--policy", str(policy))
    assert audit.returncode == 0 and json.loads(audit.stdout)["ok"] is True
    (out / "libhsa.so.1").unlink()
    failed = run_rockbuild("audit", str(out), "--policy", str(policy))
    assert failed.returncode == 10
    assert "[FAIL] needed" in failed.stdout and "libhsa.so.1 (needed by libamdhip64.so.7)" in failed.stdout
    assert failed.stderr.startswith("error: ")
    missing = run_rockbuild(
        "bundle", str(tree["build"]), "--rocm", str(tree["rocm"]), "--targets", "gfx1201", "--out", str(tmp_path / "c")
    )
    assert missing.returncode == 9 and "no files for gfx1201" in missing.stderr


def test_prune_fatbin_keeps_the_job_targets_and_the_bundle_running(tree, plugin_policy, tmp_path):
    from support.offload import fake_offload_bundler

    from rockbuild.bundle.fatbin import read_fatbin

    out = tmp_path / "b"
    assert read_fatbin(tree["lib"] / "librocblas.so.5.0").targets == ("gfx90a", "gfx1100", "gfx1151")
    tool = fake_offload_bundler(tree["rocm"] / "lib" / "llvm" / "bin")  # pruning needs a tool to prove it
    report = make_bundle(
        tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, policy=plugin_policy, prune_fatbin=True
    )
    tool.unlink()  # the module's other tests bundle this tree without one
    assert report.audit.ok, report.audit.failures
    (pruned,) = report.pruned
    assert pruned.file == "librocblas.so.5" and pruned.rewritten == 2 and pruned.entries_dropped == 3
    assert read_fatbin(out / "librocblas.so.5").targets == ("gfx1151",)
    assert (out / "librocblas.so.5").stat().st_size >= (tree["lib"] / "librocblas.so.5.0").stat().st_size
    assert run_clean(out / "app").stdout == EXPECTED
    data = json.loads((out / "bundle.json").read_text())
    assert data["pruned_fatbins"][0]["file"] == "librocblas.so.5"
    assert {f["path"]: f.get("prune_targets") for f in data["files"]}["librocblas.so.5"] == ["gfx90a", "gfx1100"]
    # the audit holds a pruned file to the job's targets: an unpruned copy fails it
    shutil.copyfile(tree["lib"] / "librocblas.so.5.0", out / "librocblas.so.5")
    from rockbuild.bundle.audit import audit_bundle

    again = audit_bundle(out, policy=plugin_policy, backends=REGISTRY)
    assert again.check("code-objects").failures == (
        "librocblas.so.5 has device code for gfx90a, gfx1100, gfx1151: also has gfx90a, gfx1100",
        "librocblas.so.5 changed since it was verified (sha256 differs)",
    )


def test_hipblaslt_ships_only_when_the_shipped_rocblas_names_it(tmp_path):
    """TheRock's rocBLAS hands GEMMs to hipBLASLt; a rocBLAS built without it (Debian's) never loads its ~30 MB."""
    from support.bundles import cc, make_tree, write_policy

    from rockbuild.bundle.policy import load_policy
    from rockbuild.rocm.layout import detect_layout

    policy_path = write_policy(tmp_path / "policy.yaml")
    text = policy_path.read_text(encoding="utf-8")
    policy_path.write_text(
        text.replace(
            "  kernel_data:\n",
            """    - names: [libhipblaslt.so*]
      when: [librocblas.so*]
      only_if_named: true
      required: false
      reason: rocBLAS hands GEMMs to hipBLASLt
  kernel_data:
""",
            1,
        ),
        encoding="utf-8",
    )
    policy = load_policy(policy_path)
    shipped = {}
    for case, blas_source in (
        ("names", 'const char *lt = "libhipblaslt.so.1";\nint blas_value(void){return 5;}'),
        ("silent", "int blas_value(void){return 5;}"),
    ):
        tree = make_tree(tmp_path / case)
        cc(tree["lib"] / "libhipblaslt.so.1", "int lt_value(void){return 1;}", shared=True, soname="libhipblaslt.so.1")
        # rocBLAS rebuilt with (or without) the string a dlopen of hipBLASLt carries
        real = (tree["lib"] / "librocblas.so.5").resolve()
        cc(real, blas_source, shared=True, soname="librocblas.so.5")
        report = make_bundle(
            tree["build"],
            detect_layout(tree["rocm"]),
            ["gfx1151"],
            tmp_path / f"{case}-out",
            policy=policy,
            audit=False,
        )
        shipped[case] = (tmp_path / f"{case}-out" / "libhipblaslt.so.1").is_file()
        assert report is not None
    assert shipped == {"names": True, "silent": False}
