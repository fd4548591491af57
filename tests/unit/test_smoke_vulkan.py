"""The smoke verdict for a Vulkan bundle, on output captured on Mesa's lavapipe (tests/fixtures/smoke/README.md):
layers count as on the GPU only with Vulkan0 model and KV buffers, never because of "offloaded N/N layers"."""

from __future__ import annotations

from support.paths import FIXTURES

from rockbuild.backends import REGISTRY
from rockbuild.backends.vulkan import vulkan_bench_problem
from rockbuild.smoke.parse import Buffer, parse_bench_json, parse_load, parse_vulkan
from rockbuild.smoke.runner import gpu_verdict

FIXTURES = FIXTURES / "smoke"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_lavapipe_run_puts_weights_and_kv_on_vulkan0():
    load = parse_load(fixture("vulkan-completion-lv4.txt"))
    assert load.buffers == (Buffer("CPU_Mapped", 9.85), Buffer("Vulkan0", 0.33))
    assert load.offloaded == (3, 3)
    assert load.devices == ("Vulkan0 (llvmpipe (LLVM 22.1.8, 256 bits))",)
    assert load.vulkan is not None and load.vulkan.seen and not load.vulkan.fallbacks
    assert load.vulkan.kv_buffers == (Buffer("Vulkan0", 0.50),)
    verdict = gpu_verdict([load], expect_gpu=True, backends=REGISTRY)  # backend detected from the log
    assert verdict.ok and verdict.placement == "gpu", verdict.summary
    assert verdict.summary == "gpu: Vulkan (0.33 MiB of weights and the KV cache on the Vulkan device)"
    assert verdict.host_mib == 9.85  # the tied output layer stays on the CPU (lavapipe's 128 MiB buffer limit)
    bench = parse_bench_json(fixture("vulkan-bench.constructed.txt"))
    assert vulkan_bench_problem(bench) is None
    assert gpu_verdict([load], expect_gpu=True, backend="vulkan", bench=bench, backends=REGISTRY).ok


def test_bench_device_lines_name_the_cpu_type_device():
    vk = parse_vulkan(fixture("vulkan-bench-stderr.txt"))
    assert vk is not None and vk.seen and vk.cpu_type_device
    assert vk.devices == ("0 = llvmpipe (LLVM 22.1.8, 256 bits) (llvmpipe)",)
    assert vk.fallbacks == ()


def test_ngl0_keeps_a_vulkan_compute_buffer_but_no_layer_on_the_device():
    load = parse_load(fixture("vulkan-ngl0.constructed.txt"))
    assert load.offloaded == (0, 3) and load.buffers == (Buffer("CPU_Mapped", 10.18),)
    assert load.vulkan is not None and load.vulkan.kv_buffers == (Buffer("CPU", 0.50),)
    assert gpu_verdict([load], expect_gpu=False, backends=REGISTRY).placement == "cpu"
    verdict = gpu_verdict([load], expect_gpu=True, backends=REGISTRY)
    assert not verdict.ok and verdict.summary.startswith("gpu: FAILED, silent CPU fallback")
    # llama-bench -ngl 0 still says "Vulkan" with the llvmpipe gpu_info: only n_gpu_layers tells
    bench = [
        b.__class__(**{**b.__dict__, "n_gpu_layers": 0})
        for b in parse_bench_json(fixture("vulkan-bench.constructed.txt"))
    ]
    assert vulkan_bench_problem(bench) == "llama-bench ran with -ngl 0: no layer on the Vulkan device"


def test_no_icd_is_a_cpu_fallback_with_its_warning_despite_offloaded_3_of_3():
    load = parse_load(fixture("vulkan-no-icd.constructed.txt"))
    assert load.offloaded == (3, 3)
    assert load.vulkan is not None and not load.vulkan.seen  # nothing in this log says Vulkan...
    assert load.vulkan.fallbacks == ("llama.cpp found no usable GPU and ran on the CPU",)
    # ...so the bundle's backend has to be named; the warning is the reason given
    verdict = gpu_verdict([load], expect_gpu=True, backend="vulkan", backends=REGISTRY)
    assert not verdict.ok and verdict.placement == "cpu"
    assert verdict.summary == (
        "gpu: FAILED, llama.cpp found no usable GPU and ran on the CPU (model buffers: CPU_Mapped 10.18 MiB)"
    )
    assert any("offloaded 3/3" in n and "no Vulkan buffer" in n for n in verdict.notes)
    bench = parse_bench_json(fixture("vulkan-bench-no-icd.constructed.txt"))
    assert vulkan_bench_problem(bench) == "llama-bench ran on backend 'CPU', not Vulkan"


def test_a_bench_that_found_no_device_fails_an_expected_gpu_run():
    load = parse_load(fixture("vulkan-completion-lv4.txt"))
    bench = [
        b.__class__(**{**b.__dict__, "gpu_info": ""}) for b in parse_bench_json(fixture("vulkan-bench.constructed.txt"))
    ]
    verdict = gpu_verdict([load], expect_gpu=True, backend="vulkan", bench=bench, backends=REGISTRY)
    assert not verdict.ok
    assert verdict.summary == "gpu: FAILED, llama-bench reports no GPU (gpu_info is empty): no Vulkan device was used"


def test_every_failure_line_is_recognised():
    lines = fixture("vulkan-failure-lines.txt").splitlines()
    meanings = [parse_vulkan(line) for line in lines]
    assert all(m is not None and len(m.fallbacks) == 1 for m in meanings), lines
    assert len({m.fallbacks[0] for m in meanings if m}) == 5  # the two "-dev" refusals mean the same thing
    vk = parse_vulkan("\n".join(lines))
    assert vk is not None and vk.seen and len(vk.fallbacks) == 5


def test_rocm_logs_are_judged_as_before():
    for name in ("rocm0-buffers.constructed.txt", "completion-lv4-cpu.txt", "rpc-offload.txt"):
        load = parse_load(fixture(name))
        assert load.vulkan is None and "vulkan" not in load.to_dict()
    assert gpu_verdict(
        [parse_load(fixture("rocm0-buffers.constructed.txt"))], expect_gpu=True, backends=REGISTRY
    ).summary.startswith("gpu: ROCm")
    # and a Vulkan0 buffer is no ROCm buffer when the ROCm verdict is asked for explicitly
    assert (
        gpu_verdict(
            [parse_load(fixture("vulkan-completion-lv4.txt"))], expect_gpu=True, backend="rocm", backends=REGISTRY
        ).placement
        == "cpu"
    )
