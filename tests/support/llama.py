"""The stand-in llama.cpp: a small real CMake project (ggml, the shipped tools and one that is not shipped) that the
build driver configures and compiles with the host's gcc/g++. It records the -D values and the environment it saw, at
configure time (seen-at-configure.txt, read by ``read_seen``) and at build time (env-at-build.txt)."""

from __future__ import annotations

from pathlib import Path

from support.files import write
from support.git import git

TOP_CMAKELISTS = r"""
cmake_minimum_required(VERSION 3.20)
project(fake_llama C CXX)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
if(FAIL_CONFIGURE)
    message(FATAL_ERROR "configure fails on purpose")
endif()
if(LLAMA_OPENSSL)
    message(WARNING "OpenSSL not found, HTTPS support disabled")  # what llama.cpp says without libssl-dev
endif()
# what llama.cpp's ggml/src/CMakeLists.txt does with GGML_CCACHE
if(GGML_CCACHE)
    find_program(GGML_CCACHE_FOUND ccache)
    if(GGML_CCACHE_FOUND)
        set_property(GLOBAL PROPERTY RULE_LAUNCH_COMPILE "${GGML_CCACHE_FOUND}")
    endif()
endif()
set(SEEN ${CMAKE_BINARY_DIR}/seen-at-configure.txt)
file(WRITE ${SEEN} "")
foreach(v CMAKE_BUILD_TYPE BUILD_SHARED_LIBS GGML_HIP GGML_NATIVE GGML_RPC GGML_OPENMP GGML_HIP_ROCWMMA_FATTN
          LLAMA_BUILD_TESTS LLAMA_BUILD_BORINGSSL LLAMA_OPENSSL LLAMA_USE_PREBUILT_UI GPU_TARGETS CMAKE_HIP_COMPILER
          CMAKE_C_COMPILER CMAKE_CXX_COMPILER LLAMA_BUILD_NUMBER LLAMA_BUILD_COMMIT GGML_CCACHE MY_EXTRA FAIL_COMPILE)
    file(APPEND ${SEEN} "${v}=${${v}}\n")
endforeach()
foreach(e ROCM_PATH HIP_PATH HIP_PLATFORM HIP_DEVICE_LIB_PATH CCACHE_DIR PATH GITHUB_TOKEN GH_TOKEN HF_TOKEN)
    file(APPEND ${SEEN} "ENV:${e}=$ENV{${e}}\n")
endforeach()
# the environment of a command ninja runs
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/env-at-build.txt
    COMMAND ${CMAKE_COMMAND} -E environment > ${CMAKE_BINARY_DIR}/env-at-build.txt)
add_library(ggml SHARED ggml/ggml.cpp ggml/ggml-base.c ${CMAKE_BINARY_DIR}/env-at-build.txt)
if(FAIL_COMPILE)
    target_compile_definitions(ggml PRIVATE FAIL_COMPILE)
endif()
# a backend's own library, as ggml's are (linked against the core, loaded by it at run time): the third backend's
# and Vulkan's (what a job on a common part compiles alone)
foreach(backend blas vulkan)
    string(TOUPPER ${backend} option)
    if(GGML_${option})
        add_library(ggml-${backend} SHARED ggml/ggml-backend.c)
        target_link_libraries(ggml-${backend} PRIVATE ggml)
    endif()
endforeach()
add_subdirectory(tools/cli)
add_subdirectory(tools/server)
add_subdirectory(tools/llama-bench)
add_subdirectory(tools/rpc)
add_subdirectory(tools/completion)
add_executable(llama-not-shipped tools/main.cpp)
# what llama.cpp's tests/CMakeLists.txt does for its op test (make_project(op_test=True) writes the source)
if(LLAMA_BUILD_TESTS AND EXISTS ${CMAKE_SOURCE_DIR}/tests/test-backend-ops.cpp)
    add_executable(test-backend-ops tests/test-backend-ops.cpp)
    target_link_libraries(test-backend-ops PRIVATE ggml)
    if(FAIL_OP_TEST)
        target_compile_definitions(test-backend-ops PRIVATE FAIL_COMPILE)
    endif()
endif()
"""

TOOL_CMAKELISTS = """
set(TARGET {name})
add_executable(${{TARGET}} ../main.cpp)
target_link_libraries(${{TARGET}} PRIVATE ggml)
"""


def make_project(root: Path, *, rpc_name: str = "ggml-rpc-server", op_test: bool = False) -> Path:
    """The stand-in tree; ``op_test``: with tests/test-backend-ops.cpp (its target exists with LLAMA_BUILD_TESTS=ON;
    -DFAIL_OP_TEST=ON makes its compile fail)."""
    write(root / "CMakeLists.txt", TOP_CMAKELISTS)
    if op_test:
        write(
            root / "tests" / "test-backend-ops.cpp",
            """
            #ifdef FAIL_COMPILE
            #error "the op test fails to compile on purpose"
            #endif
            int ggml_answer();
            int main() { return ggml_answer() == 42 ? 0 : 1; }
        """,
        )
    write(
        root / "ggml" / "ggml.cpp",
        """
        #ifdef FAIL_COMPILE
        #error "compile fails on purpose"
        #endif
        extern "C" int ggml_base(void);
        int ggml_answer() { return ggml_base() + 1; }
    """,
    )
    write(root / "ggml" / "ggml-base.c", "int ggml_base(void) { return 41; }\n")
    write(
        root / "ggml" / "ggml-backend.c",
        "int ggml_base(void);\nint ggml_backend_answer(void) { return ggml_base() + 1; }\n",
    )
    write(root / "tools" / "main.cpp", "int ggml_answer();\nint main() { return ggml_answer() == 42 ? 0 : 1; }\n")
    for directory, name in (
        ("cli", "llama-cli"),
        ("server", "llama-server"),
        ("llama-bench", "llama-bench"),
        ("rpc", rpc_name),
        ("completion", "llama-completion"),
    ):
        write(root / "tools" / directory / "CMakeLists.txt", TOOL_CMAKELISTS.format(name=name))
    return root


def read_seen(build_dir: Path) -> dict[str, str]:
    lines = (build_dir / "seen-at-configure.txt").read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines)


def llama_repository(work: Path, bare: Path) -> Path:
    """Commit the stand-in project in ``work`` as llama.cpp's b1000 (tagged) and clone it bare to ``bare``."""
    git("init", "-q", "-b", "master", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-qm", "b1000", cwd=work)
    git("tag", "b1000", cwd=work)
    git("clone", "-q", "--bare", str(work), str(bare), cwd=bare.parent)
    return bare
