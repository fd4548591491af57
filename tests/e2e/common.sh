# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are for the scripts that source this file
# What run.sh (ROCm) and vulkan.sh share: paths, the pinned llama.cpp source, logging, a clean environment for
# chroot commands, and installing a copy of this working tree into a root's venv. Sourced, never run.

E2E=${ROCKBUILD_E2E:-/var/cache/rockbuild/e2e}
SRC=${ROCKBUILD_SRC:-/var/cache/rockbuild/src}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
JOBS=${ROCKBUILD_E2E_JOBS:-$(nproc)}
BENCH=$E2E/bench
MODELS=$E2E/models

# The pinned llama.cpp: vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist (provision.sh downloads and checks it).
LLAMA_SDIST=llama_cpp_python-0.3.36.tar.gz
LLAMA_SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMA_UNPACKED=$SRC/llama_cpp_python-0.3.36
LLAMA_COMMIT=0c1e57098bba43ac29e6e3b677cdceebdd22334f
LLAMA_BUILD_NUMBER=11312  # the sdist's git is shallow: git cannot tell it

# Paths as a root sees them
VENV=/opt/rockbuild-venv
RB_SRC=/opt/rockbuild-src
LLAMA_IN_ROOT=/src/llama.cpp

log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "error: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (chroot and mount need it)"

# shellcheck source=tests/e2e/mounts.sh
source "$REPO/tests/e2e/mounts.sh"

# A command in a root gets only these variables (no token of ours can leak in).
ROOT_ENV=(PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 "TERM=${TERM:-dumb}" PIP_DISABLE_PIP_VERSION_CHECK=1)
[[ -n ${CI:-} ]] && ROOT_ENV+=("CI=$CI")
# The host may reach PyPI through its own CA bundle; pip in every root gets the same one.
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    ROOT_ENV+=(PIP_CERT=/e2e/host-ca.crt)
fi

# chroot_env ROOT [VAR=VALUE...] COMMAND...: COMMAND in ROOT with ROOT_ENV (plus the VAR=VALUEs, via env)
chroot_env() {
    local root=$1
    shift
    if [[ -f /etc/ssl/certs/ca-certificates.crt && ! -f $root/e2e/host-ca.crt ]]; then
        mkdir -p "$root/e2e"
        cp /etc/ssl/certs/ca-certificates.crt "$root/e2e/host-ca.crt"
    fi
    chroot "$root" /usr/bin/env -i "${ROOT_ENV[@]}" "$@"
}

ensure_source() {
    if [[ -f $LLAMA_UNPACKED/vendor/llama.cpp/CMakeLists.txt ]]; then
        log "llama.cpp source: $LLAMA_UNPACKED already unpacked"
        return
    fi
    [[ -f $SRC/$LLAMA_SDIST ]] || die "$SRC/$LLAMA_SDIST is missing; run tests/e2e/provision.sh"
    echo "$LLAMA_SDIST_SHA256  $SRC/$LLAMA_SDIST" | sha256sum -c --quiet - || die "$SRC/$LLAMA_SDIST: wrong sha256"
    rm -rf "$LLAMA_UNPACKED.partial"
    mkdir -p "$LLAMA_UNPACKED.partial"
    tar -xzf "$SRC/$LLAMA_SDIST" -C "$LLAMA_UNPACKED.partial" --strip-components=1
    mv "$LLAMA_UNPACKED.partial" "$LLAMA_UNPACKED"
    log "llama.cpp source: unpacked $LLAMA_SDIST into $LLAMA_UNPACKED"
}

# mount_source ROOT: the unpacked sdist, whole, at ROOT/src (vendor/llama.cpp/.git points at ../../.git/modules/...,
# so git still names the commit), and /src/llama.cpp pointing at its vendor/llama.cpp
mount_source() {
    bind_mount "$LLAMA_UNPACKED" "$1/src/llama_cpp_python-0.3.36"
    ln -sfn llama_cpp_python-0.3.36/vendor/llama.cpp "$1$LLAMA_IN_ROOT"
}

copy_repo() {
    # a copy of the working tree (what is being tested, committed or not), without VCS data and build leftovers
    rm -rf "$1"
    mkdir -p "$1"
    tar -C "$REPO" --exclude=.git --exclude=__pycache__ --exclude='*.egg-info' --exclude=.venv --exclude=out \
        --exclude=.mypy_cache --exclude=.ruff_cache --exclude=.pytest_cache -cf - . | tar -C "$1" -xf -
}

# install_rockbuild ROOT: this working tree, editable, into ROOT's $VENV (pip only re-resolves the dependencies)
install_rockbuild() {
    local root=$1
    copy_repo "$root$RB_SRC"
    [[ -x $root$VENV/bin/python ]] || { log "creating $VENV in $root"; chroot_env "$root" python3 -m venv "$VENV"; }
    chroot_env "$root" "$VENV/bin/pip" install --quiet --editable "${RB_SRC}[build,tiny]"
    log "rockbuild in $root: $(chroot_env "$root" "$VENV/bin/rockbuild" --version)"
}

# What every command under wine gets on top of ROOT_ENV (windows.sh, night.sh; with its own WINEPREFIX): no debug
# chatter, no desktop, no debugger on a crash (winedbg would print pages of backtrace; wine then prints one
# "Unhandled ..." line)
WINE_QUIET=(WINEDEBUG=-all "WINEDLLOVERRIDES=winemenubuilder.exe=d;winedbg.exe=d")

# ensure_wine_prefix ROOT PREFIX: a wine prefix at PREFIX (as ROOT sees it), made once with wineboot
ensure_wine_prefix() {
    local root=$1 prefix=$2
    [[ -f $root$prefix/system.reg ]] && return
    log "$(basename "$root"): wineboot --init (a new prefix, $prefix)"
    chroot_env "$root" "WINEPREFIX=$prefix" "${WINE_QUIET[@]}" wine64 wineboot --init
    chroot_env "$root" "WINEPREFIX=$prefix" /usr/lib/x86_64-linux-gnu/wine/wineserver --wait || true
}

# ensure_tiny_model ROOT: the random-weight Qwen3 GGUF of llama-source-and-tiny-model.md in $MODELS, made in ROOT
# (which has rockbuild installed and the source mounted) from the vocab in the pinned source tree
ensure_tiny_model() {
    local root=$1
    [[ -f $MODELS/tiny-qwen3.gguf ]] && return
    mkdir -p "$root/e2e/models" "$MODELS"
    chroot_env "$root" "$VENV/bin/python" -c 'import gguf' 2>/dev/null \
        || chroot_env "$root" "$VENV/bin/pip" install --quiet "gguf>=0.19"
    chroot_env "$root" "$VENV/bin/python" -c "
from pathlib import Path
from rockbuild.smoke.models import generate_tiny_qwen3
generate_tiny_qwen3(Path('$LLAMA_IN_ROOT/models/ggml-vocab-qwen2.gguf'), Path('/e2e/models/tiny-qwen3.gguf'))
"
    cp "$root/e2e/models/tiny-qwen3.gguf" "$MODELS/tiny-qwen3.gguf"
    log "tiny model: $(sha256sum "$MODELS/tiny-qwen3.gguf" | cut -c1-16)..., $(stat -c %s "$MODELS/tiny-qwen3.gguf") bytes"
}

# host_web_ui ROOT: llama-server's chat page. The roots have no npm, so the host's rockbuild builds the UI once (cached
# by the tree's tools/ui; the workflow's prepare leg does the same) into ROOT/e2e/webui; sets the caller's web_ui array
# to the build's --web-ui /e2e/webui, or leaves it empty (the bundle then has no chat page) with a warning
host_web_ui() {
    local root=$1
    if [[ -z ${ROCKBUILD_E2E_NO_WEBUI:-} ]] && command -v npm >/dev/null && [[ -x $REPO/.venv/bin/rockbuild ]]; then
        rm -rf "$root/e2e/webui"
        if "$REPO/.venv/bin/rockbuild" webui --source "$LLAMA_UNPACKED/vendor/llama.cpp" \
                --build-number "$LLAMA_BUILD_NUMBER" --cache "${ROCKBUILD_E2E_CACHE:-$E2E/..}" --out "$root/e2e/webui"; then
            web_ui=(--web-ui /e2e/webui)
        else
            log "warning: the web UI could not be built on this host; the bundle has none"
        fi
    else
        log "no npm (or no $REPO/.venv) on this host: the bundle has no web UI"
    fi
}
