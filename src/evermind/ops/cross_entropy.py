"""numpy reference for ``shaders/cross_entropy.wgsl``: softmax cross-entropy (native-only).

Shapes: logits (M, V), targets (M,) integer ids. A row counts when its target is in [0, V)
and is not ``ignore_index``; other rows (as in the kernel) have loss 0 and gradient 0.
float64 inside, results in the logits' floating dtype::

    loss_m    = log(sum_v exp(logits[m, v])) - logits[m, target_m]   (max-shifted)
    dlogits_m = (softmax(logits[m]) - onehot(target_m)) * scale
    mean loss = sum_m loss_m / valid_count (the kernel's scale is 1 / valid_count)

:func:`cross_entropy_loss_and_grad` is the training step's pair (:func:`mean_loss` and
:func:`cross_entropy_bwd`) from one log-softmax, in a ``compute`` dtype: the CPU model passes
its own (float32 to train, float64 for finite-difference checks).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from evermind.ops._dtype import Floats, Ints, as_compute, f64, out_dtype

__all__ = [
    "cross_entropy_bwd",
    "cross_entropy_fwd",
    "cross_entropy_loss_and_grad",
    "mean_loss",
    "valid_count",
    "valid_rows",
]


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


def cross_entropy_loss_and_grad(
    logits: Floats,
    targets: Ints,
    scale: float,
    ignore_index: int = -100,
    compute: npt.DTypeLike = np.float64,
) -> tuple[float, Floats]:
    """:func:`mean_loss` and :func:`cross_entropy_bwd` together, from one softmax in ``compute``.

    Args:
        logits: (M, V).
        targets: (M,) ids; rows that do not count (see :func:`valid_rows`) add nothing.
        scale: dlogits' factor (the mean's 1 / valid_count).
        ignore_index: Target value to skip.
        compute: The arithmetic's dtype (float64 by default, as the reference).

    Returns:
        ``(mean loss over the rows that count (nan when none does), dlogits (M, V))``,
        dlogits in the logits' floating dtype.
    """
    valid = valid_rows(targets, logits.shape[1], ignore_index)
    rows = np.nonzero(valid)[0]
    picked = np.asarray(targets)[rows]
    shifted = as_compute(logits, compute) - as_compute(logits, compute).max(axis=1, keepdims=True)
    probs = np.exp(shifted)  # (M, V), each row's max 1: no overflow
    sums = probs.sum(axis=1, keepdims=True)  # (M, 1)
    row_loss = np.log(sums[rows, 0]) - shifted[rows, picked]  # (counted,)
    loss = float(np.sum(row_loss, dtype=np.float64) / rows.size) if rows.size else float("nan")
    probs *= np.asarray(scale, probs.dtype) / sums
    probs[rows, picked] -= np.asarray(scale, probs.dtype)
    if rows.size < valid.size:
        probs[~valid] = 0.0
    return loss, probs.astype(out_dtype(logits), copy=False)
