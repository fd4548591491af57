"""llama-server's web UI in the smoke test: ``GET /`` of a build that has one (the stand-in llama-server of
tests/support/smoke.py serves a page, or a 404), and the real browser check (rockbuild.smoke.browser) driving the
machine's chromium on a small chat page served on 127.0.0.1: typed, sent, answered, photographed.

The browser tests need playwright (the test extra) and chromium (Debian's package); they are skipped without them."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest
from support.smoke import CHAT_PAGE, gguf_header, make_bundle

from rockbuild.backends import REGISTRY
from rockbuild.core.records import SmokeRecord
from rockbuild.smoke.browser import ChatPage, check_chat, find_chromium
from rockbuild.smoke.models import ModelFile
from rockbuild.smoke.runner import SmokeOptions, run_smoke

BUILT = {"status": "built", "sha256": "ab" * 32, "files": 70, "bytes": 9947831}
NONE = {"status": "none", "reason": "npm is not installed (not on PATH)"}
FAST = {"timeouts": {"cli": 20, "server_start": 20, "request": 20, "bench": 20}, "runs": ("server",)}
PNG = b"\x89PNG\r\n\x1a\n"


def browser_here() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return find_chromium() is not None


needs_browser = pytest.mark.skipif(not browser_here(), reason="needs playwright (pip install '.[test]') and chromium")


@pytest.fixture
def model(tmp_path) -> ModelFile:
    path = tmp_path / "model.gguf"
    path.write_bytes(gguf_header() + bytes(40))
    return ModelFile("model.gguf", path, "0" * 64, 64, "path")


def server_run(report):
    return next(r for r in report.runs if r.name == "server")


def test_a_build_with_a_web_ui_must_serve_an_html_page_at_the_root(tmp_path, model):
    job, _ = make_bundle(tmp_path, {"ui": "html"}, web_ui=BUILT)
    report = run_smoke(job, model, SmokeOptions(**FAST), kfd_topology=tmp_path, backends=REGISTRY)
    assert report.ok, report.failures
    check = server_run(report).to_dict()["web_ui"]
    assert check["result"] == "passed" and check["status"] == 200
    assert check["content_type"].startswith("text/html") and check["detail"].startswith("HTTP 200, text/html")
    data = SmokeRecord.read(job / "smoke.json")
    assert data is not None and data.runs["server"].web_ui is not None
    assert data.runs["server"].web_ui.result == "passed" and data.runs["server"].browser is None
    assert "web UI (GET /): passed: HTTP 200" in report.render()


def test_a_404_at_the_root_fails_the_server_run_when_the_build_has_a_web_ui(tmp_path, model):
    job, _ = make_bundle(tmp_path, web_ui=BUILT)  # the stand-in answers 404 at /
    report = run_smoke(job, model, SmokeOptions(**FAST), kfd_topology=tmp_path, backends=REGISTRY)
    assert not report.ok
    assert report.failures == (
        "server: GET / answered HTTP 404, application/json, 2 bytes, not the web UI the build has",
    )
    assert server_run(report).web_ui.result == "failed"


def test_a_build_without_a_web_ui_is_not_checked_never_passed(tmp_path, model):
    job, _ = make_bundle(tmp_path, web_ui=NONE)
    report = run_smoke(job, model, SmokeOptions(**FAST, browser=True), kfd_topology=tmp_path, backends=REGISTRY)
    assert report.ok, report.failures
    details = server_run(report).to_dict()
    why = "no web UI (npm is not installed (not on PATH))"
    assert details["web_ui"] == {"result": "not checked", "detail": why}
    assert details["browser"] == {"result": "not checked", "detail": why}
    data = json.loads((job / "smoke.json").read_text())
    assert data["runs"]["server"]["web_ui"]["result"] == "not checked"


def test_a_build_json_that_does_not_say_is_not_checked(tmp_path, model):
    job, _ = make_bundle(tmp_path)  # build.json from before the web UI step
    report = run_smoke(job, model, SmokeOptions(**FAST), kfd_topology=tmp_path, backends=REGISTRY)
    assert report.ok and server_run(report).to_dict()["web_ui"] == {
        "result": "not checked",
        "detail": "no web UI recorded in build.json (GET / answered HTTP 404, application/json, 2 bytes)",
    }


def test_smoke_yaml_turns_the_browser_on_and_names_the_page(tmp_path):
    from rockbuild.smoke.config import SmokeConfig, load_smoke_config, parse_run

    run = parse_run({"browser": {"enabled": True, "message": "Hi", "timeout": 5, "send": ""}}, "smoke.yaml")
    options = SmokeOptions.from_config(SmokeConfig(run=run))
    assert options.browser is True
    page = options.chat_page  # read on load, handed to the browser as it is
    assert (page.message, page.timeout, page.send) == ("Hi", 5.0, "")  # send "": Enter
    assert page.answer == ChatPage().answer  # what the config leaves out keeps llama.cpp's selectors
    assert SmokeOptions.from_config(SmokeConfig()).browser is False
    shipped = load_smoke_config().run.browser
    assert shipped.enabled is False and shipped.page == ChatPage(timeout=180.0, settle=3.0)


def test_without_a_browser_the_chat_is_not_checked(tmp_path):
    result = check_chat("http://127.0.0.1:9/", ChatPage(), screenshot=tmp_path / "shot.png", env={"PATH": ""})
    assert result.result == "not checked" and result.detail.startswith("no browser: ")
    assert not (tmp_path / "shot.png").exists()


# ---------------------------------------------------------------------------------------------------------------------
# The real browser


class ChatServer:
    """CHAT_PAGE at / and a /v1/chat/completions that echoes the message (``answer`` False: it never answers)."""

    def __init__(self, answer: bool = True) -> None:
        outer = self
        self.messages: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                data = CHAT_PAGE.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.messages.append(body["messages"][-1]["content"])
                if not answer:
                    self.send_response(500)
                    self.end_headers()
                    return
                reply = {"choices": [{"message": {"content": "echo: " + body["messages"][-1]["content"]}}]}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __enter__(self) -> ChatServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@needs_browser
def test_the_browser_types_sends_and_sees_the_answer(tmp_path):
    shot = tmp_path / "web-ui.png"
    with ChatServer() as server:
        result = check_chat(
            server.url,
            ChatPage(message="Hello from rockbuild", settle=0.5, timeout=60),
            screenshot=shot,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
    assert result.result == "passed", result.detail
    assert server.messages == ["Hello from rockbuild"]  # what was typed is what the page sent
    assert result.answer == "echo: Hello from rockbuild" and result.browser and "chrom" in result.browser
    assert result.screenshot == str(shot) and shot.read_bytes().startswith(PNG)


@needs_browser
def test_a_page_that_never_answers_fails_with_its_screenshot(tmp_path):
    shot = tmp_path / "web-ui.png"
    with ChatServer(answer=False) as server:
        result = check_chat(
            server.url,
            ChatPage(timeout=3, settle=0.5),
            screenshot=shot,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
    assert result.result == "failed" and result.detail == "no answer within 3s"
    assert shot.read_bytes().startswith(PNG)


@needs_browser
def test_a_page_without_a_chat_box_fails_naming_the_step(tmp_path):
    with ChatServer() as server:
        result = check_chat(
            server.url,
            ChatPage(input="#no-such-box", timeout=2),
            screenshot=tmp_path / "s.png",
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
    assert result.result == "failed" and result.detail.startswith("find the chat box (#no-such-box): ")
    assert "\n" not in result.detail


@needs_browser
def test_smoke_with_the_browser_chats_with_the_servers_page(tmp_path, model):
    job, envlog = make_bundle(tmp_path, {"ui": "chat"}, web_ui=BUILT)
    options = SmokeOptions(**FAST, browser=True, chat_page=ChatPage(settle=0.5, timeout=60))
    report = run_smoke(job, model, options, kfd_topology=tmp_path, backends=REGISTRY)
    assert report.ok, report.failures
    browser = server_run(report).to_dict()["browser"]
    assert browser["result"] == "passed" and browser["answer"].startswith("Needle")  # the server's reply
    shot = Path(browser["screenshot"])
    assert shot == job / "smoke-logs" / "web-ui.png" and shot.read_bytes().startswith(PNG)
    assert json.loads((envlog / "request.json").read_text())["messages"][-1]["content"] == ChatPage().message
    record = SmokeRecord.read(job / "smoke.json")
    assert record is not None and record.runs["server"].browser is not None
    assert record.runs["server"].browser.result == "passed"
