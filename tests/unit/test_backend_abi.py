"""The audit's backend-abi check (rockbuild.bundle.audit.check_backend_abi): a backend module built against another
ggml than the bundle's core libraries (a GPU library and a common part of different trees or flags) fails, naming
the function; ELF libraries made here with gcc."""

from __future__ import annotations

from support.bundles import cc

from rockbuild.bundle.audit import check_backend_abi, imported_symbols


def _core(folder, *functions):
    return cc(
        folder / "libggml-base.so",
        "".join(f"int {f}(void) {{ return 1; }}\n" for f in functions),
        shared=True,
        soname="libggml-base.so",
    )


def _module(folder, name, *functions):
    calls = " + ".join(f"{f}()" for f in functions)
    decls = "".join(f"int {f}(void);\n" for f in functions)
    return cc(
        folder / name,
        f"{decls}int ggml_backend_init(void) {{ return {calls}; }}\n",
        shared=True,
        libs=(folder / "libggml-base.so",),
    )


def test_a_module_whose_ggml_functions_the_core_defines_passes(tmp_path):
    _core(tmp_path, "ggml_backend_reg_count", "gguf_init")
    hip = _module(tmp_path, "libggml-hip.so", "ggml_backend_reg_count", "gguf_init", "puts")
    assert imported_symbols(hip)[""] >= {"ggml_backend_reg_count", "gguf_init", "puts"}
    check = check_backend_abi(sorted(tmp_path.iterdir()))
    assert check.ok and check.details == {"core": ["libggml-base.so"], "modules": {"libggml-hip.so": 2}}


def test_a_module_built_against_another_ggml_fails_naming_the_function(tmp_path):
    _core(tmp_path, "ggml_backend_reg_count")
    _module(tmp_path, "libggml-vulkan.so", "ggml_backend_reg_count", "ggml_backend_buffer_init_v2", "ggml_new_op")
    check = check_backend_abi(sorted(tmp_path.iterdir()))
    assert not check.ok
    assert check.failures == (
        "libggml-vulkan.so needs ggml_backend_buffer_init_v2 (and 1 more), which "
        "libggml-base.so do not define: it was built against another ggml than the bundle's "
        "programs (a GPU library and a common part of different trees or flags)",
    )


def test_nothing_to_check_without_ggml_core_libraries(tmp_path):
    _core(tmp_path, "ggml_a")
    _module(tmp_path, "libggml-hip.so", "ggml_b")
    (tmp_path / "libggml-base.so").unlink()
    assert check_backend_abi(sorted(tmp_path.iterdir())).ok
