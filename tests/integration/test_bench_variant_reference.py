"""bench/variant_reference.py on the stand-in variant bundle (tests/support/cpu_variants.py): the cpu_variants step run
without and with each variant's reference run, in one run, the ratio printed; the figures come from a real bundle
(docs/numerics.md)."""

from __future__ import annotations

import json
import subprocess
import sys

from support.cpu_variants import make_variant_bundle
from support.paths import REPO
from support.smoke import gguf_header

SCRIPT = REPO / "bench" / "variant_reference.py"


def test_the_step_with_and_without_references_and_their_ratio(tmp_path):
    bundle = make_variant_bundle(
        tmp_path / "bundle", ("haswell", "zen4"), programs=("llama-bench", "llama-cli", "llama-perplexity")
    )
    model = tmp_path / "m.gguf"
    model.write_bytes(gguf_header())
    baselines = tmp_path / "baselines.yaml"
    baselines.write_text("tolerance: 0.02\n")
    out = tmp_path / "figures.json"
    got = subprocess.run(
        [sys.executable, str(SCRIPT), str(bundle), "--model", str(model), "--baselines", str(baselines)]
        + ["--threads", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[0].startswith("without references (baseline)") and lines[1].startswith("with references")
    assert lines[2].startswith("ratio (with / without)")
    assert lines[3].startswith("reference runs: haswell ") and ", zen4 " in lines[3]
    figures = json.loads(out.read_text())
    assert set(figures["reference_seconds"]) == {"haswell", "zen4"} and figures["ratio"] > 0


def test_a_failed_step_is_one_line_and_exit_1(tmp_path):
    bundle = make_variant_bundle(tmp_path / "bundle", ("haswell",), crashes=("haswell",))
    model = tmp_path / "m.gguf"
    model.write_bytes(gguf_header())
    got = subprocess.run(
        [sys.executable, str(SCRIPT), str(bundle), "--model", str(model)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert got.returncode == 1
    assert got.stderr.startswith("without references (baseline): the step failed: CPU variant haswell: ")
    assert got.stderr.count("\n") == 1
