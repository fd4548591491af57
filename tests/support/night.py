"""The world of a test night (tests/integration/test_nightly.py, and bench/nightly.py): a TheRock index page with small
TheRock-layout tarballs whose "clang" runs the host's gcc (and counts its calls), the stand-in llama.cpp project
committed as b1000 in a bare git repository, and the local GitHub API server."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest

from rockbuild.nightly import NightOptions
from support.faultserver import FaultServer
from support.files import write
from support.git import git
from support.github import GitHubAPIServer
from support.index import links_page
from support.llama import llama_repository, make_project
from support.options import night_options
from support.trees import gcc_therock, tar_tree
from support.webui import write_dist

TOKEN = "ghp_NightlyTestToken0123456789SECRET"
TODAY = datetime.datetime.now(datetime.UTC).date()
VERSION = f"7.2.0a{TODAY:%Y%m%d}"
MATRIX = """
options:
  cmake: {cmake}
matrix:
  os: [linux]
  target: [gfx1151, gfx1150]
  include:
    - {{target: gfx1150, required: false{optional_extra}}}
"""
# the programs the stand-in llama.cpp defines (support/llama.py), as a programs.yaml: what its release ships whole
PROGRAMS = """
ship:
  - {target: llama-cli, required: true, check: [--version]}
  - {target: llama-server, required: true, check: [--version]}
  - {target: llama-bench, required: true}
  - {target: ggml-rpc-server, required: true, aliases: [rpc-server]}
  - {target: llama-completion}
"""


class World:
    def __init__(self, base: Path, server: FaultServer, github: GitHubAPIServer) -> None:
        self.base, self.server, self.github = base, server, github
        self.counter = base / "compiles.txt"
        self.counter.touch()
        self.work = make_project(base / "work")
        self.bare = llama_repository(self.work, base / "llama.cpp.git")
        # clang/clang++ count each call in compiles.txt
        rocm = gcc_therock(package_version=VERSION, before_exec=f'echo "$@" >> {self.counter}\n')
        tarball = tar_tree(base / "rock.tar.gz", rocm).read_bytes()
        self.tarballs = [f"therock-dist-linux-{g}-{VERSION}.tar.gz" for g in ("gfx1151", "gfx1150")]
        for name in self.tarballs:
            server.add(name, tarball, content_type="application/gzip")
        self.index = server.add_text("index.html", links_page(self.tarballs))
        # a release is whole (rockbuild.publish.whole): the chat page the workflow's webui job builds (--web-ui DIR),
        # and every program of the stand-in's programs.yaml
        self.web_ui = write_dist(base / "webui")
        self.programs = write(base / "programs.yaml", PROGRAMS)

    def matrix(self, name: str, *, optional_fails: bool = False, required_fails: bool = False) -> Path:
        cmake = '{FAIL_COMPILE: "ON"}' if required_fails else "{}"
        extra = ', cmake: {FAIL_COMPILE: "ON"}' if optional_fails else ""
        return write(self.base / name, MATRIX.format(cmake=cmake, optional_extra=extra))

    def tarball_requests(self) -> int:
        return sum(len(self.server.requests_for(n)) for n in self.tarballs)

    def compiles(self) -> int:
        return len([line for line in self.counter.read_text().splitlines() if " -c " in f" {line} "])

    def options(self, out: Path, matrix: Path, **changes) -> NightOptions:
        values = dict(
            config=matrix,
            out=out,
            index_url=self.index,
            git_url=str(self.bare),
            repo=self.github.full_name,
            api_url=self.github.api_url,
            token=TOKEN,
            smoke=False,
            use_ccache=False,
            cache=self.base / "cache",
            throttle=False,
            compile_jobs=2,
            web_ui_dist=self.web_ui,
            programs=self.programs,
        )
        values.update(changes)
        return night_options(**values)

    def new_commit(self) -> str:
        (self.work / "tools" / "main.cpp").write_text(
            "int ggml_answer();\nint main() { return ggml_answer() == 42 ? 0 : 2; }\n"
        )
        git("commit", "-qam", "change", cwd=self.work)
        git("push", "-q", str(self.bare), "master", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)


@contextlib.contextmanager
def night_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token: str
) -> Iterator[tuple[FaultServer, GitHubAPIServer]]:
    """The index server and the GitHub API of a test night, with a private cache and no CI environment."""
    monkeypatch.setenv("ROCKBUILD_CACHE", str(tmp_path / "cache"))
    for name in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    with FaultServer() as server, GitHubAPIServer(token=token) as github:
        yield server, github
