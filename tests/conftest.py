"""Shared fixtures: the installed `rockbuild` entry point run as a real subprocess, and small file writers; and the
guard that holds every test under tests/unit to the unit rule (tests/support/unit_rule.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import files
from support.paths import REPO, TESTS
from support.unit_rule import no_toolchain

SHARED = REPO.parent / "shared"
NO_PATCHES = REPO / "tests" / "fixtures" / "no-patches.yaml"


def pytest_configure(config):
    # The stand-in llama.cpp trees of the unit tests are not llama.cpp: the fixes rockbuild carries for the real tree
    # (patches/patches.yaml) cannot apply to them. Their builds carry an empty series unless a test names its own
    # (tests/integration/test_build_patches.py); the end-to-end tests (`-m e2e`, the real tree) carry the shipped one.
    if "not e2e" in (config.option.markexpr or "not e2e"):
        os.environ.setdefault("ROCKBUILD_PATCHES", str(NO_PATCHES))


CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


@pytest.fixture(autouse=True)
def _unit_tests_start_no_toolchain(request, tmp_path_factory):
    """A test under tests/unit starts no compiler, build tool, wine, browser, container, npm or git
    (tests/support/unit_rule.py); the other folders' tests run what they need."""
    if not request.node.path.is_relative_to(TESTS / "unit"):
        yield
        return
    with no_toolchain(tmp_path_factory.getbasetemp().resolve(), lambda: request.node.stash.get(CALL_FAILED, False)):
        yield


def rockbuild_exe() -> str:
    """The console script installed next to this interpreter (what users run), not the source tree."""
    exe = Path(sys.executable).with_name("rockbuild")
    if exe.exists():
        return str(exe)
    found = shutil.which("rockbuild")
    if not found:
        pytest.fail("the rockbuild console script is not installed; run: pip install '.[test]'")
    return found


@pytest.fixture
def run_rockbuild(tmp_path):
    """Run the installed `rockbuild` with args; returns CompletedProcess (text). Extra env merges over a clean one."""

    def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 60):
        # the caller's terminal width (COLUMNS: pytest-xdist's workers have one) is no input of a test's command
        dropped = ("GITHUB_OUTPUT", "GITHUB_ACTIONS", "ROCKBUILD_DEBUG", "COLUMNS", "LINES")
        base = {k: v for k, v in os.environ.items() if k not in dropped}
        base.update(env or {})
        return subprocess.run(
            [rockbuild_exe(), *args], capture_output=True, text=True, env=base, cwd=cwd or tmp_path, timeout=timeout
        )

    return run


@pytest.fixture
def write(tmp_path):
    """write("name.yaml", text) -> Path, with the text dedented."""

    def _write(name: str, text: str) -> Path:
        return files.write(tmp_path / name, text)

    return _write


@pytest.fixture
def gh():
    """The local GitHub API server (tests/support/github.py), fresh for each test, accepting support.publishing's TOKEN."""
    from support.github import GitHubAPIServer
    from support.publishing import TOKEN

    with GitHubAPIServer(token=TOKEN) as server:
        yield server


@pytest.fixture
def registry(tmp_path):
    """A real registry on 127.0.0.1 (tests/support/registry.py): (``127.0.0.1:PORT``, its process)."""
    from support.registry import local_registry

    with local_registry(tmp_path / "registry") as running:
        yield running
