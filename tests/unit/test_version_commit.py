"""`rockbuild --version` names the commit of the git checkout rockbuild runs from (issue 57, finding 6), read from the
.git files themselves (no git process: it stays as fast as the version alone). The .git folders are written here;
tests/integration/test_first_contact.py compares the real checkout's answer with git's own."""

from __future__ import annotations

from pathlib import Path

from rockbuild import __version__
from rockbuild.cli import checkout_commit, version_text

A = "0123456789abcdef0123456789abcdef01234567"
B = "89abcdef0123456789abcdef0123456789abcdef"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_branch_a_detached_head_and_packed_refs(tmp_path):
    top = tmp_path / "checkout"
    write(top / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(top / ".git" / "refs" / "heads" / "main", A + "\n")
    assert checkout_commit(top) == A
    (top / ".git" / "refs" / "heads" / "main").unlink()  # after `git gc` the branch lives in packed-refs
    write(
        top / ".git" / "packed-refs",
        f"# pack-refs with: peeled fully-peeled sorted\n{B} refs/heads/main\n{A} refs/tags/v1\n^{B}\n",
    )
    assert checkout_commit(top) == B
    write(top / ".git" / "HEAD", A + "\n")  # a detached HEAD
    assert checkout_commit(top) == A


def test_a_worktree_reads_its_branch_from_the_main_repository(tmp_path):
    main = tmp_path / "main" / ".git"
    write(main / "refs" / "heads" / "topic", B + "\n")
    work = tmp_path / "work"
    write(work / ".git", f"gitdir: {main / 'worktrees' / 'work'}\n")
    write(main / "worktrees" / "work" / "HEAD", "ref: refs/heads/topic\n")
    write(main / "worktrees" / "work" / "commondir", "../..\n")
    assert checkout_commit(work) == B


def test_no_checkout_or_a_broken_one_is_no_commit(tmp_path):
    assert checkout_commit(tmp_path) is None  # no .git at all: an installed wheel
    write(tmp_path / ".git" / "HEAD", "ref: refs/heads/gone\n")
    assert checkout_commit(tmp_path) is None  # a branch that is nowhere
    write(tmp_path / ".git" / "HEAD", "garbage\n")
    assert checkout_commit(tmp_path) is None
    write(tmp_path / "file" / ".git", "not a pointer\n")
    assert checkout_commit(tmp_path / "file") is None


def test_the_version_line():
    text = version_text()
    assert text == f"rockbuild {__version__}" or text.startswith(f"rockbuild {__version__} (commit ")
