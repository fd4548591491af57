"""llama.cpp source: shallow checkouts of one ref from a LOCAL bare repository (file:// URL), and what a tree is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.git import git

from rockbuild.core.errors import FetchError, UsageError
from rockbuild.llamacpp.source import (
    LlamaSource,
    build_number_from_ls_remote,
    build_number_from_tags,
    checkout_ref,
    clone_dir_for,
    describe_tree,
    normalize_build_number,
    ref_kind_from_fetch_head,
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def commit_file(work: Path, name: str, text: str) -> str:
    (work / name).write_text(text, encoding="utf-8")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", f"change {name}", cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """A bare repo: c1 (lightweight tag b1234) <- c2 (annotated tag b1240, branch `feature`) <- c3 (master, no tag)."""
    base = tmp_path_factory.mktemp("llama-upstream")
    work = base / "work"
    work.mkdir()
    git("init", "-q", "-b", "master", cwd=work)
    (work / "ggml").mkdir()
    (work / "ggml" / "CMakeLists.txt").write_text("# ggml\n", encoding="utf-8")
    c1 = commit_file(work, "CMakeLists.txt", "project(fake)\n")
    git("tag", "b1234", cwd=work)
    c2 = commit_file(work, "README.md", "two\n")
    git("tag", "-a", "b1240", "-m", "release b1240", cwd=work)
    git("branch", "feature", cwd=work)
    c3 = commit_file(work, "README.md", "three\n")
    bare = base / "llama.cpp.git"
    git("clone", "-q", "--bare", str(work), str(bare))
    return {"base": base, "work": work, "bare": bare, "url": f"file://{bare}", "c1": c1, "c2": c2, "c3": c3}


def is_shallow(path: Path) -> bool:
    return git("rev-parse", "--is-shallow-repository", cwd=path) == "true"


def test_tag_checkout_is_shallow_and_named_by_its_tag(upstream, tmp_path):
    source = checkout_ref("b1234", url=upstream["url"], cache=tmp_path)
    assert isinstance(source, LlamaSource)
    assert (source.commit, source.ref_kind, source.build_number, source.build_number_source) == (
        upstream["c1"],
        "tag",
        "b1234",
        "tag b1234",
    )
    assert source.path == clone_dir_for(upstream["url"], "b1234", tmp_path)
    assert source.path.parent == tmp_path / "llama.cpp" and source.path.name.startswith("b1234-")
    assert is_shallow(source.path) and git("rev-list", "--count", "HEAD", cwd=source.path) == "1"
    assert (source.path / "CMakeLists.txt").read_text() == "project(fake)\n"
    assert not source.reused and source.shallow is True
    assert source.cmake_build_info() == {"LLAMA_BUILD_NUMBER": "1234", "LLAMA_BUILD_COMMIT": upstream["c1"][:7]}


def test_branch_checkout_finds_the_annotated_build_tag_on_its_commit(upstream, tmp_path):
    source = checkout_ref("feature", url=upstream["url"], cache=tmp_path)
    assert (source.commit, source.ref_kind, source.build_number, source.build_number_source) == (
        upstream["c2"],
        "branch",
        "b1240",
        "tag b1240",
    )


def test_commit_without_a_build_tag_is_unknown_never_the_shallow_count(upstream, tmp_path):
    for ref in (upstream["c3"], "master"):
        source = checkout_ref(ref, url=upstream["url"], cache=tmp_path)
        assert source.commit == upstream["c3"] and is_shallow(source.path)
        assert (source.build_number, source.build_number_source) == ("unknown", "unknown")
        assert source.cmake_build_info() == {"LLAMA_BUILD_NUMBER": "0", "LLAMA_BUILD_COMMIT": upstream["c3"][:7]}
    assert checkout_ref(upstream["c3"], url=upstream["url"], cache=tmp_path).ref_kind == "commit"
    given = checkout_ref(upstream["c3"], url=upstream["url"], cache=tmp_path, build_number="b1250")
    assert (given.build_number, given.build_number_source) == ("b1250", "given")


def test_a_slot_keeps_one_checkout_that_moves_and_rewrites_only_changed_files(upstream, tmp_path):
    """The night builds a new commit in the same folder: unchanged files keep their path and mtime (ccache hits)."""
    import time

    first = checkout_ref("b1234", url=upstream["url"], cache=tmp_path, slot="linux-gfx1151")
    assert first.path == clone_dir_for(upstream["url"], "linux-gfx1151", tmp_path)
    assert first.path.name.startswith("linux-gfx1151-") and first.commit == upstream["c1"]
    unchanged, added = first.path / "CMakeLists.txt", first.path / "README.md"  # README.md comes in c2
    before = unchanged.stat()
    assert not added.exists()
    time.sleep(0.05)  # a rewrite would show in the nanosecond mtime
    moved = checkout_ref(upstream["c3"], url=upstream["url"], cache=tmp_path, slot="linux-gfx1151")
    assert moved.path == first.path and moved.commit == upstream["c3"] and not moved.reused
    assert added.read_text() == "three\n"
    after = unchanged.stat()
    assert (after.st_mtime_ns, after.st_ino) == (before.st_mtime_ns, before.st_ino)
    again = checkout_ref(upstream["c3"], url=upstream["url"], cache=tmp_path, slot="linux-gfx1151")
    assert again.reused and again.path == first.path
    # another job has its own checkout: two jobs never move each other's sources
    other = checkout_ref("b1234", url=upstream["url"], cache=tmp_path, slot="linux-gfx1100")
    assert other.path != first.path and other.commit == upstream["c1"]
    assert git("rev-parse", "HEAD", cwd=first.path) == upstream["c3"]


def test_a_tag_or_commit_checkout_is_reused_without_the_network(upstream, tmp_path):
    first = checkout_ref("b1240", url=upstream["url"], cache=tmp_path)
    assert not first.reused and first.commit == upstream["c2"]
    moved = upstream["bare"].with_name("gone.git")
    upstream["bare"].rename(moved)  # the URL now points nowhere: a fetch would fail
    try:
        again = checkout_ref("b1240", url=upstream["url"], cache=tmp_path)
        with pytest.raises(FetchError, match="cannot fetch 'b1234'"):
            checkout_ref("b1234", url=upstream["url"], cache=tmp_path)
    finally:
        moved.rename(upstream["bare"])
    assert again.reused and (again.path, again.commit, again.build_number) == (first.path, first.commit, "b1240")


def test_an_edited_cached_checkout_is_fetched_and_reset_again(upstream, tmp_path):
    first = checkout_ref("b1234", url=upstream["url"], cache=tmp_path)
    (first.path / "CMakeLists.txt").write_text("edited\n", encoding="utf-8")
    again = checkout_ref("b1234", url=upstream["url"], cache=tmp_path)
    assert not again.reused and (again.path / "CMakeLists.txt").read_text() == "project(fake)\n"


def test_a_branch_is_fetched_again_and_follows_upstream(upstream, tmp_path):
    first = checkout_ref("feature", url=upstream["url"], cache=tmp_path)
    clone = upstream["base"] / "pusher"
    git("clone", "-q", "--branch", "feature", upstream["url"], str(clone))
    c4 = commit_file(clone, "new.txt", "four\n")
    git("push", "-q", "origin", "feature", cwd=clone)
    try:
        again = checkout_ref("feature", url=upstream["url"], cache=tmp_path)
    finally:
        git("push", "-q", "--force", "origin", f"{upstream['c2']}:refs/heads/feature", cwd=clone)
    assert again.path == first.path and not again.reused
    assert again.commit == c4 and (again.path / "new.txt").is_file() and again.build_number == "unknown"


def test_unknown_ref_and_abbreviated_commit_fail_with_one_line(upstream, tmp_path):
    with pytest.raises(FetchError) as info:
        checkout_ref(upstream["c1"][:10], url=upstream["url"], cache=tmp_path)
    assert "\n" not in info.value.message and "full 40-character commit" in (info.value.hint or "")
    with pytest.raises(FetchError, match="cannot fetch 'no-such-branch'"):
        checkout_ref("no-such-branch", url=upstream["url"], cache=tmp_path)
    with pytest.raises(UsageError):
        checkout_ref("--upload-pack=touch /tmp/x", url=upstream["url"], cache=tmp_path)


def test_a_different_url_or_ref_gets_its_own_checkout(tmp_path):
    a = clone_dir_for("https://github.com/ggml-org/llama.cpp", "master", tmp_path)
    b = clone_dir_for("https://example.org/fork/llama.cpp", "master", tmp_path)
    c = clone_dir_for("https://github.com/ggml-org/llama.cpp", "feature/x y", tmp_path)
    assert len({a, b, c}) == 3 and c.name.startswith("feature_x_y-")


# ------------------------------------------------------------------------------------------------ existing trees


def test_plain_tree_is_unknown_and_takes_given_values(tmp_path):
    tree = tmp_path / "llama.cpp"
    (tree / "ggml").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text("project(x)\n")
    plain = describe_tree(tree)
    assert (plain.commit, plain.build_number, plain.shallow, plain.origin) == ("unknown", "unknown", None, "tree")
    assert plain.cmake_build_info() == {"LLAMA_BUILD_NUMBER": "0", "LLAMA_BUILD_COMMIT": "unknown"}
    pinned = describe_tree(tree, build_number="11312", commit="0c1e570")
    assert (pinned.commit, pinned.commit_source, pinned.build_number, pinned.build_number_source) == (
        "0c1e570",
        "given",
        "b11312",
        "given",
    )
    assert pinned.cmake_build_info() == {"LLAMA_BUILD_NUMBER": "11312", "LLAMA_BUILD_COMMIT": "0c1e570"}


def test_a_tree_inside_another_repository_does_not_take_its_commit(upstream, tmp_path):
    outer = tmp_path / "outer"
    shutil.copytree(upstream["work"], outer)
    inner = outer / "vendor" / "llama.cpp"
    (inner / "ggml").mkdir(parents=True)
    (inner / "CMakeLists.txt").write_text("project(x)\n")
    assert describe_tree(inner).commit == "unknown"


def test_full_clone_counts_history_shallow_clone_does_not(upstream, tmp_path):
    full = tmp_path / "full"
    git("clone", "-q", "--branch", "master", upstream["url"], str(full))
    described = describe_tree(full)
    assert (described.commit, described.build_number, described.build_number_source, described.shallow) == (
        upstream["c3"],
        "b3",
        "rev-list",
        False,
    )
    tagged = tmp_path / "tagged"
    git("clone", "-q", "--branch", "b1240", upstream["url"], str(tagged))
    assert describe_tree(tagged).build_number == "b1240"  # the tag beats the count (which would be 2)
    shallow = tmp_path / "shallow"
    git("clone", "-q", "--depth", "1", "--branch", "master", upstream["url"], str(shallow))
    described = describe_tree(shallow)
    assert described.commit == upstream["c3"] and described.shallow is True
    assert (described.build_number, described.build_number_source) == ("unknown", "unknown")
    with pytest.raises(UsageError, match="does not match the tree's git commit"):
        describe_tree(shallow, commit=upstream["c1"][:7])
    assert describe_tree(shallow, commit=upstream["c3"][:7]).commit == upstream["c3"]  # git's full commit is kept


def test_a_symlinked_submodule_tree_is_described_by_its_real_path(upstream, tmp_path):
    """Like the sdist: vendor/llama.cpp/.git is a file with a RELATIVE gitdir; reached through a symlink, CMake and
    ninja would see <link>/../../.git/... (ninja drops `..` textually), so the tree is handed on by its real path."""
    outer = tmp_path / "sdist"
    git("init", "-q", str(outer))
    modules = outer / ".git" / "modules" / "vendor"
    modules.mkdir(parents=True)
    git("clone", "-q", "--bare", upstream["url"], str(modules / "llama.cpp"))
    git("config", "--file", str(modules / "llama.cpp" / "config"), "core.bare", "false")
    inner = outer / "vendor" / "llama.cpp"
    inner.mkdir(parents=True)
    (inner / ".git").write_text("gitdir: ../../.git/modules/vendor/llama.cpp\n")
    git("--git-dir", str(modules / "llama.cpp"), "--work-tree", str(inner), "checkout", "-q", "-f", "b1240")
    link = tmp_path / "llama.cpp"
    link.symlink_to(inner)
    described = describe_tree(link)
    assert described.path == inner.resolve() and described.commit == upstream["c2"]
    assert described.build_number == "b1240"


def test_not_a_llama_tree(tmp_path):
    with pytest.raises(UsageError, match="is not a llama.cpp source tree"):
        describe_tree(tmp_path)
    with pytest.raises(UsageError, match="does not exist"):
        describe_tree(tmp_path / "missing")


def test_small_parsers():
    assert [normalize_build_number(v) for v in (11312, "11312", "b11312", " B7 ")] == ["b11312"] * 3 + ["b7"]
    with pytest.raises(UsageError):
        normalize_build_number("master")
    assert build_number_from_tags(["v1", "b12", "b9", "b12x"]) == "b12" and build_number_from_tags(["v1"]) is None
    sha, other = "a" * 40, "b" * 40
    listing = f"{other}\trefs/tags/b1\n{'c' * 40}\trefs/tags/b7\n{sha}\trefs/tags/b7^{{}}\n{sha}\trefs/tags/b5\n"
    assert build_number_from_ls_remote(listing, sha) == "b7"
    assert build_number_from_ls_remote(listing, "d" * 40) is None
    assert ref_kind_from_fetch_head(f"{sha}\t\ttag 'b1' of file:///x\n") == "tag"
    assert ref_kind_from_fetch_head(f"{sha}\t\tbranch 'master' of https://x\n") == "branch"
    assert ref_kind_from_fetch_head(f"{sha}\t\t'{sha}' of file:///x\n") == "commit"
