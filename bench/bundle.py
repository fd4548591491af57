"""Benchmark the bundle stage against the pipeline it replaces, both measured in this run on the same build.

Closure: rockbuild's plan (pyelftools closure + dlopen extras + kernel pruning, nothing executed) against the seed's
``utils/gather_required_libs.py`` method: run ``llama-server --version`` in a root without ROCm, parse "error while
loading shared libraries: X", find X with os.walk under the ROCm root's usr/lib, copy it next to the binaries, repeat
until it starts (LD_LIBRARY_PATH points at the folder, the most favourable reading of the seed). Its iterations are
counted, and what it never finds (dlopen'ed comgr and comgr's closure) is listed.

Archives: our bundle as .tar.gz and .zip against the seed's method (zip -r: symlinks stored as files because every
``lib.so*`` name is copied, whole kernel folders, hipBLASLt shipped), whole (``--no-prune-fatbin``) and as bundled by
default (rocBLAS/rocSOLVER pruned to the targets, each proved against its original by the root's clang-offload-bundler).
Then the default bundle's .tar.gz and .zip are extracted the way ``rockbuild install`` does (rockbuild.archive's
tar extractor, install's zip extractor: all-zero blocks left as holes) and measured on disk (allocated blocks, as du).

Runs as root (chroot and a bind mount into the clean root), on the real gfx1151 build:

    python bench/bundle.py --build /var/cache/rockbuild/e2e/rocm-root/e2e/out/linux-gfx1151/build \
        --rocm /var/cache/rockbuild/e2e/rocm-root --clean-root /var/cache/rockbuild/e2e/clean-root
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


from rockbuild.archive import extract_tarball  # noqa: E402
from rockbuild.backends import REGISTRY  # noqa: E402
from rockbuild.bundle import elf  # noqa: E402
from rockbuild.bundle import policy as policy_mod  # noqa: E402
from rockbuild.bundle.plan import BundleRequest, bundle, linux_closure, make_plan  # noqa: E402
from rockbuild.bundle.policy import load_policy  # noqa: E402
from rockbuild.rocm.layout import detect_layout  # noqa: E402

MISSING_RE = re.compile(r"error while loading shared libraries: ([^:\s]+):")
GOAL_SPEEDUP = 20.0
GOAL_ARCHIVE_RATIO = 0.10
GOAL_INSTALLED_BYTES = 300_000_000  # issue 21: the installed gfx1151 bundle <= 0.3 GB on disk (du)


def clear_caches() -> None:
    elf._read_elf_cached.cache_clear()
    elf._resolve_folder_in_root.cache_clear()
    policy_mod._system_reason.cache_clear()


def seed_loop(build_bin: Path, rocm: Path, clean: Path, work: Path, program: str) -> dict:
    """The seed's run-parse-copy loop, timed; returns iterations, libraries copied and seconds."""
    dest = work / "seed" / "bin"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(build_bin, dest, symlinks=False)  # the seed zips build/bin as it is: links become files
    mountpoint = clean / "opt" / "rockbuild-seedbench"
    mountpoint.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(dest), str(mountpoint)], check=True)
    copied: list[str] = []
    iterations = 0
    search_root = rocm / "usr" / "lib"
    start = time.monotonic()
    try:
        while True:
            iterations += 1
            result = subprocess.run(
                [
                    "chroot",
                    str(clean),
                    "/usr/bin/env",
                    "-i",
                    "LD_LIBRARY_PATH=/opt/rockbuild-seedbench",
                    f"/opt/rockbuild-seedbench/{program}",
                    "--version",
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            m = MISSING_RE.search(result.stderr)
            if not m:
                break
            name = m.group(1)
            found = None
            for dirpath, _dirnames, filenames in os.walk(search_root):
                if name in filenames:
                    found = Path(dirpath) / name
                    break
            if found is None or name in copied:
                raise SystemExit(f"seed loop: {name} not found under {search_root} (or copied already)")
            shutil.copyfile(found.resolve(), dest / name)
            copied.append(name)
    finally:
        subprocess.run(["umount", str(mountpoint)], check=False)
        mountpoint.rmdir()
    return {
        "iterations": iterations,
        "copied": copied,
        "seconds": time.monotonic() - start,
        "final_exit": result.returncode,
        "final_stdout": result.stdout.strip()[:200],
    }


def seed_tree(seed_bin: Path, rocm_libdir: Path, layout) -> Path:
    """The seed's shipped folder: each copied library under every lib.so* name, whole kernel folders, hipBLASLt."""
    for lib in list(seed_bin.glob("lib*.so*")):
        stem = lib.name.split(".so", 1)[0]
        for sibling in rocm_libdir.glob(f"{stem}.so*"):
            target = seed_bin / sibling.name
            if not target.exists():
                shutil.copyfile(sibling.resolve(), target)
    for name in (
        "libhipblaslt.so",
        "libhipblaslt.so.1",
        "libhipblaslt.so.1.2",
        "libamd_comgr.so",
        "libamd_comgr.so.3",
        "libamd_comgr.so.3.0.0",
    ):
        src = rocm_libdir / name
        if src.exists() and not (seed_bin / name).exists():
            shutil.copyfile(src.resolve(), seed_bin / name)
    for data in layout.kernel_data:
        dest = seed_bin / data.component / "library"
        if not dest.exists():
            shutil.copytree(data.path.resolve() if not data.path.is_symlink() else data.path, dest, symlinks=False)
    return seed_bin


def _gz_size(path: Path) -> int:
    """gzip -6 size of one file (pigz when present: same format, both cores)."""
    tool = shutil.which("pigz") or "gzip"
    with subprocess.Popen([tool, "-6", "-c", str(path)], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        size = sum(len(chunk) for chunk in iter(lambda: proc.stdout.read(1 << 20), b""))
    return size


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (files and folders, as ``du -s --block-size=1``): holes count nothing."""
    return sum(p.lstat().st_blocks * 512 for p in [path, *path.rglob("*")])


def zip_size(folder: Path, out: Path) -> tuple[int, float]:
    if out.exists():
        out.unlink()
    start = time.monotonic()
    subprocess.run(["zip", "-q", "-r", str(out), "."], cwd=folder, check=True)
    return out.stat().st_size, time.monotonic() - start


def targz_size(folder: Path, out: Path) -> tuple[int, float]:
    start = time.monotonic()
    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        tar.add(folder, arcname=".")
    return out.stat().st_size, time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", type=Path, required=True, help="the llama.cpp build tree (holds bin/)")
    parser.add_argument("--rocm", type=Path, required=True, help="the ROCm root the build used")
    parser.add_argument("--clean-root", type=Path, default=None, help="a root without ROCm for the seed loop")
    parser.add_argument("--targets", default="gfx1151")
    parser.add_argument("--program", default="llama-server")
    parser.add_argument("--workdir", type=Path, default=Path("/var/cache/rockbuild/bench/bundle"))
    parser.add_argument("--no-archives", action="store_true", help="skip the (minutes-long) archive comparison")
    parser.add_argument("--keep", action="store_true", help="keep the bundles and archives")
    args = parser.parse_args()

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    layout = detect_layout(args.rocm)
    build_bin = args.build / "bin" if (args.build / "bin").is_dir() else args.build
    targets = [t for t in args.targets.split(",") if t]
    results: dict = {"build": str(build_bin), "rocm": str(args.rocm), "targets": targets}

    # ours, each run with cold caches (ELF headers, folder resolution, policy matches): the closure with its dlopen
    # extras alone, and the whole plan (closure + kernel-data pruning + patch list)
    policy = load_policy()
    closure_times, plan_times = [], []
    for _ in range(5):
        clear_caches()
        start = time.monotonic()
        linux_closure(build_bin, layout, policy.linux)
        closure_times.append(time.monotonic() - start)
        clear_caches()
        start = time.monotonic()
        plan = make_plan(
            BundleRequest(
                build_bin, work / "ours", policy, layout, tuple(targets), prune_fatbin=False, backends=REGISTRY
            )
        )  # as before
        plan_times.append(time.monotonic() - start)
    ours_names = sorted(f.dest for f in plan.files if f.kind == "lib")
    closure_s = sorted(closure_times)[len(closure_times) // 2]
    plan_s = sorted(plan_times)[len(plan_times) // 2]
    results["ours"] = {
        "closure_seconds": closure_s,
        "closure_seconds_runs": closure_times,
        "plan_seconds": plan_s,
        "plan_seconds_runs": plan_times,
        "libraries": ours_names,
        "errors": list(plan.errors),
    }
    print(
        f"ours: closure + dlopen extras in {closure_s * 1000:.0f} ms, whole plan (+ kernel pruning) in "
        f"{plan_s * 1000:.0f} ms (medians of 5, cold caches), {len(ours_names)} libraries",
        flush=True,
    )
    report = bundle(
        BundleRequest(
            build_bin, work / "ours", load_policy(), layout, tuple(targets), prune_fatbin=False, backends=REGISTRY
        )
    )
    results["ours"].update(
        {
            "bundle_seconds": report.seconds,
            "bundle_bytes": report.plan.total_bytes,
            "files": len(report.plan.files),
            "audit_ok": report.audit.ok if report.audit else None,
            "versions": {k: v for k, v in (report.audit.versions.items() if report.audit else [])},
        }
    )
    print(
        f"ours: bundle {report.plan.total_bytes:,} bytes, {len(report.plan.files)} files, "
        f"{', '.join(f'{k} {v:.1f}s' for k, v in report.seconds.items())}; audit "
        f"{'ok' if report.audit and report.audit.ok else 'FAILED'}",
        flush=True,
    )

    if args.clean_root is not None:
        if os.geteuid() != 0:
            raise SystemExit("the seed loop needs root (chroot, mount --bind)")
        seed = seed_loop(build_bin, args.rocm, args.clean_root, work, args.program)
        missed = sorted(set(ours_names) - set(seed["copied"]) - {p.name for p in build_bin.iterdir()})
        seed["missed_vs_ours"] = missed
        results["seed"] = seed
        speedup = seed["seconds"] / results["ours"]["closure_seconds"]
        results["closure_speedup"] = speedup
        results["plan_speedup"] = seed["seconds"] / results["ours"]["plan_seconds"]
        print(
            f"seed: {seed['iterations']} run-parse-copy iterations in {seed['seconds']:.2f}s, "
            f"{len(seed['copied'])} libraries; never found: {', '.join(missed) or 'nothing'}",
            flush=True,
        )
        print(
            f"speed-up: closure {speedup:.0f}x, whole plan {results['plan_speedup']:.0f}x "
            f"(goal >= {GOAL_SPEEDUP:.0f}x)",
            flush=True,
        )
        if not args.no_archives:
            seed_dir = seed_tree(work / "seed" / "bin", layout.library_dirs[0], layout)
            seed_zip, seed_zip_s = zip_size(seed_dir, work / "seed.zip")
            ours_zip, ours_zip_s = zip_size(work / "ours", work / "ours.zip")
            ours_tgz, ours_tgz_s = targz_size(work / "ours", work / "ours.tar.gz")
            results["archives"] = {
                "seed_tree_bytes": dir_bytes(seed_dir),
                "seed_zip": seed_zip,
                "seed_zip_seconds": seed_zip_s,
                "ours_tree_bytes": dir_bytes(work / "ours"),
                "ours_zip": ours_zip,
                "ours_zip_seconds": ours_zip_s,
                "ours_tar_gz": ours_tgz,
                "ours_tar_gz_seconds": ours_tgz_s,
                "ratio_zip": ours_zip / seed_zip,
                "ratio_tar_gz": ours_tgz / seed_zip,
            }
            print(
                f"archives: seed zip {seed_zip:,} B ({dir_bytes(seed_dir):,} B of files); ours whole "
                f"(--no-prune-fatbin) zip {ours_zip:,} B, "
                f"tar.gz {ours_tgz:,} B = {ours_tgz / seed_zip:.2f}x of the seed's (goal <= {GOAL_ARCHIVE_RATIO})",
                flush=True,
            )
            # the default: every non-target code object pruned out of the shipped fat binaries, and proved
            pruned = bundle(
                BundleRequest(build_bin, work / "ours-pruned", load_policy(), layout, tuple(targets), backends=REGISTRY)
            )
            pruned_zip, pruned_zip_s = zip_size(work / "ours-pruned", work / "ours-pruned.zip")
            pruned_tgz, pruned_tgz_s = targz_size(work / "ours-pruned", work / "ours-pruned.tar.gz")
            per_file = {}
            for p in pruned.pruned:
                name = p.path.name
                src = next(f.source for f in pruned.plan.files if f.dest == name)
                alone = work / f"one-{name}"
                shutil.copyfile(src, alone)
                before_gz = _gz_size(alone)
                shutil.copyfile(work / "ours-pruned" / name, alone)
                after_gz = _gz_size(alone)
                alone.unlink()
                per_file[name] = {**p.to_dict(), "gzip_before": before_gz, "gzip_after": after_gz}
            installed = {}
            for kind, archive in (("tar_gz", work / "ours-pruned.tar.gz"), ("zip", work / "ours-pruned.zip")):
                dest = work / f"installed-{kind}"
                if dest.exists():
                    shutil.rmtree(dest)
                start = time.monotonic()
                if kind == "tar_gz":
                    extract_tarball(archive, dest)
                else:
                    from rockbuild.install import extract_zip_safely

                    extract_zip_safely(archive, dest)
                installed[kind] = {
                    "seconds": time.monotonic() - start,
                    "disk_bytes": disk_bytes(dest),
                    "apparent_bytes": dir_bytes(dest),
                }
                shutil.rmtree(dest)
            results["pruned"] = {
                "seconds": pruned.seconds,
                "zip": pruned_zip,
                "zip_seconds": pruned_zip_s,
                "tar_gz": pruned_tgz,
                "tar_gz_seconds": pruned_tgz_s,
                "ratio_zip": pruned_zip / seed_zip,
                "ratio_tar_gz": pruned_tgz / seed_zip,
                "audit_ok": pruned.audit.ok if pruned.audit else None,
                "bundle_disk_bytes": disk_bytes(work / "ours-pruned"),
                "installed": installed,
                "files": per_file,
            }
            for name, info in per_file.items():
                proof = info["verification"] or {}
                print(
                    f"pruned {name}: {info['bytes_zeroed']:,} B of code objects zeroed in place "
                    f"({info['bytes_in_holes']:,} B left as holes); gzip {info['gzip_before']:,} -> "
                    f"{info['gzip_after']:,} B; proof {'ok' if proof.get('ok') else 'FAILED'}: "
                    f"{proof.get('code_objects')} code objects byte-identical in {proof.get('seconds')} s",
                    flush=True,
                )
            print(
                f"archives as bundled by default (pruned): zip {pruned_zip:,} B ({pruned_zip / seed_zip:.3f}x), "
                f"tar.gz {pruned_tgz:,} B ({pruned_tgz / seed_zip:.3f}x of the seed's zip; goal <= "
                f"{GOAL_ARCHIVE_RATIO})",
                flush=True,
            )
            for kind, info in installed.items():
                print(
                    f"installed from the {kind.replace('_', '.')}: {info['disk_bytes']:,} B on disk "
                    f"({info['apparent_bytes']:,} B of file content; goal <= {GOAL_INSTALLED_BYTES:,}), "
                    f"extracted in {info['seconds']:.1f} s",
                    flush=True,
                )
    (work / "bench-bundle.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"results: {work / 'bench-bundle.json'}")
    if not args.keep:
        for name in (
            "ours",
            "seed",
            "ours.zip",
            "ours.tar.gz",
            "seed.zip",
            "ours-pruned",
            "ours-pruned.zip",
            "ours-pruned.tar.gz",
        ):
            path = work / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
