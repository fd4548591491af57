"""The CMake command line and the environment, for TheRock, Debian and Windows layouts (pure functions)."""

from __future__ import annotations

import os
from pathlib import Path, PureWindowsPath
from typing import get_args

import pytest
from support.files import touch
from support.trees import therock_tree

from rockbuild.backends.rocm import TOOLCHAIN_KINDS, build_environment, cmake_definitions, toolchain_from_layout
from rockbuild.core.errors import BuildError, ConfigError
from rockbuild.core.programs import load_programs
from rockbuild.core.vocabulary import Toolchain, ToolchainKind
from rockbuild.llamacpp.cmake import (
    OFFLINE_DEFINITIONS,
    SEED_DEFINITIONS,
    SET_MARKER,
    UnusedVariables,
    check_definitions,
    compile_command,
    configure_command,
    configured_targets,
    executable_targets,
    msvc_delta,
    parse_set_output,
    tree_variables,
    vcvars_from_vswhere,
    vcvars_script,
    vswhere_command,
)
from rockbuild.rocm.layout import LayoutKind, detect_layout

REAL_ROCM_ROOT = Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e")) / "rocm-root"
TOKENS = {"GITHUB_TOKEN": "ghp_x", "GH_TOKEN": "gho_x", "HF_TOKEN": "hf_x"}


def debian_usr(usr: Path) -> Path:
    """A Debian /usr layout (as a chroot seen from outside: absolute paths resolve inside it)."""
    touch(usr / "lib" / "x86_64-linux-gnu" / "libamdhip64.so.7")
    touch(usr / "include" / "hip" / "hip_version.h")
    touch(usr / "lib" / "llvm-22" / "bin" / "clang", "#!/bin/sh\n", 0o755)
    touch(usr / "lib" / "llvm-22" / "bin" / "clang++", "#!/bin/sh\n", 0o755)
    touch(usr / "lib" / "llvm-22" / "lib" / "clang" / "22" / "amdgcn" / "bitcode" / "ocml.bc")
    return usr


WINDOWS = Toolchain(
    platform="windows",
    kind="therock",
    prefix=r"C:\TheRock",
    llvm_bin=r"C:\TheRock\lib\llvm\bin",
    c_compiler=r"C:\TheRock\lib\llvm\bin\clang.exe",
    cxx_compiler=r"C:\TheRock\lib\llvm\bin\clang++.exe",
    device_lib_dir=r"C:\TheRock\lib\llvm\amdgcn\bitcode",
    device_lib_in_resource_dir=False,
)


# ------------------------------------------------------------------------------------------------ definitions


def test_definitions_have_the_seed_flags_and_exactly_the_job_targets(tmp_path):
    tc = toolchain_from_layout(detect_layout(therock_tree(tmp_path / "r")))
    defs = cmake_definitions(
        tc, ("gfx1100", "gfx1101"), build_info={"LLAMA_BUILD_NUMBER": "11312", "LLAMA_BUILD_COMMIT": "0c1e570"}
    )
    d = dict(defs)
    assert len(d) == len(defs)  # each name once
    for name, value in SEED_DEFINITIONS:
        assert d[name] == value
    assert d["GPU_TARGETS"] == "gfx1100;gfx1101"
    assert d["CMAKE_C_COMPILER"] == str(tmp_path / "r" / "lib" / "llvm" / "bin" / "clang")
    assert (
        d["CMAKE_CXX_COMPILER"] == d["CMAKE_HIP_COMPILER"] == str(tmp_path / "r" / "lib" / "llvm" / "bin" / "clang++")
    )
    assert (d["LLAMA_BUILD_BORINGSSL"], d["GGML_CCACHE"]) == ("ON", "OFF") and "LLAMA_OPENSSL" not in d
    assert (d["LLAMA_BUILD_NUMBER"], d["LLAMA_BUILD_COMMIT"]) == ("11312", "0c1e570")
    assert (d["GGML_NATIVE"], d["GGML_HIP"], d["BUILD_SHARED_LIBS"], d["GGML_OPENMP"]) == ("OFF", "ON", "ON", "OFF")
    assert "CMAKE_CROSSCOMPILING" not in d and "CMAKE_CXX_FLAGS" not in d


def test_offline_uses_openssl_and_job_extras_win(tmp_path):
    tc = toolchain_from_layout(detect_layout(therock_tree(tmp_path / "r")))
    offline = dict(cmake_definitions(tc, ("gfx1151",), offline=True, ccache=True))
    assert {k: offline[k] for k, _ in OFFLINE_DEFINITIONS} == {"LLAMA_BUILD_BORINGSSL": "OFF", "LLAMA_OPENSSL": "ON"}
    assert offline["GGML_CCACHE"] == "ON"
    extras = dict(
        cmake_definitions(
            tc, ("gfx1151",), offline=True, extra=[("GGML_HIP_ROCWMMA_FATTN", "ON"), ("LLAMA_BUILD_BORINGSSL", "ON")]
        )
    )
    assert (extras["GGML_HIP_ROCWMMA_FATTN"], extras["LLAMA_BUILD_BORINGSSL"]) == ("ON", "ON")
    for reserved in ("GPU_TARGETS", "amdgpu_targets", "CMAKE_HIP_COMPILER", "LLAMA_BUILD_NUMBER"):
        with pytest.raises(ConfigError, match=f"{reserved} is set by rockbuild"):
            cmake_definitions(tc, ("gfx1151",), extra=[(reserved, "x")])
    with pytest.raises(ConfigError):
        cmake_definitions(tc, ())


def test_command_lines():
    cmd = configure_command("/src", "/out/b", [("A", "1"), ("GPU_TARGETS", "gfx1100;gfx1101")])
    assert cmd == ["cmake", "-S", "/src", "-B", "/out/b", "-G", "Ninja", "-DA=1", "-DGPU_TARGETS=gfx1100;gfx1101"]
    assert compile_command("/out/b", ["llama-cli", "llama-server"], jobs=2) == [
        "cmake",
        "--build",
        "/out/b",
        "--target",
        "llama-cli",
        "llama-server",
        "--parallel",
        "2",
    ]


def _tool(root: Path, directory: str, text: str) -> None:
    touch(root / directory / "CMakeLists.txt", text)


def test_shipped_programs_follow_the_tree(tmp_path):
    programs = load_programs()
    new = tmp_path / "new"
    for d, name in (
        ("tools/cli", "llama-cli"),
        ("tools/server", "llama-server"),
        ("tools/llama-bench", "llama-bench"),
        ("tools/rpc", "ggml-rpc-server"),
        ("tools/completion", "llama-completion"),
    ):
        _tool(
            new,
            d,
            f"set(TARGET {name}-impl)\nadd_library(${{TARGET}} x.cpp)\nset(TARGET {name})\n"
            "add_executable(${TARGET} main.cpp)\n",
        )
    _tool(new, "app", "set(TARGET llama-app)\nadd_executable(${TARGET} llama.cpp)\n")
    chosen = programs.select(executable_targets(new), "new")
    assert chosen.targets == (
        "llama-cli",
        "llama-server",
        "llama-bench",
        "ggml-rpc-server",
        "llama-completion",
        "llama-app",
    )
    assert chosen.programs[-1].file_name == "llama"
    assert "llama-quantize" in chosen.unavailable and "llama-app" in executable_targets(new)
    old = tmp_path / "old"  # 2025: rpc-server under examples/, no llama-completion
    _tool(old, "tools/main", "set(TARGET llama-cli)\nadd_executable(${TARGET} main.cpp)\n")
    _tool(old, "tools/server", "set(TARGET llama-server)\n")
    _tool(old, "tools/llama-bench", "set(TARGET llama-bench)\n")
    _tool(old, "examples/rpc", "add_executable(rpc-server rpc-server.cpp)\n")
    assert programs.select(executable_targets(old), "old").targets == (
        "llama-cli",
        "llama-server",
        "llama-bench",
        "rpc-server",
    )
    broken = tmp_path / "broken"
    _tool(broken, "tools/cli", "set(TARGET llama-cli)\n")
    with pytest.raises(BuildError, match="broken defines no target llama-server, llama-bench, ggml-rpc-server;"):
        programs.select(executable_targets(broken), "broken")


def test_configured_targets_read_ninja_listing():
    listing = "llama-cli: phony\nbin/llama-cli: CXX_EXECUTABLE_LINKER__llama-cli_Release\nall: phony\nclean: CLEAN\n"
    assert configured_targets(listing) == {"llama-cli", "all"}


def test_seed_flags_the_tree_lacks_are_dropped_and_the_matrix_typos_named(tmp_path):
    touch(tmp_path / "CMakeLists.txt", 'option(GGML_NATIVE "x" ON)\nif (GGML_HIP)\nendif()\n')
    touch(tmp_path / "ggml" / "src" / "ggml-hip" / "CMakeLists.txt", "if (GGML_BACKEND_DL)\nendif()\n")
    touch(tmp_path / "tools" / "ui" / "node_modules" / "x" / "CMakeLists.txt", "GGML_CPU_ALL_VARIANTS\n")
    known = tree_variables(tmp_path)
    assert {"GGML_NATIVE", "GGML_HIP", "GGML_BACKEND_DL"} <= known and "GGML_CPU_ALL_VARIANTS" not in known
    checked = check_definitions(
        [
            ("CMAKE_BUILD_TYPE", "Release"),
            ("GGML_NATIVE", "OFF"),
            ("GGML_CPU_ALL_VARIANTS", "ON"),
            ("GGML_HIP_ROCWMMA_FATTN", "OFF"),
            ("GPU_TARGETS", "gfx1151"),
            ("GGML_HIP_TYPO", "ON"),
            ("GGML_VULKAN", "ON"),
        ],
        known,
        extra=["GGML_HIP_TYPO"],
    )
    assert [n for n, _ in checked.definitions] == [
        "CMAKE_BUILD_TYPE",
        "GGML_NATIVE",
        "GPU_TARGETS",
        "GGML_HIP_TYPO",
        "GGML_VULKAN",
    ]
    assert checked.dropped == ("GGML_CPU_ALL_VARIANTS", "GGML_HIP_ROCWMMA_FATTN")
    assert checked.unknown == ("GGML_HIP_TYPO",)
    assert "GGML_HIP_TYPO is not used by this llama.cpp tree" in checked.warnings()[0]


def test_cmakes_unused_variables_block_is_read():
    unused = UnusedVariables()
    for line in [
        "-- Configuring done",
        "CMake Warning:",
        "  Manually-specified variables were not used by the project:",
        "",
        "    FOO_TYPO",
        "    BAR",
        "",
        "",
        "-- Build files have been written to: /b",
        "    NOT_ONE",
    ]:
        unused.on_line(line)
    assert unused.names == ["FOO_TYPO", "BAR"]
    assert "CMake did not use the option FOO_TYPO" in unused.warnings()[0]
    assert len(unused.warnings(ours=["BAR"])) == 1


def test_every_build_asks_for_all_cpu_variants_whatever_the_environment():
    seed = dict(SEED_DEFINITIONS)
    # SOURCE_DATE_EPOCH turns GGML_NATIVE's default (and AVX2 with it) off; the variants name their own flags
    assert seed["GGML_BACKEND_DL"] == "ON" and seed["GGML_CPU_ALL_VARIANTS"] == "ON" and seed["GGML_NATIVE"] == "OFF"


# ------------------------------------------------------------------------------------------------ environment


def test_therock_environment_and_token_stripping(tmp_path):
    root = therock_tree(tmp_path / "r")
    tc = toolchain_from_layout(detect_layout(root))
    base = {"PATH": "/usr/bin:/bin", "HOME": "/root", "RANDOM": "x", **TOKENS}
    env = build_environment(tc, base=base, ccache_dir=tmp_path / "cc")
    assert env["ROCM_PATH"] == env["HIP_PATH"] == str(root) and env["HIP_PLATFORM"] == "amd"
    assert env["HIP_DEVICE_LIB_PATH"] == str(root / "lib" / "llvm" / "amdgcn" / "bitcode")
    assert env["PATH"] == f"{root}/lib/llvm/bin:{root}/bin:/usr/bin:/bin"
    assert env["CCACHE_DIR"] == str(tmp_path / "cc") and env["NINJA_STATUS"] == "[%f/%t] "
    assert not set(TOKENS) & set(env) and "RANDOM" not in env and env["HOME"] == "/root"


def test_debian_environment_sets_no_rocm_paths(tmp_path):
    layout = detect_layout(debian_usr(tmp_path / "root" / "usr").parent)
    tc = toolchain_from_layout(layout)  # paths as seen inside the root
    assert (tc.kind, tc.prefix, tc.c_compiler) == ("debian", "/usr", "/usr/lib/llvm-22/bin/clang")
    assert tc.device_lib_in_resource_dir is True
    env = build_environment(tc, base={"PATH": "/usr/local/bin:/usr/bin:/bin", "ROCM_PATH": "/opt/rocm", **TOKENS})
    # clang, hipconfig and llama.cpp's CMake find /usr by themselves; ROCM_PATH=/usr would hide clang's bitcode
    assert not {"ROCM_PATH", "HIP_PATH", "HIP_DEVICE_LIB_PATH"} & set(env) and env["HIP_PLATFORM"] == "amd"
    assert not any("/opt/rocm" in v for v in env.values())
    # /usr/bin is already there: not added twice
    assert env["PATH"] == "/usr/lib/llvm-22/bin:/usr/local/bin:/usr/bin:/bin"
    assert not set(TOKENS) & set(env)


def test_every_layout_kind_is_the_toolchain_kind_of_the_same_word():
    """build.json's toolchain.kind is a closed set (ToolchainKind, read and checked by the record): every ROCm layout
    rockbuild detects has its word there, the same as LayoutKind's."""
    assert {kind.value: word for kind, word in TOOLCHAIN_KINDS.items()} == {
        kind.value: kind.value for kind in LayoutKind
    }
    assert set(get_args(ToolchainKind)) == {kind.value for kind in LayoutKind}


@pytest.mark.skipif(not (REAL_ROCM_ROOT / "usr" / "bin" / "hipconfig").exists(), reason="no e2e ROCm root")
def test_real_debian_root_toolchain():
    tc = toolchain_from_layout(detect_layout(REAL_ROCM_ROOT))
    assert (tc.prefix, tc.c_compiler, tc.cxx_compiler) == (
        "/usr",
        "/usr/lib/llvm-22/bin/clang",
        "/usr/lib/llvm-22/bin/clang++",
    )
    assert tc.device_lib_in_resource_dir and tc.device_lib_dir == "/usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode"


# ------------------------------------------------------------------------------------------------ Windows


def test_windows_tree_detected_anywhere_gives_exe_compilers(tmp_path):
    tc = toolchain_from_layout(detect_layout(therock_tree(tmp_path / "win", exe=".exe")))
    assert tc.windows and tc.c_compiler.endswith("clang.exe") and tc.cxx_compiler.endswith("clang++.exe")


def test_windows_command_line_uses_forward_slashes():
    d = dict(cmake_definitions(WINDOWS, ("gfx1151",)))
    assert d["CMAKE_C_COMPILER"] == "C:/TheRock/lib/llvm/bin/clang.exe"
    assert d["CMAKE_CXX_COMPILER"] == d["CMAKE_HIP_COMPILER"] == "C:/TheRock/lib/llvm/bin/clang++.exe"
    assert d["GPU_TARGETS"] == "gfx1151"


VSWHERE_OUT = "C:\\Program Files\\Microsoft Visual Studio\\2022\\BuildTools\r\n"
SET_OUTPUT = "\r\n".join(
    [
        "**********************************************************************",
        "** Visual Studio 2022 Developer Command Prompt v17.14.0",
        SET_MARKER,
        "ALLUSERSPROFILE=C:\\ProgramData",
        "GITHUB_TOKEN=ghp_leaked_through_set",
        "INCLUDE=C:\\VS\\VC\\Tools\\MSVC\\14.44\\include;C:\\Kits\\10\\include\\ucrt",
        "LIB=C:\\VS\\VC\\Tools\\MSVC\\14.44\\lib\\x64;C:\\Kits\\10\\lib\\ucrt\\x64",
        "Path=C:\\VS\\VC\\Tools\\MSVC\\14.44\\bin\\HostX64\\x64;C:\\Windows\\system32;C:\\Windows",
        "SystemRoot=C:\\Windows",
        "VCToolsVersion=14.44.35207",
        "VSCMD_ARG_TGT_ARCH=x64",
        "=C:=C:\\work",
        "",
    ]
)


def test_vswhere_and_vcvars_script():
    cmd = vswhere_command(r"C:\Program Files (x86)")
    assert cmd[0] == r"C:\Program Files (x86)\Microsoft Visual Studio\Installer\vswhere.exe"
    assert cmd[1:] == [
        "-latest",
        "-products",
        "*",
        "-requires",
        "Microsoft.VisualStudio.Component.VC.Tools.x86.x64",
        "-property",
        "installationPath",
    ]
    vcvars = vcvars_from_vswhere(VSWHERE_OUT)
    assert vcvars == PureWindowsPath(
        r"C:\Program Files\Microsoft Visual Studio\2022\BuildTools\VC\Auxiliary\Build"
        r"\vcvars64.bat"
    )
    script = vcvars_script(vcvars)
    assert script.split("\r\n")[:5] == [
        "@echo off",
        f'call "{vcvars}" >nul',
        "if errorlevel 1 exit /b %errorlevel%",
        f"echo {SET_MARKER}",
        "set",
    ]
    with pytest.raises(BuildError, match="no Visual Studio with the C\\+\\+ x64 tools"):
        vcvars_from_vswhere("\r\n")


def test_msvc_environment_is_merged_without_secrets_and_rocm_first():
    captured = parse_set_output(SET_OUTPUT)
    assert "ALLUSERSPROFILE" in captured and "**" not in "".join(captured) and "" not in captured
    assert not any(k.startswith("=") for k in captured)
    before = {
        "PATH": r"C:\Windows\system32;C:\Windows",
        "SYSTEMROOT": r"C:\Windows",
        "GH_TOKEN": "x",
        "ALLUSERSPROFILE": r"C:\ProgramData",
    }
    delta = msvc_delta(before, captured)
    # only what vcvars added or changed; names compared without case (SystemRoot == SYSTEMROOT)
    assert set(delta) == {"INCLUDE", "LIB", "Path", "VCToolsVersion", "VSCMD_ARG_TGT_ARCH"}
    base = {
        "Path": r"C:\Windows\system32;C:\Windows",
        "SystemRoot": r"C:\Windows",
        "USERPROFILE": r"C:\Users\u",
        **TOKENS,
    }
    env = build_environment(WINDOWS, base=base, msvc=delta, ccache_dir=r"C:\cache\ccache")
    assert [k for k in env if k.upper() == "PATH"] == ["Path"]  # one PATH, in the spelling Windows used
    assert env["Path"].split(";") == [
        r"C:\TheRock\lib\llvm\bin",
        r"C:\TheRock\bin",
        r"C:\VS\VC\Tools\MSVC\14.44\bin\HostX64\x64",
        r"C:\Windows\system32",
        r"C:\Windows",
    ]
    assert env["INCLUDE"].startswith(r"C:\VS\VC\Tools\MSVC") and env["LIB"].endswith(r"ucrt\x64")
    assert env["HIP_PATH"] == env["ROCM_PATH"] == r"C:\TheRock" and env["HIP_PLATFORM"] == "amd"
    assert env["HIP_DEVICE_LIB_PATH"] == r"C:\TheRock\lib\llvm\amdgcn\bitcode"
    assert env["CCACHE_DIR"] == r"C:\cache\ccache"
    assert not any(k.upper() in TOKENS for k in env) and "ghp_leaked_through_set" not in env.values()


# --- a Vulkan job: the host's compiler, GGML_VULKAN, no ROCm ------------------------------------------------------


def test_vulkan_definitions_swap_hip_for_vulkan_and_name_no_compiler_or_targets(tmp_path):
    from rockbuild.backends.vulkan import vulkan_cmake_definitions

    defs = vulkan_cmake_definitions(build_info={"LLAMA_BUILD_NUMBER": "7000"}, ccache=True)
    names = [name for name, _ in defs]
    assert len(names) == len(set(names))
    got = dict(defs)
    assert got["GGML_VULKAN"] == "ON" and names.index("GGML_VULKAN") == [n for n, _ in SEED_DEFINITIONS].index(
        "GGML_HIP"
    )
    assert not [n for n in names if n.startswith("GGML_HIP") or n.startswith("CMAKE_") and "COMPILER" in n]
    assert "GPU_TARGETS" not in got and "AMDGPU_TARGETS" not in got
    for name, value in SEED_DEFINITIONS:  # every other seed flag, unchanged
        if not name.startswith("GGML_HIP"):
            assert got[name] == value, name
    assert got["GGML_CCACHE"] == "ON" and got["LLAMA_BUILD_NUMBER"] == "7000"
    offline = dict(vulkan_cmake_definitions(offline=True, extra=[("GGML_VULKAN_VALIDATE", "OFF")]))
    assert offline["LLAMA_BUILD_BORINGSSL"] == "OFF" and offline["LLAMA_OPENSSL"] == "ON"
    assert offline["GGML_VULKAN_VALIDATE"] == "OFF" and offline["GGML_CCACHE"] == "OFF"
    command = configure_command("/src", tmp_path / "b", defs)
    assert "-DGGML_VULKAN=ON" in command and not [a for a in command if a.startswith(("-DGGML_HIP", "-DGPU_TARGETS"))]
    for reserved in ("GGML_HIP", "ggml_vulkan", "CMAKE_CXX_COMPILER", "GPU_TARGETS", "LLAMA_BUILD_COMMIT"):
        with pytest.raises(ConfigError, match=f"{reserved} is set by rockbuild for a Vulkan job"):
            vulkan_cmake_definitions(extra=[(reserved, "ON")])


def test_host_build_environment_has_no_rocm_and_keeps_the_vulkan_sdk(tmp_path):
    from rockbuild.backends import get_backend
    from rockbuild.core.jobs import Job
    from rockbuild.llamacpp.cmake import host_build_environment

    def job(os_name):
        return Job(
            id=f"{os_name}-vulkan",
            os=os_name,
            name="vulkan",
            family="",
            group="",
            legacy_groups=(),
            targets=(),
            required=True,
            llama_ref="master",
            rocm_channel="nightly",
            rocm_version="latest",
            cmake=(),
            runner="",
            backend="vulkan",
        )

    vulkan = get_backend("vulkan")
    base = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/root",
        "VULKAN_SDK": "/opt/vk",
        "CC": "gcc-14",
        "ROCM_PATH": "/opt/rocm",
        "RANDOM_VAR": "x",
        **TOKENS,
    }
    env, variables = vulkan.build_environment(job("linux"), None, base=base, ccache_dir=tmp_path / "cc")
    assert env["PATH"] == "/usr/bin:/bin" and env["VULKAN_SDK"] == "/opt/vk" and env["CC"] == "gcc-14"
    assert env["NINJA_STATUS"] == "[%f/%t] " and env["CCACHE_DIR"] == str(tmp_path / "cc")
    assert not {"ROCM_PATH", "HIP_PATH", "HIP_PLATFORM", "HIP_DEVICE_LIB_PATH", "RANDOM_VAR", *TOKENS} & set(env)
    assert variables == [
        "NINJA_STATUS",
        "CCACHE_DIR",
        "CCACHE_COMPILERCHECK",
        "CCACHE_NOHASHDIR",
        "VULKAN_SDK",
        "CC",
        "CXX",
        "CMAKE_C_COMPILER_LAUNCHER",
        "CMAKE_CXX_COMPILER_LAUNCHER",
    ]
    # vulkan-shaders-gen, an ExternalProject without GGML_CCACHE's launcher, compiles through ccache too (issue 41)
    assert env["CMAKE_C_COMPILER_LAUNCHER"] == env["CMAKE_CXX_COMPILER_LAUNCHER"] == "ccache"
    assert env["CCACHE_COMPILERCHECK"] == "content"  # the compiler's bytes, not its path and mtime (issue 41)
    # the Vulkan SDK is the Vulkan backend's: a plain host-compiler build does not take it
    plain = host_build_environment("linux", base=base)
    assert "VULKAN_SDK" not in plain and plain["CC"] == "gcc-14" and "CCACHE_DIR" not in plain
    win, _ = vulkan.build_environment(
        job("windows"),
        None,
        base={"Path": r"C:\Windows"},
        msvc={"PATH": r"C:\VS\bin;C:\Windows", "INCLUDE": r"C:\VS\include"},
    )
    assert win["PATH"] == r"C:\VS\bin;C:\Windows" and "Path" not in win and win["INCLUDE"] == r"C:\VS\include"
