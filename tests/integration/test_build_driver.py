"""The build driver end to end on a small real CMake project, compiled by the host's gcc/g++ through a TheRock-shaped
ROCm tree whose lib/llvm/bin/clang{,++} exec gcc/g++ (so the real code path runs: layout -> toolchain -> cmake ->
ninja -> build.json). The project records the -D values and the environment it saw, at configure and at build time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.files import write
from support.llama import make_project, read_seen
from support.options import context, resolve_job
from support.trees import THEROCK_COMMIT, gcc_therock, write_tree

from rockbuild.backends import REGISTRY
from rockbuild.core.errors import BuildError, ConfigError, UsageError
from rockbuild.core.records import Tarball
from rockbuild.llamacpp.driver import (
    BuildFailed,
    BuildOptions,
    CcacheCounts,
    NinjaProgress,
    build_job,
    ccache_report,
    parse_ccache_stats,
)

pytestmark = pytest.mark.skipif(
    not (shutil.which("cmake") and shutil.which("ninja") and shutil.which("gcc") and shutil.which("g++")),
    reason="needs cmake, ninja, gcc and g++ on the host",
)

TOKENS = {"GITHUB_TOKEN": "ghp_driver_secret", "GH_TOKEN": "gh_driver_secret", "HF_TOKEN": "hf_driver_secret"}


def matrix_file(path: Path, cmake: dict[str, str]) -> Path:
    return write(
        path,
        f"""
        options:
          cmake: {json.dumps(cmake)}
        matrix:
          os: [linux]
          target: [gfx110X, gfx1151]
    """,
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("build-driver")
    # ccache takes a compiler named clang for clang and adds -fcolor-diagnostics, which gcc (behind it here) refuses
    write(base / "ccache" / "ccache.conf", "compiler_type = gcc\n")
    return {
        "base": base,
        "rocm": write_tree(base / "therock", gcc_therock()),
        "project": make_project(base / "llama.cpp", op_test=True),
        "ccache": base / "ccache",
    }


@pytest.fixture(scope="module")
def first_build(world):
    """One real build of the family job (4 targets) with matrix extras, tokens in our environment, ccache."""
    matrix = matrix_file(
        world["base"] / "matrix.yaml",
        {"MY_EXTRA": "from-matrix", "GGML_HIP_ROCWMMA_FATTN": "ON", "GGML_HIP_TYPO": "ON"},
    )
    job = resolve_job(family="gfx110X", config=matrix)
    options = BuildOptions(
        context=context(),
        out_dir=world["base"] / "out",
        rocm_dir=world["rocm"],
        source_dir=world["project"],
        build_number="11312",
        commit="0c1e570",
        ccache_dir=world["ccache"],
        cache=world["base"] / "cache",
        jobs=2,
    )
    saved = {k: os.environ.get(k) for k in TOKENS}
    os.environ.update(TOKENS)
    try:
        result = build_job(job, options, backends=REGISTRY)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return job, options, result


def test_flags_and_environment_reach_cmake(first_build, world):
    job, _options, result = first_build
    seen = read_seen(result.build_dir)
    assert seen["GPU_TARGETS"] == "gfx1100;gfx1101;gfx1102;gfx1103" == ";".join(job.targets)
    llvm_bin = world["rocm"] / "lib" / "llvm" / "bin"
    assert seen["CMAKE_C_COMPILER"] == str(llvm_bin / "clang")
    assert seen["CMAKE_CXX_COMPILER"] == seen["CMAKE_HIP_COMPILER"] == str(llvm_bin / "clang++")
    assert (seen["GGML_HIP"], seen["BUILD_SHARED_LIBS"], seen["GGML_NATIVE"], seen["GGML_RPC"]) == ("ON",) * 2 + (
        "OFF",
        "ON",
    )
    assert (seen["GGML_OPENMP"], seen["LLAMA_USE_PREBUILT_UI"], seen["LLAMA_BUILD_TESTS"]) == ("OFF", "OFF", "ON")
    assert (seen["LLAMA_BUILD_BORINGSSL"], seen["CMAKE_BUILD_TYPE"]) == ("ON", "Release")
    # the matrix's extras reach CMake and win over the built-in flags
    assert (seen["MY_EXTRA"], seen["GGML_HIP_ROCWMMA_FATTN"]) == ("from-matrix", "ON")
    assert (seen["LLAMA_BUILD_NUMBER"], seen["LLAMA_BUILD_COMMIT"]) == ("11312", "0c1e570")
    # environment from the layout: a TheRock tree's prefix, and its bitcode (outside clang's resource dir)
    assert seen["ENV:ROCM_PATH"] == seen["ENV:HIP_PATH"] == str(world["rocm"])
    assert seen["ENV:HIP_PLATFORM"] == "amd"
    assert seen["ENV:HIP_DEVICE_LIB_PATH"] == str(world["rocm"] / "lib" / "llvm" / "amdgcn" / "bitcode")
    assert seen["ENV:PATH"].split(":")[:2] == [str(llvm_bin), str(world["rocm"] / "bin")]


def test_tokens_never_reach_cmake_or_ninja(first_build):
    _job, _options, result = first_build
    seen = read_seen(result.build_dir)
    assert seen["ENV:GITHUB_TOKEN"] == seen["ENV:GH_TOKEN"] == seen["ENV:HF_TOKEN"] == ""
    at_build = (result.build_dir / "env-at-build.txt").read_text(encoding="utf-8")
    assert "HIP_PLATFORM=amd" in at_build  # the file really is the build-time environment
    for name, value in TOKENS.items():
        assert name not in at_build and value not in at_build
    for path in (result.log, result.build_json):
        text = path.read_text(encoding="utf-8")
        assert not any(value in text for value in TOKENS.values())


def test_build_json_and_log(first_build, world):
    job, _options, result = first_build
    data = json.loads(result.build_json.read_text(encoding="utf-8"))
    assert data == result.to_dict()
    assert data["status"] == "ok" and data["failed_step"] is None
    # the matrix's typo is named (passed: the user asked for it); the seed flags this tree lacks are not passed
    assert data["warnings"] == [
        "the matrix's cmake option GGML_HIP_TYPO is not used by this llama.cpp tree (no CMake "
        "file reads it): a typo, or an option removed upstream?"
    ]
    assert "-DGGML_HIP_TYPO=ON" in data["cmake_command"]
    assert data["dropped_definitions"] == ["GGML_BACKEND_DL", "GGML_CPU_ALL_VARIANTS", "GGML_STATIC"]  # no ggml/ here
    assert [p["file"] for p in data["programs"]] == data["build_targets"]
    assert "llama-quantize" in data["programs_unavailable"] and "llama-not-shipped" not in data["build_targets"]
    assert data["job"]["id"] == job.id == "linux-gfx110X"
    assert data["gpu_targets"] == ["gfx1100", "gfx1101", "gfx1102", "gfx1103"]
    assert data["build_targets"] == ["llama-cli", "llama-server", "llama-bench", "ggml-rpc-server", "llama-completion"]
    llama = data["llama_cpp"]
    # a plain tree: git knows nothing; the caller's values are recorded as given
    assert (llama["commit"], llama["commit_source"], llama["build_number"], llama["build_number_source"]) == (
        "0c1e570",
        "given",
        "b11312",
        "given",
    )
    assert data["rocm"]["therock_commit"] == THEROCK_COMMIT and data["rocm"]["version"] == "7.2.0"
    assert data["rocm"]["kind"] == "therock" and data["rocm"]["tarball"] is None
    assert data["compilers"]["c"].startswith("gcc") and data["compilers"]["cxx"].startswith("g++")
    assert data["tools"]["cmake"].startswith("cmake version") and data["tools"]["ninja"]
    assert (
        data["cmake_command"][:2] == ["cmake", "-S"]
        and "-DGPU_TARGETS=gfx1100;gfx1101;gfx1102;gfx1103" in data["cmake_command"]
    )
    assert data["compile_command"][-2:] == ["--parallel", "2"]
    assert set(data["durations"]) == {"rocm", "source", "web_ui", "configure", "compile", "test_backend_ops", "total"}
    # the stand-in tree has no tools/ui: llama-server without its chat page, and build.json says why
    assert data["web_ui"]["status"] == "none" and "tools/ui has no package.json" in data["web_ui"]["reason"]
    assert data["durations"]["total"] >= data["durations"]["compile"] > 0
    names = {b["name"]: b for b in data["binaries"]}
    assert {"llama-cli", "llama-server", "llama-bench", "ggml-rpc-server", "llama-completion", "libggml.so"} <= set(
        names
    )
    assert "llama-not-shipped" not in names  # only the shipped targets are built
    assert not (result.build_dir / "bin" / "llama-not-shipped").exists()
    assert names["libggml.so"]["kind"] == "library" and names["llama-cli"]["size"] > 0
    assert subprocess.run([result.build_dir / "bin" / "llama-cli"]).returncode == 0  # it really links and runs
    assert data["ninja"]["objects"] == {"C": 1, "CXX": 6} and data["ninja"]["no_work"] is False
    log = result.log.read_text(encoding="utf-8")
    assert "==> configure: cmake -S" in log and "==> compile: cmake --build" in log
    assert "Building CXX object" in log


def test_the_op_test_is_built_beside_the_bundle_never_in_build_bin(first_build, tmp_path):
    """test-backend-ops comes from the same configured tree, is kept in <job>/tools/ (build.json says so) and is not in
    build/bin, whose every ELF the bundle step takes; the bundle made from this build does not have it."""
    from rockbuild.bundle.plan import BundleRequest, bundle
    from rockbuild.bundle.policy import load_policy

    _job, _options, result = first_build
    record = result.test_backend_ops
    assert record is not None and (record.status, record.path, record.reason) == (
        "built",
        "tools/test-backend-ops",
        None,
    )
    tool = result.job_dir / "tools" / "test-backend-ops"
    assert tool.is_file() and record.size == tool.stat().st_size
    assert not (result.build_dir / "bin" / "test-backend-ops").exists()
    assert subprocess.run([tool]).returncode == 0  # linked against the build's ggml, and it runs
    assert "test-backend-ops" not in {b["name"] for b in result.to_dict()["binaries"]}
    # even one left in build/bin (an older rockbuild, a hand-made build) never reaches the bundle
    shutil.copy2(tool, result.build_dir / "bin" / "test-backend-ops")
    report = bundle(
        BundleRequest(
            result.build_dir / "bin",
            tmp_path / "bundle",
            load_policy(),
            backend="vulkan",
            platform="linux",
            audit=False,
            backends=REGISTRY,
        )
    )
    assert (tmp_path / "bundle" / "llama-cli").is_file() and not (tmp_path / "bundle" / "test-backend-ops").exists()
    assert result.build_dir / "bin" / "test-backend-ops" in report.plan.skipped


def test_an_op_test_that_fails_to_compile_costs_the_build_nothing_and_says_why(world, capsys):
    matrix = matrix_file(world["base"] / "fail-op-test.yaml", {"FAIL_OP_TEST": "ON"})
    job = resolve_job(target="gfx1151", config=matrix)
    options = BuildOptions(
        context=context(),
        out_dir=world["base"] / "out-op",
        rocm_dir=world["rocm"],
        source_dir=world["project"],
        use_ccache=False,
        jobs=2,
    )
    result = build_job(job, options, backends=REGISTRY)
    assert result.status == "ok"
    record = result.test_backend_ops
    assert record is not None and record.status == "absent" and record.path is None
    assert record.reason == "its compile failed (exit code 1); build.log in the job folder says why"
    assert not (result.job_dir / "tools" / "test-backend-ops").exists()
    assert "test-backend-ops is not built: its compile failed" in capsys.readouterr().err
    assert "the op test fails to compile on purpose" in result.log.read_text(encoding="utf-8")


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed on this host")
def test_ccache_hit_rate_of_a_fresh_build_dir(first_build, world):
    job, options, result = first_build
    first = result.ccache
    assert first is not None and first["enabled"] and first["dir"] == str(world["ccache"])
    assert first["misses"] + first["hits"] == 7 and (world["ccache"]).is_dir()
    shutil.rmtree(result.build_dir)  # same ccache, fresh build dir: every object comes from the cache
    warm = build_job(job, options, backends=REGISTRY)
    assert warm.ccache is not None and (warm.ccache["hits"], warm.ccache["misses"]) == (7, 0)
    assert warm.ccache["hit_rate"] == 1.0
    assert warm.configure_skipped is False


def test_rerun_is_incremental(first_build):
    job, options, _result = first_build
    again = build_job(job, options, backends=REGISTRY)
    assert again.configure_skipped is True
    assert again.ninja is not None and again.ninja["no_work"] is True and again.ninja["objects"] == {}
    log = again.log.read_text(encoding="utf-8")
    assert "ninja: no work to do." in log and "configure: skipped" in log
    assert "Building CXX object" not in log  # the log is this run's
    # one changed source recompiles that file only
    source = Path(again.llama_cpp.path) / "ggml" / "ggml-base.c"
    source.write_text("int ggml_base(void) { return 40 + 1; }\n", encoding="utf-8")
    third = build_job(job, options, backends=REGISTRY)
    assert third.ninja is not None and third.ninja["objects"] == {"C": 1}


def test_another_source_tree_into_the_same_out_folder_configures_afresh(world):
    """Each llama.cpp commit is its own clone; CMake would refuse a build folder made from another source folder."""
    import dataclasses
    import shutil

    other = world["base"] / "llama.cpp-other-commit"
    shutil.copytree(world["project"], other)
    job = resolve_job(target="gfx1151")
    options = BuildOptions(
        context=context(),
        out_dir=world["base"] / "out-two-trees",
        rocm_dir=world["rocm"],
        source_dir=world["project"],
        use_ccache=False,
        jobs=2,
    )
    build_job(job, options, backends=REGISTRY)
    second = build_job(job, dataclasses.replace(options, source_dir=other), backends=REGISTRY)
    assert second.status == "ok" and second.configure_skipped is False
    cache = (second.build_dir / "CMakeCache.txt").read_text(encoding="utf-8")
    assert f"CMAKE_HOME_DIRECTORY:INTERNAL={other.resolve()}" in cache


def test_failing_compile_ends_with_the_log_tail(world, capsys):
    matrix = matrix_file(world["base"] / "fail-compile.yaml", {"FAIL_COMPILE": "ON"})
    job = resolve_job(target="gfx1151", config=matrix)
    options = BuildOptions(
        context=context(),
        out_dir=world["base"] / "out-fail",
        rocm_dir=world["rocm"],
        source_dir=world["project"],
        use_ccache=False,
        jobs=2,
    )
    with pytest.raises(BuildFailed) as info:
        build_job(job, options, backends=REGISTRY)
    exc = info.value
    log = world["base"] / "out-fail" / "linux-gfx1151" / "build.log"
    # the message stands alone in public text (no runner path, no "above"); the path is the hint the user sees
    assert (
        "\n" not in exc.message and str(log) not in exc.message and exc.message.startswith("compile failed (exit code")
    )
    assert exc.message.endswith("build.log in the job folder says why") and exc.hint.endswith(f"the whole log: {log}")
    assert exc.exit_code == 1 and exc.step == "compile" and exc.log == log
    assert 0 < len(exc.tail) <= 40 and any("compile fails on purpose" in line for line in exc.tail)
    err = capsys.readouterr().err
    assert f"last {len(exc.tail)} lines of {log}" in err and "compile fails on purpose" in err
    data = json.loads((log.parent / "build.json").read_text(encoding="utf-8"))
    assert (data["status"], data["failed_step"]) == ("failed", "compile")
    assert data["cmake_definitions"]["FAIL_COMPILE"] == "ON" and data["binaries"] == []


def test_cli_failing_configure_exit_code_and_tail(world, run_rockbuild, tmp_path):
    matrix = matrix_file(tmp_path / "fail-configure.yaml", {"FAIL_CONFIGURE": "ON"})
    result = run_rockbuild(
        "build",
        "--target",
        "gfx1151",
        "-c",
        str(matrix),
        "--rocm",
        str(world["rocm"]),
        "--source",
        str(world["project"]),
        "--out",
        str(tmp_path / "out"),
        "--no-ccache",
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    log = tmp_path / "out" / "linux-gfx1151" / "build.log"
    assert lines[-2] == "error: configure failed (exit code 1); build.log in the job folder says why"
    assert lines[-1] == f"hint: its last lines are printed above; the whole log: {log}"
    assert "configure fails on purpose" in result.stderr
    assert f"lines of {log} ----" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_cli_json_prints_build_json(world, run_rockbuild, tmp_path):
    write(tmp_path / "cc" / "ccache.conf", "compiler_type = gcc\n")
    result = run_rockbuild(
        "build",
        "--target",
        "gfx1151",
        "--rocm",
        str(world["rocm"]),
        "--source",
        str(world["project"]),
        "--out",
        str(tmp_path / "out"),
        "--build-number",
        "b42",
        "--json",
        "-j",
        "2",
        "--ccache-dir",
        str(tmp_path / "cc"),
        env={"ROCKBUILD_CACHE": str(tmp_path / "cache"), **TOKENS},
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["job"]["id"] == "linux-gfx1151" and data["gpu_targets"] == ["gfx1151"]
    assert data["cmake_definitions"]["GPU_TARGETS"] == "gfx1151"
    assert data["llama_cpp"]["build_number"] == "b42" and data["llama_cpp"]["commit"] == "unknown"
    assert data["cmake_definitions"]["LLAMA_BUILD_COMMIT"] == "unknown"
    bundle = data.pop("bundle")  # `rockbuild build` ends with the bundle stage
    assert json.loads((tmp_path / "out" / "linux-gfx1151" / "build.json").read_text()) == data
    assert bundle["audit"]["ok"] is True
    assert (tmp_path / "out" / "linux-gfx1151" / "bundle" / "bundle.json").is_file()
    assert "==> configure" in result.stderr and "==> compile" in result.stderr and "==> bundle" in result.stderr
    assert not any(v in result.stdout + result.stderr for v in TOKENS.values())


def test_offline_swaps_boringssl_for_openssl(world, tmp_path):
    job = resolve_job(target="gfx1151")
    result = build_job(
        job,
        BuildOptions(
            context=context(),
            out_dir=tmp_path,
            rocm_dir=world["rocm"],
            source_dir=world["project"],
            offline=True,
            use_ccache=False,
            jobs=2,
        ),
        backends=REGISTRY,
    )
    seen = read_seen(result.build_dir)
    assert (seen["LLAMA_BUILD_BORINGSSL"], seen["LLAMA_OPENSSL"]) == ("OFF", "ON")
    assert seen["GGML_CCACHE"] == "OFF" and result.ccache is not None and result.ccache["enabled"] is False
    assert len(result.warnings) == 1 and "without HTTPS" in result.warnings[0]
    again = build_job(
        job,
        BuildOptions(
            context=context(),
            out_dir=tmp_path,
            rocm_dir=world["rocm"],
            source_dir=world["project"],
            offline=True,
            use_ccache=False,
            jobs=2,
        ),
        backends=REGISTRY,
    )
    assert again.configure_skipped and again.warnings == result.warnings  # remembered from the configure


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_build_from_a_ref_of_a_configurable_git_url(world, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(world["project"], work)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e.org",
    }
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "x"], ["tag", "b777"]):
        subprocess.run(["git", *args], cwd=work, env=env, check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=work, check=True, capture_output=True, text=True
    ).stdout.strip()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(tmp_path / "up.git")], check=True)
    result = build_job(
        resolve_job(target="gfx1151"),
        BuildOptions(
            context=context(),
            out_dir=tmp_path / "out",
            rocm_dir=world["rocm"],
            ref="b777",
            git_url=f"file://{tmp_path / 'up.git'}",
            cache=tmp_path / "cache",
            use_ccache=False,
            jobs=2,
        ),
        backends=REGISTRY,
    )
    assert result.llama_cpp is not None and result.llama_cpp.path.parent == tmp_path / "cache" / "llama.cpp"
    assert (result.llama_cpp.commit, result.llama_cpp.build_number, result.llama_cpp.origin) == (
        commit,
        "b777",
        "clone",
    )
    seen = read_seen(result.build_dir)
    assert (seen["LLAMA_BUILD_NUMBER"], seen["LLAMA_BUILD_COMMIT"]) == ("777", commit[:7])
    assert "==> llama.cpp source" in result.log.read_text() and "b777" in result.log.read_text()


# ------------------------------------------------------------------------------------------------ jobs, parsing


def test_resolve_job_target_family_and_job():
    assert resolve_job(target="gfx1151").targets == ("gfx1151",)
    one = resolve_job(target="gfx1100")  # one target of a family: exactly that target
    assert (one.id, one.targets, one.group) == ("linux-gfx1100", ("gfx1100",), "gfx110X-all")
    assert resolve_job(job_id="linux-gfx120X").targets == ("gfx1200", "gfx1201")
    with pytest.raises(UsageError, match="exactly one of"):
        resolve_job(target="gfx1151", family="gfx110X")
    with pytest.raises(UsageError, match="use --family"):
        resolve_job(target="gfx110X")
    with pytest.raises(ConfigError, match="did you mean gfx1151"):
        resolve_job(target="gfx1115")


def test_a_chroot_layout_is_refused_with_the_way_to_build_in_it(tmp_path):
    root = tmp_path / "root"
    (root / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr" / "lib" / "x86_64-linux-gnu" / "libamdhip64.so.7").write_text("")
    write(root / "usr" / "lib" / "llvm-22" / "bin" / "clang", "#!/bin/sh\n", 0o755)
    write(root / "usr" / "lib" / "llvm-22" / "bin" / "clang++", "#!/bin/sh\n", 0o755)
    with pytest.raises(ConfigError, match=r"run rockbuild in the root .* with --rocm /usr"):
        options = BuildOptions(
            context=context(), out_dir=tmp_path / "out", rocm_dir=root, source_dir=tmp_path, rocm_tarball=TARBALL
        )
        build_job(resolve_job(target="gfx1151"), options, backends=REGISTRY)
    # build.json is written once, by the build, and names the night's tarball even when its root was refused
    # (it used to be read back and rewritten by the night to put the tarball in)
    build = json.loads((tmp_path / "out" / "linux-gfx1151" / "build.json").read_text())
    assert build["status"] == "failed" and build["failed_step"] == "rocm"
    assert build["rocm"]["tarball"] == {
        "name": TARBALL.name,
        "url": None,
        "sha256": TARBALL.sha256,
        "size": 5,
        "group": "gfx1151",
    }


TARBALL = Tarball(name="therock-dist-linux-gfx1151-7.2.0a20261204.tar.gz", sha256="ab" * 32, size=5, group="gfx1151")


PRINT_STATS = "stats_updated_timestamp\t1764400000\ndirect_cache_hit\t140\npreprocessed_cache_hit\t4\ncache_miss\t6\n"
STATS_3X = """cache directory                     /root/.ccache
cache hit (direct)                   120
cache hit (preprocessed)              10
cache miss                            30
"""
STATS_4X = """Cacheable calls:    200 / 210 (95.24%)
  Hits:             150 / 200 (75.00%)
    Direct:         140 / 150 (93.33%)
    Preprocessed:    10 / 150 ( 6.67%)
  Misses:            50 / 200 (25.00%)
"""


def test_parse_ccache_stats_formats():
    assert parse_ccache_stats(PRINT_STATS) == CcacheCounts(144, 6)
    assert parse_ccache_stats(STATS_3X) == CcacheCounts(130, 30)
    assert parse_ccache_stats(STATS_4X) == CcacheCounts(150, 50)
    assert parse_ccache_stats("ccache: error: nothing\n") is None
    report = ccache_report(CcacheCounts(10, 5), CcacheCounts(154, 11), Path("/c"))
    assert (report["hits"], report["misses"], report["hit_rate"]) == (144, 6, 0.96)
    assert ccache_report(CcacheCounts(1, 1), CcacheCounts(1, 1), Path("/c"))["hit_rate"] is None


def test_ninja_progress_counts_steps_and_objects_by_language(capsys):
    progress = NinjaProgress("compile", interactive=False, every=0.0)
    for line in [
        "[1/4] Building HIP object ggml/src/ggml-hip/CMakeFiles/ggml-hip.dir/__/ggml-cuda/mmq.cu.o",
        "In file included from x.h:1:",
        "[2/4] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o",
        "[3/4] Building HIP object ggml/src/ggml-hip/CMakeFiles/ggml-hip.dir/__/ggml-cuda/mmvq.cu.o",
        "[4/4] Linking CXX shared library bin/libggml-hip.so",
    ]:
        progress.on_line(line)
    progress.close()
    assert progress.summary() == {"steps": 4, "total": 4, "objects": {"CXX": 1, "HIP": 2}, "no_work": False}
    assert "compile: [4/4] 100%" in capsys.readouterr().err
    idle = NinjaProgress(interactive=False)
    idle.on_line("ninja: no work to do.")
    assert idle.summary()["no_work"] is True


# --- a Vulkan job: no ROCm, the host's compiler, GGML_VULKAN ------------------------------------------------------


def _vulkan_job(world):
    from rockbuild.matrix import find_job, load_matrix

    matrix = write(
        world["base"] / "vulkan.yaml",
        """
        options:
          cmake: {MY_EXTRA: from-matrix}
        matrix: {os: [linux], target: [gfx1151], backend: vulkan}
    """,
    )
    return find_job(load_matrix(matrix), "linux-vulkan")


def _with_path(entry: Path, fn):
    saved = os.environ["PATH"]
    os.environ["PATH"] = f"{entry}:{saved}"
    try:
        return fn()
    finally:
        os.environ["PATH"] = saved


def test_vulkan_job_builds_with_the_host_compiler_and_no_rocm(world, tmp_path):
    job = _vulkan_job(world)
    fake_bin = tmp_path / "vk-bin"  # glslc only has to exist and say its version: the fake project has no shaders
    write(fake_bin / "glslc", "#!/bin/sh\necho 'shaderc v2023.2 v2023.2'\n", 0o755)
    options = BuildOptions(
        context=context(),
        out_dir=tmp_path / "out",
        source_dir=world["project"],
        build_number="11312",
        commit="0c1e570",
        use_ccache=False,
        cache=tmp_path / "cache",
        jobs=2,
    )
    result = _with_path(fake_bin, lambda: build_job(job, options, backends=REGISTRY))
    data = json.loads(result.build_json.read_text(encoding="utf-8"))
    assert data["status"] == "ok" and data["job"]["backend"] == "vulkan" and data["job"]["id"] == "linux-vulkan"
    assert data["rocm"] is None and data["toolchain"] is None and data["gpu_targets"] == []
    assert data["tools"]["glslc"].startswith("shaderc") and data["compilers"]["c"] and "hip" not in data["compilers"]
    seen = read_seen(result.build_dir)
    assert seen["GGML_HIP"] == seen["GPU_TARGETS"] == seen["CMAKE_HIP_COMPILER"] == seen["GGML_HIP_ROCWMMA_FATTN"] == ""
    assert Path(seen["CMAKE_C_COMPILER"]).name in ("cc", "gcc")  # CMake's own pick, not ROCm's clang
    assert (seen["GGML_RPC"], seen["BUILD_SHARED_LIBS"], seen["MY_EXTRA"]) == ("ON", "ON", "from-matrix")
    assert seen["ENV:ROCM_PATH"] == seen["ENV:HIP_PLATFORM"] == seen["ENV:HIP_DEVICE_LIB_PATH"] == ""
    assert "GGML_VULKAN:UNINITIALIZED=ON" in (result.build_dir / "CMakeCache.txt").read_text(encoding="utf-8")
    assert "-DGGML_VULKAN=ON" in data["cmake_command"] and not [
        a for a in data["cmake_command"] if a.startswith(("-DGGML_HIP", "-DGPU_TARGETS", "-DCMAKE_C_COMPILER"))
    ]
    assert set(data["durations"]) == {"rocm", "source", "web_ui", "configure", "compile", "test_backend_ops", "total"}
    # the stand-in tree has no tools/ui: llama-server without its chat page, and build.json says why
    assert data["web_ui"]["status"] == "none" and "tools/ui has no package.json" in data["web_ui"]["reason"]
    assert subprocess.run([result.build_dir / "bin" / "llama-cli"]).returncode == 0
    # the same command and environment: the second run does not configure again
    again = _with_path(fake_bin, lambda: build_job(job, options, backends=REGISTRY))
    assert again.configure_skipped and again.ninja is not None and again.ninja["no_work"] is True


def test_vulkan_job_without_glslc_fails_with_one_line(world, tmp_path):
    job = _vulkan_job(world)
    tools = tmp_path / "tools-but-glslc"
    tools.mkdir()
    saved = os.environ["PATH"]
    # every program of PATH (cmake, ninja, cc, ...) but glslc, wherever the host has it
    for folder in (Path(d) for d in saved.split(":") if d and Path(d).is_dir()):
        for program in folder.iterdir():
            if program.name != "glslc" and not (tools / program.name).exists():
                (tools / program.name).symlink_to(program)
    os.environ["PATH"] = str(tools)
    try:
        with pytest.raises(BuildError, match=r"glslc is not installed .*LunarG Vulkan SDK") as info:
            build_job(
                job,
                BuildOptions(
                    context=context(),
                    out_dir=tmp_path / "out",
                    source_dir=world["project"],
                    build_number="1",
                    commit="abc1234",
                    use_ccache=False,
                    cache=tmp_path / "cache",
                ),
                backends=REGISTRY,
            )
    finally:
        os.environ["PATH"] = saved
    assert "\n" not in str(info.value)
    data = json.loads((tmp_path / "out" / "linux-vulkan" / "build.json").read_text(encoding="utf-8"))
    assert data["status"] == "failed" and data["failed_step"] == "configure" and data["rocm"] is None


def test_a_failed_build_says_why_in_build_json_and_build_log(tmp_path, run_rockbuild):
    """Not only `failed_step: rocm`: the message and hint the user saw, in both files."""
    result = run_rockbuild(
        "build",
        "--target",
        "gfx1151",
        "--rocm",
        str(tmp_path / "no-such-rocm"),
        "--source",
        str(tmp_path),
        "--out",
        str(tmp_path / "out"),
    )
    assert result.returncode != 0
    record = json.loads((tmp_path / "out" / "linux-gfx1151" / "build.json").read_text())
    assert record["status"] == "failed" and record["failed_step"] == "rocm"
    error = record["error"]
    assert error["exit_code"] == result.returncode and error["message"] in result.stderr
    log = (tmp_path / "out" / "linux-gfx1151" / "build.log").read_text()
    assert f"==> failed at step rocm: {error['message']}\n" in log
    if error["hint"]:
        assert f"hint: {error['hint']}\n" in log
