"""llama-server's web UI (rockbuild.llamacpp.webui) with a fake npm: a real program on a PATH of the test's own, which
installs and builds the way npm does as far as rockbuild can tell (tests/support/webui.py), or fails, or is absent.
The real npm build of llama.cpp's UI is measured in docs/commands.md (the web UI)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from support.files import write
from support.webui import DIST_FILES, fake_npm, npm_calls, ui_tree, write_dist

from rockbuild.backends import REGISTRY
from rockbuild.core.errors import UsageError
from rockbuild.llamacpp.webui import (
    WebUiOptions,
    build_dist,
    dist_digest,
    dist_problems,
    embed_dist,
    provide_web_ui,
)


@pytest.fixture
def npm(tmp_path):
    """A fake npm in a bin folder of its own; ``env`` puts it first on PATH (node and the rest stay findable)."""
    log = tmp_path / "npm-calls.jsonl"
    bin_dir = tmp_path / "bin"
    fake_npm(bin_dir, log)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "GITHUB_TOKEN": "ghp_webui_secret",
        "NPM_TOKEN": "npm_webui_secret",
        "NODE_ENV": "production",
        "HTTPS_PROXY": "http://proxy.invalid:3128",
    }
    return {"log": log, "bin": bin_dir, "env": env}


def options(tmp_path: Path, env, **kw) -> WebUiOptions:
    return WebUiOptions(cache=tmp_path / "cache" / "webui", env=env, **kw)


def commands(log: Path) -> list[str]:
    return [" ".join(c["args"]) for c in npm_calls(log) if c["args"] != ["--version"]]


def test_a_tree_is_built_once_then_its_dist_comes_from_the_cache(tmp_path, npm):
    tree = ui_tree(tmp_path / "llama.cpp")
    first = provide_web_ui(tree, build_number=11312, options=options(tmp_path, npm["env"]))
    assert first.status == "built" and first.reason is None
    assert commands(npm["log"]) == ["ci --no-audit --no-fund", "run build"]
    assert first.npm == "11.0.0-fake" and first.node and first.node.startswith("v")
    assert first.files == len(DIST_FILES) + 1 and first.bytes and first.sha256 == dist_digest(Path(first.dist))[0]
    assert first.npm_ci_seconds is not None and first.build_seconds is not None
    # embedded as llama.cpp's prebuilt UI, the same files as the cached dist
    embedded = tree / "tools" / "ui" / "dist"
    assert first.embedded == str(embedded) and dist_digest(embedded)[0] == first.sha256
    assert json.loads((embedded / "build.json").read_text()) == {"version": "11312"}
    # npm ran on a staged copy, never in the tree, with the build's version and an explicit environment
    build = next(c for c in npm_calls(npm["log"]) if c["args"] == ["run", "build"])
    assert not Path(build["cwd"]).is_relative_to(tree) and not Path(build["cwd"]).exists()
    assert build["env"]["LLAMA_UI_VERSION"] == "b11312" and build["env"]["LLAMA_BUILD_NUMBER"] == "11312"
    assert build["env"]["LLAMA_UI_OUT_DIR"].startswith(str(tmp_path / "cache" / "webui"))
    for call in npm_calls(npm["log"]):
        assert "GITHUB_TOKEN" not in call["env"] and "NPM_TOKEN" not in call["env"]
        assert "NODE_ENV" not in call["env"]  # production would leave out the UI's devDependencies
        assert call["env"]["HTTPS_PROXY"] == "http://proxy.invalid:3128"  # npm reaches its registry as we do
        assert call["env"]["npm_config_cache"] == str(tmp_path / "cache" / "webui" / "npm-cache")
    assert not (tree / "tools" / "ui" / "node_modules").exists()

    again = provide_web_ui(tree, build_number=11312, options=options(tmp_path, npm["env"]))
    assert again.status == "cached" and again.sha256 == first.sha256 and again.dist == first.dist
    assert commands(npm["log"]) == ["ci --no-audit --no-fund", "run build"]  # no npm at all the second time
    assert again.npm_ci_seconds is None and again.build_seconds is None


def test_node_modules_are_cached_by_the_lock_files_hash(tmp_path, npm):
    tree = ui_tree(tmp_path / "llama.cpp")
    provide_web_ui(tree, build_number=1, options=options(tmp_path, npm["env"]))
    write(tree / "tools" / "ui" / "src" / "app.js", "export const app = 'two';\n")  # a new commit of the UI
    second = provide_web_ui(tree, build_number=1, options=options(tmp_path, npm["env"]))
    assert second.status == "built" and second.npm_ci_seconds is None  # the same lock: no npm ci
    assert commands(npm["log"]) == ["ci --no-audit --no-fund", "run build", "run build"]
    assert (tree / "tools" / "ui" / "dist" / "sources.txt").read_text() == "export const app = 'two';\n"
    third = provide_web_ui(tree, build_number=2, options=options(tmp_path, npm["env"]))
    assert third.status == "built" and third.sha256 != second.sha256  # the build number is part of the dist
    write(tree / "tools" / "ui" / "package-lock.json", '{"n": "2"}\n')
    provide_web_ui(tree, build_number=2, options=options(tmp_path, npm["env"]))
    assert commands(npm["log"])[-2:] == ["ci --no-audit --no-fund", "run build"]
    installs = sorted(p.name for p in (tmp_path / "cache" / "webui").glob("node_modules-*"))
    assert len(installs) == 2  # one per package-lock.json


def test_no_npm_builds_without_the_ui_says_why_and_removes_a_stale_one(tmp_path, npm, capsys):
    tree = ui_tree(tmp_path / "llama.cpp")
    write_dist(tree / "tools" / "ui" / "dist")  # what an earlier build of another commit left
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    record = provide_web_ui(tree, build_number=1, options=options(tmp_path, {"PATH": str(empty)}))
    assert (record.status, record.reason) == ("none", "npm is not installed (not on PATH)")
    assert record.replaced is True and not (tree / "tools" / "ui" / "dist").exists()
    warning = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warning == ["warning: llama-server is built without its web UI: npm is not installed (not on PATH)"]


@pytest.mark.parametrize(
    "mode, says",
    [
        ("fail-ci", "npm ci failed: "),
        ("fail-build", "npm run build failed: "),
        ("incomplete", "npm run build made no usable dist (missing workbox[hash].js)"),
    ],
)
def test_npm_failing_is_no_ui_with_a_warning_not_a_failed_build(tmp_path, npm, capsys, mode, says):
    fake_npm(npm["bin"], npm["log"], mode)
    tree = ui_tree(tmp_path / "llama.cpp")
    log = tmp_path / "build.log"
    record = provide_web_ui(tree, build_number=1, options=options(tmp_path, npm["env"]), log=log)
    assert record.status == "none" and record.reason.startswith(says)
    assert "\n" not in record.reason and not (tree / "tools" / "ui" / "dist").exists()
    assert f"warning: llama-server is built without its web UI: {says}" in capsys.readouterr().err
    cache = tmp_path / "cache" / "webui"
    assert not list(cache.glob("dist-*")) and not list(cache.glob("work-*"))
    if mode == "fail-ci":  # a failed install is never cached
        assert not list(cache.glob("node_modules-*"))
        assert "npm error code E404" in log.read_text()
    else:
        assert len(list(cache.glob("node_modules-*"))) == 1


def test_offline_builds_from_cached_node_modules_and_is_none_without_them(tmp_path, npm):
    tree = ui_tree(tmp_path / "llama.cpp")
    nothing = provide_web_ui(tree, build_number=1, options=options(tmp_path, npm["env"], offline=True))
    assert nothing.status == "none" and nothing.reason.startswith("--offline and no cached web UI")
    assert commands(npm["log"]) == []
    provide_web_ui(tree, build_number=1, options=options(tmp_path, npm["env"]))
    write(tree / "tools" / "ui" / "src" / "app.js", "export const app = 'offline';\n")
    offline = provide_web_ui(tree, build_number=1, options=options(tmp_path, npm["env"], offline=True))
    assert offline.status == "built" and commands(npm["log"])[-1] == "run build"  # npm run build needs no network


def test_a_tree_without_tools_ui_has_no_web_ui(tmp_path, npm):
    tree = tmp_path / "old-llama.cpp"
    tree.mkdir()
    record = provide_web_ui(tree, build_number=1, options=options(tmp_path, npm["env"]))
    assert record.status == "none" and "tools/ui has no package.json" in record.reason
    assert commands(npm["log"]) == []


def test_a_prebuilt_dist_is_checked_and_embedded_and_a_broken_one_refused(tmp_path, npm):
    tree = ui_tree(tmp_path / "llama.cpp")
    write(tree / "tools" / "ui" / "dist" / "stale-bundle.js", "old\n")
    given = write_dist(tmp_path / "from-ci")
    record = provide_web_ui(tree, build_number=5, options=options(tmp_path, npm["env"], dist=given))
    assert record.status == "prebuilt" and record.dist == str(given) and record.replaced is True
    assert not (tree / "tools" / "ui" / "dist" / "stale-bundle.js").exists()
    assert dist_digest(tree / "tools" / "ui" / "dist") == dist_digest(given)
    assert commands(npm["log"]) == []  # nothing is built when a dist is given
    broken = write_dist(tmp_path / "broken", skip=("sw.js", "_app/immutable/bundle.Ef34Gh.css"))
    with pytest.raises(UsageError) as caught:
        provide_web_ui(tree, build_number=5, options=options(tmp_path, npm["env"], dist=broken))
    assert caught.value.message == (
        f"--web-ui {broken} is not a built llama.cpp web UI (missing sw.js, bundle[hash].css)"
    )


def test_no_web_ui_removes_an_embedded_one_and_says_so(tmp_path, npm, capsys):
    tree = ui_tree(tmp_path / "llama.cpp")
    provide_web_ui(tree, build_number=1, options=options(tmp_path, npm["env"]))
    capsys.readouterr()
    record = provide_web_ui(tree, build_number=1, options=options(tmp_path, npm["env"], enabled=False))
    assert (record.status, record.reason, record.replaced) == ("none", "--no-web-ui", True)
    assert not (tree / "tools" / "ui" / "dist").exists()
    assert "warning" not in capsys.readouterr().err  # asked for: no warning


def test_embed_replaces_a_stale_dist_and_leaves_the_same_one(tmp_path):
    tree = ui_tree(tmp_path / "llama.cpp")
    stale = write_dist(tree / "tools" / "ui" / "dist")
    write(stale / "_app" / "old-chunk.js", "stale\n")
    dist = write_dist(tmp_path / "dist")
    target, replaced = embed_dist(dist, tree)
    assert replaced and target == stale and not (stale / "_app" / "old-chunk.js").exists()
    assert dist_digest(target) == dist_digest(dist)
    assert embed_dist(dist, tree) == (target, False)  # the same files: nothing to do
    assert not list((tree / "tools" / "ui").glob(".dist*"))  # no staging folder left behind


def test_dist_problems_and_digest(tmp_path):
    dist = write_dist(tmp_path / "dist")
    assert dist_problems(dist) == []
    (dist / "sw.js").write_text("")  # CMake refuses to embed an empty file
    assert dist_problems(dist) == ["sw.js"]
    assert dist_problems(tmp_path / "nope") == [f"{tmp_path / 'nope'} is not a folder"]
    a, b = write_dist(tmp_path / "a"), write_dist(tmp_path / "b")
    assert dist_digest(a) == dist_digest(b) and dist_digest(a)[1] == len(DIST_FILES)
    (b / "index.html").write_text("<html>other</html>")
    assert dist_digest(a)[0] != dist_digest(b)[0]
    shutil.move(str(a / "sw.js"), str(a / "sw2.js"))  # a name is part of the hash, not only the contents
    assert dist_digest(a)[0] != dist_digest(write_dist(tmp_path / "c"))[0]


def test_build_dist_returns_the_cached_dist_without_npm(tmp_path, npm):
    tree = ui_tree(tmp_path / "llama.cpp")
    built, dist = build_dist(tree, build_number=3, options=options(tmp_path, npm["env"]))
    assert built.status == "built" and dist is not None and dist.is_dir()
    cached, again = build_dist(tree, build_number=3, options=options(tmp_path, {"PATH": "/nonexistent"}))
    assert cached.status == "cached" and again == dist  # a cache hit needs no npm


# ---------------------------------------------------------------------------------------------------------------------
# rockbuild webui, rockbuild build --web-ui / --no-web-ui


def test_cli_webui_builds_a_dist_for_the_build_legs(tmp_path, npm, run_rockbuild):
    tree = ui_tree(tmp_path / "llama.cpp")
    write(tree / "CMakeLists.txt", "project(x)\n")
    (tree / "ggml").mkdir()
    env = {"PATH": npm["env"]["PATH"] + ":" + os.environ["PATH"], "ROCKBUILD_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "webui"
    result = run_rockbuild(
        "webui", "--source", str(tree), "--build-number", "b11312", "--out", str(out), "--json", env=env
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["status"] == "built" and data["out"] == str(out) and data["files"] == len(DIST_FILES) + 1
    assert dist_problems(out) == [] and json.loads((out / "build.json").read_text()) == {"version": "11312"}
    assert not (tree / "tools" / "ui" / "dist").exists()  # the tree is left as it was
    again = run_rockbuild("webui", "--source", str(tree), "--build-number", "11312", "--out", str(out), env=env)
    assert again.returncode == 0 and "web UI: cached" in again.stdout
    # no npm: this command has nothing else to give, so it fails, in one line
    git_only = tmp_path / "git-only"
    git_only.mkdir()
    (git_only / "git").symlink_to(shutil.which("git"))
    bare = run_rockbuild(
        "webui",
        "--source",
        str(tree),
        "--out",
        str(tmp_path / "other"),
        env={"PATH": str(git_only), "ROCKBUILD_CACHE": str(tmp_path / "cache2")},
    )
    assert bare.returncode == 1
    assert bare.stderr.splitlines() == [
        f"error: no web UI for {tree}: npm is not installed (not on PATH)",
        f"hint: npm's output is in {tmp_path / 'other.log'}",
    ]
    taken = tmp_path / "taken"
    write(taken / "notes.txt", "mine\n")
    refused = run_rockbuild("webui", "--source", str(tree), "--out", str(taken), env=env)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [f"error: {taken} exists and is not a web UI dist; give a new folder"]
    assert (taken / "notes.txt").exists()


@pytest.mark.parametrize(
    "args, says",
    [
        (["--web-ui", "{dist}", "--no-web-ui"], "error: give --web-ui DIR or --no-web-ui, not both"),
        ([], "error: give one of --source TREE, --ref REF or --inputs FILE"),
    ],
)
def test_cli_web_ui_usage_errors_are_one_line(tmp_path, run_rockbuild, args, says):
    dist = write_dist(tmp_path / "dist")
    argv = ["build", "--target", "gfx1151"] if args else ["webui", "--out", str(tmp_path / "o")]
    result = run_rockbuild(*argv, *[a.format(dist=dist) for a in args])
    assert result.returncode == 2 and result.stderr.splitlines() == [says]


@pytest.mark.skipif(
    not (shutil.which("cmake") and shutil.which("ninja") and shutil.which("g++")),
    reason="needs cmake, ninja and g++ on the host",
)
def test_the_build_driver_embeds_the_ui_before_configure_and_records_it(tmp_path, npm):
    from support.llama import make_project
    from support.options import context, resolve_job
    from support.trees import gcc_therock, write_tree

    from rockbuild.core.records import BuildRecord
    from rockbuild.llamacpp.driver import BuildOptions, build_job

    project = ui_tree(make_project(tmp_path / "llama.cpp"))
    env = {**os.environ, "PATH": f"{npm['bin']}:{os.environ['PATH']}"}
    build = BuildOptions(
        context=context(env),
        out_dir=tmp_path / "out",
        rocm_dir=write_tree(tmp_path / "rocm", gcc_therock()),
        source_dir=project,
        build_number="11312",
        commit="0c1e570",
        use_ccache=False,
        cache=tmp_path / "cache",
        jobs=2,
    )
    job = resolve_job(target="gfx1151")
    result = build_job(job, build, backends=REGISTRY)
    assert result.web_ui is not None and result.web_ui.status == "built"
    record = BuildRecord.read(result.build_json)
    assert record is not None and record.web_ui is not None and record.web_ui.status == "built"
    assert record.web_ui.sha256 == dist_digest(project / "tools" / "ui" / "dist")[0]
    assert record.web_ui.embedded == str(project / "tools" / "ui" / "dist") and record.durations["web_ui"] >= 0
    log = result.log.read_text()
    assert log.index("==> web UI") < log.index("==> configure")  # in the tree before CMake looks for it
    # --no-web-ui: the next build has none, the tree's dist is gone, and build.json says so
    result = build_job(job, replace(build, web_ui=False), backends=REGISTRY)
    record = BuildRecord.read(result.build_json)
    assert record is not None and record.web_ui is not None
    assert (record.web_ui.status, record.web_ui.reason) == ("none", "--no-web-ui")
    assert not (project / "tools" / "ui" / "dist").exists()
