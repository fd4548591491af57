#!/usr/bin/env bash
# The GPU lane's proof on a lent NVIDIA GPU (docs/gpu.md): its steps, here and there, and what each call carries are
# tests/e2e/harness/h200.py (`tests/e2e/h200.sh --help` lists them). This entry point runs it with the project's venv
# here (rockbuild's build and models) and with the device's python3 there (no venv travels).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
py=$HERE/../../.venv/bin/python
[ -x "$py" ] || py=python3
exec "$py" "$HERE/harness/h200.py" "$@"
