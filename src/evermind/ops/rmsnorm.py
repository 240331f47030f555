"""numpy reference for ``shaders/rmsnorm.wgsl``: RMSNorm over the last axis (native-only).

Shapes: x (..., D) (the kernel's rows M = the product of the leading axes), weight (D,),
rstd (...,). Computed in float64 (or a ``compute`` dtype: the numpy decoder's float32 step,
the CPU model's float32 training) and returned in the input's floating dtype.

    rstd = 1 / sqrt(mean_j x_j^2 + eps)
    y    = x * rstd * weight
    with xhat = x * rstd and g = dy * weight:
    dx   = rstd * (g - xhat * mean_j(g * xhat))       (d rstd / dx = -rstd^3 x / D)
    dw   = sum over rows of dy * xhat

The gated variant (Mamba-2's ``MambaRMSNormGated``, ``norm_before_gate=False``) normalises the
gated input u = x * silu(z) over groups of ``group_size`` channels of the last axis, then
scales by one weight over the whole axis: ``y = weight * rmsnorm_groups(x * silu(z))``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from evermind.errors import ShapeError
from evermind.ops._dtype import Floats, as_compute, out_dtype
from evermind.ops.elementwise import silu_bwd, silu_fwd

__all__ = ["rmsnorm_bwd", "rmsnorm_fwd", "rmsnorm_gated_bwd", "rmsnorm_gated_fwd"]


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


def rmsnorm_bwd(
    x: Floats, weight: Floats, grad_y: Floats, eps: float, compute: npt.DTypeLike = np.float64
) -> tuple[Floats, Floats]:
    """Gradients of :func:`rmsnorm_fwd` (``rstd`` recomputed in ``compute``).

    Args:
        x: The forward's input, shape (..., D).
        weight: Gain, shape (D,).
        grad_y: Upstream gradient, shape (..., D).
        eps: As in the forward.
        compute: The arithmetic's dtype (float64 by default).

    Returns:
        ``grad_x`` (..., D) and ``grad_weight`` (D,).
    """
    dtype = out_dtype(x, weight, grad_y)
    dim = x.shape[-1]
    rstd = _rstd64(x, eps, compute)[..., None]  # (..., 1)
    xhat = as_compute(x, compute) * rstd  # (..., D)
    dy = as_compute(grad_y, compute)
    g = dy * as_compute(weight, compute)  # (..., D)
    grad_x = rstd * (g - xhat * np.sum(g * xhat, axis=-1, keepdims=True) / dim)
    grad_w = np.sum((dy * xhat).reshape(-1, dim), axis=0)  # (D,)
    return grad_x.astype(dtype, copy=False), grad_w.astype(dtype, copy=False)


def _groups(a: Floats, group_size: int) -> Floats:
    """(..., I) as (..., I / group_size, group_size), or ShapeError."""
    if group_size < 1 or a.shape[-1] % group_size:
        raise ShapeError(
            f"rmsnorm_gated: the last axis of {a.shape} does not split into groups of "
            f"{group_size}; hint: group_size = d_inner / n_groups"
        )
    return a.reshape(*a.shape[:-1], a.shape[-1] // group_size, group_size)


def rmsnorm_gated_fwd(
    x: Floats,
    gate: Floats,
    weight: Floats,
    group_size: int,
    eps: float,
    compute: npt.DTypeLike = np.float64,
) -> Floats:
    """Gated, grouped RMSNorm: ``weight * rmsnorm_groups(x * silu(gate))`` (HF's
    ``MambaRMSNormGated`` with ``norm_before_gate=False``).

    Args:
        x: Input, shape (..., I).
        gate: The gate z, shape (..., I).
        weight: Gain, shape (I,).
        group_size: Channels normalised together; divides I.
        eps: Added to each group's mean square.
        compute: The arithmetic's dtype (float64 by default).

    Returns:
        y, shape (..., I).

    Raises:
        ShapeError: ``group_size`` does not divide I.
    """
    dtype = out_dtype(x, gate, weight)
    silu_gate = as_compute(silu_fwd(gate, compute), compute)
    gated = _groups(as_compute(x, compute) * silu_gate, group_size)  # (..., G, S)
    normed, _ = rmsnorm_fwd(gated, np.ones(group_size, compute), eps, compute)
    return (normed.reshape(x.shape) * as_compute(weight, compute)).astype(dtype, copy=False)


def rmsnorm_gated_bwd(
    x: Floats,
    gate: Floats,
    weight: Floats,
    group_size: int,
    grad_y: Floats,
    eps: float,
    compute: npt.DTypeLike = np.float64,
) -> tuple[Floats, Floats, Floats]:
    """Gradients of :func:`rmsnorm_gated_fwd`.

    Args:
        x, gate, weight, group_size, eps: As in the forward.
        grad_y: Upstream gradient, shape (..., I).
        compute: The arithmetic's dtype (float64 by default).

    Returns:
        ``(grad_x, grad_gate, grad_weight)`` shaped like ``(x, gate, weight)``.

    Raises:
        ShapeError: ``group_size`` does not divide I.
    """
    dtype = out_dtype(x, gate, weight, grad_y)
    silu_gate = as_compute(silu_fwd(gate, compute), compute)
    x_c, dy = as_compute(x, compute), as_compute(grad_y, compute)
    gated = _groups(x_c * silu_gate, group_size)  # (..., G, S)
    ones = np.ones(group_size, compute)
    normed, _ = rmsnorm_fwd(gated, ones, eps, compute)
    grad_w = np.sum((dy * normed.reshape(x.shape)).reshape(-1, x.shape[-1]), axis=0)
    scaled = _groups(dy * as_compute(weight, compute), group_size)
    grad_gated = rmsnorm_bwd(gated, ones, scaled, eps, compute)[0].reshape(x.shape)  # (..., I)
    grad_x = grad_gated * silu_gate
    grad_gate = silu_bwd(gate, grad_gated * x_c, compute)
    return (
        grad_x.astype(dtype, copy=False),
        grad_gate.astype(dtype, copy=False),
        grad_w.astype(dtype, copy=False),
    )
