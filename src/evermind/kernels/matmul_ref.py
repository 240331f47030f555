"""numpy references for ``shaders/matmul.wgsl`` (native-only module).

Slow and obvious on purpose: float64 sums, explicit transposes. The Linear layer
``Y = X·Wᵀ + b`` and its two backward matmuls are written out separately so tests can check
the backward against finite differences of the forward.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]


def matmul_ref(
    a: F32,
    b: F32,
    *,
    trans_a: bool = False,
    trans_b: bool = False,
    bias: F32 | None = None,
    out: F32 | None = None,
) -> F32:
    """``op(A) · op(B) (+ bias) (+ out)`` in float64, returned as float32.

    Args:
        a: A stored (M, K), or (K, M) when ``trans_a``.
        b: B stored (K, N), or (N, K) when ``trans_b``.
        bias: Optional (N,) added to every row.
        out: Optional (M, N) the result is added to (the kernel's accumulate mode).

    Returns:
        C, shape (M, N).
    """
    a64 = a.astype(np.float64).T if trans_a else a.astype(np.float64)
    b64 = b.astype(np.float64).T if trans_b else b.astype(np.float64)
    c = a64 @ b64  # (M, N)
    if bias is not None:
        c = c + bias.astype(np.float64)[None, :]
    if out is not None:
        c = c + out.astype(np.float64)
    return c.astype(np.float32)


def linear_fwd_ref(x: F32, w: F32, bias: F32 | None = None) -> F32:
    """``Y (M,N) = X (M,K) · W (N,K)ᵀ + bias (N)``."""
    return matmul_ref(x, w, trans_b=True, bias=bias)


def linear_bwd_ref(x: F32, w: F32, dy: F32) -> tuple[F32, F32, F32]:
    """Gradients of :func:`linear_fwd_ref` given the upstream gradient ``dY (M, N)``.

    Returns:
        (dX (M, K), dW (N, K), dbias (N,)).
    """
    dx = matmul_ref(dy, w)  # (M, N) · (N, K)
    dw = matmul_ref(dy, x, trans_a=True)  # (N, M) · (M, K)
    dbias = dy.astype(np.float64).sum(axis=0).astype(np.float32)
    return dx, dw, dbias
