"""numpy reference for ``shaders/topk.wgsl``: cosine scores and the k best rows (native-only).

Shapes: query (Q, D), stored (N, D) (rows already unit length), scores (Q, N), k best per
query (Q, k). Score everything in float64, then a stable sort: equal scores are ordered by
lower index.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from evermind.ops._dtype import F64, Floats, f64

__all__ = ["cosine_scores", "topk"]


def cosine_scores(query: Floats, stored: Floats, eps: float = 1e-12) -> F64:
    """Scores (Q, N): normalised queries (Q, D) dotted with stored rows (N, D), float64."""
    q64 = f64(query)
    norms = np.maximum(np.linalg.norm(q64, axis=1, keepdims=True), eps)
    scores: F64 = (q64 / norms) @ f64(stored).T  # (Q, N)
    return scores


def topk(
    query: Floats, stored: Floats, k: int, eps: float = 1e-12
) -> tuple[NDArray[np.float32], NDArray[np.uint32]]:
    """The k best rows per query: (scores (Q, k) float32 descending, indices (Q, k) uint32)."""
    scores = cosine_scores(query, stored, eps)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # (Q, k)
    best = np.take_along_axis(scores, order, axis=1)
    return best.astype(np.float32), order.astype(np.uint32)
