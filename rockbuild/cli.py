"""The command line: parses arguments and calls the stage modules; nothing else lives here.

Stage modules are imported inside each command so that ``rockbuild --help`` stays fast and never imports requests,
PyGithub, jinja2 or elftools.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

import click

from . import __version__
from .errors import BUG_EXIT_CODE, NotImplementedYet, RockbuildError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


class _OrderedGroup(click.Group):
    """Lists commands in pipeline order, not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


def _debug_requested(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get("ROCKBUILD_DEBUG", "") not in ("", "0")


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


@click.group(cls=_OrderedGroup, context_settings=CONTEXT)
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


# ---------------------------------------------------------------------------------------------------------------------
# Stage 1: matrix

MATRIX_FILE = click.option(
    "-c", "--config", "config", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Matrix YAML (default: the shipped matrices/nightly.yaml).",
)


@cli.command(context_settings=CONTEXT)
@MATRIX_FILE
@click.option(
    "--only", multiple=True, metavar="GLOB", help="Keep jobs whose id matches (fnmatch, {a,b} braces). Repeatable."
)
@click.option(
    "--os", "oses", multiple=True, metavar="OS[,OS]",
    help="Build only for these OSes (linux, windows; 'ubuntu' means linux). Replaces the matrix's os axis.",
)
@click.option(
    "--target", "targets", multiple=True, metavar="NAME[,NAME]",
    help="Build only these families/targets (gfx110X, gfx1151, ...). Replaces the matrix's target axis.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json", "github"]), default="table", show_default=True,
    help="table: for people; json: a list of jobs; github: {\"include\": [...]} for fromJson (also written to "
    "$GITHUB_OUTPUT as matrix=... when that variable is set).",
)
def matrix(
    config: Path | None, only: tuple[str, ...], oses: tuple[str, ...], targets: tuple[str, ...], fmt: str
) -> None:
    """Expand the OS x GPU-family matrix into build jobs."""
    from . import matrix as matrix_mod

    jobs = matrix_mod.expand_matrix(
        config, os_override=matrix_mod.split_list(oses, aliases={"ubuntu": "linux"}),
        target_override=matrix_mod.split_list(targets),
    )
    jobs = matrix_mod.select_jobs(jobs, only)
    if fmt == "json":
        emit_json([job.to_dict() for job in jobs])
    elif fmt == "github":
        click.echo(json.dumps(matrix_mod.github_matrix(jobs), separators=(",", ":")))
        output = os.environ.get("GITHUB_OUTPUT")
        if output:
            matrix_mod.write_github_output(jobs, output)
    else:
        from rich.console import Console

        # a pipe gets the whole table rather than one squeezed to 80 columns
        width = None if sys.stdout.isatty() else 200
        Console(width=width).print(matrix_mod.render_table(jobs))


# ---------------------------------------------------------------------------------------------------------------------
# Stages not built yet: they exist so --help shows the whole pipeline, and they say so instead of pretending.


def _stub(name: str, summary: str, issue: str) -> None:
    @cli.command(
        name=name,
        help=f"{summary} (not implemented yet: {issue}).",
        short_help=f"[not implemented yet] {summary}.",
        context_settings={**CONTEXT, "ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=True,
    )
    @click.pass_context
    def _command(ctx: click.Context) -> None:
        raise NotImplementedYet(f"rockbuild {name} is not implemented yet ({issue})")


_stub("fetch", "Find, download and safely extract a TheRock ROCm tarball", "ROCm provider issue")
_stub("rocm", "List TheRock ROCm versions or describe a ROCm root", "ROCm provider issue")
_stub("build", "Compile llama.cpp with GGML_HIP for a job's gfx targets", "Build driver issue")
_stub("bundle", "Make a self-contained bundle from a build", "Lib-gatherer issue")
_stub("audit", "Check that a bundle is self-contained", "Lib-gatherer issue")
_stub("smoke", "Run llama-cli, llama-server and llama-bench from a bundle", "Smoke and publisher issue")
_stub("publish", "Archives, SHA256SUMS, manifest.json, notes and the GitHub release", "Smoke and publisher issue")
_stub("alert", "Report a failed nightly on the issue tracker", "Smoke and publisher issue")
_stub("resolve", "Pin the night's inputs (llama.cpp commit, ROCm tarballs) into inputs.json", "nightly issue")
_stub("nightly", "The whole night: resolve, build every job, publish, alert", "nightly issue")
_stub("doctor", "Check this machine's AMD GPUs and a bundle for problems", "doctor/install issue")
_stub("install", "Download the release asset that fits this machine's GPU", "doctor/install issue")


# ---------------------------------------------------------------------------------------------------------------------


def _fail(message: str, code: int, hint: str | None = None) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = _debug_requested(argv)
    try:
        cli.main(args=argv, prog_name="rockbuild", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        _fail("aborted", 130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
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


if __name__ == "__main__":
    main()
