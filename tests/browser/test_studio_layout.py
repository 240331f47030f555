"""The Studio's layout holds: no sideways scroll, readable SQL errors, light-theme contrast.

One page (one Pyodide boot) is shared by the tests of this module. The Data panel is filled
the way that used to push the page wider than the window (issue 18: 1579 px at 1280, 1615 at
1440, 850 at 390): twelve sources with 80-character names, a CSV with a long name, and a long
SQL error; then every panel is opened at each width and the document must not be wider than
the viewport.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import ROOT, RecordedPage, open_studio, show, wait_text

SHOTS = ROOT / "test-results" / "layout"
PANELS = ["data", "tokenizer", "train", "try", "export", "memory", "cache"]
VIEWPORTS = [(390, 844), (1280, 800), (1440, 900), (320, 640), (1920, 1080)]
TIMEOUT_MS = 180_000
#: A token with no break opportunity, as long errors and file names have.
LONG_WORD = "column_name_that_goes_on_" * 8


@pytest.fixture(scope="module")
def studio(browser, server) -> Iterator[RecordedPage]:
    rec = open_studio(browser, server)
    rec.page.set_viewport_size({"width": 1280, "height": 800})
    boot = rec.page.evaluate("window.__evermind")
    assert boot["ok"], f"studio failed to boot: {boot}\n" + "\n".join(rec.console)
    rec.page.evaluate("window.evermind.call('session_clear')")
    yield rec
    rec.close()


def widths(rec: RecordedPage) -> dict[str, int]:
    return rec.page.evaluate(
        "({scroll: document.documentElement.scrollWidth, inner: window.innerWidth})"
    )


def long_name(index: int) -> str:
    stem = f"{index:02d}-quarterly-engineering-notes-from-the-platform-team-meeting-archive-"
    return (stem + "x" * 80)[:76] + ".txt"


def test_sql_error_keeps_its_line_breaks_and_clears_the_old_table(
    studio: RecordedPage, tmp_path: Path
) -> None:
    page = studio.page
    show(studio, "data")
    csv = tmp_path / ("customer-support-tickets-exported-from-the-helpdesk-" + "y" * 40 + ".csv")
    csv.write_text("id,status,body\n1,open,The export button does nothing.\n2,closed,Fixed.\n")
    page.set_input_files("#data-files", str(csv))
    wait_text(studio, "#panel-data .tables", r"customer_support")
    table = page.locator("#panel-data .tables code").first.inner_text()
    page.fill("#panel-data textarea[name=sql]", f"SELECT body FROM {table}")
    page.locator("#panel-data button", has_text="Run query").click()
    wait_text(studio, "#panel-data .sql-result", r"2 rows")
    assert page.locator("#panel-data .sql-result table").count() == 1
    # A binder error: DuckDB's message has several lines (the query and a caret under it).
    page.fill("#panel-data textarea[name=sql]", f"SELECT {LONG_WORD} FROM {table}")
    page.locator("#panel-data button", has_text="Run query").click()
    error = page.locator("#panel-data .sql .message[data-kind=error]")
    error.wait_for(timeout=TIMEOUT_MS)
    text = error.evaluate("e => e.textContent")
    assert "\n" in text, f"DuckDB's error has line breaks: {text!r}"
    assert error.evaluate("e => getComputedStyle(e).whiteSpace") in ("pre-wrap", "break-spaces")
    # The rendered message has as many lines as the text, at least.
    line_height = error.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)")
    assert error.bounding_box()["height"] >= line_height * (text.count("\n") + 1) * 0.9
    assert page.locator("#panel-data .sql-result table").count() == 0, "the old table stayed"
    assert page.locator("#panel-data .sql-result").inner_text().strip() == ""


def test_no_horizontal_scroll_in_any_panel_at_any_width(
    studio: RecordedPage, tmp_path: Path
) -> None:
    page = studio.page
    show(studio, "data")
    files = []
    for index in range(12):
        path = tmp_path / long_name(index)
        path.write_text(f"Notes number {index}. The build was green and the deploy went out.\n")
        files.append(str(path))
    assert all(len(Path(f).name) == 80 for f in files)
    page.set_input_files("#data-files", files)
    wait_text(studio, "#panel-data .sources", re.escape(long_name(11)))
    assert page.locator("#panel-data .sources li").count() == 12
    # A long error in the Data panel's own message line too.
    page.fill("#panel-data input[name=paste-name]", "p" * 120 + ".csv")
    page.fill("#panel-data textarea[name=paste-text]", "not,a\nvalid,csv,file,\x00")
    page.locator("#panel-data button", has_text="Add pasted text").click()
    page.wait_for_timeout(500)

    # Long keys, tags and queries in the Memory and Cache panels.
    show(studio, "memory")
    page.fill("#panel-memory input[name=memory-key]", "user." + LONG_WORD)
    page.fill("#panel-memory textarea[name=memory-content]", "The user writes " + LONG_WORD)
    page.fill("#panel-memory input[name=memory-tags]", LONG_WORD)
    page.click("#memory-remember")
    wait_text(studio, "#memory-list", r"column_name")
    page.fill("#panel-memory input[name=memory-query]", "user " + LONG_WORD)
    page.click("#memory-recall")
    wait_text(studio, "#memory-hits", r"column_name")
    show(studio, "cache")
    page.fill("#panel-cache input[name=cache-store-query]", "convert " + LONG_WORD)
    page.fill("#panel-cache textarea[name=cache-store-response]", LONG_WORD)
    page.click("#cache-store")
    wait_text(studio, "#panel-cache .message", r"Stored")
    page.fill("#panel-cache input[name=cache-query]", "convert " + LONG_WORD)
    page.click("#cache-lookup")
    wait_text(studio, "#cache-verdict", r"Hit|Miss")

    SHOTS.mkdir(parents=True, exist_ok=True)
    measured: dict[tuple[int, str], int] = {}
    for width, height in VIEWPORTS:
        page.set_viewport_size({"width": width, "height": height})
        for panel in PANELS:
            show(studio, panel)
            page.wait_for_timeout(50)
            w = widths(studio)
            assert w["inner"] == width
            measured[(width, panel)] = w["scroll"]
            if width in (390, 1280):
                page.screenshot(path=str(SHOTS / f"{width}-{panel}.png"), full_page=True)
    print("scrollWidth by (viewport, panel):", measured)
    too_wide = {key: value for key, value in measured.items() if value > key[0]}
    assert not too_wide, f"wider than the viewport: {too_wide}"
    page.set_viewport_size({"width": 1280, "height": 800})


def _contrast(rgb_fg: str, rgb_bg: str) -> float:
    """WCAG 2 contrast ratio of two ``rgb(...)`` colours (an alpha channel is ignored)."""

    def luminance(css: str) -> float:
        r, g, b = (int(v) / 255 for v in re.findall(r"[\d.]+", css)[:3])
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(rgb_fg), luminance(rgb_bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_light_theme_success_text_and_ready_pill_reach_aa(studio: RecordedPage) -> None:
    page = studio.page
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 800})
    pill = page.locator("#status-pill")
    assert pill.get_attribute("data-state") == "ready"
    colours = pill.evaluate("e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]")
    ratio = _contrast(*colours)
    print("ready pill", colours, round(ratio, 2))
    assert ratio >= 4.5, f"ready pill {colours}: {ratio:.2f}:1"
    show(studio, "data")
    message = page.locator("#panel-data > .message")
    message.evaluate("e => { e.hidden = false; e.dataset.kind = 'ok'; e.textContent = 'Added.'; }")
    colours = message.evaluate(
        "e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]"
    )
    ratio = _contrast(*colours)
    print("success text", colours, round(ratio, 2))
    assert ratio >= 4.5, f"success text {colours}: {ratio:.2f}:1"


def test_runtime_disclosure_is_a_24px_target(studio: RecordedPage) -> None:
    page = studio.page
    page.set_viewport_size({"width": 1280, "height": 800})
    box = page.locator(".runtime-facts summary").bounding_box()
    print("Runtime summary box", box)
    assert box is not None and box["width"] >= 24 and box["height"] >= 24, box


def test_no_page_errors(studio: RecordedPage) -> None:
    studio.assert_offline()
    errors = [line for line in studio.console if line.startswith("pageerror")]
    assert not errors, errors
