"""A real browser on llama-server's chat page: open it, type a message into the chat box, send it, wait until the
model's answer shows, take a screenshot (``rockbuild smoke --browser``).

It drives the machine's own Chromium (Debian's ``chromium``) through Playwright for Python, the optional extra
``rockbuild[browser]``; Playwright's browser downloads are never used. Without Playwright or a Chromium the check is
*not checked* with the reason (never a pass); a browser that will not start is not checked either (it says nothing
of the bundle). What the page is made of (the chat box, the send button, the answer) are CSS selectors, data in
``config/smoke.yaml`` (``run.browser``), so a new llama.cpp UI is a data change.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rockbuild.core.records import SmokeCheck

# Debian's chromium first (/usr/bin/chromium): the one the project's machines and CI have
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
PLAYWRIGHT_HINT = "pip install 'rockbuild[browser]'"


@dataclass(frozen=True)
class ChatPage:
    """How to chat with a page: CSS selectors of the chat box, the send button ("" presses Enter) and the answer,
    what to type, and how long to wait (smoke.yaml's ``run.browser``, read by
    :func:`rockbuild.smoke.config.parse_browser`)."""

    input: str = "textarea, [contenteditable='true'][role='textbox']"
    send: str = "button[type=submit]"
    answer: str = "[aria-label='Assistant message with actions'] .markdown-content"
    message: str = "Hello! Who are you?"
    timeout: float = 180.0  # the page, the chat box and the first characters of the answer, each
    settle: float = 3.0  # the answer unchanged this long (or the timeout) before the screenshot
    width: int = 1280
    height: int = 800


_CHECK_KEYS = ("result", "detail", "seconds", "url", "screenshot", "answer", "browser")


def _check(
    result: str,
    detail: str,
    seconds: float,
    url: str,
    screenshot: str | None = None,
    answer: str | None = None,
    browser: str | None = None,
) -> SmokeCheck:
    """What the browser saw: ``result`` passed | failed | not checked, and the detail (or why not)."""
    return SmokeCheck(
        result=result,
        detail=detail,
        seconds=round(seconds, 3),
        url=url,
        screenshot=screenshot,
        answer=answer,
        browser=browser,
        keys=_CHECK_KEYS,
    )


def playwright_problem() -> str | None:
    """Why Playwright cannot be used here (None: it can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return f"playwright is not installed ({PLAYWRIGHT_HINT})"
    return None


def find_chromium(path: str | None = None) -> str | None:
    """The first Chromium of :data:`CHROMIUM_NAMES` on ``path`` (a PATH string; None: this process's)."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name, path=path)
        if found:
            return found
    return None


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def check_chat(
    url: str, page: ChatPage, *, screenshot: Path, executable: str | None = None, env: Mapping[str, str] | None = None
) -> SmokeCheck:
    """Chat once with the page at ``url`` in a headless Chromium with a fresh profile; the screenshot (PNG) is
    written to ``screenshot`` whether the answer came or not (when the page opened)."""
    start = time.monotonic()
    problem = playwright_problem()
    exe = executable or find_chromium((env or {}).get("PATH"))
    if problem is None and exe is None:
        problem = "chromium is not installed (apt install chromium)"
    if problem is not None or exe is None:
        return _check("not checked", f"no browser: {problem}", time.monotonic() - start, url)

    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    screenshot.parent.mkdir(parents=True, exist_ok=True)
    screenshot.unlink(missing_ok=True)
    ms = page.timeout * 1000
    with tempfile.TemporaryDirectory(prefix="rockbuild-chromium-") as profile, sync_playwright() as pw:
        try:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=exe,
                headless=True,
                args=list(CHROMIUM_ARGS),
                env=dict(env) if env is not None else None,
                viewport={"width": page.width, "height": page.height},
            )
        except PlaywrightError as exc:
            return _check(
                "not checked", f"no browser: {exe} did not start: {_first_line(exc)}", time.monotonic() - start, url
            )
        version = f"{Path(exe).name} {context.browser.version}" if context.browser is not None else Path(exe).name
        tab = context.pages[0] if context.pages else context.new_page()
        step, text = "open the page", ""
        try:
            tab.goto(url, wait_until="load", timeout=ms)
            step = f"find the chat box ({page.input})"
            box = tab.locator(page.input).first
            box.wait_for(state="visible", timeout=ms)
            step = "type the message"
            box.click(timeout=ms)
            box.fill(page.message, timeout=ms)
            step = f"send it ({page.send or 'Enter'})"
            if page.send:
                tab.locator(page.send).first.click(timeout=ms)
            else:
                box.press("Enter", timeout=ms)
            step = f"wait for the answer ({page.answer})"
            text = _answer(tab, page)
            # the page follows the answer down; the picture shows the message typed and what came back
            with contextlib.suppress(PlaywrightError):
                tab.get_by_text(page.message, exact=True).last.scroll_into_view_if_needed(timeout=5000)
        except PlaywrightError as exc:
            _shoot(tab, screenshot)
            context.close()
            return _check(
                "failed",
                f"{step}: {_first_line(exc)}",
                time.monotonic() - start,
                url,
                str(screenshot) if screenshot.is_file() else None,
                browser=version,
            )
        _shoot(tab, screenshot)
        context.close()
    seconds = time.monotonic() - start
    if not text.strip():
        return _check(
            "failed",
            f"no answer within {page.timeout:.0f}s",
            seconds,
            url,
            str(screenshot) if screenshot.is_file() else None,
            browser=version,
        )
    short = " ".join(text.split())
    return _check(
        "passed",
        f"answered {len(short)} characters in {seconds:.1f}s",
        seconds,
        url,
        str(screenshot) if screenshot.is_file() else None,
        short[:200],
        version,
    )


def _answer(tab: Any, page: ChatPage) -> str:
    """The answer's text once it has some and has not changed for ``page.settle`` seconds (or at the timeout)."""
    answer = tab.locator(page.answer).last
    answer.wait_for(state="attached", timeout=page.timeout * 1000)
    deadline = time.monotonic() + page.timeout
    text, since = "", time.monotonic()
    while time.monotonic() < deadline:
        now = answer.inner_text(timeout=page.timeout * 1000)
        if now != text:
            text, since = now, time.monotonic()
        elif text.strip() and time.monotonic() - since >= page.settle:
            break
        time.sleep(0.25)
    return text


def _shoot(tab: Any, path: Path) -> None:
    # a screenshot is evidence, not the check: a page that is gone has failed already
    with contextlib.suppress(Exception):
        tab.screenshot(path=str(path))
