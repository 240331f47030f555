"""The Studio's draft record (corpus and tokenizer before any run): whole or dropped."""

from __future__ import annotations

import copy

import pytest

from evermind.studio.draft import DraftError, describe_draft, draft_record, parse_draft
from evermind.tokenizer import Tokenizer
from tests.factories import TEXT

SOURCES = {"notes.txt": (TEXT * 3, "notes.txt (1 kB)"), "more.md": (TEXT[:200], "more.md")}


@pytest.fixture(scope="module")
def record() -> dict:
    tok = Tokenizer.train(TEXT * 3, vocab_size=300)
    return draft_record(SOURCES, tok, 300, 0.05)


def test_a_draft_round_trips_and_says_what_it_restored(record: dict) -> None:
    draft = parse_draft(copy.deepcopy(record))
    assert draft.sources == SOURCES and draft.vocab_requested == 300
    assert draft.tokenizer is not None and draft.tokenizer.to_json() == record["tokenizer"]
    words = describe_draft(draft)
    assert "corpus (2 sources," in words and f"tokenizer ({draft.tokenizer.vocab_size:,}" in words


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda r: r["sources"][0].__setitem__(1, "cut"), "digest"),
        (lambda r: r.__setitem__("tokenizer", r["tokenizer"][:50]), "tokenizer does not load"),
        (lambda r: r.__setitem__("version", 99), "version 99"),
        (lambda r: r.__setitem__("sources", [["a", 1, "b"]]), "sources"),
        (lambda r: r.pop("held_out_fraction"), "held-out fraction"),
    ],
)
def test_a_damaged_draft_is_refused_with_the_reason(record: dict, damage, reason: str) -> None:
    bad = copy.deepcopy(record)
    damage(bad)
    with pytest.raises(DraftError, match=reason):
        parse_draft(bad)
    with pytest.raises(DraftError, match="expected a record"):
        parse_draft("not a dict")
