"""The console's verbosity (issue 40: output verbosity lives in the console, not in parameters): a command's --json
turns it quiet; quiet drops steps, progress and info lines and keeps warnings."""

from __future__ import annotations

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
