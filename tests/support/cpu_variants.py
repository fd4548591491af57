"""A stand-in for a GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS bundle: libggml-cpu-<variant>.so files and programs that
pick a variant the way ggml_backend_load_all() does and log it as llama.cpp does.

The fake programs (Python, like tests/support/smoke.py's) list the ``libggml-cpu-*.so`` in their own folder and in the
current folder, keep the highest-ranked variant this "CPU" can run (``supported``), print
``load_backend: loaded CPU backend from PATH`` on stderr, and then behave like llama-bench or llama-cli: a variant in
``crashes`` dies of SIGILL (the process kills itself with it, so the parent sees -4) on a real batch (``-p`` >= 512),
as the sapphirerapids variant did on the lent H200 host while ``-p 8`` ran. llama-bench prints llama-bench-like JSON
whose t/s depend on the variant (``speeds``), so bench/cpu_variants.py's arithmetic can be checked.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

# ggml's x86 variants in the order of their scores on a CPU that has every feature (cpu-feats.cpp): later wins
RANK = (
    "x64",
    "sse42",
    "sandybridge",
    "ivybridge",
    "piledriver",
    "haswell",
    "alderlake",
    "skylakex",
    "cannonlake",
    "cascadelake",
    "icelake",
    "cooperlake",
    "zen4",
    "sapphirerapids",
)

PROGRAM = r"""
import json, os, signal, sys
from pathlib import Path
CONFIG = json.loads({config!r})
RANK = CONFIG["rank"]
args = sys.argv[1:]
def arg(flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default
here = Path(sys.argv[0]).resolve().parent
seen = []
for folder in (here, Path.cwd()):  # ggml: the executable's folder, then the current folder
    for path in sorted(folder.glob("libggml-cpu-*.so")):
        variant = path.name[len("libggml-cpu-"):-len(".so")]
        if variant in CONFIG["supported"] and variant in RANK:
            seen.append((RANK.index(variant), -len(seen), path))
# as b11312's llama-completion, which loads the backends before its log is set up: it prints no load_backend line
quiet = Path(sys.argv[0]).name == "llama-completion"
def loaded(line):
    if not quiet:
        sys.stderr.write(line + "\n")
# a GGML_BACKEND_DL build has the RPC backend as a module too: ggml logs it whether or not a CPU variant scores
for name, file in [("RPC", "libggml-rpc.so"), *CONFIG["gpu"].items()]:
    if (here / file).exists():
        loaded("load_backend: loaded " + name + " backend from " + str(here / file))
chosen = max(seen)[2] if seen else None
if chosen is not None:
    loaded("load_backend: loaded CPU backend from " + str(chosen))
elif (here / "libggml-cpu.so").exists():
    loaded("load_backend: loaded CPU backend from " + str(here / "libggml-cpu.so"))
sys.stderr.flush()
variant = chosen.name[len("libggml-cpu-"):-len(".so")] if chosen else None
if "--list-devices" in args:
    print("Available devices:")
    print("  (none)")
    sys.exit(0)
if "--help" in args or "--version" in args:
    print("usage: " + sys.argv[0])
    sys.exit(0)
if chosen is None and not (here / "libggml-cpu.so").exists():
    sys.stderr.write("llama_model_load: error loading model: make_cpu_buft_list: no CPU backend found\n")
    sys.exit(1)
if Path(sys.argv[0]).name == "llama-perplexity":
    # a --kl-divergence-base file in perplexity.cpp's format (rockbuild/smoke/logprobs.py), a vocabulary of 8: every
    # variant gives one answer, but a variant in ``drifts`` moves every fourth position's top token to the next one
    import struct
    n_ctx, n_chunk, n_vocab = int(arg("-c")), int(arg("--chunks", "1")), 8
    out = bytearray(b"_logits_" + struct.pack("<Iii", n_ctx, n_vocab, n_chunk))
    out += struct.pack("<%di" % (n_ctx * n_chunk), *[(i * 7) % n_vocab for i in range(n_ctx * n_chunk)])
    for chunk in range(n_chunk):
        for r in range(n_ctx - 1 - n_ctx // 2):
            top = (r * 3 + chunk) % n_vocab
            if variant in CONFIG["drifts"] and r % 4 == 0:
                top = (top + 1) % n_vocab
            logp = [-0.2 if v == top else -4.5 - 0.1 * v for v in range(n_vocab)]
            lo, hi = min(logp), max(logp)
            scale = (hi - lo) / 65535
            out += struct.pack("<ff", scale, lo)
            out += struct.pack("<%dH" % n_vocab, *[round((x - lo) / scale) for x in logp])
    open(arg("--kl-divergence-base"), "wb").write(bytes(out))
    print("perplexity: calculating perplexity over " + str(n_chunk) + " chunks, n_ctx=" + str(n_ctx))
    print("Final estimate: PPL = 12.3456 +/- 0.5")
    sys.exit(0)
bench = Path(sys.argv[0]).name == "llama-bench"
n_prompt = int(arg("-p", "512").split(",")[0]) if bench else 8  # llama-cli: a short prompt, no real batch
def progress(what):  # llama-bench --progress: where a run that dies was
    if bench and "--progress" in args:
        sys.stderr.write("llama-bench: benchmark " + what + " run 1/" + arg("-r", "5") + "\n")
        sys.stderr.flush()
progress("1/2: prompt")
if variant in CONFIG["crashes"] and n_prompt >= 512:
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGILL)
factor = 1.0
if CONFIG["log"]:
    earlier = [json.loads(line) for line in open(CONFIG["log"])] if os.path.exists(CONFIG["log"]) else []
    runs = sum(1 for e in earlier if e["variant"] == variant and e["program"] == Path(sys.argv[0]).name)
    factor = CONFIG["factors"][runs % len(CONFIG["factors"])]
    with open(CONFIG["log"], "a") as fh:
        fh.write(json.dumps({{"program": Path(sys.argv[0]).name, "args": args, "variant": variant,
                             "cwd": os.getcwd()}}) + "\n")
speed = CONFIG["speeds"].get(variant, 1.0) * factor
if bench:
    n_gen = int(arg("-n", "128"))
    reps = int(arg("-r", "5"))
    rows = []
    for n_p, n_g, base in ((n_prompt, 0, 100.0), (0, n_gen, 10.0)):
        if n_p == 0 and n_g == 0:
            continue
        ts = base * speed
        rows.append({{"build_commit": "0c1e570", "build_number": 11312, "cpu_info": "Stand-in CPU", "gpu_info": "",
                     "backends": "CPU", "model_filename": arg("-m"), "model_type": "qwen3 ?B F16",
                     "n_threads": int(arg("-t", "1")), "n_prompt": n_p, "n_gen": n_g, "avg_ts": ts,
                     "stddev_ts": 0.0, "samples_ts": [ts] * reps}})
    # as llama-bench's JSON printer: each test's object as it ends, so the next test's --progress line (stderr, the
    # same pipe) lands inside the array
    sys.stdout.write("[\n")
    for i, row in enumerate(rows):
        if i:
            progress("2/2: generation")
        sys.stdout.write((",\n" if i else "") + json.dumps(row, indent=2))  # its closing brace: no newline yet
        sys.stdout.flush()
    sys.stdout.write("\n]\n")
    sys.exit(0)
prompt = arg("-p", "")
print("> " + prompt)
print("the stand-in says hello from " + str(variant) + " and more words here")
print("[ Prompt: 100.0 t/s | Generation: " + str(10.0 * speed) + " t/s ]")
"""


def write_program(
    path: Path,
    *,
    supported=RANK,
    crashes=(),
    speeds=None,
    gpu=None,
    log: Path | None = None,
    factors=(1.0,),
    drifts=(),
) -> Path:
    """One fake llama.cpp program at ``path`` (llama-bench behaves as llama-bench, llama-perplexity writes its
    log-probabilities, any other name is llama-cli). With ``log`` each run is appended to it, and the n-th run of a
    variant is ``factors[n]`` times as fast; a variant in ``drifts`` computes other numbers (a faulty kernel)."""
    config = {
        "drifts": list(drifts),
        "rank": list(RANK),
        "supported": list(supported),
        "crashes": list(crashes),
        "speeds": speeds or {},
        "gpu": gpu or {},
        "log": str(log) if log else "",
        "factors": list(factors),
    }
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(PROGRAM.format(config=json.dumps(config))))
    path.chmod(0o755)
    return path


def make_variant_bundle(folder: Path, variants=RANK, *, programs=("llama-bench", "llama-cli"), **behaviour) -> Path:
    """A bundle folder holding ``libggml-cpu-<variant>.so`` (a few bytes each: the programs never dlopen them) and
    the fake programs; ``behaviour`` goes to :func:`write_program`."""
    folder.mkdir(parents=True, exist_ok=True)
    for variant in variants:
        (folder / f"libggml-cpu-{variant}.so").write_bytes(f"fake {variant} module\n".encode())
    if variants:
        (folder / "libggml-rpc.so").write_bytes(b"fake rpc module\n")
    for name in programs:
        write_program(folder / name, **behaviour)
    return folder
