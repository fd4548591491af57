"""The programs a release ships (``config/programs.yaml``), as a typed, frozen list every layer shares.

The build compiles them (the ninja targets the configured tree defines), the smoke test runs each from the bundle
(:class:`Program.check`), and the .deb and ``install`` follow the bundle. Programs left out carry the reason, so a
maintainer sees why a program of llama.cpp's release is not in ours. (The CPU backend modules a bundle ships are
the bundle policy's: :mod:`rockbuild.bundle.policy`.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rockbuild.core.data import YDict, YList, check_keys, expect_type, kind_of, load_data_file, where
from rockbuild.core.errors import BuildError, ConfigError
from rockbuild.core.record import Record

# llama.cpp's op-level test (tests/test-backend-ops.cpp): built with every job from the same tree and flags, kept in
# the job folder's tools/ for the smoke's ops step (rockbuild.smoke.ops), and never shipped: the bundle leaves it out
# whatever build/bin/ holds.
OP_TEST_PROGRAM = "test-backend-ops"
NEVER_SHIPPED = frozenset({OP_TEST_PROGRAM, f"{OP_TEST_PROGRAM}.exe"})

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_SHIP_KEYS = ("target", "file", "required", "aliases", "check", "exit", "expect", "what")
_KNOWN_KEYS = ("ships", "programs", "failure", "after_output", "timeout", "reason")


@dataclass(frozen=True, kw_only=True)
class KnownFailure(Record):
    """An upstream bug the smoke's program checks are known to hit, in bundles of one kind only: those that ship one
    of the ``ships`` files (e.g. ``libwinpthread-1.dll``: a mingw-w64 build). There, a check that fails with a problem
    containing ``failure`` (and, with ``after_output``, only after printing what the check expects) is recorded as
    *known* (with ``reason``) and does not fail the smoke; any other failure still does, and a check that passes
    says so."""

    ships: tuple[str, ...]
    programs: tuple[str, ...] = ()  # the targets it hits (none: every shipped program)
    failure: str
    after_output: bool = True  # known only once the program printed its output (its expect, or anything)
    reason: str
    timeout: float | None = None  # the check's timeout in those bundles (a known hang need not cost the full one)

    def applies_to(self, names: Iterable[str]) -> bool:
        lowered = {n.lower() for n in names}
        return any(s.lower() in lowered for s in self.ships)


@dataclass(frozen=True)
class Program:
    """One shipped program: its ninja target, its file in the bundle, and how the smoke test proves it runs."""

    target: str
    file: str = ""  # "" = the target's name
    required: bool = False
    aliases: tuple[str, ...] = ()
    check: tuple[str, ...] = ("--help",)
    exit_code: int = 0
    expect: str = ""  # a regular expression the output must match ("" = any output)
    what: str = ""
    known_failures: tuple[KnownFailure, ...] = ()  # programs.yaml's known_failures that name this program

    @property
    def file_name(self) -> str:
        return self.file or self.target

    def file_for(self, platform: str) -> str:
        return self.file_name + (".exe" if platform == "windows" else "")

    def to_dict(self) -> dict[str, Any]:
        """build.json's ``programs[]``: ``file`` is :attr:`file_name` (the target's when none was given; the field
        stays empty, which :meth:`ProgramList.select` and the whole-release check read as "named after the target"),
        ``exit`` the exit code."""
        return {
            "target": self.target,
            "file": self.file_name,
            "required": self.required,
            "aliases": list(self.aliases),
            "check": list(self.check),
            "exit": self.exit_code,
            "expect": self.expect,
            "what": self.what,
            "known_failures": [k.to_dict() for k in self.known_failures],
        }


@dataclass(frozen=True)
class LeftOut:
    target: str
    reason: str


@dataclass(frozen=True)
class Selection:
    """The programs of one tree: the ninja targets to build (an alias replaced by the name the tree defines), and the
    listed optional programs it does not define."""

    programs: tuple[Program, ...]
    unavailable: tuple[str, ...] = ()

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(p.target for p in self.programs)


@dataclass(frozen=True)
class ProgramList:
    programs: tuple[Program, ...]
    left_out: tuple[LeftOut, ...] = ()
    known_failures: tuple[KnownFailure, ...] = ()

    def names(self) -> tuple[str, ...]:
        return tuple(p.target for p in self.programs)

    def select(self, available: Iterable[str], where_from: str) -> Selection:
        """The listed programs ``available`` (the tree's executable targets) defines; a required one it lacks (under
        none of its names) is a BuildError naming ``where_from``."""
        available = set(available)
        chosen: list[Program] = []
        unavailable: list[str] = []
        missing: list[str] = []
        for program in self.programs:
            name = next((n for n in (program.target, *program.aliases) if n in available), None)
            if name is None:
                (missing if program.required else unavailable).append(program.target)
                continue
            if name != program.target:  # the tree's older name: build and ship it under that name
                program = replace(program, target=name, aliases=())
            chosen.append(program)
        if missing:
            raise BuildError(
                f"{where_from} defines no target {', '.join(missing)}; is it a llama.cpp tree from 2025 or later?"
            )
        return Selection(tuple(chosen), tuple(unavailable))


def _strings(path: Path, node: Any, key: str, value: Any, what: str) -> tuple[str, ...]:
    expect_type(path, node, key, value, (list, YList), what)
    for item in value:
        if not isinstance(item, str):
            raise ConfigError(f"{where(path, node, key)}: {what} must hold strings, not {kind_of(item)}")
    return tuple(value)


def _name(path: Path, node: YDict, key: str, what: str) -> str:
    value = node.get(key)
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise ConfigError(
            f"{where(path, node, key)}: {what} needs a {key} (a program name such as llama-cli), not {value!r}"
        )
    return value


def _program(path: Path, ship: list[Any], i: int) -> Program:
    node = ship[i]
    expect_type(path, ship, i, node, (dict, YDict), "a ship entry")
    check_keys(path, node, _SHIP_KEYS, "a ship entry")
    target = _name(path, node, "target", "a ship entry")
    file = node.get("file", "")
    if file and not _NAME_RE.match(str(file)):
        raise ConfigError(f"{where(path, node, 'file')}: {file!r} is not a file name")
    required = node.get("required", False)
    expect_type(path, node, "required", required, bool, "required")
    exit_code = node.get("exit", 0)
    if not isinstance(exit_code, int) or isinstance(exit_code, bool) or not 0 <= exit_code <= 255:
        raise ConfigError(f"{where(path, node, 'exit')}: exit must be an exit code (0-255), not {exit_code!r}")
    expect = node.get("expect", "")
    expect_type(path, node, "expect", expect, str, "expect")
    try:
        re.compile(expect)
    except re.error as exc:
        raise ConfigError(f"{where(path, node, 'expect')}: expect is not a regular expression: {exc}") from None
    what = node.get("what", "")
    expect_type(path, node, "what", what, str, "what")
    check = _strings(path, node, "check", node.get("check", ["--help"]), "check")
    aliases = _strings(path, node, "aliases", node.get("aliases", []), "aliases")
    return Program(target, str(file), required, aliases, check, exit_code, expect, what)


def _known_failure(path: Path, parent: YDict, node: Any) -> KnownFailure:
    expect_type(path, parent, "known_failures", node, YDict, "a known_failures entry")
    assert isinstance(node, YDict)
    check_keys(path, node, _KNOWN_KEYS, "a known_failures entry")
    ships = _strings(path, node, "ships", node.get("ships", []), "ships")
    if not ships:
        raise ConfigError(
            f"{where(path, node, 'ships')}: a known failure needs ships (the file names of the bundles "
            "it happens in, e.g. [libwinpthread-1.dll])"
        )
    texts = {}
    for key in ("failure", "reason"):
        value = node.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where(path, node, key)}: a known failure needs a {key} (a non-empty string)")
        texts[key] = value.strip()
    timeout = node.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ConfigError(
            f"{where(path, node, 'timeout')}: timeout must be a number of seconds above 0, not {timeout!r}"
        )
    after_output = node.get("after_output", True)
    expect_type(path, node, "after_output", after_output, bool, "after_output")
    programs = _strings(path, node, "programs", node.get("programs", []), "programs")
    return KnownFailure(
        ships=ships,
        programs=programs,
        failure=texts["failure"],
        after_output=after_output,
        reason=texts["reason"],
        timeout=float(timeout) if timeout is not None else None,
    )


def parse_programs(doc: Any, path: Path) -> ProgramList:
    """The program list from a parsed ``programs.yaml`` (read by :func:`load_programs`)."""
    if not isinstance(doc, YDict):
        raise ConfigError(f"{path}: expected a mapping with 'ship' (see the shipped config/programs.yaml)")
    check_keys(path, doc, ("ship", "left_out", "known_failures"), "programs.yaml")
    ship = doc.get("ship")
    if not isinstance(ship, list) or not ship:
        raise ConfigError(f"{where(path, doc, 'ship')}: ship must be a non-empty list of programs")
    programs = tuple(_program(path, ship, i) for i in range(len(ship)))
    left: list[LeftOut] = []
    left_out = doc.get("left_out") or []
    expect_type(path, doc, "left_out", left_out, list, "left_out")
    for i, node in enumerate(left_out):
        expect_type(path, left_out, i, node, (dict, YDict), "a left_out entry")
        check_keys(path, node, ("target", "reason"), "a left_out entry")
        reason = node.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError(f"{where(path, node, 'reason')}: a program left out needs its reason")
        left.append(LeftOut(_name(path, node, "target", "a left_out entry"), reason))
    seen: dict[str, str] = {}
    for name, kind in [(p.target, "ship") for p in programs] + [(lo.target, "left_out") for lo in left]:
        if name in seen:
            raise ConfigError(f"{path}: {name} is listed twice (in {seen[name]} and {kind})")
        seen[name] = kind
    known_nodes = doc.get("known_failures") or []
    expect_type(path, doc, "known_failures", known_nodes, (list, YList), "known_failures")
    known = tuple(_known_failure(path, doc, node) for node in known_nodes)
    for entry in known:
        unknown = [t for t in entry.programs if t not in seen or seen[t] != "ship"]
        if unknown:
            raise ConfigError(f"{path}: a known failure names {', '.join(unknown)}, which ship does not list")
    programs = tuple(
        replace(p, known_failures=tuple(k for k in known if not k.programs or p.target in k.programs)) for p in programs
    )
    return ProgramList(programs, tuple(left), known)


def load_programs(path: Path | None = None) -> ProgramList:
    """The program list (default: the shipped ``config/programs.yaml``)."""
    return load_data_file(path, "programs.yaml", parse_programs)
