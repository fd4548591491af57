#!/usr/bin/env bash
# Provision the roots the end-to-end tests run in (see tests/e2e/README.md):
#   $ROCKBUILD_E2E/rocm-root   Debian sid minbase + ROCm 7.2 from experimental (the build root)
#   $ROCKBUILD_E2E/clean-root  Debian sid minbase without ROCm (the run root for bundles)
#   $ROCKBUILD_E2E/vulkan-root Debian sid minbase + glslc, Vulkan headers, g++ (the Vulkan flavour's build root)
#   $ROCKBUILD_E2E/lavapipe-root Debian sid minbase + the Vulkan loader and Mesa's lavapipe, no ROCm, no compiler
#                              (a host with a Vulkan driver: runs Vulkan bundles, and ROCm bundles on the CPU)
#   $ROCKBUILD_E2E/mingw-root  Debian sid minbase + mingw-w64 (posix threads), cmake, ninja (the Windows cross build root)
#   $ROCKBUILD_E2E/wine-root   Debian sid minbase + wine64 and python3, no compiler, no mingw runtime (a Windows host:
#                              runs Windows bundles under wine)
#   $ROCKBUILD_E2E/webui-root  Debian sid minbase + nodejs, npm, git and python3 (the workflow's webui job: llama-server's
#                              chat page built once per night, handed to every leg; no compiler)
#   $ROCKBUILD_E2E/../src/     the llama.cpp source the e2e test pins (llama-cpp-python sdist)
# Each item is made once: a finished item leaves a stamp file, and a second run only reports what it finds.
# Roots are built under "<name>.partial" and renamed when complete, so "<name>" never exists half-made.
# Needs root (debootstrap, chroot, mount). Env: ROCKBUILD_E2E (default /var/cache/rockbuild/e2e),
# ROCKBUILD_E2E_MIRROR (default: the first Debian mirror in the host's apt sources), ROCKBUILD_SRC
# (default /var/cache/rockbuild/src).
#   provision.sh [rocm|vulkan|windows|webui|all]   rocm: rocm-root, clean-root, source; vulkan: vulkan-root,
#                                    lavapipe-root, source; windows: mingw-root, wine-root, source; webui: webui-root,
#                                    source; all (default): everything
set -euo pipefail

E2E=${ROCKBUILD_E2E:-/var/cache/rockbuild/e2e}
SRC=${ROCKBUILD_SRC:-/var/cache/rockbuild/src}
ROCM=$E2E/rocm-root
CLEAN=$E2E/clean-root
VULKAN=$E2E/vulkan-root
LAVAPIPE=$E2E/lavapipe-root
MINGW=$E2E/mingw-root
WINE=$E2E/wine-root
WEBUI=$E2E/webui-root
WHAT=${1:-all}

# Only ROCm comes from experimental: `-t experimental` would also upgrade glibc, perl, openssl, cmake (proving-it-here.md §2).
ROCM_PIN_REGEX='/^(hipcc|rocm-device-libs-[0-9]+|libamd-comgr.*|libamdhip64.*|libhip(blas|blaslt|rtc).*|libhsa-runtime.*|librocblas.*|librocsolver.*|libroctx64.*)$/'
ROCM_PACKAGES=(hipcc libamdhip64-dev librocblas-dev libhipblas-dev libhipblaslt-dev)
TOOL_PACKAGES=(cmake ninja-build ccache git python3 python3-venv patchelf file binutils)

# The Vulkan flavour needs headers newer than Debian 12's (vulkan-on-lavapipe.md §1): sid has them. No mesa here: the
# build root is not where Vulkan bundles run.
VULKAN_BUILD_PACKAGES=(glslc libvulkan-dev spirv-headers g++ libssl-dev)
# What a user's host has: the loader and a driver (lavapipe, a Vulkan device on the CPU), plus python3 to run rockbuild.
LAVAPIPE_PACKAGES=(libvulkan1 mesa-vulkan-drivers vulkan-tools python3 python3-venv ca-certificates)
# The Windows cross build (issue 29): sid's mingw-w64 (Debian 12's is too old for llama.cpp: no
# THREAD_POWER_THROTTLING_STATE), the -posix compilers (std::thread needs winpthreads); for windows-vulkan glslc, the
# Vulkan and SPIR-V headers, the Linux Vulkan loader (its exports make vulkan-1.dll's import library) and a host g++
# (ggml builds its vulkan-shaders-gen for the build machine)
MINGW_PACKAGES=(g++-mingw-w64-x86-64-posix gcc-mingw-w64-x86-64-posix binutils-mingw-w64-x86-64
                glslc libvulkan-dev spirv-headers g++)
# A Windows host as wine gives one: no mingw runtime DLLs anywhere wine could find them, so the bundle must carry its
# own; Mesa's lavapipe and an X server (Xvfb) for windows-vulkan: wine's Vulkan goes through its X11 driver
WINE_PACKAGES=(wine64 python3 python3-venv ca-certificates libvulkan1 mesa-vulkan-drivers xvfb xauth)
# The web UI's build (tools/ui: npm ci, npm run build), as the workflow's prepare job runs it: node and npm, git to
# clone the night's commit, python3 for rockbuild
WEBUI_PACKAGES=(nodejs npm git python3 python3-venv ca-certificates)

LLAMA_SDIST=llama_cpp_python-0.3.36.tar.gz
LLAMA_SDIST_REQ=llama-cpp-python==0.3.36
LLAMA_SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

log() { printf '[provision %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "error: $*" >&2; exit 1; }

# Runs "$@" and prints how long it took; the step name is the first argument.
timed() {
    local name=$1 start end
    shift
    start=$(date +%s.%N)
    log "start: $name"
    "$@"
    end=$(date +%s.%N)
    log "done:  $name in $(printf '%.1f' "$(echo "$end - $start" | bc)") s"
}

[[ $(id -u) -eq 0 ]] || die "must run as root (debootstrap, chroot and mount need it)"

mirror_from_host() {
    local m=""
    if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
        m=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    fi
    if [[ -z $m && -r /etc/apt/sources.list ]]; then
        m=$(awk '$1=="deb" && $2 !~ /^\[/ {print $2; exit} $1=="deb" && $2 ~ /^\[/ {print $3; exit}' /etc/apt/sources.list)
    fi
    [[ -n $m ]] || die "no Debian mirror found in the host's apt sources; set ROCKBUILD_E2E_MIRROR"
    echo "${m%/}"
}
MIRROR=${ROCKBUILD_E2E_MIRROR:-$(mirror_from_host)}

mkdir -p "$E2E" "$SRC"
# Two concurrent runs would debootstrap into the same directory.
exec 9>"$E2E/.provision.lock"
flock -n 9 || { log "another provision.sh holds $E2E/.provision.lock; waiting"; flock 9; }

# shellcheck source=tests/e2e/mounts.sh
source "$(dirname "${BASH_SOURCE[0]}")/mounts.sh"

umount_all_under() {
    local root=$1 target
    # Deepest first; findmnt escapes spaces as \x20, which a root path under $E2E never has.
    while read -r target; do
        umount "$target" 2>/dev/null || umount -l "$target"
    done < <(findmnt -rno TARGET | awk -v r="$root" 'index($0, r "/") == 1 || $0 == r' | sort -r)
}

remove_partial() {
    local dir=$1
    [[ -e $dir ]] || return 0
    log "removing the unfinished $dir from an earlier run"
    umount_all_under "$dir"
    rm -rf --one-file-system "$dir"
}

ensure_debootstrap() {
    if ! command -v debootstrap >/dev/null; then
        timed "host: apt-get install debootstrap" bash -c 'apt-get update && apt-get install -y debootstrap'
    fi
    [[ -e /usr/share/debootstrap/scripts/sid ]] || die "this debootstrap has no 'sid' script; upgrade debootstrap"
}

minbase() {
    local dir=$1
    debootstrap --variant=minbase sid "$dir" "$MIRROR"
    # The mirror may be a frozen snapshot whose Release files have expired.
    echo 'Acquire::Check-Valid-Until "false";' >"$dir/etc/apt/apt.conf.d/99no-check-valid-until"
}

install_rocm() {
    local dir=$1
    echo "deb $MIRROR experimental main" >"$dir/etc/apt/sources.list.d/experimental.list"
    cat >"$dir/etc/apt/preferences.d/rocm-experimental" <<EOF
Package: $ROCM_PIN_REGEX
Pin: release a=experimental
Pin-Priority: 500
EOF
    apt_root "$dir" "${ROCM_PACKAGES[@]}" "${TOOL_PACKAGES[@]}"
}

size_of() { du -sx --block-size=1 "$1" | cut -f1; }

report_rocm_root() {
    local dir=$1
    log "packages asked for (installed versions):"
    # shellcheck disable=SC2016  # dpkg-query's own ${Package} fields, not shell expansions
    chroot "$dir" dpkg-query -W -f '    ${Package} ${Version}\n' "${ROCM_PACKAGES[@]}" "${TOOL_PACKAGES[@]}"
    log "packages taken from experimental:"
    # shellcheck disable=SC2016
    chroot "$dir" dpkg-query -W -f '${Package} ${Version}\n' | awk '$2 ~ /~exp/ {print "    " $0}'
    log "packages in the root: $(chroot "$dir" dpkg-query -W -f '.\n' | wc -l)"
}

# apt_root DIR PACKAGE...: install PACKAGEs into the root DIR, then drop the .deb cache. /proc stays mounted (hipcc
# and the loader's $ORIGIN expansion read /proc/self/exe) until the root is finished.
apt_root() {
    local dir=$1
    shift
    mount_proc "$dir"
    chroot "$dir" apt-get update
    chroot "$dir" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
    chroot "$dir" apt-get clean
}

# Installers: INSTALLER DIR [PACKAGE...] fills the fresh root DIR; what it appends to STAMP_EXTRA goes into the stamp.
STAMP_EXTRA=""

rocm_installer() {
    local dir=$1
    install_rocm "$dir"
    report_rocm_root "$dir"
    local version
    version=$(chroot "$dir" hipconfig -v)
    log "rocm-root: ROCm/HIP version (hipconfig -v): $version"
    STAMP_EXTRA="hip_version=$version"
}

packages_installer() {
    local dir=$1
    shift
    apt_root "$dir" "$@"
    log "packages asked for (installed versions):"
    # shellcheck disable=SC2016  # dpkg-query's own ${Package} fields, not shell expansions
    chroot "$dir" dpkg-query -W -f '    ${Package} ${Version}\n' "$@"
    STAMP_EXTRA="packages=$*"
}

# provision_root NAME DIR CHECK INSTALLER [ARG...]: a Debian sid minbase root at DIR, filled by INSTALLER DIR ARG...;
# CHECK is a file in it that proves it done. Built under DIR.partial and renamed when complete; leaves a stamp.
provision_root() {
    local name=$1 dir=$2 check=$3 installer=$4
    shift 4
    local stamp=$E2E/.$name.stamp
    if [[ -f $stamp && -e $dir$check ]]; then
        log "$name: already provisioned, nothing to do ($dir; $(tr '\n' ' ' <"$stamp"))"
        return
    fi
    rm -f "$stamp"
    [[ -e $dir ]] && { log "$name: $dir exists without a stamp; rebuilding it"; remove_partial "$dir"; }
    local part=$dir.partial
    remove_partial "$part"
    timed "$name: debootstrap --variant=minbase sid" minbase "$part"
    STAMP_EXTRA=""
    [[ $installer == none ]] || timed "$name: $installer $*" "$installer" "$part" "$@"
    if [[ $name != rocm-root ]] && compgen -G "$part/usr/lib/x86_64-linux-gnu/libamdhip64*" >/dev/null; then
        die "$name unexpectedly contains libamdhip64"
    fi
    umount_all_under "$part"
    mv "$part" "$dir"
    local size
    size=$(size_of "$dir")
    log "$name: $dir is $size bytes, $(chroot "$dir" dpkg-query -W -f '.\n' | wc -l) packages"
    { [[ -z $STAMP_EXTRA ]] || echo "$STAMP_EXTRA"
      printf 'bytes=%s\nmirror=%s\ncreated=%s\n' "$size" "$MIRROR" "$(date -u +%FT%TZ)"; } >"$stamp"
}

sdist_ok() { [[ -f $SRC/$LLAMA_SDIST ]] && echo "$LLAMA_SDIST_SHA256  $SRC/$LLAMA_SDIST" | sha256sum -c --quiet - 2>/dev/null; }

provision_llama_source() {
    if sdist_ok; then
        log "llama.cpp source: already present, nothing to do ($SRC/$LLAMA_SDIST, sha256 $LLAMA_SDIST_SHA256)"
        return
    fi
    local python=${PYTHON:-python3}
    timed "llama.cpp source: pip download $LLAMA_SDIST_REQ" \
        "$python" -m pip download --quiet --no-deps --no-binary :all: "$LLAMA_SDIST_REQ" -d "$SRC"
    sdist_ok || die "$SRC/$LLAMA_SDIST does not have the pinned sha256 $LLAMA_SDIST_SHA256 (got $(sha256sum "$SRC/$LLAMA_SDIST" | cut -d' ' -f1))"
    log "llama.cpp source: $SRC/$LLAMA_SDIST, $(stat -c %s "$SRC/$LLAMA_SDIST") bytes, sha256 $LLAMA_SDIST_SHA256"
}

case $WHAT in
    rocm | vulkan | windows | webui | all) ;;
    *) die "unknown argument $WHAT (rocm, vulkan, windows, webui, all)" ;;
esac
log "E2E=$E2E SRC=$SRC mirror=$MIRROR ($WHAT)"
ensure_debootstrap
if [[ $WHAT == rocm || $WHAT == all ]]; then
    provision_root rocm-root "$ROCM" /usr/bin/hipconfig rocm_installer
    provision_root clean-root "$CLEAN" /bin/sh none
fi
if [[ $WHAT == vulkan || $WHAT == all ]]; then
    provision_root vulkan-root "$VULKAN" /usr/bin/glslc packages_installer \
        "${VULKAN_BUILD_PACKAGES[@]}" "${TOOL_PACKAGES[@]}"
    provision_root lavapipe-root "$LAVAPIPE" /usr/share/vulkan/icd.d/lvp_icd.json packages_installer \
        "${LAVAPIPE_PACKAGES[@]}"
fi
if [[ $WHAT == windows || $WHAT == all ]]; then
    provision_root mingw-root "$MINGW" /usr/bin/x86_64-w64-mingw32-g++-posix packages_installer \
        "${MINGW_PACKAGES[@]}" "${TOOL_PACKAGES[@]}"
    provision_root wine-root "$WINE" /usr/bin/wine64 packages_installer "${WINE_PACKAGES[@]}"
fi
if [[ $WHAT == webui || $WHAT == all ]]; then
    provision_root webui-root "$WEBUI" /usr/bin/npm packages_installer "${WEBUI_PACKAGES[@]}"
fi
provision_llama_source
log "ready in ${SECONDS} s ($WHAT) under $E2E, source $SRC/$LLAMA_SDIST"
