"""The CMake command line and the child environment of a llama.cpp build, as pure functions of their inputs.

Nothing here runs a build: the driver does. What every build shares is here (the seed flags, the offline swap, the
order rules, the environment allowlist, MSVC on Windows); what a flavour adds (ROCm's compilers and GPU_TARGETS,
Vulkan's GGML_VULKAN) comes from its backend (:mod:`rockbuild.backends`), so all of it can be tested without a GPU,
without ROCm and (for Windows) without Windows.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from rockbuild.core.errors import BuildError, ConfigError
from rockbuild.process import INHERITED, child_env, first_line, is_secret, run

# ---------------------------------------------------------------------------------------------------------------------
# The flags, as data. Order: seed flags (with the backend's swap), then --offline's swap, then what the backend decides
# (compilers, GPU targets), then ccache, the build info, and the job's own extras from the matrix (which win over the
# seed flags and the offline swap).

# What the seed pipeline passes (seed-pipeline.md 1.4), minus its mistakes: CMAKE_CROSSCOMPILING=ON (a native build
# is not a cross build; it disables try_run) and -I/opt/rocm/include in CMAKE_CXX_FLAGS (the HIP package config adds
# the include dir of the real prefix). LLAMA_USE_PREBUILT_UI=OFF: otherwise every build of llama-server downloads the
# web UI from Hugging Face, keyed by the build number. GGML_HIP names the slot of the GPU backend's switch: another
# backend swaps it (and the HIP-only options) for its own.
SEED_DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("CMAKE_BUILD_TYPE", "Release"),
    ("BUILD_SHARED_LIBS", "ON"),
    ("GGML_HIP", "ON"),
    ("GGML_NATIVE", "OFF"),  # never the build host's CPU
    # The CPU backend as loadable modules, one per CPU generation (x64 ... zen4, sapphirerapids): the program loads the
    # best one this machine can run, as llama.cpp's own releases do. One variant would be AVX2 at best (or, with
    # SOURCE_DATE_EPOCH set, which turns GGML_NATIVE's default off and AVX2 with it, plain x86-64).
    ("GGML_BACKEND_DL", "ON"),
    ("GGML_CPU_ALL_VARIANTS", "ON"),
    ("GGML_RPC", "ON"),
    ("GGML_OPENMP", "OFF"),  # no libomp to ship
    ("GGML_HIP_ROCWMMA_FATTN", "OFF"),  # removed upstream (llama.cpp #26046): dropped for trees that lack it
    ("GGML_STATIC", "OFF"),
    # the tests' targets exist, none is built but test-backend-ops, in a step of its own (rockbuild.llamacpp.driver),
    # which the smoke runs against the bundle's backend; the programs and libraries the bundle ships are the same either
    # way
    ("LLAMA_BUILD_TESTS", "ON"),
    ("LLAMA_BUILD_BORINGSSL", "ON"),  # HTTPS in llama-server/-cli with BoringSSL linked statically
    ("LLAMA_USE_PREBUILT_UI", "OFF"),
)

# BoringSSL comes from a FetchContent git clone at configure time, which fails without network; the system OpenSSL
# (>= 3.0) gives the same HTTPS support, as a runtime dependency (libssl3) the bundle must then carry.
OFFLINE_DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("LLAMA_BUILD_BORINGSSL", "OFF"),
    ("LLAMA_OPENSSL", "ON"),
)

# Decided by the job, the backend and the source for every build; a matrix entry that sets them is a mistake (use
# `target` instead). A backend adds its own (Vulkan: GGML_HIP and GGML_VULKAN).
RESERVED_DEFINITIONS = frozenset(
    {
        "GPU_TARGETS",
        "AMDGPU_TARGETS",
        "CMAKE_HIP_ARCHITECTURES",
        "CMAKE_C_COMPILER",
        "CMAKE_CXX_COMPILER",
        "CMAKE_HIP_COMPILER",
        "LLAMA_BUILD_NUMBER",
        "LLAMA_BUILD_COMMIT",
    }
)


def compose_definitions(
    backend: Iterable[tuple[str, str]] = (),
    *,
    swap: Mapping[str, str | None] | None = None,
    reserved: Iterable[str] = (),
    set_by: str = "",
    extra: Iterable[tuple[str, str]] = (),
    offline: bool = False,
    build_info: Mapping[str, str] | None = None,
    ccache: bool = False,
) -> list[tuple[str, str]]:
    """Every -D definition of the configure step, in order, each name once (a later value replaces an earlier one):
    the seed flags (``swap`` renames one, or drops it with None), the offline swap, the ``backend``'s own (compilers,
    GPU targets), ccache, ``build_info``, then the job's ``extra``, none of which may name an entry of
    :data:`RESERVED_DEFINITIONS` or ``reserved`` (``set_by`` says who sets them, in the error)."""
    extra = list(extra)
    forbidden = RESERVED_DEFINITIONS | set(reserved)
    for name, _value in extra:
        if name.upper() in forbidden:
            raise ConfigError(f"the job's cmake option {name} is set by rockbuild {set_by}; remove it from the matrix")
    defs: dict[str, str] = {}
    for name, value in SEED_DEFINITIONS:
        swapped = swap.get(name, name) if swap else name
        if swapped is not None:
            defs[swapped] = value
    if offline:
        defs.update(OFFLINE_DEFINITIONS)
    defs.update(backend)
    # llama.cpp puts ccache in front of every compiler (HIP too) when this is ON and ccache is on PATH
    defs["GGML_CCACHE"] = "ON" if ccache else "OFF"
    defs.update(build_info or {})
    defs.update(extra)
    return list(defs.items())


_SET_TARGET_RE = re.compile(r"^\s*set\s*\(\s*TARGET\s+([A-Za-z0-9_.+-]+)\s*\)", re.M | re.I)
_ADD_EXECUTABLE_RE = re.compile(r"^\s*add_executable\s*\(\s*([A-Za-z0-9_.+-]+)", re.M | re.I)


def executable_targets(source: Path) -> set[str]:
    """Executable targets the tree's tools/, examples/ and app/ define (``set(TARGET x)`` / ``add_executable(x``),
    whether or not this configuration builds them (:func:`configured_targets` says that)."""
    names: set[str] = set()
    for top in ("tools", "examples", "app"):
        base = source / top
        if not base.is_dir():
            continue
        for cmakelists in base.rglob("CMakeLists.txt"):
            text = cmakelists.read_text(encoding="utf-8", errors="replace")
            names.update(_SET_TARGET_RE.findall(text))
            names.update(_ADD_EXECUTABLE_RE.findall(text))
    return names


_NINJA_TARGET_RE = re.compile(r"^([A-Za-z0-9_.+-]+): phony$", re.M)


def configured_targets(ninja_targets_output: str) -> set[str]:
    """The top-level targets of a configured build folder, from ``ninja -t targets all``'s ``name: phony`` lines."""
    return set(_NINJA_TARGET_RE.findall(ninja_targets_output))


def targets_command(build_dir: Path | str) -> list[str]:
    return ["ninja", "-C", str(build_dir), "-t", "targets", "all"]


# ---------------------------------------------------------------------------------------------------------------------
# Definitions the tree does not know. CMake's own warning ("Manually-specified variables were not used by the
# project") never names a GGML_ one: ggml's CMakeLists reads every GGML_* variable to write its package config, which
# counts as a use (checked on b11312: -DFOO_TYPO=1 is named, -DGGML_HIP_ROCWMMA_FATTN=OFF is not). So rockbuild looks
# for each name in the tree's CMake files itself.

_CMAKE_WORD_RE = re.compile(r"\b[A-Z][A-Z0-9_]{2,}\b")


def tree_variables(source: Path) -> frozenset[str]:
    """Every upper-case word of the tree's CMakeLists.txt and *.cmake files: the variables it can read."""
    words: set[str] = set()
    for pattern in ("CMakeLists.txt", "*.cmake"):
        for path in source.rglob(pattern):
            if any(part in {".git", "node_modules"} for part in path.parts):
                continue
            try:
                words.update(_CMAKE_WORD_RE.findall(path.read_text(encoding="utf-8", errors="replace")))
            except OSError:
                continue
    return frozenset(words)


def _ours(name: str) -> bool:
    """A definition CMake itself, or the compilers' toolchain, reads (never looked for in the tree)."""
    return name.startswith("CMAKE_") or name in RESERVED_DEFINITIONS


@dataclass(frozen=True)
class CheckedDefinitions:
    definitions: tuple[tuple[str, str], ...]  # what the configure step passes
    dropped: tuple[str, ...] = ()  # seed flags this tree no longer defines (not passed)
    unknown: tuple[str, ...] = ()  # the job's own (matrix `cmake:`) names the tree does not define (passed, warned)

    def warnings(self) -> list[str]:
        return [
            f"the matrix's cmake option {name} is not used by this llama.cpp tree (no CMake file reads it): "
            "a typo, or an option removed upstream?"
            for name in self.unknown
        ]


def check_definitions(
    definitions: Sequence[tuple[str, str]], known: frozenset[str], *, extra: Sequence[str] = ()
) -> CheckedDefinitions:
    """Drop the seed flags ``known`` (:func:`tree_variables`) lacks; keep, and name, the job's ``extra`` ones it
    lacks (the user asked for them); pass everything else (the backend's compilers and targets) as it is."""
    seed = {name for name, _ in SEED_DEFINITIONS} | {name for name, _ in OFFLINE_DEFINITIONS}
    extra_names = {name.upper() for name in extra}
    kept: list[tuple[str, str]] = []
    dropped: list[str] = []
    unknown: list[str] = []
    for name, value in definitions:
        if _ours(name) or name in known:
            kept.append((name, value))
        elif name.upper() in extra_names:
            kept.append((name, value))
            unknown.append(name)
        elif name in seed:
            dropped.append(name)
        else:
            kept.append((name, value))
    return CheckedDefinitions(tuple(kept), tuple(dropped), tuple(unknown))


_UNUSED_HEADER = "Manually-specified variables were not used by the project"


class UnusedVariables:
    """Reads CMake's "Manually-specified variables were not used by the project:" block from configure's output."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._inside = False

    def on_line(self, line: str) -> None:
        if _UNUSED_HEADER in line:
            self._inside = True
            return
        if not self._inside:
            return
        stripped = line.strip()
        if not stripped:
            if self.names:
                self._inside = False
            return
        if line[:1].isspace() and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", stripped):
            if stripped not in self.names:
                self.names.append(stripped)
        else:
            self._inside = False

    def warnings(self, ours: Iterable[str] = ()) -> list[str]:
        """One line per unused name, but those rockbuild set itself (``ours``: a HIP flag in a tree without HIP is
        no mistake of the user's)."""
        ours = {n.upper() for n in ours}
        return [
            f'CMake did not use the option {name} ("Manually-specified variables were not used by the '
            "project\"): a typo in the matrix's cmake, or an option the tree no longer has?"
            for name in self.names
            if name.upper() not in ours
        ]


# ---------------------------------------------------------------------------------------------------------------------
# CMake command lines


def configure_command(
    source: Path | str, build_dir: Path | str, definitions: Iterable[tuple[str, str]], *, cmake: str = "cmake"
) -> list[str]:
    return [cmake, "-S", str(source), "-B", str(build_dir), "-G", "Ninja", *(f"-D{k}={v}" for k, v in definitions)]


def compile_command(
    build_dir: Path | str, targets: Sequence[str], *, jobs: int | None = None, cmake: str = "cmake"
) -> list[str]:
    command = [cmake, "--build", str(build_dir), "--target", *targets]
    if jobs:
        command += ["--parallel", str(jobs)]
    return command


# ---------------------------------------------------------------------------------------------------------------------
# Environment


def _find_key(env: Mapping[str, str], key: str, windows: bool) -> str | None:
    if not windows:
        return key if key in env else None
    return next((k for k in env if k.upper() == key.upper()), None)


def _put(env: dict[str, str], key: str, value: str, windows: bool) -> None:
    """Set ``key``; on Windows, where names ignore case, drop every other spelling (``Path`` vs ``PATH``) first."""
    if windows:
        for k in [k for k in env if k.upper() == key.upper()]:
            del env[k]
    env[key] = value


def _prepend_path(current: str, entries: Sequence[str], windows: bool) -> str:
    sep = ";" if windows else ":"
    parts = [p for p in current.split(sep) if p]
    norm = (lambda p: p.rstrip("\\/").lower()) if windows else (lambda p: p.rstrip("/"))
    new = [e for e in entries if norm(e) not in {norm(p) for p in parts}]
    return sep.join([*dict.fromkeys(new), *parts])


# A build with the host's compiler also takes these from the caller: CC/CXX, CMake's standard way of choosing another
# host compiler (a backend adds its own, e.g. the Vulkan SDK).
HOST_BUILD_INHERITED = ("CC", "CXX")


# ccache judges the compiler by its bytes, not its path and mtime: every TheRock nightly unpacks the same clang under
# a new path with a new mtime, which ccache's default (compiler_check = mtime) calls a new compiler. The content hash
# is computed once per binary (ccache's inode cache). Nor is the working folder hashed (a compile with -g hashes it by
# default): a runner's out/ may sit elsewhere each night; only the debug info's DW_AT_comp_dir can then differ.
CCACHE_IDENTITY = {"CCACHE_COMPILERCHECK": "content", "CCACHE_NOHASHDIR": "1"}


def host_build_variables(ccache_dir: Path | str | None = None) -> dict[str, str]:
    """The variables rockbuild sets for every build, and all it sets for one with the host's compiler (no ROCm)."""
    variables = {"NINJA_STATUS": "[%f/%t] "}  # the progress parser reads [finished/total]
    if ccache_dir is not None:
        variables.update(CCACHE_DIR=str(ccache_dir), **CCACHE_IDENTITY)
    return variables


def compose_environment(
    windows: bool,
    variables: Mapping[str, str],
    *,
    base: Mapping[str, str] | None,
    msvc: Mapping[str, str] | None,
    inherit: Sequence[str] = INHERITED,
    path_entries: Sequence[str] = (),
) -> dict[str, str]:
    """The allowlist of ``base`` (plus ``inherit``), then MSVC's variables, then ``variables``, ``path_entries`` in
    front of PATH. Secrets never survive, wherever they came from."""
    env = child_env(base=base, inherit=inherit)
    for key, value in [*(msvc or {}).items(), *variables.items()]:
        _put(env, key, value, windows)
    if path_entries:
        path_key = _find_key(env, "PATH", windows) or "PATH"  # Windows keeps its spelling (Path)
        _put(env, path_key, _prepend_path(env.get(path_key, ""), path_entries, windows), windows)
    return {k: v for k, v in env.items() if not is_secret(k)}


def host_build_environment(
    platform: str,
    *,
    base: Mapping[str, str] | None = None,
    msvc: Mapping[str, str] | None = None,
    ccache_dir: Path | str | None = None,
    inherit: Sequence[str] = HOST_BUILD_INHERITED,
) -> dict[str, str]:
    """The environment of cmake and ninja for a build with the host's compiler: the allowlist of ``base`` (plus
    ``inherit``), MSVC (Windows), ccache; PATH as it is (the host's compiler and tools are found where the host put
    them)."""
    return compose_environment(
        platform == "windows", host_build_variables(ccache_dir), base=base, msvc=msvc, inherit=(*INHERITED, *inherit)
    )


# ---------------------------------------------------------------------------------------------------------------------
# Windows: the MSVC environment (link.exe, the Windows SDK's headers and libraries) comes from vcvars64.bat, which only
# changes the environment of the cmd.exe that runs it; a script runs it and prints `set` after a marker line.

VSWHERE_RELATIVE = r"Microsoft Visual Studio\Installer\vswhere.exe"
MSVC_COMPONENT = "Microsoft.VisualStudio.Component.VC.Tools.x86.x64"
SET_MARKER = "===rockbuild-msvc-environment==="


def vswhere_command(program_files_x86: str) -> list[str]:
    return [
        str(PureWindowsPath(program_files_x86) / VSWHERE_RELATIVE),
        "-latest",
        "-products",
        "*",
        "-requires",
        MSVC_COMPONENT,
        "-property",
        "installationPath",
    ]


def vcvars_from_vswhere(output: str) -> PureWindowsPath:
    """vcvars64.bat of the first installation vswhere printed."""
    paths = [line.strip() for line in output.splitlines() if line.strip()]
    if not paths:
        raise BuildError(
            "vswhere found no Visual Studio with the C++ x64 tools; install the Build Tools with the "
            f"'Desktop development with C++' workload ({MSVC_COMPONENT})"
        )
    return PureWindowsPath(paths[0]) / "VC" / "Auxiliary" / "Build" / "vcvars64.bat"


def vcvars_script(vcvars: PureWindowsPath | Path | str) -> str:
    """A .cmd file: run vcvars64.bat, stop on failure, then print the resulting environment after a marker."""
    return "\r\n".join(
        [
            "@echo off",
            f'call "{vcvars}" >nul',
            "if errorlevel 1 exit /b %errorlevel%",
            f"echo {SET_MARKER}",
            "set",
            "",
        ]
    )


def parse_set_output(text: str) -> dict[str, str]:
    """``NAME=value`` lines printed by cmd's ``set`` (after the marker, if there is one)."""
    if SET_MARKER in text:
        text = text.split(SET_MARKER, 1)[1]
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.rstrip("\r")
        if "=" not in line or line.startswith("="):
            continue
        key, value = line.split("=", 1)
        env[key] = value
    return env


def msvc_delta(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, str]:
    """What vcvars added or changed (names compared without case, as Windows does), minus anything secret."""
    upper_before = {k.upper(): v for k, v in before.items()}
    return {k: v for k, v in after.items() if upper_before.get(k.upper()) != v and not is_secret(k)}


def capture_msvc_environment(
    scratch: Path, *, vcvars: Path | None = None, base: Mapping[str, str] | None = None, log: Path | None = None
) -> dict[str, str]:
    """Run vcvars64.bat (found via vswhere unless given) and return the variables it set. Windows only."""
    start_env = child_env(base=base)
    if vcvars is None:
        program_files_x86 = start_env.get("PROGRAMFILES(X86)") or next(
            (v for k, v in start_env.items() if k.upper() == "PROGRAMFILES(X86)"), r"C:\Program Files (x86)"
        )
        found = run(vswhere_command(program_files_x86), env=start_env, log=log, timeout=60)
        vcvars_path: PureWindowsPath | Path = vcvars_from_vswhere(found.output)
    else:
        vcvars_path = vcvars
    script = scratch / "rockbuild-vcvars.cmd"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(vcvars_script(vcvars_path), encoding="utf-8", newline="")
    result = run(["cmd.exe", "/d", "/c", str(script)], env=start_env, log=None, timeout=300, check=False)
    if result.returncode != 0 or SET_MARKER not in result.output:
        raise BuildError(f"{vcvars_path} failed (exit code {result.returncode}); is the MSVC x64 toolset installed?")
    return msvc_delta(start_env, parse_set_output(result.output))


def host_compilers(env: Mapping[str, str], windows: bool) -> dict[str, str]:
    """The first line of the host compilers' --version (CC/CXX when set, else cc/c++); on Windows CMake finds cl."""
    if windows:
        return {}
    path = env.get("PATH", "")
    out: dict[str, str] = {}
    for what, variable, default in (("c", "CC", "cc"), ("cxx", "CXX", "c++")):
        program = env.get(variable) or default
        if shutil.which(program, path=path) is None:
            raise BuildError(f"no C/C++ compiler: {program} is not on PATH; install gcc/g++ (or set {variable})")
        out[what] = first_line([program, "--version"], env)
    return out
