"""Reading .hip_fatbin offload bundles: uncompressed and CCOB (v2/v3, zstd/zlib) in gcc-built ELF files, checked
against LLVM's own clang-offload-bundler (from the Debian ROCm root, when present) and against Debian's rocBLAS."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_bundle_support import cc, ccob, fatbin_source, offload_bundle

from rockbuild.bundle import BundleError
from rockbuild.bundle.fatbin import _Section, iter_bundles, read_fatbin

ROCM_ROOT = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e")) / "rocm-root"
LIBDIR = ROCM_ROOT / "usr" / "lib" / "x86_64-linux-gnu"


def lib_with(tmp_path: Path, blobs: list[bytes], name: str = "libfat.so") -> Path:
    return cc(tmp_path / name, fatbin_source(blobs) + "int f(void){return 1;}", shared=True, soname=name)


def test_uncompressed_bundles_in_an_elf(tmp_path):
    lib = lib_with(tmp_path, [offload_bundle(["gfx1151"], payload=100), offload_bundle(["gfx1151"], payload=28)])
    report = read_fatbin(lib)
    assert report is not None and len(report.bundles) == 2 and report.compressed == 0
    assert report.targets == ("gfx1151",)
    assert report.device_bytes() == {"gfx1151": 128}
    assert [e.triple for e in report.bundles[0].entries] == [
        "host-x86_64-unknown-linux-gnu-", "hipv4-amdgcn-amd-amdhsa--gfx1151"]


@pytest.mark.parametrize(("version", "method"), [(3, "zstd"), (2, "zstd"), (2, "zlib")])
def test_compressed_bundles(tmp_path, version, method):
    blobs = [ccob(offload_bundle(["gfx1100", "gfx90a:xnack+"], payload=5000), version=version, method=method),
             ccob(offload_bundle(["gfx1100", "gfx90a:xnack+"], payload=10), version=version, method=method)]
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


def _bundler() -> list[str]:
    tool = ROCM_ROOT / "usr" / "lib" / "llvm-22" / "bin" / "clang-offload-bundler"
    loader = LIBDIR / "ld-linux-x86-64.so.2"
    if not tool.is_file() or not loader.is_file():
        pytest.skip(f"no clang-offload-bundler in {ROCM_ROOT} (tests/e2e/provision.sh makes that root)")
    # the root's own loader and libraries run its LLVM tool on this host without a chroot
    return [str(loader), "--library-path", f"{LIBDIR}:{tool.parent.parent / 'lib'}", str(tool)]


def _listed(bundler: list[str], blob: bytes, tmp_path: Path) -> set[str]:
    path = tmp_path / "blob.bin"
    path.write_bytes(blob)
    out = subprocess.run([*bundler, "--list", "--type=o", f"--input={path}"], capture_output=True, text=True,
                         check=True, timeout=60)
    return set(out.stdout.split())


@pytest.mark.parametrize("kind", ["plain", "ccob3", "ccob2", "zlib"])
def test_our_reading_matches_clang_offload_bundler(tmp_path, kind):
    bundler = _bundler()
    plain = offload_bundle(["gfx1151", "gfx90a:xnack+", "gfx1201"])
    blob = {"plain": plain, "ccob3": ccob(plain), "ccob2": ccob(plain, version=2),
            "zlib": ccob(plain, version=2, method="zlib")}[kind]
    ours = list(iter_bundles(_Section(blob, 0, len(blob)), kind))
    assert {e.triple for e in ours[0].entries} == _listed(bundler, blob, tmp_path)


def test_debian_rocblas_matches_clang_offload_bundler_and_the_reference(tmp_path):
    lib = LIBDIR / "librocblas.so.5.2"
    if not lib.is_file():
        pytest.skip(f"{lib} is absent (tests/e2e/provision.sh makes that root)")
    bundler = _bundler()
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
        stored = data[report.section_offset + bundle.offset:report.section_offset + bundle.offset + bundle.size]
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
                out[(index, entry.target)] = content[entry.offset:entry.offset + entry.size]
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
        blobs.append({"plain": plain, "ccob3": ccob(plain), "ccob2": ccob(plain, version=2),
                      "zlib": ccob(plain, version=2, method="zlib")}[kind])
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
        b.offset for b in read_fatbin_bytes(original, fat)]
    assert report.bytes_after < report.bytes_before and report.bytes_zeroed > 0
    # the last bundle had nothing to drop
    last = fat.bundles[-1]
    start = fat.section_offset + last.offset
    assert lib.read_bytes()[start:start + last.size] == original[start:start + last.size]
    # and the library still loads
    exe = cc(tmp_path / "exe", "int f(void);\nint main(void){return f()-1;}", libs=(lib,),
             runpath=(str(tmp_path),))
    assert subprocess.run([str(exe)], env={}, timeout=30).returncode == 0


def read_fatbin_bytes(data: bytes, like) -> list:
    return list(iter_bundles(_Section(data, like.section_offset, like.section_size), "original"))


@pytest.mark.parametrize("kind", ["ccob3", "ccob2", "zlib", "plain"])
def test_pruned_bundles_unbundle_identically_with_clang_offload_bundler(tmp_path, kind):
    from rockbuild.bundle.fatbin import prune_fatbin

    bundler = _bundler()
    targets = ["gfx1100", "gfx1151", "gfx90a:xnack+"]
    plain = offload_bundle(targets, payload=9000)
    blob = {"plain": plain, "ccob3": ccob(plain), "ccob2": ccob(plain, version=2),
            "zlib": ccob(plain, version=2, method="zlib")}[kind]
    lib = lib_with(tmp_path, [blob])
    prune_fatbin(lib, ["gfx1151"])
    fat = read_fatbin(lib)
    bundle = fat.bundles[0]
    pruned = lib.read_bytes()[fat.section_offset + bundle.offset:fat.section_offset + bundle.offset + bundle.size]
    assert _listed(bundler, pruned, tmp_path) == {"host-x86_64-unknown-linux-gnu-", "hipv4-amdgcn-amd-amdhsa--gfx1151"}
    for name, data in (("orig", blob), ("pruned", pruned)):
        (tmp_path / f"{name}.bin").write_bytes(data)
        subprocess.run([*bundler, "--unbundle", "--type=o", "--targets=hipv4-amdgcn-amd-amdhsa--gfx1151",
                        f"--input={tmp_path / f'{name}.bin'}", f"--output={tmp_path / f'{name}.co'}"],
                       check=True, capture_output=True, timeout=60)
    assert (tmp_path / "orig.co").read_bytes() == (tmp_path / "pruned.co").read_bytes()


COMGR_UNBUNDLE = r'''
import ctypes, hashlib, sys
lib = ctypes.CDLL(sys.argv[1])
blob = open(sys.argv[2], "rb").read()
H = ctypes.c_uint64
OBJ_BUNDLE, EXECUTABLE, UNBUNDLE = 0x14, 0x8, 0xF
def ok(status, what):
    if status != 0:
        raise SystemExit(f"{what}: comgr status {status}")
inp, out, data, info = H(), H(), H(), H()
ok(lib.amd_comgr_create_data_set(ctypes.byref(inp)), "create_data_set")
ok(lib.amd_comgr_create_data_set(ctypes.byref(out)), "create_data_set")
ok(lib.amd_comgr_create_data(OBJ_BUNDLE, ctypes.byref(data)), "create_data")
ok(lib.amd_comgr_set_data(data, ctypes.c_size_t(len(blob)), ctypes.c_char_p(blob)), "set_data")
ok(lib.amd_comgr_set_data_name(data, b"hipfatbin"), "set_data_name")
ok(lib.amd_comgr_data_set_add(inp, data), "data_set_add")
ok(lib.amd_comgr_create_action_info(ctypes.byref(info)), "create_action_info")
ids = (ctypes.c_char_p * 1)(sys.argv[3].encode())
ok(lib.amd_comgr_action_info_set_bundle_entry_ids(info, ids, ctypes.c_size_t(1)), "set_bundle_entry_ids")
ok(lib.amd_comgr_do_action(UNBUNDLE, info, inp, out), "do_action(UNBUNDLE)")
count = ctypes.c_size_t()
ok(lib.amd_comgr_action_data_count(out, EXECUTABLE, ctypes.byref(count)), "action_data_count")
for i in range(count.value):
    item, size = H(), ctypes.c_size_t()
    ok(lib.amd_comgr_action_data_get_data(out, EXECUTABLE, ctypes.c_size_t(i), ctypes.byref(item)), "get_data")
    ok(lib.amd_comgr_get_data(item, ctypes.byref(size), None), "get_data")
    buf = ctypes.create_string_buffer(size.value)
    ok(lib.amd_comgr_get_data(item, ctypes.byref(size), buf), "get_data")
    print(size.value, hashlib.sha256(buf.raw[:size.value]).hexdigest())
'''


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
            [str(LIBDIR / "ld-linux-x86-64.so.2"), "--library-path", str(LIBDIR), str(real_python), str(script),
             str(comgr), str(tmp_path / "b.bin"), "hipv4-amdgcn-amd-amdhsa--gfx1151"],
            capture_output=True, text=True, timeout=120, env={"PYTHONHOME": str(ROCM_ROOT / "usr")},
        )
        assert run.returncode == 0, run.stderr[-2000:]
        results.append(run.stdout.split())
    assert results[0] == results[1] and int(results[0][0]) > 0
