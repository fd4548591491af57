"""The smoke's numerics step (rockbuild/smoke/numerics.py): llama-perplexity's KL divergence of the GPU against the
CPU of the same bundle, and known greedy answers of a real model. Stand-in programs (tests/support/smoke.py) print
what tools/perplexity/perplexity.cpp and llama-completion print, for every branch: pass, wrong numbers, garbage, NaN,
a crash, no GPU, no known answers; the thresholds come from smoke.yaml."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.op_test import write_op_test
from support.smoke import fast_smoke, gguf_header, make_bundle, write_long_base

from rockbuild.backends import REGISTRY
from rockbuild.core.errors import ConfigError
from rockbuild.smoke.config import load_smoke_config
from rockbuild.smoke.logprobs import read_base, top_k, write_topk
from rockbuild.smoke.models import ModelFile
from rockbuild.smoke.numerics import (
    FAILED,
    NOT_CHECKED,
    PASSED,
    completion_text,
    parse_divergence,
    parse_final_ppl,
    parse_numerics_config,
)
from rockbuild.smoke.ops import OpsConfig, SubsetEntry
from rockbuild.smoke.runner import run_smoke

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"

# the end of a real `llama-perplexity --kl-divergence` run's output, in perplexity.cpp's format
KLD_OUTPUT = """\
chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p
   1      11.3420 ±    1.9012      -0.00511 ±    0.00870       0.00573 ±    0.00063       2.374 ±  0.211 %    96.078 ± 1.218 %
====== Perplexity statistics ======
Mean PPL(Q)                   :  12.412345 ±   0.402115
Mean PPL(base)                :  12.345600 ±   0.401000
Cor(ln(PPL(Q)), ln(PPL(base))):  99.81%
Mean ln(PPL(Q)/PPL(base))     :   0.005392 ±   0.002113

====== KL divergence statistics ======
Mean    KLD:   0.005700 ±   0.000300
Maximum KLD:   0.164000
99.9%   KLD:   0.120000
99.0%   KLD:   0.051000
Median  KLD:   0.001900
Minimum KLD:  -0.000001

====== Token probability statistics ======
Same top p: 96.400 ± 0.412 %
"""


def smoke_config() -> dict:
    return load_smoke_config()


def numerics_config(tmp_path: Path | None = None, drift_reference: bool = False):
    """The shipped numerics configuration; with ``tmp_path``, its SmolLM2 long-context reference is the stand-in
    llama-perplexity's own clean run (a vocabulary of 8, not SmolLM2's 49,152)."""
    config = parse_numerics_config(smoke_config()["numerics"])
    if tmp_path is None:
        return config
    folder = tmp_path / "reference"
    folder.mkdir(parents=True, exist_ok=True)
    base = write_long_base(folder / "clean.kld", 4096, 3072 if drift_reference else None)
    topk = write_topk(top_k(read_base(base)), folder / "standin.topk")
    refs = tuple(replace(r, file=topk, sha256="0" * 64) for r in config.baselines.references)
    return replace(config, baselines=replace(config.baselines, references=refs))


@pytest.fixture
def smollm2(tmp_path) -> ModelFile:
    path = tmp_path / SMOLLM2
    path.write_bytes(gguf_header() + bytes(40))
    return ModelFile(SMOLLM2, path, "0" * 64, 64, "path")


def smoke(tmp_path: Path, model: ModelFile, mode: dict, *, expect_gpu: str = "yes"):
    job, envlog = make_bundle(tmp_path, {"vk": "lavapipe", **mode})
    options = replace(fast_smoke(), numerics=numerics_config(tmp_path), expect_gpu=expect_gpu)
    report = run_smoke(job, model, options, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    return report, json.loads((job / "smoke.json").read_text()), envlog


# -- parsing and thresholds ------------------------------------------------------------------------------------------


def test_the_kld_block_is_read_as_perplexity_cpp_prints_it():
    div = parse_divergence(KLD_OUTPUT)
    assert div is not None
    assert (div.mean_kld, div.max_kld, div.p99_kld, div.same_top) == (0.0057, 0.164, 0.051, 96.4)
    assert (div.ppl, div.ppl_base) == (12.412345, 12.3456)
    assert parse_divergence("perplexity: tokenizing the input ..") is None
    assert parse_final_ppl("[1]9.1,[2]10.2,\nFinal estimate: PPL = 12.3456 +/- 0.45678\n") == 12.3456
    nan = parse_divergence("Mean    KLD:        nan ±        nan\nSame top p:    nan ± nan %\n")
    assert nan is not None and nan.mean_kld != nan.mean_kld  # NaN


def test_thresholds_come_from_smoke_yaml_each_with_its_floor():
    config = numerics_config()
    assert config.text.is_file() and len(config.text.read_text().split()) > 1600  # 8 x 256 tokens and more
    lava = config.threshold("vulkan", SMOLLM2, "Vulkan0: llvmpipe (LLVM 22.1.8, 256 bits)")
    assert lava is not None and lava.max_mean_kld == 0.017 and lava.min_same_top == 88.0
    assert "0.0057" in lava.floor and "96.4" in lava.floor
    assert config.threshold("vulkan", "tiny-qwen3.gguf", "") is None  # no floor measured: not judged by a guess
    shaped = config.threshold("vulkan", "qwen3-0.6b-shaped.gguf", "Vulkan0: NVIDIA H200")
    assert shaped is not None and "H200" in shaped.floor
    assert config.threshold("rocm", SMOLLM2, "").floor.startswith("not measured on an AMD GPU")
    assert [a.prompt for a in config.answers_for(SMOLLM2)][0] == "The capital of France is"
    assert config.answers_for("tiny-qwen3.gguf") == ()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"thresholds": [{"backend": "vulkan", "max_mean_kld": 0.01}]}, "numerics.thresholds[0] needs"),
        ({"thresholds": [{"max_mean_kld": ".nan", "min_same_top": 90}]}, "must be a finite number"),
        ({"known_answers": {"m": [{"prompt": "x", "expect": "("}]}}, "is not a regular expression"),
        ({"known_answers": {"m": "Paris"}}, "must be a list"),
        ({"ctx": "big"}, "numerics.ctx must be a whole number"),
        ({"chunks": float("inf")}, "numerics.chunks must be a whole number"),
        ({"thresholds": 3}, "numerics.thresholds must be a list"),
        ({"known_answers": "m"}, "numerics.known_answers must be a mapping"),
        ({"ctx_size": 256}, "unknown key 'ctx_size'"),
        ("yes", "numerics must be a mapping"),
    ],
)
def test_config_mistakes_are_one_config_error_each(section, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_numerics_config(section)


def test_a_completion_is_the_text_after_its_prompt():
    out = "load: 30 keys\nThe capital of France is Paris. It is\n\ncommon_perf_print: 1 ms\n"
    assert completion_text(out, "The capital of France is") == " Paris. It is"
    assert completion_text("error: no model", "The capital of France is") is None


# -- the step in the smoke, every branch -----------------------------------------------------------------------------


def test_right_numbers_and_right_answers_pass_with_their_figures(tmp_path, smollm2):
    report, data, envlog = smoke(tmp_path, smollm2, {"numerics": "pass"})
    assert report.ok, report.failures
    numerics = data["numerics"]
    assert numerics["cross_backend"]["result"] == PASSED
    assert numerics["cross_backend"]["figures"]["mean_kld"] == 0.0057
    assert numerics["cross_backend"]["threshold"]["floor"].startswith("lavapipe")
    assert numerics["known_answers"]["result"] == PASSED and numerics["known_answers"]["total"] == 6  # CPU + GPU
    assert numerics["cpu"]["ppl"] == 24.7912
    assert numerics["summary"] == {
        "cross_backend": PASSED,
        "mean_kld": 0.0057,
        "max_kld": 0.1596,
        "same_top": 96.4,
        "known_answers": PASSED,
        "answers_passed": 6,
        "answers_total": 6,
        "cpu_ppl": 24.7912,
        "model": SMOLLM2,
        "cpu_baseline": PASSED,
        "long_ctx": 4096,
        "long_reference": PASSED,
        "long_reference_kld": 0.0,
        "long_reference_same_top": 100.0,
        "long_cross_backend": NOT_CHECKED,
        "long_mean_kld": None,
        "long_same_top": None,
        "long_device": NOT_CHECKED,
        "long_device_kld": None,
        "long_device_same_top": None,
        "long_answer": PASSED,
        "long_answer_tokens": numerics["long_answer"]["prompt_tokens"],
    }
    # lavapipe is a software device: its long runs are not made, the pass key runs on the CPU
    assert numerics["long_answer"]["on"] == "CPU"
    assert numerics["long_cross_backend"]["detail"].startswith(
        "Vulkan0: llvmpipe (LLVM 22.1.8, 256 bits) is a software device: its long runs are not made"
    )
    calls = [json.loads(line) for line in (envlog / "perplexity.calls").read_text().splitlines()]
    cpu, gpu, long_cpu = calls
    assert cpu[cpu.index("-dev") + 1] == "none" and "-f" in cpu and "--kl-divergence" not in cpu
    assert gpu[gpu.index("-dev") + 1] == "Vulkan0" and "--kl-divergence" in gpu
    assert cpu[cpu.index("--kl-divergence-base") + 1] == gpu[gpu.index("--kl-divergence-base") + 1]
    assert not Path(cpu[cpu.index("--kl-divergence-base") + 1]).exists()  # hundreds of MB: not kept
    assert "cross backend: passed: mean KLD 0.00570" in report.render()


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("wrong", "wrong numbers against the CPU: mean KLD 0.26000 > 0.017, same top token 71.2 % < 88 %"),
        ("garbage", "wrong numbers against the CPU: mean KLD 9.81000 > 0.017"),
        ("nan", "NaN or inf in the GPU's numbers"),
        ("crash", "llama-perplexity on Vulkan0: killed by SIGSEGV"),
    ],
)
def test_wrong_numbers_fail_the_smoke_like_a_crash(tmp_path, smollm2, mode, words):
    report, data, _ = smoke(tmp_path, smollm2, {"numerics": mode})
    assert not report.ok
    assert data["numerics"]["cross_backend"]["result"] == FAILED
    assert any(f.startswith("numerics: cross_backend: ") and words in f for f in report.failures), report.failures
    assert data["runs"]["numerics"]["ok"] is False


def test_wrong_answers_on_the_gpu_only_fail_and_name_the_prompt(tmp_path, smollm2):
    report, data, _ = smoke(tmp_path, smollm2, {"numerics": "pass", "answers": "wrong", "answers_on": "gpu"})
    answers = data["numerics"]["known_answers"]
    assert not report.ok and answers["result"] == FAILED
    assert answers["passed"] == 3 and answers["total"] == 6
    assert (
        "3 of 6 known answers wrong: 'The capital of France is' on the GPU answered ' 1111 sum sum sum'"
        in answers["detail"]
    )


def test_no_gpu_device_is_not_checked_and_known_answers_still_run_on_the_cpu(tmp_path, smollm2):
    report, data, envlog = smoke(tmp_path, smollm2, {"numerics": "pass"}, expect_gpu="no")
    assert report.ok, report.failures
    assert data["numerics"]["cross_backend"] == {
        "result": NOT_CHECKED,
        "detail": "no GPU device on this machine: the GPU's numbers were not compared",
    }
    assert data["numerics"]["known_answers"]["result"] == PASSED and data["numerics"]["known_answers"]["total"] == 3
    assert len((envlog / "perplexity.calls").read_text().splitlines()) == 2  # the CPU's figures only (256, 4,096)
    assert data["numerics"]["long_cross_backend"]["result"] == NOT_CHECKED
    assert data["numerics"]["long_answer"]["on"] == "CPU" and data["numerics"]["long_answer"]["result"] == PASSED


def test_a_model_without_known_answers_says_not_checked_never_passed(tmp_path):
    path = tmp_path / "tiny-qwen3.gguf"
    path.write_bytes(gguf_header() + bytes(40))
    tiny = ModelFile("tiny-qwen3.gguf", path, "0" * 64, 64, "tiny")
    report, data, _ = smoke(tmp_path, tiny, {"numerics": "pass"})
    assert report.ok
    assert data["numerics"]["known_answers"]["result"] == NOT_CHECKED
    assert data["numerics"]["summary"]["known_answers"] == NOT_CHECKED
    assert data["numerics"]["cross_backend"] == {
        "result": NOT_CHECKED,
        "detail": "no threshold in smoke.yaml for backend vulkan, model tiny-qwen3.gguf",
    }


def test_a_cpu_reference_that_dies_fails_and_the_gpu_is_not_judged(tmp_path, smollm2):
    report, data, envlog = smoke(tmp_path, smollm2, {"numerics": "cpu-crash"})
    assert not report.ok
    assert data["numerics"]["cpu"]["result"] == FAILED
    assert data["numerics"]["cross_backend"] == {"result": NOT_CHECKED, "detail": "the CPU reference run failed"}


def test_a_bundle_without_llama_perplexity_is_not_checked(tmp_path):
    path = tmp_path / "tiny-qwen3.gguf"
    path.write_bytes(gguf_header() + bytes(40))
    tiny = ModelFile("tiny-qwen3.gguf", path, "0" * 64, 64, "tiny")
    job, _ = make_bundle(tmp_path, {"vk": "lavapipe"})
    report = run_smoke(
        job, tiny, replace(fast_smoke(), numerics=numerics_config(), expect_gpu="yes"), backends=REGISTRY
    )
    data = json.loads((job / "smoke.json").read_text())
    assert report.ok, report.failures
    assert data["numerics"]["cross_backend"] == {
        "result": NOT_CHECKED,
        "detail": "llama-perplexity is not in the bundle",
    }
    assert data["numerics"]["summary"]["cross_backend"] == NOT_CHECKED
    assert data["numerics"]["summary"]["known_answers"] == NOT_CHECKED


# -- the CPU's perplexity against its baseline (config/baselines.yaml) ---------------------------------------------


def test_a_model_broken_on_every_backend_fails_on_the_cpu_alone_against_its_baseline(tmp_path, smollm2):
    """The sign-flipped SmolLM2 (1.5e15 on the H200, docs/numerics.md): no GPU, no known answers needed."""
    report, data, _ = smoke(tmp_path, smollm2, {"numerics": "pass", "cpu_ppl": "1500000000000000.0"}, expect_gpu="no")
    cpu = data["numerics"]["cpu"]
    assert cpu["result"] == FAILED and cpu["baseline"]["result"] == FAILED
    assert cpu["detail"].startswith(
        "perplexity 1.5e+15 is x6.06e+13 from the baseline 24.7663 for "
        f"{SMOLLM2} on numerics.txt, 8 x 256 tokens (tolerance 2%; measured b11312"
    )
    assert cpu["detail"].endswith(
        "once a human has checked the new figure is right: rockbuild baseline <its smoke.json>"
    )
    assert not report.ok and any(f.startswith("numerics: cpu: perplexity 1.5e+15") for f in report.failures)


def test_a_drift_past_the_tolerance_fails_and_one_inside_it_passes_with_its_deviation(tmp_path, smollm2):
    report, data, _ = smoke(tmp_path / "a", smollm2, {"numerics": "pass", "cpu_ppl": "25.4000"})
    cpu = data["numerics"]["cpu"]
    assert cpu["result"] == FAILED and "is +2.56 % from the baseline 24.7663" in cpu["detail"]
    assert data["numerics"]["cross_backend"]["result"] == PASSED  # the GPU is still compared with that CPU run
    report, data, _ = smoke(tmp_path / "b", smollm2, {"numerics": "pass", "cpu_ppl": "24.2900"})
    cpu = data["numerics"]["cpu"]
    assert report.ok and cpu["result"] == PASSED
    assert cpu["detail"] == (
        "perplexity 24.2900 on 8 x 256 tokens; baseline: -1.92 % from the baseline 24.7663 (tolerance 2%)"
    )
    assert cpu["baseline"]["deviation"] == pytest.approx(24.29 / 24.7663 - 1)


def test_a_model_without_a_baseline_is_not_judged_by_one(tmp_path):
    model = tmp_path / "other.gguf"
    model.write_bytes(gguf_header() + bytes(40))
    report, data, _ = smoke(
        tmp_path, ModelFile("other.gguf", model, "0" * 64, 64, "path"), {"numerics": "pass", "cpu_ppl": "900.0"}
    )
    cpu = data["numerics"]["cpu"]
    assert cpu["result"] == PASSED and cpu["baseline"]["result"] == NOT_CHECKED
    assert cpu["detail"].endswith(
        "baseline: no baseline for other.gguf on numerics.txt, 8 x 256 tokens (baselines.yaml)"
    )
    assert data["numerics"]["summary"]["cpu_baseline"] == NOT_CHECKED


# -- whose numbers the op test's failures are -------------------------------------------------------------------------


@pytest.mark.parametrize("cpu_ppl", ["24.7700", "25.9000"])
def test_op_test_failures_are_the_cpu_references_when_the_cpus_own_checks_fail(tmp_path, smollm2, cpu_ppl):
    """test-backend-ops judges the GPU against the CPU backend: a CPU fault (issue 60: an AVX-512 q4_1 dot product,
    its perplexity +3.39 %) showed up as "6 of 37 cases failed on Vulkan0". With the CPU's perplexity off its baseline
    the op test's failure names the CPU reference; with the CPU clean it stays the GPU's."""
    job, _ = make_bundle(tmp_path, {"vk": "lavapipe", "numerics": "pass", "cpu_ppl": cpu_ppl})
    write_op_test(
        job / "tools" / "test-backend-ops",
        [("MUL_MAT", "type_a=q4_1,n=1", "ok"), ("MUL_MAT", "type_a=q4_1,n=2", "fail")],
    )
    build = json.loads((job / "build.json").read_text())
    build["test_backend_ops"] = {"status": "built", "path": "tools/test-backend-ops", "seconds": 1.0, "size": 10}
    (job / "build.json").write_text(json.dumps(build))
    options = replace(
        fast_smoke(),
        numerics=numerics_config(tmp_path),
        ops=OpsConfig(subset=(SubsetEntry("MUL_MAT"),)),
        expect_gpu="yes",
    )
    report = run_smoke(job, smollm2, options, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    ops = json.loads((job / "smoke.json").read_text())["ops"]
    assert not report.ok and ops["result"] == FAILED, ops["detail"]
    cases = "1 of 2 cases failed on "
    if cpu_ppl == "24.7700":  # the CPU passed its own checks: the GPU's cases
        assert ops["detail"].startswith(cases) and "suspect" not in ops
    else:
        assert ops["suspect"] == "cpu", ops["detail"]
        assert ops["detail"].startswith("the CPU reference is suspect, not ")
        assert "the CPU's own checks failed (cpu: perplexity 25.9 is +4.58 % from the baseline 24.7663" in ops["detail"]
        assert ops["detail"].endswith(f"judges Vulkan0 against the CPU: {cases}Vulkan0: MUL_MAT(type_a=q4_1,n=2)")
        assert any(f.startswith("ops: the CPU reference is suspect") for f in report.failures)
