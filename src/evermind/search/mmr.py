"""Maximal marginal relevance: relevant results that do not repeat each other.

Each step takes the id maximising ``λ·relevance − (1 − λ)·(its highest similarity to the ids
already taken)`` (Carbonell and Goldstein, 1998). Memory recall compares two memories by the
cosine of their vectors (or the Jaccard of their terms without an embedder), the retriever
two passages by the Jaccard of their terms; both hand :func:`mmr` their similarity.

Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["mmr", "mmr_order"]


def mmr_order(
    relevance: Mapping[str, float],
    similarity: Callable[[str, str], float],
    k: int,
    lam: float = 0.7,
) -> list[tuple[str, float]]:
    """Selects up to ``k`` ids by maximal marginal relevance.

    Each step takes the id maximising ``lam·relevance − (1 − lam)·max similarity to the ids
    already taken``. Relevance should be on the same scale as similarity (both in [0, 1]).

    Returns:
        ``(id, mmr value at selection)`` in selection order.
    """
    remaining = sorted(relevance, key=lambda doc: (-relevance[doc], doc))
    chosen: list[tuple[str, float]] = []
    max_sim = dict.fromkeys(remaining, 0.0)
    while remaining and len(chosen) < k:
        best = max(
            remaining,
            key=lambda doc: lam * relevance[doc] - (1.0 - lam) * max_sim[doc],
        )
        value = lam * relevance[best] - (1.0 - lam) * max_sim[best]
        chosen.append((best, value))
        remaining.remove(best)
        for doc in remaining:
            max_sim[doc] = max(max_sim[doc], similarity(best, doc))
    return chosen


def mmr(
    relevance: Mapping[str, float],
    similarity: Callable[[str, str], float],
    k: int,
    lam: float,
) -> list[str]:
    """Up to ``k`` ids in MMR order (:func:`mmr_order`), ``relevance`` first rescaled so the
    best is 1 (the scale of a similarity; left as it is when the best is not above 0)."""
    if not relevance:
        return []
    best = max(relevance.values())
    scaled = {key: value / best for key, value in relevance.items()} if best > 0 else relevance
    return [key for key, _ in mmr_order(scaled, similarity, k, lam)]
