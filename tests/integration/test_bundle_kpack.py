"""TheRock's kpack references (``.rocm_kpack_ref``) in a flat bundle: read, made to name the bundle's ``.kpack/``, and
audited. The split libraries are real shared objects built here with gcc; objcopy adds the section with the
MessagePack marker TheRock's kpacker writes (kernel_name, kpack_search_paths)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rockbuild.backends import REGISTRY
from rockbuild.bundle.audit import audit_bundle, check_kpack_refs
from rockbuild.bundle.kpack import flatten_refs, kpack_refs

pytestmark = pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("objcopy")), reason="needs gcc and objcopy (binutils)"
)


def mp_str(text: str) -> bytes:
    data = text.encode()
    return (bytes([0xA0 | len(data)]) if len(data) < 32 else b"\xd9" + bytes([len(data)])) + data


def marker(kernel_name: str, paths: list[str]) -> bytes:
    """{"kernel_name": ..., "kpack_search_paths": [...]} in MessagePack."""
    return (
        b"\x82"
        + mp_str("kernel_name")
        + mp_str(kernel_name)
        + mp_str("kpack_search_paths")
        + bytes([0x90 | len(paths)])
        + b"".join(mp_str(p) for p in paths)
    )


def add_marker(lib: Path, paths: list[str]) -> None:
    """Give ``lib`` the .rocm_kpack_ref section TheRock's kpacker writes, naming ``paths``."""
    blob = lib.with_name(lib.name + ".marker")
    blob.write_bytes(marker(f"lib/{lib.name}", paths))
    subprocess.run(
        [
            "objcopy",
            "--add-section",
            f".rocm_kpack_ref={blob}",
            "--set-section-flags",
            ".rocm_kpack_ref=noload,readonly",
            lib,
        ],
        check=True,
    )
    blob.unlink()


def split_library(path: Path, paths: list[str]) -> Path:
    """A shared object built here with a .rocm_kpack_ref section naming ``paths``."""
    src = path.with_suffix(".c")
    src.write_text("int blas_value(void) { return 7; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", path, src, f"-Wl,-soname,{path.name}"], check=True)
    src.unlink()
    add_marker(path, paths)
    return path


def test_refs_are_read_flattened_in_place_and_the_library_still_loads(tmp_path):
    lib = split_library(
        tmp_path / "librocblas.so.5", ["../.kpack/blas_lib.kpm", "../../../.kpack/blas_lib_gfx1151.kpack"]
    )
    assert kpack_refs(lib) == ["../.kpack/blas_lib.kpm", "../../../.kpack/blas_lib_gfx1151.kpack"]
    before = lib.read_bytes()
    changes = flatten_refs(lib)
    assert changes == [
        {"from": "../.kpack/blas_lib.kpm", "to": ".//.kpack/blas_lib.kpm"},
        {"from": "../../../.kpack/blas_lib_gfx1151.kpack", "to": ".////////.kpack/blas_lib_gfx1151.kpack"},
    ]
    after = lib.read_bytes()
    assert len(after) == len(before)
    differing = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert len(differing) == 1 + 5  # "../" -> ".//": one byte; "../../../" -> ".////////": five
    assert kpack_refs(lib) == [c["to"] for c in changes]
    assert flatten_refs(lib) == []  # nothing left to change: idempotent
    # the file is still a library the dynamic loader takes
    probe = tmp_path / "probe.c"
    probe.write_text(
        "#include <dlfcn.h>\nint main(int c, char** v) { void* h = dlopen(v[1], RTLD_NOW);"
        ' return h && ((int(*)(void))dlsym(h, "blas_value"))() == 7 ? 0 : 1; }\n'
    )
    subprocess.run(["gcc", "-o", tmp_path / "probe", probe, "-ldl"], check=True)
    assert subprocess.run([tmp_path / "probe", str(lib)]).returncode == 0


def check_refs(bundle: Path, files: list[Path]) -> tuple[list[str], list[str], dict]:
    check = check_kpack_refs(bundle, files)
    return list(check.failures), list(check.warnings), dict(check.details)


def test_the_audit_fails_a_library_whose_gpu_code_is_out_of_the_bundle(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    lib = split_library(bundle / "librocblas.so.5", ["../.kpack/blas_lib.kpm"])
    (bundle / ".kpack").mkdir()
    (bundle / ".kpack" / "blas_lib.kpm").write_bytes(b"manifest")
    (tmp_path / ".kpack").mkdir()  # even when the parent happens to have one: it is not the bundle's
    (tmp_path / ".kpack" / "blas_lib.kpm").write_bytes(b"manifest")
    failures, _warnings, details = check_refs(bundle, [lib])
    assert failures == [
        "librocblas.so.5 looks for its GPU code in ../.kpack/blas_lib.kpm, which points out of the "
        "bundle: no GPU kernels for it on any machine"
    ]
    assert details["librocblas.so.5"]["found"] == []
    report = audit_bundle(bundle, ["gfx1151"], platform="linux", backend="rocm", backends=REGISTRY)
    check = next(c for c in report.checks if c.name == "kpack-refs")
    assert not check.ok and "points out of the bundle" in check.failures[0]

    flatten_refs(lib)
    failures, warnings, details = check_refs(bundle, [lib])
    assert (failures, warnings) == ([], [])
    assert details["librocblas.so.5"]["found"] == [".//.kpack/blas_lib.kpm"]
    (bundle / ".kpack" / "blas_lib.kpm").unlink()
    failures, _warnings, _details = check_refs(bundle, [lib])
    assert failures and "is not in the bundle" in failures[0]


def test_a_bundle_of_a_split_rocm_tree_ships_refs_that_name_its_own_kpack(tmp_path):
    """Through the bundle step (test_mixed's multi-arch tree, whose rocBLAS gets TheRock's marker): the library is
    copied, pruned, patched, its reference flattened, recorded in bundle.json and audited."""
    from support.bundles import make_bundle
    from support.kpack import MIXED, POLICY, kpack_tree, offload_tool

    from rockbuild.bundle.policy import load_policy
    from rockbuild.rocm.layout import detect_layout

    tree = kpack_tree(tmp_path / "tree")
    add_marker(tree["lib"] / "librocblas.so.5.0", ["../.kpack/blas_lib.kpm"])
    offload_tool(tree["rocm"] / "lib" / "llvm" / "bin")
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    out = tmp_path / "bundle"
    report = make_bundle(tree["build"], detect_layout(tree["rocm"]), list(MIXED), out, policy=load_policy(policy))
    assert report.audit is not None and report.audit.ok, report.audit.failures
    meta = json.loads((out / "bundle.json").read_text())
    assert meta["kpack_refs"] == [
        {"file": "librocblas.so.5", "from": "../.kpack/blas_lib.kpm", "to": ".//.kpack/blas_lib.kpm"}
    ]
    check = next(c for c in meta["audit"]["checks"] if c["name"] == "kpack-refs")
    assert check["ok"] and check["details"]["librocblas.so.5"]["found"] == [".//.kpack/blas_lib.kpm"]
    assert kpack_refs(out / "librocblas.so.5") == [".//.kpack/blas_lib.kpm"]
    assert kpack_refs(tree["lib"] / "librocblas.so.5.0") == ["../.kpack/blas_lib.kpm"]  # the root is untouched
