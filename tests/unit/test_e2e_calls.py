"""The Python that tests/e2e's shell scripts embed (``python -c '...'`` and ``python - <<'EOF'`` blocks) calls the
rockbuild it runs against: every ``from rockbuild... import NAME`` must exist, and every call of such a name must
bind to its signature. A refactor that drops a keyword (``provide_model(quiet=)``) fails here, not in a root an hour
into an e2e run."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import typing
from pathlib import Path
from typing import Any

import pytest

E2E = Path(__file__).resolve().parents[1] / "e2e"
SCRIPTS = sorted(E2E.glob("*.sh"))
HARNESS = sorted((E2E / "harness").glob("*.py"))  # the proofs moved to Python (issue 58): checked whole

# a heredoc fed to a python: `python3 - ARGS <<'TAG'` ... TAG (quoted tags only: the shell expands nothing inside)
_HEREDOC = re.compile(r"python3?\b[^\n]*<<-?'(\w+)'\n(.*?)\n\s*\1\n", re.S)
# `python -c '...'`: a single-quoted program (no escapes in single quotes)
_DASH_C = re.compile(r"python3?\"?\s+-c\s+'([^']*)'")


def embedded_programs(text: str) -> list[tuple[int, str]]:
    """(line, source) of each Python program the script embeds that imports rockbuild."""
    found = []
    for m in _HEREDOC.finditer(text):
        found.append((text.count("\n", 0, m.start(2)) + 1, m.group(2)))
    for m in _DASH_C.finditer(text):
        found.append((text.count("\n", 0, m.start(1)) + 1, m.group(1)))
    return [(line, src) for line, src in found if "rockbuild" in src]


def _dotted(func: ast.expr) -> tuple[str | None, list[str]]:
    """``a.b.c`` of a call: ("a", ["b", "c"]); (None, ...) when it does not start with a name."""
    chain: list[str] = []
    while isinstance(func, ast.Attribute):
        chain.insert(0, func.attr)
        func = func.value
    return (func.id if isinstance(func, ast.Name) else None), chain


def _resolve(module: Any, dotted: list[str]) -> Any:
    obj = module
    for part in dotted:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def call_breaks(source: str) -> list[str]:
    """What in one embedded program would fail against the installed rockbuild: a missing module or name, a call
    that does not bind."""
    tree = ast.parse(source)
    names: dict[str, Any] = {}
    breaks = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rockbuild"):
            try:
                module = importlib.import_module(node.module)
            except ImportError as e:
                breaks.append(f"cannot import {node.module}: {e}")
                continue
            for alias in node.names:
                obj = getattr(module, alias.name, None)
                if obj is None:
                    try:  # a submodule
                        obj = importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        breaks.append(f"{node.module}.{alias.name} does not exist")
                        continue
                names[alias.asname or alias.name] = obj
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        root, chain = _dotted(node.func)
        if root not in names:
            continue
        target = _resolve(names[root], chain)
        label = ".".join([root, *chain])
        if target is None:
            breaks.append(f"{label} does not exist")
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue
        try:
            sig = inspect.signature(target)
        except (TypeError, ValueError):
            continue
        try:
            sig.bind(*([None] * len(node.args)), **{k.arg: None for k in node.keywords if k.arg})
        except TypeError as e:
            breaks.append(f"{label}(): {e}")
    return breaks + attribute_breaks(tree, names)


def _result_record(target: Any) -> type | None:
    """The record (a dataclass) a call of ``target`` returns, from its annotation; None when that is not one."""
    if isinstance(target, type):
        result: Any = target
    else:
        try:
            result = typing.get_type_hints(target).get("return")
        except Exception:  # an annotation that does not resolve: nothing to check against
            return None
    return result if isinstance(result, type) and dataclasses.is_dataclass(result) else None


def attribute_breaks(tree: ast.AST, names: dict[str, Any]) -> list[str]:
    """``x = f(...)`` then ``x.attr``: f's annotated result (a record) must have ``attr`` (a field, a property or a
    method). A record that loses or renames a field breaks the harness as surely as a dropped keyword."""
    results: dict[str, tuple[str, type]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        call = node.value
        if not isinstance(call, ast.Call):
            continue
        root, chain = _dotted(call.func)
        if root in names:
            record = _result_record(_resolve(names[root], chain))
            if record is not None:
                results[node.targets[0].id] = (".".join([root, *chain]), record)
    breaks = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in results:
            label, record = results[node.value.id]
            known = set(dir(record)) | {f.name for f in dataclasses.fields(record)}
            if node.attr not in known:
                breaks.append(f"{label}() returns {record.__name__}, which has no {node.attr!r}")
    return breaks


def test_the_scripts_embed_rockbuild_calls() -> None:
    # the extractor must find what it guards: the model step of vulkan.sh and windows.sh at least, and of the harness
    found = {s.name for s in SCRIPTS if any("provide_model" in src for _, src in embedded_programs(s.read_text()))}
    assert {"vulkan.sh", "windows.sh"} <= found
    assert any("provide_model(" in h.read_text() for h in HARNESS)


@pytest.mark.parametrize("module", HARNESS, ids=lambda p: p.name)
def test_the_harness_calls_bind_to_rockbuild(module: Path) -> None:
    breaks = [f"{module.name}: {b}" for b in call_breaks(module.read_text())]
    assert not breaks, "\n".join(breaks)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_embedded_python_calls_bind_to_rockbuild(script: Path) -> None:
    breaks = [
        f"{script.name}:{line}: {b}" for line, src in embedded_programs(script.read_text()) for b in call_breaks(src)
    ]
    assert not breaks, "\n".join(breaks)


def test_a_dropped_keyword_is_caught() -> None:
    src = (
        "from rockbuild.smoke.models import provide_model\n"
        "provide_model('smollm2', context=None, smoke={}, quiet=True)\n"
    )
    assert call_breaks(src) == ["provide_model(): got an unexpected keyword argument 'quiet'"]
    assert call_breaks("from rockbuild.smoke.models import no_such_thing\n") == [
        "rockbuild.smoke.models.no_such_thing does not exist"
    ]


def test_an_attribute_the_result_lacks_is_caught() -> None:
    # h200.sh's mutants-build read `.outcomes` of apply_patch_series' PatchSet after the field became `patches`
    src = (
        "from rockbuild.llamacpp.patches import apply_patch_series\n"
        "done = apply_patch_series(a, b, c, build_number=1, tree_label='t', os_name='linux', backend='vulkan')\n"
        "print(done.outcomes, done.patches, done.applied)\n"
    )
    assert call_breaks(src) == ["apply_patch_series() returns PatchSet, which has no 'outcomes'"]


# `pip install [--editable] <the working tree>[extras]`: rockbuild itself, as the scripts install it into a root
_TREE_INSTALL = re.compile(r"pip\"?\s+install\b(?P<args>[^\n]*?)\"\$\{(?:RB_SRC|REPO)\}(?:\[(?P<extras>[\w,]+)\])?\"")


def test_the_scripts_install_rockbuild_with_its_build_extra() -> None:
    """The build, bundle, smoke and publish machinery is the `build` extra (pyproject.toml): an e2e script that
    installs the working tree with its dependencies but without it fails in the root with exit 3 (it did, once)."""
    installs = []
    for script in SCRIPTS:
        for m in _TREE_INSTALL.finditer(script.read_text(encoding="utf-8")):
            if "--no-deps" in m.group("args"):
                continue
            installs.append((script.name, m.group("extras") or ""))
    assert installs, "no script installs the working tree: the pattern is stale"
    missing = [name for name, extras in installs if "build" not in extras.split(",")]
    assert not missing, f"installed without the build extra in {missing}"
