"""A stand-in test-backend-ops (llama.cpp's op test): a Python script that prints what the real one prints for the
cases of a scenario, each ``(op, params, status)`` with status ok | fail | unsupported | crash | hang; with
``FAKE_OPS_ARGV`` set it appends each call's arguments and folder to that file (JSON lines)."""

from __future__ import annotations

import sys
from pathlib import Path

from support.files import write

FAKE = r'''#!{python}
"""A stand-in test-backend-ops: prints what the real one prints for the cases of SCENARIO."""
import json, os, signal, sys, time
here = os.path.dirname(os.path.realpath(sys.argv[0]))
if os.environ.get("FAKE_OPS_ARGV"):
    with open(os.environ["FAKE_OPS_ARGV"], "a") as fh:
        fh.write(json.dumps({{"argv": sys.argv[1:], "folder": here,
                             "bundle_lib": os.path.islink(os.path.join(here, "libggml-vulkan.so")),
                             "ld_library_path": os.environ.get("LD_LIBRARY_PATH")}}) + "\n")
SCENARIO = {scenario!r}
args = sys.argv[1:]
device = args[args.index("-b") + 1]
print("load_backend: loaded Vulkan backend from " + os.path.join(here, "libggml-vulkan.so"), flush=True)
print("Testing 2 devices\n")
if device not in ("Vulkan0", "ROCm0"):
    print(f"Backend 1/2: Vulkan0\n  Skipping\nBackend 2/2: CPU\n  Skipping\n2/2 backends passed\n\x1b[1;32mOK\x1b[0m")
    sys.exit(0)
print(f"Backend 1/2: {{device}}\n  Device description: fake\n  Device memory: 1 MB (1 MB free)\n", flush=True)
if args[0] == "support":
    print("  MUL_MAT(type_a=q4_0): \x1b[1;32mSUPPORTED\x1b[0m\n  OUT_PROD(type_a=f32): \x1b[1;31mNOT SUPPORTED\x1b[0m")
    print("  OUT_PROD(type_a=f16): \x1b[1;31mNOT SUPPORTED\x1b[0m")
    sys.exit(0)
op = args[args.index("-o") + 1] if "-o" in args else None
cases = [c for c in SCENARIO if op is None or c[0] == op]
failed, passed = [], 0
for name, params, status in cases:
    if status == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if status == "hang":
        time.sleep(60)
    if status == "ok":
        passed += 1
        print(f"  {{name}}({{params}}): \x1b[1;32mOK\x1b[0m", flush=True)
    elif status == "fail":
        failed.append(f"{{name}}({{params}})")
        print(f"[{{name}}] NMSE = 0.5 > 0.0005   {{name}}({{params}}): \x1b[1;31mFAIL\x1b[0m", flush=True)
    else:
        print(f"  {{name}}({{params}}): not supported [{{device}}] ", flush=True)
print(f"  {{passed}}/{{passed + len(failed)}} tests passed")
if failed:
    print("\nFailing tests:\n" + "\n".join("  " + f for f in failed))
sys.exit(1 if failed else 0)
'''


def write_op_test(path: Path, scenario: list[tuple[str, str, str]]) -> Path:
    """The stand-in at ``path``, executable."""
    tool = write(path, FAKE.format(python=sys.executable, scenario=scenario))
    tool.chmod(0o755)
    return tool
