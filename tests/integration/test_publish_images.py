"""`rockbuild publish --images` (issue 42): the release's container images go into manifest.json and the notes, are
pushed to a real registry on 127.0.0.1 (Debian's docker-registry) just before the release is published, and a
registry that cannot be reached leaves the release a draft that a re-run completes, sending nothing twice. The fake
bundles cannot serve a model, so these runs build the images without the podman test (``test=False``, which the
commands allow only with --dry-run); the one podman run here shows that a failed test stops everything."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
from support.options import context
from support.paths import REPO
from support.publishing import TOKEN, config, image_packages_missing, make_job, smoke_ok
from support.registry import free_port, local_registry

from rockbuild.core.errors import ImageError
from rockbuild.core.records import ManifestRecord
from rockbuild.image import oci
from rockbuild.image.registry import Reference, Registry, push_image
from rockbuild.publish.image import ImageOptions, build_image, push_release_images
from rockbuild.publish.jobs import load_job
from rockbuild.publish.release import PublishOptions, publish

pytestmark = pytest.mark.skipif(
    shutil.which("dpkg-query") is None or not Path("/usr/bin/busybox").exists(),
    reason="an image's base is made from installed Debian packages: needs dpkg and busybox-static",
)
SCHEMA = json.loads((REPO / "docs" / "schemas" / "manifest.schema.json").read_text())


def _night(out: Path) -> list[Path]:
    return [
        make_job(out, "linux-gfx1151", smoke=smoke_ok()),
        make_job(out, "linux-gfx110X", targets=("gfx1100", "gfx1101", "gfx1102", "gfx1103"), smoke=smoke_ok()),
        make_job(out, "windows-gfx1151"),
    ]


def _options(gh, jobs, tmp_path, images: ImageOptions | None, **kw) -> PublishOptions:
    return PublishOptions(
        context=context(),
        job_dirs=tuple(jobs),
        repo=gh.full_name,
        api_url=gh.api_url,
        token=TOKEN,
        throttle=False,
        out=tmp_path / "release",
        images=images,
        **kw,
    )


def _asset(release, name: str) -> bytes:
    return next(a.data for a in release.assets if a.name == name)


def test_images_go_out_with_the_release_and_a_dead_registry_leaves_the_draft(gh, tmp_path):
    jobs = _night(tmp_path / "out")
    port = free_port()  # nothing listens there yet: the registry is down
    repository = f"127.0.0.1:{port}/{gh.full_name}"
    images = ImageOptions(repository=repository, test=False)

    with pytest.raises(ImageError) as failed:
        publish(_options(gh, jobs, tmp_path, images))
    error = failed.value
    assert error.exit_code == 12 and "\n" not in error.message and "cannot be reached" in error.message, error.message
    assert error.message.startswith(f"pushing {repository}:rocm-gfx1151-b1000: checking sha256:")
    assert error.hint == "run the same command again: what was pushed is not sent twice"
    draft = gh.state.release_by_tag("b1000")
    assert draft.draft and gh.state.latest() is None  # every asset is in the draft, and nothing is public

    # manifest.json: each Linux asset's image, its digest and tags; the Windows asset has none
    manifest = json.loads(_asset(draft, "manifest.json"))
    jsonschema.validate(manifest, SCHEMA)
    record = ManifestRecord.from_dict(manifest)
    assert [(i.job, i.flavour) for i in record.images] == [
        ("linux-gfx1151", "rocm-gfx1151"),
        ("linux-gfx110X", "rocm-gfx110x"),
    ]
    first = record.images[0]
    assert first.repository == repository and first.tags == ("rocm-gfx1151-b1000", "rocm-gfx1151")
    assert first.digest.startswith("sha256:") and first.base_packages and first.compressed_bytes
    assert "test" not in manifest["images"][0] and "push" not in manifest["images"][0]  # the same bytes on a re-run
    # the notes: per image the reference, the digest and the one command that runs it
    notes = draft.body
    assert "### Container images" in notes and "not tested with podman" in notes
    assert (
        f"`{repository}:rocm-gfx1151-b1000` (moving tag `{repository}:rocm-gfx1151`), digest `{first.digest}`" in notes
    )
    assert (
        f"podman run -d --name llama-server --device /dev/kfd --device /dev/dri --group-add keep-groups "
        f"-p 8080:8080 -v ~/models:/models:ro,Z {repository}:rocm-gfx1151-b1000 -m /models/MODEL.gguf"
    ) in notes

    with local_registry(tmp_path / "registry", port) as (address, _proc):
        # a run that died after pushing the first image: it is in the registry already
        registry = Registry(Reference.parse(repository))
        folder = tmp_path / "release" / "b1000" / "images" / "rocm-gfx1151"
        push_image(folder, registry, list(first.tags))
        uploads_before = sum(1 for m, path in gh.writes if path.startswith("/api/uploads/"))

        report = publish(_options(gh, jobs, tmp_path, images))
        assert report.state == "published" and report.tag == "b1000"
        rel = gh.state.release_by_tag("b1000")
        assert not rel.draft and gh.state.latest().id == rel.id and len(gh.state.releases) == 1
        assert sum(1 for m, path in gh.writes if path.startswith("/api/uploads/")) == uploads_before  # all kept
        assert json.loads(_asset(rel, "manifest.json")) == manifest  # the draft's, byte for byte
        one, two = report.images
        assert one.push is not None and one.push.blobs_sent == ()  # nothing twice
        assert dict(one.push.tags) == {"rocm-gfx1151-b1000": "unchanged", "rocm-gfx1151": "unchanged"}
        assert two.push is not None and dict(two.push.tags) == {
            "rocm-gfx110x-b1000": "pushed",
            "rocm-gfx110x": "pushed",
        }
        base = oci.read_layout(folder)[1]["layers"][0]["digest"]  # the two ROCm images share their base layer
        assert two.push.blobs_present == (base,) and base not in two.push.blobs_sent
        for image in report.images:  # the registry serves what manifest.json says
            for tag in image.tags:
                assert registry.tag_digest(tag) == image.digest
        assert "pushed as rocm-gfx110x-b1000, rocm-gfx110x" in report.render()

        writes = len(gh.writes)
        again = publish(_options(gh, jobs, tmp_path, images))
        assert again.state == "unchanged" and len(gh.writes) == writes
        registry.close()


def test_without_images_the_manifest_has_no_images_key(gh, tmp_path):
    publish(_options(gh, _night(tmp_path / "out"), tmp_path, None))
    release = gh.state.release_by_tag("b1000")
    assert "images" not in json.loads(_asset(release, "manifest.json")) and "Container images" not in release.body


def test_an_untested_image_is_never_pushed_when_testing_is_on(tmp_path, registry):
    address, _proc = registry
    job = load_job(make_job(tmp_path / "out", "linux-gfx1151"))
    options = ImageOptions(repository=f"{address}/owner/rockbuild")  # test=True: the default
    image = build_image(job, "b1", tmp_path / "img", publish=config(), options=options, mtime=0, repo="owner/rockbuild")
    with pytest.raises(
        ImageError, match="image rocm-gfx1151 was not tested with podman; an untested image is never pushed"
    ):
        push_release_images([image], options)
    import requests

    assert requests.get(f"http://{address}/v2/_catalog", timeout=10).json() == {"repositories": []}


@pytest.mark.timeout(300)
def test_a_failed_podman_test_stops_the_release_before_any_github_write(gh, tmp_path, registry):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (apt-get install podman runc)")
    address, _proc = registry
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")  # never read: the fake llama-server cannot start
    jobs = [make_job(tmp_path / "out", "linux-gfx1151", smoke=smoke_ok())]
    images = ImageOptions(repository=f"{address}/{gh.full_name}", model=model, runtime="runc")
    try:
        with pytest.raises(ImageError, match=r"^image rocm-gfx1151 failed its podman test: the container exited"):
            publish(_options(gh, jobs, tmp_path, images))
        assert gh.writes == []  # no draft, no upload, no push
        import requests

        assert requests.get(f"http://{address}/v2/_catalog", timeout=10).json() == {"repositories": []}
    finally:
        folder = tmp_path / "release" / "b1000" / "images" / "rocm-gfx1151"
        if folder.is_dir():
            config_digest = oci.read_layout(folder)[1]["config"]["digest"]
            subprocess.run(
                ["podman", "rmi", "-f", config_digest.removeprefix("sha256:")], capture_output=True, timeout=120
            )


def test_the_options_of_images_on_the_command_line(tmp_path, run_rockbuild):
    """Each misuse is one line naming the option; --no-image-test only with --dry-run, which makes the images and
    writes their digests into manifest.json without podman."""
    job = make_job(tmp_path / "out", "linux-gfx1151", smoke=smoke_ok())
    alone = run_rockbuild("publish", "--dry-run", "--image-runtime", "runc", str(job))
    assert alone.returncode == 2 and alone.stderr.splitlines() == [
        "error: --image-runtime is an option of the images: it needs --images REGISTRY/NAME"
    ]
    bad = run_rockbuild("publish", "--dry-run", "--images", "ghcr.io/Owner/a:b", "--no-image-test", str(job))
    assert (
        bad.returncode == 12 and len(bad.stderr.splitlines()) == 1 and "give the repository without a tag" in bad.stderr
    )
    untested = run_rockbuild("publish", "--repo", "o/r", "--images", "ghcr.io/o/r", "--no-image-test", str(job))
    assert untested.returncode == 2 and untested.stderr.splitlines() == [
        "error: --no-image-test is for --dry-run: an untested image is never pushed"
    ]
    night = run_rockbuild("nightly", "--plan", "--images", "ghcr.io/o/r", "--no-image-test")
    assert night.returncode == 2 and night.stderr.splitlines() == [
        "error: --images is for --release (or the whole night), not --plan"
    ]
    dry = run_rockbuild(
        "publish", "--dry-run", "--images", "ghcr.io/Owner/Name", "--no-image-test", "--json", str(job), timeout=300
    )
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    (image,) = report["images"]
    assert image["repository"] == "ghcr.io/owner/name" and image["test"] is None and image["push"] is None
    manifest = json.loads((tmp_path / "out/release/b1000/manifest.json").read_text())
    assert manifest["images"][0]["digest"] == image["digest"]
    assert (tmp_path / "out/release/b1000/images/rocm-gfx1151").is_dir()


REAL_JOB = Path("/var/cache/rockbuild/h200/out/linux-vulkan")  # llama.cpp b11312, Vulkan, no chat page (no npm)
REAL_MODEL = Path("/var/cache/rockbuild/e2e/models/SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.mark.timeout(600)
def test_nightly_release_tests_pushes_and_publishes_the_real_image(tmp_path):
    """The CI publish leg as it runs: `rockbuild nightly --release --images` with the real Vulkan bundle, podman (the
    test serves the real SmolLM2 and checks its answer), the fake GitHub and a registry that is down, then up: the
    first run is a failed publish (exit 1, alerted, the draft unpublished), the second publishes and writes the pushed
    image's digest into $GITHUB_OUTPUT for the attestation."""
    if shutil.which("podman") is None or not (REAL_JOB / "bundle" / "llama-server").exists() or not REAL_MODEL.exists():
        pytest.skip("needs podman (apt-get install podman runc), a real bundle and the real model on this machine")
    if missing := image_packages_missing("vulkan"):
        pytest.skip(f"the image copies this machine's {', '.join(missing)}: apt-get install them to run it")
    from conftest import rockbuild_exe
    from support.github import GitHubAPIServer

    build = json.loads((REAL_JOB / "build.json").read_text())
    inputs = {
        "schema": 1,
        "tool": "rockbuild",
        "llama_cpp": {
            "ref": "master",
            "commit": build["llama_cpp"]["commit"],
            "build_number": build["llama_cpp"]["build_number"],
            "url": "https://example/llama.cpp",
        },
        "jobs": [{**build["job"], "rocm_key": None}],
    }
    (tmp_path / "inputs.json").write_text(json.dumps(inputs))
    port = free_port()
    output = tmp_path / "github-output"
    with GitHubAPIServer(token=TOKEN) as gh:
        repository = f"127.0.0.1:{port}/{gh.full_name}"

        def release() -> subprocess.CompletedProcess[str]:
            output.write_text("")
            env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
            return subprocess.run(
                [
                    rockbuild_exe(),
                    "nightly",
                    "--release",
                    "--inputs",
                    "inputs.json",
                    "--repo",
                    gh.full_name,
                    "--api-url",
                    gh.api_url,
                    "--out",
                    "out",
                    "--allow-partial",
                    "built without npm",
                    "--images",
                    repository,
                    "--image-model",
                    str(REAL_MODEL),
                    "--image-runtime",
                    "runc",
                    str(REAL_JOB),
                ],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                timeout=500,
                env={
                    **env,
                    "GITHUB_TOKEN": TOKEN,
                    "GITHUB_OUTPUT": str(output),
                    "ROCKBUILD_CACHE": str(tmp_path / "cache"),
                },
            )

        down = release()
        assert down.returncode == 1, down.stderr
        assert "night: failed: publishing failed: " in down.stdout and "cannot be reached" in down.stdout
        (issue,) = gh.state.issues.values()  # alerted as any failed publish
        assert "### The night's `publish` failed" in issue.body and "cannot be reached" in issue.body
        (draft,) = gh.state.releases.values()
        assert draft.draft and "### Container images" in draft.body and "not tested" not in draft.body
        assert output.read_text() == "images=[]\n"
        with local_registry(tmp_path / "registry", port):
            up = release()
            assert up.returncode == 0, up.stdout + up.stderr
            (published,) = gh.state.releases.values()
            assert not published.draft
            manifest = json.loads(next(a.data for a in published.assets if a.name == "manifest.json"))
            (image,) = manifest["images"]
            assert image["tags"] == ["vulkan-b1000", "vulkan"]
            assert f"digest `{image['digest']}`" in published.body and "--device /dev/dri " in published.body
            written = dict(line.split("=", 1) for line in output.read_text().splitlines())
            assert json.loads(written["images"]) == [{"name": repository, "digest": image["digest"]}]
            registry = Registry(Reference.parse(repository))
            assert registry.tag_digest("vulkan-b1000") == image["digest"] == registry.tag_digest("vulkan")
            registry.close()
    subprocess.run(["podman", "rmi", "-f", image["image_id"].removeprefix("sha256:")], capture_output=True, timeout=120)
