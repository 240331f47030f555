"""selective_scan.wgsl against its numpy reference on wgpu-py (lavapipe in CI)."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ShapeError
from evermind.kernels.selective_scan import SelectiveScan, states_count
from evermind.ops import selective_scan as ref
from tests.conftest import read_f32
from tests.numerics import assert_close, finite_difference

# fp32 scan tolerances of mamba's own tests (tests/ops/test_selective_scan.py): the kernel sums
# in float32 in a different order than the float64 reference, over up to L*N terms per output.
ATOL, RTOL = 2e-3, 6e-4

# (B, L, D, N): every L in {1, 7, 63, 65, 257, 1024}, D in {1, 3, 67}, N in {1, 16} and B in
# {1, 2} appears, in mixed combinations (the workgroup is 64 channels, so D=67 with B=2 spills
# into a third workgroup, and L is never a multiple of anything).
SHAPES = [
    (1, 1, 1, 1),
    (2, 7, 3, 16),
    (1, 63, 67, 16),
    (2, 65, 67, 1),
    (2, 257, 3, 16),
    (1, 1024, 67, 16),
    (2, 1024, 1, 1),
]
NAMES = ("x", "delta_raw", "A_log", "B", "C", "D")
GRAD_NAMES = ("dx", "ddelta_raw", "dA_log", "dB", "dC", "dD")


def _inputs(batch: int, length: int, dim: int, n: int, seed: int) -> dict[str, np.ndarray]:
    """Random inputs in Mamba's ranges: delta = softplus(raw) in ~[0.007, 1.3], A in [-16, -1]."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return {
        "x": rng.standard_normal((batch, length, dim)).astype(f32),
        "delta_raw": rng.uniform(-5.0, 1.0, (batch, length, dim)).astype(f32),
        "A_log": np.log(rng.uniform(1.0, 16.0, (dim, n))).astype(f32),
        "B": rng.standard_normal((batch, length, n)).astype(f32),
        "C": rng.standard_normal((batch, length, n)).astype(f32),
        "D": rng.standard_normal(dim).astype(f32),
        "dy": rng.standard_normal((batch, length, dim)).astype(f32),
    }


def _forward(device, inp: dict[str, np.ndarray], store: bool = True):
    batch, length, dim = inp["x"].shape
    n = inp["A_log"].shape[1]
    bufs = [device.upload(inp[k], label=k) for k in NAMES]
    y = device.buffer(inp["x"].nbytes, label="y")
    states = device.buffer(4 * states_count(batch, length, dim, n), label="states")
    scan = SelectiveScan(device)
    device.submit([scan.forward(*bufs, y, batch, length, dim, n, states if store else None)])
    got_y = read_f32(device, y, inp["x"].size).reshape(inp["x"].shape)
    got_states = read_f32(device, states).reshape(batch, length, dim, n) if store else None
    return got_y, got_states


def _backward(device, inp: dict[str, np.ndarray]) -> list[np.ndarray]:
    batch, length, dim = inp["x"].shape
    n = inp["A_log"].shape[1]
    bufs = [device.upload(inp[k], label=k) for k in NAMES]
    y = device.buffer(inp["x"].nbytes, label="y")
    states = device.buffer(4 * states_count(batch, length, dim, n), label="states")
    shapes = [inp[k].shape for k in NAMES]
    # Outputs start as garbage (not zeros): the backward must overwrite, not accumulate.
    grads = [
        device.upload(np.full(s, 7.0, np.float32), label=g)
        for s, g in zip(shapes, GRAD_NAMES, strict=True)
    ]
    scan = SelectiveScan(device)
    fwd = scan.forward(*bufs, y, batch, length, dim, n, states)
    bwd = scan.backward(
        device.upload(inp["dy"], label="dy"), *bufs, states, *grads, batch, length, dim, n
    )
    device.submit([fwd, *bwd])
    return [
        read_f32(device, g, int(np.prod(s))).reshape(s) for g, s in zip(grads, shapes, strict=True)
    ]


def _check_grads(got: list[np.ndarray], want: tuple[np.ndarray, ...], label: str) -> None:
    for name, g, w in zip(GRAD_NAMES, got, want, strict=True):
        assert_close(g, w, atol=ATOL, rtol=RTOL, name=f"{name} {label}")


@pytest.mark.parametrize("shape", SHAPES, ids=[f"B{b}L{t}D{d}N{n}" for b, t, d, n in SHAPES])
def test_forward_matches_reference(device, shape) -> None:
    inp = _inputs(*shape, seed=sum(shape))
    want_y, want_states = ref.selective_scan_fwd(*(inp[k] for k in NAMES))
    y, states = _forward(device, inp)
    assert_close(y, want_y, atol=ATOL, rtol=RTOL, name=f"y {shape}")
    assert_close(states, want_states, atol=ATOL, rtol=RTOL, name=f"states {shape}")
    y_inference, _ = _forward(device, inp, store=False)
    assert np.array_equal(y_inference, y), "forward without stored states must give the same bits"


@pytest.mark.parametrize("shape", SHAPES, ids=[f"B{b}L{t}D{d}N{n}" for b, t, d, n in SHAPES])
def test_backward_matches_reference(device, shape) -> None:
    inp = _inputs(*shape, seed=1000 + sum(shape))
    want = ref.selective_scan_bwd(inp["dy"], *(inp[k] for k in NAMES))
    _check_grads(_backward(device, inp), want, str(shape))


def test_extreme_inputs(device) -> None:
    """delta_raw at +-30 and around softplus's threshold 20, A_log up to log(16)."""
    batch, length, dim, n = 2, 65, 67, 16
    inp = _inputs(batch, length, dim, n, seed=5)
    rng = np.random.default_rng(6)
    extremes = np.array([30.0, -30.0, 20.5, 19.5, 20.0, -20.0, 5.0, -9.0], np.float32)
    inp["delta_raw"] = rng.choice(extremes, size=(batch, length, dim)).astype(np.float32)
    inp["A_log"][:, : n // 2] = np.float32(np.log(16.0))  # A = -16: decay exp(-480) underflows to 0
    inp["A_log"][:, n // 2 :] = np.float32(-4.0)  # A ~ -0.018: decay close to 1
    want_y, _ = ref.selective_scan_fwd(*(inp[k] for k in NAMES))
    y, states = _forward(device, inp)
    assert np.isfinite(y).all() and np.isfinite(states).all(), "forward produced non-finite values"
    assert_close(y, want_y, atol=ATOL, rtol=RTOL, name="y extremes")
    got = _backward(device, inp)
    for name, g in zip(GRAD_NAMES, got, strict=True):
        assert np.isfinite(g).all(), f"{name} has non-finite values at extreme inputs"
    _check_grads(got, ref.selective_scan_bwd(inp["dy"], *(inp[k] for k in NAMES)), "extremes")


def test_tiny_delta_is_not_flushed_to_zero(device) -> None:
    """softplus(-30) ~ 9.4e-14 must reach the state (a naive log(1 + exp(v)) gives exactly 0)."""
    inp = _inputs(1, 3, 2, 1, seed=8)
    inp["delta_raw"][:] = -30.0
    inp["x"][:] = 1.0
    inp["B"][:] = 1.0
    inp["A_log"][:] = 0.0
    _, states = _forward(device, inp)
    _, want_states = ref.selective_scan_fwd(*(inp[k] for k in NAMES))
    assert_close(states, want_states, atol=0.0, rtol=1e-5, name="states at delta ~ 9.4e-14")


def test_backward_is_deterministic(device) -> None:
    inp = _inputs(2, 257, 67, 16, seed=9)
    first = _backward(device, inp)
    second = _backward(device, inp)
    for name, a, b in zip(GRAD_NAMES, first, second, strict=True):
        assert np.array_equal(a, b), f"{name} differs between two identical runs"


def test_rejects_bad_sizes(device) -> None:
    scan = SelectiveScan(device)
    small = device.buffer(16, label="small")
    with pytest.raises(ShapeError, match="holds 4 f32 values"):
        scan.forward(*[small] * 7, 1, 8, 1, 1)
    with pytest.raises(ShapeError, match="d_state"):
        scan.forward(*[small] * 7, 1, 1, 1, 65)
    with pytest.raises(ShapeError, match="length"):
        scan.forward(*[small] * 7, 1, 0, 1, 1)


@pytest.mark.parametrize(
    "raw_range", [(-3.0, 1.0), (15.0, 19.0)], ids=["softplus-curved", "softplus-near-identity"]
)
def test_reference_backward_matches_finite_differences(raw_range) -> None:
    rng = np.random.default_rng(11)
    batch, length, dim, n = 2, 5, 3, 4
    inputs = [
        rng.standard_normal((batch, length, dim)),
        rng.uniform(*raw_range, (batch, length, dim)),
        rng.uniform(-1.0, 1.0, (dim, n)),
        rng.standard_normal((batch, length, n)),
        rng.standard_normal((batch, length, n)),
        rng.standard_normal(dim),
    ]
    dy = rng.standard_normal((batch, length, dim))
    analytic = ref.selective_scan_bwd(dy, *inputs)
    for i, name in enumerate(GRAD_NAMES):

        def loss(v: np.ndarray, i: int = i) -> float:
            args = list(inputs)
            args[i] = v
            return float(np.sum(dy * ref.selective_scan_fwd(*args)[0]))

        numeric = finite_difference(loss, inputs[i], eps=1e-6)
        assert_close(analytic[i], numeric, atol=1e-6, rtol=1e-6, name=f"{name} finite differences")


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.selective_scan:SelectiveScan"
    cases = []
    batch, length, dim, n = 2, 33, 5, 16
    inp = _inputs(batch, length, dim, n, seed=42)
    y, states = ref.selective_scan_fwd(*(inp[k] for k in NAMES))
    zeros_y = np.zeros_like(inp["x"])
    zeros_states = np.zeros(states.shape, np.float32)
    sizes = [batch, length, dim, n]
    args = [{"buf": k} for k in NAMES]
    cases.append(
        KernelCase(
            "selective_scan.forward",
            launcher,
            "forward",
            [*args, {"buf": "y"}, *sizes, {"buf": "states"}],
            {**{k: inp[k] for k in NAMES}, "y": zeros_y, "states": zeros_states},
            {"y": y.astype(np.float32), "states": states.astype(np.float32)},
            ATOL,
            RTOL,
        )
    )

    batch, length, dim, n = 1, 19, 7, 4
    inp = _inputs(batch, length, dim, n, seed=43)
    _, states = ref.selective_scan_fwd(*(inp[k] for k in NAMES))
    grads = ref.selective_scan_bwd(inp["dy"], *(inp[k] for k in NAMES))
    buffers = {k: inp[k] for k in (*NAMES, "dy")}
    buffers["states"] = states.astype(np.float32)
    buffers.update(
        {g: np.zeros(inp[k].shape, np.float32) for g, k in zip(GRAD_NAMES, NAMES, strict=True)}
    )
    cases.append(
        KernelCase(
            "selective_scan.backward",
            launcher,
            "backward",
            [
                {"buf": "dy"},
                *[{"buf": k} for k in NAMES],
                {"buf": "states"},
                *[{"buf": g} for g in GRAD_NAMES],
                batch,
                length,
                dim,
                n,
            ],
            buffers,
            {g: w.astype(np.float32) for g, w in zip(GRAD_NAMES, grads, strict=True)},
            ATOL,
            RTOL,
        )
    )
    return cases
