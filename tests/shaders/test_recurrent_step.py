"""recurrent_step.wgsl against its references: stepping token by token equals the parallel ops."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ShapeError
from evermind.kernels.recurrent_step import RecurrentStep
from evermind.ops import recurrent_step as ref
from evermind.ops.selective_scan import selective_scan_fwd
from tests.conftest import read_f32
from tests.numerics import assert_close

# fp32 scan tolerances of mamba's tests (rtol 6e-4, atol 2e-3): the state is carried in float32
# over up to L steps while the reference runs in float64.
ATOL, RTOL = 2e-3, 6e-4
# A single step has no accumulated state error; exp/log are a few ulp off on lavapipe.
STEP_ATOL, STEP_RTOL = 1e-5, 1e-5

# (B, L, D, N, d_conv): D = 1, WG-1, WG+1 and a prime; N in {1, 16}; d_conv 4 as Mamba, 1 and 3.
SHAPES = [(1, 7, 1, 16, 4), (2, 20, 63, 16, 4), (2, 9, 65, 1, 3), (1, 12, 67, 16, 1)]


def _inputs(
    batch: int, length: int, dim: int, n: int, d_conv: int, seed: int
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return {
        "u": rng.standard_normal((batch, length, dim)).astype(f32),  # conv input (B, L, D)
        "weight": (rng.uniform(-1, 1, (dim, 1, d_conv)) / np.sqrt(d_conv)).astype(f32),
        "bias": rng.uniform(-0.5, 0.5, dim).astype(f32),
        "delta_raw": rng.uniform(-5.0, 1.0, (batch, length, dim)).astype(f32),
        "A_log": np.log(rng.uniform(1.0, 16.0, (dim, n))).astype(f32),
        "B": rng.standard_normal((batch, length, n)).astype(f32),
        "C": rng.standard_normal((batch, length, n)).astype(f32),
        "D": rng.standard_normal(dim).astype(f32),
    }


def _decode(device, inp: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Runs conv_step then ssm_step for t = 0..L-1, recorded once and replayed."""
    batch, length, dim = inp["u"].shape
    n, d_conv = inp["A_log"].shape[1], inp["weight"].shape[2]
    buf = device.buffer
    conv_state, h = (
        buf(4 * batch * dim * d_conv, label="conv_state"),
        buf(4 * batch * dim * n, label="h"),
    )
    x_t, x_c, delta_t = (
        buf(4 * batch * dim, label="x_t"),
        buf(4 * batch * dim, label="x_c"),
        buf(4 * batch * dim, label="delta_t"),
    )
    b_t, c_t, y_t = (
        buf(4 * batch * n, label="B_t"),
        buf(4 * batch * n, label="C_t"),
        buf(4 * batch * dim, label="y_t"),
    )
    weight, bias = (
        device.upload(inp["weight"], label="weight"),
        device.upload(inp["bias"], label="bias"),
    )
    a_log, d_skip = device.upload(inp["A_log"], label="A_log"), device.upload(inp["D"], label="D")
    step = RecurrentStep(device)
    plan = device.plan("decode").add(
        [
            step.conv_step(conv_state, x_t, weight, bias, x_c, batch, dim, d_conv),
            step.ssm_step(h, x_c, delta_t, a_log, b_t, c_t, d_skip, y_t, batch, dim, n),
        ]
    )
    xs, ys = [], []
    for t in range(length):
        device.write(x_t, np.ascontiguousarray(inp["u"][:, t]))
        device.write(delta_t, np.ascontiguousarray(inp["delta_raw"][:, t]))
        device.write(b_t, np.ascontiguousarray(inp["B"][:, t]))
        device.write(c_t, np.ascontiguousarray(inp["C"][:, t]))
        plan.run()
        xs.append(read_f32(device, x_c, batch * dim).reshape(batch, dim))
        ys.append(read_f32(device, y_t, batch * dim).reshape(batch, dim))
    return np.stack(xs, axis=1), np.stack(ys, axis=1)


@pytest.mark.parametrize("shape", SHAPES, ids=[f"B{b}L{t}D{d}N{n}K{k}" for b, t, d, n, k in SHAPES])
def test_stepping_reproduces_parallel_conv_and_scan(device, shape) -> None:
    inp = _inputs(*shape, seed=sum(shape))
    x_conv, y = _decode(device, inp)
    want_x = ref.causal_conv1d_silu(inp["u"], inp["weight"], inp["bias"])
    assert_close(x_conv, want_x, atol=ATOL, rtol=RTOL, name=f"conv steps vs causal conv1d {shape}")
    # The scan reference runs on the GPU's conv output, so y isolates the SSM step's error.
    want_y, _ = selective_scan_fwd(
        x_conv, inp["delta_raw"], inp["A_log"], inp["B"], inp["C"], inp["D"]
    )
    assert_close(y, want_y, atol=ATOL, rtol=RTOL, name=f"ssm steps vs parallel scan {shape}")


def test_single_steps_match_step_references(device) -> None:
    batch, dim, n, d_conv = 2, 67, 16, 4
    rng = np.random.default_rng(3)
    f32 = np.float32
    conv_state = rng.standard_normal((batch, dim, d_conv)).astype(f32)
    x = rng.standard_normal((batch, dim)).astype(f32)
    weight = rng.standard_normal((dim, 1, d_conv)).astype(f32)
    bias = rng.standard_normal(dim).astype(f32)
    h = rng.standard_normal((batch, dim, n)).astype(f32)
    delta_raw = np.resize(np.array([30.0, -30.0, 20.5, 19.5, 0.3, -4.0], f32), (batch, dim))
    a_log = np.full((dim, n), np.log(16.0), f32)
    a_log[:, ::2] = -3.0
    b_t, c_t = (rng.standard_normal((batch, n)).astype(f32) for _ in range(2))
    d_skip = rng.standard_normal(dim).astype(f32)

    bufs = {
        k: device.upload(v, label=k)
        for k, v in {
            "conv_state": conv_state,
            "x": x,
            "weight": weight,
            "bias": bias,
            "h": h,
            "delta_raw": delta_raw,
            "A_log": a_log,
            "B_t": b_t,
            "C_t": c_t,
            "D": d_skip,
        }.items()
    }
    x_conv, y = (
        device.buffer(4 * batch * dim, label="x_conv"),
        device.buffer(4 * batch * dim, label="y"),
    )
    step = RecurrentStep(device)
    device.submit(
        [
            step.conv_step(
                bufs["conv_state"],
                bufs["x"],
                bufs["weight"],
                bufs["bias"],
                x_conv,
                batch,
                dim,
                d_conv,
            ),
            step.ssm_step(
                bufs["h"],
                bufs["x"],
                bufs["delta_raw"],
                bufs["A_log"],
                bufs["B_t"],
                bufs["C_t"],
                bufs["D"],
                y,
                batch,
                dim,
                n,
            ),
        ]
    )
    want_x, want_state = ref.conv_step(conv_state, x, weight, bias)
    want_y, want_h = ref.ssm_step(h, x, delta_raw, a_log, b_t, c_t, d_skip)
    got_state = read_f32(device, bufs["conv_state"], conv_state.size).reshape(conv_state.shape)
    assert_close(got_state, want_state, atol=0, rtol=0, name="conv_state shift")
    assert_close(
        read_f32(device, x_conv, x.size).reshape(x.shape),
        want_x,
        atol=STEP_ATOL,
        rtol=STEP_RTOL,
        name="x_conv",
    )
    got_h = read_f32(device, bufs["h"], h.size).reshape(h.shape)
    assert np.isfinite(got_h).all(), "h has non-finite values at extreme delta"
    assert_close(got_h, want_h, atol=STEP_ATOL, rtol=STEP_RTOL, name="h")
    assert_close(
        read_f32(device, y, x.size).reshape(x.shape),
        want_y,
        atol=STEP_ATOL,
        rtol=STEP_RTOL,
        name="y",
    )


# (S slots, slot list, floats per row R): R = 1, WG-1, WG+1 and a prime; lists out of order,
# a single row, every slot, a slot list that skips slots.
ROW_CASES = [(1, [0], 1), (5, [3, 0, 4], 63), (7, [6], 65), (4, [2, 3, 1, 0], 67), (9, [8, 1], 5)]


@pytest.mark.parametrize("case", ROW_CASES, ids=[f"S{s}B{len(o)}R{r}" for s, o, r in ROW_CASES])
def test_gather_then_scatter_rows_match_references(device, case) -> None:
    slots, order, row = case
    rng = np.random.default_rng(slots * 100 + row)
    states = rng.standard_normal((slots, row)).astype(np.float32)
    update = rng.standard_normal((len(order), row)).astype(np.float32)
    slot_of = np.array(order, np.uint32)
    batch = len(order)
    states_buf = device.upload(states, label="states")
    dense = device.buffer(4 * batch * row, label="dense")
    update_buf = device.upload(update, label="update")
    slot_buf = device.upload(slot_of, label="slot_of")
    step = RecurrentStep(device)
    device.submit([step.gather_rows(states_buf, slot_buf, dense, batch, row, slots)])
    got = read_f32(device, dense, batch * row).reshape(batch, row)
    assert_close(got, ref.gather_rows(states, slot_of), atol=0, rtol=0, name="gather_rows")
    device.submit([step.scatter_rows(update_buf, slot_buf, states_buf, batch, row, slots)])
    got_states = read_f32(device, states_buf, slots * row).reshape(slots, row)
    want = ref.scatter_rows(states, slot_of, update)
    assert_close(got_states, want, atol=0, rtol=0, name="scatter_rows")
    untouched = [s for s in range(slots) if s not in order]
    assert np.array_equal(got_states[untouched], states[untouched]), "other slots changed"


def test_scatter_reference_rejects_a_repeated_slot() -> None:
    with pytest.raises(ValueError, match="repeats"):
        ref.scatter_rows(np.zeros((3, 2)), np.array([1, 1]), np.ones((2, 2)))


def test_rejects_bad_sizes(device) -> None:
    step = RecurrentStep(device)
    small = device.buffer(16, label="small")
    with pytest.raises(ShapeError, match="conv_state"):
        step.conv_step(small, small, small, small, small, 1, 2, 4)
    with pytest.raises(ShapeError, match="d_state"):
        step.ssm_step(*[small] * 8, 1, 1, 0)
    with pytest.raises(ShapeError, match="exceed"):
        step.gather_rows(small, small, small, 3, 1, 2)
    with pytest.raises(ShapeError, match="rows_in"):
        step.gather_rows(small, small, small, 1, 2, 4)


def test_conv_reference_matches_numpy_convolve() -> None:
    """The causal conv reference equals np.convolve (full mode, first L outputs) per channel."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 11, 3))
    w = rng.standard_normal((3, 1, 4))
    bias = rng.standard_normal(3)
    got = ref.causal_conv1d_silu(x, w, bias)
    for d in range(3):
        # PyTorch's conv1d is a cross-correlation: flip the taps for np.convolve.
        pre = np.convolve(x[0, :, d], w[d, 0, ::-1])[:11] + bias[d]
        assert_close(
            got[0, :, d], pre / (1.0 + np.exp(-pre)), atol=1e-12, rtol=1e-12, name=f"conv d={d}"
        )


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.recurrent_step:RecurrentStep"
    batch, dim, n, d_conv = 2, 67, 16, 4
    rng = np.random.default_rng(44)
    f32 = np.float32
    conv_state = rng.standard_normal((batch, dim, d_conv)).astype(f32)
    x = rng.standard_normal((batch, dim)).astype(f32)
    weight = rng.standard_normal((dim, 1, d_conv)).astype(f32)
    bias = rng.standard_normal(dim).astype(f32)
    want_x, want_state = ref.conv_step(conv_state, x, weight, bias)
    conv_case = KernelCase(
        "recurrent_step.conv_step",
        launcher,
        "conv_step",
        [
            {"buf": "conv_state"},
            {"buf": "x"},
            {"buf": "weight"},
            {"buf": "bias"},
            {"buf": "x_conv"},
            batch,
            dim,
            d_conv,
        ],
        {
            "conv_state": conv_state,
            "x": x,
            "weight": weight,
            "bias": bias,
            "x_conv": np.zeros_like(x),
        },
        {"x_conv": want_x.astype(f32), "conv_state": want_state.astype(f32)},
        STEP_ATOL,
        STEP_RTOL,
    )

    h = rng.standard_normal((batch, dim, n)).astype(f32)
    delta_raw = rng.uniform(-5.0, 1.0, (batch, dim)).astype(f32)
    a_log = np.log(rng.uniform(1.0, 16.0, (dim, n))).astype(f32)
    b_t, c_t = (rng.standard_normal((batch, n)).astype(f32) for _ in range(2))
    d_skip = rng.standard_normal(dim).astype(f32)
    want_y, want_h = ref.ssm_step(h, x, delta_raw, a_log, b_t, c_t, d_skip)
    names = ("h", "x_c", "delta_raw", "A_log", "B_t", "C_t", "D", "y")
    ssm_case = KernelCase(
        "recurrent_step.ssm_step",
        launcher,
        "ssm_step",
        [*[{"buf": k} for k in names], batch, dim, n],
        dict(zip(names, (h, x, delta_raw, a_log, b_t, c_t, d_skip, np.zeros_like(x)), strict=True)),
        {"y": want_y.astype(f32), "h": want_h.astype(f32)},
        STEP_ATOL,
        STEP_RTOL,
    )
    slots, row = 5, 67
    states = rng.standard_normal((slots, row)).astype(f32)
    rows = rng.standard_normal((3, row)).astype(f32)
    slot_of = np.array([4, 0, 2], np.uint32)
    gather_case = KernelCase(
        "recurrent_step.gather_rows",
        launcher,
        "gather_rows",
        [{"buf": "states"}, {"buf": "slot_of"}, {"buf": "rows"}, 3, row, slots],
        {"states": states, "slot_of": slot_of, "rows": np.zeros_like(rows)},
        {"rows": ref.gather_rows(states, slot_of)},
        0.0,
        0.0,
    )
    scatter_case = KernelCase(
        "recurrent_step.scatter_rows",
        launcher,
        "scatter_rows",
        [{"buf": "rows"}, {"buf": "slot_of"}, {"buf": "states"}, 3, row, slots],
        {"rows": rows, "slot_of": slot_of, "states": states},
        {"states": ref.scatter_rows(states, slot_of, rows)},
        0.0,
        0.0,
    )
    return [conv_case, ssm_case, gather_case, scatter_case]
