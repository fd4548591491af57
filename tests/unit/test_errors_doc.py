"""docs/errors.md's table of exit codes lists every code rockbuild exits with: each error class's, the bug's (70) and
an interrupt's (130, issue 57)."""

from __future__ import annotations

import re

from support.paths import REPO

from rockbuild.core import errors


def subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= subclasses(sub)
    return found


def documented_codes() -> set[int]:
    text = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    table = text.split("| code | meaning |", 1)[1].split("\n\n", 1)[0]
    return {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}


def test_every_exit_code_is_documented():
    codes = {0, 1, 2, errors.BUG_EXIT_CODE, 130} | {c.exit_code for c in subclasses(errors.RockbuildError)}
    assert sorted(codes - documented_codes()) == []


def test_the_interrupt_row_says_what_is_printed():
    text = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| 130 |"))
    assert "`error: interrupted`" in row
