"""The selective scan's whole-sequence forward and backward equal a plain loop of ``scan_step``.

``evermind.ops.selective_scan`` runs the recurrence time-major on chunks of batch rows with
every per-step reduction done after the loop; this test rebuilds the scan the obvious way, one
:func:`scan_step` per time step (and the backward as the step-by-step reverse loop), and checks
both agree to 1e-10 relative in float64, on random shapes including L = 1, with one chunk and
with many (a tiny chunk size), and that the backward is the forward's gradient.
"""

from __future__ import annotations

import numpy as np
import pytest

from evermind.ops import selective_scan as scan
from evermind.ops.elementwise import softplus_bwd, softplus_fwd
from evermind.ops.selective_scan import (
    scan_step,
    selective_scan_bwd,
    selective_scan_fwd,
    selective_scan_y,
)

RTOL = 1e-10

#: (batch, length, d_inner, d_state), L = 1 included.
SHAPES = [(1, 1, 1, 1), (2, 1, 3, 2), (3, 7, 5, 4), (4, 16, 8, 16), (5, 3, 33, 3)]


def loop_fwd(x, delta_raw, A_log, B, C, D):  # type: ignore[no-untyped-def]
    """y (B, L, D) and states (B, L, D, N): one ``scan_step`` per time step."""
    delta, A = softplus_fwd(delta_raw), -np.exp(A_log)
    batch, length, dim = x.shape
    h = np.zeros((batch, dim, A.shape[1]))
    ys, states = [], []
    for t in range(length):
        y_t, h = scan_step(h, x[:, t], delta[:, t], A, B[:, t], C[:, t], D)
        ys.append(y_t)
        states.append(h)
    return np.stack(ys, axis=1), np.stack(states, axis=1)


def loop_bwd(dy, x, delta_raw, A_log, B, C, D):  # type: ignore[no-untyped-def]
    """The reverse loop over time, one step at a time (the backward before vectorising)."""
    _, states = loop_fwd(x, delta_raw, A_log, B, C, D)
    delta, A = softplus_fwd(delta_raw), -np.exp(A_log)
    batch, length, dim = x.shape
    dx, ddelta = np.zeros_like(x), np.zeros_like(x)
    dA, dB, dC = np.zeros_like(A), np.zeros_like(B), np.zeros_like(C)
    carry = np.zeros((batch, dim, A.shape[1]))
    for t in range(length - 1, -1, -1):
        h_prev = states[:, t - 1] if t > 0 else np.zeros_like(carry)
        decay = np.exp(delta[:, t, :, None] * A)
        g = dy[:, t, :, None] * C[:, t, None, :] + carry
        carry = decay * g
        dC[:, t] = np.einsum("bd,bdn->bn", dy[:, t], states[:, t])
        through_decay = g * h_prev * decay
        g_dot_b = np.einsum("bdn,bn->bd", g, B[:, t])
        ddelta[:, t] = np.einsum("bdn,dn->bd", through_decay, A) + g_dot_b * x[:, t]
        dA += np.einsum("bdn,bd->dn", through_decay, delta[:, t])
        dx[:, t] = g_dot_b * delta[:, t] + dy[:, t] * D
        dB[:, t] = np.einsum("bdn,bd->bn", g, delta[:, t] * x[:, t])
    dD = np.einsum("bld,bld->d", dy, x)
    return dx, softplus_bwd(delta_raw, ddelta), dA * A, dB, dC, dD


def inputs(shape: tuple[int, int, int, int], seed: int) -> list[np.ndarray]:
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


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == np.float64, what
    scale = max(float(np.max(np.abs(want))), 1e-300)
    error = float(np.max(np.abs(got - want))) / scale if want.size else 0.0
    assert error <= RTOL, f"{what}: relative error {error:.2e} > {RTOL}"


@pytest.mark.parametrize("chunk", [None, 1])
@pytest.mark.parametrize("shape", SHAPES)
def test_scan_equals_a_loop_of_scan_step(
    shape: tuple[int, int, int, int], chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if chunk is not None:  # one batch row per chunk: many chunks, dA summed across them
        monkeypatch.setattr(scan, "CHUNK_ELEMENTS", chunk)
    args = inputs(shape, seed=sum(shape))
    dy = np.random.default_rng(7).standard_normal(args[0].shape)
    y, states = selective_scan_fwd(*args)
    want_y, want_states = loop_fwd(*args)
    assert_close(y, want_y, "y")
    assert_close(states, want_states, "states")
    names = ("dx", "ddelta_raw", "dA_log", "dB", "dC", "dD")
    want = loop_bwd(dy, *args)
    for name, got, expected in zip(names, selective_scan_bwd(dy, *args, states), want, strict=True):
        assert_close(got, expected, name)
    # Without the forward's states the backward recomputes them: same gradients.
    for name, got, expected in zip(names, selective_scan_bwd(dy, *args), want, strict=True):
        assert_close(got, expected, f"{name} (states recomputed)")


@pytest.mark.parametrize("shape", SHAPES)
def test_inference_scan_y_equals_the_forward(shape: tuple[int, int, int, int]) -> None:
    """``selective_scan_y`` (one state kept) is the forward's y: 1e-10 in float64, and in
    float32 (the CPU model's inference) within float32 rounding of it."""
    args = inputs(shape, seed=sum(shape) + 1)
    want, _ = selective_scan_fwd(*args)
    assert_close(selective_scan_y(*args), want, "y")
    got32 = selective_scan_y(*[a.astype(np.float32) for a in args], compute=np.float32)
    assert got32.dtype == np.float32
    scale = float(np.abs(want).max())
    diff = float(np.abs(got32 - want).max())
    print(f"float32 scan y vs float64: max abs diff {diff:.2e} (scale {scale:.2f})")
    assert diff <= 1e-5 * max(1.0, scale)


def test_recurrence_is_the_loops_to_the_bit() -> None:
    """The states are the same products and sums as ``scan_step``'s, in the same order."""
    args = inputs((3, 9, 6, 4), seed=3)
    _, states = selective_scan_fwd(*args)
    _, want = loop_fwd(*args)
    assert np.array_equal(states, want)


def test_backward_is_the_gradient_of_the_forward() -> None:
    """Central differences of sum(dy * y) for every input (float64, small shape)."""
    args = inputs((2, 4, 3, 2), seed=11)
    dy = np.random.default_rng(5).standard_normal(args[0].shape)
    grads = selective_scan_bwd(dy, *args)
    eps = 1e-6
    for index, (arg, grad) in enumerate(zip(args, grads, strict=True)):
        numeric = np.zeros_like(arg)
        for position in np.ndindex(arg.shape):
            shifted = [a.copy() for a in args]
            shifted[index][position] += eps
            up = float(np.sum(dy * selective_scan_fwd(*shifted)[0]))
            shifted[index][position] -= 2 * eps
            down = float(np.sum(dy * selective_scan_fwd(*shifted)[0]))
            numeric[position] = (up - down) / (2 * eps)
        error = float(np.max(np.abs(grad - numeric))) / float(np.max(np.abs(numeric)))
        assert error < 1e-6, f"input {index}: relative error {error:.2e}"


def test_float32_inputs_give_float32_results() -> None:
    args = [a.astype(np.float32) for a in inputs((2, 5, 4, 3), seed=2)]
    y, states = selective_scan_fwd(*args)
    grads = selective_scan_bwd(y, *args, states)
    assert y.dtype == states.dtype == np.float32
    assert all(g.dtype == np.float32 for g in grads)
    want_y, want_states = loop_fwd(*[a.astype(np.float64) for a in args])
    assert np.allclose(y, want_y, rtol=1e-5, atol=1e-6)
    assert np.allclose(states, want_states, rtol=1e-5, atol=1e-6)
