"""The roots' provisioning as Python (tests/e2e/harness/provision.py, issue 58): what it does with no root and no
network, on folders made here: the host's mirror read from its apt sources, the ROCm pin, a root made under
``.partial`` and renamed with its stamp, found made the second time, rebuilt when its stamp or its proof is missing,
refused when a root that must hold no ROCm has it, the sdist's pin, and the one-line errors."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from e2e.harness import provision
from support.files import write
from support.paths import REPO


@pytest.mark.parametrize(
    ("deb822", "oneline", "mirror"),
    [
        ("Types: deb\nURIs: http://deb.debian.org/debian/\nSuites: bookworm\n", None, "http://deb.debian.org/debian"),
        (None, "# a comment\ndeb http://mirror.example/debian bookworm main\n", "http://mirror.example/debian"),
        (None, "deb [arch=amd64 signed-by=/k.gpg] http://snap.example/d/ sid main\n", "http://snap.example/d"),
    ],
)
def test_the_mirror_is_the_hosts_first_debian_one(tmp_path, deb822, oneline, mirror):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    if deb822:
        write(d / "debian.sources", deb822)
    if oneline:
        write(tmp_path / "sources.list", oneline)
    assert provision.mirror_from_host(d, tmp_path / "sources.list") == mirror


def test_no_mirror_is_one_line_naming_the_variable(tmp_path):
    with pytest.raises(provision.Failed, match="no Debian mirror found in the host's apt sources; set ROCKBUILD_E2E"):
        provision.mirror_from_host(tmp_path, tmp_path / "sources.list")


def test_only_rocm_comes_from_experimental():
    pin = provision.rocm_pin().splitlines()
    assert pin[1:] == ["Pin: release a=experimental", "Pin-Priority: 500"]
    assert pin[0].startswith("Package: /^(hipcc|") and "glibc" not in pin[0] and "cmake" not in pin[0]
    assert [n for n, r in provision.ROOTS.items() if r.rocm] == ["rocm-root"]
    assert provision.GROUPS["all"] == (
        "rocm-root",
        "clean-root",
        "vulkan-root",
        "lavapipe-root",
        "mingw-root",
        "wine-root",
        "webui-root",
    )


class FakeDebian:
    """debootstrap and apt-get as folders made here: minbase leaves bin/sh, install the root's check file."""

    def __init__(self, rocm_in: str = "") -> None:
        self.calls: list[str] = []
        self.rocm_in = rocm_in

    def minbase(self, folder: Path, mirror: str) -> None:
        self.calls.append(f"minbase {folder.name} {mirror}")
        write(folder / "bin" / "sh", "")

    def install(self, root: provision.Root, folder: Path, mirror: str) -> list[str]:
        self.calls.append(f"install {root.name}")
        write(folder / root.check, "")
        if root.name == self.rocm_in:
            write(folder / "usr" / "lib" / "x86_64-linux-gnu" / "libamdhip64.so.7", "")
        return [f"packages={' '.join(root.packages)}"]


def _maker(tmp_path: Path, fake: FakeDebian) -> provision.Provisioner:
    return provision.Provisioner(
        tmp_path, "http://m/debian", fake.minbase, fake.install, packages_in=lambda f: 7, size_of=lambda f: 1234
    )


def test_a_root_is_made_under_partial_stamped_and_found_made_the_second_time(tmp_path):
    fake = FakeDebian()
    maker = _maker(tmp_path, fake)
    root = provision.ROOTS["lavapipe-root"]
    assert maker.provision(root) == "made"
    assert fake.calls == ["minbase lavapipe-root.partial http://m/debian", "install lavapipe-root"]
    assert (tmp_path / "lavapipe-root" / root.check).is_file() and not (tmp_path / "lavapipe-root.partial").exists()
    stamp = (tmp_path / ".lavapipe-root.stamp").read_text().splitlines()
    assert stamp[0] == "packages=" + " ".join(root.packages)
    assert stamp[1:3] == ["bytes=1234", "mirror=http://m/debian"] and stamp[3].startswith("created=20")
    assert maker.provision(root) == "present" and len(fake.calls) == 2
    # clean-root has no packages: debootstrap alone
    assert maker.provision(provision.ROOTS["clean-root"]) == "made" and fake.calls[-1].startswith("minbase clean-root")


def test_a_root_without_its_stamp_or_its_proof_is_made_again_and_an_earlier_partial_goes(tmp_path):
    fake = FakeDebian()
    maker = _maker(tmp_path, fake)
    root = provision.ROOTS["webui-root"]
    maker.provision(root)
    (tmp_path / "webui-root" / root.check).unlink()  # the stamp says done, the root does not
    write(tmp_path / "webui-root.partial" / "half", "an interrupted run")
    assert maker.provision(root) == "made" and (tmp_path / "webui-root" / root.check).is_file()
    assert not (tmp_path / "webui-root" / "half").exists() and not (tmp_path / "webui-root.partial").exists()
    (tmp_path / ".webui-root.stamp").unlink()
    write(tmp_path / "webui-root" / "left-over", "")
    assert maker.provision(root) == "made" and not (tmp_path / "webui-root" / "left-over").exists()


def test_rocm_where_none_may_be_is_refused_and_the_root_never_appears(tmp_path):
    maker = _maker(tmp_path, FakeDebian(rocm_in="lavapipe-root"))
    with pytest.raises(
        provision.Failed, match=r"lavapipe-root unexpectedly contains libamdhip64 \(left in .*partial\)"
    ):
        maker.provision(provision.ROOTS["lavapipe-root"])
    assert not (tmp_path / "lavapipe-root").exists() and not (tmp_path / ".lavapipe-root.stamp").exists()
    rocm = _maker(tmp_path / "r", FakeDebian(rocm_in="rocm-root"))
    (tmp_path / "r").mkdir()
    assert rocm.provision(provision.ROOTS["rocm-root"]) == "made"  # the one root that may hold it


def test_the_sdist_is_taken_only_with_its_pinned_sha256(tmp_path):
    sdist = write(tmp_path / provision.LLAMA_SDIST, "not the sdist")
    assert not provision.sdist_ok(sdist)
    assert provision.sdist_ok(sdist, hashlib.sha256(b"not the sdist").hexdigest())
    assert not provision.sdist_ok(tmp_path / "absent.tar.gz")


def test_mounts_under_a_root_come_deepest_first_and_only_its_own():
    info = "\n".join(
        f"{i} 1 0:{i} / {target} rw - proc proc rw"
        for i, target in enumerate(
            ["/", "/var/cache/e2e/rocm-root.partial/proc", "/var/cache/e2e/rocm-root.partial/sys/fs", "/proc"]
            + ["/var/cache/e2e/rocm-root.partial/sys", "/var/cache/e2e/rocm-root.partially/proc"]
        )
    )
    got = provision.mounts_under(Path("/var/cache/e2e/rocm-root.partial"), info)
    assert got == [
        "/var/cache/e2e/rocm-root.partial/sys/fs",
        "/var/cache/e2e/rocm-root.partial/sys",
        "/var/cache/e2e/rocm-root.partial/proc",
    ]


def test_not_root_is_one_line(tmp_path):
    # as root (CI here), the script runs as nobody: the check itself, never a provisioning
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    done = subprocess.run(
        [*drop, sys.executable, str(REPO / "tests" / "e2e" / "harness" / "provision.py"), "webui"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ROCKBUILD_E2E": str(tmp_path / "e2e")},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.strip().endswith("error: must run as root (debootstrap, chroot and mount need it)")
    assert not (tmp_path / "e2e").exists()


def test_an_unknown_group_is_refused_before_anything_runs(tmp_path):
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "e2e" / "harness" / "provision.py"), "macos"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ROCKBUILD_E2E": str(tmp_path / "e2e")},
    )
    assert done.returncode == 2 and "invalid choice: 'macos'" in done.stderr and not (tmp_path / "e2e").exists()
