# shellcheck shell=bash
# Mounts made by the e2e scripts, undone on exit (sourced by provision.sh and run.sh).
# Only what this script mounted is unmounted, deepest first; mounts another run made are left alone.

MOUNTED=()

unmount_ours() {
    local i
    for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
        umount "${MOUNTED[$i]}" 2>/dev/null || umount -l "${MOUNTED[$i]}" 2>/dev/null || true
    done
}
trap unmount_ours EXIT

# mount_proc ROOT: /proc in a root (hipcc and the loader's $ORIGIN read /proc/self/exe; proving-it-here.md gotcha 4)
mount_proc() {
    if ! mountpoint -q "$1/proc"; then
        mount -t proc proc "$1/proc"
        MOUNTED+=("$1/proc")
    fi
}

# bind_mount SOURCE TARGET [ro]: SOURCE at TARGET (created), read-only with a third argument "ro"
bind_mount() {
    mkdir -p "$2"
    if ! mountpoint -q "$2"; then
        mount --bind "$1" "$2"
        MOUNTED+=("$2")
        if [[ ${3:-} == ro ]]; then
            mount -o remount,bind,ro "$2"
        fi
    fi
}

# bundle_mount SOURCE TARGET: SOURCE read-only at TARGET, replacing what an earlier run left there (a bundle of another
# target may be mounted): nothing a test does in the root may change a bundle
bundle_mount() {
    if mountpoint -q "$2"; then umount "$2"; fi
    bind_mount "$1" "$2" ro
}
