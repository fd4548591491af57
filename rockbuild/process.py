"""Running other programs: an explicit environment without secrets, timeouts, logs, and the log's tail on failure.

Every child process rockbuild starts (cmake, ninja, git, patchelf, llama-cli...) goes through :func:`run` or
:func:`spawn`. The environment is built, never inherited wholesale: a small allowlist of the parent's variables plus
what the caller passes; anything that looks like a credential is dropped even when a caller passes it by mistake.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rockbuild.core.environment import environment
from rockbuild.core.errors import BuildError, ProcessError

# Variables a child may inherit from our environment. Everything else must be passed explicitly.
INHERITED = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "PROGRAMDATA",
    "PROGRAMFILES",
    "PROGRAMFILES(X86)",
    "LOCALAPPDATA",
    "APPDATA",
    "USERPROFILE",
    "NUMBER_OF_PROCESSORS",
    "PROCESSOR_ARCHITECTURE",
    "CCACHE_DIR",
    "CCACHE_MAXSIZE",
    "CCACHE_BASEDIR",
    "SOURCE_DATE_EPOCH",
    "CI",
    "GITHUB_ACTIONS",
    # how this machine reaches the network: its proxy and the CA bundle that trusts it (a company's TLS-inspecting
    # proxy), for git, npm and CMake's downloads in the children as for rockbuild's own requests
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
)
INHERITED_PREFIXES = ("LC_", "WINE")  # WINEPREFIX, WINEDEBUG...: a Windows program run under wine
# Never handed to a child, whoever asks: the build and smoke steps need none of them.
SECRET_NAMES = frozenset(
    {
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "ACTIONS_RUNTIME_TOKEN",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
        "NPM_TOKEN",
        "PYPI_TOKEN",
        "TWINE_PASSWORD",
    }
)
SECRET_PATTERN = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|APIKEY|PRIVATE_KEY)", re.I)


def is_secret(name: str) -> bool:
    return name.upper() in SECRET_NAMES or bool(SECRET_PATTERN.search(name))


def child_env(
    extra: Mapping[str, str] | None = None,
    *,
    inherit: Iterable[str] = INHERITED,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """An explicit environment: allowlisted variables of ``base`` (default: ours) plus ``extra``, minus secrets."""
    source = environment() if base is None else base
    wanted = {name.upper() for name in inherit}
    env = {k: v for k, v in source.items() if k.upper() in wanted or k.upper().startswith(INHERITED_PREFIXES)}
    env.update(extra or {})
    return {k: v for k, v in env.items() if not is_secret(k)}


@dataclass(frozen=True)
class Output:
    """What :func:`run` does with a child's output besides appending it to the log: keep it in memory
    (``capture``; off for a long build whose log is the record), hand each line to ``on_line`` (progress parsing), and
    quote its last ``tail_lines`` lines in a failure."""

    capture: bool = True
    on_line: Callable[[str], None] | None = None
    tail_lines: int = 40


STREAMED = Output(capture=False)  # a long build: the log keeps the output, memory does not


@dataclass(frozen=True)
class RunResult:
    args: tuple[str, ...]
    returncode: int
    seconds: float
    output: str  # combined stdout+stderr when captured (empty when only logged)
    log: Path | None

    def ok(self) -> bool:
        return self.returncode == 0


def _describe(args: Sequence[str]) -> str:
    text = " ".join(" ".join(str(a).split()) for a in args)  # one line, even for a multi-line -c script
    return text if len(text) <= 160 else text[:157] + "..."


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Stop a child and everything it started (it runs in its own process group)."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.terminate()
        proc.wait(timeout=5)
    except (ProcessLookupError, subprocess.TimeoutExpired, PermissionError):
        try:
            if os.name == "posix":
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


# Debian's wine64 package puts wine64 on PATH (sid, 10.0) or only under /usr/lib/wine (Debian 12, 8.0)
WINE_PROGRAMS = ("wine", "wine64")
WINE_FALLBACK = Path("/usr/lib/wine/wine64")


# wine ends a program that died of an exception with the NTSTATUS cut to 8 bits (0xC000001D: 29), which says nothing
# alone; its "wine: Unhandled <what> at address" line says which, and the run gets back the status Windows reports
WINE_UNHANDLED = re.compile(r"^wine: Unhandled (illegal instruction|page fault|stack overflow|privileged instruction)")
WINE_STATUS = {
    "illegal instruction": 0xC000001D,
    "page fault": 0xC0000005,
    "stack overflow": 0xC00000FD,
    "privileged instruction": 0xC0000096,
}


def find_wine(env: Mapping[str, str]) -> str | None:
    """wine on ``env``'s PATH (or where Debian 12 keeps it), or None."""
    path = env.get("PATH", "")
    wine = next((found for name in WINE_PROGRAMS if (found := shutil.which(name, path=path))), None)
    if wine is None and os.access(WINE_FALLBACK, os.X_OK):
        wine = str(WINE_FALLBACK)
    return wine


def launch_command(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """How this machine runs ``argv``: as it is, or, for a Windows program (``.exe``) on a machine that is not
    Windows, under wine (the end-to-end test of a Windows bundle, docs/e2e.md). A ProcessError when wine is missing."""
    argv = list(argv)
    if os.name == "nt" or not argv or not argv[0].lower().endswith(".exe"):
        return argv
    wine = find_wine(env)
    if wine is None:
        raise ProcessError(
            f"{Path(argv[0]).name} is a Windows program: on this machine it runs only under wine, "
            "which is not installed (apt install wine64)",
            returncode=None,
        )
    return [wine, *argv]


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    log: Path | None = None,
    check: bool = True,
    secrets: Mapping[str, str] | None = None,
    output: Output = Output(),
) -> RunResult:
    """Run ``args`` to completion with ``env`` (pass :func:`child_env` output; None means child_env()).

    Secrets in ``env`` never reach the child; ``secrets`` are the ones the caller hands this one child on purpose
    (``gh`` gets the GitHub token), never logged and never on the command line.

    Output (stdout and stderr merged, stdin empty) is appended to ``log`` when given, and kept in memory, passed to a
    line handler and quoted as ``output`` says. A timeout kills the whole process group. With ``check``, a non-zero
    exit or a timeout raises :class:`ProcessError` carrying the output's last lines and the log path.
    """
    environment = dict(env) if env is not None else child_env()
    environment = {k: v for k, v in environment.items() if not is_secret(k)}
    argv = launch_command([str(a) for a in args], environment)
    under_wine = argv[:1] != [str(args[0])] if args else False
    environment.update(secrets or {})
    unhandled: list[str] = []
    start = time.monotonic()
    capture, on_line = output.capture, output.on_line
    tail: collections.deque[str] = collections.deque(maxlen=max(output.tail_lines, 1))
    captured: list[str] = []
    # line-buffered so that `tail -f build.log` follows a long build
    log_fh = open(log, "a", encoding="utf-8", errors="replace", buffering=1) if log else None  # noqa: SIM115
    try:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=(os.name == "posix"),
            )
        except FileNotFoundError:
            raise ProcessError(f"{argv[0]}: command not found", returncode=None) from None
        except OSError as exc:
            raise ProcessError(f"cannot run {argv[0]}: {exc.strerror}", returncode=None) from None
        timed_out = threading.Event()
        timer = None
        if timeout is not None:

            def expire() -> None:
                timed_out.set()
                _kill_tree(proc)

            timer = threading.Timer(timeout, expire)
            timer.daemon = True
            timer.start()
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                line = raw.decode("utf-8", errors="replace")
                if log_fh:
                    log_fh.write(line)
                if capture:
                    captured.append(line)
                stripped = line.rstrip("\r\n")
                tail.append(stripped)
                if under_wine and (match := WINE_UNHANDLED.match(stripped)):
                    unhandled.append(match.group(1))
                if on_line:
                    on_line(stripped)
            returncode = proc.wait()
            if unhandled and returncode == WINE_STATUS[unhandled[-1]] & 0xFF:
                returncode = WINE_STATUS[unhandled[-1]]
        except BaseException:
            _kill_tree(proc)
            raise
        finally:
            if timer:
                timer.cancel()
    finally:
        if log_fh:
            log_fh.close()
    seconds = time.monotonic() - start
    result = RunResult(tuple(argv), returncode, seconds, "".join(captured), log)
    if timed_out.is_set():
        raise ProcessError(
            f"{_describe(argv)} timed out after {timeout:.0f}s" + (f"; log: {log}" if log else ""),
            tail=list(tail),
            log=log,
            returncode=returncode,
        )
    if check and returncode != 0:
        raise ProcessError(
            f"{_describe(argv)} failed with exit code {returncode}" + (f"; log: {log}" if log else ""),
            tail=list(tail),
            log=log,
            returncode=returncode,
        )
    return result


def spawn(
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: Path,
) -> subprocess.Popen[bytes]:
    """Start a long-lived child (a server) in its own process group, output to ``log``; stop it with :func:`stop`."""
    environment = dict(env) if env is not None else child_env()
    environment = {k: v for k, v in environment.items() if not is_secret(k)}
    argv = launch_command([str(a) for a in args], environment)
    log_fh = open(log, "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            start_new_session=(os.name == "posix"),
        )
    finally:
        log_fh.close()


def stop(proc: subprocess.Popen[bytes]) -> int:
    """Stop a child started by :func:`spawn` (and its children); its exit code."""
    if proc.poll() is None:
        _kill_tree(proc)
    return proc.returncode


def log_tail(path: Path, lines: int = 40) -> list[str]:
    """The last ``lines`` lines of a log file (for error messages)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return data.splitlines()[-lines:]


def first_line(args: list[str], env: Mapping[str, str]) -> str:
    """The first line a tool prints (``clang --version``); a BuildError when it cannot run."""
    try:
        result = run(args, env=env, timeout=60, log=None)
    except ProcessError as exc:
        raise BuildError(f"cannot run {args[0]} {' '.join(args[1:])}: {exc.message}") from None
    lines = [line for line in result.output.splitlines() if line.strip()]
    return lines[0].strip() if lines else ""
