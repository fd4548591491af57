"""Benchmark what a night costs when llama.cpp moves on: the real Vulkan build (b11312, then the source repository's
master: 25 files changed), run by ``rockbuild nightly`` in the e2e vulkan-root (tests/e2e/vulkan.sh ccache: its
own folders, an empty ccache). The next night starts as a CI runner does: no build dir, the ccache of the last night.

- rockbuild (one checkout per job, moved from commit to commit): the sources keep their absolute paths, so ccache
  (which hashes them) hits for every file the commit did not touch.
- baseline, measured in the same run: the same next night in a source folder this machine never built from, which
  is what every new commit got while checkouts were kept per ref (``<cache>/llama.cpp/<commit>-<hash>``).

    python bench/night_ccache.py           # read the last results ($E2E/bench/vulkan-night-*.json)
    python bench/night_ccache.py --run     # run `vulkan.sh night` (once) and `vulkan.sh ccache` first (~25 min; root)
    python bench/night_ccache.py --json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from e2e_results import e2e_root, load_result, run_e2e


def load(bench: Path, name: str) -> dict:
    return load_result(bench / f"vulkan-night-{name}-build.json", "tests/e2e/vulkan.sh ccache")


def row(build: dict) -> dict:
    cc = build.get("ccache") or {}
    return {
        "commit": build["llama_cpp"]["commit"][:12],
        "source": build["llama_cpp"]["path"],
        "compile_s": build["durations"]["compile"],
        "total_s": build["durations"]["total"],
        "hits": cc.get("hits"),
        "misses": cc.get("misses"),
        "hit_rate": cc.get("hit_rate"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="store_true", help="run the e2e nights first (root, provisioned roots)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    bench = e2e_root() / "bench"
    if args.run:
        for mode in ("night", "ccache"):
            run_e2e("vulkan.sh", mode)
    first, ours, base = (row(load(bench, n)) for n in ("first", "next", "next-baseline"))
    data = {
        "first_night": first,
        "next_night": ours,
        "next_night_baseline": base,
        "ratio": ours["total_s"] / base["total_s"],
    }
    if args.json:
        print(json.dumps(data, indent=2))
        return
    for label, r in (
        ("first night (cold)", first),
        ("next night, one checkout per job", ours),
        ("next night, new source folder (baseline)", base),
    ):
        print(
            f"{label}: {r['commit']} in {r['source']}: compile {r['compile_s']:.0f} s, total {r['total_s']:.0f} s, "
            f"ccache {r['hits']} hits / {r['misses']} misses"
        )
    print(f"next night vs baseline: {ours['total_s']:.0f} s / {base['total_s']:.0f} s -> {data['ratio']:.3f}x")


if __name__ == "__main__":
    main()
