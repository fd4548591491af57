"""The CI guide counts the jobs `rockbuild matrix` expands (issue 57: it said 26 when the matrix had 28): the whole
matrix a scheduled night builds, and what a dispatched night builds with the workflow's default inputs."""

from __future__ import annotations

import re

import yaml
from support.paths import REPO

from rockbuild.matrix import split_list
from rockbuild.settings import Settings


def test_the_ci_guide_says_how_many_jobs_a_night_builds():
    guide = " ".join((REPO / "docs" / "guides" / "ci.md").read_text(encoding="utf-8").split())
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text(encoding="utf-8"))
    inputs = workflow[True]["workflow_dispatch"]["inputs"]  # YAML 1.1 reads the key `on` as true
    settings = Settings.from_environment({})
    whole = settings.jobs()
    dispatched = settings.jobs(
        os_override=split_list([inputs["operating_systems"]["default"]], aliases={"ubuntu": "linux"}),
        target_override=split_list([inputs["gfx_target"]["default"]]),
    )
    said_whole = re.search(r"builds the whole of \[`config/nightly\.yaml`\]\([^)]*\) \((\d+) jobs today", guide)
    said_dispatched = re.search(r"with the defaults it builds (\d+) jobs", guide)
    assert said_whole and said_dispatched, "docs/guides/ci.md no longer says how many jobs a night builds"
    assert (int(said_whole[1]), int(said_dispatched[1])) == (len(whole), len(dispatched))
