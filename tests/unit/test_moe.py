"""The cortex reference (``ops/moe.py``): the backward (every weight, dx, and the load-balancing
loss's gradient) matches central finite differences in float64 away from routing ties, on
awkward shapes (one row, E = k, k = 1, an expert no row chooses); the forward and the aux loss
equal ``transformers``' Qwen2-MoE sparse block and ``load_balancing_loss_func``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from evermind.errors import ShapeError
from evermind.ops.moe import (
    MoeWeights,
    expert_fractions,
    load_balance_bwd,
    load_balance_loss,
    moe_bwd,
    moe_fwd,
    moe_route,
)
from tests.numerics import assert_close, finite_difference

#: Smallest gap between the k-th and (k+1)-th router probability in the FD inputs: a step of
#: 1e-6 moves a probability by far less, so no finite difference crosses a routing tie.
MARGIN = 1e-3


def _weights(rng: np.random.Generator, d: int, e: int, f: int, s: int) -> MoeWeights:
    return MoeWeights(
        router=rng.normal(scale=0.8, size=(e, d)),
        gate_proj=rng.normal(scale=0.5, size=(e, f, d)),
        up_proj=rng.normal(scale=0.5, size=(e, f, d)),
        down_proj=rng.normal(scale=0.5, size=(e, d, f)),
        shared_gate=rng.normal(scale=0.5, size=(s, d)),
        shared_up=rng.normal(scale=0.5, size=(s, d)),
        shared_down=rng.normal(scale=0.5, size=(d, s)),
        shared_expert_gate=rng.normal(scale=0.5, size=(1, d)),
    )


def _margin(probs: np.ndarray, k: int) -> float:
    """The smallest gap between the k-th and (k+1)-th probability of any row (inf if k = E)."""
    if k == probs.shape[1]:
        return float("inf")
    ordered = -np.sort(-probs, axis=1)
    return float(np.min(ordered[:, k - 1] - ordered[:, k]))


def _case(
    m: int, d: int, e: int, f: int, s: int, k: int, unused: int | None = None
) -> tuple[np.ndarray, MoeWeights]:
    """Inputs whose routing has at least :data:`MARGIN` between the k-th and (k+1)-th prob
    (and, given ``unused``, routes no row to that expert)."""
    for seed in range(500):
        rng = np.random.default_rng(seed)
        x, w = rng.normal(size=(m, d)), _weights(rng, d, e, f, s)
        probs, idx, _ = moe_route(x, w.router, k)
        if _margin(probs, k) >= MARGIN and (unused is None or not (idx == unused).any()):
            return x, w
    raise AssertionError("no seed with a routing margin")  # pragma: no cover


# (M, D, E, F, S, k): one row; E = k (every expert every row); k = 1; primes; F != S.
SHAPES = [(1, 3, 4, 2, 3, 2), (5, 4, 3, 3, 2, 3), (7, 5, 5, 3, 4, 1), (6, 3, 6, 2, 5, 2)]

#: The load-balancing coefficient in the checks (larger than training's 0.01 so it shows).
COEF = 0.3


def _objective(x: np.ndarray, w: MoeWeights, k: int, probe: np.ndarray) -> float:
    y, probs, idx = moe_fwd(x, w, k)
    return float(np.sum(y * probe)) + COEF * load_balance_loss(probs, idx)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_matches_finite_differences(shape: tuple[int, ...]) -> None:
    m, d, e, f, s, k = shape
    x, w = _case(m, d, e, f, s, k)
    probe = np.random.default_rng(99).normal(size=(m, d))
    _, probs, idx = moe_fwd(x, w, k)
    dx, grads = moe_bwd(probe, x, w, k, dprobs=COEF * load_balance_bwd(probs, idx))
    numeric = finite_difference(lambda v: _objective(v, w, k, probe), x)
    print("dx max diff", np.abs(dx - numeric).max())
    assert_close(dx, numeric, atol=1e-7, rtol=1e-6, name="dx")
    for field in dataclasses.fields(MoeWeights):

        def objective(value: np.ndarray, name: str = field.name) -> float:
            return _objective(x, dataclasses.replace(w, **{name: value}), k, probe)

        numeric = finite_difference(objective, getattr(w, field.name))
        got = getattr(grads, field.name)
        print(field.name, "max diff", np.abs(got - numeric).max())
        assert_close(got, numeric, atol=1e-7, rtol=1e-6, name=field.name)


def test_an_expert_no_row_chooses_gets_zero_gradient_and_fd_still_holds() -> None:
    x, w = _case(6, 4, 5, 3, 2, 2, unused=3)
    _, probs, idx = moe_fwd(x, w, 2)
    assert not (idx == 3).any() and _margin(probs, 2) >= MARGIN
    probe = np.random.default_rng(5).normal(size=x.shape)
    dx, grads = moe_bwd(probe, x, w, 2, dprobs=COEF * load_balance_bwd(probs, idx))
    for name in ("gate_proj", "up_proj", "down_proj"):
        assert not getattr(grads, name)[3].any(), name
    numeric = finite_difference(lambda v: _objective(v, w, 2, probe), x)
    assert_close(dx, numeric, atol=1e-7, rtol=1e-6, name="dx")
    assert expert_fractions(idx, 5)[3] == 0.0


def test_routing_ties_go_to_the_lower_index_and_gates_are_not_renormalised() -> None:
    x = np.ones((2, 3))
    router = np.array([[1.0, 0, 0], [2.0, 0, 0], [2.0, 0, 0], [1.0, 0, 0]])  # e1 == e2, e0 == e3
    probs, idx, gates = moe_route(x, router, 3)
    assert idx.tolist() == [[1, 2, 0], [1, 2, 0]]
    assert_close(gates, probs[:, [1, 2, 0]], atol=0, rtol=0, name="gates")
    assert np.all(gates.sum(axis=1) < 1.0)  # the k probabilities, not renormalised
    assert moe_route(x.astype(np.float32), router.astype(np.float32), 2)[0].dtype == np.float32


def test_balanced_routing_gives_k_and_the_gradient_is_e_f_over_r() -> None:
    probs = np.full((4, 4), 0.25)
    idx = np.array([[0, 1], [2, 3], [1, 0], [3, 2]])
    assert load_balance_loss(probs, idx) == pytest.approx(2.0)  # k, HF's convention
    assert_close(
        load_balance_bwd(probs, idx), np.full((4, 4), 4 * 0.5 / 4), atol=0, rtol=1e-15, name="grad"
    )


def test_bad_shapes_are_refused_with_the_name() -> None:
    x, w = _case(3, 4, 3, 2, 2, 2)
    with pytest.raises(ShapeError, match="top_k"):
        moe_fwd(x, w, 4)
    with pytest.raises(ShapeError, match="down_proj"):
        moe_fwd(x, dataclasses.replace(w, down_proj=w.down_proj[:, :, :1]), 2)
    with pytest.raises(ShapeError, match=r"\(M, D\)"):
        moe_fwd(x[:, :3], w, 2)


def test_forward_and_aux_loss_equal_transformers_qwen2_moe() -> None:
    torch = pytest.importorskip(
        "torch", reason="the Qwen2-MoE reference runs on torch (test extra)"
    )
    qwen = pytest.importorskip(
        "transformers.models.qwen2_moe.modeling_qwen2_moe",
        reason="the MoE block is checked against transformers' Qwen2-MoE (test extra)",
    )
    from transformers import Qwen2MoeConfig

    m, d, e, f, s, k = 9, 8, 5, 3, 6, 2
    x, w = _case(m, d, e, f, s, k)
    config = Qwen2MoeConfig(
        hidden_size=d, num_experts=e, num_experts_per_tok=k, moe_intermediate_size=f,
        shared_expert_intermediate_size=s, norm_topk_prob=False, hidden_act="silu",
    )  # fmt: skip
    block = qwen.Qwen2MoeSparseMoeBlock(config).double()
    state = {
        "gate.weight": w.router,
        # transformers 5 fuses each expert's gate and up projections, gate rows first.
        "experts.gate_up_proj": np.concatenate([w.gate_proj, w.up_proj], axis=1),
        "experts.down_proj": w.down_proj,
        "shared_expert.gate_proj.weight": w.shared_gate,
        "shared_expert.up_proj.weight": w.shared_up,
        "shared_expert.down_proj.weight": w.shared_down,
        "shared_expert_gate.weight": w.shared_expert_gate,
    }
    block.load_state_dict(
        {k_: torch.from_numpy(np.ascontiguousarray(v)) for k_, v in state.items()}
    )
    with torch.no_grad():
        theirs = block(torch.from_numpy(x)[None]).numpy()[0]
        logits = torch.from_numpy(x) @ torch.from_numpy(w.router).T
        their_aux = float(qwen.load_balancing_loss_func((logits, logits), e, k))
    y, probs, idx = moe_fwd(x, w, k)
    print("forward max diff", np.abs(y - theirs).max())
    # HF's router softmax runs in float32 even in a float64 block (dtype=torch.float): its
    # gates carry float32 rounding (~1e-7 here), ours are float64.
    assert_close(y, theirs, atol=1e-6, rtol=1e-6, name="y")
    # Two layers' rows stacked is HF's pooled loss over a tuple of two gate logits.
    stacked = load_balance_loss(np.concatenate([probs, probs]), np.concatenate([idx, idx]))
    assert stacked == pytest.approx(their_aux, rel=1e-6)
