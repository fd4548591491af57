"""The audit catches each planted defect, and only the check responsible for it fails."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from test_bundle_support import cc, fatbin_source, make_tree, offload_bundle, write_policy

from rockbuild.bundle import BundleError, make_bundle
from rockbuild.bundle.audit import audit_bundle
from rockbuild.bundle.plan import patchelf_tool
from rockbuild.bundle.policy import load_policy
from rockbuild.rocm.layout import detect_layout


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return load_policy(write_policy(tmp_path_factory.mktemp("policy") / "policy.yaml"))


@pytest.fixture(scope="module")
def good(tmp_path_factory, policy):
    tree = make_tree(tmp_path_factory.mktemp("tree"))
    out = tmp_path_factory.mktemp("bundles") / "good"
    make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, policy=policy, quiet=True)
    return out


@pytest.fixture
def bundle(good, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(good, copy, symlinks=True)
    return copy


def failed(report):
    return {c.name for c in report.checks if not c.ok}


def test_good_bundle_passes_every_check(bundle, policy):
    report = audit_bundle(bundle, policy=policy)
    assert report.ok, report.failures
    assert [c.name for c in report.checks] == [
        "no-symlinks", "architecture", "needed", "run-paths", "extras", "kernel-data", "code-objects",
        "symbol-versions",
    ]
    assert report.targets == ("gfx1151",)  # read from bundle.json
    assert report.fat_binaries[0].targets == ("gfx1151",)
    assert "GLIBC" in report.versions


def test_missing_library(bundle, policy):
    (bundle / "libzz.so.1").unlink()
    report = audit_bundle(bundle, policy=policy)
    assert failed(report) == {"needed"}
    assert report.check("needed").failures == (
        "libzz.so.1 (needed by libamd_comgr.so.3) does not resolve inside the bundle",)


def test_absolute_runpath(bundle, policy):
    subprocess.run([patchelf_tool(), "--set-rpath", "/opt/rocm/lib", bundle / "libamdhip64.so.7"], check=True)
    report = audit_bundle(bundle, policy=policy)
    assert "run-paths" in failed(report)
    assert "libamdhip64.so.7 has an absolute RUNPATH entry '/opt/rocm/lib'" in report.check("run-paths").failures
    # and its needs no longer resolve inside the bundle
    assert any("libhsa.so.1" in f for f in report.check("needed").failures)


def test_run_path_leading_out_of_the_bundle(bundle, policy):
    subprocess.run([patchelf_tool(), "--force-rpath", "--set-rpath", "$ORIGIN:$ORIGIN/../lib", bundle / "app"],
                   check=True)
    report = audit_bundle(bundle, policy=policy)
    assert failed(report) == {"run-paths"}
    assert report.check("run-paths").failures == (
        "app has RPATH entry '$ORIGIN/../lib', which points outside the bundle",)


def test_library_without_run_path(bundle, policy):
    subprocess.run([patchelf_tool(), "--remove-rpath", bundle / "libamd_comgr.so.3"], check=True)
    report = audit_bundle(bundle, policy=policy)
    assert failed(report) == {"needed", "run-paths"}
    assert "libamd_comgr.so.3 has no RPATH/RUNPATH but needs libzz.so.1 from the bundle" in \
        report.check("run-paths").failures


def test_missing_kernel_target(bundle, policy):
    for path in (bundle / "rocblas" / "library").glob("*gfx1151*"):
        path.unlink()
    report = audit_bundle(bundle, policy=policy)
    assert failed(report) == {"kernel-data"}
    assert report.check("kernel-data").failures == ("rocblas/library/ has no kernel files for gfx1151",)


def test_kernel_folder_missing_while_rocblas_ships(bundle, policy):
    shutil.rmtree(bundle / "rocblas")
    report = audit_bundle(bundle, policy=policy)
    assert report.check("kernel-data").failures == (
        "rocblas/library/ is missing although librocblas.so.5 is shipped",)


def test_stray_library_folder_beside_the_libraries(bundle, policy):
    (bundle / "library").mkdir()
    report = audit_bundle(bundle, policy=policy)
    assert failed(report) == {"kernel-data"}
    assert "rocBLAS would take it before rocblas/library" in report.check("kernel-data").failures[0]


def test_wrong_code_object_targets(bundle, policy, tmp_path):
    # a libggml-hip built for gfx1100 + gfx1151 in a gfx1151 job
    fat = fatbin_source([offload_bundle(["gfx1100", "gfx1151"]), offload_bundle(["gfx1151"])])
    cc(bundle / "libggml-hip.so.0", fat + "int ggml_hip_value(void){return 0;}", shared=True,
       soname="libggml-hip.so.0", rpath=("$ORIGIN",))
    report = audit_bundle(bundle, policy=policy)
    assert failed(report) == {"code-objects"}
    assert report.check("code-objects").failures == (
        "libggml-hip.so.0 has device code for gfx1100, gfx1151: also has gfx1100",)


def test_job_targets_not_in_the_code_objects(bundle, policy):
    report = audit_bundle(bundle, ["gfx1151", "gfx1100"], policy=policy)
    assert failed(report) == {"kernel-data", "code-objects"}
    assert report.check("code-objects").failures == (
        "libggml-hip.so.0 has device code for gfx1151: lacks gfx1100",)


def test_libggml_hip_without_gpu_code(bundle, policy):
    cc(bundle / "libggml-hip.so.0", "int ggml_hip_value(void){return 0;}", shared=True, soname="libggml-hip.so.0",
       rpath=("$ORIGIN",))
    report = audit_bundle(bundle, policy=policy)
    assert report.check("code-objects").failures == ("libggml-hip.so.0 has no .hip_fatbin section: it carries no GPU code",)


def test_glibc_version_above_a_ceiling(bundle, policy):
    report = audit_bundle(bundle, policy=policy)
    glibc, file = report.versions["GLIBC"]
    assert audit_bundle(bundle, policy=policy, max_versions={"GLIBC": glibc}).ok
    low = audit_bundle(bundle, policy=policy, max_versions={"GLIBC": "2.2.5"})
    assert failed(low) == {"symbol-versions"}
    assert low.check("symbol-versions").failures == (f"{file} needs GLIBC_{glibc}, above the allowed GLIBC_2.2.5",)


def test_symlink_in_the_bundle(bundle, policy):
    (bundle / "libhsa.so").symlink_to("libhsa.so.1")
    report = audit_bundle(bundle, policy=policy)
    assert failed(report) == {"no-symlinks"}
    assert report.check("no-symlinks").failures == ("libhsa.so is a symlink",)


def test_dlopen_extra_missing(bundle, policy):
    (bundle / "libamd_comgr.so.3").unlink()
    (bundle / "libzz.so.1").unlink()
    report = audit_bundle(bundle, policy=policy)
    assert failed(report) == {"extras"}
    assert report.check("extras").failures[0].startswith(
        "libamd_comgr.so.* is missing although libamdhip64.so.7 is shipped")


def test_foreign_architecture(bundle, policy, tmp_path):
    from test_bundle_support import elf32_stub

    elf32_stub(bundle / "libodd.so.1")
    report = audit_bundle(bundle, policy=policy)
    assert failed(report) == {"architecture"}


def test_targets_unknown_without_bundle_json(bundle, policy):
    (bundle / "bundle.json").unlink()
    report = audit_bundle(bundle, policy=policy)
    assert "the job's targets are unknown (no bundle.json): pass --targets" in report.check("kernel-data").failures
    assert audit_bundle(bundle, ["gfx1151"], policy=policy).ok


def test_not_a_folder(tmp_path):
    with pytest.raises(BundleError, match="is not a folder"):
        audit_bundle(tmp_path / "nope")
