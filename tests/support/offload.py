"""clang-offload-bundler for the bundle tests: the e2e ROCm root's own (LLVM's, the independent proof of a pruned
bundle) when this machine has that root, and a stand-in for the ROCm trees the tests make; and a program that
unbundles through comgr as the HIP runtime does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROCM_ROOT = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e")) / "rocm-root"
LIBDIR = ROCM_ROOT / "usr" / "lib" / "x86_64-linux-gnu"


def bundler_command() -> list[str]:
    """clang-offload-bundler of the e2e ROCm root, run through the root's loader (skips the test without it)."""
    tool = ROCM_ROOT / "usr" / "lib" / "llvm-22" / "bin" / "clang-offload-bundler"
    loader = LIBDIR / "ld-linux-x86-64.so.2"
    if not tool.is_file() or not loader.is_file():
        pytest.skip(f"no clang-offload-bundler in {ROCM_ROOT} (tests/e2e/provision.sh makes that root)")
    # the root's own loader and libraries run its LLVM tool on this host without a chroot
    return [str(loader), "--library-path", f"{LIBDIR}:{tool.parent.parent / 'lib'}", str(tool)]


COMGR_UNBUNDLE = r"""
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
"""


FAKE_BUNDLER = r"""#!{python}
# A stand-in for clang-offload-bundler in ROCm trees made by the tests (they have no LLVM): --version, --list and
# --unbundle of one blob, read with rockbuild's own parser. It tests the bundle step's plumbing, never the proof.
import sys
sys.path.insert(0, {repo!r})
from rockbuild.bundle.fatbin import _Section, _code_objects, iter_bundles
args = dict(a.split("=", 1) if "=" in a else (a, "") for a in sys.argv[1:] if not a.startswith("--output="))
if "--version" in args:
    print("fake clang-offload-bundler version 0 (tests)")
    sys.exit(0)
data = open(args["--input"], "rb").read()
bundle = next(iter_bundles(_Section(data, 0, len(data)), "blob"))
if "--list" in args:
    print("\n".join(e.triple for e in bundle.entries))
    sys.exit(0)
wanted = args["--targets"].split(",")
code = _code_objects(data, bundle, {{e.gfx for e in bundle.entries if e.gfx}}, "blob")
outputs = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--output=")]
for triple, out in zip(wanted, outputs):
    open(out, "wb").write(code.get(triple, b""))
"""


def fake_offload_bundler(bindir: Path) -> Path:
    """A test stand-in for clang-offload-bundler in ``bindir`` (a fake ROCm tree's lib/llvm/bin)."""
    import sys

    tool = bindir / "clang-offload-bundler"
    tool.write_text(FAKE_BUNDLER.format(python=sys.executable, repo=str(Path(__file__).resolve().parents[2])))
    tool.chmod(0o755)
    return tool


def real_offload_bundler(bindir: Path) -> Path:
    """The e2e root's clang-offload-bundler, as a script in ``bindir`` that runs it through the root's loader."""
    import shlex

    tool = bindir / "clang-offload-bundler"
    tool.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in bundler_command()) + ' "$@"\n')
    tool.chmod(0o755)
    return tool
