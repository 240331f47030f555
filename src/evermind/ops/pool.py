"""numpy reference for ``shaders/pool.wgsl``: masked mean-pool + L2 normalisation (native-only).

Sentence embeddings: the mean of the final hidden states over each text's valid prefix,
scaled to unit length. Shapes: hidden (B, L, D), lengths (B,) valid prefix lengths (the
model is causal, so texts are padded on the right), out (B, D). float64 inside, results in
``hidden``'s floating dtype::

    n_b      = min(lengths[b], L)
    pooled_b = mean over t < n_b of hidden[b, t]
    out_b    = pooled_b / max(||pooled_b||, eps)          (a zero vector where n_b = 0)
    backward, with u = out_b and r = max(||pooled_b||, eps):
    dpooled_b = (dout_b - u (u . dout_b)) / r;  dhidden[b, t] = dpooled_b / n_b for t < n_b

:func:`pool_fwd` / :func:`pool_bwd` are the ``mean_l2`` / ``mean_l2_bwd`` entry points: the
unit vector the embedding objective centres and projects (``evermind.ops.embed_loss``), as
the package's head does. The plain mean (no normalisation) and its backward are
:func:`mean_pool_fwd` and :func:`mean_pool_bwd` (the ``mean`` and ``mean_bwd`` entry points)::

    pooled_b = mean over t < n_b of hidden[b, t]            (0 where n_b = 0)
    dhidden[b, t] = dpooled_b / n_b for t < n_b, 0 elsewhere
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from evermind.errors import ShapeError
from evermind.ops._dtype import F64, Floats, f64, out_dtype

__all__ = [
    "POOL_EPS",
    "l2_norms",
    "lengths_of_mask",
    "mean_pool_bwd",
    "mean_pool_fwd",
    "pool_bwd",
    "pool_fwd",
]

#: The norm floor.
POOL_EPS = 1e-12


def l2_norms(rows: Floats, eps: float = POOL_EPS) -> F64:
    """Each row's L2 norm, floored at ``eps``, as a float64 column (N, 1): the divisor of
    the pool's L2 step, for callers that normalise rows they summed themselves (the base
    embedder's bag sums). A zero row divides to zeros."""
    norms: F64 = np.maximum(np.linalg.norm(f64(rows), axis=1, keepdims=True), eps)
    return norms


def lengths_of_mask(mask: Any) -> npt.NDArray[np.int64]:
    """The valid prefix length of each row of a right-padded boolean mask (B, L).

    Raises:
        ShapeError: A row is not a prefix (True after a False).
    """
    m = np.asarray(mask, dtype=bool)
    lengths: npt.NDArray[np.int64] = m.sum(axis=1).astype(np.int64)  # (B,)
    prefix = np.arange(m.shape[1])[None, :] < lengths[:, None]  # (B, L)
    if not np.array_equal(prefix, m):
        rows = np.nonzero((prefix != m).any(axis=1))[0].tolist()
        raise ShapeError(
            f"pool: mask rows {rows[:5]} are not a valid prefix; expected True then False "
            "(texts padded on the right, as the causal model needs)"
        )
    return lengths


def _weights64(shape: tuple[int, ...], lengths: Any) -> F64:
    """(B, L) pooling weights: 1 / n_b on the valid prefix, 0 elsewhere."""
    batch, seq_len = shape[0], shape[1]
    n = np.minimum(np.asarray(lengths, dtype=np.int64).reshape(batch), seq_len)  # (B,)
    inside = np.arange(seq_len)[None, :] < n[:, None]  # (B, L)
    return np.where(inside, 1.0 / np.maximum(n, 1)[:, None], 0.0)


def _pool64(hidden: Floats, lengths: Any, eps: float) -> tuple[F64, F64, F64]:
    weights = _weights64(hidden.shape, lengths)  # (B, L)
    pooled = np.einsum("bl,bld->bd", weights, f64(hidden))  # (B, D)
    norm = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), eps)  # (B, 1)
    return weights, pooled / norm, norm


def pool_fwd(hidden: Floats, lengths: Any, eps: float = POOL_EPS) -> Floats:
    """Unit mean-pooled vectors, (B, D).

    Args:
        hidden: (B, L, D).
        lengths: (B,) valid prefix lengths (clamped to L).
        eps: Norm floor.
    """
    return _pool64(hidden, lengths, eps)[1].astype(out_dtype(hidden))


def pool_bwd(hidden: Floats, lengths: Any, grad_out: Floats, eps: float = POOL_EPS) -> Floats:
    """Gradient with respect to ``hidden`` (B, L, D) given that of the unit vectors (B, D)."""
    weights, unit, norm = _pool64(hidden, lengths, eps)
    g = f64(grad_out)  # (B, D)
    dpooled = (g - unit * np.sum(unit * g, axis=1, keepdims=True)) / norm  # (B, D)
    dhidden: Floats = weights[:, :, None] * dpooled[:, None, :]  # (B, L, D)
    return dhidden.astype(out_dtype(hidden, grad_out))


def mean_pool_fwd(hidden: Floats, lengths: Any) -> Floats:
    """Mean of each text's valid prefix, (B, D), not normalised (0 for an empty text).

    Args:
        hidden: (B, L, D).
        lengths: (B,) valid prefix lengths (clamped to L).
    """
    weights = _weights64(hidden.shape, lengths)  # (B, L)
    pooled: Floats = np.einsum("bl,bld->bd", weights, f64(hidden))  # (B, D)
    return pooled.astype(out_dtype(hidden))


def mean_pool_bwd(grad_pooled: Floats, lengths: Any, seq_len: int) -> Floats:
    """Gradient with respect to ``hidden`` (B, L, D) given that of the mean (B, D).

    The gradient of each text's mean is spread evenly over its valid positions; padding
    (and every position of an empty text) gets zero.
    """
    g = f64(grad_pooled)  # (B, D)
    weights = _weights64((g.shape[0], seq_len), lengths)  # (B, L)
    dhidden: Floats = weights[:, :, None] * g[:, None, :]  # (B, L, D)
    return dhidden.astype(out_dtype(grad_pooled))
