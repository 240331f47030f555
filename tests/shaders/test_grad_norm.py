"""grad_norm.wgsl against its numpy references (and torch's clip_grad_norm_) on wgpu-py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.kernels.grad_norm import GradNorm
from evermind.ops import grad_norm as ref
from tests.conftest import read_f32
from tests.numerics import assert_close

# Tensor sizes: 1, WG-1 and WG+1 of the default WG 64 and of 256, a prime, 65535, and 1M+3
# (far past max_groups * WG = 4,096, so the lanes' strided loop runs many rounds).
SIZES = [1, 63, 65, 255, 257, 997, 65535, (1 << 20) + 3]
# The norm is a sum of ~1M squares in f32: per-lane loops of <= 256 positive terms, then
# trees; ~sqrt(256) ulp relative in practice, with headroom. The clip factor inherits that.
NORM_RTOL = 1e-5


def _grads(sizes: list[int], seed: int, scale: float = 1.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal(n) * scale * rng.uniform(0.1, 3)).astype(np.float32) for n in sizes
    ]


def _norm_and_clip(device, grads: list[np.ndarray], max_norm: float, **ctor) -> tuple[float, float]:
    gn = GradNorm(device, **ctor)
    bufs = [device.upload(g, label=f"g{i}") for i, g in enumerate(grads)]
    norm, clip = device.buffer(4, label="norm"), device.buffer(4, label="clip")
    device.submit(gn.record(bufs, norm, clip, max_norm))
    out = float(read_f32(device, norm)[0]), float(read_f32(device, clip)[0])
    device.destroy(*bufs, norm, clip)
    return out


@pytest.mark.parametrize("max_norm", [0.5, 1e4])
def test_norm_and_clip_over_many_tensors(device, max_norm: float) -> None:
    grads = _grads(SIZES, seed=1)
    norm, clip = _norm_and_clip(device, grads, max_norm)
    want = ref.global_norm(grads)
    assert_close(np.array([norm]), np.array([want]), atol=0, rtol=NORM_RTOL, name="global norm")
    assert_close(
        np.array([clip]),
        np.array([ref.clip_scale(want, max_norm)]),
        atol=0,
        rtol=NORM_RTOL,
        name=f"clip_scale max_norm={max_norm}",
    )
    if max_norm > want:
        assert clip == 1.0, "below the threshold the factor must be exactly 1"


def test_arena_segments_match_separate_buffers_and_are_deterministic(device) -> None:
    sizes = [3, 129, 0, 4097, 511]
    grads = _grads(sizes, seed=2)
    gn = GradNorm(device, workgroup_size=64, max_groups=4)  # several rounds per lane
    arena = device.upload(np.concatenate(grads), label="arena")
    norm, clip = device.buffer(4, label="norm"), device.buffer(4, label="clip")
    plan = gn.segments(arena, norm, clip, sizes, 2.0)
    results = []
    for _ in range(2):
        device.submit(plan)
        results.append(read_f32(device, norm)[0])
    assert results[0].tobytes() == results[1].tobytes(), "norm differs between runs"
    want = ref.global_norm(grads)
    assert_close(
        np.array(results), np.array([want, want]), atol=0, rtol=NORM_RTOL, name="arena norm"
    )
    assert_close(
        read_f32(device, clip),
        np.array([ref.clip_scale(want, 2.0)]),
        atol=0,
        rtol=NORM_RTOL,
        name="arena clip",
    )


@pytest.mark.parametrize("bad", [np.inf, np.nan, 3e19])
def test_non_finite_gradients_give_zero_clip(device, bad: float) -> None:
    grads = _grads([300, 5], seed=3)
    grads[0][17] = bad  # 3e19 is finite but squares to inf in f32
    norm, clip = _norm_and_clip(device, grads, 1.0)
    assert not math.isfinite(norm), f"norm should be non-finite, got {norm}"
    assert clip == 0.0, f"clip_scale should be 0 for a non-finite norm, got {clip}"


def test_extreme_but_finite_gradients(device) -> None:
    grads = [
        np.full(1000, 1e17, np.float32),
        np.full(7, 1e-30, np.float32),
        np.zeros(9, np.float32),
    ]
    norm, clip = _norm_and_clip(device, grads, 1.0)
    want = ref.global_norm(grads)
    assert_close(np.array([norm]), np.array([want]), atol=0, rtol=NORM_RTOL, name="huge norm")
    assert_close(np.array([clip]), np.array([1.0 / want]), atol=0, rtol=NORM_RTOL, name="tiny clip")
    zero_norm, zero_clip = _norm_and_clip(device, [np.zeros(10, np.float32)], 1.0)
    assert (zero_norm, zero_clip) == (0.0, 1.0)


def test_torch_style_reference_agrees_with_kernel_semantics() -> None:
    grads = _grads([10, 33, 7], seed=4)
    total, clipped = ref.clip_grad_norm_torch(grads, 0.75)
    assert math.isclose(total, ref.global_norm(grads), rel_tol=1e-12)
    scale = ref.clip_scale(total, 0.75)
    for g, c in zip(grads, clipped, strict=True):
        assert_close(
            c, g * np.float32(scale), atol=1e-7, rtol=1e-6, name="torch-style clipped grads"
        )


def test_torch_style_reference_matches_torch() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is the second reference (test extra)")
    grads = _grads([10, 33, 7], seed=5)
    for max_norm in (0.75, 100.0):
        tensors = [torch.zeros(g.size, dtype=torch.float64, requires_grad=True) for g in grads]
        for t, g in zip(tensors, grads, strict=True):
            t.grad = torch.tensor(g, dtype=torch.float64)
        total_t = float(torch.nn.utils.clip_grad_norm_(tensors, max_norm))
        total, clipped = ref.clip_grad_norm_torch([g.astype(np.float64) for g in grads], max_norm)
        assert math.isclose(total, total_t, rel_tol=1e-12), (total, total_t)
        for t, c in zip(tensors, clipped, strict=True):
            assert_close(c, t.grad.numpy(), atol=1e-15, rtol=1e-12, name="clipped vs torch")


def test_bad_arguments_raise(device) -> None:
    buf = device.buffer(16, label="buf")
    with pytest.raises(ConfigError, match="power of two"):
        GradNorm(device, workgroup_size=100)
    with pytest.raises(ConfigError, match="max_norm"):
        GradNorm(device).record([buf], buf, buf, 0.0)
    with pytest.raises(ShapeError, match="tensor 1"):
        GradNorm(device).record([buf, (buf, 2, 3)], buf, buf, 1.0)


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.grad_norm:GradNorm"
    sizes = [7, 1000, 257]
    grads = _grads(sizes, seed=6)
    want = ref.global_norm(grads)
    cases = []
    for max_norm in (1.0, 1e4):
        cases.append(
            KernelCase(
                f"grad_norm.segments max_norm={max_norm}",
                launcher,
                "segments",
                [{"buf": "grads"}, {"buf": "norm"}, {"buf": "clip"}, sizes, max_norm],
                {
                    "grads": np.concatenate(grads),
                    "norm": np.zeros(1, np.float32),
                    "clip": np.zeros(1, np.float32),
                },
                {
                    "norm": np.array([want], np.float32),
                    "clip": np.array([ref.clip_scale(want, max_norm)], np.float32),
                },
                0.0,
                NORM_RTOL,
                ctor={"max_groups": 2},
            )
        )
    return cases
