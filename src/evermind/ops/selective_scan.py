"""numpy reference for ``shaders/selective_scan.wgsl``: the Mamba-1 selective scan (native-only).

Mamba's ``delta_softplus`` convention, as the kernels: the scan takes the time step BEFORE
softplus and ``A_log``, and applies ``delta = softplus(delta_raw)`` (identity past 20, as
torch) and ``A = -exp(A_log)`` itself. A plain loop over time, float64 inside, results in
the inputs' floating dtype. Shapes (tokens-major, row-major, like the rest of the model)::

    x         (B, L, D)   input (the conv branch's output)
    delta_raw (B, L, D)   time step before softplus (dt_proj output, bias included)
    A_log     (D, N)      A = -exp(A_log) < 0
    B, C      (B, L, N)   input / output projections (shared by every channel d)
    D         (D,)        skip gain
    y         (B, L, D);  states (B, L, D, N): h_t after step t

Recurrence (zero-order hold on A, Euler on B), h_{-1} = 0::

    h_t = exp(delta_t * A) * h_{t-1} + delta_t * B_t * x_t
    y_t = sum_n C_t[n] * h_t[n] + D * x_t

:func:`scan_step` is one step of it; the recurrent decoder (:mod:`evermind.ops.recurrent_step`)
runs exactly that function, so step-by-step decoding equals the parallel forward.
"""

from __future__ import annotations

import numpy as np

from evermind.ops._dtype import F64, Floats, f64, out_dtype
from evermind.ops.elementwise import softplus_bwd, softplus_fwd

__all__ = ["scan_step", "selective_scan_bwd", "selective_scan_fwd"]


def scan_step(
    h: F64, x_t: F64, delta_t: F64, A: F64, B_t: F64, C_t: F64, D: F64
) -> tuple[F64, F64]:
    """One step of the recurrence in float64, with delta after softplus and A = -exp(A_log).

    Args:
        h: State before the step, (B, D, N).
        x_t: Input, (B, D).
        delta_t: Positive time step, (B, D).
        A: Negative state matrix, (D, N).
        B_t, C_t: Projections of this step, (B, N).
        D: Skip gain, (D,).

    Returns:
        ``(y_t (B, D), new h (B, D, N))``.
    """
    decay = np.exp(delta_t[:, :, None] * A)  # (B, D, N)
    drive = (delta_t * x_t)[:, :, None] * B_t[:, None, :]  # (B, D, N)
    new_h = decay * h + drive
    y_t = (new_h @ C_t[:, :, None])[:, :, 0] + D * x_t  # (B, D): sum_n h[n] C_t[n]
    return y_t, new_h


def selective_scan_fwd(
    x: Floats, delta_raw: Floats, A_log: Floats, B: Floats, C: Floats, D: Floats
) -> tuple[Floats, Floats]:
    """Selective scan forward, a loop over time.

    Args:
        x: Input, shape (B, L, D).
        delta_raw: Time step before softplus, shape (B, L, D).
        A_log: Log of -A, shape (D, N).
        B: Input projection, shape (B, L, N).
        C: Output projection, shape (B, L, N).
        D: Skip gain, shape (D,).

    Returns:
        ``(y, states)``: y of shape (B, L, D) and every state h_t, shape (B, L, D, N)
        (exactly what the GPU forward stores for its backward).
    """
    dtype = out_dtype(x, delta_raw, A_log, B, C, D)
    x64, b64, c64, d64 = f64(x), f64(B), f64(C), f64(D)
    delta = f64(softplus_fwd(f64(delta_raw)))  # (B, L, D)
    A = -np.exp(f64(A_log))  # (D, N)
    batch, length, dim = x64.shape
    h = np.zeros((batch, dim, A.shape[1]))  # (B, D, N)
    states = np.zeros((batch, length, dim, A.shape[1]))  # (B, L, D, N)
    y = np.zeros((batch, length, dim))  # (B, L, D)
    for t in range(length):
        y[:, t], h = scan_step(h, x64[:, t], delta[:, t], A, b64[:, t], c64[:, t], d64)
        states[:, t] = h
    return y.astype(dtype), states.astype(dtype)


def selective_scan_bwd(
    dy: Floats,
    x: Floats,
    delta_raw: Floats,
    A_log: Floats,
    B: Floats,
    C: Floats,
    D: Floats,
    states: Floats | None = None,
) -> tuple[Floats, Floats, Floats, Floats, Floats, Floats]:
    """Selective scan backward, a reverse loop over time.

    With g_t = dL/dh_t (through every later step),
    ``g_t = dy_t * C_t + exp(delta_{t+1} A) * g_{t+1}``, and every gradient follows from g_t
    and h_{t-1}. A enters as ``-exp(A_log)``, so ``dA_log = dA * A`` (chain rule through the
    exponential); delta enters through softplus, so ``ddelta_raw = ddelta * sigmoid(delta_raw)``.

    Args:
        dy: Upstream gradient, shape (B, L, D).
        x, delta_raw, A_log, B, C, D: The forward's inputs (see :func:`selective_scan_fwd`).
        states: The forward's ``states`` (B, L, D, N); recomputed when None.

    Returns:
        ``(dx, ddelta_raw, dA_log, dB, dC, dD)`` with the shapes of
        ``(x, delta_raw, A_log, B, C, D)``.
    """
    dtype = out_dtype(dy, x, delta_raw, A_log, B, C, D)
    if states is None:
        _, states = selective_scan_fwd(f64(x), delta_raw, A_log, B, C, D)
    states64 = f64(states)
    dy64, x64, b64, c64, d64 = f64(dy), f64(x), f64(B), f64(C), f64(D)
    delta = f64(softplus_fwd(f64(delta_raw)))  # (B, L, D)
    A = -np.exp(f64(A_log))  # (D, N)
    batch, length, dim = x64.shape
    dx = np.zeros_like(x64)
    ddelta = np.zeros_like(x64)
    dA = np.zeros_like(A)
    dB = np.zeros_like(b64)
    dC = np.zeros_like(c64)
    g = np.zeros((batch, dim, A.shape[1]))  # (B, D, N): dL/dh_t
    carry = np.zeros_like(g)  # exp(delta_{t+1} A) * g_{t+1}
    for t in range(length - 1, -1, -1):
        h_prev = states64[:, t - 1] if t > 0 else np.zeros_like(g)  # (B, D, N)
        decay = np.exp(delta[:, t, :, None] * A)  # (B, D, N)
        g = dy64[:, t, :, None] * c64[:, t, None, :] + carry
        carry = decay * g
        dC[:, t] = np.einsum("bd,bdn->bn", dy64[:, t], states64[:, t])
        # Through decay = exp(delta A): d/d delta = A decay, d/dA = delta decay.
        through_decay = g * h_prev * decay  # (B, D, N)
        # Through drive = delta x B.
        g_dot_b = np.einsum("bdn,bn->bd", g, b64[:, t])  # (B, D)
        ddelta[:, t] = np.einsum("bdn,dn->bd", through_decay, A) + g_dot_b * x64[:, t]
        dA += np.einsum("bdn,bd->dn", through_decay, delta[:, t])
        dx[:, t] = g_dot_b * delta[:, t] + dy64[:, t] * d64
        dB[:, t] = np.einsum("bdn,bd->bn", g, delta[:, t] * x64[:, t])
    dD = np.einsum("bld,bld->d", dy64, x64)
    ddelta_raw = softplus_bwd(f64(delta_raw), ddelta)
    return (
        dx.astype(dtype),
        ddelta_raw.astype(dtype),
        (dA * A).astype(dtype),
        dB.astype(dtype),
        dC.astype(dtype),
        dD.astype(dtype),
    )
