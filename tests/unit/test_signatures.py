"""Signatures that show intent (issue 40, item 4): no function outside the commands takes more than 8 parameters.

Parameters that travel together go as one frozen value named for what it is (core.options' option groups,
core.vocabulary's ModelFile and GpuDevice, doctor's Machine and BundleCheck, ...). The click commands in
rockbuild/commands/ take one parameter per option and are left out. self and cls are not counted; *args and **kwargs
are.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "rockbuild"
MOST = 8
COMMANDS = ROOT / "commands"

# Functions that still take more, with the count each may not exceed: none is left (2026-12-06); a new one fails
# the test below, and an entry here may only shrink.
ALLOWED: dict[str, int] = {}


def count(args: ast.arguments) -> int:
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    n = len(names) - (1 if names[:1] in (["self"], ["cls"]) else 0)
    return n + (args.vararg is not None) + (args.kwarg is not None)


def functions(path: Path) -> list[tuple[str, int, int]]:
    """(qualified name, parameters, line) of every function and method in ``path``."""
    found: list[tuple[str, int, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append((name, count(child.args), child.lineno))
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), "")
    return found


def too_long() -> dict[str, tuple[int, int]]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        if COMMANDS in path.parents:
            continue
        for name, n, line in functions(path):
            if n > MOST:
                out[f"{path.relative_to(ROOT).as_posix()}::{name}"] = (n, line)
    return out


def test_no_function_outside_the_commands_takes_more_than_8_parameters():
    over = [
        f"rockbuild/{key.replace('::', ':' + str(line) + ' ')} takes {n} parameters"
        for key, (n, line) in too_long().items()
        if n > ALLOWED.get(key, MOST)
    ]
    assert not over, (
        "group the parameters that travel together into one frozen value (see "
        "docs/architecture.md, 'Values, not lookups'):\n" + "\n".join(over)
    )


def test_the_count_sees_what_it_should():
    tree = ast.parse("class A:\n def m(self, a, b, *c, d, **e): pass\ndef f(a, /, b, *, c): pass\n")
    method = tree.body[0].body[0]
    assert count(method.args) == 5 and count(tree.body[1].args) == 3
    assert not any(key.startswith("commands/") for key in too_long())


def test_the_allow_list_holds_only_what_is_still_too_long():
    stale = sorted(set(ALLOWED) - set(too_long()))
    assert not stale, f"brought down to {MOST} or fewer (or gone): remove from ALLOWED: {stale}"
