"""The smoke runner against real child processes: small Python programs that behave like llama-cli, llama-server
(a real HTTP server with /health and /v1/chat/completions) and llama-bench, printing output captured from llama.cpp.

The real binaries are exercised by tests/e2e/test_smoke_e2e.py (marked e2e)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import rockbuild_exe
from support.smoke import fast_smoke, gguf_header, header_model, make_bundle

from rockbuild.backends import REGISTRY
from rockbuild.backends.rocm import decide_expectation, kfd_gfx_targets
from rockbuild.core.errors import ModelError, SmokeError
from rockbuild.smoke.models import ModelFile
from rockbuild.smoke.probe import smoke_env
from rockbuild.smoke.runner import SmokeOptions, locate_bundle, run_smoke


@pytest.fixture
def model(tmp_path) -> ModelFile:
    return header_model(tmp_path)


FAST = fast_smoke()


def test_a_cpu_bundle_passes_and_reports_everything(tmp_path, model):
    job, envlog = make_bundle(tmp_path)
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": "/opt/rocm/lib",
        "ROCM_PATH": "/opt/rocm",
        "GITHUB_TOKEN": "ghp_secret",
        "HF_TOKEN": "hf_secret",
        "PATH": "/opt/rocm/bin:" + os.environ["PATH"] + ":/x/therock/bin",
    }
    report = run_smoke(job, model, FAST, env=env, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    assert report.ok, report.failures
    assert report.report_path == job / "smoke.json"
    data = json.loads((job / "smoke.json").read_text())
    assert data["ok"] is True and data["job_id"] == "linux-gfx1151"
    assert data["model"]["name"] == "model.gguf" and data["model"]["sha256"] == "0" * 64
    assert data["gpu"]["summary"] == "gpu: absent (CPU run proves library loading only)"
    assert data["expect_gpu"]["reason"] == "auto: no ROCm device found"
    assert data["runs"]["cli"]["tokens"] == 16 and data["runs"]["cli"]["tokens_per_second"] == 1489.0
    assert data["runs"]["server"]["tokens"] == 16 and data["runs"]["server"]["text"].startswith(" Needle")
    assert [b["test"] for b in data["bench"]] == ["pp64", "tg16"]
    assert all(r["seconds"] > 0 and r["command"] for r in data["runs"].values())
    assert (
        "PATH entry /opt/rocm/bin" in data["environment_removed"] and "LD_LIBRARY_PATH" in data["environment_removed"]
    )
    # what the children really got
    for name in ("llama-cli", "llama-server", "llama-bench"):
        child = json.loads((envlog / f"{name}.env.json").read_text())
        assert "LD_LIBRARY_PATH" not in child and "ROCM_PATH" not in child
        assert "GITHUB_TOKEN" not in child and "HF_TOKEN" not in child
        assert "rocm" not in child["PATH"].lower() and "therock" not in child["PATH"].lower()
        argv = json.loads((envlog / f"{name}.argv.json").read_text())
        assert argv[argv.index("-t") + 1] == "1" and argv[argv.index("-m") + 1] == str(model.path)
    cli_argv = json.loads((envlog / "llama-cli.argv.json").read_text())
    assert "-st" in cli_argv and cli_argv[cli_argv.index("-n") + 1] == "16" and "--temp" in cli_argv
    request = json.loads((envlog / "request.json").read_text())
    assert request["temperature"] == 0 and request["max_tokens"] == 16
    # the server was stopped by its PID
    pid = int((envlog / "server.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert data["runs"]["server"]["stop_returncode"] == 0


def test_a_hang_fails_that_run_only_with_its_log_tail(tmp_path, model):
    job, _ = make_bundle(tmp_path, {"cli": "hang"})
    options = SmokeOptions(timeouts={"cli": 1.5, "server_start": 20, "request": 20, "bench": 20})
    start = time.monotonic()
    report = run_smoke(job, model, options, kfd_topology=tmp_path, backends=REGISTRY)
    assert time.monotonic() - start < 15
    assert not report.ok
    runs = {r.name: r for r in report.runs}
    assert not runs["cli"].ok and runs["cli"].failure == "timed out after 2s"
    assert "Loading model..." in runs["cli"].log_tail
    assert runs["server"].ok and runs["bench"].ok
    assert report.failures == ("cli: timed out after 2s",)


def test_expected_gpu_on_a_cpu_run_is_a_silent_fallback(tmp_path, model):
    job, _ = make_bundle(tmp_path)
    report = run_smoke(
        job, model, SmokeOptions(**{**FAST.__dict__, "expect_gpu": "yes"}), kfd_topology=tmp_path, backends=REGISTRY
    )
    assert not report.ok and all(r.ok for r in report.runs)
    assert "silent CPU fallback" in report.failures[0]


def test_rocm0_buffers_pass_an_expected_gpu_run(tmp_path, model):
    job, _ = make_bundle(tmp_path, {"gpu": True})
    report = run_smoke(
        job, model, SmokeOptions(**{**FAST.__dict__, "expect_gpu": "yes"}), kfd_topology=tmp_path, backends=REGISTRY
    )
    assert report.ok, report.failures
    assert report.record.gpu.placement == "gpu" and report.record.gpu.summary.startswith("gpu: ROCm")


def test_server_that_dies_and_a_bench_without_json(tmp_path, model):
    job, _ = make_bundle(tmp_path, {"server": "die", "bench": "garbage"})
    report = run_smoke(job, model, FAST, kfd_topology=tmp_path, backends=REGISTRY)
    runs = {r.name: r for r in report.runs}
    assert runs["cli"].ok
    assert runs["server"].failure == "exit code 3 before /health answered"
    assert "error: cannot open model" in runs["server"].log_tail
    assert runs["bench"].failure == "no JSON results in the output"


def test_a_request_that_never_answers_times_out_and_the_server_is_stopped(tmp_path, model):
    job, envlog = make_bundle(tmp_path, {"server": "slow"})
    options = SmokeOptions(timeouts={"cli": 20, "server_start": 20, "request": 1, "bench": 20}, runs=("server",))
    report = run_smoke(job, model, options, kfd_topology=tmp_path, backends=REGISTRY)
    assert report.runs[0].failure == "/v1/chat/completions did not answer within 1s"
    with pytest.raises(ProcessLookupError):
        os.kill(int((envlog / "server.pid").read_text()), 0)


def test_empty_generation_fails_the_cli_run(tmp_path, model):
    job, _ = make_bundle(tmp_path, {"cli": "empty"})
    report = run_smoke(
        job, model, SmokeOptions(**{**FAST.__dict__, "runs": ("cli",)}), kfd_topology=tmp_path, backends=REGISTRY
    )
    assert report.runs[0].failure == "the generated text is empty"


def test_kfd_topology_and_auto_expectation(tmp_path):
    for i, version in enumerate(["0", "110501", "90010"]):
        node = tmp_path / str(i)
        node.mkdir()
        simd = 0 if version == "0" else 80  # a CPU node has no SIMDs
        (node / "properties").write_text(
            f"cpu_cores_count 0\ngfx_target_version {version}\nsimd_count {simd}\nvendor_id 4098\n"
        )
    (tmp_path / "3").mkdir()  # a node with a version but no SIMDs is no GPU: smoke and doctor agree (rockbuild.gpu)
    (tmp_path / "3" / "properties").write_text("gfx_target_version 110000\nsimd_count 0\n")
    assert kfd_gfx_targets(tmp_path) == ["gfx1151", "gfx90a"]
    assert decide_expectation("auto", ["gfx1151"], ["gfx1151"])[0] is True
    expect, why = decide_expectation("auto", ["gfx1100", "gfx1101"], ["gfx1151"])
    assert expect is False and "none is a target" in why
    assert (
        decide_expectation("yes", [], [])[0] is True and decide_expectation("no", ["gfx1151"], ["gfx1151"])[0] is False
    )


def test_locating_the_bundle_from_the_job_folder_or_the_bundle(tmp_path):
    job, _ = make_bundle(tmp_path)
    assert locate_bundle(job) == (job / "bundle", job)
    assert locate_bundle(job / "bundle") == (job / "bundle", job)


def test_env_keeps_the_allowlist_only():
    env, removed = smoke_env(
        {
            "PATH": "/usr/bin:/opt/rocm-7.2/bin",
            "HOME": "/root",
            "HIP_PATH": "/opt/rocm",
            "SOME_API_KEY": "x",
            "LD_PRELOAD": "/lib/x.so",
        }
    )
    assert env == {"PATH": "/usr/bin", "HOME": "/root"}
    assert set(removed) == {"HIP_PATH", "LD_PRELOAD", "PATH entry /opt/rocm-7.2/bin"}


def test_env_lets_device_selection_through():
    """lavapipe is used only with GGML_VK_VISIBLE_DEVICES; HIP_VISIBLE_DEVICES skips an iGPU listed first; a Windows
    Vulkan bundle under wine reaches lavapipe through wine's X11 driver, which needs DISPLAY (issue 29)."""
    env, removed = smoke_env(
        {
            "PATH": "/usr/bin",
            "GGML_VK_VISIBLE_DEVICES": "0",
            "HIP_VISIBLE_DEVICES": "1",
            "ROCM_PATH": "/opt/rocm",
            "DISPLAY": ":99",
        }
    )
    assert env == {"PATH": "/usr/bin", "GGML_VK_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "1", "DISPLAY": ":99"}
    assert removed == ["ROCM_PATH"]


def test_cli_exits_non_zero_and_writes_smoke_json(tmp_path, model):
    job, _ = make_bundle(tmp_path, {"bench": "garbage"})
    proc = subprocess.run(
        [rockbuild_exe(), "smoke", str(job), "--model", str(model.path), "--expect-gpu", "no"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 11, proc.stderr
    assert "error: smoke test of" in proc.stderr and "bench: no JSON results in the output" in proc.stderr
    assert "[FAIL] bench" in proc.stdout and "[ok] cli" in proc.stdout
    assert json.loads((job / "smoke.json").read_text())["ok"] is False


def test_cli_json_on_success(tmp_path, model):
    job, _ = make_bundle(tmp_path)
    proc = subprocess.run(
        [rockbuild_exe(), "smoke", str(job / "bundle"), "--model", str(model.path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] and data["model"]["source"] == "path"


def test_a_windows_bundle_is_refused_on_linux_without_wine(tmp_path, model, monkeypatch):
    job, _ = make_bundle(tmp_path)
    (job / "bundle" / "bundle.json").write_text(json.dumps({"platform": "windows", "targets": ["gfx1151"]}))
    monkeypatch.setenv("PATH", str(tmp_path / "no-wine-here"))
    monkeypatch.setattr("rockbuild.process.WINE_FALLBACK", tmp_path / "no-wine")
    with pytest.raises(
        SmokeError,
        match=r"windows bundle and this machine runs linux; smoke-test it on windows "
        r"\(or install wine here: apt install wine64\)",
    ):
        run_smoke(job, model, FAST, backends=REGISTRY)
    # with wine, the platform is no reason to stop: the bundle's own programs are looked for (.exe, under wine)
    fake = tmp_path / "bin" / "wine"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    with pytest.raises(SmokeError, match="has no llama-cli, llama-server, llama-bench"):
        run_smoke(job, model, FAST, backends=REGISTRY)


def test_a_bundle_of_an_os_rockbuild_does_not_build_is_refused_in_one_line(tmp_path, model):
    job, _ = make_bundle(tmp_path)
    (job / "bundle" / "bundle.json").write_text(json.dumps({"platform": "macos", "targets": ["gfx1151"]}))
    with pytest.raises(SmokeError, match=r"is a macos bundle; rockbuild smoke-tests linux and windows bundles$"):
        run_smoke(job, model, FAST, backends=REGISTRY)


# --- Vulkan bundles: ask the bundle which devices it sees, pin one when a GPU run is expected ------------------------


def _argv(envlog: Path, name: str) -> list[str]:
    return json.loads((envlog / f"{name}.argv.json").read_text())


def test_vulkan_bundle_on_lavapipe_auto_expects_the_gpu_pins_vulkan0_and_passes(tmp_path, model):
    job, envlog = make_bundle(tmp_path, {"vk": "lavapipe"})
    report = run_smoke(job, model, FAST, kfd_topology=tmp_path, backends=REGISTRY)
    assert report.ok, report.failures
    assert report.record.expect_gpu.devices_found == ("Vulkan0: llvmpipe (LLVM 22.1.8, 256 bits)",)
    assert report.record.expect_gpu.reason.startswith("auto: the bundle sees a Vulkan device (Vulkan0: llvmpipe")
    assert report.record.device == "Vulkan0" and report.record.gpu.placement == "gpu"
    for name in ("llama-cli", "llama-server", "llama-bench"):
        argv = _argv(envlog, name)
        assert argv[argv.index("-dev") + 1] == "Vulkan0", name
    data = json.loads((job / "smoke.json").read_text())
    assert data["device"] == "Vulkan0" and data["preflight"] is None
    assert data["expect_gpu"]["devices_found"] == ["Vulkan0: llvmpipe (LLVM 22.1.8, 256 bits)"]


def test_vulkan_bundle_without_a_driver_auto_runs_on_the_cpu_unpinned(tmp_path, model):
    job, envlog = make_bundle(tmp_path, {"vk": "none"})
    report = run_smoke(job, model, FAST, kfd_topology=tmp_path, backends=REGISTRY)
    assert report.ok, report.failures
    assert report.record.device is None and report.record.expect_gpu.devices_found == ()
    assert (
        "sees no Vulkan device" in report.record.expect_gpu.reason
        and "GGML_VK_VISIBLE_DEVICES" in report.record.expect_gpu.reason
    )
    assert "-dev" not in _argv(envlog, "llama-cli")


def test_vulkan_bundle_without_a_driver_fails_an_expected_gpu_run_in_one_line_without_running(tmp_path, model):
    job, envlog = make_bundle(tmp_path, {"vk": "none"})
    proc = subprocess.run(
        [rockbuild_exe(), "smoke", str(job), "--model", str(model.path), "--expect-gpu", "yes"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 11, proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "no Vulkan device visible to the bundle" in error[0], proc.stderr
    assert "GGML_VK_VISIBLE_DEVICES=0" in error[0] and "Traceback" not in proc.stderr
    assert not (envlog / "llama-server.argv.json").exists()  # nothing to learn from runs that cannot use a device
    # the driver files pinned to a path that does not exist: the line says so
    pinned = subprocess.run(
        [rockbuild_exe(), "smoke", str(job), "--model", str(model.path), "--expect-gpu", "yes"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "VK_ICD_FILENAMES": "/nowhere/icd.json", "GGML_VK_VISIBLE_DEVICES": "0"},
    )
    assert pinned.returncode == 11
    assert "VK_ICD_FILENAMES=/nowhere/icd.json limits the Vulkan loader to those driver files" in pinned.stderr
    data = json.loads((job / "smoke.json").read_text())
    assert data["ok"] is False and data["runs"] == {} and data["preflight"].startswith("no Vulkan device")


def test_vulkan_bundle_without_the_loader_names_the_missing_library(tmp_path, model):
    job, _ = make_bundle(tmp_path, {"vk": "noloader"})
    report = run_smoke(
        job, model, SmokeOptions(**{**FAST.__dict__, "expect_gpu": "yes"}), kfd_topology=tmp_path, backends=REGISTRY
    )
    assert not report.ok and report.runs == ()
    assert "libvulkan.so.1: cannot open shared object file" in report.failures[0]
    assert "exit code 127" in report.failures[0] and "Vulkan loader" in report.failures[0]
    assert report.failures[0].startswith("the Vulkan bundle cannot start: llama-cli --list-devices failed")
    # expected on the CPU or not: a bundle that cannot start is not run three times to fail three times
    auto = run_smoke(job, model, FAST, kfd_topology=tmp_path, backends=REGISTRY)
    assert not auto.ok and auto.runs == () and auto.failures[0] == report.failures[0]


def test_an_explicit_device_is_passed_to_every_run(tmp_path, model):
    job, envlog = make_bundle(tmp_path, {"vk": "lavapipe"})
    report = run_smoke(
        job, model, SmokeOptions(**{**FAST.__dict__, "device": "Vulkan1"}), kfd_topology=tmp_path, backends=REGISTRY
    )
    assert not report.ok and report.record.device == "Vulkan1"
    assert report.failures[0] == "cli: exit code 1"
    assert "invalid device: Vulkan1" in "\n".join(report.runs[0].log_tail)


def test_expect_gpu_no_on_a_vulkan_bundle_does_not_pin(tmp_path, model):
    job, envlog = make_bundle(tmp_path, {"vk": "lavapipe"})
    report = run_smoke(
        job, model, SmokeOptions(**{**FAST.__dict__, "expect_gpu": "no"}), kfd_topology=tmp_path, backends=REGISTRY
    )
    assert report.record.device is None and "-dev" not in _argv(envlog, "llama-bench")
    assert report.record.expect_gpu.reason == "--expect-gpu no"


# --- a corrupt model, and what the step lines say -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"<!DOCTYPE html><html>Sign in</html>", "is not a GGUF file (starts with b'<!DOCTYP')"),
        (gguf_header()[:12], "is truncated: 12 bytes, shorter than the 24-byte GGUF header"),
        (
            gguf_header(tensors=291, kv=30) + bytes(100),
            "is truncated: 124 bytes cannot hold the 30 metadata keys and 291 tensors its GGUF header declares",
        ),
        (gguf_header(version=1) + bytes(40), "is GGUF version 1; llama.cpp reads versions 2 and 3"),
    ],
)
def test_a_corrupt_model_fails_in_one_line_before_any_program_runs(tmp_path, content, says):
    job, envlog = make_bundle(tmp_path)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    proc = subprocess.run(
        [rockbuild_exe(), "smoke", str(job), "--model", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 11, proc.stderr
    assert proc.stderr.splitlines() == [f"error: {bad} {says}"]
    assert list(envlog.iterdir()) == []  # not even llama-cli --list-devices
    assert not (job / "smoke-logs").exists() and not (job / "smoke.json").exists()


def test_run_smoke_checks_the_model_first(tmp_path):
    job, envlog = make_bundle(tmp_path, {"vk": "lavapipe"})  # would run llama-cli --list-devices first
    vocab_only = tmp_path / "ggml-vocab-qwen2.gguf"
    vocab_only.write_bytes(gguf_header(tensors=0, kv=1) + bytes(40))
    with pytest.raises(ModelError, match=r"holds no tensors \(a vocab-only GGUF\?\)"):
        run_smoke(job, ModelFile(vocab_only.name, vocab_only, "0" * 64, 64, "path"), FAST, backends=REGISTRY)
    assert list(envlog.iterdir()) == []


def test_a_failed_run_says_failed_on_its_step_line(tmp_path, model, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    job, _ = make_bundle(tmp_path, {"cli": "crash"})
    report = run_smoke(
        job,
        model,
        SmokeOptions(**{**FAST.__dict__, "runs": ("cli", "bench")}),
        kfd_topology=tmp_path,
        backends=REGISTRY,
    )
    assert [r.ok for r in report.runs] == [False, True]
    err = capsys.readouterr().err
    steps = [line.strip() for line in err.splitlines() if line.startswith("    smoke: ")]
    assert len(steps) == 2, err
    assert steps[0].startswith("smoke: llama-cli: failed in ") and steps[0].endswith("s")
    assert steps[1].startswith("smoke: llama-bench: done in ")
    assert "warning: llama-cli: exit code 1; last lines of" in err


def test_the_gpu_preset_gives_llama_bench_its_own_threads_capped_at_the_cpus(tmp_path, model):
    from rockbuild.settings import Settings

    config = Settings.from_environment({}).smoke
    gpu = SmokeOptions.from_config(config, bench_preset="gpu")
    assert (gpu.bench_prompt, gpu.bench_gen, gpu.bench_repetitions, gpu.bench_threads, gpu.threads) == (
        512,
        128,
        5,
        8,
        1,
    )
    assert SmokeOptions.from_config(config).bench_threads is None  # the CPU smoke keeps one thread everywhere
    job, envlog = make_bundle(tmp_path)
    options = SmokeOptions(timeouts=FAST.timeouts, bench_threads=4096)
    report = run_smoke(job, model, options, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    assert report.ok, report.failures
    bench = json.loads((envlog / "llama-bench.argv.json").read_text())
    cli = json.loads((envlog / "llama-cli.argv.json").read_text())
    assert bench[bench.index("-t") + 1] == str(os.cpu_count()) and cli[cli.index("-t") + 1] == "1"


def _program(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(0o755)


def test_every_shipped_program_is_run_with_its_check(tmp_path, model):
    from rockbuild.core.programs import Program

    job, _ = make_bundle(tmp_path)
    bundle = job / "bundle"
    _program(bundle, "llama-quantize", 'echo "usage: $0 [--help]"; exit 1')  # its --help exits 1, as upstream's
    _program(bundle, "llama-tokenize", 'echo "usage"; exit 0')
    _program(bundle, "llama-gguf", 'echo "no usage here"; exit 255')
    _program(bundle, "llama-tts", "kill -ILL $$")
    programs = (
        Program("llama-quantize", check=("--help",), exit_code=1, expect="usage: .*llama-quantize"),
        Program("llama-tokenize"),
        Program("llama-gguf", check=(), exit_code=255, expect="usage: "),
        Program("llama-tts"),
        Program("llama-embedding"),  # optional, not in this bundle
    )
    from dataclasses import replace

    report = run_smoke(
        job, model, replace(FAST, programs=programs), kfd_topology=tmp_path / "no-kfd", backends=REGISTRY
    )
    run = next(r for r in report.runs if r.name == "programs")
    assert not report.ok and not run.ok
    assert run.failure == ("2 of 4 programs failed: llama-gguf: its output does not match 'usage: ' (and 1 more)")
    by_name = {p["program"]: p for p in run.to_dict()["programs"]}
    assert by_name["llama-quantize"]["status"] == "ok" and by_name["llama-tokenize"]["status"] == "ok"
    assert by_name["llama-tts"]["failure"] == "killed by SIGILL (exit code -4) (expected exit code 0)"
    assert run.to_dict()["absent"] == ["llama-embedding"]
    data = json.loads((job / "smoke.json").read_text())
    assert data["runs"]["programs"]["checked"] == 4 and not data["ok"]
    # a required program missing from the bundle fails the run
    (bundle / "ggml-rpc-server").unlink()
    report = run_smoke(
        job,
        model,
        replace(FAST, programs=(Program("ggml-rpc-server", required=True),)),
        kfd_topology=tmp_path / "no-kfd",
        backends=REGISTRY,
    )
    assert report.failures == ("programs: 1 of 1 programs failed: ggml-rpc-server is not in the bundle",)


def test_a_known_failure_passes_only_in_its_kind_of_bundle_and_only_as_described(tmp_path, model):
    """programs.yaml's known_failures: a mingw build may hang at exit (issue 29). In a bundle shipping
    libwinpthread-1.dll a hang after the program printed its output is listed as known, under its own shorter
    timeout; a hang before any output, a different failure there, or the same hang in any other bundle still fails; a
    check that passes says the failure did not happen this time."""
    from dataclasses import replace

    from rockbuild.core.programs import KnownFailure, Program

    job, _ = make_bundle(tmp_path)
    bundle = job / "bundle"
    _program(bundle, "llama-hangs", "echo 'version: 1'; sleep 30")
    known = KnownFailure(
        ships=("libwinpthread-1.dll",), failure="timed out", reason="a winpthreads build hangs at exit", timeout=0.5
    )
    programs = (Program("llama-hangs", check=("--version",), known_failures=(known,)),)
    options = replace(FAST, programs=programs, program_timeout=1.0)

    def programs_run():
        report = run_smoke(job, model, options, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
        return report, next(r for r in report.runs if r.name == "programs")

    report, run = programs_run()  # no winpthreads here: the hang is a failure like any other
    assert not run.ok and run.failure == "1 of 1 programs failed: llama-hangs --version: timed out after 1s"
    (bundle / "LIBWINPTHREAD-1.DLL").write_bytes(b"MZ")  # Windows names compare case-insensitively
    report, run = programs_run()
    assert report.ok and run.ok, report.failures
    item = run.to_dict()["programs"][0]
    assert (item["status"], item["failure"], item["known_reason"]) == (
        "known",
        "timed out after 0s",
        "a winpthreads build hangs at exit",
    )
    assert 0.4 < item["seconds"] < 5 and run.to_dict()["known"] == ["llama-hangs"]
    data = json.loads((job / "smoke.json").read_text())
    assert data["ok"] and data["runs"]["programs"]["known"] == ["llama-hangs"]
    _program(bundle, "llama-hangs", "sleep 30")  # hangs before printing anything: not the hang at exit
    report, run = programs_run()
    assert run.failure == "1 of 1 programs failed: llama-hangs --version: timed out after 0s"
    _program(bundle, "llama-hangs", "exit 3")  # another failure in the same bundle is not the known one
    report, run = programs_run()
    assert run.failure == "1 of 1 programs failed: llama-hangs --version: exit code 3 (expected exit code 0)"
    _program(bundle, "llama-hangs", "echo fixed")  # it exited this time: passes, and says so
    report, run = programs_run()
    assert run.ok and run.to_dict()["programs"][0]["status"] == "ok"
    assert "did not happen this time" in run.to_dict()["programs"][0]["note"]


def test_the_gpu_bench_warms_up_and_records_its_spread(tmp_path, model):
    """Issue 26, item 5: the same llama-bench command once with -r 1 (discarded), then the measured run; each figure
    carries its spread in per cent, and smoke.yaml's gpu preset asks for one warm-up run."""
    from rockbuild.settings import Settings

    assert SmokeOptions.from_config(Settings.from_environment({}).smoke, bench_preset="gpu").bench_warmup == 1
    assert SmokeOptions.from_config(Settings.from_environment({}).smoke).bench_warmup == 0
    job, envlog = make_bundle(tmp_path)
    options = SmokeOptions(timeouts=FAST.timeouts, runs=("bench",), bench_repetitions=5, bench_warmup=1)
    report = run_smoke(job, model, options, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    assert report.ok, report.failures
    calls = [json.loads(line) for line in (envlog / "llama-bench.calls").read_text().splitlines()]
    assert [c[c.index("-r") + 1] for c in calls] == ["1", "5"]
    assert calls[0][: calls[0].index("-r")] == calls[1][: calls[1].index("-r")]  # the same command otherwise
    assert [p.name for p in tmp_path.rglob("llama-bench-warmup*.log")] == ["llama-bench-warmup1.log"]
    for b in report.record.bench:
        assert b.warmup == 1 and b.spread_pct == round(100 * b.stddev / b.tokens_per_second, 2)
        assert b.to_dict()["spread_pct"] == b.spread_pct


def test_a_crash_in_the_warm_up_run_fails_the_bench(tmp_path, model):
    job, _ = make_bundle(tmp_path, {"bench": "crash"})
    options = SmokeOptions(timeouts=FAST.timeouts, runs=("bench",), bench_warmup=1)
    report = run_smoke(job, model, options, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    (run,) = report.runs
    assert not run.ok and run.failure == "warm-up run: killed by SIGSEGV (exit code -11)"
