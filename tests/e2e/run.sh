#!/usr/bin/env bash
# End to end, inside the Debian ROCm root made by provision.sh (see tests/e2e/README.md):
#   rockbuild build --target gfx1151 --rocm /usr --source /src/llama.cpp --build-number 11312 --offline --out /e2e/out
# with rockbuild installed from a copy of this working tree into a venv in the root.
#
#   tests/e2e/run.sh [build]   build (incremental: a second run has no work to do), then print the figures
#   tests/e2e/run.sh cold      empty the ccache and the build dir first: a cold build (the benchmark's baseline)
#   tests/e2e/run.sh warm      remove the build dir, keep the ccache: a warm rebuild (the benchmark's rebuild)
#   tests/e2e/run.sh figures   print the figures of the last build without building
#   tests/e2e/run.sh clean     the bundle of the last build, in the clean root (no ROCm): rockbuild audit, then
#                              rockbuild smoke (llama-cli, llama-server + one chat completion, llama-bench) on the
#                              tiny Qwen3 model, with no LD_LIBRARY_PATH
#   tests/e2e/run.sh all       build, then clean (the issue's whole proof for one target); clean and all end with
#                              tests/e2e/deb.sh: the bundle's .deb installed, run and removed in the clean root
#   tests/e2e/run.sh common-part  bench/common_part.py in the ROCm root, cold (no ccache): linux-$TARGET built whole,
#                              then linux-cpu (the common part, by the root's clang) and linux-$TARGET on it (--common,
#                              ggml-hip alone); the figures in $E2E/bench/common-part-rocm.json; ~45 min on 2 cores
#   tests/e2e/run.sh mixed     all, for the mixed-GPU job linux-gfx1151+gfx1201 (ROCKBUILD_E2E_TARGET: other targets
#                              joined by "+"), checking that code objects and kernel files are of exactly those targets
#
# Each mode leaves $E2E/bench/<mode>.json (a copy of build.json). Later stages (bundle, smoke, clean-root) are
# functions called from main(). Needs root (chroot, mount). Env: ROCKBUILD_E2E (default /var/cache/rockbuild/e2e),
# ROCKBUILD_SRC (default /var/cache/rockbuild/src), ROCKBUILD_E2E_TARGET (default gfx1151), ROCKBUILD_E2E_JOBS.
set -euo pipefail

# shellcheck source=tests/e2e/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ROOT=$E2E/rocm-root
CLEAN=$E2E/clean-root
TARGET=${ROCKBUILD_E2E_TARGET:-gfx1151}
[[ ${1:-} == mixed ]] && TARGET=${ROCKBUILD_E2E_TARGET:-gfx1151+gfx1201}  # a mixed-GPU job: targets joined by "+"

OUT=/e2e/out
CCACHE_DIR_IN_ROOT=/e2e/ccache
JOB_ID=linux-$TARGET

[[ -x $ROOT/usr/bin/hipconfig && -f $E2E/.rocm-root.stamp ]] || die "$ROOT is not provisioned; run tests/e2e/provision.sh"

mount_root() {
    mount_proc "$ROOT"
    mount_source "$ROOT"
}

in_root() { chroot_env "$ROOT" "$@"; }

build_llama() {
    local mode=$1
    local job_dir=$ROOT$OUT/$JOB_ID
    case $mode in
        cold) rm -rf "${ROOT:?}$CCACHE_DIR_IN_ROOT" "$job_dir/build"; log "cold build: empty ccache, no build dir" ;;
        warm) rm -rf "$job_dir/build"; log "warm rebuild: no build dir, the ccache of the last build" ;;
        build) log "build (incremental)" ;;
    esac
    mkdir -p "$ROOT$CCACHE_DIR_IN_ROOT" "$BENCH"
    local web_ui=()
    host_web_ui "$ROOT"
    local start end
    start=$(date +%s.%N)
    in_root "$VENV/bin/rockbuild" build --target "$TARGET" --rocm /usr --source "$LLAMA_IN_ROOT" \
        --build-number "$LLAMA_BUILD_NUMBER" --offline --out "$OUT" --ccache-dir "$CCACHE_DIR_IN_ROOT" -j "$JOBS" \
        "${web_ui[@]}"
    end=$(date +%s.%N)
    log "rockbuild build took $(printf '%.1f' "$(echo "$end - $start" | bc)") s (wall, including configure)"
    cp "$job_dir/build.json" "$BENCH/$mode.json"
    check_build "$job_dir"
}

check_build() {
    local job_dir=$1
    python3 - "$job_dir/build.json" "$LLAMA_COMMIT" "${TARGET//+/;}" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))
llama = data["llama_cpp"]
problems = []
if data["status"] != "ok": problems.append(f"status {data['status']}")
if llama["commit"] != sys.argv[2]: problems.append(f"commit {llama['commit']} != {sys.argv[2]}")
if llama["build_number"] != "b11312": problems.append(f"build number {llama['build_number']}")
if data["cmake_definitions"].get("GPU_TARGETS") != sys.argv[3]: problems.append("GPU_TARGETS")
for name in ("ROCM_PATH", "HIP_PATH", "HIP_DEVICE_LIB_PATH"):
    if name in data["environment"]: problems.append(f"{name} set on a Debian layout")
names = {b["name"] for b in data["binaries"]}
for want in ("llama-cli", "llama-server", "llama-bench", "ggml-rpc-server", "llama-completion", "libggml-hip.so"):
    if want not in names: problems.append(f"{want} missing")
if problems:
    sys.exit("build.json check failed: " + "; ".join(problems))
print("[e2e] build.json: commit, build number, GPU_TARGETS, environment and binaries as expected")
EOF
    { in_root "$OUT/$JOB_ID/build/bin/llama-server" --version 2>&1 || true; } | grep -E 'version|built with' \
        | sed 's/^/[e2e]   llama-server --version: /' || true
}

figures() {
    local job_dir=$ROOT$OUT/$JOB_ID
    [[ -f $job_dir/build.json ]] || die "no build yet in $job_dir"
    local hip_objects lib
    hip_objects=$(find "$job_dir/build" -path '*ggml-hip.dir*' -name '*.cu.o' | wc -l)
    lib=$(readlink -f "$job_dir/build/bin/libggml-hip.so")
    python3 - "$job_dir/build.json" "$hip_objects" "$lib" "$(stat -c %s "$lib")" \
        "$(du -sx --block-size=1 "$job_dir/build" | cut -f1)" \
        "$(du -sx --block-size=1 "$ROOT$CCACHE_DIR_IN_ROOT" | cut -f1)" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))
d, ninja, cc = data["durations"], data["ninja"] or {}, data["ccache"] or {}
rate = cc.get("hit_rate")
rows = [
    ("job", data["job"]["id"] + " (" + ", ".join(data["gpu_targets"]) + ")"),
    ("llama.cpp", f"{data['llama_cpp']['build_number']} {data['llama_cpp']['commit']}"),
    ("ROCm", f"{data['rocm']['kind']} {data['rocm']['version']} (HIP {data['rocm']['hip_version']})"),
    ("compiler", data["compilers"]["cxx"]),
    ("configure", "skipped (unchanged)" if data["configure_skipped"] else f"{d['configure']:.1f} s"),
    ("compile", f"{d['compile']:.1f} s"),
    ("total", f"{d['total']:.1f} s"),
    ("ninja steps", f"{ninja.get('steps')} of {ninja.get('total')}" + (" (no work to do)" if ninja.get("no_work") else "")),
    ("objects compiled", ", ".join(f"{n} {k}" for k, n in ninja.get("objects", {}).items()) or "none"),
    ("HIP objects in build dir", sys.argv[2]),
    ("ccache", f"{cc.get('hits')} hits / {cc.get('misses')} misses" + (f" ({rate:.1%})" if rate is not None else "")),
    (sys.argv[3].rsplit("/", 1)[-1], f"{int(sys.argv[4]):,} bytes"),
    ("build dir", f"{int(sys.argv[5]):,} bytes"),
    ("ccache dir", f"{int(sys.argv[6]):,} bytes"),
]
width = max(len(k) for k, _ in rows)
print("[e2e] figures")
for key, value in rows:
    print(f"    {key:<{width}}  {value}")
EOF
}

# ---- the clean root: no ROCm, only python3 to run rockbuild's audit and smoke test --------------------------------

CLEAN_VENV=$VENV
BUNDLE_IN_CLEAN=/opt/bundle

in_clean() { chroot_env "$CLEAN" "$@"; }

mount_clean() {
    mount_proc "$CLEAN"
    bundle_mount "$ROOT$OUT/$JOB_ID/bundle" "$CLEAN$BUNDLE_IN_CLEAN"
    mkdir -p "$MODELS"
    bind_mount "$MODELS" "$CLEAN/models"
}

ensure_clean_python() {
    # python3 is the only thing added to the clean root, and it is not ROCm: checked below
    if [[ ! -x $CLEAN/usr/bin/python3 ]] || ! in_clean python3 -c 'import venv, ensurepip' 2>/dev/null; then
        log "installing python3 (only) into the clean root"
        echo 'Acquire::Check-Valid-Until "false";' > "$CLEAN/etc/apt/apt.conf.d/99no-check-valid-until"
        in_clean apt-get update -qq
        in_clean env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            python3 python3-venv ca-certificates >/dev/null
        in_clean apt-get clean
    fi
    if compgen -G "$CLEAN/usr/lib/x86_64-linux-gnu/libamdhip64*" >/dev/null \
        || compgen -G "$CLEAN/usr/lib/x86_64-linux-gnu/librocblas*" >/dev/null || [[ -e $CLEAN/opt/rocm ]]; then
        die "the clean root has ROCm in it; delete $CLEAN and its stamp, then run provision.sh"
    fi
    install_rockbuild "$CLEAN"
}

clean_root_checks() {
    [[ -f $ROOT$OUT/$JOB_ID/bundle/bundle.json ]] || die "no bundle in $ROOT$OUT/$JOB_ID; run: $0 build"
    [[ -d $CLEAN && -f $E2E/.clean-root.stamp ]] || die "$CLEAN is not provisioned; run tests/e2e/provision.sh"
    ensure_tiny_model "$ROOT"
    ensure_clean_python
    mount_clean
    mkdir -p "$E2E/bench"
    log "rockbuild audit in the clean root"
    in_clean "$CLEAN_VENV/bin/rockbuild" audit "$BUNDLE_IN_CLEAN" --targets "${TARGET//+/,}" --json > "$E2E/bench/audit-$TARGET.json"
    log "rockbuild smoke in the clean root (no ROCm, no LD_LIBRARY_PATH)"
    in_clean "$CLEAN_VENV/bin/rockbuild" smoke "$BUNDLE_IN_CLEAN" --model /models/tiny-qwen3.gguf --expect-gpu no \
        --report "/tmp/smoke-$TARGET.json" --json > "$E2E/bench/smoke-$TARGET.json"
    log "clean root: audit passed, smoke passed ($E2E/bench/smoke-$TARGET.json)"
    # only the five never-ship libraries may come from the root (proving-it-here.md §5)
    in_clean /usr/bin/env -i LD_DEBUG=libs "$BUNDLE_IN_CLEAN/llama-cli" --version 2>&1 \
        | grep 'calling init:' | grep -v "$BUNDLE_IN_CLEAN" | sed 's/.*calling init: //' | sort -u \
        > "$E2E/bench/from-root-$TARGET.txt" || true
    log "libraries loaded from the clean root: $(tr '\n' ' ' < "$E2E/bench/from-root-$TARGET.txt")"
    cpu_variant_checks
    browser_check
    # what a release asset of this bundle weighs (gzip, as the Linux .tar.gz)
    local gz=gzip
    command -v pigz >/dev/null && gz=pigz
    tar -C "$ROOT$OUT/$JOB_ID/bundle" -cf - . | "$gz" -6 | wc -c > "$E2E/bench/archive-$TARGET.bytes"
    cp "$ROOT$OUT/$JOB_ID/bundle/bundle.json" "$E2E/bench/bundle-$TARGET.json"
    summary
}

# The CPU variant this machine loads from the bundle, then the one it loads from a copy holding only the baseline
# (x64): GGML_CPU_ALL_VARIANTS' dispatch, seen from the programs' own log (load_backend: loaded CPU backend from ...).
cpu_variant_checks() {
    local model=/models/tiny-qwen3.gguf loaded only
    loaded=$(in_clean "$BUNDLE_IN_CLEAN/llama-completion" -m "$model" -p hi -n 1 -no-cnv --temp 0 -t 1 -lv 4 \
        </dev/null 2>&1 | grep -o 'loaded CPU backend from .*' | head -1 || true)
    [[ -n $loaded ]] || die "llama-completion did not say which CPU backend it loaded"
    log "this machine's CPU variant: ${loaded##*/}"
    only=/tmp/bundle-x64-only
    in_clean rm -rf "$only"
    in_clean cp -a "$BUNDLE_IN_CLEAN" "$only"
    in_clean find "$only" -maxdepth 1 -name 'libggml-cpu-*.so' ! -name libggml-cpu-x64.so -delete
    local baseline
    baseline=$(in_clean "$only/llama-completion" -m "$model" -p hi -n 1 -no-cnv --temp 0 -t 1 -lv 4 </dev/null 2>&1 \
        | grep -o 'loaded CPU backend from .*' | head -1 || true)
    in_clean rm -rf "$only"
    [[ ${baseline##*/} == libggml-cpu-x64.so ]] || die "with only the x64 variant left, the bundle loaded: ${baseline:-nothing}"
    log "with only the baseline left: ${baseline##*/}"
    printf '%s\n%s\n' "${loaded##*/}" "${baseline##*/}" > "$E2E/bench/cpu-variant-$TARGET.txt"
    du -s --block-size=1 "$ROOT$OUT/$JOB_ID/bundle" | cut -f1 > "$E2E/bench/disk-$TARGET.bytes"
    log "the bundle on disk: $(du -sh "$ROOT$OUT/$JOB_ID/bundle" | cut -f1) (du -sh; 494M-496M before, issue 27)"
}

# The chat page as a user meets it: llama-server from the bundle in the clean root, opened by a real browser (the host's
# chromium, driven by rockbuild's own check: it types a message and waits for the model's answer), screenshot kept.
browser_check() {
    if [[ -n ${ROCKBUILD_E2E_NO_WEBUI:-} ]] || ! command -v chromium >/dev/null || [[ ! -x $REPO/.venv/bin/python ]]; then
        log "no chromium (or no $REPO/.venv) on this host: the chat page was not opened in a browser"
        return 0
    fi
    local port pid rc=0
    port=$("$REPO/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    in_clean "$BUNDLE_IN_CLEAN/llama-server" -m /models/tiny-qwen3.gguf --host 127.0.0.1 --port "$port" -t 1 \
        > "$E2E/bench/web-ui-server-$TARGET.log" 2>&1 </dev/null &
    pid=$!
    "$REPO/.venv/bin/python" - "http://127.0.0.1:$port/" "$E2E/bench/web-ui-$TARGET.png" "$REPO/config/smoke.yaml" \
        > "$E2E/bench/web-ui-$TARGET.json" <<'PYEOF' || rc=$?
import json, sys, time
from pathlib import Path
import requests
from rockbuild.smoke.browser import check_chat
from rockbuild.smoke.config import load_smoke_config
url, shot, config = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
for _ in range(600):
    try:
        if requests.get(url + "health", timeout=2).status_code == 200:
            break
    except requests.RequestException:
        pass
    time.sleep(0.2)
page = requests.get(url, timeout=10)
result = check_chat(url, load_smoke_config(config).run.browser.page, screenshot=shot)
out = {"get": {"status": page.status_code, "content_type": page.headers.get("Content-Type"), "bytes": len(page.content)},
       "browser": result.to_dict()}
print(json.dumps(out, indent=2))
sys.exit(0 if page.status_code == 200 and result.result == "passed" else 1)
PYEOF
    # $pid is the subshell around chroot: the server is its grandchild, found by its port
    pkill -TERM -f -- "llama-server -m /models/tiny-qwen3.gguf --host 127.0.0.1 --port $port" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [[ $rc -eq 0 ]] || die "the chat page failed in the browser: $E2E/bench/web-ui-$TARGET.json"
    log "chat page: GET / and a real browser passed; screenshot $E2E/bench/web-ui-$TARGET.png"
}

summary() {
    # one table for every target proven so far (the figures of issue 6)
    python3 - "$E2E/bench" <<'PYEOF'
import glob, json, os, sys
bench = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(bench, name)))
    except (OSError, ValueError):
        return None
targets = sorted({os.path.basename(p)[len("smoke-"):-len(".json")] for p in glob.glob(os.path.join(bench, "smoke-*.json"))})
cold, warm = load("cold.json"), load("warm.json")
print("[e2e] summary")
if cold:
    print(f"    cold build ({', '.join(cold['gpu_targets'])}): {cold['durations']['total']:.0f} s, "
          f"{(cold.get('ninja') or {}).get('objects', {}).get('HIP', '?')} HIP objects")
if warm:
    print(f"    warm rebuild (fresh build dir, same ccache): {warm['durations']['total']:.1f} s, "
          f"ccache hit rate {((warm.get('ccache') or {}).get('hit_rate') or 0):.0%}")
for t in targets:
    smoke, bundle, audit = load(f"smoke-{t}.json"), load(f"bundle-{t}.json") or {}, load(f"audit-{t}.json") or {}
    try:
        archive = int(open(os.path.join(bench, f"archive-{t}.bytes")).read())
    except (OSError, ValueError):
        archive = 0
    kernels = bundle.get("kernels") or {}
    kept = (kernels.get("kept") or {}).get("files", "?")
    dropped = (kernels.get("dropped") or {}).get("files", "?")
    runs = (smoke or {}).get("runs", {})
    cli = runs.get("cli", {})
    tg = next((b["tokens_per_second"] for b in runs.get("bench", {}).get("bench", []) if b.get("n_gen")), None)
    count = lambda v: v if isinstance(v, int) else len(v or [])  # noqa: E731
    print(f"    {t}: bundle {count(bundle.get('files'))} files + {count(bundle.get('data_files'))} kernel files, "
          f"{bundle.get('total_bytes', 0):,} bytes; .tar.gz {archive:,} bytes; kernel files kept/dropped {kept}/{dropped}")
    print(f"    {t}: audit {'passed' if audit.get('ok') else 'FAILED'}; smoke {'passed' if (smoke or {}).get('ok') else 'FAILED'}: "
          f"llama-cli {cli.get('tokens')} tokens at {cli.get('tokens_per_second')} t/s (CPU), server answered: "
          f"{runs.get('server', {}).get('ok')}, llama-bench tg16 {tg} t/s; {(smoke or {}).get('gpu', {}).get('summary')}")
PYEOF
}

# the bundle of a mixed-GPU job holds GPU code and kernel files of exactly its targets: rockbuild's reader over every
# offload bundle of each fat binary, clang-offload-bundler on libggml-hip's first bundle, the kernel file names
check_exact_targets() {
    in_root "$VENV/bin/python" - "$OUT/$JOB_ID/bundle" "${TARGET//+/,}" <<'EOF'
import os, subprocess, sys, tempfile
from pathlib import Path
from rockbuild.bundle.fatbin import read_fatbin
from rockbuild.rocm.layout import kernel_file_target
bundle, want = Path(sys.argv[1]), set(sys.argv[2].split(","))
problems = []
for lib in sorted(p for p in bundle.iterdir() if ".so" in p.name and p.is_file()):
    report = read_fatbin(lib)
    if report is None:
        continue
    print(f"[e2e]   {lib.name}: {len(report.bundles)} offload bundles, targets {' '.join(report.targets)}")
    if set(report.targets) != want:
        problems.append(f"{lib.name} has {','.join(report.targets)}")
    if lib.name.startswith("libggml-hip"):
        with tempfile.TemporaryDirectory() as tmp:
            fatbin = Path(tmp) / "fatbin"
            subprocess.run(["objcopy", "-O", "binary", "--only-section=.hip_fatbin", str(lib), str(fatbin)], check=True)
            listed = subprocess.run(["/usr/lib/llvm-22/bin/clang-offload-bundler", "--list", "--type=o",
                                     f"--input={fatbin}"], check=True, capture_output=True, text=True).stdout.split()
        print(f"[e2e]   clang-offload-bundler --list, {lib.name}'s first bundle: {' '.join(listed)}")
        if {x.rsplit("--", 1)[-1] for x in listed if x.startswith("hip")} != want:
            problems.append(f"clang-offload-bundler lists {listed}")
kernels = {}
for _dir, _dirs, files in os.walk(bundle):
    for name in files:
        target = kernel_file_target(name)
        if target:
            kernels[target] = kernels.get(target, 0) + 1
print(f"[e2e]   kernel files per target: {dict(sorted(kernels.items()))}")
if set(kernels) != want:
    problems.append(f"kernel files for {sorted(kernels)}")
if problems:
    sys.exit("[e2e] not exactly " + ",".join(sorted(want)) + ": " + "; ".join(problems))
print(f"[e2e] the bundle holds GPU code and kernel files of exactly {', '.join(sorted(want))}")
EOF
}

common_part() {
    ensure_source
    mount_root
    install_rockbuild "$ROOT"
    mkdir -p "$BENCH"
    printf 'matrix:\n  os: [linux]\n  target: [%s]\n  include:\n    - {os: linux, backend: cpu}\n' "$TARGET" \
        > "$ROOT/e2e/split-matrix.yaml"
    # the root has no cc/c++: its clang compiles the CPU job as it compiles the host code of the HIP one
    in_root CC=/usr/lib/llvm-22/bin/clang CXX=/usr/lib/llvm-22/bin/clang++ "$VENV/bin/python" \
        "$RB_SRC/bench/common_part.py" --source "$LLAMA_IN_ROOT" --build-number "$LLAMA_BUILD_NUMBER" \
        -c /e2e/split-matrix.yaml --gpu-job "$JOB_ID" --common-job linux-cpu --gpu-args "--rocm /usr" \
        --work /e2e/bench-common-part -j "$JOBS" --rockbuild "$VENV/bin/rockbuild" --json \
        > "$BENCH/common-part-rocm.json"
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({k: r[k] for k in ("ratio_per_job", "ratio_per_job_cpu", "projected", "projected_cpu")}))' "$BENCH/common-part-rocm.json"
    # the job built on the common part, bundled and audited (backend-abi: libggml-hip against the common part's
    # libggml-base), then run in the clean root (no ROCm) as a release's user runs it
    local split=/e2e/bench-common-part/out-split
    in_root "$VENV/bin/rockbuild" bundle "$split/$JOB_ID/bin" --rocm /usr --targets "${TARGET//+/,}" \
        --out "$split/$JOB_ID/bundle"
    in_root "$VENV/bin/rockbuild" audit "$split/$JOB_ID/bundle" --targets "${TARGET//+/,}" --json \
        > "$BENCH/common-part-audit-$TARGET.json"
    ensure_tiny_model "$ROOT"
    ensure_clean_python
    OUT=$split
    mount_clean
    [[ -x $CLEAN$CLEAN_VENV/bin/rockbuild ]] || install_rockbuild "$CLEAN"
    in_clean "$CLEAN_VENV/bin/rockbuild" smoke "$BUNDLE_IN_CLEAN" --model /models/tiny-qwen3.gguf --expect-gpu no \
        --report "/tmp/smoke-common-$TARGET.json" --json > "$BENCH/common-part-smoke-$TARGET.json"
    log "the bundle of $JOB_ID on the common part: audit and smoke passed in the clean root"
}

main() {
    local mode=${1:-build}
    case $mode in
        build | cold | warm | figures | clean | all | summary | mixed) ;;
        common-part) common_part; log "done in ${SECONDS} s"; return ;;
        *) die "unknown mode $mode (build, cold, warm, figures, clean, all, summary, mixed, common-part)" ;;
    esac
    local mixed=0
    [[ $mode == mixed ]] && mixed=1 && mode=all
    if [[ $mode == figures ]]; then
        figures
        return
    fi
    if [[ $mode == summary ]]; then
        summary
        return
    fi
    ensure_source
    mount_root
    # `clean` alone reuses the root's rockbuild when there is one (a build of another target may be using it)
    if [[ $mode != clean || ! -x $ROOT$VENV/bin/rockbuild ]]; then
        install_rockbuild "$ROOT"
    fi
    if [[ $mode != clean ]]; then
        build_llama "${mode/all/build}"
        figures
    fi
    if ((mixed)); then
        check_exact_targets
    fi
    if [[ $mode == clean || $mode == all ]]; then
        clean_root_checks
        # the .deb of the same bundle, installed and run in the clean root (tests/e2e/deb.sh)
        ROCKBUILD_E2E_TARGET=$TARGET "$REPO/tests/e2e/deb.sh"
    fi
    log "done in ${SECONDS} s"
}

main "$@"
