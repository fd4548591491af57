"""Stage 2 end to end: index page -> resolve -> download while extracting -> layout, through the real CLI."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from support.faultserver import Fault, FaultServer
from support.index import index_page
from support.tarballs import MALICIOUS, therock_like_tarball

from rockbuild.core.errors import ChecksumError, NotFoundError, UnsafeArchiveError
from rockbuild.rocm.fetch import fetch_entry, fetch_rocm, find_tarball, stable_root

NEW = "therock-dist-linux-gfx1151-10.2.0a20261128.tar.gz"
OLD = "therock-dist-linux-gfx1151-10.2.0a20261127.tar.gz"
TESTS_TWIN = "therock-dist-linux-gfx1151-tests-10.2.0a20261128.tar.gz"
WIN = "therock-dist-windows-gfx1151-10.2.0a20261128.tar.gz"


@pytest.fixture
def server(tmp_path):
    (tmp_path / "src").mkdir()
    new = therock_like_tarball(tmp_path / "src" / NEW, big_files={"lib/librocsolver.so.0.7": 3 << 20})
    old = therock_like_tarball(tmp_path / "src" / OLD)
    with FaultServer() as srv:
        srv.add(NEW, new.read_bytes())
        srv.add(OLD, old.read_bytes())
        srv.add(TESTS_TWIN, b"not a tarball")
        srv.add(WIN, old.read_bytes())
        srv.add_text("index.html", index_page([OLD, TESTS_TWIN, NEW, WIN]))
        srv.index_url = srv.url_for("index.html")
        yield srv


@pytest.fixture
def gfx1151():
    """The tarball groups of gfx1151 (its family's current name; no legacy names)."""
    return ["gfx1151"]


def test_fetch_cli_latest_then_second_fetch_transfers_nothing(server, tmp_path, run_rockbuild):
    cache = tmp_path / "cache"
    args = ["fetch", "--target", "gfx1151", "--os", "linux", "--index-url", server.index_url, "--cache", str(cache)]
    first = run_rockbuild(*args, "--json")
    assert first.returncode == 0, first.stderr
    data = json.loads(first.stdout)
    assert data["name"] == NEW and data["version"] == "10.2.0a20261128" and data["group"] == "gfx1151"
    assert data["url"] == server.url_for(NEW) and data["extracted"] is True
    assert data["transferred"] == data["size"] == (tmp_path / "src" / NEW).stat().st_size
    root = Path(data["root"])
    assert root == cache / "rocm" / NEW.removesuffix(".tar.gz")
    assert (root / "lib/llvm/bin/clang").stat().st_mode & 0o111
    assert (root / "bin/amdclang").is_symlink() and (root / "bin/amdclang").resolve() == root / "lib/llvm/bin/clang"
    assert (root / "lib/llvm/bin/ld.lld").stat().st_ino == (root / "lib/llvm/bin/lld").stat().st_ino
    assert (cache / "tarballs" / NEW).stat().st_size == data["size"]  # kept in the cache for resume and re-use
    assert data["layout"]["kind"] == "therock" and "gfx1151" in data["layout"]["gfx_targets"]
    assert server.stats(NEW).requests == 1 and server.stats(TESTS_TWIN).requests == 0

    start = time.monotonic()
    second = run_rockbuild(*args, "--json")
    took = time.monotonic() - start
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert again["transferred"] == 0 and again["extracted"] is False and again["sha256"] == data["sha256"]
    assert server.stats(NEW).requests == 1  # no tarball byte moved
    assert took < 5  # in-process it is well under a second (bench/fetch.py measures it); this bounds a cold interpreter


def test_fetch_explicit_version_and_windows(server, tmp_path, gfx1151):
    result = fetch_rocm(gfx1151, os_name="linux", version="10.2.0a20261127", index_url=server.index_url, cache=tmp_path)
    assert result.name == OLD and result.layout is not None
    win = fetch_rocm(gfx1151, os_name="windows", index_url=server.index_url, cache=tmp_path)
    assert win.name == WIN and win.root.name == WIN.removesuffix(".tar.gz")


def test_missing_version_lists_the_nearest(server, tmp_path, run_rockbuild):
    result = run_rockbuild(
        "fetch",
        "--target",
        "gfx1151",
        "--os",
        "linux",
        "--rocm-version",
        "10.2.0a20261101",
        "--index-url",
        server.index_url,
        "--cache",
        str(tmp_path),
    )
    assert result.returncode == NotFoundError.exit_code
    assert "10.2.0a20261127" in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ")


def test_cut_mid_download_resumes_and_extracts(server, tmp_path, gfx1151):
    size = len((tmp_path / "src" / NEW).read_bytes())
    server.inject(NEW, Fault.cut(after=size // 2))
    result = fetch_rocm(gfx1151, os_name="linux", index_url=server.index_url, cache=tmp_path)
    assert result.extracted and (result.root / "lib/librocsolver.so.0.7").stat().st_size == 3 << 20
    stats = server.stats(NEW)
    assert stats.requests == 2 and stats.bytes_sent <= size + size // 2 + (1 << 20)


def test_checksum_mismatch_leaves_no_tree(server, tmp_path, gfx1151):
    entry = find_tarball(gfx1151, os_name="linux", index_url=server.index_url)
    with pytest.raises(ChecksumError):
        fetch_entry(entry, cache=tmp_path, sha256="0" * 64)
    assert not (tmp_path / "rocm" / NEW.removesuffix(".tar.gz")).exists()
    assert [p.name for p in (tmp_path / "rocm").iterdir() if not p.name.endswith(".lock")] == []


# the whole corpus, through the extract-while-downloading path (test_archive.py runs it through every decompressor)
@pytest.mark.parametrize("attack", [name for name, a in MALICIOUS.items() if a.refused])
def test_malicious_tarball_is_refused_through_fetch(attack, tmp_path, gfx1151):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_text("sentinel")
    cache = tmp_path / "cache"
    dest = cache / "rocm" / NEW.removesuffix(".tar.gz")
    bad = tmp_path / "bad" / NEW
    bad.parent.mkdir()
    MALICIOUS[attack].build(bad, outside, dest)
    with FaultServer() as srv:
        srv.add(NEW, bad.read_bytes())
        srv.add_text("index.html", index_page([NEW]))
        with pytest.raises(UnsafeArchiveError):
            fetch_rocm(gfx1151, os_name="linux", index_url=srv.url_for("index.html"), cache=cache)
    assert (outside / "target").read_text() == "sentinel" and sorted(p.name for p in outside.iterdir()) == ["target"]
    assert not dest.exists()
    assert [p.name for p in (cache / "rocm").iterdir() if not p.name.endswith(".lock")] == []


def test_two_concurrent_fetches_share_one_download(server, tmp_path, run_rockbuild):
    from conftest import rockbuild_exe

    cache = tmp_path / "cache"
    server.inject(NEW, Fault.slow(2_000_000))
    args = [
        rockbuild_exe(),
        "fetch",
        "--target",
        "gfx1151",
        "--os",
        "linux",
        "--index-url",
        server.index_url,
        "--cache",
        str(cache),
        "--json",
    ]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=90) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    results = [json.loads(o[0]) for o in outs]
    assert sorted(r["extracted"] for r in results) == [False, True]
    assert results[0]["sha256"] == results[1]["sha256"]
    assert server.stats(NEW).requests == 1


def test_dest_that_rockbuild_did_not_make_is_left_alone(server, tmp_path, gfx1151):
    dest = tmp_path / "opt-rocm"
    dest.mkdir()
    (dest / "precious").write_text("mine")
    entry = find_tarball(gfx1151, os_name="linux", index_url=server.index_url)
    with pytest.raises(Exception, match="was not extracted by rockbuild"):
        fetch_entry(entry, cache=tmp_path, dest=dest)
    assert (dest / "precious").read_text() == "mine"


def test_rocm_list_and_info(server, tmp_path, run_rockbuild):
    listed = run_rockbuild("rocm", "list", "--family", "gfx1151", "--os", "linux", "--index-url", server.index_url)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["10.2.0a20261128", "10.2.0a20261127"]
    as_json = json.loads(
        run_rockbuild(
            "rocm", "list", "--family", "gfx1151", "--os", "windows", "--index-url", server.index_url, "--json"
        ).stdout
    )
    assert [e["filename"] for e in as_json] == [WIN]

    tree = tmp_path / "tree"
    fetch_entry(find_tarball(["gfx1151"], os_name="linux", index_url=server.index_url), cache=tmp_path, dest=tree)
    info = run_rockbuild("rocm", "info", str(tree), "--json")
    assert info.returncode == 0, info.stderr
    report = json.loads(info.stdout)
    assert report["kind"] == "therock" and report["therock_commit"] == "0123456789abcdef0123456789abcdef01234567"
    text = run_rockbuild("rocm", "info", str(tree))
    assert "therock" in text.stdout and "clang" in text.stdout
    missing = run_rockbuild("rocm", "info", str(tmp_path / "nothing"))
    assert missing.returncode == 7 and missing.stderr.startswith("error: ") and missing.stderr.count("\n") == 1


def test_fetch_needs_exactly_one_of_family_or_target(run_rockbuild):
    result = run_rockbuild("fetch", "--os", "linux")
    assert result.returncode == 2 and "exactly one of --family" in result.stderr
    result = run_rockbuild("fetch", "--family", "gfx942", "--os", "windows")
    assert result.returncode == 2 and "publishes no windows tarball" in result.stderr


def test_an_unreachable_index_says_why_at_once_and_names_the_offline_routes(tmp_path, run_rockbuild):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    result = run_rockbuild(
        "fetch",
        "--target",
        "gfx1151",
        "--os",
        "linux",
        "--index-url",
        f"http://127.0.0.1:{port}/",
        "--cache",
        str(tmp_path),
    )
    assert time.monotonic() - start < 8  # the process start included; was 15.5 s of retries
    assert result.returncode == 4
    lines = result.stderr.splitlines()
    assert lines[0] == f"error: cannot fetch http://127.0.0.1:{port}/: connection refused"
    assert lines[1].startswith("hint: no network?") and "--rocm DIR" in lines[1] and "tests/e2e/run.sh" in lines[1]


def test_fetch_dest_leaves_no_lock_beside_the_destination(server, tmp_path, run_rockbuild):
    """The per-root lock lives in the cache: a --dest folder's parent holds only what the user asked for."""
    parent = tmp_path / "roots"
    parent.mkdir()
    args = [
        "fetch",
        "--target",
        "gfx1151",
        "--os",
        "linux",
        "--index-url",
        server.index_url,
        "--cache",
        str(tmp_path / "cache"),
    ]
    failed = run_rockbuild(*args, "--dest", str(parent / "bad"), "--sha256", "0" * 64)
    assert failed.returncode == ChecksumError.exit_code
    ok = run_rockbuild(*args, "--dest", str(parent / "rocm"))
    assert ok.returncode == 0, ok.stderr
    assert sorted(p.name for p in parent.iterdir()) == ["rocm"]


def test_fetch_takes_rocm_version_and_points_the_old_flag_at_it(tmp_path, run_rockbuild):
    old = run_rockbuild("fetch", "--target", "gfx1151", "--version", "10.2.0a20261128")
    assert old.returncode == 2
    assert old.stderr == "error: fetch --version is now --rocm-version: use --rocm-version 10.2.0a20261128\n"


def test_a_nights_nightlies_of_one_group_share_one_folder(server, tmp_path, gfx1151):
    """The night's legs extract each group's nightly at one path (rocm.fetch.stable_root), so that ccache sees the
    same include paths every night; a second nightly replaces the first there, and the marker says which it holds."""
    old = find_tarball(gfx1151, os_name="linux", version="10.2.0a20261127", index_url=server.index_url)
    new = find_tarball(gfx1151, os_name="linux", index_url=server.index_url)
    first = fetch_entry(old, cache=tmp_path, dest=stable_root(old, tmp_path))
    assert first.root == tmp_path / "rocm" / "therock-linux-gfx1151" and first.extracted
    assert not (first.root / "lib/librocsolver.so.0.7").exists()
    second = fetch_entry(new, cache=tmp_path, dest=stable_root(new, tmp_path))
    assert second.root == first.root and second.extracted and second.name == NEW
    assert (second.root / "lib/librocsolver.so.0.7").stat().st_size == 3 << 20
    again = fetch_entry(new, cache=tmp_path, dest=stable_root(new, tmp_path))
    assert not again.extracted and again.transferred == 0
    assert sorted(p.name for p in (tmp_path / "rocm").iterdir()) == ["therock-linux-gfx1151"]
