"""The line-numbered YAML and JSON readers every layer shares, and where rockbuild's data files are.

YAML values keep the file line of themselves and of each key (:class:`YDict`, :class:`YList`), so a ConfigError can
name ``file:line``; JSON is written atomically. Files are read here; their meaning belongs to the module that owns
each (the matrix, the bundle policy, ...).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from rockbuild.core.errors import ConfigError

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------------------------------
# Where the data files are: inside the wheel (rockbuild/_data/...) or, in a source checkout, at the repository root.


@dataclass(frozen=True)
class DataRoots:
    """Where a data file is looked for before the installed copy (set once by the CLI, from its Settings):
    ``config_dir`` (``$ROCKBUILD_CONFIG``: a folder whose files replace ``config/<name>``, one by one), then
    ``checkout`` (a rockbuild checkout the command runs in: its ``config/``, ``patches/`` and ``templates/``, so a
    maintainer's edit takes effect whatever the install). ``announce`` (``--debug``) is told each file read."""

    config_dir: Path | None = None
    checkout: Path | None = None
    announce: Callable[[str], None] | None = None


_roots = DataRoots()
_announced: set[Path] = set()


def use_data_roots(roots: DataRoots) -> None:
    """Look for data files in ``roots`` first, for the rest of this process."""
    global _roots
    _roots = roots
    _announced.clear()


def is_checkout(folder: Path) -> bool:
    """Whether ``folder`` is a rockbuild source checkout (its pyproject.toml names rockbuild, config/ is there)."""
    try:
        text = (folder / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return (
        re.search(r'^name\s*=\s*"rockbuild"\s*$', text, re.MULTILINE) is not None
        and (folder / "config" / "nightly.yaml").is_file()
    )


def data_path(*parts: str) -> Path:
    """Path of a data file (``data_path("config", "nightly.yaml")``): ``$ROCKBUILD_CONFIG``'s, the checkout's the
    command runs in (:class:`DataRoots`), else the one installed with rockbuild."""
    here = Path(__file__).resolve().parent.parent  # rockbuild/
    roots = _roots
    candidates: list[tuple[Path, str]] = []
    if roots.config_dir is not None and parts and parts[0] == "config" and len(parts) > 1:
        candidates.append((roots.config_dir.joinpath(*parts[1:]), "$ROCKBUILD_CONFIG"))
    if roots.checkout is not None:
        candidates.append((roots.checkout.joinpath(*parts), "the checkout in the current directory"))
    candidates += [
        (here / "_data" / Path(*parts), "installed with rockbuild"),
        (here.parent.joinpath(*parts), "the checkout rockbuild runs from"),
    ]
    for candidate, origin in candidates:
        if candidate.exists():
            if roots.announce is not None and candidate not in _announced:
                _announced.add(candidate)
                roots.announce(f"{'/'.join(parts)}: {candidate} ({origin})")
            return candidate
    raise ConfigError(f"rockbuild's data file {'/'.join(parts)} is missing from this installation; reinstall rockbuild")


def kind_of(value: Any) -> str:
    """What a value read from a file is, in a user's words (``a list``, never ``YList``)."""
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, int):
        return f"the number {value}"
    if isinstance(value, float):
        return f"the number {value:g}"
    if isinstance(value, str):
        return f"the text {value!r}"
    return type(value).__name__


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON object from a file rockbuild wrote (build.json, sidecars...), or None when missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json_atomic(
    path: Path, data: Mapping[str, Any], *, sort_keys: bool = False, ensure_ascii: bool = True
) -> Path:
    """Write a JSON object so that readers see the old file or the new one, never half of one; returns ``path``.
    ``ensure_ascii=False`` keeps text (generated tokens, release notes) readable in the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


# Typed reads of one key: the value, or a ConfigError naming ``file:line``, the key and what it must be. Every data
# file's parser reads its numbers, lists and mappings through these, so a wrong value anywhere is a config error
# (exit 2), never a TypeError deep in a stage.

_MISSING: Any = object()


def _get(node: Any, key: Any, default: Any) -> Any:
    return node.get(key, default) if isinstance(node, Mapping) else default


def whole(
    path: Path | str,
    node: Any,
    key: str,
    default: int,
    what: str,
    *,
    least: int | None = None,
    most: int | None = None,
    of: str = "",
) -> int:
    """``node[key]`` as a whole number in [least, most] (``default`` when absent); ``of`` names what it counts in the
    message (``a whole number of tokens``)."""
    value = _get(node, key, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (least is not None and value < least)
        or (most is not None and value > most)
    ):
        bounds = (
            f" from {least} to {most}"
            if least is not None and most is not None
            else f", at least {least}"
            if least is not None
            else f", at most {most}"
            if most is not None
            else ""
        )
        counts = f" of {of}" if of else ""
        raise ConfigError(
            f"{where(path, node, key)}: {what}.{key} must be a whole number{counts}{bounds}, not {value!r}"
        )
    return value


def number(path: Path | str, node: Any, key: str, default: float, what: str, *, positive: bool = False) -> float:
    """``node[key]`` as a finite number (> 0 when ``positive``; ``default`` when absent)."""
    value = _get(node, key, default)
    if not _finite(value) or (positive and not value > 0):
        kind = "a positive number" if positive else "a finite number"
        raise ConfigError(f"{where(path, node, key)}: {what}.{key} must be {kind}, not {value!r}")
    return float(value)


def seconds(path: Path | str, node: Any, key: str, default: float, what: str) -> float:
    """``node[key]`` as a duration: a positive, finite number of seconds (``default`` when absent)."""
    value = _get(node, key, default)
    if not _finite(value) or not value > 0:
        raise ConfigError(f"{where(path, node, key)}: {what}.{key} must be seconds (a positive number), not {value!r}")
    return float(value)


def _finite(value: Any) -> bool:
    """Whether a value read from a file is a finite number (true and false are not numbers here)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def flag(path: Path | str, node: Any, key: str, default: bool, what: str) -> bool:
    value = _get(node, key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where(path, node, key)}: {what}.{key} must be true or false, not {value!r}")
    return value


def text(path: Path | str, node: Any, key: str, default: str, what: str) -> str:
    """``node[key]`` as a text (a number is taken as written: ``label_color: 123456``); a list or mapping is an
    error."""
    value = _get(node, key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{where(path, node, key)}: {what}.{key} must be a text, not {value!r}")
    return str(value)


def texts(path: Path | str, node: Any, key: str, default: Iterable[str], what: str) -> tuple[str, ...]:
    """``node[key]`` as a list of texts (``default`` when absent or null)."""
    value = _get(node, key, None)
    if value is None:
        return tuple(default)
    if not isinstance(value, list) or not all(isinstance(v, str | int) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"{where(path, node, key)}: {what}.{key} must be a list of texts, not {value!r}")
    return tuple(str(v) for v in value)


def mapping(path: Path | str, node: Any, key: str, what: str) -> Mapping[Any, Any]:
    """``node[key]`` as a mapping (empty when absent or null)."""
    value = _get(node, key, None)
    if value is None:
        return YDict()
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where(path, node, key)}: {what}.{key} must be a mapping, not {value!r}")
    return value


def text_map(path: Path | str, node: Any, key: str, default: Mapping[str, str], what: str) -> dict[str, str]:
    """``node[key]`` as a mapping of texts to texts (``default`` when absent or null)."""
    value = _get(node, key, None)
    if value is None:
        return dict(default)
    if not isinstance(value, Mapping) or not all(
        isinstance(v, str | int | float) and not isinstance(v, bool) for v in value.values()
    ):
        raise ConfigError(f"{where(path, node, key)}: {what}.{key} must map names to texts, not {value!r}")
    return {str(k): str(v) for k, v in value.items()}


# ---------------------------------------------------------------------------------------------------------------------
# YAML that remembers where each value came from, so errors can name file and line.


class YDict(dict[Any, Any]):
    """A mapping from YAML with the 1-based line of itself (``line``) and of each key (``lines``)."""

    line: int = 0
    lines: dict[Any, int]


class YList(list[Any]):
    """A sequence from YAML with the 1-based line of itself and of each item."""

    line: int = 0
    lines: list[int]


def where(path: Path | str, node: Any, key: Any = None) -> str:
    """``file:line`` for a YAML value (or one of its keys / items)."""
    line = 0
    if key is not None and isinstance(node, YDict):
        line = node.lines.get(key, node.line)
    elif key is not None and isinstance(node, YList) and isinstance(key, int) and key < len(node.lines):
        line = node.lines[key]
    elif isinstance(node, YDict | YList):
        line = node.line
    return f"{path}:{line}" if line else str(path)


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance counting a swap of neighbours as one edit (gfx1115 is one typo from gfx1151)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def suggest(name: str, known: Iterable[str], n: int = 3) -> str:
    """' (did you mean a, b?)' with the closest known names, or '' when nothing is close."""
    known = list(dict.fromkeys(known))
    limit = max(2, len(name) // 3)
    ranked = sorted(
        (k for k in known if _edit_distance(name.lower(), k.lower()) <= limit),
        key=lambda k: (_edit_distance(name.lower(), k.lower()), -difflib.SequenceMatcher(None, name, k).ratio()),
    )
    close = ranked[:n] or difflib.get_close_matches(name, known, n=n, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def check_keys(path: Path | str, node: Mapping[Any, Any], allowed: Iterable[str], what: str) -> None:
    allowed = list(allowed)
    for key in node:
        if key not in allowed:
            raise ConfigError(
                f"{where(path, node, key)}: unknown key {key!r} in {what}{suggest(str(key), allowed)}; "
                f"allowed: {', '.join(allowed)}"
            )


def expect_type(path: Path | str, parent: Any, key: Any, value: Any, types: type | tuple[type, ...], what: str) -> None:
    if not isinstance(value, types):
        names = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
        names = (
            names.replace("YDict", "mapping")
            .replace("YList", "list")
            .replace("dict", "mapping")
            .replace("Mapping", "mapping")
        )
        names = " or ".join(dict.fromkeys(names.split(" or ")))  # (dict, YDict): "a mapping", once
        raise ConfigError(f"{where(path, parent, key)}: {what} must be a {names}, not {kind_of(value)}")


# ---------------------------------------------------------------------------------------------------------------------
# YAML that remembers where each value came from, so errors can name file and line.


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> YDict:
    loader.flatten_mapping(node)
    result = YDict()
    result.line = node.start_mark.line + 1
    result.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise ConfigError(f"{loader.name}:{key_node.start_mark.line + 1}: mapping keys must be plain scalars")
        if key in result:
            raise ConfigError(f"{loader.name}:{key_node.start_mark.line + 1}: duplicate key {key!r}")
        result[key] = loader.construct_object(value_node, deep=True)
        result.lines[key] = key_node.start_mark.line + 1
    return result


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> YList:
    result = YList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.lines = [child.start_mark.line + 1 for child in node.value]
    return result


# YAML 1.1 reads 0123456 as an octal number (42798) and 1:30 as sexagesimal (90): a commit abbreviation or a
# version written bare would silently become another value. Such scalars stay text; a whole number field that gets one
# says so (a "must be a whole number, not the text '010'" error), never a wrong number.
_SURPRISING_INT = re.compile(r"[-+]?(0[0-7_]+|0b[01_]+|[1-9][0-9_]*(:[0-5]?[0-9])+)")


def _construct_int(loader: _LineLoader, node: yaml.ScalarNode) -> int | str:
    text = str(node.value)
    if _SURPRISING_INT.fullmatch(text):
        return text
    return int(loader.construct_yaml_int(node))


_LineLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


MAX_YAML_DEPTH = 32  # the deepest real file (a matrix's options.cmake) nests 4 levels


def _depth(root: yaml.Node) -> tuple[int, yaml.Node]:
    """How deep ``root`` nests (a scalar is 1) and its deepest node, without recursion."""
    best, deepest = 0, root
    todo: list[tuple[yaml.Node, int]] = [(root, 1)]
    seen: set[int] = set()
    while todo:
        node, level = todo.pop()
        if id(node) in seen:  # an alias points back at a node already counted
            continue
        seen.add(id(node))
        if level > best:
            best, deepest = level, node
        if isinstance(node, yaml.SequenceNode):
            todo.extend((child, level + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            todo.extend((value, level + 1) for _, value in node.value)
    return best, deepest


def load_yaml(path: Path) -> Any:
    """Parse a YAML file into YDict/YList values; any problem is a one-line ConfigError with file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        loader = _LineLoader(text)  # the reader checks the characters here already (a control character is refused)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None
    loader.name = str(path)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        depth, deepest = _depth(node)
        if depth > MAX_YAML_DEPTH:
            raise ConfigError(
                f"{path}:{deepest.start_mark.line + 1}: nested {depth} levels deep; "
                f"a configuration file may nest at most {MAX_YAML_DEPTH}"
            )
        return loader.construct_document(node)
    except RecursionError:  # the composer recurses once per level: say what it is, not where Python gave up
        raise ConfigError(
            f"{path}: nested too deeply to read; a configuration file may nest at most {MAX_YAML_DEPTH} levels"
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        what = " ".join(filter(None, [exc.context, exc.problem]))
        raise ConfigError(f"{path}{line}: invalid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def load_data_file(path: Path | None, shipped: str, parse: Callable[[Any, Path], T]) -> T:
    """``parse`` of the YAML file at ``path``, by default the one shipped as ``config/<shipped>``: each data file's
    owner loads it this way with its own parser."""
    path = path or data_path("config", shipped)
    return parse(load_yaml(path), path)
