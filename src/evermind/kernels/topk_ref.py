"""numpy reference for ``shaders/topk.wgsl`` (native-only module).

Slow and obvious on purpose: score everything in float64, then a stable sort.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]
U32 = NDArray[np.uint32]


def cosine_scores_ref(query: F32, stored: F32, eps: float = 1e-12) -> NDArray[np.float64]:
    """Scores (Q, N): normalised queries (Q, D) dotted with stored rows (N, D), float64."""
    q64 = query.astype(np.float64)
    norms = np.maximum(np.linalg.norm(q64, axis=1, keepdims=True), eps)
    scores: NDArray[np.float64] = (q64 / norms) @ stored.astype(np.float64).T  # (Q, N)
    return scores


def topk_ref(query: F32, stored: F32, k: int, eps: float = 1e-12) -> tuple[F32, U32]:
    """The k best rows per query: (scores (Q, k) descending, indices (Q, k)).

    Equal scores are ordered by lower index (a stable sort on the negated score).
    """
    scores = cosine_scores_ref(query, stored, eps)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # (Q, k)
    best = np.take_along_axis(scores, order, axis=1)
    return best.astype(np.float32), order.astype(np.uint32)
