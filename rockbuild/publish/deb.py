"""A Debian package per Linux release asset: the same bundle, installed where a package manager can remove it.

* Built with ``dpkg-deb --build --root-owner-group`` (Debian's own tool, on every Debian/Ubuntu machine and GitHub's
  ubuntu runners): it writes the ar/tar format, checks the control file and the maintainer scripts, and honours
  ``SOURCE_DATE_EPOCH``. What it leaves to a packaging helper (debhelper's dh_md5sums, dh_installdeb, dpkg-gencontrol's
  Installed-Size) is done here, the way those helpers do it.
* ``rockbuild-llama-<name>`` (``+`` of a mixed-GPU job's name becomes ``-``; lower case, as Debian wants) installs the
  bundle, byte for byte as audited (never stripped), under ``/opt/rockbuild/llama-<tag>-<name>``; version
  ``<llama.cpp build>+<tag>``: a newer llama.cpp, then a newer release tag (b1001 after b1000, b10000 after b9999),
  is an upgrade.
* Its programs reach ``/usr/bin`` through ``update-alternatives`` (one link group, master ``llama-server``), as
  Debian does for several builds of one interface (BLAS, java, editor): packages of different families (gfx1151 and
  vulkan, say) install side by side, ``/usr/bin/llama-server`` runs the highest priority one (a ROCm build over a
  Vulkan one) and ``update-alternatives --config llama-server`` switches every program at once. Each alternative is
  a two-line shell wrapper in ``/usr/lib/<package>/bin`` that execs the program by its absolute path: a path that stays
  the same across upgrades (so a user's choice survives them), and ``$ORIGIN`` is the bundle's folder whatever the
  caller's path.
* Depends on exactly the libraries the bundle leaves to the host (the audit's ``needed`` rule: DT_NEEDED names no file
  of the bundle provides), mapped to packages by ``assets.deb_packages`` in ``config/publish.yaml`` and versioned by
  the bundle's glibc floor (:mod:`.floor`): never on a ROCm package.
* Reproducible: every member owned by root, sorted, one timestamp (the archives'), gzip at the archives' level.
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import os
import re
import shutil
import stat
import tempfile
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rockbuild.backends import get_backend
from rockbuild.bundle.elf import read_elf, version_key
from rockbuild.core.errors import ProcessError, PublishError
from rockbuild.process import Output, child_env, run

from .archives import Entry, collect_entries
from .config import PublishConfig
from .floor import bundle_floor, host_elf
from .jobs import BuiltJob

PREFIX = "/opt/rockbuild"
MASTER = "llama-server"  # the link group's master: every llama.cpp build ships it (the smoke test runs it)
ARCHITECTURE = "amd64"  # the -x64 assets
PRIORITY_ROCM, PRIORITY_OTHER = 60, 50  # a ROCm build for the user's GPU family before a vendor-neutral one
# The GCC release that first shipped each libstdc++ symbol version: Debian's libstdc++6 is versioned by GCC's, and its
# symbols file maps the versions the same way (libstdc++ manual, "ABI Policy and Guidelines", Symbol versioning).
_LIBSTDCXX_GCC = {
    "GLIBCXX": {
        "3.4.21": "5",
        "3.4.22": "6",
        "3.4.23": "7",
        "3.4.24": "7.2",
        "3.4.25": "8",
        "3.4.26": "9",
        "3.4.28": "10",
        "3.4.29": "11",
        "3.4.30": "12",
        "3.4.31": "13",
        "3.4.32": "13.2",
        "3.4.33": "14",
        "3.4.34": "15",
    },
    "CXXABI": {
        "1.3.9": "5",
        "1.3.10": "6",
        "1.3.11": "7",
        "1.3.12": "9",
        "1.3.13": "11",
        "1.3.14": "13",
        "1.3.15": "14",
        "1.3.16": "15",
    },
}
_LIBRARY_NAME = re.compile(r"\.so(\.\d+)*$")


@dataclass(frozen=True)
class DebPlan:
    """What the package holds and says, decided before anything is written."""

    package: str  # rockbuild-llama-gfx1151
    version: str  # 11312+b1000
    install_dir: str  # /opt/rockbuild/llama-b1000-gfx1151
    wrapper_dir: str  # /usr/lib/rockbuild-llama-gfx1151/bin
    programs: tuple[str, ...]  # llama-bench, llama-cli, llama-server, ...: each gets a /usr/bin alternative
    depends: tuple[str, ...]  # libc6 (>= 2.35), ...
    priority: int
    maintainer: str
    homepage: str
    synopsis: str
    description: tuple[str, ...]  # the long description's paragraphs

    def control(self, installed_kib: int) -> str:
        body = "\n .\n".join(
            textwrap.fill(p, 79, initial_indent=" ", subsequent_indent=" ", break_on_hyphens=False)
            for p in self.description
        )
        fields = [
            ("Package", self.package),
            ("Version", self.version),
            ("Architecture", ARCHITECTURE),
            ("Maintainer", self.maintainer),
            ("Installed-Size", str(installed_kib)),
            ("Depends", ", ".join(self.depends)),
            ("Section", "utils"),
            ("Priority", "optional"),
            ("Homepage", self.homepage),
            ("Description", f"{self.synopsis}\n{body}"),
        ]
        return "".join(f"{k}: {v}\n" for k, v in fields if v)


def path_name(job: BuiltJob) -> str:
    """The job's name as used in paths and package names: ``gfx1151+gfx1201`` -> ``gfx1151-gfx1201``, as in the
    asset names."""
    return job.file_name


def package_name(job: BuiltJob) -> str:
    name = f"rockbuild-llama-{path_name(job)}".lower()
    if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", name):
        raise PublishError(
            f"job {job.id}: {name!r} is not a valid Debian package name",
            hint="a job name may hold letters, digits, '+', '-' and '.'",
        )
    return name


def package_version(job: BuiltJob, tag: str) -> str:
    """``<llama.cpp build>+<tag>``, compared by dpkg part by part, numbers as numbers."""
    build = re.sub(r"\D", "", job.llama_build or "") or "0"
    return f"{int(build)}+{re.sub(r'[^A-Za-z0-9.+~]', '+', tag)}"


def bundle_programs(bundle: Path) -> list[str]:
    """The programs a user runs: executable files at the bundle's top not named like a shared library (the audit's
    ``programs``: llama-cli, llama-server, llama-bench, ggml-rpc-server ...)."""
    out = []
    for path in sorted(bundle.iterdir()):
        if (
            path.is_file()
            and not path.is_symlink()
            and path.stat().st_mode & 0o111
            and not _LIBRARY_NAME.search(path.name)
            and path.suffix != ".json"
        ):
            out.append(path.name)
    return out


def host_libraries(bundle: Path) -> dict[str, str]:
    """{SONAME the host must provide: the first bundle file (relative path) that needs it}."""
    provided: set[str] = set()
    needs: dict[str, str] = {}
    for dirpath, dirnames, files in os.walk(bundle):
        dirnames.sort()
        for name in sorted(files):
            path = Path(dirpath) / name
            info = read_elf(path) if path.is_file() and not path.is_symlink() and host_elf(path) else None
            if info is None or not info.is_loadable:
                continue
            provided.update({name, *([info.soname] if info.soname else [])})
            for lib in info.needed:
                needs.setdefault(lib, path.relative_to(bundle).as_posix())
    return {lib: file for lib, file in sorted(needs.items()) if lib not in provided}


def _libstdcxx_floor(family: str, version: str) -> str | None:
    known = _LIBSTDCXX_GCC[family]
    if version in known:
        return known[version]
    if version_key(version) < min(version_key(v) for v in known):
        return None  # older than every libstdc++6 a supported release has: any will do
    below = [v for v in known if version_key(v) < version_key(version)]
    if below and version_key(version) < max(version_key(v) for v in known):
        return known[max(below, key=version_key)]  # a version between two releases' (none today)
    raise PublishError(
        f"no libstdc++6 version is known for {family}_{version}",
        hint=f"add the GCC release that introduced {family}_{version} to rockbuild/publish/deb.py",
    )


def host_depends(bundle: Path, packages: Mapping[str, str]) -> list[str]:
    """``Depends`` entries: the package of every host library, versioned by the bundle's glibc floor."""
    wanted: dict[str, str] = {}
    for lib, file in host_libraries(bundle).items():
        if lib not in packages:
            raise PublishError(
                f"{file} needs {lib} from the host, and no Debian package is known for it",
                hint="add it to assets.deb_packages in config/publish.yaml",
            )
        wanted[packages[lib]] = ""
    floor = bundle_floor(bundle)
    minimums: dict[str, list[str]] = {}
    for family, (version, _file) in floor.items():
        if family == "GLIBC":
            minimums.setdefault("libc6", []).append(version)
        elif family == "GCC":
            minimums.setdefault("libgcc-s1", []).append(version)
        else:
            gcc = _libstdcxx_floor(family, version)
            if gcc is not None:
                minimums.setdefault("libstdc++6", []).append(gcc)
    for package, versions in minimums.items():
        if package in wanted:  # a symbol version of a library nobody needs by name cannot happen; be safe anyway
            wanted[package] = max(versions, key=version_key)
    return [f"{p} (>= {v})" if v else p for p, v in sorted(wanted.items())]


def plan_deb(job: BuiltJob, tag: str, config: PublishConfig) -> DebPlan:
    assert job.bundle is not None
    package = package_name(job)
    backend = get_backend(job.backend)
    programs = tuple(bundle_programs(job.bundle))
    if MASTER not in programs:
        raise PublishError(
            f"job {job.id}: the bundle has no {MASTER} program, the .deb's /usr/bin link group needs it",
            hint="re-run rockbuild bundle on a build of llama.cpp with its server (LLAMA_BUILD_SERVER)",
        )
    install_dir = f"{PREFIX}/llama-{tag}-{path_name(job)}"
    targets = ", ".join(backend.release_isas(job.isas or job.targets)) or job.name
    commit = (job.llama_commit or "unknown")[:12]
    rocm = (
        (
            f", with the ROCm {job.rocm.version + ' ' if job.rocm.version else ''}libraries it needs beside it: no "
            "ROCm package is needed on the machine"
        )
        if backend.needs_rocm
        else ""
    )
    description = (
        f"llama.cpp build {job.llama_build or '?'} (commit {commit}) with its {backend.label} backend for {targets}, "
        f"built by rockbuild{rocm}.",
        f"The programs ({', '.join(programs)}) are installed in {install_dir} and linked into /usr/bin through "
        f"update-alternatives; several of these packages install side by side (update-alternatives --config "
        f"{MASTER} chooses).",
    )
    return DebPlan(
        package=package,
        version=package_version(job, tag),
        install_dir=install_dir,
        wrapper_dir=f"/usr/lib/{package}/bin",
        programs=programs,
        depends=tuple(host_depends(job.bundle, config.deb_packages)),
        priority=PRIORITY_ROCM if backend.needs_rocm else PRIORITY_OTHER,
        maintainer=config.deb_maintainer,
        homepage=config.deb_homepage,
        synopsis=f"llama.cpp for {targets} ({backend.label}), self-contained",
        description=description,
    )


# ---------------------------------------------------------------------------------------------------------------------
# The files of the package beside the bundle


def _wrapper(plan: DebPlan, program: str) -> str:
    return f'#!/bin/sh\n# {program} of {plan.package} {plan.version}\nexec {plan.install_dir}/{program} "$@"\n'


def _postinst(plan: DebPlan) -> str:
    slaves = "".join(
        f" \\\n        --slave /usr/bin/{p} {p} {plan.wrapper_dir}/{p}" for p in plan.programs if p != MASTER
    )
    return (
        '#!/bin/sh\nset -e\n\nif [ "$1" = configure ]; then\n'
        f"    update-alternatives --install /usr/bin/{MASTER} {MASTER} {plan.wrapper_dir}/{MASTER} {plan.priority}"
        f"{slaves}\nfi\n\nexit 0\n"
    )


def _prerm(plan: DebPlan) -> str:
    return (
        '#!/bin/sh\nset -e\n\nif [ "$1" = remove ] || [ "$1" = deconfigure ]; then\n'
        f"    update-alternatives --remove {MASTER} {plan.wrapper_dir}/{MASTER}\nfi\n\nexit 0\n"
    )


def _changelog(plan: DebPlan, job: BuiltJob, tag: str, mtime: int) -> bytes:
    when = email.utils.format_datetime(datetime.fromtimestamp(mtime, UTC)).replace("-0000", "+0000")
    text = (
        f"{plan.package} ({plan.version}) unstable; urgency=medium\n\n"
        f"  * Release {tag}: llama.cpp build {job.llama_build or '?'} (commit {(job.llama_commit or '?')[:12]})"
        f"\n    for {job.id}, packaged by rockbuild.\n\n -- {plan.maintainer}  {when}\n"
    )
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)  # what dh_installchangelogs + gzip -9n give


def _copyright(plan: DebPlan, job: BuiltJob) -> str:
    backend = get_backend(job.backend)
    rocm = (
        (
            f"The ROCm runtime and the libraries it needs are copied unchanged from {job.rocm.tarball or 'ROCm'};\n"
            "each is under its upstream license (MIT, Apache-2.0 with LLVM exception, BSD, zlib, LGPL-2.1 and\n"
            "others; see /usr/share/common-licenses). The release's CycloneDX SBOM (.cdx.json) names every file\n"
            "and the package it came from.\n\n"
        )
        if backend.needs_rocm
        else ""
    )
    return (
        f"{plan.package}: llama.cpp built and packaged by rockbuild.\n\n"
        "Files under " + plan.install_dir + " whose name starts with llama, libllama, ggml,\n"
        "libggml or libmtmd: llama.cpp, https://github.com/ggml-org/llama.cpp\n"
        "Copyright (c) 2023-2026 The ggml authors\n"
        "License: MIT\n\n" + rocm + "The packaging (wrappers, maintainer scripts): rockbuild, License: MIT\n\n"
        "MIT License\n\n"
        "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and\n"
        'associated documentation files (the "Software"), to deal in the Software without restriction,\n'
        "including without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense,\n"
        "and/or sell copies of the Software, and to permit persons to whom the Software is furnished to do so,\n"
        "subject to the following conditions:\n\n"
        "The above copyright notice and this permission notice shall be included in all copies or substantial\n"
        "portions of the Software.\n\n"
        'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT\n'
        "LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN\n"
        "NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY,\n"
        "WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE\n"
        "SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.\n"
    )


def _overrides(plan: DebPlan) -> str:
    """Lintian tags the issue's layout causes, each with why (lintian shows the comment with the override). The
    patterns cover a real bundle's files; a small bundle leaves some unused (an info, never a warning)."""
    pkg, where = plan.package, plan.install_dir.lstrip("/")
    return (
        "# The layout asked for: the bundle, self-contained and relocatable ($ORIGIN), in its own folder under /opt\n"
        "# (FHS 3.13: add-on application software), so that releases and GPU families install side by side.\n"
        "# Not meant for the Debian archive.\n"
        f"{pkg}: dir-or-file-in-opt [opt/rockbuild/]\n"
        f"{pkg}: dir-or-file-in-opt [{where}/]\n"
        f"{pkg}: dir-or-file-in-opt [{where}/*]\n"
        "# The bundle's files are installed exactly as they were audited and smoke-tested: never stripped, never\n"
        "# rebuilt with other flags (llama.cpp's and ROCm's own builds decide symbols and hardening).\n"
        f"{pkg}: unstripped-binary-or-object [{where}/*]\n"
        f"{pkg}: hardening-no-bindnow [{where}/*]\n"
        f"{pkg}: hardening-no-fortify-functions [{where}/*]\n"
        f"{pkg}: shared-library-lacks-prerequisites [{where}/*]\n"
        f"{pkg}: spelling-error-in-binary * [{where}/*]\n"
        "# Self-contained by design: the libraries ROCm needs (zlib, libxml2, ncurses' libtinfo ...) ship beside the\n"
        "# programs so that the package needs nothing but libc6, libstdc++6 and libgcc-s1 from the machine.\n"
        f"{pkg}: embedded-library * [{where}/*]\n"
        "# GPU code objects (AMDGPU ELF for the package's gfx targets) in the kernel data folders: data that ROCm\n"
        "# loads onto the GPU, never run by the CPU.\n"
        f"{pkg}: binary-from-other-architecture [{where}/*]\n"
    )


# ---------------------------------------------------------------------------------------------------------------------
# Building


def dpkg_deb_tool(env: Mapping[str, str]) -> Path:
    found = shutil.which("dpkg-deb", path=env.get("PATH") or os.defpath)
    if found is None:
        raise PublishError(
            "the Linux assets get a .deb (assets.deb_for in config/publish.yaml) but dpkg-deb is not installed",
            hint="publish on Debian/Ubuntu (GitHub's ubuntu runners have it), apt-get install dpkg, "
            "or remove linux from assets.deb_for",
        )
    return Path(found)


def _place(entry: Entry, dest: Path, mtime: int) -> None:
    """The bundle file at ``dest``: a hard link when its metadata is already what the package records (no copy of a
    1 GB bundle), else a copy given that metadata. The bundle itself is never changed; its bytes never are.

    Modes are Debian's: 0755 for what runs, 0644 for the rest, shared libraries included (policy 8.1: a library
    is not executable; the loader maps it without the bit, and llama.cpp's build leaves it on its own libraries)."""
    runs = entry.mode & 0o111 and not _LIBRARY_NAME.search(Path(entry.arcname).name)
    mode = 0o755 if runs else 0o644
    st = entry.source.stat()
    if entry.link is None and stat.S_IMODE(st.st_mode) == mode and st.st_mtime >= mtime:
        try:
            os.link(entry.source, dest)  # dpkg-deb clamps its time to SOURCE_DATE_EPOCH
            return
        except OSError:
            pass  # another file system, or links not allowed: copy
    shutil.copyfile(entry.source, dest)
    dest.chmod(mode)
    os.utime(dest, (mtime, mtime))


def _write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


def _stage(plan: DebPlan, job: BuiltJob, tag: str, root: Path, mtime: int) -> None:
    assert job.bundle is not None
    entries, _notes = collect_entries(job.bundle)  # symlinks stored as files, as in the archives
    base = root / plan.install_dir.lstrip("/")
    base.mkdir(parents=True)
    for entry in entries:
        if entry.is_dir:
            (base / entry.arcname).mkdir()
        else:
            _place(entry, base / entry.arcname, mtime)
    for program in plan.programs:
        _write(root / plan.wrapper_dir.lstrip("/") / program, _wrapper(plan, program), 0o755)
    doc = root / "usr/share/doc" / plan.package
    _write(doc / "copyright", _copyright(plan, job))
    _write(doc / "changelog.gz", _changelog(plan, job, tag, mtime))
    _write(root / "usr/share/lintian/overrides" / plan.package, _overrides(plan))
    _write(root / "DEBIAN/postinst", _postinst(plan), 0o755)
    _write(root / "DEBIAN/prerm", _prerm(plan), 0o755)
    md5: list[str] = []
    kib = 0
    for dirpath, dirnames, files in os.walk(root):
        dirnames.sort()
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        if rel_dir == "DEBIAN" or rel_dir.startswith("DEBIAN/"):
            continue
        kib += len([d for d in dirnames if not (here == root and d == "DEBIAN")])  # dpkg-gencontrol: 1 per folder
        for name in sorted(files):
            path = here / name
            kib += -(-path.stat().st_size // 1024)
            md5.append(f"{_md5(path)}  {path.relative_to(root).as_posix()}\n")
    _write(root / "DEBIAN/md5sums", "".join(sorted(md5, key=lambda line: line[34:])))
    _write(root / "DEBIAN/control", plan.control(kib))
    for dirpath, dirnames, files in os.walk(root, topdown=False):
        here = Path(dirpath)
        for name in dirnames:
            (here / name).chmod(0o755)
        for name in files:
            if (here / name).stat().st_nlink == 1:  # never touch a hard-linked bundle file
                os.utime(here / name, (mtime, mtime))
        os.utime(here, (mtime, mtime))
    root.chmod(0o755)


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_deb(
    job: BuiltJob, tag: str, dest: Path, config: PublishConfig, *, mtime: int, env: Mapping[str, str] | None = None
) -> Path:
    """The job's .deb at ``dest`` (see the module docstring), built in a folder beside it that is removed after."""
    environment = dict(env) if env is not None else child_env()
    tool = dpkg_deb_tool(environment)
    plan = plan_deb(job, tag, config)
    tmp = dest.with_name(dest.name + ".partial")
    with tempfile.TemporaryDirectory(prefix=".deb-", dir=dest.parent) as work:
        root = Path(work) / "root"
        _stage(plan, job, tag, root, mtime)
        args: list[Any] = [tool, "--root-owner-group", "-Zgzip", f"-z{config.compress_level}", "--build", root, tmp]
        try:
            run(
                args,
                env={**environment, "SOURCE_DATE_EPOCH": str(mtime), "LC_ALL": "C", "TZ": "UTC"},
                timeout=3600,
                output=Output(tail_lines=5),
            )
        except ProcessError as exc:
            raise PublishError(
                f"dpkg-deb could not build {dest.name}: {exc.message}",
                hint="the lines above say why; the bundle itself was not changed",
            ) from None
    os.replace(tmp, dest)
    return dest
