"""The scan's fast path equals the reference: forward, every gradient, and the model's step.

``evermind.ops.selective_scan_fast`` is what the CPU model trains with; the reference
``evermind.ops.selective_scan`` is what the kernels are tested against. Checked here, on shapes
that are not powers of two (L = 1, primes) and with the batch rows split into chunks of one,
of two rows for three (chunk + 1) and of four rows for three (chunk - 1):

- float64 (compute float64): y, states and the six gradients within 1e-10 relative;
- float32 (compute float32, as the model trains): within mamba's scan tolerances for fp32,
  rtol 6e-4 / atol 2e-3, of the float64 reference;
- the fast backward is the gradient of the fast forward (central differences, float64);
- extreme steps and decays stay finite;
- one ``CpuMamba`` training step (loss and every weight's gradient) on the fast scan equals the
  step on the reference scan.
"""

from __future__ import annotations

import numpy as np
import pytest

from evermind.model.cpu import CpuMamba
from evermind.ops import selective_scan_fast as fast
from evermind.ops.selective_scan import selective_scan_bwd, selective_scan_fwd
from evermind.ops.selective_scan_fast import selective_scan_fast_bwd, selective_scan_fast_fwd
from tests.unit.test_model_cpu import TINY, random_params

RTOL64 = 1e-10
#: state-spaces/mamba's tolerances for its fp32 scan against selective_scan_ref.
RTOL32, ATOL32 = 6e-4, 2e-3
NAMES = ("dx", "ddelta_raw", "dA_log", "dB", "dC", "dD")

#: (batch, length, d_inner, d_state): L = 1, primes, and a d_state of 16 (the presets').
SHAPES = [(1, 1, 1, 1), (2, 1, 3, 2), (3, 13, 5, 4), (3, 31, 33, 16), (5, 7, 8, 3)]


def inputs(shape: tuple[int, int, int, int], seed: int) -> list[np.ndarray]:
    """x, delta_raw, A_log, B, C, D in float64, with decays spread over (0, 1)."""
    batch, length, dim, d_state = shape
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((batch, length, dim)),  # x
        rng.standard_normal((batch, length, dim)) - 1.0,  # delta_raw
        np.log(rng.uniform(0.5, 16.0, (dim, d_state))),  # A_log
        rng.standard_normal((batch, length, d_state)),  # B
        rng.standard_normal((batch, length, d_state)),  # C
        rng.standard_normal(dim),  # D
    ]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(want))), 1e-300) if want.size else 1.0
    return float(np.max(np.abs(got - want))) / scale if want.size else 0.0


def check_fp32(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """``|got - want| <= atol + rtol |want|`` element-wise; prints the worst first."""
    excess = np.abs(got.astype(np.float64) - want) - (ATOL32 + RTOL32 * np.abs(want))
    worst = float(excess.max()) if excess.size else -1.0
    diff = float(np.abs(got - want).max()) if want.size else 0.0
    print(f"{what}: max abs diff {diff:.2e} (scale {float(np.abs(want).max()):.2e})")
    bad = np.argwhere(excess > 0)[:5]
    assert worst <= 0, f"{what}: first mismatches at {bad.tolist()}"


@pytest.fixture(params=[None, 1, 2, 4], ids=["one-chunk", "row-chunks", "chunk+1", "chunk-1"])
def chunk_rows(request: pytest.FixtureRequest) -> int | None:
    """Rows per chunk (None: the default budget), set through ``CHUNK_ELEMENTS`` per shape."""
    rows: int | None = request.param
    return rows


def set_chunk(monkeypatch: pytest.MonkeyPatch, rows: int | None, shape: tuple[int, ...]) -> None:
    if rows is not None:
        _, length, dim, d_state = shape
        monkeypatch.setattr(fast, "CHUNK_ELEMENTS", rows * length * dim * d_state)


@pytest.mark.parametrize("shape", SHAPES)
def test_fast_scan_equals_the_reference_in_float64(
    shape: tuple[int, int, int, int], chunk_rows: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_chunk(monkeypatch, chunk_rows, shape)
    args = inputs(shape, seed=sum(shape))
    dy = np.random.default_rng(7).standard_normal(args[0].shape)
    want_y, want_states = selective_scan_fwd(*args)
    y, states = selective_scan_fast_fwd(*args)
    assert y.dtype == states.dtype == np.float64 and states.shape == want_states.shape
    assert relative_error(y, want_y) <= RTOL64, f"y: {relative_error(y, want_y):.2e}"
    assert relative_error(states, want_states) <= RTOL64, "states"
    want = selective_scan_bwd(dy, *args, want_states)
    for given in (states, None):  # the forward's states, or recomputed
        got = selective_scan_fast_bwd(dy, *args, given)
        for name, value, expected in zip(NAMES, got, want, strict=True):
            error = relative_error(value, expected)
            assert value.shape == expected.shape and value.dtype == np.float64, name
            assert error <= RTOL64, f"{name} (states {'given' if given is not None else 'none'})"
    # The reference's states (its own layout) serve the fast backward just as well.
    for name, value, expected in zip(
        NAMES, selective_scan_fast_bwd(dy, *args, want_states), want, strict=True
    ):
        assert relative_error(value, expected) <= RTOL64, f"{name} (reference states)"


@pytest.mark.parametrize("shape", SHAPES[2:])
def test_fast_scan_in_float32_is_within_fp32_tolerance_of_the_reference(
    shape: tuple[int, int, int, int], chunk_rows: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_chunk(monkeypatch, chunk_rows, shape)
    args = inputs(shape, seed=sum(shape) + 1)
    dy = np.random.default_rng(3).standard_normal(args[0].shape)
    want_y, want_states = selective_scan_fwd(*args)
    want = selective_scan_bwd(dy, *args, want_states)
    args32 = [a.astype(np.float32) for a in args]
    y, states = selective_scan_fast_fwd(*args32, compute=np.float32)
    grads = selective_scan_fast_bwd(dy.astype(np.float32), *args32, states, np.float32)
    assert y.dtype == states.dtype == np.float32
    assert all(g.dtype == np.float32 for g in grads)
    check_fp32(y, want_y, "y")
    check_fp32(states, want_states, "states")
    for name, value, expected in zip(NAMES, grads, want, strict=True):
        check_fp32(value, expected, name)


def test_fast_backward_is_the_gradient_of_the_fast_forward() -> None:
    """Central differences of sum(dy * y) for every input (float64, small shape)."""
    args = inputs((2, 5, 3, 2), seed=11)
    dy = np.random.default_rng(5).standard_normal(args[0].shape)
    grads = selective_scan_fast_bwd(dy, *args)
    eps = 1e-6
    for index, (arg, grad) in enumerate(zip(args, grads, strict=True)):
        numeric = np.zeros_like(arg)
        for position in np.ndindex(arg.shape):
            shifted = [a.copy() for a in args]
            shifted[index][position] += eps
            up = float(np.sum(dy * selective_scan_fast_fwd(*shifted)[0]))
            shifted[index][position] -= 2 * eps
            down = float(np.sum(dy * selective_scan_fast_fwd(*shifted)[0]))
            numeric[position] = (up - down) / (2 * eps)
        error = relative_error(grad, numeric)
        print(f"{NAMES[index]}: relative error {error:.2e} against central differences")
        assert error < 1e-6, f"{NAMES[index]}: relative error {error:.2e}"


def test_extreme_steps_and_decays_stay_finite_and_match() -> None:
    """delta past softplus's threshold, near-zero steps, decays that underflow to 0."""
    args = inputs((2, 9, 4, 3), seed=4)
    args[1][0, :3] = 40.0  # delta = delta_raw: the identity past 20
    args[1][1, 3:] = -30.0  # delta ~ 1e-13: decay ~ 1
    args[2][0] = 12.0  # A = -exp(12): every decay of channel 0 underflows to 0
    dy = np.random.default_rng(9).standard_normal(args[0].shape)
    y, states = selective_scan_fast_fwd(*args)
    want_y, want_states = selective_scan_fwd(*args)
    got, want = selective_scan_fast_bwd(dy, *args, states), selective_scan_bwd(dy, *args)
    for name, value, expected in zip(("y", "states", *NAMES), (y, states, *got),
                                     (want_y, want_states, *want), strict=True):  # fmt: skip
        assert np.isfinite(value).all(), name
        assert relative_error(value, expected) <= RTOL64, name


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_model_step_on_the_fast_scan_equals_the_reference_step(dtype: type) -> None:
    """CpuMamba's loss and every gradient: fast scan (the default) against the reference."""
    rng = np.random.default_rng(21)
    ids = rng.integers(0, TINY.vocab_size, (3, 11))
    targets = rng.integers(0, TINY.vocab_size, (3, 11))
    model = CpuMamba(TINY, random_params(TINY, 5), dtype=dtype)
    assert not model.reference_scan
    loss, grads = model.loss_and_grads(ids, targets)
    model.reference_scan = True
    want_loss, want_grads = model.loss_and_grads(ids, targets)
    print(f"{np.dtype(dtype).name}: loss {loss:.8f} vs reference {want_loss:.8f}")
    rtol = RTOL64 if dtype == np.float64 else RTOL32
    assert abs(loss - want_loss) <= rtol * abs(want_loss)
    for name, want in want_grads.items():
        error = relative_error(grads[name].astype(np.float64), want.astype(np.float64))
        assert error <= (1e-9 if dtype == np.float64 else RTOL32), f"{name}: {error:.2e}"
