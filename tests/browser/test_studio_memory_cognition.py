"""The Studio's Memory panel writes through write-through cognition and says what happened.

In headless Chromium, through the panel's own fields and button: a new memory is remembered
as new; a contradicting one under another phrasing of the key supersedes it (the panel says
so, with the one-line summary, and the recent list holds only the new value); the same fact
again is confirmed, not stored twice.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.conftest import RecordedPage, open_studio, show, wait_text


@pytest.fixture
def studio(browser, server) -> Iterator[RecordedPage]:
    rec = open_studio(browser, server)
    try:
        yield rec
        rec.assert_offline()
    finally:
        rec.close()


def _remember(studio: RecordedPage, key: str, content: str, said: str) -> str:
    page = studio.page
    page.fill("#panel-memory input[name=memory-key]", key)
    page.fill("#panel-memory textarea[name=memory-content]", content)
    page.click("#memory-remember")
    return wait_text(studio, "#panel-memory .message", said)


def test_the_panel_says_what_write_through_cognition_did(studio: RecordedPage) -> None:
    show(studio, "memory")
    page = studio.page
    page.fill("#panel-memory input[name=memory-namespace]", "cognition-test")
    new = _remember(
        studio, "deploy.staging.port", "Staging listens on port 8080", r"Remembered as a new memory"
    )
    assert "augmented: remembered 'deploy.staging.port'" in new, new
    wait_text(studio, "#memory-list", r"deploy\.staging\.port")
    replaced = _remember(
        studio, "Deploy_Staging_Port", "The staging server now uses 9090", r"Replaced an older"
    )
    assert "history" in replaced, replaced
    assert "superseded 'deploy.staging.port' by 'Deploy_Staging_Port' 8080 → 9090" in replaced
    listed = wait_text(studio, "#memory-list", r"Deploy_Staging_Port")
    assert "9090" in listed and "8080" not in listed, listed
    again = _remember(
        studio, "deploy-staging-port", "The staging server now uses 9090.", r"Already known"
    )
    assert "confirmed 'Deploy_Staging_Port'" in again, again
    assert page.locator("#memory-list li").count() == 1
