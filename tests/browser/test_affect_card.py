"""The Export panel's affect card in headless Chromium: paste labelled lines, train the head
in the tab (a package opened on the CPU path, no WebGPU), see its held-out scores, and the
exported package carries ``affect.safetensors`` with the same labels and metrics."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from evermind.model.inference import load
from tests.browser.conftest import BOOT_TIMEOUT_MS, RecordedPage, show, wait_text
from tests.factories import tiny_package

POSITIVE = [f"the quick brown fox {i} jumps and remembers" for i in range(7)]
NEGATIVE = [f"caches save repeated work {i} of state space" for i in range(7)]


@pytest.fixture(scope="module")
def studio(playwright: object, server: object) -> Iterator[RecordedPage]:
    """The Studio booted in a Chromium without WebGPU (opened packages run on the CPU)."""
    from evermind.studio.browser import launch_options

    options = launch_options(playwright)
    options["args"] = [a for a in options["args"] if a != "--enable-unsafe-webgpu"]
    browser = playwright.chromium.launch(**options)  # type: ignore[attr-defined]
    rec = RecordedPage(browser)
    try:
        rec.page.set_viewport_size({"width": 1280, "height": 900})
        rec.page.goto(server.url + "index.html")  # type: ignore[attr-defined]
        rec.page.wait_for_function("window.__done === true", timeout=BOOT_TIMEOUT_MS)
        assert rec.page.evaluate("window.__evermind")["ok"], "\n".join(rec.console)
        rec.page.evaluate("window.evermind.call('session_clear')")
        yield rec
    finally:
        rec.close()
        browser.close()


def test_the_affect_card_trains_the_head_the_export_carries(
    studio: RecordedPage, tmp_path: Path
) -> None:
    page = studio.page
    path = tmp_path / "moody-0.4.0.evermind"
    path.write_bytes(tiny_package(name="moody", version="0.4.0", steps=3))
    show(studio, "try")
    page.set_input_files("#try-open-package", str(path))
    wait_text(studio, "#try-package", r"Opened evermind/moody:0\.4\.0")

    show(studio, "export")
    assert page.locator("#affect-train").is_disabled()  # nothing pasted yet
    lines = [f"up\t{t}" for t in POSITIVE] + [f"down\t{t}" for t in NEGATIVE]
    page.fill("#affect-lines", "\n".join(lines))
    assert page.locator("#affect-train").is_enabled()
    page.click("#affect-train")
    wait_text(studio, "#affect-message", r"Affect head fitted")
    shown = float(page.locator("#affect-accuracy").inner_text())
    assert "down, up" in page.locator("#affect-facts").inner_text()

    exported = page.evaluate(
        "window.evermind.call('export_package', {name: 'moody', version: '0.4.1'})"
    )
    package = load(base64.b64decode(exported["data_b64"]))
    head = package.package.affect
    assert head is not None and head.labels == ("down", "up")
    assert abs(head.metrics["accuracy"] - shown) < 1e-3
    scores = package.affect([POSITIVE[0], NEGATIVE[0]])
    assert scores[0]["up"] > 0.5 > scores[1]["up"]

    # A bad paste is refused in words, next to the button.
    page.fill("#affect-lines", "up no tab here")
    page.click("#affect-train")
    wait_text(studio, "#affect-message", r"line 1")
