"""Recall's weighting: a memory's importance and its age as factors on the fused relevance.

The ranking itself (BM25, fusion, MMR, the relevance floor) is :mod:`evermind.search`'s;
these two factors are memory's own, read from a record's ``importance`` and ``updated_at``.
Browser-safe: standard library only.
"""

from __future__ import annotations

__all__ = ["importance_factor", "recency_factor"]


def importance_factor(importance: float, weight: float) -> float:
    """``1 + weight·(2·importance − 1)``: 0.5 is neutral, 1.0 boosts, 0.0 damps."""
    return 1.0 + weight * (2.0 * importance - 1.0)


def recency_factor(age_s: float, half_life_s: float, weight: float) -> float:
    """``1 − weight + weight·0.5^(age / half_life)``: 1.0 when fresh, ``1 − weight`` when old."""
    decay: float = 0.5 ** (max(age_s, 0.0) / half_life_s)
    return 1.0 - weight + weight * decay
