"""The GPU lane's proof, its part here (issue 58): `pytest -m e2e` runs tests/e2e/harness/h200.py prepare on this
Debian 12 host (root, the provisioned vulkan-root's headers, the pinned llama.cpp sdist) and checks what the device's
calls will carry: the bundle built with glibc 2.36 and audited for 2.39, SmolLM2 split so that every call stays under
the device's 64 MiB, the CPU calls' extras on their own. 15-20 minutes on 2 cores from an empty ccache. The device's
steps run there, through the device tool (docs/gpu.md lists the calls); their set-up is tested in the normal suite
(tests/integration/test_e2e_harness_h200.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO

pytestmark = pytest.mark.e2e

E2E = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e"))
HARNESS = REPO / "tests" / "e2e" / "harness" / "h200.py"


@pytest.fixture(scope="module")
def prepared() -> Path:
    if os.geteuid() != 0:
        pytest.skip("h200.py prepare installs glslc with apt-get: it needs root")
    if not (E2E / ".vulkan-root.stamp").exists():
        pytest.skip("no vulkan-root (its Vulkan headers): sudo tests/e2e/provision.sh vulkan")
    done = subprocess.run([sys.executable, str(HARNESS), "prepare"], cwd=REPO, check=False)
    assert done.returncode == 0, "h200.py prepare failed (its log is above)"
    return REPO


def test_prepare_leaves_every_call_under_the_devices_limit(prepared: Path) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from e2e.harness import h200

    tree = h200.tree_bytes(prepared)
    for carry in (".h200m", ".h200n", ".h200c"):
        size = sum(p.stat().st_size for p in (prepared / carry).rglob("*") if p.is_file())
        assert size + tree <= h200.CALL_LIMIT, f"{carry}: {size} bytes beside the working tree's {tree}"
    parts = [(prepared / f).stat().st_size for f in (".h200m/smollm2.part1", ".h200n/smollm2.part2")]
    assert sum(parts) > 90_000_000  # SmolLM2-135M-Instruct Q4_1, whole across the two calls
    assert (prepared / ".h200c" / "libggml-cpu-sapphirerapids.pristine.so.xz").is_file()
    assert (prepared / ".h200n" / "tools" / "test-backend-ops").is_file()


def test_the_bundle_runs_with_the_devices_glibc(prepared: Path) -> None:
    work = Path(os.environ.get("ROCKBUILD_H200", "/var/cache/rockbuild/h200"))
    build = json.loads((work / "build.json").read_text())
    assert build["status"] == "ok" and build["job"]["id"] == "linux-vulkan"
    audit = (work / "audit.txt").read_text().splitlines()
    assert audit[0].endswith(": OK (targets ?)") and "  [ok] symbol-versions" in audit
    glibc = next(line for line in audit if line.startswith("  needs GLIBC_"))
    assert tuple(int(x) for x in glibc.split("GLIBC_")[1].split()[0].split(".")) <= (2, 36)  # built on Debian 12
