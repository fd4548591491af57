"""The shader cache (rockbuild/llamacpp/shader_cache.py): glslc through rockbuild's wrapper, with this machine's real
glslc, on shaders that include files as ggml-vulkan's do. Hits and misses, byte-identical outputs and depfiles with the
current paths, a changed include, concurrent writers, a damaged entry, the size bound, what is passed through.

Skipped where glslc is missing (Debian/Ubuntu: apt install glslc).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rockbuild.backends.vulkan import glslc_definitions
from rockbuild.llamacpp import shader_cache
from rockbuild.llamacpp.shader_cache import (
    Cache,
    Compile,
    depfile_template,
    install_wrapper,
    log_counts,
    render_depfile,
)

GLSLC = shutil.which("glslc")
pytestmark = pytest.mark.skipif(GLSLC is None, reason="needs glslc (Debian/Ubuntu: apt install glslc)")

TYPES = "#define ACC_TYPE float\n"
UTILS = '#include "types.glsl"\nACC_TYPE twice(ACC_TYPE x) { return x * 2.0; }\n'
SHADER = """#version 450
#include "utils.glsl"
layout(local_size_x = 64) in;
layout(binding = 0) buffer A { ACC_TYPE data[]; };
void main() { data[gl_GlobalInvocationID.x] = twice(data[gl_GlobalInvocationID.x]) + SCALE; }
"""


def tree(root: Path) -> Path:
    """A shader folder: add.comp includes utils.glsl, which includes types.glsl."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "types.glsl").write_text(TYPES)
    (root / "utils.glsl").write_text(UTILS)
    (root / "add.comp").write_text(SHADER)
    return root


def args(src: Path, out: Path, *, depfile: Path | None = None, scale: str = "1.0") -> list[str]:
    """As vulkan-shaders-gen runs glslc (string_to_spv_func)."""
    extra = ["-MD", "-MF", str(depfile)] if depfile else []
    return [
        "-fshader-stage=compute",
        "--target-env=vulkan1.2",
        str(src),
        "-o",
        str(out),
        "-O",
        *extra,
        f"-DSCALE={scale}",
    ]


@pytest.fixture
def wrapper(tmp_path):
    return install_wrapper(tmp_path / "build", GLSLC, tmp_path / "cache")


def run(program: str, arguments: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([program, *arguments], capture_output=True, **kw)


def test_a_miss_then_a_hit_write_what_glslc_writes_byte_for_byte(tmp_path, wrapper):
    src = tree(tmp_path / "src") / "add.comp"
    out = tmp_path / "out"
    out.mkdir()
    direct = run(GLSLC, args(src, out / "direct.spv", depfile=out / "direct.d"))
    assert direct.returncode == 0 and direct.stdout == direct.stderr == b""
    for name in ("miss", "hit"):
        done = run(wrapper, args(src, out / f"{name}.spv", depfile=out / f"{name}.d"))
        assert done.returncode == 0 and done.stdout == done.stderr == b""  # vulkan-shaders-gen fails on any stderr
        assert (out / f"{name}.spv").read_bytes() == (out / "direct.spv").read_bytes()
        # the depfile glslc writes: "OUT: IN includes...", with this compile's OUT
        expected = (out / "direct.d").read_text().replace(str(out / "direct.spv"), str(out / f"{name}.spv"))
        assert (out / f"{name}.d").read_text() == expected
        assert "utils.glsl" in expected and "types.glsl" in expected
    assert log_counts(tmp_path / "build") == {"hits": 1, "misses": 1, "uncached": 0}
    # without -MD no depfile, from a hit too
    assert run(wrapper, args(src, out / "plain.spv")).returncode == 0
    assert (out / "plain.spv").read_bytes() == (out / "direct.spv").read_bytes()
    assert not (out / "plain.d").exists()
    assert log_counts(tmp_path / "build")["hits"] == 2


def test_another_build_tree_and_source_folder_hit_with_their_own_paths(tmp_path, wrapper):
    first = tree(tmp_path / "night1" / "src") / "add.comp"
    second = tree(tmp_path / "night2" / "llama.cpp" / "shaders") / "add.comp"  # same content, elsewhere
    assert run(wrapper, args(first, tmp_path / "a.spv", depfile=tmp_path / "a.d")).returncode == 0
    other = install_wrapper(tmp_path / "build2", GLSLC, tmp_path / "cache")  # a new build tree, the same cache
    assert run(other, args(second, tmp_path / "b.spv", depfile=tmp_path / "b.d")).returncode == 0
    assert log_counts(tmp_path / "build2") == {"hits": 1, "misses": 0, "uncached": 0}
    assert run(GLSLC, args(second, tmp_path / "c.spv", depfile=tmp_path / "c.d")).returncode == 0
    assert (tmp_path / "b.spv").read_bytes() == (tmp_path / "c.spv").read_bytes()
    assert (tmp_path / "b.d").read_text() == (tmp_path / "c.d").read_text().replace("c.spv", "b.spv")
    assert str(second.parent / "utils.glsl") in (tmp_path / "b.d").read_text()


def test_a_changed_include_or_define_is_a_miss_and_the_old_content_hits_again(tmp_path, wrapper):
    src = tree(tmp_path / "src") / "add.comp"
    log = tmp_path / "build"
    assert run(wrapper, args(src, tmp_path / "1.spv")).returncode == 0
    (src.parent / "types.glsl").write_text("#define ACC_TYPE float\n// changed\n#define UNUSED 1\n")
    assert run(wrapper, args(src, tmp_path / "2.spv")).returncode == 0  # an include two levels down changed
    assert run(wrapper, args(src, tmp_path / "3.spv", scale="2.0")).returncode == 0  # another -D
    assert log_counts(log) == {"hits": 0, "misses": 3, "uncached": 0}
    (src.parent / "types.glsl").write_text(TYPES)
    assert run(wrapper, args(src, tmp_path / "4.spv")).returncode == 0
    assert log_counts(log)["hits"] == 1  # the manifest keeps both sets of includes
    assert (tmp_path / "4.spv").read_bytes() == (tmp_path / "1.spv").read_bytes()
    assert (tmp_path / "3.spv").read_bytes() != (tmp_path / "1.spv").read_bytes()


def test_concurrent_writers_of_the_same_and_other_entries(tmp_path, wrapper):
    src = tree(tmp_path / "src") / "add.comp"
    (tmp_path / "o").mkdir()
    jobs = [(i, f"{i % 4}.0") for i in range(24)]  # 6 processes per entry, 4 entries, at once

    def compile_one(job):
        i, scale = job
        return run(wrapper, args(src, tmp_path / "o" / f"{i}.spv", depfile=tmp_path / "o" / f"{i}.d", scale=scale))

    with ThreadPoolExecutor(max_workers=12) as pool:
        assert all(r.returncode == 0 and r.stderr == b"" for r in pool.map(compile_one, jobs))
    for scale in ("0.0", "1.0", "2.0", "3.0"):
        assert run(GLSLC, args(src, tmp_path / f"ref{scale}.spv", scale=scale)).returncode == 0
    for i, scale in jobs:
        assert (tmp_path / "o" / f"{i}.spv").read_bytes() == (tmp_path / f"ref{scale}.spv").read_bytes()
    assert not list((tmp_path / "cache" / "tmp").iterdir())  # every temporary file renamed or removed
    before = log_counts(tmp_path / "build")
    with ThreadPoolExecutor(max_workers=12) as pool:
        assert all(r.returncode == 0 for r in pool.map(compile_one, jobs))
    after = log_counts(tmp_path / "build")
    assert after["hits"] - before["hits"] == 24 and after["misses"] == before["misses"]


def test_a_damaged_result_or_manifest_is_a_miss_not_a_failure(tmp_path, wrapper):
    src = tree(tmp_path / "src") / "add.comp"
    assert run(wrapper, args(src, tmp_path / "good.spv")).returncode == 0
    [result] = [p for p in (tmp_path / "cache" / "r").rglob("*") if p.is_file()]
    data = bytearray(result.read_bytes())
    data[-5] ^= 0xFF  # one flipped bit of SPIR-V: the checksum no longer holds
    result.write_bytes(bytes(data))
    done = run(wrapper, args(src, tmp_path / "again.spv"))
    assert done.returncode == 0 and done.stderr == b""
    assert (tmp_path / "again.spv").read_bytes() == (tmp_path / "good.spv").read_bytes()
    assert log_counts(tmp_path / "build") == {"hits": 0, "misses": 2, "uncached": 0}
    result.write_bytes(b"not json\n")  # a header that is not one
    [manifest] = [p for p in (tmp_path / "cache" / "m").rglob("*") if p.is_file()]
    assert run(wrapper, args(src, tmp_path / "3.spv")).returncode == 0
    manifest.write_text('{"entries": [{"deps": [["utils.glsl"]], "result": "x"}, 3]}')  # not what a manifest holds
    assert run(wrapper, args(src, tmp_path / "4.spv")).returncode == 0
    manifest.write_bytes(b"\x00\xff")
    assert run(wrapper, args(src, tmp_path / "5.spv")).returncode == 0
    for name in ("3", "4", "5"):
        assert (tmp_path / f"{name}.spv").read_bytes() == (tmp_path / "good.spv").read_bytes()
    assert run(wrapper, args(src, tmp_path / "6.spv")).returncode == 0
    assert log_counts(tmp_path / "build")["hits"] == 1  # and whole again


def test_what_is_not_a_cached_compile_is_glslc_itself(tmp_path, wrapper):
    src = tree(tmp_path / "src") / "add.comp"
    assert run(wrapper, ["--version"]).stdout == run(GLSLC, ["--version"]).stdout
    # CMake's configure-time probe: SPIR-V on stdout
    probe = ["-o", "-", "-fshader-stage=compute", "--target-env=vulkan1.3", "-DSCALE=1.0", str(src)]
    assert run(wrapper, probe).stdout == run(GLSLC, probe).stdout
    assert run(wrapper, ["-E", "-DSCALE=1.0", str(src)]).stdout == run(GLSLC, ["-E", "-DSCALE=1.0", str(src)]).stdout
    # a shader that does not compile: glslc's exit code and message, nothing stored
    (src.parent / "bad.comp").write_text("#version 450\nvoid main() { undefined_thing(); }\n")
    bad = run(wrapper, args(src.parent / "bad.comp", tmp_path / "bad.spv"))
    ref = run(GLSLC, args(src.parent / "bad.comp", tmp_path / "bad-ref.spv"))
    assert bad.returncode == ref.returncode != 0 and bad.stderr == ref.stderr and b"undefined_thing" in bad.stderr
    assert not (tmp_path / "cache" / "r").exists()
    assert log_counts(tmp_path / "build") == {"hits": 0, "misses": 0, "uncached": 0}


def test_a_glslc_changed_since_the_wrapper_was_written_runs_uncached(tmp_path):
    fake = tmp_path / "bin" / "glslc"
    fake.parent.mkdir()
    shutil.copy2(GLSLC, fake)
    wrapper = install_wrapper(tmp_path / "build", str(fake), tmp_path / "cache")
    src = tree(tmp_path / "src") / "add.comp"
    os.utime(fake, ns=(1, 1))  # as an upgrade in place would
    assert run(wrapper, args(src, tmp_path / "x.spv")).returncode == 0
    assert log_counts(tmp_path / "build") == {"hits": 0, "misses": 0, "uncached": 1}


def test_the_switch_and_the_bound_are_read_when_rockbuild_configures(tmp_path):
    """The driver reads them from rockbuild's environment; the wrapper reads none (one Python start per glslc)."""
    assert shader_cache.disabled({"ROCKBUILD_SHADER_CACHE": "0"}) and shader_cache.disabled(
        {"ROCKBUILD_SHADER_CACHE": "off"}
    )
    assert not shader_cache.disabled({}) and not shader_cache.disabled({"ROCKBUILD_SHADER_CACHE": "1"})
    assert shader_cache.size_mib({}) == 1024 and shader_cache.size_mib({"ROCKBUILD_SHADER_CACHE_SIZE": "64"}) == 64
    assert shader_cache.size_mib({"ROCKBUILD_SHADER_CACHE_SIZE": "lots"}) == 1024
    wrapper = install_wrapper(tmp_path / "build", GLSLC, tmp_path / "cache", size=64)
    assert "'size_mib': 64" in Path(wrapper).read_text() and "environ" not in Path(wrapper).read_text()


def test_the_vulkan_backend_configures_the_wrapper_or_the_real_glslc(tmp_path):
    env = {"PATH": os.environ["PATH"]}
    defs, record = glslc_definitions(env, tmp_path / "build", tmp_path / "cache" / "glslc")
    assert defs == [("Vulkan_GLSLC_EXECUTABLE", str(tmp_path / "build" / "rockbuild-glslc"))]
    assert record == {"enabled": True, "dir": str(tmp_path / "cache" / "glslc"), "glslc": GLSLC, "size_mib": 1024}
    text = (tmp_path / "build" / "rockbuild-glslc").read_text()
    mtime = (tmp_path / "build" / "rockbuild-glslc").stat().st_mtime_ns
    glslc_definitions(env, tmp_path / "build", tmp_path / "cache" / "glslc")  # the same: not rewritten
    assert (tmp_path / "build" / "rockbuild-glslc").stat().st_mtime_ns == mtime and GLSLC in text
    # off (--no-ccache, ROCKBUILD_SHADER_CACHE=0): the real glslc, named, so a tree configured before drops the wrapper
    assert glslc_definitions(env, tmp_path / "build", None) == (
        [("Vulkan_GLSLC_EXECUTABLE", GLSLC)],
        {"enabled": False, "dir": None},
    )


def test_the_size_bound_drops_the_least_recently_used(tmp_path):
    cache = Cache(str(tmp_path / "c"), size_mib=1)
    for i in range(12):
        key = f"{i:x}" * 64
        cache.store("f" + key[1:], {"stdout": "", "stderr": "", "depfile": ""}, bytes([i]) * 200_000)
        os.utime(cache._path("r", "f" + key[1:]), (1000 + i, 1000 + i))
    assert cache.result("f" + ("0" * 64)[1:]) is not None  # a hit makes the oldest the newest
    freed = cache.trim()
    kept = {p.name for p in (tmp_path / "c" / "r").rglob("*") if p.is_file()}
    assert freed > 0 and sum(p.stat().st_size for p in (tmp_path / "c").rglob("*") if p.is_file()) <= 0.8 * 2**20
    assert "f" + ("0" * 64)[1:] in kept and "f" + ("1" * 64)[1:] not in kept


def test_depfile_templates_survive_paths_with_spaces(tmp_path):
    folder = tmp_path / "a dir"
    tree(folder)
    compile = Compile.parse(args(folder / "add.comp", tmp_path / "o u t.spv"))
    assert compile is not None
    text = f"{tmp_path / 'o u t.spv'}: {folder / 'add.comp'} {folder / 'utils.glsl'} {folder / 'types.glsl'}\n"
    template, deps = depfile_template(text, compile)
    assert deps == [str(folder / "utils.glsl"), str(folder / "types.glsl")]
    assert render_depfile(template, compile) == text
    assert depfile_template("something else\n", compile) is None
    assert Compile.parse(["-c", "x.comp"]) is None and Compile.parse(["x.comp", "-o", "-"]) is None
    assert Compile.parse(["--unknown", "x.comp", "-o", "x.spv"]) is None


def test_a_vulkan_build_with_ccache_puts_it_in_front_of_vulkan_shaders_gen_too(tmp_path):
    """vulkan-shaders-gen is an ExternalProject without GGML_CCACHE's launcher: CMake's default launcher variables
    (which ggml honours instead of its own) reach it through the build's environment."""
    from rockbuild.backends import get_backend
    from rockbuild.matrix import find_job, load_matrix

    (tmp_path / "m.yaml").write_text("matrix: {os: [linux], backend: [vulkan]}\n")
    job = find_job(load_matrix(tmp_path / "m.yaml"), "linux-vulkan")
    backend = get_backend("vulkan")
    env, variables = backend.build_environment(job, None, ccache_dir=tmp_path / "ccache", base={"PATH": "/usr/bin"})
    assert env["CMAKE_C_COMPILER_LAUNCHER"] == env["CMAKE_CXX_COMPILER_LAUNCHER"] == "ccache"
    assert "CMAKE_CXX_COMPILER_LAUNCHER" in variables  # recorded in build.json's environment
    plain, _ = backend.build_environment(job, None, ccache_dir=None, base={"PATH": "/usr/bin"})
    assert "CMAKE_CXX_COMPILER_LAUNCHER" not in plain
