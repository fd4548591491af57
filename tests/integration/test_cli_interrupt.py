"""Ctrl-C at any moment of a command is one line, `error: interrupted`, and exit code 130 (issue 57, finding 6): in the
first 0.1 s too, while the console script imports rockbuild.cli and before main()'s try block guards the command.

The installed `rockbuild` is started as users start it and sent SIGINT at several delays. The delays count from the
moment rockbuild's own code runs: the first of the modules rockbuild.cli imports right after installing its handler
(traceback, typing, pathlib, click) shows in PYTHONPROFILEIMPORTTIME's lines. Before rockbuild's first lines the
Python interpreter starts (site, encodings; ~20 ms), which no Python program can guard: an interrupt there is
CPython's own traceback."""

from __future__ import annotations

import signal
import socket
import subprocess
import time

import pytest
from conftest import rockbuild_exe

DELAYS = (0.0, 0.002, 0.005, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.2)
AFTER_THE_HANDLER = ("traceback", "typing", "pathlib", "click")  # rockbuild.cli's first imports after its handler


@pytest.fixture
def silent_api():
    """A TCP port that takes connections and never answers: a command asking it waits until it is interrupted."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def interrupted(args: list[str], delay: float, env: dict[str, str]) -> tuple[int, str, float]:
    """(exit code, stderr without the import-time lines, seconds from rockbuild's first import to the SIGINT)."""
    proc = subprocess.Popen(
        [rockbuild_exe(), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert proc.stderr is not None
    lines: list[str] = []
    ours = False
    try:
        for line in proc.stderr:  # until rockbuild.cli imports what it imports after installing its handler
            lines.append(line)
            module = line.rsplit("|", 1)[-1].strip() if line.startswith("import time:") else ""
            ours = ours or module == "rockbuild"
            if ours and (module in AFTER_THE_HANDLER or module.startswith("click.")):
                break
        else:
            pytest.fail("rockbuild ended before rockbuild.cli's imports:\n" + "".join(lines))
        started = time.monotonic()
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic() - started
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rest = [line for line in (*lines, *err.splitlines(keepends=True)) if not line.startswith("import time:")]
    return proc.returncode, "".join(rest), sent


def test_ctrl_c_from_the_first_import_on_is_one_line_and_130(silent_api, tmp_path):
    """`rockbuild install` asking an API that never answers: interrupted while rockbuild.cli imports its commands
    (the first delays), while main() resolves the settings, and while the command waits on the network."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "ROCKBUILD_DEBUG")}
    env.update(ROCKBUILD_CACHE=str(tmp_path / "cache"), HOME=str(tmp_path))
    args = ["install", "--target", "gfx1151", "--api-url", silent_api, "--dest", str(tmp_path / "dest")]
    seen = []
    for delay in DELAYS:
        code, stderr, sent = interrupted(args, delay, env)
        seen.append((delay, round(sent, 3), code))
        assert "Traceback" not in stderr, f"SIGINT {sent:.3f} s after rockbuild's first import:\n{stderr}"
        assert code == 130, f"SIGINT {sent:.3f} s after rockbuild's first import: exit {code}\n{stderr}"
        assert stderr.strip().splitlines() == ["error: interrupted"], stderr
    assert not (tmp_path / "dest").exists()
    assert seen[-1][1] >= 0.2, seen  # the last one reached the command itself, waiting on the API


def test_a_sigint_the_parent_ignores_stays_ignored(silent_api, tmp_path):
    """nohup, or `cmd &` in a script: SIGINT is ignored when rockbuild starts, and rockbuild installs no handler of its
    own over that (Python does not either): the command goes on waiting for the API."""
    import os

    env = {**os.environ, "ROCKBUILD_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [rockbuild_exe(), "install", "--target", "gfx1151", "--api-url", silent_api, "--dest", str(tmp_path / "dest")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        for when in (0.0, 0.05, 0.3):
            time.sleep(when)
            proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
    finally:
        proc.kill()
        proc.communicate()


def test_a_program_that_imports_rockbuild_cli_keeps_its_keyboardinterrupt():
    """rockbuild.cli's handler speaks for the program `rockbuild` alone: a process that imports it as a library (a test,
    the docs generator) still gets Python's own KeyboardInterrupt once the import is done."""
    import sys

    code = (
        # 'imported' is printed inside the try: a signal sent right after it can never land outside it
        "import time, rockbuild.cli\n"
        "try:\n    print('imported', flush=True)\n    time.sleep(30)\n"
        "except KeyboardInterrupt:\n    print('KeyboardInterrupt', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "imported"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, out.strip(), err) == (0, "KeyboardInterrupt", "")
