#!/usr/bin/env bash
# The .deb of the last ROCm build (run.sh), proven in the clean root (no ROCm): build it from the bundle with this
# working tree's rockbuild (twice: the same bytes), lintian it, `dpkg -i` it in the clean root (dpkg pulls nothing: the
# root must already hold every Depends, and holds no ROCm), run llama-cli through its /usr/bin wrapper (--version,
# then a short generation on the tiny Qwen3 model: no GPU here, so the ROCm backend finds no device and llama.cpp
# runs on the CPU), then `dpkg -r` and check that nothing is left under /opt/rockbuild or in /usr/bin.
#
#   tests/e2e/deb.sh          (run.sh clean/all calls it after the clean-root smoke test)
#
# Leaves $E2E/bench/deb-<target>.json (figures) and deb-lintian-<target>.txt. Needs root (chroot, mount), the bundle
# of run.sh in the ROCm root and the clean root of provision.sh; builds nothing. Env: as run.sh, plus ROCKBUILD_PYTHON
# (default: this checkout's .venv/bin/python) and ROCKBUILD_E2E_TAG (default b11312).
set -euo pipefail

# shellcheck source=tests/e2e/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TARGET=${ROCKBUILD_E2E_TARGET:-gfx1151}
TAG=${ROCKBUILD_E2E_TAG:-b$LLAMA_BUILD_NUMBER}
PYTHON=${ROCKBUILD_PYTHON:-$REPO/.venv/bin/python}
JOB_DIR=$E2E/rocm-root/e2e/out/linux-$TARGET
CLEAN=$E2E/clean-root
WORK=$E2E/deb
DEB=$WORK/$TARGET.deb
PACKAGE=rockbuild-llama-$(echo "$TARGET" | tr '+A-Z' '-a-z')
ROOT_PATH=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin  # dpkg wants the sbin folders

[[ -f $JOB_DIR/bundle/bundle.json ]] \
    || die "no bundle in $JOB_DIR (the .deb is made from run.sh's build; run: tests/e2e/run.sh build)"
[[ -d $CLEAN && -f $E2E/.clean-root.stamp ]] || die "$CLEAN is not provisioned; run tests/e2e/provision.sh"
[[ -x $PYTHON ]] || die "$PYTHON is missing: make this checkout's venv (python3 -m venv .venv && .venv/bin/pip install -e '.[build]')"
command -v dpkg-deb >/dev/null || die "dpkg-deb is missing on this host (apt-get install dpkg)"
[[ -f $MODELS/tiny-qwen3.gguf ]] || die "no tiny model in $MODELS; run tests/e2e/run.sh clean first"

in_clean() { chroot_env "$CLEAN" "$ROOT_PATH" "$@"; }

build_deb() {
    # what `rockbuild publish` does for this job's .deb asset (write_deb, the archives' timestamp), without the
    # release around it (this root's bundle is above the release's glibc floor: the publish gate would stop it)
    "$PYTHON" - "$JOB_DIR" "$1" "$TAG" <<'EOF'
import sys
from pathlib import Path
from rockbuild.publish.deb import write_deb
from rockbuild.publish.jobs import load_job
from rockbuild.publish.release import archive_mtime
from rockbuild.publish.config import load_publish_config
job = load_job(Path(sys.argv[1]))
write_deb(job, sys.argv[3], Path(sys.argv[2]), load_publish_config(), mtime=archive_mtime(job, None))
EOF
}

seconds_since() { echo "$(date +%s.%N) - $1" | bc; }

main() {
    mkdir -p "$WORK" "$BENCH"
    rm -f "$DEB" "$DEB.again"
    local start build_s again_s lintian_s install_s remove_s lintian_rc=skipped
    log "building $DEB from $JOB_DIR/bundle (tag $TAG)"
    start=$(date +%s.%N); build_deb "$DEB"; build_s=$(seconds_since "$start")
    start=$(date +%s.%N); build_deb "$DEB.again"; again_s=$(seconds_since "$start")
    cmp -s "$DEB" "$DEB.again" || die "two builds of the .deb from the same bundle and tag differ"
    rm -f "$DEB.again"
    log "built twice, byte-identical: $(stat -c %s "$DEB") bytes, $(printf '%.1f' "$build_s") s"
    dpkg-deb --field "$DEB" Package Version Depends Installed-Size | sed 's/^/[e2e]   /'
    if dpkg-deb --field "$DEB" Depends | grep -Eiq 'rocm|hip|amd'; then
        die "the .deb depends on a ROCm package: $(dpkg-deb --field "$DEB" Depends)"
    fi
    if command -v lintian >/dev/null; then
        log "lintian (errors and warnings fail it; the infos are listed)"
        start=$(date +%s.%N)
        lintian_rc=0
        lintian --fail-on error,warning --display-info "$DEB" > "$BENCH/deb-lintian-$TARGET.txt" 2>&1 || lintian_rc=$?
        lintian_s=$(seconds_since "$start")
        sed 's/^/[e2e]   /' "$BENCH/deb-lintian-$TARGET.txt"
        [[ $lintian_rc == 0 ]] || die "lintian failed ($lintian_rc): $BENCH/deb-lintian-$TARGET.txt"
    else
        log "lintian is not installed here (apt-get install -y --no-install-recommends lintian): not run"
    fi

    if compgen -G "$CLEAN/usr/lib/x86_64-linux-gnu/libamdhip64*" >/dev/null || [[ -e $CLEAN/opt/rocm ]]; then
        die "the clean root has ROCm in it; delete $CLEAN and its stamp, then run provision.sh"
    fi
    if in_clean dpkg-query -W "$PACKAGE" >/dev/null 2>&1; then
        log "removing $PACKAGE left by an earlier run"
        in_clean dpkg -r "$PACKAGE" >/dev/null
    fi
    mount_proc "$CLEAN"
    bind_mount "$MODELS" "$CLEAN/models" ro
    mkdir -p "$CLEAN/tmp/deb"
    cp "$DEB" "$CLEAN/tmp/deb/"
    log "dpkg -i in the clean root (dpkg installs no dependency: the root must already satisfy Depends)"
    start=$(date +%s.%N)
    in_clean dpkg -i "/tmp/deb/$(basename "$DEB")"
    install_s=$(seconds_since "$start")
    rm -rf "$CLEAN/tmp/deb"
    in_clean update-alternatives --display llama-server | sed 's/^/[e2e]   /'
    local version
    version=$(in_clean /usr/bin/llama-cli --version 2>&1) || die "/usr/bin/llama-cli --version failed: $version"
    echo "$version" | grep -E 'version|built with' | sed 's/^/[e2e]   llama-cli --version: /'
    log "a short generation through /usr/bin/llama-cli (no GPU here: the CPU runs it)"
    local out
    out=$(in_clean /usr/bin/llama-cli -m /models/tiny-qwen3.gguf -p "Hello" -n 16 -st -t "$JOBS" --temp 0 --seed 42 \
        -c 512 2>&1 </dev/null) || { echo "$out" | tail -20; die "llama-cli through /usr/bin failed"; }
    echo "$out" | grep -E 'no ROCm-capable device|Generation:' | sed 's/^/[e2e]   /' || true
    echo "$out" | grep -q 'Generation:' || { echo "$out" | tail -20; die "llama-cli printed no generation figures"; }
    log "dpkg -r"
    start=$(date +%s.%N)
    in_clean dpkg -r "$PACKAGE"
    remove_s=$(seconds_since "$start")
    local left
    left=$(find "$CLEAN/opt/rockbuild" "$CLEAN/usr/lib/$PACKAGE" "$CLEAN/usr/share/doc/$PACKAGE" \
        -mindepth 0 2>/dev/null || true)
    left+=$(find "$CLEAN/usr/bin" "$CLEAN/etc/alternatives" -name 'llama-*' -o -name 'ggml-*' 2>/dev/null || true)
    [[ -z $left ]] || die "dpkg -r left files behind: $left"
    log "removed: nothing left under /opt/rockbuild, /usr/bin or /etc/alternatives"
    python3 - "$BENCH/deb-$TARGET.json" "$DEB" "$build_s" "$again_s" "${lintian_s:-0}" "$lintian_rc" "$install_s" \
        "$remove_s" "$(dpkg-deb --field "$DEB" Installed-Size)" "$(dpkg-deb --field "$DEB" Depends)" <<'EOF'
import json, os, sys
out, deb, build, again, lintian, lintian_rc, install, remove, kib, depends = sys.argv[1:]
figures = {"deb": os.path.basename(deb), "bytes": os.path.getsize(deb), "installed_kib": int(kib),
           "depends": depends, "build_seconds": round(float(build), 1), "rebuild_seconds": round(float(again), 1),
           "reproducible": True, "lintian": lintian_rc, "lintian_seconds": round(float(lintian), 1),
           "install_seconds": round(float(install), 1), "remove_seconds": round(float(remove), 1)}
json.dump(figures, open(out, "w"), indent=1)
print("[e2e] .deb figures: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
EOF
    log "done in ${SECONDS} s"
}

main "$@"
