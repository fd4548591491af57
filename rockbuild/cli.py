"""The command line's entry: the ``rockbuild`` group, the commands registered in pipeline order (each module of
:mod:`rockbuild.commands` lists its own in ``COMMANDS``), and the translation of errors into one line.
:func:`main` resolves the :class:`~rockbuild.settings.Settings` once; commands get them from
:func:`rockbuild.commands.common.settings`.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType


def _interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C before :func:`main`'s try block guards the command: while the imports below run (the first ~0.1 s of
    every command) and on the way from them into main(). It prints the line main() prints for an interrupt and exits
    130, never a traceback; nothing has been done yet, so nothing needs unwinding, and a library's bare ``except:``
    around an import cannot swallow the exit. Once this module is imported, only the program ``rockbuild`` (whose
    ``__main__``, the console script or ``python -m rockbuild``, holds this main) is starting: a process that
    imported rockbuild.cli as a library (a test) gets Python's own KeyboardInterrupt back."""
    if not _IMPORTING and getattr(sys.modules.get("__main__"), "main", None) is not globals().get("main"):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.default_int_handler(signum, frame)
    os.write(2, b"error: interrupted\n")
    os._exit(130)


# Only where Python's own handler is in place: a SIGINT that the parent ignores (nohup, a background job) stays
# ignored, and outside the main thread no handler can be set. main() hands SIGINT back to Python's handler inside
# its try block: restoring it any earlier would let a SIGINT that arrived before be raised after, outside the try.
_IMPORTING = True
if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    try:  # noqa: SIM105 - contextlib.suppress would be one more import before the handler
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    except ValueError:  # imported outside the main thread
        pass

# after the handler above: a Ctrl-C during these imports (most of a command's first 0.1 s) is one line too
import re  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import NoReturn  # noqa: E402

import click  # noqa: E402

from rockbuild import __version__, console  # noqa: E402
from rockbuild.commands import night, stages, users  # noqa: E402
from rockbuild.commands.common import CONTEXT, OrderedGroup, configure_network  # noqa: E402
from rockbuild.core.data import DataRoots, is_checkout, use_data_roots  # noqa: E402
from rockbuild.core.errors import BUG_EXIT_CODE, RockbuildError  # noqa: E402
from rockbuild.settings import Settings  # noqa: E402

_COMMIT_RE = re.compile(r"[0-9a-f]{40}")


def checkout_commit(top: Path) -> str | None:
    """The commit checked out in the git work tree ``top``, read from its ``.git`` files (no git process: --version
    stays as fast as the version alone); None when ``top`` is no git checkout or its HEAD cannot be read."""
    try:
        dot_git = top / ".git"
        git_dir = dot_git
        if dot_git.is_file():  # a worktree or a submodule: "gitdir: PATH"
            pointer = dot_git.read_text(encoding="utf-8").strip()
            if not pointer.startswith("gitdir:"):
                return None
            git_dir = top / pointer.removeprefix("gitdir:").strip()
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):  # a detached HEAD holds the commit itself
            return head if _COMMIT_RE.fullmatch(head) else None
        ref = head.removeprefix("ref:").strip()
        common = git_dir / "commondir"  # a worktree keeps its branches in the main repository's folder
        shared = git_dir / common.read_text(encoding="utf-8").strip() if common.is_file() else git_dir
        for base in dict.fromkeys((git_dir, shared)):
            if (base / ref).is_file():
                value = (base / ref).read_text(encoding="utf-8").strip()
                return value if _COMMIT_RE.fullmatch(value) else None
        for line in (shared / "packed-refs").read_text(encoding="utf-8").splitlines():
            value, _, name = line.partition(" ")
            if name == ref and _COMMIT_RE.fullmatch(value):
                return value
    except (OSError, UnicodeDecodeError):
        return None
    return None


def version_text() -> str:
    """What ``rockbuild --version`` prints: the version, and the commit when rockbuild runs from a git checkout (an
    editable install: the commit tells two checkouts of one version apart)."""
    top = Path(__file__).resolve().parent.parent
    commit = checkout_commit(top) if is_checkout(top) else None
    return f"rockbuild {__version__}" + (f" (commit {commit[:12]} of the checkout {top})" if commit else "")


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_text())
        ctx.exit()


@click.group(cls=OrderedGroup, context_settings=CONTEXT)
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help="Show the version (and the commit of a git checkout rockbuild runs from) and exit.",
)
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def cli(debug: bool) -> None:
    """rockbuild: nightly, self-contained llama.cpp builds for AMD GPUs on TheRock's ROCm.

    \b
    Pipeline: matrix -> fetch (ROCm) -> build -> bundle -> smoke -> publish.
    Maintainers:      rockbuild build --target gfx1151
    CI:               rockbuild nightly
    Users of builds:  rockbuild doctor, rockbuild install
    """


for _command in (*stages.COMMANDS, *night.COMMANDS, *users.COMMANDS):
    cli.add_command(_command)

_IMPORTING = False


# ---------------------------------------------------------------------------------------------------------------------
# The entry point


def _fail(message: str, code: int, hint: str | None = None) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:  # from here a KeyboardInterrupt is caught
            signal.signal(signal.SIGINT, signal.default_int_handler)
        resolved = Settings.from_environment(debug=debug or None)  # once, for the whole command
        debug = resolved.debug
        console.configure(github_actions=resolved.github.actions, ci=resolved.ci)
        # the data files: $ROCKBUILD_CONFIG's, then the checkout's the command runs in, then the installed ones
        use_data_roots(
            DataRoots(
                config_dir=resolved.config_dir,
                checkout=resolved.checkout,
                announce=(lambda line: console.info(f"debug: read {line}")) if debug else None,
            )
        )
        configure_network(resolved)  # the network's timeouts and retries, for every request the command makes
        # without standalone mode click *returns* the code of a ctx.exit(code) instead of exiting with it
        code = cli.main(args=argv, prog_name="rockbuild", standalone_mode=False, obj=resolved)
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort as exc:  # click turns a KeyboardInterrupt in a command into Abort
        _fail("interrupted" if isinstance(exc.__cause__, KeyboardInterrupt) else "aborted", 130)
    except click.exceptions.NoArgsIsHelpError as exc:  # `rockbuild` or a group alone: its help, as click would
        click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message(), err=True)
        sys.exit(exc.exit_code)
    except click.UsageError as exc:  # one line, like every other error, naming the help to read
        where = exc.ctx.command_path if exc.ctx else "rockbuild"
        _fail(f"{exc.format_message()} (see '{where} --help')", exc.exit_code)
    except click.ClickException as exc:  # a file click could not open, ...
        _fail(exc.format_message(), exc.exit_code)
    except RockbuildError as exc:
        if debug:
            traceback.print_exc()
        _fail(exc.message, exc.exit_code, exc.hint)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:
        sys.exit(0)
    except ModuleNotFoundError as exc:
        extra = EXTRA_MODULES.get((exc.name or "").split(".")[0])
        if extra is None:
            _bug(exc, debug)
        if debug:
            traceback.print_exc()
        _fail(
            f"this rockbuild was installed without {exc.name} (its '{extra}' extra), which the command needs",
            MISSING_EXTRA_EXIT_CODE,
            f"in a rockbuild checkout: pip install -e '.[{extra}]'; from a release's "
            f"wheel: pip install 'rockbuild-VERSION-py3-none-any.whl[{extra}]' (doctor and install need no extra)",
        )
    except Exception as exc:  # a bug: say so, keep it short unless asked
        _bug(exc, debug)
    sys.exit(0)


# What each extra of pyproject.toml brings, by the module a command imports: a command that needs one in an install
# without it says which extra to add (exit 3) instead of a traceback.
EXTRA_MODULES = {
    "jinja2": "build",
    "github": "build",
    "rich": "build",
    "cyclonedx": "build",
    "bracex": "build",
    "zstandard": "build",
    "numpy": "build",
    "gguf": "tiny",
    "playwright": "browser",
}
MISSING_EXTRA_EXIT_CODE = 3


def _bug(exc: BaseException, debug: bool) -> NoReturn:
    if _from_interrupt(exc):  # Python 3.11 wraps a KeyboardInterrupt raised in __set_name__ in a RuntimeError
        _fail("interrupted", 130)
    if debug:
        traceback.print_exc()
    _fail(
        f"internal error: {type(exc).__name__}: {exc}",
        BUG_EXIT_CODE,
        "this is a bug in rockbuild; rerun with --debug and report the traceback",
    )


def _from_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` was caused by a Ctrl-C: a KeyboardInterrupt that Python wrapped while a class was made (an
    import of a command's module, "Error calling __set_name__") and that is no bug."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False
