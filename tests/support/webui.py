"""Stand-ins for the web UI build: a llama.cpp tree's ``tools/ui`` (package.json, package-lock.json, sources) and a
fake ``npm`` (a small Python program) that installs and builds the way the real one does, as far as rockbuild can
tell: ``npm ci`` makes node_modules, ``npm run build`` writes a dist to $LLAMA_UI_OUT_DIR. It records each call and
the environment it got in a JSON-lines file."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from support.files import write

# the files llama.cpp requires of a dist (scripts/ui-assets.cmake, ui_validate_assets), with made-up hashes
DIST_FILES = {
    "index.html": "<!doctype html><html><head><title>llama.cpp</title></head><body>chat</body></html>\n",
    "manifest.webmanifest": '{"name": "llama.cpp"}\n',
    "sw.js": "self.addEventListener('fetch', () => {});\n",
    "build.json": '{"version": "BUILD"}\n',
    "version.json": '{"version": "1"}\n',
    "_app/immutable/bundle.Ab12Cd.js": "console.log('chat');\n",
    "_app/immutable/bundle.Ef34Gh.css": "body{}\n",
    "workbox-9a8b7c.js": "/* workbox */\n",
}

FAKE_NPM = r"""
import json, os, sys
from pathlib import Path
LOG = Path({log!r})
MODE = {mode!r}
args = sys.argv[1:]
with LOG.open("a") as fh:
    fh.write(json.dumps({{"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}}) + "\n")
if args == ["--version"]:
    print("11.0.0-fake")
    sys.exit(0)
if args[:1] == ["ci"]:
    if MODE == "fail-ci":
        sys.stderr.write("npm error code E404\n")
        sys.exit(1)
    Path("node_modules/.bin").mkdir(parents=True, exist_ok=True)
    Path("node_modules/.package-lock.json").write_text(Path("package-lock.json").read_text())
    print("added 1234 packages in 17s")
    sys.exit(0)
if args[:2] == ["run", "build"]:
    if not Path("node_modules/.package-lock.json").is_file():
        sys.stderr.write("sh: 1: vite: not found\n")
        sys.exit(127)
    if MODE == "fail-build":
        sys.stderr.write("error during build: [vite] something broke\n")
        sys.exit(1)
    out = Path(os.environ.get("LLAMA_UI_OUT_DIR", "dist"))
    files = json.loads({files!r})
    if MODE == "incomplete":
        files = {{k: v for k, v in files.items() if not k.startswith("workbox")}}
    for name, text in files.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("BUILD", os.environ.get("LLAMA_BUILD_NUMBER", "b0000")))
    # the UI's sources are part of what was built: a changed source makes another dist
    (out / "sources.txt").write_text(Path("src/app.js").read_text())
    print("built in 83s")
    sys.exit(0)
sys.stderr.write("fake npm: unknown command " + " ".join(args) + "\n")
sys.exit(1)
"""


def fake_npm(bin_dir: Path, log: Path, mode: str = "ok") -> Path:
    """``bin_dir/npm``: ok | fail-ci | fail-build | incomplete (a dist without workbox*.js)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    npm = bin_dir / "npm"
    npm.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(FAKE_NPM.format(log=str(log), mode=mode, files=json.dumps(DIST_FILES)))
    )
    npm.chmod(0o755)
    return npm


def npm_calls(log: Path) -> list[dict]:
    """Each call the fake npm got: its args, working folder and environment."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def ui_tree(root: Path, *, lock: str = "1", source: str = "one") -> Path:
    """A llama.cpp-shaped tree with a ``tools/ui`` (what the web UI step reads)."""
    ui = root / "tools" / "ui"
    write(ui / "package.json", '{"name": "llama-ui", "scripts": {"build": "vite build"}}\n')
    write(ui / "package-lock.json", f'{{"name": "llama-ui", "lockfileVersion": 3, "n": "{lock}"}}\n')
    write(ui / "src" / "app.js", f"export const app = '{source}';\n")
    return root


def write_dist(path: Path, *, skip: tuple[str, ...] = ()) -> Path:
    """A valid dist (all of :data:`DIST_FILES`) at ``path``, less the files named in ``skip``."""
    for name, text in DIST_FILES.items():
        if name not in skip:
            write(path / name, text)
    return path
