"""numpy reference for ``shaders/recurrent_step.wgsl``: one decoding step (native-only).

Two O(1)-per-token pieces, built from the parallel ops so that decoding step by step equals
the parallel forward by construction:

- :func:`conv_step`: shift the input x (B, D) into the (B, D, K) register of the last K conv
  inputs (oldest first), then ``silu(conv1d)`` at the newest position (= the last output of
  :func:`evermind.ops.conv1d.conv1d_fwd` over the register, to the bit:
  :func:`evermind.ops.conv1d.conv1d_last`);
- :func:`ssm_step`: one step of the selective scan (:func:`evermind.ops.selective_scan.scan_step`)
  on the state h (B, D, N), with the kernel's raw ``delta_raw`` and ``A_log``;
- :func:`gather_rows` / :func:`scatter_rows`: the copies between the states of all slots
  (S, ...) and the dense rows of one batched step (B, ...) (``shaders/recurrent_step.wgsl``'s
  ``gather_rows`` and ``scatter_rows``, used by batched decoding).

:func:`causal_conv1d_silu` is the parallel conv branch (B, L, D) that running
:func:`conv_step` over a sequence reproduces; the scan's parallel form is
:func:`evermind.ops.selective_scan.selective_scan_fwd`. float64 inside by default, results in
the inputs' floating dtype; the numpy decoder (:meth:`evermind.model.cpu.CpuMamba.step`) passes
``compute=float32``, its model's dtype, as the GPU step computes: the (B, D, N) state's
exponentials and products are then half the memory traffic and twice the SIMD lanes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from evermind.ops._dtype import Floats, as_compute, out_dtype
from evermind.ops.conv1d import conv1d_fwd, conv1d_last
from evermind.ops.elementwise import silu_fwd, softplus_fwd
from evermind.ops.selective_scan import scan_step

__all__ = ["causal_conv1d_silu", "conv_step", "gather_rows", "scatter_rows", "ssm_step"]


def causal_conv1d_silu(
    x: Floats, weight: Floats, bias: Floats, compute: npt.DTypeLike = np.float64
) -> Floats:
    """``silu(conv1d(x))``: the conv branch over a whole sequence.

    Args:
        x: Input, (B, L, D).
        weight: Depthwise taps, (D, 1, K) (or (D, K)).
        bias: (D,).
        compute: The arithmetic's dtype (float64 by default).

    Returns:
        (B, L, D).
    """
    return silu_fwd(conv1d_fwd(x, weight, bias, compute), compute)


def conv_step(
    conv_state: Floats, x: Floats, weight: Floats, bias: Floats, compute: npt.DTypeLike = np.float64
) -> tuple[Floats, Floats]:
    """One conv step: shift ``x`` (B, D) into ``conv_state`` (B, D, K), then ``silu(conv)``.

    Returns:
        ``(x_conv (B, D), new_state (B, D, K))``; the oldest input is shifted out (the shift
        is exact: the state comes back in its own dtype, whatever ``compute`` is).
    """
    dtype = out_dtype(conv_state, x, weight, bias)
    old = np.asarray(conv_state, dtype)
    # The shift as one copy of each row's D*K values moved left by one (so each register
    # loses its oldest input and takes its right neighbour's first, overwritten just after by
    # x): numpy's concatenate along the last axis of K = 4 copies 3 and 1 values at a time,
    # ~8x slower at (32, 256, 4).
    batch, width = old.shape[0], old.shape[1] * old.shape[2]
    state = np.empty(old.shape, dtype)  # (B, D, K)
    state.reshape(batch, width)[:, :-1] = old.reshape(batch, width)[:, 1:]
    state[:, :, -1] = x
    # Over the register as a length-K sequence, the last conv output reads exactly its K taps.
    x_conv = silu_fwd(conv1d_last(state, weight, bias, compute), compute)  # (B, D)
    return x_conv.astype(dtype, copy=False), state


def ssm_step(
    h: Floats,
    x_c: Floats,
    delta_raw: Floats,
    A_log: Floats,
    B_t: Floats,
    C_t: Floats,
    D: Floats,
    compute: npt.DTypeLike = np.float64,
    out: Floats | None = None,
) -> tuple[Floats, Floats]:
    """One selective-scan step.

    Args:
        h: State, (B, D, N).
        x_c: Input (the conv step's output), (B, D).
        delta_raw: Time step before softplus, (B, D).
        A_log: (D, N); A = -exp(A_log).
        B_t, C_t: (B, N).
        D: Skip gain, (D,).
        compute: The arithmetic's dtype (float64 by default).
        out: Where to write the new state (``h`` itself: in place), (B, D, N); None: a new
            array.

    Returns:
        ``(y (B, D), new_h (B, D, N))``; ``new_h`` is ``out`` when given.
    """
    dtype = out_dtype(h, x_c, delta_raw, A_log, B_t, C_t, D)
    delta = softplus_fwd(as_compute(delta_raw, compute), compute)  # (B, D)
    A = -np.exp(as_compute(A_log, compute))  # (D, N)
    # The state is written straight into ``out`` when the arithmetic is in its dtype.
    direct = out is not None and out.dtype == np.dtype(compute) == dtype
    y, new_h = scan_step(
        as_compute(h, compute),
        as_compute(x_c, compute),
        delta,
        A,
        as_compute(B_t, compute),
        as_compute(C_t, compute),
        as_compute(D, compute),
        out if direct else None,
    )
    if out is not None and not direct:
        out[...] = new_h
        new_h = out
    return y.astype(dtype, copy=False), new_h.astype(dtype, copy=False)


def gather_rows(states: Floats, slot_of: np.ndarray) -> Floats:
    """The rows of the slots ``slot_of`` (B,): ``states[slot_of]``, shape (B, ...)."""
    return np.asarray(states)[np.asarray(slot_of, np.int64)]


def scatter_rows(states: Floats, slot_of: np.ndarray, rows: Floats) -> Floats:
    """A copy of ``states`` (S, ...) with row ``slot_of[b]`` replaced by ``rows[b]``.

    Raises:
        ValueError: ``slot_of`` repeats a slot (the kernel's writes would race).
    """
    index = np.asarray(slot_of, np.int64)
    if len(set(index.tolist())) != len(index):
        raise ValueError(f"scatter_rows: slot_of repeats a slot: {index.tolist()}")
    out = np.array(states, copy=True)
    out[index] = rows
    return out
