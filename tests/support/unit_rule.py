"""What a unit test may run (docs/development.md, "Tests"): rockbuild's code on files the test writes itself, Python,
small stand-in programs it wrote, the installed `rockbuild` a few times, tar and its decompressors, local HTTP servers
in the test's process, and the host's gcc for a few-line fixture ELF file (tests/support/bundles.py ``cc``: the
loader runs it, so a closure computed from the files can be checked). A test that needs a compiler for anything
else, a build tool, wine, a browser, a container, a Debian package tool, npm or git belongs in tests/integration.

tests/conftest.py holds every test under tests/unit to it with ``no_toolchain``: starting one of those programs (found
on PATH or named by path; a stand-in of the same name under the tests' temporary folder excepted) fails the test,
naming the program and the way out. .ci/run holds the unit suite to its time besides (ROCKBUILD_UNIT_LIMIT_S)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# Programs whose use makes a test an integration test: compilers and build tools, wine, browsers, containers, the
# Debian package tools, npm, git, ROCm's offload tools.
INTEGRATION_PROGRAMS = frozenset(
    {
        "gcc",
        "g++",
        "cc",
        "c++",
        "cpp",
        "clang",
        "clang++",
        "ld",
        "objcopy",
        "cmake",
        "ninja",
        "make",
        "ccache",
        "glslc",
        "clang-offload-bundler",
        "wine",
        "wine64",
        "wineserver",
        "wineboot",
        "chromium",
        "chromium-browser",
        "google-chrome",
        "playwright",
        "podman",
        "runc",
        "docker",
        "docker-registry",
        "dpkg",
        "dpkg-deb",
        "lintian",
        "npm",
        "node",
        "git",
    }
)
INTEGRATION_PREFIXES = ("x86_64-w64-mingw32-", "i686-w64-mingw32-")
# gcc makes the bundle tests' fixture ELF files through this helper alone
FIXTURE_COMPILER = ("gcc", str(Path(__file__).with_name("bundles.py")), "cc")
HINT = "a test that runs it belongs in tests/integration (tests/support/unit_rule.py says what a unit test may run)"


def program(args) -> str | None:
    """The program a Popen call starts: its first argument, or a shell line's first word."""
    if isinstance(args, (str, bytes, os.PathLike)):
        line = os.fsdecode(args)
        try:
            words = shlex.split(line)
        except ValueError:
            words = line.split()
        return words[0] if words else None
    try:
        return os.fsdecode(next(iter(args)))
    except (StopIteration, TypeError):
        return None


def _fixture_compile(name: str) -> bool:
    """True when ``name`` is gcc called by tests/support/bundles.py ``cc`` (a fixture ELF file)."""
    if name != FIXTURE_COMPILER[0]:
        return False
    frame = sys._getframe(2)
    while frame is not None:
        if (frame.f_code.co_filename, frame.f_code.co_name) == FIXTURE_COMPILER[1:]:
            return True
        frame = frame.f_back
    return False


def integration_program(args, kwargs: dict, temp: Path) -> str | None:
    """The name of the program a Popen call starts when it is one of the integration tests', else None."""
    started = kwargs.get("executable") or program(args)
    if started is None:
        return None
    started = os.fsdecode(started)
    name = Path(started).name
    if (name not in INTEGRATION_PROGRAMS and not name.startswith(INTEGRATION_PREFIXES)) or _fixture_compile(name):
        return None
    if "/" in started:
        where = Path(kwargs.get("cwd") or ".") / started
    else:
        env = kwargs.get("env")
        found = shutil.which(started, path=(os.environ if env is None else env).get("PATH"))
        if found is None:
            return None  # it cannot start: what the test is about
        where = Path(found)
    if where.resolve().is_relative_to(temp):
        return None  # a stand-in the test wrote
    return name


@contextmanager
def no_toolchain(temp: Path, failed: Callable[[], bool]) -> Iterator[None]:
    """While it is open, subprocess refuses to start an integration program (``temp``: the tests' temporary folder).
    One the test did not fail for (rockbuild's code or a thread swallowed the failure) fails it when it closes, unless
    ``failed()`` says the test failed already."""
    started: list[str] = []
    real = subprocess.Popen

    class UnitPopen(real):  # type: ignore[misc, valid-type]
        def __init__(self, args, *rest, **kwargs):
            name = integration_program(args, kwargs, temp)
            if name is not None:
                started.append(name)
                pytest.fail(f"a unit test started {name}: {HINT}", pytrace=False)
            super().__init__(args, *rest, **kwargs)

    subprocess.Popen = UnitPopen  # type: ignore[misc]
    try:
        yield
    finally:
        subprocess.Popen = real  # type: ignore[misc]
    if started and not failed():
        pytest.fail(f"a unit test started {', '.join(sorted(set(started)))}: {HINT}", pytrace=False)
