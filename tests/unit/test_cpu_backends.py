"""CPU code for the user's CPU (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS): the ``load_backend`` lines read from a log,
the smoke test's verdict on the CPU variant ggml picked, and ``rockbuild doctor --bundle``'s check of it.

The programs are stand-ins (tests/support/cpu_variants.py) that choose a variant among the bundle's
``libggml-cpu-*.so`` as ggml does and die of a real SIGILL where the lent H200 host's llama-bench did."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import jsonschema
import pytest
from support.cpu_variants import make_variant_bundle
from support.paths import REPO
from support.smoke import gguf_header, make_bundle

from rockbuild.core.records import SmokeRecord
from rockbuild.smoke.models import ModelFile
from rockbuild.smoke.parse import (
    BackendLoads,
    cpu_backend_problem,
    cpu_variant_files,
    cpu_variant_of,
    is_backend_file,
    parse_backend_loads,
)
from rockbuild.smoke.runner import SmokeOptions, run_smoke

# the lines llama.cpp prints (ggml-backend-reg.cpp: "%s: loaded %s backend from %s"), with and without a log prefix
LOG = """\
load_backend: loaded RPC backend from /opt/llama/libggml-rpc.so
0.00.012.345 I load_backend: loaded ROCm backend from /opt/llama/libggml-hip.so
load_backend: loaded CPU backend from /opt/llama/libggml-cpu-zen4.so
build: 11312 (0c1e570) with cc (GCC) 13.2.0 for x86_64-linux-gnu
load_backend: loaded CPU backend from /opt/llama/libggml-cpu-zen4.so
"""


# -- parsing -----------------------------------------------------------------------------------------------------------


def test_the_loaded_backends_are_read_from_the_log():
    loads = parse_backend_loads(LOG)
    assert [(b.name, b.file) for b in loads.loaded] == [("RPC", "libggml-rpc.so"), ("ROCm", "libggml-hip.so"),
                                                         ("CPU", "libggml-cpu-zen4.so")]
    assert loads.cpu_file == "libggml-cpu-zen4.so" and loads.cpu_variant == "zen4"
    assert loads.gpu is not None and loads.gpu.name == "ROCm"
    assert [b.name for b in loads.others] == ["RPC"]
    assert loads.to_dict() == {"cpu": "libggml-cpu-zen4.so", "cpu_variant": "zen4", "gpu": "ROCm",
                               "gpu_file": "libggml-hip.so", "others": ["RPC"]}


def test_a_windows_path_a_plain_cpu_module_and_a_log_without_modules():
    windows = parse_backend_loads(r"load_backend: loaded Vulkan backend from C:\llama\ggml-vulkan.dll" "\r\n"
                                  r"load_backend: loaded CPU backend from C:\llama\ggml-cpu-haswell.dll" "\r\n")
    assert windows.cpu_file == "ggml-cpu-haswell.dll" and windows.cpu_variant == "haswell"
    assert windows.gpu is not None and windows.gpu.file == "ggml-vulkan.dll"
    plain = parse_backend_loads("load_backend: loaded CPU backend from /b/libggml-cpu.so\n")
    assert plain.cpu_file == "libggml-cpu.so" and plain.cpu_variant is None
    linked = parse_backend_loads("build: 11312 (0c1e570)\nllama_model_loader: loaded meta data\n")
    assert linked == BackendLoads() and linked.to_dict()["cpu"] is None


def test_which_files_are_cpu_variants_and_which_ggml_would_load():
    names = ["libggml-cpu-zen4.so", "libggml-cpu-x64.so", "libggml-cpu.so", "libggml-base.so", "libggml-hip.so",
             "libggml-cpu-zen4.so.bak", "ggml-cpu-alderlake.dll", "llama-bench"]
    assert cpu_variant_files(names) == ("ggml-cpu-alderlake.dll", "libggml-cpu-x64.so", "libggml-cpu-zen4.so")
    assert cpu_variant_of("libggml-cpu-sapphirerapids.so") == "sapphirerapids"
    assert cpu_variant_of("libggml-cpu.so") is None and cpu_variant_of("libggml-base.so") is None
    assert [n for n in names if is_backend_file(n)] == ["libggml-cpu-zen4.so", "libggml-cpu-x64.so", "libggml-cpu.so",
                                                          "libggml-hip.so", "ggml-cpu-alderlake.dll"]
    assert not is_backend_file("libggml-base.so") and not is_backend_file("libggml.so")


def test_the_cpu_backend_verdicts():
    zen4 = parse_backend_loads(LOG)
    shipped = ("libggml-cpu-x64.so", "libggml-cpu-zen4.so")
    assert cpu_backend_problem(zen4, 0, shipped, "llama-bench") is None
    for code in (-signal.SIGILL, 128 + signal.SIGILL):
        assert cpu_backend_problem(zen4, code, shipped, "llama-bench") == (
            "the CPU variant libggml-cpu-zen4.so picked on this machine died of SIGILL on a real batch: remove it "
            "from the bundle folder (the next best variant then loads)")
    assert cpu_backend_problem(BackendLoads(), -4, (), "llama-bench") == (
        "llama-bench died of SIGILL, an instruction this CPU cannot run")
    assert cpu_backend_problem(BackendLoads(), 1, shipped, "llama-bench") == (
        "the bundle ships 2 CPU variant modules (libggml-cpu-x64.so, ...) but the llama-bench log shows no CPU "
        "backend loaded: none scored on this CPU, or none could be loaded")
    gpu_only = parse_backend_loads("load_backend: loaded ROCm backend from /b/libggml-hip.so\n")
    assert cpu_backend_problem(gpu_only, 0, (), "llama-cli") == (
        "the llama-cli log shows backend modules loaded (ROCm) but no CPU backend")
    assert cpu_backend_problem(BackendLoads(), 0, (), "llama-cli") is None  # linked in: nothing to say
    assert cpu_backend_problem(BackendLoads(), None, shipped, "llama-cli") is None  # a timeout says it already


def test_the_stand_in_dies_of_a_real_sigill(tmp_path):
    bundle = make_variant_bundle(tmp_path / "b", ("x64", "haswell", "sapphirerapids"), crashes=("sapphirerapids",))
    small = subprocess.run([str(bundle / "llama-bench"), "-m", "m.gguf", "-p", "8", "-n", "4"], capture_output=True,
                           text=True, timeout=30)
    assert small.returncode == 0 and "libggml-cpu-sapphirerapids.so" in small.stderr
    real = subprocess.run([str(bundle / "llama-bench"), "-m", "m.gguf", "-p", "512"], capture_output=True, text=True,
                          timeout=30)
    assert real.returncode == -signal.SIGILL
    shell = subprocess.run(["sh", "-c", f"'{bundle / 'llama-bench'}' -p 512; echo $?"], capture_output=True,
                           text=True, timeout=30)
    assert shell.stdout.strip() == "132"  # what a shell reports for it


# -- the smoke test ----------------------------------------------------------------------------------------------------


@pytest.fixture
def model(tmp_path) -> ModelFile:
    path = tmp_path / "model.gguf"
    path.write_bytes(gguf_header() + bytes(40))
    return ModelFile("model.gguf", path, "0" * 64, 64, "path")


FAST = SmokeOptions(timeouts={"cli": 20, "server_start": 20, "request": 20, "bench": 20})


def variant_job(tmp_path: Path, variants=("x64", "haswell", "zen4"), **behaviour) -> Path:
    """The smoke's job folder whose bundle ships CPU variants and whose llama-cli and llama-bench pick one."""
    job, _ = make_bundle(tmp_path)
    make_variant_bundle(job / "bundle", variants, **behaviour)
    return job


def test_the_smoke_records_the_variant_and_gpu_backend_loaded(tmp_path, model):
    job = variant_job(tmp_path, supported=("x64", "haswell"), gpu={"ROCm": "libggml-hip.so"})
    (job / "bundle" / "libggml-hip.so").write_bytes(b"")
    report = run_smoke(job, model, FAST, kfd_topology=tmp_path / "no-kfd", quiet=True)
    assert report.ok, report.failures
    data = json.loads((job / "smoke.json").read_text())
    schema = json.loads((REPO / "docs" / "schemas" / "smoke.schema.json").read_text())
    assert not [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(data)]
    record = SmokeRecord.read(job / "smoke.json")
    assert record is not None and record.backends is not None and record.backends.cpu_variant == "haswell"
    assert record.runs["bench"].backends is not None and record.runs["bench"].backends.gpu == "ROCm"
    assert data["backends"] == {"cpu": "libggml-cpu-haswell.so", "cpu_variant": "haswell", "gpu": "ROCm",
                                "gpu_file": "libggml-hip.so", "others": [],
                                "shipped": ["libggml-cpu-haswell.so", "libggml-cpu-x64.so", "libggml-cpu-zen4.so"]}
    assert data["runs"]["bench"]["backends"]["cpu_variant"] == "haswell"
    assert data["runs"]["cli"]["backends"]["cpu"] == "libggml-cpu-haswell.so"
    argv = data["runs"]["bench"]["command"]
    assert int(argv[argv.index("-p") + 1]) >= 512  # a real batch
    assert "backends loaded: CPU libggml-cpu-haswell.so, GPU ROCm (libggml-hip.so) (of 3 CPU variants shipped)" \
        in report.render()


def test_the_default_smoke_bench_is_a_real_batch():
    from rockbuild.smoke.config import load_smoke_config

    assert SmokeOptions.from_config(load_smoke_config()).bench_prompt >= 512
    assert SmokeOptions().bench_prompt >= 512


def test_a_variant_that_dies_of_sigill_fails_the_smoke_naming_the_file_and_the_fix(tmp_path, model):
    job = variant_job(tmp_path, ("x64", "haswell", "sapphirerapids"), crashes=("sapphirerapids",))
    report = run_smoke(job, model, FAST, kfd_topology=tmp_path / "no-kfd", quiet=True)
    assert not report.ok
    assert report.failures == (
        "bench: the CPU variant libggml-cpu-sapphirerapids.so picked on this machine died of SIGILL on a real batch: "
        "remove it from the bundle folder (the next best variant then loads)",)
    data = json.loads((job / "smoke.json").read_text())
    assert data["runs"]["bench"]["returncode"] == -signal.SIGILL
    assert data["backends"]["cpu_variant"] == "sapphirerapids"  # the bench run's, although it died
    assert data["runs"]["cli"]["ok"] is True  # llama-cli's 8-word prompt is no real batch


def test_variants_shipped_but_none_loaded_fails_the_smoke(tmp_path, model):
    job = variant_job(tmp_path, ("haswell", "zen4"), supported=("x64",))  # this "CPU" scores neither
    report = run_smoke(job, model, FAST, kfd_topology=tmp_path / "no-kfd", quiet=True)
    assert [f.split(":")[0] for f in report.failures] == ["cli", "bench"]
    assert report.failures[1] == (
        "bench: the bundle ships 2 CPU variant modules (libggml-cpu-haswell.so, ...) but the llama-bench log shows no "
        "CPU backend loaded: none scored on this CPU, or none could be loaded")


def test_a_bundle_without_modules_is_judged_as_before(tmp_path, model):
    job, _ = make_bundle(tmp_path)  # the stand-ins print no load_backend line: a linked-in CPU backend
    report = run_smoke(job, model, FAST, kfd_topology=tmp_path / "no-kfd", quiet=True)
    assert report.ok, report.failures
    data = json.loads((job / "smoke.json").read_text())
    assert data["backends"] == {"cpu": None, "cpu_variant": None, "gpu": None, "gpu_file": None, "others": [],
                                "shipped": []}
