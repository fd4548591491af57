"""The console's verbosity (issue 40: output verbosity lives in the console, not in parameters): a command's --json
turns it quiet; quiet drops steps, progress and info lines and keeps warnings."""

from __future__ import annotations

import re

import pytest

from rockbuild import console
from rockbuild.commands.common import quiet_with_json


@pytest.fixture(autouse=True)
def _restore():
    with console.quieted(False):
        yield


def chatter() -> None:
    with console.step("a step"):
        console.info("an info line")
        progress = console.byte_progress("copy", 10, every=0.0)
        progress.advance(10)
        progress.close()
    console.warn("a warning")


def test_quiet_keeps_only_warnings(capsys):
    chatter()
    loud = capsys.readouterr().err
    assert "==> a step" in loud and "an info line" in loud and "copy:" in loud and "a step: done" in loud
    with console.quieted():
        chatter()
    assert capsys.readouterr().err == "warning: a warning\n"
    chatter()  # restored after the block
    assert "an info line" in capsys.readouterr().err


def test_a_failing_step_raises_through_a_quiet_console():
    with console.quieted(), pytest.raises(RuntimeError), console.step("quiet"):
        raise RuntimeError("the block's own error")


@pytest.mark.parametrize("flag", [True, False])
def test_the_json_flag_makes_the_console_quiet(flag):
    assert quiet_with_json(None, None, flag) is flag  # type: ignore[arg-type]
    assert console.is_quiet() is flag


# ---------------------------------------------------------------------------------------------------------------------
# Waits (issue 57: no silent wait over 10 s)


def waited(seconds: float, **kw) -> None:
    import time

    with console.waiting("h (GET /x)", timeout=15, **kw):
        time.sleep(seconds)


def test_a_wait_speaks_after_a_silence_then_every_few_seconds_and_stops_with_its_block(capsys):
    import time

    waited(1.5, after=0.2, every=0.3)
    lines = capsys.readouterr().err.splitlines()
    assert 2 <= len(lines) <= 6, lines  # at 0.2 s, then every 0.3 s (the watch looks four times a second)
    assert all(
        re.fullmatch(r"    waiting for h \(GET /x\): nothing for [0-2]s \(15s timeout\)", line) for line in lines
    ), lines
    time.sleep(0.5)
    assert capsys.readouterr().err == ""  # its thread ended with the block


def test_a_call_that_may_be_busy_says_how_long_it_has_taken(capsys):
    import time

    with console.waiting("api.github.com (uploading a.tar.gz)", timeout=120, after=0.2, every=10, idle=False):
        time.sleep(0.6)
    assert re.fullmatch(
        r"    waiting for api\.github\.com \(uploading a\.tar\.gz\): [01]s so far \(120s timeout\)\n",
        capsys.readouterr().err,
    )


def test_another_line_restarts_the_silence_and_touch_says_something_arrived(capsys):
    import time

    with console.waiting("h (GET /x)", after=1.0, every=1.0) as wait:
        for _ in range(12):
            time.sleep(0.1)
            wait.touch()  # bytes arriving: no wait to report
        console.warn("h: read timed out; try 2 of 3 now")
        time.sleep(0.2)
    assert capsys.readouterr().err == "warning: h: read timed out; try 2 of 3 now\n"


def test_a_quiet_console_and_a_nested_wait_add_no_lines(capsys):
    with console.quieted():
        waited(0.5, after=0.1, every=0.1)
    assert capsys.readouterr().err == ""
    with console.waiting("outer", after=0.2, every=10), console.waiting("inner", after=0.1, every=0.1):
        import time

        time.sleep(1.0)
    assert [line.split(":")[0] for line in capsys.readouterr().err.splitlines()] == ["    waiting for outer"]


# ---------------------------------------------------------------------------------------------------------------------
# Tables that fit (issue 57: the matrix at 80 columns)


def columns() -> list[console.Column]:
    return [
        console.Column("id", ("linux-gfx1151+gfx120X", "windows-gfx110X"), rank=0),
        console.Column(
            "targets",
            ("gfx1151,gfx1200,gfx1201", "gfx1100,gfx1101,gfx1102,gfx1103"),
            rank=1,
            wrap=True,
            narrow=16,
            split=",",
        ),
        console.Column("runner", ("ubuntu-22.04", "windows-2022"), rank=3),
        console.Column("llama.cpp", ("master", "master"), rank=4, fold=True),
        console.Column("required", ("yes", "no"), rank=2),
    ]


def note(table: str) -> str:
    """The lines under the table, as one."""
    return " ".join(table.split("┘\n", 1)[1].splitlines())


def test_a_narrow_table_keeps_the_ids_whole_folds_a_single_value_and_names_what_it_drops():
    text = console.render_table("2 jobs", columns(), 50)
    lines = text.splitlines()
    assert lines[0] == "2 jobs; llama.cpp: master"
    assert all(len(line) <= 50 for line in lines), text
    assert "linux-gfx1151+gfx120X" in text and "windows-gfx110X" in text
    assert note(text) == "not shown at 50 columns: runner, required (--wide shows every column)"
    assert "gfx1100 gfx1101" in text  # a list wraps at its items, never inside a name
    header = [cell.strip() for cell in lines[2].strip("┃").split("┃")]
    assert header == ["id", "targets"]


def test_no_width_is_every_column_as_it_is_and_a_tiny_one_still_shows_whole_ids():
    wide = console.render_table("2 jobs", columns(), None)
    assert "llama.cpp" in wide and "gfx1100,gfx1101,gfx1102,gfx1103" in wide and "not shown" not in wide
    tiny = console.render_table("2 jobs", columns(), 10)
    assert "linux-gfx1151+gfx120X" in tiny
    assert note(tiny) == "not shown at 10 columns: targets, runner, required (--wide shows every column)"


def test_table_width_prefers_columns_and_a_pipe_gets_every_column(monkeypatch):
    import io

    monkeypatch.setattr("sys.stdout", io.StringIO())  # not a terminal
    assert console.table_width(None) is None
    assert console.table_width(90) == 90
    assert console.table_width(90, wide=True) is None
