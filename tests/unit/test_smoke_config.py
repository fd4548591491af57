"""smoke.yaml's run section validated on load (rockbuild/smoke/config.py): a wrong value is one config error naming the
file, the line and the key, never an internal error deep in the smoke (issue 40: `n_predict: many`,
`timeouts: {cli: soon}`, `gpu_layers: [1]` and `threads: null` each ended in exit 70)."""

from __future__ import annotations

import pytest

from rockbuild.core.data import data_path
from rockbuild.core.errors import ConfigError
from rockbuild.smoke.config import load_smoke_config

SHIPPED = data_path("config", "smoke.yaml").read_text()


def line_of(text: str, needle: str) -> int:
    """The line of ``needle`` in the run section (the tiny model has a seed too)."""
    lines = text.splitlines()
    run = lines.index("run:")
    return next(i for i, line in enumerate(lines, 1) if i > run and line.startswith(needle))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("  n_predict: 16", "  n_predict: many", "run.n_predict must be a whole number, at least 1, not 'many'"),
        ("  threads: 1", "  threads: null", "run.threads must be a whole number, at least 1, not None"),
        ("  gpu_layers: 99", "  gpu_layers: [1]", "run.gpu_layers must be a whole number, at least -1, not [1]"),
        ("  ctx_size: 1024", "  ctx_size: 0", "run.ctx_size must be a whole number, at least 16, not 0"),
        ("  seed: 42", "  seed: true", "run.seed must be a whole number, not True"),
        (
            "  timeouts: {cli: 300,",
            "  timeouts: {cli: soon,",
            "run.timeouts.cli must be seconds (a positive number), not 'soon'",
        ),
        ("  timeouts: {cli: 300,", "  timeouts: {clli: 300,", "unknown key 'clli' in run.timeouts"),
        (
            "  bench: {n_prompt: 512,",
            "  bench: {n_prompt: -5,",
            "run.bench.n_prompt must be a whole number, at least 0",
        ),
        (
            "  gpu_bench: {n_prompt: 512,",
            "  gpu_bench: {n_prompt: 512, reps: 3,",
            "unknown key 'reps' in run.gpu_bench",
        ),
        ("  n_predict: 16", "  n_predict: 16\n  n_predit: 8", "unknown key 'n_predit' in run"),
        ("  prompt: I believe", "  prompt: [I believe", None),  # a YAML syntax error: the loader's own one line
        (
            "    enabled: false\n    input:",
            "    enabled: maybe\n    input:",
            "run.browser.enabled must be true or false",
        ),
    ],
)
def test_a_wrong_run_value_is_one_config_error_naming_file_line_and_key(tmp_path, old, new, message):
    assert old in SHIPPED
    text = SHIPPED.replace(old, new, 1)
    path = tmp_path / "smoke.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_smoke_config(path)
    said = info.value.message
    assert said.startswith(f"{path}:") and "\n" not in said
    if message is not None:
        key_line = (
            line_of(text, new.splitlines()[-1].split(":")[0] + ":")
            if "unknown key 'n_predit'" in message
            else line_of(text, new.splitlines()[0].split("{")[0].split(":")[0] + ":")
        )
        assert message in said, said
        assert said.startswith(f"{path}:{key_line}:"), said


def test_the_shipped_smoke_yaml_passes_its_own_checks():
    config = load_smoke_config()
    assert config["run"]["n_predict"] >= 1 and config["run"]["timeouts"]["cli"] > 0


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("  n_predict: 16", "  n_predict: many", "run.n_predict"),
        ("  timeouts: {cli: 300,", "  timeouts: {cli: soon,", "run.timeouts.cli"),
        ("  gpu_layers: 99", "  gpu_layers: [1]", "run.gpu_layers"),
        ("  threads: 1", "  threads: null", "run.threads"),
        ("  ctx: 256", "  ctx: lots", "numerics.ctx"),
        ("  chunks: 8", "  chunks: .inf", "numerics.chunks"),
    ],
)
def test_the_four_bad_values_of_the_issue_are_one_config_line_and_exit_2(tmp_path, run_rockbuild, old, new, key):
    """As a user meets them: `rockbuild smoke` with the edited smoke.yaml ($ROCKBUILD_SMOKE_CONFIG) says one line
    naming the file, the line and the key, and exits 2 (was: internal error, exit 70)."""
    assert old in SHIPPED, old
    text = SHIPPED.replace(old, new, 1)
    path = tmp_path / "smoke.yaml"
    path.write_text(text)
    (tmp_path / "bundle").mkdir()
    result = run_rockbuild("smoke", str(tmp_path / "bundle"), env={"ROCKBUILD_SMOKE_CONFIG": str(path)})
    assert result.returncode == 2, result.stderr
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith(new))
    assert result.stderr.splitlines() == [result.stderr.strip()], result.stderr
    assert result.stderr.startswith(f"error: {path}:{line}: {key} must be"), result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
