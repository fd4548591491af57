"""Running an image with podman the way a user would, and answering whether it serves: the test an image passes
before it is pushed.

The container gets what the notes' run command gives it, less the GPU devices (a test machine may have none: the
bundle then runs on the CPU, as the smoke does): the model folder mounted read-only on ``/models``, a read-only root
file system, the image's own user, the port published on 127.0.0.1 only. Podman is run with the ``runc`` runtime and
explicit limits where crun refuses the machine's cgroups (``ROCKBUILD_PODMAN_RUNTIME``; see docs/images.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from rockbuild.core.errors import ImageError, ProcessError
from rockbuild.core.record import Record
from rockbuild.process import Output, child_env, run

CONTAINER_PORT = 8080
_IMAGE_ID = re.compile(r"^[0-9a-f]{64}$")


SBIN = ("/usr/sbin", "/sbin")  # where iptables lives: podman's network plugins run it for every `run -p`


def podman_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child environment for podman, with the sbin folders on PATH: a PATH without them (a cron job's, `env -i`'s)
    made every published port fail with "failed to locate iptables" (seen in the night rehearsal, 2026-12-06)."""
    env = child_env(base=base)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p]
    env["PATH"] = os.pathsep.join([*path, *(d for d in SBIN if d not in path)])
    return env


@dataclass(frozen=True)
class Podman:
    """The podman command line to use: the program and its global options (``--runtime runc``)."""

    program: str
    global_args: tuple[str, ...] = ()
    run_args: tuple[str, ...] = ()  # --ulimit ...: what runc needs where crun is refused

    @classmethod
    def find(cls, runtime: str | None = None) -> Podman | None:
        program = shutil.which("podman")
        if program is None:
            return None
        if runtime:
            return cls(
                program,
                ("--runtime", runtime),
                ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000") if "runc" in runtime else (),
            )
        return cls(program)

    def __call__(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        try:
            result = run(
                [self.program, *self.global_args, *args],
                env=podman_env(),
                timeout=timeout,
                check=check,
                output=Output(tail_lines=12),
            )
        except ProcessError as exc:
            tail = " | ".join(line for line in exc.tail[-3:] if "systemd" not in line) if exc.tail else ""
            raise ImageError(f"podman {args[0]} failed: {exc.message}" + (f": {tail}" if tail else "")) from None
        return result.output


@dataclass(frozen=True)
class ImageTest(Record):
    """What the podman test saw."""

    ok: bool
    seconds_to_health: float | None
    user: str  # uid:gid the server runs as
    read_only: bool
    health: str  # /health's answer
    chat_page: str  # served | absent (the bundle has none) | <what went wrong>
    completion: str  # the model's answer
    expected: str  # the pattern it had to match
    healthcheck: str  # the image's own HEALTHCHECK, run by podman: healthy | ...
    failure: str | None = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load(podman: Podman, folder: Path) -> str:
    """The image in ``folder`` (a ``dir:`` layout) pulled into podman's store; its image ID."""
    out = podman("pull", "-q", f"dir:{folder}", timeout=900)
    ids = [line.strip() for line in out.splitlines() if _IMAGE_ID.match(line.strip())]
    if not ids:
        raise ImageError(f"podman pull dir:{folder} printed no image ID")
    return ids[-1]


def stored_images(podman: Podman) -> set[str]:
    """The IDs (64 hex digits) of every image in podman's store."""
    out = podman("images", "-a", "-q", "--no-trunc", timeout=120)
    return {line.strip().removeprefix("sha256:") for line in out.splitlines() if line.strip()}


@contextmanager
def loaded(podman: Podman, folder: Path) -> Iterator[str]:
    """:func:`load` for the time of a test: the image ID, and afterwards, whatever happened, the image removed from
    podman's store again unless it was there before (a tested image is ~1.3 GB: a publishing machine kept every
    night's, 3 GB a night, until its disk was full)."""
    before = stored_images(podman)
    image_id = load(podman, folder)
    try:
        yield image_id
    finally:
        if image_id not in before:
            podman("rmi", "-f", image_id, check=False, timeout=300)


def serve_and_check(
    podman: Podman,
    image: str,
    model: Path,
    *,
    prompt: str,
    expect: str,
    chat_page: bool,
    extra_args: Sequence[str] = (),
    start_timeout: float = 300.0,
) -> ImageTest:
    """Start ``image`` serving ``model`` (mounted from its folder), wait for ``/health``, then check the chat page,
    a greedy completion of ``prompt`` against ``expect`` (a regular expression), the user, the read-only root and the
    image's own HEALTHCHECK; the container is removed whatever happens."""
    port = free_port()
    started = time.monotonic()
    cid = (
        podman(
            "run",
            "-d",
            "--read-only",
            *podman.run_args,
            "-p",
            f"127.0.0.1:{port}:{CONTAINER_PORT}",
            "-v",
            f"{model.parent}:/models:ro",
            image,
            "-m",
            f"/models/{model.name}",
            *extra_args,
        )
        .strip()
        .splitlines()[-1]
        .strip()
    )
    base = f"http://127.0.0.1:{port}"
    seconds: float | None = None
    facts: dict[str, Any] = {
        "user": "?",
        "read_only": False,
        "health": "",
        "chat_page": "not checked",
        "completion": "",
        "healthcheck": "not checked",
    }
    failure = None
    try:
        while time.monotonic() - started < start_timeout:
            state = json.loads(podman("inspect", "--format", "{{json .State}}", cid))
            if not state.get("Running"):
                logs = podman("logs", "--tail", "5", cid, check=False).strip().splitlines()
                raise ImageError(
                    f"the container exited ({state.get('ExitCode')}) before /health answered: "
                    f"{logs[-1] if logs else 'no output'}"
                )
            try:
                answer = requests.get(f"{base}/health", timeout=2)
                if answer.status_code == 200:
                    seconds = time.monotonic() - started
                    facts["health"] = answer.text.strip()[:80]
                    break
            except requests.RequestException:
                pass
            time.sleep(0.25)
        else:
            raise ImageError(f"/health did not answer 200 within {start_timeout:.0f} s")
        page = requests.get(f"{base}/", timeout=30)
        if chat_page:
            served = page.status_code == 200 and "<html" in page.text[:4096].lower()
            facts["chat_page"] = "served" if served else f"HTTP {page.status_code}, {len(page.content)} bytes"
            if not served:
                raise ImageError(f"GET / did not serve the chat page ({facts['chat_page']})")
        else:
            facts["chat_page"] = "absent (the bundle has none)"
        answer = requests.post(
            f"{base}/completion",
            json={"prompt": prompt, "n_predict": 8, "temperature": 0, "top_k": 1, "seed": 0},
            timeout=300,
        )
        facts["completion"] = str(answer.json().get("content", "")) if answer.ok else f"HTTP {answer.status_code}"
        if not re.match(expect, facts["completion"]):
            raise ImageError(f"the completion of {prompt!r} was {facts['completion']!r}, not {expect!r}")
        facts["user"] = ":".join(podman("exec", cid, "/usr/bin/busybox", "id", flag).strip() for flag in ("-u", "-g"))
        if facts["user"].startswith("0:") or facts["user"] == "0":
            raise ImageError("the server runs as root in the container")
        inspect = json.loads(podman("inspect", "--format", "{{json .HostConfig.ReadonlyRootfs}}", cid))
        probe = podman("exec", cid, "/usr/bin/busybox", "touch", "/opt/llama/.written", check=False)
        facts["read_only"] = bool(inspect) and "Read-only file system" in probe
        if not facts["read_only"]:
            raise ImageError("the container's root file system was writable")
        check = podman("healthcheck", "run", cid, check=False).strip().splitlines()
        facts["healthcheck"] = next((line for line in reversed(check) if "systemd" not in line), "healthy")
        if "unhealthy" in facts["healthcheck"] or "Error" in facts["healthcheck"]:
            raise ImageError(f"the image's HEALTHCHECK said {facts['healthcheck']!r}")
        facts["healthcheck"] = "healthy"
    except ImageError as exc:
        failure = exc.message
    finally:
        podman("rm", "-f", cid, check=False, timeout=120)
    return ImageTest(ok=failure is None, seconds_to_health=seconds, expected=expect, failure=failure, **facts)
