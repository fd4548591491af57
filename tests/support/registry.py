"""A real registry on 127.0.0.1 for the image tests: Debian's docker-registry (the distribution registry 2.8) serving
a folder, started on a free port and stopped with the test."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_registry(folder: Path, port: int | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """(``127.0.0.1:PORT``, the process), on ``port`` or a free one; the test is skipped where docker-registry is not
    installed."""
    program = shutil.which("docker-registry")
    if program is None:
        pytest.skip("Debian's docker-registry is not installed (apt-get install docker-registry)")
    port = port or free_port()
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "registry.yml"
    conf.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {folder / 'store'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen([program, "serve", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import requests

    for _ in range(100):
        try:
            if requests.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            time.sleep(0.1)
    try:
        yield f"127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)
