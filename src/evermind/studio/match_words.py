"""A recall hit in plain words: how good a match it is and how it was found (browser-safe).

A memory recall ranks by a score relative to its best hit (the fused relevance, best = 1,
times the importance and recency factors) and names its steps in a technical label
(``"semantic+lexical; convex w=0.50 (measured trust); importance; recency half-life 30d;
mmr λ=0.70"``). Neither reads right to a newcomer: a score of ``1.00e-9`` is a hit that barely
made the list, and the label is jargon. The Studio's Memory panel shows these words first and
keeps the label and the numbers behind a "Details" disclosure.

- ``level``: ``strong`` (at least :data:`STRONG` of the best hit's score), ``partial`` (at
  least :data:`PARTIAL`) or ``weak``; ``words`` says it ("Strong match").
- ``percent``: the score as a rounded share of the best hit's (``"100 %"``, ``"62 %"``,
  ``"<1 %"``), or ``"—"`` when there is no number to show.
- ``why``: a sentence on how the recall ranked and what this hit has in common with the query
  (shared words, or meaning alone).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: The share of the best hit's score a hit needs to read as a strong, or a partial, match.
STRONG = 0.75
PARTIAL = 0.35
#: The first step of a recall's ``ranked_by`` label, in words.
RANKED = {
    "semantic+lexical": "Ranked by meaning and shared words",
    "semantic only: lexical off": "Ranked by meaning only",
    "lexical only: no embedder": (
        "Ranked by shared words only: there is no model yet "
        "(train one or open a package to rank by meaning too)"
    ),
    "lexical only: embedder failed": (
        "Ranked by shared words only: the model could not embed the query"
    ),
    "lexical only: semantic off": "Ranked by shared words only",
}
LEVEL_WORDS = {"strong": "Strong match", "partial": "Partial match", "weak": "Weak match"}


def percent_of_best(score: float | None, best: float | None) -> str:
    """``score`` as a rounded percentage of ``best`` (``"62 %"``, ``"<1 %"``), or ``"—"``."""
    if score is None or best is None or not math.isfinite(score) or not math.isfinite(best):
        return "—"
    if best <= 0:
        return "—"
    share = max(0.0, score / best)
    if share <= 0:
        return "0 %"
    if share < 0.005:
        return "<1 %"
    return f"{min(100, round(share * 100))} %"


def level_of(score: float | None, best: float | None) -> str:
    """``strong``, ``partial`` or ``weak``: where ``score`` falls against the best hit's."""
    if score is None or best is None or not math.isfinite(score) or not math.isfinite(best):
        return "weak"
    if best <= 0:
        return "weak"
    share = score / best
    return "strong" if share >= STRONG else "partial" if share >= PARTIAL else "weak"


def ranked_words(ranked_by: str) -> str:
    """The sentence for a recall's ``ranked_by`` label (its first step); unknown: as is."""
    first = ranked_by.split(";", 1)[0].strip()
    return RANKED.get(first, f"Ranked by {first}" if first else "Ranked")


def why(ranked_by: str, signals: Mapping[str, float]) -> str:
    """How the hit was found: the recall's ranking and what it shares with the query."""
    sentence = ranked_words(ranked_by)
    bm25 = signals.get("bm25")
    if bm25 is not None and bm25 > 0:
        return f"{sentence}. It shares words with your query."
    if "cosine" in signals:
        return f"{sentence}. It shares no words with your query: found by meaning."
    return f"{sentence}."


def describe_hits(hits: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The plain words for each of a recall's hits (``score``, ``ranked_by``, ``signals``),
    each measured against the best score among them."""
    scores = [h.get("score") for h in hits]
    finite = [s for s in scores if isinstance(s, (int, float)) and math.isfinite(s)]
    best = max(finite) if finite else None
    out = []
    for hit, score in zip(hits, scores, strict=True):
        value = float(score) if isinstance(score, (int, float)) else None
        level = level_of(value, best)
        out.append(
            {
                "level": level,
                "words": LEVEL_WORDS[level],
                "percent": percent_of_best(value, best),
                "why": why(str(hit.get("ranked_by") or ""), hit.get("signals") or {}),
            }
        )
    return out


__all__ = ["PARTIAL", "STRONG", "describe_hits", "level_of", "percent_of_best", "why"]
