"""A maintainer's edits to the data files take effect (issue 57, item 2): run in a rockbuild checkout, its config/
wins over the installed copy; ``$ROCKBUILD_CONFIG`` points at another folder for any data file (families.yaml has
no flag of its own); ``--debug`` says which file each read came from. The installed ``rockbuild``, run as a user
runs it, from the folder it is run in."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.files import write
from support.paths import REPO

ONE_JOB = "matrix:\n  os: [linux]\n  target: [gfx1151]\noptions:\n  common_part: false\n"


def checkout(tmp_path: Path, matrix: str = ONE_JOB) -> Path:
    """A rockbuild checkout: pyproject.toml naming rockbuild, and config/ with the shipped files but nightly.yaml."""
    root = tmp_path / "clone"
    shutil.copytree(REPO / "config", root / "config")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    write(root / "config" / "nightly.yaml", matrix)
    return root


def job_ids(result) -> list[str]:
    assert result.returncode == 0, result.stderr
    return [j["id"] for j in json.loads(result.stdout)]


def test_the_checkout_the_command_runs_in_is_the_one_read(tmp_path, run_rockbuild):
    root = checkout(tmp_path)
    assert job_ids(run_rockbuild("matrix", "--json", cwd=root)) == ["linux-gfx1151"]
    # anywhere else: the installed matrix (every family, both OSes)
    elsewhere = job_ids(run_rockbuild("matrix", "--json", cwd=tmp_path))
    assert len(elsewhere) > 10 and "windows-gfx1151" in elsewhere
    # a folder with a config/ that is not rockbuild's is not taken for a checkout
    stranger = tmp_path / "other"
    shutil.copytree(root / "config", stranger / "config")
    write(stranger / "pyproject.toml", '[project]\nname = "something-else"\n')
    assert job_ids(run_rockbuild("matrix", "--json", cwd=stranger)) == elsewhere
    # -c still names the file to read
    given = write(tmp_path / "given.yaml", ONE_JOB.replace("gfx1151", "gfx1150"))
    assert job_ids(run_rockbuild("matrix", "--json", "-c", str(given), cwd=root)) == ["linux-gfx1150"]


def test_rockbuild_config_replaces_any_data_file_and_debug_names_each_file_read(tmp_path, run_rockbuild):
    folder = tmp_path / "mine"
    families = (REPO / "config" / "families.yaml").read_text()
    assert "gfx1151:" in families
    # families.yaml has no flag: the folder's copy, with one family renamed, is the one read
    write(folder / "families.yaml", families.replace("gfx1151:", "gfx1151x:", 1))
    write(folder / "nightly.yaml", ONE_JOB.replace("gfx1151", "gfx1151x"))
    env = {"ROCKBUILD_CONFIG": str(folder)}
    result = run_rockbuild("--debug", "matrix", "--json", env=env)
    assert job_ids(result) == ["linux-gfx1151x"]
    assert f"debug: read config/families.yaml: {folder / 'families.yaml'} ($ROCKBUILD_CONFIG)" in result.stderr
    # a file the folder lacks is the installed one, and --debug says so
    assert "debug: read config/programs.yaml" not in result.stderr or "installed" in result.stderr
    # $ROCKBUILD_CONFIG wins over the checkout the command runs in
    root = checkout(tmp_path)
    assert job_ids(run_rockbuild("matrix", "--json", env=env, cwd=root)) == ["linux-gfx1151x"]
    plain = run_rockbuild("--debug", "matrix", "--json", cwd=root)
    assert (
        f"debug: read config/nightly.yaml: {root / 'config' / 'nightly.yaml'} (the checkout in the current "
        "directory)" in plain.stderr
    )
    # not a folder: one line, exit 2
    missing = run_rockbuild("matrix", env={"ROCKBUILD_CONFIG": str(tmp_path / "nowhere")})
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.splitlines()[0] == f"error: ROCKBUILD_CONFIG={tmp_path / 'nowhere'}: no such folder"


def test_a_yaml_value_that_looks_octal_stays_what_was_written(tmp_path, run_rockbuild):
    """``llama_ref: 0123456`` (a commit abbreviation) was read as the octal number 42798; a mapping where a list
    belongs is named in words, not as rockbuild's YList."""
    matrix = write(tmp_path / "m.yaml", ONE_JOB + "  llama_ref: 0123456\n")
    (job,) = json.loads(run_rockbuild("matrix", "--json", "-c", str(matrix)).stdout)
    assert job["llama_ref"] == "0123456"
    bad = write(tmp_path / "bad.yaml", "matrix:\n  os: [linux]\n  target:\n    - [gfx1151, {a: 1}]\n")
    result = run_rockbuild("matrix", "-c", str(bad))
    assert result.returncode == 2 and "YList" not in result.stderr and "YDict" not in result.stderr
    assert "not a mapping" in result.stderr, result.stderr
