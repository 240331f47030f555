"""embed_loss.wgsl (centring, cosine loss and dL/dz) against its numpy reference on wgpu-py,
and the reference's backward against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.kernels.embed_loss import EmbedLoss
from evermind.ops import embed_loss as ref
from evermind.ops import pool as pool_ref
from tests.conftest import read_f32
from tests.numerics import assert_close, finite_difference

# (B, E): E = 1, WG-1, WG+1, a prime, a 2*WG+1; B = 1 and a prime.
SHAPES = [(1, 1), (3, 63), (2, 65), (7, 131), (1, 129), (5, 384)]
# Cosines of f32 vectors: a tree sum over E terms, a few ulp of 1.
ATOL, RTOL = 3e-6, 1e-5


def _cosine(device, z: np.ndarray, t: np.ndarray, scale: float) -> tuple[np.ndarray, ...]:
    b, e = z.shape
    launcher = EmbedLoss(device)
    bz, bt = device.upload(z, label="z"), device.upload(t, label="targets")
    rows, dz, loss = (device.buffer(4 * n) for n in (b, b * e, 1))
    device.submit(launcher.loss_and_grad(bz, bt, rows, dz, loss, b, e, scale))
    got_rows = read_f32(device, rows, b)
    got_dz = read_f32(device, dz, b * e).reshape(b, e)
    got_loss = float(read_f32(device, loss, 1)[0])
    device.destroy(bz, bt, rows, dz, loss)
    return got_rows, got_dz, np.float64(got_loss)


@pytest.mark.parametrize(("b", "e"), SHAPES)
def test_cosine_matches_reference(device, b: int, e: int) -> None:
    rng = np.random.default_rng(b * 1000 + e)
    z = rng.standard_normal((b, e)).astype(np.float32)
    t = rng.standard_normal((b, e)).astype(np.float32) * 3.0
    t[0] = z[0] * 2.0 if e > 1 else t[0]  # one aligned row: cos 1, loss 0
    rows, dz, loss = _cosine(device, z, t, 1.0 / b)
    want_rows, want_loss = ref.cosine_loss_fwd(z, t)
    assert_close(rows, want_rows, atol=ATOL, rtol=RTOL, name=f"row loss {b}x{e}")
    assert loss == pytest.approx(want_loss, abs=ATOL)
    want_dz = ref.cosine_loss_bwd(z, t)
    # |dz_b| <= 2 scale / ||z_b||: errors are relative to that bound (the aligned row's own
    # gradient is a cancellation, ~0, and only f32 noise of that size remains).
    bound = 2.0 / b / float(np.linalg.norm(z.astype(np.float64), axis=1).min())
    assert_close(dz, want_dz, atol=2e-6 * bound, rtol=1e-4, name=f"dz {b}x{e}")


def test_extreme_magnitudes_and_zero_targets(device) -> None:
    # 1e25 would overflow a naive sum of squares, 1e-25 underflow it; a zero target row has
    # cos 0 (loss 1) and no gradient.
    b, e = 4, 67
    rng = np.random.default_rng(11)
    z = rng.standard_normal((b, e)).astype(np.float32)
    t = rng.standard_normal((b, e)).astype(np.float32)
    z[0] *= np.float32(1e25)
    t[1] *= np.float32(1e-25)
    z[2] *= np.float32(1e-20)
    t[3] = 0.0
    rows, dz, loss = _cosine(device, z, t, 0.25)
    assert np.isfinite(rows).all() and np.isfinite(dz).all()
    want_rows, want_loss = ref.cosine_loss_fwd(z, t, scale=0.25)
    assert loss == pytest.approx(want_loss, abs=ATOL)
    assert_close(rows, want_rows, atol=ATOL, rtol=RTOL, name="row loss extremes")
    assert rows[3] == pytest.approx(1.0) and not dz[3].any()
    want_dz = ref.cosine_loss_bwd(z, t, scale=0.25)
    for row in range(b):  # the rows' gradients differ by 40 orders of magnitude
        scale = float(np.abs(want_dz[row]).max()) or 1.0
        assert_close(dz[row], want_dz[row], atol=2e-6 * scale, rtol=1e-4, name=f"dz row {row}")


@pytest.mark.parametrize(("b", "d"), [(1, 1), (3, 63), (5, 65), (7, 131)])
def test_centre_matches_reference(device, b: int, d: int) -> None:
    rng = np.random.default_rng(d)
    pooled = rng.standard_normal((b, d)).astype(np.float32)
    mu = rng.standard_normal(d).astype(np.float32)
    bp, bm = device.upload(pooled), device.upload(mu)
    out = device.buffer(4 * b * d)
    device.submit([EmbedLoss(device).centre(bp, bm, out, b, d)])
    got = read_f32(device, out, b * d).reshape(b, d)
    device.destroy(bp, bm, out)
    assert_close(got, ref.centre_fwd(pooled, mu), atol=0, rtol=0, name=f"centre {b}x{d}")


def test_reference_backward_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    b, seq_len, d, e = 3, 4, 5, 6
    hidden = rng.standard_normal((b, seq_len, d))
    lengths = np.array([4, 1, 2])
    mu = rng.standard_normal(d) * 0.3
    head = rng.standard_normal((e, d))
    t = rng.standard_normal((b, e))

    # The pooled vector is the L2-normalised mean, as the package's head takes it.
    def loss(h: np.ndarray, w: np.ndarray) -> float:
        return ref.embed_loss_fwd(pool_ref.pool_fwd(h, lengths), mu, w, t)

    dpooled, dhead = ref.embed_loss_bwd(pool_ref.pool_fwd(hidden, lengths), mu, head, t)
    dhidden = pool_ref.pool_bwd(hidden, lengths, dpooled)
    assert_close(
        dhidden,
        finite_difference(lambda h: loss(h, head), hidden),
        atol=1e-8,
        rtol=1e-6,
        name="dhidden",
    )
    assert_close(
        dhead, finite_difference(lambda w: loss(hidden, w), head), atol=1e-8, rtol=1e-6, name="dW"
    )
    assert not dhidden[1, 1:].any() and not dhidden[2, 2:].any(), "padding gets no gradient"
    z = rng.standard_normal((b, e))
    assert_close(
        ref.cosine_loss_bwd(z, t, scale=0.5),
        finite_difference(lambda x: ref.cosine_loss_fwd(x, t, scale=0.5)[1], z),
        atol=1e-8,
        rtol=1e-6,
        name="dz",
    )


def test_rejects_bad_arguments(device) -> None:
    with pytest.raises(ConfigError, match="power of two"):
        EmbedLoss(device, workgroup_size=48)
    small = device.buffer(16)
    with pytest.raises(ShapeError, match="holds 4 f32"):
        EmbedLoss(device).cosine(small, small, small, small, 1, 5, 1.0)
    with pytest.raises(ShapeError, match="eps > 0"):
        EmbedLoss(device).cosine(small, small, small, small, 1, 1, 1.0, eps=0.0)
    with pytest.raises(ShapeError, match="B, D >= 1"):
        EmbedLoss(device).centre(small, small, small, 0, 1)


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.embed_loss:EmbedLoss"
    cases = []
    for b, e in [(3, 65), (1, 1)]:
        rng = np.random.default_rng(7 + e)
        z = rng.standard_normal((b, e)).astype(np.float32)
        t = rng.standard_normal((b, e)).astype(np.float32)
        rows, _ = ref.cosine_loss_fwd(z, t)
        cases.append(
            KernelCase(
                f"embed_loss.cosine {b}x{e}",
                launcher,
                "cosine",
                [{"buf": "z"}, {"buf": "t"}, {"buf": "rows"}, {"buf": "dz"}, b, e, 1.0 / b],
                {
                    "z": z,
                    "t": t,
                    "rows": np.zeros(b, np.float32),
                    "dz": np.zeros((b, e), np.float32),
                },
                {"rows": rows.astype(np.float32), "dz": ref.cosine_loss_bwd(z, t)},
                ATOL,
                1e-4,
            )
        )
    b, d = 3, 65
    rng = np.random.default_rng(3)
    pooled = rng.standard_normal((b, d)).astype(np.float32)
    mu = rng.standard_normal(d).astype(np.float32)
    cases.append(
        KernelCase(
            f"embed_loss.centre {b}x{d}",
            launcher,
            "centre",
            [{"buf": "pooled"}, {"buf": "mu"}, {"buf": "out"}, b, d],
            {"pooled": pooled, "mu": mu, "out": np.zeros((b, d), np.float32)},
            {"out": ref.centre_fwd(pooled, mu)},
            0.0,
            0.0,
        )
    )
    return cases
