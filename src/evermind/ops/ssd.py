"""numpy reference of the Mamba-2 SSD scan, as transformers runs it (native-only).

The SSM of ``transformers``' ``Mamba2Mixer`` (``torch_forward`` / ``mamba2_chunk_scan``):
one scalar decay per head, B and C shared by the heads of a group, the time step's bias and
softplus and clamp applied inside the scan. Float64 inside, results in the inputs' floating
dtype. Shapes (tokens-major, row-major; H = G * heads_per_group)::

    x         (B, L, H, P)   input (the conv branch's x part), P = head_dim
    dt_raw    (B, L, H)      time step before bias and softplus (in_proj's dt part)
    A_log     (H,)           A = -exp(A_log) < 0, one scalar per head
    B, C      (B, L, G, N)   input / output projections, one per group of heads
    D         (H,)           skip gain per head
    dt_bias   (H,)           added to dt_raw before softplus
    dt_limit  (lo, hi)       dt = clamp(softplus(dt_raw + dt_bias), lo, hi); HF's time_step_limit
    y         (B, L, H, P);  states (B, L, H, P, N): h_t after step t

Head h reads group ``h // (H // G)`` (HF's ``repeat_interleave``). Recurrence, h_{-1} = 0 (or
a given initial state)::

    h_t = exp(dt_t * A) * h_{t-1} + dt_t * x_t B_t^T      (P, N) per head
    y_t = h_t C_t + D * x_t

:func:`ssd_step` is one step of it and :func:`ssd_scan_sequential` the obvious loop over time
(the cross-check); :func:`ssd_decode_step` is the step from the raw parameters, which the
recurrent decoder runs. :func:`ssd_fwd` is the chunked state-space-dual algorithm the GPU runs
(Dao & Gu 2024, section 6; HF's ``mamba2_chunk_scan`` line for line): within a chunk of Q
steps the output is a masked, decay-weighted "attention" ``(C B^T * exp(segsum(a))) x dt``;
across chunks only the (P, N) states are carried, with ``a = dt * A`` and
``segsum(a)[i, j] = a_{j+1} + ... + a_i`` (-inf above the diagonal). Padding the last
chunk with zeros is exact: a padded step has ``a = 0`` (decay 1) and drive 0.

:func:`ssd_bwd` is the backward, a reverse loop over time like ``selective_scan_bwd``: with
``g_t = dL/dh_t = dy_t C_t^T + exp(a_{t+1}) g_{t+1}`` every gradient follows from g_t and
h_{t-1}. The chunked forward and the loop give the same states to rounding, so one backward
serves both.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from evermind.errors import ShapeError
from evermind.ops._dtype import F64, Floats, as_compute, f64, out_dtype
from evermind.ops.elementwise import softplus_bwd, softplus_fwd

__all__ = [
    "DT_LIMIT_NONE",
    "segment_sum",
    "ssd_bwd",
    "ssd_decode_step",
    "ssd_dt",
    "ssd_fwd",
    "ssd_scan_sequential",
    "ssd_step",
]

#: HF's default ``time_step_limit``: the clamp does nothing to a softplus output.
DT_LIMIT_NONE: tuple[float, float] = (0.0, math.inf)


def _check(x: Floats, dt_raw: Floats, A_log: Floats, B: Floats, C: Floats, D: Floats,
           dt_bias: Floats) -> tuple[int, int, int, int, int, int]:  # fmt: skip
    """(batch, length, heads, head_dim, groups, d_state) of consistent inputs, else ShapeError."""
    if x.ndim != 4 or B.ndim != 4:
        raise ShapeError(
            f"ssd: x has shape {x.shape} and B {B.shape}; expected x (B, L, H, P) and "
            "B (B, L, G, N); hint: split the heads out of d_inner first"
        )
    batch, length, heads, head_dim = x.shape
    groups, d_state = B.shape[2], B.shape[3]
    expected = {
        "dt_raw": (dt_raw.shape, (batch, length, heads)),
        "B": (B.shape, (batch, length, groups, d_state)),
        "C": (C.shape, (batch, length, groups, d_state)),
        "A_log": (A_log.shape, (heads,)),
        "D": (D.shape, (heads,)),
        "dt_bias": (dt_bias.shape, (heads,)),
    }
    for name, (got, want) in expected.items():
        if got != want:
            raise ShapeError(
                f"ssd: {name} has shape {got} but x is {x.shape}; expected {want} "
                "(x (B, L, H, P), B and C (B, L, G, N), per-head A_log, D, dt_bias (H,))"
            )
    if heads % groups:
        raise ShapeError(
            f"ssd: {heads} heads do not split into {groups} groups; hint: n_groups must divide "
            "the number of heads"
        )
    return batch, length, heads, head_dim, groups, d_state


def ssd_dt(dt_raw: Floats, dt_bias: Floats, dt_limit: tuple[float, float]) -> F64:
    """The scan's time step ``clamp(softplus(dt_raw + dt_bias), lo, hi)``, float64 (B, L, H)."""
    low, high = dt_limit
    return np.clip(f64(softplus_fwd(f64(dt_raw) + f64(dt_bias))), low, high)


def _per_head(a: Floats, heads: int) -> F64:
    """(B, L, G, N) as (B, L, H, N): each group's row repeated for its heads, float64."""
    return np.repeat(f64(a), heads // a.shape[2], axis=2)


def ssd_step(
    h: Floats, x_t: Floats, dt_t: Floats, A: Floats, B_t: Floats, C_t: Floats, D: Floats
) -> tuple[Floats, Floats]:
    """One step of the recurrence, with dt after bias, softplus and clamp, and A = -exp(A_log).

    Args:
        h: State before the step, (B, H, P, N).
        x_t: Input, (B, H, P).
        dt_t: Positive time step, (B, H).
        A: Negative decay rate per head, (H,).
        B_t, C_t: Projections of this step, one per group, (B, G, N).
        D: Skip gain, (H,).

    Returns:
        ``(y_t (B, H, P), new h (B, H, P, N))`` in the inputs' arithmetic.
    """
    heads = x_t.shape[1]
    reps = heads // B_t.shape[1]
    b_h = np.repeat(B_t, reps, axis=1)  # (B, H, N)
    c_h = np.repeat(C_t, reps, axis=1)  # (B, H, N)
    decay = np.exp(dt_t * A)  # (B, H): one scalar per head
    new_h = decay[:, :, None, None] * h + (dt_t[:, :, None] * x_t)[..., None] * b_h[:, :, None, :]
    y_t = (new_h @ c_h[..., None])[..., 0] + D[:, None] * x_t  # (B, H, P): sum_n h[p, n] C[n]
    return y_t, new_h


def ssd_decode_step(
    h: Floats,
    x_t: Floats,
    dt_raw_t: Floats,
    A_log: Floats,
    B_t: Floats,
    C_t: Floats,
    D: Floats,
    dt_bias: Floats,
    dt_limit: tuple[float, float] = DT_LIMIT_NONE,
    compute: npt.DTypeLike = np.float64,
) -> tuple[Floats, Floats]:
    """One decoding step from the raw parameters: :func:`ssd_step` after the bias, softplus
    and clamp of dt and A = -exp(A_log), all in ``compute`` (the decoder passes its model's
    float32, as the GPU step will compute).

    Args:
        h: State, (B, H, P, N).
        x_t: Input (the conv step's x part), (B, H, P).
        dt_raw_t: Time step before bias and softplus, (B, H).
        A_log, D, dt_bias: Per head, (H,).
        B_t, C_t: (B, G, N).
        dt_limit: As in the module docstring.
        compute: The arithmetic's dtype.

    Returns:
        ``(y_t (B, H, P), new h (B, H, P, N))`` in the inputs' floating dtype.
    """
    dtype = out_dtype(h, x_t, dt_raw_t, A_log, B_t, C_t, D, dt_bias)
    low, high = dt_limit
    pre = as_compute(dt_raw_t, compute) + as_compute(dt_bias, compute)
    dt = np.clip(softplus_fwd(pre, compute), low, high).astype(compute)  # (B, H)
    h_c, x_c, b_c, c_c = (as_compute(a, compute) for a in (h, x_t, B_t, C_t))
    A = -np.exp(as_compute(A_log, compute))  # (H,)
    y_t, new_h = ssd_step(h_c, x_c, dt, A, b_c, c_c, as_compute(D, compute))
    return y_t.astype(dtype, copy=False), new_h.astype(dtype, copy=False)


def ssd_scan_sequential(
    x: Floats,
    dt_raw: Floats,
    A_log: Floats,
    B: Floats,
    C: Floats,
    D: Floats,
    dt_bias: Floats,
    dt_limit: tuple[float, float] = DT_LIMIT_NONE,
    initial_state: Floats | None = None,
) -> tuple[Floats, Floats]:
    """The scan as a plain loop of :func:`ssd_step` over time: the slow, obvious reference.

    Args:
        x, dt_raw, A_log, B, C, D, dt_bias, dt_limit: See the module docstring.
        initial_state: h_{-1}, (B, H, P, N); None: zeros.

    Returns:
        ``(y (B, L, H, P), states (B, L, H, P, N))``, every h_t.

    Raises:
        ShapeError: The shapes disagree (see the module docstring).
    """
    dtype = out_dtype(x, dt_raw, A_log, B, C, D, dt_bias)
    batch, length, heads, head_dim, _, d_state = _check(x, dt_raw, A_log, B, C, D, dt_bias)
    dt = ssd_dt(dt_raw, dt_bias, dt_limit)  # (B, L, H)
    A, d64, x64, b64, c64 = -np.exp(f64(A_log)), f64(D), f64(x), f64(B), f64(C)
    h: Floats = np.zeros((batch, heads, head_dim, d_state))
    if initial_state is not None:
        h = f64(initial_state).copy()
    y = np.empty((batch, length, heads, head_dim))
    states = np.empty((batch, length, heads, head_dim, d_state))
    for t in range(length):
        y[:, t], h = ssd_step(h, x64[:, t], dt[:, t], A, b64[:, t], c64[:, t], d64)
        states[:, t] = h
    return y.astype(dtype), states.astype(dtype)


def segment_sum(a: F64) -> F64:
    """``out[..., i, j] = a[..., j+1] + ... + a[..., i]`` for j <= i (0 on the diagonal), -inf
    above: the log of the decay from step j to step i, (..., T) -> (..., T, T).

    As HF's ``segment_sum``: a masked cumulative sum rather than ``cumsum[i] - cumsum[j]``,
    whose difference of two large sums loses digits on long chunks.
    """
    length = a.shape[-1]
    strictly_below = np.tril(np.ones((length, length), dtype=bool), -1)
    spread = np.where(strictly_below, a[..., :, None], 0.0)  # [k, j] = a_k for k > j
    sums = np.cumsum(spread, axis=-2)  # [i, j] = sum_{j < k <= i} a_k
    return np.where(np.tril(np.ones((length, length), dtype=bool)), sums, -np.inf)


def ssd_fwd(
    x: Floats,
    dt_raw: Floats,
    A_log: Floats,
    B: Floats,
    C: Floats,
    D: Floats,
    dt_bias: Floats,
    chunk_size: int,
    dt_limit: tuple[float, float] = DT_LIMIT_NONE,
    initial_state: Floats | None = None,
) -> tuple[Floats, Floats]:
    """The chunked state-space-dual forward (HF's ``mamba2_chunk_scan``), the GPU's algorithm.

    Args:
        x, dt_raw, A_log, B, C, D, dt_bias, dt_limit: See the module docstring.
        chunk_size: Steps per chunk, Q >= 1; L need not be a multiple of it.
        initial_state: h_{-1}, (B, H, P, N); None: zeros.

    Returns:
        ``(y (B, L, H, P), chunk_states (B, ceil(L / Q), H, P, N))``: the state after the last
        step of each chunk (the last one is the final state, what decoding continues from).

    Raises:
        ShapeError: The shapes disagree or ``chunk_size`` < 1.
    """
    dtype = out_dtype(x, dt_raw, A_log, B, C, D, dt_bias)
    batch, length, heads, head_dim, _, d_state = _check(x, dt_raw, A_log, B, C, D, dt_bias)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ShapeError(f"ssd_fwd: expected an int chunk_size >= 1, got {chunk_size!r}")
    n_chunks = -(-length // chunk_size)
    pad = n_chunks * chunk_size - length
    dt = ssd_dt(dt_raw, dt_bias, dt_limit)  # (B, L, H)
    x_dt = f64(x) * dt[..., None]  # (B, L, H, P): the drive's dt x
    a = dt * -np.exp(f64(A_log))  # (B, L, H): log of each step's decay

    def chunks(t: F64) -> F64:  # (B, L, ...) -> (B, c, Q, ...), zero-padded
        t = np.pad(t, [(0, 0), (0, pad)] + [(0, 0)] * (t.ndim - 2))
        return t.reshape(batch, n_chunks, chunk_size, *t.shape[2:])

    x_c = chunks(x_dt)  # (b, c, l, h, p)
    b_c, c_c = chunks(_per_head(B, heads)), chunks(_per_head(C, heads))  # (b, c, l, h, n)
    a_c = chunks(a).transpose(0, 3, 1, 2)  # (b, h, c, l)
    a_cum = np.cumsum(a_c, axis=-1)  # (b, h, c, l)

    # 1. Within each chunk (the diagonal blocks): y_l = sum_{s<=l} C_l.B_s exp(a_{s+1..l}) dt x_s.
    decay_in = np.exp(segment_sum(a_c))  # (b, h, c, l, s)
    scores = np.einsum("bclhn,bcshn->bclsh", c_c, b_c) * decay_in.transpose(0, 2, 3, 4, 1)
    y_diag = np.einsum("bclsh,bcshp->bclhp", scores, x_c)
    # 2. Each chunk's own final state from zero: sum_l exp(a_{l+1..end}) dt x_l B_l^T.
    decay_to_end = np.exp(a_cum[..., -1:] - a_cum)  # (b, h, c, l)
    own = np.einsum("bclhn,bclhp->bchpn", b_c * decay_to_end.transpose(0, 2, 3, 1)[..., None], x_c)
    # 3. Across chunks: the state entering chunk i is sum_{j<=i} exp(a over chunks j..i-1) own_j.
    start = np.zeros((batch, 1, heads, head_dim, d_state))
    if initial_state is not None:
        start = f64(initial_state)[:, None]
    own = np.concatenate([start, own], axis=1)  # (b, c + 1, h, p, n)
    chunk_decay = np.exp(segment_sum(np.pad(a_cum[..., -1], [(0, 0), (0, 0), (1, 0)])))
    carried = np.einsum("bhcz,bzhpn->bchpn", chunk_decay, own)  # (b, c + 1, h, p, n)
    # 4. The entering state's contribution to every output of its chunk.
    from_state = np.einsum("bclhn,bchpn->bclhp", c_c, carried[:, :-1])
    y_off = from_state * np.exp(a_cum).transpose(0, 2, 3, 1)[..., None]
    y = (y_diag + y_off).reshape(batch, n_chunks * chunk_size, heads, head_dim)[:, :length]
    y = y + f64(D)[:, None] * f64(x)
    return y.astype(dtype), carried[:, 1:].astype(dtype)


def ssd_bwd(
    dy: Floats,
    x: Floats,
    dt_raw: Floats,
    A_log: Floats,
    B: Floats,
    C: Floats,
    D: Floats,
    dt_bias: Floats,
    dt_limit: tuple[float, float] = DT_LIMIT_NONE,
    states: Floats | None = None,
) -> tuple[Floats, Floats, Floats, Floats, Floats, Floats, Floats]:
    """Gradients of the scan (zero initial state), by a reverse loop over time.

    With g_t = dL/dh_t (B, H, P, N) and decay_t = exp(dt_t A)::

        g_t      = dy_t C_t^T + decay_{t+1} g_{t+1}
        dx_t     = dt_t g_t B_t + D dy_t
        da_t     = sum_{p,n} g_t * decay_t * h_{t-1}        (a_t = dt_t A)
        ddt_t    = sum_p (g_t B_t) x_t + A da_t
        dA       = sum dt_t da_t;  dA_log = dA * A          (A = -exp(A_log))
        dB_t, dC_t: sum_p of g_t dt_t x_t and h_t dy_t, summed over a group's heads

    The clamp passes the gradient where lo <= dt <= hi (as ``torch.clamp``), softplus
    multiplies it by sigmoid(dt_raw + dt_bias), and ``ddt_bias`` sums ``ddt_raw`` over B, L.

    Args:
        dy: Upstream gradient, (B, L, H, P).
        x, dt_raw, A_log, B, C, D, dt_bias, dt_limit: The forward's inputs.
        states: :func:`ssd_scan_sequential`'s states (B, L, H, P, N); recomputed when None.

    Returns:
        ``(dx, ddt_raw, dA_log, dB, dC, dD, ddt_bias)`` with the shapes of
        ``(x, dt_raw, A_log, B, C, D, dt_bias)``.

    Raises:
        ShapeError: The shapes disagree (see the module docstring).
    """
    dtype = out_dtype(dy, x, dt_raw, A_log, B, C, D, dt_bias)
    batch, length, heads, head_dim, groups, d_state = _check(x, dt_raw, A_log, B, C, D, dt_bias)
    if dy.shape != x.shape:
        raise ShapeError(f"ssd_bwd: dy has shape {dy.shape}, expected x's {x.shape}")
    if states is None:
        _, states = ssd_scan_sequential(f64(x), dt_raw, A_log, B, C, D, dt_bias, dt_limit)
    h, dy64, x64, A = f64(states), f64(dy), f64(x), -np.exp(f64(A_log))
    dt = ssd_dt(dt_raw, dt_bias, dt_limit)  # (B, L, H)
    b_h, c_h = _per_head(B, heads), _per_head(C, heads)  # (B, L, H, N)
    dx, ddt = np.empty_like(x64), np.empty_like(dt)
    db_h, dc_h = np.empty_like(b_h), np.empty_like(c_h)
    dA = np.zeros(heads)
    g = np.zeros((batch, heads, head_dim, d_state))  # dL/dh_t
    decay_next = np.zeros((batch, heads))  # decay_{t+1}; nothing flows back from t = L
    for t in range(length - 1, -1, -1):
        g = dy64[:, t, :, :, None] * c_h[:, t, :, None, :] + decay_next[:, :, None, None] * g
        decay = np.exp(dt[:, t] * A)  # (B, H)
        h_prev = h[:, t - 1] if t else np.zeros_like(g)
        da = decay * np.einsum("bhpn,bhpn->bh", g, h_prev)  # (B, H)
        g_b = (g @ b_h[:, t, :, :, None])[..., 0]  # (B, H, P): sum_n g B
        dx[:, t] = dt[:, t, :, None] * g_b + f64(D)[:, None] * dy64[:, t]
        ddt[:, t] = np.einsum("bhp,bhp->bh", g_b, x64[:, t]) + A * da
        dA += np.einsum("bh,bh->h", dt[:, t], da)
        db_h[:, t] = np.einsum("bhpn,bhp->bhn", g, dt[:, t, :, None] * x64[:, t])
        dc_h[:, t] = np.einsum("bhpn,bhp->bhn", h[:, t], dy64[:, t])
        decay_next = decay
    low, high = dt_limit
    dt_pre = f64(dt_raw) + f64(dt_bias)  # (B, L, H)
    soft = f64(softplus_fwd(dt_pre))
    ddt_raw = f64(softplus_bwd(dt_pre, ddt * ((soft >= low) & (soft <= high))))
    per_group = (batch, length, groups, heads // groups, d_state)
    dB = db_h.reshape(per_group).sum(axis=3)
    dC = dc_h.reshape(per_group).sum(axis=3)
    dD = np.einsum("blhp,blhp->h", dy64, x64)
    results = (dx, ddt_raw, dA * A, dB, dC, dD, ddt_raw.sum(axis=(0, 1)))
    return tuple(r.astype(dtype) for r in results)  # type: ignore[return-value]
