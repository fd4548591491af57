"""Container images (issue 42): the layer format, the base from the host's packages, a push to a real registry on
127.0.0.1 (Debian's docker-registry), and podman running a real bundle with a real model."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from support.publishing import config as publish_config
from support.publishing import image_packages_missing, make_job

from rockbuild.core.errors import ImageError
from rockbuild.image import oci
from rockbuild.image.base import parse_depends
from rockbuild.image.podman import Podman, load, loaded, stored_images
from rockbuild.image.registry import Reference, Registry, push_image
from rockbuild.publish.image import (
    ImageOptions,
    build_image,
    check_image,
    image_tags,
    load_images_config,
    release_images,
)
from rockbuild.publish.jobs import load_job

REAL_BUNDLE_JOB = Path("/var/cache/rockbuild/h200/out/linux-vulkan")  # llama.cpp b11312, Vulkan, glibc 2.34 floor
REAL_MODEL = Path("/var/cache/rockbuild/e2e/models/SmolLM2-135M-Instruct.Q4_1.gguf")
needs_dpkg = pytest.mark.skipif(
    shutil.which("dpkg-query") is None or not Path("/usr/bin/busybox").exists(),
    reason="the base is made from installed Debian packages: needs dpkg and busybox-static",
)


def _layer_members(path: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(path.read_bytes()))) as tar:
        return tar.getmembers()


def test_a_layer_is_the_same_bytes_whatever_the_order_and_clock(tmp_path):
    members = [
        oci.Member("opt/llama/b", "file", 0o755, data=b"b"),
        oci.Member("etc/passwd", "file", data=b"x"),
        oci.Member("opt/llama/a", "symlink", target="b"),
        oci.Member("models", "dir", 0o755, uid=7, gid=7),
    ]
    one = oci.write_layer(members, tmp_path / "1", mtime=1_700_000_000, level=6, comment="t")
    two = oci.write_layer(list(reversed(members)), tmp_path / "2", mtime=1_700_000_000, level=6, comment="t")
    assert (
        one == two
        and (tmp_path / "1" / one.blob.digest[7:]).read_bytes() == (tmp_path / "2" / two.blob.digest[7:]).read_bytes()
    )
    got = _layer_members(tmp_path / "1" / one.blob.digest[7:])
    assert [m.name for m in got] == ["etc", "etc/passwd", "models", "opt", "opt/llama", "opt/llama/a", "opt/llama/b"]
    assert {m.mtime for m in got} == {1_700_000_000} and {(m.uname, m.gname) for m in got} == {("", "")}
    assert next(m for m in got if m.name == "models").uid == 7 and next(m for m in got if m.name == "opt").uid == 0
    later = oci.write_layer(members, tmp_path / "3", mtime=1_700_000_001, level=6, comment="t")
    assert later.blob.digest != one.blob.digest  # the one timestamp is the only clock in it


def test_depends_are_names_only():
    assert parse_depends("libc6 (>= 2.34), python3:any | python3-minimal:any, libx (= 1)") == (
        ("libc6",),
        ("python3", "python3-minimal"),
        ("libx",),
    )


def test_a_repository_is_parsed_and_loopback_only_is_plain_http():
    assert Reference.parse("ghcr.io/Owner/Rockbuild").base_url == "https://ghcr.io/v2/owner/rockbuild"
    assert Reference.parse("127.0.0.1:5000/o/r").base_url == "http://127.0.0.1:5000/v2/o/r"
    for bad in ("rockbuild", "ghcr.io/o/r:tag", "ghcr.io/O_/"):
        with pytest.raises(ImageError):
            Reference.parse(bad)


@needs_dpkg
def test_the_same_bundle_gives_the_same_digest_and_the_image_says_what_it_is(tmp_path):
    job = load_job(make_job(tmp_path / "out", "linux-gfx1151"))
    options = ImageOptions()
    kw = dict(publish=publish_config(), options=options, mtime=1_764_892_800, repo="owner/rockbuild")
    one = build_image(job, "b1300", tmp_path / "one", **kw)
    two = build_image(job, "b1300", tmp_path / "two", **kw)
    assert one.digest == two.digest and one.digest.startswith("sha256:")
    assert one.tags == ("rocm-gfx1151-b1300", "rocm-gfx1151") == image_tags(job, "b1300", load_images_config())
    assert "--device /dev/kfd --device /dev/dri" in one.run_command and "/models" in one.run_command
    raw, manifest = oci.read_layout(one.folder)
    assert manifest["mediaType"] == oci.MANIFEST_TYPE and len(manifest["layers"]) == 3
    config = json.loads((one.folder / manifest["config"]["digest"][7:]).read_text())
    c = config["config"]
    assert c["User"] == "10001:10001" and c["Entrypoint"] == ["/opt/llama/llama-server"]
    assert "LLAMA_ARG_HOST=0.0.0.0" in c["Env"] and "LLAMA_ARG_PORT=8080" in c["Env"]
    assert c["Healthcheck"]["Test"][-1] == "http://127.0.0.1:8080/health" and c["Volumes"] == {"/models": {}}
    labels = c["Labels"]
    assert labels["org.opencontainers.image.source"] == "https://github.com/owner/rockbuild"
    assert labels["org.opencontainers.image.revision"] == job.llama_commit
    assert labels["io.github.rockbuild.llama-cpp.build"] == "11312" and labels["io.github.rockbuild.rocm.version"]
    assert labels["org.opencontainers.image.version"] == labels["io.github.rockbuild.release"] == "b1300"
    names = {m.name for m in _layer_members(one.folder / manifest["layers"][1]["digest"][7:])}
    assert {"opt/llama/llama-server", "opt/llama/rocblas/library/TensileLibrary_lazy_gfx1151.dat"} <= names
    sbom = _layer_members(one.folder / manifest["layers"][2]["digest"][7:])
    assert [m.name for m in sbom][-1] == "usr/share/doc/rockbuild/sbom.cdx.json"
    base = {m.name: m for m in _layer_members(one.folder / manifest["layers"][0]["digest"][7:])}
    assert "usr/bin/busybox" in base and "etc/ssl/certs/ca-certificates.crt" in base and base["lib64"].issym()
    assert not any(n.startswith("usr/share/man/") for n in base) and base["tmp"].mode == 0o1777
    # another repository to push to, same image: the digest names the contents, never where they go
    elsewhere = build_image(
        job, "b1300", tmp_path / "three", **{**kw, "options": ImageOptions(repository="127.0.0.1:1/x/y")}
    )
    assert elsewhere.digest == one.digest


@needs_dpkg
def test_a_windows_job_gets_no_image_and_an_older_c_runtime_is_refused(tmp_path):
    out = tmp_path / "out"
    windows = load_job(make_job(out, "windows-gfx1151"))
    report = release_images(
        [windows],
        "b1",
        tmp_path / "rel",
        publish=publish_config(),
        options=ImageOptions(test=False),
        mtime_of=lambda j: 0,
        repo=None,
    )
    assert report.images == () and "Windows host" in report.skipped[0][1]
    fake_root = tmp_path / "root"  # a root with no C runtime installed: the packages are named
    (fake_root / "var/lib/dpkg/info").mkdir(parents=True)
    (fake_root / "var/lib/dpkg/status").write_text("")
    linux = load_job(make_job(out, "linux-gfx1151"))
    with pytest.raises(ImageError, match="has not installed"):
        build_image(
            linux,
            "b1",
            tmp_path / "img",
            publish=publish_config(),
            options=ImageOptions(base_root=fake_root),
            mtime=0,
            repo=None,
        )
    newer = Path("/var/cache/rockbuild/e2e/night/n3/out/linux-vulkan/bundle/libggml-base.so.0")  # built on glibc 2.43
    if newer.exists():  # this machine's glibc (Debian 12: 2.36) cannot run it: refused, naming the file
        shutil.copy(newer, linux.bundle / "libggml-base.so.0")
        with pytest.raises(ImageError, match=r"libggml-base.so.0 needs GLIBC_2\.\d+, but the image's base gives"):
            build_image(
                linux, "b1", tmp_path / "img", publish=publish_config(), options=ImageOptions(), mtime=0, repo=None
            )


# ---------------------------------------------------------------------------------------------------------------------
# A real registry


def _small_image(folder: Path, text: bytes = b"hello") -> oci.ImageLayout:
    layer = oci.write_layer([oci.Member("opt/x", "file", data=text)], folder, mtime=0, level=6, comment="x")
    return oci.write_image(folder, [layer], oci.ContainerSetup(entrypoint=("/opt/x",)), created=0)


def test_a_push_is_idempotent_and_reads_every_tag_back(tmp_path, registry):
    address, _proc = registry
    layout = _small_image(tmp_path / "img")
    reg = Registry(Reference.parse(f"{address}/owner/rockbuild"))
    first = push_image(layout.folder, reg, ["vulkan-b1300", "vulkan"])
    assert first.digest == layout.digest and len(first.blobs_sent) == 2
    assert dict(first.tags) == {"vulkan-b1300": "pushed", "vulkan": "pushed"}
    again = push_image(layout.folder, reg, ["vulkan-b1300", "vulkan"])  # a re-run: nothing sent twice
    assert again.blobs_sent == () and dict(again.tags) == {"vulkan-b1300": "unchanged", "vulkan": "unchanged"}
    newer = _small_image(tmp_path / "img2", b"newer")  # the next release moves the moving tag, keeps the old one
    push_image(newer.folder, reg, ["vulkan-b1301", "vulkan"])
    assert reg.tag_digest("vulkan") == newer.digest and reg.tag_digest("vulkan-b1300") == layout.digest
    reg.close()


def test_a_push_that_fails_is_an_image_error(tmp_path, registry):
    address, proc = registry
    layout = _small_image(tmp_path / "img")
    proc.terminate()
    proc.wait(timeout=10)
    reg = Registry(Reference.parse(f"{address}/owner/rockbuild"))
    with pytest.raises(ImageError, match="cannot be reached"):
        push_image(layout.folder, reg, ["t"])


# ---------------------------------------------------------------------------------------------------------------------
# podman, a real bundle, a real model


@pytest.mark.timeout(600)
@needs_dpkg
def test_a_tested_image_leaves_podmans_store_as_it_was(tmp_path):
    """check_image loads the image into podman's store to run it: afterwards it is gone again (every night left ~3 GB
    there until a publishing machine's disk was full), unless it was in the store before."""
    podman = Podman.find()
    if podman is None:
        pytest.skip("podman is not installed (apt-get install podman runc): the image test needs it")
    folder = tmp_path / "img"
    folder.mkdir()
    layer = oci.write_layer(
        [oci.Member("hello", "file", data=str(tmp_path).encode())], folder, mtime=1_700_000_000, level=1, comment="t"
    )
    layout = oci.write_image(folder, [layer], oci.ContainerSetup(entrypoint=("/hello",)), created=1_700_000_000)
    assert layout.image_id[7:] not in stored_images(podman)
    with loaded(podman, folder) as image_id:
        assert f"sha256:{image_id}" == layout.image_id and image_id in stored_images(podman)
    assert image_id not in stored_images(podman)

    kept = load(podman, folder)  # already there: a user's own copy is not ours to remove
    try:
        with loaded(podman, folder) as again:
            assert again == kept
        assert kept in stored_images(podman)
    finally:
        podman("rmi", "-f", kept, check=False)
    with pytest.raises(ImageError), loaded(podman, folder) as image_id:  # removed when the test in it fails, too
        raise ImageError("the test failed")
    assert image_id not in stored_images(podman)


def test_podman_runs_the_real_bundle_as_a_service(tmp_path, registry):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (apt-get install podman runc): the image test needs it")
    if not (REAL_BUNDLE_JOB / "bundle" / "llama-server").exists() or not REAL_MODEL.exists():
        pytest.skip(f"no real bundle ({REAL_BUNDLE_JOB}) or model ({REAL_MODEL}) on this machine")
    if missing := image_packages_missing("vulkan"):
        pytest.skip(f"the image copies this machine's {', '.join(missing)}: apt-get install them to run it")
    address, _proc = registry
    job = load_job(REAL_BUNDLE_JOB)
    options = ImageOptions(repository=f"{address}/owner/rockbuild", model=REAL_MODEL, runtime="runc")
    image = build_image(
        job,
        "b1300",
        tmp_path / "img",
        publish=publish_config(),
        options=options,
        mtime=1_764_892_800,
        repo="owner/rockbuild",
    )
    tested = check_image(image, job, options)
    t = tested.test
    assert t is not None and t.ok, t
    assert t.user == "10001:10001" and t.read_only and t.healthcheck == "healthy" and t.health
    assert t.completion.lstrip().startswith("Paris")
    assert t.chat_page.startswith("absent")  # this bundle was built without npm: no chat page to serve
    from rockbuild.publish.image import push_release_images

    pushed = push_release_images([tested], options)[0]
    assert pushed.push is not None and pushed.push.digest == image.digest
    pulled = subprocess.run(
        ["podman", "pull", "--tls-verify=false", "-q", f"{address}/owner/rockbuild:vulkan"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pulled.returncode == 0, pulled.stderr
    digest = subprocess.run(
        ["podman", "inspect", "--format", "{{.Digest}}", f"{address}/owner/rockbuild:vulkan"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    assert digest == image.digest
    subprocess.run(["podman", "rmi", "-f", f"{address}/owner/rockbuild:vulkan"], capture_output=True, timeout=120)
