"""The retriever's pure ranking steps: fusion of the two arms, term coverage, MMR order.

Everything here is computation over plain values (ids, scores, texts); the retriever feeds it
the arms' results. Browser-safe: standard library and ``evermind`` only.

**Convex fusion.** The dense arm scores by cosine and the lexical arm by BM25 (or Postgres'
``ts_rank_cd``): different scales, so each is z-scored over the union of both arms'
candidates and mixed, ``(1 − w)·z(lexical) + w·z(dense)`` (Bruch et al., 2023, "An Analysis
of Fusion Functions for Hybrid Retrieval"), then min-max scaled to (0, 1]. A candidate one
arm did not return gets that arm's lowest returned score (dense) or 0 (lexical: an arm
returns every match up to its pool, so a missing one matched little or nothing).

**RRF.** ``Σ 1 / (rrf_k + rank)`` over the arms (Cormack et al., 2009), scaled so the best
is 1. Needs no score calibration; ignores how far apart the scores are.

**Coverage** is the absolute evidence the relevance floor reads: the share of the
question's content terms (:func:`evermind.text.terms`: folded, stemmed, stop words dropped)
that a passage contains, each term weighted by the lexical arm's ``term_weight`` (its IDF for
the in-process BM25 arm, so a rare word of the question counts for more than a common one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from evermind.search.fusion import reciprocal_rank_fusion, zscores
from evermind.search.mmr import mmr_order
from evermind.search.terms import jaccard
from evermind.text import terms

__all__ = ["coverage", "fuse_convex", "fuse_rrf", "mmr", "term_set"]


def _unit_scale(values: Mapping[str, float]) -> dict[str, float]:
    """Min-max scaled to (0, 1]: the best is 1, the weakest a tiny positive (kept ranked)."""
    if not values:
        return {}
    bottom, top = min(values.values()), max(values.values())
    if top <= bottom:
        return dict.fromkeys(values, 1.0)
    return {key: max((v - bottom) / (top - bottom), 1e-9) for key, v in values.items()}


def fuse_convex(
    dense: Sequence[tuple[str, float]],
    lexical: Sequence[tuple[str, float]],
    weight: float,
) -> dict[str, float]:
    """Convex fusion of two rankings (see the module docstring).

    Args:
        dense: ``(id, cosine)`` best first.
        lexical: ``(id, lexical score)`` best first.
        weight: The dense arm's weight ``w`` in [0, 1].

    Returns:
        ``id -> fused relevance`` in (0, 1] over the union of both arms' ids.
    """
    keys = list(dict.fromkeys([key for key, _ in dense] + [key for key, _ in lexical]))
    if not keys:
        return {}
    dense_of = dict(dense)
    lexical_of = dict(lexical)
    low = min(dense_of.values()) if dense_of else 0.0
    dense_all = {key: dense_of.get(key, low) for key in keys}
    lexical_all = {key: lexical_of.get(key, 0.0) for key in keys}
    if not lexical_of:
        return _unit_scale(dense_all)
    if not dense_of:
        return _unit_scale(lexical_all)
    z_dense = zscores(dense_all)
    z_lexical = zscores(lexical_all)
    mixed = {key: (1.0 - weight) * z_lexical[key] + weight * z_dense[key] for key in keys}
    return _unit_scale(mixed)


def fuse_rrf(
    dense: Sequence[tuple[str, float]], lexical: Sequence[tuple[str, float]], rrf_k: int
) -> dict[str, float]:
    """Reciprocal-rank fusion of the two rankings, scaled so the best id is 1."""
    rankings = [[key for key, _ in ranking] for ranking in (dense, lexical) if ranking]
    fused = reciprocal_rank_fusion(rankings, rrf_k)
    if not fused:
        return {}
    best = max(fused.values())
    return {key: value / best for key, value in fused.items()}


def term_set(text: str) -> frozenset[str]:
    """The content terms of ``text`` (what coverage and MMR compare)."""
    return frozenset(terms(text))


def coverage(
    question_terms: frozenset[str],
    passage_terms: frozenset[str],
    weight: Callable[[str], float],
) -> float:
    """The weighted share of ``question_terms`` found in ``passage_terms``, in [0, 1].

    A question without content terms ("what is it?") covers nothing: 0.
    """
    total = sum(weight(term) for term in question_terms)
    if total <= 0.0:
        return 0.0
    found = sum(weight(term) for term in question_terms & passage_terms)
    return found / total


def mmr(
    relevance: Mapping[str, float],
    term_sets: Mapping[str, frozenset[str]],
    k: int,
    lam: float,
) -> list[str]:
    """Up to ``k`` ids by maximal marginal relevance, similarity the Jaccard of their terms.

    ``relevance`` is rescaled so the best is 1 (the same scale as the similarity).
    """
    if not relevance:
        return []
    best = max(relevance.values())
    scaled = {key: value / best for key, value in relevance.items()} if best > 0 else relevance

    def similarity(a: str, b: str) -> float:
        return jaccard(term_sets[a], term_sets[b])

    return [key for key, _ in mmr_order(scaled, similarity, k, lam)]
