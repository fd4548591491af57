"""Benchmark the unchanged-night skip: a full night, then the same night again, in the same run.

The world is the end-to-end test's (tests/support/night.py, used by tests/integration/test_nightly.py): local TheRock
index with small TheRock-layout tarballs whose clang runs the host's gcc, a bare git repository standing in for
llama.cpp, the local GitHub API server. The
full night runs in-process; the unchanged night runs as users run it (`rockbuild nightly ...`, a fresh process).
Goal for the unchanged night: <= 5 s, 0 tarball bytes, 0 compiles.

    python bench/nightly.py          # figures for people
    python bench/nightly.py --json   # the figures as JSON
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

GOAL_SECONDS = 5.0


def tarball_bytes(world) -> int:  # type: ignore[no-untyped-def]
    return sum(world.server.stats(name).bytes_sent for name in world.tarballs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    from conftest import rockbuild_exe  # noqa: E402
    from support.faultserver import FaultServer  # noqa: E402
    from support.github import GitHubAPIServer  # noqa: E402
    from support.night import TOKEN, World  # noqa: E402

    from rockbuild.nightly import run_night  # noqa: E402

    with tempfile.TemporaryDirectory(prefix="rockbuild-bench-nightly-") as tmp:
        base = Path(tmp)
        os.environ["ROCKBUILD_CACHE"] = str(base / "cache")
        with FaultServer() as server, GitHubAPIServer(token=TOKEN) as github:
            world = World(base, server, github)
            matrix = world.matrix("nightly.yaml")

            t0 = time.monotonic()
            full = run_night(world.options(base / "out", matrix))
            full_seconds = time.monotonic() - t0
            full_bytes, full_compiles = tarball_bytes(world), world.compiles()
            if full.state != "published":
                sys.exit(f"the full night did not publish: {full.state}: {full.message}")

            env = {**os.environ, "GITHUB_TOKEN": TOKEN}
            t0 = time.monotonic()
            second = subprocess.run(
                [
                    rockbuild_exe(),
                    "nightly",
                    "-c",
                    str(matrix),
                    "--out",
                    str(base / "out2"),
                    "--index-url",
                    world.index,
                    "--git-url",
                    str(world.bare),
                    "--repo",
                    github.full_name,
                    "--api-url",
                    github.api_url,
                    "--no-smoke",
                    "--json",
                ],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            unchanged_seconds = time.monotonic() - t0
            if second.returncode != 0:
                sys.exit(f"the unchanged night failed: {second.stderr}")
            state = json.loads(second.stdout)["state"]
            figures = {
                "jobs": len(full.jobs),
                "full_night_seconds": round(full_seconds, 2),
                "full_night_tarball_bytes": full_bytes,
                "full_night_compiles": full_compiles,
                "unchanged_night_state": state,
                "unchanged_night_seconds": round(unchanged_seconds, 2),
                "unchanged_night_tarball_bytes": tarball_bytes(world) - full_bytes,
                "unchanged_night_compiles": world.compiles() - full_compiles,
                "ratio": round(unchanged_seconds / full_seconds, 3),
                "goal_seconds": GOAL_SECONDS,
            }
    figures["goal_met"] = (
        figures["unchanged_night_seconds"] <= GOAL_SECONDS
        and figures["unchanged_night_tarball_bytes"] == 0
        and figures["unchanged_night_compiles"] == 0
        and state == "unchanged"
    )
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"full night ({figures['jobs']} jobs): {figures['full_night_seconds']:.2f} s, "
        f"{figures['full_night_tarball_bytes']:,} tarball bytes, {figures['full_night_compiles']} compiles"
    )
    print(
        f"unchanged night: {figures['unchanged_night_seconds']:.2f} s ({state}), "
        f"{figures['unchanged_night_tarball_bytes']:,} tarball bytes, {figures['unchanged_night_compiles']} compiles"
    )
    print(
        f"ratio unchanged/full: {figures['ratio']:.3f}; goal <= {GOAL_SECONDS:.0f} s, 0 bytes, 0 compiles: "
        f"{'met' if figures['goal_met'] else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
