"""numpy reference for ``shaders/matmul.wgsl``: matmul and the Linear layer (native-only).

float64 sums, explicit transposes, results in the inputs' floating dtype. The Linear layer
``Y = X·Wᵀ + b`` and its two backward matmuls are written out separately so tests can check
the backward against finite differences of the forward. Shapes: A (M, K) (or (K, M) when
``trans_a``), B (K, N) (or (N, K) when ``trans_b``), C (M, N); Linear X (M, K), W (N, K).

The CPU model multiplies with numpy's ``@`` directly (a matmul needs no reference of its
own there); this module is the oracle of the GPU kernel.
"""

from __future__ import annotations

from evermind.ops._dtype import Floats, f64, out_dtype

__all__ = ["linear_bwd", "linear_fwd", "matmul_fwd"]


def matmul_fwd(
    a: Floats,
    b: Floats,
    *,
    trans_a: bool = False,
    trans_b: bool = False,
    bias: Floats | None = None,
    out: Floats | None = None,
) -> Floats:
    """``op(A) · op(B) (+ bias) (+ out)``.

    Args:
        a: A stored (M, K), or (K, M) when ``trans_a``.
        b: B stored (K, N), or (N, K) when ``trans_b``.
        bias: Optional (N,) added to every row.
        out: Optional (M, N) the result is added to (the kernel's accumulate mode).

    Returns:
        C, shape (M, N).
    """
    a64 = f64(a).T if trans_a else f64(a)
    b64 = f64(b).T if trans_b else f64(b)
    c = a64 @ b64  # (M, N)
    if bias is not None:
        c = c + f64(bias)[None, :]
    if out is not None:
        c = c + f64(out)
    return c.astype(out_dtype(a, b))


def linear_fwd(x: Floats, w: Floats, bias: Floats | None = None) -> Floats:
    """``Y (M,N) = X (M,K) · W (N,K)ᵀ + bias (N)``."""
    return matmul_fwd(x, w, trans_b=True, bias=bias)


def linear_bwd(x: Floats, w: Floats, dy: Floats) -> tuple[Floats, Floats, Floats]:
    """Gradients of :func:`linear_fwd` given the upstream gradient ``dY (M, N)``.

    Returns:
        (dX (M, K), dW (N, K), dbias (N,)).
    """
    dx = matmul_fwd(dy, w)  # (M, N) · (N, K)
    dw = matmul_fwd(dy, x, trans_a=True)  # (N, M) · (M, K)
    dbias = f64(dy).sum(axis=0).astype(out_dtype(x, w, dy))
    return dx, dw, dbias
