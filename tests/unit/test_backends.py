"""The backends (rockbuild/backends/): the registry, what ROCm and Vulkan answer at each stage, and a third backend
(CPU only) that is one class (tests/support/third_backend.py), registered through the public API, and works in the
matrix, the build, the bundle command, the night's inputs and the asset names without a line of any stage module
knowing it (its real build and bundle: tests/integration/test_backends_build.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.files import write
from support.paths import FIXTURES, REPO
from support.third_backend import CpuBackend

from rockbuild.backends import (
    BACKENDS,
    REGISTRY,
    Backend,
    all_backends,
    get_backend,
    names,
    register,
    unregister,
)
from rockbuild.bundle.policy import load_policy
from rockbuild.core.errors import BundleError, ConfigError, UsageError
from rockbuild.core.jobs import DEFAULT_BACKEND, Job
from rockbuild.core.vocabulary import SmokeDevices
from rockbuild.llamacpp.cmake import SEED_DEFINITIONS, configure_command

ROOT = REPO
FIXTURES = FIXTURES / "smoke"


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


# --- the registry ----------------------------------------------------------------------------------------------------


def test_the_shipped_backends_are_the_modules_of_the_package_default_first():
    assert DEFAULT_BACKEND == "rocm"
    assert BACKENDS == ("rocm", "cpu", "vulkan") == names()
    assert [b.name for b in all_backends()] == ["rocm", "cpu", "vulkan"]
    assert get_backend("vulkan") is get_backend("vulkan")  # one object per backend


def test_an_unknown_backend_is_a_config_error_with_a_suggestion():
    with pytest.raises(
        ConfigError, match=r"unknown backend 'vulcan' \(did you mean vulkan\?\); known: rocm, cpu, vulkan"
    ):
        get_backend("vulcan")


def test_every_backend_answers_the_whole_protocol():
    """The whole protocol: the matrix's, publishing's and the doctor's members, and those of the stage protocols it
    joins (the build's, the bundle's and the smoke's, in their own packages)."""
    protocols = [c for c in Backend.__mro__ if c.__module__.startswith("rockbuild.")]
    assert {c.__name__ for c in protocols} == {"Backend", "BuildBackend", "BundleBackend", "SmokeBackend"}
    members = {
        name
        for c in protocols
        for name in (*c.__annotations__, *(k for k, v in vars(c).items() if callable(v) and k[0] != "_"))
    }
    assert {
        "name",
        "needs_rocm",
        "per_target",
        "job_fields",
        "cmake_definitions",
        "audit_checks",
        "smoke_verdict",
        "asset_template",
    } <= members
    for name in BACKENDS:
        backend = get_backend(name)
        assert backend.name == name and backend.label
        missing = [m for m in members if not hasattr(backend, m)]
        assert not missing, (name, missing)


def test_listing_the_backends_imports_none_of_them():
    """`rockbuild --help` lists --backend's choices: that must not import a backend module (nor what they import)."""
    code = (
        "import sys; import rockbuild.backends as b; "
        "print(b.BACKENDS, sorted(m for m in sys.modules if m.startswith('rockbuild.backends.')), "
        "'rockbuild.llamacpp.cmake' in sys.modules); b.get_backend('vulkan'); "
        "print(sorted(m for m in sys.modules if m.startswith('rockbuild.backends.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["('rocm', 'cpu', 'vulkan') [] False", "['rockbuild.backends.vulkan']"]


def test_register_refuses_a_shipped_name():
    class Impostor:
        name = "vulkan"

    with pytest.raises(ValueError, match="one of rockbuild's own"):
        register(Impostor())  # type: ignore[arg-type]


def test_no_stage_module_branches_on_a_backend_name():
    """The stages ask their backend; only rockbuild/backends/ knows which flavour is which. publish/jobs.py (being
    reworked elsewhere) still infers and labels the flavour from its name."""
    pattern = re.compile(
        r"""is_vulkan|toolchain is None|(==|!=)\s*["']vulkan["']|["']vulkan["']\s*(==|!=)"""
        r"""|backend\S*\s*(==|!=)\s*["'](rocm|cpu)["']|["'](rocm|cpu)["']\s*(==|!=)\s*\S*backend"""
    )
    allowed = {"rockbuild/publish/jobs.py"}
    found = []
    for path in sorted((ROOT / "rockbuild").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("rockbuild/backends/") or rel in allowed:
            continue
        found += [
            f"{rel}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if pattern.search(line)
        ]
    assert not found, found


# --- ROCm ------------------------------------------------------------------------------------------------------------


def test_rocm_answers():
    from rockbuild.core.jobs import load_families
    from rockbuild.publish.config import load_publish_config
    from rockbuild.smoke.parse import parse_load

    rocm = get_backend("rocm")
    assert (rocm.label, rocm.needs_rocm, rocm.per_target) == ("ROCm", True, True)
    families = load_families()
    fields = rocm.job_fields("linux", "gfx110X", families, "m.yaml:3")
    assert fields == {
        "id": "linux-gfx110X",
        "name": "gfx110X",
        "family": "gfx110X-all",
        "group": "gfx110X-all",
        "legacy_groups": ("gfx110X-dgpu",),
        "targets": ("gfx1100", "gfx1101", "gfx1102", "gfx1103"),
    }
    with pytest.raises(ConfigError, match="m.yaml:3: gfx942 cannot be built for windows: TheRock publishes no windows"):
        rocm.job_fields("windows", "gfx942", families, "m.yaml:3")
    with pytest.raises(BundleError, match="a ROCm bundle needs the ROCm root"):
        rocm.bundle_platform(None, ("gfx1151",), None)
    template = load_publish_config().asset_name
    assert rocm.asset_template(template) == template == "llama-{tag}-{os}-rocm-{name}-x64"
    assert rocm.release_isas(("gfx1100", "gfx1101")) == ["gfx1100", "gfx1101"]
    vulkan_log = parse_load((FIXTURES / "vulkan-completion-lv4.txt").read_text(encoding="utf-8"))
    assert not rocm.in_logs([vulkan_log])  # the default: judges what no other backend claims
    rocm_log = parse_load((FIXTURES / "rocm0-buffers.constructed.txt").read_text(encoding="utf-8"))
    verdict = rocm.smoke_verdict([rocm_log], expect_gpu=True, texts=(), bench=())
    assert verdict.ok and verdict.summary.startswith("gpu: ROCm (")
    assert rocm.smoke_verdict([vulkan_log], expect_gpu=True, texts=(), bench=()).placement == "cpu"


def test_rocm_smoke_devices_come_from_the_kfd_topology(tmp_path):
    node = write(tmp_path / "1" / "properties", "gfx_target_version 110501\nsimd_count 80\n")
    assert node.is_file()
    found = get_backend("rocm").smoke_devices(
        tmp_path / "llama-cli", ("gfx1151",), asked="auto", device=None, env={}, logs=tmp_path, kfd_topology=tmp_path
    )
    assert found == SmokeDevices(
        ("gfx1151",), True, "auto: a ROCm device of this bundle's targets is present (gfx1151)", None, None
    )


# --- Vulkan ----------------------------------------------------------------------------------------------------------


def test_vulkan_answers(tmp_path):
    from rockbuild.bundle.policy import load_policy
    from rockbuild.publish.config import load_publish_config
    from rockbuild.smoke.parse import parse_load

    vulkan = get_backend("vulkan")
    assert (vulkan.label, vulkan.needs_rocm, vulkan.per_target) == ("Vulkan", False, False)
    job = a_job("vulkan", "windows", cmake=(("GGML_VULKAN_VALIDATE", "OFF"),))
    assert (job.id, job.name, job.family, job.group, job.targets) == ("windows-vulkan", "vulkan", "", "", ())
    assert vulkan.toolchain(job, None) is None
    defs = dict(vulkan.cmake_definitions(job, None, offline=False, build_info={"LLAMA_BUILD_NUMBER": "1"}, ccache=True))
    assert defs["GGML_VULKAN"] == "ON" and defs["GGML_VULKAN_VALIDATE"] == "OFF" and "GGML_HIP" not in defs
    with pytest.raises(BundleError, match=r"a Vulkan bundle has no GPU targets \(SPIR-V runs on any Vulkan GPU\)"):
        vulkan.bundle_platform(None, ("gfx1151",), "linux")
    assert vulkan.bundle_platform(None, (), "windows") == "windows"
    assert vulkan.asset_template(load_publish_config().asset_name) == "llama-{tag}-{os}-vulkan-x64"
    assert vulkan.release_isas(()) == ["SPIR-V (any Vulkan GPU)"]
    log = parse_load((FIXTURES / "vulkan-completion-lv4.txt").read_text(encoding="utf-8"))
    assert vulkan.in_logs([log]) and vulkan.smoke_verdict([log], expect_gpu=True, texts=(), bench=()).ok
    # its audit: nothing of ROCm, nothing the host must provide
    (tmp_path / "libamdhip64.so.7").write_bytes(b"")
    checks, fat = vulkan.audit_checks(
        tmp_path,
        {"libamdhip64.so.7", "libvulkan.so.1"},
        (),
        load_policy().for_platform("linux"),
        [],
        record=None,
        windows=False,
    )
    (check,) = checks
    assert check.name == "no-rocm" and not check.ok and fat == []
    assert "libamdhip64.so.7 is a ROCm library: a Vulkan bundle must not carry ROCm" in check.failures
    assert any(f.startswith("libvulkan.so.1 ships although it never may") for f in check.failures)


def test_a_bundle_tells_its_backend_by_bundle_json_else_by_its_ggml_library():
    from rockbuild.backends import bundle_backend

    assert bundle_backend(["libggml-vulkan.so", "llama-cli"], {}, "linux") == "vulkan"
    assert bundle_backend(["libggml-vulkan.so", "libggml-hip.so"], {}, "linux") == "rocm"
    assert bundle_backend(["GGML-VULKAN.DLL"], {}, "windows") == "vulkan"
    assert bundle_backend(["llama-cli"], {}, "linux") == DEFAULT_BACKEND
    assert bundle_backend(["libggml-hip.so"], {"backend": "vulkan"}, "linux") == "vulkan"


# --- a third backend: one new module (here, one class), registered, and the stages take it -------------------------


@pytest.fixture
def cpu():
    backend: Backend = register(CpuBackend())
    yield backend
    unregister("blas")
    assert names() == BACKENDS


def test_a_third_backend_expands_in_the_matrix(cpu, tmp_path):
    from rockbuild.core.jobs import load_families
    from rockbuild.matrix import github_matrix, load_matrix

    assert names() == ("rocm", "cpu", "vulkan", "blas") and get_backend("blas") is cpu
    families = load_families()
    path = write(
        tmp_path / "m.yaml",
        """
        matrix:
          os: [linux]
          target: [gfx1151]
          backend: [blas, rocm]
          include:
            - {os: windows, backend: blas, required: false}
    """,
    )
    jobs = load_matrix(path, families)
    assert [j.id for j in jobs] == ["linux-gfx1151", "linux-blas", "windows-blas"]
    windows = jobs[-1]
    assert (windows.name, windows.targets, windows.group, windows.required) == ("blas", (), "", False)
    assert github_matrix(jobs)["include"][1]["backend"] == "blas"
    # a per-OS backend is no per-target one, and a --target override asks for per-target jobs only
    assert [j.id for j in load_matrix(path, families, target_override=["gfx1151"])] == ["linux-gfx1151"]
    bad = write(
        tmp_path / "bad.yaml",
        """
        matrix:
          os: [linux]
          backend: [blas]
          include:
            - {os: linux, backend: blas, target: gfx1151}
    """,
    )
    with pytest.raises(ConfigError, match=r"bad\.yaml:5: a BLAS job is one per OS, not per GPU target"):
        load_matrix(bad, families)
    with pytest.raises(
        ConfigError, match=r"unknown backend 'blsa' \(did you mean blas\?\); known: rocm, cpu, vulkan, blas"
    ):
        load_matrix(write(tmp_path / "typo.yaml", "matrix: {os: [linux], backend: [blsa]}\n"), families)


def test_a_third_backend_has_its_own_cmake_definitions(cpu):
    from rockbuild.llamacpp.driver import job_label

    job = a_job("blas", cmake=(("MY_EXTRA", "x"),))
    assert job_label(job, cpu) == "BLAS, host compiler"
    defs = cpu.cmake_definitions(job, None, offline=True, build_info={"LLAMA_BUILD_NUMBER": "7"}, ccache=False)
    names_ = [n for n, _ in defs]
    assert names_[:2] == ["CMAKE_BUILD_TYPE", "BUILD_SHARED_LIBS"] and names_[-1] == "MY_EXTRA"
    assert not [n for n in names_ if n.startswith(("GGML_HIP", "GGML_VULKAN", "GPU_TARGETS", "CMAKE_C_COMPILER"))]
    got = dict(defs)
    assert got["GGML_NATIVE"] == "OFF" and got["LLAMA_OPENSSL"] == "ON" and got["LLAMA_BUILD_NUMBER"] == "7"
    assert len(defs) == len(SEED_DEFINITIONS) - 1 + 4  # GGML_BLAS for the HIP switches; OpenSSL, ccache, build, extra
    assert "-DMY_EXTRA=x" in configure_command("/src", "/b", defs)
    with pytest.raises(ConfigError, match="the job's cmake option GGML_VULKAN is set by rockbuild for a CPU job"):
        cpu.cmake_definitions(
            a_job("blas", cmake=(("GGML_VULKAN", "ON"),)), None, offline=False, build_info={}, ccache=False
        )


def test_a_third_backend_takes_no_rocm_in_the_night_and_the_bundle_command(cpu, tmp_path):
    from rockbuild.backends import bundle_backend
    from rockbuild.bundle.plan import BundleRequest
    from rockbuild.core.records import InputsJob, InputsLlama
    from rockbuild.pipeline.inputs import inputs_record, read_inputs

    job = a_job("blas")
    inputs = inputs_record(
        InputsLlama(ref="master", commit="0" * 40, build_number="1", url="url"), {}, (InputsJob.of(job, None),)
    )
    assert inputs.rocm_for(job.id) is None and len(inputs.job_fingerprint(job.id)) == 16
    assert read_inputs(json.loads(json.dumps(inputs.to_dict()))).job(job.id).backend == "blas"
    with pytest.raises(UsageError, match="a BLAS bundle takes no --rocm and no --targets"):
        BundleRequest.from_flags(
            tmp_path, None, ["gfx1151"], tmp_path / "out", backend="blas", policy=load_policy(), backends=REGISTRY
        )
    assert bundle_backend(["libggml-blas.so"], {"backend": "blas"}, "linux") == "blas"


def test_a_third_backend_names_its_assets_and_install_finds_them(cpu):
    from rockbuild.install import asset_name_pattern, choose_asset
    from rockbuild.publish.config import load_publish_config
    from rockbuild.publish.jobs import BuiltJob
    from rockbuild.publish.notes import job_row
    from rockbuild.publish.release import asset_base

    config = load_publish_config()
    record = BuiltJob(
        dir=Path("."), id="linux-blas", os="linux", name="blas", targets=(), required=True, status="ok", backend="blas"
    )
    assert asset_base(config, "b1234", record) == "llama-b1234-ubuntu-blas-x64"
    row = job_row(record, [], config.os_words)
    assert (row["isas"], row["rocm_version"], row["rocm_date"]) == (["x86-64 (AVX2)"], "-", "no ROCm")
    pattern = asset_name_pattern(config.asset_name, tag="b1234", os_word="ubuntu", backend="blas")
    release = {
        "tag_name": "b1234",
        "assets": [
            {"name": f"llama-b1234-ubuntu-{kind}-x64.{suffix}", "browser_download_url": f"https://x/{kind}.{suffix}"}
            for kind in ("rocm-gfx1151", "vulkan", "blas")
            for suffix in ("zip", "tar.gz")
        ],
    }
    assert [a["name"] for a in release["assets"] if pattern.fullmatch(a["name"])] == [
        "llama-b1234-ubuntu-blas-x64.zip",
        "llama-b1234-ubuntu-blas-x64.tar.gz",
    ]
    chosen, warnings = choose_asset(
        release,
        None,
        target=None,
        os_name="linux",
        backend="blas",
        template=config.asset_name,
        os_words=config.os_words,
    )
    assert chosen.name == "llama-b1234-ubuntu-blas-x64.tar.gz" and not warnings
