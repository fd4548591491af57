"""A GPU job built on its OS's common part (rockbuild.llamacpp.common_part): the stand-in llama.cpp built once with no
GPU backend (the cpu backend, as a night's <os>-common job), then the third backend's job compiles only its own
library (ggml-blas) and assembles bin/ from both; the bundle made from that passes the audit, its ABI check included.
And every way a common part can be wrong for a job stops the build with one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import replace

import pytest
from support.llama import make_project
from support.options import context
from support.third_backend import CpuBackend

from rockbuild.backends import REGISTRY, get_backend, register, unregister
from rockbuild.core.errors import BuildError, UsageError
from rockbuild.core.jobs import Job
from rockbuild.jobfolder import JobFolder
from rockbuild.llamacpp.driver import BuildOptions, build_job

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("cmake", "ninja", "gcc", "g++")), reason="needs cmake, ninja, gcc and g++"
)


def a_job(backend: str, os_name: str = "linux", **changes) -> Job:
    fields = get_backend(backend).job_fields(os_name, "", None, "test")  # type: ignore[arg-type]
    job = Job(
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
    return replace(job, **changes)


@pytest.fixture
def blas():
    register(CpuBackend())
    yield
    unregister("blas")


@pytest.fixture(scope="module")
def common(tmp_path_factory):
    """The common part: the stand-in tree (with its op test) built once by the cpu backend as linux-common."""
    base = tmp_path_factory.mktemp("common")
    source = make_project(base / "llama.cpp", op_test=True)
    options = BuildOptions(
        context=context(),
        out_dir=base / "out",
        source_dir=source,
        build_number="11312",
        commit="0c1e570",
        use_ccache=False,
        cache=base / "cache",
        jobs=2,
        web_ui=False,
    )
    record = build_job(a_job("cpu", id="linux-common", name="common"), options, backends=REGISTRY)
    assert record.ok and record.common is None
    return {"base": base, "source": source, "options": options, "folder": JobFolder.of(base / "out", "linux-common")}


def test_a_gpu_job_compiles_only_its_library_and_assembles_bin_from_the_common_part(common, blas, tmp_path):
    from rockbuild.bundle.plan import BundleRequest, bundle
    from rockbuild.bundle.policy import load_policy

    job = a_job("blas")
    options = replace(
        common["options"], out_dir=tmp_path / "out", cache=tmp_path / "cache", common=common["folder"].path
    )
    record = build_job(job, options, backends=REGISTRY)
    data = json.loads(record.build_json.read_text(encoding="utf-8"))
    assert data["status"] == "ok" and data["common"]["job"] == "linux-common"
    assert data["compile_command"][data["compile_command"].index("--target") + 1 :][0] == "ggml-blas"
    assert "llama-cli" not in data["compile_command"]
    # ninja compiled the library and what it links (the stand-in's ggml), no program
    folder = JobFolder(record.job_dir)
    assert not (folder.bin_dir / "llama-cli").exists() and (folder.bin_dir / "libggml-blas.so").is_file()
    assert folder.programs_dir() == folder.assembled_dir == record.paths.bin_dir
    assembled = sorted(p.name for p in folder.assembled_dir.iterdir())
    theirs = sorted(p.name for p in common["folder"].bin_dir.iterdir() if p.is_file())
    assert assembled == sorted({*theirs, "libggml-blas.so"})
    assert sorted(data["common"]["files"]) == theirs
    # the common part's files are its own bytes (hard links), not this build's
    assert os.path.samefile(folder.assembled_dir / "libggml.so", common["folder"].bin_dir / "libggml.so")
    assert os.path.samefile(folder.assembled_dir / "libggml-blas.so", folder.bin_dir / "libggml-blas.so")
    assert {b["path"] for b in data["binaries"]} >= {"bin/llama-cli", "bin/libggml-blas.so"}
    assert data["common"]["compilers"] == json.loads(common["folder"].build_json.read_text())["compilers"]
    # the op test comes from the common part too
    assert data["test_backend_ops"]["status"] == "built" and (folder.path / "tools" / "test-backend-ops").is_file()
    assert subprocess.run([folder.assembled_dir / "llama-cli"]).returncode == 0
    # the bundle step reads bin/; its audit checks that the library's ggml symbols are the common part's
    out = tmp_path / "bundle"
    made = bundle(BundleRequest.for_job(job, folder.programs_dir(), None, out, policy=load_policy(), backends=REGISTRY))
    assert made.audit is not None and made.audit.ok, made.audit.failures
    abi = next(c for c in made.audit.checks if c.name == "backend-abi")
    assert abi.ok and abi.details["modules"] == {"libggml-blas.so": 1}
    assert subprocess.run([out / "llama-cli"], env={}).returncode == 0
    # a second run with nothing changed compiles nothing and assembles the same folder
    again = build_job(job, options, backends=REGISTRY)
    assert again.ok and again.ninja is not None and again.ninja["no_work"]


def _failed(job, options, error=BuildError):
    with pytest.raises(error) as caught:
        build_job(job, options, backends=REGISTRY)
    record = JobFolder.of(options.out_dir, job.id).build()
    assert record is not None and not record.ok
    return str(caught.value.message), record.failed_step


def test_every_way_a_common_part_does_not_fit_is_one_line(common, blas, tmp_path):
    base = replace(common["options"], out_dir=tmp_path / "out", cache=tmp_path / "cache")
    job = a_job("blas")
    # none there
    message, step = _failed(job, replace(base, common=tmp_path))
    assert step == "common" and message == (
        f"{tmp_path} holds no build.json: build the common part first (rockbuild build --job linux-common --out ...)"
    )
    # another commit
    message, step = _failed(job, replace(base, common=common["folder"].path, commit="1234567"))
    assert step == "source" and message.startswith(
        "the common part linux-common was built from llama.cpp 0c1e570, this job builds 1234567"
    )
    # other flags that reach ggml
    message, step = _failed(
        replace(job, cmake=(("GGML_SCHED_MAX_COPIES", "8"),)), replace(base, common=common["folder"].path)
    )
    assert step == "configure" and message.startswith(
        "the common part linux-common was configured with no GGML_SCHED_MAX_COPIES, this job with "
        "GGML_SCHED_MAX_COPIES=8"
    )
    # another OS's
    message, step = _failed(
        a_job("blas", os_name="windows"), replace(base, common=common["folder"].path, cross="mingw-w64")
    )
    assert step == "common" and message == "the common part linux-common is a linux build; this job builds for windows"
    # a backend with no library of its own builds whole
    message, step = _failed(a_job("cpu"), replace(base, common=common["folder"].path), UsageError)
    assert step == "common" and "has no library of its own" in message


def test_a_failed_common_part_fails_the_job_with_its_reason(common, blas, tmp_path):
    broken = tmp_path / "linux-common"
    shutil.copytree(common["folder"].path, broken, symlinks=True, ignore=shutil.ignore_patterns("build"))
    data = json.loads((broken / "build.json").read_text())
    data.update(
        status="failed",
        failed_step="compile",
        error={"message": "compile failed (exit code 1); build.log in the job folder says why"},
    )
    (broken / "build.json").write_text(json.dumps(data))
    message, step = _failed(
        a_job("blas"), replace(common["options"], out_dir=tmp_path / "out", cache=tmp_path / "cache", common=broken)
    )
    assert step == "common" and message == (
        "the common part linux-common failed at compile: compile failed (exit "
        "code 1); build.log in the job folder says why"
    )
