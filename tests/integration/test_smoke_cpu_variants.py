"""The smoke's cpu_variants step (rockbuild/smoke/variants.py): every CPU variant module of a bundle, alone in a folder
linked from it, asked whether this "CPU" runs it, then a real batch (pp512 and a short tg) and the model's known
answers with that variant only.

The bundle is tests/support/cpu_variants.py's stand-in: fake ``libggml-cpu-<variant>.so`` files and Python programs
that pick among the ones in their folder as ggml does (``supported``: what this "CPU" runs), log the
``load_backend`` line and die of a real SIGILL on pp512 with a variant in ``crashes``."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path

import click
import jsonschema
import pytest
from click.testing import CliRunner
from support.cpu_variants import RANK, make_variant_bundle
from support.paths import REPO
from support.smoke import fast_smoke, header_model, make_bundle

from rockbuild.backends import REGISTRY
from rockbuild.core.errors import ConfigError, SmokeError
from rockbuild.core.records import SmokeRecord
from rockbuild.smoke.baselines import load_baselines
from rockbuild.smoke.config import SmokeConfig, VariantReferenceShape, load_smoke_config
from rockbuild.smoke.numerics import KnownAnswer, NumericsConfig
from rockbuild.smoke.runner import SmokeOptions, run_smoke
from rockbuild.smoke.variants import VariantReference, VariantRuns, one_variant_folder, run_cpu_variants

FAST = fast_smoke()
ONLY_THE_STEP = SmokeOptions(timeouts=FAST.timeouts, runs=())  # no cli, server or bench run: the step alone
SCHEMA = json.loads((REPO / "docs" / "schemas" / "smoke.schema.json").read_text())


@pytest.fixture
def model(tmp_path):
    return header_model(tmp_path)


def variant_job(tmp_path: Path, variants=RANK, **behaviour) -> Path:
    """A job folder whose bundle ships ``variants`` and whose llama-cli and llama-bench pick among them."""
    job, _ = make_bundle(tmp_path)
    make_variant_bundle(job / "bundle", variants, **behaviour)
    return job


def smoke_json(job: Path) -> dict:
    data = json.loads((job / "smoke.json").read_text())
    assert not [e.message for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(data)]
    record = SmokeRecord.read(job / "smoke.json")
    assert record is not None and record.cpu_variants is not None
    assert record.cpu_variants.to_dict() == data["cpu_variants"]  # typed, and read back as written
    return data


def by_variant(data: dict) -> dict[str, dict]:
    return {v["variant"]: v for v in data["cpu_variants"]["variants"]}


def test_every_variant_this_cpu_runs_passes_alone_and_the_picked_one_is_recorded(tmp_path, model):
    log = tmp_path / "runs.jsonl"
    job = variant_job(tmp_path, supported=RANK[:-1], speeds={"x64": 0.1, "zen4": 2.0}, log=log)
    report = run_smoke(job, model, FAST, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    assert report.ok, report.failures
    data = smoke_json(job)
    step = data["cpu_variants"]
    assert step["result"] == "passed" and step["picked"] == "zen4"  # sapphirerapids scores 0 on this "CPU"
    assert step["detail"] == ("14 CPU variants: 13 passed, 1 not runnable here; ggml picks zen4 from the whole bundle")
    # the step's record as the stage made it: what tg_tps measured, where the logs are, how long, no failure of its own
    assert list(step) == ["result", "detail", "picked", "variants", "problem", "seconds", "logs", "tg_test"]
    assert step["tg_test"] == "tg8" and step["problem"] is None and step["seconds"] > 0
    assert step["logs"] == str(job / "smoke-logs" / "cpu-variants")
    variants = by_variant(data)
    assert sorted(variants) == sorted(RANK)
    assert variants["sapphirerapids"] == {
        "variant": "sapphirerapids",
        "runnable": False,
        "result": "not runnable here",
        "pp512_tps": None,
        "tg_tps": None,
        "known_answers": "not run",
        "seconds": variants["sapphirerapids"]["seconds"],
        "failure": None,
        "reference": None,
    }
    assert variants["zen4"]["pp512_tps"] == 200.0 and variants["zen4"]["tg_tps"] == 20.0  # zen4's own figures
    assert variants["x64"]["pp512_tps"] == pytest.approx(10.0) and variants["x64"]["result"] == "passed"
    assert all(
        v["runnable"] and v["failure"] is None and v["known_answers"] == "not run"
        for name, v in variants.items()
        if name != "sapphirerapids"
    )
    # each batch ran in its own one-variant folder, on that variant, pp512 and a short tg once, on the CPU only
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    alone = [r for r in runs if r["program"] == "llama-bench" and "/.cpu-variants-" in r["cwd"]]
    assert sorted(r["variant"] for r in alone) == sorted(RANK[:-1])
    for run in alone:
        args = run["args"]
        assert run["cwd"].endswith("/" + run["variant"])
        # every CPU of the machine, up to 16: fast enough for 14 variants a night
        assert [args[args.index(f) + 1] for f in ("-p", "-n", "-r", "-t", "-dev", "-ngl")] == [
            "512",
            "8",
            "1",
            str(min(os.cpu_count() or 1, 16)),
            "none",
            "0",
        ]
    text = report.render()
    assert "  [ok] cpu variants in " in text
    assert "         zen4 (picked): passed (pp512 200.0 t/s, tg8 20.0 t/s) in " in text
    assert "         sapphirerapids: not runnable here" in text
    assert not list(job.glob(".cpu-variants-*"))  # the one-variant folders are gone, the bundle untouched
    assert len(list((job / "bundle").glob("libggml-cpu-*.so"))) == len(RANK)


def test_a_variant_that_dies_of_sigill_on_pp512_fails_the_smoke_naming_it(tmp_path, model):
    # ggml picks zen4 here, so the rest of the smoke never runs icelake: only the step sees it die
    job = variant_job(tmp_path, ("x64", "haswell", "icelake", "zen4"), crashes=("icelake",))
    report = run_smoke(job, model, ONLY_THE_STEP, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    assert report.failures == ("CPU variant icelake: llama-bench died of SIGILL (illegal instruction) on pp512",)
    with pytest.raises(SmokeError, match="failed: CPU variant icelake: llama-bench died of SIGILL"):
        report.raise_if_failed()
    data = smoke_json(job)
    assert data["ok"] is False and data["cpu_variants"]["result"] == "failed"
    assert data["cpu_variants"]["picked"] == "zen4"
    icelake = by_variant(data)["icelake"]
    assert icelake["runnable"] is True and icelake["result"] == "failed" and icelake["pp512_tps"] is None
    assert [by_variant(data)[v]["result"] for v in ("x64", "haswell", "zen4")] == ["passed"] * 3
    log = (job / "smoke-logs" / "cpu-variants" / "icelake" / "llama-bench.log").read_text()
    assert "loaded CPU backend from" in log and "/icelake/libggml-cpu-icelake.so" in log
    assert "         icelake: failed in " in report.render()


def test_variants_this_cpu_cannot_run_are_not_runnable_here_never_failed(tmp_path, model):
    job = variant_job(
        tmp_path, ("x64", "haswell", "skylakex", "zen4"), supported=("x64", "haswell"), crashes=("skylakex", "zen4")
    )  # would die, but this "CPU" never loads them
    report = run_smoke(job, model, ONLY_THE_STEP, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    assert report.ok, report.failures
    data = smoke_json(job)
    assert data["cpu_variants"]["detail"] == (
        "4 CPU variants: 2 passed, 2 not runnable here; ggml picks haswell from the whole bundle"
    )
    assert {v: (e["runnable"], e["result"]) for v, e in by_variant(data).items()} == {
        "haswell": (True, "passed"),
        "skylakex": (False, "not runnable here"),
        "x64": (True, "passed"),
        "zen4": (False, "not runnable here"),
    }


def test_known_answers_run_with_each_variant_alone_and_a_wrong_one_fails(tmp_path, model):
    log = tmp_path / "runs.jsonl"
    job = variant_job(tmp_path, ("x64", "haswell", "zen4"), programs=("llama-bench", "llama-completion"), log=log)
    # the stand-in answers "the stand-in says hello from <variant>": zen4's answer is the wrong one here
    answers = NumericsConfig(
        text=tmp_path / "no-text",
        answers={
            "model.gguf": (KnownAnswer("The capital of France is", r"\s*the stand-in says hello from (x64|haswell)\b"),)
        },
    )
    options = SmokeOptions(timeouts=FAST.timeouts, runs=(), numerics=answers)
    report = run_smoke(job, model, options, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    data = smoke_json(job)
    variants = by_variant(data)
    assert [variants[v]["known_answers"] for v in ("x64", "haswell", "zen4")] == ["passed", "passed", "failed"]
    assert variants["zen4"]["pp512_tps"] == 100.0  # its batch ran, its answer is what is wrong
    # the numerics step on the whole bundle (zen4 picked) says so too
    assert [f.split(":")[0] for f in report.failures] == ["numerics", "CPU variant zen4"]
    assert report.failures[1].startswith(
        "CPU variant zen4: known answer 'The capital of France is' wrong: answered "
        "'\\nthe stand-in says hello from zen4"
    )
    completions = [json.loads(line) for line in log.read_text().splitlines()]
    alone = [r for r in completions if r["program"] == "llama-completion" and "/.cpu-variants-" in r["cwd"]]
    assert sorted(r["variant"] for r in alone) == ["haswell", "x64", "zen4"]
    assert all(r["args"][r["args"].index("-dev") + 1] == "none" for r in alone)


def test_the_steps_own_failure_is_in_its_record_and_read_back_from_smoke_json(tmp_path, model):
    # no variant loads from the whole bundle: a failure of the step as a whole, no variant's; smoke.json's cpu_variants
    # says why (problem), so its failures come back from the file alone, as the smoke reported them
    job = variant_job(tmp_path, ("haswell", "zen4"), supported=("x64",))
    report = run_smoke(job, model, ONLY_THE_STEP, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    why = (
        "the whole bundle loads no CPU variant here (llama-bench --list-devices): ggml scored none of its 2 CPU "
        "variant modules on this CPU"
    )
    assert report.failures == (f"CPU variants: {why}",)
    data = smoke_json(job)
    assert data["cpu_variants"]["result"] == "failed" and data["cpu_variants"]["problem"] == why
    assert {v["result"] for v in data["cpu_variants"]["variants"]} == {"not runnable here"}  # none failed itself
    record = SmokeRecord.read(job / "smoke.json")
    assert record is not None and record.cpu_variants is not None
    assert record.cpu_variants.failures == report.failures and not record.cpu_variants.ok
    assert record.cpu_variants.render_lines() == report.record.cpu_variants.render_lines()  # what the console showed


def test_a_program_that_leads_back_to_the_whole_bundle_loads_another_variant_and_fails(tmp_path, model):
    job = variant_job(tmp_path, ("x64", "zen4"))
    bundle = job / "bundle"
    # llama-bench a link to a file of the bundle: from the one-variant folder it still starts in the bundle's folder
    (bundle / "llama-bench").rename(bundle / "llama-bench-real")
    (bundle / "llama-bench").symlink_to(bundle / "llama-bench-real")
    report = run_smoke(job, model, ONLY_THE_STEP, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    assert report.failures == ("CPU variant x64: llama-bench loaded libggml-cpu-zen4.so, not libggml-cpu-x64.so",)
    x64 = by_variant(smoke_json(job))["x64"]
    assert x64["runnable"] is False and x64["result"] == "failed"


def test_picked_only_none_and_a_bundle_without_variant_modules(tmp_path, model):
    job = variant_job(tmp_path / "a", ("x64", "haswell", "zen4"), crashes=("x64",))
    report = run_smoke(
        job,
        model,
        SmokeOptions(timeouts=FAST.timeouts, runs=(), cpu_variants="picked"),
        kfd_topology=tmp_path / "no-kfd",
        backends=REGISTRY,
    )
    assert report.ok, report.failures  # x64 would die, but only zen4, the one ggml picks, is run
    step = smoke_json(job)["cpu_variants"]
    assert [v["variant"] for v in step["variants"]] == ["zen4"] and step["picked"] == "zen4"
    assert step["detail"] == (
        "1 of 3 CPU variants: 1 passed; ggml picks zen4 from the whole bundle "
        "(--cpu-variants picked: the others not checked)"
    )

    report = run_smoke(
        job,
        model,
        SmokeOptions(timeouts=FAST.timeouts, runs=(), cpu_variants="none"),
        kfd_topology=tmp_path / "no-kfd",
        backends=REGISTRY,
    )
    assert report.ok and "cpu variants" not in report.render()
    assert smoke_json(job)["cpu_variants"] == {
        "result": "skipped",
        "detail": "turned off (--cpu-variants none, or smoke.yaml's run.cpu_variants.check: none)",
        "picked": None,
        "variants": [],
    }

    plain, _ = make_bundle(tmp_path / "b")  # programs with the CPU backend linked in: no module to choose
    report = run_smoke(plain, model, FAST, kfd_topology=tmp_path / "no-kfd", backends=REGISTRY)
    assert report.ok, report.failures
    assert smoke_json(plain)["cpu_variants"] == {
        "result": "skipped",
        "detail": "the bundle ships no CPU variant modules (libggml-cpu-<variant>.so): its CPU "
        "backend is linked in or built for one CPU",
        "picked": None,
        "variants": [],
    }


def test_the_one_variant_folder_holds_the_bundle_with_one_variant(tmp_path):
    bundle = make_variant_bundle(tmp_path / "bundle", ("x64", "zen4"))
    (bundle / "rocblas" / "library").mkdir(parents=True)
    (bundle / "rocblas" / "library" / "kernels.dat").write_bytes(b"k")
    (bundle / "libggml-base.so.0").write_bytes(b"base")
    (bundle / "libggml-base.so").symlink_to("libggml-base.so.0")
    folder = one_variant_folder(bundle, "libggml-cpu-zen4.so", tmp_path / "work" / "zen4")
    assert sorted(p.name for p in folder.iterdir()) == [
        "libggml-base.so",
        "libggml-base.so.0",
        "libggml-cpu-zen4.so",
        "libggml-rpc.so",
        "llama-bench",
        "llama-cli",
        "rocblas",
    ]
    assert (folder / "llama-bench").stat().st_ino == (bundle / "llama-bench").stat().st_ino  # a hard link
    assert (folder / "rocblas" / "library" / "kernels.dat").read_bytes() == b"k"
    assert (folder / "libggml-base.so").resolve() == folder / "libggml-base.so.0"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            "  cpu_variants: {check: sometimes}\n",
            ":{line}: run.cpu_variants.check must be one of all, picked, none, not 'sometimes'",
        ),
        (
            "  cpu_variants: {check: all, n_gen: 0}\n",
            ":{line}: run.cpu_variants.n_gen must be a whole number of tokens, at least 1, not 0",
        ),
        ("  cpu_variants:\n    chek: all\n", ":{next}: unknown key 'chek' in run.cpu_variants (did you mean check?)"),
        (
            "  cpu_variants: all\n",
            ":{line}: run.cpu_variants must be a mapping such as {{check: all, n_gen: 8}}, not the text 'all'",
        ),
        (
            "  cpu_variants: {check: all, reference: {ctx: 32}}\n",
            ":{line}: run.cpu_variants.reference.ctx must be a whole number of tokens, at least 64, not 32",
        ),
        (
            "  cpu_variants: {check: all, reference: 512}\n",
            ":{line}: run.cpu_variants.reference must be a mapping such as {{ctx: 512, chunks: 2}} or false, not",
        ),
        (
            "  cpu_variants: {check: all, reference: {chunk: 2}}\n",
            ":{line}: unknown key 'chunk' in run.cpu_variants.reference (did you mean chunks?)",
        ),
    ],
)
def test_a_bad_setting_in_smoke_yaml_is_a_config_error_naming_file_and_line(tmp_path, body, error):
    shipped = (REPO / "config" / "smoke.yaml").read_text()
    lines = [line for line in shipped.splitlines(keepends=True) if not line.startswith("  cpu_variants:")]
    at = next(i for i, line in enumerate(lines) if line.startswith("  timeouts:")) + 1
    path = tmp_path / "smoke.yaml"
    path.write_text("".join(lines[:at]) + body + "".join(lines[at:]))
    with pytest.raises(ConfigError) as caught:
        load_smoke_config(path)
    assert caught.value.message.startswith(str(path) + error.format(line=at + 1, next=at + 2))
    assert "\n" not in caught.value.message


def test_the_shipped_setting_and_the_command_line_option(tmp_path):
    from rockbuild.commands.common import CPU_VARIANTS

    shipped = load_smoke_config()
    assert shipped["run"]["cpu_variants"] == {"check": "all", "n_gen": 8, "reference": {"ctx": 512, "chunks": 1}}
    assert SmokeOptions.from_config(shipped).cpu_variants == "all"
    assert SmokeOptions.from_config(shipped).cpu_variant_reference == VariantReferenceShape(512, 1)
    assert SmokeOptions.from_config(SmokeConfig()).cpu_variant_reference is None  # not made unless configured
    assert SmokeOptions.from_config(SmokeConfig()).cpu_variants == "all"  # the default on a bundle with modules

    @click.command()
    @CPU_VARIANTS
    def smoke(cpu_variants):  # the option as `rockbuild smoke` takes it: None leaves smoke.yaml's setting
        overrides = {"cpu_variants": cpu_variants} if cpu_variants else {}
        click.echo(SmokeOptions.from_config(shipped, **overrides).cpu_variants)

    runner = CliRunner()
    assert runner.invoke(smoke, []).output == "all\n"
    assert runner.invoke(smoke, ["--cpu-variants", "picked"]).output == "picked\n"
    got = runner.invoke(smoke, ["--cpu-variants", "some"])
    assert got.exit_code == 2 and "'some' is not one of 'all', 'picked', 'none'" in got.output


def test_the_stand_in_dies_of_a_real_sigill_in_its_one_variant_folder(tmp_path):
    import subprocess

    bundle = make_variant_bundle(tmp_path / "b", ("x64", "icelake"), crashes=("icelake",))
    folder = one_variant_folder(bundle, "libggml-cpu-icelake.so", tmp_path / "icelake")
    got = subprocess.run(
        [str(folder / "llama-bench"), "-p", "512", "--progress"], cwd=folder, capture_output=True, text=True, timeout=30
    )
    assert got.returncode == -signal.SIGILL
    assert got.stderr.splitlines()[-1] == "llama-bench: benchmark 1/2: prompt run 1/5"


# -- each variant against its own reference (issue 59 item 2) ---------------------------------------------------------

SHA = "ab" * 32


def reference_runs(tmp_path: Path, baselines: Path) -> VariantRuns:
    text = tmp_path / "long.txt"
    text.write_text("the long text\n")
    ref = VariantReference(text, 64, 2, load_baselines(baselines), SHA, "linux")
    return VariantRuns(check="all", n_gen=8, threads=1, timeout=60, reference=ref)


def test_each_variant_is_judged_against_its_own_reference_and_a_drifted_one_fails(tmp_path, model, run_rockbuild):
    """First night: no reference, every runnable variant's top-k is kept and the step passes saying "not checked";
    `rockbuild baseline --only variants` records one reference per variant; the next night a variant whose numbers
    moved (a faulty kernel in a module this CPU may never pick) fails, naming the variant and its KLD."""
    baselines = tmp_path / "config" / "baselines.yaml"
    baselines.parent.mkdir()
    baselines.write_text("tolerance: 0.02\nbaselines: []\n")
    job = variant_job(tmp_path, ("haswell", "icelake", "zen4", "sapphirerapids"), supported=RANK[:-1])
    make_variant_bundle(job / "bundle", (), programs=("llama-perplexity",), supported=RANK[:-1])
    model = replace(model, sha256=SHA)
    logs = job / "smoke-logs" / "cpu-variants"
    first = run_cpu_variants(
        job / "bundle", model=model, runs=reference_runs(tmp_path, baselines), platform="linux", env={}, logs=logs
    )
    assert first.ok, first.failures
    checks = {v.variant: v.reference for v in first.variants}
    assert checks["sapphirerapids"] is None  # not runnable here: no run, no reference
    for name in ("haswell", "icelake", "zen4"):
        check = checks[name]
        assert (
            check is not None
            and check.result == "not checked"
            and "no reference of CPU variant " + name in check.detail
        )
        assert check.topk == str(logs / name / "reference.topk") and Path(check.topk).is_file()
        assert check.about["variant"] == name and check.about["ctx"] == 64 and check.about["chunks"] == 2
        assert not (logs / name / "reference.kld").exists()  # the whole-vocabulary file is folded, then deleted
    smoke = job / "smoke.json"
    SmokeRecord(ok=True, cpu_variants=first, finished="2026-12-07T23:00:00Z").write(smoke)
    got = run_rockbuild("baseline", str(smoke), "--file", str(baselines), "--only", "variants", "--json")
    assert got.returncode == 0, got.stderr
    recorded = json.loads(got.stdout)["variants"]
    assert [r["new"]["variant"] for r in recorded] == ["haswell", "icelake", "zen4"]
    assert [r["new"]["file"] for r in recorded] == [f"model-long-64-{n}.topk" for n in ("haswell", "icelake", "zen4")]
    written = load_baselines(baselines)
    assert {(r.variant, r.max_mean_kld, r.min_same_top) for r in written.references} == {
        (n, 0.001, 99.0) for n in ("haswell", "icelake", "zen4")
    }
    assert "variant: icelake" in baselines.read_text()

    # the next night: icelake's module computes other numbers
    make_variant_bundle(job / "bundle", (), programs=("llama-perplexity",), supported=RANK[:-1], drifts=("icelake",))
    second = run_cpu_variants(
        job / "bundle", model=model, runs=reference_runs(tmp_path, baselines), platform="linux", env={}, logs=logs
    )
    assert not second.ok
    by_name = {v.variant: v for v in second.variants}
    assert [v.reference.result for v in (by_name["haswell"], by_name["zen4"])] == ["passed", "passed"]
    assert by_name["zen4"].reference.mean_kld == 0.0 and by_name["zen4"].reference.same_top == 100.0
    icelake = by_name["icelake"]
    assert icelake.result == "failed" and icelake.reference.result == "failed"
    assert icelake.reference.same_top == pytest.approx(100 * 23 / 31)  # every fourth of 31 positions a chunk moved
    assert second.failures == (
        f"CPU variant icelake: its numbers differ from its own reference: mean KLD {icelake.reference.mean_kld:.5f} "
        "> 0.001, same top token 74.2 % < 99 % over 62 positions (reference: CPU variant icelake alone, smoke of "
        "2026-12-07T23:00:00Z)",
    )
    assert "KLD 0.000000 against its reference" in by_name["zen4"].describe("tg8")


def test_without_a_perplexity_program_or_text_the_reference_is_not_checked(tmp_path, model):
    job = variant_job(tmp_path, ("haswell",), supported=RANK)
    (tmp_path / "baselines.yaml").write_text("tolerance: 0.02\n")
    runs = reference_runs(tmp_path, tmp_path / "baselines.yaml")
    done = run_cpu_variants(job / "bundle", model=model, runs=runs, platform="linux", env={}, logs=tmp_path / "logs")
    assert done.ok and done.variants[0].reference.result == "not checked"
    assert done.variants[0].reference.detail == "the bundle has no llama-perplexity"


def test_baseline_only_variants_of_a_smoke_without_their_runs_is_one_line_exit_2(tmp_path, model, run_rockbuild):
    job = variant_job(tmp_path, ("haswell",), supported=RANK)
    done = run_cpu_variants(
        job / "bundle", model=model, runs=VariantRuns(check="all"), platform="linux", env={}, logs=tmp_path / "logs"
    )
    SmokeRecord(ok=True, cpu_variants=done).write(job / "smoke.json")
    (tmp_path / "baselines.yaml").write_text("tolerance: 0.02\n")
    got = run_rockbuild(
        "baseline", str(job / "smoke.json"), "--file", str(tmp_path / "baselines.yaml"), "--only", "variants"
    )
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == [
        f"error: {job / 'smoke.json'} has no CPU variant's top-k to record (its smoke ran no variant against a "
        "reference: smoke.yaml's run.cpu_variants.reference)"
    ]
    assert (tmp_path / "baselines.yaml").read_text() == "tolerance: 0.02\n"  # nothing written
