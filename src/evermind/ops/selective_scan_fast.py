"""The selective scan's fast CPU path, checked against the reference (native-only).

:mod:`evermind.ops.selective_scan` is the reference: the slow, obvious loop that the kernel
tests compare with. This module computes the same recurrence and the same six gradients, with
the same arguments and conventions (raw ``delta``, ``A_log``, shapes (B, L, D) / (B, L, N),
states (B, L, D, N)), for the CPU model's training and the embedding tuner;
``tests/unit/test_selective_scan_fast.py`` checks it against the reference, forward and every
gradient (1e-10 in float64; mamba's rtol 6e-4 / atol 2e-3 in float32), and its backward
against finite differences.

The arithmetic differs from the reference only in where it happens (measured on the nano
training shape B 4, L 128, D 256, N 16: see ``benchmarks/model_cpu.py --scan``):

- The state is held time-major (L, b, N, D), D innermost: numpy broadcasts a (…, 1, D) row
  over N several times faster than a (…, D, 1) column over a short inner N.
- The factors that do not recur are computed for all steps at once, before the loop: every
  decay ``exp(delta_t A)`` (one exp over (L, b, N, D)) and every drive ``delta_t x_t B_t``. The
  loop over time is then two in-place ops forward, ``h_t = drive_t + decay_t * h_{t-1}``, and
  three backward: ``P = decay_t * g_t`` is both the carry into ``g_{t-1}`` and, times
  ``h_{t-1}``, the gradient through the decay, so the backward needs no (L, …) scratch besides
  the decays and ``g``.
- ``dA_log = dA * A`` and the decay's part of ``ddelta`` are the two sums (over the steps,
  over N) of one array ``g_t * decay_t * h_{t-1} * A``; the other reductions are matmuls.
- The arithmetic runs in ``compute``: the CPU model passes its dtype (float32 to train, as the
  GPU trains; float64 for finite-difference checks), which halves the memory traffic.
- The forward returns its states as a (B, L, D, N) view of its own time-major array, so the
  backward reads them back without a copy.

Splitting time into chunks (the decays within a chunk as ``exp(cum_t - cum_s)``, s <= t) was
weighed and not taken: it needs the same exps plus cumulative sums along time, and numpy's
``cumsum(axis=0)`` over (L, b, N, D) took ~23 ms where one exp pass takes ~1-2 ms (nano
shape), while the loop's Python overhead is about a tenth of the scan at these shapes.
Computing each step's decay inside the loop instead of all at once measured the same within
noise (faster only for chunks of many rows).
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from evermind.ops._dtype import Floats, as_compute, out_dtype
from evermind.ops.elementwise import softplus_bwd, softplus_fwd

__all__ = ["selective_scan_fast_bwd", "selective_scan_fast_fwd"]

#: Elements of one (L, rows, N, D) scratch array per chunk of batch rows: small enough that
#: the arrays stay in the CPU's caches, large enough that numpy's per-call overhead stays
#: small (2**18 to 2**21 measured within noise of each other on a busy two-core machine).
CHUNK_ELEMENTS = 1 << 20


#: Per-thread scratch buffers (at most :data:`SCRATCH_ELEMENTS` each), reused from call to
#: call: a fresh multi-megabyte array costs more in page faults than the exp that fills it
#: (measured: 2.9 ms fresh against 0.4 ms reused for 2**19 float32 decays). A thread that
#: ran the scan keeps two of them ("decay", "g"): at most 8 MiB each in float32, 16 in float64.
SCRATCH_ELEMENTS = 1 << 21
_scratch = threading.local()


def _buffer(name: str, shape: tuple[int, ...], dtype: npt.DTypeLike) -> Floats:
    """An uninitialised array of ``shape``: this thread's reused ``name`` buffer when small."""
    size = int(np.prod(shape))
    if size > SCRATCH_ELEMENTS:
        return np.empty(shape, dtype)  # a one-off size: not kept
    pool: dict[str, Floats] = _scratch.__dict__.setdefault("pool", {})
    buffer = pool.get(name)
    if buffer is None or buffer.dtype != np.dtype(dtype) or buffer.size < size:
        buffer = pool[name] = np.empty(size, dtype)
    return buffer[:size].reshape(shape)


def _row_chunks(batch: int, length: int, dim: int, d_state: int) -> list[slice]:
    """Slices of batch rows, each with at most about :data:`CHUNK_ELEMENTS` state elements."""
    rows = max(1, CHUNK_ELEMENTS // max(1, length * dim * d_state))
    return [slice(start, min(batch, start + rows)) for start in range(0, batch, rows)]


def _time_major(a: Floats, compute: npt.DTypeLike) -> Floats:
    """(b, L, ...) as a C-contiguous (L, b, ...) in ``compute``: one copy, cast included."""
    return np.ascontiguousarray(np.swapaxes(a, 0, 1), dtype=compute)


def _decays(delta: Floats, A_t: Floats) -> Floats:
    """Every step's decay ``exp(delta_t A)``, (L, b, N, D), from delta (L, b, D), A^T (N, D),
    in this thread's ``decay`` scratch buffer."""
    length, rows, dim = delta.shape
    decay = _buffer("decay", (length, rows, A_t.shape[0], dim), delta.dtype)
    np.multiply(delta[:, :, None, :], A_t, out=decay)  # delta A <= 0: the exp cannot overflow
    return np.exp(decay, out=decay)


def selective_scan_fast_fwd(
    x: Floats,
    delta_raw: Floats,
    A_log: Floats,
    B: Floats,
    C: Floats,
    D: Floats,
    compute: npt.DTypeLike = np.float64,
) -> tuple[Floats, Floats]:
    """Selective scan forward: :func:`evermind.ops.selective_scan.selective_scan_fwd`, faster.

    Args:
        x: Input, shape (B, L, D).
        delta_raw: Time step before softplus, shape (B, L, D).
        A_log: Log of -A, shape (D, N).
        B: Input projection, shape (B, L, N).
        C: Output projection, shape (B, L, N).
        D: Skip gain, shape (D,).
        compute: The arithmetic's dtype (float64 by default, as the reference).

    Returns:
        ``(y, states)``: y (B, L, D) in the inputs' floating dtype, and every state h_t,
        shape (B, L, D, N), in the inputs' dtype too: a transposed view of a time-major
        (L, B, N, D) array, which :func:`selective_scan_fast_bwd` reads without a copy.
    """
    dtype = out_dtype(x, delta_raw, A_log, B, C, D)
    batch, length, dim = x.shape
    d_state = A_log.shape[1]
    A_t = np.ascontiguousarray(-np.exp(as_compute(A_log, compute)).T)  # (N, D)
    skip = as_compute(D, compute)
    y = np.empty((batch, length, dim), dtype)
    states = np.empty((length, batch, d_state, dim), compute)  # (L, B, N, D): h_t
    for rows in _row_chunks(batch, length, dim, d_state):
        x_tm = _time_major(x[rows], compute)  # (L, b, D)
        delta = softplus_fwd(_time_major(delta_raw[rows], compute), compute)  # (L, b, D)
        b_tm, c_tm = _time_major(B[rows], compute), _time_major(C[rows], compute)  # (L, b, N)
        h = states[:, rows]  # (L, b, N, D), written in place
        np.multiply(b_tm[..., None], (delta * x_tm)[:, :, None, :], out=h)  # drive_t
        decay = _decays(delta, A_t)  # (L, b, N, D); consumed by the loop
        for t in range(1, length):  # h_t = drive_t + decay_t h_{t-1}, h_{-1} = 0
            decay[t] *= h[t - 1]
            h[t] += decay[t]
        y_tm = (c_tm[:, :, None, :] @ h)[:, :, 0, :]  # (L, b, D): sum_n C_t[n] h_t[n]
        y_tm += skip * x_tm
        y[rows] = np.swapaxes(y_tm, 0, 1)
    return y, states.astype(dtype, copy=False).transpose(1, 0, 3, 2)


def selective_scan_fast_bwd(
    dy: Floats,
    x: Floats,
    delta_raw: Floats,
    A_log: Floats,
    B: Floats,
    C: Floats,
    D: Floats,
    states: Floats | None = None,
    compute: npt.DTypeLike = np.float64,
) -> tuple[Floats, Floats, Floats, Floats, Floats, Floats]:
    """Selective scan backward: :func:`evermind.ops.selective_scan.selective_scan_bwd`, faster.

    With g_t = dL/dh_t, ``g_t = dy_t C_t + decay_{t+1} g_{t+1}``; the gradient through
    ``decay_t = exp(delta_t A)`` is ``g_t decay_t h_{t-1}`` times A (for delta) or delta (for
    A), and ``dA_log = dA * A``, ``ddelta_raw = ddelta * sigmoid(delta_raw)`` (the reference's
    chain rules).

    Args:
        dy: Upstream gradient, shape (B, L, D).
        x, delta_raw, A_log, B, C, D: The forward's inputs (see :func:`selective_scan_fast_fwd`).
        states: The forward's ``states`` (B, L, D, N) (any layout; the fast forward's view is
            read without a copy); recomputed when None.
        compute: The arithmetic's dtype (float64 by default, as the reference).

    Returns:
        ``(dx, ddelta_raw, dA_log, dB, dC, dD)`` with the shapes of
        ``(x, delta_raw, A_log, B, C, D)``, in the inputs' floating dtype.
    """
    dtype = out_dtype(dy, x, delta_raw, A_log, B, C, D)
    if states is None:
        _, states = selective_scan_fast_fwd(x, delta_raw, A_log, B, C, D, compute)
    batch, length, dim = x.shape
    d_state = A_log.shape[1]
    A_t = np.ascontiguousarray(-np.exp(as_compute(A_log, compute)).T)  # (N, D)
    h_all = np.ascontiguousarray(np.transpose(states, (1, 0, 3, 2)), dtype=compute)
    grads = {name: np.empty((batch, length, size), dtype) for name, size in
             (("dx", dim), ("ddelta_raw", dim), ("dB", d_state), ("dC", d_state))}  # fmt: skip
    dA_log = np.zeros((d_state, dim), compute)  # (N, D), summed over the chunks
    for rows in _row_chunks(batch, length, dim, d_state):
        chunk = _bwd_chunk(
            [_time_major(a[rows], compute) for a in (dy, x, delta_raw, B, C)],
            h_all[:, rows],
            A_t,
            dA_log,
        )
        for name, value in zip(("dx", "ddelta_raw", "dB", "dC"), chunk, strict=True):
            grads[name][rows] = np.swapaxes(value, 0, 1)
        grads["dx"][rows] += as_compute(dy[rows], compute) * as_compute(D, compute)
    dD = np.einsum("bld,bld->d", as_compute(dy, compute), as_compute(x, compute))
    return (
        grads["dx"], grads["ddelta_raw"], dA_log.T.astype(dtype), grads["dB"], grads["dC"],
        dD.astype(dtype),
    )  # fmt: skip


def _bwd_chunk(
    time_major: list[Floats], h: Floats, A_t: Floats, dA_log: Floats
) -> tuple[Floats, Floats, Floats, Floats]:
    """One chunk of rows of the backward, time-major; adds its share of dA_log (N, D).

    Args:
        time_major: dy, x, delta_raw (L, b, D) and B, C (L, b, N), in the compute dtype.
        h: The states h_t, (L, b, N, D).
        A_t: A transposed, (N, D).
        dA_log: The (N, D) accumulator of dL/dA_log, updated in place.

    Returns:
        Time-major ``(dx without the skip term, ddelta_raw, dB, dC)``.
    """
    dy, x, delta_raw, b_tm, c_tm = time_major
    length = dy.shape[0]
    delta = softplus_fwd(delta_raw, dy.dtype)  # (L, b, D)
    decay = _decays(delta, A_t)  # (L, b, N, D); becomes g_t decay_t h_{t-1}
    g = _buffer("g", decay.shape, decay.dtype)  # (L, b, N, D): dy_t C_t, then g_t
    np.multiply(c_tm[..., None], dy[:, :, None, :], out=g)
    for t in range(length - 1, 0, -1):
        decay[t] *= g[t]  # P = decay_t g_t, with g_t complete (its carry added at t + 1)
        g[t - 1] += decay[t]  # g_{t-1} = dy_{t-1} C_{t-1} + decay_t g_t
        decay[t] *= h[t - 1]  # the gradient through decay_t (divided by delta or A)
    through_decay = decay
    through_decay[0] = 0.0  # h_{-1} = 0
    through_decay *= A_t  # d decay_t / d delta = A decay_t
    dA_log += np.einsum("lbnd,lbd->nd", through_decay, delta)  # dA * A: A_log's chain rule
    g_dot_b = (b_tm[:, :, None, :] @ g)[:, :, 0, :]  # (L, b, D): sum_n g_t[n] B_t[n]
    ddelta = through_decay.sum(axis=2) + g_dot_b * x  # (L, b, D)
    dB = (g @ (delta * x)[..., None])[..., 0]  # (L, b, N): sum_d g_t[d] delta_t x_t
    dC = (h @ dy[..., None])[..., 0]  # (L, b, N): sum_d h_t[d] dy_t[d]
    return g_dot_b * delta, softplus_bwd(delta_raw, ddelta, dy.dtype), dB, dC
