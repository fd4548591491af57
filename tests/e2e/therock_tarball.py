#!/usr/bin/env python3
"""A TheRock-layout ROCm tarball made from the Debian ROCm root of provision.sh, for the night rehearsal (night.sh).

TheRock publishes one ``therock-dist-linux-<group>-<version>.tar.gz`` per GPU family; nothing of it can be downloaded
here, so this script rearranges the real Debian sid ROCm 7.2.4 packages (and their LLVM 22) into TheRock's layout
(../shared/reference/therock.md section 4), so that rockbuild's resolve, download, extract, layout detection, build and
bundle run on real bytes:

    .info/version                   7.2.4
    share/therock/therock_manifest.json, dist_info.json
    bin/                            hipcc, hipconfig; amdclang, amdclang++, amdlld, offload-arch -> ../lib/llvm/bin/*
    include/                        hip, hsa, rocblas, hipblas, hipblaslt, amd_comgr ... (the -dev packages)
    lib/lib*.so*                    the ROCm libraries as SONAME chains (libX.so -> libX.so.N -> libX.so.N.M.P)
    lib/cmake/<pkg>/                the packages' CMake configs, moved from lib/x86_64-linux-gnu/cmake (one level less)
    lib/rocblas/library/            rocBLAS kernel data of the group's targets + the generic files (Debian: rocblas/5/)
    lib/hipblaslt/library/          hipBLASLt kernel data, the same filter
    lib/rocm_sysdeps/lib/           the third-party libraries the ROCm libraries and LLVM need (libelf, libdrm, libnuma,
                                    libfmt, libffi, libz3, libxml2 ...), under their own names (TheRock renames them
                                    librocm_sysdeps_*; Debian's binaries ask for the plain names)
    lib/llvm/bin/                   clang, clang++, lld ... (llvm-22's bin/), with rocm.cfg, clang.cfg, clang++.cfg
    lib/llvm/lib/                   libLLVM.so.22.1, libclang-cpp.so.22.1, the clang resource dir lib/clang/22
    lib/llvm/amdgcn/bitcode/        the device libraries (Debian: in clang's resource dir)
    llvm -> lib/llvm, amdgcn -> lib/llvm/amdgcn

Every ELF file gets a RUNPATH relative to itself ($ORIGIN...), as TheRock's do, so nothing of the tree resolves to the
root's /usr: the libraries find each other, LLVM and the sysdeps inside the tree, and clang finds libLLVM there.

Two steps, because the tree must be assembled inside the root (absolute symlinks, dpkg, ldd, patchelf) and packed
where pigz is:

    chroot ROCM_ROOT python3 therock_tarball.py tree --stage /e2e/night/therock-stage --date 20261201
    python3 therock_tarball.py pack --stage STAGE --out INDEX_DIR       # -> therock-dist-linux-gfx1151-7.2.4a20261201.tar.gz

``tree`` writes STAGE/../<stage>.json (what went in); ``pack`` writes <tarball>.json (name, size, sha256, seconds).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

TRIPLET = "x86_64-linux-gnu"
USR_LIB = f"/usr/lib/{TRIPLET}"
# The ROCm packages of the root (provision.sh pins exactly these from experimental) and the device libraries
ROCM_PACKAGES = re.compile(
    r"^(hipcc|rocm-device-libs-[0-9]+|libamd-comgr.*|libamdhip64.*|libhip(blas|blaslt|rtc).*|libhsa-runtime.*"
    r"|librocblas.*|librocsolver.*|libroctx64.*)$"
)
SKIP_PREFIXES = ("/usr/share/doc", "/usr/share/man", "/usr/share/lintian", "/usr/share/bug")
# What a Linux host always has: never copied into the tree (the bundler's never-ship set)
SYSTEM_LIBS = re.compile(r"^(ld-linux.*|libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|libutil|libresolv)\.so")
# rockbuild.rocm.layout's rule: the gfx target of a kernel file is its last target token; none = generic
TARGET_TOKEN = re.compile(r"(gfx[0-9a-f]+)(?:-xnack[+-])?(?=[._-])")
ELF_MAGIC = b"\x7fELF"
# An LLVM tool is shipped when it needs nothing beyond LLVM and its own libraries (TheRock's LLVM links none of
# libcurl, libpfm or libclang: tools such as llvm-debuginfod-find, llvm-exegesis, c-index-test are left out)
LLVM_TOOL_LIBS = {
    "libLLVM.so.22.1",
    "libclang-cpp.so.22.1",
    "libz.so.1",
    "libzstd.so.1",
    "libz3.so.4",
    "libxml2.so.16",
    "libffi.so.8",
    "libedit.so.2",
}


def log(message: str) -> None:
    print(f"[therock] {message}", flush=True)


def run(*args: str) -> str:
    return subprocess.run(list(args), check=True, capture_output=True, text=True).stdout


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


# --------------------------------------------------------------------------------------------------------- the tree


class Tree:
    def __init__(self, stage: Path, llvm: Path, targets: set[str]) -> None:
        self.stage, self.llvm, self.targets = stage, llvm, targets
        self.links: list[tuple[Path, Path]] = []  # (link in the tree, the tree path it points at)
        self.kernels = {"kept": 0, "dropped": 0, "kept_bytes": 0, "dropped_bytes": 0}
        self.files = 0
        self.dropped_tools: dict[str, list[str]] = {}

    def map(self, src: str) -> str | None:
        """The tree path (relative) of a path of the root, or None when it has no place in a TheRock tree."""
        if src.startswith(SKIP_PREFIXES):
            return None
        rules = (
            (f"{USR_LIB}/rocblas/5/library/", "lib/rocblas/library/"),
            (f"{USR_LIB}/hipblaslt/library/", "lib/hipblaslt/library/"),
            (f"{USR_LIB}/cmake/", "lib/cmake/"),
            (f"{USR_LIB}/", "lib/"),
            (f"{self.llvm}/lib/clang/", "lib/llvm/lib/clang/"),
            (f"{self.llvm}/bin/", "lib/llvm/bin/"),
            (f"{self.llvm}/lib/", "lib/llvm/lib/"),
            ("/usr/bin/", "bin/"),
            ("/usr/include/", "include/"),
            ("/usr/share/", "share/"),
        )
        bitcode = f"{self.llvm}/lib/clang/"
        if src.startswith(bitcode) and "/amdgcn/bitcode/" in src:  # TheRock: lib/llvm/amdgcn/bitcode
            return "lib/llvm/amdgcn/bitcode/" + src.split("/amdgcn/bitcode/", 1)[1]
        for prefix, dest in rules:
            if src.startswith(prefix):
                return dest + src[len(prefix) :]
        return None

    def keep_kernel(self, rel: str, size: int) -> bool:
        if not rel.startswith(("lib/rocblas/library/", "lib/hipblaslt/library/")):
            return True
        tokens = TARGET_TOKEN.findall(rel.rsplit("/", 1)[-1])
        keep = not tokens or tokens[-1] in self.targets
        self.kernels["kept" if keep else "dropped"] += 1
        self.kernels["kept_bytes" if keep else "dropped_bytes"] += size
        return keep

    def add(self, src: str) -> None:
        """One path of the root (file or symlink; folders are made as needed)."""
        rel = self.map(src)
        path = Path(src)
        if rel is None or path.is_dir() and not path.is_symlink():
            return
        dest = self.stage / rel
        if path.is_symlink():
            target = Path(os.path.normpath(path.parent / os.readlink(path)))
            target_rel = self.map(str(target))
            if target_rel is not None and (target.exists() or target.is_symlink()):
                self.links.append((dest, self.stage / target_rel))
                return
            path = path.resolve()  # a link out of the tree: store the file it points at
        if not path.is_file():
            return
        if dest.exists() or not self.keep_kernel(rel, path.stat().st_size):
            return  # (the device libraries are listed twice: by their package and in the resource dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
        self.files += 1

    def add_tree(self, folder: Path, *, tools: bool = False) -> None:
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames.sort()
            for name in sorted(filenames) + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
                path = os.path.join(dirpath, name)
                if tools and not self.tool_ok(Path(path)):
                    continue
                self.add(path)

    def tool_ok(self, path: Path) -> bool:
        real = path.resolve()
        if not is_elf(real):
            return True
        try:
            needed = set(run("patchelf", "--print-needed", str(real)).split())
        except subprocess.CalledProcessError:
            return True
        extra = {n for n in needed if not SYSTEM_LIBS.match(n)} - LLVM_TOOL_LIBS
        if extra:
            self.dropped_tools[path.name] = sorted(extra)
        return not extra

    def make_links(self) -> int:
        made = 0
        for link, target in self.links:
            if not (target.exists() or target.is_symlink()):
                continue  # its target was filtered out (kernel data of other targets)
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(os.path.relpath(target, link.parent))
            made += 1
        return made


def rocm_packages() -> dict[str, str]:
    out = run("dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\n")
    found = {}
    for line in out.splitlines():
        name, version, *status = line.split()
        if ROCM_PACKAGES.match(name) and status[-1:] == ["installed"]:
            found[name] = version
    return found


def fix_cmake(stage: Path) -> int:
    """Debian's configs live in lib/x86_64-linux-gnu/cmake/<pkg> (4 levels under the prefix); TheRock's in
    lib/cmake/<pkg> (3): one level less to climb, and no multiarch folder in any path."""
    changed = 0
    for path in sorted(p for p in (stage / "lib").rglob("*.cmake") if "/cmake/" in p.as_posix()):
        text = path.read_text(encoding="utf-8")
        new = text.replace(f"/lib/{TRIPLET}", "/lib")
        new = re.sub(r'(LIST_DIR(?:_REAL)?\})/\.\./\.\./\.\./\.\./"', r'\1/../../../"', new)  # from its folder
        new = new.replace('{_DIR}/../../../../../"', '{_DIR}/../../../../"')  # hip-lang: from the file itself
        # the targets files (and amd_comgr's config) climb with one PATH line per level
        new = re.sub(r'((get_filename_component\((\w+) "\$\{\3\}" PATH\)\n)\2\2\2)', r"\2\2\2", new)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed += 1
    return changed


def needed_outside(stage: Path, elves: list[Path]) -> dict[str, str]:
    """soname -> path in the root, for every library the tree's ELF files load from the root (ldd, run in the root
    with the tree's RUNPATHs already set), except the system libraries every host has."""
    found: dict[str, str] = {}
    for path in elves:
        try:
            out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=60).stdout
        except subprocess.TimeoutExpired:
            continue
        for line in out.splitlines():
            m = re.match(r"\s*(\S+) => (/\S+)", line)
            if not m or SYSTEM_LIBS.match(m.group(1)) or m.group(2).startswith(str(stage)):
                continue
            found[m.group(1)] = m.group(2)
    return found


def set_runpaths(stage: Path) -> dict[str, int]:
    """$ORIGIN-relative RUNPATHs on every ELF file of the tree (TheRock's are relative too)."""
    rules = [
        ("lib/rocm_sysdeps/lib", "$ORIGIN"),
        ("lib/llvm/lib/clang", None),  # compiler-rt archives and objects: not loaded
        ("lib/llvm/lib", "$ORIGIN:$ORIGIN/../../rocm_sysdeps/lib"),
        ("lib/llvm/bin", "$ORIGIN/../lib:$ORIGIN/../../rocm_sysdeps/lib"),
        ("lib", "$ORIGIN:$ORIGIN/rocm_sysdeps/lib:$ORIGIN/llvm/lib"),
        ("bin", "$ORIGIN/../lib:$ORIGIN/../lib/rocm_sysdeps/lib:$ORIGIN/../lib/llvm/lib"),
    ]
    counts: dict[str, int] = {}
    for path in sorted(p for p in stage.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p)):
        rel = path.relative_to(stage).as_posix()
        if rel.startswith(("lib/rocblas/", "lib/hipblaslt/")) or path.suffix in (".a", ".o"):
            continue  # GPU code objects and archives
        folder = rel.rsplit("/", 1)[0]
        runpath = next((r for prefix, r in rules if folder == prefix or folder.startswith(prefix + "/")), None)
        if runpath is None:
            continue
        try:
            if not run("patchelf", "--print-needed", str(path)).strip():
                continue  # static or no dependencies
            if run("patchelf", "--print-rpath", str(path)).strip() == runpath:
                continue  # set in an earlier round
        except subprocess.CalledProcessError:
            continue  # not a dynamic object
        mode = path.stat().st_mode
        path.chmod(mode | stat.S_IWUSR)
        subprocess.run(["patchelf", "--set-rpath", runpath, str(path)], check=True)
        path.chmod(mode)
        counts[folder] = counts.get(folder, 0) + 1
    return counts


def build_tree(args: argparse.Namespace) -> None:
    start = time.monotonic()
    stage = Path(args.stage)
    date = args.date or datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")
    package_version = f"{args.version}a{date}"
    llvm = Path(args.llvm)
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    tree = Tree(stage, llvm, set(args.targets.split(",")))
    packages = rocm_packages()
    if not any(p.startswith("libamdhip64") for p in packages):
        sys.exit("error: no libamdhip64 package in this root: run it in provision.sh's rocm-root")
    log(f"{len(packages)} ROCm packages: " + ", ".join(f"{k} {v}" for k, v in sorted(packages.items())))
    for package in sorted(packages):
        for src in run("dpkg-query", "-L", package).splitlines():
            tree.add(src)
    # LLVM: the whole bin/, the clang resource dir, libLLVM and libclang-cpp (Debian keeps them in the multiarch dir)
    tree.add_tree(llvm / "bin", tools=True)
    tree.add_tree(llvm / "lib" / "clang")
    for name in ("libLLVM.so.22.1", "libclang-cpp.so.22.1"):
        real = Path(USR_LIB) / name
        dest = stage / "lib" / "llvm" / "lib" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(real, dest)
        tree.files += 1
    links = tree.make_links()
    for name, soname in (("libLLVM.so", "libLLVM.so.22.1"), ("libclang-cpp.so", "libclang-cpp.so.22.1")):
        (stage / "lib" / "llvm" / "lib" / name).symlink_to(soname)
    # TheRock's relocatable clang: clang.cfg/clang++.cfg -> @rocm.cfg -> --rocm-path=<the tree>
    bindir = stage / "lib" / "llvm" / "bin"
    (bindir / "rocm.cfg").write_text("--rocm-path='<CFGDIR>/../../..'\n")
    for name in ("clang.cfg", "clang++.cfg"):
        (bindir / name).write_text("@rocm.cfg\n")
    # TheRock's aux-overlay links (Linux only)
    (stage / "llvm").symlink_to("lib/llvm")
    (stage / "amdgcn").symlink_to("lib/llvm/amdgcn")
    for name, target in (
        ("amdclang", "clang"),
        ("amdclang++", "clang++"),
        ("amdlld", "lld"),
        ("offload-arch", "offload-arch"),
    ):
        if (bindir / target).exists():
            (stage / "bin" / name).symlink_to(f"../lib/llvm/bin/{target}")
    cmake_files = fix_cmake(stage)
    runpaths = set_runpaths(stage)
    # the third-party libraries the tree still takes from the root: into lib/rocm_sysdeps/lib, then again (their
    # own dependencies) until nothing is left outside
    sysdeps: dict[str, str] = {}
    sysdir = stage / "lib" / "rocm_sysdeps" / "lib"
    sysdir.mkdir(parents=True, exist_ok=True)
    for _round in range(5):
        elves = [
            p
            for p in stage.rglob("*")
            if p.is_file()
            and not p.is_symlink()
            and is_elf(p)
            and not p.relative_to(stage)
            .as_posix()
            .startswith(("lib/rocblas/", "lib/hipblaslt/", "lib/llvm/lib/clang/"))
        ]
        outside = needed_outside(stage, elves)
        if not outside:
            break
        for soname, src in sorted(outside.items()):
            real = Path(src).resolve()
            shutil.copy2(real, sysdir / real.name)
            if real.name != soname and not (sysdir / soname).is_symlink():
                (sysdir / soname).symlink_to(real.name)
            sysdeps[soname] = real.name
        for folder, count in set_runpaths(stage).items():
            runpaths[folder] = runpaths.get(folder, 0) + count
    else:
        sys.exit(f"error: the tree still loads from the root: {', '.join(needed_outside(stage, elves))}")
    left = needed_outside(stage, [bindir / "clang", stage / "lib" / "libamdhip64.so.7"])
    if left:
        sys.exit(f"error: clang or libamdhip64 still load from the root: {left}")
    hip = (stage / "include" / "hip" / "hip_version.h").read_text()
    hip_version = ".".join(
        re.search(rf"#define HIP_VERSION_{p}\s+(\d+)", hip).group(1)  # type: ignore[union-attr]
        for p in ("MAJOR", "MINOR", "PATCH")
    )
    (stage / ".info").mkdir()
    (stage / ".info" / "version").write_text(args.version + "\n")
    therock = stage / "share" / "therock"
    therock.mkdir(parents=True, exist_ok=True)
    (therock / "dist_info.json").write_text(json.dumps({"dist_amdgpu_targets": args.targets.replace(",", ";")}))
    manifest = {
        "the_rock_commit": "0000000000000000000000000000000000000000",
        "rocm_version": args.version,
        "rocm_package_version": package_version,
        "flags": {},
        "submodules": [],
        "rehearsal": "not a TheRock build: tests/e2e/therock_tarball.py rearranged Debian sid's ROCm "
        f"{args.version} packages (HIP {hip_version}) and LLVM 22 into TheRock's layout",
        "debian_packages": packages,
    }
    (therock / "therock_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    total = sum(p.stat().st_size for p in stage.rglob("*") if p.is_file() and not p.is_symlink())
    info = {
        "stage": str(stage),
        "group": args.group,
        "version": args.version,
        "package_version": package_version,
        "date": date,
        "hip_version": hip_version,
        "packages": packages,
        "files": tree.files,
        "symlinks": links,
        "bytes": total,
        "kernel_data": tree.kernels,
        "cmake_files_rewritten": cmake_files,
        "runpaths": runpaths,
        "sysdeps": sysdeps,
        "llvm_tools_left_out": tree.dropped_tools,
        "seconds": round(time.monotonic() - start, 1),
    }
    Path(str(stage) + ".json").write_text(json.dumps(info, indent=2) + "\n")
    log(
        f"tree {stage}: {tree.files} files + {links} links, {total:,} bytes; kernel files kept "
        f"{tree.kernels['kept']} / dropped {tree.kernels['dropped']}; {len(sysdeps)} sysdeps "
        f"({', '.join(sorted(sysdeps))}); {sum(runpaths.values())} RUNPATHs set; {cmake_files} CMake files "
        f"rewritten; {info['seconds']} s"
    )


# --------------------------------------------------------------------------------------------------------- the pack


def pack(args: argparse.Namespace) -> None:
    start = time.monotonic()
    stage = Path(args.stage)
    info = json.loads(Path(str(stage) + ".json").read_text())
    name = f"therock-dist-linux-{info['group']}-{info['package_version']}.tar.gz"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dest = out / name
    partial = out / (name + ".partial")
    gz = "pigz" if shutil.which("pigz") else "gzip"
    # as TheRock's build_tarballs.py: `tar cfz <out> .` inside the dist folder, so members start with ./
    with open(partial, "wb") as fh:
        tar = subprocess.Popen(
            ["tar", "-C", str(stage), "--owner=0", "--group=0", "--numeric-owner", "-cf", "-", "."],
            stdout=subprocess.PIPE,
        )
        subprocess.run([gz, "-6"], stdin=tar.stdout, stdout=fh, check=True)
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0:
            sys.exit("error: tar failed")
    os.replace(partial, dest)
    digest = hashlib.sha256()
    with open(dest, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    result = {
        "name": name,
        "path": str(dest),
        "size": dest.stat().st_size,
        "sha256": digest.hexdigest(),
        "tree_bytes": info["bytes"],
        "compressor": gz,
        "seconds": round(time.monotonic() - start, 1),
        "tree": info,
    }
    Path(str(dest) + ".json").write_text(json.dumps(result, indent=2) + "\n")
    log(f"{dest}: {result['size']:,} bytes ({gz} -6, {result['seconds']} s), sha256 {result['sha256'][:16]}...")
    if not args.keep_stage:
        shutil.rmtree(stage)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    tree = sub.add_parser("tree", help="assemble the tree (run inside the ROCm root)")
    tree.add_argument("--stage", required=True)
    tree.add_argument("--group", default="gfx1151")
    tree.add_argument("--targets", default="gfx1151", help="kernel data kept (comma-separated)")
    tree.add_argument("--version", default="7.2.4")
    tree.add_argument("--date", default=None, help="YYYYMMDD of the nightly (default: today, UTC)")
    tree.add_argument("--llvm", default="/usr/lib/llvm-22")
    tree.set_defaults(func=build_tree)
    packer = sub.add_parser("pack", help="tar + gzip the tree as TheRock does")
    packer.add_argument("--stage", required=True)
    packer.add_argument("--out", required=True)
    packer.add_argument("--keep-stage", action="store_true")
    packer.set_defaults(func=pack)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
