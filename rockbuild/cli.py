"""The command line's entry: the ``rockbuild`` group, the commands registered in pipeline order (each module of
:mod:`rockbuild.commands` lists its own in ``COMMANDS``), and the translation of errors into one line.
:func:`main` resolves the :class:`~rockbuild.settings.Settings` once; commands get them from
:func:`rockbuild.commands.common.settings`.
"""

from __future__ import annotations

import sys
import traceback
from typing import NoReturn

import click

from rockbuild import __version__, console
from rockbuild.commands import night, stages, users
from rockbuild.commands.common import CONTEXT, OrderedGroup
from rockbuild.core.data import DataRoots, use_data_roots
from rockbuild.core.errors import BUG_EXIT_CODE, RockbuildError
from rockbuild.settings import Settings


@click.group(cls=OrderedGroup, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="rockbuild")
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
        resolved = Settings.from_environment(debug=debug or None)  # once, for the whole command
        debug = resolved.debug
        console.configure(github_actions=resolved.github.actions, ci=resolved.ci)
        # the data files: $ROCKBUILD_CONFIG's, then the checkout's the command runs in, then the installed ones
        use_data_roots(DataRoots(config_dir=resolved.config_dir, checkout=resolved.checkout,
                                 announce=(lambda line: console.info(f"debug: read {line}")) if debug else None))
        # without standalone mode click *returns* the code of a ctx.exit(code) instead of exiting with it
        code = cli.main(args=argv, prog_name="rockbuild", standalone_mode=False, obj=resolved)
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        _fail("aborted", 130)
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
    except Exception as exc:  # a bug: say so, keep it short unless asked
        if debug:
            traceback.print_exc()
        _fail(
            f"internal error: {type(exc).__name__}: {exc}", BUG_EXIT_CODE,
            "this is a bug in rockbuild; rerun with --debug and report the traceback",
        )
    sys.exit(0)

