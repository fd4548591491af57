"""Job folders for publisher tests: out/<job-id>/ with build.json, a small real bundle/ and bundle.json (+ smoke.json),
shaped like what rockbuild build / bundle / smoke write."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

from rockbuild.publish.config import PublishConfig, load_publish_config

TOKEN = "ghp_TestToken0123456789abcdefSECRET"
COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def config(**changes) -> PublishConfig:
    from dataclasses import replace

    return replace(load_publish_config(), **changes)


def tiny_pe(payload: bytes, *, dll: bool, sections: dict[str, bytes] | None = None) -> bytes:
    """A minimal, valid x86-64 PE32+ image (no imports): ``payload`` in .text, then ``sections`` (name: bytes, names
    of at most 8 bytes, as linkers cut them). What pefile and the audit read as a whole .exe or .dll, for tests that
    need Windows files without a compiler."""
    align, page = 0x200, 0x1000
    parts = [(b".text", payload, 0x60000020), *((n.encode(), d, 0x40000040) for n, d in (sections or {}).items())]
    header_size = (0x40 + 24 + 0xF0 + 40 * len(parts) + align - 1) // align * align
    table, body, rva, raw_at = b"", b"", page, header_size
    for name, data, flags in parts:
        raw = data + b"\0" * (-len(data) % align)
        table += struct.pack("<8sIIIIIIHHI", name, len(data), rva, len(raw), raw_at, 0, 0, 0, 0, flags)
        body += raw
        rva += max(page, (len(data) + page - 1) // page * page)
        raw_at += len(raw)
    dos = b"MZ" + b"\0" * 58 + struct.pack("<I", 0x40)
    coff = struct.pack("<4sHHIIIHH", b"PE\0\0", 0x8664, len(parts), 0, 0, 0, 0xF0, 0x2022 if dll else 0x22)
    optional = struct.pack(
        "<HBBIIIIIQIIHHHHHHIIIIHHQQQQII",
        0x20B,
        14,
        0,
        len(payload),
        0,
        0,
        page,
        page,
        0x140000000,
        page,
        align,
        6,
        0,
        0,
        0,
        6,
        0,
        0,
        rva,
        header_size,
        0,
        2 if dll else 3,
        0x8160,
        0x100000,
        page,
        0x100000,
        page,
        0,
        16,
    ) + b"\0" * (16 * 8)
    headers = dos + coff + optional + table
    return headers + b"\0" * (header_size - len(headers)) + body


def make_job(
    out: Path,
    job_id: str,
    *,
    targets=("gfx1151",),
    required=True,
    status="ok",
    failed_step=None,
    rocm="7.2.0a20261128",
    commit=COMMIT,
    build="11312",
    smoke: dict | None = None,
    extra_files: dict[str, bytes] | None = None,
    audit_ok=True,
    web_ui=True,
    programs=None,
) -> Path:
    """A job folder as the night leaves it. Whole by default, as publish wants it (rockbuild.publish.whole): build.json
    records an embedded chat page (``web_ui=False``: none, npm missing, as a root without npm builds) and the bundle
    holds every program of the shipped programs.yaml (``programs``: only these targets)."""
    from rockbuild.core.programs import load_programs

    os_name, name = job_id.split("-", 1)
    job = out / job_id
    job.mkdir(parents=True)
    day = rocm[-8:]
    tarball = f"therock-dist-{os_name}-{name}-{rocm}.tar.gz"
    build_json = {
        "schema": 1,
        "status": status,
        "failed_step": failed_step,
        "job": {
            "id": job_id,
            "os": os_name,
            "name": name,
            "family": name,
            "targets": list(targets),
            "required": required,
        },
        "gpu_targets": list(targets),
        "llama_cpp": {"commit": commit, "build_number": build},
        "rocm": {
            "version": rocm.split("a")[0],
            "package_version": rocm,
            "therock_commit": "89553ce3a5a4c5b8d0e1",
            "tarball": {"name": tarball, "sha256": "ab" * 32, "group": name},
        },
        "cmake_definitions": {"GGML_HIP": "ON", "GPU_TARGETS": ";".join(targets), "CMAKE_C_COMPILER": "/r/clang"},
        "paths": {"log": str(job / "build.log")},
        "finished": f"{day[:4]}-{day[4:6]}-{day[6:]}T13:40:00+00:00",
        "web_ui": WEB_UI if web_ui else NO_WEB_UI,
    }
    listed = [p for p in load_programs().programs if programs is None or p.target in programs]
    build_json["programs"] = [p.to_dict() for p in listed]
    (job / "build.json").write_text(json.dumps(build_json))
    (job / "build.log").write_text(
        "".join(f"[{i}/363] Building HIP object ggml/x{i}.cu.o\n" for i in range(50))
        + "FAILED: ggml/src/ggml-cuda/mmq.cu.o\nerror: out of memory\n"
    )
    if status != "ok":
        return job
    bundle = job / "bundle"
    windows = os_name == "windows"
    exe = ".exe" if windows else ""

    def stand_in(
        data: bytes, dll: bool = False
    ) -> bytes:  # Windows files are real (tiny) PE files: install audits them
        if not windows:
            return data
        from support.bundles import offload_bundle

        return tiny_pe(data, dll=dll, sections={".hip_fat": offload_bundle(list(targets))} if dll else None)

    files = {
        f"llama-server{exe}": (stand_in(b"\x7fELF-not-really server " + job_id.encode()), 0o755),
        f"llama-cli{exe}": (stand_in(b"cli " + job_id.encode()), 0o755),
        f"llama-bench{exe}": (stand_in(b"bench " + job_id.encode()), 0o755),
        ("ggml-hip.dll" if windows else "libggml-hip.so"): (stand_in(b"hip " * 64 + job_id.encode(), True), 0o755),
        "rocblas/library/TensileLibrary_lazy_gfx1151.dat": (b"kernels" * 100, 0o644),
    }
    for program in listed:  # the rest of the release's programs (the three above are bigger, to tell assets apart)
        files.setdefault(program.file_for(os_name), (stand_in(program.target.encode()), 0o755))
    for rel, data in (extra_files or {}).items():
        files[rel] = (data, 0o755)
    for rel, (data, mode) in files.items():
        path = bundle / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    meta = {
        "format": 1,
        "platform": os_name,
        "targets": list(targets),
        "audit": {
            "ok": audit_ok,
            "failures": [] if audit_ok else ["needed: libfoo.so.1 is missing"],
            "fat_binaries": [{"file": "libggml-hip.so", "targets": list(targets)}],
        },
    }
    (bundle / "bundle.json").write_text(json.dumps(meta))
    if smoke is not None:
        (job / "smoke.json").write_text(json.dumps(smoke))
    return job


WEB_UI = {
    "status": "built",
    "reason": None,
    "sha256": "5e" * 32,
    "files": 9,
    "bytes": 1_843_211,
    "build_number": "11312",
    "embedded": "/src/llama.cpp/tools/ui/dist",
}
NO_WEB_UI = {"status": "none", "reason": "npm is not installed (not on PATH)"}


def smoke_ok(placement="cpu", pp=335.3, tg=1438.4) -> dict:
    model = {
        "name": "Qwen3-0.6B-Q4_0.gguf",
        "path": "/cache/models/Qwen3-0.6B-Q4_0.gguf",
        "sha256": "33bc" * 16,
        "size": 382_000_000,
        "source": "default",
        "url": None,
        "note": "",
    }  # the smoke's ModelFile, as written
    return {
        "ok": True,
        "failures": [],
        "model": model,
        "gpu": {"placement": placement, "summary": "gpu: absent (CPU run proves library loading only)"},
        "bench": [
            {"test": "pp64", "n_prompt": 64, "n_gen": 0, "tokens_per_second": pp},
            {"test": "tg16", "n_prompt": 0, "n_gen": 16, "tokens_per_second": tg},
        ],
        "runs": {},
    }


def compile_needing_glibc_236(dest: Path) -> Path:
    """A real ELF that needs GLIBC_2.36 (arc4random, new in glibc 2.36), built with this machine's gcc."""
    src = dest.with_suffix(".c")
    src.write_text('#include <stdlib.h>\n#include <stdio.h>\nint main(void){printf("%u\\n", arc4random());return 0;}\n')
    subprocess.run(["gcc", "-O1", "-o", str(dest), str(src)], check=True, capture_output=True)
    src.unlink()
    return dest


def image_packages_missing(backend: str) -> list[str]:
    """The Debian packages an image of ``backend`` copies from this machine (config/images.yaml) that it has not
    installed: a test that builds a real image needs none missing, as the publishing machine does."""
    from rockbuild.image.base import installed_packages
    from rockbuild.publish.image import load_images_config

    wanted = load_images_config().packages
    installed = installed_packages()
    return [p for p in (*wanted.get("all", ()), *wanted.get(backend, ())) if p not in installed]
