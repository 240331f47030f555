"""ssd.wgsl (the Mamba-2 chunked SSD scan) against its numpy reference on wgpu-py (lavapipe)."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ShapeError
from evermind.kernels.ssd import SSD, chunk_states_count
from evermind.ops import ssd as ref
from tests.conftest import read_f32
from tests.numerics import assert_close

# The fp32 scan tolerances of mamba's tests (as test_selective_scan.py): the kernel sums in
# float32 in another order than the float64 reference, over up to L*N terms per output.
ATOL, RTOL = 2e-3, 6e-4

# (B, L, H, P, G, N, Q): L never a multiple of the chunk Q (one L shorter than Q, one a single
# step), one head, n_groups > 1, batch 3, a lane count (B*H*P) past one 64-wide workgroup, and
# the nano model's head size over long chunks.
SHAPES = [
    (1, 1, 1, 1, 1, 1, 4),
    (3, 13, 1, 5, 1, 4, 4),
    (2, 21, 4, 3, 2, 7, 8),
    (1, 6, 2, 2, 2, 3, 16),
    (2, 37, 6, 11, 3, 16, 5),
    (1, 130, 2, 64, 1, 16, 256),  # the nano head (P 64, N 16) in one long, partial chunk
    (1, 200, 2, 64, 2, 16, 64),  # ... and across chunks of 64
]
NAMES = ("x", "dt_raw", "A_log", "B", "C", "D", "dt_bias")
GRAD_NAMES = ("dx", "ddt_raw", "dA_log", "dB", "dC", "dD", "ddt_bias")


def _ids(shapes: list[tuple[int, ...]]) -> list[str]:
    return [f"B{b}L{t}H{h}P{p}G{g}N{n}Q{q}" for b, t, h, p, g, n, q in shapes]


def _inputs(shape: tuple[int, ...], seed: int) -> dict[str, np.ndarray]:
    """Random inputs in Mamba-2's ranges: dt = softplus(raw + bias) ~ [0.002, 2], A in [-16, -1]."""
    batch, length, heads, head_dim, groups, n, _ = shape
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return {
        "x": rng.standard_normal((batch, length, heads, head_dim)).astype(f32),
        "dt_raw": rng.uniform(-4.0, 1.0, (batch, length, heads)).astype(f32),
        "A_log": np.log(rng.uniform(1.0, 16.0, heads)).astype(f32),
        "B": rng.standard_normal((batch, length, groups, n)).astype(f32),
        "C": rng.standard_normal((batch, length, groups, n)).astype(f32),
        "D": rng.standard_normal(heads).astype(f32),
        "dt_bias": rng.uniform(-2.0, 0.5, heads).astype(f32),
        "dy": rng.standard_normal((batch, length, heads, head_dim)).astype(f32),
    }


def _run(device, inp, shape, dt_limit=ref.DT_LIMIT_NONE, backward=False):
    batch, length, heads, head_dim, groups, n, chunk = shape
    sizes = (batch, length, heads, head_dim, groups, n)
    bufs = [device.upload(inp[k], label=k) for k in NAMES]
    y = device.buffer(inp["x"].nbytes, label="y")
    dt = device.buffer(4 * batch * length * heads, label="dt")
    count = chunk_states_count(batch, length, heads, head_dim, n, chunk)
    chunk_states = device.buffer(4 * count, label="chunk_states")
    scan = SSD(device)
    dispatches = scan.forward(*bufs, y, dt, chunk_states, sizes, chunk, dt_limit)
    shapes = [inp[k].shape for k in NAMES]
    # Gradients start as garbage (not zeros): the backward must overwrite, not accumulate.
    grads = [
        device.upload(np.full(s, 7.0, np.float32), label=g)
        for s, g in zip(shapes, GRAD_NAMES, strict=True)
    ]
    if backward:
        dy = device.upload(inp["dy"], label="dy")
        dispatches += scan.backward(dy, *bufs, dt, chunk_states, *grads, sizes, chunk, dt_limit)
    device.submit(dispatches)
    got_y = read_f32(device, y, inp["x"].size).reshape(inp["x"].shape)
    got_states = read_f32(device, chunk_states, count).reshape(batch, -1, heads, head_dim, n)
    got_grads = [
        read_f32(device, g, int(np.prod(s))).reshape(s) for g, s in zip(grads, shapes, strict=True)
    ]
    return got_y, got_states, got_grads


@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_forward_matches_reference(device, shape) -> None:
    inp = _inputs(shape, seed=sum(shape))
    args = [inp[k] for k in NAMES]
    want_y, want_states = ref.ssd_fwd(*args, chunk_size=shape[-1])
    loop_y, _ = ref.ssd_scan_sequential(*args)
    y, states, _ = _run(device, inp, shape)
    assert_close(y, want_y, atol=ATOL, rtol=RTOL, name=f"y {shape}")
    assert_close(y, loop_y, atol=ATOL, rtol=RTOL, name=f"y vs the loop {shape}")
    assert_close(states, want_states, atol=ATOL, rtol=RTOL, name=f"chunk states {shape}")


@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_backward_matches_reference(device, shape) -> None:
    inp = _inputs(shape, seed=1000 + sum(shape))
    want = ref.ssd_bwd(inp["dy"], *(inp[k] for k in NAMES))
    _, _, got = _run(device, inp, shape, backward=True)
    for name, g, w in zip(GRAD_NAMES, got, want, strict=True):
        assert_close(g, w, atol=ATOL, rtol=RTOL, name=f"{name} {shape}")


def test_dt_limit_clamps_forward_and_backward(device) -> None:
    """A clamp that binds on both sides: its gradient is zero where dt was clamped."""
    shape = (2, 19, 4, 3, 2, 5, 6)
    inp = _inputs(shape, seed=11)
    limit = (0.05, 0.6)
    args = [inp[k] for k in NAMES]
    dt = ref.ssd_dt(inp["dt_raw"], inp["dt_bias"], limit)
    assert (dt == limit[0]).any() and (dt == limit[1]).any(), "the clamp must bind both ways"
    want_y, _ = ref.ssd_fwd(*args, chunk_size=shape[-1], dt_limit=limit)
    want = ref.ssd_bwd(inp["dy"], *args, dt_limit=limit)
    y, _, got = _run(device, inp, shape, dt_limit=limit, backward=True)
    assert_close(y, want_y, atol=ATOL, rtol=RTOL, name="y clamped")
    for name, g, w in zip(GRAD_NAMES, got, want, strict=True):
        assert_close(g, w, atol=ATOL, rtol=RTOL, name=f"{name} clamped")


def test_extreme_inputs(device) -> None:
    """dt_raw at +-30 and around softplus's threshold; A = -16 (decay underflows) and ~-0.02."""
    shape = (2, 23, 4, 3, 2, 8, 7)
    inp = _inputs(shape, seed=5)
    rng = np.random.default_rng(6)
    extremes = np.array([30.0, -30.0, 20.5, 19.5, 20.0, -20.0, 5.0, -9.0], np.float32)
    inp["dt_raw"] = rng.choice(extremes, size=inp["dt_raw"].shape).astype(np.float32)
    inp["dt_bias"][:] = 0.0
    inp["A_log"][:2] = np.float32(np.log(16.0))
    inp["A_log"][2:] = np.float32(-4.0)
    args = [inp[k] for k in NAMES]
    want_y, _ = ref.ssd_fwd(*args, chunk_size=shape[-1])
    want = ref.ssd_bwd(inp["dy"], *args)
    y, states, got = _run(device, inp, shape, backward=True)
    assert np.isfinite(y).all() and np.isfinite(states).all(), "forward produced non-finite values"
    assert_close(y, want_y, atol=ATOL, rtol=RTOL, name="y extremes")
    for name, g, w in zip(GRAD_NAMES, got, want, strict=True):
        assert_close(g, w, atol=ATOL, rtol=RTOL, name=f"{name} extremes")


@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1), (3, 4, 5, 2, 7), (2, 6, 11, 3, 16)])
def test_decode_steps_match_the_reference_step(device, shape) -> None:
    """Three decoding steps from a non-zero state, the state updated in place each time."""
    batch, heads, head_dim, groups, n = shape
    rng = np.random.default_rng(sum(shape))
    f32 = np.float32
    state = rng.standard_normal((batch, heads, head_dim, n)).astype(f32)
    per_head = {
        "A_log": np.log(rng.uniform(1.0, 16.0, heads)).astype(f32),
        "D": rng.standard_normal(heads).astype(f32),
        "dt_bias": rng.uniform(-2.0, 0.5, heads).astype(f32),
    }
    gpu_state = device.upload(state, label="state")
    scan = SSD(device)
    want_state = state
    for step in range(3):
        x = rng.standard_normal((batch, heads, head_dim)).astype(f32)
        dt_raw = rng.uniform(-4.0, 1.0, (batch, heads)).astype(f32)
        B_t, C_t = (rng.standard_normal((batch, groups, n)).astype(f32) for _ in range(2))
        want_y, want_state = ref.ssd_decode_step(
            want_state, x, dt_raw, per_head["A_log"], B_t, C_t, per_head["D"],
            per_head["dt_bias"], compute=np.float32,
        )  # fmt: skip
        bufs = [device.upload(a) for a in (x, dt_raw, per_head["A_log"], B_t, C_t)]
        bufs += [device.upload(per_head[k]) for k in ("D", "dt_bias")]
        y = device.buffer(x.nbytes, label="y")
        device.submit(scan.decode_step(gpu_state, *bufs, y, shape))
        got_y = read_f32(device, y, x.size).reshape(x.shape)
        got_state = read_f32(device, gpu_state, state.size).reshape(state.shape)
        assert_close(got_y, want_y, atol=ATOL, rtol=RTOL, name=f"y step {step} {shape}")
        assert_close(got_state, want_state, atol=ATOL, rtol=RTOL, name=f"state {step} {shape}")


def test_bad_sizes_are_refused(device) -> None:
    scan = SSD(device)
    small = device.buffer(4, label="small")
    bufs = [small] * 10
    with pytest.raises(ShapeError, match="groups"):
        scan.forward(*bufs, (1, 4, 3, 2, 2, 4), 4)
    with pytest.raises(ShapeError, match="d_state"):
        scan.forward(*bufs, (1, 4, 2, 2, 1, 129), 4)
    with pytest.raises(ShapeError, match="head_dim must be <= 128"):
        scan.forward(*bufs, (1, 4, 2, 129, 1, 4), 4)
    with pytest.raises(ShapeError, match="chunk_size"):
        scan.forward(*bufs, (1, 4, 2, 2, 1, 4), 0)
    with pytest.raises(ShapeError, match="holds 1 f32"):
        scan.forward(*bufs, (1, 4, 2, 2, 1, 4), 4)


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.ssd:SSD"
    shape = (2, 11, 2, 3, 2, 4, 4)
    batch, length, heads, head_dim, groups, n, chunk = shape
    sizes = [batch, length, heads, head_dim, groups, n]
    inp = _inputs(shape, seed=42)
    args = [{"buf": k} for k in NAMES]
    y, chunk_states = ref.ssd_fwd(*(inp[k] for k in NAMES), chunk_size=chunk)
    work = {
        "y": np.zeros_like(inp["x"]),
        "dt": np.zeros(inp["dt_raw"].shape, np.float32),
        "chunk_states": np.zeros(chunk_states.shape, np.float32),
    }
    forward = KernelCase(
        "ssd.forward",
        launcher,
        "forward",
        [*args, {"buf": "y"}, {"buf": "dt"}, {"buf": "chunk_states"}, sizes, chunk],
        {**{k: inp[k] for k in NAMES}, **work},
        {"y": y, "chunk_states": chunk_states},
        ATOL,
        RTOL,
    )
    # The backward reads the forward's dt and chunk states: give it the reference's.
    grads = ref.ssd_bwd(inp["dy"], *(inp[k] for k in NAMES))
    saved = {
        "dt": ref.ssd_dt(inp["dt_raw"], inp["dt_bias"], ref.DT_LIMIT_NONE).astype(np.float32),
        "chunk_states": chunk_states,
    }
    outs = {
        g: np.full(inp[k].shape, 7.0, np.float32) for g, k in zip(GRAD_NAMES, NAMES, strict=True)
    }
    backward = KernelCase(
        "ssd.backward",
        launcher,
        "backward",
        [
            {"buf": "dy"},
            *args,
            {"buf": "dt"},
            {"buf": "chunk_states"},
            *({"buf": g} for g in GRAD_NAMES),
            sizes,
            chunk,
        ],
        {**{k: inp[k] for k in (*NAMES, "dy")}, **saved, **outs},
        dict(zip(GRAD_NAMES, grads, strict=True)),
        ATOL,
        RTOL,
    )
    return [forward, backward]
