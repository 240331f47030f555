"""numpy references for ``shaders/recurrent_step.wgsl`` (native-only module).

One generation step of the conv branch and of the selective scan, plus the parallel causal
depthwise conv1d + SiLU that running :func:`conv_step_ref` over a sequence must reproduce
(the scan's parallel reference is ``selective_scan_ref.selective_scan_ref``). float64 inside.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from evermind.kernels.selective_scan_ref import softplus_ref

F64 = NDArray[np.float64]
Array = NDArray[np.floating]


def _silu(v: F64) -> F64:
    return v * 0.5 * (1.0 + np.tanh(0.5 * v))


def causal_conv1d_silu_ref(x: Array, weight: Array, bias: Array) -> F64:
    """``silu(Conv1d(groups=D, padding=K-1)(x)[..., :L])`` in tokens-major layout.

    Args:
        x: Input, (B, L, D).
        weight: Depthwise weight in PyTorch layout, (D, 1, K).
        bias: (D,).

    Returns:
        (B, L, D): ``silu(bias + sum_k weight[d, 0, k] * x[b, t - K + 1 + k, d])`` with zeros
        before the sequence start.
    """
    x64 = np.asarray(x, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)[:, 0, :]  # (D, K)
    taps = w.shape[1]
    batch, length, dim = x64.shape
    padded = np.concatenate([np.zeros((batch, taps - 1, dim)), x64], axis=1)  # (B, L+K-1, D)
    out = np.zeros((batch, length, dim)) + np.asarray(bias, dtype=np.float64)
    for t in range(length):
        for k in range(taps):
            out[:, t] += w[:, k] * padded[:, t + k]
    return _silu(out)


def conv_step_ref(conv_state: Array, x: Array, weight: Array, bias: Array) -> tuple[F64, F64]:
    """One conv step: shift ``x`` (B, D) into ``conv_state`` (B, D, K), then ``silu(conv)``.

    Returns:
        ``(x_conv (B, D), new_state (B, D, K))``.
    """
    state = np.concatenate(
        [np.asarray(conv_state, np.float64)[:, :, 1:], np.asarray(x, np.float64)[:, :, None]],
        axis=2,
    )
    w = np.asarray(weight, dtype=np.float64)[:, 0, :]  # (D, K)
    pre = np.einsum("bdk,dk->bd", state, w) + np.asarray(bias, dtype=np.float64)
    return _silu(pre), state


def ssm_step_ref(
    h: Array, x_c: Array, delta_raw: Array, A_log: Array, B_t: Array, C_t: Array, D: Array
) -> tuple[F64, F64]:
    """One selective-scan step.

    Args:
        h: State, (B, D, N).
        x_c: Input, (B, D).
        delta_raw: Time step before softplus, (B, D).
        A_log: (D, N).
        B_t, C_t: (B, N).
        D: (D,).

    Returns:
        ``(y (B, D), new_h (B, D, N))``.
    """
    x64 = np.asarray(x_c, dtype=np.float64)
    delta = softplus_ref(delta_raw)  # (B, D)
    A = -np.exp(np.asarray(A_log, dtype=np.float64))  # (D, N)
    b64, c64 = np.asarray(B_t, np.float64), np.asarray(C_t, np.float64)
    new_h = np.exp(delta[:, :, None] * A) * np.asarray(h, np.float64) + (
        (delta * x64)[:, :, None] * b64[:, None, :]
    )
    y = np.einsum("bdn,bn->bd", new_h, c64) + np.asarray(D, np.float64) * x64
    return y, new_h
