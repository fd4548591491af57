"""What carrying patches costs a build: the patched mirror of a real llama.cpp tree, first and again, against copying
the tree, both measured in this run on the same tree.

rockbuild applies its patch series (patches/patches.yaml) to ``<cache>/llama.cpp-patched/<job>``: a mirror whose
files are hard links to the tree, except the patched ones (rockbuild/llamacpp/patches.py). Baseline: what the simple
way costs, a copy of the tree (``shutil.copytree``, without .git) patched in place with ``git apply``. Printed:
seconds of each (the best of ``--repeat``), the mirror's ratios to the copy, the bytes each writes, and how many files
the second mirror rewrites (0: ninja recompiles nothing the patches did not change).

    python bench/patches.py [TREE]     # default: the pinned b11312 of the e2e tests, unpacked by tests/e2e/h200.sh
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from rockbuild.core.data import data_path  # noqa: E402
from rockbuild.llamacpp.patches import apply_patch_series, load_patch_series  # noqa: E402

DEFAULT_TREE = Path("/var/cache/rockbuild/h200/src/llama_cpp_python-0.3.36/vendor/llama.cpp")


def written_bytes(root: Path) -> int:
    """Bytes of the files under ``root`` that are not hard links to another file (what a copy wrote)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_nlink == 1:
                total += st.st_size
    return total


def copy_and_patch(tree: Path, dest: Path, patches: list[Path]) -> None:
    shutil.copytree(tree, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    for patch in patches:
        subprocess.run(
            ["git", "apply", str(patch)],
            cwd=dest,
            check=True,
            capture_output=True,
            env={**os.environ, "GIT_CEILING_DIRECTORIES": str(dest.parent)},
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("tree", type=Path, nargs="?", default=DEFAULT_TREE, help="a llama.cpp tree")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not (args.tree / "CMakeLists.txt").is_file():
        print(
            f"error: {args.tree} is not a llama.cpp tree (tests/e2e/h200.sh prepare unpacks the pinned one)",
            file=sys.stderr,
        )
        return 1
    series = load_patch_series(data_path("patches", "patches.yaml"))
    files = sum(len(f) for _d, _s, f in os.walk(args.tree))
    best: dict[str, float] = {}
    facts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-patches-", dir=args.tree.parent) as tmp:
        work = Path(tmp)
        for i in range(args.repeat):
            for what in ("copy", "mirror", "again"):
                if what == "copy":
                    dest = work / f"copy-{i}"
                    start = time.perf_counter()
                    copy_and_patch(args.tree, dest, [p.path for p in series.patches])
                    took = time.perf_counter() - start
                    facts["copy_bytes"] = written_bytes(dest)
                    shutil.rmtree(dest)
                else:
                    dest = work / "mirror"
                    if what == "mirror":
                        shutil.rmtree(dest, ignore_errors=True)
                    start = time.perf_counter()
                    done = apply_patch_series(
                        series,
                        args.tree,
                        dest,
                        build_number=11312,
                        tree_label="bench",
                        os_name="linux",
                        backend="vulkan",
                    )
                    took = time.perf_counter() - start
                    facts[f"{what}_rewritten"] = len(done.rewritten)
                    facts["mirror_bytes"] = written_bytes(dest)
                best[what] = min(best.get(what, took), took)
    print(f"patches on {args.tree} ({files} files, {len(series.patches)} patches), best of {args.repeat}:")
    print(f"  copy + git apply (baseline)   {best['copy']:7.3f} s   writes {facts['copy_bytes']:>12,} bytes")
    print(
        f"  mirror, first                 {best['mirror']:7.3f} s   writes {facts['mirror_bytes']:>12,} bytes "
        f"({facts['mirror_rewritten']} files patched)   {best['mirror'] / best['copy']:.2f}x the copy's time"
    )
    print(
        f"  mirror, again (next build)    {best['again']:7.3f} s   rewrites {facts['again_rewritten']} files"
        f"{'':>17}   {best['again'] / best['copy']:.2f}x the copy's time"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "tree": str(args.tree),
                    "files": files,
                    "seconds": best,
                    **facts,
                    "ratios": {
                        "mirror_vs_copy": best["mirror"] / best["copy"],
                        "again_vs_copy": best["again"] / best["copy"],
                    },
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
