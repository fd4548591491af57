"""bench/cpu_variants.py on a stand-in bundle: fake variant files and a fake llama-bench that picks among them as
ggml does and prints llama-bench-like JSON whose speed depends on the variant it loaded (tests/support/cpu_variants.py).
The arithmetic, the one-variant folders, the alternating rounds and the one-line errors are proved here; the figures
come from the real bundle (docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.cpu_variants import RANK, make_variant_bundle
from support.paths import REPO
from support.smoke import gguf_header

SCRIPT = REPO / "bench" / "cpu_variants.py"


def bench(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_each_variant_alone_best_of_alternating_rounds_with_ratios_to_both_baselines(tmp_path):
    log = tmp_path / "runs.jsonl"
    bundle = make_variant_bundle(
        tmp_path / "bundle",
        RANK,
        supported=RANK[:-1],
        log=log,
        factors=(0.5, 1.0),
        speeds={"x64": 0.05, "haswell": 1.0, "zen4": 2.3},
    )
    (bundle / "libggml-base.so").write_bytes(b"base")
    (bundle / "rocblas" / "library").mkdir(parents=True)
    (bundle / "rocblas" / "library" / "kernels.dat").write_bytes(b"k")
    model = tmp_path / "m.gguf"
    model.write_bytes(gguf_header() + bytes(40))
    out = tmp_path / "figures.json"
    got = bench(str(bundle), "--model", str(model), "--rounds", "2", "-r", "2", "--json", str(out), cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[0] == (
        f"CPU variants of {bundle}: llama-bench -t 1 -p 128 -n 32 -r 2, best of 2 alternating rounds, model m.gguf"
    )
    assert lines[1].startswith("ggml picks zen4 here")  # sapphirerapids is shipped but this "CPU" cannot run it
    rows = {line.split()[0]: line for line in lines[3:]}
    assert list(rows) == ["x64", "haswell", "zen4"]
    assert "haswell (baseline)" in rows["haswell"] and "zen4 (picked here)" in rows["zen4"]
    assert rows["zen4"].split()[3:7] == ["230.0", "23.0", "2.30x", "2.30x"]  # the best round: factor 1.0, not 0.5
    data = json.loads(out.read_text())
    assert data["best"]["x64"] == {"pp128": 5.0, "tg32": 0.5} and data["picked"] == "zen4"
    assert (
        data["ratios"]["zen4"]["pp128_vs_x64"] == pytest.approx(46.0)
        and data["ratios"]["haswell"]["tg32_vs_haswell"] == 1.0
    )
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["variant"] for r in runs] == ["x64", "haswell", "zen4"] * 2  # the variants take turns
    for run in runs:
        assert run["args"][run["args"].index("-t") + 1] == "1" and run["args"][run["args"].index("-p") + 1] == "128"
        assert run["args"][run["args"].index("-n") + 1] == "32" and run["cwd"].endswith("/" + run["variant"])
    assert not list(tmp_path.glob(".cpu-variants-*"))  # the one-variant folders are gone
    assert sorted(p.name for p in bundle.iterdir() if p.name.startswith("libggml-cpu-")) == sorted(
        f"libggml-cpu-{v}.so" for v in RANK
    )  # and the bundle untouched


def test_help_works_and_writes_nothing(tmp_path):
    got = bench("--help", cwd=tmp_path)
    assert got.returncode == 0 and "usage: cpu_variants.py" in got.stdout and "--variants" in got.stdout
    assert list(tmp_path.iterdir()) == []


def test_one_line_errors(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    got = bench(str(plain), cwd=tmp_path)
    assert got.returncode == 1 and got.stderr.splitlines() == [
        f"error: {plain} ships no libggml-cpu-<variant>.so: build it with GGML_BACKEND_DL=ON and "
        "GGML_CPU_ALL_VARIANTS=ON"
    ]
    bundle = make_variant_bundle(tmp_path / "b", ("x64", "zen4"))
    got = bench(str(bundle), "--model", str(tmp_path / "m.gguf"), cwd=tmp_path)
    assert got.returncode == 1 and got.stderr.splitlines() == [
        "error: " + f"{bundle} ships no variant haswell (it ships x64, zen4)"
    ]
    got = bench(str(bundle), "--variants", "x64,picked", "--model", str(tmp_path / "none.gguf"), cwd=tmp_path)
    assert got.stderr.splitlines() == [
        f"error: --model {tmp_path / 'none.gguf'}: no such file; give a GGUF path or 'tiny'"
    ]
