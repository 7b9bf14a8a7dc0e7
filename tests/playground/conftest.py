"""Browser fixtures: Debian's Chromium driven by Playwright for Python (no browser download).

The browser is the system ``chromium`` (``./run.sh test`` installs it with apt where it is missing
and it runs as root); without it, or without the ``playwright`` package, these tests are skipped
with the reason. Headless Chromium has no sound card, but its AudioContext still runs its clock
and schedules buffers, which is what the tests read. The fake media device gives the page a
microphone (a beeping test signal) without a permission prompt.

Screenshots go to ``tests/playground/screenshots/`` (git-ignored), or ``$GEPARD_SCREENSHOT_DIR``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer

SCREENSHOTS = Path(os.environ.get("GEPARD_SCREENSHOT_DIR") or Path(__file__).parent / "screenshots")
CHROMIUM_ARGS = [
    "--autoplay-policy=no-user-gesture-required",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("Debian's chromium package is not installed: `./run.sh test` installs it with apt "
                    "when run as root; otherwise `apt-get install chromium` (the playground's browser tests need it)")
    return path


# Module scope, not session: while Playwright's sync API runs, its event loop is the running loop
# of the main thread, and every later test that runs an event loop of its own (pytest-asyncio,
# asyncio.run) fails with "cannot be called from a running event loop". Stopping it after each
# module hands the thread back.
@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One headless Chromium for the module (each test opens its own context: fresh storage)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package (test extra) is not installed")
    executable = chromium_path()
    manager = sync_api.sync_playwright().start()
    try:
        browser = manager.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
    except Exception as exc:
        manager.stop()
        pytest.skip(f"system Chromium at {executable} did not start under Playwright: {exc}")
    try:
        yield browser
    finally:
        browser.close()
        manager.stop()


API_KEY = "playground-test-key-0123456789"


@pytest.fixture(scope="session")
def auth_gateway(tiny_ckpt_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A live server that requires an API key (API_KEY)."""
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("auth-gateway"), api_keys=frozenset({API_KEY}))
    with LiveServer(settings) as server:
        yield server


@dataclass
class PageLog:
    """What a page reported: console errors, uncaught exceptions, failed requests, every request URL."""

    errors: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    requests: list[object] = field(default_factory=list)
    websockets: list[str] = field(default_factory=list)

    def attach(self, page) -> None:
        page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("requestfailed", lambda r: self.errors.append(f"requestfailed: {r.url} {r.failure}"))
        page.on("request", self._request)
        page.on("websocket", lambda ws: self.websockets.append(ws.url))

    def _request(self, request) -> None:
        self.urls.append(request.url)
        self.requests.append(request)


@pytest.fixture
def open_page(browser):
    """``open_page(url, **context_options) -> (page, log)``; contexts close after the test."""
    contexts = []

    def open_(url: str, **options):
        context = browser.new_context(**options)
        contexts.append(context)
        page = context.new_page()
        log = PageLog()
        log.attach(page)
        page.goto(url)
        page.wait_for_function("() => window.__playground && __playground.snapshot().voicesLoaded > 0 "
                               "|| document.getElementById('auth-dialog').open", timeout=15_000)
        return page, log

    yield open_
    for context in contexts:
        context.close()


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
