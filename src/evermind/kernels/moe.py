"""Launcher for ``shaders/moe.wgsl``: the cortex's shared-expert MoE FFN, forward and backward.

:meth:`Moe.forward` records one cortex layer on M token rows: the router (softmax, top-k with
ties to the lower expert), the k routed SwiGLU experts of each row computed by gathered expert
index (only the chosen k of E, never all experts masked), and the sigmoid-gated shared expert
(:class:`~evermind.kernels.matmul.Matmul` and
:class:`~evermind.kernels.elementwise.Elementwise` dispatches). :meth:`Moe.aux` records the
load-balancing loss pooled over every layer stacked in :class:`MoeRouting`, and its gradient on
the probabilities; :meth:`Moe.backward` records d x and every weight's gradient, the routed
experts' weight gradients summed over per-expert pair lists built on the GPU (no atomics).
The numpy reference is ``evermind.ops.moe``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from evermind.errors import ShapeError
from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import need_f32
from evermind.kernels.elementwise import Elementwise
from evermind.kernels.matmul import Matmul

SHADER = "moe"
#: Invocations per workgroup (the WGSL ``override WG``).
WORKGROUP_SIZE = 64
#: Outputs per invocation along one axis (the WGSL const TILE; TILE x TILE for the weight
#: gradients).
TILE = 4

# Binding slots of moe.wgsl.
(
    _X,
    _ROUTER,
    _GATE_PROJ,
    _UP_PROJ,
    _DOWN_PROJ,
    _PROBS,
    _IDX,
    _PAIR_A,
    _PAIR_B,
    _PAIR_OUT,
    _Y,
    _DY,
    _SHARED,
    _PRE,
    _LISTS,
    _COUNTS,
    _STATS,
    _AUX_OUT,
    _DLOGITS,
    _DW1,
    _DW2,
    _PAIR_DA,
    _PAIR_DB,
    _PARAMS,
    _DPRE,
    _PAIR_H,
) = range(26)


def _tiles(n: int) -> int:
    """Invocations covering ``n`` outputs, TILE each."""
    return -(-n // TILE)


@dataclass(frozen=True)
class MoeSizes:
    """One cortex layer's sizes: M rows of width D, E experts of width F, shared width S."""

    rows: int  # M (B * L)
    dim: int  # D
    experts: int  # E
    inner: int  # F
    shared: int  # S
    top_k: int  # k
    layers: int = 1  # cortex layers stacked in MoeRouting

    def check(self) -> None:
        """Raises ShapeError unless every size is positive and 1 <= k <= E."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ShapeError(f"moe: {f.name} must be an int >= 1, got {value!r}")
        if self.top_k > self.experts:
            raise ShapeError(
                f"moe: top_k = {self.top_k} exceeds the {self.experts} experts; hint: pick k <= E"
            )


@dataclass(frozen=True)
class MoeWeightBuffers:
    """One layer's weights (or their gradients) on the GPU, shaped as ``ops.moe.MoeWeights``."""

    router: Buffer  # (E, D)
    gate_proj: Buffer  # (E, F, D)
    up_proj: Buffer  # (E, F, D)
    down_proj: Buffer  # (E, D, F)
    shared_gate: Buffer  # (S, D)
    shared_up: Buffer  # (S, D)
    shared_down: Buffer  # (D, S)
    shared_expert_gate: Buffer  # (1, D)


def weight_counts(s: MoeSizes) -> dict[str, int]:
    """f32 values of each weight in :class:`MoeWeightBuffers`, by field name."""
    return {
        "router": s.experts * s.dim,
        "gate_proj": s.experts * s.inner * s.dim,
        "up_proj": s.experts * s.inner * s.dim,
        "down_proj": s.experts * s.dim * s.inner,
        "shared_gate": s.shared * s.dim,
        "shared_up": s.shared * s.dim,
        "shared_down": s.dim * s.shared,
        "shared_expert_gate": s.dim,
    }


@dataclass(frozen=True)
class MoeRouting:
    """The router's outputs for every layer, stacked (R = layers * M rows), and the aux loss.

    ``probs`` (R, E) f32, ``idx`` (R, k) u32, ``stats`` (layers, E, 2) f32 — each layer's
    assignment count and probability mass per expert (the routing statistics) —, ``aux_out``
    (1 + E) f32: the pooled load-balancing loss, then coef * d aux / d probs[r, e].
    """

    probs: Buffer
    idx: Buffer
    stats: Buffer
    aux_out: Buffer

    @classmethod
    def allocate(cls, device: Device, s: MoeSizes) -> MoeRouting:
        """Zeroed buffers for ``s.layers`` layers of ``s.rows`` rows."""
        r = s.layers * s.rows
        return cls(
            probs=device.buffer(4 * r * s.experts, label="moe.probs"),
            idx=device.buffer(4 * r * s.top_k, label="moe.idx"),
            stats=device.buffer(8 * s.layers * s.experts, label="moe.stats"),
            aux_out=device.buffer(4 * (1 + s.experts), label="moe.aux_out"),
        )


@dataclass(frozen=True)
class MoeActivations:
    """One layer's forward intermediates, kept for its backward."""

    pair_a: Buffer  # (M*k, F) gate projections
    pair_b: Buffer  # (M*k, F) up projections
    pair_h: Buffer  # (M*k, F) silu(a) * b
    pair_out: Buffer  # (M*k, D) ungated expert outputs
    shared_a: Buffer  # (M, S)
    shared_b: Buffer  # (M, S)
    shared_act: Buffer  # (M, S) silu(shared_a)
    shared_h: Buffer  # (M, S) silu(a) * b
    shared_out: Buffer  # (M, D)
    pre: Buffer  # (M,) the shared expert gate's logit

    @classmethod
    def allocate(cls, device: Device, s: MoeSizes) -> MoeActivations:
        """Buffers for one layer of ``s``."""
        pairs, m = s.rows * s.top_k, s.rows

        def buf(count: int, name: str) -> Buffer:
            return device.buffer(4 * count, label=f"moe.{name}")

        return cls(
            pair_a=buf(pairs * s.inner, "pair_a"),
            pair_b=buf(pairs * s.inner, "pair_b"),
            pair_h=buf(pairs * s.inner, "pair_h"),
            pair_out=buf(pairs * s.dim, "pair_out"),
            shared_a=buf(m * s.shared, "shared_a"),
            shared_b=buf(m * s.shared, "shared_b"),
            shared_act=buf(m * s.shared, "shared_act"),
            shared_h=buf(m * s.shared, "shared_h"),
            shared_out=buf(m * s.dim, "shared_out"),
            pre=buf(m, "pre"),
        )


@dataclass(frozen=True)
class MoeScratch:
    """The backward's scratch (any layer of the same sizes may reuse it)."""

    lists: Buffer  # (E, M) u32 pairs routed to each expert
    counts: Buffer  # (E,) u32
    dlogits: Buffer  # (M, E)
    pair_da: Buffer  # (M*k, F)
    pair_db: Buffer  # (M*k, F)
    dys: Buffer  # (M, D) the shared expert's gated dy
    dpre: Buffer  # (M,)
    shared_dh: Buffer  # (M, S)
    shared_dact: Buffer  # (M, S)
    shared_da: Buffer  # (M, S)
    shared_db: Buffer  # (M, S)

    @classmethod
    def allocate(cls, device: Device, s: MoeSizes) -> MoeScratch:
        """Buffers for one layer of ``s``."""
        pairs, m = s.rows * s.top_k, s.rows

        def buf(count: int, name: str) -> Buffer:
            return device.buffer(4 * count, label=f"moe.{name}")

        return cls(
            lists=buf(s.experts * m, "lists"),
            counts=buf(s.experts, "counts"),
            dlogits=buf(m * s.experts, "dlogits"),
            pair_da=buf(pairs * s.inner, "pair_da"),
            pair_db=buf(pairs * s.inner, "pair_db"),
            dys=buf(m * s.dim, "dys"),
            dpre=buf(m, "dpre"),
            shared_dh=buf(m * s.shared, "shared_dh"),
            shared_dact=buf(m * s.shared, "shared_dact"),
            shared_da=buf(m * s.shared, "shared_da"),
            shared_db=buf(m * s.shared, "shared_db"),
        )


class Moe:
    """Records the cortex's dispatches on one device.

    Args:
        device: The GPU device.
        matmul: The Matmul launcher for the shared expert and the router's matmuls (one is
            made when None).
        workgroup_size: Override for ``WG`` (any value 1..256).
    """

    def __init__(
        self, device: Device, matmul: Matmul | None = None, workgroup_size: int = WORKGROUP_SIZE
    ) -> None:
        self.device = device
        self.matmul = matmul if matmul is not None else Matmul(device)
        self.elementwise = Elementwise(device)
        self.workgroup_size = workgroup_size

    def _record(
        self,
        entry: str,
        n: int,
        bindings: dict[int, Buffer],
        s: MoeSizes,
        base: int = 0,
        accumulate: bool = False,
        coef: float = 0.0,
    ) -> Dispatch:
        params = self.device.uniform(
            pack_params(
                ("u32", s.rows),
                ("u32", s.dim),
                ("u32", s.experts),
                ("u32", s.inner),
                ("u32", s.top_k),
                ("u32", base),
                ("u32", s.layers),
                ("u32", int(accumulate)),
                ("f32", coef),
            ),
            label=f"moe.{entry}.params",
        )
        wg = 1 if entry == "aux_loss" else self.workgroup_size
        kernel = self.device.kernel(SHADER, entry, {} if wg == 1 else {"WG": wg})
        return self.device.dispatch(
            kernel, {**bindings, _PARAMS: params}, grid_1d(n, wg), label=f"moe.{entry}"
        )

    def _check_layer(self, s: MoeSizes, layer: int, op: str) -> None:
        s.check()
        if not 0 <= layer < s.layers:
            raise ShapeError(f"{op}: layer {layer} is outside the {s.layers} stacked layers")

    def _check_weights(self, w: MoeWeightBuffers, s: MoeSizes, op: str) -> None:
        for name, count in weight_counts(s).items():
            need_f32(op, name, getattr(w, name), count)

    def forward(
        self,
        x: Buffer,
        w: MoeWeightBuffers,
        act: MoeActivations,
        routing: MoeRouting,
        y: Buffer,
        s: MoeSizes,
        layer: int = 0,
    ) -> list[Dispatch]:
        """One layer's forward: ``y = sum_j gate_j expert_{idx_j}(x) + sigmoid(x.w_sg) shared(x)``.

        Args:
            x: (M, D) f32 normed rows.
            w: The layer's weights.
            act: The layer's intermediates (written; the backward reads them).
            routing: Every layer's router outputs; rows ``layer * M ..`` are written.
            y: (M, D) f32 output (overwritten).
            s: The sizes.
            layer: Which of ``s.layers`` stacked layers this is.

        Returns:
            The dispatches to submit, in order.

        Raises:
            ShapeError: A size is out of range or a buffer is too small.
        """
        op = "moe.forward"
        self._check_layer(s, layer, op)
        self._check_weights(w, s, op)
        need_f32(op, "x", x, s.rows * s.dim)
        need_f32(op, "y", y, s.rows * s.dim)
        m, d, k, f, sh = s.rows, s.dim, s.top_k, s.inner, s.shared
        base = layer * m
        mm, ew = self.matmul, self.elementwise
        return [
            self._record(
                "route",
                m,
                {_X: x, _ROUTER: w.router, _PROBS: routing.probs, _IDX: routing.idx},
                s,
                base,
            ),
            self._record(
                "expert_hidden",
                m * k * _tiles(f),
                {
                    _X: x,
                    _GATE_PROJ: w.gate_proj,
                    _UP_PROJ: w.up_proj,
                    _IDX: routing.idx,
                    _PAIR_A: act.pair_a,
                    _PAIR_B: act.pair_b,
                    _PAIR_H: act.pair_h,
                },
                s,
                base,
            ),
            self._record(
                "expert_out",
                m * k * _tiles(d),
                {
                    _DOWN_PROJ: w.down_proj,
                    _IDX: routing.idx,
                    _PAIR_H: act.pair_h,
                    _PAIR_OUT: act.pair_out,
                },
                s,
                base,
            ),
            mm.linear(x, w.shared_gate, act.shared_a, m, d, sh),
            mm.linear(x, w.shared_up, act.shared_b, m, d, sh),
            ew.silu_fwd(act.shared_a, act.shared_act, m * sh),
            ew.mul(act.shared_act, act.shared_b, act.shared_h, m * sh),
            mm.linear(act.shared_h, w.shared_down, act.shared_out, m, sh, d),
            mm.linear(x, w.shared_expert_gate, act.pre, m, d, 1),
            self._record(
                "combine",
                m * d,
                {
                    _PROBS: routing.probs,
                    _IDX: routing.idx,
                    _PAIR_OUT: act.pair_out,
                    _SHARED: act.shared_out,
                    _PRE: act.pre,
                    _Y: y,
                },
                s,
                base,
            ),
        ]

    def aux(self, routing: MoeRouting, s: MoeSizes, coef: float) -> list[Dispatch]:
        """The load-balancing loss over every stacked layer, after all their forwards.

        Writes ``routing.stats`` (per layer and expert: assignments, probability mass) and
        ``routing.aux_out`` = [aux, coef * E * f_e / R ...], which :meth:`backward` adds to
        the probabilities' gradient (coef 0: no aux gradient, the value still computed).

        Raises:
            ShapeError: A size is out of range.
        """
        s.check()
        bindings = {_PROBS: routing.probs, _IDX: routing.idx, _STATS: routing.stats}
        return [
            self._record("aux_stats", s.layers * s.experts, bindings, s),
            self._record(
                "aux_loss", 1, {_STATS: routing.stats, _AUX_OUT: routing.aux_out}, s, coef=coef
            ),
        ]

    def backward(
        self,
        dy: Buffer,
        x: Buffer,
        w: MoeWeightBuffers,
        grads: MoeWeightBuffers,
        act: MoeActivations,
        routing: MoeRouting,
        scratch: MoeScratch,
        dx: Buffer,
        s: MoeSizes,
        layer: int = 0,
        accumulate: bool = False,
    ) -> list[Dispatch]:
        """One layer's backward, after :meth:`forward` and :meth:`aux`.

        Args:
            dy: (M, D) d loss / d y.
            x: The forward's (M, D) input.
            w: The forward's weights.
            grads: The weights' gradients: overwritten, or added to when ``accumulate``.
            act: The forward's intermediates.
            routing: The router outputs and ``aux_out`` (its d probs term).
            scratch: Backward scratch.
            dx: (M, D) d loss / d x (overwritten).
            s: The sizes.
            layer: The forward's layer.
            accumulate: Add the weight gradients into ``grads`` (gradient accumulation).

        Returns:
            The dispatches to submit, in order.

        Raises:
            ShapeError: A size is out of range or a buffer is too small.
        """
        op = "moe.backward"
        self._check_layer(s, layer, op)
        self._check_weights(w, s, op)
        self._check_weights(grads, s, op)
        for name, buf in (("dy", dy), ("x", x), ("dx", dx)):
            need_f32(op, name, buf, s.rows * s.dim)
        m, d, k, f, sh, e = s.rows, s.dim, s.top_k, s.inner, s.shared, s.experts
        base = layer * m
        mm, ew = self.matmul, self.elementwise
        sc = scratch
        tiles = _tiles(f) * _tiles(d)  # the weight-gradient entries' TILE x TILE blocks
        routed = [
            self._record(
                "build_lists",
                e,
                {_IDX: routing.idx, _LISTS: sc.lists, _COUNTS: sc.counts},
                s,
                base,
            ),
            self._record(
                "router_bwd",
                m,
                {
                    _DY: dy,
                    _PROBS: routing.probs,
                    _IDX: routing.idx,
                    _PAIR_OUT: act.pair_out,
                    _AUX_OUT: routing.aux_out,
                    _DLOGITS: sc.dlogits,
                },
                s,
                base,
            ),
            self._record(
                "expert_hidden_bwd",
                m * k * _tiles(f),
                {
                    _DY: dy,
                    _DOWN_PROJ: w.down_proj,
                    _PROBS: routing.probs,
                    _IDX: routing.idx,
                    _PAIR_A: act.pair_a,
                    _PAIR_B: act.pair_b,
                    _PAIR_DA: sc.pair_da,
                    _PAIR_DB: sc.pair_db,
                },
                s,
                base,
            ),
            self._record(
                "expert_dx",
                m * _tiles(d),
                {
                    _GATE_PROJ: w.gate_proj,
                    _UP_PROJ: w.up_proj,
                    _IDX: routing.idx,
                    _PAIR_DA: sc.pair_da,
                    _PAIR_DB: sc.pair_db,
                    _Y: dx,
                },
                s,
                base,
            ),
            self._record(
                "expert_dgate_up",
                e * tiles,
                {
                    _X: x,
                    _LISTS: sc.lists,
                    _COUNTS: sc.counts,
                    _PAIR_DA: sc.pair_da,
                    _PAIR_DB: sc.pair_db,
                    _DW1: grads.gate_proj,
                    _DW2: grads.up_proj,
                },
                s,
                base,
                accumulate,
            ),
            self._record(
                "expert_ddown",
                e * tiles,
                {
                    _DY: dy,
                    _PROBS: routing.probs,
                    _IDX: routing.idx,
                    _LISTS: sc.lists,
                    _COUNTS: sc.counts,
                    _PAIR_H: act.pair_h,
                    _DW1: grads.down_proj,
                },
                s,
                base,
                accumulate,
            ),
            mm.linear_bwd_input(sc.dlogits, w.router, dx, m, d, e, accumulate=True),
            mm.linear_bwd_weight(sc.dlogits, x, grads.router, m, d, e, accumulate=accumulate),
        ]
        shared = [
            self._record(
                "shared_gate_bwd",
                m,
                {_DY: dy, _SHARED: act.shared_out, _PRE: act.pre, _Y: sc.dys, _DPRE: sc.dpre},
                s,
                base,
            ),
            mm.linear_bwd_weight(
                sc.dys, act.shared_h, grads.shared_down, m, sh, d, accumulate=accumulate
            ),
            mm.linear_bwd_input(sc.dys, w.shared_down, sc.shared_dh, m, sh, d),
            ew.mul_bwd(
                act.shared_act, act.shared_b, sc.shared_dh, sc.shared_dact, sc.shared_db, m * sh
            ),
            ew.silu_bwd(act.shared_a, sc.shared_dact, sc.shared_da, m * sh),
            mm.linear_bwd_weight(sc.shared_da, x, grads.shared_gate, m, d, sh, accumulate),
            mm.linear_bwd_weight(sc.shared_db, x, grads.shared_up, m, d, sh, accumulate),
            mm.linear_bwd_input(sc.shared_da, w.shared_gate, dx, m, d, sh, accumulate=True),
            mm.linear_bwd_input(sc.shared_db, w.shared_up, dx, m, d, sh, accumulate=True),
            mm.linear_bwd_weight(sc.dpre, x, grads.shared_expert_gate, m, d, 1, accumulate),
            mm.linear_bwd_input(sc.dpre, w.shared_expert_gate, dx, m, d, 1, accumulate=True),
        ]
        return routed + shared
