"""``config/publish.yaml`` as a frozen value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from rockbuild.core.data import YDict, check_keys, flag, load_data_file, text, text_map, texts, where, whole
from rockbuild.core.errors import ConfigError

GITHUB_ASSET_LIMIT = 2 * 1024**3  # GitHub: "each file must be under 2 GiB"
_MAINTAINER_RE = re.compile(r"[^<>,]+ <[^<>@\s]+@[^<>@\s]+\.[^<>@\s]+>")  # Debian policy 5.6.2: "Name <address>"
# publish.yaml's tags.scheme: the next b#### of the sequence, or one tag per llama.cpp build and ROCm (tags.llama)
TagScheme = Literal["sequential", "llama"]
TAG_SCHEMES: tuple[TagScheme, ...] = get_args(TagScheme)


@dataclass(frozen=True)
class PublishConfig:
    tag_scheme: TagScheme = "sequential"
    tag_first: int = 1000
    tag_width: int = 4
    llama_tag: str = "b{build}-rocm{rocm}"
    asset_name: str = "llama-{tag}-{os}-rocm-{name}-x64"
    os_words: Mapping[str, str] = field(default_factory=lambda: {"linux": "ubuntu", "windows": "windows"})
    tar_gz_for: tuple[str, ...] = ("linux",)
    deb_for: tuple[str, ...] = ()  # OSes whose jobs also get a .deb (publish/deb.py); none unless configured
    deb_maintainer: str = ""  # the .deb's Maintainer: "Name <address>"
    deb_homepage: str = "https://github.com/ggml-org/llama.cpp"
    deb_packages: Mapping[str, str] = field(default_factory=dict)  # host library (SONAME) -> its Debian package
    max_bytes: int = GITHUB_ASSET_LIMIT  # an asset of this size or more is refused
    compress_level: int = 6
    glibc_floor: Mapping[str, str] = field(default_factory=lambda: {"GLIBC": "2.35"})
    make_latest: bool = True
    protect: tuple[str, ...] = ()
    alert_label: str = "nightly-failure"
    alert_label_color: str = "d73a4a"
    alert_title: str = "Nightly build failed ({date})"
    alert_log_lines: int = 40
    known_issues: tuple[str, ...] = ()
    source: str = ""


def parse_publish_config(doc: Any, path: Path) -> PublishConfig:
    """The publish configuration from a parsed ``publish.yaml`` (read by
    :func:`load_publish_config`)."""
    if not isinstance(doc, YDict):
        raise ConfigError(f"{path}: expected a mapping (see the shipped config/publish.yaml)")
    check_keys(
        path,
        doc,
        ["tags", "assets", "glibc_floor", "release", "retention", "alert", "known_issues"],
        "the publish configuration",
    )

    def section(name: str) -> Mapping[str, Any]:
        value = doc.get(name) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{where(path, doc, name)}: '{name}' must be a mapping")
        return value

    tags, assets, release, retention, alert = (section(n) for n in ("tags", "assets", "release", "retention", "alert"))
    given = tags.get("scheme", "sequential")
    scheme = next((s for s in TAG_SCHEMES if s == given), None)
    if scheme is None:
        raise ConfigError(f"{where(path, tags, 'scheme')}: tags.scheme must be 'sequential' or 'llama', not {given!r}")
    floor = {str(k).upper(): str(v) for k, v in section("glibc_floor").items()}
    for family, version in floor.items():
        if not version.replace(".", "").isdigit():
            raise ConfigError(f"{where(path, doc, 'glibc_floor')}: {family}: {version!r} is not a version like 2.35")
    max_bytes = whole(path, assets, "max_bytes", GITHUB_ASSET_LIMIT, "assets", least=1)
    deb_for = texts(path, assets, "deb_for", (), "assets")
    deb_maintainer = " ".join(text(path, assets, "deb_maintainer", "", "assets").split())
    if deb_for and not _MAINTAINER_RE.fullmatch(deb_maintainer):
        raise ConfigError(
            f"{where(path, assets, 'deb_maintainer' if 'deb_maintainer' in assets else 'deb_for')}: "
            f"a .deb needs assets.deb_maintainer as 'Name <address>', not {deb_maintainer!r}"
        )
    return PublishConfig(
        tag_scheme=scheme,
        tag_first=whole(path, tags, "first", 1000, "tags", least=0),
        tag_width=whole(path, tags, "width", 4, "tags", least=1, most=12),
        llama_tag=text(path, tags, "llama", "b{build}-rocm{rocm}", "tags"),
        asset_name=text(path, assets, "name", "llama-{tag}-{os}-rocm-{name}-x64", "assets"),
        os_words=text_map(path, assets, "os_words", {"linux": "ubuntu", "windows": "windows"}, "assets"),
        tar_gz_for=texts(path, assets, "tar_gz_for", ("linux",), "assets"),
        deb_for=deb_for,
        deb_maintainer=deb_maintainer,
        deb_homepage=text(path, assets, "deb_homepage", PublishConfig.deb_homepage, "assets"),
        deb_packages=text_map(path, assets, "deb_packages", {}, "assets"),
        max_bytes=min(max_bytes, GITHUB_ASSET_LIMIT),
        compress_level=whole(path, assets, "compress_level", 6, "assets", least=0, most=9),
        glibc_floor=floor,
        make_latest=flag(path, release, "make_latest", True, "release"),
        protect=texts(path, retention, "protect", (), "retention"),
        alert_label=text(path, alert, "label", "nightly-failure", "alert"),
        alert_label_color=text(path, alert, "label_color", "d73a4a", "alert"),
        alert_title=text(path, alert, "title", "Nightly build failed ({date})", "alert"),
        alert_log_lines=whole(path, alert, "log_lines", 40, "alert", least=0),
        known_issues=tuple(" ".join(k.split()) for k in texts(path, doc, "known_issues", (), "publish.yaml")),
        source=str(path),
    )


def load_publish_config(path: Path | None = None) -> PublishConfig:
    """The publishing configuration (default: the shipped ``config/publish.yaml``)."""
    return load_data_file(path, "publish.yaml", parse_publish_config)
