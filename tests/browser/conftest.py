"""Browser fixtures: the built bundle served on loopback, headless Chromium with WebGPU.

Every page's requests are recorded; :func:`assert_offline` fails the test if any went to a
host other than 127.0.0.1 (the launch flags also make every other host unresolvable).
"""

from __future__ import annotations

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
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    from evermind.studio.browser import launch_options

    with sync_playwright() as p:
        b = p.chromium.launch(**launch_options(p))
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
