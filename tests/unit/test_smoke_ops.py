"""The smoke's ops step (rockbuild/smoke/ops.py): llama.cpp's test-backend-ops, built beside the bundle, run against
the bundle's own backend libraries.

The parser reads real output captured on this machine's lavapipe (tests/fixtures/ops/: ``test -b Vulkan0 -o MUL_MAT
-p 'type_a=q4_0,type_b=f32'`` and an excerpt of ``support -b Vulkan0`` from the b11312 Debian-12 Vulkan bundle,
docs/numerics.md). The verdicts are those of a stand-in ``test-backend-ops``: a real program (a Python script) that
prints what test-backend-ops prints for passing, failing and crashing cases, run by the step from a folder of the
bundle's files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.files import write
from support.op_test import write_op_test
from support.paths import FIXTURES, REPO

from rockbuild.core.data import load_yaml
from rockbuild.core.errors import ConfigError
from rockbuild.core.records import BuildRecord, SmokeRecord
from rockbuild.core.vocabulary import GpuDevice, SmokeDevices
from rockbuild.smoke.config import load_smoke_config
from rockbuild.smoke.ops import (
    FAILED,
    NOT_CHECKED,
    PASSED,
    Ops,
    OpsConfig,
    SubsetEntry,
    fallback_summary,
    find_op_test,
    parse_ops_config,
    parse_support_output,
    parse_test_output,
    run_ops,
)
from rockbuild.smoke.runner import SmokeOptions, run_ops_step

OPS = FIXTURES / "ops"
GREEN_OK, RED_FAIL = "\x1b[1;32mOK\x1b[0m", "\x1b[1;31mFAIL\x1b[0m"
CASE = (
    "MUL_MAT(type_a=q4_0,type_b=f32,m=16,n=1,k=256,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1,src_overlap=0,m_v=0,pad=0)"
)


# -- the parser, on real output -----------------------------------------------------------------------------------------


def test_real_lavapipe_mul_mat_output():
    out = parse_test_output((OPS / "test-mul-mat-q4_0-lavapipe.txt").read_text(encoding="utf-8"))
    assert list(out.ops) == ["MUL_MAT"]
    counts = out.ops["MUL_MAT"]
    assert (counts.passed, counts.failed, counts.not_supported) == (31, 0, 17)
    assert out.summary == (31, 31) and out.failed_cases == [] and out.tested == ["Vulkan0"]
    assert out.last_case is not None and out.last_case.startswith("MUL_MAT(type_a=q4_0,type_b=f32,m=1,n=64,k=256,")


def test_real_support_output_summarised_per_op():
    support = parse_support_output((OPS / "support-lavapipe-excerpt.txt").read_text(encoding="utf-8"))
    assert {op: (c.passed, c.not_supported) for op, c in support.items()} == {
        "GET_ROWS": (10, 4),
        "MUL_MAT": (15, 1),
        "LIGHTNING_INDEXER": (1, 0),
    }
    summary = fallback_summary(support)
    assert summary == {
        "cases": 31,
        "not_supported": 5,
        "ops_listed": 3,
        "ops": {"GET_ROWS": {"not_supported": 4, "cases": 14}, "MUL_MAT": {"not_supported": 1, "cases": 16}},
    }


def test_a_failed_case_keeps_its_full_parameters_once_and_its_error():
    text = "\n".join(
        [
            "Backend 1/2: Vulkan0",
            "  Device description: AMD Radeon RX 7900 XT",
            "",
            f"  {CASE}: {GREEN_OK}",
            f"[MUL_MAT] NMSE = 0.069215339 > 0.000500000   {CASE.replace('n=1,', 'n=2,')}: {RED_FAIL}",
            "  SOFT_MAX(type=f32,ne=[16,16,1,1],mask=0): not supported [Vulkan0] ",
            "  1/2 tests passed",
            f"  Backend Vulkan0: {RED_FAIL}",
            "",
            "Failing tests:",
            f"  {CASE.replace('n=1,', 'n=2,')}",
            "2/2 backends passed",
        ]
    )
    out = parse_test_output(text)
    assert out.failed_cases == [CASE.replace("n=1,", "n=2,")]
    assert out.ops["MUL_MAT"].to_dict() == {"passed": 1, "failed": 1, "not_supported": 0}
    assert out.ops["SOFT_MAX"].not_supported == 1
    assert out.errors == [f"{CASE.replace('n=1,', 'n=2,')}: [MUL_MAT] NMSE = 0.069215339 > 0.000500000"]
    assert out.summary == (1, 2)


def test_interleaved_lines_still_count_the_failed_case_from_the_failing_list():
    # -j N: two workers' printf calls on one line; the "Failing tests:" list at the end still names the case
    other = CASE.replace("MUL_MAT", "ADD")
    text = (
        f"Backend 1/1: Vulkan0\n  Device description: x\n\n  {CASE}:   {other}: {GREEN_OK}\n{RED_FAIL}\n"
        f"Failing tests:\n  {CASE}\n"
    )
    out = parse_test_output(text)
    assert CASE in out.failed_cases and out.ops["MUL_MAT"].failed == 1


# -- the configuration --------------------------------------------------------------------------------------------------


def test_shipped_smoke_yaml_has_an_ops_section_with_the_lavapipe_subset():
    config = SmokeOptions.from_config(load_smoke_config()).ops
    assert config is not None and config.enabled
    assert config.mode == {"gpu": "full", "software": "subset"}
    assert [e.op for e in config.subset][:6] == [
        "MUL_MAT",
        "MUL_MAT_ID",
        "FLASH_ATTN_EXT",
        "ROPE",
        "SOFT_MAX",
        "GET_ROWS",
    ]
    # past position 2,048 (issue 59): the carried cases of ops-long-positions and upstream's 4,096-key attention
    past = {e.op: e.params for e in config.subset[6:]}
    assert set(past) == {"ROPE", "ROPE_SET_ROWS", "SET_ROWS", "SOFT_MAX", "FLASH_ATTN_EXT"}
    assert "n_ctx=4096" in past["ROPE"] and "4096" in past["SET_ROWS"] and "kv=4096" in past["FLASH_ATTN_EXT"]
    assert config.kind_of("Vulkan0: llvmpipe (LLVM 22.1.8, 256 bits)") == "software"
    assert config.kind_of("Vulkan0: NVIDIA H200") == config.kind_of("") == "gpu"


@pytest.mark.parametrize(
    "section, message",
    [
        ("ops: [MUL_MAT]", "ops.yaml:1: ops must be a mapping"),
        (
            "ops:\n  mode: {gpu: everything}",
            "ops.yaml:2: ops.mode.gpu must be one of full, subset, none, not 'everything'",
        ),
        ("ops:\n  mode: {cpu: full}", "ops.yaml:2: unknown key 'cpu' in ops.mode"),
        ("ops:\n  subsets: []", "ops.yaml:2: unknown key 'subsets' in ops (did you mean subset?)"),
        (
            "ops:\n  subset:\n    - {op: mul_mat}",
            "ops.subset[0].op must be a ggml op name such as MUL_MAT, not 'mul_mat'",
        ),
        ("ops:\n  subset:\n    - {op: ROPE, params: 'type=(f32'}", "ops.subset[0].params 'type=(f32' is not a regular"),
        ("ops:\n  timeouts: {full: -1}", "ops.yaml:2: ops.timeouts.full must be seconds (a positive number), not -1"),
        ("ops:\n  jobs: 2.5", "ops.yaml:2: ops.jobs must be a whole number, at least 1, not 2.5"),
        ("ops:\n  enabled: yes please", "ops.enabled must be true or false"),
    ],
)
def test_config_mistakes_are_one_line_naming_file_line_and_key(tmp_path, section, message):
    path = write(tmp_path / "ops.yaml", section + "\n")
    with pytest.raises(ConfigError) as err:
        parse_ops_config(load_yaml(path)["ops"], path)
    text = str(err.value).replace(str(tmp_path) + "/", "")
    assert message in text and "\n" not in text


# -- the binary beside the bundle ---------------------------------------------------------------------------------------


def fake_job(tmp_path: Path, scenario: list[tuple[str, str, str]], *, record: bool = True) -> tuple[Path, Path]:
    """A job folder: bundle/ (a Vulkan library and llama-cli) and tools/test-backend-ops (the stand-in), recorded in
    build.json as the build records it."""
    job = tmp_path / "out" / "linux-vulkan"
    write(job / "bundle" / "libggml-vulkan.so", "not really a library\n")
    write(job / "bundle" / "llama-cli", "#!/bin/sh\n")
    tool = write_op_test(job / "tools" / "test-backend-ops", scenario)
    if record:
        (job / "build.json").write_text(
            json.dumps(
                {
                    "status": "ok",
                    "test_backend_ops": {
                        "status": "built",
                        "path": "tools/test-backend-ops",
                        "seconds": 1.0,
                        "size": 10,
                    },
                }
            )
        )
    return job, tool


def argv_log(tmp_path: Path) -> tuple[dict[str, str], Path]:
    log = tmp_path / "argv.jsonl"
    return {"PATH": os.environ.get("PATH", ""), "FAKE_OPS_ARGV": str(log)}, log


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


OK_CASES = [
    ("MUL_MAT", "type_a=q4_0,n=1", "ok"),
    ("MUL_MAT", "type_a=q4_0,n=2", "ok"),
    ("MUL_MAT", "type_a=iq1_s,n=1", "unsupported"),
    ("SOFT_MAX", "type=f32,ne=[16,16,1,1]", "ok"),
]


def test_full_mode_on_a_real_gpu_passes_with_per_op_counts_and_the_cpu_fallbacks(tmp_path):
    job, tool = fake_job(tmp_path, OK_CASES)
    env, log = argv_log(tmp_path)
    result = run_ops(
        OpsConfig(jobs=4),
        bundle=job / "bundle",
        tool=tool,
        gpu=GpuDevice("Vulkan0", "Vulkan0: NVIDIA H200"),
        env=env,
        logs=tmp_path / "logs",
    )
    assert result.result == PASSED and result.ok, result.detail
    assert result.mode == "full" and result.kind == "gpu"
    assert {op: c.to_dict() for op, c in result.ops.items()} == {
        "MUL_MAT": {"passed": 2, "failed": 0, "not_supported": 1},
        "SOFT_MAX": {"passed": 1, "failed": 0, "not_supported": 0},
    }
    assert result.detail.startswith("3 cases passed, 0 failed, 1 not supported on Vulkan0 (full test mode) in ")
    assert result.fallback == {
        "cases": 3,
        "not_supported": 2,
        "ops_listed": 2,
        "ops": {"OUT_PROD": {"not_supported": 2, "cases": 2}},
    }
    seen = calls(log)
    jobs = str(min(4, os.cpu_count() or 1))
    assert [c["argv"] for c in seen] == [
        ["test", "-b", "Vulkan0", *(["-j", jobs] if jobs != "1" else [])],
        ["support", "-b", "Vulkan0"],
    ]
    # run from a folder of links to the bundle's files and a copy of the binary, the bundle's libraries first
    assert all(c["bundle_lib"] and c["folder"] != str(tool.parent) for c in seen)
    assert seen[0]["ld_library_path"] == seen[0]["folder"]
    assert not Path(seen[0]["folder"]).exists()  # the temporary folder is gone
    summary = result.summary()
    assert (summary["passed"], summary["failed"], summary["not_supported"]) == (3, 0, 1)
    assert summary["fallback_ops"] == {"OUT_PROD": 2}


def test_one_failed_case_fails_and_names_the_op_and_its_parameters(tmp_path):
    job, tool = fake_job(tmp_path, [*OK_CASES, ("MUL_MAT", "type_a=q4_K,m=16,n=3,k=256", "fail")])
    env, _ = argv_log(tmp_path)
    result = run_ops(
        OpsConfig(), bundle=job / "bundle", tool=tool, gpu=GpuDevice("Vulkan0"), env=env, logs=tmp_path / "logs"
    )
    assert result.result == FAILED and not result.ok
    assert result.detail == "1 of 4 cases failed on Vulkan0: MUL_MAT(type_a=q4_K,m=16,n=3,k=256)"
    assert result.failed_cases == ("MUL_MAT(type_a=q4_K,m=16,n=3,k=256)",)
    assert result.ops["MUL_MAT"].failed == 1


def test_a_crash_fails_and_names_the_last_case_that_finished(tmp_path):
    job, tool = fake_job(
        tmp_path, [("FLASH_ATTN_EXT", "hsk=128,type_K=f16", "ok"), ("FLASH_ATTN_EXT", "hsk=576,type_K=q8_0", "crash")]
    )
    env, _ = argv_log(tmp_path)
    result = run_ops(
        OpsConfig(), bundle=job / "bundle", tool=tool, gpu=GpuDevice("ROCm0"), env=env, logs=tmp_path / "logs"
    )
    assert result.result == FAILED
    assert result.detail == (
        "test-backend-ops was killed by SIGSEGV (exit code -11) after "
        "FLASH_ATTN_EXT(hsk=128,type_K=f16), the last case to finish"
    )


def test_lavapipe_runs_the_named_subset_one_op_at_a_time(tmp_path):
    job, tool = fake_job(tmp_path, OK_CASES)
    env, log = argv_log(tmp_path)
    config = OpsConfig(subset=(SubsetEntry("MUL_MAT", "type_a=q4_0"), SubsetEntry("SOFT_MAX")))
    result = run_ops(
        config,
        bundle=job / "bundle",
        tool=tool,
        gpu=GpuDevice("Vulkan0", "Vulkan0: llvmpipe (LLVM 22.1.8, 256 bits)"),
        env=env,
        logs=tmp_path / "logs",
    )
    assert result.result == PASSED and (result.kind, result.mode) == ("software", "subset")
    assert [c["argv"] for c in calls(log)][:2] == [
        ["test", "-b", "Vulkan0", "-o", "MUL_MAT", "-p", "type_a=q4_0"],
        ["test", "-b", "Vulkan0", "-o", "SOFT_MAX"],
    ]
    assert [r.label for r in result.runs] == ["MUL_MAT -p 'type_a=q4_0'", "SOFT_MAX", "support"]


def test_a_subset_entry_that_selects_nothing_fails(tmp_path):
    job, tool = fake_job(tmp_path, OK_CASES)
    env, _ = argv_log(tmp_path)
    config = OpsConfig(subset=(SubsetEntry("ROPE", "type=f32"),))
    result = run_ops(
        config, bundle=job / "bundle", tool=tool, gpu=GpuDevice("Vulkan0", "llvmpipe"), env=env, logs=tmp_path / "logs"
    )
    assert result.result == FAILED
    assert "selected no case on Vulkan0" in result.detail and "-o ROPE -p 'type=f32'" in result.detail


def test_a_device_the_binary_does_not_know_fails(tmp_path):
    job, tool = fake_job(tmp_path, OK_CASES)
    env, _ = argv_log(tmp_path)
    result = run_ops(
        OpsConfig(), bundle=job / "bundle", tool=tool, gpu=GpuDevice("Vulkan1"), env=env, logs=tmp_path / "logs"
    )
    assert result.result == FAILED and result.detail.startswith(
        "test-backend-ops did not test Vulkan1 (the devices it has: Vulkan0, CPU"
    )


def test_a_hang_fails_at_the_timeout(tmp_path):
    job, tool = fake_job(tmp_path, [("ROPE", "type=f32", "ok"), ("ROPE", "type=f16", "hang")])
    env, _ = argv_log(tmp_path)
    config = OpsConfig(timeouts={"full": 2.0, "op": 2.0, "support": 10.0})
    result = run_ops(
        config, bundle=job / "bundle", tool=tool, gpu=GpuDevice("Vulkan0"), env=env, logs=tmp_path / "logs"
    )
    assert result.detail == "test-backend-ops timed out after 2s after ROPE(type=f32), the last case to finish"


def test_mode_none_and_an_empty_subset_are_not_checked(tmp_path):
    job, tool = fake_job(tmp_path, OK_CASES)
    env, log = argv_log(tmp_path)
    kwargs = dict(bundle=job / "bundle", tool=tool, env=env, logs=tmp_path / "logs")
    none = run_ops(OpsConfig(mode={"gpu": "none", "software": "subset"}), gpu=GpuDevice("Vulkan0"), **kwargs)
    empty = run_ops(OpsConfig(), gpu=GpuDevice("Vulkan0", "llvmpipe"), **kwargs)
    assert (none.result, empty.result) == (NOT_CHECKED, NOT_CHECKED) and none.ok
    assert none.detail == "ops.mode.gpu is none in smoke.yaml"
    assert "ops.subset is empty" in empty.detail and not log.exists()


# -- where the binary comes from, and the step in the smoke ------------------------------------------------------------


def test_the_binary_is_found_through_build_json_or_said_absent(tmp_path):
    job, tool = fake_job(tmp_path, OK_CASES)
    build = BuildRecord.read(job / "build.json")
    assert find_op_test(job, "linux", build) == (tool, "")
    absent = BuildRecord.from_dict(
        {
            "status": "ok",
            "test_backend_ops": {"status": "absent", "reason": "this llama.cpp tree has no test-backend-ops target"},
        }
    )
    tool.unlink()
    assert find_op_test(job, "linux", absent) == (
        None,
        "the build did not make test-backend-ops: this llama.cpp tree has no test-backend-ops target",
    )
    assert find_op_test(None, "linux")[1].startswith("no job folder beside the bundle")
    old, old_tool = fake_job(tmp_path / "old", OK_CASES, record=False)  # a job folder from before the record
    assert find_op_test(old, "linux", None) == (old_tool, "")


def test_the_step_without_a_gpu_device_or_a_binary_is_not_checked_never_passed(tmp_path):
    job, tool = fake_job(tmp_path, OK_CASES)
    options = SmokeOptions(ops=OpsConfig())
    env, _ = argv_log(tmp_path)
    common = dict(platform="linux", env=env, logs=tmp_path / "logs")
    none = SmokeDevices(("Vulkan0: llvmpipe",), False, "auto: no Vulkan device")
    no_gpu = run_ops_step(job / "bundle", job, options, devices=none, **common)
    assert (no_gpu.result, no_gpu.detail) == (NOT_CHECKED, "no GPU device to test (auto: no Vulkan device)")
    tool.unlink()
    (job / "build.json").write_text(
        json.dumps(
            {
                "status": "ok",
                "test_backend_ops": {
                    "status": "absent",
                    "reason": "its compile failed (exit code 1); build.log in the job folder says why",
                },
            }
        )
    )
    vulkan0 = SmokeDevices(("Vulkan0: llvmpipe",), True, "", "Vulkan0")
    no_tool = run_ops_step(job / "bundle", job, options, devices=vulkan0, **common)
    assert no_tool.result == NOT_CHECKED and no_tool.detail.endswith(
        "its compile failed (exit code 1); build.log in the job folder says why"
    )


def test_smoke_json_carries_the_step_and_its_compact_summary(tmp_path):
    job, tool = fake_job(tmp_path, [*OK_CASES, ("MUL_MAT", "type_a=q4_K,n=3", "fail")])
    env, _ = argv_log(tmp_path)
    result = run_ops(
        OpsConfig(), bundle=job / "bundle", tool=tool, gpu=GpuDevice("Vulkan0"), env=env, logs=tmp_path / "logs"
    )
    data = result.to_dict()
    assert data["totals"] == {"passed": 3, "failed": 1, "not_supported": 1, "cases": 5}
    assert data["summary"]["failed_cases"] == ["MUL_MAT(type_a=q4_K,n=3)"]
    SmokeRecord.from_dict({"ok": False, "ops": data})  # the record takes it
    schema = json.loads((REPO / "docs" / "schemas" / "smoke.schema.json").read_text())
    assert "ops" in schema["properties"]
    assert Ops.not_checked("why").to_dict()["summary"]["result"] == NOT_CHECKED


def test_the_op_test_copied_beside_the_bundle_runs_though_the_artifact_dropped_its_exec_bit(tmp_path):
    """upload-artifact drops the exec bits of the job folder's files: the step's own copy is made runnable."""
    from rockbuild.smoke.ops import op_test_folder

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "libggml-base.so.0").write_bytes(b"")
    tool = tmp_path / "tools" / "test-backend-ops"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho ok\n")
    tool.chmod(0o644)
    folder = op_test_folder(bundle, tool, tmp_path / "run")
    assert os.access(folder / "test-backend-ops", os.X_OK) and not os.access(tool, os.X_OK)
    assert (folder / "libggml-base.so.0").is_symlink()
