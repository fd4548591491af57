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


def test_the_run_section_is_read_once_into_a_typed_config_the_options_are_built_from(monkeypatch):
    """Issue 58, item 2: smoke.yaml is read once, on load, into a typed config (cibuildwheel's BuildOptions);
    SmokeOptions.from_config copies them and never reads the document's run section again."""
    from dataclasses import replace

    import rockbuild.smoke.config as smoke_config
    from rockbuild.smoke.config import RunConfig, SmokeConfig
    from rockbuild.smoke.runner import SmokeOptions

    read: list[object] = []
    parse_run = smoke_config.parse_run
    monkeypatch.setattr(smoke_config, "parse_run", lambda run, path: read.append(path) or parse_run(run, path))
    config = load_smoke_config()
    assert read == [data_path("config", "smoke.yaml")]  # one reading of the run section, on load
    assert isinstance(config.run, RunConfig)
    assert (config.run.gpu_bench.threads, config.run.cpu_variants.n_gen, config.run.timeouts["bench"]) == (8, 8, 600.0)
    assert config["run"]["n_predict"] == config.run.n_predict  # the document stays readable as a mapping

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("smoke.yaml parsed a second time")

    for name in ("parse_run", "parse_cpu_variants", "parse_bench", "parse_browser", "parse_timeouts"):
        monkeypatch.setattr(smoke_config, name, refuse)
    # the options come from the typed config alone: a document whose run section says otherwise is not looked at
    typed = replace(config, document={"run": {"n_predict": "many", "cpu_variants": "all"}})
    gpu = SmokeOptions.from_config(typed, bench_preset="gpu", cpu_variants="picked")
    assert (gpu.n_predict, gpu.bench_prompt, gpu.bench_gen, gpu.bench_threads, gpu.bench_warmup) == (16, 512, 128, 8, 1)
    assert (gpu.cpu_variants, gpu.cpu_variant_gen) == ("picked", 8)  # a flag overrides smoke.yaml's value
    assert gpu.numerics is config.numerics and gpu.ops is config.ops and gpu.chat_page is config.run.browser.page
    assert SmokeOptions.from_config(typed).bench_threads is None  # run.bench names no threads
    # an empty smoke.yaml's settings are SmokeOptions' own defaults (one place says what each default is)
    empty = SmokeOptions.from_config(SmokeConfig())
    assert replace(empty, numerics=None, ops=None) == SmokeOptions()


def test_a_bad_run_value_fails_on_load_before_any_options_are_made(tmp_path):
    """What from_config once met as int(...) of a raw value is a ConfigError naming file and line, on load."""
    text = SHIPPED.replace("threads: 8, warmup: 1}", "threads: 0, warmup: 1}", 1)
    assert text != SHIPPED
    path = tmp_path / "smoke.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_smoke_config(path)
    line = line_of(text, "  gpu_bench:")
    assert info.value.message == f"{path}:{line}: run.gpu_bench.threads must be a whole number, at least 1, not 0"
    path.write_text(SHIPPED.replace("  timeouts: {cli: 300,", "  timeouts: {cli: .inf,", 1))
    with pytest.raises(ConfigError) as info:
        load_smoke_config(path)
    said = info.value.message
    assert (
        said
        == f"{path}:{line_of(SHIPPED, '  timeouts:')}: run.timeouts.cli must be seconds (a positive number), not inf"
    )


def test_only_the_timeouts_smoke_yaml_names_change(tmp_path):
    from rockbuild.smoke.config import RunConfig

    path = tmp_path / "smoke.yaml"
    path.write_text(
        SHIPPED.replace("  timeouts: {cli: 300, server_start: 300, request: 300, bench: 600}", "  timeouts: {cli: 5}")
    )
    assert load_smoke_config(path).run.timeouts == {**RunConfig().timeouts, "cli": 5.0}
