"""The carried patch vulkan-shaders-depfile on the real llama.cpp tree the e2e tests pin (b11312, from the sdist in the
cache): vulkan-shaders-gen, compiled by this machine's g++ from the pristine and the patched tree, run with this
machine's glslc on a shader source none of whose variants this build compiles (flash_attn_cm2.comp: coopmat2 only),
and on one whose variants compile (add.comp).

Without the patch the first leaves no depfile, which is why ninja regenerated 8 shader files on every run of an
unchanged tree; with it the depfile names the source. A source that compiles keeps glslc's depfile (its includes).

Skipped where the pinned source (tests/e2e/provision.sh puts it in /var/cache/rockbuild/src), g++ or glslc is missing.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from rockbuild.core.data import data_path
from rockbuild.llamacpp.patches import APPLIED, PatchSeries, apply_patch_series, load_patch_series

SDIST = Path("/var/cache/rockbuild/src/llama_cpp_python-0.3.36.tar.gz")
PREFIX = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
SHADERS = "ggml/src/ggml-vulkan/vulkan-shaders"

pytestmark = [
    pytest.mark.skipif(not SDIST.is_file(), reason=f"the pinned llama.cpp source is not in the cache ({SDIST})"),
    pytest.mark.skipif(not shutil.which("g++"), reason="needs g++ to compile vulkan-shaders-gen"),
    pytest.mark.skipif(not shutil.which("glslc"), reason="needs glslc (Debian: apt install glslc)"),
]


@pytest.fixture(scope="module")
def generators(tmp_path_factory):
    """(pristine, patched): the shader sources' folder of each tree and vulkan-shaders-gen compiled from it."""
    base = tmp_path_factory.mktemp("vulkan-b11312")
    pristine = base / "llama.cpp"
    with tarfile.open(SDIST) as tar:
        for member in tar:
            if member.name.startswith(PREFIX + SHADERS + "/") and (member.isfile() or member.isdir()):
                member.name = member.name[len(PREFIX) :]
                tar.extract(member, pristine, filter="data")
    series = load_patch_series(data_path("patches", "patches.yaml"))
    vulkan_only = PatchSeries(tuple(p for p in series.patches if p.id == "vulkan-shaders-depfile"), series.path)
    patched = apply_patch_series(
        vulkan_only,
        pristine,
        base / "mirror",
        build_number=11312,
        tree_label="llama.cpp b11312",
        os_name="linux",
        backend="vulkan",
    )
    assert [(o.id, o.status) for o in patched.patches] == [("vulkan-shaders-depfile", APPLIED)]
    out = {}
    for name, tree in (("pristine", pristine), ("patched", patched.tree)):
        exe = base / f"vulkan-shaders-gen-{name}"
        # no GGML_VULKAN_*_GLSLC_SUPPORT: as with a glslc that lacks coopmat, coopmat2 and integer dot product
        subprocess.run(
            ["g++", "-std=c++17", "-O1", "-pthread", str(tree / SHADERS / "vulkan-shaders-gen.cpp"), "-o", str(exe)],
            check=True,
            capture_output=True,
        )
        out[name] = (tree / SHADERS, exe)
    return out


def generate(generator: tuple[Path, Path], source: str, out: Path) -> Path:
    """Run vulkan-shaders-gen as ggml-vulkan's CMakeLists does for one source; returns the target .cpp."""
    shaders, exe = generator
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{source}.cpp"
    subprocess.run(
        [
            str(exe),
            "--glslc",
            shutil.which("glslc"),
            "--source",
            str(shaders / source),
            "--output-dir",
            str(out / "spv"),
            "--target-hpp",
            str(out / "ggml-vulkan-shaders.hpp"),
            "--target-cpp",
            str(target),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def test_a_source_with_no_variant_compiled_has_no_depfile_without_the_patch(generators, tmp_path):
    target = generate(generators["pristine"], "flash_attn_cm2.comp", tmp_path)
    assert target.is_file() and not list((tmp_path / "spv").iterdir())  # nothing compiled, an (almost) empty .cpp
    assert not Path(f"{target}.d").exists()  # what ninja -d explain called "depfile ... is missing"


def test_the_patch_writes_a_depfile_naming_the_source(generators, tmp_path):
    target = generate(generators["patched"], "flash_attn_cm2.comp", tmp_path)
    shaders = generators["patched"][0]
    assert Path(f"{target}.d").read_text() == f"{target}: {shaders / 'flash_attn_cm2.comp'}\n"
    mtime = Path(f"{target}.d").stat().st_mtime_ns
    generate(generators["patched"], "flash_attn_cm2.comp", tmp_path)  # the same again: the file is not rewritten
    assert Path(f"{target}.d").stat().st_mtime_ns == mtime


def test_a_source_whose_variants_compile_keeps_glslcs_depfile(generators, tmp_path):
    before = generate(generators["pristine"], "add.comp", tmp_path / "pristine")
    after = generate(generators["patched"], "add.comp", tmp_path / "patched")
    deps = Path(f"{after}.d").read_text()
    assert deps.startswith(f"{after}: {generators['patched'][0] / 'add.comp'} ")
    assert "types.glsl" in deps  # the includes glslc found
    # the same files as without the patch; their order is not: each variant's glslc run rewrites the depfile, and
    # the variants run on a thread pool, so the last to finish (its include order) wins
    assert depfile_names(Path(f"{before}.d"), tmp_path / "pristine", generators["pristine"][0]) == depfile_names(
        Path(f"{after}.d"), tmp_path / "patched", generators["patched"][0]
    )


def depfile_names(depfile: Path, out: Path, shaders: Path) -> tuple[str, set[str]]:
    """A depfile's target and the set of what it depends on, relative to the output folder and the sources' folder."""
    target, _, deps = depfile.read_text().replace(str(out), "").replace(str(shaders), "").partition(":")
    return target, set(deps.split())
