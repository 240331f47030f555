"""Browser fixtures: the built bundle served on loopback, headless Chromium with WebGPU.

Every page's requests are recorded; :func:`assert_offline` fails the test if any went to a
host other than 127.0.0.1 (the launch flags also make every other host unresolvable).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evermind.studio.webserver import BundleServer
from tests import procs

ROOT = Path(__file__).resolve().parents[2]
BOOT_TIMEOUT_MS = 120_000
ALLOWED_PREFIXES = ("http://127.0.0.1:", "blob:", "data:")


@pytest.fixture(scope="package")
def bundle_dir() -> Path:
    """dist/web, rebuilt first if any input changed."""
    result = procs.run([sys.executable, str(ROOT / "build" / "build_web.py")], check=False)
    assert result.returncode == 0, "building dist/web failed"
    return ROOT / "dist" / "web"


@pytest.fixture(scope="package")
def server(bundle_dir: Path) -> Iterator[BundleServer]:
    with BundleServer(bundle_dir) as srv:
        yield srv


@pytest.fixture(scope="package")
def playwright() -> Iterator[object]:
    """The one Playwright driver: a second sync one in the same thread would refuse to start
    ("Sync API inside the asyncio loop"), so every browser is launched from this one."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="package")
def browser(playwright: object) -> Iterator[object]:
    from evermind.studio.browser import launch_options

    b = playwright.chromium.launch(**launch_options(playwright))  # type: ignore[attr-defined]
    yield b
    b.close()


class RecordedPage:
    """A page plus every request URL it (and its workers) made, and console errors."""

    def __init__(self, browser: object) -> None:
        self.context = browser.new_context()  # type: ignore[attr-defined]
        self.requests: list[str] = []
        self.console: list[str] = []
        self.context.on("request", lambda r: self.requests.append(r.url))
        self.context.on("requestfailed", lambda r: self.requests.append(r.url))
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))

    def assert_offline(self) -> None:
        foreign = [u for u in self.requests if not u.startswith(ALLOWED_PREFIXES)]
        assert not foreign, f"requests left 127.0.0.1: {foreign[:10]}"

    def close(self) -> None:
        self.context.close()


def open_studio(browser: object, server: BundleServer, path: str = "index.html") -> RecordedPage:
    """Opens a bundle page and waits (bounded) for its ``window.__done`` signal."""
    rec = RecordedPage(browser)
    rec.page.goto(server.url + path)
    try:
        rec.page.wait_for_function("window.__done === true", timeout=BOOT_TIMEOUT_MS)
    except Exception:
        print("console:\n" + "\n".join(rec.console))
        raise
    return rec


#: How long :func:`wait_text` waits by default (training steps on SwiftShader are slow).
WAIT_MS = 180_000


def wait_text(rec: RecordedPage, selector: str, pattern: str, timeout: int = WAIT_MS) -> str:
    """Waits (bounded) until the first element's text matches ``pattern``; returns the text.

    On a timeout it prints the page's last console lines and fails naming what it saw."""
    locator = rec.page.locator(selector)
    try:
        locator.filter(has_text=re.compile(pattern)).first.wait_for(timeout=timeout)
    except Exception:
        print("console:\n" + "\n".join(rec.console[-30:]))
        raise AssertionError(
            f"{selector} never matched {pattern!r}: {locator.first.inner_text()!r}"
        ) from None
    return locator.first.inner_text()


def show(rec: RecordedPage, panel: str) -> None:
    """Opens a Studio panel through its step in the strip."""
    rec.page.click(f"#step-{panel}")
    assert rec.page.locator(f"#panel-{panel}").is_visible()
