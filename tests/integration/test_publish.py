"""The publisher against a local GitHub API server (tests/support/github.py), with real archives of small real bundles."""

from __future__ import annotations

import datetime
import hashlib
import json
import zipfile

import pytest
from support.options import context
from support.publishing import COMMIT, TOKEN, compile_needing_glibc_236, config, make_job, smoke_ok

from rockbuild.core.errors import PublishError
from rockbuild.publish.notes import read_marker
from rockbuild.publish.release import PublishOptions, publish


@pytest.fixture
def night(tmp_path):
    """Three jobs of one night: two Linux (one with a GPU smoke), one Windows."""
    out = tmp_path / "out"
    jobs = [
        make_job(out, "linux-gfx1151", smoke=smoke_ok("gpu", 4100.0, 95.5)),
        make_job(
            out,
            "linux-gfx110X",
            targets=("gfx1100", "gfx1101", "gfx1102", "gfx1103"),
            rocm="7.2.0a20261127",
            smoke=smoke_ok(),
        ),
        make_job(out, "windows-gfx1151"),
    ]
    return jobs


def options(gh, jobs, tmp_path, **kw) -> PublishOptions:
    return PublishOptions(
        context=context(),
        job_dirs=tuple(jobs),
        repo=gh.full_name,
        api_url=gh.api_url,
        token=TOKEN,
        throttle=False,
        out=tmp_path / "release",
        **kw,
    )


EXPECTED = {
    "llama-b1000-ubuntu-rocm-gfx1151-x64.zip",
    "llama-b1000-ubuntu-rocm-gfx1151-x64.tar.gz",
    "llama-b1000-ubuntu-rocm-gfx110X-x64.zip",
    "llama-b1000-ubuntu-rocm-gfx110X-x64.tar.gz",
    "llama-b1000-windows-rocm-gfx1151-x64.zip",
    "manifest.json",
    "SHA256SUMS",
    # one CycloneDX SBOM per job's assets, listed in SHA256SUMS
    "llama-b1000-ubuntu-rocm-gfx1151-x64.cdx.json",
    "llama-b1000-ubuntu-rocm-gfx110X-x64.cdx.json",
    "llama-b1000-windows-rocm-gfx1151-x64.cdx.json",
    # a .deb per Linux asset (rockbuild/publish/deb.py)
    "llama-b1000-ubuntu-rocm-gfx1151-x64.deb",
    "llama-b1000-ubuntu-rocm-gfx110X-x64.deb",
}


def test_first_publish(gh, night, tmp_path):
    report = publish(options(gh, night, tmp_path))
    assert report.state == "published" and report.tag == "b1000"
    rel = gh.state.release_by_tag("b1000")
    assert not rel.draft and gh.state.latest().id == rel.id
    assert {a.name for a in rel.assets} == EXPECTED
    assert all(a.state == "uploaded" for a in rel.assets)
    # SHA256SUMS covers every other asset, and matches what the server holds
    sums = dict(
        reversed(line.split("  "))
        for line in next(a for a in rel.assets if a.name == "SHA256SUMS").data.decode().splitlines()
    )
    assert set(sums) == EXPECTED - {"SHA256SUMS"}
    for asset in rel.assets:
        if asset.name != "SHA256SUMS":
            assert sums[asset.name] == hashlib.sha256(asset.data).hexdigest()
    # one draft, the uploads, one publish: nothing else
    methods = [m for m, _ in gh.writes]
    assert methods.count("POST") == 1 + len(EXPECTED) and methods.count("PATCH") == 1 and "DELETE" not in methods
    assert gh.writes[0] == ("POST", f"/api/v3/repos/{gh.full_name}/releases")
    assert gh.writes[-1][0] == "PATCH"
    # notes: each job's own ROCm version and date, the exact ISAs, bench numbers, known issues
    body = rel.body
    assert "7.2.0a20261128 (2026-11-28)" in body and "7.2.0a20261127 (2026-11-27)" in body
    assert "gfx1100, gfx1101, gfx1102, gfx1103" in body
    assert "| 4100.0 | 95.5 |" in body and "passed (ROCm)" in body and "passed (CPU only)" in body
    assert "A ROCm asset carries every ROCm library" in body and "libvulkan1" not in body  # a ROCm-only release
    assert "### Known issues" in body and "gfx1152 and gfx1153" in body
    assert read_marker(body)["fingerprint"] == report.fingerprint
    assert "0c1e570" in body and "build 11312" in body


def test_manifest_lists_provenance_per_job(gh, night, tmp_path):
    publish(options(gh, night, tmp_path))
    manifest = json.loads(next(a for a in gh.state.release_by_tag("b1000").assets if a.name == "manifest.json").data)
    jobs = {j["id"]: j for j in manifest["jobs"]}
    assert manifest["llama_cpp"] == {"commit": "0c1e57098bba43ac29e6e3b677cdceebdd22334f", "build_number": "11312"}
    j = jobs["linux-gfx110X"]
    assert j["rocm"]["version"] == "7.2.0a20261127" and j["rocm"]["date"] == "2026-11-27"
    assert j["rocm"]["tarball"] == "therock-dist-linux-gfx110X-7.2.0a20261127.tar.gz"
    assert j["rocm"]["tarball_sha256"] == "ab" * 32 and j["rocm"]["therock_commit"] == "89553ce3a5a4c5b8d0e1"
    assert j["isas"] == ["gfx1100", "gfx1101", "gfx1102", "gfx1103"]
    assert j["cmake"]["GGML_HIP"] == "ON"
    assert {f["path"] for f in j["bundle"]["files"]} >= {
        "llama-server",
        "rocblas/library/TensileLibrary_lazy_gfx1151.dat",
    }
    assert j["audit"]["ok"] is True and j["smoke"]["ok"] is True
    assert [b["test"] for b in j["bench"]] == ["pp64", "tg16"]
    assert "glibc_floor" in j and "glibc_floor" not in jobs["windows-gfx1151"]
    assert {a["name"] for a in j["assets"]} == {
        "llama-b1000-ubuntu-rocm-gfx110X-x64.zip",
        "llama-b1000-ubuntu-rocm-gfx110X-x64.tar.gz",
        "llama-b1000-ubuntu-rocm-gfx110X-x64.cdx.json",
        "llama-b1000-ubuntu-rocm-gfx110X-x64.deb",
    }
    assert manifest["glibc_floor_allowed"]["GLIBC"] == "2.35"


def test_identical_rerun_makes_no_api_writes(gh, night, tmp_path):
    publish(options(gh, night, tmp_path))
    before = len(gh.writes)
    report = publish(options(gh, night, tmp_path))
    assert report.state == "unchanged" and "nothing changed" in report.message
    assert len(gh.writes) == before
    assert len(gh.state.releases) == 1


def test_crash_between_uploads_then_rerun_completes_the_draft(gh, night, tmp_path):
    old = gh.state.add_release("b1294", body="the seed's last release")
    gh.state.abort_upload_number = 3
    with pytest.raises(PublishError, match="run the same command again"):
        publish(options(gh, night, tmp_path))
    draft = gh.state.release_by_tag("b1295")
    assert draft.draft and gh.state.latest().id == old.id  # latest never shows the half release
    states = sorted(a.state for a in draft.assets)
    assert states == ["starter", "uploaded", "uploaded"]
    complete = {a.name for a in draft.assets if a.state == "uploaded"}
    gh.state.abort_upload_number = None
    writes_before = len(gh.writes)
    report = publish(options(gh, night, tmp_path))
    assert report.state == "published" and report.tag == "b1295"
    assert len(gh.state.releases) == 2  # no second release
    rel = gh.state.release_by_tag("b1295")
    names = [a.name for a in rel.assets]
    assert sorted(names) == sorted({n.replace("b1000", "b1295") for n in EXPECTED}) and len(names) == len(set(names))
    actions = dict(report.actions)
    assert all(actions[n] == "kept" for n in complete)
    assert list(actions.values()).count("replaced") == 1
    new_writes = gh.writes[writes_before:]
    uploads = [w for w in new_writes if w[1].startswith("/api/uploads/")]
    assert len(uploads) == len(EXPECTED) - len(complete)  # the complete ones were not sent again
    assert gh.state.latest().id == rel.id


def test_rerun_on_a_published_release_with_changed_bundle_changes_nothing(gh, night, tmp_path):
    publish(options(gh, night, tmp_path))
    (night[0] / "bundle" / "llama-server").write_bytes(b"rebuilt, other bytes")
    before = len(gh.writes)
    # same inputs (the fingerprint names the inputs, not the bytes): the published release stands
    assert publish(options(gh, night, tmp_path)).state == "unchanged"
    # naming the tag explicitly is an attempt to change a published asset: refused
    with pytest.raises(
        PublishError,
        match=r"b1000 is already published and its assets are immutable: "
        r"llama-b1000-ubuntu-rocm-gfx1151-x64\.zip differs \(.*ours",
    ):
        publish(options(gh, night, tmp_path, tag="b1000"))
    assert len(gh.writes) == before
    original = hashlib.sha256(
        next(
            a.data
            for a in gh.state.release_by_tag("b1000").assets
            if a.name.endswith("gfx1151-x64.zip") and "ubuntu" in a.name
        )
    ).hexdigest()
    assert (
        original
        != hashlib.sha256((tmp_path / "release/b1000/llama-b1000-ubuntu-rocm-gfx1151-x64.zip").read_bytes()).hexdigest()
    )


def test_explicit_tag_of_a_published_release_with_identical_assets_is_a_no_op(gh, night, tmp_path):
    publish(options(gh, night, tmp_path))
    rel = gh.state.release_by_tag("b1000")
    rel.body = "edited by a maintainer: no marker any more"
    before = len(gh.writes)
    report = publish(options(gh, night, tmp_path, tag="b1000"))
    assert report.state == "unchanged" and "identical assets" in report.message
    assert len(gh.writes) == before


def test_oversize_asset_is_refused_before_any_upload(gh, night, tmp_path):
    with pytest.raises(PublishError) as err:
        publish(options(gh, night, tmp_path), config(max_bytes=700))
    assert "llama-b1000-ubuntu-rocm-gfx1151-x64.zip is " in err.value.message
    assert "bytes), over the 700 B limit" in err.value.message and "nothing was uploaded" in err.value.message
    assert gh.writes == []


def test_the_default_limit_is_githubs_2_gib(tmp_path):
    from rockbuild.publish.archives import check_asset_size

    limit = config().max_bytes
    assert limit == 2 * 1024**3
    asset = tmp_path / "llama-b1000-ubuntu-rocm-gfx90a-x64.zip"
    with open(asset, "wb") as fh:  # sparse: no disk space used
        fh.truncate(limit - 1)
    check_asset_size(asset, limit)
    with open(asset, "r+b") as fh:
        fh.truncate(limit)
    with pytest.raises(
        PublishError,
        match=r"^llama-b1000-ubuntu-rocm-gfx90a-x64\.zip is 2\.0 GiB \(2,147,483,648 "
        r"bytes\), over the 2\.0 GiB limit",
    ):
        check_asset_size(asset, limit)


def test_required_job_failure_blocks_and_optional_is_listed(gh, tmp_path):
    out = tmp_path / "out"
    ok = make_job(out, "linux-gfx1151")
    optional = make_job(
        out, "linux-gfx1152", targets=("gfx1152",), required=False, status="failed", failed_step="compile"
    )
    report = publish(options(gh, [ok, optional], tmp_path))
    assert report.state == "published"
    rel = gh.state.release_by_tag("b1000")
    assert "### Jobs that failed (not in this release)" in rel.body
    assert "`linux-gfx1152` (optional): compile: the build failed at step 'compile'" in rel.body
    assert not any("gfx1152" in a.name for a in rel.assets)
    manifest = json.loads(next(a.data for a in rel.assets if a.name == "manifest.json"))
    assert manifest["failed_jobs"] == [
        {"id": "linux-gfx1152", "required": False, "step": "compile", "reason": "the build failed at step 'compile'"}
    ]
    required = make_job(out, "windows-gfx120X", status="failed", failed_step="configure")
    before = len(gh.writes)
    with pytest.raises(PublishError, match=r"required job windows-gfx120X failed at configure"):
        publish(options(gh, [ok, required], tmp_path))
    assert len(gh.writes) == before


def test_a_job_folder_without_bundle_or_with_failed_audit_or_smoke_is_failed(tmp_path):
    from rockbuild.publish.jobs import load_job

    out = tmp_path / "out"
    nobundle = out / "linux-gfx908"
    nobundle.mkdir(parents=True)
    (nobundle / "build.json").write_text(json.dumps({"status": "ok", "job": {"id": "linux-gfx908"}}))
    assert load_job(nobundle).failed_step == "bundle"
    empty = out / "linux-gfx90a"
    empty.mkdir()
    assert load_job(empty).failed_step == "build" and load_job(empty).reason.startswith("no build.json")
    broken = out / "linux-gfx942"
    broken.mkdir()
    (broken / "build.json").write_text("{not json")
    assert load_job(broken).ok is False
    audit = make_job(out, "linux-gfx1150", audit_ok=False)
    assert load_job(audit).failed_step == "audit" and "libfoo" in load_job(audit).reason
    smoke = make_job(
        out,
        "linux-gfx1200",
        smoke={
            "ok": False,
            "failures": ["cli: timed out after 300s"],
            "runs": {"cli": {"ok": False, "log": "/x/cli.log", "log_tail": ["Loading model..."]}},
        },
    )
    job = load_job(smoke)
    assert job.failed_step == "smoke" and job.log_tail == ("Loading model...",)
    failed_build = make_job(out, "linux-gfx1201", status="failed", failed_step="compile")
    job = load_job(failed_build)
    assert job.failed_step == "compile" and job.log_tail[-1] == "error: out of memory"


def test_an_informational_runner_smoke_never_gates_and_its_error_reaches_the_notes(gh, tmp_path):
    """Issue 29: a `runner_smoke: informational` job's smoke on the CI runner (runner-smoke/smoke.json) is recorded,
    not gated: a failure there leaves the job shippable, and the release notes give its exact error."""
    from rockbuild.publish.jobs import load_job

    out = tmp_path / "out"
    job_dir = make_job(out, "windows-gfx1151")
    (job_dir / "runner-smoke").mkdir()
    (job_dir / "runner-smoke" / "smoke.json").write_text(
        json.dumps(
            {"ok": False, "failures": ["cli: exit code -1073741515 (0xC0000135: a DLL was not found)"], "runs": {}}
        )
    )
    job = load_job(job_dir)
    assert job.ok and job.smoke is None
    assert job.smoke_summary() == (
        "not gated: on the CI runner (informational) it failed: cli: exit code "
        "-1073741515 (0xC0000135: a DLL was not found)"
    )
    report = publish(options(gh, [make_job(out, "linux-gfx1151", smoke=smoke_ok()), job_dir], tmp_path))
    assert report.state == "published" and "llama-b1000-windows-rocm-gfx1151-x64.zip" in {
        a.name for a in gh.state.release_by_tag("b1000").assets
    }
    assert "0xC0000135: a DLL was not found" in gh.state.release_by_tag("b1000").body
    (job_dir / "runner-smoke" / "smoke.json").write_text(json.dumps({"ok": True, "runs": {}}))
    assert load_job(job_dir).smoke_summary() == "passed on the CI runner (informational)"


def test_jobs_from_different_llama_commits_are_refused(gh, tmp_path):
    out = tmp_path / "out"
    a = make_job(out, "linux-gfx1151")
    b = make_job(out, "linux-gfx1100", commit="f" * 40)
    with pytest.raises(PublishError, match="different llama.cpp commits"):
        publish(options(gh, [a, b], tmp_path))
    assert gh.writes == []


def test_glibc_floor_refusal_names_the_file(gh, tmp_path):
    out = tmp_path / "out"
    job = make_job(out, "linux-gfx1151")
    compile_needing_glibc_236(job / "bundle" / "llama-floor")
    with pytest.raises(
        PublishError,
        match=r"required job linux-gfx1151 failed at glibc-floor: llama-floor needs "
        r"GLIBC_2\.36, above the floor GLIBC_2\.35",
    ):
        publish(options(gh, [job], tmp_path))
    assert gh.writes == []
    # with a floor that allows it, the manifest records the floor and the file
    report = publish(options(gh, [job], tmp_path), config(glibc_floor={"GLIBC": "2.36"}))
    manifest = json.loads((report.out_dir / "manifest.json").read_text())
    assert manifest["jobs"][0]["glibc_floor"]["GLIBC"] == {"version": "2.36", "file": "llama-floor"}


def test_glibc_floor_of_an_optional_job_leaves_it_out(gh, tmp_path):
    out = tmp_path / "out"
    ok = make_job(out, "linux-gfx1151")
    optional = make_job(out, "linux-gfx1153", targets=("gfx1153",), required=False)
    compile_needing_glibc_236(optional / "bundle" / "llama-floor")
    report = publish(options(gh, [ok, optional], tmp_path))
    assert [j.id for j in report.failed] == ["linux-gfx1153"]
    assert report.failed[0].failed_step == "glibc-floor"


def test_dry_run_writes_files_but_never_the_api(gh, night, tmp_path):
    summary = tmp_path / "summary.md"
    report = publish(options(gh, night, tmp_path, dry_run=True, step_summary=summary))
    assert report.state == "dry-run" and gh.writes == []
    assert {n for n, a in report.actions if a == "would upload"} == EXPECTED
    assert (report.out_dir / "release-notes.md").read_text().startswith("**Build Number**: b1000")
    assert "## rockbuild publish: b1000 (dry run)" in summary.read_text()


def test_dry_run_without_a_repository(tmp_path, night, monkeypatch):
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    report = publish(PublishOptions(context=context(), job_dirs=tuple(night), dry_run=True, token=""))
    assert report.tag == "b1000" and report.out_dir == night[0].parent / "release" / "b1000"


def test_draft_flag_then_publish(gh, night, tmp_path):
    old = gh.state.add_release("b1100", body="older")
    report = publish(options(gh, night, tmp_path, draft=True))
    assert report.state == "draft" and gh.state.latest().id == old.id
    before = len(gh.writes)
    report = publish(options(gh, night, tmp_path))
    assert report.state == "published" and report.tag == "b1101"
    assert gh.writes[before:] == [("PATCH", f"/api/v3/repos/{gh.full_name}/releases/{gh.state.latest().id}")]


def test_draft_with_a_wrong_asset_and_a_foreign_one(gh, night, tmp_path):
    report = publish(options(gh, night, tmp_path, draft=True))
    rel = gh.state.release_by_tag(report.tag)
    wrong = next(a for a in rel.assets if a.name.endswith("windows-rocm-gfx1151-x64.zip"))
    wrong.data = b"x" * len(wrong.data)  # same size, other bytes
    from support.github import Asset

    rel.assets.append(Asset(999, "notes-by-hand.txt", "", "text/plain", b"hi"))
    rel.assets.append(Asset(998, f"llama-{report.tag}-ubuntu-rocm-gfx9999-x64.zip", "", "application/zip", b"old"))
    report = publish(options(gh, night, tmp_path))
    actions = dict(report.actions)
    assert actions[wrong.name] == "replaced"
    names = {a.name for a in gh.state.release_by_tag(report.tag).assets}
    assert "notes-by-hand.txt" in names  # not ours: left alone
    assert f"llama-{report.tag}-ubuntu-rocm-gfx9999-x64.zip" not in names  # ours but stale: removed from the draft
    assert any("notes-by-hand.txt" in w and "not made by rockbuild" in w for w in report.warnings)


def test_keep_prunes_only_old_rockbuild_releases(gh, night, tmp_path):
    from rockbuild.publish.notes import marker

    mark = marker({"fingerprint": "0000", "tag": "x"})
    for tag in ("b1290", "b1291", "b1292", "b1293"):
        gh.state.add_release(tag, body=f"nightly\n{mark}")
    gh.state.add_release("v1.0-manual", body="made by hand")
    report = publish(options(gh, night, tmp_path, keep=2))
    assert report.tag == "b1294"
    assert sorted(report.pruned) == ["b1290", "b1291"]  # b1292 is protected (publish.yaml), b1293 is kept
    left = {r.tag_name for r in gh.state.releases.values()}
    assert left == {"b1292", "b1293", "b1294", "v1.0-manual"}
    assert {"b1290", "b1291"} <= set(gh.state.tags)  # tags stay: the sequence never goes back


def test_step_summary_and_per_job_rocm(gh, night, tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    publish(options(gh, night, tmp_path, step_summary=summary))
    text = summary.read_text()
    assert text.startswith("earlier step\n## rockbuild publish: b1000 (published)")
    assert "| linux-gfx110X | yes | shipped | gfx1100, gfx1101, gfx1102, gfx1103 | 7.2.0a20261127 (2026-11-27)" in text
    assert "| linux-gfx1151 | yes | shipped | gfx1151 | 7.2.0a20261128 (2026-11-28)" in text


def test_llama_aligned_tags(gh, night, tmp_path):
    report = publish(options(gh, night, tmp_path, scheme="llama"))
    assert report.tag == "b11312-rocm7.2.0a20261128"  # the newest of the jobs' ROCm versions
    assert any("different ROCm versions" in w for w in report.warnings)
    assert "llama-b11312-rocm7.2.0a20261128-ubuntu-rocm-gfx1151-x64.zip" in {
        a.name for a in gh.state.release_by_tag(report.tag).assets
    }


def test_the_api_refusing_the_token_is_one_line_without_the_token(gh, night, tmp_path):
    bad = PublishOptions(
        context=context(),
        job_dirs=tuple(night),
        repo=gh.full_name,
        api_url=gh.api_url,
        token="wrong-" + TOKEN,
        throttle=False,
        out=tmp_path / "release",
    )
    with pytest.raises(PublishError) as err:
        publish(bad)
    assert "HTTP 401" in err.value.message and TOKEN not in err.value.message
    assert gh.state.releases == {}


def test_archives_are_reproducible(tmp_path):
    from rockbuild.publish.archives import collect_entries, write_tar_gz, write_zip

    job = make_job(tmp_path / "out", "linux-gfx1151")
    entries, _ = collect_entries(job / "bundle")
    a = write_zip(entries, tmp_path / "a.zip", mtime=1_700_000_000)
    b = write_zip(entries, tmp_path / "b.zip", mtime=1_700_000_000)
    assert a.read_bytes() == b.read_bytes()
    c = write_tar_gz(entries, tmp_path / "c.tar.gz", mtime=1_700_000_000)
    d = write_tar_gz(entries, tmp_path / "d.tar.gz", mtime=1_700_000_000)
    assert c.read_bytes() == d.read_bytes()
    with zipfile.ZipFile(a) as zf:
        assert zf.namelist()[0] == "bundle.json" and "llama-server" in zf.namelist()


@pytest.mark.parametrize(
    "names,expected",
    [
        ([], "b1000"),
        (["b1294", "b1000"], "b1295"),
        (["b9999"], "b10000"),
        (["b10000", "b9999"], "b10001"),
        (["b1000-rocm7.2", "v2", "b12a", "latest"], "b1000"),
        (["b0042"], "b0043"),
    ],
)
def test_sequential_tags(names, expected):
    from rockbuild.publish.tags import next_sequential_tag

    assert next_sequential_tag(names) == expected


def test_tag_sequence_uses_tags_and_releases(gh, night, tmp_path):
    gh.state.add_release("b1294")
    gh.state.add_tag("b1300")  # its release was deleted; the tag survives
    gh.state.add_release("b1301", draft=True, body="someone's draft")
    assert publish(options(gh, night, tmp_path, draft=True)).tag == "b1302"


def test_tag_after_b9999(gh, night, tmp_path):
    gh.state.add_release("b9999")
    assert publish(options(gh, night, tmp_path)).tag == "b10000"
    assert gh.state.latest().tag_name == "b10000"


# --- the Vulkan flavour -------------------------------------------------------------------------------------------


def _vulkan_job(out, job_id):
    job = make_job(out, job_id, targets=(), smoke=smoke_ok("gpu", 1968.0, 157.0))
    data = json.loads((job / "build.json").read_text())
    data["job"].update(backend="vulkan", family="", group="")
    data["rocm"] = None
    data["cmake_definitions"] = {"GGML_VULKAN": "ON"}
    (job / "build.json").write_text(json.dumps(data))
    hip = "ggml-hip.dll" if job_id.startswith("windows") else "libggml-hip.so"
    (job / "bundle" / hip).rename(job / "bundle" / hip.replace("hip", "vulkan"))
    return job


def test_vulkan_asset_name_is_what_install_looks_for():
    from rockbuild.install import asset_name_pattern
    from rockbuild.publish.jobs import BuiltJob
    from rockbuild.publish.release import asset_base

    cfg = config()
    for os_name, word in (("linux", "ubuntu"), ("windows", "windows")):
        vulkan = BuiltJob(
            dir=None,
            id=f"{os_name}-vulkan",
            os=os_name,
            name="vulkan",
            targets=(),
            required=False,
            status="ok",
            backend="vulkan",
        )
        assert asset_base(cfg, "b1234", vulkan) == f"llama-b1234-{word}-vulkan-x64"
        pattern = asset_name_pattern(cfg.asset_name, tag="b1234", os_word=word, backend="vulkan")
        assert pattern.fullmatch(asset_base(cfg, "b1234", vulkan) + ".zip")
        rocm = BuiltJob(
            dir=None,
            id=f"{os_name}-gfx1151",
            os=os_name,
            name="gfx1151",
            targets=("gfx1151",),
            required=True,
            status="ok",
        )
        assert asset_base(cfg, "b1234", rocm) == f"llama-b1234-{word}-rocm-gfx1151-x64"
        assert not pattern.fullmatch(asset_base(cfg, "b1234", rocm) + ".zip")


def test_a_night_with_both_flavours_ships_and_lists_both(gh, night, tmp_path):
    out = tmp_path / "out"
    jobs = [*night, _vulkan_job(out, "linux-vulkan"), _vulkan_job(out, "windows-vulkan")]
    report = publish(options(gh, jobs, tmp_path))
    rel = gh.state.release_by_tag(report.tag)
    vulkan_assets = {
        "llama-b1000-ubuntu-vulkan-x64.zip",
        "llama-b1000-ubuntu-vulkan-x64.tar.gz",
        "llama-b1000-windows-vulkan-x64.zip",
        "llama-b1000-ubuntu-vulkan-x64.cdx.json",
        "llama-b1000-windows-vulkan-x64.cdx.json",
        "llama-b1000-ubuntu-vulkan-x64.deb",
    }
    assert {a.name for a in rel.assets} == EXPECTED | vulkan_assets
    manifest = json.loads(next(a for a in rel.assets if a.name == "manifest.json").data)
    by_id = {j["id"]: j for j in manifest["jobs"]}
    assert by_id["linux-vulkan"]["backend"] == "vulkan" and by_id["linux-gfx1151"]["backend"] == "rocm"
    assert {a["name"] for a in by_id["linux-vulkan"]["assets"]} == vulkan_assets - {
        "llama-b1000-windows-vulkan-x64.zip",
        "llama-b1000-windows-vulkan-x64.cdx.json",
    }
    body = rel.body
    assert "**Flavour(s)**: ROCm, Vulkan" in body and "**GPU Target(s)**: gfx1151, gfx110X\n" in body
    assert (
        "| `llama-b1000-ubuntu-vulkan-x64.zip` | ubuntu | SPIR-V (any Vulkan GPU) | - (no ROCm) | passed (Vulkan) |"
        in body
    )
    # what a Vulkan asset needs on the host, and what its smoke verdict means
    assert "the machine needs the Vulkan loader (`libvulkan1`" in body and "Mesa RADV or AMD's" in body
    assert '"Vulkan" that weights and KV cache were on a Vulkan device' in body


def test_an_api_outage_and_an_unreachable_api_have_their_own_hints(httpserver, night, tmp_path):
    """A 502 is not the user's request to fix, and a refused connection is the network: neither hint says
    'check --repo and the token' (requests' exceptions are OSErrors, so that branch used to catch them all)."""
    import socket

    httpserver.expect_request("/repos/o/r").respond_with_data("bad gateway", status=502)
    with pytest.raises(PublishError) as outage:
        publish(
            PublishOptions(
                context=context(),
                job_dirs=tuple(night),
                repo="o/r",
                api_url=httpserver.url_for("/").rstrip("/"),
                token=TOKEN,
                throttle=False,
                out=tmp_path / "staging-1",
            )
        )
    assert "HTTP 502" in outage.value.message and TOKEN not in outage.value.message
    assert (
        outage.value.hint is not None and "try again later" in outage.value.hint and "--repo" not in outage.value.hint
    )

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PublishError) as down:
        publish(
            PublishOptions(
                context=context(),
                job_dirs=tuple(night),
                repo="o/r",
                api_url=f"http://127.0.0.1:{port}",
                token=TOKEN,
                throttle=False,
                out=tmp_path / "staging-2",
            )
        )
    assert down.value.message.endswith("failed: connection refused")
    assert down.value.hint is not None and "could not be reached" in down.value.hint


def test_every_asset_has_a_cyclonedx_sbom_naming_each_file_and_its_origin(gh, night, tmp_path):
    """Issue 21: llama.cpp (commit, build number), the TheRock tarball (name, sha256, version) and every bundled
    file with its sha256 under the package it came from; uploaded beside the archives and listed in SHA256SUMS."""
    job = night[0]  # linux-gfx1151: make_job's bundle, plus what bundle.json says about where files came from
    meta = json.loads((job / "bundle" / "bundle.json").read_text())
    meta["files"] = [
        {"path": "llama-server", "kind": "exe", "size": 1, "source": str(job / "build" / "bin" / "llama-server")},
        {"path": "libggml-hip.so", "kind": "lib", "size": 1, "source": "/opt/therock/lib/libggml-hip.so"},
    ]
    meta["kernels"] = {"folders": [{"dest": "rocblas/library", "source": "/opt/therock/lib/rocblas/library"}]}
    (job / "bundle" / "bundle.json").write_text(json.dumps(meta))
    report = publish(options(gh, night, tmp_path))
    rel = gh.state.release_by_tag(report.tag)
    data = {a.name: a.data for a in rel.assets}
    name = "llama-b1000-ubuntu-rocm-gfx1151-x64.cdx.json"
    sums = dict(reversed(line.split("  ", 1)) for line in data["SHA256SUMS"].decode().splitlines())
    assert sums[name] == hashlib.sha256(data[name]).hexdigest()
    sbom = json.loads(data[name])
    assert sbom["bomFormat"] == "CycloneDX" and sbom["specVersion"] == "1.6"
    assert sbom["metadata"]["component"]["name"] == "llama-b1000-ubuntu-rocm-gfx1151-x64"
    by_name = {c["name"]: c for c in sbom["components"]}
    llama = by_name["llama.cpp"]
    assert llama["version"] == "b11312" and llama["purl"] == f"pkg:github/ggml-org/llama.cpp@{COMMIT}"
    rocm = by_name["therock-dist-linux-gfx1151-7.2.0a20261128"]
    assert rocm["version"] == "7.2.0a20261128" and rocm["hashes"] == [{"alg": "SHA-256", "content": "ab" * 32}]
    files = {c["name"]: (owner, c) for owner in sbom["components"] for c in owner.get("components", [])}
    files.update({c["name"]: ({"name": None}, c) for c in sbom["components"] if c["type"] == "file"})
    bundle = job / "bundle"
    on_disk = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    assert set(files) == on_disk  # every file of the archive, none invented
    for rel_name, (_owner, component) in files.items():
        assert component["hashes"][0]["content"] == hashlib.sha256((bundle / rel_name).read_bytes()).hexdigest()
    assert files["llama-server"][0]["name"] == "llama.cpp"
    assert files["libggml-hip.so"][0]["name"] == rocm["name"]
    assert files["rocblas/library/TensileLibrary_lazy_gfx1151.dat"][0]["name"] == rocm["name"]
    assert files["bundle.json"][0]["name"] == "rockbuild"
    unknown = files["llama-cli"]  # bundle.json does not say where it came from: listed, with no package
    assert unknown[0]["name"] is None and unknown[1]["properties"] == [{"name": "rockbuild:from", "value": "unknown"}]
    # reproducible like the archives: the same bundle gives the same SBOM
    from rockbuild.publish.jobs import load_job
    from rockbuild.publish.sbom import make_sbom

    timestamp = int(datetime.datetime.fromisoformat(sbom["metadata"]["timestamp"]).timestamp())
    again = make_sbom(load_job(job), "llama-b1000-ubuntu-rocm-gfx1151-x64", "b1000", timestamp=timestamp)
    assert again.encode() == data[name]


def _with_gpu_smoke(job, *, required: bool, ok: bool | None, tg: float = 95.5):
    """The matrix's gpu_smoke on the job, and (ok not None) the GPU leg's gpu-smoke.json beside it."""
    data = json.loads((job / "build.json").read_text())
    data["job"]["gpu_smoke"] = {"runner": ["self-hosted", "gfx1151"], "required": required}
    (job / "build.json").write_text(json.dumps(data))
    if ok is not None:
        report = {
            **smoke_ok("gpu", 4100.0, tg),
            "ok": ok,
            "failures": [] if ok else ["gpu: absent"],
            "host": {"kernel": "6.18.0", "driver": "amdgpu 6.16.4"},
        }
        report["bench"] = [
            {
                "test": "pp512",
                "tokens_per_second": 4100.0,
                "stddev": 12.0,
                "gpu_info": "AMD Radeon 8060S",
                "backends": "ROCm",
            },
            {
                "test": "tg128",
                "tokens_per_second": tg,
                "stddev": 0.4,
                "gpu_info": "AMD Radeon 8060S",
                "backends": "ROCm",
            },
        ]
        (job / "gpu-smoke.json").write_text(json.dumps(report))
    return job


def test_gpu_smoke_figures_reach_the_manifest_and_notes_and_a_required_one_gates(gh, night, tmp_path):
    """Issue 19: the GPU leg's figures (GPU, driver, pp512/tg128) go into manifest.json and the notes; assets without
    them are named; a required GPU smoke that did not pass keeps its job out (here: blocks the release)."""
    _with_gpu_smoke(night[0], required=True, ok=True)
    report = publish(options(gh, night, tmp_path))
    rel = gh.state.release_by_tag(report.tag)
    manifest = json.loads(next(a.data for a in rel.assets if a.name == "manifest.json"))
    jobs = {j["id"]: j for j in manifest["jobs"]}
    gpu = jobs["linux-gfx1151"]["gpu_smoke"]
    assert gpu["ok"] and gpu["gpu"] == "AMD Radeon 8060S" and gpu["driver"] == "amdgpu 6.16.4"
    assert gpu["runner"] == ["self-hosted", "gfx1151"]
    assert [(b["test"], b["tokens_per_second"]) for b in gpu["bench"]] == [("pp512", 4100.0), ("tg128", 95.5)]
    assert jobs["linux-gfx110X"]["gpu_smoke"] is None
    assert manifest["not_gpu_tested"] == ["linux-gfx110X", "windows-gfx1151"]
    assert (
        "`llama-b1000-ubuntu-rocm-gfx1151-x64.zip`: AMD Radeon 8060S (amdgpu 6.16.4): pp512 4100.0 t/s, "
        "tg128 95.5 t/s" in rel.body
    )
    assert (
        "Not tested on a GPU in this release: `llama-b1000-ubuntu-rocm-gfx110X-x64.zip`, "
        "`llama-b1000-windows-rocm-gfx1151-x64.zip`." in rel.body
    )


@pytest.mark.parametrize("ok", [False, None])
def test_a_required_gpu_smoke_that_failed_or_never_ran_blocks_an_optional_one_does_not(gh, night, tmp_path, ok):
    _with_gpu_smoke(night[0], required=True, ok=ok)
    with pytest.raises(PublishError, match="linux-gfx1151"):
        publish(options(gh, night, tmp_path))
    assert not gh.state.releases
    _with_gpu_smoke(night[0], required=False, ok=ok)
    report = publish(options(gh, night, tmp_path / "again"))
    assert report.state == "published" and "llama-b1000-ubuntu-rocm-gfx1151-x64.zip" in {a.name for a in report.assets}


def test_the_notes_say_what_ran_again_on_the_last_good_rocm(gh, night, tmp_path):
    """Issue 28, item 5: a fallback asset was said to be "built and tested again" also when no smoke test ran."""
    from rockbuild.core.records import FallbackRecord, TarballRef

    for job in (night[0], night[2]):  # linux-gfx1151 ran its smoke test; windows-gfx1151 has none (its CI leg)
        FallbackRecord(
            newest=TarballRef(
                name="therock-dist-x-gfx1151-7.2.0a20261201.tar.gz", version="7.2.0a20261201", date="2026-12-01"
            ),
            failed_stage="build",
            reason="compile failed (exit code 1)",
            last_good=TarballRef(version="7.2.0a20261128", date="2026-11-28", release="b0999"),
            result="ok",
        ).write(job / "fallback.json")
    report = publish(options(gh, night, tmp_path, dry_run=True))
    notes = (report.out_dir / "release-notes.md").read_text()
    assert "(`llama-b1000-ubuntu-rocm-gfx1151-x64.zip`, built, bundled and smoke-tested):" in notes, notes
    assert "(`llama-b1000-windows-rocm-gfx1151-x64.zip`, built and bundled (no smoke test ran)):" in notes
    assert "built and tested again" not in notes


def test_an_upload_github_stored_but_answered_5xx_is_taken(gh, night, tmp_path):
    """Issue 28, item 6: GitHub stores the upload and answers 502; the retry gets 422 already_exists. The stored
    asset is ours (name, size, digest): the run takes it and publishes, in one run."""
    gh.state.store_then_fail_upload_number = 2
    report = publish(options(gh, night, tmp_path))
    assert report.state == "published", report.message
    (rel,) = gh.state.releases.values()
    names = [a.name for a in rel.assets]
    assert sorted(names) == sorted(EXPECTED) and len(names) == len(set(names))


def test_a_release_github_created_but_answered_5xx_is_found_by_its_tag(gh, night, tmp_path):
    """Issue 28, item 7: POST /releases created the draft and answered 502 (twice: PyGithub's retry posted again).
    The draft is found by its tag, the duplicate deleted, and the night published: one release, no second try."""
    gh.state.create_then_fail_releases = 2
    report = publish(options(gh, night, tmp_path))
    assert report.state == "published", report.message
    (rel,) = gh.state.releases.values()
    assert rel.tag_name == "b1000" and not rel.draft and sorted(a.name for a in rel.assets) == sorted(EXPECTED)


def test_the_dry_run_makes_the_files_the_release_then_uploads(gh, night, tmp_path):
    """Issue 28, item 9: the workflow attests the dry run's files before the release exists, so the published
    assets must be those very bytes (reproducible archives, same tag, same folder)."""
    dry = publish(options(gh, night, tmp_path, dry_run=True))
    made = {p.name: p.read_bytes() for p in dry.out_dir.iterdir() if p.is_file() and p.name != "release-notes.md"}
    report = publish(options(gh, night, tmp_path))
    assert report.state == "published" and report.tag == dry.tag and report.out_dir == dry.out_dir
    (rel,) = gh.state.releases.values()
    uploaded = {a.name: a.data for a in rel.assets}
    assert set(uploaded) == set(EXPECTED) and set(uploaded) <= set(made)
    assert all(uploaded[name] == made[name] for name in uploaded), [n for n in uploaded if uploaded[n] != made[n]]


def test_the_manifest_and_the_notes_say_which_assets_have_the_web_ui(gh, night, tmp_path):
    """Issue 27, item 1: an asset without llama-server's chat page says so, with the reason; never silently."""
    for job, web_ui in (
        (
            night[0],
            {
                "status": "built",
                "sha256": "cd" * 32,
                "files": 70,
                "bytes": 9947831,
                "build_number": "1000",
                "dist": "/runner/cache/webui/dist-x",
            },
        ),
        (night[1], {"status": "none", "reason": "npm is not installed (not on PATH)"}),
        (night[2], None),
    ):
        build = json.loads((job / "build.json").read_text())
        build.pop("web_ui")
        (job / "build.json").write_text(json.dumps({**build, **({"web_ui": web_ui} if web_ui else {})}))
    smoke = json.loads((night[0] / "smoke.json").read_text())
    smoke["runs"] = {"server": {"name": "server", "ok": True, "web_ui": {"result": "passed", "detail": "HTTP 200"}}}
    (night[0] / "smoke.json").write_text(json.dumps(smoke))
    # two assets without the page: not whole, so only the emergency override publishes it (test_publish_whole.py)
    report = publish(options(gh, night, tmp_path, dry_run=True, allow_partial="the UI build is broken upstream"))
    manifest = json.loads((report.out_dir / "manifest.json").read_text())
    jobs = {j["id"]: j for j in manifest["jobs"]}
    assert jobs["linux-gfx1151"]["web_ui"] == {
        "status": "built",
        "reason": None,
        "sha256": "cd" * 32,
        "files": 70,
        "bytes": 9947831,
        "build_number": "1000",
    }  # no runner path
    assert jobs["linux-gfx110X"]["web_ui"]["status"] == "none"
    assert jobs["windows-gfx1151"]["web_ui"] is None  # its build.json does not say
    assert jobs["linux-gfx1151"]["smoke"]["web_ui"] == "passed: HTTP 200"
    notes = (report.out_dir / "release-notes.md").read_text()
    assert "serves llama.cpp's chat page at http://127.0.0.1:8080/ (1 of 3 assets)" in notes
    assert (
        "**No web UI** (llama-server answers its API only, `/` is a 404) in: "
        "`llama-b1000-ubuntu-rocm-gfx110X-x64.zip` (npm is not installed (not on PATH))."
    ) in notes


def _with_patches(job, patches: list[dict], *, digest: str = "cb23002fdad53ebd", disabled: bool = False):
    build = json.loads((job / "build.json").read_text())
    build["patches"] = {
        "digest": digest,
        "disabled": disabled,
        "tree": "/runner/cache/llama.cpp-patched/x",
        "pristine": "/runner/src/llama.cpp",
        "patches": patches,
    }
    (job / "build.json").write_text(json.dumps(build))
    return job


AMX = {
    "id": "amx-tile-config",
    "url": "https://github.com/ggml-org/llama.cpp/pull/26954",
    "why": "the sapphirerapids variant dies of SIGILL when GCC 12 compiles it",
    "status": "applied",
    "note": "",
    "files": ["ggml/src/ggml-cpu/amx/mmq.cpp"],
    "sha256": "ef" * 32,
}
WIN = {
    "id": "win-only",
    "url": "https://github.com/ggml-org/llama.cpp/issues/5",
    "why": "a Windows fix",
    "status": "applied",
    "note": "",
    "files": ["ggml/src/x.cpp"],
    "sha256": "12" * 32,
}


def test_carried_patches_reach_the_manifest_the_notes_and_the_sbom(gh, night, tmp_path):
    """Issue 38: every applied patch is named with its link in manifest.json, the release notes and the SBOM
    (CycloneDX pedigree.patches); a patch applied in some jobs only says which; a --no-patches asset is named."""
    skipped = {**WIN, "status": "not for this tree", "note": "for windows only, not linux"}
    _with_patches(night[0], [AMX, skipped])
    _with_patches(night[1], [], digest="none", disabled=True)
    _with_patches(night[2], [AMX, WIN])
    report = publish(options(gh, night, tmp_path))
    rel = gh.state.release_by_tag(report.tag)
    data = {a.name: a.data for a in rel.assets}
    manifest = json.loads(data["manifest.json"])
    jobs = {j["id"]: j for j in manifest["jobs"]}
    assert jobs["linux-gfx1151"]["patches"] == {
        "digest": "cb23002fdad53ebd",
        "disabled": False,
        "patches": [AMX, skipped],
    }  # no runner paths
    assert jobs["linux-gfx110X"]["patches"]["disabled"] is True
    assert manifest["patches"]["digest"] == "mixed"
    assert [p["id"] for p in manifest["patches"]["patches"]] == ["amx-tile-config", "win-only"]
    notes = rel.body
    assert "### Carried patches" in notes
    assert (
        "- `amx-tile-config` (https://github.com/ggml-org/llama.cpp/pull/26954), in `linux-gfx1151`, "
        "`windows-gfx1151` only: the sapphirerapids variant dies of SIGILL when GCC 12 compiles it"
    ) in notes
    assert "- `win-only` (https://github.com/ggml-org/llama.cpp/issues/5), in `windows-gfx1151` only" in notes
    assert (
        "Built from the pristine llama.cpp tree (`--no-patches`, without the carried fixes): "
        "`llama-b1000-ubuntu-rocm-gfx110X-x64.zip`."
    ) in notes
    sbom = json.loads(data["llama-b1000-ubuntu-rocm-gfx1151-x64.cdx.json"])
    llama = next(c for c in sbom["components"] if c["name"] == "llama.cpp")
    assert {"name": "rockbuild:patches", "value": "cb23002fdad53ebd"} in llama["properties"]
    pedigree = llama["pedigree"]
    assert pedigree["patches"] == [
        {
            "type": "unofficial",
            "resolves": [
                {
                    "type": "defect",
                    "id": "amx-tile-config",
                    "name": "amx-tile-config",
                    "description": "the sapphirerapids variant dies of SIGILL when GCC 12 compiles it",
                    "references": ["https://github.com/ggml-org/llama.cpp/pull/26954"],
                }
            ],
        }
    ]  # the skipped one is not carried
    assert pedigree["notes"].startswith("carried by rockbuild (patches/patches.yaml): amx-tile-config (sha256 efef")
    plain = json.loads(data["llama-b1000-ubuntu-rocm-gfx110X-x64.cdx.json"])
    assert "pedigree" not in next(c for c in plain["components"] if c["name"] == "llama.cpp")


def test_a_changed_patch_series_changes_the_release_fingerprint(tmp_path):
    from rockbuild.publish.jobs import load_job
    from rockbuild.publish.manifest import fingerprint

    job = make_job(tmp_path / "out", "linux-gfx1151", smoke=smoke_ok())
    before = fingerprint([load_job(job)])  # a build.json from before the patches: the same hash as ever
    _with_patches(job, [AMX])
    carried = fingerprint([load_job(job)])
    _with_patches(job, [AMX], digest="0000000000000000")
    assert len({before, carried, fingerprint([load_job(job)])}) == 3


def test_the_cpu_variant_runs_of_each_smoke_reach_the_manifest_and_the_notes(gh, night, tmp_path):
    """Issue 38: each variant's result and pp512 from the runner's smoke and the GPU leg's (the AMX host)."""

    def step(picked, rows):
        return {
            "result": "failed" if any(r[1] == "failed" for r in rows) else "passed",
            "detail": "",
            "picked": picked,
            "variants": [
                {
                    "variant": v,
                    "runnable": r != "not runnable here",
                    "result": r,
                    "pp512_tps": tps,
                    "tg_tps": None,
                    "known_answers": "passed" if r == "passed" else "not run",
                    "seconds": 1.0,
                    "failure": None,
                }
                for v, r, tps in rows
            ],
        }

    smoke = json.loads((night[0] / "smoke.json").read_text())
    smoke["cpu_variants"] = step(
        "zen4", [("x64", "passed", 40.0), ("zen4", "passed", 201.4), ("sapphirerapids", "not runnable here", None)]
    )
    (night[0] / "smoke.json").write_text(json.dumps(smoke))
    _with_gpu_smoke(night[0], required=False, ok=True)
    gpu = json.loads((night[0] / "gpu-smoke.json").read_text())
    gpu["cpu_variants"] = step("sapphirerapids", [("zen4", "passed", 899.0), ("sapphirerapids", "passed", 1252.0)])
    (night[0] / "gpu-smoke.json").write_text(json.dumps(gpu))
    report = publish(options(gh, night, tmp_path, dry_run=True))
    manifest = json.loads((report.out_dir / "manifest.json").read_text())
    runs = {j["id"]: j["smoke"]["cpu_variants"] for j in manifest["jobs"] if j["smoke"]}
    assert runs["linux-gfx1151"][0] == {
        "where": "smoke",
        "result": "passed",
        "picked": "zen4",
        "passed": ["x64", "zen4"],
        "failed": [],
        "not_runnable": ["sapphirerapids"],
        "pp512": {"x64": 40.0, "zen4": 201.4},
    }
    assert runs["linux-gfx1151"][1]["where"] == "gpu-smoke" and runs["linux-gfx110X"] == []
    notes = (report.out_dir / "release-notes.md").read_text()
    assert (
        "- `llama-b1000-ubuntu-rocm-gfx1151-x64.zip`: 2 of 3 CPU variants passed alone on the smoke's CPU, where "
        "ggml picks zen4 (pp512 t/s: zen4 201, x64 40); not runnable there: sapphirerapids"
    ) in notes
    assert (
        "- `llama-b1000-ubuntu-rocm-gfx1151-x64.zip`: 2 of 2 CPU variants passed alone on the GPU leg's host, "
        "where ggml picks sapphirerapids (pp512 t/s: sapphirerapids 1252, zen4 899)"
    ) in notes


def test_the_op_test_counts_reach_the_manifest_and_the_notes(gh, night, tmp_path):
    """Issue 39 item 2: test-backend-ops' counts and the CPU fallbacks: the GPU leg's (the full test on a real GPU)
    in the notes' line, each smoke's in its manifest entry; a smoke without a GPU says not checked, never passed."""

    def ops(result, passed, failed, ns, device="Vulkan0", mode="full", detail="", fallback=None):
        summary = {
            "result": result,
            "detail": detail,
            "device": device,
            "mode": mode,
            "passed": passed,
            "failed": failed,
            "not_supported": ns,
            "cases": passed + failed + ns,
            "seconds": 250.0,
            "failed_cases": [],
            "fallback_ops": fallback or {},
        }
        return {"result": result, "detail": detail, "summary": summary}

    smoke = json.loads((night[0] / "smoke.json").read_text())
    smoke["ops"] = ops("not checked", 0, 0, 0, None, None, detail="no GPU device to test (auto: no ROCm device)")
    (night[0] / "smoke.json").write_text(json.dumps(smoke))
    _with_gpu_smoke(night[0], required=False, ok=True)
    gpu = json.loads((night[0] / "gpu-smoke.json").read_text())
    gpu["ops"] = ops("passed", 19011, 0, 1755, "ROCm0", fallback={"OUT_PROD": 1344, "CONV_2D": 1178})
    (night[0] / "gpu-smoke.json").write_text(json.dumps(gpu))
    report = publish(options(gh, night, tmp_path, dry_run=True))
    manifest = json.loads((report.out_dir / "manifest.json").read_text())
    job = next(j for j in manifest["jobs"] if j["id"] == "linux-gfx1151")
    assert job["smoke"]["ops"]["result"] == "not checked"
    assert (job["gpu_smoke"]["ops"]["passed"], job["gpu_smoke"]["ops"]["failed"]) == (19011, 0)
    notes = (report.out_dir / "release-notes.md").read_text()
    assert (
        "- `llama-b1000-ubuntu-rocm-gfx1151-x64.zip`: 19011 passed, 0 failed, 1755 not supported on ROCm0 (full "
        "test mode, the GPU leg); ops that fall back to the CPU on this backend: OUT_PROD (1344 cases), CONV_2D "
        "(1178 cases)"
    ) in notes
