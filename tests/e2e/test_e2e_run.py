"""The end-to-end proof (issue 6): `pytest -m e2e` runs tests/e2e/run.sh for gfx1151 and gfx1100.

Each target: rockbuild build (real llama.cpp, real ROCm 7.2 clang, HIP device code) + bundle inside the Debian ROCm
root, then rockbuild audit and rockbuild smoke (llama-cli, llama-server, llama-bench on the tiny Qwen3 model) inside a
root with no ROCm. Needs root and the roots from tests/e2e/provision.sh; a cold build takes 10-20 minutes per target.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.paths import E2E_SCRIPTS, REPO

E2E = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e"))

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def provisioned():
    if os.geteuid() != 0:
        pytest.skip("the e2e proof needs root (chroot, mount)")
    if not (E2E / ".rocm-root.stamp").exists() or not (E2E / ".clean-root.stamp").exists():
        pytest.skip(f"the e2e roots are not provisioned in {E2E}: run `sudo tests/e2e/provision.sh` first")


@pytest.mark.timeout(3 * 3600)
@pytest.mark.parametrize("target", ["gfx1151", "gfx1100"])
def test_build_bundle_and_smoke_in_a_root_without_rocm(provisioned, target):
    env = {**os.environ, "ROCKBUILD_E2E_TARGET": target}
    result = subprocess.run([str(E2E_SCRIPTS / "run.sh"), "all"], env=env, cwd=REPO)
    assert result.returncode == 0
    smoke = json.loads((E2E / "bench" / f"smoke-{target}.json").read_text())
    audit = json.loads((E2E / "bench" / f"audit-{target}.json").read_text())
    assert audit["ok"] and smoke["ok"]
    assert smoke["runs"]["cli"]["tokens"] > 0 and smoke["runs"]["server"]["ok"] and smoke["runs"]["bench"]["ok"]
    # the bundle holds device code for this target only, and never an absolute run path
    checks = {c["name"]: c for c in audit["checks"]}
    assert checks["code-objects"]["ok"] and checks["run-paths"]["ok"] and checks["kernel-data"]["ok"]
    loaded = (E2E / "bench" / f"from-root-{target}.txt").read_text().split()
    assert {Path(p).name for p in loaded} <= {
        "ld-linux-x86-64.so.2",
        "libc.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "libstdc++.so.6",
    }
