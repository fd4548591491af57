"""Archive round trips: unzip and Python's zipfile keep the exec bits; tar.gz extracts (rockbuild's safe extractor)
to the same files; symlinks become the file they point to; a consumer resolves every asset exactly as Lemonade does."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
import requests
from support.github import GitHubAPIServer
from support.options import context
from support.publishing import TOKEN, make_job

from rockbuild.archive import extract_tarball
from rockbuild.core.errors import PublishError
from rockbuild.publish.archives import collect_entries, write_tar_gz, write_zip
from rockbuild.publish.release import PublishOptions, publish


def tree(root: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            out[path.relative_to(root).as_posix()] = (stat.S_IMODE(path.stat().st_mode), path.read_bytes())
    return out


@pytest.fixture
def bundle(tmp_path) -> Path:
    return make_job(tmp_path / "out", "linux-gfx1151") / "bundle"


@pytest.mark.skipif(shutil.which("unzip") is None, reason="unzip is not installed (apt-get install -y unzip)")
def test_unzip_restores_exec_bits_and_the_flat_layout(bundle, tmp_path):
    entries, notes = collect_entries(bundle)
    assert notes == []
    archive = write_zip(entries, tmp_path / "a.zip", mtime=1_764_000_000)
    dest = tmp_path / "unzipped"
    subprocess.run(["unzip", "-q", str(archive), "-d", str(dest)], check=True)
    assert tree(dest) == tree(bundle)
    server = dest / "llama-server"
    assert os.access(server, os.X_OK) and stat.S_IMODE(server.stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "rocblas/library/TensileLibrary_lazy_gfx1151.dat").stat().st_mode) == 0o644


def test_zipfile_sees_the_same_list_with_modes(bundle, tmp_path):
    entries, _ = collect_entries(bundle)
    archive = write_zip(entries, tmp_path / "a.zip", mtime=1_764_000_000)
    with zipfile.ZipFile(archive) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        files = {n for n in infos if not n.endswith("/")}
        assert files == set(tree(bundle))
        assert {"rocblas/", "rocblas/library/"} <= set(infos)  # folders recorded too
        for name in files:
            info = infos[name]
            assert info.create_system == 3
            assert stat.S_IMODE(info.external_attr >> 16) == stat.S_IMODE((bundle / name).stat().st_mode)
            assert stat.S_ISREG(info.external_attr >> 16)
            assert zf.read(name) == (bundle / name).read_bytes()
        assert infos["llama-server"].external_attr >> 16 & 0o111 == 0o111


def test_tar_gz_holds_the_same_files(bundle, tmp_path):
    entries, _ = collect_entries(bundle)
    archive = write_tar_gz(entries, tmp_path / "a.tar.gz", mtime=1_764_000_000)
    dest = tmp_path / "untarred"
    extract_tarball(archive, dest)
    assert tree(dest) == tree(bundle)


def test_a_symlink_is_stored_as_the_file_it_points_to(bundle, tmp_path):
    (bundle / "libfoo.so.1.2").write_bytes(b"the library")
    (bundle / "libfoo.so.1").symlink_to("libfoo.so.1.2")
    entries, notes = collect_entries(bundle)
    assert notes == ["libfoo.so.1 is a symlink to libfoo.so.1.2: stored the file it points to under the link's name"]
    archive = write_zip(entries, tmp_path / "a.zip", mtime=1_764_000_000)
    with zipfile.ZipFile(archive) as zf:
        assert zf.read("libfoo.so.1") == b"the library"
        assert stat.S_ISREG(zf.getinfo("libfoo.so.1").external_attr >> 16)
    dest = tmp_path / "untarred"
    extract_tarball(write_tar_gz(entries, tmp_path / "a.tar.gz", mtime=1_764_000_000), dest)
    assert not (dest / "libfoo.so.1").is_symlink() and (dest / "libfoo.so.1").read_bytes() == b"the library"


def test_a_symlink_out_of_the_bundle_is_refused(bundle, tmp_path):
    (tmp_path / "outside.so").write_bytes(b"x")
    (bundle / "libbar.so").symlink_to(tmp_path / "outside.so")
    with pytest.raises(PublishError, match="libbar.so .* is a symlink to .*outside.so, which is not a file inside"):
        collect_entries(bundle)


# ---------------------------------------------------------------------------------------------------------------------
# A consumer, exactly as Lemonade resolves a rocm-nightly build (seed-pipeline.md section 5)

LEMONADE_FAMILIES = {
    **{f"gfx{n}": "gfx103X" for n in range(1030, 1037)},
    **{f"gfx{n}": "gfx110X" for n in range(1100, 1104)},
    "gfx1200": "gfx120X",
    "gfx1201": "gfx120X",
}


def rocm_asset_family(isa: str) -> str:
    return LEMONADE_FAMILIES.get(isa, isa)


@pytest.mark.skipif(shutil.which("unzip") is None, reason="unzip is not installed")
def test_lemonade_finds_every_asset_of_latest(tmp_path):
    out = tmp_path / "out"
    jobs = [
        make_job(out, "linux-gfx1151"),
        make_job(out, "windows-gfx1151"),
        make_job(out, "linux-gfx110X", targets=("gfx1100", "gfx1101", "gfx1102", "gfx1103")),
        make_job(out, "windows-gfx103X", targets=tuple(f"gfx{n}" for n in range(1030, 1037))),
        make_job(out, "linux-gfx120X", targets=("gfx1200", "gfx1201")),
        make_job(out, "linux-gfx90a", targets=("gfx90a",)),
    ]
    with GitHubAPIServer(token=TOKEN) as gh:
        gh.state.add_release("b1292", assets={"llama-b1292-ubuntu-rocm-gfx1151-x64.zip": b"old"})
        publish(
            PublishOptions(
                context=context(),
                job_dirs=tuple(jobs),
                repo=gh.full_name,
                api_url=gh.api_url,
                token=TOKEN,
                throttle=False,
                out=tmp_path / "release",
            )
        )
        # Lemonade: GET releases/latest -> tag_name (anonymous, like a user's machine)
        latest = requests.get(f"{gh.api_url}/repos/{gh.full_name}/releases/latest", timeout=10).json()
        version = latest["tag_name"]
        assert version == "b1293"
        checked = 0
        for os_word, job_os in (("ubuntu", "linux"), ("windows", "windows")):
            for job in jobs:
                if not job.name.startswith(job_os):
                    continue
                targets = json.loads((job / "build.json").read_text())["gpu_targets"]
                for isa in targets:
                    name = f"llama-{version}-{os_word}-rocm-{rocm_asset_family(isa)}-x64.zip"
                    url = f"{gh.base}/{gh.full_name}/releases/download/{version}/{name}"
                    dest = tmp_path / "dl" / name
                    dest.parent.mkdir(exist_ok=True)
                    if not dest.exists():
                        urllib.request.urlretrieve(url, dest)
                        unpacked = tmp_path / "unpacked" / name
                        unpacked.mkdir(parents=True)
                        subprocess.run(["unzip", "-q", str(dest), "-d", str(unpacked)], check=True)
                        exe = unpacked / ("llama-server.exe" if os_word == "windows" else "llama-server")
                        assert exe.is_file() and os.access(exe, os.X_OK), name
                        with zipfile.ZipFile(dest) as zf:
                            assert zf.getinfo(exe.name).external_attr >> 16 & 0o111
                    checked += 1
        assert checked == 1 + 1 + 4 + 7 + 2 + 1


def _copy_scrambled(src: Path, dest: Path) -> None:
    """The same files with the same modes, written in the opposite order with other timestamps (another machine,
    another day)."""
    import random

    files = sorted(p for p in src.rglob("*") if p.is_file())
    for path in reversed(files):
        target = dest / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
        target.chmod(stat.S_IMODE(path.stat().st_mode))
        stamp = random.randint(1_000_000_000, 1_900_000_000)
        os.utime(target, (stamp, stamp))


@pytest.mark.parametrize("epoch", [None, 1_733_000_000])
def test_the_same_bundle_gives_the_same_archive_bytes(tmp_path, epoch):
    """Reproducible archives (issue 21): sorted members, one timestamp (SOURCE_DATE_EPOCH, else the llama.cpp
    commit's date), owner 0, no gzip name or time, fixed compression: byte-identical across runs and folders."""
    from rockbuild.settings import Settings

    first = make_job(tmp_path / "a" / "out", "linux-gfx1151")
    build = json.loads((first / "build.json").read_text())
    build["llama_cpp"]["commit_time"] = 1_764_000_000
    (first / "build.json").write_text(json.dumps(build))
    second = tmp_path / "b" / "out" / "linux-gfx1151"
    _copy_scrambled(first, second)
    build["finished"] = "2027-01-01T00:00:00+00:00"  # built again later: the archives must not change
    (second / "build.json").write_text(json.dumps(build))
    settings = Settings.from_environment({"SOURCE_DATE_EPOCH": str(epoch)} if epoch else {})

    def archives(job: Path, out: Path) -> dict[str, tuple[str, Path]]:
        report = publish(PublishOptions(context=settings, job_dirs=(job,), dry_run=True, token="", out=out))
        return {a.name: (a.sha256, a.path) for a in report.assets if a.kind in ("zip", "tar.gz")}

    one, two = archives(first, tmp_path / "a" / "release"), archives(second, tmp_path / "b" / "release")
    assert len(one) == 2 and {n: h for n, (h, _) in one.items()} == {n: h for n, (h, _) in two.items()}
    zip_path = next(path for name, (_, path) in one.items() if name.endswith(".zip"))
    with zipfile.ZipFile(zip_path) as zf:
        stamps = {info.date_time for info in zf.infolist()}
    expected = time.gmtime(epoch or 1_764_000_000)[:5]
    assert {s[:5] for s in stamps} == {tuple(expected)}  # (zip keeps 2-second resolution)
