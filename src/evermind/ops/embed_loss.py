"""numpy reference for ``shaders/embed_loss.wgsl``: cosine distillation of embeddings (native-only).

The embedding the model serves is ``e = normalize(W · (pool(h) − μ))``: ``pool`` the mean of
each text's final normed hidden states over its valid tokens, L2-normalised
(``evermind.ops.pool.pool_fwd``, the package head's ``"mean-l2"`` raw vector), ``μ`` (D,) a
fixed centring vector and ``W`` (E, D) a projection head. Distillation pulls ``z``
towards a teacher's vectors ``T`` (B, E) by cosine. Shapes: pooled (B, D), centre (D,),
head (E, D), z and targets (B, E). float64 inside, results in the inputs' floating dtype::

    c      = pooled − centre                                   (the ``centre`` entry point)
    z      = c · Wᵀ                                            (ops.matmul.linear_fwd)
    cos_b  = (z_b · T_b) / (max(||z_b||, eps) · max(||T_b||, eps))
    loss   = scale · Σ_b (1 − cos_b)         scale = 1 / B: the mean (the ``cosine`` entry)
    backward, with u_b = z_b / max(||z_b||, eps) and v_b = T_b / max(||T_b||, eps):
    dz_b   = −scale · (v_b − cos_b u_b) / max(||z_b||, eps)
    dW     = dzᵀ · c ;  dpooled = dz · W                       (ops.matmul.linear_bwd)

A zero target row has cos 0: it adds ``scale`` to the loss and no gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evermind.ops._dtype import F64, Floats, f64, out_dtype
from evermind.ops.matmul import linear_bwd, linear_fwd

__all__ = [
    "EMBED_EPS",
    "centre_fwd",
    "cosine_loss_bwd",
    "cosine_loss_fwd",
    "embed_loss_bwd",
    "embed_loss_fwd",
]

#: The norm floor of both sides of the cosine.
EMBED_EPS = 1e-12


def centre_fwd(pooled: Floats, centre: Any) -> Floats:
    """``pooled − centre`` (B, D), the centre broadcast over rows."""
    return (f64(pooled) - f64(centre)[None, :]).astype(out_dtype(pooled))


def _cosines(z: Floats, targets: Floats, eps: float) -> tuple[F64, F64, F64, F64]:
    z64, t64 = f64(z), f64(targets)
    zn = np.maximum(np.sqrt(np.sum(z64 * z64, axis=1)), eps)  # (B,)
    tn = np.maximum(np.sqrt(np.sum(t64 * t64, axis=1)), eps)  # (B,)
    u, v = z64 / zn[:, None], t64 / tn[:, None]  # (B, E) each
    return np.sum(u * v, axis=1), u, v, zn


def _scale(z: Floats, scale: float | None) -> float:
    return 1.0 / z.shape[0] if scale is None else scale


def cosine_loss_fwd(
    z: Floats, targets: Floats, scale: float | None = None, eps: float = EMBED_EPS
) -> tuple[Floats, float]:
    """Per-row ``1 − cos(z_b, T_b)`` (B,) and the scaled sum (the mean for ``scale=None``).

    Args:
        z: (B, E) projected embeddings.
        targets: (B, E) teacher vectors (any length; only their direction counts).
        scale: Weight of each row in the loss; None means 1 / B.
        eps: Norm floor of both sides.
    """
    cos = _cosines(z, targets, eps)[0]
    rows = 1.0 - cos
    return rows.astype(out_dtype(z, targets)), float(_scale(z, scale) * np.sum(rows))


def cosine_loss_bwd(
    z: Floats, targets: Floats, scale: float | None = None, eps: float = EMBED_EPS
) -> Floats:
    """Gradient of :func:`cosine_loss_fwd`'s loss with respect to ``z`` (B, E)."""
    cos, u, v, zn = _cosines(z, targets, eps)
    dz: Floats = -_scale(z, scale) * (v - cos[:, None] * u) / zn[:, None]
    return dz.astype(out_dtype(z, targets))


def embed_loss_fwd(
    pooled: Floats,
    centre: Any,
    head: Floats,
    targets: Floats,
    scale: float | None = None,
    eps: float = EMBED_EPS,
) -> float:
    """The distillation loss of pooled unit vectors ``pooled`` (B, D) against ``targets``."""
    z = linear_fwd(centre_fwd(f64(pooled), centre), f64(head))
    return cosine_loss_fwd(z, targets, scale, eps)[1]


def embed_loss_bwd(
    pooled: Floats,
    centre: Any,
    head: Floats,
    targets: Floats,
    scale: float | None = None,
    eps: float = EMBED_EPS,
) -> tuple[Floats, Floats]:
    """Gradients of :func:`embed_loss_fwd`: ``(dpooled (B, D), dhead (E, D))``.

    ``centre`` is fixed (no gradient); pass ``dpooled`` to ``evermind.ops.pool.pool_bwd``
    for the hidden states' gradient.
    """
    c = centre_fwd(f64(pooled), centre)
    w = f64(head)
    dz = cosine_loss_bwd(linear_fwd(c, w), targets, scale, eps)
    dc, dw, _ = linear_bwd(c, w, dz)
    dtype = out_dtype(pooled, head, targets)
    return dc.astype(dtype), dw.astype(dtype)
