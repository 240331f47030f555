"""The Studio page as a person uses it: panels, keyboard, data, tokenizer, a short training.

One page (one Pyodide boot) is shared by the tests of this module, which run in order the way
a person moves through the panels; each test asserts what is visible in the page. Screenshots
of every panel go to ``test-results/studio/`` (git-ignored) for a human to look at.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import ROOT, RecordedPage, open_studio, show, wait_text
from tests.factories import TEXT

SHOTS = ROOT / "test-results" / "studio"
PANELS = ["data", "tokenizer", "train", "try", "export", "memory", "cache"]
TIMEOUT_MS = 180_000


@pytest.fixture(scope="module")
def studio(browser, server) -> Iterator[RecordedPage]:
    rec = open_studio(browser, server)
    rec.page.set_viewport_size({"width": 1280, "height": 800})
    SHOTS.mkdir(parents=True, exist_ok=True)
    boot = rec.page.evaluate("window.__evermind")
    assert boot["ok"], f"studio failed to boot: {boot}\n" + "\n".join(rec.console)
    # A profile is fresh, but the worker may see a checkpoint of an earlier test in this
    # browser context: start from an empty session so the panels' states are known.
    rec.page.evaluate("window.evermind.call('session_clear')")
    yield rec
    rec.close()


def shot(rec: RecordedPage, name: str) -> None:
    rec.page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_all_panels_render_with_states_and_gated_buttons(studio: RecordedPage) -> None:
    page = studio.page
    assert page.locator("#status-pill").inner_text() == "ready"
    steps = page.locator("nav .step")
    assert steps.count() == len(PANELS)
    for index, panel in enumerate(PANELS):
        button = page.locator(f"#step-{panel}")
        assert button.evaluate("b => b.tagName") == "BUTTON"
        assert button.get_attribute("data-status") == "todo"  # nothing done yet: ○
        assert button.locator(".mark").inner_text() == "○"
        button.click()
        heading = page.locator(f"#heading-{panel}")
        assert heading.is_visible() and heading.inner_text().lower() == panel
        assert page.locator("main .panel:not([hidden])").count() == 1
        assert button.get_attribute("aria-current") == "step"
        shot(studio, f"{index + 1}-{panel}-empty")
    # Prerequisites: nothing to train on yet, so Train is disabled and says why.
    show(studio, "tokenizer")
    train_tok = page.locator("#tokenizer-train")
    assert train_tok.is_disabled()
    assert "Add data first" in train_tok.get_attribute("title")
    show(studio, "train")
    assert page.locator("#train-start").is_disabled()
    assert "tokenizer" in page.locator("#train-start").get_attribute("title")


def test_keyboard_moves_between_panels(studio: RecordedPage) -> None:
    page = studio.page
    show(studio, "data")
    page.focus("#step-data")
    page.keyboard.press("ArrowDown")
    assert page.evaluate("document.querySelector('#studio').shadowRoot.activeElement.id") == (
        "step-tokenizer"
    )
    assert page.locator("#panel-tokenizer").is_visible()
    assert not page.locator("#panel-data").is_visible()
    page.keyboard.press("End")
    assert page.locator("#panel-cache").is_visible()
    page.keyboard.press("ArrowDown")  # wraps around
    assert page.locator("#panel-data").is_visible()
    # Only the current step is in the Tab order, so Tab leaves the step list.
    page.keyboard.press("Tab")
    focused = page.evaluate(
        "(() => { const a = document.querySelector('#studio').shadowRoot.activeElement;"
        " return [a.tagName, a.className]; })()"
    )
    assert focused[0] in ("BUTTON", "INPUT", "SUMMARY") and "step" not in focused[1], focused


def test_data_panel_takes_files_and_pasted_text(studio: RecordedPage, tmp_path: Path) -> None:
    page = studio.page
    show(studio, "data")
    notes = tmp_path / "notes.txt"
    notes.write_text(TEXT)
    records = tmp_path / "records.jsonl"
    records.write_text(
        '{"text": "A memory is kept in the browser."}\n{"text": "Recall by meaning."}\n'
    )
    page.set_input_files("#data-files", [str(notes), str(records)])
    wait_text(studio, "#panel-data .sources", r"records\.jsonl")
    sources = page.locator("#panel-data .sources").inner_text()
    assert "notes.txt" in sources
    size = page.locator("#data-size").inner_text()
    assert re.fullmatch(r"\d+(\.\d)? kB", size), size
    assert page.locator("#data-tokens").inner_text().startswith("≈")
    assert "quick brown fox" in page.locator("#data-sample").inner_text()
    assert page.locator("#step-data").get_attribute("data-status") == "done"
    assert page.locator("#step-data .mark").inner_text() == "✓"

    add = page.locator("#panel-data button", has_text="Add pasted text")
    assert add.is_disabled()
    page.fill("#panel-data textarea[name=paste-text]", "Pasted words about agents and memory.")
    page.fill("#panel-data input[name=paste-name]", "pasted-note.txt")
    add.click()
    wait_text(studio, "#panel-data .sources", r"pasted-note\.txt")
    shot(studio, "1-data")


def test_sql_over_a_dropped_csv_adds_a_column(studio: RecordedPage, tmp_path: Path) -> None:
    page = studio.page
    show(studio, "data")
    tickets = tmp_path / "tickets.csv"
    tickets.write_text(
        "id,status,body\n"
        "1,open,The export button does nothing on Safari.\n"
        "2,closed,Fixed typo in the README.\n"
        '3,open,"Recall returns stale memories, after a reload."\n'
    )
    page.set_input_files("#data-files", str(tickets))
    wait_text(studio, "#panel-data .tables", r"tickets")
    assert "tickets.csv" not in page.locator("#panel-data .sources").inner_text()
    assert not any("duckdb" in u for u in studio.requests), "DuckDB must load only on first use"
    page.fill("#panel-data textarea[name=sql]", "SELECT body FROM tickets WHERE status = 'open'")
    page.locator("#panel-data button", has_text="Run query").click()
    wait_text(studio, "#panel-data .sql-result", r"2 rows")
    assert any(
        re.search(r"/vendor/duckdb/[0-9a-f]{16}/duckdb-eh\.wasm$", u) for u in studio.requests
    )
    assert page.locator("#panel-data select[name=sql-column]").input_value() == "body"
    page.locator("#panel-data button", has_text="Add column to corpus").click()
    wait_text(studio, "#panel-data .sources", r"sql-body\.txt")
    # The two open tickets' bodies, joined as two documents, and nothing else.
    expected = len("The export button does nothing on Safari.\n\n") + len(
        "Recall returns stale memories, after a reload."
    )
    item = page.locator("#panel-data .sources li", has_text="sql-body.txt").inner_text()
    assert f"{expected} B" in item, item
    shot(studio, "1-data-sql")


def test_tokenizer_trains_with_a_progress_bar_and_chips(studio: RecordedPage) -> None:
    page = studio.page
    show(studio, "tokenizer")
    page.fill("#panel-tokenizer input[name=vocab-size]", "512")
    page.click("#tokenizer-train")
    wait_text(studio, "#panel-tokenizer .message", r"Trained")
    bar = page.locator("#tokenizer-progress")
    assert bar.evaluate("b => b.value === b.max && b.max > 0")
    chips = page.locator("#panel-tokenizer .examples .chip")
    assert chips.count() > 3
    assert page.locator("#step-tokenizer").get_attribute("data-status") == "done"
    page.fill("#panel-tokenizer input[name=encode-text]", "The quick brown fox")
    page.locator("#panel-tokenizer button", has_text="Encode").click()
    wait_text(studio, "#panel-tokenizer .encoded", r"tokens for 19 characters")
    pieces = page.locator("#panel-tokenizer .encoded .chip").all_inner_texts()
    assert "".join(pieces).replace("·", " ") == "The quick brown fox"
    shot(studio, "2-tokenizer")


@pytest.mark.slow
def test_short_nano_training_draws_the_loss_and_speed(studio: RecordedPage) -> None:
    page = studio.page
    show(studio, "train")
    assert page.locator("#train-start").is_enabled()
    for name, value in (("steps", "8"), ("batch_size", "2"), ("seq_len", "32"), ("lr", "0.01")):
        page.fill(f"#panel-train input[name={name}]", value)
    page.click("#train-start")
    wait_text(studio, "#train-state", r"running|finished")
    assert (
        page.locator("#train-pause").is_enabled()
        or page.locator("#train-state").inner_text() == "finished"
    )
    wait_text(studio, "#train-state", r"^finished$")
    chart = page.locator("#panel-train svg.chart")
    assert int(chart.get_attribute("data-train-points")) == 8
    assert int(chart.get_attribute("data-held-points")) >= 1
    assert page.locator("#panel-train path.line-train").get_attribute("d").count("L") == 7
    tokens_per_second = page.locator("#train-tps").inner_text()
    assert float(tokens_per_second.replace(",", "")) > 0, tokens_per_second
    assert page.locator("#train-step").inner_text() == "8 / 8"
    assert int(page.locator("#train-params").inner_text().replace(",", "").rstrip("M")) > 0
    assert "swiftshader" in page.locator("#panel-train .adapter-line").inner_text()
    assert "Finished at step 8" in page.locator("#panel-train .message").inner_text()
    assert page.locator("#step-train").get_attribute("data-status") == "done"
    shot(studio, "3-train")
    page.emulate_media(color_scheme="dark")
    background = page.locator("#studio").evaluate("e => getComputedStyle(e).backgroundColor")
    shot(studio, "3-train-dark")
    page.emulate_media(color_scheme="light")
    assert background == "rgb(15, 17, 21)", background  # the dark theme's --bg


@pytest.mark.slow
def test_try_and_export_use_the_trained_model(studio: RecordedPage) -> None:
    page = studio.page
    show(studio, "try")
    page.fill("#try-prompt", "The quick")
    page.fill("#panel-try input[name=max_new_tokens]", "8")
    page.click("#try-generate")
    wait_text(studio, "#try-generate-message", r"tokens at")
    assert page.locator("#try-output .prompt-echo").inner_text() == "The quick"
    page.click("#try-similarity")
    cosine = wait_text(studio, "#try-cosine", r"^-?\d\.\d{3}$")
    assert -1.0 <= float(cosine) <= 1.0
    page.click("#try-evaluate")
    wait_text(studio, "#try-eval", r"PERPLEXITY|Perplexity")
    shot(studio, "4-try")

    show(studio, "export")
    with page.expect_download() as info:
        page.click("#export-download")
    download = info.value
    assert download.suggested_filename.endswith(".evermind")
    with open(download.path(), "rb") as handle:
        assert handle.read(2) == b"PK"
    assert page.locator("#step-export").get_attribute("data-status") == "done"
    shot(studio, "5-export")


def test_memory_and_cache_panels(studio: RecordedPage) -> None:
    page = studio.page
    show(studio, "memory")
    page.fill("#panel-memory input[name=memory-key]", "user.language")
    page.fill(
        "#panel-memory textarea[name=memory-content]",
        "The user writes Python and likes short answers.",
    )
    page.fill("#panel-memory input[name=memory-tags]", "profile, language")
    page.click("#memory-remember")
    wait_text(studio, "#memory-list", r"user\.language")
    page.fill("#panel-memory input[name=memory-query]", "which programming language")
    page.click("#memory-recall")
    hits = wait_text(studio, "#memory-hits", r"user\.language")
    assert re.search(r"Ranked by (shared words|meaning)", hits), hits
    shot(studio, "6-memory")

    show(studio, "cache")
    page.fill("#panel-cache input[name=cache-store-query]", "convert 100 USD to EUR")
    page.fill("#panel-cache textarea[name=cache-store-response]", "About 92 EUR.")
    page.click("#cache-store")
    wait_text(studio, "#panel-cache .message", r"Stored")
    page.fill("#panel-cache input[name=cache-query]", "convert 100 EUR to USD")
    page.click("#cache-lookup")
    verdict = wait_text(studio, "#cache-verdict", r"Hit|Miss")
    assert verdict.startswith("Miss"), f"a swapped direction must not hit: {verdict}"
    page.fill("#panel-cache input[name=cache-query]", "convert 100 USD to EUR")
    page.click("#cache-lookup")
    verdict = wait_text(studio, "#cache-verdict", r"Hit")
    assert "About 92 EUR." in verdict
    shot(studio, "7-cache")


def test_no_request_left_loopback(studio: RecordedPage) -> None:
    studio.assert_offline()
    errors = [line for line in studio.console if line.startswith(("pageerror", "error"))]
    assert not errors, errors
