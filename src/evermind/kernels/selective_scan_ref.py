"""numpy references for ``shaders/selective_scan.wgsl`` (native-only module).

The Mamba-1 selective scan (S6) with Mamba's ``delta_softplus`` convention, forward and
backward, as a plain loop over time. Slow and obvious on purpose: these define what the
kernels must compute. Everything is computed in float64 (inputs of any float dtype are
promoted), so the references double as ground truth for float32 kernels.

Shapes (tokens-major, row-major, like the rest of the model)::

    x         (B, L, D)   input (the conv branch's output)
    delta_raw (B, L, D)   time step BEFORE softplus (dt_proj output, bias included)
    A_log     (D, N)      A = -exp(A_log) < 0
    B, C      (B, L, N)   input / output projections (shared by every channel d)
    D         (D,)        skip gain
    y         (B, L, D)

Recurrence, with delta = softplus(delta_raw) (identity past 20, as torch)::

    h_t = exp(delta_t * A) * h_{t-1} + delta_t * B_t * x_t,   h_{-1} = 0
    y_t = sum_n C_t[n] * h_t[n] + D * x_t
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
Array = NDArray[np.floating]

#: torch.nn.functional.softplus's default threshold: past it softplus is the identity.
SOFTPLUS_THRESHOLD = 20.0


def softplus_ref(v: Array) -> F64:
    """``log(1 + exp(v))``, the identity past 20 (torch's threshold), in float64."""
    v64 = np.asarray(v, dtype=np.float64)
    return np.where(v64 > SOFTPLUS_THRESHOLD, v64, np.logaddexp(0.0, v64))


def softplus_grad_ref(v: Array) -> F64:
    """d softplus / dv: ``sigmoid(v)``, exactly 1 past the threshold (as torch)."""
    v64 = np.asarray(v, dtype=np.float64)
    return np.where(v64 > SOFTPLUS_THRESHOLD, 1.0, 0.5 * (1.0 + np.tanh(0.5 * v64)))


def selective_scan_ref(
    x: Array, delta_raw: Array, A_log: Array, B: Array, C: Array, D: Array
) -> tuple[F64, F64]:
    """Selective scan forward, a loop over time.

    Args:
        x: Input, shape (B, L, D).
        delta_raw: Time step before softplus, shape (B, L, D).
        A_log: Log of -A, shape (D, N).
        B: Input projection, shape (B, L, N).
        C: Output projection, shape (B, L, N).
        D: Skip gain, shape (D,).

    Returns:
        ``(y, states)``: y of shape (B, L, D) and every state h_t, shape (B, L, D, N), both
        float64. ``states`` is exactly what the GPU forward stores for its backward.
    """
    x64, b64, c64 = (np.asarray(a, dtype=np.float64) for a in (x, B, C))
    delta = softplus_ref(delta_raw)  # (B, L, D)
    A = -np.exp(np.asarray(A_log, dtype=np.float64))  # (D, N)
    batch, length, dim = x64.shape
    h = np.zeros((batch, dim, A.shape[1]))  # (B, D, N)
    states = np.zeros((batch, length, dim, A.shape[1]))  # (B, L, D, N)
    y = np.zeros((batch, length, dim))  # (B, L, D)
    for t in range(length):
        decay = np.exp(delta[:, t, :, None] * A)  # (B, D, N)
        drive = (delta[:, t] * x64[:, t])[:, :, None] * b64[:, t, None, :]  # (B, D, N)
        h = decay * h + drive
        states[:, t] = h
        y[:, t] = np.einsum("bdn,bn->bd", h, c64[:, t]) + np.asarray(D, np.float64) * x64[:, t]
    return y, states


def selective_scan_bwd_ref(
    dy: Array, x: Array, delta_raw: Array, A_log: Array, B: Array, C: Array, D: Array
) -> tuple[F64, F64, F64, F64, F64, F64]:
    """Selective scan backward, a reverse loop over time.

    With g_t = dL/dh_t (through every later step),
    ``g_t = dy_t * C_t + exp(delta_{t+1} A) * g_{t+1}``, and every gradient follows from g_t
    and h_{t-1}. A enters as ``-exp(A_log)``, so ``dA_log = dA * A`` (chain rule through the
    exponential); delta enters through softplus, so ``ddelta_raw = ddelta * sigmoid(delta_raw)``.

    Args:
        dy: Upstream gradient, shape (B, L, D).
        x, delta_raw, A_log, B, C, D: The forward's inputs (see :func:`selective_scan_ref`).

    Returns:
        ``(dx, ddelta_raw, dA_log, dB, dC, dD)`` with the shapes of
        ``(x, delta_raw, A_log, B, C, D)``, float64.
    """
    dy64, x64, b64, c64 = (np.asarray(a, dtype=np.float64) for a in (dy, x, B, C))
    d64 = np.asarray(D, dtype=np.float64)
    _, states = selective_scan_ref(x, delta_raw, A_log, B, C, D)
    delta = softplus_ref(delta_raw)  # (B, L, D)
    A = -np.exp(np.asarray(A_log, dtype=np.float64))  # (D, N)
    batch, length, dim = x64.shape
    dx = np.zeros_like(x64)
    ddelta = np.zeros_like(x64)
    dA = np.zeros_like(A)
    dB = np.zeros_like(b64)
    dC = np.zeros_like(c64)
    g = np.zeros((batch, dim, A.shape[1]))  # (B, D, N): dL/dh_t
    carry = np.zeros_like(g)  # exp(delta_{t+1} A) * g_{t+1}
    for t in range(length - 1, -1, -1):
        h_prev = states[:, t - 1] if t > 0 else np.zeros_like(g)  # (B, D, N)
        decay = np.exp(delta[:, t, :, None] * A)  # (B, D, N)
        g = dy64[:, t, :, None] * c64[:, t, None, :] + carry
        carry = decay * g
        dC[:, t] = np.einsum("bd,bdn->bn", dy64[:, t], states[:, t])
        # Through decay = exp(delta A): d/d delta = A decay, d/dA = delta decay.
        through_decay = g * h_prev * decay  # (B, D, N)
        # Through drive = delta x B.
        g_dot_b = np.einsum("bdn,bn->bd", g, b64[:, t])  # (B, D)
        ddelta[:, t] = np.einsum("bdn,dn->bd", through_decay, A) + g_dot_b * x64[:, t]
        dA += np.einsum("bdn,bd->dn", through_decay, delta[:, t])
        dx[:, t] = g_dot_b * delta[:, t] + dy64[:, t] * d64
        dB[:, t] = np.einsum("bdn,bd->bn", g, delta[:, t] * x64[:, t])
    dD = np.einsum("bld,bld->d", dy64, x64)
    ddelta_raw = ddelta * softplus_grad_ref(delta_raw)
    return dx, ddelta_raw, dA * A, dB, dC, dD
