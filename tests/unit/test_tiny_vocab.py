"""--model tiny's vocabulary (issue 57, finding 5): llama.cpp's models/ggml-vocab-qwen2.gguf is taken from a llama.cpp
tree a build left in the cache (a checkout of llama.cpp/, a patched mirror of llama.cpp-patched/), else from
smoke.yaml's tiny.vocab, else the one-line error names the command that gets one. The cached trees are made here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from rockbuild.llamacpp.source import cached_trees, clone_dir_for
from rockbuild.smoke.models import VOCAB_FILE, ModelError, TinySpec, find_vocab, tiny_extra_hint

URL = "https://github.com/ggml-org/llama.cpp"


def tree(root: Path, *, vocab: bytes | None = b"GGUF vocab", mtime: float | None = None) -> Path:
    """A llama.cpp tree as a build leaves it: CMakeLists.txt, ggml/ and (unless None) the Qwen2 vocab file."""
    (root / "ggml").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("project(llama.cpp)\n")
    if vocab is not None:
        (root / VOCAB_FILE).parent.mkdir(parents=True)
        (root / VOCAB_FILE).write_bytes(vocab)
    if mtime is not None:
        os.utime(root, (mtime, mtime))
    return root


def spec(*candidates: Path | str) -> TinySpec:
    return TinySpec("tiny-qwen3.gguf", 0, tuple(str(c) for c in candidates))


def test_the_vocab_of_a_cached_checkout_is_found(tmp_path):
    cache = tmp_path / "cache"
    checkout = tree(clone_dir_for(URL, "linux-gfx1151", cache))  # where `rockbuild build` clones for its job
    configured = tmp_path / "configured.gguf"
    configured.write_bytes(b"GGUF")
    # the cached tree comes first; smoke.yaml's path (the e2e roots) only when no build left one
    assert find_vocab(None, spec(configured, "src/missing.gguf"), cache) == checkout / VOCAB_FILE
    assert find_vocab(None, spec(configured), tmp_path / "empty-cache") == configured
    explicit = tmp_path / "mine.gguf"
    explicit.write_bytes(b"GGUF")
    assert find_vocab(explicit, spec(configured), cache) == explicit  # --vocab wins


def test_a_patched_mirror_counts_and_the_newest_tree_comes_first(tmp_path):
    cache = tmp_path / "cache"
    old = tree(cache / "llama.cpp" / "b7000-0123456789", mtime=1_000_000)
    new = tree(cache / "llama.cpp-patched" / "linux-vulkan", mtime=2_000_000)
    tree(cache / "llama.cpp" / "half-fetched", vocab=None, mtime=3_000_000)  # no vocab: skipped
    (cache / "llama.cpp" / "not-a-tree" / "models").mkdir(parents=True)  # no CMakeLists.txt, no ggml/: not a tree
    (cache / "llama.cpp" / ".master-abc.lock").write_text("")  # checkout_ref's lock files sit beside the trees
    assert [p.name for p in cached_trees(cache)] == ["half-fetched", "linux-vulkan", "b7000-0123456789"]
    assert find_vocab(None, spec(), cache) == new / VOCAB_FILE
    assert old != new


def test_no_vocab_anywhere_is_one_line_naming_the_way_to_get_one(tmp_path):
    cache = tmp_path / "cache"
    tree(cache / "llama.cpp" / "half-fetched", vocab=None)
    with pytest.raises(ModelError) as err:
        find_vocab(None, spec(tmp_path / "nope.gguf", "src/nope.gguf"), cache)
    message, hint = err.value.message, err.value.hint or ""
    assert "\n" not in message and "\n" not in hint
    assert message == (
        f"--model tiny needs llama.cpp's models/ggml-vocab-qwen2.gguf: no llama.cpp tree in {cache} "
        f"(rockbuild build keeps one there) nor at smoke.yaml's tiny.vocab ({tmp_path / 'nope.gguf'}, "
        "src/nope.gguf)"
    )
    assert hint.startswith(
        "pass --vocab FILE, e.g. after curl -fLO https://raw.githubusercontent.com/ggml-org/"
        "llama.cpp/master/models/ggml-vocab-qwen2.gguf"
    )
    assert "run rockbuild build once" in hint
    with pytest.raises(ModelError, match=r"vocab file .*missing.gguf does not exist"):
        find_vocab(tmp_path / "missing.gguf", spec(), cache)


def test_the_gguf_hint_names_what_works_from_a_checkout():
    hint = tiny_extra_hint()
    # rockbuild is installed from its checkout (README: pip install .), not from an index: 'rockbuild[tiny]' would
    # find nothing; the interpreter that runs rockbuild installs gguf into the right environment
    assert hint.startswith(
        f"{sys.executable} -m pip install 'gguf>=0.19' (in a rockbuild checkout: pip install '.[tiny]')"
    )
    assert "rockbuild[tiny]" not in hint
