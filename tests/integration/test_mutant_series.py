"""The mutants of the numerics proof (tests/e2e/mutants/: the release's carried patches, then one planted fault) still
apply, as rockbuild's patch mechanism applies them, to the pinned llama.cpp tree: a mutant that rots is a proof that
silently stops being made (docs/numerics.md, "Proof by mutants").

Skipped where the pinned source (tests/e2e/provision.sh puts it in /var/cache/rockbuild/src) is missing; only the
files the patches touch are unpacked."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from rockbuild.llamacpp.patches import APPLIED, apply_patch_series, load_patch_series, patch_files

SDIST = Path("/var/cache/rockbuild/src/llama_cpp_python-0.3.36.tar.gz")
PREFIX = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
MUTANTS = sorted((Path(__file__).resolve().parents[1] / "e2e" / "mutants").glob("*.yaml"))

pytestmark = pytest.mark.skipif(
    not SDIST.is_file(), reason=f"the pinned llama.cpp source is not in the cache ({SDIST})"
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """The files of the pinned tree that any mutant's series touches."""
    wanted = {f for series in MUTANTS for p in load_patch_series(series).patches for f in patch_files(p.data.decode())}
    tree = tmp_path_factory.mktemp("b11312") / "llama.cpp"
    with tarfile.open(SDIST) as tar:
        for member in tar:
            name = member.name.removeprefix(PREFIX)
            if member.isfile() and name in wanted:
                member.name = name
                tar.extract(member, tree, filter="data")
    return tree


def test_the_mutants_are_there() -> None:
    assert {m.stem for m in MUTANTS} >= {
        "a-q4_1-dequant",
        "b-positions",
        "e-rope-past-2048",
        "f-kv-rows-past-2048",
        "g-avx512-q4_1",
    }


@pytest.mark.parametrize("series", MUTANTS, ids=lambda p: p.stem)
def test_each_mutant_applies_to_the_pinned_tree_after_the_carried_patches(series, pristine, tmp_path):
    loaded = load_patch_series(series)
    assert loaded.patches[-1].id.startswith("mutant-")  # the fault comes last, after the release's own patches
    done = apply_patch_series(
        loaded,
        pristine,
        tmp_path / "mirror",
        build_number=11312,
        tree_label="llama.cpp b11312",
        os_name="linux",
        backend="vulkan",
    )
    assert [(o.id, o.status) for o in done.patches] == [(p.id, APPLIED) for p in loaded.patches]
