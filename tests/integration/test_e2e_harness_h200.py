"""The GPU lane's proof as Python (tests/e2e/harness/h200.py, issue 58): what its steps do with no root, no GPU and no
build, on folders made here: the mutants' list, SmolLM2 split across the device's calls, the bundle unpacked into a
job folder, a mutant's library swapped into a copy, smoke.yaml's op mode, a report's summary, the device's own
reference kept across calls, and the one-line errors of a step run where it cannot run."""

from __future__ import annotations

import io
import json
import lzma
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from e2e.harness import h200
from support.files import write
from support.git import git
from support.paths import REPO

from rockbuild.core.data import data_path

MiB = 1024 * 1024


def test_every_mutant_names_a_series_and_the_library_it_replaces(monkeypatch):
    monkeypatch.delenv("H200_MUTANTS", raising=False)
    every = h200.mutants()
    assert [m.name for m in every][-2:] == ["e-rope-past-2048", "f-kv-rows-past-2048"]
    assert {m.target for m in every} == {"llama", "ggml-vulkan"}
    assert all((REPO / "tests" / "e2e" / "mutants" / f"{m.name}.yaml").is_file() for m in every)
    monkeypatch.setenv("H200_MUTANTS", "e-rope-past-2048:libggml-vulkan.so")
    assert h200.mutants() == [h200.Mutant("e-rope-past-2048", "libggml-vulkan.so")]
    for wrong in ("e-rope-past-2048", "z-nothing:libggml-vulkan.so"):
        with pytest.raises(h200.Failed, match="is not NAME:LIBRARY of a series in tests/e2e/mutants/"):
            h200.mutants(wrong)


def test_the_model_is_split_so_that_each_call_stays_under_the_limit():
    # this session's figures: SmolLM2 98,362,432 bytes, the next call's bundle, debs, wheels and op test 17 MiB
    tree = 4 * MiB
    split = h200.plan_split(98_362_432, carried=17 * MiB, tree_bytes=tree)
    assert split.first + split.second == 98_362_432
    assert split.second + 17 * MiB + tree == h200.CALL_LIMIT and split.first + tree <= h200.CALL_LIMIT
    # a small model rides whole with the next call
    assert h200.plan_split(1000, carried=17 * MiB, tree_bytes=tree) == h200.Split(0, 1000)
    # the CPU calls' extras (6.5 MB) beside these did not fit two calls (what `prepare` died of): they travel alone
    with pytest.raises(h200.Failed, match=r"the model needs three calls \(104653888 bytes; the next call carries"):
        h200.plan_split(98_362_432 + 6_291_456, carried=17 * MiB, tree_bytes=tree)


def test_the_parts_put_together_are_the_model_and_a_stale_part_is_refused(tmp_path):
    model = write(tmp_path / "m.gguf", "GGUF" + "x" * 1000)
    split = h200.plan_split(model.stat().st_size, carried=0, tree_bytes=h200.CALL_LIMIT - 600)
    parts = tmp_path / "p1", tmp_path / "p2", tmp_path / "sha256"
    h200.write_parts(model, split, *parts)
    assert parts[0].stat().st_size == 404 and parts[1].stat().st_size == 600
    h200.join_parts(*parts, tmp_path / "joined" / "m.gguf")
    assert (tmp_path / "joined" / "m.gguf").read_bytes() == model.read_bytes()
    parts[1].write_bytes(b"y" * 600)
    with pytest.raises(h200.Failed, match="put together has sha256 .* a part is stale"):
        h200.join_parts(*parts, tmp_path / "again.gguf")
    assert not (tmp_path / "again.gguf").exists()


def _bundle_tar(path: Path, files: dict[str, bytes], compress: str) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            t.addfile(info, io.BytesIO(data))
    if compress == "xz":
        path.write_bytes(lzma.compress(raw.getvalue()))
    else:
        import zstandard

        path.write_bytes(zstandard.ZstdCompressor().compress(raw.getvalue()))
    return path


@pytest.mark.parametrize("compress", ["xz", "zst"])
def test_the_carried_bundle_becomes_a_job_folder(tmp_path, compress):
    carried = tmp_path / "carried"
    carried.mkdir()
    files = {"bundle/bundle.json": b"{}", "bundle/libggml-vulkan.so": b"clean", "bundle/llama-cli": b"#!"}
    _bundle_tar(carried / f"bundle.tar.{compress}", files, compress)
    job = tmp_path / "job"
    write(job / "bundle" / "stale.so", "from an earlier call")
    bundle = h200.unpack_bundle(carried, job)
    assert sorted(p.name for p in bundle.iterdir()) == ["bundle.json", "libggml-vulkan.so", "llama-cli"]
    # a mutant's library swapped into a copy: the clean job stays as it was
    mutant = write(tmp_path / "e.libggml-vulkan.so.xz", "")
    mutant.write_bytes(lzma.compress(b"mutant"))
    copy = h200.swap_library(job, mutant, "libggml-vulkan.so", tmp_path / "mut-e")
    assert (copy / "bundle" / "libggml-vulkan.so").read_bytes() == b"mutant"
    assert (job / "bundle" / "libggml-vulkan.so").read_bytes() == b"clean"
    assert os.access(copy / "bundle" / "libggml-vulkan.so", os.X_OK)
    with pytest.raises(h200.Failed, match="bundle has no libllama.so.0 to replace"):
        h200.swap_library(job, mutant, "libllama.so.0", tmp_path / "mut-b")


def test_a_missing_or_wrong_bundle_is_one_line(tmp_path):
    with pytest.raises(h200.Failed, match="no bundle.tar.xz or bundle.tar.zst in .*: run prepare"):
        h200.unpack_bundle(tmp_path, tmp_path / "job")
    _bundle_tar(tmp_path / "bundle.tar.xz", {"bundle/llama-cli": b"#!"}, "xz")
    with pytest.raises(h200.Failed, match="has no bundle.json: the carried tarball is not a bundle"):
        h200.unpack_bundle(tmp_path, tmp_path / "job")


def test_the_op_mode_switches_in_the_shipped_smoke_yaml(tmp_path):
    smoke = write(tmp_path / "smoke.yaml", data_path("config", "smoke.yaml").read_text())
    h200.set_ops_mode(smoke, "subset")
    assert "\n  mode: {gpu: subset, software: subset}" in smoke.read_text()
    h200.set_ops_mode(smoke, "full")
    assert smoke.read_text() == data_path("config", "smoke.yaml").read_text()
    write(smoke, "ops:\n  mode: full\n")
    with pytest.raises(h200.Failed, match="no single '  mode: {gpu: ..., software: subset}' line"):
        h200.set_ops_mode(smoke, "subset")


def test_a_report_is_summed_up_with_its_windows(tmp_path):
    windows = [{"from": 2048, "mean_kld": 0.0, "same_top": 100.0}, {"from": 2560, "mean_kld": 0.0123, "same_top": 97.5}]
    report = write(
        tmp_path / "e.json",
        json.dumps(
            {
                "ok": False,
                "numerics": {
                    "long_device": {
                        "result": "failed",
                        "detail": "from position 2560",
                        "figures": {"windows": windows},
                    },
                    "long_cross_backend": {"result": "passed", "detail": "mean KLD 0.00462"},
                },
                "ops": {"result": "failed", "detail": "2 of 218 cases failed on Vulkan0"},
            }
        ),
    )
    text = h200.summary(report)
    assert text.splitlines()[0] == "e.json: ok=False"
    assert "  long_device: failed: from position 2560" in text
    assert "    windows: 2048: 0.000000/100.0%, 2560: 0.012300/97.5%" in text
    assert "  ops: failed: 2 of 218 cases failed on Vulkan0" in text
    assert h200.summary(tmp_path / "none.json").startswith("none.json: no report (")


def test_the_pristine_variant_is_built_by_the_builds_own_cmake_command(tmp_path):
    build = write(
        tmp_path / "build.json",
        json.dumps(
            {
                "cmake_command": ["cmake", "-G", "Ninja", "-S", "/patched", "-B", "/out/build", "-DGGML_VULKAN=ON"],
                "environment": {"CC": "gcc", "CXX": "g++", "PATH": "/usr/bin", "GITHUB_TOKEN": "never"},
            }
        ),
    )
    cmd = h200.pristine_command(build, Path("/pristine"), Path("/pristine-build"))
    assert cmd == ["env", "CC=gcc", "CXX=g++", "PATH=/usr/bin", "cmake", "-G", "Ninja", "-S", "/pristine"] + [
        "-B",
        "/pristine-build",
        "-DGGML_VULKAN=ON",
    ]


def test_the_devices_own_reference_outlives_the_checkout_of_one_call(tmp_path):
    config = tmp_path / "config"
    write(config / "baselines.yaml", "references: [device]\n")
    write(config / "references" / "m-NVIDIA-H200.topk", "top-k")
    kept = tmp_path / "var" / "device-ref"
    assert not h200.restore_device_reference(kept, config)
    h200.keep_device_reference(config, kept)
    fresh = tmp_path / "fresh"
    write(fresh / "baselines.yaml", "references: []\n")
    assert h200.restore_device_reference(kept, fresh)
    assert (fresh / "baselines.yaml").read_text() == "references: [device]\n"
    assert (fresh / "references" / "m-NVIDIA-H200.topk").read_text() == "top-k"


def test_the_working_tree_counts_its_tracked_files(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    write(repo / "a.txt", "x" * 100)
    write(repo / "sub" / "b.txt", "y" * 23)
    write(repo / "untracked.bin", "z" * 5000)
    git("add", "a.txt", "sub/b.txt", cwd=repo)
    assert h200.tree_bytes(repo) == 123


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["long"], {}, "run me through the device tool ($OUT is not set)"),
        (["mutants", "z-nothing"], {"OUT": "/tmp"}, "mutants NAME...: one or more of a-q4_1-dequant"),
        (["mutants", "e-rope-past-2048"], {"OUT": "/tmp", "H200_MUTANTS": "broken"}, "is not NAME:LIBRARY"),
    ],
)
def test_a_step_that_cannot_run_here_says_why_in_one_line(tmp_path, argv, env, message):
    clean = {k: v for k, v in os.environ.items() if k not in ("OUT", "H200_MUTANTS")}
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "e2e" / "harness" / "h200.py"), *argv],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error: " in lines[0] and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr
