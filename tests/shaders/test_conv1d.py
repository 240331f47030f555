"""conv1d.wgsl against its numpy reference (and torch's semantics) on wgpu-py."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ShapeError
from evermind.kernels.conv1d import Conv1d
from evermind.ops import conv1d as ref
from tests.conftest import read_f32
from tests.numerics import assert_close, finite_difference

# (B, L, D): ragged L (1, 5, 129, 1024) and D around the WG of 256 (1, 3, 255, 257) so both
# the flat grids and the (channel, chunk) grid have partial workgroups; L = 129 and 1024
# make B*L cross chunk boundaries (64 rows) mid-sequence.
SHAPES = [(1, 1, 3), (3, 5, 257), (2, 129, 255), (2, 1024, 1)]
# y and dx sum K <= 4 products: a few ulp.
ATOL, RTOL = 2e-6, 1e-5
# dw/db sum B*L <= 2048 products of N(0, 1) in f32: error ~ sqrt(B*L) ulp of |sum| ~ 45.
DW_ATOL, DW_RTOL = 1e-4, 1e-5


def _inputs(batch: int, length: int, d: int, taps: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, length, d)).astype(np.float32)
    w = (rng.standard_normal((d, 1, taps)) / np.sqrt(taps)).astype(np.float32)
    b = rng.standard_normal(d).astype(np.float32)
    gy = rng.standard_normal((batch, length, d)).astype(np.float32)
    return x, w, b, gy


def _run(device, x, w, b, gy, *, x_full=None, stride=None, offset=0, init=None, accumulate=False):
    """Runs forward then backward; returns y, dx (in x's buffer layout), dw, db."""
    batch, length, d = gy.shape
    taps = w.shape[-1]
    conv = Conv1d(device)
    xs = x if x_full is None else x_full
    bx, bw, bb, bgy = (
        device.upload(a, label=n) for a, n in ((xs, "x"), (w, "w"), (b, "b"), (gy, "gy"))
    )
    dx0, dw0, db0 = (
        init if init is not None else (np.zeros_like(xs), np.zeros_like(w), np.zeros_like(b))
    )
    bdx, bdw, bdb = (device.upload(a, label=n) for a, n in ((dx0, "dx"), (dw0, "dw"), (db0, "db")))
    by = device.buffer(4 * gy.size, label="y")
    dims = (batch, length, d, taps)
    device.submit(
        [
            conv.forward(bx, bw, bb, by, *dims, x_stride=stride, x_offset=offset),
            *conv.backward(
                bx,
                bw,
                bgy,
                bdx,
                bdw,
                bdb,
                *dims,
                x_stride=stride,
                x_offset=offset,
                accumulate=accumulate,
            ),
        ]
    )
    out = (
        read_f32(device, by, gy.size).reshape(gy.shape),
        read_f32(device, bdx, dx0.size).reshape(dx0.shape),
        read_f32(device, bdw, w.size).reshape(w.shape),
        read_f32(device, bdb, d),
    )
    device.destroy(bx, bw, bb, bgy, bdx, bdw, bdb, by)
    return out


@pytest.mark.parametrize("taps", [1, 2, 3, 4])
@pytest.mark.parametrize(("batch", "length", "d"), SHAPES)
def test_forward_and_backward_match_reference(
    device, batch: int, length: int, d: int, taps: int
) -> None:
    x, w, b, gy = _inputs(batch, length, d, taps, seed=batch * 10_000 + length * 10 + taps)
    y, dx, dw, db = _run(device, x, w, b, gy)
    rdx, rdw, rdb = ref.conv1d_bwd(x, w, gy)
    tag = f"B={batch} L={length} D={d} K={taps}"
    assert_close(y, ref.conv1d_fwd(x, w, b), atol=ATOL, rtol=RTOL, name=f"y {tag}")
    assert_close(dx, rdx, atol=ATOL, rtol=RTOL, name=f"dx {tag}")
    assert_close(dw, rdw, atol=DW_ATOL, rtol=DW_RTOL, name=f"dw {tag}")
    assert_close(db, rdb, atol=DW_ATOL, rtol=DW_RTOL, name=f"db {tag}")


def test_strided_x_and_accumulation(device) -> None:
    """x as the first half of a (B, L, 2D) in_proj output at an offset; grads accumulate."""
    batch, length, d, taps = 2, 37, 19, 4
    x, w, b, gy = _inputs(batch, length, d, taps, seed=3)
    rng = np.random.default_rng(4)
    offset, stride = 5, 2 * d
    x_full = rng.standard_normal(offset + batch * length * stride).astype(np.float32)
    view = x_full[offset:].reshape(batch, length, stride)
    view[..., :d] = x
    init = (
        rng.standard_normal(x_full.shape).astype(np.float32),
        rng.standard_normal(w.shape).astype(np.float32),
        rng.standard_normal(d).astype(np.float32),
    )
    y, dx_full, dw, db = _run(
        device, x, w, b, gy, x_full=x_full, stride=stride, offset=offset, init=init, accumulate=True
    )
    rdx, rdw, rdb = ref.conv1d_bwd(x, w, gy)
    assert_close(y, ref.conv1d_fwd(x, w, b), atol=ATOL, rtol=RTOL, name="y strided")
    want_dx = init[0].copy()
    want_dx[offset:].reshape(batch, length, stride)[..., :d] += rdx
    assert_close(dx_full, want_dx, atol=ATOL, rtol=RTOL, name="dx strided (z columns untouched)")
    assert_close(dw, init[1] + rdw, atol=DW_ATOL, rtol=DW_RTOL, name="dw accumulated")
    assert_close(db, init[2] + rdb, atol=DW_ATOL, rtol=DW_RTOL, name="db accumulated")


def test_backward_is_deterministic(device) -> None:
    x, w, b, gy = _inputs(3, 129, 65, 4, seed=8)
    first = _run(device, x, w, b, gy)
    second = _run(device, x, w, b, gy)
    for name, one, two in zip(("y", "dx", "dw", "db"), first, second, strict=True):
        assert np.array_equal(one.view(np.uint32), two.view(np.uint32)), f"{name} differs"


def test_extreme_inputs(device) -> None:
    x, w, b, gy = _inputs(2, 9, 5, 4, seed=12)
    x[0, :, 0] = 1e18  # products ~1e18: far from f32 overflow, relative error only
    x[1, :, 1] = 1e-30  # denormal-range products may flush to zero: absolute error tiny
    x[0, 3, 2] = -3e5
    y, dx, dw, db = _run(device, x, w, b, gy)
    rdx, rdw, rdb = ref.conv1d_bwd(x, w, gy)
    for name, got in (("y", y), ("dx", dx), ("dw", dw), ("db", db)):
        assert np.isfinite(got).all(), f"{name} not finite"
    assert_close(y, ref.conv1d_fwd(x, w, b), atol=ATOL, rtol=RTOL, name="y extremes")
    assert_close(dx, rdx, atol=ATOL, rtol=RTOL, name="dx extremes")
    assert_close(dw, rdw, atol=DW_ATOL, rtol=DW_RTOL, name="dw extremes")
    assert_close(db, rdb, atol=DW_ATOL, rtol=DW_RTOL, name="db extremes")


def test_bad_arguments_raise(device) -> None:
    conv = Conv1d(device)
    buf = device.buffer(4 * 64, label="buf")
    with pytest.raises(ShapeError, match="d_conv"):
        conv.forward(buf, buf, buf, buf, 1, 4, 4, 9)
    with pytest.raises(ShapeError, match="x_stride"):
        conv.forward(buf, buf, buf, buf, 1, 4, 4, 4, x_stride=3)
    with pytest.raises(ShapeError, match="holds 64 f32"):
        conv.forward(buf, buf, buf, buf, 2, 8, 5, 4)


def test_reference_matches_torch_conv1d() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is the second reference (test extra)")
    x, w, b, gy = _inputs(2, 11, 6, 3, seed=13)
    x64, w64, b64 = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
    # torch is channels-first (B, D, L); Mamba runs conv1d(padding=K-1) and keeps the first L.
    y_t = torch.nn.functional.conv1d(x64.transpose(1, 2), w64, b64, padding=2, groups=6)[..., :11]
    y_t = y_t.transpose(1, 2)
    y_t.backward(torch.tensor(gy, dtype=torch.float64))
    assert_close(
        ref.conv1d_fwd(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)),
        y_t.detach().numpy(),
        atol=1e-12,
        rtol=1e-12,
        name="ref vs torch y",
    )
    rdx, rdw, rdb = ref.conv1d_bwd(
        x.astype(np.float64), w.astype(np.float64), gy.astype(np.float64)
    )
    assert_close(rdx, x64.grad.numpy(), atol=1e-12, rtol=1e-12, name="ref vs torch dx")
    assert_close(rdw, w64.grad.numpy(), atol=1e-12, rtol=1e-12, name="ref vs torch dw")
    assert_close(rdb, b64.grad.numpy(), atol=1e-12, rtol=1e-12, name="ref vs torch db")


def test_reference_backward_matches_finite_differences() -> None:
    rng = np.random.default_rng(14)
    x = rng.standard_normal((2, 5, 3))
    w = rng.standard_normal((3, 1, 4))
    b = rng.standard_normal(3)
    gy = rng.standard_normal((2, 5, 3))
    dx, dw, db = ref.conv1d_bwd(x, w, gy)
    assert_close(
        dx,
        finite_difference(lambda v: float(np.sum(gy * ref.conv1d_fwd(v, w, b))), x),
        atol=1e-7,
        rtol=1e-6,
        name="dx vs FD",
    )
    assert_close(
        dw,
        finite_difference(lambda v: float(np.sum(gy * ref.conv1d_fwd(x, v, b))), w),
        atol=1e-7,
        rtol=1e-6,
        name="dw vs FD",
    )
    assert_close(
        db,
        finite_difference(lambda v: float(np.sum(gy * ref.conv1d_fwd(x, w, v))), b),
        atol=1e-7,
        rtol=1e-6,
        name="db vs FD",
    )


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.conv1d:Conv1d"
    batch, length, d, taps = 2, 67, 33, 4
    x, w, b, gy = _inputs(batch, length, d, taps, seed=90)
    dx, dw, db = ref.conv1d_bwd(x, w, gy)
    dims = [batch, length, d, taps]
    return [
        KernelCase(
            "conv1d.forward",
            launcher,
            "forward",
            [{"buf": "x"}, {"buf": "w"}, {"buf": "b"}, {"buf": "y"}, *dims],
            {"x": x, "w": w, "b": b, "y": np.zeros_like(x)},
            {"y": ref.conv1d_fwd(x, w, b)},
            ATOL,
            RTOL,
        ),
        KernelCase(
            "conv1d.backward",
            launcher,
            "backward",
            [
                {"buf": "x"},
                {"buf": "w"},
                {"buf": "gy"},
                {"buf": "dx"},
                {"buf": "dw"},
                {"buf": "db"},
                *dims,
            ],
            {
                "x": x,
                "w": w,
                "gy": gy,
                "dx": np.zeros_like(x),
                "dw": np.zeros_like(w),
                "db": np.zeros_like(b),
            },
            {"dx": dx, "dw": dw, "db": db},
            DW_ATOL,
            DW_RTOL,
        ),
    ]


def test_forward_past_the_workgroup_fold(device) -> None:
    """B*L*D = 16,778,240 > 65,535 * 256: the flat grid folds into 2-D."""
    batch, length, d, taps = 1, 16385, 1024, 4
    rng = np.random.default_rng(15)
    x = rng.standard_normal((batch, length, d)).astype(np.float32)
    w = rng.standard_normal((d, 1, taps)).astype(np.float32)
    b = rng.standard_normal(d).astype(np.float32)
    conv = Conv1d(device)
    bx, bw, bb = (
        device.upload(x, label="x"),
        device.upload(w, label="w"),
        device.upload(b, label="b"),
    )
    by = device.buffer(4 * x.size, label="y")
    device.submit([conv.forward(bx, bw, bb, by, batch, length, d, taps)])
    got = read_f32(device, by).reshape(x.shape)
    device.destroy(bx, bw, bb, by)
    assert_close(got, ref.conv1d_fwd(x, w, b), atol=ATOL, rtol=RTOL, name="y folded grid")
