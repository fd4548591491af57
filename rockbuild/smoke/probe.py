"""What the bundle's programs run with, and the devices they see: the children's environment without ROCm, one run of
a program to completion under a timeout (a crash named by its signal), and ``llama-cli --list-devices``. The smoke
stage (:mod:`.runner`) and the backends' device checks share them."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from rockbuild.core.environment import environment
from rockbuild.process import ProcessError, child_env, run

from .parse import parse_list_devices

# PATH entries that would let a bundle find a ROCm install instead of its own libraries
_ROCM_PATH_ENTRY = re.compile(r"rocm|therock|[\\/]hip[\\/]|amdgpu", re.I)


_ROCM_VARIABLES = (
    "ROCM_PATH",
    "ROCM_HOME",
    "HIP_PATH",
    "HIP_DEVICE_LIB_PATH",
    "HSA_PATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "DYLD_LIBRARY_PATH",
    "WINEPATH",
)  # WINEPATH: wine's DLL search path, its PATH


# Device selection the user set on purpose passes through (lavapipe is only used with GGML_VK_VISIBLE_DEVICES set;
# an iGPU listed first is skipped with HIP_VISIBLE_DEVICES): they choose a device, they do not supply libraries.
# DISPLAY: a Windows Vulkan bundle under wine reaches the host's Vulkan driver only through wine's X11 driver
DEVICE_SELECTION = (
    "GGML_VK_VISIBLE_DEVICES",
    "VK_ICD_FILENAMES",
    "VK_DRIVER_FILES",
    "MESA_SHADER_CACHE_DIR",
    "XDG_CACHE_HOME",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "DISPLAY",
)


def bundle_program(bundle: Path, name: str) -> Path:
    """The bundle's program ``name``: ``name.exe`` on Windows, and in a Windows bundle on Linux (run under wine:
    :func:`rockbuild.process.launch_command`); else ``name``."""
    exe = bundle / f"{name}.exe"
    if os.name == "nt" or (exe.is_file() and not (bundle / name).is_file()):
        return exe
    return bundle / name


def list_devices(
    exe: Path, *, cwd: Path, env: Mapping[str, str], log: Path, timeout: float = 120.0
) -> tuple[list[tuple[str, str]], str | None]:
    """The devices the bundle's llama-cli can use (``--list-devices``), or why it could not tell (it did not start:
    e.g. no Vulkan loader on the host)."""
    output, _, failure, _ = run_program(
        "devices", [str(exe), "--list-devices"], cwd=cwd, env=env, timeout=timeout, log=log
    )
    if failure:
        lines = [line.strip() for line in (output or "").splitlines() if line.strip()]
        why = next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else failure)
        return [], f"{exe.name} --list-devices failed ({failure}): {why}"
    return parse_list_devices(output or ""), None


def smoke_env(base: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The children's environment: the allowlist of :func:`child_env`, no ROCm variables, no ROCm PATH entries.
    Returns the environment and what was removed (for the report)."""
    source = base if base is not None else environment()
    env = child_env(base=base)
    env.update({name: source[name] for name in DEVICE_SELECTION if name in source})
    removed = [name for name in _ROCM_VARIABLES if name in source]
    for name in _ROCM_VARIABLES:
        env.pop(name, None)
    if "PATH" in env:
        kept: list[str] = []
        dropped: list[str] = []
        for entry in env["PATH"].split(os.pathsep):
            (dropped if _ROCM_PATH_ENTRY.search(entry) else kept).append(entry)
        env["PATH"] = os.pathsep.join(kept)
        removed.extend(f"PATH entry {d}" for d in dropped)
    return env, removed


def run_program(
    name: str, args: list[str], *, cwd: Path, env: Mapping[str, str], timeout: float, log: Path
) -> tuple[str | None, int | None, str | None, float]:
    """(output, return code, failure, seconds) of one run to completion under a timeout. ``log`` holds this run only
    (the runner appends to it): a failed run's output is read back from it, never an earlier smoke's."""
    log.unlink(missing_ok=True)
    start = time.monotonic()
    try:
        result = run(args, cwd=cwd, env=env, timeout=timeout, log=log, check=False)
    except ProcessError as exc:
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        reason = f"timed out after {timeout:.0f}s" if "timed out" in exc.message else exc.message
        return text, exc.returncode, reason, time.monotonic() - start
    failure = None if result.returncode == 0 else exit_reason(result.returncode)
    return result.output, result.returncode, failure, result.seconds


def exit_reason(returncode: int) -> str:
    """``exit code 1``, or ``killed by SIGSEGV (exit code -11)`` for a program a signal ended (a crash)."""

    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name} (exit code {returncode})"
        except ValueError:
            pass
    return f"exit code {returncode}"
