"""The house in layers (pyproject's [tool.importlinter], docs/architecture.md): each layer imports only downward,
no module of rockbuild is part of an import cycle, and only rockbuild.core.environment reads os.environ."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO

ROOT = REPO
PACKAGE = ROOT / "rockbuild"
LINT = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")


def lint(package_parent: Path, config: Path) -> subprocess.CompletedProcess[str]:
    assert LINT, "import-linter is not installed (pip install '.[test]')"
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run(
        [LINT, "--config", str(config), "--no-cache"],
        cwd=package_parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def copy_of_the_package(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "rockbuild", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_layers_contract_holds():
    result = lint(ROOT, ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "3 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("core/errors.py", "from rockbuild.settings import Settings  # an upward import"),
        (
            "backends/rocm.py",
            "if TYPE_CHECKING:\n    from rockbuild.bundle.plan import BundleReport  # upward, as a type",
        ),
        ("gpu.py", "import yaml  # a data file parsed outside rockbuild.core.data"),
        ("bundle/audit.py", "from rockbuild.backends import REGISTRY  # a stage looking its backend up"),
    ],
)
def test_an_upward_import_breaks_the_contract(tmp_path, module, line):
    """The contract is no decoration: one new upward import (a type only, too) fails CI."""
    tree = copy_of_the_package(tmp_path)
    path = tree / "rockbuild" / module
    text = path.read_text(encoding="utf-8")
    if "TYPE_CHECKING" in line and "from typing import" not in text.split("if TYPE_CHECKING")[0]:
        line = "from typing import TYPE_CHECKING\n" + line
    path.write_text(
        text.replace("from __future__ import annotations\n", f"from __future__ import annotations\n\n{line}\n", 1),
        encoding="utf-8",
    )
    result = lint(tree, tree / "pyproject.toml")
    assert result.returncode != 0
    assert "BROKEN" in result.stdout


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """rockbuild modules ``path`` imports: module level, under TYPE_CHECKING and inside functions alike."""
    name, is_package = _module(path), path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return {m for m in found if m in modules and m != name}


def test_no_import_cycles():
    """Counted as the layers issue counts them: every import of a rockbuild module, a package's __init__ included
    (the commands' function-local imports, kept for --help's speed, cannot form one: nothing imports a command)."""
    paths = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: _imports(p, set(paths)) for m, p in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph):
        if module not in index:
            visit(module)
    assert cycles == []


def test_only_the_environment_module_reads_the_environment():
    """A stage is handed what it needs (a Context, a policy, a family table); it never looks it up itself."""
    readers = re.compile(r"\bos\.environ\b|\bos\.getenv\b")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "core" / "environment.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if readers.search(line)
    ]
    assert offenders == []


def _modules() -> list[str]:
    """Every module of the package, by dotted name (a package by its own name)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts not in (["rockbuild"], ["rockbuild", "__main__"]):
            names.append(".".join(parts))
    return names


def _layers() -> list[str]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    layers = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")["layers"]
    return [m.strip() for layer in layers for m in re.split(r"[:|]", layer) if m.strip()]


def test_every_module_sits_in_the_layers_contract():
    """A module the contract does not name may import anything (issue 40, item 5): each is in a layer, itself or
    through the package that holds it (a package with modules of its own is placed through them)."""
    listed = _layers()
    modules = _modules()
    packages = {m.rsplit(".", 1)[0] for m in modules if "." in m}
    loose = [
        m for m in modules if m not in packages and not any(m == layer or m.startswith(layer + ".") for layer in listed)
    ]
    assert not loose, f"modules outside pyproject's layers contract: {loose}"


def test_the_architecture_page_names_every_module():
    """docs/architecture.md's table of layers is true to the tree: every module is named in it (as `name`,
    `package/name`, `name.py`, or by its package as `package/*`)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("## The layers, top to bottom", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([^`]+)`", table))
    modules = _modules()
    packages = {m.rsplit(".", 1)[0] for m in modules if "." in m}
    missing = []
    for module in modules:
        parts = module.split(".")[1:]
        name, package = parts[-1], "/".join(parts[:-1])
        if module in packages:
            continue
        ways = {name, f"{name}.py", f"{package}/{name}", f"{package}/*"} if package else {name, f"{name}.py"}
        if not ways & named:
            missing.append(module)
    assert not missing, f"modules docs/architecture.md does not name: {missing}"
