"""The Mamba-2 SSD scan reference: the chunked forward equals the loop over time (float64,
awkward shapes), both match transformers' ``mamba2_chunk_scan``, and the backward and the gated
RMSNorm's backward match central finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ShapeError
from evermind.ops.rmsnorm import rmsnorm_gated_bwd, rmsnorm_gated_fwd
from evermind.ops.ssd import (
    DT_LIMIT_NONE,
    ssd_bwd,
    ssd_decode_step,
    ssd_fwd,
    ssd_scan_sequential,
)
from tests.numerics import assert_close, finite_difference


def _inputs(
    seed: int, batch: int, length: int, heads: int, head_dim: int, groups: int, d_state: int
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.normal(size=(batch, length, heads, head_dim)),
        "dt_raw": rng.normal(size=(batch, length, heads)),
        "A_log": rng.normal(scale=0.5, size=heads),
        "B": rng.normal(size=(batch, length, groups, d_state)),
        "C": rng.normal(size=(batch, length, groups, d_state)),
        "D": rng.normal(size=heads),
        "dt_bias": rng.normal(scale=0.5, size=heads),
    }


# (batch, length, heads, head_dim, groups, d_state, chunk): L not a multiple of the chunk,
# one head, several groups, a chunk longer than L, a chunk of 1.
SHAPES = [
    (1, 13, 1, 3, 1, 4, 4),
    (2, 7, 6, 2, 3, 5, 3),
    (1, 5, 4, 1, 2, 2, 8),
    (2, 6, 2, 3, 1, 3, 1),
    (3, 17, 4, 5, 4, 7, 5),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_chunked_forward_equals_the_sequential_loop(shape: tuple[int, ...]) -> None:
    *dims, chunk = shape
    args = _inputs(1, *dims)
    y_seq, states = ssd_scan_sequential(**args)
    y_chunk, chunk_states = ssd_fwd(**args, chunk_size=chunk)
    assert_close(y_chunk, y_seq, atol=1e-12, rtol=1e-11, name="y")
    length = dims[1]
    ends = [min(length, (c + 1) * chunk) - 1 for c in range(chunk_states.shape[1])]
    assert_close(chunk_states, states[:, ends], atol=1e-12, rtol=1e-11, name="chunk states")


@pytest.mark.parametrize("compute", [np.float64, np.float32], ids=["f64", "f32"])
def test_decode_step_from_raw_parameters_walks_the_sequential_scan(compute: type) -> None:
    args = _inputs(12, 2, 6, 4, 3, 2, 3)
    limit = (0.1, 2.0)
    y_seq, states = ssd_scan_sequential(**args, dt_limit=limit)
    h = np.zeros(states.shape[:1] + states.shape[2:])
    tol = 1e-12 if compute is np.float64 else 2e-5
    for t in range(6):
        y_t, h = ssd_decode_step(
            h, args["x"][:, t], args["dt_raw"][:, t], args["A_log"], args["B"][:, t],
            args["C"][:, t], args["D"], args["dt_bias"], limit, compute,
        )  # fmt: skip
        assert_close(y_t, y_seq[:, t], atol=tol, rtol=tol, name=f"y_{t}")
    assert_close(h, states[:, -1], atol=tol, rtol=tol, name="final state")


def test_dt_limit_clamps_in_both_forwards_and_is_not_a_no_op() -> None:
    args = _inputs(2, 2, 9, 4, 2, 2, 3)
    limit = (0.3, 0.9)
    y_seq, _ = ssd_scan_sequential(**args, dt_limit=limit)
    y_chunk, _ = ssd_fwd(**args, chunk_size=4, dt_limit=limit)
    assert_close(y_chunk, y_seq, atol=1e-12, rtol=1e-11, name="y clamped")
    unclamped, _ = ssd_scan_sequential(**args)
    assert np.abs(unclamped - y_seq).max() > 1e-3


def test_initial_state_continues_a_split_sequence() -> None:
    args = _inputs(3, 2, 11, 3, 2, 1, 4)
    whole, states = ssd_scan_sequential(**args)
    cut = 6

    def part(sl: slice) -> dict[str, np.ndarray]:
        return {k: (v[:, sl] if v.ndim > 1 else v) for k, v in args.items()}

    first, first_states = ssd_fwd(**part(slice(0, cut)), chunk_size=4)
    second, second_states = ssd_fwd(
        **part(slice(cut, None)), chunk_size=4, initial_state=first_states[:, -1]
    )
    assert_close(np.concatenate([first, second], axis=1), whole, atol=1e-12, rtol=1e-11)
    assert_close(second_states[:, -1], states[:, -1], atol=1e-12, rtol=1e-11, name="final")
    seq_second, _ = ssd_scan_sequential(**part(slice(cut, None)), initial_state=states[:, cut - 1])
    assert_close(seq_second, whole[:, cut:], atol=1e-12, rtol=1e-11, name="sequential resume")


def test_extreme_inputs_stay_finite_and_agree() -> None:
    # dt past softplus's threshold (the identity) and a large A: decays underflow to 0.
    args = _inputs(4, 1, 10, 2, 2, 1, 3)
    args["dt_raw"] = args["dt_raw"] * 30.0
    args["A_log"] = np.array([4.0, -6.0])
    y_seq, _ = ssd_scan_sequential(**args)
    y_chunk, _ = ssd_fwd(**args, chunk_size=4)
    assert np.isfinite(y_chunk).all()
    assert_close(y_chunk, y_seq, atol=1e-9, rtol=1e-10, name="y extreme")


def test_matches_transformers_mamba2_chunk_scan() -> None:
    torch = pytest.importorskip("torch", reason="torch is the interop reference (test extra)")
    modeling = pytest.importorskip(
        "transformers.models.mamba2.modeling_mamba2",
        reason="the SSD scan is checked against transformers' Mamba-2 (test extra)",
    )
    args = _inputs(5, 2, 11, 4, 2, 2, 3)
    t = {k: torch.from_numpy(v) for k, v in args.items()}
    theirs, final = modeling.mamba2_chunk_scan(
        t["x"], t["dt_raw"], -torch.exp(t["A_log"]), t["B"], t["C"], 4, D=t["D"],
        dt_bias=t["dt_bias"], dt_softplus=True, return_final_states=True,
    )  # fmt: skip
    ours, chunk_states = ssd_fwd(**args, chunk_size=4)
    # HF computes the scan in float32 (hidden_states.float()), whatever the input dtype.
    assert_close(theirs.numpy(), ours, atol=1e-5, rtol=1e-5, name="y vs transformers")
    assert_close(final.numpy(), chunk_states[:, -1], atol=1e-5, rtol=1e-5, name="final state")


@pytest.mark.parametrize("limit", [DT_LIMIT_NONE, (0.2, 1.5)], ids=["no-limit", "clamped"])
def test_backward_matches_finite_differences(limit: tuple[float, float]) -> None:
    args = _inputs(6, 2, 5, 4, 2, 2, 3)
    probe = np.random.default_rng(7).normal(size=args["x"].shape)
    grads = dict(
        zip(
            ("x", "dt_raw", "A_log", "B", "C", "D", "dt_bias"),
            ssd_bwd(probe, **args, dt_limit=limit),
            strict=True,
        )
    )
    for name, grad in grads.items():

        def loss(value: np.ndarray, name: str = name) -> float:
            y, _ = ssd_fwd(**{**args, name: value}, chunk_size=2, dt_limit=limit)
            return float(np.sum(y * probe))

        numeric = finite_difference(loss, args[name])
        assert_close(grad, numeric, atol=1e-7, rtol=1e-6, name=f"d{name}")
    if limit != DT_LIMIT_NONE:  # the clamp must have cut some gradients
        assert (grads["dt_raw"] == 0).any()


def test_backward_returns_the_input_dtype() -> None:
    args = {k: v.astype(np.float32) for k, v in _inputs(8, 1, 4, 2, 1, 1, 2).items()}
    probe = np.ones_like(args["x"])
    assert all(g.dtype == np.float32 for g in ssd_bwd(probe, **args))
    y, states = ssd_fwd(**args, chunk_size=3)
    assert y.dtype == states.dtype == np.float32


def test_gated_rmsnorm_backward_matches_finite_differences() -> None:
    rng = np.random.default_rng(9)
    x, gate = rng.normal(size=(2, 3, 6)), rng.normal(size=(2, 3, 6))
    weight, probe = rng.normal(size=6), rng.normal(size=(2, 3, 6))
    dx, dgate, dweight = rmsnorm_gated_bwd(x, gate, weight, 3, probe, 1e-5)
    for got, value, slot in ((dx, x, 0), (dgate, gate, 1), (dweight, weight, 2)):

        def loss(v: np.ndarray, slot: int = slot) -> float:
            parts = [x, gate, weight]
            parts[slot] = v
            return float(np.sum(rmsnorm_gated_fwd(*parts[:2], parts[2], 3, 1e-5) * probe))

        assert_close(got, finite_difference(loss, value), atol=1e-7, rtol=1e-6, name=str(slot))


def test_gated_rmsnorm_normalises_each_group() -> None:
    rng = np.random.default_rng(10)
    x, gate = rng.normal(size=(4, 8)), np.full((4, 8), 30.0)  # silu(30) ~ 30: near-identity gate
    y = rmsnorm_gated_fwd(x, gate, np.ones(8), 4, 0.0).reshape(4, 2, 4)
    assert_close(np.sqrt(np.mean(y * y, axis=-1)), np.ones((4, 2)), atol=1e-12, rtol=0)


def test_bad_shapes_name_what_is_wrong() -> None:
    args = _inputs(11, 1, 4, 4, 1, 2, 2)
    with pytest.raises(ShapeError, match="A_log has shape"):
        ssd_fwd(**{**args, "A_log": np.zeros(3)}, chunk_size=2)
    with pytest.raises(ShapeError, match="do not split into 3 groups"):
        ssd_scan_sequential(**{**args, "B": np.zeros((1, 4, 3, 2)), "C": np.zeros((1, 4, 3, 2))})
    with pytest.raises(ShapeError, match="chunk_size"):
        ssd_fwd(**args, chunk_size=0)
    with pytest.raises(ShapeError, match="groups of 5"):
        rmsnorm_gated_fwd(np.zeros((2, 6)), np.zeros((2, 6)), np.ones(6), 5, 1e-5)
