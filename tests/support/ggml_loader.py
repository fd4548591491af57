"""ggml's own backend loader, built from the llama.cpp source in the cache, with CPU variant modules made here.

``ggml/src/ggml-backend-reg.cpp`` and ``ggml-backend-dl.cpp`` (the code that searches the program's folder and the
current folder for ``libggml-<name>-*.so``, scores each and loads the best) are compiled as they are, with NDEBUG as
in a release, into a program named llama-bench; the nine libggml-base functions they call are small stand-ins. The
modules are real ``ggml_backend_init``/``ggml_backend_score`` modules whose registry is named CPU; a module made with
``trap`` executes an illegal instruction (ud2) when the program runs a batch of 512 tokens or more, so the SIGILL is
a real one. The program prints what llama-bench prints that rockbuild reads: ``Available devices:`` for
``--list-devices``, else a JSON result for ``-p N`` (and ``-n N``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

GGML = Path("/var/cache/rockbuild/src/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml")

STUBS = r"""
#include "ggml-backend-impl.h"
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
extern "C" {
void ggml_log_internal(enum ggml_log_level level, const char * format, ...) {
    (void) level;
    va_list args;
    va_start(args, format);
    vfprintf(stderr, format, args);
    va_end(args);
}
void ggml_abort(const char * file, int line, const char * fmt, ...) {
    fprintf(stderr, "%s:%d: abort\n", file, line);
    (void) fmt;
    abort();
}
const char * ggml_backend_reg_name(ggml_backend_reg_t reg) { return reg->iface.get_name(reg); }
size_t ggml_backend_reg_dev_count(ggml_backend_reg_t reg) { return reg->iface.get_device_count(reg); }
ggml_backend_dev_t ggml_backend_reg_dev_get(ggml_backend_reg_t reg, size_t i) { return reg->iface.get_device(reg, i); }
const char * ggml_backend_dev_name(ggml_backend_dev_t) { return "none"; }
enum ggml_backend_dev_type ggml_backend_dev_type(ggml_backend_dev_t) { return GGML_BACKEND_DEVICE_TYPE_CPU; }
ggml_backend_reg_t ggml_backend_dev_backend_reg(ggml_backend_dev_t) { return nullptr; }
ggml_backend_t ggml_backend_dev_init(ggml_backend_dev_t, const char *) { return nullptr; }
}
"""

MAIN = r"""
#include "ggml-backend-impl.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
int main(int argc, char ** argv) {
    ggml_backend_load_all();
    int n_prompt = 512, n_gen = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--list-devices")) { printf("Available devices:\n  (none)\n"); return 0; }
        if (!strcmp(argv[i], "-p") && i + 1 < argc) { n_prompt = atoi(argv[i + 1]); }
        if (!strcmp(argv[i], "-n") && i + 1 < argc) { n_gen = atoi(argv[i + 1]); }
    }
    ggml_backend_reg_t cpu = ggml_backend_reg_by_name("CPU");
    if (!cpu) { fprintf(stderr, "error: no CPU backend\n"); return 1; }
    auto batch = (double (*)(int)) cpu->iface.get_proc_address(cpu, "fake_batch");
    double ts = batch(n_prompt);
    printf("[\n  {\"n_prompt\": %d, \"n_gen\": 0, \"avg_ts\": %.1f, \"stddev_ts\": 0.0, \"backends\": \"CPU\"}",
           n_prompt, ts);
    if (n_gen > 0) {  // -n N: a tg row too, a tenth as fast
        printf(",\n  {\"n_prompt\": 0, \"n_gen\": %d, \"avg_ts\": %.1f, \"stddev_ts\": 0.0, \"backends\": \"CPU\"}",
               n_gen, ts / 10);
    }
    printf("\n]\n");
    return 0;
}
"""

MODULE = r"""
#include "ggml-backend-impl.h"
static const char * get_name(ggml_backend_reg_t) { return "CPU"; }
static size_t get_device_count(ggml_backend_reg_t) { return 0; }
static ggml_backend_dev_t get_device(ggml_backend_reg_t, size_t) { return nullptr; }
static double fake_batch(int n_prompt) {
    if (TRAP && n_prompt >= 512) { __builtin_trap(); }  // ud2 on x86: a real SIGILL
    return SPEED;
}
static void * get_proc_address(ggml_backend_reg_t, const char * name) {
    return __builtin_strcmp(name, "fake_batch") == 0 ? (void *) fake_batch : nullptr;
}
static ggml_backend_reg reg = {GGML_BACKEND_API_VERSION, {get_name, get_device_count, get_device, get_proc_address},
                               nullptr};
static ggml_backend_reg_t cpu_reg() { return &reg; }
static int cpu_score() { return SCORE; }
GGML_BACKEND_DL_IMPL(cpu_reg)
GGML_BACKEND_DL_SCORE_IMPL(cpu_score)
"""


def _gxx() -> str:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed (apt-get install g++)")
    if not (GGML / "src" / "ggml-backend-reg.cpp").is_file():
        pytest.skip(f"the llama.cpp source is not at {GGML.parent} (tests/unit/test_model.py's cache)")
    return gxx


def _compile(out: Path, source: str, *flags: str) -> Path:
    src = out.with_name(out.name + ".cpp")
    src.write_text(source, encoding="utf-8")
    args = [
        _gxx(),
        "-std=c++17",
        "-O1",
        "-DNDEBUG",
        "-DGGML_BACKEND_DL",
        "-DGGML_BACKEND_SHARED",
        "-DGGML_BACKEND_BUILD",
        f"-I{GGML / 'include'}",
        f"-I{GGML / 'src'}",
        *flags,
        "-o",
        str(out),
        str(src),
    ]
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=300)
    src.unlink()
    return out


def build_loader(out: Path) -> Path:
    """``out`` (named llama-bench): ggml_backend_load_all() from the llama.cpp source, then one batch on the CPU
    backend it loaded."""
    stubs = _compile(out.with_name("ggml-stubs.o"), STUBS, "-c", "-fPIC")
    return _compile(
        out,
        MAIN,
        str(GGML / "src" / "ggml-backend-reg.cpp"),
        str(GGML / "src" / "ggml-backend-dl.cpp"),
        str(stubs),
        "-ldl",
    )


def build_module(out: Path, *, score: int, speed: float = 100.0, trap: bool = False) -> Path:
    """A CPU backend module at ``out`` that scores ``score`` (0: this CPU cannot run it)."""
    return _compile(out, MODULE, "-shared", "-fPIC", f"-DSCORE={score}", f"-DSPEED={speed}", f"-DTRAP={int(trap)}")
