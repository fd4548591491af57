"""The command line: parses arguments and calls the stage modules; nothing else lives here.

Stage modules are imported inside each command so that ``rockbuild --help`` stays fast and never imports requests,
PyGithub, jinja2 or elftools.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

import click

from . import __version__, console
from .errors import BUG_EXIT_CODE, NotImplementedYet, RockbuildError
from .settings import Settings

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


class _OrderedGroup(click.Group):
    """Lists commands in pipeline order, not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


def settings() -> Settings:
    """The settings :func:`main` resolved once for this command (the root context's ``obj``)."""
    obj = click.get_current_context().find_root().obj
    return obj if isinstance(obj, Settings) else Settings.from_environment()


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def show(result: Any, as_json: bool) -> None:
    """A command's result: its ``to_dict()`` as JSON with --json, else its ``render()`` text."""
    if as_json:
        emit_json(result.to_dict())
    else:
        click.echo(result.render())


@click.group(cls=_OrderedGroup, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="rockbuild")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def cli(debug: bool) -> None:
    """rockbuild: nightly, self-contained llama.cpp builds for AMD GPUs on TheRock's ROCm.

    \b
    Pipeline: matrix -> fetch (ROCm) -> build -> bundle -> smoke -> publish.
    Maintainers:      rockbuild build --target gfx1151
    CI:               rockbuild nightly
    Users of builds:  rockbuild doctor, rockbuild install
    """


# ---------------------------------------------------------------------------------------------------------------------
# Stage 1: matrix

MATRIX_FILE = click.option(
    "-c", "--config", "config", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Matrix YAML (default: the shipped matrices/nightly.yaml).",
)


@cli.command(context_settings=CONTEXT)
@MATRIX_FILE
@click.option(
    "--only", multiple=True, metavar="GLOB", help="Keep jobs whose id matches (fnmatch, {a,b} braces). Repeatable."
)
@click.option(
    "--os", "oses", multiple=True, metavar="OS[,OS]",
    help="Build only for these OSes (linux, windows; 'ubuntu' means linux). Replaces the matrix's os axis.",
)
@click.option(
    "--target", "targets", multiple=True, metavar="NAME[,NAME]",
    help="Build only these families/targets (gfx110X, gfx1151, ...). Replaces the matrix's target axis.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json", "github"]), default="table", show_default=True,
    help="table: for people; json: a list of jobs; github: {\"include\": [...]} for fromJson (also written to "
    "$GITHUB_OUTPUT as matrix=... when that variable is set).",
)
def matrix(
    config: Path | None, only: tuple[str, ...], oses: tuple[str, ...], targets: tuple[str, ...], fmt: str
) -> None:
    """Expand the OS x GPU-family matrix into build jobs."""
    from . import matrix as matrix_mod

    jobs = settings().but(matrix_file=config).jobs(
        os_override=matrix_mod.split_list(oses, aliases={"ubuntu": "linux"}),
        target_override=matrix_mod.split_list(targets),
    )
    jobs = matrix_mod.select_jobs(jobs, only)
    if fmt == "json":
        emit_json([job.to_dict() for job in jobs])
    elif fmt == "github":
        click.echo(json.dumps(matrix_mod.github_matrix(jobs), separators=(",", ":")))
        output = settings().github.output
        if output:
            matrix_mod.write_github_output(jobs, output)
    else:
        from rich.console import Console

        # a pipe gets the whole table rather than one squeezed to 80 columns
        width = None if sys.stdout.isatty() else 200
        Console(width=width).print(matrix_mod.render_table(jobs))


# ---------------------------------------------------------------------------------------------------------------------
# Stage 2: ROCm

def _groups(family: str | None, target: str | None, os_name: str) -> list[str]:
    """The tarball groups (current name, then legacy names) of --family/--target on ``os_name``."""
    from .rocm.fetch import select_family, tarball_groups

    return tarball_groups(select_family(settings().families, family, target), os_name)


ROCM_SOURCE_OPTIONS = [
    click.option("--family", default=None, help="GPU family (gfx110X, gfx110X-all, gfx1151, ...)."),
    click.option("--target", default=None, help="A single gfx target; its family's tarball is used."),
    click.option(
        "--os", "os_name", type=click.Choice(["linux", "windows"]), default=None,
        help="Tarball platform (default: this machine's).",
    ),
    click.option(
        "--channel", type=click.Choice(["nightly", "dev", "prerelease", "stable"]), default="nightly",
        show_default=True,
    ),
    click.option(
        "--index-url", default=None, help="Read this index page or S3 listing instead of the channel's hosts."
    ),
]


def _rocm_source_options(func: Any) -> Any:
    for option in reversed(ROCM_SOURCE_OPTIONS):
        func = option(func)
    return func


@cli.command(context_settings=CONTEXT)
@_rocm_source_options
@click.option(
    "--rocm-version", "version", default="latest", show_default=True,
    help="'latest' or an exact TheRock version (e.g. 10.2.0a20261128).",
)
@click.option("--version", "old_version", default=None, hidden=True)  # before 0.2; --version is the program's
@click.option(
    "--cache", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Cache folder (default: $ROCKBUILD_CACHE or ~/.cache/rockbuild).",
)
@click.option(
    "--dest", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Extract here (default: <cache>/rocm/<tarball name>).",
)
@click.option("--sha256", default=None, help="Expected sha256 of the tarball (refuse anything else).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def fetch(
    family: str | None, target: str | None, os_name: str | None, channel: str, index_url: str | None,
    version: str, old_version: str | None, cache: Path | None, dest: Path | None, sha256: str | None, as_json: bool,
) -> None:
    """Find, download and safely extract a TheRock ROCm tarball."""
    from .errors import UsageError
    from .rocm.fetch import fetch_rocm

    if old_version is not None:
        raise UsageError(f"fetch --version is now --rocm-version: use --rocm-version {old_version}")

    os_name = os_name or settings().host_os
    result = fetch_rocm(
        _groups(family, target, os_name), os_name=os_name, version=version, channel=channel,
        index_url=index_url, cache=cache or settings().cache, dest=dest, sha256=sha256,
        quiet=as_json and not sys.stderr.isatty(),
    )
    if as_json:
        emit_json(result.to_dict())
        return
    from .console import human_bytes

    click.echo(f"ROCm {result.version} ({result.name})")
    click.echo(f"  root:        {result.root}")
    click.echo(f"  sha256:      {result.sha256}")
    click.echo(f"  size:        {human_bytes(result.size)}; downloaded now: {human_bytes(result.transferred)}")
    click.echo(f"  extracted:   {'yes' if result.extracted else 'no (already in place)'} in {result.seconds:.1f}s")
    if result.layout is not None:
        click.echo(f"  clang:       {result.layout.clang}")
        click.echo(f"  kernels for: {' '.join(result.layout.gfx_targets) or '(none found)'}")


@cli.group(cls=_OrderedGroup, context_settings=CONTEXT)
def rocm() -> None:
    """List TheRock ROCm versions or describe a ROCm root."""


@rocm.command("list", context_settings=CONTEXT)
@_rocm_source_options
@click.option("--limit", type=int, default=20, show_default=True, help="Show at most this many (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON on stdout.")
def rocm_list(
    family: str | None, target: str | None, os_name: str | None, channel: str, index_url: str | None,
    limit: int, as_json: bool,
) -> None:
    """Available ROCm tarballs for a family, newest first."""
    from .rocm.fetch import list_rocm_versions

    os_name = os_name or settings().host_os
    entries = list_rocm_versions(_groups(family, target, os_name), os_name=os_name, channel=channel,
                                 index_url=index_url)
    if limit > 0:
        entries = entries[:limit]
    if as_json:
        emit_json([e.to_dict() for e in entries])
        return
    for e in entries:
        day = e.name.date.isoformat() if e.name.date else "-"
        size = f"{e.size / 1e9:.2f} GB" if e.size else ""
        click.echo(f"{e.name.version.text:<28} {day:<10} {size:>9}  {e.name.filename}")


@rocm.command("info", context_settings=CONTEXT)
@click.argument("root", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
def rocm_info(root: Path, as_json: bool) -> None:
    """Describe the ROCm root at ROOT (TheRock tree, /opt/rocm, or a Debian/Ubuntu install)."""
    from .rocm.layout import detect_layout

    layout = detect_layout(root)
    if as_json:
        emit_json(layout.to_dict())
        return
    for key, value in layout.to_dict().items():
        if isinstance(value, list):
            value = ", ".join(str(v) if not isinstance(v, dict) else v.get("path", str(v)) for v in value) or "-"
        click.echo(f"{key + ':':<18} {value if value is not None else '-'}")


# ---------------------------------------------------------------------------------------------------------------------
# Stages not built yet: they exist so --help shows the whole pipeline, and they say so instead of pretending.


def _stub(name: str, summary: str, issue: str) -> None:
    @cli.command(
        name=name,
        help=f"{summary} (not implemented yet: {issue}).",
        short_help=f"[not implemented yet] {summary}.",
        context_settings={**CONTEXT, "ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=True,
    )
    @click.pass_context
    def _command(ctx: click.Context) -> None:
        raise NotImplementedYet(f"rockbuild {name} is not implemented yet ({issue})")


@cli.command(context_settings=CONTEXT)
@click.option("--target", default=None, help="Build exactly this gfx target (gfx1151, ...).")
@click.option("--family", default=None, help="Build every target of this GPU family (gfx110X, ...).")
@click.option("--job", "job_id", default=None, help="Build this job of the matrix (linux-gfx1151, ...).")
@MATRIX_FILE
@click.option(
    "--os", "os_name", type=click.Choice(["linux", "windows"]), default=None, help="Job OS (default: this machine's)."
)
@click.option(
    "--rocm", "rocm_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Use this ROCm root (TheRock tree, /opt/rocm, or /usr with Debian's ROCm) instead of fetching one.",
)
@click.option("--rocm-version", default=None, help="Fetch this TheRock version (default: the job's, i.e. 'latest').")
@click.option(
    "--source", "source_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Build this llama.cpp tree instead of cloning one.",
)
@click.option("--ref", default=None, help="llama.cpp tag (bNNNN), branch or full commit to clone (default: the job's).")
@click.option("--git-url", default=None, help="Clone from this URL (default: the upstream llama.cpp repository).")
@click.option("--build-number", default=None, help="llama.cpp build number of a tree git cannot tell (11312, b11312).")
@click.option("--commit", default=None, help="llama.cpp commit of a --source tree that is not a git checkout.")
@click.option(
    "--offline", is_flag=True,
    help="No network during configure: system OpenSSL instead of BoringSSL (a configure-time git clone).",
)
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("out"), show_default=True,
    help="Output folder; the job's files go to OUT/<job-id>/.",
)
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel compile jobs (default: cores).")
@click.option(
    "--ccache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="ccache directory (default: <cache>/ccache).",
)
@click.option("--no-ccache", is_flag=True, help="Do not use ccache even when it is installed.")
@click.option("--bundle/--no-bundle", "make_bundle", default=True, show_default=True,
              help="End with a self-contained bundle in out/<job>/bundle (closure, kernels, $ORIGIN, audit).")
@click.option("--prune-fatbin", is_flag=True,
              help="Also drop other targets' device code from rocBLAS/rocSOLVER (unproven on a GPU: opt-in).")
@click.option("--inputs", "inputs_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The night's inputs.json (rockbuild resolve): build its llama.cpp commit against its ROCm tarball.")
@click.option("--json", "as_json", is_flag=True, help="Print build.json on stdout.")
def build(
    target: str | None, family: str | None, job_id: str | None, config: Path | None, os_name: str | None,
    rocm_dir: Path | None, rocm_version: str | None, source_dir: Path | None, ref: str | None, git_url: str | None,
    build_number: str | None, commit: str | None, offline: bool, out_dir: Path, jobs: int | None,
    ccache_dir: Path | None, no_ccache: bool, make_bundle: bool, prune_fatbin: bool, inputs_file: Path | None,
    as_json: bool,
) -> None:
    """Compile llama.cpp with GGML_HIP for a job's gfx targets: ROCm -> source -> configure -> compile -> bundle."""
    from .build.driver import BuildOptions, build_job, resolve_job
    from .build.source import DEFAULT_GIT_URL

    if rocm_dir is not None and rocm_version is not None:
        from .errors import UsageError

        raise UsageError("give --rocm DIR or --rocm-version V, not both")
    build_options = BuildOptions(
        out_dir=out_dir, rocm_dir=rocm_dir, rocm_version=rocm_version, source_dir=source_dir, ref=ref,
        git_url=git_url or DEFAULT_GIT_URL, build_number=build_number, commit=commit, offline=offline, jobs=jobs,
        use_ccache=not no_ccache, ccache_dir=ccache_dir, settings=settings(),
    )
    if inputs_file is not None:
        from .errors import UsageError
        from .nightly import build_with_inputs, load_inputs

        if ref or rocm_version or git_url:
            raise UsageError("--inputs pins llama.cpp and ROCm; leave out --ref, --git-url and --rocm-version")
        inputs = load_inputs(inputs_file)
        if job_id:
            job = inputs.job(job_id)
        else:
            wanted = resolve_job(target=target, family=family, job_id=job_id, config=config, os_name=os_name,
                                 settings=settings())
            job = inputs.job(wanted.id)
        result = build_with_inputs(job, inputs, build_options, quiet=as_json)
    else:
        job = resolve_job(target=target, family=family, job_id=job_id, config=config, os_name=os_name,
                          settings=settings())
        result = build_job(job, build_options)
    bundled = None
    if make_bundle:
        from .bundle import bundle_job
        from .console import step

        rocm_root = (result.rocm or {}).get("root")
        with step(f"bundle ({', '.join(job.targets) or job.backend})"):
            bundled = bundle_job(job, result.build_dir / "bin", Path(rocm_root) if rocm_root else None,
                                 result.job_dir / "bundle", prune_fatbin=prune_fatbin, quiet=as_json)
    if as_json:
        emit_json({**result.to_dict(), "bundle": bundled.to_dict() if bundled else None})
        return
    source = result.source
    what = f"build {source.build_number}, commit {source.short_commit}" if source else "?"
    click.echo(f"{job.id}: llama.cpp ({what}) built for {', '.join(job.targets) or job.backend}")
    click.echo(f"  binaries:   {result.build_dir / 'bin'}")
    click.echo(f"  build.json: {result.build_json}")
    if bundled is not None:
        click.echo(f"  bundle:     {result.job_dir / 'bundle'} (audit passed)")


def _split_targets(values: tuple[str, ...] | str | None) -> list[str]:
    items = [values] if isinstance(values, str) else list(values or ())
    return [t.strip() for v in items for t in v.split(",") if t.strip()]


POLICY_OPTION = click.option(
    "--policy", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
    help="Bundle policy YAML (default: the shipped matrices/bundle-policy.yaml).",
)


@cli.command(context_settings=CONTEXT)
@click.argument("build_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--rocm", "rocm_root", default=None, type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="The ROCm root the build used (TheRock tree, /opt/rocm, or a Debian root); not for Vulkan.")
@click.option("--targets", default=None, metavar="T[,T]", help="The job's gfx targets (kernel data is pruned to them)")
@click.option("--backend", type=click.Choice(["rocm", "vulkan"]), default="rocm", show_default=True,
              help="vulkan: no ROCm, no targets; the Vulkan loader and drivers stay the host's.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="The bundle folder.")
@click.option("--dry-run", is_flag=True, help="Print the plan (files, sources, patches, kernel data); write nothing.")
@click.option("--strip", "strip_debug", is_flag=True, help="Strip debug sections from the shipped ELF files.")
@click.option("--prune-fatbin", is_flag=True,
              help="Drop other GPU targets' code from shipped fat binaries (rocBLAS, rocSOLVER), in place.")
@POLICY_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the report (or with --dry-run the plan) as JSON.")
def bundle(build_dir: Path, rocm_root: Path | None, targets: str | None, backend: str, out: Path, dry_run: bool,
           strip_debug: bool, prune_fatbin: bool, policy: Path | None, as_json: bool) -> None:
    """Make a self-contained bundle from a build: closure, dlopen extras, pruned kernel data, $ORIGIN run paths."""
    from .bundle import BundleError
    from .bundle.plan import make_bundle
    from .errors import UsageError
    from .rocm.layout import detect_layout
    from .settings import load_policy

    if backend == "rocm" and (rocm_root is None or not targets):
        raise UsageError("a ROCm bundle needs --rocm ROOT and --targets T[,T]")
    if backend == "vulkan" and (rocm_root is not None or targets):
        raise UsageError("a Vulkan bundle takes no --rocm and no --targets")
    layout = detect_layout(rocm_root) if rocm_root is not None else None
    report = make_bundle(build_dir, layout, _split_targets(targets), out, dry_run=dry_run,
                         policy=load_policy(policy) if policy else None, strip=strip_debug, quiet=as_json,
                         prune_fatbin=prune_fatbin, backend=backend,
                         platform=settings().host_os if layout is None else None)
    if as_json:
        emit_json(report.to_dict())
    elif dry_run:
        click.echo(report.plan.render())
    else:
        from .console import human_bytes

        click.echo(f"bundle: {report.out} ({len(report.plan.files)} files, {human_bytes(report.plan.total_bytes)})")
        if report.audit is not None:
            click.echo(report.audit.render())
    if dry_run and report.plan.errors:
        raise BundleError(f"the plan has {len(report.plan.errors)} error(s): {report.plan.errors[0]}")


@cli.command(context_settings=CONTEXT)
@click.argument("bundle_dir", metavar="BUNDLE", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--targets", default=None, metavar="T[,T]", help="The job's gfx targets (default: from bundle.json).")
@click.option("--max-version", "max_versions", multiple=True, metavar="FAMILY=VERSION",
              help="Fail if a file needs a newer symbol version, e.g. GLIBC=2.35, GLIBCXX=3.4.30. Repeatable.")
@POLICY_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
def audit(bundle_dir: Path, targets: str | None, max_versions: tuple[str, ...], policy: Path | None,
          as_json: bool) -> None:
    """Check that a bundle is self-contained and carries exactly the job's GPU code (non-zero exit on failure)."""
    from .bundle import AuditError
    from .bundle.audit import audit_bundle
    from .errors import UsageError
    from .settings import load_policy

    ceilings = {}
    for item in max_versions:
        family, sep, version = item.partition("=")
        if not sep or not version.replace(".", "").isdigit():
            raise UsageError(f"--max-version {item!r}: write FAMILY=VERSION, e.g. GLIBC=2.35")
        ceilings[family.strip().upper()] = version.strip()
    report = audit_bundle(bundle_dir, _split_targets(targets) or None,
                          policy=load_policy(policy) if policy else None, max_versions=ceilings)
    show(report, as_json)
    if not report.ok:
        raise AuditError(f"{bundle_dir}: {len(report.failures)} audit failure(s), first: {report.failures[0]}")
@cli.command(context_settings=CONTEXT)
@click.argument("bundle_dir", metavar="BUNDLE", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--model", "model_spec", default=None, metavar="PATH|URL|tiny",
              help="GGUF to run (default: the pinned Qwen3-0.6B-Q4_0, downloaded once). 'tiny': a random-weight "
              "Qwen3 made here; it proves loading and generation, not quality.")
@click.option("--vocab", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="llama.cpp's models/ggml-vocab-qwen2.gguf, for --model tiny (default: searched in the cache).")
@click.option("--expect-gpu", type=click.Choice(["auto", "yes", "no"]), default="auto", show_default=True,
              help="yes: fail unless the weights sit in a ROCm (Vulkan) buffer; auto: yes when a GPU of the "
              "bundle's targets is present (a Vulkan bundle: when llama-cli --list-devices lists a Vulkan device).")
@click.option("--device", default=None, metavar="NAME",
              help="Pin every run to this device (-dev, e.g. Vulkan1). Default: a Vulkan bundle expected on a GPU "
              "pins its first Vulkan device.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write smoke.json here (default: the job folder, beside bundle/).")
@click.option("--json", "as_json", is_flag=True, help="Print smoke.json on stdout.")
def smoke(bundle_dir: Path, model_spec: str | None, vocab: Path | None, expect_gpu: str, device: str | None,
          report_path: Path | None, as_json: bool) -> None:
    """Run llama-cli, llama-server and llama-bench from a bundle, with no ROCm on the paths."""
    from .model import provide_model
    from .smoke import SmokeError, SmokeOptions, run_smoke

    model = provide_model(model_spec, vocab=vocab, quiet=as_json, settings=settings())
    options = SmokeOptions.from_config(settings().smoke, expect_gpu=expect_gpu, device=device)
    report = run_smoke(bundle_dir, model, options, report_path=report_path, quiet=as_json)
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(report.render())
        click.echo(f"  smoke.json: {report.report_path}")
    if not report.ok:
        raise SmokeError(f"smoke test of {report.bundle} failed: {report.failures[0]}",
                         hint=f"details and log tails in {report.report_path}")


@cli.command(context_settings=CONTEXT)
@click.argument("bundle_dirs", metavar="BUNDLE...", nargs=-1, required=True,
                type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--model", "model_spec", required=True, metavar="PATH|URL|tiny|default",
              help="GGUF to benchmark (see rockbuild smoke; 'tiny' measures overheads, not a real model).")
@click.option("--vocab", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="llama.cpp's models/ggml-vocab-qwen2.gguf, for --model tiny.")
@click.option("-p", "n_prompt", type=click.IntRange(min=0), default=512, show_default=True, help="Prompt tokens (pp).")
@click.option("-n", "n_gen", type=click.IntRange(min=0), default=128, show_default=True, help="Generated tokens (tg).")
@click.option("-r", "repetitions", type=click.IntRange(min=1), default=5, show_default=True,
              help="Repetitions per test (the spread shown is their standard deviation).")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: the usable cores).")
@click.option("--ngl", "gpu_layers", type=int, default=99, show_default=True, help="Layers to offload (-ngl).")
@click.option("--fa", "flash_attn", type=click.Choice(["0", "1"]), default=None,
              help="Flash attention off/on for every bundle (default: llama-bench's).")
@click.option("--timeout", type=click.FloatRange(min=1), default=1800, show_default=True,
              help="Seconds per bundle before llama-bench is stopped.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON on stdout.")
def compare(bundle_dirs: tuple[Path, ...], model_spec: str, vocab: Path | None, n_prompt: int, n_gen: int,
            repetitions: int, threads: int | None, gpu_layers: int, flash_attn: str | None, timeout: float,
            as_json: bool) -> None:
    """Run llama-bench on each bundle with identical settings; pp and tg side by side (e.g. ROCm vs Vulkan)."""
    from .compare import CompareOptions, run_compare
    from .model import provide_model

    model = provide_model(model_spec, vocab=vocab, quiet=as_json, settings=settings())
    options = CompareOptions(n_prompt=n_prompt, n_gen=n_gen, repetitions=repetitions, threads=threads or 0,
                             gpu_layers=gpu_layers, flash_attn=int(flash_attn) if flash_attn else None,
                             timeout=timeout)
    comparison = run_compare(list(bundle_dirs), model, options, quiet=as_json)
    show(comparison, as_json)


@cli.command(context_settings=CONTEXT)
@click.argument("job_dirs", metavar="JOB_DIR...", nargs=-1, required=False,
                type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--inputs", "inputs_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="The night's inputs.json: every job in it counts (one without a folder as failed); a folder built "
              "from another commit is refused. JOB_DIRs default to out/<job-id>.")
@click.option("--repo", default=None, metavar="OWNER/NAME", help="Release repository (default: $GITHUB_REPOSITORY).")
@click.option("--api-url", default=None, metavar="URL",
              help="GitHub API (default: https://api.github.com; GitHub Enterprise: https://HOST/api/v3).")
@click.option("--tag", default=None, help="Use this tag (default: the next b#### after the highest tag or release).")
@click.option("--tag-scheme", "scheme", type=click.Choice(["sequential", "llama"]), default=None,
              help="sequential: b####; llama: b<llama.cpp build>-rocm<version> (default: publish.yaml's).")
@click.option("--draft", is_flag=True, help="Leave the complete release as a draft (not shown as latest).")
@click.option("--dry-run", is_flag=True, help="Write the archives, checksums, manifest and notes; no API writes.")
@click.option("--keep", type=click.IntRange(min=1), default=None, metavar="N",
              help="After publishing, delete rockbuild's published releases older than the newest N.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the release files (default: release/ beside the job folders).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
def publish(job_dirs: tuple[Path, ...], inputs_file: Path | None, repo: str | None, api_url: str | None,
            tag: str | None, scheme: str | None, draft: bool, dry_run: bool, keep: int | None, out_dir: Path | None,
            as_json: bool) -> None:
    """Archive the night's bundles and publish them as one immutable GitHub release (token: $GITHUB_TOKEN/$GH_TOKEN).

    The release is created as a draft, every asset uploaded and verified, then published in one call. A re-run
    completes a draft; a published release is never changed.
    """
    from .publish import PublishOptions
    from .publish import publish as publish_release

    if inputs_file is not None:
        from .nightly import load_inputs, publish_dirs_for_inputs

        job_dirs = publish_dirs_for_inputs(load_inputs(inputs_file), job_dirs)
    elif not job_dirs:
        from .errors import UsageError

        raise UsageError("give the job folders to publish (out/<job-id>), or --inputs inputs.json")
    report = publish_release(PublishOptions(
        job_dirs=job_dirs, repo=repo, api_url=api_url, tag=tag, scheme=scheme, draft=draft, dry_run=dry_run,
        keep=keep, out=out_dir, quiet=as_json, settings=settings(),
    ))
    show(report, as_json)


@cli.command(context_settings=CONTEXT)
@click.argument("job_dirs", metavar="JOB_DIR...", nargs=-1, required=True,
                type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--run-url", required=True, metavar="URL", help="The CI run that failed (linked from the issue).")
@click.option("--repo", default=None, metavar="OWNER/NAME",
              help="Repository of the issue (default: $GITHUB_REPOSITORY).")
@click.option("--api-url", default=None, metavar="URL", help="GitHub API (default: https://api.github.com).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
def alert(job_dirs: tuple[Path, ...], run_url: str, repo: str | None, api_url: str | None, as_json: bool) -> None:
    """Comment on the open 'nightly-failure' issue (or open one) with each failed job, its step and log tail."""
    from .publish import send_alert

    report = send_alert(job_dirs, run_url=run_url, repo=repo, api_url=api_url, quiet=as_json, settings=settings())
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(report.message)


@cli.command(context_settings=CONTEXT)
@MATRIX_FILE
@click.option("--only", multiple=True, metavar="GLOB", help="Keep jobs whose id matches (fnmatch, {a,b}). Repeatable.")
@click.option("--os", "oses", multiple=True, metavar="OS[,OS]", help="Only these OSes (linux, windows).")
@click.option("--target", "targets", multiple=True, metavar="NAME[,NAME]", help="Only these families/targets.")
@click.option("--llama-ref", default=None, metavar="REF",
              help="llama.cpp tag, branch or full commit (default: the matrix's llama_ref; latest = master).")
@click.option("--rocm-version", default=None, metavar="V", help="'latest' or an exact TheRock version for every job.")
@click.option("--max-age-days", type=click.IntRange(min=0), default=3, show_default=True,
              help="Fail a job whose newest ROCm tarball ('latest') is older than this.")
@click.option("--index-url", default=None, help="Read this TheRock index page instead of the channels' hosts.")
@click.option("--git-url", default=None, help="llama.cpp repository (default: the upstream one).")
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), default=Path("inputs.json"),
              show_default=True, help="Write the inputs here.")
@click.option("--json", "as_json", is_flag=True, help="Also print the inputs as JSON on stdout.")
def resolve(config: Path | None, only: tuple[str, ...], oses: tuple[str, ...], targets: tuple[str, ...],
            llama_ref: str | None, rocm_version: str | None, max_age_days: int, index_url: str | None,
            git_url: str | None, out_file: Path, as_json: bool) -> None:
    """Pin the night's inputs once for every job: the llama.cpp commit and each group's ROCm tarball (inputs.json).

    A group whose newest tarball is older than --max-age-days fails its own jobs (building them with --inputs
    refuses, naming the group and the date found); the other jobs go on.
    """
    from . import matrix as matrix_mod
    from .nightly import resolve_inputs

    jobs = settings().but(matrix_file=config).jobs(
        os_override=matrix_mod.split_list(oses, aliases={"ubuntu": "linux"}),
        target_override=matrix_mod.split_list(targets),
    )
    jobs = matrix_mod.select_jobs(jobs, only)
    inputs = resolve_inputs(jobs, llama_ref=llama_ref, rocm_version=rocm_version, max_age_days=max_age_days,
                            index_url=index_url, git_url=git_url, quiet=as_json)
    path = inputs.write(out_file)
    if as_json:
        emit_json(inputs.to_dict())
        return
    failed = [j.id for j in inputs.jobs if inputs.unresolved(j.id)]
    click.echo(f"{path}: llama.cpp {inputs.llama.commit[:12]} (build {inputs.llama.build_number or 'unknown'}), "
               f"{len(inputs.jobs)} jobs, {len(inputs.rocm)} ROCm tarball(s)")
    if failed:
        click.echo(f"  no usable ROCm (these jobs will fail): {', '.join(failed)}")


@cli.command(context_settings=CONTEXT)
@MATRIX_FILE
@click.option("--only", multiple=True, metavar="GLOB", help="Keep jobs whose id matches (fnmatch, {a,b}). Repeatable.")
@click.option("--os", "oses", multiple=True, metavar="OS[,OS]", help="Only these OSes (linux, windows).")
@click.option("--target", "targets", multiple=True, metavar="NAME[,NAME]", help="Only these families/targets.")
@click.option("--publish/--no-publish", "publish_release", default=None,
              help="Publish the release (default: when a repository is known, --repo or $GITHUB_REPOSITORY).")
@click.option("-j", "--jobs", "parallel", type=click.IntRange(min=1), default=1, show_default=True,
              help="Jobs to run at the same time.")
@click.option("--compile-jobs", type=click.IntRange(min=1), default=None, help="Parallel compiles per job.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("out"),
              show_default=True, help="Job folders, inputs.json and release files go here; a re-run resumes.")
@click.option("--llama-ref", default=None, metavar="REF", help="llama.cpp tag, branch or full commit.")
@click.option("--rocm-version", default=None, metavar="V", help="'latest' or an exact TheRock version.")
@click.option("--max-age-days", type=click.IntRange(min=0), default=3, show_default=True,
              help="Fail a job whose newest ROCm tarball is older than this.")
@click.option("--index-url", default=None, help="Read this TheRock index page instead of the channels' hosts.")
@click.option("--git-url", default=None, help="llama.cpp repository (default: the upstream one).")
@click.option("--repo", default=None, metavar="OWNER/NAME", help="Release repository (default: $GITHUB_REPOSITORY).")
@click.option("--api-url", default=None, metavar="URL", help="GitHub API (default: https://api.github.com).")
@click.option("--smoke/--no-smoke", "smoke_test", default=True, show_default=True,
              help="Smoke-test every bundle (needs the model; --no-smoke ships untested bundles).")
@click.option("--model", "model_spec", default=None, metavar="PATH|URL|tiny", help="Smoke model (see rockbuild smoke).")
@click.option("--vocab", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="llama.cpp's models/ggml-vocab-qwen2.gguf, for --model tiny.")
@click.option("--offline", is_flag=True,
              help="No network during configure: system OpenSSL instead of BoringSSL (as rockbuild build --offline).")
@click.option("--ccache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="ccache directory (default: <cache>/ccache).")
@click.option("--no-ccache", is_flag=True, help="Do not use ccache.")
@click.option("--prune-fatbin", is_flag=True,
              help="Also drop other targets' device code from rocBLAS/rocSOLVER (unproven on a GPU: opt-in).")
@click.option("--json", "as_json", is_flag=True, help="Print the night's report as JSON on stdout.")
@click.pass_context
def nightly(ctx: click.Context, config: Path | None, only: tuple[str, ...], oses: tuple[str, ...],
            targets: tuple[str, ...], publish_release: bool | None, parallel: int, compile_jobs: int | None,
            out_dir: Path, llama_ref: str | None, rocm_version: str | None, max_age_days: int,
            index_url: str | None, git_url: str | None, repo: str | None, api_url: str | None, smoke_test: bool,
            model_spec: str | None, vocab: Path | None, offline: bool, ccache_dir: Path | None, no_ccache: bool,
            prune_fatbin: bool, as_json: bool) -> None:
    """The whole night: resolve, skip if the last release has these inputs, build every job, publish, alert.

    Jobs for this machine's OS run fetch -> build -> bundle -> smoke; a failure does not stop the others. A re-run
    with the same --out resumes: stages whose inputs did not change are not redone. Exit 0 when the release was
    made (or skipped as unchanged), 1 when a required job failed.
    """
    from .nightly import NightOptions, run_night
    from .nightly.overview import Overview

    overview = Overview(enabled=not as_json)
    with overview:
        report = run_night(NightOptions(
            config=config, only=only, oses=oses, targets=targets, llama_ref=llama_ref, rocm_version=rocm_version,
            max_age_days=max_age_days, index_url=index_url, git_url=git_url, out=out_dir, publish=publish_release,
            repo=repo, api_url=api_url, parallel=parallel, compile_jobs=compile_jobs, smoke=smoke_test,
            model=model_spec, vocab=vocab, offline=offline, ccache_dir=ccache_dir, use_ccache=not no_ccache,
            prune_fatbin=prune_fatbin, quiet=as_json, on_event=overview.on_event, settings=settings(),
        ))
    if as_json:
        emit_json(report.to_dict())
    else:
        overview.print_summary(report)
        click.echo(f"night: {report.state}: {report.message}")
    if report.exit_code:
        ctx.exit(report.exit_code)




# ---------------------------------------------------------------------------------------------------------------------
# For users of the builds


@cli.command(context_settings=CONTEXT)
@click.option("--bundle", "bundle_dir", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Also check this bundle: kernels for each GPU found, and its audit.")
@click.option("--sysfs-root", type=click.Path(file_okay=False, path_type=Path), default=Path("/sys"),
              show_default=True, help="Read the KFD topology and module parameters from this sysfs tree.")
@click.option("--dev-root", type=click.Path(file_okay=False, path_type=Path), default=Path("/dev"),
              show_default=True, help="Check device access (kfd, dri/renderD*) in this folder.")
@click.option("--proc-root", type=click.Path(file_okay=False, path_type=Path), default=Path("/proc"), hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
def doctor(bundle_dir: Path | None, sysfs_root: Path, dev_root: Path, proc_root: Path, as_json: bool) -> None:
    """Check this machine's AMD GPUs (no ROCm needed): targets, device access, overrides, APU memory, a bundle."""
    from .doctor import run_doctor

    report = run_doctor(sysfs_root=sysfs_root, dev_root=dev_root, proc_root=proc_root, bundle=bundle_dir)
    show(report, as_json)
    failure = report.failure(as_json)
    if failure is not None:
        raise failure


@cli.command(context_settings=CONTEXT)
@click.option("--repo", default=None, metavar="OWNER/NAME",
              help="Release repository (default: lemonade-sdk/llamacpp-rocm, whose asset names rockbuild keeps).")
@click.option("--tag", default="latest", show_default=True, help="Release tag, or 'latest'.")
@click.option("--target", default="auto", show_default=True,
              help="gfx target to install for; auto: this machine's GPU (a discrete one first).")
@click.option("--backend", type=click.Choice(["rocm", "vulkan"]), default="rocm", show_default=True,
              help="Which flavour of the release to install.")
@click.option("--dest", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder to create (default: ./<asset name>).")
@click.option("--api-url", default=None, metavar="URL",
              help="GitHub API (default: https://api.github.com; GitHub Enterprise: https://HOST/api/v3).")
@click.option("--os", "os_name", type=click.Choice(["linux", "windows"]), default=None,
              help="Install the asset for this OS (default: this machine's).")
@click.option("--sysfs-root", type=click.Path(file_okay=False, path_type=Path), default=Path("/sys"), hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
def install(repo: str | None, tag: str, target: str, backend: str, dest: Path | None, api_url: str | None,
            os_name: str | None, sysfs_root: Path, as_json: bool) -> None:
    """Download the release asset that fits this machine's GPU, verify it (SHA256SUMS), extract it, audit it."""
    from .install import DEFAULT_API_URL, DEFAULT_REPO, InstallOptions
    from .install import install as install_asset

    report = install_asset(InstallOptions(
        repo=repo or DEFAULT_REPO, tag=tag, target=target, backend=backend, dest=dest,
        api_url=api_url or DEFAULT_API_URL, os_name=os_name, sysfs_root=sysfs_root, quiet=as_json,
        settings=settings(),
    ))
    show(report, as_json)


# ---------------------------------------------------------------------------------------------------------------------


def _fail(message: str, code: int, hint: str | None = None) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        resolved = Settings.from_environment(debug=debug or None)  # once, for the whole command
        debug = resolved.debug
        console.configure(github_actions=resolved.github.actions, ci=resolved.ci)
        # without standalone mode click *returns* the code of a ctx.exit(code) instead of exiting with it
        code = cli.main(args=argv, prog_name="rockbuild", standalone_mode=False, obj=resolved)
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        _fail("aborted", 130)
    except click.exceptions.NoArgsIsHelpError as exc:  # `rockbuild` or a group alone: its help, as click would
        click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message(), err=True)
        sys.exit(exc.exit_code)
    except click.UsageError as exc:  # one line, like every other error, naming the help to read
        where = exc.ctx.command_path if exc.ctx else "rockbuild"
        _fail(f"{exc.format_message()} (see '{where} --help')", exc.exit_code)
    except click.ClickException as exc:  # a file click could not open, ...
        _fail(exc.format_message(), exc.exit_code)
    except RockbuildError as exc:
        if debug:
            traceback.print_exc()
        _fail(exc.message, exc.exit_code, exc.hint)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # a bug: say so, keep it short unless asked
        if debug:
            traceback.print_exc()
        _fail(
            f"internal error: {type(exc).__name__}: {exc}", BUG_EXIT_CODE,
            "this is a bug in rockbuild; rerun with --debug and report the traceback",
        )
    sys.exit(0)


if __name__ == "__main__":
    main()
