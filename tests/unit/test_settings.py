"""Settings: everything from outside the command line, read in one module and resolved once."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import REPO

from rockbuild.core.environment import GitHubContext, default_cache
from rockbuild.core.errors import ConfigError
from rockbuild.settings import Settings

PACKAGE = REPO / "rockbuild"


def test_from_environment_reads_cache_github_and_flags(tmp_path):
    env = {
        "ROCKBUILD_CACHE": str(tmp_path / "c"),
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_TOKEN": "ghp_secret",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "s.md"),
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_RUN_ID": "42",
        "CI": "true",
        "ROCKBUILD_DEBUG": "1",
        "SOURCE_DATE_EPOCH": "1700000000",
        "HF_TOKEN": "hf_secret",
    }
    s = Settings.from_environment(env)
    assert s.cache == tmp_path / "c" and s.ci and s.debug and s.source_date_epoch == 1700000000
    assert s.github == GitHubContext(
        actions=True,
        repository="o/r",
        token="ghp_secret",
        step_summary=tmp_path / "s.md",
        output=None,
        run_url="https://github.com/o/r/actions/runs/42",
    )
    assert "ghp_secret" not in repr(s) and "hf_secret" not in repr(s)  # tokens never reach a log by repr
    assert Settings.from_environment({"GH_TOKEN": "gho_x"}).github.token == "gho_x"
    quiet = Settings.from_environment({"ROCKBUILD_DEBUG": "0", "CI": ""})
    assert not quiet.debug and not quiet.ci and not quiet.github.actions and quiet.github.run_url is None


def test_flags_replace_the_environment_and_none_means_absent(tmp_path):
    s = Settings.from_environment({"ROCKBUILD_CACHE": str(tmp_path / "env")}, cache=tmp_path / "flag", debug=None)
    assert s.cache == tmp_path / "flag" and s.debug is False
    assert s.but(matrix_file=None) == s and s.but(matrix_file=tmp_path / "m.yaml").matrix_file == tmp_path / "m.yaml"


def test_default_cache_follows_xdg(tmp_path):
    assert default_cache({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "rockbuild"
    assert default_cache({}) == Path.home() / ".cache" / "rockbuild"


def test_a_bad_source_date_epoch_is_a_configuration_error(run_rockbuild):
    with pytest.raises(ConfigError, match="SOURCE_DATE_EPOCH='yesterday'"):
        Settings.from_environment({"SOURCE_DATE_EPOCH": "yesterday"})
    result = run_rockbuild("matrix", env={"SOURCE_DATE_EPOCH": "yesterday"})
    assert result.returncode == 2 and result.stderr.startswith("error: SOURCE_DATE_EPOCH=")


def test_data_files_load_once_on_first_use(tmp_path, write):
    s = Settings.from_environment({})
    assert "families" not in vars(s)  # nothing read before a stage asks
    assert s.families is s.families and s.policy is s.policy and s.smoke is s.smoke
    broken = write("families.yaml", "families: [\n")
    with pytest.raises(ConfigError, match=r"families\.yaml:\d+: invalid YAML"):
        _ = s.but(families_file=broken).families


def test_jobs_come_from_the_settings_matrix_file(write):
    matrix = write("m.yaml", "matrix:\n  os: [linux]\n  target: [gfx1151, gfx110X]\n")
    jobs = Settings.from_environment({}, matrix_file=matrix).jobs()
    assert [j.id for j in jobs] == ["linux-gfx1151", "linux-gfx110X"]
    assert [j.id for j in Settings.from_environment({}, matrix_file=matrix).jobs(target_override=["gfx1151"])] == [
        "linux-gfx1151"
    ]


def test_the_network_timeouts_and_the_table_width_come_from_the_environment():
    from rockbuild.core.environment import HttpTimeouts

    default = Settings.from_environment({})
    assert default.http == HttpTimeouts(request=15.0, retries=2, download=60.0) and default.columns is None
    assert default.http.small == (5.0, 15.0) and default.http.large == (5.0, 60.0)  # a short connect timeout
    s = Settings.from_environment(
        {
            "ROCKBUILD_HTTP_TIMEOUT": "0.5",
            "ROCKBUILD_HTTP_RETRIES": "0",
            "ROCKBUILD_DOWNLOAD_TIMEOUT": "120",
            "COLUMNS": "80",
        }
    )
    assert s.http == HttpTimeouts(request=0.5, retries=0, download=120.0) and s.columns == 80
    assert s.http.small == (0.5, 0.5)  # the connection waits no longer than the answer
    assert Settings.from_environment({"COLUMNS": "wide"}).columns is None  # a shell's odd value is no error
    for name, value in (
        ("ROCKBUILD_HTTP_TIMEOUT", "0"),
        ("ROCKBUILD_DOWNLOAD_TIMEOUT", "inf"),
        ("ROCKBUILD_HTTP_RETRIES", "-1"),
        ("ROCKBUILD_HTTP_RETRIES", "two"),
    ):
        with pytest.raises(ConfigError, match=f"^{name}='{value}' is not a "):
            Settings.from_environment({name: value})
