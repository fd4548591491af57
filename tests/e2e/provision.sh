#!/usr/bin/env bash
# Provision the roots the end-to-end proofs run in (tests/e2e/README.md): `sudo tests/e2e/provision.sh
# [rocm|vulkan|windows|webui|all]`. The steps are tests/e2e/harness/provision.py (`--help` says what each group
# makes); the host's python3, standard library only: it runs before any venv exists.
set -euo pipefail
exec python3 "$(cd "$(dirname "$0")" && pwd)/harness/provision.py" "$@"
