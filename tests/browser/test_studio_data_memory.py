"""The Data panel's files go to memory: send, recall in the Memory panel, re-send, forget.

One page, no model (the Memory panel ranks lexically): a Markdown and a CSV file are chosen
through the Data panel's file input and sent to memory with "Send all to memory" (parsed and
chunked in the tab by ``evermind.ingest``, written to the tab's IndexedDB store); the Memory
panel recalls a fact of each; the Markdown file is changed in one sentence and sent again,
and the result line counts one updated chunk and the rest unchanged; "Forget" removes it and
recall no longer finds it. Zero non-loopback requests throughout.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import RecordedPage, open_studio, show, wait_text

TIMEOUT_MS = 60_000
NOTES = """# Deploy notes

## Staging

The staging cluster is called heron-7 and deploys every night at 02:00 UTC.

## Rollback

Roll back with the undo command; it keeps the last three releases.

## On call

The on-call rotation hands over on Mondays at 09:00.
"""
TICKETS = (
    "id,subject,body\n"
    "1,Login loop,Clearing the cookie named em_sid fixes the login loop.\n"
    "2,Slow export,Exports over 10000 rows run as a background job.\n"
)
RESULT = re.compile(
    r"(?P<added>\d+) chunks? added, (?P<updated>\d+) updated, (?P<removed>\d+) removed, "
    r"(?P<unchanged>\d+) unchanged"
)


@pytest.fixture(scope="module")
def studio(browser, server) -> Iterator[RecordedPage]:
    rec = open_studio(browser, server)
    boot = rec.page.evaluate("window.__evermind")
    assert boot["ok"], f"studio failed to boot: {boot}\n" + "\n".join(rec.console)
    yield rec
    rec.close()


def counts(text: str) -> dict[str, int]:
    found = RESULT.search(text)
    assert found, f"no counts in the result line: {text!r}"
    return {k: int(v) for k, v in found.groupdict().items()}


def recall(rec: RecordedPage, query: str) -> str:
    show(rec, "memory")
    rec.page.fill("#panel-memory input[name=memory-query]", query)
    rec.page.click("#memory-recall")  # its handler marks the button busy before it returns
    rec.page.locator("#memory-recall:not([aria-busy])").wait_for(timeout=TIMEOUT_MS)
    return rec.page.locator("#memory-hits").inner_text()


def send(rec: RecordedPage, button: str) -> dict[str, int]:
    show(rec, "data")
    rec.page.click(button)  # its handler clears the result line before it returns
    done = rec.page.locator(
        "#data-memory-result[data-kind=ok], #data-memory-result[data-kind=error]"
    )
    done.wait_for(timeout=TIMEOUT_MS)
    text = done.inner_text()
    assert done.get_attribute("data-kind") == "ok", text
    return counts(text)


def test_files_go_to_memory_recall_resend_and_forget(studio: RecordedPage, tmp_path: Path) -> None:
    page = studio.page
    notes, tickets = tmp_path / "notes.md", tmp_path / "tickets.csv"
    notes.write_text(NOTES, encoding="utf-8")
    tickets.write_text(TICKETS, encoding="utf-8")
    show(studio, "data")
    page.set_input_files("#data-files", [str(notes), str(tickets)])
    wait_text(studio, "#data-memory-files", r"notes\.md[\s\S]*tickets\.csv", TIMEOUT_MS)
    assert "not in memory" in page.locator("#data-memory-files").inner_text()

    first = send(studio, "#data-memory-send-all")
    total = first["added"]
    assert total >= 4 and first["updated"] == first["removed"] == first["unchanged"] == 0
    progress = page.locator("#data-memory-progress-text").inner_text()
    assert progress == f"{total} / {total} chunks", progress
    assert page.locator("#data-memory-progress").evaluate("e => [e.value, e.max]") == [total] * 2
    row = page.locator("#data-memory-files li[data-source='notes.md']")
    held = int(re.search(r"(\d+) chunks? in memory", row.inner_text()).group(1))  # type: ignore[union-attr]

    hits = recall(studio, "which cookie fixes the login loop")
    assert "em_sid" in hits and "from tickets.csv" in hits, hits
    hits = recall(studio, "what is the staging cluster called")
    assert "heron-7" in hits and "from notes.md" in hits, hits

    # One sentence changes: re-sending rewrites that chunk only.
    notes.write_text(NOTES.replace("heron-7", "osprey-2"), encoding="utf-8")
    show(studio, "data")
    page.set_input_files("#data-files", str(notes))
    wait_text(studio, "#panel-data .message", r"Added notes\.md\.", TIMEOUT_MS)
    again = send(studio, "#data-memory-files button[aria-label='Send notes.md to memory']")
    assert again == {"added": 0, "updated": 1, "removed": 0, "unchanged": held - 1}, again
    hits = recall(studio, "what is the staging cluster called")
    assert "osprey-2" in hits and "heron-7" not in hits, hits

    # Forget removes the source and every chunk of it; the other file stays.
    show(studio, "data")
    page.click("#data-memory-files button[aria-label='Forget notes.md from memory']")
    wait_text(
        studio, "#data-memory-result", rf"Forgot notes\.md: {held} chunks? removed", TIMEOUT_MS
    )
    wait_text(studio, "#data-memory-files li[data-source='notes.md']", r"not in memory", TIMEOUT_MS)
    hits = recall(studio, "staging cluster osprey-2 on-call rotation")
    assert "osprey-2" not in hits and "from notes.md" not in hits, hits
    assert "em_sid" in recall(studio, "login loop cookie")

    errors = [line for line in studio.console if line.startswith(("error", "pageerror"))]
    assert not errors, errors
    studio.assert_offline()
