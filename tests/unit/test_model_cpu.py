"""Tests of the numpy CPU model (evermind.model.cpu) and the ops it is built from (evermind.ops).

Gradient checks run in float64 against central finite differences on tiny, deliberately odd
shapes; the error measure is the relative error of each gradient tensor,
||analytic - numeric|| / max(||analytic||, ||numeric||, 1e-12), and must stay below 1e-6.
Central differences with h = 1e-5 in float64 have truncation error ~1e-10 and round-off
~1e-11 relative to the loss; on the whole model the smallest gradients (dt_proj, A_log, norm
~3e-4) then show ~5e-7 at worst, the op-level checks ~1e-10.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.model import MambaConfig, init_params
from evermind.model.cpu import CpuMamba
from evermind.ops.adamw import adamw_step
from evermind.ops.conv1d import conv1d_bwd, conv1d_fwd
from evermind.ops.cross_entropy import cross_entropy_bwd, mean_loss, valid_count
from evermind.ops.elementwise import silu_bwd, silu_fwd, softplus_bwd, softplus_fwd
from evermind.ops.rmsnorm import rmsnorm_bwd, rmsnorm_fwd
from evermind.ops.selective_scan import selective_scan_bwd, selective_scan_fwd

FD_STEP = 1e-5
GRAD_RTOL = 1e-6

TINY = MambaConfig(d_model=6, n_layer=2, vocab_size=11, d_state=3)


def numeric_grad(loss: Callable[[], float], array: np.ndarray) -> np.ndarray:
    """Central finite differences of ``loss`` with respect to every entry of ``array``."""
    grad = np.zeros_like(array)
    flat, flat_grad = array.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        saved = flat[i]
        flat[i] = saved + FD_STEP
        plus = loss()
        flat[i] = saved - FD_STEP
        minus = loss()
        flat[i] = saved
        flat_grad[i] = (plus - minus) / (2 * FD_STEP)
    return grad


def rel_error(analytic: np.ndarray, numeric: np.ndarray) -> float:
    scale = max(float(np.linalg.norm(analytic)), float(np.linalg.norm(numeric)), 1e-12)
    return float(np.linalg.norm(analytic - numeric) / scale)


def check_grads(
    name: str, loss: Callable[[], float], pairs: dict[str, tuple[np.ndarray, np.ndarray]]
) -> None:
    """Compare each (input array, analytic grad) pair with finite differences; print errors."""
    for label, (array, analytic) in pairs.items():
        numeric = numeric_grad(loss, array)
        err = rel_error(analytic, numeric)
        print(f"{name} d{label}: rel err {err:.2e} (|grad| {np.linalg.norm(numeric):.3e})")
        assert np.linalg.norm(numeric) > 0, f"{name} d{label}: numeric gradient is all zero"
        assert err < GRAD_RTOL, f"{name} d{label}: rel err {err:.2e} >= {GRAD_RTOL}"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# ---- per-op finite-difference checks (the ops the model is built from, evermind.ops) ------


def test_pointwise_ops_backward(rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 7)) * 3
    probe = rng.standard_normal((3, 7))
    ops: list[tuple[str, Callable[[Any], Any], Callable[[Any, Any], Any]]] = [
        ("silu", silu_fwd, silu_bwd),
        ("softplus", softplus_fwd, softplus_bwd),
    ]
    for name, fwd, bwd in ops:

        def loss(f: Callable[[Any], Any] = fwd) -> float:
            return float(np.sum(f(x) * probe))

        check_grads(name, loss, {"x": (x, bwd(x, probe))})


def test_pointwise_ops_extreme_inputs_stay_finite() -> None:
    x = np.array([-1e4, -100.0, 0.0, 100.0, 1e4], dtype=np.float32)
    # Underflow to 0 is the right answer far left; overflow or NaN would be a bug.
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        assert np.allclose(softplus_fwd(x), [0, 0, np.log(2), 100, 1e4])
        assert np.allclose(silu_fwd(x), [0, 0, 0, 100, 1e4])
        assert np.all(np.isfinite(silu_bwd(x, np.ones_like(x))))


def test_rmsnorm_backward(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 5, 7))
    weight = rng.standard_normal(7)
    probe = rng.standard_normal((2, 5, 7))
    y, rstd = rmsnorm_fwd(x, weight, 1e-5)
    np.testing.assert_allclose(y, x / np.sqrt(np.mean(x**2, -1, keepdims=True) + 1e-5) * weight)
    assert rstd.shape == (2, 5)
    dx, dweight = rmsnorm_bwd(x, weight, probe, 1e-5)

    def loss() -> float:
        return float(np.sum(rmsnorm_fwd(x, weight, 1e-5)[0] * probe))

    check_grads("rmsnorm", loss, {"x": (x, dx), "weight": (weight, dweight)})


def test_conv1d_forward_is_causal_depthwise(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 9, 5))
    weight = rng.standard_normal((5, 4))
    bias = rng.standard_normal(5)
    y = conv1d_fwd(x, weight, bias)
    # The obvious per-element definition: taps reach back K-1 steps, zeros before t = 0.
    expected = np.zeros_like(y)
    for b in range(2):
        for t in range(9):
            for c in range(5):
                expected[b, t, c] = bias[c] + sum(
                    weight[c, k] * x[b, t - 3 + k, c] for k in range(4) if t - 3 + k >= 0
                )
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)


def test_conv1d_backward(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 6, 5))
    weight = rng.standard_normal((5, 4))
    bias = rng.standard_normal(5)
    probe = rng.standard_normal((2, 6, 5))
    dx, dweight, dbias = conv1d_bwd(x, weight, probe)

    def loss() -> float:
        return float(np.sum(conv1d_fwd(x, weight, bias) * probe))

    check_grads("conv1d", loss, {"x": (x, dx), "weight": (weight, dweight), "bias": (bias, dbias)})


def scan_inputs(
    rng: np.random.Generator, batch: int, length: int, d_inner: int, d_state: int
) -> tuple[np.ndarray, ...]:
    """(x, delta_raw, A_log, B, C, D) in the kernels' convention."""
    x = rng.standard_normal((batch, length, d_inner))
    delta_raw = rng.standard_normal((batch, length, d_inner))
    A_log = rng.standard_normal((d_inner, d_state)) * 0.5
    B = rng.standard_normal((batch, length, d_state))
    C = rng.standard_normal((batch, length, d_state))
    D = rng.standard_normal(d_inner)
    return x, delta_raw, A_log, B, C, D


def test_selective_scan_forward_matches_explicit_recurrence(rng: np.random.Generator) -> None:
    x, delta_raw, A_log, B, C, D = scan_inputs(rng, 2, 7, 5, 3)
    y, _ = selective_scan_fwd(x, delta_raw, A_log, B, C, D)
    delta, A = np.log1p(np.exp(delta_raw)), -np.exp(A_log)
    for b in range(2):
        h = np.zeros((5, 3))
        for t in range(7):
            for i in range(5):
                for n in range(3):
                    h[i, n] = np.exp(delta[b, t, i] * A[i, n]) * h[i, n]
                    h[i, n] += delta[b, t, i] * B[b, t, n] * x[b, t, i]
                expected = sum(h[i, n] * C[b, t, n] for n in range(3)) + D[i] * x[b, t, i]
                assert abs(y[b, t, i] - expected) < 1e-12


def test_selective_scan_backward(rng: np.random.Generator) -> None:
    x, delta_raw, A_log, B, C, D = scan_inputs(rng, 2, 5, 4, 3)
    probe = rng.standard_normal((2, 5, 4))
    _, states = selective_scan_fwd(x, delta_raw, A_log, B, C, D)
    dx, ddelta, dA_log, dB, dC, dD = selective_scan_bwd(probe, x, delta_raw, A_log, B, C, D, states)

    def loss() -> float:
        return float(np.sum(selective_scan_fwd(x, delta_raw, A_log, B, C, D)[0] * probe))

    check_grads(
        "scan",
        loss,
        {
            "x": (x, dx),
            "delta_raw": (delta_raw, ddelta),
            "A_log": (A_log, dA_log),
            "B": (B, dB),
            "C": (C, dC),
            "D": (D, dD),
        },
    )


def test_cross_entropy_forward_and_backward(rng: np.random.Generator) -> None:
    logits = rng.standard_normal((6, 11)) * 2
    targets = np.array([3, -100, 0, 10, 7, -100])
    loss = mean_loss(logits, targets)
    valid = targets != -100
    log_softmax = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    expected = -np.mean(log_softmax[valid, targets[valid]])
    assert loss == pytest.approx(expected, rel=1e-12)
    dlogits = cross_entropy_bwd(logits, targets, 1.0 / valid_count(targets, 11))
    assert np.all(dlogits[~valid] == 0)
    check_grads(
        "cross_entropy",
        lambda: mean_loss(logits, targets),
        {"logits": (logits, dlogits)},
    )


def test_loss_rejects_bad_targets() -> None:
    model = CpuMamba(TINY, init_params(TINY, 0))
    ids = np.array([[1, 2]])
    with pytest.raises(ShapeError, match=r"\[0, 11\)"):
        model.loss_and_grads(ids, np.array([[1, 11]]))
    with pytest.raises(ShapeError, match="at least one target"):
        model.loss_and_grads(ids, np.array([[-100, -100]]))


# ---- whole model -----------------------------------------------------------------------------


def random_params(config: MambaConfig, seed: int) -> dict[str, np.ndarray]:
    """Init weights plus noise, so norms, D and biases are not at special values (1, 0).

    dt_proj.bias is set near 0 (delta ~ softplus(0) = 0.7, not the init's 0.001..0.1) so the
    state decay exp(delta * A) matters and the A_log / dt gradients are well above the
    finite-difference noise floor.
    """
    rng = np.random.default_rng(seed)
    shapes = config.param_shapes()
    params = {}
    for name, flat in init_params(config, seed).items():
        value = np.array(flat, dtype=np.float64).reshape(shapes[name])
        if name.endswith("dt_proj.bias"):
            value = np.zeros_like(value)
        params[name] = value + 0.1 * rng.standard_normal(value.shape)
    return params


def test_whole_model_gradient_matches_finite_differences() -> None:
    model = CpuMamba(TINY, random_params(TINY, 7), dtype=np.float64)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, TINY.vocab_size, (2, 5))
    ids[1, 3] = ids[0, 1]  # a repeated id: the embedding gather must accumulate
    targets = rng.integers(0, TINY.vocab_size, (2, 5))
    targets[0, 2] = -100
    _, grads = model.loss_and_grads(ids, targets)
    assert list(grads) == list(TINY.param_shapes())
    errors = {}
    for name, param in model.params.items():
        assert grads[name].shape == param.shape, name
        numeric = numeric_grad(lambda: model.loss_and_grads(ids, targets)[0], param)
        errors[name] = rel_error(grads[name], numeric)
        assert np.linalg.norm(numeric) > 0, f"{name}: numeric gradient is all zero"
    for name, err in errors.items():
        print(f"model d[{name}]: rel err {err:.2e} (|grad| {np.linalg.norm(grads[name]):.2e})")
    worst = max(errors, key=errors.__getitem__)
    assert errors[worst] < GRAD_RTOL, f"{worst}: rel err {errors[worst]:.2e} >= {GRAD_RTOL}"


def test_loss_agrees_with_forward_logits() -> None:
    model = CpuMamba(TINY, random_params(TINY, 2), dtype=np.float64)
    ids = np.arange(10).reshape(2, 5) % TINY.vocab_size
    targets = (ids + 1) % TINY.vocab_size
    logits = model.forward(ids)
    assert logits.shape == (2, 5, TINY.vocab_size)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.mean(np.take_along_axis(log_probs, targets[..., None], -1))
    assert model.loss_and_grads(ids, targets)[0] == pytest.approx(expected, rel=1e-12)


def test_forward_train_exposes_activations_and_backward_checks_shapes() -> None:
    model = CpuMamba(TINY, random_params(TINY, 2), dtype=np.float64)
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    logits, cache = model.forward_train(ids)
    np.testing.assert_array_equal(logits, model.forward(ids))
    assert len(cache.layers) == TINY.n_layer
    assert cache.layers[1].states.shape == (2, 3, TINY.d_inner, TINY.d_state)
    np.testing.assert_array_equal(cache.hidden, model.hidden(ids))
    # backward is linear in dlogits: the CE gradient splits into its per-row parts.
    dlogits = np.random.default_rng(0).standard_normal(logits.shape)
    half = dlogits.copy()
    half[1] = 0
    whole, first, second = (model.backward(cache, d) for d in (dlogits, half, dlogits - half))
    for name in whole:
        np.testing.assert_allclose(whole[name], first[name] + second[name], atol=1e-12)
    with pytest.raises(ShapeError, match="dlogits has shape"):
        model.backward(cache, dlogits[:, :2])


def test_forward_is_causal() -> None:
    model = CpuMamba(TINY, random_params(TINY, 4))
    ids = np.array([[1, 2, 3, 4, 5, 6]])
    changed = ids.copy()
    changed[0, 4] = 9
    a, b = model.forward(ids), model.forward(changed)
    np.testing.assert_array_equal(a[:, :4], b[:, :4])
    assert np.abs(a[:, 4:] - b[:, 4:]).max() > 1e-4


def test_float32_forward_matches_float64() -> None:
    params = random_params(TINY, 5)
    ids = np.random.default_rng(0).integers(0, TINY.vocab_size, (3, 13))
    f32 = CpuMamba(TINY, params).forward(ids)
    f64 = CpuMamba(TINY, params, dtype=np.float64).forward(ids)
    assert f32.dtype == np.float32
    diff = np.abs(f32 - f64).max()
    print(f"float32 vs float64 logits: max abs diff {diff:.2e}")
    assert diff < 1e-5


# ---- recurrent decoding ----------------------------------------------------------------------

# float32 tolerance for step-vs-parallel logits, relative to the logits' scale: the two paths
# sum the same terms in a different order (e.g. conv taps, scan matmul vs broadcast).
STEP_RTOL = 1e-5


@pytest.mark.parametrize(
    "config",
    [
        TINY,
        MambaConfig(d_model=40, n_layer=3, vocab_size=97),
        MambaConfig(d_model=8, n_layer=1, vocab_size=13, d_conv=1, d_state=1),  # no conv memory
    ],
    ids=["tiny", "odd", "d_conv1"],
)
def test_step_matches_parallel_forward(config: MambaConfig) -> None:
    params = random_params(config, 11)
    params["backbone.embeddings.weight"] *= 30  # logits of order 1-10, not 0.01
    model = CpuMamba(config, params)
    ids = np.random.default_rng(5).integers(0, config.vocab_size, (3, 17))
    parallel = model.forward(ids)  # (B, L, V)
    state = model.init_state(3)
    stepped = np.stack([model.step(ids[:, t], state)[0] for t in range(17)], axis=1)
    scale = np.abs(parallel).max()
    diff = np.abs(stepped - parallel).max()
    print(f"step vs forward ({config.d_model=}): max abs diff {diff:.2e}, logit scale {scale:.2f}")
    assert scale > 1.0
    assert diff <= STEP_RTOL * scale


def test_step_state_copy_branches_independently() -> None:
    model = CpuMamba(TINY, random_params(TINY, 1))
    state = model.init_state(1)
    model.step(np.array([3]), state)
    branch = state.copy()
    a, _ = model.step(np.array([4]), state)
    b, _ = model.step(np.array([4]), branch)
    np.testing.assert_array_equal(a, b)
    c, _ = model.step(np.array([4]), state)  # state moved on; branch did not
    assert not np.array_equal(b, c)


def test_step_rejects_mismatched_state() -> None:
    model = CpuMamba(TINY, random_params(TINY, 1))
    with pytest.raises(ShapeError, match="init_state"):
        model.step(np.array([1, 2]), model.init_state(1))
    with pytest.raises(ShapeError, match="batch size"):
        model.init_state(0)


# ---- embeddings ------------------------------------------------------------------------------


def test_embed_is_unit_norm_and_ignores_right_padding() -> None:
    model = CpuMamba(TINY, random_params(TINY, 8))
    text = np.array([[4, 2, 7, 1, 9]])
    padded = np.array([[4, 2, 7, 1, 9, 0, 0, 0], [5, 5, 3, 0, 0, 0, 0, 0]])
    mask = np.array([[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]], dtype=bool)
    alone = model.embed(text, np.ones_like(text, dtype=bool))
    batch = model.embed(padded, mask)
    assert batch.shape == (2, TINY.d_model)
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(batch[0], alone[0], rtol=1e-5, atol=1e-6)
    hidden = model.hidden(text)[0]
    expected = hidden.mean(0) / np.linalg.norm(hidden.mean(0))
    np.testing.assert_allclose(alone[0], expected, rtol=1e-5, atol=1e-6)


def test_embed_rejects_empty_rows_and_bad_masks() -> None:
    model = CpuMamba(TINY, random_params(TINY, 8))
    ids = np.array([[1, 2], [3, 4]])
    with pytest.raises(ShapeError, match="rows \\[1\\]"):
        model.embed(ids, np.array([[True, False], [False, False]]))
    with pytest.raises(ShapeError, match="mask has shape"):
        model.embed(ids, np.ones((2, 3), dtype=bool))


# ---- construction and validation -------------------------------------------------------------


def test_accepts_flat_init_arrays_and_copies_them() -> None:
    flat = init_params(TINY, 0)
    model = CpuMamba(TINY, flat)
    for name, shape in TINY.param_shapes().items():
        assert model.params[name].shape == shape
        assert model.params[name].dtype == np.float32
        np.testing.assert_array_equal(model.params[name].reshape(-1), np.array(flat[name]))
    source = {n: np.array(v).reshape(TINY.param_shapes()[n]) for n, v in flat.items()}
    model = CpuMamba(TINY, source)
    source["backbone.norm_f.weight"][:] = 5
    assert np.all(model.params["backbone.norm_f.weight"] == 1)


@pytest.mark.parametrize(
    ("edit", "error", "match"),
    [
        (lambda p: p.pop("backbone.norm_f.weight"), ConfigError, "missing"),
        (lambda p: p.__setitem__("lm_head.weight", np.zeros(1)), ConfigError, "unknown"),
        (
            lambda p: p.__setitem__("backbone.layers.0.mixer.D", np.zeros((3, 4))),
            ShapeError,
            "backbone.layers.0.mixer.D has shape",
        ),
    ],
)
def test_rejects_bad_params(
    edit: Callable[[dict[str, Any]], object], error: type, match: str
) -> None:
    params: dict[str, Any] = dict(init_params(TINY, 0))
    edit(params)
    with pytest.raises(error, match=match):
        CpuMamba(TINY, params)


def test_rejects_bad_ids_and_dtype() -> None:
    model = CpuMamba(TINY, init_params(TINY, 0))
    with pytest.raises(ShapeError, match=r"ids in \[0, 11\)"):
        model.forward(np.array([[1, 11]]))
    with pytest.raises(ShapeError, match="integer array of 2 dims"):
        model.forward(np.array([1, 2]))
    with pytest.raises(ShapeError, match="targets have shape"):
        model.loss_and_grads(np.array([[1, 2]]), np.array([[1, 2, 3]]))
    with pytest.raises(ConfigError, match="float32 or float64"):
        CpuMamba(TINY, init_params(TINY, 0), dtype=np.float16)


# ---- it learns -------------------------------------------------------------------------------


def test_overfits_a_short_sequence_with_adam() -> None:
    config = MambaConfig(d_model=32, n_layer=2, vocab_size=23, d_state=8)
    model = CpuMamba(config, init_params(config, 0))
    sequence = np.random.default_rng(9).integers(0, config.vocab_size, 41)
    ids, targets = sequence[None, :-1], sequence[None, 1:]  # 40 positions
    moments = {n: (np.zeros_like(p), np.zeros_like(p)) for n, p in model.params.items()}
    lr, max_steps = 1e-2, 300
    start = time.perf_counter()
    first = loss = model.loss_and_grads(ids, targets)[0]
    for step in range(1, max_steps + 1):
        loss, grads = model.loss_and_grads(ids, targets)
        if loss < 0.1:
            break
        for name, param in model.params.items():
            param[...], *moments[name] = adamw_step(  # plain Adam: no weight decay
                param, grads[name], *moments[name], step=step, lr=lr, weight_decay=0.0
            )
    elapsed = time.perf_counter() - start
    print(f"overfit: loss {first:.3f} -> {loss:.4f} in {step} steps, {elapsed:.1f} s")
    assert loss < 0.1
    assert elapsed < 15
