"""Carried fixes (rockbuild.llamacpp.patches, patches/patches.yaml): a series of real patch files applied by git apply to
a mirror of a stand-in llama.cpp tree, never to the tree itself; the build compiles the mirror.

The stand-in (tests/support/llama.py) ships with a bug here: ggml_base() returns 40, so its programs exit 1. The
series carries three fixes: ``fix-answer`` (applies: the programs then exit 0), ``already-in`` (the tree already has
its change: it reverse-applies) and ``merged`` (upstream has it since b1000, by the series' word). A fourth,
``stale``, no longer applies: the build fails in one line naming the patch and the file.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.files import write
from support.git import git
from support.llama import make_project
from support.options import context, resolve_job
from support.trees import gcc_therock, write_tree

from rockbuild.backends import REGISTRY
from rockbuild.core.data import data_path
from rockbuild.core.errors import ConfigError
from rockbuild.llamacpp.driver import BuildOptions, build_job
from rockbuild.llamacpp.patches import (
    APPLIED,
    NO_PATCHES,
    NOT_FOR_TREE,
    UPSTREAM,
    PatchError,
    apply_patch_series,
    failed_file,
    load_patch_series,
    mirror_tree,
    patch_files,
)

needs_toolchain = pytest.mark.skipif(
    not (shutil.which("cmake") and shutil.which("ninja") and shutil.which("gcc") and shutil.which("g++")),
    reason="needs cmake, ninja, gcc and g++ on the host",
)


def diff(path: str, before: str, after: str) -> str:
    """A unified diff of one file, as git writes it (a/ and b/ prefixes)."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return "".join(lines)


BASE_BUGGY = "int ggml_base(void) { return 40; }\n"
BASE_FIXED = "int ggml_base(void) { return 41; }\n"
MAIN = "int ggml_answer();\nint main() { return ggml_answer() == 42 ? 0 : 1; }\n"
MAIN_WITH_NOTE = (
    "int ggml_answer();\n// the answer is checked by every tool\nint main() { return ggml_answer() == 42 ? 0 : 1; }\n"
)


def stand_in(root: Path) -> Path:
    """The stand-in tree with the bug, and with ``already-in``'s change already made."""
    make_project(root)
    write(root / "ggml" / "ggml-base.c", BASE_BUGGY)
    write(root / "tools" / "main.cpp", MAIN_WITH_NOTE)
    return root


def series(folder: Path, *, stale: bool = False, extra: str = "") -> Path:
    """patches.yaml and its patch files in ``folder``."""
    write(folder / "fix-answer.patch", diff("ggml/ggml-base.c", BASE_BUGGY, BASE_FIXED))
    write(folder / "already-in.patch", diff("tools/main.cpp", MAIN, MAIN_WITH_NOTE))
    write(folder / "merged.patch", diff("tools/main.cpp", MAIN_WITH_NOTE, MAIN_WITH_NOTE + "// merged\n"))
    write(
        folder / "stale.patch",
        diff("ggml/ggml.cpp", "int ggml_answer() { return 0; }\n", "int ggml_answer() { return 42; }\n"),
    )
    stale_entry = (
        """
          - id: stale
            file: stale.patch
            url: https://github.com/ggml-org/llama.cpp/pull/4
            why: a fix whose lines upstream has rewritten since
    """
        if stale
        else ""
    )
    return write(
        folder / "patches.yaml",
        f"""
        patches:
          - id: fix-answer
            file: fix-answer.patch
            url: https://github.com/ggml-org/llama.cpp/pull/1
            why: ggml_base() is off by one, so every tool exits 1
          - id: already-in
            file: already-in.patch
            url: https://github.com/ggml-org/llama.cpp/pull/2
            why: a comment the tree now has
            upstream: {{build: b12000, commit: 0123456789abcdef0123456789abcdef01234567}}
          - id: merged
            file: merged.patch
            url: https://github.com/ggml-org/llama.cpp/pull/3
            why: merged upstream in b1000
            upstream: {{build: b1000}}
          - id: windows-only
            file: merged.patch
            url: https://github.com/ggml-org/llama.cpp/issues/5
            why: a Windows fix
            applies_to: {{os: [windows]}}
        {stale_entry}{extra}
    """,
    )


def outcomes(data: dict) -> dict[str, tuple[str, str]]:
    return {p["id"]: (p["status"], p["note"]) for p in data["patches"]}


# -- the series as data ------------------------------------------------------------------------------------------------


def test_the_shipped_series_parses_and_each_patch_is_a_diff_of_the_ggml_sources():
    shipped = load_patch_series(data_path("patches", "patches.yaml"))
    ids = [p.id for p in shipped.patches]
    assert ids == ["amx-tile-config", "x86-os-state", "vulkan-shaders-depfile", "ops-long-positions"]
    for p in shipped.patches:
        assert p.url.startswith("https://github.com/ggml-org/llama.cpp/") and p.why
        allowed = (
            ("tests/test-backend-ops.cpp",)
            if p.id.startswith("ops-")
            else ("ggml/src/ggml-cpu/", "ggml/src/ggml-vulkan/")
        )
        assert p.files and all(f.startswith(allowed) for f in p.files)
    assert shipped.patches[0].files == ("ggml/src/ggml-cpu/amx/mmq.cpp",)
    assert shipped.patches[2].backends == ("vulkan",)  # a ROCm or CPU job does not carry it
    assert len(shipped.digest) == 16


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("- {id: Bad_Id, file: fix-answer.patch, url: 'https://x/1', why: y}", "patch id 'Bad_Id' must be lower-case"),
        ("- {id: a, file: nowhere.patch, url: 'https://x/1', why: y}", "patch a's file nowhere.patch does not exist"),
        ("- {id: a, file: patches.yaml, url: 'https://x/1', why: y}", "patches.yaml is not a unified diff"),
        ("- {id: a, file: fix-answer.patch, url: 'see PR 1', why: y}", "patch a's url must be a link"),
        ("- {id: a, file: fix-answer.patch, url: 'https://x/1'}", "patch a's reason (why) must be a non-empty string"),
        ("- {id: a, file: fix-answer.patch, url: 'https://x/1', why: y, upstrem: {}}", "unknown key 'upstrem'"),
        (
            "- {id: a, file: fix-answer.patch, url: 'https://x/1', why: y, applies_to: {from: soon}}",
            "from must be a llama.cpp build like b7000, not 'soon'",
        ),
        (
            "- {id: a, file: fix-answer.patch, url: 'https://x/1', why: y, upstream: {contains: x}}",
            "needs both file and contains",
        ),
        (
            "- {id: a, file: fix-answer.patch, url: 'https://x/1', why: y}\n  - {id: a, file: fix-answer.patch, "
            "url: 'https://x/1', why: y}",
            "patch id 'a' is listed twice",
        ),
    ],
)
def test_a_wrong_series_is_a_config_error_naming_file_and_line(tmp_path, entry, message):
    series(tmp_path)
    path = write(tmp_path / "bad.yaml", f"patches:\n  {entry}\n")
    with pytest.raises(ConfigError) as info:
        load_patch_series(path)
    assert message in info.value.message and f"{path}:" in info.value.message


def test_the_digest_changes_with_a_patch_and_is_none_for_no_patches(tmp_path):
    path = series(tmp_path)
    before = load_patch_series(path).digest
    write(tmp_path / "fix-answer.patch", diff("ggml/ggml-base.c", BASE_BUGGY, "int ggml_base(void) { return 41;}\n"))
    assert load_patch_series(path).digest != before
    assert load_patch_series(write(tmp_path / "empty.yaml", "patches: []\n")).digest == NO_PATCHES


def test_patch_files_and_failed_file():
    text = diff("a/b.c", "x\n", "y\n") + "--- a/gone.c\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    assert patch_files(text) == ("a/b.c", "gone.c")
    assert (
        failed_file("error: patch failed: ggml/x.cpp:12\nerror: ggml/x.cpp: patch does not apply", ()) == "ggml/x.cpp"
    )
    assert failed_file("error: tools/y.cpp: No such file or directory", ()) == "tools/y.cpp"
    assert failed_file("something else", ("first.c",)) == "first.c"


# -- applying to a mirror ----------------------------------------------------------------------------------------------


def test_a_series_on_the_stand_in_applied_skipped_and_never_touching_the_tree(tmp_path):
    tree = stand_in(tmp_path / "llama.cpp")
    git("init", "-q", cwd=tree)
    git("add", "-A", cwd=tree)
    git("commit", "-qm", "tree", cwd=tree)
    mirror = tmp_path / "cache" / "llama.cpp-patched" / "linux-cpu"
    patched = apply_patch_series(
        load_patch_series(series(tmp_path / "series")),
        tree,
        mirror,
        build_number=11312,
        tree_label="llama.cpp b11312",
        os_name="linux",
        backend="cpu",
    )
    got = {o.id: (o.status, o.note) for o in patched.patches}
    assert got["fix-answer"] == (APPLIED, "")
    assert got["already-in"] == (
        UPSTREAM,
        "the tree already has this change (the patch reverse-applies); upstream "
        "has it since b12000 (commit 0123456789ab)",
    )
    assert got["merged"] == (UPSTREAM, "upstream has it since b1000; this tree is b11312")
    assert got["windows-only"] == (NOT_FOR_TREE, "for windows only, not linux")
    assert patched.tree == mirror.resolve() and patched.pristine == tree.resolve()
    assert (mirror / "ggml" / "ggml-base.c").read_text() == BASE_FIXED
    assert (tree / "ggml" / "ggml-base.c").read_text() == BASE_BUGGY  # the user's tree is never written
    assert git("status", "--porcelain", cwd=tree) == ""
    assert not (mirror / ".git").exists()
    # every other file is the tree's own (a hard link: no copy of a 180 MB tree per job)
    assert os.path.samefile(mirror / "tools" / "main.cpp", tree / "tools" / "main.cpp")
    assert patched.rewritten == ("ggml/ggml-base.c",)


def test_a_second_run_rewrites_nothing_and_follows_the_tree(tmp_path):
    tree = stand_in(tmp_path / "llama.cpp")
    mirror = tmp_path / "mirror"
    path = series(tmp_path / "series")
    first = apply_patch_series(
        load_patch_series(path), tree, mirror, build_number=11312, tree_label="t", os_name="linux"
    )
    stamp = (mirror / "ggml" / "ggml-base.c").stat().st_mtime_ns
    again = apply_patch_series(
        load_patch_series(path), tree, mirror, build_number=11312, tree_label="t", os_name="linux"
    )
    assert first.rewritten == ("ggml/ggml-base.c",) and again.rewritten == ()
    assert (mirror / "ggml" / "ggml-base.c").stat().st_mtime_ns == stamp  # ninja sees nothing new
    # the tree moves on (a new commit): a new file appears, one disappears, one changes
    write(tree / "ggml" / "new.c", "int x;\n")
    (tree / "tools" / "completion" / "CMakeLists.txt").unlink()
    (tree / "tools" / "main.cpp").unlink()
    write(tree / "tools" / "main.cpp", MAIN_WITH_NOTE + "// next commit\n")
    apply_patch_series(load_patch_series(path), tree, mirror, build_number=11312, tree_label="t", os_name="linux")
    assert (mirror / "ggml" / "new.c").is_file()
    assert not (mirror / "tools" / "completion").exists()
    assert (mirror / "tools" / "main.cpp").read_text().endswith("// next commit\n")


def test_a_file_a_series_no_longer_patches_comes_back_newer_so_ninja_rebuilds_it(tmp_path):
    """A series that drops a patch (a mutant build, then the release's): the pristine file must not come back with
    its old mtime, or ninja keeps the objects compiled from the patched one."""
    tree = stand_in(tmp_path / "llama.cpp")
    mirror = tmp_path / "mirror"
    apply_patch_series(
        load_patch_series(series(tmp_path / "series")),
        tree,
        mirror,
        build_number=11312,
        tree_label="t",
        os_name="linux",
    )
    patched_at = (mirror / "ggml" / "ggml-base.c").stat().st_mtime_ns
    empty = write(
        tmp_path / "none" / "patches.yaml",
        "patches:\n  - {id: other, file: o.patch, url: 'https://x/1', why: another file}\n",
    )
    write(tmp_path / "none" / "o.patch", "--- /dev/null\n+++ b/ggml/other.h\n@@ -0,0 +1 @@\n+#define OTHER 1\n")
    apply_patch_series(load_patch_series(empty), tree, mirror, build_number=None, tree_label="t")
    restored = mirror / "ggml" / "ggml-base.c"
    assert restored.read_text() == BASE_BUGGY and (tree / "ggml" / "ggml-base.c").read_text() == BASE_BUGGY
    assert restored.stat().st_mtime_ns > patched_at > (tree / "ggml" / "ggml-base.c").stat().st_mtime_ns
    stamp = restored.stat().st_mtime_ns
    apply_patch_series(load_patch_series(empty), tree, mirror, build_number=None, tree_label="t")
    assert restored.stat().st_mtime_ns == stamp  # once restored, left alone


def test_a_patch_that_adds_a_file_and_one_that_deletes_one(tmp_path):
    tree = stand_in(tmp_path / "llama.cpp")
    added = "--- /dev/null\n+++ b/ggml/added.h\n@@ -0,0 +1 @@\n+#define ADDED 1\n"
    write(tmp_path / "s" / "add.patch", added)
    write(
        tmp_path / "s" / "drop.patch",
        "--- a/tools/main.cpp\n+++ /dev/null\n@@ -1,3 +0,0 @@\n"
        + "".join(f"-{line}\n" for line in MAIN_WITH_NOTE.splitlines()),
    )
    path = write(
        tmp_path / "s" / "patches.yaml",
        """
        patches:
          - {id: add, file: add.patch, url: 'https://x/1', why: a new header}
          - {id: drop, file: drop.patch, url: 'https://x/2', why: a file upstream removed}
    """,
    )
    mirror = tmp_path / "mirror"
    for _ in range(2):  # the second time: the same result, nothing rewritten
        patched = apply_patch_series(load_patch_series(path), tree, mirror, build_number=None, tree_label="t")
        assert (mirror / "ggml" / "added.h").read_text() == "#define ADDED 1\n"
        assert not (mirror / "tools" / "main.cpp").exists() and (tree / "tools" / "main.cpp").is_file()
    assert patched.rewritten == ()


def test_nothing_to_apply_builds_the_pristine_tree(tmp_path):
    tree = stand_in(tmp_path / "llama.cpp")
    empty = load_patch_series(write(tmp_path / "empty.yaml", "patches: []\n"))
    patched = apply_patch_series(empty, tree, tmp_path / "mirror", build_number=1, tree_label="t")
    assert patched.tree == tree.resolve() and patched.patches == () and not (tmp_path / "mirror").exists()


def test_a_patch_that_no_longer_applies_names_itself_and_its_file(tmp_path):
    tree = stand_in(tmp_path / "llama.cpp")
    with pytest.raises(PatchError) as info:
        apply_patch_series(
            load_patch_series(series(tmp_path / "series", stale=True)),
            tree,
            tmp_path / "mirror",
            build_number=11312,
            tree_label="llama.cpp b11312 (0c1e570)",
        )
    assert info.value.message == "patch stale does not apply to ggml/ggml.cpp of llama.cpp b11312 (0c1e570)"
    assert "--no-patches" in (info.value.hint or "")
    assert (tree / "ggml" / "ggml-base.c").read_text() == BASE_BUGGY


def test_a_mirror_inside_the_tree_is_refused(tmp_path):
    tree = stand_in(tmp_path / "llama.cpp")
    with pytest.raises(Exception, match="would be inside the llama.cpp tree"):
        mirror_tree(tree, tree / "build" / "mirror", {})


def test_the_web_ui_the_build_embeds_in_the_mirror_is_left_to_it(tmp_path):
    tree = stand_in(tmp_path / "llama.cpp")
    mirror = tmp_path / "mirror"
    mirror_tree(tree, mirror, {})
    index = write(mirror / "tools" / "ui" / "dist" / "index.html", "<html>built</html>\n")
    stamp = index.stat().st_mtime_ns
    mirror_tree(tree, mirror, {})
    assert index.read_text() == "<html>built</html>\n" and index.stat().st_mtime_ns == stamp
    assert not (tree / "tools" / "ui").exists()


def test_a_build_folder_inside_a_users_checkout_is_not_mirrored(tmp_path):
    tree = stand_in(tmp_path / "llama.cpp")
    write(tree / "build" / "CMakeCache.txt", "# a user's own build\n")
    write(tree / "build" / "bin" / "big.o", "x" * 100)
    mirror_tree(tree, tmp_path / "mirror", {})
    assert not (tmp_path / "mirror" / "build").exists() and (tmp_path / "mirror" / "CMakeLists.txt").is_file()


# -- the build: compiles the mirror, records every patch ---------------------------------------------------------------


@pytest.fixture(scope="module")
def rocm(tmp_path_factory):
    return write_tree(tmp_path_factory.mktemp("therock") / "therock", gcc_therock())


def _run_tool(job_dir: Path) -> int:
    return subprocess.run([str(job_dir / "build" / "bin" / "llama-cli")], check=False).returncode


@needs_toolchain
def test_build_compiles_the_patched_mirror_and_build_json_names_each_patch(tmp_path, rocm):
    tree = stand_in(tmp_path / "llama.cpp")
    job = resolve_job(target="gfx1151")
    options = BuildOptions(
        context=context(),
        out_dir=tmp_path / "out",
        rocm_dir=rocm,
        source_dir=tree,
        build_number="11312",
        commit="0c1e570",
        cache=tmp_path / "cache",
        use_ccache=False,
        patch_series=load_patch_series(series(tmp_path / "series")),
    )
    result = build_job(job, options, backends=REGISTRY)
    assert _run_tool(result.job_dir) == 0  # the fix is in the binary
    data = json.loads(result.build_json.read_text())
    assert data["patches"]["digest"] == load_patch_series(tmp_path / "series" / "patches.yaml").digest
    assert data["patches"]["disabled"] is False
    assert outcomes(data["patches"])["fix-answer"] == (APPLIED, "")
    assert data["patches"]["pristine"] == str(tree.resolve())
    assert data["llama_cpp"]["path"] == str(tmp_path / "cache" / "llama.cpp-patched" / "linux-gfx1151")
    assert data["llama_cpp"]["patched_from"] == str(tree.resolve())
    assert result.patches is not None and [p.id for p in result.patches.applied] == ["fix-answer"]
    log = (result.job_dir / "build.log").read_text()
    assert "carried patches: applied fix-answer; skipped: already-in" in log


@needs_toolchain
def test_cli_no_patches_builds_the_pristine_tree(tmp_path, rocm, run_rockbuild):
    tree = stand_in(tmp_path / "llama.cpp")
    result = run_rockbuild(
        "build",
        "--target",
        "gfx1151",
        "--rocm",
        str(rocm),
        "--source",
        str(tree),
        "--out",
        str(tmp_path / "out"),
        "--no-ccache",
        "--no-bundle",
        "--no-patches",
        "--build-number",
        "11312",
        env={"ROCKBUILD_CACHE": str(tmp_path / "cache"), "ROCKBUILD_PATCHES": str(series(tmp_path / "series"))},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "carried patches: none (--no-patches: the pristine tree)" in result.stderr
    data = json.loads((tmp_path / "out" / "linux-gfx1151" / "build.json").read_text())
    assert data["patches"] == {"digest": NO_PATCHES, "disabled": True, "patches": []}
    assert _run_tool(tmp_path / "out" / "linux-gfx1151") == 1  # the bug, as the tree has it
    assert not (tmp_path / "cache" / "llama.cpp-patched").exists()


@needs_toolchain
def test_cli_a_stale_patch_fails_the_build_in_one_line(tmp_path, rocm, run_rockbuild):
    tree = stand_in(tmp_path / "llama.cpp")
    result = run_rockbuild(
        "build",
        "--target",
        "gfx1151",
        "--rocm",
        str(rocm),
        "--source",
        str(tree),
        "--out",
        str(tmp_path / "out"),
        "--no-ccache",
        "--no-bundle",
        "--build-number",
        "11312",
        "--patches",
        str(series(tmp_path / "series", stale=True)),
        env={"ROCKBUILD_CACHE": str(tmp_path / "cache")},
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-2] == "error: patch stale does not apply to ggml/ggml.cpp of llama.cpp b11312 (unknown)"
    assert lines[-1].startswith("hint: refresh it against this tree")
    assert "Traceback" not in result.stderr
    data = json.loads((tmp_path / "out" / "linux-gfx1151" / "build.json").read_text())
    assert data["status"] == "failed" and data["failed_step"] == "source"


def test_cli_a_broken_series_file_is_a_config_error(tmp_path, run_rockbuild):
    bad = write(tmp_path / "bad.yaml", "patches:\n  - {id: a, file: none.patch, url: 'https://x', why: y}\n")
    result = run_rockbuild("build", "--target", "gfx1151", "--patches", str(bad), "--no-patches")
    assert result.returncode == 2 and "give --patches FILE or --no-patches, not both" in result.stderr
    result = run_rockbuild("build", "--target", "gfx1151", "--patches", str(bad))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {bad}:2: patch a's file none.patch does not exist (next to bad.yaml)"
    )
