"""config/baselines.yaml (rockbuild/smoke/baselines.py): the data file's mistakes, and `rockbuild baseline`, which
takes a smoke.json's CPU perplexity as its model's baseline once a human has looked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.files import write

from rockbuild.core.data import data_path
from rockbuild.core.errors import ConfigError
from rockbuild.smoke.baselines import load_baselines


def test_the_shipped_baselines_parse_with_smollm2s_entry():
    shipped = load_baselines(data_path("config", "baselines.yaml"))
    assert shipped.tolerance == 0.02
    entry = shipped.find("SmolLM2-135M-Instruct.Q4_1.gguf", "numerics.txt", 256, 8)
    assert entry is not None and 24.7160 <= entry.ppl <= 24.8166
    assert shipped.find("SmolLM2-135M-Instruct.Q4_1.gguf", "numerics.txt", 512, 8) is None


@pytest.mark.parametrize(("text", "message"), [
    ("tolerance: 2\n", "tolerance is relative (0.02 is 2 %), not 2.0"),
    ("tolerance: -0.1\n", "tolerance must be a positive number"),
    ("baselines:\n  - {model: m, text: t, ctx: 256, chunks: 8, ppl: lots}\n", "baselines[0].ppl must be a positive "
     "number, not 'lots'"),
    ("baselines:\n  - {model: m, text: t, ctx: 2.5, chunks: 8, ppl: 3}\n", "baselines[0].ctx must be a positive "
     "integer"),
    ("baselines:\n  - {text: t, ctx: 256, chunks: 8, ppl: 3}\n", "baselines[0] needs a model"),
    ("baselines:\n  - {model: m, text: t, ctx: 256, chunks: 8, ppl: 3, quant: q4}\n", "unknown key 'quant'"),
    ("baseline: []\n", "unknown key 'baseline'"),
])
def test_a_wrong_baselines_file_is_a_config_error_naming_file_and_line(tmp_path, text, message):
    path = write(tmp_path / "baselines.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_baselines(path)
    assert message in info.value.message and info.value.message.startswith(f"{path}:")


def smoke_json(path: Path, ppl, *, model="SmolLM2-135M-Instruct.Q4_1.gguf") -> Path:
    data = {"schema": 1, "ok": True, "finished": "2026-12-04T19:00:00+00:00",
            "backends": {"cpu": "CPU", "cpu_variant": "zen4", "shipped": []},
            "numerics": {"cpu": {"model": model, "text": "numerics.txt", "ctx": 256, "chunks": 8, "ppl": ppl,
                                 "result": "failed"}}}
    path.write_text(json.dumps(data))
    return path


def test_rockbuild_baseline_rewrites_the_entry_and_keeps_the_header(tmp_path, run_rockbuild):
    target = tmp_path / "baselines.yaml"
    target.write_text(data_path("config", "baselines.yaml").read_text())
    result = run_rockbuild("baseline", str(smoke_json(tmp_path / "smoke.json", 25.9)), "--file", str(target))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (f"{target}: SmolLM2-135M-Instruct* on numerics.txt, 8 x 256 tokens: "
                                     "24.7663 -> 25.9000 (CPU variant zen4, smoke of 2026-12-04T19:00:00+00:00)")
    assert target.read_text().startswith("# The CPU's perplexity per model file")
    again = load_baselines(target)
    assert [(b.model, b.ppl) for b in again.entries] == [("SmolLM2-135M-Instruct*", 25.9)]
    # another model: a new entry beside it
    result = run_rockbuild("baseline", str(smoke_json(tmp_path / "q.json", 14.02, model="Qwen3-0.6B-Q4_0.gguf")),
                           "--file", str(target), "--measured", "gfx1151 runner, 2026-12-05", "--json")
    assert json.loads(result.stdout)["baseline"]["old"] is None
    assert [(b.model, b.ppl, b.measured) for b in load_baselines(target).entries][1] == (
        "Qwen3-0.6B-Q4_0.gguf", 14.02, "gfx1151 runner, 2026-12-05")


def test_rockbuild_baseline_refuses_a_smoke_json_without_a_figure(tmp_path, run_rockbuild):
    result = run_rockbuild("baseline", str(smoke_json(tmp_path / "s.json", None)), "--file",
                           str(tmp_path / "b.yaml"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("error: the smoke.json has no CPU perplexity to take as a baseline")
    assert not (tmp_path / "b.yaml").exists()
