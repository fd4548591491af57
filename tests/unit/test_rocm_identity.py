"""A ROCm tree kept at one path (rocm.fetch.stable_root) and what keeps builds against it right: the build folder
is emptied when its objects were compiled against another tree (neither CMake nor ninja would see a new clang behind
the same path), and ccache hashes the device libraries, which are no header (issue 41 item 3)."""

from __future__ import annotations

import json
from pathlib import Path

from rockbuild.archive import write_marker
from rockbuild.backends.rocm import device_bitcode, toolchain_variables
from rockbuild.core.vocabulary import Toolchain
from rockbuild.llamacpp.driver import empty_for_another_rocm, rocm_identity


def _tree(root: Path, sha256: str) -> Path:
    (root / "lib/llvm/amdgcn/bitcode").mkdir(parents=True)
    for name in ("ocml.bc", "ockl.bc", "oclc_isa_version_1151.bc"):
        (root / "lib/llvm/amdgcn/bitcode" / name).write_bytes(name.encode())
    (root / "lib/llvm/amdgcn/bitcode/README").write_text("not bitcode")
    write_marker(root, {"name": f"therock-{sha256[:4]}.tar.gz", "sha256": sha256, "size": 1})
    return root


def _toolchain(root: Path) -> Toolchain:
    bin_dir = root / "lib/llvm/bin"
    return Toolchain(
        platform="linux",
        kind="therock",
        prefix=str(root),
        llvm_bin=str(bin_dir),
        c_compiler=str(bin_dir / "clang"),
        cxx_compiler=str(bin_dir / "clang++"),
        device_lib_dir=str(root / "lib/llvm/amdgcn/bitcode"),
        device_lib_in_resource_dir=False,
    )


def test_a_build_folder_is_emptied_when_the_tree_behind_its_path_changed(tmp_path):
    root = _tree(tmp_path / "rocm" / "therock-linux-gfx1151", "a" * 64)
    build = tmp_path / "out" / "build"
    assert not empty_for_another_rocm(build, rocm_identity(str(root)))  # a new folder: nothing to empty
    (build / "ggml.o").write_text("compiled against nightly a")
    assert not empty_for_another_rocm(build, rocm_identity(str(root)))  # the same tree: kept
    assert (build / "ggml.o").exists()
    write_marker(root, {"name": "therock-b.tar.gz", "sha256": "b" * 64, "size": 1})  # the next nightly, same path
    assert empty_for_another_rocm(build, rocm_identity(str(root)))
    assert build.is_dir() and [p.name for p in build.iterdir()] == [".rockbuild-rocm.json"]
    assert json.loads((build / ".rockbuild-rocm.json").read_text()) == {"rocm": "b" * 64}


def test_a_folder_without_rocm_is_never_emptied_for_it(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    (build / "ggml.o").write_text("a Vulkan job's object")
    assert rocm_identity(None) is None and rocm_identity(str(tmp_path / "opt-rocm")) is None  # no marker
    assert not empty_for_another_rocm(build, None)
    assert (build / "ggml.o").exists() and not (build / ".rockbuild-rocm.json").exists()


def test_ccache_hashes_the_device_libraries(tmp_path):
    root = _tree(tmp_path / "tree", "a" * 64)
    libs = device_bitcode(str(root / "lib/llvm/amdgcn/bitcode"))
    assert [Path(p).name for p in libs] == ["ockl.bc", "oclc_isa_version_1151.bc", "ocml.bc"]
    variables = toolchain_variables(_toolchain(root), tmp_path / "ccache")
    assert variables["CCACHE_EXTRAFILES"].split(":") == libs
    assert "CCACHE_EXTRAFILES" not in toolchain_variables(_toolchain(root))  # no ccache, nothing to tell it
    assert device_bitcode(str(tmp_path / "missing")) == []
