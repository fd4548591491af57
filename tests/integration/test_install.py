"""rockbuild install against the local GitHub API server (tests/support/github.py): a release published by rockbuild's own
publisher from small real bundles (programs compiled here, libggml-hip with a real .hip_fatbin), and a seed-style
release (zip assets, no manifest) uploaded directly. The installed llama-server is run to prove the extraction."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
from support.github import GitHubAPIServer
from support.install import SYSFS, options, real_bundle
from support.options import context
from support.publishing import TOKEN, make_job, tiny_pe

from rockbuild.core.errors import AuditError, ChecksumError, NotFoundError, UnsafeArchiveError, UsageError
from rockbuild.core.jobs import load_families
from rockbuild.core.programs import load_programs
from rockbuild.install import InstallOptions, asset_family, extract_zip_safely, install
from rockbuild.publish.archives import collect_entries, write_zip
from rockbuild.publish.release import PublishOptions, publish
from rockbuild.settings import Settings

GFX103X_SEED = ("gfx1030", "gfx1031", "gfx1032", "gfx1034")  # the seed's gfx103X: no gfx1033/1035/1036
GFX110X = ("gfx1100", "gfx1101", "gfx1102", "gfx1103")


@pytest.fixture(scope="module")
def gh():
    with GitHubAPIServer(token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def release(gh, tmp_path_factory):
    """b1000, published by rockbuild publish: Linux gfx1151, gfx110X, gfx103X (seed targets) and Windows gfx1151."""
    out = tmp_path_factory.mktemp("night") / "out"
    jobs = []
    for job_id, targets in (
        ("linux-gfx1151", ("gfx1151",)),
        ("linux-gfx110X", GFX110X),
        ("linux-gfx103X", GFX103X_SEED),
    ):
        job = make_job(out, job_id, targets=targets)
        real_bundle(job / "bundle", targets)
        jobs.append(job)
    hip = {name: tiny_pe(name.encode(), dll=True) for name in ("amdhip64_7.dll", "amd_comgr0713.dll")}
    jobs.append(make_job(out, "windows-gfx1151", extra_files=hip))
    report = publish(
        PublishOptions(
            context=context(),
            job_dirs=tuple(jobs),
            repo=gh.full_name,
            api_url=gh.api_url,
            token=TOKEN,
            throttle=False,
            out=out.parent / "release",
        )
    )
    assert report.tag == "b1000" and report.state == "published"
    return gh.state.release_by_tag("b1000")


@pytest.mark.parametrize(
    "target,family",
    [
        ("gfx1030", "gfx103X"),
        ("gfx1036", "gfx103X"),
        ("gfx1103", "gfx110X"),
        ("gfx1201", "gfx120X"),
        ("gfx1151", "gfx1151"),
        ("gfx90a", "gfx90a"),
        ("gfx1037", "gfx1037"),
    ],
)
def test_asset_family_as_lemonade_maps_it(target, family):
    assert asset_family(target) == family


def test_auto_picks_the_dgpu_beside_an_igpu(gh, release, tmp_path):
    report = install(options(gh, tmp_path))
    assert report.target == "gfx1100"  # the discrete GPU, although the iGPU is device 0
    assert report.asset.name == "llama-b1000-ubuntu-rocm-gfx110X-x64.tar.gz"
    assert report.asset.source == "manifest" and report.asset.isas == GFX110X
    sums = next(a for a in release.assets if a.name == "SHA256SUMS").data.decode()
    assert f"{report.sha256}  {report.asset.name}\n" in sums
    dest = tmp_path / "llama"
    assert report.dest == dest and sorted(p.name for p in dest.iterdir()) == sorted(
        ["bundle.json", "libggml-hip.so", *(p.file_name for p in load_programs().programs)]
    )
    assert stat.S_IMODE((dest / "llama-server").stat().st_mode) & 0o111
    # the gfx1036 iGPU has no kernels in this asset: the command pins the dGPU
    assert report.visible_devices == "1"
    assert (
        report.command == f"HIP_VISIBLE_DEVICES=1 {dest}/llama-server -m MODEL.gguf -ngl 999 --host 127.0.0.1 "
        "--port 8080"
    )
    run = subprocess.run([str(dest / "llama-server")], capture_output=True, text=True, env={}, timeout=30)
    assert run.stdout == "llama-server 7\n"  # extracted whole, $ORIGIN run path intact


def test_strix_halo_gets_its_own_asset_and_a_plain_command(gh, release, tmp_path):
    report = install(options(gh, tmp_path, sysfs_root=SYSFS / "strix-halo" / "sys", tag="b1000"))
    assert (report.target, report.asset.name) == ("gfx1151", "llama-b1000-ubuntu-rocm-gfx1151-x64.tar.gz")
    assert report.visible_devices is None
    assert report.command.startswith(f"{tmp_path}/llama/llama-server -m MODEL.gguf -ngl 999")


def test_manifest_isas_beat_the_family_name(gh, release, tmp_path):
    """gfx1035 maps to gfx103X by name, but the manifest says that asset lacks it: refused, assets listed."""
    with pytest.raises(NotFoundError) as info:
        install(options(gh, tmp_path, target="gfx1035"))
    assert info.value.message == (
        "release b1000 has no linux ROCm asset for gfx1035; its linux assets: "
        "llama-b1000-ubuntu-rocm-gfx103X-x64.tar.gz, llama-b1000-ubuntu-rocm-gfx103X-x64.zip, "
        "llama-b1000-ubuntu-rocm-gfx110X-x64.tar.gz, llama-b1000-ubuntu-rocm-gfx110X-x64.zip, "
        "llama-b1000-ubuntu-rocm-gfx1151-x64.tar.gz, llama-b1000-ubuntu-rocm-gfx1151-x64.zip"
    )
    assert not (tmp_path / "llama").exists() and not (tmp_path / "cache").exists()
    report = install(options(gh, tmp_path, target="gfx1032"))
    assert report.asset.name == "llama-b1000-ubuntu-rocm-gfx103X-x64.tar.gz"
    assert report.visible_devices is None  # neither GPU of this machine is covered: nothing to pin


def test_windows_zip_is_extracted_with_the_zip_extractor(gh, release, tmp_path):
    report = install(options(gh, tmp_path, target="gfx1151", os_name="windows"))
    assert report.asset.name == "llama-b1000-windows-rocm-gfx1151-x64.zip"
    assert (tmp_path / "llama" / "llama-server.exe").is_file()
    assert (tmp_path / "llama" / "rocblas" / "library" / "TensileLibrary_lazy_gfx1151.dat").is_file()
    assert report.command == f'"{tmp_path}/llama/llama-server.exe" -m MODEL.gguf -ngl 999 --host 127.0.0.1 --port 8080'


def test_windows_install_warns_about_a_system32_copy_that_shadows_the_bundle_for_other_programs(gh, release, tmp_path):
    """On Windows, a System32\\amdhip64_7.dll (a driver's) shadows the installed bundle's copy for a program outside it
    that loads its DLLs (tests/integration/test_dllsearch.py proves the loader order under wine): a warning naming the file and
    the fix, not a refusal, since the printed command starts the bundle's own llama-server.exe, which gets its own."""
    root = tmp_path / "Windows"
    (root / "System32").mkdir(parents=True)
    (tmp_path / "no-gh").mkdir()

    def windows_install(dest: Path):
        env = {"HOME": str(tmp_path), "SystemRoot": str(root), "PATH": str(tmp_path / "no-gh"), "GITHUB_TOKEN": TOKEN}
        return install(
            InstallOptions(
                repo=gh.full_name,
                api_url=gh.api_url,
                cache=tmp_path / "cache",
                target="gfx1151",
                dest=dest,
                sysfs_root=SYSFS / "strix-halo" / "sys",
                context=Settings.from_environment(env, host_os="windows"),
                families=load_families(),
            )
        )

    clean = windows_install(tmp_path / "a")
    assert clean.asset.name == "llama-b1000-windows-rocm-gfx1151-x64.zip" and clean.warnings == ()
    (root / "System32" / "AMDHIP64_7.DLL").write_bytes(b"MZ")
    dest = tmp_path / "b"
    (warning,) = windows_install(dest).warnings
    assert warning == (
        f"{root / 'System32' / 'AMDHIP64_7.DLL'} (System32) shadows the bundle's {dest / 'amdhip64_7.dll'} for a "
        "program outside the bundle that loads its DLLs: llama.cpp would run on another HIP runtime and crash; fix: "
        "start the bundle's own program (e.g. llama-server.exe: its folder is searched before the system folders), or "
        "have that program load the bundle's DLLs with LoadLibraryEx(..., LOAD_WITH_ALTERED_SEARCH_PATH); moving the "
        f"bundle up PATH cannot help (llama-server.exe started from {dest} is not affected)"
    )
    # a Linux host installing the Windows asset has no Windows environment: nothing to check
    assert install(options(gh, tmp_path, target="gfx1151", os_name="windows", dest=tmp_path / "c")).warnings == ()


@contextlib.contextmanager
def _tampered(release, name: str):
    """The asset ``name`` served with other bytes of the same size while the block runs (the release is shared)."""
    asset = next(a for a in release.assets if a.name == name)
    original = asset.data
    asset.data = original[:-40] + bytes(b ^ 0xFF for b in original[-40:])
    try:
        yield
    finally:
        asset.data = original


def test_checksum_mismatch_refused_before_download_when_github_disagrees(gh, release, tmp_path):
    name = "llama-b1000-ubuntu-rocm-gfx1151-x64.tar.gz"
    with _tampered(release, name), pytest.raises(ChecksumError) as info:
        install(options(gh, tmp_path, target="gfx1151"))
    assert info.value.message.startswith(f"{name}: SHA256SUMS says sha256 ")
    assert not (tmp_path / "llama").exists() and not (tmp_path / "cache").exists()


def test_checksum_mismatch_refused_by_the_downloader_and_nothing_kept(gh, release, tmp_path, monkeypatch):
    """Releases made before GitHub reported digests: only SHA256SUMS vouches for the bytes."""
    name = "llama-b1000-ubuntu-rocm-gfx1151-x64.tar.gz"
    plain = gh.asset_json
    monkeypatch.setattr(gh, "asset_json", lambda rel, asset: {**plain(rel, asset), "digest": None})
    with _tampered(release, name), pytest.raises(ChecksumError) as info:
        install(options(gh, tmp_path, target="gfx1151"))
    assert info.value.message.startswith(f"{name} does not match SHA256SUMS of b1000: refused, nothing was kept")
    assert info.value.exit_code == 5
    assert not (tmp_path / "llama").exists()
    assert list((tmp_path / "cache").iterdir()) == []
    # the good bytes install afterwards
    assert install(options(gh, tmp_path, target="gfx1151")).asset.name == name


def test_release_without_checksums_is_refused(gh, tmp_path):
    bundle = real_bundle(make_job(tmp_path / "out", "linux-gfx1151") / "bundle", ("gfx1151",))
    entries, _ = collect_entries(bundle)
    data = write_zip(entries, tmp_path / "a.zip", mtime=1_700_000_000).read_bytes()
    gh.state.add_release("b0999", assets={"llama-b0999-ubuntu-rocm-gfx1151-x64.zip": data}, prerelease=True)
    with pytest.raises(ChecksumError, match="release b0999 has no SHA256SUMS: refusing"):
        install(options(gh, tmp_path, tag="b0999", target="gfx1151"))
    assert not (tmp_path / "llama").exists()


def test_seed_release_without_manifest_is_found_by_name_and_unzipped(gh, tmp_path):
    """The seed's releases: zips only, no manifest; gfx1036 -> gfx103X as Lemonade maps it, with a warning."""
    bundle = real_bundle(make_job(tmp_path / "out", "linux-gfx103X") / "bundle", GFX103X_SEED)
    entries, _ = collect_entries(bundle)
    data = write_zip(entries, tmp_path / "seed.zip", mtime=1_700_000_000).read_bytes()
    name = "llama-b1292-ubuntu-rocm-gfx103X-x64.zip"
    sums = f"{hashlib.sha256(data).hexdigest()}  {name}\n".encode()
    gh.state.add_release("b1292", assets={name: data, "SHA256SUMS": sums}, prerelease=True)  # never "latest"
    report = install(options(gh, tmp_path, tag="b1292", target="gfx1036"))
    assert report.asset.name == name and report.asset.source == "name" and report.asset.isas == ()
    assert "has no manifest.json" in report.warnings[0] and "try --backend vulkan" in report.warnings[0]
    run = subprocess.run([str(tmp_path / "llama" / "llama-server")], capture_output=True, text=True, env={})
    assert run.stdout == "llama-server 7\n"  # exec bits and the library survived the zip
    assert report.visible_devices == "0"  # by name, the asset is taken to cover gfx1036, device 0


def _bad_release(gh, tmp_path, tag: str) -> str:
    """A release whose gfx1151 asset fails its audit (a stray kernel folder rocBLAS would read first)."""
    bundle = real_bundle(make_job(tmp_path / f"out-{tag}", "linux-gfx1151") / "bundle", ("gfx1151",))
    (bundle / "library").mkdir()
    (bundle / "library" / "x.dat").write_bytes(b"k")
    entries, _ = collect_entries(bundle)
    data = write_zip(entries, tmp_path / f"bad-{tag}.zip", mtime=1_700_000_000).read_bytes()
    name = f"llama-{tag}-ubuntu-rocm-gfx1151-x64.zip"
    gh.state.add_release(
        tag,
        assets={name: data, "SHA256SUMS": f"{hashlib.sha256(data).hexdigest()} *{name}\n".encode()},
        prerelease=True,
    )
    return name


def test_an_asset_failing_its_audit_installs_nothing(gh, tmp_path):
    """Issue 28, item 10: it used to stay in --dest after "installed, but its audit failed", and the next run then
    said the folder exists. It is audited in a staging folder, and nothing of it is left."""
    name = _bad_release(gh, tmp_path, "b0998")
    with pytest.raises(AuditError) as info:
        install(options(gh, tmp_path, tag="b0998", target="gfx1151"))
    assert info.value.exit_code == 10
    assert info.value.message.startswith(f"{name}: its audit failed (1): kernel-data: a library/ folder")
    assert info.value.message.endswith("nothing was installed")
    assert not (tmp_path / "llama").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".llama.")]  # no staging folder either


def test_upgrade_keeps_the_old_install_until_the_new_one_is_verified_and_audited(gh, release, tmp_path):
    first = install(options(gh, tmp_path, target="gfx1151"))
    (first.dest / "mine.txt").write_text("the old install")
    with pytest.raises(UsageError, match="already exists") as exists:
        install(options(gh, tmp_path, target="gfx1151"))
    assert "--upgrade" in (exists.value.hint or "")
    _bad_release(gh, tmp_path, "b0997")
    with pytest.raises(AuditError, match=r"nothing was installed \(the old install is kept\)"):
        install(options(gh, tmp_path, tag="b0997", target="gfx1151", upgrade=True))
    assert (first.dest / "mine.txt").read_text() == "the old install"
    again = install(options(gh, tmp_path, target="gfx1151", upgrade=True))  # a good one replaces it
    assert again.dest == first.dest and not (again.dest / "mine.txt").exists()
    assert (again.dest / "llama-server").is_file()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".llama.")]


def test_no_vulkan_asset_lists_the_assets(gh, release, tmp_path):
    with pytest.raises(
        NotFoundError,
        match=r"release b1000 has no linux Vulkan asset; its assets: "
        r"SHA256SUMS, llama-b1000-ubuntu-rocm-gfx103X",
    ):
        install(options(gh, tmp_path, backend="vulkan", tag="b1000"))


def test_existing_dest_is_refused_before_downloading(gh, release, tmp_path):
    (tmp_path / "llama").mkdir()
    with pytest.raises(UsageError, match="already exists; not installing over it"):
        install(options(gh, tmp_path, target="gfx1151"))
    assert not (tmp_path / "cache").exists()


def test_unknown_tag(gh, release, tmp_path):
    with pytest.raises(NotFoundError, match=f"{gh.full_name} has no release tagged b7777"):
        install(options(gh, tmp_path, tag="b7777", target="gfx1151"))


def test_cli_no_gpu_says_so_and_suggests_target(gh, release, run_rockbuild):
    before = len(gh.state.requests)
    result = run_rockbuild(
        "install", "--repo", gh.full_name, "--api-url", gh.api_url, "--sysfs-root", str(SYSFS / "no-gpu" / "sys")
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert (
        lines[0] == "error: no AMD GPU found in the KFD topology (/sys/class/kfd); pass --target gfxN to choose a build"
    )
    assert len(gh.state.requests) == before  # it fails before asking GitHub anything


def test_cli_installs_and_prints_the_command(gh, release, run_rockbuild, tmp_path):
    env = {"ROCKBUILD_CACHE": str(tmp_path / "cache")}
    result = run_rockbuild(
        "install",
        "--repo",
        gh.full_name,
        "--api-url",
        gh.api_url,
        "--target",
        "gfx1151",
        "--dest",
        str(tmp_path / "d"),
        "--sysfs-root",
        str(SYSFS / "strix-halo" / "sys"),
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert (
        f"    {tmp_path}/d/llama-server -m MODEL.gguf -ngl 999 --host 127.0.0.1 --port 8080"
        in result.stdout.splitlines()
    )
    assert "installed llama-b1000-ubuntu-rocm-gfx1151-x64.tar.gz" in result.stdout
    as_json = run_rockbuild(
        "install",
        "--json",
        "--repo",
        gh.full_name,
        "--api-url",
        gh.api_url,
        "--target",
        "gfx1100",
        "--dest",
        str(tmp_path / "e"),
        env=env,
    )
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["asset"]["name"] == "llama-b1000-ubuntu-rocm-gfx110X-x64.tar.gz" and data["audit_ok"] is True
    assert (tmp_path / "cache" / "releases" / data["asset"]["name"]).is_file()  # kept for a re-install


# ------------------------------------------------------------------------------------------------ the zip extractor


def make_zip(path: Path, members: list[tuple[str, bytes, int]]) -> Path:
    """members: (name, data, unix mode with type bits)."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0))
            info.create_system = 3
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


def test_zip_modes_kept_and_special_bits_dropped(tmp_path):
    z = make_zip(
        tmp_path / "a.zip",
        [
            ("bin/", b"", stat.S_IFDIR | 0o755),
            ("bin/tool", b"x", stat.S_IFREG | 0o6755),
            ("data.txt", b"hello", stat.S_IFREG | 0o644),
        ],
    )
    assert extract_zip_safely(z, tmp_path / "out") == 2
    assert stat.S_IMODE((tmp_path / "out" / "bin" / "tool").stat().st_mode) == 0o755
    assert (tmp_path / "out" / "data.txt").read_text() == "hello"


@pytest.mark.parametrize(
    "members,reason",
    [
        ([("/etc/passwd", b"x", stat.S_IFREG | 0o644)], "absolute path"),
        ([("a/../../escape", b"x", stat.S_IFREG | 0o644)], "leads out of the folder"),
        ([("C:/Windows/x.dll", b"x", stat.S_IFREG | 0o644)], "absolute path"),
        ([("ok.txt", b"x", stat.S_IFREG | 0o644), ("link", b"/etc", stat.S_IFLNK | 0o777)], "is a symlink"),
        ([("fifo", b"", stat.S_IFIFO | 0o644)], "device, FIFO or socket"),
        ([("twice", b"1", stat.S_IFREG | 0o644), ("twice", b"2", stat.S_IFREG | 0o644)], "appears twice"),
        ([("f", b"1", stat.S_IFREG | 0o644), ("f/g", b"2", stat.S_IFREG | 0o644)], "goes through the file 'f'"),
        ([("a\\..\\b", b"1", stat.S_IFREG | 0o644)], "backslash"),
    ],
)
@pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning")
def test_zip_refusals_leave_nothing_behind(tmp_path, members, reason):
    z = make_zip(tmp_path / "bad.zip", members)
    with pytest.raises(UnsafeArchiveError, match=reason):
        extract_zip_safely(z, tmp_path / "out" / "dest")
    assert os.listdir(tmp_path / "out") == []  # no dest, no staging folder


GH_STUB = """#!/bin/sh
# gh, as far as `gh attestation verify ASSET --repo R` goes: the test says whether the provenance verifies
echo "$@" > "{log}"
if [ -n "$GH_TOKEN" ]; then echo token >> "{log}"; fi
if [ "{verdict}" = ok ]; then echo "Loaded digest sha256:... for file://$3"; exit 0; fi
echo "Error: verifying with issuer \"sigstore.dev\": no attestations found" >&2
exit 1
"""


def _gh_stub(tmp_path: Path, verdict: str) -> tuple[str, Path]:
    folder = tmp_path / "gh-bin"
    folder.mkdir(exist_ok=True)
    log = tmp_path / "gh-args.txt"
    (folder / "gh").write_text(GH_STUB.format(log=log, verdict=verdict))
    (folder / "gh").chmod(0o755)
    return f"{folder}:/usr/bin:/bin", log


def test_the_build_provenance_is_verified_with_gh_when_it_is_there(gh, release, tmp_path):
    path, log = _gh_stub(tmp_path, "ok")
    report = install(options(gh, tmp_path, path=path, target="gfx1151"))
    asset = tmp_path / "cache" / report.asset.name
    assert log.read_text() == f"attestation verify {asset} --repo {gh.full_name}\ntoken\n"
    assert report.attestation == f"verified with gh attestation verify --repo {gh.full_name}"
    assert "provenance: verified" in report.render() and report.to_dict()["attestation"].startswith("verified")


def test_a_provenance_that_does_not_verify_is_refused_before_anything_is_extracted(gh, release, tmp_path):
    path, _log = _gh_stub(tmp_path, "bad")
    with pytest.raises(ChecksumError, match="build provenance does not verify .*no attestations found") as info:
        install(options(gh, tmp_path, path=path, target="gfx1151"))
    assert info.value.exit_code == 5 and not (tmp_path / "llama").exists()


def test_without_gh_sha256sums_is_enough_unless_the_attestation_is_required(gh, release, tmp_path):
    report = install(options(gh, tmp_path, target="gfx1151"))
    assert report.attestation == "not checked (gh is not installed; SHA256SUMS verified)"
    with pytest.raises(ChecksumError, match="--require-attestation: gh .* is not installed"):
        install(options(gh, tmp_path, target="gfx1151", dest=tmp_path / "other", require_attestation=True))
    assert not (tmp_path / "other").exists()


def test_what_cannot_be_verified_or_is_unsafe_is_not_kept(gh, release, tmp_path):
    """Issue 28, item 10: --require-attestation without gh is refused before the download; an archive refused as
    unsafe does not stay in the cache."""
    (tmp_path / "a").mkdir()
    with pytest.raises(ChecksumError, match="nothing was downloaded"):
        install(options(gh, tmp_path / "a", target="gfx1151", require_attestation=True))
    assert not (tmp_path / "a" / "cache").exists()
    data = make_zip(
        tmp_path / "evil.zip", [("ok.txt", b"x", stat.S_IFREG | 0o644), ("link", b"/etc", stat.S_IFLNK | 0o777)]
    ).read_bytes()
    name = "llama-b0996-ubuntu-rocm-gfx1151-x64.zip"
    gh.state.add_release(
        "b0996",
        assets={name: data, "SHA256SUMS": f"{hashlib.sha256(data).hexdigest()} *{name}\n".encode()},
        prerelease=True,
    )
    with pytest.raises(UnsafeArchiveError, match="is a symlink"):
        install(options(gh, tmp_path, tag="b0996", target="gfx1151"))
    assert not (tmp_path / "cache" / name).exists() and not (tmp_path / "llama").exists()
