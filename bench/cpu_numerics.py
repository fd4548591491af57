"""Can a CPU-vs-CPU comparison across nights gate? The CPU's numbers per ggml CPU variant, one bundle, one model.

The numerics step records the CPU's perplexity on config/numerics.txt every night (``numerics.cpu.ppl``; the
manifest's ``numerics.cpu_ppl``). Comparing it with the last release's would catch a regression that hits every
backend alike, if the CPU gives the same numbers every night. A night runs on whatever runner CPU it gets, and ggml
loads a different CPU variant on each (x64, haswell, zen4, sapphirerapids ...), each with its own kernels. This
measures how far apart the variants are, and how far one variant is from itself with another thread count.

For each variant (default: x64, haswell and the one ggml picks here) the bundle is linked into a folder holding that
one ``libggml-cpu-<variant>.so`` (as bench/cpu_variants.py does), and its ``llama-perplexity`` runs the numerics
text on the CPU (``-dev none``), saving its log-probabilities. The baseline, measured in the same run, is haswell
(2 threads): every other run is compared with it (``--kl-divergence``), and haswell with 1 thread is the
same-variant control. Printed per run: perplexity, its ratio to the baseline's, mean and max KL divergence and the
same-top-token share against the baseline.

    python bench/cpu_numerics.py BUNDLE --model SmolLM2-135M-Instruct.Q4_1.gguf [--variants x64,haswell,picked]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from cpu_variants import PICKED, BenchError, one_variant_folder, picked_variant  # noqa: E402

from rockbuild.smoke.numerics import parse_divergence, parse_final_ppl  # noqa: E402
from rockbuild.smoke.parse import cpu_variant_files, cpu_variant_of, parse_backend_loads  # noqa: E402

BASELINE = "haswell"


def perplexity(
    folder: Path,
    model: Path,
    text: Path,
    *,
    variant_file: str,
    threads: int,
    ctx: int,
    chunks: int,
    base: Path,
    against: bool,
    timeout: float,
) -> tuple[float | None, dict | None, float]:
    """(perplexity, divergence figures or None, seconds) of one CPU run in ``folder``; ``against``: compare with
    ``base`` instead of writing it."""
    args = [
        str(folder / "llama-perplexity"),
        "-m",
        str(model),
        "-c",
        str(ctx),
        "-b",
        str(ctx),
        "--chunks",
        str(chunks),
        "-t",
        str(threads),
        "-ngl",
        "0",
        "-dev",
        "none",
        "--kl-divergence-base",
        str(base),
    ]
    args += ["--kl-divergence"] if against else ["-f", str(text)]
    start = time.monotonic()
    result = subprocess.run(args, capture_output=True, text=True, cwd=folder, timeout=timeout)
    seconds = time.monotonic() - start
    output = result.stdout + "\n" + result.stderr
    if result.returncode != 0:
        raise BenchError(
            f"llama-perplexity with {variant_file} failed (exit code {result.returncode}): "
            f"{(result.stderr.strip().splitlines() or [''])[-1]}"
        )
    loaded = parse_backend_loads(output).cpu_file
    # llama-perplexity may not print its load_backend lines at its default verbosity: then the folder, which holds
    # no other variant, is the proof; a line naming another file stops the script
    if loaded is not None and loaded != variant_file:
        raise BenchError(f"llama-perplexity in {folder} loaded {loaded or 'no CPU variant'}, not {variant_file}")
    div = parse_divergence(output) if against else None
    ppl = div.ppl if div is not None and div.ppl is not None else parse_final_ppl(output)
    return ppl, (div.to_dict() if div else None), seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--text", type=Path, default=HERE.parent / "config" / "numerics.txt")
    ap.add_argument("--variants", default=f"x64,{BASELINE},{PICKED}")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        bundle = args.bundle.absolute()
        files = {str(cpu_variant_of(n)): n for n in cpu_variant_files(p.name for p in bundle.iterdir())}
        wanted = []
        for v in args.variants.split(","):
            v = picked_variant(bundle) if v == PICKED else v
            if v not in files:
                raise BenchError(f"{bundle} has no CPU variant {v} (it has {', '.join(sorted(files))})")
            if v not in wanted:
                wanted.append(v)
        if BASELINE not in wanted:
            wanted.insert(0, BASELINE)
        wanted.remove(BASELINE)
        rows = []
        with tempfile.TemporaryDirectory(prefix="cpu-numerics-") as tmp:
            work = Path(tmp)
            folders = {v: one_variant_folder(bundle, files[v], work / v) for v in [BASELINE, *wanted]}
            base = work / "baseline.kld"
            common = dict(text=args.text.absolute(), ctx=args.ctx, chunks=args.chunks, base=base, timeout=args.timeout)
            ppl0, _, s0 = perplexity(
                folders[BASELINE],
                args.model.absolute(),
                variant_file=files[BASELINE],
                threads=args.threads,
                against=False,
                **common,
            )
            rows.append({"run": f"{BASELINE} -t {args.threads} (baseline)", "ppl": ppl0, "seconds": s0})
            runs = [(BASELINE, 1)] + [(v, args.threads) for v in wanted]
            for variant, threads in runs:
                ppl, div, sec = perplexity(
                    folders[variant],
                    args.model.absolute(),
                    variant_file=files[variant],
                    threads=threads,
                    against=True,
                    **common,
                )
                rows.append({"run": f"{variant} -t {threads}", "ppl": ppl, "seconds": sec, **(div or {})})
    except (BenchError, subprocess.TimeoutExpired) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"cpu_numerics: {args.model.name}, {args.chunks} x {args.ctx} tokens of {args.text.name}, -dev none; "
        f"baseline {BASELINE} -t {args.threads}"
    )
    print(f"{'run':<28}{'PPL':>10}{'vs baseline':>13}{'mean KLD':>11}{'max KLD':>10}{'same top':>10}{'s':>7}")
    for r in rows:
        ratio = r["ppl"] / ppl0 if r["ppl"] and ppl0 else float("nan")
        kld = f"{r['mean_kld']:.6f}" if r.get("mean_kld") is not None else "-"
        mx = f"{r['max_kld']:.5f}" if r.get("max_kld") is not None else "-"
        top = f"{r['same_top']:.1f} %" if r.get("same_top") is not None else "-"
        print(f"{r['run']:<28}{r['ppl']:>10.4f}{ratio:>12.5f}x{kld:>11}{mx:>10}{top:>10}{r['seconds']:>7.1f}")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model.name, "baseline": BASELINE, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
