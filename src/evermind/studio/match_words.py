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

:func:`cache_words` does the same for a Cache panel look-up: served or not, and why, in a
sentence; the score, the ranking label and the verifier's numbers wait behind "Details".
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


#: Why a near-miss was refused, in plain words, by the refusing step (``Decision.refused_by``);
#: a guard not listed here (numbers, direction, …) "found that they differ".
REFUSED = {
    "threshold": "it is not close enough to give its answer",
    "calibration": (
        "this model scores unrelated questions about as high, so closeness proves nothing"
    ),
    "lexical": "they share too few words",
    "residue": "the words they do not share change the meaning",
    "contested": "another stored question as close has a different answer",
    "ambiguous": "another stored question as close has a different answer",
    "verifier": "the check of whether both ask the same said no",
}


def cache_words(result: Mapping[str, Any]) -> str:
    """A cache look-up's verdict in a sentence (``cache_lookup``'s ``hit``, ``tier``,
    ``cached_query``, ``refused_by``, ``entries``, ``ranked_by``): what was served or why
    not, then how questions were compared."""
    stored = result.get("cached_query")
    quoted = f"\u201c{stored}\u201d" if stored else "a stored question"
    if result.get("hit"):
        if result.get("tier") == "l2":
            said = "Served by the runtime's shared cache (L2): an agent asked the same there."
        elif result.get("score") == 1.0 and result.get("reason") == "exact match of a cached query":
            said = "Served from this tab's cache: this exact question was stored."
        else:
            said = f"Served from this tab's cache: {quoted} asks the same."
    elif not result.get("entries"):
        said = "Not served: the cache is empty; store an answer first."
    elif not stored:
        said = "Not served: no stored question is close."
    else:
        refused = str(result.get("refused_by") or "threshold")
        why_not = REFUSED.get(refused, "a check found that they differ")
        said = f"Not served: the closest stored question, {quoted}, was refused: {why_not}."
    ranked = str(result.get("ranked_by") or "")
    if ranked.startswith("semantic"):
        how = "Questions are compared by meaning (this tab's model) and by spelling."
    else:
        how = "Questions are compared by spelling only: there is no model yet."
    return f"{said} {how}"


__all__ = [
    "PARTIAL",
    "REFUSED",
    "STRONG",
    "cache_words",
    "describe_hits",
    "level_of",
    "percent_of_best",
    "why",
]
