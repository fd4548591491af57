"""What people who download the builds run: doctor, install."""

from __future__ import annotations

from pathlib import Path

import click

from rockbuild.backends import BACKENDS
from rockbuild.commands.common import JSON, command, file, folder, settings, show
from rockbuild.core.jobs import DEFAULT_BACKEND


@command
@click.option(
    "--bundle",
    "bundle_dir",
    type=folder(exists=True),
    default=None,
    help="Also check this bundle: kernels for each GPU found, its audit, and the CPU variant its programs "
    "load on this CPU.",
)
@click.option(
    "--sysfs-root",
    type=folder(),
    default=Path("/sys"),
    show_default=True,
    help="Read the KFD topology and module parameters from this sysfs tree.",
)
@click.option(
    "--dev-root",
    type=folder(),
    default=Path("/dev"),
    show_default=True,
    help="Check device access (kfd, dri/renderD*) in this folder.",
)
@click.option("--proc-root", type=folder(), default=Path("/proc"), hidden=True)
@click.option(
    "--loader",
    type=file(exists=True),
    default=None,
    metavar="EXE",
    help="Windows: also check a program outside the bundle that loads its DLLs with plain LoadLibrary "
    "(a wrapper), started from the current folder: which amdhip64/amd_comgr/hiprtc DLL it would get.",
)
@click.option(
    "--windows-root",
    type=folder(exists=True),
    default=None,
    hidden=True,
    help="Check DLL loading against this Windows folder (%SystemRoot%), also on a host that is not Windows.",
)
@click.option(
    "--model",
    type=file(exists=True),
    default=None,
    metavar="GGUF",
    help="With --bundle: run the bundle's llama-bench on a real batch (512 tokens, CPU only) with this "
    "model, which is where a CPU variant this CPU cannot run dies (SIGILL).",
)
@click.option(
    "--fix-cpu",
    is_flag=True,
    help="With --bundle and --model: move a CPU variant that dies of SIGILL here into the bundle's "
    "disabled-cpu-variants/ folder (ggml then loads the next best one) and check again.",
)
@JSON
def doctor(
    bundle_dir: Path | None,
    sysfs_root: Path,
    dev_root: Path,
    proc_root: Path,
    loader: Path | None,
    windows_root: Path | None,
    model: Path | None,
    fix_cpu: bool,
    as_json: bool,
) -> None:
    """Check this machine's AMD GPUs (no ROCm needed): targets, device access, overrides, APU memory, a bundle."""
    from rockbuild.core.environment import WindowsHost
    from rockbuild.core.errors import UsageError
    from rockbuild.doctor import BundleCheck, Machine, run_doctor

    windows = settings().windows
    if windows_root is not None:
        windows = WindowsHost(windows_root.absolute(), windows.path if windows else ())
    if loader is not None and (bundle_dir is None or windows is None):
        raise UsageError(
            "--loader checks which DLLs a Windows program loads from a bundle: it needs --bundle, on Windows",
            hint="rockbuild doctor --bundle DIR --loader EXE",
        )
    if (model is not None or fix_cpu) and bundle_dir is None:
        raise UsageError(
            f"{'--model' if model is not None else '--fix-cpu'} checks a bundle's CPU variant: it needs --bundle",
            hint="rockbuild doctor --bundle DIR --model MODEL.gguf",
        )
    if fix_cpu and model is None:
        raise UsageError(
            "--fix-cpu needs --model: only a real batch shows whether this CPU runs the CPU variant ggml picks",
            hint="rockbuild doctor --bundle DIR --model MODEL.gguf --fix-cpu",
        )
    machine = Machine(
        sysfs_root=sysfs_root, dev_root=dev_root, proc_root=proc_root, env=settings().env, windows=windows
    )
    check = (
        BundleCheck(
            bundle_dir.absolute(),
            loader=loader.absolute() if loader else None,
            cwd=Path.cwd(),
            model=model.absolute() if model else None,
            fix_cpu=fix_cpu,
        )
        if bundle_dir
        else None
    )
    report = run_doctor(machine, bundle=check, table=settings().families)
    show(report, as_json)
    failure = report.failure()
    if failure is not None:
        raise failure


@command
@click.option(
    "--repo",
    default=None,
    metavar="OWNER/NAME",
    help="Release repository (default: lemonade-sdk/llamacpp-rocm, whose asset names rockbuild keeps).",
)
@click.option("--tag", default="latest", show_default=True, help="Release tag, or 'latest'.")
@click.option(
    "--target",
    default="auto",
    show_default=True,
    help="gfx target to install for; auto: this machine's GPU (a discrete one first).",
)
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default=DEFAULT_BACKEND,
    show_default=True,
    help="Which flavour of the release to install.",
)
@click.option("--dest", type=folder(), default=None, help="Folder to create (default: ./<asset name>).")
@click.option(
    "--api-url",
    default=None,
    metavar="URL",
    help="GitHub API (default: https://api.github.com; GitHub Enterprise: https://HOST/api/v3).",
)
@click.option(
    "--os",
    "os_name",
    type=click.Choice(["linux", "windows"]),
    default=None,
    help="Install the asset for this OS (default: this machine's).",
)
@click.option("--sysfs-root", type=folder(), default=Path("/sys"), hidden=True)
@click.option(
    "--require-attestation",
    is_flag=True,
    help="Refuse the asset unless its GitHub build provenance verifies (gh attestation verify; needs gh). "
    "Without it the provenance is checked whenever gh is installed; SHA256SUMS always is.",
)
@click.option(
    "--upgrade",
    is_flag=True,
    help="Replace an existing --dest folder (an older install): the new bundle is downloaded, verified and "
    "audited beside it first, and the old one is kept until then.",
)
@JSON
def install(
    repo: str | None,
    tag: str,
    target: str,
    backend: str,
    dest: Path | None,
    api_url: str | None,
    os_name: str | None,
    sysfs_root: Path,
    require_attestation: bool,
    upgrade: bool,
    as_json: bool,
) -> None:
    """Download the release asset that fits this machine's GPU, verify it (SHA256SUMS), extract it, audit it."""
    from rockbuild.install import DEFAULT_API_URL, DEFAULT_REPO, InstallOptions
    from rockbuild.install import install as install_asset

    show(
        install_asset(
            InstallOptions(
                repo=repo or DEFAULT_REPO,
                tag=tag,
                target=target,
                backend=backend,
                dest=dest,
                api_url=api_url or DEFAULT_API_URL,
                os_name=os_name,
                sysfs_root=sysfs_root,
                require_attestation=require_attestation,
                upgrade=upgrade,
                families=settings().families,
                context=settings(),
            )
        ),
        as_json,
    )


COMMANDS = (doctor, install)  # in the order `rockbuild --help` lists them
