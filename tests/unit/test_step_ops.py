"""The decoding step's shortcuts equal the parallel ops they stand for, to the bit.

:func:`evermind.ops.conv1d.conv1d_last` is :func:`conv1d_fwd`'s last position over a K-step
window (what :func:`evermind.ops.recurrent_step.conv_step` reads), in float64 and in float32,
for K = 1, 4 and 5 and awkward widths.
"""

from __future__ import annotations

import numpy as np
import pytest

from evermind.ops.conv1d import conv1d_fwd, conv1d_last
from evermind.ops.recurrent_step import causal_conv1d_silu, conv_step


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("batch", "dim", "taps"), [(1, 1, 1), (3, 7, 4), (5, 33, 5)])
def test_conv1d_last_is_the_forwards_last_position(
    dtype: type, batch: int, dim: int, taps: int
) -> None:
    rng = np.random.default_rng(batch * dim + taps)
    window = rng.standard_normal((batch, dim, taps)).astype(dtype)  # (B, D, K), oldest first
    weight = rng.standard_normal((dim, 1, taps)).astype(dtype)
    bias = rng.standard_normal(dim).astype(dtype)
    want = conv1d_fwd(window.transpose(0, 2, 1), weight, bias, dtype)[:, -1]
    got = conv1d_last(window, weight, bias, dtype)
    assert got.dtype == dtype and np.array_equal(got, want)


def test_conv_step_is_the_parallel_conv_branch_to_the_bit() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 9, 6))  # (B, L, D)
    weight, bias = rng.standard_normal((6, 1, 4)), rng.standard_normal(6)
    state = np.zeros((2, 6, 4))
    steps = []
    for t in range(9):
        x_conv, state = conv_step(state, x[:, t], weight, bias)
        steps.append(x_conv)
    assert np.array_equal(np.stack(steps, axis=1), causal_conv1d_silu(x, weight, bias))


@pytest.mark.parametrize("rows", [1, 3, 4, 7])  # both sides of scan_step's ROWS_FOR_REPEAT
@pytest.mark.parametrize("compute", [np.float32, np.float64])
def test_ssm_step_into_its_own_state_equals_a_new_state(rows: int, compute: type) -> None:
    """``ssm_step(..., out=h)`` (the decoder's in-place update) gives the same y and state, to
    the bit, as a new state array, in the state's dtype or another compute dtype."""
    from evermind.ops.recurrent_step import ssm_step

    rng = np.random.default_rng(rows)
    dim, n = 13, 5
    h = rng.normal(0, 1, (rows, dim, n)).astype(np.float32)
    x, dt = rng.normal(0, 1, (2, rows, dim)).astype(np.float32)
    a_log, b, c = (
        rng.normal(0, 0.5, (dim, n)),
        rng.normal(0, 1, (rows, n)),
        rng.normal(0, 1, (rows, n)),
    )
    args = (x, dt, a_log.astype(np.float32), b.astype(np.float32), c.astype(np.float32))
    skip = rng.normal(0, 1, dim).astype(np.float32)
    want_y, want_h = ssm_step(h, *args, skip, compute)
    state = h.copy()
    got_y, got_h = ssm_step(state, *args, skip, compute, out=state)
    assert got_h is state
    np.testing.assert_array_equal(got_y, want_y)
    np.testing.assert_array_equal(got_h, want_h)
