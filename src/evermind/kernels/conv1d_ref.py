"""numpy references for ``shaders/conv1d.wgsl`` (native-only module).

Slow and obvious on purpose: explicit loops over batch, time and taps, computed in float64
and returned in the input's dtype (float64 in, float64 out, for finite differences).
The weight is PyTorch's ``(D, 1, K)`` layout; ``(D, K)`` is accepted too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

Floats = NDArray[np.floating[Any]]


def conv1d_fwd_ref(x: Floats, weight: Floats, bias: Floats) -> Floats:
    """``y[b, t, d] = bias[d] + sum_k w[d, k] * x[b, t - (K-1) + k, d]``, zero before t = 0.

    Args:
        x: (B, L, D).
        weight: (D, 1, K) or (D, K).
        bias: (D,).

    Returns:
        y, (B, L, D).
    """
    batch, length, _ = x.shape
    w = weight.reshape(weight.shape[0], -1).astype(np.float64)  # (D, K)
    taps = w.shape[1]
    x64 = x.astype(np.float64)
    y = np.zeros(x.shape)
    for b in range(batch):
        for t in range(length):
            y[b, t] = bias
            for k in range(taps):
                s = t - (taps - 1) + k
                if s >= 0:
                    y[b, t] += w[:, k] * x64[b, s]
    return y.astype(x.dtype)


def conv1d_bwd_ref(x: Floats, weight: Floats, grad_y: Floats) -> tuple[Floats, Floats, Floats]:
    """Gradients of :func:`conv1d_fwd_ref`.

    Returns:
        ``grad_x`` (B, L, D), ``grad_weight`` in ``weight``'s shape, ``grad_bias`` (D,).
    """
    batch, length, _ = x.shape
    w = weight.reshape(weight.shape[0], -1).astype(np.float64)
    taps = w.shape[1]
    x64, gy = x.astype(np.float64), grad_y.astype(np.float64)
    grad_x = np.zeros(x.shape)
    grad_w = np.zeros(w.shape)
    for b in range(batch):
        for t in range(length):
            for k in range(taps):
                s = t - (taps - 1) + k
                if s >= 0:
                    grad_x[b, s] += w[:, k] * gy[b, t]
                    grad_w[:, k] += x64[b, s] * gy[b, t]
    grad_b = gy.sum(axis=(0, 1))
    return (
        grad_x.astype(x.dtype),
        grad_w.reshape(weight.shape).astype(x.dtype),
        grad_b.astype(x.dtype),
    )
