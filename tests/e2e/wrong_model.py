"""A deliberately wrong copy of a GGUF, for the numerics step's failing runs (docs/numerics.md, docs/gpu.md).

    python tests/e2e/wrong_model.py IN OUT --scale TENSOR=FACTOR [--scale ...]

Copies IN to OUT and multiplies each named F32 tensor by its factor in place (norm weights are F32 in every
llama.cpp GGUF, whatever the quantization of the rest). ``output_norm.weight=-1`` flips the sign of every logit: the
model then picks its least likely token, on every backend alike (a broken conversion or a llama.cpp commit that
breaks the model everywhere: the known answers catch it, the GPU-vs-CPU comparison cannot).
``blk.15.ffn_norm.weight=1.2`` is one layer computed 20 % wrong (what a wrong GPU kernel looks like when the GPU runs
this copy against the CPU's run of the clean one). Needs the gguf package and numpy.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--scale", action="append", default=[], metavar="TENSOR=FACTOR", required=True)
    args = ap.parse_args(argv)
    import numpy as np
    from gguf import GGUFReader

    scales = {}
    for item in args.scale:
        name, _, factor = item.partition("=")
        scales[name] = float(factor)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.src, args.out)
    reader = GGUFReader(args.out, "r+")
    found = {t.name: t for t in reader.tensors}
    for name, factor in scales.items():
        tensor = found.get(name)
        if tensor is None:
            print(f"error: {args.src.name} has no tensor {name}", file=sys.stderr)
            return 1
        if tensor.data.dtype != np.float32:
            print(f"error: {name} is {tensor.tensor_type.name}, not F32: scale a norm weight", file=sys.stderr)
            return 1
        tensor.data[...] *= np.float32(factor)
        print(f"{name}: x{factor:g} (mean now {float(np.mean(tensor.data)):.4f})")
    del reader  # flush the memory map
    return 0


if __name__ == "__main__":
    sys.exit(main())
