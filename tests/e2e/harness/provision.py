"""The roots the end-to-end proofs run in, made from nothing (tests/e2e/README.md says what each holds):

    sudo tests/e2e/provision.sh [rocm|vulkan|windows|webui|all]     (runs python3 tests/e2e/harness/provision.py)

rocm: rocm-root, clean-root and the source; vulkan: vulkan-root, lavapipe-root and the source; windows: mingw-root,
wine-root and the source; webui: webui-root and the source; all (the default): everything.

Each root is Debian sid minbase (debootstrap) plus its packages, built under ``NAME.partial`` and renamed when complete
(a root is never seen half-made), with a stamp ``$ROCKBUILD_E2E/.NAME.stamp``: a second run reports "already
provisioned". A root that must hold no ROCm is checked for libamdhip64. The llama.cpp source is the pinned
llama-cpp-python sdist, checked by sha256. Needs root (debootstrap, chroot, mount). Env: ROCKBUILD_E2E (default
/var/cache/rockbuild/e2e), ROCKBUILD_E2E_MIRROR (default: the first Debian mirror of the host's apt sources),
ROCKBUILD_SRC (default /var/cache/rockbuild/src). Standard library only: it runs before any venv exists.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the harness's shared part, run as a script too
from e2e.harness.common import Failed, run  # noqa: E402

# Only ROCm comes from experimental: `-t experimental` would also upgrade glibc, perl, openssl, cmake
# (proving-it-here.md section 2)
ROCM_PIN = (
    "/^(hipcc|rocm-device-libs-[0-9]+|libamd-comgr.*|libamdhip64.*|libhip(blas|blaslt|rtc).*|libhsa-runtime.*"
    "|librocblas.*|librocsolver.*|libroctx64.*)$/"
)
ROCM_PACKAGES = ("hipcc", "libamdhip64-dev", "librocblas-dev", "libhipblas-dev", "libhipblaslt-dev")
TOOL_PACKAGES = ("cmake", "ninja-build", "ccache", "git", "python3", "python3-venv", "patchelf", "file", "binutils")
# The Vulkan flavour needs headers newer than Debian 12's (vulkan-on-lavapipe.md section 1): sid has them. No Mesa:
# the build root is not where Vulkan bundles run
VULKAN_BUILD_PACKAGES = ("glslc", "libvulkan-dev", "spirv-headers", "g++", "libssl-dev")
# What a user's host has: the loader and a driver (lavapipe, a Vulkan device on the CPU), python3 to run rockbuild
LAVAPIPE_PACKAGES = ("libvulkan1", "mesa-vulkan-drivers", "vulkan-tools", "python3", "python3-venv", "ca-certificates")
# The Windows cross build (issue 29): sid's mingw-w64 (Debian 12's is too old for llama.cpp), the -posix compilers
# (std::thread needs winpthreads); for windows-vulkan glslc, the Vulkan and SPIR-V headers, the Linux Vulkan loader
# (its exports make vulkan-1.dll's import library) and a host g++ (ggml builds vulkan-shaders-gen for the build host)
MINGW_PACKAGES = (
    "g++-mingw-w64-x86-64-posix",
    "gcc-mingw-w64-x86-64-posix",
    "binutils-mingw-w64-x86-64",
    "glslc",
    "libvulkan-dev",
    "spirv-headers",
    "g++",
)
# A Windows host as wine gives one: no mingw runtime DLLs anywhere wine could find them (the bundle must carry its
# own); Mesa's lavapipe and an X server for windows-vulkan (wine's Vulkan goes through its X11 driver)
WINE_PACKAGES = ("wine64", "python3", "python3-venv", "ca-certificates", "libvulkan1", "mesa-vulkan-drivers")
WINE_PACKAGES += ("xvfb", "xauth")
# The web UI's build (tools/ui: npm ci, npm run build) as the workflow's webui job runs it; git for the night's
# commit, python3 for rockbuild
WEBUI_PACKAGES = ("nodejs", "npm", "git", "python3", "python3-venv", "ca-certificates")

LLAMA_SDIST = "llama_cpp_python-0.3.36.tar.gz"
LLAMA_SDIST_REQ = "llama-cpp-python==0.3.36"
LLAMA_SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"


def log(message: str) -> None:
    print(f"[provision {time.strftime('%H:%M:%S')}] {message}", flush=True)


@contextlib.contextmanager
def timed(name: str) -> Iterator[None]:
    start = time.monotonic()
    log(f"start: {name}")
    yield
    log(f"done:  {name} in {time.monotonic() - start:.1f} s")


# ---------------------------------------------------------------------------------------------------------------------
# What a root is


@dataclass(frozen=True)
class Root:
    """One root: its name (and folder under ROCKBUILD_E2E), the file in it that proves it done, its packages, and
    whether it is the one root that may hold ROCm (with experimental's pin)."""

    name: str
    check: str
    packages: tuple[str, ...] = ()
    rocm: bool = False

    def folder(self, e2e: Path) -> Path:
        return e2e / self.name

    def stamp(self, e2e: Path) -> Path:
        return e2e / f".{self.name}.stamp"


ROOTS = {
    "rocm-root": Root("rocm-root", "usr/bin/hipconfig", ROCM_PACKAGES + TOOL_PACKAGES, rocm=True),
    "clean-root": Root("clean-root", "bin/sh"),
    "vulkan-root": Root("vulkan-root", "usr/bin/glslc", VULKAN_BUILD_PACKAGES + TOOL_PACKAGES),
    "lavapipe-root": Root("lavapipe-root", "usr/share/vulkan/icd.d/lvp_icd.json", LAVAPIPE_PACKAGES),
    "mingw-root": Root("mingw-root", "usr/bin/x86_64-w64-mingw32-g++-posix", MINGW_PACKAGES + TOOL_PACKAGES),
    "wine-root": Root("wine-root", "usr/bin/wine64", WINE_PACKAGES),
    "webui-root": Root("webui-root", "usr/bin/npm", WEBUI_PACKAGES),
}
GROUPS = {
    "rocm": ("rocm-root", "clean-root"),
    "vulkan": ("vulkan-root", "lavapipe-root"),
    "windows": ("mingw-root", "wine-root"),
    "webui": ("webui-root",),
}
GROUPS["all"] = tuple(name for group in GROUPS.values() for name in group)


def mirror_from_host(
    sources_d: Path = Path("/etc/apt/sources.list.d"), sources: Path = Path("/etc/apt/sources.list")
) -> str:
    """The first Debian mirror of the host's apt sources: deb822 ``URIs:`` first, then a one-line ``deb`` entry
    (with or without ``[options]``); no trailing slash."""
    deb822 = sources_d / "debian.sources"
    if deb822.is_file():
        for line in deb822.read_text().splitlines():
            if line.startswith("URIs:") and line.split()[1:]:
                return line.split()[1].rstrip("/")
    if sources.is_file():
        for line in sources.read_text().splitlines():
            m = re.match(r"deb\s+(?:\[[^\]]*\]\s+)?(\S+)", line)
            if m:
                return m.group(1).rstrip("/")
    raise Failed("no Debian mirror found in the host's apt sources; set ROCKBUILD_E2E_MIRROR")


def rocm_pin() -> str:
    return f"Package: {ROCM_PIN}\nPin: release a=experimental\nPin-Priority: 500\n"


def sdist_ok(path: Path, sha256: str = LLAMA_SDIST_SHA256) -> bool:
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256


def stamp_text(extra: Sequence[str], size: int, mirror: str, created: str) -> str:
    return "".join(f"{line}\n" for line in (*extra, f"bytes={size}", f"mirror={mirror}", f"created={created}"))


# ---------------------------------------------------------------------------------------------------------------------
# Mounts and folders


def mounts_under(folder: Path, mountinfo: str | None = None) -> list[str]:
    """The mount points at or under ``folder``, deepest first (``/proc/self/mountinfo``'s fifth field)."""
    text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    prefix = str(folder)
    targets = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 4:
            target = fields[4].replace("\\040", " ")
            if target == prefix or target.startswith(prefix + "/"):
                targets.append(target)
    return sorted(targets, reverse=True)


def unmount_under(folder: Path) -> None:
    for target in mounts_under(folder):
        if subprocess.run(["umount", target], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", target], check=False)


def remove_partial(folder: Path) -> None:
    if not folder.exists():
        return
    log(f"removing the unfinished {folder} from an earlier run")
    unmount_under(folder)
    run(["rm", "-rf", "--one-file-system", folder])


@contextlib.contextmanager
def proc_mounted(root: Path) -> Iterator[None]:
    """/proc in the root while its packages install (hipcc and the loader's $ORIGIN read /proc/self/exe); unmounted
    on the way out, whatever happened."""
    mine = not os.path.ismount(root / "proc")
    if mine:
        run(["mount", "-t", "proc", "proc", root / "proc"])
    try:
        yield
    finally:
        if mine and subprocess.run(["umount", root / "proc"], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", root / "proc"], check=False)


@contextlib.contextmanager
def locked(e2e: Path) -> Iterator[None]:
    """One provisioning at a time: two would debootstrap into the same folder."""
    with (e2e / ".provision.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another provisioning holds {e2e / '.provision.lock'}; waiting")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def folder_bytes(folder: Path) -> int:
    return int(run(["du", "-sx", "--block-size=1", folder], capture_output=True).stdout.split()[0])


# ---------------------------------------------------------------------------------------------------------------------
# Making a root


@dataclass
class Provisioner:
    """Makes roots under ``e2e`` from ``mirror``; ``minbase`` and ``install`` are the two steps that need root and a
    network (debootstrap; apt-get in a chroot), replaceable for a test of the rest."""

    e2e: Path
    mirror: str
    minbase: Callable[[Path, str], None] = field(default=lambda folder, mirror: debootstrap(folder, mirror))
    install: Callable[[Root, Path, str], list[str]] = field(
        default=lambda root, folder, mirror: install(root, folder, mirror)
    )
    packages_in: Callable[[Path], int] = field(default=lambda folder: dpkg_count(folder))
    size_of: Callable[[Path], int] = field(default=folder_bytes)

    def provision(self, root: Root) -> str:
        """``root`` made (or found made); what was done, in words."""
        folder, stamp = root.folder(self.e2e), root.stamp(self.e2e)
        if stamp.is_file() and (folder / root.check).exists():
            said = " ".join(stamp.read_text().split())
            log(f"{root.name}: already provisioned, nothing to do ({folder}; {said})")
            return "present"
        stamp.unlink(missing_ok=True)
        if folder.exists():
            log(f"{root.name}: {folder} exists without a stamp; rebuilding it")
            remove_partial(folder)
        partial = folder.with_name(folder.name + ".partial")
        remove_partial(partial)
        with timed(f"{root.name}: debootstrap --variant=minbase sid"):
            self.minbase(partial, self.mirror)
        extra: list[str] = []
        if root.packages:
            with timed(f"{root.name}: install {' '.join(root.packages)}"):
                extra = self.install(root, partial, self.mirror)
        if not root.rocm and any((partial / "usr" / "lib" / "x86_64-linux-gnu").glob("libamdhip64*")):
            raise Failed(f"{root.name} unexpectedly contains libamdhip64 (left in {partial})")
        unmount_under(partial)
        partial.rename(folder)
        size = self.size_of(folder)
        log(f"{root.name}: {folder} is {size} bytes, {self.packages_in(folder)} packages")
        stamp.write_text(stamp_text(extra, size, self.mirror, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
        return "made"


def debootstrap(folder: Path, mirror: str) -> None:
    run(["debootstrap", "--variant=minbase", "sid", folder, mirror])
    # the mirror may be a frozen snapshot whose Release files have expired
    (folder / "etc" / "apt" / "apt.conf.d" / "99no-check-valid-until").write_text(
        'Acquire::Check-Valid-Until "false";\n'
    )


def chroot(folder: Path, *args: str, capture: bool = False) -> str:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}
    return run(["chroot", folder, *args], env=env, capture_output=capture).stdout or ""


def dpkg_count(folder: Path) -> int:
    return len(chroot(folder, "dpkg-query", "-W", "-f", ".\n", capture=True).splitlines())


def install(root: Root, folder: Path, mirror: str) -> list[str]:
    """The root's packages with apt-get in a chroot (no recommends), the .deb cache dropped; the stamp's extra lines."""
    if root.rocm:
        (folder / "etc" / "apt" / "sources.list.d" / "experimental.list").write_text(
            f"deb {mirror} experimental main\n"
        )
        (folder / "etc" / "apt" / "preferences.d" / "rocm-experimental").write_text(rocm_pin())
    with proc_mounted(folder):
        chroot(folder, "apt-get", "update")
        chroot(folder, "apt-get", "install", "-y", "--no-install-recommends", *root.packages)
        chroot(folder, "apt-get", "clean")
        versions = chroot(folder, "dpkg-query", "-W", "-f", "    ${Package} ${Version}\n", *root.packages, capture=True)
        log("packages asked for (installed versions):\n" + versions.rstrip())
        if not root.rocm:
            return [f"packages={' '.join(root.packages)}"]
        every = chroot(folder, "dpkg-query", "-W", "-f", "${Package} ${Version}\n", capture=True).splitlines()
        log("packages taken from experimental:\n" + "\n".join(f"    {p}" for p in every if "~exp" in p))
        version = chroot(folder, "hipconfig", "-v", capture=True).strip()
        log(f"{root.name}: ROCm/HIP version (hipconfig -v): {version}")
        return [f"hip_version={version}"]


def provision_source(src: Path) -> str:
    sdist = src / LLAMA_SDIST
    if sdist_ok(sdist):
        log(f"llama.cpp source: already present, nothing to do ({sdist}, sha256 {LLAMA_SDIST_SHA256})")
        return "present"
    with timed(f"llama.cpp source: pip download {LLAMA_SDIST_REQ}"):
        run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
            + [LLAMA_SDIST_REQ, "-d", src]
        )
    if not sdist_ok(sdist):
        got = hashlib.sha256(sdist.read_bytes()).hexdigest() if sdist.is_file() else "no file"
        raise Failed(f"{sdist} does not have the pinned sha256 {LLAMA_SDIST_SHA256} (got {got})")
    log(f"llama.cpp source: {sdist}, {sdist.stat().st_size} bytes, sha256 {LLAMA_SDIST_SHA256}")
    return "made"


def ensure_debootstrap() -> None:
    if shutil.which("debootstrap") is None:
        with timed("host: apt-get install debootstrap"):
            run(["apt-get", "update"])
            run(["apt-get", "install", "-y", "debootstrap"])
    if not Path("/usr/share/debootstrap/scripts/sid").exists():
        raise Failed("this debootstrap has no 'sid' script; upgrade debootstrap")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="provision", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("what", nargs="?", default="all", choices=list(GROUPS))
    args = ap.parse_args(argv)
    start = time.monotonic()
    try:
        if os.geteuid() != 0:
            raise Failed("must run as root (debootstrap, chroot and mount need it)")
        e2e = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e"))
        src = Path(os.environ.get("ROCKBUILD_SRC", "/var/cache/rockbuild/src"))
        mirror = os.environ.get("ROCKBUILD_E2E_MIRROR") or mirror_from_host()
        e2e.mkdir(parents=True, exist_ok=True)
        src.mkdir(parents=True, exist_ok=True)
        with locked(e2e):
            log(f"E2E={e2e} SRC={src} mirror={mirror} ({args.what})")
            ensure_debootstrap()
            maker = Provisioner(e2e, mirror)
            for name in GROUPS[args.what]:
                maker.provision(ROOTS[name])
            provision_source(src)
        log(f"ready in {time.monotonic() - start:.0f} s ({args.what}) under {e2e}, source {src / LLAMA_SDIST}")
    except Failed as exc:
        log(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
