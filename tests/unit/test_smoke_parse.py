"""Smoke parsing and the GPU verdict, on output captured from real llama.cpp runs (tests/fixtures/smoke/README.md)."""

from __future__ import annotations

import pytest
from support.paths import FIXTURES

from rockbuild.backends import REGISTRY
from rockbuild.smoke.parse import (
    Buffer,
    parse_bench_json,
    parse_cli,
    parse_completion_perf,
    parse_load,
    parse_server_reply,
    strip_log_prefix,
    text_problem,
)
from rockbuild.smoke.runner import gpu_verdict

FIXTURES = FIXTURES / "smoke"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_log_prefixes_are_stripped_in_all_three_formats():
    assert (
        strip_log_prefix("0.00.487.885 I load_tensors: offloaded 3/3 layers to GPU")
        == "load_tensors: offloaded 3/3 layers to GPU"
    )
    assert strip_log_prefix("I load_tensors: x") == "load_tensors: x"
    assert strip_log_prefix("load_tensors: x") == "load_tensors: x"


def test_cpu_build_claims_full_offload_but_the_buffers_say_cpu():
    load = parse_load(fixture("completion-lv4-cpu.txt"))
    assert load.offloaded == (3, 3)
    assert load.buffers == (Buffer("CPU_Mapped", 10.18),)
    verdict = gpu_verdict([load], expect_gpu=False, backends=REGISTRY)
    assert verdict.placement == "cpu" and verdict.ok
    assert verdict.summary == "gpu: absent (CPU run proves library loading only)"
    assert any("offloaded 3/3" in n and "not a GPU run" in n for n in verdict.notes)


def test_cpu_fallback_fails_when_a_gpu_is_expected():
    verdict = gpu_verdict([parse_load(fixture("completion-lv4-cpu.txt"))], expect_gpu=True, backends=REGISTRY)
    assert not verdict.ok
    assert "silent CPU fallback" in verdict.summary and "CPU_Mapped 10.18 MiB" in verdict.summary


def test_rpc_offload_is_not_a_gpu():
    load = parse_load(fixture("rpc-offload.txt"))
    assert load.offloaded == (3, 3)
    assert [b.device for b in load.buffers] == ["CPU_Mapped", "RPC0[127.0.0.1:49619]"]
    assert load.devices == ("RPC0 (127.0.0.1:49619)",)
    verdict = gpu_verdict([load], expect_gpu=True, backends=REGISTRY)
    assert verdict.placement == "cpu" and not verdict.ok
    assert any("RPC0[127.0.0.1:49619] 10.18 MiB" in n for n in verdict.notes)


def test_rocm0_model_buffer_is_a_gpu_run():
    load = parse_load(fixture("rocm0-buffers.constructed.txt"))
    assert load.offloaded == (29, 29)
    assert Buffer("ROCm0", 321.94) in load.buffers
    assert load.isas == ("gfx1151",)
    assert load.devices == ("ROCm0 (AMD Radeon 8060S Graphics)",)
    # the KV and compute buffer lines are not model buffers
    assert all(b.device in ("CPU_Mapped", "ROCm0") for b in load.buffers)
    verdict = gpu_verdict([load], expect_gpu=True, texts=["The meaning of life is to find"], backends=REGISTRY)
    assert verdict.ok and verdict.placement == "gpu"
    assert verdict.summary.startswith("gpu: ROCm (321.94 MiB") and "29/29" in verdict.summary


def test_partial_offload_fails_an_expected_gpu_run():
    load = parse_load(fixture("rocm0-partial.constructed.txt"))
    verdict = gpu_verdict([load], expect_gpu=True, backends=REGISTRY)
    assert verdict.placement == "partial" and not verdict.ok
    assert "not every layer" in verdict.summary


def test_gpu_buffers_with_degenerate_text_fail():
    load = parse_load(fixture("rocm0-buffers.constructed.txt"))
    verdict = gpu_verdict([load], expect_gpu=True, texts=["!!!!!!!!!!!!!!!!"], backends=REGISTRY)
    assert not verdict.ok and "one symbol repeated" in verdict.summary


def test_one_cpu_load_among_gpu_loads_is_not_a_gpu_run():
    gpu, cpu = parse_load(fixture("rocm0-buffers.constructed.txt")), parse_load(fixture("completion-lv4-cpu.txt"))
    assert gpu_verdict([gpu, cpu], expect_gpu=True, backends=REGISTRY).placement == "partial"


def test_no_buffer_lines_gives_unknown_and_fails_when_expected():
    load = parse_load(fixture("server-stderr.txt"))
    assert load.buffers == () and load.offloaded is None
    assert gpu_verdict([load], expect_gpu=None, backends=REGISTRY).placement == "unknown"
    assert not gpu_verdict([load], expect_gpu=True, backends=REGISTRY).ok


def test_ngl_lines_the_last_load_counts():
    load = parse_load(fixture("ngl-load-lines.txt"))
    assert load.offloaded == (2, 3)


def test_llama_cli_fit_probe_block_is_skipped():
    probe = (
        "0.00.100.000 I load_tensors: loading model tensors, this can take a while... (load_mode = mmap)\n"
        "0.00.100.001 I load_tensors: offloaded 3/3 layers to GPU\n"
        "0.00.100.002 I load_tensors:          CPU model buffer size =     0.00 MiB\n"
    )
    load = parse_load(probe + fixture("rocm0-buffers.constructed.txt"))
    assert Buffer("ROCm0", 321.94) in load.buffers and Buffer("CPU", 0.0) not in load.buffers


def test_llama_cli_single_turn_reply_and_rates():
    text = fixture("cli-st-stdout.txt") + fixture("cli-lv4-stderr.txt")
    gen = parse_cli(text, "hello")
    assert gen.text == "Needle덤덤 nationalists Needle/[력ڌ.Quantity Us력 Us력 Us防火력"
    assert gen.tokens == 16
    assert gen.tokens_per_second == pytest.approx(1489.0)
    assert gen.prompt_tokens_per_second == pytest.approx(4145.8)


def test_llama_cli_log_lines_interleaved_with_the_reply_are_dropped():
    stdout = fixture("cli-st-stdout.txt").replace("\n\n[ Prompt", "\n0.00.821.575 I slot print_timing: x\n\n[ Prompt")
    stdout = stdout.replace("Loading model... |-\\|/", "Loading model... |\b-\b\\\b|\b/")
    gen = parse_cli(stdout, "hello")
    assert gen.text.startswith("Needle") and "print_timing" not in gen.text


def test_llama_cli_without_a_reply():
    gen = parse_cli("Loading model...\nerror: failed to load model\n", "hello")
    assert gen.text is None and gen.tokens is None
    assert text_problem(gen.text) == "no generated text found in the output"


def test_llama_completion_perf_line_and_invalid_utf8_stdout():
    raw = (FIXTURES / "completion-stdout.bin").read_bytes()
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")
    text = raw.decode("utf-8", errors="replace")
    assert text_problem(text) is None
    perf = parse_completion_perf(fixture("completion-stderr.txt"))
    assert perf.tokens == 16 and perf.tokens_per_second == pytest.approx(2270.79)


def test_server_reply():
    import json

    gen = parse_server_reply(json.loads(fixture("server-reply.json")))
    assert gen.tokens == 16
    assert gen.text.startswith(" Needle")
    assert gen.tokens_per_second == pytest.approx(1485.7369255150554)
    assert gen.prompt_tokens_per_second == pytest.approx(10410.95890410959)
    assert parse_server_reply({"error": {"code": 500}}).tokens is None


def test_bench_json_pp_and_tg():
    results = parse_bench_json("0.00.001.000 I some log line\n" + fixture("bench.json.txt"))
    assert [r.test for r in results] == ["pp64", "tg16"]
    assert results[0].tokens_per_second == pytest.approx(335.276152)
    assert results[0].backends == "CPU" and results[0].build == "0c1e570 (11312)"
    assert results[0].n_gpu_layers == -1


def test_bench_rpc_backend_is_reported_as_is():
    results = parse_bench_json(fixture("bench-rpc.json.txt"))
    assert {r.backends for r in results} == {"RPC"} and results[0].gpu_info == "127.0.0.1:49619"


def test_bench_markdown_is_not_json():
    assert parse_bench_json(fixture("bench.md.txt")) == []


@pytest.mark.parametrize(
    "text,problem",
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("GGGGGGGGGGGG", "one symbol"),
        ("the the the the the the", "repeats one word"),
        (" Needle덤덤 nationalists", None),
        ("To be happy.", None),
    ],
)
def test_text_problems(text, problem):
    found = text_problem(text)
    assert (found is None) if problem is None else (problem in found)


REAL_REPLY = (
    ".SimpleButton AppBar_found Tangoentropy交易中心lake RuntimeObjectentropy acquainted sewer+n "
    "AbleentropyInChildrenedited"
)


def test_real_merged_llama_cli_log_gives_the_whole_reply():
    text = fixture("real-llama-cli-lv4.merged.txt")
    assert "AbleentropyInChildrenedited0.00.882.156 I slot print_timing" in text  # a log line cut into the reply
    gen = parse_cli(text, "I believe the meaning of life is")
    assert gen.text == REAL_REPLY and gen.tokens == 16 and gen.tokens_per_second > 0
    load = parse_load(text)
    verdict = gpu_verdict([load, parse_load(fixture("real-llama-server-lv4.txt"))], expect_gpu=None, backends=REGISTRY)
    assert verdict.placement == "cpu" and verdict.offloaded == "3/3" and len(verdict.notes) == 1


def test_reply_continued_after_interleaved_log_lines():
    # seen in another real run: stdout's last piece arrived after the slot's log lines
    text = (
        fixture("real-llama-cli-lv4.merged.txt")
        .replace(
            "AbleentropyInChildrenedited0.00.882.156 I slot print_timing:",
            "AbleentropyInChildren0.00.882.156 I slot print_timing:",
        )
        .replace("all slots are idle\n\n", "all slots are idle\nedited\n")
    )
    assert parse_cli(text, "I believe the meaning of life is").text == REAL_REPLY


def test_real_bench_json_among_log_lines():
    results = parse_bench_json(fixture("real-llama-bench-json.merged.txt"))
    assert [r.test for r in results] == ["pp64", "tg16"]
    assert all(r.backends == "CPU" and r.tokens_per_second > 0 and r.build == "0c1e570 (11312)" for r in results)


def test_list_devices_output():
    from rockbuild.smoke.parse import parse_list_devices

    text = (
        "ggml_vulkan: Found 1 Vulkan devices:\nAvailable devices:\n"
        "  Vulkan0: llvmpipe (LLVM 22.1.8, 256 bits) (24105 MiB, 23528 MiB free)\n"
        "  ROCm0: AMD Radeon Graphics (98304 MiB, 97000 MiB free)\n"
    )
    assert parse_list_devices(text) == [
        ("Vulkan0", "llvmpipe (LLVM 22.1.8, 256 bits)"),
        ("ROCm0", "AMD Radeon Graphics"),
    ]
    assert parse_list_devices("Available devices:\n  (none)\n") == []
    assert parse_list_devices("error: something else\n") == []
