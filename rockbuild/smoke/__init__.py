"""Stage 5a, smoke: prove a bundle loads and generates with llama-cli, llama-server and llama-bench.

Runs from the bundle folder with an environment that holds no ROCm paths and no LD_LIBRARY_PATH, so the bundle's own
run paths must do the work. Each run has its own timeout; a hang fails that run only, with its log tail. The GPU
verdict comes from the model buffers (:mod:`.parse`), never from "offloaded N/N layers" or ``</think>``.

Public API: :func:`run_smoke` -> :class:`SmokeReport` (written as ``smoke.json``); parsing in :mod:`.parse`.
"""

from __future__ import annotations

from rockbuild.errors import SmokeError

from .runner import RunRecord, SmokeOptions, SmokeReport, list_devices, run_smoke, smoke_env

__all__ = ["RunRecord", "SmokeError", "SmokeOptions", "SmokeReport", "list_devices", "run_smoke", "smoke_env"]
