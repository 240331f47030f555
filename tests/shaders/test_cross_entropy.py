"""cross_entropy.wgsl against its numpy reference on wgpu-py (lavapipe in CI)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.kernels.cross_entropy import IGNORE_INDEX, CrossEntropy
from evermind.ops import cross_entropy as ref
from tests.conftest import read_f32
from tests.numerics import assert_close, finite_difference

# V: 1, WG+1, a prime past a multiple of WG (4099), the nano vocabulary 4096, and WG-1.
# M: 1, 3 and a prime.
SHAPES = [(1, 1), (3, 257), (7, 4099), (131, 255), (5, 4096)]
# exp/log are not correctly rounded on GPUs; sums of V terms add ~log2(WG) roundings.
# Loss: atol 2e-5 + rtol 1e-5 (log of a sum of up to 4k terms, and the target logit's
# shifted value); gradient: probabilities in [0, 1] times scale, atol 1e-6 * scale.
LOSS_ATOL, LOSS_RTOL = 2e-5, 1e-5
# A workgroup per row reduced as a tree, and an invocation per row looping over V.
STRATEGIES = ["tree", "row_serial"]


def softmax_xent(logits: np.ndarray, targets: np.ndarray, scale: float):
    """Per-row loss (M,) and ``dlogits (M, V)``, as the kernel's fused pass writes them."""
    return ref.cross_entropy_fwd(logits, targets), ref.cross_entropy_bwd(logits, targets, scale)


def _inputs(m: int, v: int, seed: int, spread: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((m, v)) * spread).astype(np.float32)
    targets = rng.integers(0, v, size=m).astype(np.int32)
    if m > 2:
        targets[rng.random(m) < 0.25] = IGNORE_INDEX  # padding rows
        targets[0] = v - 1  # at least one valid row, and the last vocabulary entry
    return logits, targets


def _run(device, logits: np.ndarray, targets: np.ndarray, ce: CrossEntropy | None = None):
    m, v = logits.shape
    count = ref.valid_count(targets, v)
    scale = 1.0 / max(count, 1)
    ce = ce or CrossEntropy(device)
    b_logits, b_targets = device.upload(logits, label="logits"), device.upload(targets, label="t")
    row_loss, dlogits = device.buffer(4 * m, label="row_loss"), device.buffer(4 * m * v, label="d")
    loss = device.buffer(4, label="loss")
    device.submit(ce.loss_and_grad(b_logits, b_targets, row_loss, dlogits, loss, m, v, scale))
    out = (
        read_f32(device, row_loss, m),
        read_f32(device, dlogits, m * v).reshape(m, v),
        float(read_f32(device, loss, 1)[0]),
    )
    device.destroy(b_logits, b_targets, row_loss, dlogits, loss)
    return out, scale


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(("m", "v"), SHAPES)
def test_matches_reference(device, m: int, v: int, strategy: str) -> None:
    logits, targets = _inputs(m, v, seed=m * 1000 + v)
    ce = CrossEntropy(device, strategy=strategy)
    assert ce.strategy == strategy
    (row_loss, dlogits, loss), scale = _run(device, logits, targets, ce)
    want_rows, want_d = softmax_xent(logits, targets, scale)
    assert_close(row_loss, want_rows, atol=LOSS_ATOL, rtol=LOSS_RTOL, name=f"row_loss {m}x{v}")
    assert_close(dlogits, want_d, atol=1e-6 * scale, rtol=1e-5, name=f"dlogits {m}x{v}")
    assert_close(
        np.array(loss),
        np.array(ref.mean_loss(logits, targets)),
        atol=LOSS_ATOL,
        rtol=LOSS_RTOL,
        name=f"mean loss {m}x{v}",
    )


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_extreme_logits_are_stable(device, strategy: str) -> None:
    # Logits of +-1e4: a naive exp overflows; the shifted form must stay finite and exact.
    m, v = 6, 257
    logits, targets = _inputs(m, v, seed=9, spread=1.0)
    logits[:, :] = np.where(np.arange(v) % 2 == 0, -1e4, 1e4).astype(np.float32)[None, :]
    logits[1, 5] = 1e4 + 10.0  # one row with a clear winner
    logits[2] = np.float32(-1e4)  # a constant row: uniform softmax
    targets[:] = [4, 5, 7, 0, IGNORE_INDEX, 256]
    (row_loss, dlogits, loss), scale = _run(
        device, logits, targets, CrossEntropy(device, strategy=strategy)
    )
    assert np.isfinite(row_loss).all() and np.isfinite(dlogits).all() and np.isfinite(loss)
    want_rows, want_d = softmax_xent(logits, targets, scale)
    assert_close(row_loss, want_rows, atol=LOSS_ATOL, rtol=LOSS_RTOL, name="extreme row_loss")
    assert_close(dlogits, want_d, atol=1e-6 * scale, rtol=1e-5, name="extreme dlogits")
    assert row_loss[4] == 0.0 and not dlogits[4].any(), "ignored row must be exactly zero"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_runs_are_bitwise_identical_and_scale_rewrites(device, strategy: str) -> None:
    m, v = 37, 1031
    logits, targets = _inputs(m, v, seed=4)
    ce = CrossEntropy(device, strategy=strategy)
    b_logits, b_targets = device.upload(logits), device.upload(targets)
    row_loss, dlogits, loss = device.buffer(4 * m), device.buffer(4 * m * v), device.buffer(4)
    steps = ce.loss_and_grad(b_logits, b_targets, row_loss, dlogits, loss, m, v, 1.0)
    device.submit(steps)
    first = asyncio.run(device.read(dlogits)), asyncio.run(device.read(loss))
    device.submit(steps)
    assert (asyncio.run(device.read(dlogits)), asyncio.run(device.read(loss))) == first
    ce.set_scale(steps, 0.25)
    device.submit(steps)
    assert_close(
        read_f32(device, dlogits, m * v),
        0.25 * np.frombuffer(first[0], np.float32),
        atol=0,
        rtol=0,
        name="rescaled dlogits",
    )
    assert_close(
        read_f32(device, loss, 1),
        0.25 * np.frombuffer(first[1], np.float32),
        atol=0,
        rtol=0,
        name="rescaled loss",
    )


def test_rejects_bad_arguments(device) -> None:
    with pytest.raises(ConfigError, match="power of two"):
        CrossEntropy(device, workgroup_size=96)
    ce = CrossEntropy(device)
    small = device.buffer(16)
    with pytest.raises(ShapeError, match="holds 4 f32"):
        ce.forward_backward(small, small, small, device.buffer(16), 2, 3, 1.0)
    with pytest.raises(ShapeError, match="V >= 1"):
        ce.forward_backward(small, small, small, device.buffer(16), 1, 0, 1.0)
    with pytest.raises(ConfigError, match="strategy must be one of"):
        CrossEntropy(device, strategy="rows")


def test_auto_strategy_follows_the_adapter(device) -> None:
    want = "row_serial" if device.is_cpu_adapter else "tree"
    assert CrossEntropy(device).strategy == want


def test_strategies_agree_at_the_nano_shape(device) -> None:
    # M = B*L = 512 rows (32 row-serial workgroups) over the nano vocabulary.
    logits, targets = _inputs(512, 2048, seed=12)
    tree, _ = _run(device, logits, targets, CrossEntropy(device, strategy="tree"))
    serial, scale = _run(device, logits, targets, CrossEntropy(device, strategy="row_serial"))
    assert_close(serial[0], tree[0], atol=LOSS_ATOL, rtol=LOSS_RTOL, name="row_loss")
    assert_close(serial[1], tree[1], atol=1e-6 * scale, rtol=1e-5, name="dlogits")
    assert_close(
        np.array(serial[2]), np.array(tree[2]), atol=LOSS_ATOL, rtol=LOSS_RTOL, name="loss"
    )


def test_reference_gradient_matches_finite_differences() -> None:
    logits, targets = _inputs(4, 5, seed=1, spread=2.0)
    targets[:] = [1, IGNORE_INDEX, 4, 0]
    count = ref.valid_count(targets, 5)

    def mean_loss(x: np.ndarray) -> float:
        # float64 throughout: the same formula as ops.cross_entropy, summed over valid rows
        total = 0.0
        for i, t in enumerate(targets):
            if t != IGNORE_INDEX:
                total += np.log(np.exp(x[i] - x[i].max()).sum()) - (x[i, t] - x[i].max())
        return total / count

    numeric = finite_difference(mean_loss, logits.astype(np.float64))
    _, analytic = softmax_xent(logits, targets, 1.0 / count)
    assert_close(analytic, numeric, atol=1e-6, rtol=1e-5, name="dlogits finite differences")
    assert abs(ref.mean_loss(logits, targets) - mean_loss(logits.astype(np.float64))) < 1e-6


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.cross_entropy:CrossEntropy"
    cases = []
    shapes = [(5, 257, "tree"), (3, 4099, "tree"), (5, 257, "row_serial"), (19, 131, "row_serial")]
    for m, v, strategy in shapes:
        logits, targets = _inputs(m, v, seed=42 + v)
        targets[1] = IGNORE_INDEX
        scale = 1.0 / ref.valid_count(targets, v)
        want_rows, want_d = softmax_xent(logits, targets, scale)
        cases.append(
            KernelCase(
                f"cross_entropy.loss_and_grad {strategy} {m}x{v}",
                launcher,
                "loss_and_grad",
                [
                    {"buf": "logits"},
                    {"buf": "targets"},
                    {"buf": "row_loss"},
                    {"buf": "dlogits"},
                    {"buf": "loss"},
                    m,
                    v,
                    scale,
                ],
                {
                    "logits": logits,
                    "targets": targets,
                    "row_loss": np.zeros(m, np.float32),
                    "dlogits": np.zeros((m, v), np.float32),
                    "loss": np.zeros(1, np.float32),
                },
                {
                    "row_loss": want_rows,
                    "dlogits": want_d,
                    "loss": np.array([ref.mean_loss(logits, targets)], np.float32),
                },
                LOSS_ATOL,
                LOSS_RTOL,
                ctor={"strategy": strategy},
            )
        )
    return cases
