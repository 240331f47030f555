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
