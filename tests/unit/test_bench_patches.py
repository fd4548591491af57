"""bench/patches.py: the patched mirror against a patched copy, on the pinned b11312 tree where it is unpacked
(tests/e2e/h200.sh prepare); else only its one-line refusal is checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.paths import REPO

SCRIPT = REPO / "bench" / "patches.py"
TREE = "/var/cache/rockbuild/h200/src/llama_cpp_python-0.3.36/vendor/llama.cpp"


def bench(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_a_folder_that_is_no_llama_cpp_tree_is_refused_in_one_line(tmp_path):
    result = bench(str(tmp_path), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: {tmp_path} is not a llama.cpp tree (tests/e2e/h200.sh prepare unpacks the pinned one)"
    )


@pytest.mark.skipif(
    not os.path.isfile(TREE + "/CMakeLists.txt"), reason=f"the pinned llama.cpp tree is not unpacked at {TREE}"
)
def test_the_mirror_writes_only_the_patched_files_and_a_second_one_none(tmp_path):
    result = bench("--repeat", "1", "--json", str(tmp_path / "b.json"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    from rockbuild.llamacpp.patches import load_patch_series

    # one file per carried patch (patches/patches.yaml), and a second mirror rewrites nothing
    assert data["mirror_rewritten"] == len(load_patch_series(None).patches) and data["again_rewritten"] == 0
    assert data["mirror_bytes"] < data["copy_bytes"] / 100
    assert "x the copy's time" in result.stdout
