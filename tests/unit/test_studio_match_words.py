"""A recall hit in plain words (evermind.studio.match_words): level, percentage, sentence."""

from __future__ import annotations

import math

from evermind.studio.match_words import (
    cache_words,
    describe_hits,
    level_of,
    percent_of_best,
    why,
)

CONVEX = "semantic+lexical; convex w=0.50 (measured trust); importance; mmr λ=0.70"


def test_percent_of_best_is_rounded_and_never_scientific() -> None:
    assert percent_of_best(0.8, 0.8) == "100 %"
    assert percent_of_best(0.5, 0.8) == "62 %"
    # The score the user saw stacked as "1.00e-9": a hit that barely made the list.
    assert percent_of_best(1e-9, 0.8) == "<1 %"
    assert percent_of_best(0.0, 0.8) == "0 %"
    assert percent_of_best(None, 0.8) == "—"
    assert percent_of_best(math.nan, 0.8) == "—"
    assert percent_of_best(0.3, 0.0) == "—"


def test_level_against_the_best_hit() -> None:
    assert level_of(1.0, 1.0) == "strong"
    assert level_of(0.75, 1.0) == "strong"
    assert level_of(0.74, 1.0) == "partial"
    assert level_of(0.35, 1.0) == "partial"
    assert level_of(1e-9, 1.0) == "weak"
    assert level_of(None, 1.0) == "weak"


def test_why_names_the_ranking_and_what_the_hit_shares() -> None:
    assert why(CONVEX, {"bm25": 2.1, "cosine": 0.4}) == (
        "Ranked by meaning and shared words. It shares words with your query."
    )
    assert why(CONVEX, {"bm25": 0.0, "cosine": 0.4}) == (
        "Ranked by meaning and shared words. It shares no words with your query: found by meaning."
    )
    lexical = why("lexical only: no embedder; importance", {"bm25": 1.0})
    assert lexical.startswith("Ranked by shared words only: there is no model yet")
    # No jargon of the label leaks into the sentence.
    for text in (why(CONVEX, {"bm25": 1.0}), lexical):
        assert not any(word in text for word in ("convex", "mmr", "λ", "bm25", "semantic"))
    # A label it does not know is passed on rather than dropped.
    assert why("dense rerank", {}) == "Ranked by dense rerank."


def test_describe_hits_measures_each_against_the_best() -> None:
    hits = [
        {"score": 0.9, "ranked_by": CONVEX, "signals": {"bm25": 1.0, "cosine": 0.5}},
        {"score": 0.45, "ranked_by": CONVEX, "signals": {"bm25": 0.0, "cosine": 0.3}},
        {"score": 1e-9, "ranked_by": CONVEX, "signals": {"bm25": 0.2}},
    ]
    words = describe_hits(hits)
    assert [w["level"] for w in words] == ["strong", "partial", "weak"]
    assert [w["words"] for w in words] == ["Strong match", "Partial match", "Weak match"]
    assert [w["percent"] for w in words] == ["100 %", "50 %", "<1 %"]
    assert describe_hits([]) == []


def test_cache_words_say_what_was_served_or_why_not() -> None:
    trigram = "lexical only: no model (character-trigram cosine)"
    semantic = "semantic+lexical: mean of the tab model's cosine and the character-trigram cosine"
    exact = {"hit": True, "tier": "l1", "score": 1.0, "reason": "exact match of a cached query"}
    exact |= {"cached_query": "convert 100 USD to EUR", "entries": 1, "ranked_by": trigram}
    assert cache_words(exact) == (
        "Served from this tab's cache: this exact question was stored. "
        "Questions are compared by spelling only: there is no model yet."
    )
    near = {**exact, "score": 0.91, "reason": "served from l1", "ranked_by": semantic}
    assert cache_words(near).startswith(
        "Served from this tab's cache: \u201cconvert 100 USD to EUR\u201d asks the same."
    )
    assert cache_words(near).endswith("by meaning (this tab's model) and by spelling.")
    l2 = {**near, "tier": "l2"}
    assert cache_words(l2).startswith("Served by the runtime's shared cache (L2)")
    refused = {**near, "hit": False, "tier": None, "refused_by": "numbers"}
    assert "was refused: a check found that they differ." in cache_words(refused)
    contested = {**refused, "refused_by": "contested"}
    assert "as close has a different answer" in cache_words(contested)
    assert cache_words({"hit": False, "entries": 0, "ranked_by": trigram}).startswith(
        "Not served: the cache is empty"
    )
    far = {"hit": False, "entries": 3, "cached_query": None, "ranked_by": trigram}
    assert cache_words(far).startswith("Not served: no stored question is close.")
    # No label jargon in the sentence.
    for result in (exact, near, refused, far):
        assert not any(w in cache_words(result) for w in ("trigram", "cosine", "semantic", "δ"))
