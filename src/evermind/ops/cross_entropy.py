"""numpy reference for ``shaders/cross_entropy.wgsl``: softmax cross-entropy (native-only).

Shapes: logits (M, V), targets (M,) integer ids. A row counts when its target is in [0, V)
and is not ``ignore_index``; other rows (as in the kernel) have loss 0 and gradient 0.
float64 inside, results in the logits' floating dtype::

    loss_m    = log(sum_v exp(logits[m, v])) - logits[m, target_m]   (max-shifted)
    dlogits_m = (softmax(logits[m]) - onehot(target_m)) * scale
    mean loss = sum_m loss_m / valid_count (the kernel's scale is 1 / valid_count)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from evermind.ops._dtype import Floats, Ints, f64, out_dtype

__all__ = ["cross_entropy_bwd", "cross_entropy_fwd", "mean_loss", "valid_count", "valid_rows"]


def valid_rows(targets: Ints, v: int, ignore_index: int = -100) -> npt.NDArray[np.bool_]:
    """Which rows count: target in [0, V) and not ``ignore_index``, shape (M,)."""
    t = np.asarray(targets)
    rows: npt.NDArray[np.bool_] = (t != ignore_index) & (t >= 0) & (t < v)
    return rows


def valid_count(targets: Ints, v: int, ignore_index: int = -100) -> int:
    """Number of rows that count (see :func:`valid_rows`)."""
    return int(np.sum(valid_rows(targets, v, ignore_index)))


def _log_softmax64(logits: Floats) -> Floats:
    x64 = f64(logits)
    shifted = x64 - x64.max(axis=1, keepdims=True)  # (M, V), max 0: no overflow
    log_probs: Floats = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return log_probs


def cross_entropy_fwd(logits: Floats, targets: Ints, ignore_index: int = -100) -> Floats:
    """Per-row loss, shape (M,); 0 on rows that do not count."""
    valid = valid_rows(targets, logits.shape[1], ignore_index)
    rows = np.nonzero(valid)[0]
    row_loss = np.zeros(logits.shape[0])
    row_loss[rows] = -_log_softmax64(logits)[rows, np.asarray(targets)[rows]]
    return row_loss.astype(out_dtype(logits))


def cross_entropy_bwd(
    logits: Floats, targets: Ints, scale: float, ignore_index: int = -100
) -> Floats:
    """``dlogits (M, V) = (softmax - onehot) * scale`` on rows that count, 0 elsewhere."""
    valid = valid_rows(targets, logits.shape[1], ignore_index)
    rows = np.nonzero(valid)[0]
    dlogits = np.zeros(logits.shape)
    dlogits[rows] = np.exp(_log_softmax64(logits)[rows])
    dlogits[rows, np.asarray(targets)[rows]] -= 1.0
    return (dlogits * scale).astype(out_dtype(logits))


def mean_loss(logits: Floats, targets: Ints, ignore_index: int = -100) -> float:
    """The mean loss over the rows that count (the kernel's ``loss_mean``)."""
    count = valid_count(targets, logits.shape[1], ignore_index)
    row_loss = cross_entropy_fwd(f64(logits), targets, ignore_index)
    return float(row_loss.sum() / count)
