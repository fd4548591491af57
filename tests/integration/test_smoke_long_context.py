"""Long prompts (rockbuild/smoke/longctx.py, rockbuild/smoke/logprobs.py): one 4,096-token sequence with llama-server's
batches on the CPU against the last good build's top-k reference and on the GPU against the CPU, and a pass key through
llama-server's HTTP API. Real log-probability files in perplexity.cpp's format (a vocabulary of 8), the stand-in
programs of tests/support/smoke.py, and `rockbuild baseline` recording the reference."""

from __future__ import annotations

import json
import math
import struct
from dataclasses import replace
from pathlib import Path

import pytest
from support.files import write
from support.smoke import fast_smoke, gguf_header, make_bundle, write_long_base

from rockbuild.backends import REGISTRY
from rockbuild.core.data import data_path
from rockbuild.core.errors import ConfigError
from rockbuild.smoke.baselines import load_baselines
from rockbuild.smoke.config import load_smoke_config
from rockbuild.smoke.logprobs import LogProbsError, compare, read_base, read_topk, top_k, write_topk
from rockbuild.smoke.longctx import read_text
from rockbuild.smoke.models import ModelFile
from rockbuild.smoke.numerics import FAILED, NOT_CHECKED, PASSED, parse_numerics_config
from rockbuild.smoke.runner import run_smoke

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"


# -- the data: the pinned text and the shipped reference -------------------------------------------------------------


def test_the_shipped_long_text_is_the_pinned_one_and_its_reference_fits_it():
    config = parse_numerics_config(load_smoke_config()["numerics"])
    long = config.long
    assert long is not None and long.enabled and (long.ctx, long.batch, long.ubatch) == (4096, 2048, 512)
    text, why = read_text(long)
    assert why is None and text is not None and text.startswith("CHAPTER 1. Loomings.")
    assert len(text) > 4 * 2 * long.ctx  # perplexity needs 2 x ctx tokens; about 4 characters a token
    assert "public domain" in long.source
    pinned = load_smoke_config()["models"]["smollm2"]["sha256"]
    ref = config.baselines.reference(SMOLLM2, "moby-dick.txt", 4096, pinned, "linux")
    assert (
        config.baselines.reference(SMOLLM2, "moby-dick.txt", 4096, "0" * 64, "linux") is None
    )  # another file's weights
    assert ref is not None and ref.max_mean_kld <= 0.0053 / 2  # below the fault measured in issue 39
    topk = read_topk(ref.file)
    assert (topk.n_ctx, topk.n_vocab, topk.n_chunk, topk.k) == (4096, 49152, 1, 16)
    assert topk.ids.shape == (2047, 16) and (topk.logp[:, :-1] >= topk.logp[:, 1:]).all()  # most likely first
    assert topk.about["model"] == SMOLLM2 and "b11312" in topk.about["build"]
    assert topk.about["cpu_variant"] == long.cpu_variant == "haswell"


def test_a_changed_text_is_refused_by_its_pin(tmp_path):
    long = parse_numerics_config(load_smoke_config()["numerics"]).long
    assert long is not None
    copy = tmp_path / "moby-dick.txt"
    copy.write_text(long.text.read_text() + " ")
    text, why = read_text(replace(long, text=copy))
    assert text is None and why is not None and "is not the pinned one" in why


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"text": "t.txt"}, "numerics.long_context.sha256 must be the text's sha256"),
        ({"sha256": "0" * 64}, "numerics.long_context.text must name"),
        ({"text": "t", "sha256": "0" * 64, "ctx": "lots"}, "numerics.long_context.ctx must be a whole number"),
        ({"text": "t", "sha256": "0" * 64, "ubatch": 4096}, "ubatch (4096) cannot exceed batch (2048)"),
        ({"text": "t", "sha256": "0" * 64, "timeout": "soon"}, "timeout must be seconds"),
        (
            {"text": "t", "sha256": "0" * 64, "passkey": {"key": "abc"}},
            "passkey.key must be a number of 3 to 12 digits",
        ),
        ({"text": "t", "sha256": "0" * 64, "passkey": {"at": 50000}}, "passkey.at (50000) must lie inside"),
        ({"text": "t", "sha256": "0" * 64, "passkey": "yes"}, "passkey must be a mapping"),
        ({"text": "t", "sha256": "0" * 64, "tokens": 8}, "unknown key 'tokens' in numerics.long_context"),
        ("long", "numerics.long_context must be a mapping"),
    ],
)
def test_long_context_config_mistakes_are_one_config_error(section, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_numerics_config({"long_context": section})


def test_a_mistake_in_a_data_file_names_its_line(tmp_path):
    shipped = data_path("config", "smoke.yaml").read_text()
    broken = write(tmp_path / "smoke.yaml", shipped.replace("    ubatch: 512\n", "    ubatch: many\n"))
    write(tmp_path / "baselines.yaml", "baselines: []\n")
    from rockbuild.core.data import load_yaml

    with pytest.raises(ConfigError) as info:
        parse_numerics_config(load_yaml(broken)["numerics"], data_dir=tmp_path)
    line = shipped.splitlines().index("    ubatch: 512") + 1
    assert info.value.message.startswith(f"{broken}:{line}:") and "ubatch must be a whole number" in info.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "references:\n  - {model: m, sha256: '%s', text: t, ctx: 4096, file: f.topk, max_mean_kld: 0.001,\n"
            "     min_same_top: 990}\n" % ("a" * 64),
            "references[0].min_same_top is a percentage",
        ),
        (
            "references:\n  - {model: m, sha256: '%s', text: t, ctx: 4096, max_mean_kld: 0.001, min_same_top: 99}\n"
            % ("a" * 64),
            "references[0] needs a file",
        ),
        (
            "references:\n  - {model: m, sha256: '%s', text: t, ctx: 4096, file: f, max_mean_kld: none,\n"
            "     min_same_top: 99}\n" % ("a" * 64),
            "references[0].max_mean_kld must be a positive number",
        ),
        (
            "references:\n  - {model: m, sha256: abc, text: t, ctx: 4096, file: f, max_mean_kld: 0.1, min_same_top: 99}\n",
            "references[0] needs the model file's sha256",
        ),
        (
            "references:\n  - {model: m, sha256: '%s', text: t, ctx: 512, variant: Zen 4, file: f, max_mean_kld: 0.1,\n"
            "     min_same_top: 99}\n" % ("a" * 64),
            "references[0].variant is a CPU variant's name such as zen4, not 'Zen 4'",
        ),
        (
            "references:\n"
            + "".join(
                "  - {model: m, sha256: '%s', text: t, ctx: 512, variant: zen4, file: f, max_mean_kld: 0.1,\n"
                "     min_same_top: 99}\n" % ("a" * 64)
                for _ in range(2)
            ),
            "references[1] is a second reference of m on t, 512 tokens, linux, CPU variant zen4",
        ),
    ],
)
def test_a_wrong_reference_entry_is_a_config_error(tmp_path, text, message):
    path = write(tmp_path / "baselines.yaml", text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")) as info:
        load_baselines(path)
    assert info.value.message.startswith(f"{path}:")


# -- log-probability files -------------------------------------------------------------------------------------------


def test_a_run_against_its_own_top_k_is_zero_and_a_drift_shows_where(tmp_path):
    clean = read_base(write_long_base(tmp_path / "clean.kld", 4096))
    assert (clean.n_ctx, clean.n_vocab, clean.n_chunk, clean.rows.shape) == (4096, 8, 1, (2047, 12))
    ref = read_topk(write_topk(top_k(clean, 4, {"model": "m"}), tmp_path / "ref.topk"))
    assert ref.k == 4 and ref.about == {"model": "m"}
    same = compare(clean, ref)
    assert (same.mean_kld, same.same_top, same.positions) == (0.0, 100.0, 2047)
    drift = compare(read_base(write_long_base(tmp_path / "drift.kld", 4096, 3072)), ref)
    assert drift.mean_kld > 0.1 and drift.same_top < 90
    by_window = {w.start: w for w in drift.windows}
    assert set(by_window) == {2048, 2560, 3072, 3584}  # the second half of the sequence, one window per ubatch
    assert by_window[2048].mean_kld == 0.0 and by_window[2560].mean_kld == 0.0 and by_window[3072].mean_kld > 0.2
    assert drift.worst_position >= 3072


def test_damaged_files_are_one_line_errors(tmp_path):
    base = write_long_base(tmp_path / "b.kld", 256)
    data = base.read_bytes()
    (tmp_path / "short.kld").write_bytes(data[:-10])
    (tmp_path / "other.kld").write_bytes(b"GGUF" + data[4:])
    with pytest.raises(LogProbsError, match="is truncated"):
        read_base(tmp_path / "short.kld")
    with pytest.raises(LogProbsError, match="is not a llama-perplexity log-probability file"):
        read_base(tmp_path / "other.kld")
    (tmp_path / "x.topk").write_bytes(b"not zstd")
    with pytest.raises(LogProbsError, match="not a rockbuild top-k reference"):
        read_topk(tmp_path / "x.topk")
    ref = top_k(read_base(base))
    # the same shape, other tokens: another text or tokenizer, not a small divergence
    other = bytearray(data)
    other[20:24] = struct.pack("<i", 5)
    (tmp_path / "tokens.kld").write_bytes(bytes(other))
    with pytest.raises(LogProbsError, match="the evaluated tokens differ from the reference's"):
        compare(read_base(tmp_path / "tokens.kld"), ref)
    with pytest.raises(LogProbsError, match="holds 1 x 512 tokens"):
        compare(read_base(write_long_base(tmp_path / "c.kld", 512)), ref)


def test_a_nan_in_the_run_is_not_a_small_divergence(tmp_path):
    base = write_long_base(tmp_path / "b.kld", 256)
    ref = top_k(read_base(base))
    data = bytearray(base.read_bytes())
    first_row = 20 + 4 * 256
    data[first_row : first_row + 4] = struct.pack("<f", math.nan)  # the first row's scale
    (tmp_path / "nan.kld").write_bytes(bytes(data))
    got = compare(read_base(tmp_path / "nan.kld"), ref)
    assert math.isnan(got.mean_kld)


# -- the checks in the smoke -----------------------------------------------------------------------------------------


@pytest.fixture
def smollm2(tmp_path) -> ModelFile:
    path = tmp_path / SMOLLM2
    path.write_bytes(gguf_header() + bytes(40))
    return ModelFile(SMOLLM2, path, "0" * 64, 64, "path")


def smoke(tmp_path: Path, model: ModelFile, mode: dict, *, reference: str | None = "stand-in", expect_gpu: str = "yes"):
    """The smoke of a stand-in Vulkan bundle on lavapipe; ``reference``: the stand-in's own clean run, None (no
    reference for the model) or a baselines file's path."""
    job, envlog = make_bundle(tmp_path, {"vk": "lavapipe", "numerics": "pass", "vk_name": "NVIDIA H200", **mode})
    config = parse_numerics_config(load_smoke_config()["numerics"])
    if reference == "stand-in":
        topk = write_topk(top_k(read_base(write_long_base(tmp_path / "clean.kld", 4096))), tmp_path / "ref.topk")
        refs = tuple(replace(r, file=topk, sha256="0" * 64) for r in config.baselines.references)
        config = replace(config, baselines=replace(config.baselines, references=refs))
    elif reference is None:
        config = replace(config, baselines=replace(config.baselines, references=()))
    else:
        config = replace(config, baselines=load_baselines(Path(reference)))
    report = run_smoke(
        job,
        model,
        replace(fast_smoke(), numerics=config, expect_gpu=expect_gpu),
        kfd_topology=tmp_path / "no-kfd",
        backends=REGISTRY,
    )
    return report, json.loads((job / "smoke.json").read_text()), envlog


def test_the_long_runs_use_llama_servers_batches_and_keep_only_a_top_k(tmp_path, smollm2):
    report, data, envlog = smoke(tmp_path, smollm2, {})
    assert report.ok, report.failures
    numerics = data["numerics"]
    assert {numerics[k]["result"] for k in ("long_reference", "long_cross_backend", "long_answer")} == {PASSED}
    calls = [json.loads(line) for line in (envlog / "perplexity.calls").read_text().splitlines()]
    long_cpu, long_own, long_gpu = calls[2], calls[3], calls[4]
    for call in (long_cpu, long_own, long_gpu):
        assert [call[call.index(f) + 1] for f in ("-c", "-b", "-ub", "--chunks")] == ["4096", "2048", "512", "1"]
    assert long_cpu[long_cpu.index("-dev") + 1] == "none" and long_cpu[long_cpu.index("-f") + 1].endswith(
        "moby-dick.txt"
    )
    assert long_gpu[long_gpu.index("-dev") + 1] == "Vulkan0" and "--kl-divergence" in long_gpu
    base = Path(long_cpu[long_cpu.index("--kl-divergence-base") + 1])
    assert not base.exists()  # the full log-probabilities are not kept
    # the GPU's own run writes its distributions (no --kl-divergence): judged against this device's last good run
    assert long_own[long_own.index("-dev") + 1] == "Vulkan0" and "--kl-divergence" not in long_own
    assert not Path(long_own[long_own.index("--kl-divergence-base") + 1]).exists()
    own = numerics["long_device"]
    assert (
        own["result"] == NOT_CHECKED and own["about"]["device"] == "NVIDIA H200" and "cpu_variant" not in own["about"]
    )
    assert "4096 tokens, linux, GPU NVIDIA H200, in baselines.yaml" in own["detail"]
    assert Path(own["topk"]).name == "long-gpu.topk" and Path(own["topk"]).is_file()
    kept = Path(numerics["long_reference"]["topk"])
    assert kept.is_file() and kept.stat().st_size < 100_000
    assert numerics["long_reference"]["figures"]["windows"][0]["from"] == 2048
    assert numerics["long_cross_backend"]["detail"].startswith("4096 tokens (-b 2048 -ub 512): mean KLD 0.00570")
    answer = numerics["long_answer"]
    assert answer["on"] == "GPU" and answer["prompt_tokens"] >= 3000
    assert answer["detail"].startswith("the pass key 71432 recalled after")
    request = json.loads((envlog / "request.json").read_text())
    assert request["prompt"].index("The pass key is 71432") < 400 < len(request["prompt"]) - 100
    assert request["prompt"].endswith("What is the pass key? The pass key is") and request["temperature"] == 0
    server = json.loads((envlog / "llama-server.argv.json").read_text())
    assert "-b" not in server and "-ub" not in server  # llama-server's own defaults, as users run it
    assert server[server.index("-dev") + 1] == "Vulkan0"


def test_a_fault_past_position_3072_on_every_backend_fails_on_the_cpu_against_the_last_good_build(tmp_path, smollm2):
    """rockbuild's mutant (b) in miniature: the GPU agrees with the CPU (both are wrong alike), the perplexity of the
    short check is untouched; only the reference sees it, and says from which position."""
    report, data, _ = smoke(tmp_path, smollm2, {"long": "drift"})
    ref = data["numerics"]["long_reference"]
    assert not report.ok and ref["result"] == FAILED
    assert data["numerics"]["long_cross_backend"]["result"] == PASSED
    assert data["numerics"]["cpu"]["result"] == PASSED
    assert "the CPU's long context differs from the last good build's: mean KLD" in ref["detail"]
    assert "(from position 3072: " in ref["detail"] and "from position 2560" not in ref["detail"]
    assert any(f.startswith("numerics: long_reference: ") for f in report.failures)
    assert data["numerics"]["summary"]["long_reference"] == FAILED


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("forget", "asked for the pass key 71432 after"),
        ("short", "the prompt was 900 tokens, fewer than 3000: not a long prompt"),
    ],
)
def test_a_forgotten_pass_key_or_a_short_prompt_fails(tmp_path, smollm2, mode, words):
    report, data, _ = smoke(tmp_path, smollm2, {"long": mode})
    answer = data["numerics"]["long_answer"]
    assert not report.ok and answer["result"] == FAILED and words in answer["detail"], answer["detail"]


def test_a_model_trained_on_a_short_context_leaves_the_pass_key_not_checked(tmp_path, smollm2):
    """The tiny Qwen3 of the e2e (512 tokens of training context): llama-server caps its context and refuses the pass
    key's prompt; that is the model's limit, not the bundle's. The same refusal without the cap is a failure."""
    report, data, _ = smoke(tmp_path, smollm2, {"long": "small-model"})
    answer = data["numerics"]["long_answer"]
    assert answer["result"] == NOT_CHECKED and report.ok, (answer, report.failures)
    assert answer["detail"].startswith(
        "the model was trained on 512 tokens of context, fewer than the pass-key prompt's 4739"
    )
    report, data, _ = smoke(tmp_path / "b", smollm2, {"long": "small-context"})
    answer = data["numerics"]["long_answer"]
    assert (
        not report.ok and answer["result"] == FAILED and answer["detail"] == "/completion answered HTTP 400 on the GPU"
    )


def test_a_long_cpu_run_that_dies_fails_and_the_gpu_is_not_judged(tmp_path, smollm2):
    report, data, _ = smoke(tmp_path, smollm2, {"long": "cpu-crash"})
    numerics = data["numerics"]
    assert not report.ok and numerics["long_reference"]["result"] == FAILED
    assert "llama-perplexity on the CPU, 4096 tokens: killed by SIGSEGV" in numerics["long_reference"]["detail"]
    assert numerics["long_cross_backend"] == {"result": NOT_CHECKED, "detail": "the CPU's long run failed"}


def test_no_reference_is_not_checked_and_rockbuild_baseline_records_the_nights_top_k(tmp_path, smollm2, run_rockbuild):
    report, data, _ = smoke(tmp_path / "first", smollm2, {}, reference=None)
    ref = data["numerics"]["long_reference"]
    assert report.ok and ref["result"] == NOT_CHECKED and "no reference for " + SMOLLM2 in ref["detail"]
    assert "4096 tokens, linux, in baselines.yaml" in ref["detail"] and ref["about"]["os"] == "linux"
    smoke_json = tmp_path / "first" / "out" / "linux-gfx1151" / "smoke.json"
    target = tmp_path / "baselines.yaml"
    target.write_text(data_path("config", "baselines.yaml").read_text().split("\nreferences:\n")[0] + "\n")
    result = run_rockbuild(
        "baseline",
        str(smoke_json),
        "--file",
        str(target),
        "--only",
        "long",
        "--measured",
        "stand-in, 2026-12-05",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    recorded = json.loads(result.stdout)["reference"]
    assert recorded["old"] is None and recorded["new"]["ctx"] == 4096 and recorded["new"]["max_mean_kld"] == 0.001
    written = load_baselines(target)
    assert written.entries and written.references[0].file.is_file()  # the perplexity baselines kept beside it
    assert written.references[0].file.parent == tmp_path / "references"
    # the next smoke is judged against it: the same run passes, a drift fails
    report, data, _ = smoke(tmp_path / "again", smollm2, {}, reference=str(target))
    assert report.ok and data["numerics"]["long_reference"]["result"] == PASSED
    report, data, _ = smoke(tmp_path / "drift", smollm2, {"long": "drift"}, reference=str(target))
    assert data["numerics"]["long_reference"]["result"] == FAILED


def test_a_model_with_a_long_text_that_is_not_the_pinned_one_fails_every_long_check(tmp_path, smollm2):
    job, _ = make_bundle(tmp_path, {"vk": "lavapipe", "numerics": "pass"})
    config = parse_numerics_config(load_smoke_config()["numerics"])
    assert config.long is not None
    wrong = write(tmp_path / "moby-dick.txt", "Call me Ishmael.\n")
    config = replace(config, long=replace(config.long, text=wrong))
    report = run_smoke(
        job,
        smollm2,
        replace(fast_smoke(), numerics=config, expect_gpu="yes"),
        kfd_topology=tmp_path / "no-kfd",
        backends=REGISTRY,
    )
    data = json.loads((job / "smoke.json").read_text())["numerics"]
    assert not report.ok
    for name in ("long_reference", "long_cross_backend", "long_answer"):
        assert data[name]["result"] == FAILED and "is not the pinned one" in data[name]["detail"]


def test_the_cpus_long_run_uses_one_cpu_variant_alone_as_its_reference_did(tmp_path, smollm2):
    """Two variant modules of one build differ (haswell against zen4 on SmolLM2: mean KLD 0.0023), one module on two
    machines does not: the long CPU run loads the haswell module alone, from a folder of the bundle without the
    others, removed afterwards; a reference recorded with another variant is not judged against it."""
    job, envlog = make_bundle(tmp_path, {"vk": "lavapipe", "numerics": "pass", "vk_name": "NVIDIA H200"})
    for variant in ("haswell", "zen4"):
        (job / "bundle" / f"libggml-cpu-{variant}.so").write_bytes(b"")
    config = parse_numerics_config(load_smoke_config()["numerics"])
    assert config.long is not None and config.long.cpu_variant == "haswell"
    clean = read_base(write_long_base(tmp_path / "clean.kld", 4096))
    refs = {}
    for variant in ("haswell", "zen4"):
        topk = write_topk(top_k(clean, about={"cpu_variant": variant}), tmp_path / f"{variant}.topk")
        refs[variant] = tuple(replace(r, file=topk, sha256="0" * 64) for r in config.baselines.references)
    runs = {}
    for variant in ("haswell", "zen4"):
        numerics = replace(config, baselines=replace(config.baselines, references=refs[variant]))
        run_smoke(
            job,
            smollm2,
            replace(fast_smoke(), numerics=numerics, expect_gpu="yes", cpu_variants="none"),
            kfd_topology=tmp_path / "no-kfd",
            backends=REGISTRY,
        )
        runs[variant] = json.loads((job / "smoke.json").read_text())["numerics"]["long_reference"]
    assert runs["haswell"]["result"] == PASSED and runs["haswell"]["about"]["cpu_variant"] == "haswell"
    assert runs["zen4"]["result"] == NOT_CHECKED
    assert runs["zen4"]["detail"].startswith("the reference was recorded with CPU variant zen4, this run had haswell")
    long_cpu = [
        json.loads(line)
        for line in (envlog / "perplexity.calls").read_text().splitlines()
        if "-ub" in line and '--kl-divergence"' not in line
    ][0]
    program = Path(long_cpu[0])
    assert program.name == "llama-perplexity" and program.parent.name == "haswell"
    assert program.parent.parent.parent == job  # beside the bundle, so that hard links work
    # and run from there: ggml also loads CPU modules from the current folder, the bundle's would all come back
    calls = (envlog / "perplexity.calls").read_text().splitlines()
    cwds = (envlog / "perplexity.cwd").read_text().splitlines()
    assert {cwd for line, cwd in zip(calls, cwds, strict=True) if json.loads(line)[0] == str(program)} == {
        str(program.parent)
    }
    assert not program.parent.exists()  # the one-variant folder is gone
    gpu = [
        json.loads(line)
        for line in (envlog / "perplexity.calls").read_text().splitlines()
        if "-ub" in line and '--kl-divergence"' in line
    ][0]
    assert Path(gpu[0]).parent == job / "bundle"  # the GPU runs the bundle itself


def test_on_a_software_device_the_pass_key_runs_on_the_cpu_and_the_long_gpu_run_is_not_made(tmp_path, smollm2):
    """lavapipe is the CPU under a Vulkan driver: on 2 cores its pass key took 553 s (50 s on the CPU) and the GPU's
    4,096 tokens longer still; the CPU's long run and the pass key on the CPU stand for them."""
    report, data, envlog = smoke(tmp_path, smollm2, {"vk_name": "llvmpipe (LLVM 22.1.8, 256 bits)"})
    numerics = data["numerics"]
    assert report.ok, report.failures
    assert numerics["long_reference"]["result"] == PASSED and numerics["long_answer"]["on"] == "CPU"
    assert numerics["long_cross_backend"]["result"] == NOT_CHECKED
    assert numerics["long_device"]["result"] == NOT_CHECKED and "software device" in numerics["long_device"]["detail"]
    server = json.loads((envlog / "llama-server.argv.json").read_text())
    assert server[server.index("-dev") + 1] == "none" and server[server.index("-ngl") + 1] == "0"
    calls = [line for line in (envlog / "perplexity.calls").read_text().splitlines() if "-ub" in line]
    assert len(calls) == 1  # the CPU's long run only


def test_a_fault_past_position_3072_in_the_gpus_code_only_fails_against_its_own_last_good_run(
    tmp_path, smollm2, run_rockbuild
):
    """rockbuild's mutants (e) and (f) on a real GPU, in miniature: the GPU's figures against the CPU stay inside the
    limits set for another backend's noise (on the H100 the long comparison moved 0.00379 -> 0.00462, limit 0.017),
    the CPU is untouched; judged per window against this device's own last good run (recorded by `rockbuild baseline
    --only device`), it fails from the position where it moved."""
    report, data, _ = smoke(tmp_path / "clean", smollm2, {})
    assert report.ok and data["numerics"]["long_device"]["result"] == NOT_CHECKED
    target = tmp_path / "baselines.yaml"
    target.write_text(data_path("config", "baselines.yaml").read_text().split("\nreferences:\n")[0] + "\n")
    smoke_json = tmp_path / "clean" / "out" / "linux-gfx1151" / "smoke.json"
    result = run_rockbuild("baseline", str(smoke_json), "--file", str(target), "--only", "device", "--json")
    assert result.returncode == 0, result.stderr
    recorded = json.loads(result.stdout)["device"]["new"]
    assert recorded["device"] == "NVIDIA H200" and recorded["variant"] == "" and recorded["ctx"] == 4096
    assert recorded["file"] == "SmolLM2-135M-Instruct.Q4_1-moby-dick-4096-NVIDIA-H200.topk"
    assert recorded["measured"].startswith("GPU NVIDIA H200 long run, smoke of ")
    written = load_baselines(target)
    assert [(r.device, r.variant) for r in written.references] == [("NVIDIA H200", "")]
    assert 'device: "NVIDIA H200"' in target.read_text()
    # the CPU's reference of the same model is another entry: the GPU's is found by its device alone
    assert written.reference(SMOLLM2, "moby-dick.txt", 4096, "0" * 64, "linux") is None
    # the next night on the same GPU: the same numbers pass, per window
    report, data, _ = smoke(tmp_path / "again", smollm2, {}, reference=str(target))
    own = data["numerics"]["long_device"]
    assert report.ok and own["result"] == PASSED, own
    assert own["figures"]["mean_kld"] == 0.0 and [w["from"] for w in own["figures"]["windows"]] == [
        2048,
        2560,
        3072,
        3584,
    ]
    # a fault in the GPU's code from position 3,072: the GPU against the CPU passes, against itself it fails there
    report, data, _ = smoke(tmp_path / "fault", smollm2, {"long": "gpu-drift"}, reference=str(target))
    numerics = data["numerics"]
    assert numerics["long_cross_backend"]["result"] == PASSED and numerics["long_reference"]["result"] == NOT_CHECKED
    own = numerics["long_device"]
    assert not report.ok and own["result"] == FAILED
    assert own["detail"].startswith("the GPU's long context differs from this GPU's last good run: mean KLD ")
    assert "from position 3072: " in own["detail"] and "from position 3584: " in own["detail"]
    assert "from position 2048" not in own["detail"]
    assert any(f.startswith("numerics: long_device: ") for f in report.failures)
    assert numerics["summary"]["long_device"] == FAILED and numerics["summary"]["long_device_kld"] > 0
    # another GPU has no reference of its own: not checked, never judged against the H200's numbers
    report, data, _ = smoke(tmp_path / "other", smollm2, {"vk_name": "AMD Radeon 8060S"}, reference=str(target))
    own = data["numerics"]["long_device"]
    assert own["result"] == NOT_CHECKED and "GPU AMD Radeon 8060S, in baselines.yaml" in own["detail"]


def test_rockbuild_baseline_only_device_without_a_gpu_run_is_a_usage_error(tmp_path, smollm2, run_rockbuild):
    report, data, _ = smoke(tmp_path, smollm2, {"vk_name": "llvmpipe (LLVM 22.1.8, 256 bits)"})
    assert data["numerics"]["long_device"]["result"] == NOT_CHECKED
    smoke_json = tmp_path / "out" / "linux-gfx1151" / "smoke.json"
    target = tmp_path / "baselines.yaml"
    target.write_text("tolerance: 0.02\n")
    result = run_rockbuild("baseline", str(smoke_json), "--file", str(target), "--only", "device")
    assert result.returncode == 2 and "has no GPU long run to record" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and target.read_text() == "tolerance: 0.02\n"


def test_a_tie_at_the_top_is_the_same_answer_whichever_id_won_it(tmp_path):
    """Two tokens of one quantized log-probability at the top of a row (common on a GPU): the H100 repeated its long
    run at KLD 0.000000 yet "99.8 % same top token", the reference's top-k having ordered a tie otherwise than argmax.
    top_k orders a tie by the lower id (argmax's choice); compare counts the reference's top token as the same answer
    wherever it ties the run's."""
    n_ctx, n_vocab = 8, 4
    rows = n_ctx - 1 - n_ctx // 2
    logp = [-0.9, -0.9, -2.0, -3.0]  # tokens 0 and 1 tie at the top of every row
    lo, hi = min(logp), max(logp)
    scale = (hi - lo) / 65535
    row = struct.pack("<ff", scale, lo) + struct.pack("<4H", *[round((x - lo) / scale) for x in logp])
    path = tmp_path / "tie.kld"
    path.write_bytes(
        b"_logits_" + struct.pack("<Iii", n_ctx, n_vocab, 1) + struct.pack(f"<{n_ctx}i", *range(n_ctx)) + row * rows
    )
    base = read_base(path)
    ref = top_k(base, 3)
    assert ref.ids[:, 0].tolist() == [0] * rows and ref.ids[:, 1].tolist() == [1] * rows
    # a reference that ordered the tie the other way round (another implementation, another numpy)
    swapped = replace(ref, ids=ref.ids[:, [1, 0, 2]].copy(), logp=ref.logp[:, [1, 0, 2]].copy())
    for reference in (ref, swapped):
        got = compare(base, reference)
        assert (got.mean_kld, got.same_top) == (0.0, 100.0)


def test_a_gpu_long_run_that_dies_fails_long_device_and_loses_nothing_else(tmp_path, smollm2):
    report, data, _ = smoke(tmp_path, smollm2, {"long": "gpu-crash"})
    numerics = data["numerics"]
    own = numerics["long_device"]
    assert not report.ok and own["result"] == FAILED
    assert own["detail"] == "llama-perplexity on NVIDIA H200, 4096 tokens: killed by SIGSEGV (exit code -11)"
    assert numerics["long_reference"]["result"] == PASSED and numerics["long_cross_backend"]["result"] == PASSED
    assert not (tmp_path / "out" / "linux-gfx1151" / "smoke-logs" / "numerics" / "long-gpu.kld").exists()
