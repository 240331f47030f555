"""rmsnorm.wgsl against its numpy reference on wgpu-py (lavapipe in CI)."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.gpu.base import is_cpu_adapter_info
from evermind.kernels.rmsnorm import RMSNorm
from evermind.ops import rmsnorm as ref
from tests.conftest import read_f32
from tests.numerics import assert_close, finite_difference

EPS = 1e-5
# D from the brief (1, 3, 127, 128, 129, 257, 512): WG-1, WG, WG+1 at WG 128 and 2WG+-1 at
# the default WG 64, which the main test runs both; M = 1, 5 and the nano
# model's B*L = 512 (which spans 16 dw chunks of 32 rows).
DS = [1, 3, 127, 128, 129, 257, 512]
MS = [1, 5, 512]
# Forward: f32 sums of D <= 512 squares and inverseSqrt (2 ulp in WGSL) give a few ulp.
FWD_ATOL, FWD_RTOL = 1e-6, 2e-5
# dx subtracts two O(|g|) terms (g - xhat*mean), so its error is absolute in |g| ~ 1:
# rtol alone would fail where dx cancels to ~0.
DX_ATOL, DX_RTOL = 2e-5, 1e-4
# dw sums M <= 512 products of O(1): f32 accumulation error ~ sqrt(M) ulp of the magnitude.
DW_ATOL, DW_RTOL = 5e-5, 5e-5
# Both strategies of the forward and dx: a workgroup per row (tree), an invocation per row.
STRATEGIES = ["tree", "row_serial"]


def _inputs(m: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, d)) * 2).astype(np.float32)
    w = (1 + 0.3 * rng.standard_normal(d)).astype(np.float32)
    gy = rng.standard_normal((m, d)).astype(np.float32)
    return x, w, gy


def _run(
    device,
    x: np.ndarray,
    w: np.ndarray,
    gy: np.ndarray,
    dx0: np.ndarray | None = None,
    dw0: np.ndarray | None = None,
    accumulate: bool = False,
    workgroup_size: int = 64,
    strategy: str = "tree",
):
    m, d = x.shape
    norm = RMSNorm(device, workgroup_size=workgroup_size, strategy=strategy)
    assert norm.strategy == strategy
    bx, bw, bgy = (
        device.upload(x, label="x"),
        device.upload(w, label="w"),
        device.upload(gy, label="gy"),
    )
    by, brstd = device.buffer(4 * m * d, label="y"), device.buffer(4 * m, label="rstd")
    bdx = device.upload(dx0 if dx0 is not None else np.zeros((m, d), np.float32), label="dx")
    bdw = device.upload(dw0 if dw0 is not None else np.zeros(d, np.float32), label="dw")
    device.submit(
        [
            norm.forward(bx, bw, by, brstd, m, d, EPS),
            *norm.backward(bx, bw, brstd, bgy, bdx, bdw, m, d, accumulate),
        ]
    )
    out = (
        read_f32(device, by, m * d).reshape(m, d),
        read_f32(device, brstd, m),
        read_f32(device, bdx, m * d).reshape(m, d),
        read_f32(device, bdw, d),
    )
    device.destroy(bx, bw, bgy, by, brstd, bdx, bdw)
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("workgroup_size", [64, 128])
@pytest.mark.parametrize("m", MS)
@pytest.mark.parametrize("d", DS)
def test_forward_and_backward_match_reference(
    device, m: int, d: int, workgroup_size: int, strategy: str
) -> None:
    x, w, gy = _inputs(m, d, seed=1000 * m + d)
    y, rstd, dx, dw = _run(device, x, w, gy, workgroup_size=workgroup_size, strategy=strategy)
    ry, rrstd = ref.rmsnorm_fwd(x, w, EPS)
    rdx, rdw = ref.rmsnorm_bwd(x, w, gy, EPS)
    assert_close(y, ry, atol=FWD_ATOL, rtol=FWD_RTOL, name=f"y M={m} D={d}")
    assert_close(rstd, rrstd, atol=0, rtol=FWD_RTOL, name=f"rstd M={m} D={d}")
    assert_close(dx, rdx, atol=DX_ATOL, rtol=DX_RTOL, name=f"dx M={m} D={d}")
    assert_close(dw, rdw, atol=DW_ATOL, rtol=DW_RTOL, name=f"dw M={m} D={d}")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_backward_accumulates_and_is_deterministic(device, strategy: str) -> None:
    m, d = 37, 129
    x, w, gy = _inputs(m, d, seed=5)
    rng = np.random.default_rng(6)
    dx0 = rng.standard_normal((m, d)).astype(np.float32)
    dw0 = rng.standard_normal(d).astype(np.float32)
    _, _, dx, dw = _run(device, x, w, gy, dx0, dw0, accumulate=True, strategy=strategy)
    rdx, rdw = ref.rmsnorm_bwd(x, w, gy, EPS)
    assert_close(dx, dx0 + rdx, atol=DX_ATOL, rtol=DX_RTOL, name="dx accumulated")
    assert_close(dw, dw0 + rdw, atol=DW_ATOL, rtol=DW_RTOL, name="dw accumulated")
    again = _run(device, x, w, gy, dx0, dw0, accumulate=True, strategy=strategy)
    assert np.array_equal(again[2].view(np.uint32), dx.view(np.uint32)), "dx differs between runs"
    assert np.array_equal(again[3].view(np.uint32), dw.view(np.uint32)), "dw differs between runs"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_extreme_rows_stay_finite(device, strategy: str) -> None:
    d = 129
    rows = [
        np.zeros(d),  # rstd = 1/sqrt(eps): y = 0, no division by zero
        np.full(d, 1e15),  # x^2 = 1e30: still inside f32
        np.full(d, 1e-20),  # x^2 underflows (maybe flushed to zero): eps dominates
        np.r_[1e6, np.full(d - 1, 1e-3)],  # one spike dominates the mean
        np.r_[-3e4, np.full(d - 1, 2.0)],
    ]
    x = np.array(rows, dtype=np.float32)
    m = x.shape[0]
    _, w, gy = _inputs(m, d, seed=9)
    y, rstd, dx, dw = _run(device, x, w, gy, strategy=strategy)
    for name, got in (("y", y), ("rstd", rstd), ("dx", dx), ("dw", dw)):
        assert np.isfinite(got).all(), f"{name} has non-finite values on extreme rows"
    ry, rrstd = ref.rmsnorm_fwd(x, w, EPS)
    rdx, rdw = ref.rmsnorm_bwd(x, w, gy, EPS)
    assert_close(y, ry, atol=FWD_ATOL, rtol=FWD_RTOL, name="y extremes")
    assert_close(rstd, rrstd, atol=0, rtol=FWD_RTOL, name="rstd extremes")
    # dx scales with rstd, which is 316 on the zero and tiny rows: scale atol with it.
    scale = np.maximum(1.0, rrstd)[:, None]
    assert_close(dx / scale, rdx / scale, atol=DX_ATOL, rtol=DX_RTOL, name="dx extremes")
    assert_close(dw, rdw, atol=DW_ATOL, rtol=DW_RTOL, name="dw extremes")


def test_reference_backward_matches_finite_differences() -> None:
    rng = np.random.default_rng(11)
    m, d = 3, 5
    x = rng.standard_normal((m, d))
    w = 1 + 0.3 * rng.standard_normal(d)
    gy = rng.standard_normal((m, d))

    def loss_x(v: np.ndarray) -> float:
        return float(np.sum(gy * ref.rmsnorm_fwd(v, w, EPS)[0]))

    def loss_w(v: np.ndarray) -> float:
        return float(np.sum(gy * ref.rmsnorm_fwd(x, v, EPS)[0]))

    dx, dw = ref.rmsnorm_bwd(x, w, gy, EPS)
    assert dx.dtype == np.float64
    assert_close(dx, finite_difference(loss_x, x), atol=1e-7, rtol=1e-6, name="dx vs FD")
    assert_close(dw, finite_difference(loss_w, w), atol=1e-7, rtol=1e-6, name="dw vs FD")


def test_bad_arguments_raise(device) -> None:
    with pytest.raises(ConfigError, match="power of two"):
        RMSNorm(device, workgroup_size=96)
    norm = RMSNorm(device)
    small = device.buffer(16, label="small")
    with pytest.raises(ShapeError, match="holds 4 f32"):
        norm.forward(small, small, small, small, 3, 4)
    with pytest.raises(ConfigError, match="eps"):
        norm.forward(small, small, small, small, 1, 1, eps=0.0)
    with pytest.raises(ConfigError, match="strategy must be one of"):
        RMSNorm(device, strategy="serial")


def test_auto_strategy_follows_the_adapter(device) -> None:
    want = "row_serial" if device.is_cpu_adapter else "tree"
    assert RMSNorm(device).strategy == want
    assert RMSNorm(device, strategy="auto").strategy == want


def test_cpu_adapter_detection() -> None:
    lavapipe = {"device": "llvmpipe (LLVM 15.0.6, 256 bits)", "adapter_type": "CPU"}
    swiftshader = {"vendor": "google", "architecture": "swiftshader", "adapter_type": ""}
    gpu = {"vendor": "nvidia", "architecture": "ampere", "adapter_type": "DiscreteGPU"}
    assert is_cpu_adapter_info(lavapipe) and is_cpu_adapter_info(swiftshader)
    assert is_cpu_adapter_info({"device": "llvmpipe"})  # no adapter type reported
    assert not is_cpu_adapter_info(gpu) and not is_cpu_adapter_info({})


def test_strategies_agree_with_each_other(device) -> None:
    # The nano shape: both strategies reduce rows in a different order, so they differ
    # only by rounding; dw comes from the same passes and must be identical.
    x, w, gy = _inputs(512, 128, seed=77)
    tree = _run(device, x, w, gy, strategy="tree")
    serial = _run(device, x, w, gy, strategy="row_serial")
    for name, a, b in zip(("y", "rstd", "dx"), tree, serial, strict=False):
        assert_close(b, a, atol=DX_ATOL, rtol=DX_RTOL, name=f"{name} row_serial vs tree")
    assert_close(serial[3], tree[3], atol=DW_ATOL, rtol=DW_RTOL, name="dw row_serial vs tree")


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.rmsnorm:RMSNorm"
    cases = []
    # Row-serial at M = WG + 6 (two workgroups, the second partly idle) and a tiny row.
    shapes = (
        ((5, 129), "tree"),
        ((3, 7), "tree"),
        ((70, 129), "row_serial"),
        ((3, 7), "row_serial"),
    )
    for (m, d), strategy in shapes:
        x, w, gy = _inputs(m, d, seed=40 + d)
        y, rstd = ref.rmsnorm_fwd(x, w, EPS)
        dx, dw = ref.rmsnorm_bwd(x, w, gy, EPS)
        zeros = np.zeros((m, d), np.float32)
        cases.append(
            KernelCase(
                f"rmsnorm.forward {strategy} M={m} D={d}",
                launcher,
                "forward",
                [{"buf": "x"}, {"buf": "w"}, {"buf": "y"}, {"buf": "rstd"}, m, d, EPS],
                {"x": x, "w": w, "y": zeros, "rstd": np.zeros(m, np.float32)},
                {"y": y, "rstd": rstd},
                FWD_ATOL,
                FWD_RTOL,
                ctor={"strategy": strategy},
            )
        )
        cases.append(
            KernelCase(
                f"rmsnorm.backward {strategy} M={m} D={d}",
                launcher,
                "backward",
                [
                    {"buf": "x"},
                    {"buf": "w"},
                    {"buf": "rstd"},
                    {"buf": "gy"},
                    {"buf": "dx"},
                    {"buf": "dw"},
                    m,
                    d,
                ],
                {
                    "x": x,
                    "w": w,
                    "rstd": rstd,
                    "gy": gy,
                    "dx": zeros,
                    "dw": np.zeros(d, np.float32),
                },
                {"dx": dx, "dw": dw},
                DX_ATOL,
                DX_RTOL,
                ctor={"strategy": strategy},
            )
        )
    return cases


# The gated variant: (M, D, group_size), group sizes 1, a prime, D itself and D / 3 (three
# groups); one M spans several dw chunks of 32 rows.
GATED_SHAPES = [(1, 1, 1), (5, 7, 7), (37, 12, 4), (70, 33, 11), (3, 64, 64)]


def _run_gated(device, m: int, d: int, size: int, seed: int):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, d)) * 2).astype(np.float32)
    z = (rng.standard_normal((m, d)) * 2).astype(np.float32)
    w = (1 + 0.3 * rng.standard_normal(d)).astype(np.float32)
    gy = rng.standard_normal((m, d)).astype(np.float32)
    rn = RMSNorm(device)
    bufs = {k: device.upload(v, label=k) for k, v in (("x", x), ("z", z), ("w", w), ("gy", gy))}
    y = device.buffer(4 * m * d, label="y")
    rstd = device.buffer(4 * m * (d // size), label="rstd")
    # Outputs start as garbage: dx and dz are overwritten.
    dx, dz = (device.upload(np.full((m, d), 7.0, np.float32), label=k) for k in ("dx", "dz"))
    dw = device.upload(np.full(d, 7.0, np.float32), label="dw")
    fwd = rn.gated_forward(bufs["x"], bufs["z"], bufs["w"], y, rstd, m, d, size, EPS)
    bwd = rn.gated_backward(
        bufs["x"], bufs["z"], bufs["w"], rstd, bufs["gy"], dx, dz, dw, m, d, size
    )
    device.submit([fwd, *bwd])
    got = [read_f32(device, b, m * d).reshape(m, d) for b in (y, dx, dz)]
    got.append(read_f32(device, dw, d))
    return (x, z, w, gy), got


@pytest.mark.parametrize("shape", GATED_SHAPES, ids=[f"M{m}D{d}S{s}" for m, d, s in GATED_SHAPES])
def test_gated_matches_reference(device, shape) -> None:
    m, d, size = shape
    (x, z, w, gy), (y, dx, dz, dw) = _run_gated(device, m, d, size, seed=m + d + size)
    want_y = ref.rmsnorm_gated_fwd(x, z, w, size, EPS)
    want_dx, want_dz, want_dw = ref.rmsnorm_gated_bwd(x, z, w, size, gy, EPS)
    assert_close(y, want_y, atol=FWD_ATOL, rtol=FWD_RTOL, name=f"gated y {shape}")
    # dz carries x * silu'(z) on top of dx's cancellation: the same absolute error in |g|.
    assert_close(dx, want_dx, atol=DX_ATOL, rtol=DX_RTOL, name=f"gated dx {shape}")
    assert_close(dz, want_dz, atol=DX_ATOL, rtol=DX_RTOL, name=f"gated dz {shape}")
    assert_close(dw, want_dw, atol=DW_ATOL, rtol=DW_RTOL, name=f"gated dw {shape}")


def test_gated_refuses_a_group_size_that_does_not_divide(device) -> None:
    rn = RMSNorm(device)
    buf = device.buffer(4 * 64, label="buf")
    with pytest.raises(ShapeError, match="groups of 5"):
        rn.gated_forward(buf, buf, buf, buf, buf, 2, 12, 5)
    with pytest.raises(ShapeError, match="groups of 0"):
        rn.gated_backward(buf, buf, buf, buf, buf, buf, buf, buf, 2, 12, 0)
