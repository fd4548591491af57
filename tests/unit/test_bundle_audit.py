"""The audit catches each planted defect, and only the check responsible for it fails."""

from __future__ import annotations

import json
import random
import shutil
import subprocess

import pytest
from elftools.elf.elffile import ELFFile
from support.bundles import cc, fatbin_source, make_bundle, make_tree, offload_bundle, write_policy

from rockbuild.backends import REGISTRY
from rockbuild.bundle.audit import audit_bundle
from rockbuild.bundle.plan import patchelf_tool
from rockbuild.bundle.policy import load_policy
from rockbuild.core.errors import BundleError
from rockbuild.rocm.layout import detect_layout


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return load_policy(write_policy(tmp_path_factory.mktemp("policy") / "policy.yaml"))


@pytest.fixture(scope="module")
def good(tmp_path_factory, policy):
    tree = make_tree(tmp_path_factory.mktemp("tree"))
    out = tmp_path_factory.mktemp("bundles") / "good"
    make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, policy=policy)
    return out


@pytest.fixture
def bundle(good, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(good, copy, symlinks=True)
    return copy


def failed(report):
    return {c.name for c in report.checks if not c.ok}


def test_good_bundle_passes_every_check(bundle, policy):
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert report.ok, report.failures
    assert [c.name for c in report.checks] == [
        "no-symlinks",
        "file-formats",
        "programs",
        "architecture",
        "needed",
        "run-paths",
        "kpack-refs",
        "extras",
        "cpu-backends",
        "backend-abi",
        "kernel-data",
        "code-objects",
        "symbol-versions",
    ]
    assert report.targets == ("gfx1151",)  # read from bundle.json
    assert report.fat_binaries[0].targets == ("gfx1151",)
    assert "GLIBC" in report.versions
    assert report.check("programs").details == {"programs": ["app"]}


def test_missing_library(bundle, policy):
    (bundle / "libzz.so.1").unlink()
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"needed"}
    assert report.check("needed").failures == (
        "libzz.so.1 (needed by libamd_comgr.so.3) does not resolve inside the bundle",
    )


def test_absolute_runpath(bundle, policy):
    subprocess.run([patchelf_tool(), "--set-rpath", "/opt/rocm/lib", bundle / "libamdhip64.so.7"], check=True)
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert "run-paths" in failed(report)
    assert "libamdhip64.so.7 has an absolute RUNPATH entry '/opt/rocm/lib'" in report.check("run-paths").failures
    # and its needs no longer resolve inside the bundle
    assert any("libhsa.so.1" in f for f in report.check("needed").failures)


def test_run_path_leading_out_of_the_bundle(bundle, policy):
    subprocess.run(
        [patchelf_tool(), "--force-rpath", "--set-rpath", "$ORIGIN:$ORIGIN/../lib", bundle / "app"], check=True
    )
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"run-paths"}
    assert report.check("run-paths").failures == (
        "app has RPATH entry '$ORIGIN/../lib', which points outside the bundle",
    )


def test_library_without_run_path(bundle, policy):
    subprocess.run([patchelf_tool(), "--remove-rpath", bundle / "libamd_comgr.so.3"], check=True)
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"needed", "run-paths"}
    assert (
        "libamd_comgr.so.3 has no RPATH/RUNPATH but needs libzz.so.1 from the bundle"
        in report.check("run-paths").failures
    )


def test_missing_kernel_target(bundle, policy):
    for path in (bundle / "rocblas" / "library").glob("*gfx1151*"):
        path.unlink()
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"kernel-data"}
    assert report.check("kernel-data").failures == ("rocblas/library/ has no kernel files for gfx1151",)


def test_kernel_folder_missing_while_rocblas_ships(bundle, policy):
    shutil.rmtree(bundle / "rocblas")
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert report.check("kernel-data").failures == ("rocblas/library/ is missing although librocblas.so.5 is shipped",)


def test_stray_library_folder_beside_the_libraries(bundle, policy):
    (bundle / "library").mkdir()
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"kernel-data"}
    assert "rocBLAS would take it before rocblas/library" in report.check("kernel-data").failures[0]


def test_wrong_code_object_targets(bundle, policy, tmp_path):
    # a libggml-hip built for gfx1100 + gfx1151 in a gfx1151 job
    fat = fatbin_source([offload_bundle(["gfx1100", "gfx1151"]), offload_bundle(["gfx1151"])])
    cc(
        bundle / "libggml-hip.so.0",
        fat + "int ggml_hip_value(void){return 0;}",
        shared=True,
        soname="libggml-hip.so.0",
        rpath=("$ORIGIN",),
    )
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"code-objects"}
    assert report.check("code-objects").failures == (
        "libggml-hip.so.0 has device code for gfx1100, gfx1151: also has gfx1100",
    )


def test_job_targets_not_in_the_code_objects(bundle, policy):
    report = audit_bundle(bundle, ["gfx1151", "gfx1100"], policy=policy, backends=REGISTRY)
    assert failed(report) == {"kernel-data", "code-objects"}
    assert report.check("code-objects").failures == ("libggml-hip.so.0 has device code for gfx1151: lacks gfx1100",)


def test_libggml_hip_without_gpu_code(bundle, policy):
    cc(
        bundle / "libggml-hip.so.0",
        "int ggml_hip_value(void){return 0;}",
        shared=True,
        soname="libggml-hip.so.0",
        rpath=("$ORIGIN",),
    )
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert report.check("code-objects").failures == (
        "libggml-hip.so.0 has no .hip_fatbin section: it carries no GPU code",
    )


def test_glibc_version_above_a_ceiling(bundle, policy):
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    glibc, file = report.versions["GLIBC"]
    assert audit_bundle(bundle, policy=policy, max_versions={"GLIBC": glibc}, backends=REGISTRY).ok
    low = audit_bundle(bundle, policy=policy, max_versions={"GLIBC": "2.2.5"}, backends=REGISTRY)
    assert failed(low) == {"symbol-versions"}
    assert low.check("symbol-versions").failures == (f"{file} needs GLIBC_{glibc}, above the allowed GLIBC_2.2.5",)


def test_symlink_in_the_bundle(bundle, policy):
    (bundle / "libhsa.so").symlink_to("libhsa.so.1")
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"no-symlinks"}
    assert report.check("no-symlinks").failures == ("libhsa.so is a symlink",)


def test_dlopen_extra_missing(bundle, policy):
    (bundle / "libamd_comgr.so.3").unlink()
    (bundle / "libzz.so.1").unlink()
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"extras"}
    assert (
        report.check("extras")
        .failures[0]
        .startswith("libamd_comgr.so.* is missing although libamdhip64.so.7 is shipped")
    )


def test_foreign_architecture(bundle, policy, tmp_path):
    from support.bundles import elf32_stub

    elf32_stub(bundle / "libodd.so.1")
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"architecture"}


def test_targets_unknown_without_bundle_json(bundle, policy):
    (bundle / "bundle.json").unlink()
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert "the job's targets are unknown (no bundle.json): pass --targets" in report.check("kernel-data").failures
    assert audit_bundle(bundle, ["gfx1151"], policy=policy, backends=REGISTRY).ok


def test_not_a_folder(tmp_path):
    with pytest.raises(BundleError, match="is not a folder"):
        audit_bundle(tmp_path / "nope", backends=REGISTRY)


# ------------------------------------------------------------------------------------------------ what is no bundle


def random_bytes(size: int) -> bytes:
    return random.Random(size).randbytes(size)  # starts neither with \x7fELF nor MZ


def test_empty_folder_is_no_bundle(tmp_path, policy):
    report = audit_bundle(tmp_path, ["gfx1151"], policy=policy, backends=REGISTRY)
    assert failed(report) == {"programs"}
    assert report.check("programs").failures == (
        "the bundle is empty: no program (such as llama-server or llama-cli) and no library",
    )


def test_a_random_file_named_like_a_library_is_no_bundle(tmp_path, policy):
    (tmp_path / "libfoo.so").write_bytes(random_bytes(4096))
    report = audit_bundle(tmp_path, ["gfx1151"], policy=policy, backends=REGISTRY)
    assert failed(report) == {"file-formats", "programs"}
    (failure,) = report.check("file-formats").failures
    assert failure.startswith(
        "libfoo.so is named like a shared library but is not an ELF file (4096 bytes of unrecognised data starting "
    )
    assert report.check("programs").failures == (
        "no program: the bundle holds 1 file but not an ELF executable (such as llama-server or llama-cli)",
    )


def test_libraries_without_a_program(bundle, policy):
    (bundle / "app").unlink()
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"programs"}
    assert report.check("programs").failures == (
        "no program: the bundle holds 8 libraries but not an ELF executable (such as llama-server or llama-cli)",
    )


def test_program_without_the_execute_permission(bundle, policy):
    (bundle / "app").chmod(0o644)
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"programs"}
    assert report.check("programs").failures == (
        "app is a program without the execute permission (mode 644): chmod +x it",
    )


@pytest.mark.parametrize(
    ("name", "data", "what"),
    [
        ("libfoo.so", random_bytes(512), "512 bytes of unrecognised data starting "),
        ("libfoo.so.1", b"", "an empty file"),
        ("libfoo.so.1.2.3", b"/* GNU ld script */\nINPUT(libfoo.so.1)\n", "a linker script"),
        ("rocblas/library/libstray.so", b"not a library\n", "a text file of 14 bytes"),
    ],
)
def test_any_file_named_like_a_library_must_be_an_elf_file(bundle, policy, name, data, what):
    (bundle / name).write_bytes(data)
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert failed(report) == {"file-formats"}
    (failure,) = report.check("file-formats").failures
    assert failure.startswith(f"{name} is named like a shared library but is not an ELF file ({what}")


def test_kernel_files_are_not_taken_for_libraries(bundle, policy):
    (bundle / "rocblas" / "library" / "Kernels.so-000-gfx1151.hsaco").write_bytes(random_bytes(300))
    assert audit_bundle(bundle, policy=policy, backends=REGISTRY).ok


@pytest.mark.parametrize("name", ["app", "libggml-base.so.0"])
@pytest.mark.parametrize("keep", [10, 40, 100, 2000, -64])
def test_a_truncated_elf_file_is_an_audit_failure(bundle, policy, name, keep):
    path = bundle / name
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    size = len(data[:keep])
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)  # no exception: a failed check
    assert "file-formats" in failed(report)
    assert report.check("file-formats").failures[0].startswith(f"{name} is a truncated ELF file ({size} of the ")


def test_a_damaged_elf_file_is_an_audit_failure(bundle, policy):
    path = bundle / "libggml-base.so.0"
    with open(path, "rb") as fh:
        dynamic = next(s for s in ELFFile(fh).iter_segments() if s["p_type"] == "PT_DYNAMIC")
        offset, size = dynamic["p_offset"], dynamic["p_filesz"]
    data = bytearray(path.read_bytes())
    data[offset : offset + size] = bytes(size)  # as long as before, but no dynamic table
    path.write_bytes(bytes(data))
    report = audit_bundle(bundle, policy=policy, backends=REGISTRY)
    assert "file-formats" in failed(report)
    assert report.check("file-formats").failures == (
        "libggml-base.so.0 is a damaged ELF file (dynamic table without DT_STRTAB; damaged file)",
    )


def test_windows_files_named_like_dlls_and_programs_must_be_pe_files(tmp_path):
    (tmp_path / "llama-server.exe").write_bytes(b"\x7fELF-not-really server")
    (tmp_path / "ggml-hip.dll").write_bytes(b"hip " * 64)
    report = audit_bundle(tmp_path, ["gfx1151"], backends=REGISTRY)
    assert report.platform == "windows"
    assert {"file-formats", "programs"} <= failed(report)
    assert report.check("file-formats").failures == (
        "ggml-hip.dll is named like a DLL but is not a PE file (a text file of 256 bytes)",
        "llama-server.exe is named like a Windows program but is not a PE file (an ELF file)",
    )
    assert report.check("programs").failures == (
        "no program: the bundle holds 2 files but not a .exe program (such as llama-server.exe or llama-cli.exe)",
    )


@pytest.mark.parametrize("case", ["empty", "libfoo", "truncated"])
def test_cli_audit_exits_10_naming_the_problem(good, tmp_path, run_rockbuild, case):
    """What the user ran: every one of these passed (exit 0) or crashed with the bundle code (9) before."""
    folder = tmp_path / "b"
    policy = write_policy(tmp_path / "p.yaml")
    if case == "truncated":
        shutil.copytree(good, folder)
        data = (folder / "libggml-base.so.0").read_bytes()
        (folder / "libggml-base.so.0").write_bytes(data[:2000])
        first = "file-formats: libggml-base.so.0 is a truncated ELF file (2000 of the "
        assert len(data) > 2000
    else:
        folder.mkdir()
        if case == "libfoo":
            (folder / "libfoo.so").write_bytes(random_bytes(4096))
            first = "file-formats: libfoo.so is named like a shared library but is not an ELF file"
        else:
            first = "programs: the bundle is empty"
    result = run_rockbuild("audit", "--targets", "gfx1151", "--policy", str(policy), str(folder))
    assert result.returncode == 10, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {folder}: ") and f"audit failure(s), first: {first}" in line
    assert "FAILED" in result.stdout.splitlines()[0]
    as_json = run_rockbuild("audit", "--json", "--targets", "gfx1151", "--policy", str(policy), str(folder))
    assert as_json.returncode == 10 and not json.loads(as_json.stdout)["ok"]


def test_the_audit_asks_the_backends_it_is_handed(bundle, policy):
    """The audit imports no backend: it asks the ones it is handed (the pipeline's rockbuild.backends.REGISTRY, here a
    test's own), by bundle.json's backend, for that backend's own checks."""
    from rockbuild.core.vocabulary import Check

    rocm = REGISTRY.get("rocm")
    asked: list[tuple[str, object]] = []

    class Picky:  # ROCm's answers, and one check of its own that fails
        name, label, needs_rocm, per_target = "rocm", "ROCm", True, True
        bundle_platform = rocm.bundle_platform

        def audit_checks(self, root, names, targets, rules, binaries, *, record, windows):
            checks, fat = rocm.audit_checks(root, names, targets, rules, binaries, record=record, windows=windows)
            return [*checks, Check("picky", False, ("the test's backend says no",))], fat

    class Backends:
        def get(self, name):
            asked.append(("get", name))
            return Picky()

        def all(self):
            return [Picky()]

        def of_bundle(self, names, recorded, platform):
            asked.append(("of_bundle", recorded))
            return Picky()

    report = audit_bundle(bundle, policy=policy, backends=Backends())
    assert asked == [("of_bundle", "rocm")]  # bundle.json says which
    assert failed(report) == {"picky"}
    assert report.backend == "rocm"
    report = audit_bundle(bundle, policy=policy, backends=Backends(), backend="rocm")
    assert asked[-1] == ("get", "rocm") and failed(report) == {"picky"}
