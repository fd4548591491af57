"""Make a large gzip tarball shaped like a TheRock ROCm tarball, for benchmarks (cached, never committed).

The real ones are 1.2–2.6 GB of gzip over 2–13 GB of files: thousands of small headers and cmake files, a few huge
fat-binary libraries, kernel databases, SONAME symlink chains, members prefixed with ``./``. What matters for
download+extract speed is the byte count, the compression ratio (about 0.57 for a 1.2 GB / 2.1 GB Linux gfx1151
tarball) and the number of members, so this generator reproduces those, deterministically.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

# (directory, files, size of each in bytes): about 2.1 GB in ~9,000 members, like a Linux per-family tarball.
SHAPE: list[tuple[str, int, int]] = [
    ("include/hip", 1500, 12_000),
    ("include/rocblas", 800, 20_000),
    ("lib/cmake/hip", 300, 6_000),
    ("share/doc", 1200, 4_000),
    ("lib/llvm/lib/clang/22/include", 1800, 30_000),
    ("lib/rocblas/library", 1900, 290_000),
    ("lib/hipblaslt/library", 1300, 330_000),
    ("lib/llvm/bin", 8, 40_000_000),
    ("lib", 12, 30_000_000),
]
BIG_LIBS = [("lib/librocsolver.so.0.7.0", 300_000_000), ("lib/llvm/lib/libLLVM.so.22.0", 150_000_000)]


def _content(rng: random.Random, size: int, noise: bytes) -> bytes:
    """Half incompressible, half very compressible, interleaved in 64 KiB blocks: gzip ratio ~0.55."""
    block = 64 * 1024
    out = bytearray()
    text = (b"ROCm TheRock build artefact; " * 2300)[:block]
    while len(out) < size:
        start = rng.randrange(0, len(noise) - block)
        out += noise[start : start + block]
        out += text[: min(block, size - len(out))]
    return bytes(out[:size])


def make_therock_tarball(path: Path, *, scale: float = 1.0, seed: int = 7) -> dict[str, object]:
    """Write ``path`` (gzip tar, TheRock layout) unless it exists with its sidecar; return its description."""
    sidecar = path.with_suffix(path.suffix + ".json")
    if path.exists() and sidecar.exists():
        return dict(json.loads(sidecar.read_text()))
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    noise = rng.randbytes(8 << 20)
    start = time.monotonic()
    tmp = path.with_suffix(".tmp")
    members = 0
    raw_bytes = 0
    compressor = ["pigz", "-6", "-c"] if shutil.which("pigz") else ["gzip", "-6", "-c"]
    with open(tmp, "wb") as out_fh:
        proc = subprocess.Popen(compressor, stdin=subprocess.PIPE, stdout=out_fh)
        assert proc.stdin is not None
        with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.GNU_FORMAT) as tar:

            def add_dir(name: str) -> None:
                nonlocal members
                info = tarfile.TarInfo("./" + name)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1_760_000_000
                tar.addfile(info)
                members += 1

            def add_file(name: str, data: bytes, mode: int = 0o644) -> None:
                nonlocal members, raw_bytes
                info = tarfile.TarInfo("./" + name)
                info.size, info.mode, info.mtime = len(data), mode, 1_760_000_000
                tar.addfile(info, io.BytesIO(data))
                members += 1
                raw_bytes += len(data)

            def add_link(name: str, target: str, *, hard: bool = False) -> None:
                nonlocal members
                info = tarfile.TarInfo("./" + name)
                info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
                info.linkname = ("./" + target) if hard else target
                info.mode, info.mtime = 0o777, 1_760_000_000
                tar.addfile(info)
                members += 1

            made: set[str] = set()

            def ensure_dirs(rel: str) -> None:
                parts = rel.split("/")
                for i in range(1, len(parts) + 1):
                    d = "/".join(parts[:i])
                    if d not in made:
                        made.add(d)
                        add_dir(d)

            ensure_dirs(".info")
            add_file(".info/version", b"10.2.0\n")
            ensure_dirs("share/therock")
            manifest = {"the_rock_commit": "0" * 40, "rocm_version": "10.2.0a20261128"}
            add_file("share/therock/therock_manifest.json", json.dumps(manifest).encode())
            for directory, count, size in SHAPE:
                n, each = max(1, int(count * scale)), size
                ensure_dirs(directory)
                for i in range(n):
                    vary = int(each * (0.5 + rng.random()))
                    name = f"{directory}/f{i:05d}.bin" if "bin" not in directory else f"{directory}/tool{i}"
                    add_file(name, _content(rng, vary, noise), 0o755 if "bin" in directory else 0o644)
            for name, size in BIG_LIBS:
                ensure_dirs(name.rsplit("/", 1)[0])
                add_file(name, _content(rng, int(size * scale), noise), 0o755)
            ensure_dirs("bin")
            add_link("bin/amdclang", "../lib/llvm/bin/tool0")
            add_link("llvm", "lib/llvm")
            add_link("lib/librocsolver.so.0", "librocsolver.so.0.7.0")
            add_link("lib/librocsolver.so", "librocsolver.so.0")
            add_link("lib/llvm/bin/clang", "tool1")
            add_link("lib/llvm/bin/clang++", "tool1")
            add_link("lib/llvm/bin/ld.lld", "lib/llvm/bin/tool2", hard=True)
        proc.stdin.close()
        if proc.wait() != 0:
            raise RuntimeError(f"{compressor[0]} failed")
    tmp.replace(path)
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 << 20):
            digest.update(chunk)
    info = {
        "path": str(path),
        "size": path.stat().st_size,
        "extracted_bytes": raw_bytes,
        "members": members,
        "sha256": digest.hexdigest(),
        "seconds_to_make": round(time.monotonic() - start, 1),
    }
    sidecar.write_text(json.dumps(info, indent=2))
    return info


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="A TheRock-shaped gfx1151 tarball (about 1.2 GB) for bench/fetch.py.")
    parser.add_argument(
        "out",
        nargs="?",
        type=Path,
        default=Path("/var/cache/rockbuild/bench/therock-dist-linux-gfx1151-10.2.0a20261128.tar.gz"),
        help="where to write it (default: under /var/cache/rockbuild/bench)",
    )
    print(json.dumps(make_therock_tarball(parser.parse_args().out), indent=2))
