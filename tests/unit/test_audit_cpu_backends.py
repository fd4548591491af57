"""The audit's cpu-backends check on real ELF modules: every variant the policy lists ships, each is a loadable
backend (exports ggml_backend_init and ggml_backend_score), no plain module tuned to one CPU ships beside them."""

from __future__ import annotations

import shutil

import pytest
from support.bundles import cc, make_bundle, make_tree, write_policy

from rockbuild.backends import REGISTRY
from rockbuild.bundle.audit import audit_bundle, check_cpu_backends
from rockbuild.bundle.policy import load_policy
from rockbuild.core.errors import AuditError
from rockbuild.rocm.layout import detect_layout

MODULE = "int ggml_backend_score(void) { return 1; }\nvoid *ggml_backend_init(void) { return 0; }\n"
NOT_A_BACKEND = "int something_else(void) { return 1; }\n"
VARIANTS = ("x64", "haswell", "zen4")
POLICY_CPU = """
  cpu_variants:
    reason: the CPU backend as one module per CPU generation
    machines:
      x86_64: [x64, haswell, zen4]
"""


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = write_policy(tmp_path_factory.mktemp("policy") / "policy.yaml")
    text = path.read_text(encoding="utf-8")
    i = text.index("\nwindows:")
    path.write_text(text[:i] + POLICY_CPU + text[i:], encoding="utf-8")
    return load_policy(path)


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    base = tmp_path_factory.mktemp("modules")
    for variant in VARIANTS:
        cc(base / f"libggml-cpu-{variant}.so", MODULE, shared=True)
    cc(base / "libggml-cpu.so", MODULE, shared=True)
    cc(base / "libggml-cpu-odd.so", NOT_A_BACKEND, shared=True)
    return base


def _folder(tmp_path, modules, names):
    out = tmp_path / "b"
    out.mkdir()
    for name in names:
        shutil.copy2(modules / name, out / name)
    return out, sorted(out.iterdir())


def test_every_listed_variant_passes(tmp_path, modules, policy):
    root, top = _folder(tmp_path, modules, [f"libggml-cpu-{v}.so" for v in VARIANTS])
    check = check_cpu_backends(root, top, policy.linux, "EM_X86_64")
    assert check.ok and not check.warnings, check.failures
    assert check.details["variants"] == ["haswell", "x64", "zen4"]


def test_a_missing_variant_and_a_plain_module_fail(tmp_path, modules, policy):
    root, top = _folder(tmp_path, modules, ["libggml-cpu-haswell.so", "libggml-cpu-zen4.so", "libggml-cpu.so"])
    check = check_cpu_backends(root, top, policy.linux, "EM_X86_64")
    assert not check.ok
    text = " | ".join(check.failures)
    assert "libggml-cpu.so is a CPU backend built for one CPU" in text
    assert "CPU variant x64 missing" in text and "no baseline CPU variant (x64)" in text


def test_a_module_without_the_entry_points_fails(tmp_path, modules, policy):
    names = [*(f"libggml-cpu-{v}.so" for v in VARIANTS), "libggml-cpu-odd.so"]
    root, top = _folder(tmp_path, modules, names)
    check = check_cpu_backends(root, top, policy.linux, "EM_X86_64")
    assert check.failures == (
        "libggml-cpu-odd.so is not a loadable backend module (it exports no ggml_backend_init, ggml_backend_score)",
    )
    assert "odd not in the bundle policy's list" in check.warnings[0]


def test_a_linked_cpu_backend_passes_with_a_warning(tmp_path, modules, policy):
    root = tmp_path / "old"
    root.mkdir()
    cc(root / "libggml-cpu.so.0", MODULE, shared=True, soname="libggml-cpu.so.0")
    check = check_cpu_backends(root, sorted(root.iterdir()), policy.linux, "EM_X86_64")
    assert check.ok and "built without GGML_BACKEND_DL" in check.warnings[0]


def test_the_audit_runs_it_on_a_bundle(tmp_path, modules, policy):
    tree = make_tree(tmp_path / "tree")
    shutil.copy2(modules / "libggml-cpu-haswell.so", tree["build"] / "bin" / "libggml-cpu-haswell.so")
    out = tmp_path / "bundle"
    with pytest.raises(AuditError, match="cpu-backends: CPU variants x64, zen4 missing"):
        make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, policy=policy)
    make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out, policy=policy, audit=False)
    assert (out / "libggml-cpu-haswell.so").is_file()  # a module in bin/ ships although nothing links it
    report = audit_bundle(out, policy=policy, backends=REGISTRY)
    assert [c.failures for c in report.checks if c.name == "cpu-backends"] == [
        (
            "CPU variants x64, zen4 missing (the bundle policy lists 3 for EM_X86_64): those CPUs would load a slower one",
            "no baseline CPU variant (x64): a CPU older than every shipped variant runs nothing",
        )
    ]
