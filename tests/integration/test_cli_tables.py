"""Tables that fit (issue 57, finding 4): ``rockbuild matrix`` and ``--families`` as users run them, piped with
$COLUMNS at 80 and wider. Every job id (what ``--job`` takes) and family name is whole, no column is narrower than 3
characters, a column left out is named under the table, a column with one value is said on the title line, and
``--wide`` (or a pipe without $COLUMNS) shows every column."""

from __future__ import annotations

import json

import pytest

JOB_HEADERS = ["id", "family", "tarball group", "gfx targets", "required", "llama.cpp", "ROCm", "built on", "runner"]
FAMILY_HEADERS = ["family", "short", "gfx targets", "linux", "windows", "source"]


def parse(stdout: str) -> tuple[str, list[str], list[int], list[str], str]:
    """(title, headers, their widths, the first cell of each row, the lines under the table as one)."""
    lines = stdout.splitlines()
    header = next(line for line in lines if line.startswith("┃"))
    cells = header.strip("┃").split("┃")
    first = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    under = stdout.split("┘\n", 1)[1] if "┘\n" in stdout else ""
    return (
        lines[0],
        [c.strip() for c in cells],
        [len(c) - 2 for c in cells],
        [c for c in first if c],
        " ".join(under.split()),
    )


def check(result, width: int | None, every: list[str], names: list[str]) -> list[str]:
    """The table's promises at ``width`` (None: no limit); the headers shown."""
    assert result.returncode == 0, result.stderr
    title, headers, widths, first, note = parse(result.stdout)
    if width is not None:  # the title aside: it may name a file whose path is longer than any screen
        assert max(len(line) for line in result.stdout.splitlines()[1:]) <= width, result.stdout
    assert first == names, result.stdout  # every id or family whole, in order, none cut or wrapped
    assert min(widths) >= 3, result.stdout
    missing = [h for h in every if h not in headers]
    said = [h for h in missing if f"; {h}: " in title]  # one value for every row: on the title line
    dropped = [h for h in missing if h not in said]
    if dropped:
        assert note == f"not shown at {width} columns: {', '.join(dropped)} (--wide shows every column)", note
    else:
        assert note == ""
    return headers


@pytest.fixture
def job_ids(run_rockbuild):
    return [job["id"] for job in json.loads(run_rockbuild("matrix", "--json").stdout)]


@pytest.mark.parametrize("width", [80, 100, 120, 200])
def test_the_matrix_fits_columns_and_keeps_every_id_whole(run_rockbuild, job_ids, width):
    result = run_rockbuild("matrix", env={"COLUMNS": str(width)})
    headers = check(result, width, JOB_HEADERS, job_ids)
    assert headers[0] == "id" and "gfx targets" in headers and "required" in headers
    if width == 80:  # what the issue saw: 9 columns, 4 of them 0-2 characters wide, ids cut to "linux-gfx…"
        assert "…" not in result.stdout
        assert result.stdout.splitlines()[0] == "28 jobs; llama.cpp: master; ROCm: nightly/latest"


def test_the_family_table_fits_80_columns(run_rockbuild):
    from rockbuild.core.jobs import load_families

    names = [f.name for f in load_families(None).families]
    headers = check(run_rockbuild("matrix", "--families", env={"COLUMNS": "80"}), 80, FAMILY_HEADERS, names)
    assert headers[:3] == ["family", "short", "gfx targets"]  # `gf` was the short name's column in the issue


@pytest.mark.parametrize(
    "args, env", [(("--wide",), {"COLUMNS": "80"}), ((), {"COLUMNS": ""})], ids=["wide", "piped-without-COLUMNS"]
)
def test_wide_and_a_pipe_without_columns_show_every_column(run_rockbuild, job_ids, args, env):
    result = run_rockbuild("matrix", *args, env=env)
    assert check(result, None, JOB_HEADERS, job_ids) == JOB_HEADERS
    assert "gfx1030,gfx1031,gfx1032,gfx1033,gfx1034,gfx1035,gfx1036" in result.stdout  # on one line, as written
    families = run_rockbuild("matrix", "--families", *args, env=env)
    assert parse(families.stdout)[1] == FAMILY_HEADERS
