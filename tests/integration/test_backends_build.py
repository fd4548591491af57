"""The third backend (tests/support/third_backend.py: llama.cpp's CPU backend alone, registered through the public
API) built with the host's cmake, ninja and compilers from a stand-in llama.cpp tree and bundled through the unchanged
stages; what it answers at each stage without a build is in tests/unit/test_backends.py."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from support.options import context
from support.third_backend import CpuBackend

from rockbuild.backends import BACKENDS, REGISTRY, Backend, get_backend, names, register, unregister
from rockbuild.bundle.policy import load_policy
from rockbuild.core.jobs import Job


def a_job(backend: str, os_name: str = "linux", **changes) -> Job:
    fields = get_backend(backend).job_fields(os_name, changes.pop("target", ""), None, "test")  # type: ignore[arg-type]
    return Job(
        **fields,
        os=os_name,
        required=True,
        llama_ref="master",
        rocm_channel="nightly",
        rocm_version="latest",
        cmake=changes.pop("cmake", ()),
        runner="",
        backend=backend,
    )


@pytest.fixture
def cpu():
    backend: Backend = register(CpuBackend())
    yield backend
    unregister("blas")
    assert names() == BACKENDS


@pytest.mark.skipif(
    not (shutil.which("cmake") and shutil.which("ninja") and shutil.which("gcc") and shutil.which("g++")),
    reason="needs cmake, ninja, gcc and g++ on the host",
)
def test_a_third_backend_builds_and_bundles_through_the_unchanged_stages(cpu, tmp_path):
    from support.llama import make_project, read_seen

    from rockbuild.bundle.audit import audit_bundle
    from rockbuild.bundle.plan import BundleRequest, bundle
    from rockbuild.llamacpp.driver import BuildOptions, build_job

    job = a_job("blas", cmake=(("MY_EXTRA", "from-matrix"),))
    options = BuildOptions(
        context=context(),
        out_dir=tmp_path / "out",
        source_dir=make_project(tmp_path / "llama.cpp"),
        build_number="11312",
        commit="0c1e570",
        use_ccache=False,
        cache=tmp_path / "cache",
        jobs=2,
    )
    result = build_job(job, options, backends=REGISTRY)
    data = json.loads(result.build_json.read_text(encoding="utf-8"))
    assert data["status"] == "ok" and data["job"]["backend"] == "blas" and data["job"]["id"] == "linux-blas"
    assert data["rocm"] is None and data["toolchain"] is None and set(data["compilers"]) == {"c", "cxx"}
    assert list(data["environment"])[:1] == ["NINJA_STATUS"] and "ROCM_PATH" not in data["environment"]
    seen = read_seen(result.build_dir)
    assert seen["GGML_HIP"] == seen["GPU_TARGETS"] == seen["GGML_HIP_ROCWMMA_FATTN"] == "" and seen["MY_EXTRA"] == (
        "from-matrix"
    )
    assert not [a for a in data["cmake_command"] if a.startswith(("-DGGML_HIP", "-DGGML_VULKAN", "-DGPU_TARGETS"))]
    assert subprocess.run([result.build_dir / "bin" / "llama-cli"]).returncode == 0
    # the bundle: no ROCm root, no targets, the backend's (empty) audit rules after the shared ones
    out = tmp_path / "bundle"
    bundled = bundle(
        BundleRequest.for_job(job, result.build_dir / "bin", None, out, policy=load_policy(), backends=REGISTRY)
    )
    assert bundled.audit is not None and bundled.audit.ok, bundled.audit.failures
    assert "linux, BLAS (no GPU targets)" in bundled.plan.render()
    meta = json.loads((out / "bundle.json").read_text(encoding="utf-8"))
    assert (meta["backend"], meta["rocm"], meta["targets"], meta["audit"]["backend"]) == ("blas", None, [], "blas")
    again = audit_bundle(out, backends=REGISTRY)  # from bundle.json alone
    assert again.ok and again.backend == "blas"
    assert [c.name for c in again.checks] == [
        "no-symlinks",
        "file-formats",
        "programs",
        "architecture",
        "needed",
        "run-paths",
        "kpack-refs",
        "extras",
        "cpu-backends",
        "backend-abi",
        "symbol-versions",
    ]
    assert subprocess.run([out / "llama-cli"], env={}).returncode == 0
