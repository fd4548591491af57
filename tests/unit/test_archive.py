"""rockbuild.archive: safe streaming extraction, checked through every decompressor on real tarballs."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import threading
import time
import zlib
from pathlib import Path

import pytest
from support.tarballs import (
    MALICIOUS,
    MTIME,
    THEROCK_COMMIT,
    THEROCK_TREE,
    TarBuilder,
    expected_member,
    therock_like_tarball,
)

from rockbuild.archive import (
    MARKER_NAME,
    CorruptArchiveError,
    ExtractionError,
    ExtractReport,
    StreamExtractor,
    extract_tarball,
    read_marker,
    resolve_decompressor,
    write_marker,
)
from rockbuild.core.errors import RockbuildError, UnsafeArchiveError

DECOMPRESSORS = [
    pytest.param(name, marks=pytest.mark.skipif(name != "python" and not shutil.which(name), reason=f"no {name}"))
    for name in ("pigz", "gzip", "python")
]


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Everything under ``root`` as comparable data (kind, mode, content hash, whole-second mtime as tar keeps it,
    link target)."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("symlink", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), int(st.st_mtime))
            else:
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), digest, int(st.st_mtime), st.st_nlink)
    return out


def leftovers(parent: Path, *expected: str) -> set[str]:
    """Names in ``parent`` beyond ``expected`` (staging or old-tree directories left behind)."""
    return {p.name for p in parent.iterdir()} - set(expected)


def children_named(name: str) -> list[int]:
    """Live (non-zombie) child processes of this process called ``name``."""
    pids = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except FileNotFoundError:  # a thread that just ended
            continue
        for pid in children:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except FileNotFoundError:
                continue
            fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            if fields.get("Name", "").strip() == name and not fields.get("State", "").startswith("Z"):
                pids.append(int(pid))
    return pids


@pytest.fixture
def therock_tgz(tmp_path: Path) -> Path:
    return therock_like_tarball(tmp_path / "therock-dist-linux-gfx1151-10.2.0a20260915.tar.gz")


# ----------------------------------------------------------------------------------------------------------------------
# Round trip
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("decompressor", DECOMPRESSORS)
def test_therock_round_trip(tmp_path: Path, therock_tgz: Path, decompressor: str) -> None:
    dest = tmp_path / "rocm"
    report = extract_tarball(therock_tgz, dest, decompressor=decompressor)

    for rel, spec in THEROCK_TREE.items():
        p = dest / rel
        st = p.lstat()
        if spec[0] == "dir":
            assert stat.S_ISDIR(st.st_mode), rel
            assert stat.S_IMODE(st.st_mode) == spec[1], rel
            assert st.st_mtime == MTIME, rel
        elif spec[0] == "file":
            assert stat.S_ISREG(st.st_mode), rel
            assert stat.S_IMODE(st.st_mode) == spec[1], rel
            assert p.read_bytes() == spec[2], rel
            assert st.st_mtime == MTIME, rel
        elif spec[0] == "symlink":
            assert os.readlink(p) == spec[1], rel
            assert st.st_mtime == MTIME, rel
        elif spec[0] == "hardlink":
            other = (dest / spec[1]).lstat()
            assert stat.S_ISREG(st.st_mode) and st.st_ino == other.st_ino and st.st_nlink == 2, rel
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755
    assert snapshot(dest).keys() == THEROCK_TREE.keys()
    # The chains resolve the way TheRock's layout needs them to.
    assert (dest / "bin/amdclang").resolve() == (dest / "lib/llvm/bin/clang").resolve()
    assert (dest / "lib/libamdhip64.so").resolve() == (dest / "lib/libamdhip64.so.7.2.0").resolve()
    assert (dest / "llvm/bin/clang").read_bytes() == THEROCK_TREE["lib/llvm/bin/clang"][2]
    assert os.access(dest / "bin/amdclang", os.X_OK)
    manifest = json.loads((dest / "share/therock/therock_manifest.json").read_text())
    assert manifest["the_rock_commit"] == THEROCK_COMMIT

    kinds = [spec[0] for spec in THEROCK_TREE.values()]
    assert report == ExtractReport(
        dest=str(dest),
        files=kinds.count("file"),
        dirs=kinds.count("dir"),
        symlinks=kinds.count("symlink"),
        hardlinks=kinds.count("hardlink"),
        bytes_written=sum(len(s[2]) for s in THEROCK_TREE.values() if s[0] == "file"),
        input_bytes=therock_tgz.stat().st_size,
        seconds=report.seconds,
        decompressor=decompressor,
    )
    assert json.loads(json.dumps(report.to_dict()))["decompressor"] == decompressor
    assert leftovers(tmp_path, "rocm", therock_tgz.name) == set()
    assert children_named(decompressor) == []


@pytest.mark.parametrize("decompressor", DECOMPRESSORS)
def test_extracted_executables_run_through_symlinks(tmp_path: Path, decompressor: str) -> None:
    tgz = therock_like_tarball(
        tmp_path / "t.tar.gz",
        files={"bin/hello.sh": (b"#!/bin/sh\necho hello $0\n", 0o755)},
        symlinks={"hello": "bin/hello.sh"},
    )
    extract_tarball(tgz, tmp_path / "root", decompressor=decompressor)
    out = subprocess.run([tmp_path / "root/hello"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("hello ")


@pytest.mark.skipif(not shutil.which("tar"), reason="no GNU tar")
def test_gnu_tar_archive_round_trip(tmp_path: Path) -> None:
    """An archive made the way TheRock makes it (`tar cfz out .`), hard links and all, comes back identical."""
    src = tmp_path / "dist"
    (src / "lib/llvm/bin").mkdir(parents=True)
    (src / "lib/llvm/bin/clang-20").write_bytes(os.urandom(200_000))
    (src / "lib/llvm/bin/clang-20").chmod(0o755)
    os.link(src / "lib/llvm/bin/clang-20", src / "lib/llvm/bin/clang-cl")
    (src / "lib/llvm/bin/clang").symlink_to("clang-20")
    (src / "llvm").symlink_to("lib/llvm")
    (src / "lib/empty").mkdir(mode=0o750)
    (src / "lib/empty").chmod(0o750)
    (src / "share/doc").mkdir(parents=True)
    (src / "share/doc/README").write_text("read me\n")
    tgz = tmp_path / "dist.tar.gz"
    subprocess.run(["tar", "cfz", str(tgz), "."], cwd=src, check=True)

    dest = tmp_path / "out"
    report = extract_tarball(tgz, dest)
    assert snapshot(dest) == snapshot(src)
    assert (report.files, report.hardlinks, report.symlinks) == (2, 1, 2)
    assert (dest / "lib/llvm/bin/clang-cl").stat().st_ino == (dest / "lib/llvm/bin/clang-20").stat().st_ino


# ----------------------------------------------------------------------------------------------------------------------
# Malicious corpus
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("decompressor", DECOMPRESSORS)
@pytest.mark.parametrize("attack_name", sorted(MALICIOUS))
def test_malicious_archive(tmp_path: Path, attack_name: str, decompressor: str) -> None:
    attack = MALICIOUS[attack_name]
    outside, dest = tmp_path / "outside", tmp_path / "dest"
    outside.mkdir()
    (outside / "target").write_bytes(b"sentinel\n")
    tgz = tmp_path / "evil.tar.gz"
    attack.build(tgz, outside, dest)
    before = snapshot(outside)

    if attack.refused:
        with pytest.raises(UnsafeArchiveError) as excinfo:
            extract_tarball(tgz, dest, decompressor=decompressor)
        message = str(excinfo.value)
        assert "\n" not in message
        assert repr(expected_member(attack, outside, dest)) in message
        assert message.startswith("refusing to extract evil.tar.gz: member ")
        assert excinfo.value.exit_code == 6
        assert not os.path.lexists(dest)
    else:
        extract_tarball(tgz, dest, decompressor=decompressor)
        modes = {rel: spec[1] for rel, spec in snapshot(dest).items() if spec[0] != "symlink"}
        assert modes["bin/su"] == 0o755
        assert modes["bin/sg"] == 0o711
        assert modes["tmp"] == 0o777
        assert modes["shared"] == 0o775
    assert snapshot(outside) == before
    assert leftovers(tmp_path, "outside", "evil.tar.gz", *(() if attack.refused else ("dest",))) == set()
    assert children_named(decompressor) == []


def test_malicious_corpus_is_refused_by_every_member_name() -> None:
    """Guard the corpus itself: every refused attack names a member its builder really writes."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        for attack in MALICIOUS.values():
            tgz = base / f"{attack.name}.tar.gz"
            attack.build(tgz, base / "outside", base / "dest")
            with tarfile.open(tgz) as tf:
                assert expected_member(attack, base / "outside", base / "dest") in tf.getnames(), attack.name


# ----------------------------------------------------------------------------------------------------------------------
# Streaming
# ----------------------------------------------------------------------------------------------------------------------


def feed_in_chunks(ex: StreamExtractor, data: bytes, sizes: list[int]) -> None:
    pos, i = 0, 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        ex.feed(data[pos : pos + n])
        pos, i = pos + n, i + 1


@pytest.mark.parametrize("decompressor", DECOMPRESSORS)
def test_feeding_odd_chunks_gives_the_same_tree(tmp_path: Path, decompressor: str) -> None:
    tgz = therock_like_tarball(tmp_path / "t.tar.gz", big_files={"lib/libbig.so": 300_000})
    reference = tmp_path / "reference"
    extract_tarball(tgz, reference, decompressor="python")

    dest = tmp_path / "streamed"
    with StreamExtractor(dest, decompressor=decompressor) as ex:
        feed_in_chunks(ex, tgz.read_bytes(), [1, 7, 4093, 13, 65537, 2, 100_003])
        ex.feed(b"")
        report = ex.finish()
    assert snapshot(dest) == snapshot(reference)
    assert report.decompressor == decompressor
    assert report.input_bytes == tgz.stat().st_size
    assert leftovers(tmp_path, "t.tar.gz", "reference", "streamed") == set()


@pytest.fixture(scope="module")
def refused_early_tgz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A refused member near the start, then 12 MiB of incompressible data the download would still bring."""
    path = tmp_path_factory.mktemp("early") / "early.tar.gz"
    with TarBuilder(path) as tb:
        tb.root()
        tb.file("ok", b"fine\n")
        tb.symlink("evil", "/etc")
        tb.big_file("later.bin", 12 << 20)
    return path


@pytest.mark.parametrize("decompressor", DECOMPRESSORS)
def test_feed_raises_promptly_after_a_refusal(tmp_path: Path, refused_early_tgz: Path, decompressor: str) -> None:
    data = refused_early_tgz.read_bytes()
    dest = tmp_path / "dest"
    ex = StreamExtractor(dest, decompressor=decompressor)
    fed = 0
    with pytest.raises(UnsafeArchiveError, match="member './evil' is a symlink to an absolute path"):
        for pos in range(0, len(data), 64 << 10):
            ex.feed(data[pos : pos + (64 << 10)])
            fed += 64 << 10
            time.sleep(0.002)  # a download's pace: the extraction thread gets to fail between pieces
    # Pipes and queues hold a few MiB at most: the download stops long before its end.
    assert fed < len(data) // 2, (fed, len(data))
    assert leftovers(tmp_path) == set()
    assert children_named(decompressor) == []
    with pytest.raises(UnsafeArchiveError):  # the same verdict again, not a confusing second error
        ex.feed(b"more")
    with pytest.raises(UnsafeArchiveError):
        ex.finish()
    ex.abort()
    ex.abort()


@pytest.mark.parametrize("decompressor", DECOMPRESSORS)
def test_abort_removes_staging_and_stops_the_decompressor(
    tmp_path: Path, refused_early_tgz: Path, decompressor: str
) -> None:
    tgz = therock_like_tarball(tmp_path / "t.tar.gz", big_files={"lib/big.bin": 4 << 20})
    data = tgz.read_bytes()
    ex = StreamExtractor(tmp_path / "dest", decompressor=decompressor)
    ex.feed(data[: len(data) // 2])
    staging = [p for p in tmp_path.iterdir() if p.name.startswith(".dest.staging-")]
    assert len(staging) == 1 and staging[0].is_dir()
    ex.abort()
    ex.abort()
    assert leftovers(tmp_path, "t.tar.gz") == set()
    assert children_named(decompressor) == []
    with pytest.raises(ExtractionError, match="was aborted"):
        ex.feed(data[len(data) // 2 :])
    with pytest.raises(ExtractionError, match="was aborted"):
        ex.finish()


@pytest.mark.parametrize("decompressor", DECOMPRESSORS)
def test_abort_from_another_thread_unblocks_feed(tmp_path: Path, decompressor: str) -> None:
    """The download thread sits in feed() while extraction lags; abort() (e.g. on Ctrl-C) must release it."""
    ex = StreamExtractor(tmp_path / "dest", decompressor=decompressor)
    outcome: list[BaseException] = []

    def download() -> None:
        # An endless archive: one member that claims 1 TiB, then stored (uncompressed) gzip blocks for ever, so
        # extraction, not the feeding, is the bottleneck and feed() ends up waiting on full pipes or queues.
        header = tarfile.TarInfo("./endless.bin")
        header.size = 1 << 40
        gz = zlib.compressobj(0, zlib.DEFLATED, 31)
        block = os.urandom(1 << 20)
        try:
            ex.feed(gz.compress(header.tobuf(format=tarfile.GNU_FORMAT)))
            for _ in range(100_000):
                ex.feed(gz.compress(block))
        except BaseException as e:  # handed to the test thread
            outcome.append(e)

    feeder = threading.Thread(target=download)
    feeder.start()
    time.sleep(0.3)
    assert feeder.is_alive()
    ex.abort()
    feeder.join(timeout=10)
    assert not feeder.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ExtractionError), outcome
    assert leftovers(tmp_path) == set()
    assert children_named(decompressor) == []


def test_leaving_the_with_block_without_finish_aborts(tmp_path: Path, therock_tgz: Path) -> None:
    with pytest.raises(KeyError), StreamExtractor(tmp_path / "dest") as ex:
        ex.feed(therock_tgz.read_bytes()[:1000])
        raise KeyError("download failed")
    assert leftovers(tmp_path, therock_tgz.name) == set()


# ----------------------------------------------------------------------------------------------------------------------
# Corrupt input
# ----------------------------------------------------------------------------------------------------------------------


def _tar_bytes(members: dict[str, bytes], *, end_marker: bool = True) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue()
    if not end_marker:
        raw = raw[: 512 * sum(1 + (len(d) + 511) // 512 for d in members.values())]
    return raw


def _corrupt_inputs(tgz: bytes) -> dict[str, bytes]:
    tar = _tar_bytes({"./a": b"a" * 5000, "./b": b"b" * 3000})
    flipped = bytearray(tgz)
    flipped[len(flipped) // 2] ^= 0xFF
    return {
        "truncated_half": tgz[: len(tgz) // 2],
        "truncated_trailer": tgz[:-4],  # every tar byte is there, the gzip size/CRC trailer is not
        "flipped_byte": bytes(flipped),
        "not_gzip": tar,
        "empty": b"",
        "tar_without_end_marker": gzip.compress(_tar_bytes({"./a": b"a" * 5000}, end_marker=False)),
        "tar_truncated_mid_member": gzip.compress(tar[: 512 + 2048]),
        "garbage_tar": gzip.compress(os.urandom(4096)),
    }


@pytest.mark.parametrize("decompressor", DECOMPRESSORS)
@pytest.mark.parametrize("case", sorted(_corrupt_inputs(b"\x1f\x8b" * 10)))
def test_corrupt_input_fails_cleanly(tmp_path: Path, therock_tgz: Path, decompressor: str, case: str) -> None:
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(_corrupt_inputs(therock_tgz.read_bytes())[case])
    with pytest.raises(CorruptArchiveError) as excinfo:
        extract_tarball(bad, tmp_path / "dest", decompressor=decompressor)
    message = str(excinfo.value)
    assert message.startswith("bad.tar.gz is corrupt or truncated: ") and "\n" not in message
    assert isinstance(excinfo.value, RockbuildError)
    assert leftovers(tmp_path, "bad.tar.gz", therock_tgz.name) == set()
    assert children_named(decompressor) == []


@pytest.mark.parametrize("decompressor", DECOMPRESSORS)
def test_gzip_variants_that_are_sound(tmp_path: Path, decompressor: str) -> None:
    """Concatenated gzip members and padding after the last one extract the same everywhere."""
    tar = _tar_bytes({"./a": b"a" * 70_000, "./b": b"b" * 3000})
    cut = 512 * 40
    variants = {
        "multi": gzip.compress(tar[:cut]) + gzip.compress(tar[cut:]),
        "trailing_zeros": gzip.compress(tar) + b"\0" * 1000,
    }
    for name, data in variants.items():
        (tmp_path / name).write_bytes(data)
        extract_tarball(tmp_path / name, tmp_path / f"out-{name}", decompressor=decompressor)
        assert (tmp_path / f"out-{name}/a").read_bytes() == b"a" * 70_000, name
        assert (tmp_path / f"out-{name}/b").read_bytes() == b"b" * 3000, name


# ----------------------------------------------------------------------------------------------------------------------
# Destination handling
# ----------------------------------------------------------------------------------------------------------------------


def test_existing_dest_is_refused_without_replace(tmp_path: Path, therock_tgz: Path) -> None:
    dest = tmp_path / "rocm"
    dest.mkdir()
    (dest / "keep").write_text("mine\n")
    with pytest.raises(ExtractionError, match="already exists"):
        extract_tarball(therock_tgz, dest)
    assert (dest / "keep").read_text() == "mine\n"
    assert leftovers(tmp_path, "rocm", therock_tgz.name) == set()


def test_dest_appearing_during_extraction_is_not_overwritten(tmp_path: Path, therock_tgz: Path) -> None:
    dest = tmp_path / "rocm"
    ex = StreamExtractor(dest)
    ex.feed(therock_tgz.read_bytes())
    dest.mkdir()
    (dest / "keep").write_text("mine\n")
    with pytest.raises(ExtractionError, match="already exists"):
        ex.finish()
    assert (dest / "keep").read_text() == "mine\n"
    assert leftovers(tmp_path, "rocm", therock_tgz.name) == set()


@pytest.mark.parametrize("old_kind", ["dir", "symlink"])
def test_replace_swaps_the_tree_and_removes_the_old_one(tmp_path: Path, therock_tgz: Path, old_kind: str) -> None:
    dest = tmp_path / "rocm"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("not ours\n")
    if old_kind == "dir":
        extract_tarball(therock_like_tarball(tmp_path / "old.tar.gz", version="9.9.9"), dest)
    else:
        dest.symlink_to(elsewhere)
    extract_tarball(therock_tgz, dest, replace=True)
    assert (dest / ".info/version").read_text() == "10.2.0\n"
    assert dest.is_dir() and not dest.is_symlink()
    assert (elsewhere / "precious").read_text() == "not ours\n"  # replacing a symlink never touches its target
    assert leftovers(tmp_path, "rocm", "elsewhere", "old.tar.gz", therock_tgz.name) == set()


def test_dest_parent_is_created(tmp_path: Path, therock_tgz: Path) -> None:
    extract_tarball(therock_tgz, tmp_path / "a/b/rocm")
    assert (tmp_path / "a/b/rocm/.info/version").is_file()


def test_missing_tarball(tmp_path: Path) -> None:
    with pytest.raises(ExtractionError, match="cannot read"):
        extract_tarball(tmp_path / "nope.tar.gz", tmp_path / "dest")
    assert leftovers(tmp_path) == set()


def test_decompressor_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError):
        resolve_decompressor("zstd")
    if shutil.which("pigz"):
        assert resolve_decompressor("auto") == "pigz"
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no pigz, no gzip
    assert resolve_decompressor("auto") == "python"
    with pytest.raises(ExtractionError, match="pigz was requested"):
        resolve_decompressor("pigz")


# ----------------------------------------------------------------------------------------------------------------------
# Marker
# ----------------------------------------------------------------------------------------------------------------------


def test_marker_round_trip(tmp_path: Path) -> None:
    assert read_marker(tmp_path) is None
    info = {"tarball": "therock-dist-linux-gfx1151-10.2.0a20260915.tar.gz", "sha256": "ab" * 32, "size": 123}
    write_marker(tmp_path, info)
    assert read_marker(tmp_path) == info
    write_marker(tmp_path, {"sha256": "cd" * 32})
    assert read_marker(tmp_path) == {"sha256": "cd" * 32}
    assert [p.name for p in tmp_path.iterdir()] == [MARKER_NAME]

    (tmp_path / MARKER_NAME).write_text("{not json")
    assert read_marker(tmp_path) is None
    (tmp_path / MARKER_NAME).write_text("[1, 2]")
    assert read_marker(tmp_path) is None
    (tmp_path / MARKER_NAME).unlink()
    (tmp_path / "fake.json").write_text(json.dumps(info))
    (tmp_path / MARKER_NAME).symlink_to("fake.json")
    assert read_marker(tmp_path) is None  # a marker is never read through a symlink


def test_finish_writes_marker_and_drops_one_from_the_archive(tmp_path: Path) -> None:
    forged = json.dumps({"sha256": "00" * 32}).encode()
    tgz = therock_like_tarball(tmp_path / "t.tar.gz", files={MARKER_NAME: forged})
    extract_tarball(tgz, tmp_path / "plain")
    assert read_marker(tmp_path / "plain") is None
    extract_tarball(tgz, tmp_path / "marked", marker={"sha256": "11" * 32})
    assert read_marker(tmp_path / "marked") == {"sha256": "11" * 32}


# --------------------------------------------------------------------------------------------------------------------
# Holes: a pruned fat binary's zero-filled code objects take no disk space once extracted
# --------------------------------------------------------------------------------------------------------------------


def pruned_like(seed: int = 7) -> bytes:
    """A file shaped like a pruned fat binary: data, 6 MiB of zeros at an odd offset, data, zeros at the end."""
    import random

    rng = random.Random(seed)
    return rng.randbytes(100_003) + bytes(6 << 20) + rng.randbytes(50_001) + b"\0" * 4095 + b"\1" + bytes(3 << 20)


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


@pytest.mark.parametrize("decompressor", DECOMPRESSORS)
def test_zero_runs_are_extracted_as_holes_with_the_same_bytes(tmp_path, decompressor):
    data = pruned_like()
    with TarBuilder(tmp_path / "t.tar.gz") as tb:
        tb.root()
        tb.file("librocsolver.so.0", data)
        tb.file("zeros", bytes(1 << 20))
        tb.file("small", b"\0" * 10)
        tb.file("empty", b"")
    report = extract_tarball(tmp_path / "t.tar.gz", tmp_path / "out", decompressor=decompressor)
    lib = tmp_path / "out" / "librocsolver.so.0"
    assert lib.read_bytes() == data and (tmp_path / "out" / "zeros").read_bytes() == bytes(1 << 20)
    assert (tmp_path / "out" / "small").read_bytes() == b"\0" * 10 and (tmp_path / "out" / "empty").stat().st_size == 0
    assert os.stat(lib).st_size == len(data)
    assert allocated(lib) < 400_000 < len(data)  # ~150 KB of data allocated, not 9 MiB
    assert allocated(tmp_path / "out" / "zeros") == 0
    assert report.bytes_written == len(data) + (1 << 20) + 10
    assert report.bytes_in_holes >= (9 << 20) + (1 << 20) - 3 * 4096


def test_a_gnu_sparse_member_is_extracted_with_its_holes(tmp_path):
    # tarfile writes no sparse members; GNU tar --sparse does (old GNU format): read through tarfile's sparse map
    tar = shutil.which("tar")
    if tar is None:
        pytest.skip("no tar")
    src = tmp_path / "src"
    src.mkdir()
    data = pruned_like(3)
    fd = os.open(src / "lib.so", os.O_WRONLY | os.O_CREAT, 0o644)
    from rockbuild.archive import copy_sparse

    copy_sparse(io.BytesIO(data).read, fd)
    os.close(fd)
    subprocess.run([tar, "--sparse", "-czf", str(tmp_path / "s.tar.gz"), "-C", str(src), "lib.so"], check=True)
    with tarfile.open(tmp_path / "s.tar.gz") as tf:
        assert tf.getmember("lib.so").issparse()
    extract_tarball(tmp_path / "s.tar.gz", tmp_path / "out", decompressor="python")
    assert (tmp_path / "out" / "lib.so").read_bytes() == data and allocated(tmp_path / "out" / "lib.so") < 400_000


def test_zip_extraction_makes_the_same_holes(tmp_path):
    import zipfile

    from rockbuild.install import extract_zip_safely

    data = pruned_like(5)
    with zipfile.ZipFile(tmp_path / "b.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in (("librocblas.so.5", data), ("rocblas/library/x.dat", b"kernel")):
            info = zipfile.ZipInfo(name)
            info.create_system, info.external_attr = 3, (stat.S_IFREG | 0o644) << 16  # as publish writes them
            zf.writestr(info, content, zipfile.ZIP_DEFLATED)
    assert extract_zip_safely(tmp_path / "b.zip", tmp_path / "out") == 2
    lib = tmp_path / "out" / "librocblas.so.5"
    assert lib.read_bytes() == data and allocated(lib) < 400_000


def test_sparse_writer_gives_back_every_byte_whatever_the_pieces(tmp_path):
    import random

    from rockbuild.archive import HOLE_BLOCK, SparseWriter

    rng = random.Random(11)
    data = bytearray(pruned_like(9))
    for _ in range(50):  # lone non-zero bytes inside zero runs, at block edges too
        data[rng.randrange(len(data))] = 0xAB
    data[HOLE_BLOCK * 300 - 1] = data[HOLE_BLOCK * 300] = 1
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    writer = SparseWriter(fd)
    pos = 0
    while pos < len(data):  # pieces of every size, unaligned
        n = rng.choice([1, 7, 4095, 4096, 4097, 65536, 1 << 20, 3 << 20])
        writer.write(bytes(data[pos : pos + n]))
        pos += n
    writer.close()
    os.close(fd)
    assert (tmp_path / "f").read_bytes() == data
    assert writer.pos == len(data) and writer.holes > 8 << 20


def test_make_sparse_keeps_bytes_and_mode(tmp_path):
    from rockbuild.archive import make_sparse

    data = pruned_like(2)
    path = tmp_path / "lib.so"
    path.write_bytes(data)
    path.chmod(0o751)
    assert allocated(path) >= len(data) - 4096
    holes = make_sparse(path)
    assert holes >= (9 << 20) - 3 * 4096 and path.read_bytes() == data
    assert stat.S_IMODE(path.stat().st_mode) == 0o751 and allocated(path) < 400_000
    assert [p.name for p in tmp_path.iterdir()] == ["lib.so"]
