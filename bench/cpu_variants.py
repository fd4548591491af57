"""What GGML_CPU_ALL_VARIANTS buys on this CPU: llama-bench of one bundle with one CPU variant at a time.

For each variant measured (default: x64, haswell and the one ggml picks here), the bundle is linked (hard links, a
copy across file systems; rockbuild.smoke.variants.one_variant_folder, as the smoke's cpu_variants step does) into a
temporary folder that holds that one ``libggml-cpu-<variant>.so`` and no other, so
ggml_backend_load_all() can only load it (it searches the program's folder and the current folder, which is the
same one here). Each runs ``llama-bench -t 1 -p 128 -n 32 -r R -o json``; the variants take turns for several
rounds and each keeps its best round, so a slow moment of the machine does not land on one variant only. The log's
``load_backend: loaded CPU backend from ...`` line must name the variant meant, or the script stops.

Baselines, both measured in the same run: haswell (AVX2, what the bundles built before GGML_CPU_ALL_VARIANTS ran on
every CPU) and x64 (no SIMD beyond SSE2: the seed's flags). Printed per variant: pp and tg t/s and their ratios to
each baseline.

    python bench/cpu_variants.py BUNDLE                          # tiny model (needs gguf: the extra [tiny])
    python bench/cpu_variants.py BUNDLE --model Qwen3-0.6B-Q4_0.gguf --rounds 4 -r 3 --json cpu-variants.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from rockbuild.smoke.parse import parse_backend_loads  # noqa: E402
from rockbuild.smoke.variants import one_variant_folder, shipped_variants  # noqa: E402  (as the smoke's step does)

PICKED = "picked"  # in --variants: the variant ggml picks on this CPU from the whole bundle
BASELINES = ("haswell", "x64")


class BenchError(Exception):
    """One line for the user: what went wrong and what to do."""


def exe_name(bundle: Path) -> str:
    return "llama-bench.exe" if (bundle / "llama-bench.exe").is_file() else "llama-bench"


def picked_variant(bundle: Path, timeout: float = 120.0) -> str:
    """The variant ggml loads from the whole bundle here (``llama-bench --list-devices``, from an empty folder so the
    current folder adds no module)."""
    with tempfile.TemporaryDirectory(prefix="cpu-variants-cwd-") as cwd:
        result = subprocess.run(
            [str(bundle / exe_name(bundle)), "--list-devices"],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=timeout,
            env=dict(os.environ),
        )
    loads = parse_backend_loads(result.stdout + "\n" + result.stderr)
    if loads.cpu_variant is None:
        raise BenchError(
            f"{bundle}/{exe_name(bundle)} --list-devices loaded no CPU variant (exit code "
            f"{result.returncode}): is it a GGML_BACKEND_DL build?"
        )
    return loads.cpu_variant


def bench_once(
    folder: Path,
    model: Path,
    *,
    variant_file: str,
    threads: int,
    n_prompt: int,
    n_gen: int,
    repetitions: int,
    timeout: float,
) -> dict[str, float]:
    """pp and tg t/s of one llama-bench run in ``folder``, after checking that it loaded ``variant_file``."""
    # -ngl 0 -dev none: the CPU variant does the work even in a GPU bundle (a Vulkan bundle on a GPU host would
    # otherwise measure the GPU)
    args = [
        str(folder / exe_name(folder)),
        "-m",
        str(model),
        "-t",
        str(threads),
        "-p",
        str(n_prompt),
        "-n",
        str(n_gen),
        "-r",
        str(repetitions),
        "-ngl",
        "0",
        "-dev",
        "none",
        "-o",
        "json",
    ]
    result = subprocess.run(args, capture_output=True, text=True, cwd=folder, timeout=timeout, env=dict(os.environ))
    loaded = parse_backend_loads(result.stderr + "\n" + result.stdout).cpu_file
    if result.returncode != 0:
        raise BenchError(
            f"llama-bench with only {variant_file} failed (exit code {result.returncode}): "
            f"{(result.stderr.strip().splitlines() or [''])[-1]}"
        )
    if loaded != variant_file:
        raise BenchError(
            f"llama-bench in {folder} loaded {loaded or 'no CPU variant'}, not {variant_file}: the "
            "figures would not be that variant's"
        )
    rows = json.loads(result.stdout[result.stdout.index("[") :])
    out = {}
    for row in rows:
        key = f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"
        out[key] = float(row["avg_ts"])
    return out


def provide_model(spec: str, vocab: Path | None) -> Path:
    if spec != "tiny":
        path = Path(spec)
        if not path.is_file():
            raise BenchError(f"--model {spec}: no such file; give a GGUF path or 'tiny'")
        return path.absolute()
    from rockbuild.core.environment import default_cache, environment
    from rockbuild.core.errors import RockbuildError
    from rockbuild.smoke.models import tiny_model

    try:
        return tiny_model(cache=default_cache(environment()), vocab=vocab).path
    except RockbuildError as exc:
        raise BenchError(f"the tiny model: {exc.message}" + (f" ({exc.hint})" if exc.hint else "")) from None


def measure(
    bundle: Path,
    model: Path,
    files: dict[str, str],
    *,
    rounds: int,
    threads: int,
    n_prompt: int,
    n_gen: int,
    repetitions: int,
    timeout: float,
    work: Path,
) -> dict[str, dict[str, float]]:
    """The best t/s of each variant (``files``: variant -> its file) over ``rounds`` rounds, the variants taking turns
    within each round."""
    folders = {v: one_variant_folder(bundle, file, work / v) for v, file in files.items()}
    best: dict[str, dict[str, float]] = {v: {} for v in files}
    for _ in range(rounds):
        for variant, file in files.items():
            got = bench_once(
                folders[variant],
                model,
                variant_file=file,
                threads=threads,
                n_prompt=n_prompt,
                n_gen=n_gen,
                repetitions=repetitions,
                timeout=timeout,
            )
            for test, tps in got.items():
                best[variant][test] = max(best[variant].get(test, 0.0), tps)
    return best


def table(best: dict[str, dict[str, float]], picked: str, tests: list[str]) -> tuple[str, dict]:
    baselines = [b for b in BASELINES if b in best]
    first = baselines[0] if baselines else None
    head = f"{'variant':<28}" + "".join(f"{t + ' t/s':>12}" for t in tests)
    head += "".join(f"{t[:2] + ' vs ' + b:>15}" for b in baselines for t in tests)
    lines = [head]
    ratios: dict[str, dict[str, float]] = {}
    for variant, figures in best.items():
        notes = [n for n, yes in (("baseline", variant == first), ("picked here", variant == picked)) if yes]
        label = variant + (f" ({', '.join(notes)})" if notes else "")
        row = f"{label:<28}" + "".join(f"{figures[t]:>12.1f}" for t in tests)
        for b in baselines:
            for t in tests:
                ratio = figures[t] / best[b][t] if best[b][t] else float("nan")
                ratios.setdefault(variant, {})[f"{t}_vs_{b}"] = ratio
                row += f"{ratio:>14.2f}x"
        lines.append(row)
    return "\n".join(lines), ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("bundle", type=Path, help="a bundle folder built with GGML_CPU_ALL_VARIANTS=ON")
    parser.add_argument(
        "--model",
        default="tiny",
        help="a GGUF file, or 'tiny' (default: the smoke's tiny Qwen3, "
        "made from a llama.cpp vocab file; needs gguf: pip install '.[tiny]')",
    )
    parser.add_argument("--vocab", type=Path, default=None, help="the vocab GGUF for --model tiny")
    parser.add_argument(
        "--variants",
        default=f"x64,haswell,{PICKED}",
        help=f"variants to measure, comma-separated; '{PICKED}': the one ggml picks on this CPU",
    )
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds; each variant keeps its best")
    parser.add_argument("-r", "--repetitions", type=int, default=3, help="llama-bench -r of each run")
    parser.add_argument("-t", "--threads", type=int, default=1)
    parser.add_argument("-p", "--n-prompt", type=int, default=128)
    parser.add_argument("-n", "--n-gen", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds for one llama-bench run")
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="where the one-variant folders go (default: a temporary folder beside the bundle, so "
        "that hard links work)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    bundle = args.bundle.absolute()
    try:
        if not bundle.is_dir():
            raise BenchError(f"{args.bundle} is not a folder; pass a bundle folder")
        shipped = shipped_variants(bundle)
        if not shipped:
            raise BenchError(
                f"{bundle} ships no libggml-cpu-<variant>.so: build it with GGML_BACKEND_DL=ON and "
                "GGML_CPU_ALL_VARIANTS=ON"
            )
        picked = picked_variant(bundle)
        wanted = [picked if v.strip() == PICKED else v.strip() for v in args.variants.split(",") if v.strip()]
        variants = list(dict.fromkeys(wanted))
        missing = [v for v in variants if v not in shipped]
        if missing:
            raise BenchError(f"{bundle} ships no variant {', '.join(missing)} (it ships {', '.join(sorted(shipped))})")
        model = provide_model(args.model, args.vocab)
        work = Path(tempfile.mkdtemp(prefix=".cpu-variants-", dir=args.work or bundle.parent))
        try:
            best = measure(
                bundle,
                model,
                {v: shipped[v] for v in variants},
                rounds=args.rounds,
                threads=args.threads,
                n_prompt=args.n_prompt,
                n_gen=args.n_gen,
                repetitions=args.repetitions,
                timeout=args.timeout,
                work=work,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    tests = [f"pp{args.n_prompt}", f"tg{args.n_gen}"]
    text, ratios = table(best, picked, tests)
    print(
        f"CPU variants of {bundle}: llama-bench -t {args.threads} -p {args.n_prompt} -n {args.n_gen} "
        f"-r {args.repetitions}, best of {args.rounds} alternating rounds, model {model.name}"
    )
    print(
        f"ggml picks {picked} here; baselines: haswell (the bundles before GGML_CPU_ALL_VARIANTS), x64 (the seed's "
        "flags)"
    )
    print(text)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "bundle": str(bundle),
                    "model": str(model),
                    "picked": picked,
                    "baselines": list(BASELINES),
                    "settings": {
                        "threads": args.threads,
                        "n_prompt": args.n_prompt,
                        "n_gen": args.n_gen,
                        "repetitions": args.repetitions,
                        "rounds": args.rounds,
                    },
                    "best": best,
                    "ratios": ratios,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
