"""The CPU training step's float32 arithmetic agrees with float64 (issue 42's faster step).

The numpy models train in their own dtype (float32) where the ops' default is float64: the
loss and dlogits come from one softmax (``cross_entropy_loss_and_grad``); SiLU's and
softplus's backward, RMSNorm's backward, the gated RMSNorm and the conv's backward take a
``compute`` dtype. Checked here:

- ``cross_entropy_loss_and_grad`` equals ``mean_loss`` + ``cross_entropy_bwd`` in float64
  (1e-12, ignored and out-of-range rows included) and within float32 rounding in float32;
- ``silu_bwd`` / ``softplus_bwd``, ``rmsnorm_bwd``, ``rmsnorm_gated_fwd`` / ``_bwd`` and
  ``conv1d_bwd`` in float32 are within float32 rounding of float64;
- one training step of a float32 ``CpuMamba`` / ``CpuMamba2`` / cortex model (every op of the
  step in float32: scan, RMSNorm, conv, SiLU, loss) gives the loss
  of the float64 model on the same weights within 1e-5 and gradients within mamba's fp32
  tolerance.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.model.cpu_mamba2 import CpuMamba2
from evermind.model.init import init_params
from evermind.ops.conv1d import conv1d_bwd
from evermind.ops.cross_entropy import cross_entropy_bwd, cross_entropy_loss_and_grad, mean_loss
from evermind.ops.elementwise import silu_bwd, softplus_bwd
from evermind.ops.rmsnorm import rmsnorm_bwd, rmsnorm_gated_bwd, rmsnorm_gated_fwd
from tests.unit.test_model_cpu import TINY, random_params
from tests.unit.test_model_cpu_mamba2 import TINY as TINY2
from tests.unit.test_model_cpu_mamba2 import _noisy_params
from tests.unit.test_selective_scan_fast import RTOL32, relative_error


def test_fused_cross_entropy_equals_the_two_references() -> None:
    rng = np.random.default_rng(0)
    logits = 4.0 * rng.standard_normal((9, 13))
    targets = rng.integers(0, 13, 9)
    targets[2], targets[5] = -100, 13  # ignored, and out of range: neither counts
    counted = 7
    loss, dlogits = cross_entropy_loss_and_grad(logits, targets, 1.0 / counted)
    want_loss = mean_loss(logits, targets)
    want = cross_entropy_bwd(logits, targets, 1.0 / counted)
    assert abs(loss - want_loss) <= 1e-12 * abs(want_loss)
    assert dlogits.dtype == np.float64 and relative_error(dlogits, want) <= 1e-12
    assert not dlogits[[2, 5]].any()
    loss32, dlogits32 = cross_entropy_loss_and_grad(
        logits.astype(np.float32), targets, 1.0 / counted, compute=np.float32
    )
    assert dlogits32.dtype == np.float32
    assert abs(loss32 - want_loss) <= 1e-6 * abs(want_loss)
    assert relative_error(dlogits32.astype(np.float64), want) <= 1e-6


def test_fused_cross_entropy_of_no_counted_row_is_nan() -> None:
    loss, dlogits = cross_entropy_loss_and_grad(np.zeros((2, 3)), np.array([-100, -100]), 1.0)
    assert np.isnan(loss) and not dlogits.any()


@pytest.mark.parametrize("op", [silu_bwd, softplus_bwd])
def test_elementwise_backward_in_float32_matches_float64(op: object) -> None:
    rng = np.random.default_rng(1)
    x = 8.0 * rng.standard_normal(1000)
    x[:3] = (25.0, -40.0, 0.0)  # past softplus's threshold, deep negative, zero
    grad = rng.standard_normal(1000)
    want = op(x, grad)  # type: ignore[operator]
    got = op(x.astype(np.float32), grad.astype(np.float32), np.float32)  # type: ignore[operator]
    assert got.dtype == np.float32
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6)


def _norm_and_conv_ops() -> dict[str, Callable[[np.dtype], tuple[np.ndarray, ...]]]:
    """Each op at awkward shapes, its inputs cast to the dtype and computed in it."""
    rng = np.random.default_rng(4)
    x, z, dy = rng.standard_normal((3, 2, 5, 12))
    w12, w_conv = 1.0 + 0.1 * rng.standard_normal(12), rng.standard_normal((12, 1, 4))

    def cast(*arrays: np.ndarray, dtype: np.dtype) -> list[np.ndarray]:
        return [a.astype(dtype) for a in arrays]

    return {
        "rmsnorm_bwd": lambda d: rmsnorm_bwd(*cast(x, w12, dy, dtype=d), 1e-5, d),
        "rmsnorm_gated_fwd": lambda d: (rmsnorm_gated_fwd(*cast(x, z, w12, dtype=d), 4, 1e-5, d),),
        "rmsnorm_gated_bwd": lambda d: rmsnorm_gated_bwd(
            *cast(x, z, w12, dtype=d), 4, dy.astype(d), 1e-5, d
        ),
        "conv1d_bwd": lambda d: conv1d_bwd(*cast(x, w_conv, dy, dtype=d), d),
    }


@pytest.mark.parametrize("name", sorted(_norm_and_conv_ops()))
def test_norm_and_conv_ops_in_float32_match_float64(name: str) -> None:
    op = _norm_and_conv_ops()[name]
    for got, want in zip(op(np.dtype(np.float32)), op(np.dtype(np.float64)), strict=True):
        assert got.dtype == np.float32 and want.dtype == np.float64, name
        assert relative_error(got.astype(np.float64), want) <= 1e-5, name


#: A cortex model: 3 routed experts, top-2, and the shared expert after every mixer.
CORTEX = MambaConfig(
    d_model=8, n_layer=2, vocab_size=11, d_state=3, moe_experts=3, moe_top_k=2,
    moe_intermediate=5, moe_shared_intermediate=4, moe_every=1,
)  # fmt: skip


def _init(config: MambaConfig) -> dict[str, np.ndarray]:
    return {k: np.array(v, np.float64) for k, v in init_params(config, 3).items()}


MODELS: dict[str, tuple[type[CpuMamba], MambaConfig, Callable[[], dict[str, np.ndarray]]]] = {
    "mamba1": (CpuMamba, TINY, lambda: random_params(TINY, 3)),
    "mamba2": (CpuMamba2, TINY2, lambda: _noisy_params(TINY2, 3)),
    "cortex": (CpuMamba, CORTEX, lambda: _init(CORTEX)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_float32_step_agrees_with_the_float64_step(name: str) -> None:
    cls, config, make = MODELS[name]
    params = make()
    rng = np.random.default_rng(2)
    ids = rng.integers(0, config.vocab_size, (3, 5))
    targets = rng.integers(0, config.vocab_size, (3, 5))
    loss64, grads64 = cls(config, params, np.float64).loss_and_grads(ids, targets)
    loss32, grads32 = cls(config, params, np.float32).loss_and_grads(ids, targets)
    print(f"{name}: loss float32 {loss32:.8f}, float64 {loss64:.8f}")
    assert abs(loss32 - loss64) <= 1e-5 * abs(loss64)
    for key, want in grads64.items():
        assert grads32[key].dtype == np.float32, key
        error = relative_error(grads32[key].astype(np.float64), want)
        assert error <= RTOL32, f"{key}: {error:.2e}"
