"""A whole-night world on this machine (tests/integration/test_fallback.py, test_triage.py): a TheRock-style index
whose tarballs hold a gcc-backed ROCm (broken on purpose when asked), a fake GitHub, and the stand-in llama.cpp in a
bare git repository whose programs hand over to the smoke test's stand-ins (tests/support/smoke.py), so every stage,
the smoke too, really runs. A "broken" ROCm nightly's clang++ adds ``-DROCM_BROKEN``: the programs it compiles die of
SIGSEGV at start; ``-DROCM_WRONG``: they run and answer wrong."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from rockbuild.nightly import NightOptions
from support.faultserver import FaultServer
from support.files import write
from support.git import git
from support.github import GitHubAPIServer
from support.index import links_page
from support.llama import llama_repository, make_project
from support.options import night_options
from support.smoke import gguf_header, write_stand_ins
from support.trees import gcc_therock, tar_tree
from support.webui import write_dist

TOKEN = "ghp_FallbackTestToken0123456789SECRET"
TODAY = datetime.datetime.now(datetime.UTC).date()

MAIN = r"""
#include <csignal>
#include <cstdlib>
#include <string>
#include <vector>
#include <unistd.h>
int ggml_answer();
int main(int argc, char** argv) {
#ifdef ROCM_BROKEN
    std::raise(SIGSEGV);  // what a broken HSA runtime did to every llama.cpp program
#endif
#ifdef ROCM_WRONG
    setenv("STANDIN_ANSWERS", "wrong", 1);  // a miscompiling nightly: every program runs, the numbers are wrong
#endif
    if (ggml_answer() != 42) return 2;
    std::string self = argv[0];
    std::string stub = std::string("@STUBS@/") + self.substr(self.find_last_of('/') + 1);
    std::vector<char*> args{const_cast<char*>(stub.c_str())};
    for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    execv(stub.c_str(), args.data());
    return 127;
}
"""


def version(day: datetime.date) -> str:
    return f"7.2.0a{day:%Y%m%d}"


MATRIX = """
matrix:
  os: [linux]
  target: [gfx1151]
"""


class World:
    def __init__(self, base: Path, server: FaultServer, github: GitHubAPIServer, matrix: str = MATRIX) -> None:
        self.base, self.server, self.github = base, server, github
        stubs = base / "stubs"
        stubs.mkdir()
        envlog = base / "envlog"
        envlog.mkdir()
        write_stand_ins(stubs, envlog, {"numerics": "pass", "ui": "html"})  # SmolLM2's answers; GET /: the page
        self.work = make_project(base / "work")
        (self.work / "tools" / "main.cpp").write_text(MAIN.replace("@STUBS@", str(stubs)))
        self.bare = llama_repository(self.work, base / "llama.cpp.git")
        self.model = base / "SmolLM2-135M-Instruct.Q4_1.gguf"  # the model with known answers (smoke.yaml)
        self.model.write_bytes(gguf_header() + bytes(40))
        self.matrix = write(base / "nightly.yaml", matrix)

    def name(self, day: datetime.date, group: str = "gfx1151") -> str:
        return f"therock-dist-linux-{group}-{version(day)}.tar.gz"

    def publish_tarballs(
        self, days: dict[datetime.date, bool | str], page: str, groups: tuple[str, ...] = ("gfx1151",)
    ) -> str:
        """An index page listing a tarball per day and group (True: broken, "wrong": computes wrong); returns its
        URL."""
        names = []
        for day, broken in days.items():
            flags = "-DROCM_WRONG " if broken == "wrong" else "-DROCM_BROKEN " if broken else ""
            rocm = gcc_therock(package_version=version(day), flags=flags)
            for group in groups:
                names.append(self.name(day, group))
                self.server.add(
                    names[-1], tar_tree(self.base / names[-1], rocm).read_bytes(), content_type="application/gzip"
                )
        return self.server.add_text(page, links_page(names))

    def options(self, out: Path, index: str, **changes) -> NightOptions:
        values = dict(
            config=self.matrix,
            out=out,
            index_url=index,
            git_url=str(self.bare),
            repo=self.github.full_name,
            api_url=self.github.api_url,
            token=TOKEN,
            model=str(self.model),
            use_ccache=False,
            cache=self.base / "cache",
            throttle=False,
            compile_jobs=2,
            web_ui_dist=write_dist(self.base / "webui"),
        )  # the chat page: a release is whole
        values.update(changes)
        return night_options(**values)

    def new_commit(self, subject: str = "change", *, only_for: str | None = None, define: str | None = None) -> str:
        """A commit pushed to master: a harmless change, or (``define``) one that compiles every file of the jobs
        whose GPU_TARGETS match ``only_for`` with that definition (FAIL_COMPILE: the build breaks; ROCM_WRONG: the
        programs answer wrong; ROCM_BROKEN: they crash)."""
        self.changes = getattr(self, "changes", 0) + 1
        (self.work / "ggml" / "ggml-base.c").write_text(
            f"int ggml_base(void) {{ return 40 + 1; }} /* {self.changes} */\n"
        )
        if define is not None:
            cmake = self.work / "CMakeLists.txt"
            cmake.write_text(
                cmake.read_text().replace(
                    "project(fake_llama C CXX)\n",
                    f'project(fake_llama C CXX)\nif(GPU_TARGETS MATCHES "{only_for or ""}")\n'
                    f"    add_compile_definitions({define})\nendif()\n",
                    1,
                )
            )
        git("commit", "-qam", subject, cwd=self.work)
        git("push", "-q", str(self.bare), "master", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def manifest(self, tag: str) -> dict:
        release = next(r for r in self.github.state.releases.values() if r.tag_name == tag)
        return json.loads(next(a.data for a in release.assets if a.name == "manifest.json"))
