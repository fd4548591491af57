"""Stage 5a, smoke: prove a bundle loads and generates with llama-cli, llama-server and llama-bench.

Runs from the bundle folder with an environment that holds no ROCm paths and no LD_LIBRARY_PATH, so the bundle's own
run paths must do the work. Each run has its own timeout; a hang fails that run only, with its log tail. The GPU
verdict comes from the model buffers (:mod:`.parse`), never from "offloaded N/N layers" or ``</think>``.

Entry point: :func:`.runner.run_smoke` -> :class:`.runner.SmokeReport` (written as ``smoke.json``); parsing in
:mod:`.parse`; the children's environment and device listing in :mod:`.probe`.
"""
