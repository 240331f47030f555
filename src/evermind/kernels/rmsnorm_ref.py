"""numpy references for ``shaders/rmsnorm.wgsl`` (native-only module).

Slow and obvious on purpose: one row at a time, computed in float64 and returned in the
input's dtype (float32 in, float32 out; float64 in, float64 out, for finite differences).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

Floats = NDArray[np.floating[Any]]


def rmsnorm_fwd_ref(x: Floats, weight: Floats, eps: float) -> tuple[Floats, Floats]:
    """RMSNorm of each row of ``x``.

    Args:
        x: (M, D).
        weight: (D,).
        eps: Added to the mean square.

    Returns:
        ``y`` (M, D) and ``rstd`` (M,), the reciprocal RMS of each row.
    """
    m, d = x.shape
    x64 = x.astype(np.float64)
    y = np.zeros((m, d))
    rstd = np.zeros(m)
    for row in range(m):
        mean_sq = float(np.sum(x64[row] ** 2)) / d
        rstd[row] = 1.0 / np.sqrt(mean_sq + eps)
        y[row] = x64[row] * rstd[row] * weight.astype(np.float64)
    return y.astype(x.dtype), rstd.astype(x.dtype)


def rmsnorm_bwd_ref(x: Floats, weight: Floats, grad_y: Floats, eps: float) -> tuple[Floats, Floats]:
    """Gradients of :func:`rmsnorm_fwd_ref` (``rstd`` recomputed in float64).

    With ``xhat = x * rstd`` and ``g = grad_y * weight``:
    ``dx = rstd * (g - xhat * mean(g * xhat))`` per row, ``dw = sum over rows of grad_y * xhat``.

    Returns:
        ``grad_x`` (M, D) and ``grad_weight`` (D,).
    """
    m, d = x.shape
    x64, w64, gy64 = (a.astype(np.float64) for a in (x, weight, grad_y))
    grad_x = np.zeros((m, d))
    grad_w = np.zeros(d)
    for row in range(m):
        rstd = 1.0 / np.sqrt(float(np.sum(x64[row] ** 2)) / d + eps)
        xhat = x64[row] * rstd
        g = gy64[row] * w64
        grad_x[row] = rstd * (g - xhat * float(np.sum(g * xhat)) / d)
        grad_w += gy64[row] * xhat
    return grad_x.astype(x.dtype), grad_w.astype(x.dtype)
