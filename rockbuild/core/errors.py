"""Every failure a user can hit, as one typed exception with its own exit code.

The CLI catches :class:`RockbuildError`, prints ``message`` on one line (plus ``hint`` when there is one) and exits
with ``exit_code``. A traceback is printed only with ``--debug``. Anything that is not a RockbuildError is a bug in
rockbuild and is reported as such (exit code 70).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


class RockbuildError(Exception):
    """Base class: a failure written for the user, never a bug."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ConfigError(RockbuildError):
    """A matrix/family/config file is unreadable, malformed or names something unknown."""

    exit_code = 2


class UsageError(RockbuildError):
    """The command line asks for something impossible or contradictory."""

    exit_code = 2


class FetchError(RockbuildError):
    """A download or index lookup failed after retries (network, HTTP status, short body, timeout)."""

    exit_code = 4


class UnreachableError(FetchError):
    """The host was never reached: its name did not resolve, it refused the connection, or connecting timed out."""

    exit_code = 4


class NotFoundError(FetchError):
    """The requested ROCm version/group/file does not exist where we looked."""

    exit_code = 4


class ChecksumError(FetchError):
    """Downloaded bytes do not match the expected size or sha256."""

    exit_code = 5


class UnsafeArchiveError(RockbuildError):
    """An archive member would escape the destination or create something we never extract."""

    exit_code = 6


class CorruptArchiveError(RockbuildError):
    """The compressed or tar stream is truncated or damaged (not an attack, but nothing usable was extracted)."""

    exit_code = 6


class ExtractionError(RockbuildError):
    """Extraction could not run or complete for a reason outside the archive: destination exists, disk full, ..."""

    exit_code = 1


class LayoutError(RockbuildError):
    """A ROCm root lacks what a build needs (compiler, headers, device libraries)."""

    exit_code = 7


class BuildError(RockbuildError):
    """Configure or compile failed; the message carries the log tail and the log's path."""

    exit_code = 1


class ProcessError(RockbuildError):
    """A child process failed or timed out. The message names the command; ``tail`` holds its last output lines."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        tail: Sequence[str] = (),
        log: Path | None = None,
        returncode: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.tail = list(tail)
        self.log = log
        self.returncode = returncode


class BuildFailed(BuildError):
    """Configure or compile failed: a one-line message naming the log; ``tail`` holds the log's last lines."""

    def __init__(self, message: str, *, step: str, log: Path, tail: list[str], hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.step = step
        self.log = log
        self.tail = tail


class BundleError(RockbuildError):
    """The bundle cannot be made: a library is missing, two files claim one name, patchelf failed..."""

    exit_code = 9


class AuditError(BundleError):
    """A bundle failed its audit; the report (bundle.json, --json) lists every failed check."""

    exit_code = 10


class SmokeError(RockbuildError):
    """A smoke test failed (the report, smoke.json, says which run and why) or cannot run at all."""

    exit_code = 11


class ModelError(SmokeError):
    """The smoke model cannot be provided (download refused, vocab missing, gguf not installed...)."""

    exit_code = 11


class PublishError(RockbuildError):
    """Publishing is refused or failed: gating, an oversized asset, a glibc floor, an immutable release, the API."""

    exit_code = 12


class ImageError(PublishError):
    """A release's container image cannot be made, fails its podman test, or its push to the registry failed: a failed
    publish (exit 12), the release stays a draft."""

    exit_code = 12


class StaleInputError(RockbuildError):
    """The newest input (e.g. a ROCm nightly) is older than allowed."""

    exit_code = 8


class RecordError(RockbuildError):
    """A file rockbuild wrote (build.json, bundle.json, smoke.json, stages.json, manifest.json...) is malformed: not
    JSON, not an object, a required key missing or a value of the wrong type. The message names the file and the key."""

    exit_code = 13


BUG_EXIT_CODE = 70
"""Exit code for an unexpected exception (a bug in rockbuild), after EX_SOFTWARE in sysexits.h."""
