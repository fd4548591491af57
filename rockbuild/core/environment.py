"""The one reader of this process's environment and platform: everything rockbuild takes from outside its command
line that is not a data file (the cache folder, the GitHub Actions context and token, ``HF_*``, ``SOURCE_DATE_EPOCH``,
``CI``, ``ROCKBUILD_PATCHES``, the network's timeouts). :class:`rockbuild.settings.Settings` is made from it once at
the CLI's entry; nothing else reads ``os.environ``.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rockbuild.core.data import is_checkout
from rockbuild.core.errors import ConfigError
from rockbuild.core.record import Record

DEFAULT_SYSTEM_ROOT = "C:\\Windows"

# ---------------------------------------------------------------------------------------------------------------------
# The process's environment and platform


def environment() -> dict[str, str]:
    """A copy of this process's environment: what :class:`Settings` and the children's allowlist start from."""
    return dict(os.environ)


def host_os() -> str:
    """``linux`` or ``windows``: the OS whose jobs this machine builds and whose bundles it runs."""
    return "windows" if sys.platform.startswith("win") else "linux"


def default_cache(env: Mapping[str, str]) -> Path:
    """Where tarballs, ROCm roots, clones and models are kept: $ROCKBUILD_CACHE, else $XDG_CACHE_HOME/rockbuild."""
    explicit = env.get("ROCKBUILD_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "rockbuild"


def config_dir(env: Mapping[str, str]) -> Path | None:
    """``$ROCKBUILD_CONFIG``: a folder of data files (nightly.yaml, families.yaml, ...) read instead of the shipped
    ones, file by file; a value that is not a folder is a ConfigError."""
    value = env.get("ROCKBUILD_CONFIG", "").strip()
    if not value:
        return None
    folder = Path(value).expanduser()
    if not folder.is_dir():
        raise ConfigError(
            f"ROCKBUILD_CONFIG={value}: no such folder",
            hint="point it at a folder of data files such as a checkout's config/",
        )
    return folder.absolute()


def _checkout() -> Path | None:
    try:
        here = Path.cwd()
    except OSError:  # the current directory was removed
        return None
    return here if is_checkout(here) else None


def flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() not in ("", "0", "false", "no")


@dataclass(frozen=True)
class GitHubContext:
    """What GitHub Actions tells a step through its environment (all None/False elsewhere)."""

    actions: bool = False  # GITHUB_ACTIONS=true: log folds, annotations
    repository: str | None = None  # GITHUB_REPOSITORY, the default --repo
    token: str | None = field(default=None, repr=False)  # GITHUB_TOKEN, else GH_TOKEN
    step_summary: Path | None = None  # GITHUB_STEP_SUMMARY
    output: Path | None = None  # GITHUB_OUTPUT
    run_url: str | None = None  # this run's page, from GITHUB_SERVER_URL/GITHUB_REPOSITORY/GITHUB_RUN_ID

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> GitHubContext:
        def path(name: str) -> Path | None:
            value = env.get(name, "").strip()
            return Path(value) if value else None

        repository = env.get("GITHUB_REPOSITORY", "").strip() or None
        server, run_id = env.get("GITHUB_SERVER_URL", "").strip(), env.get("GITHUB_RUN_ID", "").strip()
        token = next((env[n].strip() for n in ("GITHUB_TOKEN", "GH_TOKEN") if env.get(n, "").strip()), None)
        return cls(
            actions=env.get("GITHUB_ACTIONS") == "true",
            repository=repository,
            token=token,
            step_summary=path("GITHUB_STEP_SUMMARY"),
            output=path("GITHUB_OUTPUT"),
            run_url=f"{server}/{repository}/actions/runs/{run_id}" if server and repository and run_id else None,
        )


CONNECT_TIMEOUT = 5.0  # seconds to open a connection (TCP and TLS): a reachable host answers in well under one


@dataclass(frozen=True)
class HttpTimeouts:
    """How long rockbuild waits on the network, each try, and how often it tries a small request again
    (``$ROCKBUILD_HTTP_TIMEOUT``, ``$ROCKBUILD_HTTP_RETRIES``, ``$ROCKBUILD_DOWNLOAD_TIMEOUT``; docs/errors.md).

    A small request (an API call, an index page, a checksum list) waits ``request`` seconds for its answer and is tried
    ``retries`` more times; a download (a tarball, a model, a release asset) waits ``download`` seconds for each
    piece of its body and keeps its own retries, each resumed where the last one stopped. Opening a connection waits
    :data:`CONNECT_TIMEOUT` seconds, or the read timeout when that is shorter."""

    request: float = 15.0
    retries: int = 2
    download: float = 60.0

    @property
    def small(self) -> tuple[float, float]:
        """(connect, read) timeouts of a small request."""
        return min(CONNECT_TIMEOUT, self.request), self.request

    @property
    def large(self) -> tuple[float, float]:
        """(connect, read) timeouts of a download."""
        return min(CONNECT_TIMEOUT, self.download), self.download

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> HttpTimeouts:
        return cls(
            request=_seconds(env, "ROCKBUILD_HTTP_TIMEOUT", cls.request),
            retries=_count(env, "ROCKBUILD_HTTP_RETRIES", cls.retries),
            download=_seconds(env, "ROCKBUILD_DOWNLOAD_TIMEOUT", cls.download),
        )


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"{name}={value!r} is not a number of seconds above 0")
    return seconds


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit():
        raise ConfigError(f"{name}={value!r} is not a count (0, 1, 2, ...)")
    return int(value)


@dataclass(frozen=True)
class WindowsHost(Record):
    """What the loader's search takes from the machine: the Windows folder (``%SystemRoot%``) and ``PATH``."""

    system_root: Path
    path: tuple[Path, ...] = ()

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> WindowsHost:
        """From a Windows environment (names in any case, as Windows treats them): ``SystemRoot`` (else
        ``WINDIR``, else ``C:\\Windows``) and ``PATH`` split at ``;``."""
        upper = {k.upper(): v for k, v in env.items()}
        root = upper.get("SYSTEMROOT", "").strip() or upper.get("WINDIR", "").strip() or DEFAULT_SYSTEM_ROOT
        entries = (p.strip().strip('"') for p in upper.get("PATH", "").split(";"))
        return cls(Path(root), tuple(Path(p) for p in entries if p))


@dataclass(frozen=True)
class Context:
    """What one run of rockbuild takes from its environment, resolved once at the CLI's entry and passed down to every
    stage that needs a part of it. :class:`rockbuild.settings.Settings` adds the data files on top."""

    env: Mapping[str, str] = field(repr=False)  # what children's environments are picked from (never whole)
    cache: Path
    host_os: str
    debug: bool = False
    ci: bool = False  # $CI: no progress bars, no prompts
    github: GitHubContext = field(default_factory=GitHubContext)
    hf_endpoint: str = "https://huggingface.co"
    hf_token: str | None = field(default=None, repr=False)
    source_date_epoch: int | None = None  # SOURCE_DATE_EPOCH: archive timestamps
    windows: WindowsHost | None = None  # on Windows: SystemRoot and PATH, where the DLL loader looks (doctor, install)
    patches_file: Path | None = None  # $ROCKBUILD_PATCHES or --patches FILE: another carried patch series
    http: HttpTimeouts = field(default_factory=HttpTimeouts)  # $ROCKBUILD_HTTP_TIMEOUT and the like (docs/errors.md)
    columns: int | None = None  # $COLUMNS: how wide a table on stdout may be (a pipe's too); None: the terminal's
    config_dir: Path | None = None  # $ROCKBUILD_CONFIG: a folder whose data files replace config/'s, one by one
    checkout: Path | None = None  # the current directory when it is a rockbuild checkout: its data files win

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None, **flags: Any) -> Any:
        """From ``env`` (default: this process's environment); ``flags`` (cache=..., debug=..., and a subclass's own
        fields) replace what the environment would give, as command-line flags do; None values are ignored."""
        env = environment() if env is None else dict(env)
        epoch = env.get("SOURCE_DATE_EPOCH", "").strip()
        if epoch and not epoch.isdigit():
            raise ConfigError(f"SOURCE_DATE_EPOCH={epoch!r} is not a number of seconds since 1970")
        values: dict[str, Any] = dict(
            env=env,
            cache=default_cache(env),
            host_os=host_os(),
            debug=flag(env, "ROCKBUILD_DEBUG"),
            ci=flag(env, "CI"),
            github=GitHubContext.from_environment(env),
            hf_endpoint=(env.get("HF_ENDPOINT", "").strip() or "https://huggingface.co").rstrip("/"),
            hf_token=env.get("HF_TOKEN", "").strip() or None,
            source_date_epoch=int(epoch) if epoch else None,
            patches_file=Path(env["ROCKBUILD_PATCHES"]).expanduser()
            if env.get("ROCKBUILD_PATCHES", "").strip()
            else None,
            http=HttpTimeouts.from_environment(env),
            columns=int(env["COLUMNS"]) if env.get("COLUMNS", "").strip().isdigit() and int(env["COLUMNS"]) else None,
        )
        values.update(config_dir=config_dir(env), checkout=_checkout())
        values.update({k: v for k, v in flags.items() if v is not None})
        if values["host_os"] == "windows" and values.get("windows") is None:
            values["windows"] = WindowsHost.from_environment(env)
        return cls(**values)

    def but(self, **changes: Any) -> Any:
        """A copy with ``changes`` (None values are ignored, as for an absent flag)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})
