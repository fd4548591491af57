"""The night CI runs: resolve, nightly, publish, alert; and bisect, for the night a ROCm nightly broke a job."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from rockbuild.commands.common import (
    COMPILE,
    GITHUB,
    IMAGES,
    JOB_SELECTION,
    JSON,
    MODEL,
    NIGHT_PINS,
    command,
    file,
    folder,
    matrix_jobs,
    quiet_with_json,
    settings,
    show,
)
from rockbuild.core.options import CompileFlags, GitHubTarget, JobSelection, ModelChoice, Pins

if TYPE_CHECKING:
    from rockbuild.core.records import HeldBack
    from rockbuild.nightly import NightData, NightReport
    from rockbuild.publish.image import ImageOptions

PUBLISH_CONFIG = click.option(
    "--publish-config",
    type=file(exists=True),
    default=None,
    help="Publish configuration YAML (default: the shipped config/publish.yaml): tags, asset names, glibc floor.",
)


# the emergency override of publish's whole-release check (rockbuild.publish.whole): written into the notes and
# manifest.json
ALLOW_PARTIAL = click.option(
    "--allow-partial",
    "allow_partial",
    default=None,
    metavar="REASON",
    help="Publish even though a bundle lacks llama-server's chat page or a program of programs.yaml (an emergency); "
    "REASON goes into the release notes and manifest.json.",
)

# rockbuild's own wheel on the release: what the people who download the builds install doctor and install from
TOOL_WHEEL = click.option(
    "--tool-wheel",
    "tool_wheel",
    type=file(exists=True),
    default=None,
    metavar="WHEEL",
    help="Attach rockbuild's own wheel (python -m pip wheel --no-deps -w dist .) to the release: its users install "
    "`rockbuild doctor` and `rockbuild install` from it (pipx install URL); in SHA256SUMS and manifest.json.",
)


@command
@JOB_SELECTION
@NIGHT_PINS
@click.option(
    "--out", "out_file", type=file(), default=Path("inputs.json"), show_default=True, help="Write the inputs here."
)
@click.option(
    "--json", "as_json", is_flag=True, callback=quiet_with_json, help="Also print the inputs as JSON on stdout."
)
@GITHUB
def resolve(selection: JobSelection, pins: Pins, out_file: Path, as_json: bool, github: GitHubTarget) -> None:
    """Pin the night's inputs once for every job: the llama.cpp commit and each group's ROCm tarball (inputs.json).

    A group whose newest tarball is older than --max-age-days fails its own jobs (building them with --inputs
    refuses, naming the group and the date found); the other jobs go on. With --repo, each group's last good
    tarball (the newest that passed smoke in a published release) is recorded too, for the night's fallback.
    """
    from rockbuild import matrix as matrix_mod
    from rockbuild.nightly import resolve_inputs

    jobs = matrix_mod.select_jobs(matrix_jobs(selection), selection.only)
    inputs = resolve_inputs(jobs, pins, patches=settings().patch_series.digest)
    if github.repo:
        from rockbuild.nightly.run import known_good, release_manifests
        from rockbuild.pipeline.inputs import attach_last_good

        history = release_manifests(github.repo, api_url=github.api_url, token=settings().github.token)
        good, _read = known_good(inputs, history)
        inputs = attach_last_good(inputs, good)
    inputs.write(out_file)
    show(inputs, as_json)


@command
@click.argument("job_dirs", metavar="[JOB_DIR...]", nargs=-1, type=folder())
@click.option(
    "--plan",
    is_flag=True,
    help="CI prepare: resolve the inputs (--inputs), compare with the last release, print the matrix to "
    'build ({"include": []} when nothing changed; also matrix= and changed= in $GITHUB_OUTPUT).',
)
@click.option(
    "--job",
    "job_id",
    default=None,
    metavar="ID",
    help="CI leg: fetch, build, bundle and smoke job ID of the planned night (--inputs), with resume.",
)
@click.option(
    "--release",
    is_flag=True,
    help="CI publish: publish the JOB_DIRs of the planned night (--inputs) by the gating rules; alert on failure.",
)
@click.option(
    "--inputs",
    "inputs_file",
    type=file(),
    default=None,
    help="The night's inputs.json: written by --plan, read by --job and --release (default: OUT/inputs.json).",
)
@click.option(
    "--held-back",
    "held_back_file",
    type=file(exists=True),
    default=None,
    help="A night held back (regressions.ship: newest-good): its held-back.json; build from the commit "
    "before the first bad one it names and say so in the release (the CI workflow passes it when it "
    "dispatches the night again).",
)
@JOB_SELECTION
@click.option(
    "--publish/--no-publish",
    "publish_release",
    default=None,
    help="Publish the release (default: when a repository is known, --repo or $GITHUB_REPOSITORY); "
    "--plan compares with the last release only when publishing.",
)
@click.option(
    "-j",
    "--jobs",
    "parallel",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Jobs to run at the same time.",
)
@click.option("--compile-jobs", type=click.IntRange(min=1), default=None, help="Parallel compiles per job.")
@click.option(
    "--out",
    "out_dir",
    type=folder(),
    default=Path("out"),
    show_default=True,
    help="Job folders, inputs.json and release files go here; a re-run resumes.",
)
@NIGHT_PINS
@GITHUB
@PUBLISH_CONFIG
@click.option(
    "--smoke/--no-smoke",
    "smoke_test",
    default=True,
    show_default=True,
    help="Smoke-test every bundle (needs the model; --no-smoke ships untested bundles).",
)
@MODEL
@COMPILE
@ALLOW_PARTIAL
@TOOL_WHEEL
@IMAGES
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    callback=quiet_with_json,
    help="Print the night's report (or plan) as JSON on stdout.",
)
@click.pass_context
def nightly(
    ctx: click.Context,
    job_dirs: tuple[Path, ...],
    plan: bool,
    job_id: str | None,
    release: bool,
    inputs_file: Path | None,
    held_back_file: Path | None,
    selection: JobSelection,
    publish_release: bool | None,
    parallel: int,
    compile_jobs: int | None,
    out_dir: Path,
    pins: Pins,
    github: GitHubTarget,
    publish_config: Path | None,
    smoke_test: bool,
    model: ModelChoice,
    compile_flags: CompileFlags,
    allow_partial: str | None,
    tool_wheel: Path | None,
    images: ImageOptions | None,
    as_json: bool,
) -> None:
    """The whole night: resolve, skip if the last release has these inputs, build every job, publish, alert.

    Jobs for this machine's OS run fetch -> build -> bundle -> smoke; a failure does not stop the others. A re-run
    with the same --out resumes: stages whose inputs did not change are not redone. Exit 0 when the release was
    made (or skipped as unchanged), 1 when a required job failed.

    \b
    The CI fan-out runs the same night in three modes (one code path):
      rockbuild nightly --plan --inputs inputs.json         # prepare: the matrix, empty when nothing changed
      rockbuild nightly --job ID --inputs inputs.json       # each leg: one job's stages, with resume
      rockbuild nightly --release --inputs inputs.json out/job-*   # publish by the gating rules, alert on failure

    With --images REGISTRY/NAME the release also gets a container image per Linux asset, tested with podman and
    pushed before the release is published (a failed test or push is a failed publish).
    """
    from rockbuild.core.errors import UsageError
    from rockbuild.nightly import NightOptions, plan_night, release_night, run_night, run_night_job
    from rockbuild.nightly.overview import Overview

    mode = night_mode(plan, job_id, release, job_dirs)
    if images is not None and mode in ("plan", "job"):
        raise UsageError(f"--images is for --release (or the whole night), not --{mode}")
    if images is not None and not images.test:
        raise UsageError(
            "--no-image-test: the night pushes its images, and an untested image is never pushed",
            hint="rockbuild publish --dry-run --images ... --no-image-test makes them without the test",
        )
    overview = Overview(enabled=not as_json and mode in (None, "job"))
    held_back = None
    if held_back_file is not None:
        if mode in ("job", "release"):
            raise UsageError(f"--held-back is for --plan (or the whole night), not --{mode}: the inputs carry it")
        held_back, pins = held_back_pins(held_back_file, pins)
    options = NightOptions(
        only=selection.only,
        pins=pins,
        github=github,
        model=model,
        compile=compile_flags,
        out=out_dir,
        publish=publish_release,
        parallel=parallel,
        compile_jobs=compile_jobs,
        smoke=smoke_test,
        on_event=overview.on_event,
        data=night_data(selection, publish_config, compile_flags.patch_series),
        allow_partial=allow_partial,
        images=images,
        held_back=held_back,
        tool_wheel=tool_wheel,
        context=settings(),
    )
    if mode == "plan":
        planned = plan_night(options, inputs_file=inputs_file)
        output = settings().github.output
        if output is not None:
            planned.write_github_output(output)
        show(planned, as_json)
        return
    with overview:
        if mode == "job":
            assert job_id is not None
            report = run_night_job(options, job_id, inputs_file=inputs_file)
        elif mode == "release":
            report = release_night(options, job_dirs, inputs_file=inputs_file)
        else:
            report = run_night(options)
    if not as_json:
        overview.print_summary(report)
    write_image_output(report)
    if mode == "release" and report.held_back is not None:  # the whole night builds it again itself
        write_held_back_output(report.held_back, out_dir)
    show(report, as_json)
    ctx.exit(report.exit_code)


def held_back_pins(path: Path, pins: Pins) -> tuple[HeldBack, Pins]:
    """--held-back FILE: its record, and the pins with llama.cpp at its good commit (a different --llama-ref is a
    UsageError)."""
    from dataclasses import replace

    from rockbuild.core.errors import UsageError
    from rockbuild.core.records import HeldBack

    held = HeldBack.read(path)
    if held is None:
        raise UsageError(f"--held-back {path}: no such file")
    given = (pins.llama_ref or "").strip().lower()
    if given and given not in ("master", "latest") and not held.good.commit.startswith(given):
        raise UsageError(
            f"--held-back builds llama.cpp {held.good.commit[:12]} (the commit before "
            f"{held.first_bad.commit[:12]}), not --llama-ref {pins.llama_ref}",
            hint="leave --llama-ref out, or give that commit",
        )
    return held, replace(pins, llama_ref=held.good.commit)


def write_held_back_output(held: HeldBack, out_dir: Path) -> None:
    """``held_back_ref=`` and ``held_back=`` in $GITHUB_OUTPUT (in CI) for a night ``--release`` held back
    (regressions.ship: newest-good): the commit the workflow dispatches the night again from, and the held-back.json
    that run's ``--plan --held-back`` takes."""
    output = settings().github.output
    if output is None:
        return
    with open(output, "a", encoding="utf-8") as fh:
        fh.write(f"held_back_ref={held.good.commit}\nheld_back={Path(out_dir).absolute() / held.FILE}\n")


def write_image_output(report: NightReport) -> None:
    """``images=`` in $GITHUB_OUTPUT (in CI): each pushed image's repository and digest, as JSON, for the workflow's
    attestation of each (``[]`` when none was pushed)."""
    import json

    output = settings().github.output
    if output is None:
        return
    pushed = [
        {"name": image["repository"], "digest": image["digest"]}
        for image in (report.release or {}).get("images", [])
        if image.get("push")
    ]
    with open(output, "a", encoding="utf-8") as fh:
        fh.write(f"images={json.dumps(pushed, separators=(',', ':'))}\n")


def night_data(
    selection: JobSelection, publish_config: Path | None = None, patches_file: Path | None = None
) -> NightData:
    """What a night reads from the data files (-c, --os, --target, --publish-config, --patches), loaded once
    here."""
    from rockbuild.matrix import load_regression_policy
    from rockbuild.nightly import NightData

    files = settings().but(publish_file=publish_config, patches_file=patches_file)
    return NightData(
        jobs=tuple(matrix_jobs(selection)),
        publish=files.publish,
        smoke=files.smoke,
        policy=files.policy,
        programs=files.programs,
        patches=files.patch_series,
        regressions=load_regression_policy(settings().but(matrix_file=selection.matrix_file).matrix_file),
    )


def night_mode(plan: bool, job_id: str | None, release: bool, job_dirs: tuple[Path, ...]) -> str | None:
    """plan | job | release, or None for the whole night on this machine."""
    from rockbuild.core.errors import UsageError

    modes = [name for name, given in (("plan", plan), ("job", bool(job_id)), ("release", release)) if given]
    if len(modes) > 1:
        raise UsageError(f"give one of --plan, --job ID and --release, not {' and '.join('--' + m for m in modes)}")
    if job_dirs and modes != ["release"]:
        raise UsageError("JOB_DIRs are for --release (the folders of the night's legs)")
    return modes[0] if modes else None


@command
@click.option("--job", "job_id", required=True, metavar="ID", help="The job to bisect (rockbuild matrix lists them).")
@click.option(
    "--good",
    default=None,
    metavar="DATE",
    help="A nightly date (YYYY-MM-DD, or a version like 10.1.0a20261128) the job passed on.",
)
@click.option("--bad", default=None, metavar="DATE", help="A later nightly date the job fails on.")
@click.option(
    "--llama",
    "llama_range",
    default=None,
    metavar="GOOD..BAD",
    help="Bisect llama.cpp commits instead of ROCm nightlies: a commit (tag, branch) the job passed on and a "
    "later one it fails on (GOOD..: up to --llama-ref), on the job's newest ROCm.",
)
@click.option("--check-ends", is_flag=True, help="Test the good and bad ends first (two more builds).")
@click.option(
    "-c",
    "--config",
    "matrix_file",
    type=file(),
    default=None,
    help="Matrix YAML (default: the shipped config/nightly.yaml).",
)
@click.option(
    "--llama-ref",
    default=None,
    metavar="REF",
    help="llama.cpp tag, branch or commit to build on every date (default: the matrix's llama_ref).",
)
@click.option("--index-url", default=None, help="Read this TheRock index page instead of the channel's host.")
@click.option("--git-url", default=None, help="llama.cpp repository (default: the upstream one).")
@click.option(
    "--out",
    "out_dir",
    type=folder(),
    default=Path("out/bisect"),
    show_default=True,
    help="One folder per date tested (OUT/<version>/<job-id>); a re-run reuses what passed. --llama builds "
    "every commit in one folder, OUT/<job-id>.",
)
@click.option(
    "--smoke/--no-smoke",
    "smoke_test",
    default=True,
    show_default=True,
    help="Smoke-test each date's (or commit's) bundle (--no-smoke: one is bad only when it does not build).",
)
@click.option("--compile-jobs", type=click.IntRange(min=1), default=None, help="Parallel compiles.")
@MODEL
@COMPILE
@JSON
def bisect(
    job_id: str,
    good: str | None,
    bad: str | None,
    llama_range: str | None,
    check_ends: bool,
    matrix_file: Path | None,
    llama_ref: str | None,
    index_url: str | None,
    git_url: str | None,
    out_dir: Path,
    smoke_test: bool,
    compile_jobs: int | None,
    model: ModelChoice,
    compile_flags: CompileFlags,
    as_json: bool,
) -> None:
    """Name the first ROCm nightly that breaks a job: build, bundle and smoke-test the nightlies between a good and a
    bad date, halving the range each time (ccache and the per-date folders make a re-run cheap). With --llama
    GOOD..BAD, name the first llama.cpp commit that breaks it instead."""
    from rockbuild.core.errors import UsageError
    from rockbuild.nightly import NightOptions
    from rockbuild.nightly.bisect import bisect_llama, bisect_rocm, parse_date

    if llama_range is not None and (good or bad):
        raise UsageError("give --llama GOOD..BAD (llama.cpp commits) or --good and --bad (ROCm dates), not both")
    if llama_range is None and not (good and bad):
        raise UsageError("give --good and --bad (ROCm nightly dates), or --llama GOOD..BAD (llama.cpp commits)")

    options = NightOptions(
        pins=Pins(llama_ref=llama_ref, index_url=index_url, git_url=git_url),
        model=model,
        compile=compile_flags,
        out=out_dir,
        publish=False,
        compile_jobs=compile_jobs,
        smoke=smoke_test,
        data=night_data(JobSelection(matrix_file), None, compile_flags.patch_series),
        context=settings(),
    )
    if llama_range is not None:
        show(bisect_llama(options, job_id, llama_range, check_ends=check_ends), as_json)
        return
    assert good is not None and bad is not None
    show(
        bisect_rocm(options, job_id, parse_date(good, "--good"), parse_date(bad, "--bad"), check_ends=check_ends),
        as_json,
    )


@command
@click.argument("job_dirs", metavar="JOB_DIR...", nargs=-1, required=False, type=folder(exists=True))
@click.option(
    "--inputs",
    "inputs_file",
    type=file(exists=True),
    default=None,
    help="The night's inputs.json: every job in it counts (one without a folder as failed); a folder built "
    "from another commit is refused. JOB_DIRs default to out/<job-id>.",
)
@GITHUB
@PUBLISH_CONFIG
@click.option("--tag", default=None, help="Use this tag (default: the next b#### after the highest tag or release).")
@click.option(
    "--tag-scheme",
    "scheme",
    type=click.Choice(["sequential", "llama"]),
    default=None,
    help="sequential: b####; llama: b<llama.cpp build>-rocm<version> (default: publish.yaml's).",
)
@click.option("--draft", is_flag=True, help="Leave the complete release as a draft (not shown as latest).")
@click.option("--dry-run", is_flag=True, help="Write the archives, checksums, manifest and notes; no API writes.")
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="After publishing, delete rockbuild's published releases older than the newest N.",
)
@click.option(
    "--out",
    "out_dir",
    type=folder(),
    default=None,
    help="Folder for the release files (default: release/ beside the job folders).",
)
@ALLOW_PARTIAL
@TOOL_WHEEL
@IMAGES
@JSON
def publish(
    job_dirs: tuple[Path, ...],
    inputs_file: Path | None,
    github: GitHubTarget,
    publish_config: Path | None,
    tag: str | None,
    scheme: str | None,
    draft: bool,
    dry_run: bool,
    keep: int | None,
    out_dir: Path | None,
    allow_partial: str | None,
    tool_wheel: Path | None,
    images: ImageOptions | None,
    as_json: bool,
) -> None:
    """Archive the night's bundles and publish them as one immutable GitHub release (token: $GITHUB_TOKEN/$GH_TOKEN).

    The release is created as a draft, every asset uploaded and verified, then published in one call. A re-run
    completes a draft; a published release is never changed. A release is whole or it is not published: every bundle
    must carry llama-server's chat page and every program of programs.yaml (--allow-partial REASON: an emergency).
    With --images REGISTRY/NAME each Linux asset also becomes a container image, tested with podman before anything
    is written and pushed just before the release is published (a failed push leaves the draft; run again).
    """
    from rockbuild.core.errors import UsageError
    from rockbuild.nightly.run import job_dirs_to_publish
    from rockbuild.publish.release import PublishOptions
    from rockbuild.publish.release import publish as publish_release

    if images is not None and not images.test and not dry_run:
        raise UsageError("--no-image-test is for --dry-run: an untested image is never pushed")
    show(
        publish_release(
            PublishOptions(
                job_dirs=job_dirs_to_publish(inputs_file, job_dirs),
                repo=github.repo,
                api_url=github.api_url,
                tag=tag,
                scheme=scheme,
                draft=draft,
                dry_run=dry_run,
                keep=keep,
                out=out_dir,
                allow_partial=allow_partial,
                images=images,
                tool_wheel=tool_wheel,
                context=settings(),
            ),
            settings().but(publish_file=publish_config).publish,
            settings().programs,
        ),
        as_json,
    )


@command
@click.argument("job_dirs", metavar="[JOB_DIR...]", nargs=-1, type=folder(exists=True))
@click.option("--run-url", required=True, metavar="URL", help="The CI run that failed (linked from the issue).")
@click.option(
    "--failed-leg",
    "failed_legs",
    multiple=True,
    metavar="LEG[=REASON]",
    help="A leg of the night that failed outside any job folder (prepare, build, gpu-smoke, publish), with "
    "what it said when known. Repeatable; the issue's title names them.",
)
@GITHUB
@JSON
def alert(
    job_dirs: tuple[Path, ...], run_url: str, failed_legs: tuple[str, ...], github: GitHubTarget, as_json: bool
) -> None:
    """Comment on the open 'nightly-failure' issue (or open one) with each failed leg and job, its step and log tail."""
    from rockbuild.core.errors import UsageError
    from rockbuild.publish.alert import AlertTarget, LegFailure, send_alert

    if not job_dirs and not failed_legs:
        raise UsageError("nothing to report: give the night's job folders, or --failed-leg LEG")
    legs = [LegFailure.parse(text) for text in failed_legs]
    show(
        send_alert(
            job_dirs,
            AlertTarget(run_url=run_url, repo=github.repo, api_url=github.api_url),
            context=settings(),
            config=settings().publish,
            legs=legs,
            published=not legs,
        ),
        as_json,
    )


@command
@GITHUB
@click.option(
    "--last",
    type=click.IntRange(min=2),
    default=30,
    show_default=True,
    help="Read the manifests of this many of the newest published releases.",
)
@click.option(
    "--threshold",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Flag a figure more than this many per cent below the median of the 7 releases before it.",
)
@click.option(
    "--max-spread",
    type=click.FloatRange(min=0),
    default=None,
    help="Judge no figure whose repetitions spread by more than this many per cent of their mean "
    "[default: the threshold].",
)
@click.option("--alert", is_flag=True, help="File the drops as a 'performance-regression' issue (token: issues write).")
@JSON
def perf(
    github: GitHubTarget, last: int, threshold: float, max_spread: float | None, alert: bool, as_json: bool
) -> None:
    """Each asset's GPU llama-bench figures (pp512, tg128) release after release; exit 1 when one dropped."""
    from rockbuild.core.errors import UsageError
    from rockbuild.perf import PerfRegression, read_perf

    repo = github.repo or settings().github.repository
    if not repo:
        raise UsageError("which releases? pass --repo OWNER/NAME")
    report = read_perf(
        repo,
        context=settings(),
        api_url=github.api_url,
        last=last,
        threshold=threshold,
        alert=alert,
        max_spread=threshold if max_spread is None else max_spread,
    )
    show(report, as_json)
    if report.drops:
        first = report.drops[0]
        raise PerfRegression(f"{len(report.drops)} figure(s) dropped more than {threshold:g} %: {first.render()}")


COMMANDS = (resolve, nightly, bisect, publish, alert, perf)  # in the order `rockbuild --help` lists them
