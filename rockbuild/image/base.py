"""An image's base: the few Debian packages its bundle leaves to the system, copied from this machine's installed
packages (dpkg's own file lists), and nothing else.

Why the host's packages and no base image: a rockbuild bundle loads nothing from the system but the C runtime
(glibc, libgcc_s, libstdc++: the audit's ``needed`` rule, the libraries publish.yaml's ``deb_packages`` maps to
packages), so a distribution image (Debian's 120 MB with apt, a shell and coreutils) would be dead weight and a
registry pull this machine cannot make. The packages come from the machine that publishes, as installed: the same
C runtime the bundle's glibc floor was checked against, offline, and named with their versions in the image's labels
and SBOM. Folders a container never reads are dropped (manuals, info, translations, lintian, bug scripts, and every
document but each package's ``copyright``, which redistribution needs). Files land on their canonical path (``/lib``
is ``usr/lib`` on a merged-/usr system, as here and on Ubuntu since 20.04) and the top-level links are kept.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rockbuild.core.errors import ImageError, ProcessError
from rockbuild.process import child_env, run

from .oci import Member

DROPPED = (
    "usr/share/man/",
    "usr/share/info/",
    "usr/share/locale/",
    "usr/share/lintian/",
    "usr/share/bug/",
    "usr/share/doc-base/",
    "usr/share/bash-completion/",
    "usr/share/zsh/",
)
_TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_DEP_NAME = re.compile(r"^\s*([a-z0-9][a-z0-9+.-]*)(?::[a-z0-9]+)?")


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    architecture: str
    depends: tuple[tuple[str, ...], ...]  # each a group of alternatives

    def to_dict(self) -> dict[str, str]:
        """manifest.json's ``images[].base_packages[]``: what the package is, not its dependencies."""
        return {"name": self.name, "version": self.version, "architecture": self.architecture}


def parse_depends(text: str) -> tuple[tuple[str, ...], ...]:
    """``a (>= 1), b | c:any`` -> ``(("a",), ("b", "c"))``: names only, architecture qualifiers dropped."""
    groups = []
    for group in text.split(","):
        names = tuple(m[1] for alt in group.split("|") if (m := _DEP_NAME.match(alt)))
        if names:
            groups.append(names)
    return tuple(groups)


def installed_packages(root: Path = Path("/")) -> dict[str, Package]:
    """Every package dpkg lists as installed, by name (the native architecture's where a name has two)."""
    fmt = "${Package}\\t${Version}\\t${Architecture}\\t${db:Status-Abbrev}\\t${Pre-Depends}, ${Depends}\\n"
    try:
        out = run(
            ["dpkg-query", f"--admindir={root / 'var/lib/dpkg'}", "-W", "-f", fmt], env=child_env(), timeout=120
        ).output
    except ProcessError as exc:
        raise ImageError(
            f"cannot list this machine's Debian packages with dpkg-query: {exc}",
            hint="an image's base is made from the publishing machine's installed packages (Debian or Ubuntu)",
        ) from None
    found: dict[str, Package] = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) != 5 or not parts[3].startswith("ii"):
            continue
        name, version, arch, _, depends = parts
        if name in found and arch in ("all", "amd64") and found[name].architecture == "amd64":
            continue
        found[name] = Package(name, version, arch, parse_depends(depends))
    return found


def package_closure(
    roots: Sequence[str], installed: Mapping[str, Package], *, never: Iterable[str] = ()
) -> list[Package]:
    """``roots`` and every package they depend on (pre-depends too), through the first installed alternative of each
    group; ``never`` is not followed (what only installing needs: debconf, a python for a trigger). A root that is not
    installed is an error naming it."""
    skip = set(never)
    missing = [r for r in roots if r not in installed]
    if missing:
        raise ImageError(
            f"the image needs the Debian package {missing[0]}, which this machine has not installed",
            hint=f"apt-get install {' '.join(missing)} on the publishing machine",
        )
    seen: dict[str, Package] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name in skip:
            continue
        package = installed[name]
        seen[name] = package
        for group in package.depends:
            chosen = next((alt for alt in group if alt in installed), None)
            if chosen is not None and chosen not in skip:
                todo.append(chosen)
    return [seen[n] for n in sorted(seen)]


def package_paths(package: Package, root: Path = Path("/")) -> list[str]:
    """The paths dpkg installed for ``package`` (its ``.list``)."""
    info = root / "var/lib/dpkg/info"
    for name in (f"{package.name}:{package.architecture}.list", f"{package.name}.list"):
        path = info / name
        if path.is_file():
            return [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line]
    raise ImageError(f"dpkg has no file list for {package.name} ({info})")


def _kept(rel: str) -> bool:
    if rel.startswith("usr/share/doc/"):
        return rel.endswith("/copyright")
    return not rel.startswith(DROPPED)


def canonical(path: str, root: Path = Path("/")) -> str:
    """``path`` (absolute, as dpkg lists it) with its folder's links resolved, relative to ``root``: ``/lib/x/y`` ->
    ``usr/lib/x/y`` on a merged-/usr system."""
    parent = os.path.realpath(root / path.lstrip("/").rsplit("/", 1)[0]) if "/" in path.lstrip("/") else str(root)
    rel = os.path.relpath(os.path.join(parent, os.path.basename(path)), root)
    return rel.replace(os.sep, "/")


def host_members(paths: Iterable[str], root: Path = Path("/")) -> list[Member]:
    """The files and links at ``paths`` on this machine (folders come with them), under their canonical paths."""
    out: dict[str, Member] = {}
    for path in paths:
        rel = canonical(path, root)
        if rel.startswith("..") or not _kept(rel):
            continue
        full = root / rel
        try:
            st = full.lstat()
        except FileNotFoundError:
            continue  # dpkg lists a diverted or removed conffile
        if stat.S_ISLNK(st.st_mode):
            out[rel] = Member(rel, "symlink", target=os.readlink(full))
        elif stat.S_ISREG(st.st_mode):
            out[rel] = Member(rel, "file", st.st_mode & 0o7777, source=full)
    return list(out.values())


def top_links(root: Path = Path("/")) -> list[Member]:
    """The merged-/usr links of this machine (``lib64 -> usr/lib64``: the loader every program names is
    ``/lib64/ld-linux-x86-64.so.2``)."""
    return [
        Member(name, "symlink", target=os.readlink(root / name)) for name in _TOP_LINKS if (root / name).is_symlink()
    ]


def base_members(packages: Sequence[Package], extra_files: Sequence[str], root: Path = Path("/")) -> list[Member]:
    """The base layer's files: every package's installed files (see the module docstring), the merged-/usr links,
    and ``extra_files`` (a file no package lists, like the CA bundle ``update-ca-certificates`` generates)."""
    members = top_links(root)
    for package in packages:
        members.extend(host_members(package_paths(package, root), root))
    for path in extra_files:
        found = host_members([path], root)
        if not found:
            raise ImageError(
                f"the image needs {path}, which this machine does not have",
                hint="apt-get install ca-certificates on the publishing machine",
            )
        members.extend(found)
    return members


def provided_versions(members: Iterable[Member]) -> dict[str, str]:
    """{GLIBC: 2.36, GLIBCXX: 3.4.30, CXXABI: 1.3.14, GCC: 12.0.0}: the highest symbol version each family's
    libraries in ``members`` define (``.gnu.version_d``), what the base can give a bundle."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerDefSection

    from rockbuild.bundle.elf import version_key

    best: dict[str, str] = {}
    for m in members:
        if m.kind != "file" or m.source is None or ".so" not in m.path.rsplit("/", 1)[-1]:
            continue
        try:
            with open(m.source, "rb") as fh:
                if fh.read(4) != b"\x7fELF":
                    continue
                fh.seek(0)
                for section in ELFFile(fh).iter_sections():
                    if not isinstance(section, GNUVerDefSection):
                        continue
                    for _verdef, auxiliaries in section.iter_versions():
                        for aux in auxiliaries:
                            family, _, version = aux.name.partition("_")
                            if re.fullmatch(r"\d+(\.\d+)*", version) and (
                                family not in best or version_key(version) > version_key(best[family])
                            ):
                                best[family] = version
        except (ELFError, OSError):
            continue
    return best
