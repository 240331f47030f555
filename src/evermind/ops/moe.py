"""numpy reference of the cortex: a shared-expert mixture-of-experts FFN (native-only).

Qwen2-MoE's sparse block (``transformers`` ``Qwen2MoeSparseMoeBlock``), on M token rows of
width D, with E routed experts of width F and one shared expert of width S::

    probs = softmax(x @ W_router^T)          (M, E)  float64 here (HF: float32)
    idx   = top-k of probs                   (M, k)  ties: the lower expert index first
    gates = probs[idx]                       (M, k)  NOT renormalised (norm_topk_prob=False)
    expert_e(x) = down_e(silu(gate_e(x)) * up_e(x))                (SwiGLU)
    y = sum_j gates_j * expert_{idx_j}(x) + sigmoid(x . w_sg) * shared(x)

Weights (PyTorch layout, rows first; the routed experts stacked on a leading E axis)::

    router      (E, D)        ``moe.gate.weight``
    gate_proj   (E, F, D)     ``moe.experts.{e}.gate_proj.weight``, stacked
    up_proj     (E, F, D)     ``moe.experts.{e}.up_proj.weight``
    down_proj   (E, D, F)     ``moe.experts.{e}.down_proj.weight``
    shared_gate (S, D), shared_up (S, D), shared_down (D, S)   ``moe.shared_expert.*``
    shared_expert_gate (1, D)

The load-balancing loss is HF's ``load_balancing_loss_func`` (Switch Transformer eq. 4-6) on
the rows given (pass every cortex layer's rows stacked to get HF's pooled value)::

    aux = E * sum_e f_e * P_e,  f_e = (assignments to e) / R,  P_e = mean_r probs[r, e]

f sums to k over e (HF counts every top-k slot and divides by the R rows). f is a count, so
the loss's gradient flows through P alone: d aux / d probs[r, e] = E * f_e / R.

Top-k is piecewise constant: the finite-difference checks keep a margin between the k-th and
(k+1)-th probability. Float64 inside, results in the inputs' floating dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evermind.errors import ShapeError
from evermind.ops._dtype import Floats, Ints, f64, out_dtype
from evermind.ops.elementwise import sigmoid, silu_bwd, silu_fwd

__all__ = [
    "MoeWeights",
    "expert_fractions",
    "load_balance_bwd",
    "load_balance_loss",
    "moe_bwd",
    "moe_fwd",
    "moe_route",
]


@dataclass(frozen=True)
class MoeWeights:
    """One cortex layer's weights (shapes in the module docstring)."""

    router: Floats  # (E, D)
    gate_proj: Floats  # (E, F, D)
    up_proj: Floats  # (E, F, D)
    down_proj: Floats  # (E, D, F)
    shared_gate: Floats  # (S, D)
    shared_up: Floats  # (S, D)
    shared_down: Floats  # (D, S)
    shared_expert_gate: Floats  # (1, D)

    @property
    def n_experts(self) -> int:
        """E, the number of routed experts."""
        return int(self.router.shape[0])


def _check(x: Floats, w: MoeWeights, top_k: int) -> None:
    """Refuse shapes that disagree (every op of the module calls it first)."""
    if x.ndim != 2 or x.shape[1] != w.router.shape[1]:
        raise ShapeError(
            f"moe: x has shape {x.shape} but the router is {w.router.shape}; expected (M, D) "
            f"with D = {w.router.shape[1]}; hint: flatten (B, L, D) to (B * L, D)"
        )
    experts, width = w.router.shape
    inner = w.gate_proj.shape[1] if w.gate_proj.ndim == 3 else -1
    shared = w.shared_gate.shape[0] if w.shared_gate.ndim == 2 else -1
    expected = {
        "gate_proj": (experts, inner, width),
        "up_proj": (experts, inner, width),
        "down_proj": (experts, width, inner),
        "shared_gate": (shared, width),
        "shared_up": (shared, width),
        "shared_down": (width, shared),
        "shared_expert_gate": (1, width),
    }
    for name, shape in expected.items():
        got = getattr(w, name).shape
        if got != shape:
            raise ShapeError(f"moe: {name} has shape {got}, expected {shape} (E, F, S, D)")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise ShapeError(
            f"moe: top_k must be an int in [1, {experts}] (the number of experts), got {top_k!r}"
        )


def moe_route(x: Floats, router: Floats, top_k: int) -> tuple[Floats, Ints, Floats]:
    """The router: probabilities over experts, the top-k experts of each row, their gates.

    Args:
        x: Token rows, (M, D).
        router: The router's weight, (E, D).
        top_k: k, in [1, E].

    Returns:
        ``(probs (M, E), idx (M, k) int64, gates (M, k))``: idx by descending probability,
        ties to the lower expert index; gates = probs at idx (not renormalised).

    Raises:
        ShapeError: x and router disagree on D, or k is outside [1, E].
    """
    if x.ndim != 2 or router.ndim != 2 or x.shape[1] != router.shape[1]:
        raise ShapeError(
            f"moe_route: x {x.shape} and router {router.shape}: expected (M, D) and (E, D)"
        )
    experts = router.shape[0]
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise ShapeError(f"moe_route: top_k must be an int in [1, {experts}], got {top_k!r}")
    logits = f64(x) @ f64(router).T  # (M, E)
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    # A stable sort of -probs puts equal probabilities in index order: ties go to the lower e.
    idx = np.argsort(-probs, axis=1, kind="stable")[:, :top_k].astype(np.int64)  # (M, k)
    gates = np.take_along_axis(probs, idx, axis=1)  # (M, k)
    dtype = out_dtype(x, router)
    return probs.astype(dtype), idx, gates.astype(dtype)


def _swiglu(x: Floats, gate: Floats, up: Floats, down: Floats) -> tuple[Floats, Floats, Floats]:
    """down(silu(gate(x)) * up(x)) in float64: ``(out (T, D), a (T, F), b (T, F))``."""
    a, b = x @ gate.T, x @ up.T  # (T, F) each
    return (silu_fwd(a) * b) @ down.T, a, b


def _swiglu_bwd(
    dout: Floats, x: Floats, gate: Floats, up: Floats, down: Floats
) -> tuple[Floats, Floats, Floats, Floats]:
    """Backward of :func:`_swiglu` in float64: ``(dx, dgate, dup, ddown)``."""
    a, b = x @ gate.T, x @ up.T  # (T, F) each
    act = silu_fwd(a)  # (T, F)
    ddown = dout.T @ (act * b)  # (D, F)
    dhidden = dout @ down  # (T, F)
    da = silu_bwd(a, dhidden * b)  # (T, F)
    db = dhidden * act  # (T, F)
    return da @ gate + db @ up, da.T @ x, db.T @ x, ddown


def moe_fwd(x: Floats, w: MoeWeights, top_k: int) -> tuple[Floats, Floats, Ints]:
    """The cortex forward: routed experts weighted by their gates plus the gated shared expert.

    Args:
        x: Token rows (already normed), (M, D).
        w: The layer's weights.
        top_k: Experts per row, in [1, E].

    Returns:
        ``(y (M, D), probs (M, E), idx (M, k))``: probs and idx are what the load-balancing
        loss and the routing statistics read.

    Raises:
        ShapeError: A weight's shape disagrees with x or the others, or k is outside [1, E].
    """
    _check(x, w, top_k)
    probs, idx, gates = moe_route(x, w.router, top_k)
    x64, gates64 = f64(x), f64(gates)
    y = np.zeros_like(x64)  # (M, D)
    for e in range(w.n_experts):
        rows, slot = np.nonzero(idx == e)  # the rows routed to e (each at most once)
        if rows.size == 0:
            continue  # an expert no row chose costs nothing and gets a zero gradient
        out, _, _ = _swiglu(x64[rows], f64(w.gate_proj[e]), f64(w.up_proj[e]), f64(w.down_proj[e]))
        y[rows] += gates64[rows, slot][:, None] * out
    shared, _, _ = _swiglu(x64, f64(w.shared_gate), f64(w.shared_up), f64(w.shared_down))
    y += f64(sigmoid(x64 @ f64(w.shared_expert_gate).T)) * shared  # (M, 1) * (M, D)
    return y.astype(out_dtype(x, w.router)), probs, idx


def moe_bwd(
    dy: Floats, x: Floats, w: MoeWeights, top_k: int, dprobs: Floats | None = None
) -> tuple[Floats, MoeWeights]:
    """The cortex backward: d x and every weight's gradient.

    Args:
        dy: d(loss)/d(y), (M, D).
        x: The forward's input, (M, D).
        w: The forward's weights.
        top_k: The forward's k.
        dprobs: An extra gradient on the router probabilities, (M, E): the load-balancing
            loss's (:func:`load_balance_bwd` times its coefficient); None: none.

    Returns:
        ``(dx (M, D), grads)``: grads a :class:`MoeWeights` of gradients, each in its weight's
        shape. An expert no row was routed to gets zeros.

    Raises:
        ShapeError: As :func:`moe_fwd`, or dy / dprobs shaped unlike (M, D) / (M, E).
    """
    _check(x, w, top_k)
    if dy.shape != x.shape:
        raise ShapeError(f"moe_bwd: dy has shape {dy.shape}, expected x's {x.shape}")
    probs, idx, gates = moe_route(x, w.router, top_k)
    x64, dy64, probs64, gates64 = f64(x), f64(dy), f64(probs), f64(gates)
    if dprobs is not None and dprobs.shape != probs.shape:
        raise ShapeError(f"moe_bwd: dprobs has shape {dprobs.shape}, expected {probs.shape}")
    d_probs = np.zeros_like(probs64) if dprobs is None else f64(dprobs).copy()  # (M, E)
    dx = np.zeros_like(x64)
    d_gate, d_up, d_down = (np.zeros(a.shape) for a in (w.gate_proj, w.up_proj, w.down_proj))
    for e in range(w.n_experts):
        rows, slot = np.nonzero(idx == e)
        if rows.size == 0:
            continue
        weights = f64(w.gate_proj[e]), f64(w.up_proj[e]), f64(w.down_proj[e])
        out, _, _ = _swiglu(x64[rows], *weights)  # (T, D)
        # y += g * out: the gate's gradient is dy . out, the expert's is g * dy.
        d_probs[rows, e] += np.einsum("td,td->t", dy64[rows], out)
        dx_e, d_gate[e], d_up[e], d_down[e] = _swiglu_bwd(
            gates64[rows, slot][:, None] * dy64[rows], x64[rows], *weights
        )
        dx[rows] += dx_e  # a row is routed to an expert at most once: no repeated index
    # Softmax backward: dlogits = p * (dp - sum_e p dp).
    dlogits = probs64 * (d_probs - np.sum(probs64 * d_probs, axis=1, keepdims=True))  # (M, E)
    dx += dlogits @ f64(w.router)
    d_router = dlogits.T @ x64  # (E, D)

    shared_w = f64(w.shared_gate), f64(w.shared_up), f64(w.shared_down)
    shared, _, _ = _swiglu(x64, *shared_w)  # (M, D)
    sg = f64(w.shared_expert_gate)  # (1, D)
    scale = f64(sigmoid(x64 @ sg.T))  # (M, 1)
    d_pre = np.sum(dy64 * shared, axis=1, keepdims=True) * scale * (1.0 - scale)  # (M, 1)
    dx_s, d_sgate, d_sup, d_sdown = _swiglu_bwd(scale * dy64, x64, *shared_w)
    dx += dx_s + d_pre @ sg
    dtype = out_dtype(dy, x, w.router)
    grads = MoeWeights(
        router=d_router.astype(dtype),
        gate_proj=d_gate.astype(dtype),
        up_proj=d_up.astype(dtype),
        down_proj=d_down.astype(dtype),
        shared_gate=d_sgate.astype(dtype),
        shared_up=d_sup.astype(dtype),
        shared_down=d_sdown.astype(dtype),
        shared_expert_gate=(d_pre.T @ x64).astype(dtype),
    )
    return dx.astype(dtype), grads


def expert_fractions(idx: Ints, n_experts: int) -> Floats:
    """f: each expert's (row, slot) assignments divided by the rows, (E,) float64; sums to k.

    Raises:
        ShapeError: idx is not (R, k) with R >= 1 and entries in [0, E).
    """
    if idx.ndim != 2 or idx.shape[0] < 1 or idx.min() < 0 or idx.max() >= n_experts:
        raise ShapeError(
            f"expert_fractions: expected (R >= 1, k) expert indices in [0, {n_experts}), got "
            f"shape {idx.shape}"
        )
    return np.bincount(idx.reshape(-1), minlength=n_experts) / float(idx.shape[0])


def load_balance_loss(probs: Floats, idx: Ints) -> float:
    """HF's ``load_balancing_loss_func`` on these rows: E * sum_e f_e * P_e.

    Args:
        probs: Router probabilities, (R, E) (every cortex layer's rows stacked for HF's value).
        idx: The top-k experts of each row, (R, k).

    Returns:
        The loss; 1.0 * k when routing is perfectly balanced and the probabilities uniform.

    Raises:
        ShapeError: probs and idx disagree on R.
    """
    if probs.ndim != 2 or idx.shape[:1] != probs.shape[:1]:
        raise ShapeError(
            f"load_balance_loss: probs {probs.shape} and idx {idx.shape}: (R, E), (R, k)"
        )
    experts = probs.shape[1]
    fractions = expert_fractions(idx, experts)  # (E,)
    mean_probs = f64(probs).mean(axis=0)  # (E,)
    return float(experts * np.sum(fractions * mean_probs))


def load_balance_bwd(probs: Floats, idx: Ints) -> Floats:
    """d :func:`load_balance_loss` / d probs, (R, E): E * f_e / R (f is a count: no gradient).

    Raises:
        ShapeError: As :func:`load_balance_loss`.
    """
    if probs.ndim != 2 or idx.shape[:1] != probs.shape[:1]:
        raise ShapeError(
            f"load_balance_bwd: probs {probs.shape} and idx {idx.shape}: (R, E), (R, k)"
        )
    rows, experts = probs.shape
    fractions = expert_fractions(idx, experts)  # (E,)
    grad = np.broadcast_to(experts * fractions / rows, probs.shape)
    return grad.astype(out_dtype(probs))
