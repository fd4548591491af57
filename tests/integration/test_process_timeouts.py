"""The subprocess runner's timeout, with the time it takes: a child that outlives it is killed with its whole process
group (the fast tests of rockbuild.process: tests/unit/test_process.py)."""

from __future__ import annotations

import sys
import time

import pytest

from rockbuild.process import ProcessError, run

PY = sys.executable


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    start = time.monotonic()
    with pytest.raises(ProcessError, match="timed out after 1s"):
        run([PY, "-c", script], timeout=1)
    assert time.monotonic() - start < 15
    import os

    grandchild = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the grandchild outlived the timeout")
