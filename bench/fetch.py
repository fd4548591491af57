"""Benchmark the fetch stage against the pipeline it replaces, both measured in this run on the same server and file.

Baseline: ``curl -s URL | tar -xzf - -C DIR`` (what the seed pipeline runs, minus sudo). rockbuild: ``fetch_rocm``
with every safety check on and the tarball kept in the cache. Also: bytes moved by a download cut at ~50% and
resumed, and a second fetch of the same version. The tarball (~1.26 GB gzip, ~2.3 GB, ~8,900 members, TheRock layout)
is generated once under the bench cache and served from memory by a separate process (tests/support/faultserver.py).

    python bench/fetch.py [--workdir /var/cache/rockbuild/bench] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from therock_tarball import make_therock_tarball  # noqa: E402

NAME = "therock-dist-linux-gfx1151-10.2.0a20261128.tar.gz"
GOAL_RATIO = 0.8

SERVER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from support.faultserver import Fault, FaultServer
data = open(sys.argv[2], "rb").read()
name = sys.argv[3]
with FaultServer() as srv:
    srv.add(name, data)
    files = [{"name": name, "mtime": 1764300000.0}]
    srv.add_text("index.html", "<script>const files = " + json.dumps(files) + ";</script>")
    print(json.dumps({"index": srv.url_for("index.html"), "file": srv.url_for(name)}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "cut":
            srv.inject(name, Fault.cut(after=int(cmd[1])))
            print("{}", flush=True)
        elif cmd[0] == "stats":
            s = srv.stats(name)
            print(json.dumps({"requests": s.requests, "bytes_sent": s.bytes_sent}), flush=True)
"""


class Server:
    def __init__(self, tarball: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(HERE.parent / "tests"), str(tarball), NAME],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.urls = json.loads(self.proc.stdout.readline())

    def ask(self, command: str) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def timed(fn) -> tuple[float, object]:
    start = time.monotonic()
    result = fn()
    return time.monotonic() - start, result


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/var/cache/rockbuild/bench"))
    parser.add_argument("--keep", action="store_true", help="keep the extracted trees")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of baseline and rockbuild (median)")
    args = parser.parse_args()

    from rockbuild.rocm.fetch import fetch_rocm

    work: Path = args.workdir
    info = make_therock_tarball(work / NAME)
    size = int(info["size"])
    extracted = int(info["extracted_bytes"]) / 1e9
    print(f"tarball: {size / 1e9:.2f} GB gzip, {extracted:.2f} GB in {info['members']} members")
    for tool in ("curl", "tar"):
        if not shutil.which(tool):
            print(f"error: {tool} is needed for the baseline", file=sys.stderr)
            return 2
    sel = ["gfx1151"]  # the tarball groups of gfx1151
    server = Server(work / NAME)
    try:
        # warm the server's and the kernel's caches identically for both contenders
        subprocess.run(["curl", "-s", "-o", "/dev/null", server.urls["file"]], check=True)

        # alternate the two contenders so that disk write-back and other load hit both alike; report medians
        baselines: list[float] = []
        ours_runs: list[float] = []
        cache = work / "cache-a"
        for _ in range(max(1, args.rounds)):
            base_dir = fresh(work / "baseline-tree")
            pipeline = f"curl -s {server.urls['file']} | tar -xzf - -C {base_dir}"
            took, _ = timed(lambda cmd=pipeline: subprocess.run(cmd, shell=True, check=True))
            baselines.append(took)
            shutil.rmtree(base_dir)
            subprocess.run(["sync"], check=True)
            cache = fresh(work / "cache-a")
            took, result = timed(
                lambda c=cache: fetch_rocm(sel, os_name="linux", index_url=server.urls["index"], cache=c)
            )
            ours_runs.append(took)
            assert result.extracted and result.sha256 == info["sha256"], result  # type: ignore[attr-defined]
            subprocess.run(["sync"], check=True)
        baseline, ours = statistics.median(baselines), statistics.median(ours_runs)

        second, again = timed(lambda: fetch_rocm(sel, os_name="linux", index_url=server.urls["index"], cache=cache))

        # a download cut at ~50%: the downloader resumes with Range in the same call
        cache_b = fresh(work / "cache-b")
        before = server.ask("stats")
        server.ask(f"cut {size // 2}")
        resumed_time, resumed = timed(
            lambda: fetch_rocm(sel, os_name="linux", index_url=server.urls["index"], cache=cache_b)
        )
        after = server.ask("stats")
    finally:
        server.close()

    sent = after["bytes_sent"] - before["bytes_sent"]
    requests = after["requests"] - before["requests"]
    # what the resumed request carried = everything sent minus the first (cut) response; a TCP reset also throws
    # away what was in flight, so the client resumes a little before the cut: "missing" is measured from its .part
    resumed_bytes = sent - size // 2
    decompressor = "pigz" if shutil.which("pigz") else "python zlib"
    figures = {
        "baseline_curl_pipe_tar_s": round(baseline, 2),
        "rockbuild_fetch_s": round(ours, 2),
        "baseline_runs_s": [round(t, 2) for t in baselines],
        "rockbuild_runs_s": [round(t, 2) for t in ours_runs],
        "ratio": round(ours / baseline, 3),
        "goal_ratio": GOAL_RATIO,
        "decompressor": decompressor,
        "second_fetch_s": round(second, 3),
        "second_fetch_tarball_bytes": again.transferred,  # type: ignore[attr-defined]
        "resume_requests": requests,
        "resume_cut_at": size // 2,
        "resume_bytes_after_cut": resumed_bytes,
        "resume_from_offset": resumed.resumed_from,  # type: ignore[attr-defined]
        "resume_lost_in_the_cut": size // 2 - resumed.resumed_from,  # type: ignore[attr-defined]
        "resume_missing_bytes": size - resumed.resumed_from,  # type: ignore[attr-defined]
        "resume_extra_bytes": resumed_bytes - (size - resumed.resumed_from),  # type: ignore[attr-defined]
        "resume_total_s": round(resumed_time, 2),
        "resume_ok": resumed.sha256 == info["sha256"],  # type: ignore[attr-defined]
    }
    print(json.dumps(figures, indent=2))
    print(
        f"fetch (median of {len(ours_runs)}): rockbuild {ours:.1f}s vs curl|tar {baseline:.1f}s "
        f"-> ratio {ours / baseline:.2f}x "
        f"(goal <= {GOAL_RATIO}x); second fetch {second:.2f}s, {again.transferred} tarball bytes; "  # type: ignore[attr-defined]
        f"resume after a cut at 50%: {figures['resume_extra_bytes']:+,} bytes beyond the missing ones"
    )
    if not args.keep:
        for d in ("cache-a", "cache-b"):
            shutil.rmtree(work / d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("CI", "1")  # plain progress lines
    sys.exit(main())
