"""The Studio reads in plain words first, with the details on demand (issue 39, item 3).

In headless Chromium, through the panels' own fields and buttons: a recall card says how good
a match each hit is ("Strong match") and its score as a rounded share of the best hit's
("100 %", never "1.00e-9"), says in a sentence how it was found, and keeps the technical
ranking label and the raw numbers inside a closed ``<details>``; the Train form keeps the
block type and the experts (the "cortex") behind an "Advanced" disclosure; the Cache panel's
verdict says in a sentence what was served or why not, the score and labels behind Details.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.browser.conftest import RecordedPage, open_studio, show, wait_text

#: Words of the technical labels that must not be on a card until its details are opened.
JARGON = ("convex", "mmr", "λ", "rrf", "bm25", "semantic", "lexical", "measured trust", "e-")
#: A readable score: a rounded percentage or a dash.
PERCENT = re.compile(r"^(\d{1,3} %|<1 %|—)$")


@pytest.fixture(scope="module")
def studio(browser, server) -> Iterator[RecordedPage]:
    """One Studio page for the module's tests (a page boot is seconds of Pyodide). Safe to
    share: each test opens its own panel and writes only there (the memory test in its own
    namespace, the cache test its own entry), and none depends on another having run."""
    rec = open_studio(browser, server)
    try:
        yield rec
        rec.assert_offline()
    finally:
        rec.close()


def _remember(studio: RecordedPage, key: str, content: str) -> None:
    page = studio.page
    page.fill("#panel-memory input[name=memory-key]", key)
    page.fill("#panel-memory textarea[name=memory-content]", content)
    page.click("#memory-remember")
    wait_text(studio, "#memory-list", re.escape(key))


def test_recall_cards_say_the_match_in_words_and_keep_details_closed(
    studio: RecordedPage,
) -> None:
    show(studio, "memory")
    page = studio.page
    page.fill("#panel-memory input[name=memory-namespace]", "plain-words-test")
    _remember(studio, "user.language", "The user writes Python and prefers short answers.")
    _remember(studio, "user.editor", "The user edits Python in Neovim.")
    _remember(studio, "team.lunch", "The team has lunch at noon on Fridays.")
    query = "Which language does the user write?"
    page.fill("#panel-memory input[name=memory-query]", query)
    page.click("#memory-recall")
    wait_text(studio, "#memory-hits", r"user\.language")
    recalled = page.evaluate(
        "([q]) => window.evermind.call('memory_recall', {query: q, namespace: 'plain-words-test'})",
        [query],
    )
    cards = page.locator("#memory-hits > li")
    assert cards.count() == len(recalled["hits"]) >= 2, recalled
    for i, hit in enumerate(recalled["hits"]):
        card = cards.nth(i)
        seen = card.inner_text()  # what the eye sees: a closed <details> shows its summary only
        print(repr(seen))
        assert not [w for w in JARGON if w in seen.lower()], seen
        score = card.locator(".hit-head .score").inner_text()
        assert PERCENT.match(score), score
        assert score == hit["match"]["percent"]
        assert card.locator(".hit-head .match").inner_text() == hit["match"]["words"]
        assert card.locator(".hit-why").inner_text() == hit["match"]["why"]
        details = card.locator("details.hit-details")
        assert details.count() == 1 and details.get_attribute("open") is None
        # On demand: the ranking label and the raw score are there once opened.
        details.locator("summary").click()
        assert details.get_attribute("open") is not None
        opened = details.inner_text()
        assert hit["ranked_by"] in opened, opened
        assert "Score" in opened
    # The best hit reads as a strong match at 100 %; the words say there is no model yet.
    first = cards.nth(0)
    assert first.locator(".match").inner_text() == "Strong match"
    assert first.locator(".score").inner_text() == "100 %"
    assert "there is no model yet" in first.locator(".hit-why").inner_text()


def test_the_train_form_keeps_block_and_experts_behind_advanced(studio: RecordedPage) -> None:
    show(studio, "train")
    page = studio.page
    form = page.locator("#panel-train section[aria-label=Settings]")
    assert "Cortex" not in form.inner_text() and "Experts" not in form.inner_text()
    advanced = page.locator("#train-advanced")
    assert advanced.get_attribute("open") is None
    advanced.locator("summary").click()
    assert page.locator("#train-moe-experts").is_visible()
    assert "Experts per layer (0: none)" in form.inner_text()


def test_the_cache_verdict_says_why_in_words_with_the_numbers_behind_details(
    studio: RecordedPage,
) -> None:
    show(studio, "cache")
    page = studio.page
    page.fill("#panel-cache input[name=cache-store-query]", "How do I convert USD to EUR?")
    page.fill("#panel-cache textarea[name=cache-store-response]", "Multiply by 0.92.")
    page.click("#cache-store")
    wait_text(studio, "#panel-cache .message", r"^Stored")
    verdict = page.locator("#cache-verdict")
    for query, served in (
        ("How do I convert USD to EUR?", r"^Hit"),
        ("How do I convert EUR to USD?", r"^Miss"),  # the direction flipped: refused
    ):
        page.fill("#panel-cache input[name=cache-query]", query)
        page.evaluate(
            "document.querySelector('evermind-studio').shadowRoot"
            ".getElementById('cache-verdict').replaceChildren()"
        )
        page.click("#cache-lookup")
        seen = wait_text(studio, "#cache-verdict", served)
        print(repr(seen))
        result = page.evaluate("([q]) => window.evermind.call('cache_lookup', {query: q})", [query])
        assert page.locator("#cache-words").inner_text() == result["words"]
        assert not [w for w in ("trigram", "cosine", "δ", "Score", "lexical") if w in seen], seen
        details = verdict.locator("details")
        assert details.get_attribute("open") is None
        details.locator("summary").click()
        opened = details.inner_text()
        assert "Ranked by" in opened and "Score" in opened, opened
    assert "was refused" in page.locator("#cache-words").inner_text()
