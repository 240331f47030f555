"""matmul.wgsl against its numpy reference on wgpu-py (lavapipe in CI)."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.kernels.matmul import Matmul
from evermind.ops import matmul as ref
from tests.conftest import read_f32
from tests.numerics import assert_close, finite_difference

# Awkward sizes around the 8-wide register tile and the 64 x 128 workgroup tile: 1, 3,
# WG tile +-1, a prime. Each (M, N, K) row uses every size in every position at least once
# without running the full 8^3 product on a 2-core software adapter.
SHAPES = [
    (1, 1, 1),
    (3, 65, 1),
    (63, 3, 129),
    (65, 127, 3),
    (127, 129, 63),
    (129, 257, 65),
    (257, 131, 127),
    (131, 63, 257),
    (1, 131, 131),
    (257, 1, 65),
    (65, 257, 1),
    (129, 129, 129),
]
# Model shapes of the nano preset (B*L = 512 tokens): in_proj, x_proj, dt_proj, out_proj and
# the tied LM head, as (M, N, K) of the forward Y = X·Wᵀ.
MODEL_SHAPES = [(512, 512, 128), (512, 40, 256), (512, 256, 8), (512, 128, 256), (512, 4096, 128)]
# Sizes divisible by 4 (the vectorised entry points' condition) around the same edges: one
# vec4, WG tile +-4, a run past a multiple of 8 columns, K = 4 (one vec4 of k).
VECTOR_SHAPES = [(4, 4, 4), (36, 132, 20), (68, 124, 132), (132, 260, 12), (60, 4, 68), (8, 8, 1)]
MODES = {
    "NT (linear fwd)": (False, True),
    "NN (input grad)": (False, False),
    "TN (weight grad)": (True, False),
}


def tolerance(k: int, scale: float = 1.0) -> float:
    """atol for a length-K f32 dot product whose products have RMS ``scale``.

    The kernel sums K products sequentially in f32 (fma); with partial sums of size
    ~sqrt(K)·scale the accumulated rounding error grows like K·ε·scale (ε = 6e-8), and the
    maximum over many outputs is a few times that. 1e-6·K·scale is ~16·K·ε·scale: a few
    times the observed worst case at every size we test, and far below any real bug.
    """
    return 1e-6 * k * scale + 1e-7


def _operands(m: int, n: int, k: int, trans_a: bool, trans_b: bool, seed: int):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    return a, b


def _run(device, mm, a, b, m, n, k, **kw) -> np.ndarray:
    ba, bb = device.upload(a, label="a"), device.upload(b, label="b")
    bc = device.buffer(4 * m * n, label="c")
    device.submit([mm.matmul(ba, bb, bc, m, n, k, **kw)])
    out = read_f32(device, bc, m * n).reshape(m, n)
    device.destroy(ba, bb, bc)
    return out


@pytest.mark.parametrize("mode", list(MODES))
def test_awkward_shapes_match_reference(device, mode: str) -> None:
    trans_a, trans_b = MODES[mode]
    mm = Matmul(device)
    for m, n, k in SHAPES:
        a, b = _operands(m, n, k, trans_a, trans_b, seed=m * 7 + n * 3 + k)
        got = _run(device, mm, a, b, m, n, k, trans_a=trans_a, trans_b=trans_b)
        want = ref.matmul_fwd(a, b, trans_a=trans_a, trans_b=trans_b)
        assert_close(got, want, atol=tolerance(k), rtol=1e-6, name=f"{mode} {m}x{n}x{k}")


@pytest.mark.parametrize("mode", list(MODES))
def test_vector_loads_match_reference_and_scalar_bits(device, mode: str) -> None:
    # The vectorised entry points run main's fmas in main's order: same bits, not just close.
    trans_a, trans_b = MODES[mode]
    scalar, vector = Matmul(device, vector_loads=False), Matmul(device, vector_loads=True)
    used = set()
    for m, n, k in VECTOR_SHAPES:
        a, b = _operands(m, n, k, trans_a, trans_b, seed=m + 5 * n + 11 * k)
        kw = {"trans_a": trans_a, "trans_b": trans_b}
        got = _run(device, vector, a, b, m, n, k, **kw)
        want = ref.matmul_fwd(a, b, trans_a=trans_a, trans_b=trans_b)
        assert_close(got, want, atol=tolerance(k), rtol=1e-6, name=f"vec4 {mode} {m}x{n}x{k}")
        same = _run(device, scalar, a, b, m, n, k, **kw)
        assert np.array_equal(got.view(np.uint32), same.view(np.uint32)), f"{mode} {m}x{n}x{k}"
        used.add(vector.entry_point(m, n, k, trans_a, trans_b))
        assert scalar.entry_point(m, n, k, trans_a, trans_b) == "main"
    assert used - {"main"}, f"{mode}: no vectorised entry point ran"


def test_vector_entry_points_need_divisible_sizes(device) -> None:
    mm = Matmul(device, vector_loads=True)
    assert mm.entry_point(5, 7, 8, False, True) == "main_nt_k4"
    assert mm.entry_point(5, 7, 9, False, True) == "main"
    assert mm.entry_point(5, 8, 8, False, False) == "main_nn_v4"
    assert mm.entry_point(5, 7, 8, False, False) == "main"
    assert mm.entry_point(8, 8, 3, True, False) == "main_tn_v4"
    assert mm.entry_point(6, 8, 3, True, False) == "main"
    assert Matmul(device).vector_loads == device.is_cpu_adapter


@pytest.mark.parametrize("vector_loads", [False, True])
@pytest.mark.parametrize(("m", "n", "k"), MODEL_SHAPES)
def test_model_shapes_forward_and_backward(
    device, m: int, n: int, k: int, vector_loads: bool
) -> None:
    rng = np.random.default_rng(m + n + k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    dy = rng.standard_normal((m, n)).astype(np.float32)
    bx, bw, bbias, bdy = (
        device.upload(v, label=name) for v, name in ((x, "x"), (w, "w"), (bias, "bias"), (dy, "dy"))
    )
    y, dx, dw = (
        device.buffer(4 * size, label=name)
        for size, name in ((m * n, "y"), (m * k, "dx"), (n * k, "dw"))
    )
    mm = Matmul(device, vector_loads=vector_loads)
    device.submit(
        [
            mm.linear(bx, bw, y, m, k, n, bias=bbias),
            mm.linear_bwd_input(bdy, bw, dx, m, k, n),
            mm.linear_bwd_weight(bdy, bx, dw, m, k, n),
        ]
    )
    rdx, rdw, _ = ref.linear_bwd(x, w, dy)
    w_rms = float(np.sqrt(np.mean(w.astype(np.float64) ** 2)))
    assert_close(
        read_f32(device, y, m * n).reshape(m, n),
        ref.linear_fwd(x, w, bias),
        atol=tolerance(k, w_rms) + 1e-6,
        rtol=1e-6,
        name=f"Y {m}x{n}x{k}",
    )
    assert_close(
        read_f32(device, dx, m * k).reshape(m, k),
        rdx,
        atol=tolerance(n, w_rms),
        rtol=1e-6,
        name=f"dX {m}x{k}",
    )
    assert_close(
        read_f32(device, dw, n * k).reshape(n, k),
        rdw,
        atol=tolerance(m),
        rtol=1e-6,
        name=f"dW {n}x{k}",
    )
    device.destroy(bx, bw, bbias, bdy, y, dx, dw)


@pytest.mark.parametrize(("m", "n", "k"), [(65, 131, 63), (64, 132, 63)])
def test_accumulate_adds_into_output(device, m: int, n: int, k: int) -> None:
    # The tied embedding: dW gets the LM head's contribution, then the embedding's.
    # The second shape runs main_tn_v4 where vector loads are on.
    a, b = _operands(m, n, k, True, False, seed=5)
    start = np.random.default_rng(6).standard_normal((m, n)).astype(np.float32)
    ba, bb, bc = device.upload(a), device.upload(b), device.upload(start)
    mm = Matmul(device, vector_loads=True)
    step = mm.matmul(ba, bb, bc, m, n, k, trans_a=True, accumulate=True)
    device.submit([step, step])
    once = ref.matmul_fwd(a, b, trans_a=True)
    want = (start.astype(np.float64) + 2 * once.astype(np.float64)).astype(np.float32)
    assert_close(
        read_f32(device, bc, m * n).reshape(m, n),
        want,
        atol=2 * tolerance(k),
        rtol=1e-6,
        name="accumulate twice",
    )


def test_extreme_magnitudes_stay_finite(device) -> None:
    # Entries of 1e4 and 1e-4 mixed: products span 1e-8..1e8; nothing may overflow or be lost
    # beyond the scaled tolerance.
    m, n, k = 63, 65, 129
    rng = np.random.default_rng(11)
    a = (rng.standard_normal((m, k)) * np.where(rng.random((m, k)) < 0.5, 1e4, 1e-4)).astype(
        np.float32
    )
    b = (rng.standard_normal((n, k)) * 1e4).astype(np.float32)
    got = _run(device, Matmul(device), a, b, m, n, k, trans_b=True)
    assert np.isfinite(got).all()
    scale = float(np.sqrt(np.mean(a.astype(np.float64) ** 2) * np.mean(b.astype(np.float64) ** 2)))
    assert_close(
        got,
        ref.matmul_fwd(a, b, trans_b=True),
        atol=tolerance(k, scale),
        rtol=1e-6,
        name="extreme magnitudes",
    )


def test_rejects_bad_sizes(device) -> None:
    mm = Matmul(device)
    small = device.buffer(16, label="small")
    with pytest.raises(ShapeError, match="holds 4 f32"):
        mm.matmul(small, small, small, 3, 3, 3)
    with pytest.raises(ShapeError, match="M >= 1"):
        mm.matmul(small, small, small, 0, 1, 1)
    with pytest.raises(ConfigError, match="at most 256"):
        Matmul(device, workgroup=(32, 16))


def test_reference_backward_matches_finite_differences() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4))
    w = rng.standard_normal((5, 4))
    bias = rng.standard_normal(5)
    probe = rng.standard_normal((3, 5))  # L = sum(probe * Y), so dY = probe

    def loss(x_: np.ndarray, w_: np.ndarray, b_: np.ndarray) -> float:
        return float(np.sum(probe * (x_ @ w_.T + b_)))

    dx, dw, db = ref.linear_bwd(
        x.astype(np.float32), w.astype(np.float32), probe.astype(np.float32)
    )
    assert_close(
        dx,
        finite_difference(lambda v: loss(v, w, bias), x),
        atol=1e-5,
        rtol=1e-5,
        name="dX finite differences",
    )
    assert_close(
        dw,
        finite_difference(lambda v: loss(x, v, bias), w),
        atol=1e-5,
        rtol=1e-5,
        name="dW finite differences",
    )
    assert_close(
        db,
        finite_difference(lambda v: loss(x, w, v), bias),
        atol=1e-5,
        rtol=1e-5,
        name="dbias finite differences",
    )


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""

    launcher = "evermind.kernels.matmul:Matmul"
    cases = []
    # Odd sizes run main; sizes divisible by 4 run the vectorised entry points.
    for (m, n, k), vector_loads in (((33, 67, 29), False), ((36, 68, 28), True)):
        cases += _linear_cases(launcher, m, n, k, vector_loads)
    return cases


def _linear_cases(launcher: str, m: int, n: int, k: int, vector_loads: bool) -> list:
    from tests.kernel_cases import KernelCase

    rng = np.random.default_rng(42)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    dy = rng.standard_normal((m, n)).astype(np.float32)
    start = rng.standard_normal((n, k)).astype(np.float32)
    dx, dw, _ = ref.linear_bwd(x, w, dy)
    tol = tolerance(max(m, n, k))
    return [
        KernelCase(
            f"matmul.linear {m}x{n}x{k} vector_loads={vector_loads}",
            launcher,
            "linear",
            [{"buf": "x"}, {"buf": "w"}, {"buf": "y"}, m, k, n, {"buf": "bias"}],
            {"x": x, "w": w, "bias": bias, "y": np.zeros((m, n), np.float32)},
            {"y": ref.linear_fwd(x, w, bias)},
            tol,
            1e-6,
            ctor={"vector_loads": vector_loads},
        ),
        KernelCase(
            f"matmul.linear_bwd_input {m}x{n}x{k} vector_loads={vector_loads}",
            launcher,
            "linear_bwd_input",
            [{"buf": "dy"}, {"buf": "w"}, {"buf": "dx"}, m, k, n],
            {"dy": dy, "w": w, "dx": np.zeros((m, k), np.float32)},
            {"dx": dx},
            tol,
            1e-6,
            ctor={"vector_loads": vector_loads},
        ),
        KernelCase(
            f"matmul.linear_bwd_weight_accumulate {m}x{n}x{k} vector_loads={vector_loads}",
            launcher,
            "linear_bwd_weight",
            [{"buf": "dy"}, {"buf": "x"}, {"buf": "dw"}, m, k, n, True],
            {"dy": dy, "x": x, "dw": start},
            {"dw": dw + start},
            2 * tol,
            1e-6,
            ctor={"vector_loads": vector_loads},
        ),
    ]
