"""The people who download the builds install rockbuild's small part (issue 57, item 1): ``doctor`` and ``install``
run with the packages of pyproject.toml's ``dependencies`` alone (no jinja2, PyGithub, rich, numpy, cyclonedx...),
and a command that needs the ``build`` extra says so in one line (exit 3). The commands run as a user runs them, in a
Python that sees the standard library, rockbuild and exactly those packages (``-S``: no site-packages), against the
local GitHub API server with a release rockbuild published; and the release carries rockbuild's own wheel."""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from support.github import GitHubAPIServer
from support.install import SYSFS, real_bundle
from support.options import context
from support.paths import REPO
from support.publishing import TOKEN, make_job

from rockbuild.core.errors import PublishError
from rockbuild.publish.release import PublishOptions, publish


def user_distributions() -> set[str]:
    """The distributions pyproject's ``dependencies`` bring, with what they require (markers for this machine)."""
    wanted = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    todo = [re.split(r"[\s<>=!~\[;]", spec, maxsplit=1)[0] for spec in wanted]
    seen: set[str] = set()
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        for req in md.requires(name) or []:
            base, _, marker = req.partition(";")
            if marker and "extra" in marker:
                continue
            todo.append(re.split(r"[\s<>=!~\[(]", base.strip(), maxsplit=1)[0])
    return seen


def user_site(tmp_path: Path) -> Path:
    """A folder holding links to rockbuild and to the top-level modules of :func:`user_distributions` only."""
    site = tmp_path / "user-site"
    site.mkdir()
    import rockbuild

    (site / "rockbuild").symlink_to(Path(rockbuild.__file__).resolve().parent)
    for name in user_distributions():
        dist = md.distribution(name)
        for first in sorted({f.parts[0] for f in dist.files or []}):
            if first.endswith((".dist-info", ".data")) or first in ("..", "__pycache__") or (site / first).exists():
                continue
            (site / first).symlink_to(Path(str(dist.locate_file(first))))
    return site


def as_user(site: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    program = f"import sys; sys.path[:0] = [{str(site)!r}]; from rockbuild.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-S", "-c", program, *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(site.parent), **(env or {})},
        timeout=60,
    )


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """b1000 of a local GitHub: one Linux gfx1151 job, and rockbuild's wheel attached for its users."""
    base = tmp_path_factory.mktemp("user")
    wheel_dir = base / "wheel"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheel_dir),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr  # hatchling comes with the test extra
    (wheel,) = wheel_dir.glob("rockbuild-*.whl")
    with GitHubAPIServer(token=TOKEN) as gh:
        job = make_job(base / "out", "linux-gfx1151")
        real_bundle(job / "bundle", ("gfx1151",))
        report = publish(
            PublishOptions(
                context=context(),
                job_dirs=(job,),
                repo=gh.full_name,
                api_url=gh.api_url,
                token=TOKEN,
                throttle=False,
                out=base / "release",
                tool_wheel=wheel,
            )
        )
        assert report.state == "published", report.message
        yield gh, wheel


def test_doctor_and_install_run_with_the_user_dependencies_alone(released, tmp_path):
    gh, _wheel = released
    site = user_site(tmp_path)
    linked = {p.name for p in site.iterdir()}
    for heavy in ("jinja2", "github", "rich", "numpy", "cyclonedx", "zstandard", "bracex"):
        assert heavy not in linked
    doctor = as_user(site, "doctor", "--json", "--sysfs-root", str(SYSFS / "strix-halo" / "sys"))
    assert "Traceback" not in doctor.stderr and "internal error" not in doctor.stderr, doctor.stderr
    assert json.loads(doctor.stdout)["gpus"], doctor.stdout
    installed = as_user(
        site,
        "install",
        "--json",
        "--repo",
        gh.full_name,
        "--api-url",
        gh.api_url,
        "--target",
        "gfx1151",
        "--dest",
        str(tmp_path / "llama"),
        env={"ROCKBUILD_CACHE": str(tmp_path / "c")},
    )
    assert installed.returncode == 0, installed.stderr
    assert json.loads(installed.stdout)["asset"]["name"] == "llama-b1000-ubuntu-rocm-gfx1151-x64.tar.gz"
    run = subprocess.run([str(tmp_path / "llama" / "llama-server")], capture_output=True, text=True, timeout=30)
    assert run.stdout.strip() == "llama-server 7"
    # a maintainer's command in this install: what to add, in one line, no traceback
    matrix = as_user(site, "matrix")
    assert matrix.returncode == 3 and "Traceback" not in matrix.stderr, matrix.stderr
    assert matrix.stderr.splitlines()[0] == (
        "error: this rockbuild was installed without bracex (its 'build' extra), which the command needs"
    )
    assert "pip install -e '.[build]'" in matrix.stderr


def test_the_release_carries_rockbuilds_wheel_and_says_how_to_use_it(released, tmp_path):
    gh, wheel = released
    release = gh.state.release_by_tag("b1000")
    asset = next(a for a in release.assets if a.name == wheel.name)
    assert asset.data == wheel.read_bytes()
    sums = next(a for a in release.assets if a.name == "SHA256SUMS").data.decode()
    assert f"  {wheel.name}\n" in sums
    manifest = json.loads(next(a for a in release.assets if a.name == "manifest.json").data)
    assert {"name": wheel.name, "kind": "tool"}.items() <= next(
        a for a in manifest["assets"] if a["name"] == wheel.name
    ).items()
    assert (
        f"`pipx install https://github.com/{gh.full_name}/releases/download/b1000/{wheel.name}`, then "
        "`rockbuild doctor` and `rockbuild install`"
    ) in release.body
    # the wheel asks for the user packages only
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        requires = [line for line in zf.read(meta).decode().splitlines() if line.startswith("Requires-Dist:")]
    plain = [r for r in requires if "extra ==" not in r]
    assert sorted(r.split()[1].split(">")[0].lower() for r in plain) == [
        "click",
        "filelock",
        "pefile",
        "pyelftools",
        "pyyaml",
        "requests",
    ]
    # anything else is refused before a byte is written
    job = make_job(tmp_path / "out", "linux-gfx1151")
    for name, data, words in (
        ("tool.whl", b"x", "not rockbuild's wheel"),
        ("rockbuild-1.0-py3-none-any.whl", b"x", "not a wheel"),
        ("rockbuild-1.0-py3-none-any.whl", None, "holds no rockbuild package"),
    ):
        bogus = tmp_path / name
        if data is None:
            with zipfile.ZipFile(bogus, "w") as zf:
                zf.writestr("other/cli.py", "")
        else:
            bogus.write_bytes(data)
        with pytest.raises(PublishError, match=words):
            publish(
                PublishOptions(context=context(), job_dirs=(job,), dry_run=True, tool_wheel=bogus, out=tmp_path / "r")
            )
        assert not (tmp_path / "r").exists()
