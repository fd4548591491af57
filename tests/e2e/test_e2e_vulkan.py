"""The Vulkan flavour end to end (issue 12): `pytest -m e2e` runs tests/e2e/vulkan.sh.

Build: real llama.cpp with GGML_VULKAN=ON (glslc, g++) in Debian sid's vulkan-root, bundled with the host's Vulkan stack
left out. Run: in lavapipe-root (the Vulkan loader and Mesa's lavapipe, a Vulkan device on the CPU; no ROCm, no
compiler), rockbuild smoke --expect-gpu yes must put the layers on Vulkan0, and fail in one line with the driver
hidden. Compare: the ROCm bundle of test_e2e_run.py (on the CPU) against the Vulkan bundle on lavapipe. Needs root and
`sudo tests/e2e/provision.sh vulkan`; a cold build takes about 9 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.paths import E2E_SCRIPTS, REPO

E2E = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e"))
BENCH = E2E / "bench"
SCRIPT = E2E_SCRIPTS / "vulkan.sh"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def vulkan_roots():
    if os.geteuid() != 0:
        pytest.skip("the e2e proof needs root (chroot, mount)")
    if not (E2E / ".vulkan-root.stamp").exists() or not (E2E / ".lavapipe-root.stamp").exists():
        pytest.skip(f"the Vulkan roots are not provisioned in {E2E}: run `sudo tests/e2e/provision.sh vulkan` first")
    result = subprocess.run([str(SCRIPT), "build"], cwd=REPO)
    assert result.returncode == 0, "vulkan.sh build failed"


@pytest.mark.timeout(3600)
def test_vulkan_bundle_runs_on_lavapipe_and_fails_in_one_line_without_a_driver(vulkan_roots):
    result = subprocess.run([str(SCRIPT), "smoke"], cwd=REPO)
    assert result.returncode == 0
    build = json.loads((BENCH / "vulkan-build.json").read_text())
    assert build["status"] == "ok" and build["job"]["backend"] == "vulkan" and build["rocm"] is None
    audit = json.loads((BENCH / "vulkan-audit.json").read_text())
    assert audit["ok"] and audit["backend"] == "vulkan"
    checks = {c["name"]: c for c in audit["checks"]}
    assert "libvulkan.so.1" in checks["needed"]["details"]["host_libraries"] and checks["no-rocm"]["ok"]
    smoke = json.loads((BENCH / "vulkan-smoke.json").read_text())
    assert smoke["ok"] and smoke["device"] == "Vulkan0" and smoke["gpu"]["placement"] == "gpu"
    assert smoke["expect_gpu"]["devices_found"][0].startswith("Vulkan0: llvmpipe")
    assert all("-dev" in run["command"] for run in smoke["runs"].values())
    assert smoke["runs"]["bench"]["bench"][0]["backends"] == "Vulkan"
    doctor = json.loads((BENCH / "vulkan-doctor.json").read_text())
    assert [f["severity"] for f in doctor["findings"] if f["topic"] == "vulkan"] == ["ok"]
    assert doctor["bundle"]["vulkan_devices"][0].startswith("Vulkan0: llvmpipe")
    # the driver hidden: exit code 11 and one error line (plus its hint), naming what to check
    assert (BENCH / "vulkan-noicd.rc").read_text().strip() == "11"
    errors = [line for line in (BENCH / "vulkan-noicd.stderr").read_text().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no Vulkan device visible to the bundle" in errors[0]
    if (E2E / ".clean-root.stamp").exists():  # no Vulkan loader at all: stopped before any run, naming the library
        errors = [
            line for line in (BENCH / "vulkan-noloader.stderr").read_text().splitlines() if line.startswith("error:")
        ]
        assert len(errors) == 1 and "libvulkan.so.1: cannot open shared object file" in errors[0]


@pytest.mark.timeout(3600)
def test_lavapipe_checks_the_numbers_of_a_real_model_and_a_corrupted_one_fails(vulkan_roots):
    """Issue 26: the numerics step on lavapipe with SmolLM2-135M-Instruct (its PyPI wheel): lavapipe's KL divergence
    from the CPU within smoke.yaml's limits and the known answers right on both; a sign-flipped output_norm fails."""
    result = subprocess.run([str(SCRIPT), "numerics"], cwd=REPO)
    assert result.returncode == 0
    smoke = json.loads((BENCH / "vulkan-numerics.json").read_text())
    numerics = smoke["numerics"]
    assert smoke["ok"] and numerics["ok"] and smoke["device"] == "Vulkan0"
    cross = numerics["cross_backend"]
    assert cross["result"] == "passed" and cross["device"] == "Vulkan0"
    assert cross["figures"]["mean_kld"] < cross["threshold"]["max_mean_kld"]
    assert cross["figures"]["same_top"] > cross["threshold"]["min_same_top"]
    answers = numerics["known_answers"]
    assert answers["result"] == "passed" and answers["passed"] == answers["total"] == 6
    assert {a["on"] for a in answers["answers"]} == {"cpu", "gpu"}
    assert (BENCH / "vulkan-numerics-wrong.rc").read_text().strip() == "11"
    wrong = json.loads((BENCH / "vulkan-numerics-wrong.json").read_text())
    assert not wrong["ok"] and wrong["numerics"]["known_answers"]["result"] == "failed"
    errors = [
        line for line in (BENCH / "vulkan-numerics-wrong.stderr").read_text().splitlines() if line.startswith("error:")
    ]
    assert len(errors) == 1 and "known answers wrong" in errors[0]


@pytest.mark.timeout(3600)
def test_compare_the_rocm_bundle_on_the_cpu_with_the_vulkan_bundle_on_lavapipe(vulkan_roots):
    rocm = Path(os.environ.get("ROCKBUILD_E2E_ROCM_BUNDLE", E2E / "rocm-root/e2e/out/linux-gfx1151/bundle"))
    if not (rocm / "bundle.json").exists():
        pytest.skip(f"no ROCm bundle at {rocm}: run tests/e2e/run.sh all first")
    result = subprocess.run([str(SCRIPT), "compare"], cwd=REPO)
    assert result.returncode == 0
    data = json.loads((BENCH / "vulkan-compare.json").read_text())
    rocm_run, vulkan_run = data["bundles"]
    assert rocm_run["backends"] == "ROCm" and not rocm_run["gpu_info"]
    assert vulkan_run["backends"] == "Vulkan" and vulkan_run["gpu_info"].startswith("llvmpipe")
    assert set(data["tests"]) == {"pp512", "tg128"}
    assert all(v["tokens_per_second"] > 0 for test in data["tests"].values() for v in test.values())


@pytest.mark.timeout(3600)
def test_the_night_runs_the_vulkan_job_and_a_rerun_redoes_nothing(vulkan_roots):
    """rockbuild nightly (no publishing) on a local repository of the pinned source: resolve, no fetch, build,
    bundle, smoke; the second run of the same night reuses every stage."""
    result = subprocess.run([str(SCRIPT), "night"], cwd=REPO)
    assert result.returncode == 0
    first = json.loads((BENCH / "vulkan-night-first.json").read_text())
    again = json.loads((BENCH / "vulkan-night-again.json").read_text())
    (job,) = first["jobs"]
    assert first["state"] == "built" and job["id"] == "linux-vulkan" and job["status"] == "ok"
    assert job["stages"]["fetch"] == "skipped" and job["stages"]["smoke"] in ("done", "reused")
    (rerun,) = again["jobs"]
    assert rerun["stages"] == {"fetch": "skipped", "build": "reused", "bundle": "reused", "smoke": "reused"}
    build = json.loads((BENCH / "vulkan-night-first-build.json").read_text())
    assert build["llama_cpp"]["build_number"] == "b11312" and build["rocm"] is None
