"""The carried patches (patches/patches.yaml) on the real llama.cpp tree the e2e tests pin (b11312, from the sdist in
the cache), compiled by this machine's g++: they apply, the AMX tile configuration survives the compiler, and the x86
variant scorer agrees with what this CPU and its kernel enable; the op test with the long-position cases compiles.

Skipped where the pinned source (tests/e2e/provision.sh puts it in /var/cache/rockbuild/src) or g++ is missing. Only
ggml/ and the op test are unpacked, into a temporary folder; the patches go to a mirror of it, as a build applies them.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from rockbuild.core.data import data_path
from rockbuild.llamacpp.patches import APPLIED, apply_patch_series, load_patch_series

SDIST = Path("/var/cache/rockbuild/src/llama_cpp_python-0.3.36.tar.gz")
PREFIX = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
MMQ = "ggml/src/ggml-cpu/amx/mmq.cpp"
FEATS = "ggml/src/ggml-cpu/arch/x86/cpu-feats.cpp"
OP_TEST = "tests/test-backend-ops.cpp"

pytestmark = [
    pytest.mark.skipif(not SDIST.is_file(), reason=f"the pinned llama.cpp source is not in the cache ({SDIST})"),
    pytest.mark.skipif(not (shutil.which("g++") and shutil.which("objdump")), reason="needs g++ and objdump"),
]

# ggml's variant definitions (ggml/src/CMakeLists.txt, ggml_add_cpu_backend_variant) -> the /proc/cpuinfo flags the
# variant needs (Linux lists AVX/AVX-512/AMX flags only when it enables their register state; its name for VBMI is
# avx512vbmi, for VBMI2 avx512_vbmi2)
VARIANTS = {
    "haswell": (("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"), ("sse4_2", "avx", "f16c", "fma", "avx2", "bmi2")),
    "skylakex": (
        ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512"),
        ("avx2", "avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    ),
    "sapphirerapids": (
        (
            "SSE42",
            "AVX",
            "F16C",
            "FMA",
            "AVX2",
            "BMI2",
            "AVX512",
            "AVX512_VBMI",
            "AVX512_VNNI",
            "AVX512_BF16",
            "AMX_TILE",
            "AMX_INT8",
        ),
        ("avx512f", "avx512vbmi", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8"),
    ),
}


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """(pristine, patched): ggml/ and the op test of b11312, and its mirror with the shipped series applied."""
    base = tmp_path_factory.mktemp("ggml-b11312")
    pristine = base / "llama.cpp"
    with tarfile.open(SDIST) as tar:
        for member in tar:
            wanted = member.name.startswith(PREFIX + "ggml/") or member.name == PREFIX + OP_TEST
            if wanted and (member.isfile() or member.isdir()):
                member.name = member.name[len(PREFIX) :]
                tar.extract(member, pristine, filter="data")
    patched = apply_patch_series(
        load_patch_series(data_path("patches", "patches.yaml")),
        pristine,
        base / "mirror",
        build_number=11312,
        tree_label="llama.cpp b11312",
        os_name="linux",
        backend="vulkan",
    )
    assert [(o.id, o.status) for o in patched.patches] == [
        ("amx-tile-config", APPLIED),
        ("x86-os-state", APPLIED),
        ("vulkan-shaders-depfile", APPLIED),
        ("ops-long-positions", APPLIED),
    ]
    return pristine, patched.tree


def _includes(tree: Path) -> list[str]:
    return [f"-I{tree / d}" for d in ("ggml/include", "ggml/src", "ggml/src/ggml-cpu", "ggml/src/ggml-cpu/amx")]


def _ldtilecfg(tree: Path, out: Path) -> tuple[str, bytes | None]:
    """The operand of the ldtilecfg that ggml_tile_config_init compiles to, and the 64 bytes it reads when they are
    in .rodata (None: they are on the stack)."""
    obj = out / "mmq.o"
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-O3",
            "-march=sapphirerapids",
            "-DGGML_AMX_INT8",
            "-c",
            str(tree / MMQ),
            "-o",
            str(obj),
            *_includes(tree),
        ],
        check=True,
        capture_output=True,
    )
    text = subprocess.run(
        ["objdump", "-dr", "--no-show-raw-insn", str(obj)], check=True, capture_output=True, text=True
    ).stdout
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "ldtilecfg" in line)
    operand = lines[at].split("ldtilecfg", 1)[1].split("#")[0].strip()
    reloc = re.search(r"R_X86_64_PC32\s+\.rodata\+0x([0-9a-f]+)", lines[at + 1]) if at + 1 < len(lines) else None
    if reloc is None:
        return operand, None
    offset = int(reloc.group(1), 16) + 4  # PC32: the addend is the offset minus the 4 bytes of the displacement
    subprocess.run(
        ["objcopy", "-O", "binary", "--only-section=.rodata", str(obj), str(out / "rodata.bin")],
        check=True,
        capture_output=True,
    )
    rodata = (out / "rodata.bin").read_bytes()
    return operand, rodata[offset : offset + 64]


def test_the_amx_tile_configuration_is_read_from_rodata_whatever_the_compiler(trees, tmp_path):
    pristine, patched = trees
    operand, config = _ldtilecfg(patched, tmp_path)
    assert "%rip" in operand and config is not None, operand
    # palette 1, start_row 0, 14 reserved bytes, colsb[16] (uint16), rows[16]: ggml's 16-16-32 layout
    assert config[0] == 1 and config[1] == 0
    colsb = [int.from_bytes(config[16 + 2 * i : 18 + 2 * i], "little") for i in range(8)]
    assert colsb == [64, 64, 32, 32, 64, 64, 64, 64]
    assert list(config[48:56]) == [8, 8, 16, 16, 16, 16, 16, 16]


def test_gcc_12_loads_an_empty_tile_configuration_from_the_pristine_tree(trees, tmp_path):
    """The fault class the patch removes, shown with this machine's compiler: GCC 12 keeps only the palette store."""
    version = subprocess.run(["g++", "-dumpversion"], capture_output=True, text=True, check=True).stdout.strip()
    if version.split(".")[0] != "12":
        pytest.skip(f"g++ {version}: the dropped stores are GCC 12's (later GCCs use a builtin)")
    pristine, _ = trees
    operand, config = _ldtilecfg(pristine, tmp_path)
    assert "%rsp" in operand and config is None, operand
    obj = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(tmp_path / "mmq.o")], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    at = next(i for i, line in enumerate(obj) if "ldtilecfg" in line)
    slot = operand.split("(")[0]
    stores = [line for line in obj[max(0, at - 12) : at] if f"{slot}(%rsp)" in line or "(%rsp)" in line]
    # zeroed (a vector store) and the palette byte set; no store of a row or column byte survives
    assert any("movb   $0x1," in line for line in stores), stores
    assert not any("movw" in line or "$0x40" in line or "$0x10," in line for line in stores), stores


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(
    not Path("/proc/cpuinfo").is_file()
    or "x86" not in subprocess.run(["uname", "-m"], capture_output=True, text=True).stdout,
    reason="an x86-64 Linux machine",
)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_patched_scorer_agrees_with_what_this_cpu_and_kernel_enable(trees, tmp_path, variant):
    _, patched = trees
    features, flags = VARIANTS[variant]
    lib = tmp_path / f"libscore-{variant}.so"
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-O2",
            "-shared",
            "-fPIC",
            "-DGGML_BACKEND_DL",
            "-DGGML_BACKEND_BUILD",
            "-DGGML_BACKEND_SHARED",
            *(f"-DGGML_{f}" for f in features),
            str(patched / FEATS),
            "-o",
            str(lib),
            *_includes(patched),
        ],
        check=True,
        capture_output=True,
    )
    score = ctypes.CDLL(str(lib)).ggml_backend_score()
    runnable = set(flags) <= _cpu_flags()
    assert (score > 0) == runnable, (variant, score, sorted(set(flags) - _cpu_flags()))


def test_the_op_test_with_the_long_position_cases_compiles(trees):
    """ops-long-positions adds cases to test-backend-ops (positions below 4,096, caches of 4,096 rows) that the
    smoke's ops subset selects by their parameters; the patched file must still compile, and name its new cases so."""
    pristine, patched = trees
    source = (patched / OP_TEST).read_text()
    assert "int mode, int n_ctx = 512)" not in (pristine / OP_TEST).read_text()
    assert "int mode, int n_ctx = 512)" in source and source.count("mode, 4096") == 2
    done = subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", f"-I{patched / 'ggml/include'}", str(patched / OP_TEST)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
