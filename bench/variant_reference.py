"""What judging every CPU variant against its own reference costs the smoke's cpu_variants step (issue 59, item 2).

The step runs each variant module of a bundle alone: pp512, a short tg and the model's known answers (the baseline),
and, with ``run.cpu_variants.reference``, one chunk of 512 tokens of the long-context text whose top-k is compared with
the variant's own reference (baselines.yaml). This script runs the step both ways on one bundle and one model, in the
same run, the two taking turns for ``--rounds`` rounds (each keeps its best), and prints the step's seconds with and
without the references, their ratio, and what each variant's reference run took.

    python bench/variant_reference.py BUNDLE --model SmolLM2-135M-Instruct.Q4_1.gguf
    python bench/variant_reference.py BUNDLE --model M.gguf --rounds 2 --json variant-reference.json

Needs the bundle to run here (its glibc) and the build extra (numpy). The references are smoke.yaml's baselines file
(config/baselines.yaml of this checkout, or --baselines FILE): a variant without one still makes its run ("not
checked"), so the cost is measured either way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from rockbuild.core.vocabulary import ModelFile  # noqa: E402
from rockbuild.downloader import sha256_file  # noqa: E402
from rockbuild.smoke.baselines import load_baselines  # noqa: E402
from rockbuild.smoke.config import load_smoke_config  # noqa: E402
from rockbuild.smoke.variants import VariantReference, VariantRuns, run_cpu_variants  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--baselines", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 16))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    smoke = load_smoke_config()
    numerics, shape = smoke.numerics, smoke.run.cpu_variants.reference
    if numerics.long is None or shape is None:
        print("smoke.yaml has no numerics.long_context text or no run.cpu_variants.reference", file=sys.stderr)
        return 2
    baselines = load_baselines(args.baselines) if args.baselines else numerics.baselines
    model = ModelFile(args.model.name, args.model, sha256_file(args.model), args.model.stat().st_size, "path")
    platform = "windows" if (args.bundle / "llama-bench.exe").exists() else "linux"
    reference = VariantReference(numerics.long.text, shape.ctx, shape.chunks, baselines, model.sha256, platform)
    plain = VariantRuns(check="all", n_gen=8, threads=args.threads, timeout=600.0, answers=numerics)
    runs = {"without references (baseline)": plain, "with references": replace(plain, reference=reference)}
    best: dict[str, float] = {}
    per_variant: dict[str, float] = {}
    verdicts: dict[str, str] = {}  # each variant against its own reference: passed (figures) | not checked (why)
    for _ in range(args.rounds):
        for label, how in runs.items():
            with tempfile.TemporaryDirectory(prefix="variant-reference-") as logs:
                step = run_cpu_variants(args.bundle, model=model, runs=how, platform=platform, env={}, logs=Path(logs))
            if not step.ok:
                print(f"{label}: the step failed: {'; '.join(step.failures)}", file=sys.stderr)
                return 1
            best[label] = min(best.get(label, float("inf")), step.seconds or 0.0)
            for v in step.variants:
                if v.reference is not None and v.reference.seconds is not None:
                    per_variant[v.variant] = min(per_variant.get(v.variant, float("inf")), v.reference.seconds)
                if v.reference is not None:
                    verdicts[v.variant] = f"{v.reference.result}: {v.reference.detail}"
    base, new = best["without references (baseline)"], best["with references"]
    for label, seconds in best.items():
        print(f"{label:32} {seconds:8.1f} s")
    print(f"{'ratio (with / without)':32} {new / base:8.3f}")
    print("reference runs: " + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(per_variant.items())))
    for variant, verdict in sorted(verdicts.items()):
        print(f"  {variant}: {verdict}")
    if args.json:
        figures = {"seconds": best, "ratio": new / base, "reference_seconds": per_variant, "threads": args.threads}
        figures["verdicts"] = verdicts
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
