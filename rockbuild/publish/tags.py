"""Release tags: the seed's ``b####`` sequence, or llama.cpp-aligned ``b<build>-rocm<version>``."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rockbuild.core.errors import PublishError

SEQUENTIAL = re.compile(r"^b(\d+)$")
_UNSAFE = re.compile(r"[^0-9A-Za-z._+-]+")


def highest_sequential(names: Iterable[str]) -> int | None:
    """The highest N of the names that are exactly ``b<digits>``, compared as numbers (b10000 > b9999)."""
    numbers = [int(m[1]) for name in names if (m := SEQUENTIAL.match(name))]
    return max(numbers, default=None)


def next_sequential_tag(names: Iterable[str], *, first: int = 1000, width: int = 4) -> str:
    """The tag after the highest ``b<digits>`` of ``names`` (tags and release tag names), ``b<first>`` if none.
    Never wraps: b9999 is followed by b10000."""
    highest = highest_sequential(names)
    number = first if highest is None else highest + 1
    return f"b{number:0{width}d}"


def llama_tag(template: str, *, build: str | None, rocm: str | None) -> str:
    """``template`` (``b{build}-rocm{rocm}``) filled in; characters a tag cannot carry become '-'."""
    if not build or build in ("0", "1", "unknown"):
        raise PublishError(
            f"the llama.cpp build number is {build or 'unknown'}, so a llama.cpp-aligned tag cannot be made",
            hint="build with --build-number (or from a full clone), or use the sequential tag scheme",
        )
    if not rocm:
        raise PublishError(
            "the ROCm version is unknown, so a llama.cpp-aligned tag cannot be made",
            hint="use the sequential tag scheme or pass --tag",
        )
    tag = template.format(build=str(build).removeprefix("b"), rocm=rocm)
    return _UNSAFE.sub("-", tag).strip("-.")
