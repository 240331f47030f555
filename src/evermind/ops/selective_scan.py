"""numpy reference for ``shaders/selective_scan.wgsl``: the Mamba-1 selective scan (native-only).

Mamba's ``delta_softplus`` convention, as the kernels: the scan takes the time step BEFORE
softplus and ``A_log``, and applies ``delta = softplus(delta_raw)`` (identity past 20, as
torch) and ``A = -exp(A_log)`` itself. Float64 inside, results in the inputs' floating
dtype. Shapes (tokens-major, row-major, like the rest of the model)::

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
runs exactly that function. The whole-sequence forward and backward compute the same
arithmetic time-major, in place, on chunks of batch rows (:data:`CHUNK_ELEMENTS`: each step's
slice stays in the CPU cache and no scratch array is mapped afresh per call), with the
per-step reductions (y; dx, ddelta, dA, dB, dC) done over all steps at once after the loop.
The states are the step loop's to the bit; the reductions differ from a loop of
:func:`scan_step` only in rounding (``tests/unit/test_scan_vectorised.py`` pins 1e-10).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from evermind.ops._dtype import F64, Floats, f64, out_dtype
from evermind.ops.elementwise import softplus_bwd, softplus_fwd

__all__ = ["scan_step", "selective_scan_bwd", "selective_scan_fwd", "selective_scan_y"]


#: Batch rows from which :func:`scan_step` spells its broadcasts as repeat and einsum.
ROWS_FOR_REPEAT = 4


def scan_step(
    h: Floats,
    x_t: Floats,
    delta_t: Floats,
    A: Floats,
    B_t: Floats,
    C_t: Floats,
    D: Floats,
    out: Floats | None = None,
) -> tuple[Floats, Floats]:
    """One step of the recurrence, with delta after softplus and A = -exp(A_log).

    It computes in the inputs' dtype: float64 from the scan and the references, float32 from
    the numpy decoder's step (:func:`evermind.ops.recurrent_step.ssm_step`'s ``compute``).

    Args:
        h: State before the step, (B, D, N).
        x_t: Input, (B, D).
        delta_t: Positive time step, (B, D).
        A: Negative state matrix, (D, N).
        B_t, C_t: Projections of this step, (B, N).
        D: Skip gain, (D,).
        out: Where to write the new state, (B, D, N) in the inputs' dtype; ``h`` itself
            updates the state in place (the decoder's step: no new state array to copy
            back). None: a new array.

    Returns:
        ``(y_t (B, D), new h (B, D, N))``; the new h is ``out`` when given.
    """
    # The broadcasts are spelled for speed, not their values: numpy runs ``delta_t[:, :, None] *
    # A`` as B*D inner loops of N elements (~3x slower at the decoder's B 32, D 256, N 16), so
    # delta is repeated along N first and A broadcast over the batch; the drive's outer product
    # goes through einsum. Every element is the same single product either way.
    # Below ROWS_FOR_REPEAT rows the plain broadcasts are faster (einsum's fixed cost).
    wide = np.ndim(delta_t) == 2 and np.shape(delta_t)[0] >= ROWS_FOR_REPEAT
    if wide:
        delta = np.asarray(delta_t, np.result_type(delta_t, A))
        decay = np.repeat(delta, A.shape[-1], axis=-1).reshape(*delta.shape, A.shape[-1])
        decay *= A  # delta A, (B, D, N), updated in place from here
    else:
        decay = delta_t[:, :, None] * A
    np.exp(decay, out=decay)  # the decay exp(delta A)
    if out is None:
        new_h = decay
        new_h *= h
    else:  # h * decay is decay * h to the bit (one rounded product either way)
        new_h = np.multiply(h, decay, out=out)
    if wide:
        new_h += np.einsum("bd,bn->bdn", delta_t * x_t, B_t)  # + the drive delta x B
    else:
        new_h += (delta_t * x_t)[:, :, None] * B_t[:, None, :]
    y_t = (new_h @ C_t[:, :, None])[:, :, 0] + D * x_t  # (B, D): sum_n h[n] C_t[n]
    return y_t, new_h


#: Elements of (L, rows, D, N) float64 scratch per chunk of batch rows (16 MiB): the scan runs
#: on a few rows at a time so that each step's (rows, D, N) slice stays in the CPU's cache and
#: the scratch arrays are reused by the allocator instead of being mapped afresh every call.
CHUNK_ELEMENTS = 1 << 21


def _row_chunks(batch: int, length: int, dim: int, d_state: int) -> list[slice]:
    """Slices of batch rows, each with at most about :data:`CHUNK_ELEMENTS` state elements."""
    rows = max(1, CHUNK_ELEMENTS // max(1, length * dim * d_state))
    return [slice(start, min(batch, start + rows)) for start in range(0, batch, rows)]


def _time_major(a: Floats, compute: npt.DTypeLike = np.float64) -> Floats:
    """(b, L, ...) as a C-contiguous (L, b, ...) in ``compute``: one copy, cast included."""
    return np.ascontiguousarray(np.swapaxes(a, 0, 1), dtype=compute)


def _prepare(
    x: Floats, delta_raw: Floats, A_log: Floats, B: Floats, C: Floats
) -> tuple[F64, F64, F64, F64, F64]:
    """Time-major float64 x, delta = softplus(delta_raw) (L, b, D), B, C (L, b, N); A (D, N)."""
    delta = f64(softplus_fwd(_time_major(delta_raw)))
    x_tm, b_tm, c_tm = f64(_time_major(x)), f64(_time_major(B)), f64(_time_major(C))
    return x_tm, delta, b_tm, c_tm, -np.exp(f64(A_log))


def selective_scan_fwd(
    x: Floats, delta_raw: Floats, A_log: Floats, B: Floats, C: Floats, D: Floats
) -> tuple[Floats, Floats]:
    """Selective scan forward.

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
    batch, length, dim = x.shape
    d_state = A_log.shape[1]
    d64 = f64(D)
    y = np.empty((batch, length, dim), dtype)
    states_out = np.empty((batch, length, dim, d_state), dtype)
    for rows in _row_chunks(batch, length, dim, d_state):
        x_tm, delta, b_tm, c_tm, A = _prepare(x[rows], delta_raw[rows], A_log, B[rows], C[rows])
        delta_x = delta * x_tm  # (L, b, D)
        states = np.empty((length, *x_tm.shape[1:], d_state))  # (L, b, D, N): h_t
        decay = np.empty(states.shape[1:])  # (b, D, N): this step's, reused
        for t in range(length):  # h_t = exp(delta_t A) h_{t-1} + delta_t x_t B_t, h_{-1} = 0
            np.multiply(delta_x[t][:, :, None], b_tm[t][:, None, :], out=states[t])  # drive
            if t:
                np.multiply(delta[t][:, :, None], A, out=decay)
                np.exp(decay, out=decay)
                decay *= states[t - 1]
                states[t] += decay
        y_tm = (states @ c_tm[..., None])[..., 0] + d64 * x_tm  # (L, b, D): sum_n h[n] C_t[n]
        y[rows] = np.swapaxes(y_tm, 0, 1)
        states_out[rows] = np.swapaxes(states, 0, 1)
    return y, states_out


def selective_scan_y(
    x: Floats,
    delta_raw: Floats,
    A_log: Floats,
    B: Floats,
    C: Floats,
    D: Floats,
    compute: npt.DTypeLike = np.float64,
) -> Floats:
    """The forward's output alone, for inference: :func:`selective_scan_fwd`'s ``y``.

    It keeps one (B, D, N) state instead of all L of them (no backward reads them), which
    saves the (B, L, D, N) arrays and their copies; the arithmetic is the forward's, in the
    same order (float64: the same states to the bit; y's sums over N may round differently),
    in ``compute`` (the CPU model's inference passes its float32).

    Args:
        x, delta_raw, A_log, B, C, D: As :func:`selective_scan_fwd` takes them.
        compute: The arithmetic's dtype (float64 by default).

    Returns:
        y, shape (B, L, D), in the inputs' floating dtype.
    """
    dtype = out_dtype(x, delta_raw, A_log, B, C, D)
    batch, length, dim = x.shape
    x_tm = _time_major(x, compute)  # (L, B, D)
    delta = softplus_fwd(_time_major(delta_raw, compute), compute)  # (L, B, D)
    b_tm, c_tm = _time_major(B, compute), _time_major(C, compute)  # (L, B, N)
    A_t = np.ascontiguousarray(-np.exp(np.asarray(A_log, compute)).T)  # (N, D)
    delta_x = delta * x_tm  # (L, B, D)
    # The state is held (B, N, D), D innermost: numpy broadcasts a (B, 1, D) row over N
    # several times faster than a (B, D, 1) column over a short inner N.
    h = np.zeros((batch, A_t.shape[0], dim), compute)  # h_{t-1}, then h_t
    decay = np.empty_like(h)
    y_tm = np.empty_like(x_tm)  # (L, B, D)
    for t in range(length):  # h_t = exp(delta_t A) h_{t-1} + delta_t x_t B_t, h_{-1} = 0
        np.multiply(delta[t][:, None, :], A_t, out=decay)
        np.exp(decay, out=decay)
        h *= decay
        h += b_tm[t][:, :, None] * delta_x[t][:, None, :]
        y_tm[t] = (c_tm[t][:, None, :] @ h)[:, 0, :]  # sum_n C_t[n] h[n]
    y_tm += np.asarray(D, compute) * x_tm
    return np.swapaxes(y_tm, 0, 1).astype(dtype)


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
    """Selective scan backward.

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
    batch, length, dim = x.shape
    d_state = A_log.shape[1]
    d64 = f64(D)
    dx = np.empty((batch, length, dim), dtype)
    ddelta_raw = np.empty((batch, length, dim), dtype)
    dB = np.empty((batch, length, d_state), dtype)
    dC = np.empty((batch, length, d_state), dtype)
    dA = np.zeros((dim, d_state))  # (D, N), summed over the chunks
    for rows in _row_chunks(batch, length, dim, d_state):
        x_tm, delta, b_tm, c_tm, A = _prepare(x[rows], delta_raw[rows], A_log, B[rows], C[rows])
        dy_tm, h = _time_major(dy[rows]), _time_major(states[rows])  # (L, b, D), (L, b, D, N)
        g = np.empty_like(h)  # (L, b, D, N): g_t = dL/dh_t
        # Through decay = exp(delta A): d/d delta = A decay, d/dA = delta decay, both of
        # g_t * h_{t-1} * decay_t (zero at t = 0, where h_{-1} = 0).
        through_decay = np.empty_like(h)  # (L, b, D, N)
        decay = np.empty(h.shape[1:])  # (b, D, N): decay_{t+1}, then decay_t
        for t in range(length - 1, -1, -1):  # g_t = dy_t C_t + decay_{t+1} g_{t+1}
            np.multiply(dy_tm[t][:, :, None], c_tm[t][:, None, :], out=g[t])
            if t < length - 1:
                decay *= g[t + 1]
                g[t] += decay
            np.multiply(delta[t][:, :, None], A, out=decay)
            np.exp(decay, out=decay)
            if t:
                np.multiply(g[t], h[t - 1], out=through_decay[t])
                through_decay[t] *= decay
            else:
                through_decay[0] = 0.0
        # Through drive = delta x B.
        g_dot_b = (g @ b_tm[..., None])[..., 0]  # (L, b, D)
        ddelta = np.einsum("lbdn,dn->lbd", through_decay, A) + g_dot_b * x_tm  # (L, b, D)
        dA += np.einsum("lbdn,lbd->dn", through_decay, delta)
        dx[rows] = np.swapaxes(g_dot_b * delta + dy_tm * d64, 0, 1)
        ddelta_raw[rows] = np.swapaxes(softplus_bwd(_time_major(delta_raw[rows]), ddelta), 0, 1)
        dB[rows] = np.swapaxes(((delta * x_tm)[:, :, None, :] @ g)[:, :, 0], 0, 1)
        dC[rows] = np.swapaxes((dy_tm[:, :, None, :] @ h)[:, :, 0], 0, 1)  # sum_d dy h_t
    dD = np.einsum("bld,bld->d", f64(dy), f64(x))
    return dx, ddelta_raw, (dA * -np.exp(f64(A_log))).astype(dtype), dB, dC, dD.astype(dtype)
