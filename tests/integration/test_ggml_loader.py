"""What rockbuild assumes of ggml's backend loader, checked against ggml's own code (ggml-backend-reg.cpp from the
llama.cpp source in the cache, tests/support/ggml_loader.py): it loads the highest-scoring ``libggml-cpu-*.so`` and
logs the line rockbuild reads, a module in the current folder competes with the bundle's, a subfolder is never
searched (so ``doctor --fix-cpu``'s ``disabled-cpu-variants/`` turns a variant off), and a variant that executes an
instruction this CPU lacks ends the program with a real SIGILL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from support.ggml_loader import build_loader, build_module
from support.smoke import gguf_header

from rockbuild.core.vocabulary import ModelFile
from rockbuild.doctor import check_cpu_variants, check_cwd_backends
from rockbuild.smoke.parse import cpu_backend_problem, cpu_variant_files, parse_backend_loads
from rockbuild.smoke.variants import VariantRuns, run_cpu_variants

# (score, t/s, trap): scores as ggml's x86 scoring orders them; sapphirerapids "cannot run" here
MODULES = {
    "x64": (1, 5.0, False),
    "zen4": (3071, 230.0, False),
    "sapphirerapids": (4095, 900.0, True),
    "icelake": (0, 1.0, False),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ggml")
    build_loader(folder / "llama-bench")
    for variant, (score, speed, trap) in MODULES.items():
        build_module(folder / f"libggml-cpu-{variant}.so", score=score, speed=speed, trap=trap)
    build_module(folder / "other-sapphirerapids.so", score=4095, speed=900.0)
    return folder


def bundle_of(built: Path, dest: Path, variants) -> Path:
    dest.mkdir(parents=True)
    shutil.copy2(built / "llama-bench", dest / "llama-bench")
    for variant in variants:
        shutil.copy2(built / f"libggml-cpu-{variant}.so", dest / f"libggml-cpu-{variant}.so")
    return dest


def run(exe: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=cwd, timeout=60, env={})


@pytest.fixture
def gguf(tmp_path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(gguf_header() + bytes(40))
    return path


def test_ggml_loads_the_best_scoring_variant_and_logs_the_line_rockbuild_reads(tmp_path, built):
    bundle = bundle_of(built, tmp_path / "b", ("x64", "zen4", "icelake"))
    got = run(bundle / "llama-bench", "-p", "512", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stderr == f"load_backend: loaded CPU backend from {bundle}/libggml-cpu-zen4.so\n"
    loads = parse_backend_loads(got.stderr)
    assert loads.cpu_variant == "zen4"
    assert cpu_backend_problem(loads, got.returncode, cpu_variant_files(os.listdir(bundle)), "llama-bench") is None


def test_a_variant_this_cpu_cannot_run_dies_of_a_real_sigill_on_a_real_batch_only(tmp_path, built):
    bundle = bundle_of(built, tmp_path / "b", ("x64", "zen4", "sapphirerapids"))
    assert run(bundle / "llama-bench", "-p", "8", cwd=tmp_path).returncode == 0
    got = run(bundle / "llama-bench", "-p", "512", cwd=tmp_path)
    assert got.returncode == -signal.SIGILL
    assert cpu_backend_problem(parse_backend_loads(got.stderr), got.returncode, (), "llama-bench") == (
        "the CPU variant libggml-cpu-sapphirerapids.so picked on this machine died of SIGILL on a real batch: "
        "remove it from the bundle folder (the next best variant then loads)"
    )


def test_doctor_fix_cpu_with_ggml_own_loader(tmp_path, built, gguf):
    bundle = bundle_of(built, tmp_path / "b", ("x64", "zen4", "sapphirerapids"))
    findings, info = check_cpu_variants(bundle, model=gguf, env={}, fix=True)
    assert [f.severity for f in findings] == ["warning", "ok"], findings
    assert findings[1].message == (
        "the bundle's programs load libggml-cpu-zen4.so on this CPU (of 2 CPU variants "
        "shipped) and it ran a 512-token batch, 230.0 t/s"
    )
    assert (bundle / "disabled-cpu-variants" / "libggml-cpu-sapphirerapids.so").is_file()
    # ggml does not search the subfolder: the variant stays off for every program
    got = run(bundle / "llama-bench", "-p", "512", cwd=tmp_path)
    assert got.returncode == 0 and parse_backend_loads(got.stderr).cpu_variant == "zen4"


def test_a_module_in_the_current_folder_competes_with_the_bundles(tmp_path, built):
    bundle = bundle_of(built, tmp_path / "b", ("x64", "zen4"))
    here = tmp_path / "here"
    here.mkdir()
    shutil.copy2(built / "other-sapphirerapids.so", here / "libggml-cpu-sapphirerapids.so")
    got = run(bundle / "llama-bench", "-p", "512", cwd=here)
    assert parse_backend_loads(got.stderr).cpu_file == "libggml-cpu-sapphirerapids.so"
    assert got.stderr.endswith(f"from {here}/libggml-cpu-sapphirerapids.so\n")  # not the bundle's: the folder's
    (warning,) = check_cwd_backends(bundle, here)
    assert "libggml-cpu-sapphirerapids.so" in warning.message
    assert run(bundle / "llama-bench", "-p", "512", cwd=tmp_path).stderr.endswith("libggml-cpu-zen4.so\n")


def test_no_variant_that_scores_means_no_cpu_backend(tmp_path, built):
    bundle = bundle_of(built, tmp_path / "b", ("icelake",))
    got = run(bundle / "llama-bench", "-p", "512", cwd=tmp_path)
    assert got.returncode == 1 and "load_backend" not in got.stderr
    assert cpu_backend_problem(
        parse_backend_loads(got.stderr), got.returncode, ("libggml-cpu-icelake.so",), "llama-bench"
    ).startswith("the bundle ships a CPU variant module (libggml-cpu-icelake.so) but")


def test_the_smokes_cpu_variants_step_with_ggmls_own_loader(tmp_path, built, gguf):
    # ggml's scorer picks sapphirerapids (it dies of a real SIGILL), scores icelake 0 here, and runs x64 and zen4
    bundle = bundle_of(built, tmp_path / "b", ("x64", "zen4", "sapphirerapids", "icelake"))
    step = run_cpu_variants(
        bundle,
        model=ModelFile(gguf.name, gguf, "", 0, "path"),
        runs=VariantRuns(),
        platform="linux",
        env={},
        logs=tmp_path / "logs",
    )
    assert step.failures == ("CPU variant sapphirerapids: llama-bench died of SIGILL (illegal instruction) on pp512",)
    assert step.picked == "sapphirerapids"
    assert {v.variant: (v.runnable, v.result, v.pp512_tps) for v in step.variants} == {
        "icelake": (False, "not runnable here", None),
        "sapphirerapids": (True, "failed", None),
        "x64": (True, "passed", 5.0),
        "zen4": (True, "passed", 230.0),
    }
    assert not list(tmp_path.glob(".cpu-variants-*"))
