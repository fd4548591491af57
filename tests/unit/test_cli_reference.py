"""docs/cli.md is the command line's reference, written from the CLI itself (issue 40, item 6): every command, its
usage, its help and every option with its help and default. The test fails when the CLI and the page differ (an
option added, renamed or reworded without the page); `python tests/unit/test_cli_reference.py` rewrites the page.

Also: every option of every command appears in the hand-written guides (README.md, docs/*.md besides cli.md) at
least once, so no option is known only from --help."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "cli.md"

HEAD = """# Command-line reference

Written from the CLI itself (`python tests/unit/test_cli_reference.py`; `tests/unit/test_cli_reference.py` fails when
this page and the CLI differ). What the commands are for, and how they fit together: [commands.md](commands.md).
Exit codes: [errors.md](errors.md).
"""


def _commands(group: click.Group, path: list[str]) -> list[tuple[list[str], click.Command, click.Context]]:
    """Every command below ``group``, depth first in the group's order, with a context naming its path."""
    out = []
    parent = click.Context(group, info_name=path[0])
    for part in path[1:]:
        parent = click.Context(group, info_name=part, parent=parent)
    for name in group.list_commands(parent):
        command = group.get_command(parent, name)
        if command is None or command.hidden:
            continue
        ctx = click.Context(command, info_name=name, parent=parent)
        out.append(([*path, name], command, ctx))
        if isinstance(command, click.Group):
            out.extend(_commands(command, [*path, name]))
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def reference() -> str:
    from rockbuild.cli import cli

    lines = [HEAD]
    for path, command, ctx in _commands(cli, ["rockbuild"]):
        lines += [f"## {' '.join(path)}", "", "```", command.get_usage(ctx).removeprefix("Usage: "), "```", ""]
        help_text = (command.help or "").split("\f")[0].strip()
        for para in help_text.split("\n\n") if help_text else ():
            if para.lstrip().startswith("\b"):  # click's "keep these lines as they are"
                lines += ["```", textwrap.dedent(para.lstrip().removeprefix("\b").strip("\n")), "```", ""]
            else:
                lines += [" ".join(para.split()), ""]
        rows = []
        for param in command.get_params(ctx):
            if not isinstance(param, click.Option) or param.hidden or param.name == "help":
                continue
            record = param.get_help_record(ctx)
            if record is None:
                continue
            name, text = record
            rows.append(f"| `{_cell(name)}` | {_cell(text)} |")
        if rows:
            lines += ["| option | meaning |", "|---|---|", *rows, ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def options() -> dict[tuple[str, ...], list[str]]:
    """Every option by its long names (a flag pair ``--smoke/--no-smoke`` is one) -> the commands that take it."""
    from rockbuild.cli import cli

    found: dict[tuple[str, ...], list[str]] = {}
    for path, command, _ in _commands(cli, ["rockbuild"]):
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden and param.name != "help":
                names = tuple(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
                if names:
                    found.setdefault(names, []).append(" ".join(path))
    return found


def test_the_cli_reference_is_the_cli():
    assert PAGE.exists(), "docs/cli.md is missing: python tests/unit/test_cli_reference.py writes it"
    assert PAGE.read_text(encoding="utf-8") == reference(), (
        "docs/cli.md differs from the CLI: python tests/unit/test_cli_reference.py rewrites it"
    )


def test_every_option_says_what_it_does():
    from rockbuild.cli import cli

    silent = [
        f"{' '.join(path)} {param.opts[0]}"
        for path, command, _ in _commands(cli, ["rockbuild"])
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()
    ]
    assert not silent, f"options without help: {silent}"


def test_every_option_is_in_a_guide_too():
    guides = "\n".join(
        p.read_text(encoding="utf-8")
        for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        if p.name != "cli.md"
    )
    missing = {
        "/".join(names): cmds
        for names, cmds in options().items()
        if not any(re.search(re.escape(name) + r"(?![\w-])", guides) for name in names)
    }
    assert not missing, f"options no guide mentions (say what they are for in docs/commands.md): {missing}"


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    PAGE.write_text(reference(), encoding="utf-8")
    print(f"wrote {PAGE}")
