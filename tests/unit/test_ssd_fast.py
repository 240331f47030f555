"""The SSD scan's fast path equals the reference: forward, every gradient, and the model's step.

``evermind.ops.ssd_fast`` is what the Mamba-2 CPU model trains with; the reference
``evermind.ops.ssd`` is what the kernels are tested against. Checked on shapes that are not
powers of two (L = 1, L shorter than a chunk, a partial last chunk, chunks of one step,
several groups), with and without a clamp of dt:

- float64: y, the chunk states and the seven gradients within 1e-10 relative of
  ``ssd_fwd`` / ``ssd_bwd``;
- float32 (as the model trains): within mamba's fp32 tolerances (rtol 6e-4 / atol 2e-3) of
  the float64 reference;
- the fast backward is the gradient of the fast forward (central differences, float64);
- decays that underflow to 0 and dt past softplus's threshold stay finite and match;
- one ``CpuMamba2`` training step (loss and every gradient) on the fast scan equals the step
  on the reference, float64 and float32.
"""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ShapeError
from evermind.model.cpu_mamba2 import CpuMamba2
from evermind.ops.ssd import ssd_bwd, ssd_fwd
from evermind.ops.ssd_fast import ssd_fast_bwd, ssd_fast_fwd
from tests.unit.test_model_cpu_mamba2 import TINY, _noisy_params
from tests.unit.test_selective_scan_fast import RTOL32, RTOL64, check_fp32, relative_error

NAMES = ("dx", "ddt_raw", "dA_log", "dB", "dC", "dD", "ddt_bias")

#: (batch, length, heads, head_dim, groups, d_state, chunk_size).
SHAPES = [
    (1, 1, 1, 1, 1, 1, 3),  # L = 1, shorter than a chunk
    (2, 13, 4, 3, 2, 5, 4),  # a partial last chunk, two groups
    (3, 20, 6, 4, 3, 2, 7),
    (2, 16, 2, 3, 1, 4, 16),  # exactly one chunk
    (2, 9, 2, 2, 1, 3, 1),  # chunks of one step
]
LIMITS = [(0.0, np.inf), (0.1, 0.9)]


def inputs(shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    """x, dt_raw, A_log, B, C, D, dt_bias in float64, decays spread over (0, 1)."""
    batch, length, heads, head_dim, groups, d_state, _ = shape
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((batch, length, heads, head_dim)),  # x
        rng.standard_normal((batch, length, heads)) - 1.0,  # dt_raw
        np.log(rng.uniform(0.5, 8.0, heads)),  # A_log
        rng.standard_normal((batch, length, groups, d_state)),  # B
        rng.standard_normal((batch, length, groups, d_state)),  # C
        rng.standard_normal(heads),  # D
        0.3 * rng.standard_normal(heads),  # dt_bias
    ]


@pytest.mark.parametrize("limit", LIMITS, ids=["no-clamp", "clamp"])
@pytest.mark.parametrize("shape", SHAPES)
def test_fast_ssd_equals_the_reference_in_float64(
    shape: tuple[int, ...], limit: tuple[float, float]
) -> None:
    args, chunk = inputs(shape, seed=sum(shape)), shape[-1]
    dy = np.random.default_rng(7).standard_normal(args[0].shape)
    want_y, want_states = ssd_fwd(*args, chunk, limit)
    y, states = ssd_fast_fwd(*args, chunk, limit)
    assert y.dtype == states.dtype == np.float64 and states.shape == want_states.shape
    assert relative_error(y, want_y) <= RTOL64, f"y: {relative_error(y, want_y):.2e}"
    assert relative_error(states, want_states) <= RTOL64, "chunk states"
    want = ssd_bwd(dy, *args, limit)
    got = ssd_fast_bwd(dy, *args, chunk, limit)
    for name, value, expected in zip(NAMES, got, want, strict=True):
        assert value.shape == expected.shape and value.dtype == np.float64, name
        error = relative_error(value, expected)
        assert error <= RTOL64, f"{name}: {error:.2e}"


@pytest.mark.parametrize("shape", SHAPES[1:])
def test_fast_ssd_in_float32_is_within_fp32_tolerance_of_the_reference(
    shape: tuple[int, ...],
) -> None:
    args, chunk = inputs(shape, seed=sum(shape) + 1), shape[-1]
    dy = np.random.default_rng(3).standard_normal(args[0].shape)
    want_y, want_states = ssd_fwd(*args, chunk)
    want = ssd_bwd(dy, *args)
    args32 = [a.astype(np.float32) for a in args]
    y, states = ssd_fast_fwd(*args32, chunk, compute=np.float32)
    grads = ssd_fast_bwd(dy.astype(np.float32), *args32, chunk, compute=np.float32)
    assert y.dtype == states.dtype == np.float32
    assert all(g.dtype == np.float32 for g in grads)
    check_fp32(y, want_y, "y")
    check_fp32(states, want_states, "chunk states")
    for name, value, expected in zip(NAMES, grads, want, strict=True):
        check_fp32(value, expected, name)


def test_fast_backward_is_the_gradient_of_the_fast_forward() -> None:
    """Central differences of sum(dy * y) for every input (float64, a partial last chunk)."""
    shape = (2, 5, 2, 2, 1, 3, 2)
    args, chunk = inputs(shape, seed=11), shape[-1]
    dy = np.random.default_rng(5).standard_normal(args[0].shape)
    grads = ssd_fast_bwd(dy, *args, chunk)
    eps = 1e-6
    for index, (arg, grad) in enumerate(zip(args, grads, strict=True)):
        numeric = np.zeros_like(arg)
        for position in np.ndindex(arg.shape):
            shifted = [a.copy() for a in args]
            shifted[index][position] += eps
            up = float(np.sum(dy * ssd_fast_fwd(*shifted, chunk)[0]))
            shifted[index][position] -= 2 * eps
            down = float(np.sum(dy * ssd_fast_fwd(*shifted, chunk)[0]))
            numeric[position] = (up - down) / (2 * eps)
        error = relative_error(grad, numeric)
        print(f"{NAMES[index]}: relative error {error:.2e} against central differences")
        assert error < 1e-6, f"{NAMES[index]}: relative error {error:.2e}"


def test_extreme_steps_and_decays_stay_finite_and_match() -> None:
    """dt past softplus's threshold, near-zero steps, decays that underflow to 0."""
    shape = (2, 11, 3, 2, 1, 3, 4)
    args, chunk = inputs(shape, seed=4), shape[-1]
    args[1][0, :3] = 40.0  # dt = dt_raw + bias: the identity past 20
    args[1][1, 3:] = -30.0  # dt ~ 1e-13: decay ~ 1
    args[2][0] = 12.0  # A = -exp(12): head 0's decays underflow to 0
    dy = np.random.default_rng(9).standard_normal(args[0].shape)
    y, states = ssd_fast_fwd(*args, chunk)
    want_y, want_states = ssd_fwd(*args, chunk)
    got, want = ssd_fast_bwd(dy, *args, chunk), ssd_bwd(dy, *args)
    for name, value, expected in zip(("y", "states", *NAMES), (y, states, *got),
                                     (want_y, want_states, *want), strict=True):  # fmt: skip
        assert np.isfinite(value).all(), name
        assert relative_error(value, expected) <= 1e-9, name


def test_bad_shapes_are_refused_with_the_names() -> None:
    args = inputs((1, 4, 2, 2, 1, 3, 2), seed=1)
    with pytest.raises(ShapeError, match="chunk_size"):
        ssd_fast_fwd(*args, 0)
    with pytest.raises(ShapeError, match="D has shape"):
        ssd_fast_fwd(*args[:5], np.ones(3), args[6], 2)
    with pytest.raises(ShapeError, match="dy has shape"):
        ssd_fast_bwd(args[0][:, :2], *args, 2)
    with pytest.raises(ShapeError, match="groups"):
        ssd_fast_fwd(args[0], args[1], args[2], np.ones((1, 4, 3, 3)), np.ones((1, 4, 3, 3)),
                     *args[5:], 2)  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_model_step_on_the_fast_ssd_equals_the_reference_step(dtype: type) -> None:
    """CpuMamba2's loss and every gradient: fast SSD (the default) against the reference."""
    rng = np.random.default_rng(21)
    ids = rng.integers(0, TINY.vocab_size, (3, 5))
    targets = rng.integers(0, TINY.vocab_size, (3, 5))
    model = CpuMamba2(TINY, _noisy_params(TINY, 5), dtype=dtype)
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
