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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tolerance: 2\n", "tolerance is relative (0.02 is 2 %), not 2.0"),
        ("tolerance: -0.1\n", "tolerance must be a positive number"),
        (
            "baselines:\n  - {model: m, text: t, ctx: 256, chunks: 8, ppl: lots}\n",
            "baselines[0].ppl must be a positive number, not 'lots'",
        ),
        (
            "baselines:\n  - {model: m, text: t, ctx: 2.5, chunks: 8, ppl: 3}\n",
            "baselines[0].ctx must be a positive integer",
        ),
        ("baselines:\n  - {text: t, ctx: 256, chunks: 8, ppl: 3}\n", "baselines[0] needs a model"),
        ("baselines:\n  - {model: m, text: t, ctx: 256, chunks: 8, ppl: 3, quant: q4}\n", "unknown key 'quant'"),
        ("baseline: []\n", "unknown key 'baseline'"),
    ],
)
def test_a_wrong_baselines_file_is_a_config_error_naming_file_and_line(tmp_path, text, message):
    path = write(tmp_path / "baselines.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_baselines(path)
    assert message in info.value.message and info.value.message.startswith(f"{path}:")


def smoke_json(path: Path, ppl, *, model="SmolLM2-135M-Instruct.Q4_1.gguf") -> Path:
    data = {
        "schema": 1,
        "ok": True,
        "finished": "2026-12-04T19:00:00+00:00",
        "backends": {"cpu": "CPU", "cpu_variant": "zen4", "shipped": []},
        "numerics": {
            "cpu": {"model": model, "text": "numerics.txt", "ctx": 256, "chunks": 8, "ppl": ppl, "result": "failed"}
        },
    }
    path.write_text(json.dumps(data))
    return path


def test_rockbuild_baseline_rewrites_the_entry_and_keeps_the_header(tmp_path, run_rockbuild):
    target = tmp_path / "baselines.yaml"
    target.write_text(data_path("config", "baselines.yaml").read_text())
    result = run_rockbuild("baseline", str(smoke_json(tmp_path / "smoke.json", 25.9)), "--file", str(target))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"{target}: SmolLM2-135M-Instruct* on numerics.txt, 8 x 256 tokens: "
        "24.7663 -> 25.9000 (CPU variant zen4, smoke of 2026-12-04T19:00:00+00:00)"
    )
    assert target.read_text().startswith("# The CPU's perplexity per model file")
    again = load_baselines(target)
    assert [(b.model, b.ppl) for b in again.entries] == [("SmolLM2-135M-Instruct*", 25.9)]
    # another model: a new entry beside it
    result = run_rockbuild(
        "baseline",
        str(smoke_json(tmp_path / "q.json", 14.02, model="Qwen3-0.6B-Q4_0.gguf")),
        "--file",
        str(target),
        "--measured",
        "gfx1151 runner, 2026-12-05",
        "--json",
    )
    assert json.loads(result.stdout)["baseline"]["old"] is None
    assert [(b.model, b.ppl, b.measured) for b in load_baselines(target).entries][1] == (
        "Qwen3-0.6B-Q4_0.gguf",
        14.02,
        "gfx1151 runner, 2026-12-05",
    )


def test_rockbuild_baseline_refuses_a_smoke_json_without_a_figure(tmp_path, run_rockbuild):
    result = run_rockbuild("baseline", str(smoke_json(tmp_path / "s.json", None)), "--file", str(tmp_path / "b.yaml"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("error: the smoke.json has no CPU perplexity to take as a baseline")
    assert not (tmp_path / "b.yaml").exists()


# -- long-context references: one per model file, text, context and OS ------------------------------------------------

SHA = "b" * 64


def _ref(extra: str, *, file: str = "x.topk", kld: float = 0.1, same_top: float = 99) -> str:
    """One references entry of model m.gguf (file sha256 SHA) on t.txt, 4096 tokens; ``extra``: more of its keys."""
    return (
        f"  - {{model: m.gguf, sha256: '{SHA}', text: t.txt, ctx: 4096, {extra}file: {file},\n"
        f"     max_mean_kld: {kld}, min_same_top: {same_top}}}\n"
    )


LINUX_REF = "references:\n" + _ref("", file="references/m-t-4096.topk", kld=0.002, same_top=98.0)


def test_a_reference_without_an_os_is_linuxs_and_each_os_finds_only_its_own(tmp_path):
    path = write(tmp_path / "baselines.yaml", LINUX_REF + _ref("os: windows, ", file="w.topk", kld=0.003))
    loaded = load_baselines(path)
    linux = loaded.reference("m.gguf", "t.txt", 4096, SHA, "linux")
    windows = loaded.reference("m.gguf", "t.txt", 4096, SHA, "windows")
    assert linux is not None and linux.os == "linux" and linux.max_mean_kld == 0.002
    assert windows is not None and windows.os == "windows" and windows.file == tmp_path / "w.topk"
    assert loaded.reference("m.gguf", "t.txt", 4096, SHA, "macos") is None
    only_linux = load_baselines(write(tmp_path / "linux.yaml", LINUX_REF))
    assert only_linux.reference("m.gguf", "t.txt", 4096, SHA, "windows") is None  # never judged by Linux's answer


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (_ref("os: macos, "), "references[1].os is one of linux, windows, not 'macos'"),
        (_ref("os: linux, "), "references[1] is a second reference of m.gguf on t.txt, 4096 tokens, linux"),
    ],
)
def test_a_wrong_or_second_reference_for_an_os_is_a_config_error_on_its_line(tmp_path, extra, message):
    path = write(tmp_path / "baselines.yaml", LINUX_REF + extra)
    with pytest.raises(ConfigError) as info:
        load_baselines(path)
    assert info.value.message.startswith(f"{path}:4:"), info.value.message
    assert message in info.value.message


def _smoke_json(tmp_path: Path, os_name: str | None) -> Path:
    topk = write(tmp_path / f"night-{os_name}.topk", f"top-k of a {os_name} run")
    about = {"model": "m.gguf", "model_sha256": SHA, "text": "t.txt", "ctx": 4096, "cpu_variant": "haswell"}
    if os_name is not None:
        about["os"] = os_name
    return write(
        tmp_path / f"smoke-{os_name}.json",
        json.dumps(
            {
                "schema": 1,
                "ok": True,
                "finished": "2026-12-07T03:00:00+00:00",
                "numerics": {"long_reference": {"topk": str(topk), "about": about}},
            }
        ),
    )


def test_rockbuild_baseline_gives_a_windows_run_its_own_reference_and_keeps_linuxs(tmp_path, run_rockbuild):
    target = write(tmp_path / "baselines.yaml", "# ours\ntolerance: 0.02\nbaselines:\n" + LINUX_REF)
    write(tmp_path / "references" / "m-t-4096.topk", "the Linux top-k")
    result = run_rockbuild(
        "baseline",
        str(_smoke_json(tmp_path, "windows")),
        "--file",
        str(target),
        "--only",
        "long",
        "--measured",
        "wine, 2026-12-07",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    new = json.loads(result.stdout)["reference"]
    assert new["old"] is None and new["new"]["os"] == "windows" and new["new"]["file"] == "m-t-4096-windows.topk"
    # a new OS's entry starts from the limits of the model's reference on the other OS, not the defaults
    assert (new["new"]["max_mean_kld"], new["new"]["min_same_top"]) == (0.002, 98.0)
    written = load_baselines(target)
    assert [r.os for r in written.references] == ["linux", "windows"]
    assert (tmp_path / "references" / "m-t-4096.topk").read_text() == "the Linux top-k"
    assert written.references[1].file.read_text() == "top-k of a windows run"
    assert target.read_text().startswith("# ours\n") and "os: windows" in target.read_text()
    # a smoke.json from before the key was a Linux run: it replaces Linux's, and the Windows one stays
    result = run_rockbuild(
        "baseline", str(_smoke_json(tmp_path, None)), "--file", str(target), "--only", "long", "--json"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["reference"]["old"]["os"] == "linux"
    assert [r.os for r in load_baselines(target).references] == ["linux", "windows"]
    assert (tmp_path / "references" / "m-t-4096.topk").read_text() == "top-k of a None run"


def test_rockbuild_baseline_refuses_a_run_of_an_unknown_os_in_one_line(tmp_path, run_rockbuild):
    target = write(tmp_path / "baselines.yaml", "tolerance: 0.02\nbaselines:\n" + LINUX_REF)
    before = target.read_text()
    result = run_rockbuild("baseline", str(_smoke_json(tmp_path, "macos")), "--file", str(target), "--only", "long")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "error: the smoke.json has no long-context run to take as a reference "
        "(numerics.long_reference needs its about: model, model_sha256, text, ctx, and "
        "an os of linux, windows if any)"
    )
    assert target.read_text() == before


def test_a_gpus_own_reference_is_found_by_its_device_alone(tmp_path):
    """A GPU's long run is judged against that device's own last good run (a glob over its description); a CPU
    lookup never finds it, and a GPU without an entry of its own finds none."""
    path = write(tmp_path / "baselines.yaml", LINUX_REF + _ref('device: "NVIDIA H*", ', file="h.topk"))
    loaded = load_baselines(path)
    cpu = loaded.reference("m.gguf", "t.txt", 4096, SHA, "linux")
    gpu = loaded.reference("m.gguf", "t.txt", 4096, SHA, "linux", device="NVIDIA H200")
    assert cpu is not None and cpu.device == "" and cpu.file.name == "m-t-4096.topk"
    assert gpu is not None and gpu.device == "NVIDIA H*" and gpu.what == "long-context reference of GPU NVIDIA H*"
    assert loaded.reference("m.gguf", "t.txt", 4096, SHA, "linux", device="AMD Radeon 8060S") is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (_ref("variant: zen4, device: NVIDIA, "), "references[1].device is a GPU device's description"),
        (_ref("device: 7, "), "references[1].device is a GPU device's description"),
        (
            _ref('device: "NVIDIA H200", ') + _ref('device: "NVIDIA H200", '),
            "references[2] is a second reference of m.gguf on t.txt, 4096 tokens, linux, GPU NVIDIA H200",
        ),
    ],
)
def test_a_wrong_or_second_device_reference_is_a_config_error(tmp_path, extra, message):
    path = write(tmp_path / "baselines.yaml", LINUX_REF + extra)
    with pytest.raises(ConfigError) as info:
        load_baselines(path)
    assert message in info.value.message, info.value.message


def test_a_reference_judges_every_window_and_names_where_a_run_moved():
    """Per ubatch window: a fault in one region of the positions fails there, even when the mean over all of them
    stays under the limit (mutant (e) on the H100 moved the whole figure by a fifth)."""
    from rockbuild.smoke.baselines import Reference
    from rockbuild.smoke.logprobs import Comparison, Window

    ref = Reference("m.gguf", SHA, "t.txt", 4096, Path("r.topk"), max_mean_kld=0.001, min_same_top=99.0)
    windows = (Window(2048, 0.0, 100.0), Window(2560, 0.0, 100.0), Window(3072, 0.0035, 99.2), Window(3584, 0.0, 100.0))
    got = Comparison(2047, 0.0009, 0.2, 0.004, 99.8, 512, windows, 3100)
    assert ref.missed(got) == (True, False)
    assert ref.problems(got) == ["mean KLD 0.00090 > 0.001 (from position 3072: 0.00350)"]
    clean = Comparison(2047, 0.0, 0.0, 0.0, 100.0, 512, tuple(Window(w.start, 0.0, 100.0) for w in windows), 2049)
    assert ref.missed(clean) == (False, False) and ref.problems(clean) == []
    low = Comparison(2047, 0.0, 0.0, 0.0, 99.5, 512, (*windows[:2], Window(3072, 0.0, 98.0), windows[3]), 2049)
    assert ref.problems(low) == ["same top token 99.5 % < 99 % (from position 3072: 98.0 %)"]
    assert ref.problems(Comparison(2047, float("nan"), 0.0, 0.0, 99.5, 512, windows, 2049)) == [
        "NaN or inf in its numbers"
    ]
