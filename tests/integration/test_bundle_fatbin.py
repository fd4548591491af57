"""Reading .hip_fatbin offload bundles: uncompressed and CCOB (v2/v3, zstd/zlib) in gcc-built ELF files, checked
against LLVM's own clang-offload-bundler (from the Debian ROCm root, when present) and against Debian's rocBLAS."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.bundles import cc, ccob, fatbin_source, offload_bundle
from support.offload import (
    COMGR_UNBUNDLE,
    LIBDIR,
    ROCM_ROOT,
    bundler_command,
    fake_offload_bundler,
    real_offload_bundler,
)

from rockbuild.backends import REGISTRY
from rockbuild.bundle.fatbin import _Section, iter_bundles, read_fatbin
from rockbuild.core.errors import BundleError


def lib_with(tmp_path: Path, blobs: list[bytes], name: str = "libfat.so") -> Path:
    return cc(tmp_path / name, fatbin_source(blobs) + "int f(void){return 1;}", shared=True, soname=name)


def test_uncompressed_bundles_in_an_elf(tmp_path):
    lib = lib_with(tmp_path, [offload_bundle(["gfx1151"], payload=100), offload_bundle(["gfx1151"], payload=28)])
    report = read_fatbin(lib)
    assert report is not None and len(report.bundles) == 2 and report.compressed == 0
    assert report.targets == ("gfx1151",)
    assert report.device_bytes() == {"gfx1151": 128}
    assert [e.triple for e in report.bundles[0].entries] == [
        "host-x86_64-unknown-linux-gnu-",
        "hipv4-amdgcn-amd-amdhsa--gfx1151",
    ]


@pytest.mark.parametrize(("version", "method"), [(3, "zstd"), (2, "zstd"), (2, "zlib")])
def test_compressed_bundles(tmp_path, version, method):
    blobs = [
        ccob(offload_bundle(["gfx1100", "gfx90a:xnack+"], payload=5000), version=version, method=method),
        ccob(offload_bundle(["gfx1100", "gfx90a:xnack+"], payload=10), version=version, method=method),
    ]
    report = read_fatbin(lib_with(tmp_path, blobs))
    assert report.compressed == 2 and {b.compression for b in report.bundles} == {method}
    assert report.targets == ("gfx90a", "gfx1100")
    assert report.bundles[0].entries[2].target == "gfx90a:xnack+"


def test_a_bundle_with_many_entries_needs_more_than_the_first_read(tmp_path):
    targets = [f"gfx{n}" for n in range(1000, 1400)]  # a header of ~23 KiB, > the first 4 KiB read
    report = read_fatbin(lib_with(tmp_path, [offload_bundle(targets, payload=1)]))
    assert len(report.targets) == 400
    compressed = read_fatbin(lib_with(tmp_path, [ccob(offload_bundle(targets * 4, payload=1))], "libc.so"))
    assert len(compressed.bundles[0].entries) == 1601


def test_a_library_without_fatbin(tmp_path):
    assert read_fatbin(cc(tmp_path / "libplain.so", "int f(void){return 1;}", shared=True)) is None


def test_garbage_in_the_section_is_an_error(tmp_path):
    lib = lib_with(tmp_path, [offload_bundle(["gfx1151"]), b"NOT A BUNDLE"])
    with pytest.raises(BundleError, match="unexpected bytes at 0x1000 of .hip_fatbin"):
        read_fatbin(lib)


def test_truncated_bundle_is_an_error():
    blob = offload_bundle(["gfx1151"], payload=64)
    with pytest.raises(BundleError, match="runs past the end"):
        list(iter_bundles(_Section(blob[:-10], 0, len(blob) - 10), "x"))
    cut = ccob(offload_bundle(["gfx1151"]))[:-5]
    with pytest.raises(BundleError, match="runs past the end"):
        list(iter_bundles(_Section(cut, 0, len(cut)), "x"))


# ------------------------------------------------------------------------------------------------ against LLVM's tool


def _listed(bundler: list[str], blob: bytes, tmp_path: Path) -> set[str]:
    path = tmp_path / "blob.bin"
    path.write_bytes(blob)
    out = subprocess.run(
        [*bundler, "--list", "--type=o", f"--input={path}"], capture_output=True, text=True, check=True, timeout=60
    )
    return set(out.stdout.split())


@pytest.mark.parametrize("kind", ["plain", "ccob3", "ccob2", "zlib"])
def test_our_reading_matches_clang_offload_bundler(tmp_path, kind):
    bundler = bundler_command()
    plain = offload_bundle(["gfx1151", "gfx90a:xnack+", "gfx1201"])
    blob = {
        "plain": plain,
        "ccob3": ccob(plain),
        "ccob2": ccob(plain, version=2),
        "zlib": ccob(plain, version=2, method="zlib"),
    }[kind]
    ours = list(iter_bundles(_Section(blob, 0, len(blob)), kind))
    assert {e.triple for e in ours[0].entries} == _listed(bundler, blob, tmp_path)


def test_debian_rocblas_matches_clang_offload_bundler_and_the_reference(tmp_path):
    lib = LIBDIR / "librocblas.so.5.2"
    if not lib.is_file():
        pytest.skip(f"{lib} is absent (tests/e2e/provision.sh makes that root)")
    bundler = bundler_command()
    report = read_fatbin(lib)
    # bundling.md 5: 65 CCOB v3 bundles, 1,028,248,448 bytes of device code, 14 targets, gfx1151 72,818,216
    assert len(report.bundles) == 65 and report.compressed == 65
    assert sum(b.uncompressed_size for b in report.bundles) == 1_028_248_448
    assert len(report.targets) == 14 and report.device_bytes()["gfx1151"] == 72_818_216
    first = report.bundles[0]
    with open(lib, "rb") as fh:
        fh.seek(report.section_offset + first.offset)
        blob = fh.read(first.size)
    assert {e.triple for e in first.entries} == _listed(bundler, blob, tmp_path)


# ------------------------------------------------------------------------------------------------ pruning


def code_objects(path: Path) -> dict[tuple[int, str], bytes]:
    """Every device code object in ``path``'s fat binary: (bundle index, target id) -> bytes."""
    import zstandard

    report = read_fatbin(path)
    out = {}
    data = path.read_bytes()
    for index, bundle in enumerate(report.bundles):
        stored = data[report.section_offset + bundle.offset : report.section_offset + bundle.offset + bundle.size]
        if bundle.compression == "zstd":
            header = 32 if bundle.version == 3 else 24
            content = zstandard.ZstdDecompressor().stream_reader(stored[header:]).read(bundle.uncompressed_size)
        elif bundle.compression == "zlib":
            import zlib

            content = zlib.decompress(stored[24:])
        else:
            content = stored
        for entry in bundle.entries:
            if entry.target:
                out[(index, entry.target)] = content[entry.offset : entry.offset + entry.size]
    return out


MIXED = [
    ("ccob3", ["gfx1100", "gfx1151", "gfx90a:xnack+"]),
    ("ccob2", ["gfx1151", "gfx1201"]),
    ("zlib", ["gfx1030", "gfx1151"]),
    ("plain", ["gfx1100", "gfx1151"]),
    ("ccob3", ["gfx1151"]),  # nothing to drop: left byte for byte
]


def mixed_library(tmp_path: Path) -> Path:
    blobs = []
    for kind, targets in MIXED:
        plain = offload_bundle(targets, payload=20000)
        blobs.append(
            {
                "plain": plain,
                "ccob3": ccob(plain),
                "ccob2": ccob(plain, version=2),
                "zlib": ccob(plain, version=2, method="zlib"),
            }[kind]
        )
    return lib_with(tmp_path, blobs, "libmixed.so")


def test_prune_keeps_only_the_job_targets_in_place(tmp_path):
    from rockbuild.bundle.fatbin import prune_fatbin

    lib = mixed_library(tmp_path)
    original = lib.read_bytes()
    before = code_objects(lib)
    report = prune_fatbin(lib, ["gfx1151"])
    assert (report.bundles, report.rewritten, report.entries_dropped) == (5, 4, 5)
    assert lib.stat().st_size == len(original)  # nothing moves: the section is referenced by address
    after = code_objects(lib)
    assert set(after) == {(i, "gfx1151") for i in range(5)}
    assert all(after[key] == before[key] for key in after)  # the kept code objects are byte-identical
    fat = read_fatbin(lib)
    assert fat.targets == ("gfx1151",) and [b.offset for b in fat.bundles] == [
        b.offset for b in read_fatbin_bytes(original, fat)
    ]
    assert report.bytes_after < report.bytes_before and report.bytes_zeroed > 0
    # the last bundle had nothing to drop
    last = fat.bundles[-1]
    start = fat.section_offset + last.offset
    assert lib.read_bytes()[start : start + last.size] == original[start : start + last.size]
    # and the library still loads
    exe = cc(tmp_path / "exe", "int f(void);\nint main(void){return f()-1;}", libs=(lib,), runpath=(str(tmp_path),))
    assert subprocess.run([str(exe)], env={}, timeout=30).returncode == 0


def read_fatbin_bytes(data: bytes, like) -> list:
    return list(iter_bundles(_Section(data, like.section_offset, like.section_size), "original"))


@pytest.mark.parametrize("kind", ["ccob3", "ccob2", "zlib", "plain"])
def test_pruned_bundles_unbundle_identically_with_clang_offload_bundler(tmp_path, kind):
    from rockbuild.bundle.fatbin import prune_fatbin

    bundler = bundler_command()
    targets = ["gfx1100", "gfx1151", "gfx90a:xnack+"]
    plain = offload_bundle(targets, payload=9000)
    blob = {
        "plain": plain,
        "ccob3": ccob(plain),
        "ccob2": ccob(plain, version=2),
        "zlib": ccob(plain, version=2, method="zlib"),
    }[kind]
    lib = lib_with(tmp_path, [blob])
    prune_fatbin(lib, ["gfx1151"])
    fat = read_fatbin(lib)
    bundle = fat.bundles[0]
    pruned = lib.read_bytes()[fat.section_offset + bundle.offset : fat.section_offset + bundle.offset + bundle.size]
    assert _listed(bundler, pruned, tmp_path) == {"host-x86_64-unknown-linux-gnu-", "hipv4-amdgcn-amd-amdhsa--gfx1151"}
    for name, data in (("orig", blob), ("pruned", pruned)):
        (tmp_path / f"{name}.bin").write_bytes(data)
        subprocess.run(
            [
                *bundler,
                "--unbundle",
                "--type=o",
                "--targets=hipv4-amdgcn-amd-amdhsa--gfx1151",
                f"--input={tmp_path / f'{name}.bin'}",
                f"--output={tmp_path / f'{name}.co'}",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
    assert (tmp_path / "orig.co").read_bytes() == (tmp_path / "pruned.co").read_bytes()


def test_comgr_unbundles_a_pruned_rocblas_bundle_as_the_hip_runtime_does(tmp_path):
    """HIP hands a compressed bundle (totalSize bytes) to comgr's UNBUNDLE action (clr hip_code_object.cpp); the
    real comgr of the Debian root must return the same gfx1151 code object from the pruned and the original."""
    from rockbuild.bundle.fatbin import prune_fatbin

    python = ROCM_ROOT / "usr" / "bin" / "python3"
    comgr = LIBDIR / "libamd_comgr.so.3"
    source = LIBDIR / "librocblas.so.5.2"
    if not (python.exists() and comgr.is_file() and source.is_file()):
        pytest.skip(f"no python3, comgr and rocBLAS in {ROCM_ROOT} (tests/e2e/provision.sh makes that root)")
    lib = tmp_path / "librocblas.so.5"
    lib.write_bytes(source.read_bytes())
    original = read_fatbin(lib)
    prune_fatbin(lib, ["gfx1151"])
    pruned = read_fatbin(lib)
    script = tmp_path / "unbundle.py"
    script.write_text(COMGR_UNBUNDLE)
    real_python = python.resolve() if not python.is_symlink() else LIBDIR.parent.parent / "bin" / os.readlink(python)
    results = []
    for report, path in ((original, source), (pruned, lib)):
        bundle = report.bundles[3]
        with open(path, "rb") as fh:
            fh.seek(report.section_offset + bundle.offset)
            (tmp_path / "b.bin").write_bytes(fh.read(bundle.size))
        run = subprocess.run(
            [
                str(LIBDIR / "ld-linux-x86-64.so.2"),
                "--library-path",
                str(LIBDIR),
                str(real_python),
                str(script),
                str(comgr),
                str(tmp_path / "b.bin"),
                "hipv4-amdgcn-amd-amdhsa--gfx1151",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTHONHOME": str(ROCM_ROOT / "usr")},
        )
        assert run.returncode == 0, run.stderr[-2000:]
        results.append(run.stdout.split())
    assert results[0] == results[1] and int(results[0][0]) > 0


# ------------------------------------------------------------------------------------------------ the independent proof


def _tools(tmp_path: Path):
    """The e2e root's LLVM offload tools, run from here through its own loader (skips when the root is absent)."""
    from rockbuild.bundle.fatbin import OffloadTools

    bundler = bundler_command()
    return OffloadTools(bundler=Path(bundler[-1]), version="test", loader=tuple(bundler[:-1]))


def _patchelf() -> str:
    from rockbuild.bundle.plan import patchelf_tool

    return str(patchelf_tool())


def pruned_pair(tmp_path: Path, targets=("gfx1151",), blobs=None) -> tuple[Path, Path]:
    """An original library and its shipped copy as the bundle step makes it: copied, pruned, patched."""
    original = mixed_library(tmp_path) if blobs is None else lib_with(tmp_path, blobs, "libmixed.so")
    shipped = tmp_path / "ship" / original.name
    shipped.parent.mkdir()
    shutil.copyfile(original, shipped)
    from rockbuild.bundle.fatbin import prune_fatbin

    prune_fatbin(shipped, list(targets))
    subprocess.run([_patchelf(), "--set-rpath", "$ORIGIN", str(shipped)], check=True)
    return original, shipped


def test_verify_pruned_proves_a_pruned_and_patched_library(tmp_path):
    from rockbuild.bundle.fatbin import elf_identity, verify_pruned

    tools = _tools(tmp_path)
    original, shipped = pruned_pair(tmp_path)
    proof = verify_pruned(original, shipped, ["gfx1151"], tools, scratch=tmp_path)
    assert proof.ok, proof.failures
    assert proof.bundles == 5 and proof.bundles_rewritten == 4
    assert proof.code_objects == 5 and proof.code_object_bytes == 5 * 20000
    assert proof.kept == ("hipv4-amdgcn-amd-amdhsa--gfx1151", "host-x86_64-unknown-linux-gnu-")
    assert proof.kept_targets == ("gfx1151",)
    assert proof.identity == elf_identity(original) and proof.identity["soname"] == "libmixed.so"
    assert proof.cross_check == "rockbuild's reader decompressed the same 5 code objects from the original"
    assert not list(tmp_path.glob(".rockbuild-verify-*"))  # the scratch folder is gone
    data = proof.to_dict()
    assert (
        data["ok"]
        and data["kept_targets"] == ["gfx1151"]
        and data["sha256"] == hashlib.sha256(shipped.read_bytes()).hexdigest()
    )


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))


def test_verify_pruned_catches_one_wrong_byte_in_a_kept_code_object(tmp_path):
    from rockbuild.bundle.fatbin import verify_pruned

    tools = _tools(tmp_path)
    original, shipped = pruned_pair(tmp_path, blobs=[offload_bundle(["gfx1100", "gfx1151"], payload=9000)])
    fat = read_fatbin(shipped)
    (entry,) = [e for e in fat.bundles[0].entries if e.gfx == "gfx1151"]
    _flip(shipped, fat.section_offset + fat.bundles[0].offset + entry.offset + 4321)
    proof = verify_pruned(original, shipped, ["gfx1151"], tools, scratch=tmp_path)
    assert not proof.ok
    assert any(
        "the hipv4-amdgcn-amd-amdhsa--gfx1151 code object differs from the original's" in f for f in proof.failures
    ), proof.failures


def test_verify_pruned_catches_a_damaged_compressed_bundle(tmp_path):
    from rockbuild.bundle.fatbin import verify_pruned

    tools = _tools(tmp_path)
    original, shipped = pruned_pair(tmp_path, blobs=[ccob(offload_bundle(["gfx1100", "gfx1151"], payload=9000))])
    fat = read_fatbin(shipped)
    _flip(shipped, fat.section_offset + fat.bundles[0].offset + fat.bundles[0].size // 2)
    proof = verify_pruned(original, shipped, ["gfx1151"], tools, scratch=tmp_path)
    assert not proof.ok and proof.failures


def test_verify_pruned_catches_a_wrong_kept_set(tmp_path):
    from rockbuild.bundle.fatbin import verify_pruned

    tools = _tools(tmp_path)
    original, shipped = pruned_pair(tmp_path)  # pruned to gfx1151
    # the job wanted gfx1100 too: the pruned library lacks it where the original had it
    proof = verify_pruned(original, shipped, ["gfx1151", "gfx1100"], tools, scratch=tmp_path)
    assert not proof.ok
    assert any(
        "bundle 0" in f and "expected the original's host entry and job targets" in f and "gfx1100" in f
        for f in proof.failures
    ), proof.failures
    # pruned to the wrong target altogether
    other = tmp_path / "other"
    other.mkdir()
    original, shipped = pruned_pair(other, targets=("gfx1100",))
    proof = verify_pruned(original, shipped, ["gfx1151"], tools, scratch=tmp_path)
    assert not proof.ok and any("expected the original's host entry and job targets" in f for f in proof.failures)


def _dynsym_entry(path: Path, name: str) -> int:
    """File offset of the .dynsym entry of symbol ``name``."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        dynsym = elf.get_section_by_name(".dynsym")
        for index, sym in enumerate(dynsym.iter_symbols()):
            if sym.name == name:
                return dynsym["sh_offset"] + index * dynsym["sh_entsize"]
    raise AssertionError(name)


def test_verify_pruned_catches_a_changed_dynamic_symbol_soname_or_needed(tmp_path):
    from rockbuild.bundle.fatbin import verify_pruned

    tools = _tools(tmp_path)
    original, shipped = pruned_pair(tmp_path)
    pristine = shipped.read_bytes()
    with open(shipped, "r+b") as fh:  # f's st_size (8 bytes at +16 of an Elf64_Sym)
        fh.seek(_dynsym_entry(shipped, "f") + 16)
        fh.write((999).to_bytes(8, "little"))
    proof = verify_pruned(original, shipped, ["gfx1151"], tools, scratch=tmp_path)
    assert not proof.ok and any("the dynamic symbols differ from the original's" in f for f in proof.failures)

    shipped.write_bytes(pristine)
    subprocess.run([_patchelf(), "--set-soname", "libother.so", "--add-needed", "libm.so.6", str(shipped)], check=True)
    proof = verify_pruned(original, shipped, ["gfx1151"], tools, scratch=tmp_path)
    failures = " | ".join(proof.failures)
    assert "SONAME 'libother.so' is not the original's 'libmixed.so'" in failures
    assert "NEEDED ['libm.so.6'" in failures


def test_verify_pruned_catches_other_sections_changed(tmp_path):
    from elftools.elf.elffile import ELFFile

    from rockbuild.bundle.fatbin import verify_pruned

    tools = _tools(tmp_path)
    original, shipped = pruned_pair(tmp_path)
    with open(shipped, "rb") as fh:
        text = ELFFile(fh).get_section_by_name(".text")["sh_offset"]
    _flip(shipped, text + 1)
    proof = verify_pruned(original, shipped, ["gfx1151"], tools, scratch=tmp_path)
    assert not proof.ok and any("section .text differs from the original's" in f for f in proof.failures)


def test_find_offload_tools_runs_a_chroot_tool_through_its_loader(tmp_path):
    from rockbuild.bundle.fatbin import find_offload_tools
    from rockbuild.rocm.layout import detect_layout

    bundler_command()
    tools, why = find_offload_tools(detect_layout(ROCM_ROOT))
    assert tools is not None, why
    assert tools.loader[0].endswith("ld-linux-x86-64.so.2") and tools.loader[1] == "--library-path"
    assert "clang-offload-bundler version" in tools.version


def test_find_offload_tools_says_why_when_the_root_has_none(tmp_path):
    from support.bundles import make_tree

    from rockbuild.bundle.fatbin import find_offload_tools
    from rockbuild.rocm.layout import detect_layout

    tree = make_tree(tmp_path)
    tools, why = find_offload_tools(detect_layout(tree["rocm"]))
    assert tools is None and "has no" in why and "clang-offload-bundler" in why


# ------------------------------------------------------------------------------------------------ the bundle step


APP_OUTPUT = "base=1 hip=47 comgr=7 plug=3\n"


def _tree(tmp_path: Path):
    from support.bundles import make_tree, write_policy

    from rockbuild.bundle.policy import load_policy

    tree = make_tree(tmp_path / "tree")
    return tree, load_policy(write_policy(tmp_path / "policy.yaml"))


def test_bundles_prune_by_default_proved_by_the_roots_clang_offload_bundler(tmp_path):
    import json

    from support.bundles import make_bundle, run_clean

    from rockbuild.rocm.layout import detect_layout

    tree, policy = _tree(tmp_path)
    real_offload_bundler(tree["rocm"] / "lib" / "llvm" / "bin")
    out = tmp_path / "bundle"
    report = make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, policy=policy)
    assert report.audit.ok, report.audit.failures
    (pruned,) = report.pruned
    proof = pruned.verification
    assert proof is not None and proof.ok, proof
    assert (proof.bundles, proof.bundles_rewritten, proof.code_objects, proof.kept_targets) == (2, 2, 2, ("gfx1151",))
    assert proof.original == str(tree["lib"] / "librocblas.so.5.0")
    assert "verify" in report.seconds and run_clean(out / "app").stdout == APP_OUTPUT
    data = json.loads((out / "bundle.json").read_text())
    assert data["fatbin_pruning"]["done"] and data["fatbin_pruning"]["asked"] == "auto"
    assert data["pruned_fatbins"][0]["verification"]["ok"] is True
    code = report.audit.check("code-objects")
    (detail,) = code.details["pruned"]
    assert detail["verified"] and "2 code objects in 2 bundles byte-identical to the original's" in detail["summary"]
    assert "librocblas.so.5: pruned to gfx1151; clang-offload-bundler" in report.audit.render()


def test_without_a_tool_the_default_ships_fat_binaries_whole_and_says_why(tmp_path):
    from support.bundles import make_bundle

    from rockbuild.core.errors import BundleError
    from rockbuild.rocm.layout import detect_layout

    tree, policy = _tree(tmp_path)  # a fake TheRock tree: no clang-offload-bundler
    layout = detect_layout(tree["rocm"])
    report = make_bundle(tree["build"], layout, ["gfx1151"], tmp_path / "b", policy=policy)
    assert report.audit.ok and report.pruned == ()
    assert read_fatbin(tmp_path / "b" / "librocblas.so.5").targets == ("gfx90a", "gfx1100", "gfx1151")
    (warning,) = [w for w in report.plan.warnings if "not pruned" in w]
    assert warning.startswith("fat binaries not pruned (librocblas.so.5 ship every GPU target):")
    assert report.plan.pruning["done"] is False and "clang-offload-bundler" in report.plan.pruning["reason"]
    assert any("fat binaries not pruned" in w for w in report.audit.check("code-objects").warnings)
    with pytest.raises(BundleError, match="--prune-fatbin: .* could not be proved identical to the originals"):
        make_bundle(tree["build"], layout, ["gfx1151"], tmp_path / "c", policy=policy, prune_fatbin=True)
    off = make_bundle(tree["build"], layout, ["gfx1151"], tmp_path / "d", policy=policy, prune_fatbin=False)
    assert off.audit.ok and not off.audit.check("code-objects").warnings and off.plan.pruning["asked"] == "off"


def test_the_audit_fails_a_pruned_library_without_its_proof_or_changed_after_it(tmp_path):
    import json

    from support.bundles import make_bundle

    from rockbuild.bundle.audit import audit_bundle
    from rockbuild.rocm.layout import detect_layout

    tree, policy = _tree(tmp_path)  # what the record proves (no --rocm: as where the bundle is installed)
    fake_offload_bundler(tree["rocm"] / "lib" / "llvm" / "bin")
    out = tmp_path / "b"
    assert make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, policy=policy).audit.ok
    meta_path = out / "bundle.json"
    meta = json.loads(meta_path.read_text())
    pristine = json.dumps(meta)
    meta["pruned_fatbins"][0]["verification"] = None  # an older rockbuild's pruned bundle: not verified
    meta_path.write_text(json.dumps(meta))
    report = audit_bundle(out, policy=policy, backends=REGISTRY)
    assert not report.ok and report.check("code-objects").failures == (
        "librocblas.so.5 was pruned but not verified by an independent tool (not verified): bundle it again from its "
        "ROCm root",
    )
    assert "librocblas.so.5: pruned, NOT VERIFIED" in report.render()
    meta = json.loads(pristine)
    meta["pruned_fatbins"][0]["verification"]["ok"] = False
    meta["pruned_fatbins"][0]["verification"]["failures"] = ["librocblas.so.5 bundle 1: something"]
    meta_path.write_text(json.dumps(meta))
    failures = audit_bundle(out, policy=policy, backends=REGISTRY).check("code-objects").failures
    assert failures == ("librocblas.so.5 bundle 1: something",)
    meta_path.write_text(pristine)
    assert audit_bundle(out, policy=policy, backends=REGISTRY).ok
    # the dynamic identity is read again: a changed SONAME (same sha256 recorded) is caught
    subprocess.run([_patchelf(), "--set-soname", "librocblas.so.9", str(out / "librocblas.so.5")], check=True)
    meta = json.loads(pristine)
    meta["pruned_fatbins"][0]["verification"]["sha256"] = hashlib.sha256(
        (out / "librocblas.so.5").read_bytes()
    ).hexdigest()
    meta_path.write_text(json.dumps(meta))
    assert audit_bundle(out, policy=policy, backends=REGISTRY).check("code-objects").failures == (
        "librocblas.so.5: SONAME 'librocblas.so.9' is not the original's 'librocblas.so.5'",
    )


def test_the_pruned_copy_keeps_its_zeros_as_holes(tmp_path):
    from support.bundles import make_bundle

    from rockbuild.rocm.layout import detect_layout

    tree, policy = _tree(tmp_path)
    # a rocBLAS whose dropped targets are big: 3 x 1 MiB code objects, 2 of them dropped
    big = lib_with(
        tmp_path,
        [
            ccob(offload_bundle(["gfx1100", "gfx1151", "gfx90a"], payload=1 << 20), method="zlib"),
            offload_bundle(["gfx1100", "gfx1151", "gfx90a"], payload=1 << 20),
        ],
        "librocblas.so.5",
    )
    shutil.copyfile(big, tree["lib"] / "librocblas.so.5.0")
    fake_offload_bundler(tree["rocm"] / "lib" / "llvm" / "bin")
    report = make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], tmp_path / "b", policy=policy)
    assert report.audit.ok, report.audit.failures
    shipped = tmp_path / "b" / "librocblas.so.5"
    (pruned,) = report.pruned
    assert pruned.bytes_in_holes >= (2 << 20) - 2 * 4096  # the two dropped 1 MiB code objects, less partial blocks
    st = shipped.stat()
    # the zeros take no disk space: about 2 MiB less allocated than the size (the filesystem may allocate a few
    # blocks more than the data needs, e.g. ext4 around EOF, so a page of slack per MiB)
    assert st.st_size - st.st_blocks * 512 >= (2 << 20) - 16 * 4096
    assert read_fatbin(shipped).targets == ("gfx1151",)


def test_rockbuild_audit_with_the_rocm_root_runs_the_check_again(tmp_path):
    import json

    from support.bundles import make_bundle

    from rockbuild.bundle.audit import audit_bundle
    from rockbuild.bundle.fatbin import file_sha256
    from rockbuild.rocm.layout import detect_layout

    tree, policy = _tree(tmp_path)
    fake_offload_bundler(tree["rocm"] / "lib" / "llvm" / "bin")
    out = tmp_path / "b"
    made = make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, policy=policy)
    (note,) = made.audit.check("code-objects").details["checked_again"]
    assert note.startswith("the pruned fat binaries' records were checked; rockbuild audit --rocm ROOT")
    report = audit_bundle(out, policy=policy, rocm=tree["rocm"], backends=REGISTRY)
    (note,) = report.check("code-objects").details["checked_again"]
    assert report.ok and note.startswith("librocblas.so.5: checked again now with clang-offload-bundler against ")
    assert "passed (2 code objects" in note and note in report.render()
    # one byte of a kept code object changed, the record's sha256 forged to match: only the check run again sees it
    shipped = out / "librocblas.so.5"
    fat = read_fatbin(shipped)
    plain = fat.bundles[1]  # make_tree's uncompressed bundle
    (entry,) = [e for e in plain.entries if e.gfx == "gfx1151"]
    _flip(shipped, fat.section_offset + plain.offset + entry.offset + 100)
    meta = json.loads((out / "bundle.json").read_text())
    meta["pruned_fatbins"][0]["verification"]["sha256"] = file_sha256(shipped)
    (out / "bundle.json").write_text(json.dumps(meta))
    assert audit_bundle(out, policy=policy, backends=REGISTRY).ok  # the record alone cannot tell
    again = audit_bundle(out, policy=policy, rocm=tree["rocm"], backends=REGISTRY)
    assert not again.ok and any(
        f.startswith(
            "checked again: librocblas.so.5 bundle 1: the hipv4-amdgcn-amd-amdhsa--gfx1151 code object differs"
        )
        for f in again.check("code-objects").failures
    ), again.failures
    # an original that is not in the root given, or not the one it was pruned from, is a failure, never a pass
    meta["pruned_fatbins"][0]["verification"]["original"] = "/etc/passwd"
    (out / "bundle.json").write_text(json.dumps(meta))
    assert audit_bundle(out, policy=policy, rocm=tree["rocm"], backends=REGISTRY).check("code-objects").failures == (
        f"cannot check librocblas.so.5 again: its original /etc/passwd is not in {tree['rocm']}",
    )
    meta["pruned_fatbins"][0]["verification"]["original"] = str(tree["lib"] / "libplug.so.1")
    (out / "bundle.json").write_text(json.dumps(meta))
    (failure,) = audit_bundle(out, policy=policy, rocm=tree["rocm"], backends=REGISTRY).check("code-objects").failures
    assert failure.endswith("libplug.so.1 is not the original it was pruned from (sha256 differs)")
