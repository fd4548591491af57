"""Benchmark the Vulkan flavour on the real thing (issue 12): llama.cpp b11312 with GGML_VULKAN=ON, built by
``rockbuild build --job linux-vulkan`` in the e2e vulkan-root and run on Mesa's lavapipe in lavapipe-root
(tests/e2e/vulkan.sh). Each ratio names its baseline; both sides come from the same run of the same script.

- build: warm rebuild (no build dir, the cold build's ccache) / cold build (empty ccache).
- smoke: the whole smoke test with a kept Mesa shader cache / the same with the cache emptied first.
- compare: ``rockbuild compare`` of the ROCm bundle (gfx1151, on the CPU: no AMD GPU here) and the Vulkan bundle on
  lavapipe, -p 512 -n 128 -r 5, tiny model: Vulkan / ROCm-on-CPU for pp512 and tg128. Lavapipe is a CPU device, so
  this says nothing about a Radeon; on a user's GPU the same command compares the two flavours for real.

    python bench/vulkan.py           # read the last results ($E2E/bench/vulkan-*.json)
    python bench/vulkan.py --run     # run cold, warm, smoke cold, smoke, compare first (~13 min; root)
    python bench/vulkan.py --json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from e2e_results import e2e_root, load_result, run_e2e


def load(bench: Path, name: str, how: str) -> dict:
    return load_result(bench / f"vulkan-{name}.json", f"tests/e2e/vulkan.sh {how}")


def figures(bench: Path) -> dict:
    cold, warm = load(bench, "cold", "cold"), load(bench, "warm", "warm")
    smoke_cold, smoke_warm = load(bench, "smoke-cold", "smoke cold"), load(bench, "smoke-warm", "smoke")
    compare = load(bench, "compare", "compare")
    rocm, vulkan = compare["bundles"]
    tests = {}
    for test, by_label in compare["tests"].items():
        base, other = by_label[rocm["label"]], by_label[vulkan["label"]]
        tests[test] = {
            "rocm_cpu": base,
            "vulkan_lavapipe": other,
            "ratio": other["tokens_per_second"] / base["tokens_per_second"],
        }
    return {
        "build": {
            "cold_s": cold["durations"]["total"],
            "warm_s": warm["durations"]["total"],
            "ratio": warm["durations"]["total"] / cold["durations"]["total"],
            "warm_ccache": warm.get("ccache"),
            "steps": (cold.get("ninja") or {}).get("steps"),
        },
        "smoke": {
            "cold_cache_s": smoke_cold["seconds"],
            "warm_cache_s": smoke_warm["seconds"],
            "ratio": smoke_warm["seconds"] / smoke_cold["seconds"],
            "verdict": smoke_warm["gpu"]["summary"],
        },
        "compare": {
            "settings": compare["settings"],
            "rocm": f"{rocm['backends']} on {rocm['gpu_info'] or 'the CPU'}",
            "vulkan": f"{vulkan['backends']} on {vulkan['gpu_info'] or 'the CPU'}",
            "tests": tests,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="store_true", help="run the e2e steps first (root, provisioned roots)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    bench = e2e_root() / "bench"
    if args.run:
        run_e2e("vulkan.sh", "cold")
        run_e2e("vulkan.sh", "warm")
        run_e2e("vulkan.sh", "smoke", "cold")
        run_e2e("vulkan.sh", "smoke")
        run_e2e("vulkan.sh", "compare")
    data = figures(bench)
    if args.json:
        print(json.dumps(data, indent=2))
        return
    b, s, c = data["build"], data["smoke"], data["compare"]
    print(
        f"build (baseline: cold build, empty ccache): cold {b['cold_s']:.0f} s, warm {b['warm_s']:.0f} s "
        f"-> {b['ratio']:.3f}x"
    )
    print(
        f"smoke (baseline: empty Mesa shader cache): cold {s['cold_cache_s']:.1f} s, kept cache "
        f"{s['warm_cache_s']:.1f} s -> {s['ratio']:.3f}x; {s['verdict']}"
    )
    st = c["settings"]
    print(
        f"compare (baseline: {c['rocm']}; -p {st['n_prompt']} -n {st['n_gen']} -r {st['repetitions']} "
        f"-t {st['threads']} -ngl {st['gpu_layers']}): {c['vulkan']}"
    )
    for test, row in c["tests"].items():
        r, v = row["rocm_cpu"], row["vulkan_lavapipe"]
        print(
            f"  {test}: {r['tokens_per_second']:.1f} ± {r['stddev']:.1f} t/s vs {v['tokens_per_second']:.1f} ± "
            f"{v['stddev']:.1f} t/s -> {row['ratio']:.3f}x"
        )


if __name__ == "__main__":
    main()
