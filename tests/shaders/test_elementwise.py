"""elementwise.wgsl against its numpy reference on wgpu-py (lavapipe in CI)."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.kernels.elementwise import Elementwise
from evermind.ops import elementwise as ref
from tests.conftest import read_f32
from tests.numerics import assert_close, finite_difference

# Awkward sizes: 1, WG-1, WG+1, a prime, and one past the 65,535-workgroup fold
# (65,535 * 256 + 7) so the 2-D grid path runs.
SIZES = [1, 255, 257, 997, 65535 * 256 + 7]
# exp/log on GPUs (and lavapipe) are not correctly rounded; a few ulp of slack.
ATOL, RTOL = 1e-6, 2e-5


def _inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    return x, y, g


def _run(device, record, outputs: int, n: int) -> list[np.ndarray]:
    outs = [device.buffer(4 * n, label=f"out{i}") for i in range(outputs)]
    device.submit([record(*outs)])
    return [read_f32(device, o, n) for o in outs]


@pytest.mark.parametrize("n", SIZES)
def test_forward_ops_match_reference(device, n: int) -> None:
    x, y, _ = _inputs(n, seed=n)
    ops = Elementwise(device)
    bx, by = device.upload(x, label="x"), device.upload(y, label="y")
    (got,) = _run(device, lambda o: ops.add(bx, by, o, n), 1, n)
    assert_close(got, x + y, atol=0, rtol=0, name=f"add n={n}")
    (got,) = _run(device, lambda o: ops.mul(bx, by, o, n), 1, n)
    assert_close(got, x * y, atol=0, rtol=0, name=f"mul n={n}")
    (got,) = _run(device, lambda o: ops.silu_fwd(bx, o, n), 1, n)
    assert_close(got, ref.silu_fwd(x), atol=ATOL, rtol=RTOL, name=f"silu_fwd n={n}")
    (got,) = _run(device, lambda o: ops.softplus_fwd(bx, o, n), 1, n)
    assert_close(got, ref.softplus_fwd(x), atol=ATOL, rtol=RTOL, name=f"softplus_fwd n={n}")
    (got,) = _run(device, lambda o: ops.scale(bx, o, n, -0.5), 1, n)
    assert_close(got, -0.5 * x, atol=0, rtol=0, name=f"scale n={n}")


@pytest.mark.parametrize("n", SIZES[:4])
def test_backward_ops_match_reference(device, n: int) -> None:
    x, y, g = _inputs(n, seed=100 + n)
    ops = Elementwise(device)
    bx, by, bg = (device.upload(a, label=name) for a, name in ((x, "x"), (y, "y"), (g, "g")))
    (got,) = _run(device, lambda o: ops.silu_bwd(bx, bg, o, n), 1, n)
    assert_close(got, ref.silu_bwd(x, g), atol=ATOL, rtol=RTOL, name="silu_bwd")
    (got,) = _run(device, lambda o: ops.softplus_bwd(bx, bg, o, n), 1, n)
    assert_close(got, ref.softplus_bwd(x, g), atol=ATOL, rtol=RTOL, name="softplus_bwd")
    dx, dy = _run(device, lambda a, b: ops.mul_bwd(bx, by, bg, a, b, n), 2, n)
    rdx, rdy = ref.mul_bwd(x, y, g)
    assert_close(dx, rdx, atol=0, rtol=0, name="mul_bwd dx")
    assert_close(dy, rdy, atol=0, rtol=0, name="mul_bwd dy")


def test_accumulate_adds_into_output(device) -> None:
    n = 300
    x, y, _ = _inputs(n, seed=7)
    ops = Elementwise(device)
    bx, out = device.upload(x, label="x"), device.upload(y, label="acc")
    device.submit([ops.accumulate(bx, out, n), ops.accumulate(bx, out, n)])
    assert_close(read_f32(device, out, n), y + x + x, atol=1e-6, rtol=1e-6, name="accumulate")


def test_fill_overwrites_every_value(device) -> None:
    n = 1025
    ops = Elementwise(device)
    out = device.upload(np.arange(n, dtype=np.float32), label="out")
    device.submit([ops.fill(out, n, 0.0)])
    assert (read_f32(device, out, n) == 0.0).all()
    device.submit([ops.fill(out, n - 1, -2.5)])
    got = read_f32(device, out, n)
    assert (got[:-1] == -2.5).all() and got[-1] == 0.0


def test_extreme_inputs_stay_finite(device) -> None:
    x = np.array(
        [-1e4, -100.0, -88.8, -20.5, -1e-30, 0.0, 1e-30, 19.9, 20.0, 20.1, 88.8, 1e4],
        dtype=np.float32,
    )
    n = x.size
    ops = Elementwise(device)
    bx = device.upload(x, label="x")
    bg = device.upload(np.ones(n, np.float32), label="g")
    for name, record, want in [
        ("silu_fwd", lambda o: ops.silu_fwd(bx, o, n), ref.silu_fwd(x)),
        ("softplus_fwd", lambda o: ops.softplus_fwd(bx, o, n), ref.softplus_fwd(x)),
        (
            "silu_bwd",
            lambda o: ops.silu_bwd(bx, bg, o, n),
            ref.silu_bwd(x, np.ones(n, np.float32)),
        ),
        (
            "softplus_bwd",
            lambda o: ops.softplus_bwd(bx, bg, o, n),
            ref.softplus_bwd(x, np.ones(n, np.float32)),
        ),
    ]:
        (got,) = _run(device, record, 1, n)
        assert np.isfinite(got).all(), f"{name} produced non-finite values: {got}"
        assert_close(got, want, atol=ATOL, rtol=RTOL, name=f"{name} extremes")


@pytest.mark.parametrize(
    ("fwd", "bwd"),
    [(ref.silu_fwd, ref.silu_bwd), (ref.softplus_fwd, ref.softplus_bwd)],
)
def test_reference_backward_matches_finite_differences(fwd, bwd) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(7) * 3).astype(np.float64)
    w = rng.standard_normal(7)
    # L = sum(w * f(x)); dL/dx = bwd(x, w). References compute in float64 internally.
    numeric = finite_difference(
        lambda v: float(np.sum(w * fwd(v.astype(np.float32)).astype(np.float64))), x, eps=1e-3
    )
    analytic = bwd(x.astype(np.float32), w.astype(np.float32))
    assert_close(analytic, numeric, atol=2e-3, rtol=2e-3, name=f"{fwd.__name__} finite differences")


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    n = 257
    x, y, g = _inputs(n, seed=42)
    zeros = np.zeros(n, np.float32)
    launcher = "evermind.kernels.elementwise:Elementwise"
    return [
        KernelCase(
            "elementwise.silu_fwd",
            launcher,
            "silu_fwd",
            [{"buf": "x"}, {"buf": "out"}, n],
            {"x": x, "out": zeros},
            {"out": ref.silu_fwd(x)},
            ATOL,
            RTOL,
        ),
        KernelCase(
            "elementwise.softplus_bwd",
            launcher,
            "softplus_bwd",
            [{"buf": "x"}, {"buf": "g"}, {"buf": "out"}, n],
            {"x": x, "g": g, "out": zeros},
            {"out": ref.softplus_bwd(x, g)},
            ATOL,
            RTOL,
        ),
        KernelCase(
            "elementwise.mul_bwd",
            launcher,
            "mul_bwd",
            [{"buf": "x"}, {"buf": "y"}, {"buf": "g"}, {"buf": "dx"}, {"buf": "dy"}, n],
            {"x": x, "y": y, "g": g, "dx": zeros, "dy": zeros},
            dict(zip(("dx", "dy"), ref.mul_bwd(x, y, g), strict=True)),
            0.0,
            0.0,
        ),
    ]
