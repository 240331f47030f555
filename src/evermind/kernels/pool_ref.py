"""numpy reference for ``shaders/pool.wgsl`` (native-only module).

Slow and obvious on purpose: one batch row at a time, float64 throughout.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]
U32 = NDArray[np.uint32]


def mean_l2_ref(hidden: F32, lengths: U32, eps: float = 1e-12) -> F32:
    """Mean over the first ``min(lengths[b], L)`` positions, then ``x / max(||x||, eps)``.

    Args:
        hidden: (B, L, D).
        lengths: (B,) valid prefix lengths.
        eps: Norm floor.

    Returns:
        (B, D) unit vectors (zero vectors where nothing is valid).
    """
    batch, seq_len, dim = hidden.shape
    out = np.zeros((batch, dim), np.float64)
    for b in range(batch):
        n = min(int(lengths[b]), seq_len)
        if n == 0:
            continue
        pooled = hidden[b, :n].astype(np.float64).mean(axis=0)  # (D,)
        out[b] = pooled / max(float(np.linalg.norm(pooled)), eps)
    return out.astype(np.float32)
