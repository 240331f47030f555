"""Ranked lists and their fusion: top-k, z-scores, min-max scaling, convex fusion and RRF.

**Convex fusion** (:func:`convex`, :func:`fuse_convex`). A dense ranker scores by cosine and
a lexical one by BM25 (or Postgres' ``ts_rank_cd``): different scales, so each is z-scored
over the candidates and mixed, ``(1 − w)·z(lexical) + w·z(dense)`` (Bruch et al., 2023, "An
Analysis of Fusion Functions for Hybrid Retrieval"), then min-max scaled to (0, 1]
(:func:`unit_scale`: the best is 1, the weakest a tiny positive so it stays ranked).
Memory recall z-scores over a fixed candidate pool (``basis``) and fills in the other
scores itself; the retriever z-scores over every candidate and fills a missing dense score
with the arm's lowest and a missing lexical one with 0 (:func:`fuse_convex`).

**RRF** (:func:`reciprocal_rank_fusion`, :func:`fuse_rrf`). ``Σ 1 / (k + rank)`` over the
rankings, rank counted from 1 (Cormack et al., 2009). Needs no score calibration; ignores
how far apart the scores are.

Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = [
    "convex",
    "fuse_convex",
    "fuse_rrf",
    "reciprocal_rank_fusion",
    "top_k",
    "unit_scale",
    "zscores",
]

#: The least scaled value: the weakest candidate stays ranked (last) rather than dropped.
TINY = 1e-9


def top_k(
    scores: Mapping[str, float], k: int, accept: Callable[[str], bool] | None = None
) -> list[tuple[str, float]]:
    """Returns the ``k`` best ``(id, score)`` pairs, best first; ties by id for determinism.

    ``accept`` is asked only about the best ids until ``k`` pass (a window of the best
    ``4k``, widened to all when too few of them pass), not about every scored id.
    """
    if k <= 0:
        return []
    order = lambda item: (-item[1], item[0])  # noqa: E731 - a total order: same as a sort
    window = max(4 * k, 16)
    while True:
        if window < len(scores):
            ranked = heapq.nsmallest(window, scores.items(), key=order)
        else:
            ranked = sorted(scores.items(), key=order)
        if accept is None:
            return ranked[:k]
        out = []
        for item in ranked:
            if accept(item[0]):
                out.append(item)
                if len(out) == k:
                    return out
        if window >= len(scores):
            return out
        window = len(scores)


def zscores(values: Mapping[str, float], basis: Iterable[str] | None = None) -> dict[str, float]:
    """``(x − mean) / std`` per id (population std); all 0 when the values do not vary.

    The mean and std are those of the ids in ``basis`` (default: all of them).
    """
    sample = list(values.values()) if basis is None else [values[key] for key in basis]
    n = len(sample)
    if n == 0:
        return dict.fromkeys(values, 0.0)
    mean = math.fsum(sample) / n
    var = math.fsum((x - mean) ** 2 for x in sample) / n
    if var <= 1e-24 * max(1.0, mean * mean):
        return dict.fromkeys(values, 0.0)
    std = math.sqrt(var)
    return {key: (x - mean) / std for key, x in values.items()}


def unit_scale(values: Mapping[str, float]) -> dict[str, float]:
    """Min-max scaled to (0, 1]: the best is 1, the weakest :data:`TINY` (kept ranked); all 1
    when the values do not differ."""
    if not values:
        return {}
    bottom, top = min(values.values()), max(values.values())
    if top <= bottom:
        return dict.fromkeys(values, 1.0)
    return {key: max((v - bottom) / (top - bottom), TINY) for key, v in values.items()}


def convex(
    lexical: Mapping[str, float],
    dense: Mapping[str, float],
    weight: float,
    basis: Iterable[str] | None = None,
) -> dict[str, float]:
    """``(1 − w)·z(lexical) + w·z(dense)`` per id, scaled to (0, 1] by :func:`unit_scale`.

    Args:
        lexical: Every candidate's lexical score (the ids of the result, in its order).
        dense: Every candidate's cosine (the same ids).
        weight: The dense weight ``w`` in [0, 1].
        basis: The ids whose mean and std the z-scores use (None: all of them).
    """
    ids = list(lexical)
    if basis is not None:
        basis = list(basis)
    z_lexical = zscores(lexical, basis)
    z_dense = zscores(dense, basis)
    return unit_scale({key: (1.0 - weight) * z_lexical[key] + weight * z_dense[key] for key in ids})


def fuse_convex(
    dense: Sequence[tuple[str, float]],
    lexical: Sequence[tuple[str, float]],
    weight: float,
) -> dict[str, float]:
    """Convex fusion of two rankings over the union of their ids (the retriever's).

    A candidate the dense arm did not return gets its lowest returned score, one the lexical
    arm did not return 0 (an arm returns every match up to its pool, so a missing one matched
    little or nothing). When one arm returned nothing, the other's scores are scaled alone.

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
        return unit_scale(dense_all)
    if not dense_of:
        return unit_scale(lexical_all)
    return convex(lexical_all, dense_all, weight)


def reciprocal_rank_fusion(rankings: Iterable[Sequence[str]], k: int = 60) -> dict[str, float]:
    """Fuses rankings (best first) into ``id -> Σ 1 / (k + rank)`` with rank counted from 1."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (k + rank)
    return fused


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
