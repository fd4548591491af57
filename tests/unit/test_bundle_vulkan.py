"""A Vulkan bundle: no ROCm root, no gfx targets; the Vulkan loader (libvulkan.so.1) and every driver stay on the host
by policy, and the audit checks that nothing of ROCm (and no host library) ships instead of checking GPU code."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from support.bundles import cc, make_bundle, run_clean, tree_files

from rockbuild.backends import REGISTRY
from rockbuild.bundle.audit import audit_bundle
from rockbuild.bundle.elf import read_elf
from rockbuild.bundle.policy import load_policy
from rockbuild.core.errors import BundleError
from rockbuild.core.records import SYSTEM


@pytest.fixture(scope="module")
def vulkan_tree(tmp_path_factory):
    """build/bin as llama.cpp's Vulkan build lays it out: the app -> libggml-vulkan -> libvulkan.so.1 (a fake loader
    outside every search path, as on a build host whose loader the bundle must not take)."""
    base = tmp_path_factory.mktemp("vulkan")
    host = base / "host"
    loader = cc(
        host / "libvulkan.so.1", "int vkCreateInstance(void) { return 12; }\n", shared=True, soname="libvulkan.so.1"
    )
    bin_dir = base / "build" / "bin"
    ggml_base = cc(
        bin_dir / "libggml-base.so.0", "int ggml_base(void) { return 30; }\n", shared=True, soname="libggml-base.so.0"
    )
    vulkan = cc(
        bin_dir / "libggml-vulkan.so.0",
        "int ggml_base(void); int vkCreateInstance(void);\n"
        "int ggml_vk(void) { return ggml_base() + vkCreateInstance(); }\n",
        shared=True,
        soname="libggml-vulkan.so.0",
        libs=(ggml_base, loader),
        runpath=(str(bin_dir),),
    )
    cc(
        bin_dir / "llama-cli",
        '#include <stdio.h>\nint ggml_vk(void);\nint main(void) { printf("vk=%d\\n", ggml_vk()); return 0; }\n',
        libs=(vulkan,),
        runpath=(str(bin_dir),),
    )
    return {"base": base, "host": host, "bin": bin_dir}


@pytest.fixture(scope="module")
def vulkan_bundle(vulkan_tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("vk-bundles") / "bundle"
    return make_bundle(vulkan_tree["bin"], None, [], out, backend="vulkan"), out


def test_the_loader_is_a_host_library_and_never_ships(vulkan_bundle, vulkan_tree):
    report, out = vulkan_bundle
    assert tree_files(out) == ["bundle.json", "libggml-base.so.0", "libggml-vulkan.so.0", "llama-cli"]
    system = {lib.name: lib for lib in report.plan.closure.with_status(SYSTEM)}
    assert "libvulkan.so.1" in system and "driver stack" in system["libvulkan.so.1"].reason
    assert system["libvulkan.so.1"].needed_by == ("libggml-vulkan.so.0",)
    assert read_elf(out / "libggml-vulkan.so.0").needed.count("libvulkan.so.1") == 1
    # the moved bundle runs with the host's loader (here the fake one), and only with it
    moved = vulkan_tree["base"] / "moved"
    shutil.copytree(out, moved)
    assert run_clean(moved / "llama-cli", {"LD_LIBRARY_PATH": str(vulkan_tree["host"])}).stdout == "vk=42\n"
    without = run_clean(moved / "llama-cli")
    assert without.stdout != "vk=42\n"  # only the test's host loader answers 42: the bundle brings none
    # no Vulkan loader on this host either (ld.so's cache: ctypes.util.find_library would fall back to gcc): the loader
    # says so
    if "libvulkan.so.1 " not in subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout:
        assert "libvulkan.so.1" in without.stderr


def test_the_audit_of_a_vulkan_bundle_checks_no_rocm_instead_of_gpu_code(vulkan_bundle):
    report, out = vulkan_bundle
    assert report.audit is not None and report.audit.ok, report.audit.failures
    names = [c.name for c in report.audit.checks]
    assert "no-rocm" in names and "kernel-data" not in names and "code-objects" not in names
    meta = json.loads((out / "bundle.json").read_text(encoding="utf-8"))
    assert meta["backend"] == "vulkan" and meta["rocm"] is None and meta["targets"] == []
    assert meta["audit"]["backend"] == "vulkan" and meta["audit"]["ok"]
    assert "Vulkan (no GPU targets)" in report.plan.render()
    again = audit_bundle(out, backends=REGISTRY)  # from bundle.json alone
    assert again.ok and again.backend == "vulkan"


@pytest.mark.parametrize(
    ("extra", "failure"),
    [
        ("libvulkan.so.1", r"no-rocm: libvulkan\.so\.1 ships although it never may: the Vulkan loader"),
        ("libvulkan_radeon.so", r"no-rocm: libvulkan_radeon\.so ships although it never may"),
        ("libamdhip64.so.7", r"no-rocm: libamdhip64\.so\.7 is a ROCm library"),
        ("rocblas/library/TensileLibrary_lazy_gfx1151.dat", r"no-rocm: rocblas/library/ \(ROCm kernel data\)"),
    ],
)
def test_the_audit_fails_a_vulkan_bundle_that_carries_rocm_or_the_host_stack(vulkan_bundle, tmp_path, extra, failure):
    _report, out = vulkan_bundle
    copy = tmp_path / "bundle"
    shutil.copytree(out, copy)
    (copy / extra).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(out / "libggml-base.so.0", copy / extra)  # any ELF: the name is what counts
    report = audit_bundle(copy, backends=REGISTRY)
    assert not report.ok
    assert any(re.match(failure, f) for f in report.failures), report.failures


def test_gpu_targets_or_a_missing_rocm_root_are_refused(vulkan_tree, tmp_path):
    with pytest.raises(BundleError, match="a Vulkan bundle has no GPU targets"):
        make_bundle(vulkan_tree["bin"], None, ["gfx1151"], tmp_path / "b", backend="vulkan", dry_run=True)
    with pytest.raises(BundleError, match="needs the ROCm root it was built with"):
        make_bundle(vulkan_tree["bin"], None, ["gfx1151"], tmp_path / "b", dry_run=True)


def test_the_shipped_policy_keeps_every_vulkan_driver_on_the_host():
    policy = load_policy()
    linux, windows = policy.for_platform("linux"), policy.for_platform("windows")
    for name in (
        "libvulkan.so.1",
        "libvulkan_lvp.so",
        "libvulkan_radeon.so",
        "amdvlk64.so",
        "libVkLayer_khronos_validation.so",
    ):
        assert "driver stack" in (linux.system_reason(name) or ""), name
    for name in ("vulkan-1.dll", "amdvlk64.dll"):
        assert "driver stack" in (windows.system_reason(name) or ""), name
    assert linux.system_reason("libggml-vulkan.so.0") is None and windows.system_reason("ggml-vulkan.dll") is None


def test_cli_bundle_checks_backend_arguments(run_rockbuild, tmp_path):
    build = tmp_path / "bin"
    build.mkdir()
    vulkan = run_rockbuild(
        "bundle", str(build), "--backend", "vulkan", "--targets", "gfx1151", "--out", str(tmp_path / "b")
    )
    assert vulkan.returncode == 2 and "a Vulkan bundle takes no --rocm and no --targets" in vulkan.stderr
    rocm = run_rockbuild("bundle", str(build), "--out", str(tmp_path / "b"))
    assert rocm.returncode == 2 and "a ROCm bundle needs --rocm ROOT and --targets" in rocm.stderr
