"""The plan of a night with a common part (issue 41): the rehearsal's night 2 (tests/e2e/night.sh, 2026-12-06) said
"changed: linux-common is new" against release b1291, which it had made from the same inputs, because the common
part is no asset and so never in a manifest. The fixtures are that night's inputs.json and b1291's manifest.json."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from rockbuild.pipeline.inputs import load_inputs, manifest_differences

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "night-rehearsal"


def test_the_same_inputs_on_a_common_part_are_unchanged():
    inputs = load_inputs(HERE / "inputs-night2.json")
    manifest = json.loads((HERE / "manifest-b1291.json").read_text())
    ids = [j.id for j in inputs.jobs]
    assert "linux-common" in ids and "linux-common" not in [j["id"] for j in manifest["jobs"]]
    assert manifest_differences(inputs, manifest, ids) == []
    moved = replace(inputs, llama_cpp=replace(inputs.llama_cpp, commit="f" * 40))
    assert manifest_differences(moved, manifest, ids) == [
        f"llama.cpp {manifest['llama_cpp']['commit'][:12]} -> {'f' * 12}"
    ]
