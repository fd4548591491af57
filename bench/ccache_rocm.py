"""Benchmark the next TheRock nightly when its compiler, headers and device libraries did not change (issue 41,
item 3a): does it compile from ccache?

Two nightlies with one LLVM are simulated from one TheRock-layout tree (``--rocm``): nightly B is a copy of nightly A
whose files are hard links, but whose clang binary is a real copy (another inode and mtime, as a new tarball gives).
The same HIP sources (``--files`` of them, each including hip_runtime.h and instantiating a few kernels, compiled
for ``--target``) are compiled through ccache with rockbuild's build environment for a ROCm tree
(rockbuild.backends.rocm.toolchain_variables: compiler_check = content, no working folder, the device bitcode
hashed), first against A from an empty cache, then against B:

* baseline, ``versioned``: each nightly in a folder named after it (``rocm/therock-dist-...-a20261205``, as every
  night extracted before): B's include paths differ from A's;
* ``stable``: each nightly in its group's one folder (``rocm/therock-linux-gfx1151``, rocm.fetch.stable_root):
  B replaces A at the same path.

A third run checks the guard that comes with one path: B at the same path with one device library changed must
miss (the bitcode is hashed as an extra file: no include line names it). It prints second / cold for each, and
stable / versioned. Run it where the tree's clang runs (a TheRock tree
extracted by ``rockbuild fetch``; the e2e rehearsal's tree inside rocm-root: tests/e2e/run.sh ccache-rocm).

    python bench/ccache_rocm.py --rocm ~/.cache/rockbuild/rocm/therock-dist-linux-gfx1151-7.2.4a20261206 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from rockbuild.backends.rocm import toolchain_from_layout, toolchain_variables
from rockbuild.rocm.layout import detect_layout

KERNEL = """#include <hip/hip_runtime.h>
template <typename T, int N>
__global__ void scale{i}(T * x, T a, int n) {{
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    #pragma unroll
    for (int j = 0; j < N; ++j) if (k * N + j < n) x[k * N + j] = x[k * N + j] * a + T({i});
}}
template __global__ void scale{i}<float, 4>(float *, float, int);
template __global__ void scale{i}<double, 2>(double *, double, int);
template __global__ void scale{i}<int, 8>(int *, int, int);
void launch{i}(float * x, int n) {{ scale{i}<float, 4><<<(n + 255) / 256, 256>>>(x, 2.0f, n); }}
"""


def nightly_copy(tree: Path, dest: Path, clang_real_copy: bool, new_bitcode: bool = False) -> Path:
    """``tree`` at ``dest`` as hard links (cheap), its clang binary a real copy when ``clang_real_copy``; with
    ``new_bitcode`` one device library changed (oclc_finite_only_on.bc holds what _off.bc does: valid bitcode, other
    bytes), as a nightly that changed the device libraries and no header."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(tree), str(dest)], check=True)
    if clang_real_copy:
        layout = detect_layout(dest)
        real = layout.clang.resolve()
        data = real.read_bytes()
        real.unlink()
        real.write_bytes(data)
        real.chmod(0o755)
    if new_bitcode:
        folder = detect_layout(dest).device_lib_dir
        assert folder is not None
        changed = folder / "oclc_finite_only_on.bc"
        data = (folder / "oclc_finite_only_off.bc").read_bytes()
        changed.unlink()
        changed.write_bytes(data)
    return dest


def compile_all(tree: Path, sources: list[Path], objects: Path, ccache_dir: Path, target: str) -> dict:
    layout = detect_layout(tree)
    toolchain = toolchain_from_layout(layout)
    env = {
        "PATH": f"{toolchain.llvm_bin}:/usr/bin:/bin",
        "HOME": str(ccache_dir.parent),
        "LANG": "C.UTF-8",
        **toolchain_variables(toolchain, ccache_dir),
    }
    shutil.rmtree(objects, ignore_errors=True)
    objects.mkdir(parents=True)
    subprocess.run(["ccache", "-z"], env=env, check=True, capture_output=True)
    start = time.monotonic()
    for source in sources:
        subprocess.run(
            [
                "ccache",
                toolchain.cxx_compiler,
                "-x",
                "hip",
                f"--offload-arch={target}",
                "-O2",
                "-c",
                str(source),
                "-o",
                str(objects / (source.stem + ".o")),
            ],
            env=env,
            check=True,
            cwd=objects,
        )
    seconds = time.monotonic() - start
    stats = subprocess.run(["ccache", "--print-stats"], env=env, check=True, capture_output=True, text=True).stdout
    counts = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
    hits = int(counts.get("direct_cache_hit", 0)) + int(counts.get("preprocessed_cache_hit", 0))
    return {"seconds": round(seconds, 2), "hits": hits, "misses": int(counts.get("cache_miss", 0))}


def measure(
    tree: Path, work: Path, sources: list[Path], target: str, *, stable: bool, new_bitcode: bool = False
) -> dict:
    """Nightly A then nightly B, one empty ccache; ``stable``: both at one path; ``new_bitcode``: B changed a device
    library (and nothing ccache reads as an input by itself)."""
    ccache_dir = work / f"ccache-{stable}-{new_bitcode}"
    shutil.rmtree(ccache_dir, ignore_errors=True)
    roots = work / "rocm"
    first = nightly_copy(tree, roots / ("therock-linux-group" if stable else "therock-dist-a20261205"), False)
    cold = compile_all(first, sources, work / "objects", ccache_dir, target)
    shutil.rmtree(first)  # a runner of the next night has only the next nightly (and ccache's direct mode would
    # otherwise find the last one's headers still in place, unchanged, and call that a hit)
    second_root = nightly_copy(
        tree, roots / ("therock-linux-group" if stable else "therock-dist-a20261206"), True, new_bitcode
    )
    second = compile_all(second_root, sources, work / "objects", ccache_dir, target)
    shutil.rmtree(roots, ignore_errors=True)
    return {"cold": cold, "second": second, "ratio": round(second["seconds"] / cold["seconds"], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rocm", type=Path, required=True, help="a TheRock-layout ROCm tree (extracted by rockbuild)")
    ap.add_argument("--files", type=int, default=12)
    ap.add_argument("--target", default="gfx1151")
    ap.add_argument("--work", type=Path, default=None, help="on the tree's filesystem (hard links); default: beside it")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if shutil.which("ccache") is None:
        raise SystemExit("ccache is not installed")
    tree = args.rocm.resolve()
    work = Path(tempfile.mkdtemp(prefix=".ccache-rocm-bench-", dir=args.work or tree.parent))
    try:
        sources = []
        for i in range(args.files):
            path = work / "src" / f"kernel{i}.hip"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(KERNEL.format(i=i))
            sources.append(path)
        versioned = measure(tree, work, sources, args.target, stable=False)
        stable = measure(tree, work, sources, args.target, stable=True)
        bitcode = measure(tree, work, sources, args.target, stable=True, new_bitcode=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "bench": "ccache_rocm",
        "tree": str(tree),
        "files": args.files,
        "target": args.target,
        "ccache": subprocess.run(["ccache", "--version"], capture_output=True, text=True).stdout.split("\n")[0],
        "versioned": versioned,
        "stable": stable,
        "stable_new_device_library": bitcode,
        "stable_over_versioned": round(stable["second"]["seconds"] / versioned["second"]["seconds"], 3),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name in ("versioned", "stable", "stable_new_device_library"):
        r = result[name]
        print(
            f"{name:>26}: cold {r['cold']['seconds']:.2f} s ({r['cold']['misses']} misses), next nightly "
            f"{r['second']['seconds']:.2f} s ({r['second']['hits']} hits, {r['second']['misses']} misses): "
            f"ratio {r['ratio']:.3f}"
        )
    print(f"next nightly, stable root / versioned (the baseline): {result['stable_over_versioned']:.3f}")


if __name__ == "__main__":
    os.umask(0o022)
    main()
