"""One word per concept (issue 40 item 5; docs/architecture.md, "Words"): four words that used to name overlapping
things each name one kind of value now, and the tree is held to it.

- **Options**: a group of command-line flags, as one frozen value (``BuildOptions``, ``SmokeOptions``...).
- **Config**: a data file's typed value (``config/*.yaml`` or a section of one), made by its module's ``parse_*``.
- **Context**: what the process environment says; only ``core/environment.py`` defines one.
- **Settings**: a run's context together with its configs, loaded on first use; only ``settings.py``.

A parameter or field called ``options``, ``config``, ``context`` or ``settings`` holds that kind of value (a
``config`` may still be an untyped mapping: a section of smoke.yaml that is checked on load but not yet a class).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "rockbuild"
WORDS = ("Options", "Config", "Context", "Settings")
# other spellings of the same four ideas, which would make a fifth word
SYNONYMS = ("Conf", "Cfg", "Opts", "Params", "Parameters", "Prefs", "Preferences", "Setting", "Environment")
UNTYPED_CONFIG = ("Mapping", "dict")
# where another vocabulary is the right one, and why
EXEMPT = {
    ("image/oci.py", "config"): "the OCI image spec's own word: the image's config blob",
    ("matrix.py", "options"): "the matrix file's own `options:` section, as the user writes it",
}


@functools.cache
def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (p.relative_to(ROOT).as_posix(), ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(ROOT.rglob("*.py"))
    ]


def _is_frozen_dataclass(node: ast.ClassDef) -> bool:
    return any(
        isinstance(deco, ast.Call)
        and ast.unparse(deco.func).endswith("dataclass")
        and any(k.arg == "frozen" and ast.unparse(k.value) == "True" for k in deco.keywords)
        for deco in node.decorator_list
    )


def _classes() -> list[tuple[str, ast.ClassDef, ast.Module]]:
    return [
        (name, node, tree) for name, tree in _modules() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
    ]


def test_options_are_frozen_values():
    loose = [
        f"{path}: {node.name}"
        for path, node, _ in _classes()
        if node.name.endswith("Options") and not _is_frozen_dataclass(node)
    ]
    assert not loose, f"an *Options class is a group of flags as one frozen dataclass: {loose}"


def test_a_config_is_made_by_its_modules_parser():
    orphans = []
    for path, node, tree in _classes():
        if not node.name.endswith("Config"):
            continue
        parsers = [
            f
            for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef)
            and f.name.startswith("parse_")
            and f.returns is not None
            and node.name in ast.unparse(f.returns)
        ]
        if not parsers:
            orphans.append(f"{path}: {node.name}")
    assert not orphans, (
        "an *Config class is a data file's value, returned by a parse_* of its module (the one "
        f"checked reader of that file); name anything else after what it holds: {orphans}"
    )


def test_context_and_settings_each_live_in_one_place():
    where = {"Context": "core/environment.py", "Settings": "settings.py"}
    stray = [
        f"{path}: {node.name}"
        for path, node, _ in _classes()
        for word, home in where.items()
        if node.name.endswith(word) and path != home
    ]
    assert not stray, f"Context is the environment (core/environment.py), Settings is settings.py's: {stray}"


def test_no_fifth_word():
    others = [
        f"{path}: {node.name}"
        for path, node, _ in _classes()
        if node.name.endswith(SYNONYMS) and not node.name.endswith(WORDS)
    ]
    assert not others, f"options, config, context or settings: use the one that fits ({', '.join(WORDS)}): {others}"


def _named(tree: ast.Module) -> list[tuple[str, ast.expr]]:
    """(name, annotation) of every annotated parameter and field."""
    out: list[tuple[str, ast.expr]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            out += [
                (a.arg, a.annotation)
                for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
                if a.annotation is not None
            ]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.append((node.target.id, node.annotation))
    return out


def _fits(name: str, annotation: str) -> bool:
    base = annotation.replace(" | None", "").strip("'\"")
    word = {"options": "Options", "config": "Config", "context": "Context", "settings": "Settings"}[name]
    if base.endswith(word) or (name == "context" and base == "Settings"):  # Settings is a Context
        return True
    return name == "config" and base.startswith(UNTYPED_CONFIG)


def test_a_parameter_called_by_a_word_holds_that_kind():
    wrong = [
        f"{path}: {name}: {ast.unparse(annotation)}"
        for path, tree in _modules()
        for name, annotation in _named(tree)
        if name in ("options", "config", "context", "settings")
        and (path, name) not in EXEMPT
        and not _fits(name, ast.unparse(annotation))
    ]
    assert not wrong, (
        "`options` holds an *Options, `config` a *Config (or an untyped section), `context` the "
        f"Context, `settings` the Settings; rename the parameter after what it holds: {wrong}"
    )


def test_the_checks_see_what_they_should():
    tree = ast.parse(
        "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass AOptions:\n x: int = 1\n"
        "class BOptions:\n pass\ndef f(context: str, options: AOptions, config: dict) -> None: pass\n"
    )
    a, b = (n for n in tree.body if isinstance(n, ast.ClassDef))
    assert _is_frozen_dataclass(a) and not _is_frozen_dataclass(b)
    named = dict((n, ast.unparse(t)) for n, t in _named(tree))
    assert not _fits("context", named["context"]) and _fits("options", named["options"])
    assert _fits("config", named["config"]) and not _fits("options", "dict[str, Any]")
    for path, name in EXEMPT:  # each exemption still names something that exists
        assert any(p == path and any(n == name for n, _ in _named(t)) for p, t in _modules()), (path, name)
