"""What the bench scripts that read the end-to-end results share: where tests/e2e/*.sh leave them, running one of
those scripts first (``--run``), and loading one result with a message that says how to make it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

E2E_DIR = Path(__file__).resolve().parent.parent / "tests" / "e2e"


def e2e_root() -> Path:
    """$ROCKBUILD_E2E, where provision.sh put the roots and the scripts put ``bench/``."""
    return Path(os.environ.get("ROCKBUILD_E2E", "/var/cache/rockbuild/e2e"))


def run_e2e(script: str, *args: str) -> None:
    """``tests/e2e/<script> <args>`` at low priority, failing the benchmark when it fails."""
    print(f"--- tests/e2e/{script} {' '.join(args)}", file=sys.stderr, flush=True)
    subprocess.run(["nice", "-n", "10", str(E2E_DIR / script), *args], check=True)


def load_result(path: Path, how: str) -> dict[str, Any]:
    """The JSON result at ``path``; exits with a line naming ``how`` (the command that writes it) when missing."""
    if not path.is_file():
        sys.exit(f"{path} is missing: run `{how}` (or this script with --run) first")
    return json.loads(path.read_text(encoding="utf-8"))
