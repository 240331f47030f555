"""numpy reference for ``shaders/rmsnorm.wgsl``: RMSNorm over the last axis (native-only).

Shapes: x (..., D) (the kernel's rows M = the product of the leading axes), weight (D,),
rstd (...,). Computed in float64 (or the forward's ``compute`` dtype: the numpy decoder's
float32 step) and returned in the input's floating dtype.

    rstd = 1 / sqrt(mean_j x_j^2 + eps)
    y    = x * rstd * weight
    with xhat = x * rstd and g = dy * weight:
    dx   = rstd * (g - xhat * mean_j(g * xhat))       (d rstd / dx = -rstd^3 x / D)
    dw   = sum over rows of dy * xhat
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from evermind.ops._dtype import Floats, as_compute, f64, out_dtype

__all__ = ["rmsnorm_bwd", "rmsnorm_fwd"]


def _rstd64(x: Floats, eps: float, compute: npt.DTypeLike = np.float64) -> Floats:
    x_c = as_compute(x, compute)
    one = x_c.dtype.type(1)
    rstd: Floats = one / np.sqrt(np.sum(x_c * x_c, axis=-1) / x_c.shape[-1] + eps)  # (...,)
    return rstd


def rmsnorm_fwd(
    x: Floats, weight: Floats, eps: float, compute: npt.DTypeLike = np.float64
) -> tuple[Floats, Floats]:
    """RMSNorm of every row of ``x``.

    Args:
        x: Input, shape (..., D).
        weight: Gain, shape (D,).
        eps: Added to the mean square before the square root.
        compute: The arithmetic's dtype (float64 by default).

    Returns:
        ``y`` (..., D) and ``rstd`` (...,), the reciprocal RMS of each row.
    """
    dtype = out_dtype(x, weight)
    rstd = _rstd64(x, eps, compute)  # (...,)
    y = as_compute(x, compute) * rstd[..., None] * as_compute(weight, compute)  # (..., D)
    return y.astype(dtype, copy=False), rstd.astype(dtype, copy=False)


def rmsnorm_bwd(x: Floats, weight: Floats, grad_y: Floats, eps: float) -> tuple[Floats, Floats]:
    """Gradients of :func:`rmsnorm_fwd` (``rstd`` recomputed in float64).

    Args:
        x: The forward's input, shape (..., D).
        weight: Gain, shape (D,).
        grad_y: Upstream gradient, shape (..., D).
        eps: As in the forward.

    Returns:
        ``grad_x`` (..., D) and ``grad_weight`` (D,).
    """
    dtype = out_dtype(x, weight, grad_y)
    dim = x.shape[-1]
    rstd = _rstd64(x, eps)[..., None]  # (..., 1)
    xhat = f64(x) * rstd  # (..., D)
    g = f64(grad_y) * f64(weight)  # (..., D)
    grad_x = rstd * (g - xhat * np.sum(g * xhat, axis=-1, keepdims=True) / dim)
    grad_w = np.sum((f64(grad_y) * xhat).reshape(-1, dim), axis=0)  # (D,)
    return grad_x.astype(dtype), grad_w.astype(dtype)
