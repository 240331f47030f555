"""pool.wgsl (mean-pool + L2 normalise) against its numpy reference on wgpu-py."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.kernels.pool import Pool
from evermind.ops import pool as ref
from tests.conftest import read_f32
from tests.numerics import assert_close, finite_difference

# (B, L, D): D = 1, WG-1, WG+1, a prime, the nano d_model 128 and a 2*WG+1; L = 1 and a prime.
SHAPES = [(1, 1, 1), (3, 7, 127), (4, 128, 128), (5, 13, 129), (2, 31, 257), (7, 3, 131)]
# Unit vectors: f32 sums of <= L terms and a norm over D terms; a few ulp of 1.
ATOL, RTOL = 2e-6, 1e-5


def _run(device, hidden: np.ndarray, lengths: np.ndarray, pool: Pool | None = None) -> np.ndarray:
    b, seq_len, d = hidden.shape
    pool = pool or Pool(device)
    bh, bl = device.upload(hidden, label="hidden"), device.upload(lengths, label="lengths")
    out = device.buffer(4 * b * d, label="out")
    device.submit([pool.mean_l2(bh, bl, out, b, seq_len, d)])
    got = read_f32(device, out, b * d).reshape(b, d)
    device.destroy(bh, bl, out)
    return got


@pytest.mark.parametrize(("b", "seq_len", "d"), SHAPES)
def test_matches_reference(device, b: int, seq_len: int, d: int) -> None:
    rng = np.random.default_rng(b * 100 + d)
    hidden = rng.standard_normal((b, seq_len, d)).astype(np.float32)
    lengths = rng.integers(1, seq_len + 1, size=b).astype(np.uint32)
    lengths[0] = seq_len  # one full row
    got = _run(device, hidden, lengths)
    assert_close(
        got, ref.pool_fwd(hidden, lengths), atol=ATOL, rtol=RTOL, name=f"pool {b}x{seq_len}x{d}"
    )
    assert_close(
        np.linalg.norm(got.astype(np.float64), axis=1),
        np.ones(b),
        atol=1e-5,
        rtol=0,
        name="unit norms",
    )


def test_padding_is_ignored_and_edges(device) -> None:
    # Rows: garbage after the valid prefix, zero length, length past L, an all-zero row.
    b, seq_len, d = 4, 9, 33
    rng = np.random.default_rng(3)
    hidden = rng.standard_normal((b, seq_len, d)).astype(np.float32)
    hidden[0, 4:] = 1e6  # padding must not leak into the mean
    hidden[3] = 0.0
    lengths = np.array([4, 0, 50, 9], np.uint32)
    got = _run(device, hidden, lengths)
    assert_close(got, ref.pool_fwd(hidden, lengths), atol=ATOL, rtol=RTOL, name="pool edges")
    assert not got[1].any() and not got[3].any(), "empty and zero rows must be zero vectors"


def test_extreme_magnitudes_normalise(device) -> None:
    # 1e30 would overflow a naive sum of squares; 1e-25 has a norm below eps, so it is divided
    # by eps (F.normalize semantics) rather than blown up to unit length.
    b, seq_len, d = 3, 5, 129
    rng = np.random.default_rng(8)
    hidden = rng.standard_normal((b, seq_len, d)).astype(np.float32)
    hidden[0] *= np.float32(1e30)
    hidden[1] *= np.float32(1e-25)
    hidden[2, :, :] = 0.0
    hidden[2, :, 17] = -1e4
    lengths = np.full(b, seq_len, np.uint32)
    got = _run(device, hidden, lengths)
    assert np.isfinite(got).all()
    assert_close(got, ref.pool_fwd(hidden, lengths), atol=ATOL, rtol=RTOL, name="pool extremes")


def test_rejects_bad_arguments(device) -> None:
    with pytest.raises(ConfigError, match="power of two"):
        Pool(device, workgroup_size=100)
    small = device.buffer(16)
    with pytest.raises(ShapeError, match="holds 4 f32"):
        Pool(device).mean_l2(small, small, small, 1, 2, 3)
    with pytest.raises(ShapeError, match="eps > 0"):
        Pool(device).mean_l2(small, small, small, 1, 1, 1, eps=0.0)
    with pytest.raises(ShapeError, match="holds 4 f32"):
        Pool(device).mean_l2_bwd(small, small, small, small, small, 1, 2, 3)


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.pool:Pool"
    cases = []
    for b, seq_len, d in [(3, 17, 129), (2, 5, 1)]:
        rng = np.random.default_rng(42 + d)
        hidden = rng.standard_normal((b, seq_len, d)).astype(np.float32)
        lengths = np.array([seq_len, 1, 0][:b], np.uint32)
        cases.append(
            KernelCase(
                f"pool.mean_l2 {b}x{seq_len}x{d}",
                launcher,
                "mean_l2",
                [{"buf": "hidden"}, {"buf": "lengths"}, {"buf": "out"}, b, seq_len, d],
                {"hidden": hidden, "lengths": lengths, "out": np.zeros((b, d), np.float32)},
                {"out": ref.pool_fwd(hidden, lengths)},
                ATOL,
                RTOL,
            )
        )
    # The plain mean and its backward (the embedding objective), with an empty text.
    b, seq_len, d = 3, 5, 65
    rng = np.random.default_rng(9)
    hidden = rng.standard_normal((b, seq_len, d)).astype(np.float32)
    grad = rng.standard_normal((b, d)).astype(np.float32)
    lengths = np.array([seq_len, 2, 0], np.uint32)
    cases.append(
        KernelCase(
            f"pool.mean {b}x{seq_len}x{d}",
            launcher,
            "mean",
            [{"buf": "hidden"}, {"buf": "lengths"}, {"buf": "out"}, b, seq_len, d],
            {"hidden": hidden, "lengths": lengths, "out": np.zeros((b, d), np.float32)},
            {"out": ref.mean_pool_fwd(hidden, lengths)},
            ATOL,
            RTOL,
        )
    )
    cases.append(
        KernelCase(
            f"pool.mean_bwd {b}x{seq_len}x{d}",
            launcher,
            "mean_bwd",
            [{"buf": "grad"}, {"buf": "lengths"}, {"buf": "dhidden"}, b, seq_len, d],
            {
                "grad": grad,
                "lengths": lengths,
                "dhidden": np.ones((b, seq_len, d), np.float32),
            },
            {"dhidden": ref.mean_pool_bwd(grad, lengths, seq_len)},
            1e-7,
            1e-6,
        )
    )
    scratch = np.zeros((b, d), np.float32)
    cases.append(
        KernelCase(
            f"pool.mean_l2_bwd {b}x{seq_len}x{d}",
            launcher,
            "mean_l2_bwd",
            [
                {"buf": "hidden"},
                {"buf": "lengths"},
                {"buf": "grad"},
                {"buf": "scratch"},
                {"buf": "dhidden"},
                b,
                seq_len,
                d,
            ],
            {
                "hidden": hidden,
                "lengths": lengths,
                "grad": grad,
                "scratch": scratch,
                "dhidden": np.ones((b, seq_len, d), np.float32),
            },
            {"dhidden": ref.pool_bwd(hidden, lengths, grad)},
            2e-6,
            1e-4,
        )
    )
    return cases


def _mean_l2_bwd(device, hidden: np.ndarray, lengths: np.ndarray, grad: np.ndarray) -> np.ndarray:
    b, seq_len, d = hidden.shape
    pool = Pool(device)
    bh, bl, bg = (device.upload(a) for a in (hidden, lengths, grad))
    scratch, dh = device.buffer(4 * b * d), device.buffer(4 * b * seq_len * d)
    device.write(dh, np.full(b * seq_len * d, 7.0, np.float32))  # must be overwritten
    device.submit([pool.mean_l2_bwd(bh, bl, bg, scratch, dh, b, seq_len, d)])
    got = read_f32(device, dh, b * seq_len * d).reshape(b, seq_len, d)
    device.destroy(bh, bl, bg, scratch, dh)
    return got


@pytest.mark.parametrize(("b", "seq_len", "d"), SHAPES)
def test_mean_l2_backward_matches_reference(device, b: int, seq_len: int, d: int) -> None:
    """The embedding objective's path: the gradient through the normalised mean."""
    rng = np.random.default_rng(b * 11 + d)
    hidden = rng.standard_normal((b, seq_len, d)).astype(np.float32)
    lengths = rng.integers(0, seq_len + 2, size=b).astype(np.uint32)  # 0 and past L too
    lengths[0] = seq_len
    grad = rng.standard_normal((b, d)).astype(np.float32)
    got = _mean_l2_bwd(device, hidden, lengths, grad)
    want = ref.pool_bwd(hidden, lengths, grad)
    # dp = (g - u (u . g)) / r: r shrinks like 1 / sqrt(n), so scale the tolerance by |want|.
    scale = float(np.abs(want).max()) or 1.0
    assert_close(got, want, atol=2e-6 * scale, rtol=1e-4, name="mean_l2_bwd")
    assert not got[lengths == 0].any(), "an empty text gets no gradient"


def test_mean_l2_backward_extreme_magnitudes(device) -> None:
    """The norm is overflow/underflow-safe in the backward as in the forward."""
    rng = np.random.default_rng(2)
    hidden = rng.standard_normal((3, 4, 33)).astype(np.float32)
    hidden[0] *= 1e25
    hidden[1] *= 1e-25
    lengths = np.array([4, 3, 2], np.uint32)
    grad = rng.standard_normal((3, 33)).astype(np.float32)
    got = _mean_l2_bwd(device, hidden, lengths, grad)
    want = ref.pool_bwd(hidden, lengths, grad)
    assert np.isfinite(got).all()
    for row in range(3):
        scale = float(np.abs(want[row]).max())
        assert_close(got[row], want[row], atol=1e-5 * scale, rtol=1e-4, name=f"row {row}")


def test_l2_backward_matches_finite_differences() -> None:
    rng = np.random.default_rng(6)
    hidden = rng.standard_normal((3, 4, 5))
    lengths = np.array([4, 0, 2])
    weights = rng.standard_normal((3, 5))

    def loss(h: np.ndarray) -> float:
        return float(np.sum(weights * ref.pool_fwd(h, lengths)))

    assert_close(
        ref.pool_bwd(hidden, lengths, weights),
        finite_difference(loss, hidden),
        atol=1e-8,
        rtol=1e-6,
        name="pool_bwd",
    )


@pytest.mark.parametrize(("b", "seq_len", "d"), SHAPES)
def test_mean_and_its_backward_match_reference(device, b: int, seq_len: int, d: int) -> None:
    rng = np.random.default_rng(b * 7 + d)
    hidden = rng.standard_normal((b, seq_len, d)).astype(np.float32)
    lengths = rng.integers(0, seq_len + 2, size=b).astype(np.uint32)  # 0 and past L too
    lengths[0] = seq_len
    grad = rng.standard_normal((b, d)).astype(np.float32)
    pool = Pool(device)
    bh, bl, bg = (device.upload(a) for a in (hidden, lengths, grad))
    out, dh = device.buffer(4 * b * d), device.buffer(4 * b * seq_len * d)
    device.write(dh, np.full(b * seq_len * d, 7.0, np.float32))  # must be overwritten
    device.submit([pool.mean(bh, bl, out, b, seq_len, d), pool.mean_bwd(bg, bl, dh, b, seq_len, d)])
    got = read_f32(device, out, b * d).reshape(b, d)
    got_dh = read_f32(device, dh, b * seq_len * d).reshape(b, seq_len, d)
    device.destroy(bh, bl, bg, out, dh)
    assert_close(got, ref.mean_pool_fwd(hidden, lengths), atol=ATOL, rtol=RTOL, name="mean")
    want = ref.mean_pool_bwd(grad, lengths, seq_len)
    assert_close(got_dh, want, atol=1e-7, rtol=1e-6, name="mean_bwd")


def test_mean_backward_matches_finite_differences() -> None:
    rng = np.random.default_rng(5)
    hidden = rng.standard_normal((3, 4, 2))
    lengths = np.array([4, 0, 2])
    weights = rng.standard_normal((3, 2))

    def loss(h: np.ndarray) -> float:
        return float(np.sum(weights * ref.mean_pool_fwd(h, lengths)))

    assert_close(
        ref.mean_pool_bwd(weights, lengths, 4),
        finite_difference(loss, hidden),
        atol=1e-8,
        rtol=1e-6,
        name="mean_pool_bwd",
    )
