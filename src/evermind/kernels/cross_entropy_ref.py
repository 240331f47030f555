"""numpy references for ``shaders/cross_entropy.wgsl`` (native-only module).

Slow and obvious on purpose: one row at a time, float64 throughout. Rows whose target is
``ignore_index`` (or outside [0, V), as the kernel treats them) contribute nothing.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]
I32 = NDArray[np.int32]


def valid_count_ref(targets: I32, v: int, ignore_index: int = -100) -> int:
    """Number of rows that count: target in [0, V) and not ``ignore_index``."""
    return int(np.sum((targets != ignore_index) & (targets >= 0) & (targets < v)))


def softmax_xent_ref(
    logits: F32, targets: I32, scale: float, ignore_index: int = -100
) -> tuple[F32, F32]:
    """Per-row loss (M,) and ``dlogits (M, V) = (softmax - onehot) * scale``."""
    m, v = logits.shape
    row_loss = np.zeros(m, np.float64)
    dlogits = np.zeros((m, v), np.float64)
    for i in range(m):
        t = int(targets[i])
        if t == ignore_index or t < 0 or t >= v:
            continue
        row = logits[i].astype(np.float64)
        shifted = row - row.max()
        total = np.exp(shifted).sum()
        row_loss[i] = np.log(total) - shifted[t]
        probs = np.exp(shifted) / total
        probs[t] -= 1.0
        dlogits[i] = probs * scale
    return row_loss.astype(np.float32), dlogits.astype(np.float32)


def mean_loss_ref(logits: F32, targets: I32, ignore_index: int = -100) -> float:
    """The mean loss over valid rows (what ``loss_mean`` computes with scale = 1/count)."""
    count = valid_count_ref(targets, logits.shape[1], ignore_index)
    row_loss, _ = softmax_xent_ref(logits, targets, 1.0, ignore_index)
    return float(row_loss.astype(np.float64).sum() / count)
