"""The Mamba-2 SSD scan's fast CPU path, checked against the reference (native-only).

:mod:`evermind.ops.ssd` is the reference: :func:`~evermind.ops.ssd.ssd_fwd` (the chunked
algorithm in float64 einsums) and :func:`~evermind.ops.ssd.ssd_bwd` (a reverse loop over
time, float64, which recomputes every per-step state with the sequential loop first). This
module computes the same forward and the same seven gradients with the same arguments and
conventions (x (B, L, H, P), dt_raw (B, L, H), per-head A_log / D / dt_bias, B and C
(B, L, G, N), zero initial state), for the CPU model's Mamba-2 training;
``tests/unit/test_ssd_fast.py`` checks it against the reference (1e-10 relative in float64,
mamba's fp32 tolerances in float32) and its backward against finite differences.

Both directions are the chunked state-space dual (Dao & Gu 2024, section 6), written as
batched matrix products over (B, H, c, Q, ·) arrays (c chunks of Q steps; H heads, B and C
repeated to the heads of their group) in the ``compute`` dtype::

    cum_l      = a_1 + ... + a_l within the chunk         (a = dt A, dt x = xd)
    G          = (C B^T) * exp(cum_l - cum_s) [s <= l]     (Q, Q) per chunk and head
    y          = G xd + exp(cum_l) C H_c^T + D x           H_c: the state entering chunk c
    H_{c+1}    = exp(cum_end) H_c + (xd * exp(cum_end - cum))^T B

and the backward is that algebra differentiated: the gradient of the (Q, Q) "attention"
``dG = dy xd^T`` gives dC, dB (through C B^T) and, times G, the log-decays' part
``sum_s dG G - sum_l dG G``; the states' gradients run backward over the chunks only (a
Python loop of c steps, not L); ``dcum`` becomes ``da`` by a reversed cumulative sum within
each chunk. No per-step state (B, L, H, P, N) is ever formed; the backward
recomputes the c chunk states (three batched products) rather than keeping them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from evermind.errors import ShapeError
from evermind.ops._dtype import Floats, as_compute, out_dtype
from evermind.ops.elementwise import softplus_bwd, softplus_fwd
from evermind.ops.ssd import DT_LIMIT_NONE

__all__ = ["ssd_fast_bwd", "ssd_fast_fwd"]


class _Chunked:
    """The forward's inputs in the chunked (B, H, c, Q, ·) layout, in the compute dtype."""

    def __init__(
        self,
        x: Floats,
        dt_raw: Floats,
        A_log: Floats,
        B: Floats,
        C: Floats,
        dt_bias: Floats,
        chunk_size: int,
        dt_limit: tuple[float, float],
        compute: npt.DTypeLike,
    ) -> None:
        if x.ndim != 4 or B.ndim != 4 or C.shape != B.shape or dt_raw.shape != x.shape[:3]:
            raise ShapeError(
                f"ssd_fast: x {x.shape}, dt_raw {dt_raw.shape}, B {B.shape}, C {C.shape}; "
                "expected x (B, L, H, P), dt_raw (B, L, H), B and C (B, L, G, N)"
            )
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ShapeError(f"ssd_fast: expected an int chunk_size >= 1, got {chunk_size!r}")
        batch, length, heads, _ = x.shape
        groups = B.shape[2]
        if heads % groups or A_log.shape != (heads,) or dt_bias.shape != (heads,):
            raise ShapeError(
                f"ssd_fast: {heads} heads, {groups} groups, A_log {A_log.shape}, dt_bias "
                f"{dt_bias.shape}; expected groups dividing heads and (H,) per-head vectors"
            )
        self.compute = np.dtype(compute)
        self.shape = (batch, length, heads, groups)
        self.n_chunks = -(-length // chunk_size)
        self.q = chunk_size
        self.pad = self.n_chunks * chunk_size - length
        self.head_group = np.arange(heads) // (heads // groups)  # each head's group
        self.A = -np.exp(as_compute(A_log, compute))  # (H,)
        self.pre = as_compute(dt_raw, compute) + as_compute(dt_bias, compute)  # (B, L, H)
        soft = softplus_fwd(self.pre, compute)
        low, high = dt_limit
        self.inside = (soft >= low) & (soft <= high)  # where the clamp passes the gradient
        dt = self.chunks(np.clip(soft, low, high).astype(self.compute, copy=False))
        self.dt = dt  # (B, H, c, Q), 0 on padded steps
        self.x = self.chunks(as_compute(x, compute))  # (B, H, c, Q, P)
        self.xd = self.x * dt[..., None]  # (B, H, c, Q, P)
        self.B = self.chunks(as_compute(B, compute)[:, :, self.head_group])  # (B, H, c, Q, N)
        self.C = self.chunks(as_compute(C, compute)[:, :, self.head_group])
        self.cum = np.cumsum(dt * self.A[:, None, None], axis=-1)  # (B, H, c, Q)
        below = np.tril(np.ones((chunk_size, chunk_size), dtype=bool))  # s <= l
        gaps = np.where(below, self.cum[..., :, None] - self.cum[..., None, :], -np.inf)
        self.decay = np.exp(gaps)  # (B, H, c, Q, Q): exp(cum_l - cum_s), 0 above the diagonal
        self.to_end = np.exp(self.cum[..., -1:] - self.cum)  # (B, H, c, Q)
        self.chunk_decay = np.exp(self.cum[..., -1])  # (B, H, c)

    def chunks(self, a: Floats) -> Floats:
        """(B, L, H, ...) -> C-contiguous (B, H, c, Q, ...), zero-padded at the end."""
        batch, _, heads, _ = self.shape
        if self.pad:
            a = np.pad(a, [(0, 0), (0, self.pad)] + [(0, 0)] * (a.ndim - 2))
        a = a.reshape(batch, self.n_chunks, self.q, heads, *a.shape[3:])
        order = (0, 3, 1, 2, *range(4, a.ndim))
        return np.ascontiguousarray(a.transpose(order))

    def unchunk(self, a: Floats) -> Floats:
        """(B, H, c, Q, ...) -> (B, L, H, ...), the padding dropped."""
        batch, length, heads, _ = self.shape
        a = np.moveaxis(a, 1, 3).reshape(batch, self.n_chunks * self.q, heads, *a.shape[4:])
        return a[:, :length]

    def entering(self, own: Floats) -> Floats:
        """The state entering each chunk, (B, H, c, P, N), from each chunk's own end state."""
        states = np.zeros_like(own)
        for c in range(1, self.n_chunks):
            states[:, :, c] = self.chunk_decay[:, :, c - 1, None, None] * states[:, :, c - 1]
            states[:, :, c] += own[:, :, c - 1]
        return states


def _check_vectors(x: Floats, D: Floats) -> None:
    if D.shape != (x.shape[2],):
        raise ShapeError(f"ssd_fast: D has shape {D.shape}, expected ({x.shape[2]},)")


def ssd_fast_fwd(
    x: Floats,
    dt_raw: Floats,
    A_log: Floats,
    B: Floats,
    C: Floats,
    D: Floats,
    dt_bias: Floats,
    chunk_size: int,
    dt_limit: tuple[float, float] = DT_LIMIT_NONE,
    compute: npt.DTypeLike = np.float64,
) -> tuple[Floats, Floats]:
    """The SSD forward: :func:`evermind.ops.ssd.ssd_fwd` (zero initial state), faster.

    Args:
        x, dt_raw, A_log, B, C, D, dt_bias, dt_limit: As :func:`~evermind.ops.ssd.ssd_fwd`.
        chunk_size: Steps per chunk, Q >= 1.
        compute: The arithmetic's dtype (float64 by default, as the reference).

    Returns:
        ``(y (B, L, H, P), chunk_states (B, c, H, P, N))``, as the reference: the state after
        each chunk's last step. :func:`ssd_fast_bwd` reads them back.

    Raises:
        ShapeError: The shapes disagree or ``chunk_size`` < 1.
    """
    _check_vectors(x, D)
    dtype = out_dtype(x, dt_raw, A_log, B, C, D, dt_bias)
    k = _Chunked(x, dt_raw, A_log, B, C, dt_bias, chunk_size, dt_limit, compute)
    y, own, states = _forward(k)
    last = k.chunk_decay[..., None, None] * states + own  # (B, H, c, P, N): after each chunk
    y += as_compute(D, compute)[:, None, None, None] * k.x
    return k.unchunk(y).astype(dtype), np.moveaxis(last, 1, 2).astype(dtype)


def _forward(k: _Chunked) -> tuple[Floats, Floats, Floats]:
    """The output without the skip term, each chunk's own end state from zero, and the
    state entering each chunk: ``(y (B, H, c, Q, P), own, states (B, H, c, P, N))``."""
    scores = (k.C @ np.swapaxes(k.B, -1, -2)) * k.decay  # (B, H, c, Q, Q): G
    y = scores @ k.xd  # (B, H, c, Q, P)
    own = np.swapaxes(k.xd * k.to_end[..., None], -1, -2) @ k.B  # (B, H, c, P, N)
    states = k.entering(own)
    y += np.exp(k.cum)[..., None] * (k.C @ np.swapaxes(states, -1, -2))
    return y, own, states


def ssd_fast_bwd(
    dy: Floats,
    x: Floats,
    dt_raw: Floats,
    A_log: Floats,
    B: Floats,
    C: Floats,
    D: Floats,
    dt_bias: Floats,
    chunk_size: int,
    dt_limit: tuple[float, float] = DT_LIMIT_NONE,
    compute: npt.DTypeLike = np.float64,
) -> tuple[Floats, Floats, Floats, Floats, Floats, Floats, Floats]:
    """The SSD backward: :func:`evermind.ops.ssd.ssd_bwd`, faster (module docstring).

    The forward's chunk states are recomputed (a few matrix products: cheaper to redo than
    to keep per layer).

    Args:
        dy: Upstream gradient, (B, L, H, P).
        x, dt_raw, A_log, B, C, D, dt_bias, dt_limit: The forward's inputs.
        chunk_size: Steps per chunk (any value >= 1 gives the same gradients).
        compute: The arithmetic's dtype (float64 by default, as the reference).

    Returns:
        ``(dx, ddt_raw, dA_log, dB, dC, dD, ddt_bias)`` with the shapes of
        ``(x, dt_raw, A_log, B, C, D, dt_bias)``, in the inputs' floating dtype.

    Raises:
        ShapeError: The shapes disagree.
    """
    _check_vectors(x, D)
    if dy.shape != x.shape:
        raise ShapeError(f"ssd_fast_bwd: dy has shape {dy.shape}, expected x's {x.shape}")
    dtype = out_dtype(dy, x, dt_raw, A_log, B, C, D, dt_bias)
    k = _Chunked(x, dt_raw, A_log, B, C, dt_bias, chunk_size, dt_limit, compute)
    grads = _backward(k, k.chunks(as_compute(dy, compute)))
    dx, ddt, dB, dC, dA = (grads[name] for name in ("dx", "ddt", "dB", "dC", "dA"))
    dy_c, x_c = as_compute(dy, compute), as_compute(x, compute)
    dx = k.unchunk(dx) + as_compute(D, compute)[:, None] * dy_c
    ddt_raw = softplus_bwd(k.pre, k.unchunk(ddt) * k.inside, compute)  # (B, L, H)
    batch, length, heads, groups = k.shape
    per_group = (batch, length, groups, heads // groups, B.shape[3])
    dB = k.unchunk(dB).reshape(per_group).sum(axis=3)
    dC = k.unchunk(dC).reshape(per_group).sum(axis=3)
    dD = np.einsum("blhp,blhp->h", dy_c, x_c)
    results = (dx, ddt_raw, dA * k.A, dB, dC, dD, ddt_raw.sum(axis=(0, 1)))
    return tuple(np.asarray(r).astype(dtype) for r in results)  # type: ignore[return-value]


def _backward(k: _Chunked, dy: Floats) -> dict[str, Any]:
    """Gradients in the chunked layout: dx (without the skip), ddt (before the clamp and
    softplus), dB and dC per head, and dA (H,)."""
    t = np.swapaxes
    own = t(k.xd * k.to_end[..., None], -1, -2) @ k.B  # (B, H, c, P, N)
    states = k.entering(own)  # H_c
    exp_cum = np.exp(k.cum)  # (B, H, c, Q)
    # The entering states' part of y: exp(cum_l) C_l H_c^T.
    d_states = t(dy * exp_cum[..., None], -1, -2) @ k.C  # (B, H, c, P, N)
    from_states = dy @ states  # (B, H, c, Q, N): sum_p dy H
    dC = exp_cum[..., None] * from_states
    dcum = exp_cum * np.sum(k.C * from_states, axis=-1)  # (B, H, c, Q)
    # The chunk's own part: y = G xd, G = (C B^T) * decay.
    cb = k.C @ t(k.B, -1, -2)  # (B, H, c, Q, Q)
    scores = cb * k.decay  # G
    dscores = dy @ t(k.xd, -1, -2)  # (B, H, c, Q, Q): dG
    dxd = t(scores, -1, -2) @ dy  # (B, H, c, Q, P)
    dcb = dscores * k.decay
    dC += dcb @ k.B
    dB = t(dcb, -1, -2) @ k.C  # (B, H, c, Q, N)
    through_decay = dscores * scores  # d loss / d (cum_l - cum_s), 0 above the diagonal
    dcum += through_decay.sum(axis=-1) - through_decay.sum(axis=-2)
    # The states across chunks, backward: H_{c+1} = exp(cum_end_c) H_c + own_c.
    d_own = np.zeros_like(own)  # dL/d own_c = dL/d H_{c+1} (0 for the last chunk)
    d_end = np.zeros(k.chunk_decay.shape, k.compute)  # (B, H, c): d / d cum_end
    carry = d_states[:, :, -1]
    for c in range(k.n_chunks - 2, -1, -1):
        d_own[:, :, c] = carry
        d_end[:, :, c] = k.chunk_decay[:, :, c] * np.sum(carry * states[:, :, c], axis=(-2, -1))
        carry = d_states[:, :, c] + k.chunk_decay[:, :, c, None, None] * carry
    # own_c = (xd * to_end)^T B, to_end = exp(cum_end - cum).
    u = k.B @ t(d_own, -1, -2)  # (B, H, c, Q, P): sum_n B d_own
    dxd += k.to_end[..., None] * u
    dB += k.to_end[..., None] * (k.xd @ d_own)
    d_to_end = np.sum(k.xd * u, axis=-1) * k.to_end  # (B, H, c, Q)
    dcum -= d_to_end
    dcum[..., -1] += d_end + d_to_end.sum(axis=-1)
    da = np.cumsum(dcum[..., ::-1], axis=-1)[..., ::-1]  # cum_l = a_1 + ... + a_l
    ddt = k.A[:, None, None] * da + np.sum(k.x * dxd, axis=-1)  # (B, H, c, Q)
    dA = np.einsum("bhcq,bhcq->h", k.dt, da)
    return {"dx": k.dt[..., None] * dxd, "ddt": ddt, "dB": dB, "dC": dC, "dA": dA}
