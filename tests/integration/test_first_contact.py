"""What a new user meets, round two (issue 57, findings 5 and 6), through the installed `rockbuild` as users run it:
the tiny model's vocabulary from a llama.cpp tree a build cached, a smoke (or compare) of a folder that is no bundle
refused before any download, `install --target` checked before any request, `build --dry-run`, `--version`'s commit,
and the exit codes docs/errors.md gives for a bad --inputs file. Local HTTP servers stand for the network and count
the requests; trees, bundles and caches are made here."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest
from support.llama import make_project
from support.paths import REPO
from support.trees import therock_tree

import rockbuild
from rockbuild import __version__
from rockbuild.archive import MARKER_NAME
from rockbuild.core.errors import UsageError
from rockbuild.install import check_target
from rockbuild.llamacpp.source import clone_dir_for
from rockbuild.settings import Settings

A = "0123456789abcdef0123456789abcdef01234567"
URL = "file:///nowhere/llama.cpp"  # never reachable: a fetch would fail the command
TARBALL = "therock-dist-linux-gfx1151-7.10.0a20251201.tar.gz"
DEAD_PROXY = {
    name: "http://127.0.0.1:9"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
}
PROGRAMS = ("llama-cli", "llama-server", "llama-bench")


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def gguf_header(tensors: int = 0, kv: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, kv)


def stand_in_bundle(folder: Path) -> Path:
    """A folder with the three programs a smoke starts (they are never started in these tests)."""
    folder.mkdir(parents=True)
    for name in PROGRAMS:
        (folder / name).write_text("#!/bin/sh\nexit 1\n")
        (folder / name).chmod(0o755)
    return folder


# --- 6. a folder that is no bundle: refused before the model is downloaded ----------------------------------------


@pytest.mark.parametrize("model", ["default", "url"])
def test_smoke_of_an_empty_folder_fails_before_any_download(run_rockbuild, httpserver, tmp_path, model):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = ["--model", httpserver.url_for("/m.gguf")] if model == "url" else []
    env = {"ROCKBUILD_CACHE": str(tmp_path / "cache"), "HF_ENDPOINT": httpserver.url_for("/").rstrip("/")}
    result = run_rockbuild("smoke", str(empty), *args, env=env)
    assert result.returncode == 11, result.stderr
    assert result.stderr.splitlines() == [
        f"error: {empty} is empty; is it a llama.cpp bundle?",
        "hint: pass the bundle folder rockbuild build or rockbuild bundle made (out/<job-id>/bundle), or its job folder",
    ]
    assert httpserver.log == [] and not (tmp_path / "cache" / "models").exists()


def test_smoke_and_compare_of_a_folder_without_the_programs_download_nothing(run_rockbuild, httpserver, tmp_path):
    folder = tmp_path / "half"
    folder.mkdir()
    (folder / "llama-cli").write_text("")
    env = {"ROCKBUILD_CACHE": str(tmp_path / "cache")}
    smoke = run_rockbuild("smoke", str(folder), "--model", httpserver.url_for("/m.gguf"), env=env)
    assert smoke.returncode == 11
    assert (
        smoke.stderr.splitlines()[0] == f"error: {folder} has no llama-server, llama-bench; is it a llama.cpp bundle?"
    )
    compare = run_rockbuild("compare", str(folder), "--model", httpserver.url_for("/m.gguf"), env=env)
    assert compare.returncode == 2
    assert compare.stderr.splitlines() == [
        f"error: {folder} has no llama-bench; pass bundle folders made by rockbuild bundle"
    ]
    assert httpserver.log == [] and "Traceback" not in smoke.stderr + compare.stderr


# --- 5. --model tiny takes its vocabulary from a llama.cpp tree `rockbuild build` cached ----------------------------


def test_tiny_takes_the_vocab_of_the_cached_llama_cpp_tree(run_rockbuild, tmp_path):
    pytest.importorskip("gguf")  # the extra `tiny` (the test extra has it)
    bundle = stand_in_bundle(tmp_path / "bundle")
    cache = tmp_path / "cache"
    tree = make_project(clone_dir_for("https://github.com/ggml-org/llama.cpp", "linux-gfx1151", cache))
    vocab = tree / "models" / "ggml-vocab-qwen2.gguf"
    vocab.parent.mkdir()
    vocab.write_bytes(gguf_header())  # a GGUF without a tokenizer: the generator says so, naming the file it took
    result = run_rockbuild("smoke", str(bundle), "--model", "tiny", env={"ROCKBUILD_CACHE": str(cache)})
    assert result.returncode == 11, result.stderr
    assert f"generating the tiny model from {vocab}" in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"error: {vocab} is not a GPT-2-style BPE vocab with merges (expected ggml-vocab-qwen2.gguf)"
    )


def test_tiny_without_any_vocab_says_in_one_line_how_to_get_one(run_rockbuild, tmp_path):
    bundle = stand_in_bundle(tmp_path / "bundle")
    cache = tmp_path / "cache"
    # smoke.yaml's tiny.vocab names the e2e roots' source, which a provisioned machine has: point it nowhere
    shipped = (REPO / "config" / "smoke.yaml").read_text(encoding="utf-8")
    smoke = tmp_path / "smoke.yaml"
    smoke.write_text(shipped.replace("/var/cache/rockbuild/src/", f"{tmp_path}/no-src/"), encoding="utf-8")
    env = {"ROCKBUILD_CACHE": str(cache), "ROCKBUILD_SMOKE_CONFIG": str(smoke)}
    result = run_rockbuild("smoke", str(bundle), "--model", "tiny", env=env)
    assert result.returncode == 11, result.stderr
    error, hint = result.stderr.splitlines()
    assert error.startswith(
        f"error: --model tiny needs llama.cpp's models/ggml-vocab-qwen2.gguf: no llama.cpp tree in "
        f"{cache} (rockbuild build keeps one there) nor at smoke.yaml's tiny.vocab ("
    )
    assert hint.startswith("hint: pass --vocab FILE, e.g. after curl -fLO https://raw.githubusercontent.com/")
    assert hint.endswith("or run rockbuild build once (its llama.cpp checkout has the file)")


# --- 6. install --target is checked before any request --------------------------------------------------------------


def test_install_of_an_unknown_target_is_refused_before_going_online(run_rockbuild, httpserver, tmp_path):
    args = ["install", "--api-url", httpserver.url_for("/").rstrip("/"), "--dest", str(tmp_path / "d"), "--target"]
    typo = run_rockbuild(*args, "gfx9999")
    assert typo.returncode == 2, typo.stderr
    assert typo.stderr.splitlines()[0] == (
        "error: --target 'gfx9999' is not a GPU target rockbuild builds for (did you mean gfx950, gfx942, gfx90c?)"
    )
    assert typo.stderr.splitlines()[1].startswith("hint: rockbuild doctor names this machine's GPUs")
    family = run_rockbuild(*args, "gfx110X")
    assert family.stderr.splitlines() == [
        "error: --target gfx110X is a GPU family; give one of its targets: gfx1100, gfx1101, gfx1102, gfx1103"
    ]
    assert httpserver.log == []


def test_check_target_takes_every_target_with_a_build():
    table = Settings.from_environment({}).families
    assert check_target("gfx1151", table) == "gfx1151" and check_target(" GFX1036 ", table) == "gfx1036"
    with pytest.raises(UsageError, match="did you mean gfx1151"):
        check_target("gfx1115", table)


# --- 6. build --dry-run ---------------------------------------------------------------------------------------------


def test_dry_run_with_nothing_cached_says_what_only_the_build_can_know(run_rockbuild, tmp_path):
    before = files_under(tmp_path)
    result = run_rockbuild(
        "build",
        "--target",
        "gfx1151",
        "--dry-run",
        "--json",
        env={"ROCKBUILD_CACHE": str(tmp_path / "cache"), **DEAD_PROXY},
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["job"]["id"] == "linux-gfx1151" and plan["builds"] == "gfx1151"
    assert plan["source"]["ref"] == "master" and plan["source"]["commit"] is None
    assert "fetched (depth 1) at build time" in plan["source"]["how"]
    assert plan["rocm"]["version"] == "latest" and plan["rocm"]["tarball"] is None and plan["rocm"]["cached"] is False
    assert plan["rocm"]["how"] == "resolved at build time (the index is read then)"
    definitions = plan["cmake_definitions"]
    assert definitions["GPU_TARGETS"] == "gfx1151" and definitions["GGML_HIP"] == "ON"
    assert definitions["CMAKE_C_COMPILER"] == "<ROCm root>/lib/llvm/bin/clang"
    assert set(plan["at_build_time"]) == {
        "LLAMA_BUILD_NUMBER",
        "LLAMA_BUILD_COMMIT",
        "CMAKE_C_COMPILER",
        "CMAKE_CXX_COMPILER",
        "CMAKE_HIP_COMPILER",
    }
    assert plan["build_dir"] == str(tmp_path / "out" / "linux-gfx1151" / "build")
    assert plan["bundle_dir"] == str(tmp_path / "out" / "linux-gfx1151" / "bundle")
    assert files_under(tmp_path) == before  # no cache, no out/, no clone, no download

    text = run_rockbuild(
        "build",
        "--target",
        "gfx1151",
        "--dry-run",
        "--no-bundle",
        env={"ROCKBUILD_CACHE": str(tmp_path / "cache"), **DEAD_PROXY},
    )
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "linux-gfx1151 (gfx1151): the build it would run; nothing is fetched, cloned or compiled"
    assert (
        "  ROCm:       the newest TheRock nightly tarball of gfx1151 (linux): resolved at build time (the index is "
        "read then)" in lines
    )
    assert "                -DGPU_TARGETS=gfx1151" in lines and not any("bundle:" in line for line in lines)
    assert files_under(tmp_path) == before


def test_dry_run_with_the_checkout_and_the_rocm_root_cached_knows_every_value(run_rockbuild, tmp_path):
    cache = tmp_path / "cache"
    checkout = make_project(clone_dir_for(URL, "linux-gfx1151", cache))
    cmakelists = checkout / "CMakeLists.txt"  # a tree that no longer reads one of the seed flags
    cmakelists.write_text(cmakelists.read_text().replace("GGML_HIP_ROCWMMA_FATTN", ""))
    (checkout / ".git").mkdir()
    (checkout / ".git" / "rockbuild-source.json").write_text(
        json.dumps(
            {
                "url": URL,
                "ref": "b7000",
                "kind": "tag",
                "commit": A,
                "build_number": "b7000",
                "build_number_source": "tag b7000",
            }
        )
    )
    root = therock_tree(cache / "rocm" / TARBALL.removesuffix(".tar.gz"))
    (root / MARKER_NAME).write_text(
        json.dumps({"name": TARBALL, "url": "https://example.invalid/" + TARBALL, "sha256": "0" * 64, "size": 1})
    )
    before = files_under(tmp_path)
    result = run_rockbuild(
        "build",
        "--target",
        "gfx1151",
        "--ref",
        "b7000",
        "--git-url",
        URL,
        "--rocm-version",
        "7.10.0a20251201",
        "--dry-run",
        "--json",
        env={"ROCKBUILD_CACHE": str(cache), **DEAD_PROXY},
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["source"] == {
        "origin": "clone",
        "path": str(checkout),
        "ref": "b7000",
        "url": URL,
        "commit": A,
        "build_number": "b7000",
        "how": "the tag checked out in the cache already: no fetch",
    }
    assert plan["rocm"]["tarball"] == TARBALL and plan["rocm"]["root"] == str(root) and plan["rocm"]["cached"] is True
    definitions = plan["cmake_definitions"]
    assert definitions["CMAKE_C_COMPILER"] == f"{root}/lib/llvm/bin/clang"
    assert (definitions["LLAMA_BUILD_NUMBER"], definitions["LLAMA_BUILD_COMMIT"]) == ("7000", A[:7])
    assert plan["at_build_time"] == []
    # checked against the tree's CMake files, as the configure step does: a flag the tree does not read is dropped
    assert "GGML_HIP_ROCWMMA_FATTN" not in definitions and definitions["GGML_HIP"] == "ON"
    (dropped,) = [n for n in plan["notes"] if n.startswith("not passed (this tree no longer defines them): ")]
    assert "GGML_HIP_ROCWMMA_FATTN" in dropped.split(": ", 1)[1].split(", ")
    assert plan["cmake_command"][:7] == ["cmake", "-S", str(checkout), "-B", plan["build_dir"], "-G", "Ninja"]
    assert files_under(tmp_path) == before


def test_dry_run_of_the_nights_inputs_names_its_commit_and_tarball(run_rockbuild, tmp_path):
    from rockbuild.core.records import InputsJob, InputsLlama, InputsRocm
    from rockbuild.pipeline.inputs import inputs_record

    job = Settings.from_environment({}).job(job_id="linux-gfx1151")
    rocm = InputsRocm(
        key="linux-gfx1151-nightly-latest",
        os="linux",
        groups=("gfx1151",),
        channel="nightly",
        requested="latest",
        name=TARBALL,
        url="https://example.invalid/" + TARBALL,
        version="7.10.0a20251201",
    )
    inputs = inputs_record(
        InputsLlama(ref="master", commit=A, build_number="b7000", url=URL),
        {rocm.key: rocm},
        (InputsJob.of(job, rocm.key),),
        resolved_at="2026-12-01T00:00:00+00:00",
    )
    inputs.write(tmp_path / "inputs.json")
    cache = tmp_path / "cache"
    result = run_rockbuild(
        "build",
        "--job",
        "linux-gfx1151",
        "--inputs",
        str(tmp_path / "inputs.json"),
        "--dry-run",
        "--json",
        env={"ROCKBUILD_CACHE": str(cache), **DEAD_PROXY},
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert (plan["source"]["commit"], plan["source"]["url"], plan["source"]["build_number"]) == (A, URL, "b7000")
    assert plan["rocm"] == {
        "version": "7.10.0a20251201",
        "channel": "nightly",
        "groups": ["gfx1151"],
        "tarball": TARBALL,
        "url": "https://example.invalid/" + TARBALL,
        "root": str(cache / "rocm" / "therock-linux-gfx1151"),
        "cached": False,
        "how": "pinned by inputs.json",
    }
    assert (plan["cmake_definitions"]["LLAMA_BUILD_NUMBER"], plan["cmake_definitions"]["LLAMA_BUILD_COMMIT"]) == (
        "7000",
        A[:7],
    )
    assert set(plan["at_build_time"]) == {"CMAKE_C_COMPILER", "CMAKE_CXX_COMPILER", "CMAKE_HIP_COMPILER"}
    assert not cache.exists()


def test_dry_run_refuses_what_the_build_refuses(run_rockbuild, tmp_path):
    env = {"ROCKBUILD_CACHE": str(tmp_path / "cache")}
    other_os = run_rockbuild("build", "--job", "windows-gfx1151", "--dry-run", env=env)
    assert other_os.returncode == 2
    assert other_os.stderr.splitlines() == [
        "error: job windows-gfx1151 builds for windows; run it on a windows machine "
        "(or cross-build it: --cross mingw-w64)"
    ]
    both = run_rockbuild(
        "build", "--target", "gfx1151", "--rocm", str(tmp_path), "--rocm-version", "latest", "--dry-run", env=env
    )
    assert both.returncode == 2 and both.stderr.splitlines() == ["error: give --rocm DIR or --rocm-version V, not both"]
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


# --- 6. --version names the checkout's commit -----------------------------------------------------------------------


def test_version_names_the_commit_of_the_checkout(run_rockbuild, tmp_path):
    result = run_rockbuild("--version")
    assert result.returncode == 0
    top = Path(rockbuild.__file__).resolve().parent.parent
    if top != REPO.resolve() or not (top / ".git").exists():
        assert result.stdout == f"rockbuild {__version__}\n"  # an installed wheel: no checkout to name
        return
    head = subprocess.run(
        ["git", "-C", str(top), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert result.stdout == f"rockbuild {__version__} (commit {head[:12]} of the checkout {top})\n"
    short = run_rockbuild("-V")
    assert short.stdout == result.stdout


# --- 6. docs/errors.md: what a bad --inputs file exits with ---------------------------------------------------------


def test_a_bad_inputs_file_exits_as_errors_md_says(run_rockbuild, tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    for args in (("nightly", "--job", "linux-gfx1151"), ("nightly", "--release"), ("build", "--target", "gfx1151")):
        result = run_rockbuild(*args, "--inputs", str(empty))
        assert result.returncode == 2, (args, result.stderr)  # no inputs file at all: a bad command line
        assert result.stderr.startswith(f"error: --inputs {empty} cannot be read as JSON: ")
    from rockbuild.pipeline.inputs import SCHEMA

    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps({"tool": "rockbuild", "schema": SCHEMA, "llama_cpp": 5, "rocm": {}, "jobs": []}))
    result = run_rockbuild("nightly", "--job", "linux-gfx1151", "--inputs", str(damaged))
    assert result.returncode == 13 and result.stderr.startswith(f"error: {damaged}: llama_cpp must be an object")
