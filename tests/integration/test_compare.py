"""`rockbuild compare` against real child processes: small Python programs standing in for llama-bench in two bundle
folders, printing llama-bench JSON (the shape of tests/fixtures/smoke/bench.json.txt) and recording what they got.

The e2e test at the end runs the real CPU build of llama.cpp twice on the tiny model (opt-in: pytest -m e2e)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import rockbuild_exe
from support.paths import FIXTURES

from rockbuild.compare import CompareOptions, run_compare
from rockbuild.core.errors import SmokeError, UsageError
from rockbuild.smoke.models import ModelFile

FIXTURES = FIXTURES / "smoke"

BENCH = """
import json, os, sys, time
from pathlib import Path
MODE, FIXTURE, RECORD = {mode!r}, {fixture!r}, Path({record!r})
RECORD.write_text(json.dumps({{"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}}))
def arg(flag):
    return sys.argv[sys.argv.index(flag) + 1]
sys.stderr.write("ggml_vulkan: Found 1 Vulkan devices:\\n")
if MODE == "fail":
    sys.stderr.write("error: invalid device: Vulkan0\\n")
    sys.exit(1)
if MODE == "hang":
    time.sleep(600)
if MODE == "garbage":
    print("| model | size |")
    sys.exit(0)
items = json.loads(Path(FIXTURE).read_text())
for item in items:  # answer with the sizes asked for, and a spread
    if item["n_prompt"]:
        item["n_prompt"] = int(arg("-p"))
    else:
        item["n_gen"] = int(arg("-n"))
    item["stddev_ts"] = item["avg_ts"] / 100
    item["n_threads"] = int(arg("-t"))
    item["n_gpu_layers"] = int(arg("-ngl"))
sys.stdout.write(json.dumps(items, indent=2) + "\\n")
"""


def make_bundle(root: Path, name: str, fixture: str = "bench.json.txt", mode: str = "ok") -> tuple[Path, Path]:
    """out/<name>/bundle with a stand-in llama-bench; returns (bundle, file where it records argv/env/cwd)."""
    bundle = root / "out" / name / "bundle"
    bundle.mkdir(parents=True)
    record = root / f"{name}.record.json"
    exe = bundle / "llama-bench"
    exe.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(BENCH.format(mode=mode, fixture=str(FIXTURES / fixture), record=str(record)))
    )
    exe.chmod(0o755)
    return bundle, record


@pytest.fixture
def model(tmp_path) -> ModelFile:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF fake")
    return ModelFile("model.gguf", path, "ab" * 32, 9, "path")


def test_both_bundles_get_identical_arguments_and_a_clean_environment(tmp_path, model):
    rocm, rocm_rec = make_bundle(tmp_path, "linux-rocm")
    vk, vk_rec = make_bundle(tmp_path, "linux-vulkan", "vulkan-bench.constructed.txt")
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": "/opt/rocm/lib",
        "ROCM_PATH": "/opt/rocm",
        "GITHUB_TOKEN": "ghp_x",
        "PATH": "/opt/rocm/bin:" + os.environ["PATH"],
        "GGML_VK_VISIBLE_DEVICES": "0",
    }
    options = CompareOptions(threads=3, flash_attn=1, timeout=30)
    result = run_compare([rocm.parent, vk], model, options, env=env, logs=tmp_path / "logs")
    got = [json.loads(rec.read_text()) for rec in (rocm_rec, vk_rec)]
    assert (
        got[0]["argv"][1:]
        == got[1]["argv"][1:]
        == [
            "-m",
            str(model.path),
            "-p",
            "512",
            "-n",
            "128",
            "-r",
            "5",
            "-t",
            "3",
            "-ngl",
            "99",
            "-fa",
            "1",
            "-o",
            "json",
        ]
    )
    assert [Path(g["cwd"]) for g in got] == [rocm, vk]  # each runs from its own folder
    for g in got:
        assert "LD_LIBRARY_PATH" not in g["env"] and "ROCM_PATH" not in g["env"] and "GITHUB_TOKEN" not in g["env"]
        assert "rocm" not in g["env"]["PATH"] and g["env"]["GGML_VK_VISIBLE_DEVICES"] == "0"
    assert "LD_LIBRARY_PATH" in result.env_removed and "PATH entry /opt/rocm/bin" in result.env_removed
    assert [r.label for r in result.runs] == ["linux-rocm", "linux-vulkan"]
    assert result.tests == ("pp512", "tg128")
    assert [(r.backends, r.device) for r in result.runs] == [
        ("CPU", ""),
        ("Vulkan", "llvmpipe (LLVM 22.1.8, 256 bits)"),
    ]
    assert all(r.log.is_file() and "ggml_vulkan" in r.log.read_text() for r in result.runs)
    lines = result.render().splitlines()
    assert lines[0] == ("compare: model model.gguf (sha256 abababababab...), -p 512 -n 128 -r 5 -t 3 -ngl 99 -fa 1")
    assert lines[1:6] == [
        "           linux-rocm           linux-vulkan",
        "  backend  CPU                  Vulkan",
        "  device   none (CPU)           llvmpipe (LLVM 22.1.8, 256 bits)",
        "  pp512    335.28 ± 3.35 t/s    1968.00 ± 19.68 t/s (5.87x)",
        "  tg128    1438.38 ± 14.38 t/s  157.00 ± 1.57 t/s (0.11x)",
    ]
    assert lines[6:] == [f"  linux-rocm: {rocm}", f"  linux-vulkan: {vk}"]


def test_cli_json_and_table(tmp_path, model):
    a, rec_a = make_bundle(tmp_path, "a")
    b, rec_b = make_bundle(tmp_path, "b", "vulkan-bench.constructed.txt")
    args = [
        rockbuild_exe(),
        "compare",
        str(a),
        str(b),
        "--model",
        str(model.path),
        "-p",
        "64",
        "-n",
        "16",
        "-r",
        "2",
        "--threads",
        "2",
        "--ngl",
        "0",
    ]
    proc = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["settings"] == {
        "n_prompt": 64,
        "n_gen": 16,
        "repetitions": 2,
        "threads": 2,
        "gpu_layers": 0,
        "flash_attn": None,
        "timeout": 1800.0,
    }
    assert data["model"]["name"] == "model.gguf"
    assert [(x["label"], x["backends"], x["gpu_info"], x["n_gpu_layers"]) for x in data["bundles"]] == [
        ("a", "CPU", "", 0),
        ("b", "Vulkan", "llvmpipe (LLVM 22.1.8, 256 bits)", 0),
    ]
    assert data["tests"]["pp64"]["b"] == {"tokens_per_second": 1968.0, "stddev": 19.68}
    assert data["tests"]["tg16"]["a"] == {"tokens_per_second": 1438.381208, "stddev": 14.38381208}
    argv_a, argv_b = (json.loads(r.read_text())["argv"][1:] for r in (rec_a, rec_b))
    assert argv_a == argv_b and "-fa" not in argv_a and argv_a[argv_a.index("-ngl") + 1] == "0"
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "  tg16     1438.38 ± 14.38 t/s  157.00 ± 1.57 t/s (0.11x)" in proc.stdout.splitlines()


def test_a_vulkan_build_that_fell_back_to_the_cpu_is_called_out(tmp_path, model):
    """ICD present but GGML_VK_VISIBLE_DEVICES unset on lavapipe: llama-bench says Vulkan with an empty gpu_info."""
    fell_back = json.loads((FIXTURES / "vulkan-bench.constructed.txt").read_text())
    for item in fell_back:
        item["gpu_info"] = ""
    fixture = tmp_path / "fell-back.json"
    fixture.write_text(json.dumps(fell_back))
    a, _ = make_bundle(tmp_path, "linux-rocm")
    b, _ = make_bundle(tmp_path, "linux-vulkan", str(fixture))
    proc = subprocess.run(
        [rockbuild_exe(), "compare", str(a), str(b), "--model", str(model.path), "-r", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (note,) = json.loads(proc.stdout)["notes"]
    assert note.startswith("linux-vulkan: the Vulkan build used no GPU device") and "GGML_VK_VISIBLE_DEVICES" in note
    table = subprocess.run(
        [rockbuild_exe(), "compare", str(a), str(b), "--model", str(model.path), "-r", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"  note: {note}" in table.stdout.splitlines()
    # -ngl 0 asks for the CPU: nothing to point out
    cpu = subprocess.run(
        [rockbuild_exe(), "compare", str(a), str(b), "--model", str(model.path), "-r", "1", "--ngl", "0", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(cpu.stdout)["notes"] == []


def test_the_same_folder_twice_gets_two_columns(tmp_path, model):
    a, _ = make_bundle(tmp_path, "a")
    result = run_compare([a, a], model, CompareOptions(threads=1, timeout=30), logs=tmp_path / "logs")
    assert [r.label for r in result.runs] == ["a", "a#2"]
    assert len({r.log for r in result.runs}) == 2


def test_a_folder_without_llama_bench_is_refused_in_one_line(tmp_path, model, run_rockbuild):
    a, _ = make_bundle(tmp_path, "a")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match="has no llama-bench"):
        run_compare([a, empty], model)
    proc = run_rockbuild("compare", str(a), str(empty), "--model", str(model.path))
    assert proc.returncode == 2
    assert (
        proc.stderr.splitlines()[0]
        == f"error: {empty} has no llama-bench; pass bundle folders made by rockbuild bundle"
    )


def test_a_failing_bench_names_the_bundle_and_its_last_log_line(tmp_path, model, run_rockbuild):
    a, _ = make_bundle(tmp_path, "a")
    bad, _ = make_bundle(tmp_path, "vk", mode="fail")
    proc = run_rockbuild("compare", str(a), str(bad), "--model", str(model.path), "-r", "1")
    assert proc.returncode == 11, proc.stderr
    error, hint = proc.stderr.splitlines()[-2:]
    assert error == "error: llama-bench of vk failed with exit code 1: error: invalid device: Vulkan0"
    assert hint.startswith("hint: full log: ") and hint.endswith("2-vk.llama-bench.log")


def test_a_bench_without_json_and_a_hang(tmp_path, model):
    garbage, _ = make_bundle(tmp_path, "g", mode="garbage")
    with pytest.raises(SmokeError, match=r"^llama-bench of g printed no JSON results: \| model \| size \|$"):
        run_compare([garbage], model, CompareOptions(timeout=30), logs=tmp_path / "logs")
    hang, _ = make_bundle(tmp_path, "h", mode="hang")
    with pytest.raises(SmokeError, match="^llama-bench of h timed out after 1s$") as info:
        run_compare([hang], model, CompareOptions(timeout=1), logs=tmp_path / "logs")
    assert info.value.hint is not None and "h.llama-bench.log" in info.value.hint


CPU_BIN = Path(os.environ.get("ROCKBUILD_LLAMA_CPU_BIN", "/var/cache/rockbuild/llama-cpu-build/bin"))
TINY = Path("/var/cache/rockbuild/e2e/models/tiny-qwen3.gguf")


@pytest.mark.e2e
def test_real_llama_bench_twice_on_the_cpu_build(run_rockbuild):
    if not (CPU_BIN / "llama-bench").is_file() or not TINY.is_file():
        pytest.skip(f"needs a CPU llama.cpp build in {CPU_BIN} and {TINY}")
    proc = run_rockbuild(
        "compare",
        str(CPU_BIN),
        str(CPU_BIN),
        "--model",
        str(TINY),
        "-p",
        "128",
        "-n",
        "32",
        "-r",
        "3",
        "--threads",
        "2",
        "--json",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [b["label"] for b in data["bundles"]] == ["bin", "bin#2"]
    assert [(b["backends"], b["gpu_info"], b["n_gpu_layers"]) for b in data["bundles"]] == [("CPU", "", 99)] * 2
    for test in ("pp128", "tg32"):
        a, b = data["tests"][test]["bin"], data["tests"][test]["bin#2"]
        assert a["tokens_per_second"] > 0 and b["tokens_per_second"] > 0
        print(test, a, b)


def _with_numerics(bundle: Path, tmp_path: Path, mode: dict) -> Path:
    """The smoke's llama-perplexity and llama-completion stand-ins (tests/support/smoke.py) beside the bench."""
    import shutil

    from support.smoke import write_stand_ins

    stand_ins, envlog = tmp_path / f"stand-ins-{bundle.parent.name}", tmp_path / f"envlog-{bundle.parent.name}"
    stand_ins.mkdir()
    envlog.mkdir()
    write_stand_ins(stand_ins, envlog, mode)
    for name in ("llama-perplexity", "llama-completion", "llama-server"):  # llama-server: the long pass key
        shutil.copy2(stand_ins / name, bundle / name)
    return envlog


@pytest.mark.parametrize("case", ["pass", "wrong"])
def test_numerics_side_by_side_and_wrong_numbers_exit_like_a_failed_smoke(tmp_path, case):
    """Issue 26, item 4: compare --numerics runs the smoke's numerics step on each bundle, on the device its
    llama-bench used, and shows KLD, same top token, known answers and the CPU perplexity under the speed."""
    path = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    path.write_bytes(b"GGUF fake")
    cpu, _ = make_bundle(tmp_path, "linux-cpu")
    vk, _ = make_bundle(tmp_path, "linux-vulkan", "vulkan-bench.constructed.txt")
    _with_numerics(cpu, tmp_path, {"numerics": "pass"})
    envlog = _with_numerics(vk, tmp_path, {"numerics": case, **({"answers": "wrong"} if case == "wrong" else {})})
    args = [rockbuild_exe(), "compare", str(cpu), str(vk), "--model", str(path), "-r", "1", "--numerics"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    table = proc.stdout.splitlines()
    row = {line.split("  ")[1]: line for line in table if line.startswith("  ") and "  " in line[2:]}
    assert row["mean KLD vs CPU"].split()[4:6] == ["not", "checked"]  # the CPU build used no GPU device
    calls = [json.loads(line) for line in (envlog / "perplexity.calls").read_text().splitlines()]
    assert calls[0][calls[0].index("-dev") : calls[0].index("-dev") + 2] == ["-dev", "none"]  # the CPU reference
    assert "--kl-divergence" in calls[1] and "-dev" not in calls[1]  # the device llama-bench used
    if case == "pass":
        assert proc.returncode == 0, proc.stderr
        assert "0.00570 (passed)" in row["mean KLD vs CPU"] and "96.4 %" in row["same top token"]
        assert "3/3 (passed)" in row["known answers"] and "6/6 (passed)" in row["known answers"]
        assert "24.7912" in row["CPU perplexity"]
    else:
        assert proc.returncode == 11
        error = next(line for line in proc.stderr.splitlines() if line.startswith("error: "))
        assert error.startswith(
            "error: the numbers of linux-vulkan are wrong: cross_backend: wrong numbers against the "
            "CPU: mean KLD 0.26000 > 0.017"
        )
        assert "Traceback" not in proc.stderr and "hint: logs: " in proc.stderr
        assert "0.26000 (failed)" in row["mean KLD vs CPU"] and "0/6 (failed)" in row["known answers"]


def test_numerics_in_json(tmp_path, model):
    cpu, _ = make_bundle(tmp_path, "linux-cpu")
    _with_numerics(cpu, tmp_path, {"numerics": "pass"})
    from rockbuild.smoke.config import load_smoke_config
    from rockbuild.smoke.numerics import parse_numerics_config

    checks = parse_numerics_config(load_smoke_config()["numerics"])
    comparison = run_compare([cpu], model, CompareOptions(repetitions=1), logs=tmp_path / "logs", numerics=checks)
    (bundle,) = comparison.to_dict()["bundles"]
    summary = bundle["numerics"]["summary"]
    # the CPU build: no GPU device, so the GPU half is not checked; a model without known answers: not checked
    assert summary["cross_backend"] == "not checked" and summary["known_answers"] == "not checked"
    assert summary["cpu_ppl"] == 24.7912
    assert not (tmp_path / "logs" / "1-linux-cpu.numerics" / "cpu.kld").exists()
    comparison.raise_if_wrong()  # not checked is not wrong
