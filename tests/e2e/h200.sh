#!/usr/bin/env bash
# The GPU lane's proof on the lent NVIDIA H200 (docs/gpu.md): the Linux Vulkan bundle, built here, run there with
# rockbuild's own commands, the way the workflow's GPU leg runs it.
#
#   tests/e2e/h200.sh prepare    here (Debian 12, root): build the Vulkan bundle with this host's glibc (2.36; the
#                                H200 machine has 2.39, sid's 2.43 does not run there), and put in .h200/ (ignored by
#                                git) everything the device needs: the bundle, rockbuild's wheels, the Vulkan loader
#                                and glvnd packages, the Qwen2 vocab
#   tests/e2e/h200.sh device     there ($OUT set by the device tool): install rockbuild from the wheels, make a
#                                Qwen3-0.6B-shaped GGUF (random weights, real shapes), then rockbuild doctor --bundle,
#                                rockbuild smoke --expect-gpu yes --bench gpu, rockbuild compare GPU vs CPU; the
#                                reports go to $OUT
#   tests/e2e/h200.sh threads    there: bench/gpu_threads.py (llama-bench pp512/tg128 with 1, 2, 4, 8 threads, x5)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CARRY=$REPO/.h200
WORK=${ROCKBUILD_H200:-/var/cache/rockbuild/h200}
SRC_TARBALL=${ROCKBUILD_SRC:-/var/cache/rockbuild/src}/llama_cpp_python-0.3.36.tar.gz
LLAMA_COMMIT=0c1e57098bba43ac29e6e3b677cdceebdd22334f

log() { printf '[h200 %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

prepare() {
    # Debian's glslc and Vulkan loader, for this build only: removed again at the end (nothing else here needs them)
    local installed=()
    command -v glslc >/dev/null || installed=(glslc libvulkan-dev libvulkan1 libshaderc1)
    [ ${#installed[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends glslc libvulkan-dev
    trap '[ ${#installed[@]} -eq 0 ] || apt-get remove -y -qq "${installed[@]}"' RETURN
    mkdir -p "$WORK/include" "$CARRY"
    grep -qx '/.h200/' "$REPO/.git/info/exclude" 2>/dev/null || echo '/.h200/' >> "$REPO/.git/info/exclude"
    # Debian 12's Vulkan headers (1.3.239) predate VK_EXT_layer_settings, which llama.cpp uses: take newer headers
    # (header-only) from the provisioned sid root; the loader it links is this host's libvulkan1
    local sid=/var/cache/rockbuild/e2e/vulkan-root/usr
    for d in vulkan vk_video spirv; do
        [ -d "$WORK/include/$d" ] || cp -a "$sid/include/$d" "$WORK/include/"
    done
    # ggml-vulkan finds the SPIR-V headers through their CMake package: sid's, relocated under $WORK
    mkdir -p "$WORK/share/cmake"
    [ -d "$WORK/share/cmake/SPIRV-Headers" ] || cp -a "$sid/share/cmake/SPIRV-Headers" "$WORK/share/cmake/"
    if [ ! -d "$WORK/src" ]; then mkdir -p "$WORK/src" && tar -xzf "$SRC_TARBALL" -C "$WORK/src"; fi
    local tree=$WORK/src/llama_cpp_python-0.3.36/vendor/llama.cpp
    cat > "$WORK/matrix.yaml" <<EOF
options:
  cmake: {Vulkan_INCLUDE_DIR: $WORK/include, CMAKE_PREFIX_PATH: $WORK}
matrix:
  os: [linux]
  backend: [vulkan]
EOF
    log "rockbuild build --job linux-vulkan (Debian 12: glibc 2.36)"
    "$REPO/.venv/bin/rockbuild" build -c "$WORK/matrix.yaml" --job linux-vulkan --source "$tree" \
        --build-number 11312 --commit "$LLAMA_COMMIT" --offline --out "$WORK/out" -j 2 --json > "$WORK/build.json"
    "$REPO/.venv/bin/rockbuild" audit "$WORK/out/linux-vulkan/bundle" --max-version GLIBC=2.39 > "$WORK/audit.txt"
    tar -C "$WORK/out/linux-vulkan" -cf - bundle | zstd -q -19 -T2 -f -o "$CARRY/bundle.tar.zst"
    cp "$tree/models/ggml-vocab-qwen2.gguf" "$CARRY/"
    rm -rf "$CARRY/wheels" && mkdir -p "$CARRY/wheels"
    (cd "$REPO" && .venv/bin/pip wheel -q --no-deps -w "$CARRY/wheels" .)
    # the device has numpy (its torch venv); everything else doctor, smoke and compare import, for Python 3.12
    "$REPO/.venv/bin/pip" download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any --no-deps \
        -d "$CARRY/wheels" click requests urllib3 idna certifi charset-normalizer pyyaml jinja2 markupsafe rich \
        markdown-it-py mdurl pygments bracex filelock pyelftools pefile zstandard "gguf>=0.19" tqdm sentencepiece \
        typing_extensions
    mkdir -p "$CARRY/debs" /tmp/amd64/partial
    local o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
    apt-get "${o[@]}" update -qq
    (cd "$CARRY/debs" && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
    du -sh "$CARRY" >&2
    log "ready: $CARRY"
}

# the device's set-up: the Vulkan loader and glvnd from .h200/debs, rockbuild from the wheels, the bundle in /tmp/job,
# the Qwen3-0.6B-shaped model in /tmp/qwen3-0.6b-shaped.gguf
setup_device() {
    : "${OUT:?run me through the device tool}"
    for f in .h200/debs/*.deb; do dpkg -x "$f" /; done
    ldconfig
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    # the machine's python3 (a venv with numpy) gets rockbuild and what it imports beside it, from the wheels
    python3 -m pip install -q --no-index --no-deps --target /tmp/rbsite .h200/wheels/*.whl
    export PYTHONPATH=/tmp/rbsite
    rb() { python3 -m rockbuild "$@"; }
    rb --version | tee "$OUT/versions.txt"
    ldd --version | sed -n 1p >> "$OUT/versions.txt"
    nvidia-smi -L >> "$OUT/versions.txt" 2>&1 || true
    mkdir -p /tmp/job
    python3 -c 'import sys, tarfile, zstandard; tarfile.open(fileobj=zstandard.ZstdDecompressor().stream_reader(open(sys.argv[1], "rb")), mode="r|").extractall(sys.argv[2], filter="tar")' .h200/bundle.tar.zst /tmp/job
    python3 - <<'PY'
# a Qwen3-0.6B-shaped GGUF: the real architecture and tensor shapes, random F16 weights (speed does not depend on
# the values), from rockbuild's tiny-model writer
from pathlib import Path
from rockbuild.smoke.models import generate_tiny_qwen3
from rockbuild.smoke.models import QWEN3_0_6B_SHAPE
generate_tiny_qwen3(Path(".h200/ggml-vocab-qwen2.gguf"), Path("/tmp/qwen3-0.6b-shaped.gguf"), seed=0,
                    shape=QWEN3_0_6B_SHAPE)
PY
    stat -c '%n %s bytes' /tmp/qwen3-0.6b-shaped.gguf | tee -a "$OUT/versions.txt"
}

device() {
    setup_device
    rb() { python3 -m rockbuild "$@"; }
    set +e
    rb doctor --bundle /tmp/job/bundle > "$OUT/doctor.txt" 2>&1; echo "doctor exit $?" >> "$OUT/doctor.txt"
    rb smoke /tmp/job --model /tmp/qwen3-0.6b-shaped.gguf --expect-gpu yes --bench gpu \
        --report "$OUT/gpu-smoke.json" > "$OUT/smoke.txt" 2>&1; echo "smoke exit $?" >> "$OUT/smoke.txt"
    rb compare /tmp/job/bundle --model /tmp/qwen3-0.6b-shaped.gguf -r 3 --json > "$OUT/compare-gpu.json" \
        2> "$OUT/compare-gpu.txt"
    GGML_VK_VISIBLE_DEVICES='' rb compare /tmp/job/bundle --model /tmp/qwen3-0.6b-shaped.gguf -r 3 --ngl 0 \
        --threads 16 --json > "$OUT/compare-cpu.json" 2> "$OUT/compare-cpu.txt"
    set -e
}

# llama-bench's thread count for the GPU smoke leg's figures: bench/gpu_threads.py on the GPU
threads() {
    setup_device
    python3 "$REPO/bench/gpu_threads.py" /tmp/job/bundle /tmp/qwen3-0.6b-shaped.gguf --threads 1,2,4,8 -r 5 \
        --json "$OUT/gpu-threads.json" | tee "$OUT/gpu-threads.txt"
}

case ${1:-} in
    prepare) prepare ;;
    device) device ;;
    threads) threads ;;
    *) echo "usage: $0 prepare|device|threads" >&2; exit 2 ;;
esac
