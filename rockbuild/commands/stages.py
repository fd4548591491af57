"""The stages a maintainer runs one by one: matrix, fetch/rocm, build, bundle, audit, smoke, compare."""

from __future__ import annotations

from pathlib import Path

import click

from rockbuild import console
from rockbuild.backends import BACKENDS
from rockbuild.commands.common import (
    COMPILE,
    CONTEXT,
    CPU_VARIANTS,
    JOB_SELECTION,
    JSON,
    MATRIX_FILE,
    MODEL,
    POLICY,
    OrderedGroup,
    command,
    file,
    folder,
    matrix_jobs,
    options,
    quiet_with_json,
    settings,
    show,
    split_list,
)
from rockbuild.core.jobs import DEFAULT_BACKEND
from rockbuild.core.options import CompileFlags, JobSelection, ModelChoice

OS_CHOICE = click.Choice(["linux", "windows"])


@command
@JOB_SELECTION
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "github"]),
    default="table",
    show_default=True,
    help='table: for people; json: a list of jobs; github: {"include": [...]} for fromJson (also written to '
    "$GITHUB_OUTPUT as matrix=... when that variable is set).",
)
@click.option(
    "--families",
    "list_families",
    is_flag=True,
    help="List the GPU families instead (config/families.yaml): targets, tarball group per OS, and "
    "where TheRock publishes each from.",
)
@click.option(
    "--wide",
    is_flag=True,
    help="Every column of the table, however wide (default: the columns that fit the terminal or $COLUMNS, "
    "the others named under it; on a pipe without $COLUMNS, every column).",
)
@click.option("--json", "as_json", is_flag=True, help="The same as --format json (as every other command has it).")
def matrix(selection: JobSelection, fmt: str, list_families: bool, wide: bool, as_json: bool) -> None:
    """Expand the OS x GPU-family matrix into build jobs."""
    from rockbuild import matrix as matrix_mod
    from rockbuild.console import table_width

    if as_json:
        if fmt not in ("table", "json"):
            from rockbuild.core.errors import UsageError

            raise UsageError(f"--json and --format {fmt} ask for two outputs; give one")
        fmt = "json"

    width = table_width(settings().columns, wide=wide)
    if list_families:
        matrix_mod.print_families(settings().families, fmt, width)
        return

    matrix_mod.print_jobs(
        matrix_mod.select_jobs(matrix_jobs(selection), selection.only), fmt, settings().github.output, width
    )


ROCM_SOURCE = options(
    click.option("--family", default=None, help="GPU family (gfx110X, gfx110X-all, gfx1151, ...)."),
    click.option("--target", default=None, help="A single gfx target; its family's tarball is used."),
    click.option("--os", "os_name", type=OS_CHOICE, default=None, help="Tarball platform (default: this machine's)."),
    click.option(
        "--channel",
        type=click.Choice(["nightly", "dev", "prerelease", "stable"]),
        default="nightly",
        show_default=True,
        help="Which of config/rocm-channels.yaml's channels to read.",
    ),
    click.option(
        "--index-url", default=None, help="Read this index page or S3 listing instead of the channel's hosts."
    ),
)


def _groups(family: str | None, target: str | None, os_name: str) -> list[str]:
    from rockbuild.rocm.fetch import select_family, tarball_groups

    return tarball_groups(select_family(settings().families, family, target), os_name)


@command
@ROCM_SOURCE
@click.option(
    "--rocm-version",
    "version",
    default="latest",
    show_default=True,
    help="'latest' or an exact TheRock version (e.g. 10.2.0a20261128).",
)
@click.option("--version", "old_version", default=None, hidden=True)  # before 0.2; --version is the program's
@click.option(
    "--cache", type=folder(), default=None, help="Cache folder (default: $ROCKBUILD_CACHE or ~/.cache/rockbuild)."
)
@click.option("--dest", type=folder(), default=None, help="Extract here (default: <cache>/rocm/<tarball name>).")
@click.option("--sha256", default=None, help="Expected sha256 of the tarball (refuse anything else).")
@JSON
def fetch(
    family: str | None,
    target: str | None,
    os_name: str | None,
    channel: str,
    index_url: str | None,
    version: str,
    old_version: str | None,
    cache: Path | None,
    dest: Path | None,
    sha256: str | None,
    as_json: bool,
) -> None:
    """Find, download and safely extract a TheRock ROCm tarball."""
    import sys
    import time

    from rockbuild.core.errors import UsageError
    from rockbuild.rocm.fetch import fetch_entry, find_tarball

    if old_version is not None:
        raise UsageError(f"fetch --version is now --rocm-version: use --rocm-version {old_version}")
    os_name = os_name or settings().host_os
    console.set_quiet(as_json and not sys.stderr.isatty())  # a person at a terminal keeps the progress bar
    started = time.monotonic()
    entry = find_tarball(
        _groups(family, target, os_name), os_name=os_name, version=version, channel=channel, index_url=index_url
    )
    show(fetch_entry(entry, cache=cache or settings().cache, dest=dest, sha256=sha256, started=started), as_json)


@click.group(cls=OrderedGroup, context_settings=CONTEXT)
def rocm() -> None:
    """List TheRock ROCm versions or describe a ROCm root."""


@rocm.command("list", context_settings=CONTEXT)
@ROCM_SOURCE
@click.option("--limit", type=int, default=20, show_default=True, help="Show at most this many (0: all).")
@JSON
def rocm_list(
    family: str | None,
    target: str | None,
    os_name: str | None,
    channel: str,
    index_url: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Available ROCm tarballs for a family, newest first."""
    from rockbuild.rocm.fetch import VersionList, list_rocm_versions

    os_name = os_name or settings().host_os
    entries = list_rocm_versions(
        _groups(family, target, os_name), os_name=os_name, channel=channel, index_url=index_url
    )
    show(VersionList(tuple(entries[:limit] if limit > 0 else entries)), as_json)


@rocm.command("info", context_settings=CONTEXT)
@click.argument("root", type=click.Path(path_type=Path))
@JSON
def rocm_info(root: Path, as_json: bool) -> None:
    """Describe the ROCm root at ROOT (TheRock tree, /opt/rocm, or a Debian/Ubuntu install)."""
    from rockbuild.rocm.layout import detect_layout

    show(detect_layout(root), as_json)


@command
@click.option("--target", default=None, help="Build exactly this gfx target (gfx1151, ...).")
@click.option("--family", default=None, help="Build every target of this GPU family (gfx110X, ...).")
@click.option("--job", "job_id", default=None, help="Build this job of the matrix (linux-gfx1151, ...).")
@MATRIX_FILE
@click.option("--os", "os_name", type=OS_CHOICE, default=None, help="Job OS (default: this machine's).")
@click.option(
    "--rocm",
    "rocm_dir",
    type=folder(),
    default=None,
    help="Use this ROCm root (TheRock tree, /opt/rocm, or /usr with Debian's ROCm) instead of fetching one.",
)
@click.option("--rocm-version", default=None, help="Fetch this TheRock version (default: the job's, i.e. 'latest').")
@click.option(
    "--source", "source_dir", type=folder(), default=None, help="Build this llama.cpp tree instead of cloning one."
)
@click.option("--ref", default=None, help="llama.cpp tag (bNNNN), branch or full commit to clone (default: the job's).")
@click.option("--git-url", default=None, help="Clone from this URL (default: the upstream llama.cpp repository).")
@click.option("--build-number", default=None, help="llama.cpp build number of a tree git cannot tell (11312, b11312).")
@click.option("--commit", default=None, help="llama.cpp commit of a --source tree that is not a git checkout.")
@click.option(
    "--out",
    "out_dir",
    type=folder(),
    default=Path("out"),
    show_default=True,
    help="Output folder; the job's files go to OUT/<job-id>/.",
)
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel compile jobs (default: cores).")
@COMPILE
@click.option(
    "--bundle/--no-bundle",
    "make_bundle",
    default=True,
    show_default=True,
    help="End with a self-contained bundle in out/<job>/bundle (closure, kernels, $ORIGIN, audit).",
)
@click.option(
    "--inputs",
    "inputs_file",
    type=file(),
    default=None,
    help="The night's inputs.json (rockbuild resolve): build its llama.cpp commit against its ROCm tarball.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what the build would take and do (the job, the llama.cpp ref or commit, the ROCm tarball or "
    "root, every CMake definition, the folders), from local files alone: nothing is downloaded, cloned, "
    "written or compiled.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print build.json on stdout (the steps stay on stderr); with --dry-run, the plan.",
)
def build(
    target: str | None,
    family: str | None,
    job_id: str | None,
    matrix_file: Path | None,
    os_name: str | None,
    rocm_dir: Path | None,
    rocm_version: str | None,
    source_dir: Path | None,
    ref: str | None,
    git_url: str | None,
    build_number: str | None,
    commit: str | None,
    out_dir: Path,
    jobs: int | None,
    compile_flags: CompileFlags,
    make_bundle: bool,
    inputs_file: Path | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Compile llama.cpp with GGML_HIP for a job's gfx targets: ROCm -> source -> configure -> compile -> bundle."""
    from rockbuild.llamacpp.driver import BuildOptions
    from rockbuild.llamacpp.source import DEFAULT_GIT_URL
    from rockbuild.nightly import load_inputs
    from rockbuild.pipeline.job import build_and_bundle, plan_build_and_bundle

    build_options = BuildOptions(
        out_dir=out_dir,
        rocm_dir=rocm_dir,
        rocm_version=rocm_version,
        source_dir=source_dir,
        ref=ref,
        git_url=git_url or DEFAULT_GIT_URL,
        build_number=build_number,
        commit=commit,
        offline=compile_flags.offline,
        jobs=jobs,
        use_ccache=compile_flags.use_ccache,
        ccache_dir=compile_flags.ccache_dir,
        context=settings(),
        programs=settings().programs,
        web_ui=compile_flags.web_ui,
        web_ui_dist=compile_flags.web_ui_dist,
        cross=compile_flags.cross,
        patches=compile_flags.patches,
        patch_series=settings().but(patches_file=compile_flags.patch_series).patch_series
        if compile_flags.patches
        else None,
        common=compile_flags.common,
    )
    matrix = settings().but(matrix_file=matrix_file)
    inputs = load_inputs(inputs_file) if inputs_file is not None else None
    if inputs is not None:  # the night's record of the job: its inputs may name a job the matrix no longer has
        job = inputs.job(job_id or matrix.job(target=target, family=family, os_name=os_name).id)
    else:
        job = matrix.job(target=target, family=family, job_id=job_id, os_name=os_name)
    if dry_run:
        show(
            plan_build_and_bundle(
                build_options, job, inputs=inputs, make_bundle=make_bundle, git_url_flag=git_url is not None
            ),
            as_json,
        )
        return
    show(
        build_and_bundle(
            build_options,
            job,
            policy=settings().policy,
            inputs=inputs,
            make_bundle=make_bundle,
            prune_fatbin=compile_flags.prune_fatbin,
            git_url_flag=git_url is not None,
        ),
        as_json,
    )


@command
@click.option("--source", "source_dir", type=folder(exists=True), default=None, help="This llama.cpp tree.")
@click.option("--ref", default=None, help="Clone this llama.cpp tag, branch or full commit (into the cache).")
@click.option("--git-url", default=None, help="Clone from this URL (default: the upstream llama.cpp repository).")
@click.option(
    "--inputs",
    "inputs_file",
    type=file(exists=True),
    default=None,
    help="The night's inputs.json: its llama.cpp commit (the workflow builds the UI once for every leg).",
)
@click.option("--build-number", default=None, help="llama.cpp build number of a tree git cannot tell (11312, b11312).")
@click.option(
    "--out",
    "out_dir",
    type=folder(),
    required=True,
    help="Write the dist here, for rockbuild build --web-ui DIR (replaced when it is a dist already).",
)
@click.option("--offline", is_flag=True, help="No npm ci (it downloads): a cached dist or node_modules only.")
@click.option(
    "--cache",
    type=folder(),
    default=None,
    help="Cache folder (default: $ROCKBUILD_CACHE or ~/.cache/rockbuild); the UI's is CACHE/webui.",
)
@JSON
def webui(
    source_dir: Path | None,
    ref: str | None,
    git_url: str | None,
    inputs_file: Path | None,
    build_number: str | None,
    out_dir: Path,
    offline: bool,
    cache: Path | None,
    as_json: bool,
) -> None:
    """Build llama-server's web UI (tools/ui: npm ci, npm run build) once, for rockbuild build --web-ui DIR."""
    from rockbuild.core.errors import UsageError
    from rockbuild.llamacpp.source import DEFAULT_GIT_URL, checkout_ref, describe_tree
    from rockbuild.llamacpp.webui import WebUiOptions, export_web_ui

    if sum(x is not None for x in (source_dir, ref, inputs_file)) != 1:
        raise UsageError("give one of --source TREE, --ref REF or --inputs FILE")
    cache = cache or settings().cache
    out_dir = out_dir.absolute()
    log = out_dir.with_name(f"{out_dir.name}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("rockbuild webui\n", encoding="utf-8")
    if source_dir is not None:
        source = describe_tree(source_dir, build_number=build_number, log=log)
    else:
        url = git_url or DEFAULT_GIT_URL
        if inputs_file is not None:
            from rockbuild.nightly import load_inputs

            llama = load_inputs(inputs_file).llama_cpp
            ref, url, build_number = llama.commit, git_url or llama.url, build_number or llama.build_number
        assert ref is not None
        source = checkout_ref(ref, url=url, cache=cache, build_number=build_number, log=log, slot="webui")
    options = WebUiOptions(cache=cache / "webui", offline=offline, env=settings().env)
    show(export_web_ui(source.path, out_dir, build_number=source.build_number_value, options=options, log=log), as_json)


@command
@click.argument("build_dir", type=folder(exists=True))
@click.option(
    "--rocm",
    "rocm_root",
    default=None,
    type=folder(exists=True),
    help="The ROCm root the build used (TheRock tree, /opt/rocm, or a Debian root); not for Vulkan.",
)
@click.option("--targets", default=None, metavar="T[,T]", help="The job's gfx targets (kernel data is pruned to them)")
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default=DEFAULT_BACKEND,
    show_default=True,
    help="vulkan: no ROCm, no targets; the Vulkan loader and drivers stay the host's. cpu: no GPU backend.",
)
@click.option(
    "--os",
    "os_name",
    type=OS_CHOICE,
    default=None,
    help="The build's OS, for a build without a ROCm root to tell it (default: this machine's; windows for "
    "a cross build).",
)
@click.option(
    "--library-dir",
    "library_dirs",
    type=folder(exists=True),
    multiple=True,
    help="Also look for DLLs here (repeatable): a cross toolchain's runtime (build.json's cross.runtime_dirs).",
)
@click.option("--out", required=True, type=folder(), help="The bundle folder.")
@click.option("--dry-run", is_flag=True, help="Print the plan (files, sources, patches, kernel data); write nothing.")
@click.option("--strip", "strip_debug", is_flag=True, help="Strip debug sections from the shipped ELF files.")
@click.option(
    "--prune-fatbin/--no-prune-fatbin",
    default=None,
    help="Drop other GPU targets' code from shipped fat binaries (rocBLAS, rocSOLVER), proved against the "
    "originals by the root's clang-offload-bundler (default: when the root has it).",
)
@POLICY
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    callback=quiet_with_json,
    help="Print the report (or with --dry-run the plan) as JSON.",
)
def bundle(
    build_dir: Path,
    rocm_root: Path | None,
    targets: str | None,
    backend: str,
    os_name: str | None,
    library_dirs: tuple[Path, ...],
    out: Path,
    dry_run: bool,
    strip_debug: bool,
    prune_fatbin: bool | None,
    policy: Path | None,
    as_json: bool,
) -> None:
    """Make a self-contained bundle from a build: closure, dlopen extras, pruned kernel data, $ORIGIN run paths."""
    from rockbuild.backends import REGISTRY
    from rockbuild.bundle.plan import BundleRequest
    from rockbuild.bundle.plan import bundle as make_bundle

    request = BundleRequest.from_flags(
        build_dir,
        rocm_root,
        split_list(targets),
        out,
        backend=backend,
        backends=REGISTRY,
        policy=settings().but(policy_file=policy).policy,
        platform=os_name or settings().host_os,
        dry_run=dry_run,
        strip=strip_debug,
        prune_fatbin=prune_fatbin,
        library_dirs=library_dirs,
    )
    show(make_bundle(request), as_json)


@command
@click.argument("bundle_dir", metavar="BUNDLE", type=folder(exists=True))
@click.option("--targets", default=None, metavar="T[,T]", help="The job's gfx targets (default: from bundle.json).")
@click.option(
    "--max-version",
    "max_versions",
    multiple=True,
    metavar="FAMILY=VERSION",
    help="Fail if a file needs a newer symbol version, e.g. GLIBC=2.35, GLIBCXX=3.4.30. Repeatable.",
)
@click.option(
    "--rocm",
    "rocm_root",
    default=None,
    type=folder(exists=True),
    help="The ROCm root the bundle was made from: check its pruned fat binaries again against the "
    "originals there with the root's clang-offload-bundler.",
)
@POLICY
@JSON
def audit(
    bundle_dir: Path,
    targets: str | None,
    max_versions: tuple[str, ...],
    rocm_root: Path | None,
    policy: Path | None,
    as_json: bool,
) -> None:
    """Check that a bundle is self-contained and carries exactly the job's GPU code (non-zero exit on failure)."""
    from rockbuild.backends import REGISTRY
    from rockbuild.bundle.audit import audit_bundle, parse_max_versions
    from rockbuild.bundle.policy import load_policy

    report = audit_bundle(
        bundle_dir,
        split_list(targets) or None,
        policy=load_policy(policy) if policy else None,
        max_versions=parse_max_versions(max_versions),
        rocm=rocm_root,
        backends=REGISTRY,
    )
    show(report, as_json)
    report.raise_if_failed(bundle_dir)


@command
@click.argument("bundle_dir", metavar="BUNDLE", type=folder(exists=True))
@MODEL
@click.option(
    "--expect-gpu",
    type=click.Choice(["auto", "yes", "no"]),
    default="auto",
    show_default=True,
    help="yes: fail unless the weights sit in a ROCm (Vulkan) buffer; auto: yes when a GPU of the "
    "bundle's targets is present (a Vulkan bundle: when llama-cli --list-devices lists a Vulkan device).",
)
@click.option(
    "--device",
    default=None,
    metavar="NAME",
    help="Pin every run to this device (-dev, e.g. Vulkan1). Default: a Vulkan bundle expected on a GPU "
    "pins its first Vulkan device.",
)
@click.option(
    "--bench",
    "bench_preset",
    type=click.Choice(["smoke", "gpu"]),
    default="smoke",
    show_default=True,
    help="llama-bench's settings: smoke (short, proves it runs) or gpu (pp512/tg128, repeated: the figures a "
    "release publishes; the GPU smoke legs use it).",
)
@click.option(
    "--report",
    "report_path",
    type=file(),
    default=None,
    help="Write smoke.json here (default: the job folder, beside bundle/).",
)
@click.option(
    "--browser/--no-browser",
    default=None,
    help="Also chat with llama-server's web UI in a real browser (the system's chromium, through "
    "rockbuild[browser]) and save web-ui.png (default: smoke.yaml's run.browser.enabled).",
)
@CPU_VARIANTS
@click.option("--json", "as_json", is_flag=True, callback=quiet_with_json, help="Print smoke.json on stdout.")
def smoke(
    bundle_dir: Path,
    model: ModelChoice,
    expect_gpu: str,
    device: str | None,
    bench_preset: str,
    report_path: Path | None,
    browser: bool | None,
    cpu_variants: str | None,
    as_json: bool,
) -> None:
    """Run llama-cli, llama-server and llama-bench from a bundle, with no ROCm on the paths, then every other
    shipped program's --help (config/programs.yaml).

    \b
    Then, as smoke.yaml configures them:
    - every CPU variant module alone (--cpu-variants): pp512, a short
      tg and the model's known answers;
    - the numerics step (right answers, not just tokens): the GPU's KL
      divergence and same top token against the CPU (llama-perplexity on
      config/numerics.txt), the model's known greedy answers on the CPU
      and the GPU, and the CPU's perplexity against its baseline
      (config/baselines.yaml; `rockbuild baseline` re-baselines);
    - past one ubatch (numerics.long_context): one 4,096-token sequence
      with llama-server's -b 2048 -ub 512 on the CPU against the last good
      build's reference and on the GPU against the CPU, and a pass key
      recalled through llama-server's HTTP API after ~4,800 tokens;
    - every op on the GPU (smoke.yaml's ops): llama.cpp's test-backend-ops,
      built beside the bundle (<job>/tools/, never shipped), against the
      bundle's own backend: the full test on a real GPU, a named subset on
      lavapipe; one failed case fails the smoke, naming the op.
    A wrong number fails the smoke like a crash.
    """
    from rockbuild.backends import REGISTRY
    from rockbuild.smoke.models import provide_model
    from rockbuild.smoke.runner import SmokeOptions, check_bundle, run_smoke

    overrides: dict[str, object] = {"browser": browser} if browser is not None else {}
    if cpu_variants is not None:
        overrides["cpu_variants"] = cpu_variants
    options = SmokeOptions.from_config(
        settings().smoke,
        bench_preset=bench_preset,
        expect_gpu=expect_gpu,
        device=device,
        programs=settings().programs.programs,
        **overrides,
    )
    check_bundle(bundle_dir, options.runs)  # a folder that is no bundle fails here, before the model is downloaded
    chosen = provide_model(model.spec, vocab=model.vocab, context=settings(), smoke=settings().smoke)
    report = run_smoke(bundle_dir, chosen, options, backends=REGISTRY, report_path=report_path)
    show(report, as_json)
    report.raise_if_failed()


@command
@click.argument("bundle_dirs", metavar="BUNDLE...", nargs=-1, required=True, type=folder(exists=True))
@click.option(
    "--model",
    "model_spec",
    required=True,
    metavar="PATH|URL|tiny|smollm2|default",
    help="GGUF to benchmark (see rockbuild smoke; 'tiny' measures overheads, not a real model).",
)
@click.option(
    "--vocab", type=file(exists=True), default=None, help="llama.cpp's models/ggml-vocab-qwen2.gguf, for --model tiny."
)
@click.option("-p", "n_prompt", type=click.IntRange(min=0), default=512, show_default=True, help="Prompt tokens (pp).")
@click.option("-n", "n_gen", type=click.IntRange(min=0), default=128, show_default=True, help="Generated tokens (tg).")
@click.option(
    "-r",
    "repetitions",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Repetitions per test (the spread shown is their standard deviation).",
)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: the usable cores).")
@click.option("--ngl", "gpu_layers", type=int, default=99, show_default=True, help="Layers to offload (-ngl).")
@click.option(
    "--fa",
    "flash_attn",
    type=click.Choice(["0", "1"]),
    default=None,
    help="Flash attention off/on for every bundle (default: llama-bench's).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=1800,
    show_default=True,
    help="Seconds per bundle before llama-bench is stopped.",
)
@click.option(
    "--numerics",
    is_flag=True,
    help="Also check each bundle's numbers (smoke.yaml numerics): its device against its CPU (KL divergence, "
    "same top token) and the model's known answers; a real model (--model smollm2) has both.",
)
@JSON
def compare(
    bundle_dirs: tuple[Path, ...],
    model_spec: str,
    vocab: Path | None,
    n_prompt: int,
    n_gen: int,
    repetitions: int,
    threads: int | None,
    gpu_layers: int,
    flash_attn: str | None,
    timeout: float,
    numerics: bool,
    as_json: bool,
) -> None:
    """Run llama-bench on each bundle with identical settings; pp and tg side by side (e.g. ROCm vs Vulkan)."""
    from rockbuild.compare import CompareOptions, bundle_folders, run_compare
    from rockbuild.smoke.models import provide_model

    bundle_folders(bundle_dirs)  # a folder that is no bundle fails here, before the model is downloaded
    model = provide_model(model_spec, vocab=vocab, context=settings(), smoke=settings().smoke)
    options = CompareOptions(
        n_prompt=n_prompt,
        n_gen=n_gen,
        repetitions=repetitions,
        threads=threads or 0,
        gpu_layers=gpu_layers,
        flash_attn=int(flash_attn) if flash_attn else None,
        timeout=timeout,
    )
    checks = None
    if numerics:
        from rockbuild.core.errors import UsageError

        checks = settings().smoke.numerics  # parsed once, with smoke.yaml's own path in its messages
        if not checks.enabled:
            raise UsageError("--numerics: smoke.yaml's numerics section is missing or disabled")
    comparison = run_compare(list(bundle_dirs), model, options, env=settings().env, numerics=checks)
    show(comparison, as_json)
    comparison.raise_if_wrong()


@command
@click.argument("smoke_json", type=file(exists=True), metavar="SMOKE_JSON")
@click.option(
    "--file",
    "baselines_file",
    type=click.Path(path_type=Path),
    default=None,
    help="The baselines file to rewrite (default: smoke.yaml's numerics.baselines, config/baselines.yaml "
    "of this checkout).",
)
@click.option(
    "--measured",
    default=None,
    help="Where and when the figure was measured (default: from the smoke.json: the CPU variant and the smoke's date).",
)
@click.option(
    "--only",
    type=click.Choice(["ppl", "long", "device", "variants"]),
    default=None,
    help="Record only the CPU perplexity (ppl), only the long-context reference (long), only the GPU's own long run "
    "as its device's reference (device) or only the CPU variants' own references (variants); default: each the "
    "smoke.json has.",
)
@JSON
def baseline(
    smoke_json: Path, baselines_file: Path | None, measured: str | None, only: str | None, as_json: bool
) -> None:
    """Take a smoke.json's CPU perplexity as its model's baseline, its long-context run (the CPU's top-k past one
    ubatch) as its reference, the GPU's long run as its device's and each CPU variant's short run as that variant's,
    after a human checked that the move is right."""
    from rockbuild.core.errors import UsageError
    from rockbuild.core.records import SmokeRecord
    from rockbuild.smoke.baselines import Rebaselined, Recorded, Rereferenced, rebaseline, rereference

    record = SmokeRecord.read(smoke_json)
    if record is None:
        raise UsageError(f"{smoke_json} is not a smoke.json")
    numerics = record.numerics or {}
    target = baselines_file or settings().smoke.numerics.baselines.path
    if target is None:
        raise UsageError("smoke.yaml's numerics names no baselines file: give --file FILE")
    variant = record.backends.cpu_variant if record.backends is not None else None
    said = (f"CPU variant {variant}" if variant else None, f"smoke of {record.finished}" if record.finished else None)
    words = measured or ", ".join(v for v in said if v)
    when = f", smoke of {record.finished}" if record.finished else ""  # the words of a GPU's or a variant's entry
    long = dict(numerics.get("long_reference") or {})
    done: list[Rebaselined | Rereferenced] = []
    if only in (None, "ppl"):
        done.append(rebaseline(target, dict(numerics.get("cpu") or {}), words))
    if only == "long" or (only is None and long.get("topk")):
        done.append(rereference(target, long, words))
    own = dict(numerics.get("long_device") or {})
    if only == "device" and not own.get("topk"):
        raise UsageError(
            f"{smoke_json} has no GPU long run to record (its smoke made none: no real GPU, or the long checks were "
            "off; numerics.long_device says why)"
        )
    if only in (None, "device") and own.get("topk"):
        done.append(rereference(target, own, measured or f"GPU {own.get('device', '')} long run{when}"))
    runs = record.cpu_variants.variants if record.cpu_variants is not None else ()
    kept = [v for v in runs if v.reference is not None and v.reference.topk]
    if only == "variants" and not kept:
        raise UsageError(
            f"{smoke_json} has no CPU variant's top-k to record (its smoke ran no variant against a reference: "
            "smoke.yaml's run.cpu_variants.reference)"
        )
    if only in (None, "variants"):
        for v in kept:
            assert v.reference is not None
            ref = {"topk": v.reference.topk, "about": v.reference.about}
            done.append(rereference(target, ref, measured or f"CPU variant {v.variant} alone{when}"))
    show(Recorded(tuple(done)), as_json)


@command
@click.argument("job_dirs", metavar="JOB_DIR...", nargs=-1, required=True, type=folder(exists=True))
@click.option("--tag", required=True, metavar="TAG", help="The release tag the images are made for (b1234).")
@click.option(
    "--out",
    "out_dir",
    type=folder(),
    default=Path("release"),
    show_default=True,
    help="The images go to OUT/images/<flavour>/ (podman pull dir:FOLDER reads one).",
)
@click.option(
    "--repo",
    default=None,
    metavar="OWNER/NAME",
    help="The GitHub repository (the images' source label; default: $GITHUB_REPOSITORY).",
)
@click.option(
    "--model",
    type=file(exists=True),
    default=None,
    metavar="GGUF",
    help="The real model the podman test serves from the /models volume (its known answer is checked).",
)
@click.option("--no-test", is_flag=True, help="Build only (nothing untested is ever pushed: not with --push).")
@click.option(
    "--push",
    "repository",
    default=None,
    metavar="REGISTRY/NAME",
    help="After the test, push to this repository (ghcr.io/OWNER/NAME; token: $GITHUB_TOKEN) under the "
    "release's tag and the moving tag of each flavour.",
)
@click.option(
    "--base-root",
    type=folder(exists=True),
    default=Path("/"),
    show_default=True,
    help="Whose installed Debian packages make the base: this machine, or the root the bundles were built in.",
)
@click.option(
    "--runtime",
    default=None,
    metavar="RUNTIME",
    help="podman --runtime for the test (runc where crun refuses the cgroups).",
)
@click.option("--registry-user", default=None, metavar="USER", help="The registry's user name (default: the owner).")
@click.option(
    "--publish-config",
    type=file(exists=True),
    default=None,
    metavar="YAML",
    help="The publish.yaml whose deb_packages name the libraries' packages.",
)
@JSON
def image(
    job_dirs: tuple[Path, ...],
    tag: str,
    out_dir: Path,
    repo: str | None,
    model: Path | None,
    no_test: bool,
    repository: str | None,
    base_root: Path,
    runtime: str | None,
    registry_user: str | None,
    publish_config: Path | None,
    as_json: bool,
) -> None:
    """Make a container image of each Linux job's bundle (reproducible), test it with podman, push it (--push)."""
    from dataclasses import replace

    from rockbuild import console
    from rockbuild.core.errors import UsageError
    from rockbuild.publish.image import ImageOptions, push_release_images, release_images
    from rockbuild.publish.jobs import load_job
    from rockbuild.publish.release import archive_mtime

    if repository and no_test:
        raise UsageError("--push needs the podman test: an untested image is never pushed", hint="drop --no-test")
    context = settings()
    repo = repo or context.github.repository
    options = ImageOptions(
        repository=repository,
        model=model.absolute() if model else None,
        base_root=base_root.absolute(),
        runtime=runtime,
        test=not no_test,
        user=registry_user or (repo.split("/")[0] if repo else None),
        token=context.github.token,
    )
    jobs = [load_job(d.absolute()) for d in job_dirs]
    failed = [j for j in jobs if not j.ok]
    if failed:
        raise UsageError(
            f"job {failed[0].id} failed ({failed[0].failed_step}): only a passed job's bundle makes an image"
        )
    say = (lambda m: None) if as_json else console.info
    report = release_images(
        jobs,
        tag,
        out_dir.absolute(),
        publish=context.but(publish_file=publish_config).publish,
        options=options,
        repo=repo,
        say=say,
        mtime_of=lambda j: archive_mtime(j, context.source_date_epoch),
    )
    if repository:
        report = replace(report, images=tuple(push_release_images(report.images, options, say)))
    show(report, as_json)


# in the order `rockbuild --help` lists them
COMMANDS = (matrix, fetch, rocm, build, webui, bundle, audit, smoke, compare, baseline, image)
