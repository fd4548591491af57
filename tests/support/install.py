"""For the install tests: a make_job bundle made real (a llama-server that runs, a libggml-hip with the targets'
code objects) and install's options against the local GitHub API server."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from rockbuild.core.jobs import load_families
from rockbuild.core.programs import load_programs
from rockbuild.install import InstallOptions
from rockbuild.settings import Settings
from support.bundles import cc, fatbin_source, offload_bundle
from support.paths import FIXTURES
from support.publishing import TOKEN

SYSFS = FIXTURES / "sysfs"


def real_bundle(bundle: Path, targets: tuple[str, ...]) -> Path:
    """Replace a make_job bundle's stand-ins by a llama-server that runs (every other program of programs.yaml a copy
    of it, so the release is whole) and a libggml-hip carrying ``targets``."""
    for path in sorted(bundle.rglob("*"), reverse=True):
        if path.name != "bundle.json":
            path.rmdir() if path.is_dir() else path.unlink()
    hip = cc(
        bundle / "libggml-hip.so",
        fatbin_source([offload_bundle(list(targets))]) + "int ggml_hip_value(void){return 7;}",
        shared=True,
        soname="libggml-hip.so",
        runpath=("$ORIGIN",),
    )
    cc(
        bundle / "llama-server",
        "#include <stdio.h>\nint ggml_hip_value(void);\n"
        'int main(void){printf("llama-server %d\\n", ggml_hip_value());return 0;}',
        libs=(hip,),
        runpath=("$ORIGIN",),
    )
    for program in load_programs().programs:  # the rest of a whole release's programs: copies that run too
        name = program.file_name
        if not (bundle / name).exists():
            shutil.copy2(bundle / "llama-server", bundle / name)
    meta = json.loads((bundle / "bundle.json").read_text())
    meta.update(targets=list(targets))
    meta["audit"]["fat_binaries"] = [{"file": "libggml-hip.so", "targets": list(targets)}]
    (bundle / "bundle.json").write_text(json.dumps(meta))
    return bundle


def options(gh, tmp_path, path: str | None = None, **kw) -> InstallOptions:
    """``path``: the PATH install sees (default: a folder without gh, whatever this machine has installed)."""
    kw.setdefault("sysfs_root", SYSFS / "igpu-dgpu" / "sys")
    kw.setdefault("dest", tmp_path / "llama")
    empty = tmp_path / "no-gh"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": path or str(empty), "GITHUB_TOKEN": TOKEN}
    return InstallOptions(
        repo=gh.full_name,
        api_url=gh.api_url,
        cache=tmp_path / "cache",
        context=Settings.from_environment(env),
        families=load_families(),
        **kw,
    )
