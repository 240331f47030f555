"""numpy reference for ``shaders/conv1d.wgsl``: Mamba's causal depthwise conv1d (native-only).

Shapes: x (B, L, D) channels-last, weight (D, 1, K) (PyTorch's layout; (D, K) is accepted
too), bias (D,), y (B, L, D). Tap K-1 multiplies the current step; x is zero before t = 0,
i.e. torch ``F.conv1d(padding=K-1, groups=D)[..., :L]``::

    y[b, t, d] = bias[d] + sum_k w[d, k] * x[b, t - (K-1) + k, d]

The loop runs over the K taps, each a whole-array multiply-add in float64 (or a ``compute``
dtype: the numpy decoder's float32 step, the CPU model's float32 training); results are
returned in the inputs' floating dtype.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from evermind.ops._dtype import Floats, as_compute, out_dtype

__all__ = ["conv1d_bwd", "conv1d_fwd", "conv1d_last"]


def _taps(weight: Floats, compute: npt.DTypeLike = np.float64) -> Floats:
    return as_compute(weight, compute).reshape(weight.shape[0], -1)  # (D, K)


def _pad_time(x: Floats, taps: int, compute: npt.DTypeLike = np.float64) -> Floats:
    """x (B, L, D) in ``compute`` with K-1 zero steps before t = 0: (B, L+K-1, D)."""
    batch, length, dim = x.shape
    padded = np.zeros((batch, length + taps - 1, dim), compute)
    padded[:, taps - 1 :] = x
    return padded


def conv1d_fwd(
    x: Floats, weight: Floats, bias: Floats, compute: npt.DTypeLike = np.float64
) -> Floats:
    """Causal depthwise convolution along time.

    Args:
        x: Input, shape (B, L, D).
        weight: Per-channel taps, shape (D, 1, K) or (D, K).
        bias: Shape (D,).
        compute: The arithmetic's dtype (float64 by default).

    Returns:
        y, shape (B, L, D).
    """
    w = _taps(weight, compute)  # (D, K)
    length, taps = x.shape[1], w.shape[1]
    x_pad = _pad_time(x, taps, compute)  # (B, L+K-1, D), zeros before t = 0
    y = np.zeros(x.shape, compute) + as_compute(bias, compute)  # (B, L, D)
    for k in range(taps):
        y += w[:, k] * x_pad[:, k : k + length]
    return y.astype(out_dtype(x, weight, bias), copy=False)


def conv1d_last(
    window: Floats, weight: Floats, bias: Floats, compute: npt.DTypeLike = np.float64
) -> Floats:
    """:func:`conv1d_fwd`'s output at the last position of a K-step window: a decoding step.

    The same products and sums in the same order as that position of the forward (equal to
    the bit), without the forward's K-1 other positions and its padded copy.

    Args:
        window: The last K inputs, oldest first, shape (B, D, K) (the decoder's register).
        weight: (D, 1, K) or (D, K).
        bias: (D,).
        compute: The arithmetic's dtype (float64 by default).

    Returns:
        y, shape (B, D), in the inputs' floating dtype.
    """
    w = _taps(weight, compute)  # (D, K)
    x = as_compute(window, compute)  # (B, D, K)
    # Every tap's product in one contiguous pass (the same single products; per tap, a
    # product of two stride-K columns costs ~1.5x more), then added in the forward's order.
    products = x * w  # (B, D, K)
    y = as_compute(bias, compute) + products[:, :, 0]  # (B, D)
    for k in range(1, w.shape[1]):
        y += products[:, :, k]
    return y.astype(out_dtype(window, weight, bias), copy=False)


def conv1d_bwd(
    x: Floats, weight: Floats, grad_y: Floats, compute: npt.DTypeLike = np.float64
) -> tuple[Floats, Floats, Floats]:
    """Gradients of :func:`conv1d_fwd`.

    Args:
        x: The forward's input, shape (B, L, D).
        weight: As in the forward, (D, 1, K) or (D, K).
        grad_y: Upstream gradient, shape (B, L, D).
        compute: The arithmetic's dtype (float64 by default).

    Returns:
        ``grad_x`` (B, L, D), ``grad_weight`` in ``weight``'s shape, ``grad_bias`` (D,).
    """
    w = _taps(weight, compute)  # (D, K)
    length, taps = x.shape[1], w.shape[1]
    gy = as_compute(grad_y, compute)
    x_pad = _pad_time(x, taps, compute)  # (B, L+K-1, D)
    grad_x_pad = np.zeros_like(x_pad)
    grad_w = np.empty_like(w)
    for k in range(taps):
        # y[t] reads x_pad[t + k] through tap k.
        grad_x_pad[:, k : k + length] += gy * w[:, k]
        grad_w[:, k] = np.sum(gy * x_pad[:, k : k + length], axis=(0, 1))
    dtype = out_dtype(x, weight, grad_y)
    return (
        grad_x_pad[:, taps - 1 :].astype(dtype),
        grad_w.reshape(weight.shape).astype(dtype),
        gy.sum(axis=(0, 1)).astype(dtype),
    )
