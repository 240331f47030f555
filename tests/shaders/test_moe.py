"""moe.wgsl (the cortex's routed experts, router and aux loss) against ops.moe on wgpu-py."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from evermind.errors import ShapeError
from evermind.kernels.moe import (
    Moe,
    MoeActivations,
    MoeRouting,
    MoeScratch,
    MoeSizes,
    MoeWeightBuffers,
)
from evermind.ops import moe as ref
from tests.conftest import read_f32
from tests.numerics import assert_close

# float32 sums (over D, F or an expert's M rows, at most ~70 terms of O(1) values) in another
# order than the float64 reference, and f32 exp in the softmax and sigmoid: the largest
# difference measured on lavapipe is 3e-6 (a weight gradient); 2e-5 / 1e-4 leaves room for
# another adapter's exp.
ATOL, RTOL = 2e-5, 1e-4
#: The smallest gap between the k-th and (k+1)-th probability the inputs must keep: top-k is
#: discontinuous, and f32 routing must pick what the float64 reference picks.
MARGIN = 1e-4
FIELDS = (
    "router",
    "gate_proj",
    "up_proj",
    "down_proj",
    "shared_gate",
    "shared_up",
    "shared_down",
    "shared_expert_gate",
)

# (M, D, E, F, S, k): one row; E == k (every expert on every row); k = 1; M past one 64-wide
# workgroup and not a multiple of it; primes elsewhere.
SHAPES = [
    (1, 8, 4, 6, 5, 2),
    (7, 5, 3, 4, 3, 3),
    (13, 9, 5, 7, 6, 1),
    (67, 12, 6, 10, 8, 2),
]


def _ids(shapes: list[tuple[int, ...]]) -> list[str]:
    return [f"M{m}D{d}E{e}F{f}S{s}k{k}" for m, d, e, f, s, k in shapes]


def _weights(shape: tuple[int, ...], seed: int) -> ref.MoeWeights:
    _, d, e, f, s, _ = shape
    rng = np.random.default_rng(seed)

    def w(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims) / np.sqrt(dims[-1])).astype(np.float32)

    # The router at a scale that spreads the probabilities (keeps ranks apart).
    router = (2.0 * rng.standard_normal((e, d)) / np.sqrt(d)).astype(np.float32)
    return ref.MoeWeights(
        router=router,
        gate_proj=w(e, f, d),
        up_proj=w(e, f, d),
        down_proj=w(e, d, f),
        shared_gate=w(s, d),
        shared_up=w(s, d),
        shared_down=w(d, s),
        shared_expert_gate=w(1, d),
    )


def _rows(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((shape[0], shape[1])).astype(np.float32)


def _check_margin(x: np.ndarray, w: ref.MoeWeights, k: int) -> None:
    probs, _, _ = ref.moe_route(x.astype(np.float64), w.router.astype(np.float64), k)
    if k == probs.shape[1]:
        return
    ordered = -np.sort(-probs, axis=1)
    gap = float((ordered[:, k - 1] - ordered[:, k]).min())
    assert gap > MARGIN, f"test inputs too close to a top-k tie: gap {gap:.2e}; change the seed"


class _Layers:
    """The GPU buffers of ``layers`` cortex layers of one shape, and how to run them."""

    def __init__(self, device, shape, weights: list[ref.MoeWeights]) -> None:
        m, d, e, f, s, k = shape
        self.device = device
        self.sizes = MoeSizes(m, d, e, f, s, k, layers=len(weights))
        self.moe = Moe(device)
        self.weights = [
            MoeWeightBuffers(**{n: device.upload(getattr(w, n), label=n) for n in FIELDS})
            for w in weights
        ]
        self.acts = [MoeActivations.allocate(device, self.sizes) for _ in weights]
        self.routing = MoeRouting.allocate(device, self.sizes)
        self.scratch = MoeScratch.allocate(device, self.sizes)

    def grads(self, fill: list[ref.MoeWeights] | None, layer: int) -> MoeWeightBuffers:
        """Gradient buffers holding ``fill[layer]`` (or garbage 7.0: the backward overwrites)."""
        w = self.weights[layer]
        bufs = {}
        for n in FIELDS:
            nbytes = getattr(w, n).nbytes
            init = (
                np.full(nbytes // 4, 7.0, np.float32)
                if fill is None
                else getattr(fill[layer], n).reshape(-1)
            )
            bufs[n] = self.device.upload(init, label=f"d{n}")
        return MoeWeightBuffers(**bufs)

    def read(self, buf, shape) -> np.ndarray:
        return read_f32(self.device, buf, int(np.prod(shape))).reshape(shape)

    def read_idx(self) -> np.ndarray:
        r, k = self.sizes.layers * self.sizes.rows, self.sizes.top_k
        data = asyncio.run(self.device.read(self.routing.idx, 4 * r * k))
        return np.frombuffer(data, dtype=np.uint32).reshape(r, k).astype(np.int64)


def _run(device, shape, xs, ws, dys=None, coef=0.0, accumulate_from=None):
    """Forward every layer, the aux loss, then (with dys) every layer's backward."""
    run = _Layers(device, shape, ws)
    s = run.sizes
    x_bufs = [device.upload(x, label="x") for x in xs]
    y_bufs = [device.buffer(x.nbytes, label="y") for x in xs]
    dispatches = []
    for layer in range(s.layers):
        dispatches += run.moe.forward(
            x_bufs[layer], run.weights[layer], run.acts[layer], run.routing, y_bufs[layer], s, layer
        )
    dispatches += run.moe.aux(run.routing, s, coef)
    grads, dx_bufs = [], []
    if dys is not None:
        for layer in range(s.layers):
            g = run.grads(accumulate_from, layer)
            dx = device.upload(np.full(xs[layer].size, 7.0, np.float32), label="dx")
            dispatches += run.moe.backward(
                device.upload(dys[layer], label="dy"),
                x_bufs[layer],
                run.weights[layer],
                g,
                run.acts[layer],
                run.routing,
                run.scratch,
                dx,
                s,
                layer,
                accumulate=accumulate_from is not None,
            )
            # The scratch is shared: submit each layer's backward before the next reuses it.
            device.submit(dispatches)
            dispatches = []
            grads.append(
                ref.MoeWeights(
                    **{n: run.read(getattr(g, n), getattr(ws[layer], n).shape) for n in FIELDS}
                )
            )
            dx_bufs.append(run.read(dx, xs[layer].shape))
    device.submit(dispatches)
    m, d, e = s.rows, s.dim, s.experts
    ys = [run.read(y, (m, d)) for y in y_bufs]
    probs = run.read(run.routing.probs, (s.layers * m, e))
    aux_out = run.read(run.routing.aux_out, (1 + e,))
    stats = run.read(run.routing.stats, (s.layers, e, 2))
    return ys, probs, run.read_idx(), aux_out, stats, dx_bufs, grads


@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_forward_matches_reference(device, shape) -> None:
    x, w = _rows(shape, sum(shape)), _weights(shape, 1 + sum(shape))
    k = shape[-1]
    _check_margin(x, w, k)
    want_y, want_probs, want_idx = ref.moe_fwd(x.astype(np.float64), w, k)
    ys, probs, idx, aux_out, stats, _, _ = _run(device, shape, [x], [w])
    np.testing.assert_array_equal(idx, want_idx, err_msg="top-k experts")
    assert_close(probs, want_probs, atol=ATOL, rtol=RTOL, name=f"probs {shape}")
    assert_close(ys[0], want_y, atol=ATOL, rtol=RTOL, name=f"y {shape}")
    want_aux = ref.load_balance_loss(want_probs, want_idx)
    assert_close(aux_out[0], want_aux, atol=ATOL, rtol=RTOL, name="aux")
    counts = np.bincount(want_idx.reshape(-1), minlength=shape[2])
    np.testing.assert_array_equal(stats[0, :, 0], counts, err_msg="assignment counts")
    assert_close(stats[0, :, 1], want_probs.sum(axis=0), atol=ATOL, rtol=RTOL, name="mass")


@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_backward_matches_reference(device, shape) -> None:
    """dx and every gradient, with the aux loss's d probs term at coefficient 0.3."""
    x, w = _rows(shape, 2 + sum(shape)), _weights(shape, 3 + sum(shape))
    dy = np.random.default_rng(4).standard_normal(x.shape).astype(np.float32)
    k, coef = shape[-1], 0.3
    _check_margin(x, w, k)
    _, probs, idx = ref.moe_fwd(x.astype(np.float64), w, k)
    dprobs = coef * ref.load_balance_bwd(probs, idx)
    want_dx, want = ref.moe_bwd(dy.astype(np.float64), x.astype(np.float64), w, k, dprobs)
    _, _, _, aux_out, _, dxs, grads = _run(device, shape, [x], [w], [dy], coef=coef)
    assert_close(aux_out[1:], dprobs[0], atol=1e-7, rtol=1e-5, name="aux d probs")
    assert_close(dxs[0], want_dx, atol=ATOL, rtol=RTOL, name=f"dx {shape}")
    for n in FIELDS:
        assert_close(getattr(grads[0], n), getattr(want, n), atol=ATOL, rtol=RTOL, name=n)


def test_an_expert_no_row_picks_gets_zero_gradients(device) -> None:
    """Expert 2's router row pushes it last on every row: its gradients are exactly zero."""
    shape = (11, 6, 4, 5, 3, 2)
    x, w = _rows(shape, 21), _weights(shape, 22)
    x[:, 0] = 3.0 + np.abs(x[:, 0])  # a positive feature ...
    w.router[2, :] = 0.0
    w.router[2, 0] = -4.0  # ... that expert 2 hates
    dy = np.random.default_rng(23).standard_normal(x.shape).astype(np.float32)
    _check_margin(x, w, 2)
    _, _, idx = ref.moe_fwd(x.astype(np.float64), w, 2)
    assert not (idx == 2).any(), "expert 2 must be unused for this test"
    want_dx, want = ref.moe_bwd(dy.astype(np.float64), x.astype(np.float64), w, 2)
    _, _, got_idx, _, stats, dxs, grads = _run(device, shape, [x], [w], [dy])
    np.testing.assert_array_equal(got_idx, idx)
    assert stats[0, 2, 0] == 0.0
    for n in ("gate_proj", "up_proj", "down_proj"):
        assert not getattr(grads[0], n)[2].any(), f"{n}[2] must be zero, not left as garbage"
        assert_close(getattr(grads[0], n), getattr(want, n), atol=ATOL, rtol=RTOL, name=n)
    assert_close(dxs[0], want_dx, atol=ATOL, rtol=RTOL, name="dx")


def test_two_layers_pool_the_aux_loss_and_accumulate(device) -> None:
    """Two stacked layers: HF's pooled aux over both, each layer's d probs from the pool, and
    gradients added to what the buffers held (gradient accumulation)."""
    shape = (9, 7, 5, 4, 6, 2)
    xs = [_rows(shape, 31), _rows(shape, 32)]
    ws = [_weights(shape, 33), _weights(shape, 34)]
    dys = [
        np.random.default_rng(35 + i).standard_normal(xs[0].shape).astype(np.float32)
        for i in range(2)
    ]
    before = [_weights(shape, 40), _weights(shape, 41)]
    coef = 0.05
    fwd = [ref.moe_fwd(x.astype(np.float64), w, 2) for x, w in zip(xs, ws, strict=True)]
    for x, w in zip(xs, ws, strict=True):
        _check_margin(x, w, 2)
    probs = np.concatenate([f[1] for f in fwd])
    idx = np.concatenate([f[2] for f in fwd])
    dprobs = coef * ref.load_balance_bwd(probs, idx)
    _, got_probs, got_idx, aux_out, stats, dxs, grads = _run(
        device, shape, xs, ws, dys, coef=coef, accumulate_from=before
    )
    np.testing.assert_array_equal(got_idx, idx)
    assert_close(got_probs, probs, atol=ATOL, rtol=RTOL, name="stacked probs")
    assert_close(aux_out[0], ref.load_balance_loss(probs, idx), atol=ATOL, rtol=RTOL, name="aux")
    assert stats.shape == (2, 5, 2) and (stats[:, :, 0].sum(axis=1) == 2 * shape[0]).all()
    for layer in range(2):
        rows = slice(layer * shape[0], (layer + 1) * shape[0])
        want_dx, want = ref.moe_bwd(
            dys[layer].astype(np.float64),
            xs[layer].astype(np.float64),
            ws[layer],
            2,
            dprobs[rows],
        )
        assert_close(dxs[layer], want_dx, atol=ATOL, rtol=RTOL, name=f"dx layer {layer}")
        for n in FIELDS:
            total = getattr(before[layer], n) + getattr(want, n)
            assert_close(getattr(grads[layer], n), total, atol=ATOL, rtol=RTOL, name=n)


def test_extreme_router_logits(device) -> None:
    """Router logits of +-60: the softmax saturates without overflow, probabilities stay finite."""
    shape = (5, 4, 3, 3, 2, 1)
    x, w = _rows(shape, 51), _weights(shape, 52)
    w.router[:] = (30.0 * np.sign(w.router)).astype(np.float32)
    want_y, want_probs, want_idx = ref.moe_fwd(x.astype(np.float64), w, 1)
    ys, probs, idx, _, _, _, _ = _run(device, shape, [x], [w])
    assert np.isfinite(probs).all() and np.isfinite(ys[0]).all()
    np.testing.assert_array_equal(idx, want_idx)
    assert_close(probs, want_probs, atol=ATOL, rtol=RTOL, name="saturated probs")
    assert_close(ys[0], want_y, atol=ATOL, rtol=RTOL, name="y saturated")


def test_refuses_bad_sizes(device) -> None:
    with pytest.raises(ShapeError, match="top_k"):
        MoeSizes(4, 3, 2, 3, 3, 3).check()
    with pytest.raises(ShapeError, match="rows"):
        MoeSizes(0, 3, 2, 3, 3, 1).check()
    shape = (3, 4, 3, 2, 2, 1)
    run = _Layers(device, shape, [_weights(shape, 1)])
    small = device.buffer(4, label="small")
    with pytest.raises(ShapeError, match="x"):
        run.moe.forward(small, run.weights[0], run.acts[0], run.routing, small, run.sizes)
    with pytest.raises(ShapeError, match="layer 1"):
        run.moe.forward(small, run.weights[0], run.acts[0], run.routing, small, run.sizes, 1)
