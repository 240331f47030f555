"""adamw.wgsl against its numpy reference and torch.optim.AdamW on wgpu-py."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.kernels.adamw import AdamW
from evermind.kernels.grad_norm import GradNorm
from evermind.ops import adamw as ref
from evermind.ops import grad_norm as grad_norm_ops
from tests.conftest import read_f32
from tests.numerics import assert_close

# 1, WG-1, WG+1, a prime, and one past the 65,535-workgroup fold so the 2-D grid runs.
SIZES = [1, 255, 257, 997, 65535 * 256 + 7]
HYPER = {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}
# f32 against a float64 reference: params O(1) move by ~lr per step, so a few ulp of the
# parameter (atol) plus the update's own relative error. m = m + 0.1 (g - m) can cancel
# to ~0, so its error is absolute: a few ulp of |g| ~ 0.3 (atol 1e-8). v adds two positive
# terms: relative error only (its atol covers squares of tiny gradients).
P_ATOL, P_RTOL = 1e-6, 1e-6
M_ATOL, M_RTOL = 1e-8, 1e-5
V_ATOL, V_RTOL = 1e-12, 1e-5


def _state(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(n).astype(np.float32)
    g = (rng.standard_normal(n) * 0.1).astype(np.float32)
    m = (rng.standard_normal(n) * 0.01).astype(np.float32)
    v = (rng.random(n) * 1e-3).astype(np.float32)
    return p, g, m, v


def _check(device, bufs, want, n: int, tag: str, offset: int = 0) -> None:
    for name, buf, w, (atol, rtol) in zip(
        ("param", "exp_avg", "exp_avg_sq"),
        bufs,
        want,
        ((P_ATOL, P_RTOL), (M_ATOL, M_RTOL), (V_ATOL, V_RTOL)),
        strict=True,
    ):
        got = read_f32(device, buf, offset + n)[offset:]
        assert_close(got, w, atol=atol, rtol=rtol, name=f"{name} {tag}")


@pytest.mark.parametrize("n", SIZES)
def test_single_step_matches_reference(device, n: int) -> None:
    p, g, m, v = _state(n, seed=n % 1000)
    opt = AdamW(device, lr=3e-3, step=7, **HYPER)
    bp, bg, bm, bv = (
        device.upload(a, label=k) for a, k in ((p, "p"), (g, "g"), (m, "m"), (v, "v"))
    )
    clip = device.upload(np.array([0.6], np.float32), label="clip")
    device.submit([opt.update(bp, bg, bm, bv, n, clip, decay=True)])
    want = ref.adamw_step(p, g, m, v, step=7, lr=3e-3, decay=True, clip_scale=0.6, **HYPER)
    _check(device, (bp, bm, bv), want, n, f"n={n}")
    device.destroy(bp, bg, bm, bv, clip)


def test_replayed_steps_follow_set_step_with_decay_per_tensor(device) -> None:
    """Record once; each step rewrites only the shared step uniform (lr, t)."""
    n = 300
    opt = AdamW(device, **HYPER)
    tensors = []
    for seed, decay in ((1, True), (2, False)):
        p, g, _, _ = _state(n, seed)
        zeros = np.zeros(n, np.float32)
        bufs = [
            device.upload(a, label=k) for a, k in ((p, "p"), (g, "g"), (zeros, "m"), (zeros, "v"))
        ]
        tensors.append((decay, p, g, bufs))
    plan = [opt.update(b[0], b[1], b[2], b[3], n, None, decay) for decay, _, _, b in tensors]
    states = [(p, np.zeros(n, np.float32), np.zeros(n, np.float32)) for _, p, _, _ in tensors]
    for step, lr in ((1, 1e-3), (2, 5e-3), (3, 2e-4)):
        opt.set_step(step, lr)
        device.submit(plan)
        for k, (decay, _, g, bufs) in enumerate(tensors):
            prev_p, prev_m, prev_v = states[k]
            states[k] = ref.adamw_step(
                prev_p, g, prev_m, prev_v, step=step, lr=lr, decay=decay, **HYPER
            )
            _check(device, (bufs[0], bufs[2], bufs[3]), states[k], n, f"step {step} decay={decay}")


def test_arena_offset_leaves_neighbours_untouched(device) -> None:
    n, offset, total = 129, 40, 200
    p, g, m, v = _state(total, seed=9)
    opt = AdamW(device, lr=1e-2, step=3, **HYPER)
    bp, bg, bm, bv = (
        device.upload(a, label=k) for a, k in ((p, "p"), (g, "g"), (m, "m"), (v, "v"))
    )
    device.submit([opt.update(bp, bg, bm, bv, n, None, False, offset)])
    sl = slice(offset, offset + n)
    want = ref.adamw_step(p[sl], g[sl], m[sl], v[sl], step=3, lr=1e-2, decay=False, **HYPER)
    _check(device, (bp, bm, bv), want, n, "arena slice", offset)
    got_p = read_f32(device, bp)
    assert np.array_equal(got_p[:offset], p[:offset]) and np.array_equal(
        got_p[offset + n :], p[offset + n :]
    )


def test_extreme_gradients(device) -> None:
    # Zero gradient with zero moments (0/eps), huge (g^2 = 1e36, still finite), tiny (g^2
    # underflows in f32: eps dominates either way), and a sign flip against the momentum.
    g = np.array([0.0, 1e18, -1e18, 1e-30, -5.0, 5.0], np.float32)
    n = g.size
    p = np.ones(n, np.float32)
    m = np.array([0, 0, 0, 0, 1.0, -1.0], np.float32)
    v = np.zeros(n, np.float32)
    opt = AdamW(device, lr=1e-3, step=1, **HYPER)
    bp, bg, bm, bv = (
        device.upload(a, label=k) for a, k in ((p, "p"), (g, "g"), (m, "m"), (v, "v"))
    )
    device.submit([opt.update(bp, bg, bm, bv, n)])
    want = ref.adamw_step(p, g, m, v, step=1, lr=1e-3, **HYPER)
    for buf in (bp, bm, bv):
        assert np.isfinite(read_f32(device, buf, n)).all()
    _check(device, (bp, bm, bv), want, n, "extremes")


def test_clipped_training_steps_match_torch(device) -> None:
    """GradNorm -> AdamW on the GPU equals torch's clip_grad_norm_ + AdamW, step after step."""
    torch = pytest.importorskip("torch", reason="PyTorch is the second reference (test extra)")
    sizes, decays = [513, 1, 64], [True, False, True]
    rng = np.random.default_rng(10)
    params = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    steps = [
        [
            (rng.standard_normal(n) * s).astype(np.float32)
            for n, s in zip(sizes, (3, 1, 2), strict=True)
        ]
        for _ in range(4)
    ]
    lrs = [1e-2, 2e-2, 5e-3, 1e-2]

    t_params = [torch.tensor(p, requires_grad=True) for p in params]
    groups = [
        {"params": [t], "weight_decay": HYPER["weight_decay"] if d else 0.0}
        for t, d in zip(t_params, decays, strict=True)
    ]
    t_opt = torch.optim.AdamW(
        groups, lr=lrs[0], betas=(HYPER["beta1"], HYPER["beta2"]), eps=HYPER["eps"], foreach=False
    )

    opt, gn = AdamW(device, **HYPER), GradNorm(device)
    bp = [device.upload(p, label=f"p{i}") for i, p in enumerate(params)]
    bg = [device.buffer(4 * n, label=f"g{i}") for i, n in enumerate(sizes)]
    bm = [device.buffer(4 * n, label=f"m{i}") for i, n in enumerate(sizes)]
    bv = [device.buffer(4 * n, label=f"v{i}") for i, n in enumerate(sizes)]
    norm, clip = device.buffer(4, label="norm"), device.buffer(4, label="clip")
    plan = gn.record(bg, norm, clip, max_norm=1.0)
    plan += [
        opt.update(bp[i], bg[i], bm[i], bv[i], n, clip, decays[i]) for i, n in enumerate(sizes)
    ]

    for step, (grads, lr) in enumerate(zip(steps, lrs, strict=True), start=1):
        for t, g in zip(t_params, grads, strict=True):
            t.grad = torch.tensor(g)
        for group in t_opt.param_groups:
            group["lr"] = lr
        t_norm = float(torch.nn.utils.clip_grad_norm_(t_params, 1.0))
        t_opt.step()
        for buf, g in zip(bg, grads, strict=True):
            device.write(buf, g)
        opt.set_step(step, lr)
        device.submit(plan)
        assert_close(
            read_f32(device, norm), np.array([t_norm]), atol=0, rtol=1e-5, name=f"norm step {step}"
        )
        assert abs(t_norm - grad_norm_ops.global_norm(grads)) <= 1e-5 * t_norm
        for i, t in enumerate(t_params):
            # f32 on both sides, different summation orders for the norm: the clip factor
            # differs by ~1e-7 relative, the params by far less than one update.
            assert_close(
                read_f32(device, bp[i], sizes[i]),
                t.detach().numpy(),
                atol=2e-6,
                rtol=1e-6,
                name=f"param {i} step {step}",
            )


def test_bad_arguments_raise(device) -> None:
    with pytest.raises(ConfigError, match="beta1"):
        AdamW(device, beta1=1.0)
    opt = AdamW(device)
    with pytest.raises(ConfigError, match="step"):
        opt.set_step(0, 1e-3)
    with pytest.raises(ConfigError, match="lr"):
        opt.set_step(1, float("nan"))
    buf = device.buffer(16, label="buf")
    with pytest.raises(ShapeError, match="holds 4 f32"):
        opt.update(buf, buf, buf, buf, 3, None, True, 2)


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.adamw:AdamW"
    n = 257
    p, g, m, v = _state(n, seed=77)
    clip = np.array([0.25], np.float32)
    cases = []
    for decay in (True, False):
        want = ref.adamw_step(p, g, m, v, step=5, lr=2e-3, decay=decay, clip_scale=0.25, **HYPER)
        cases.append(
            KernelCase(
                f"adamw.update decay={decay}",
                launcher,
                "update",
                [{"buf": "p"}, {"buf": "g"}, {"buf": "m"}, {"buf": "v"}, n, {"buf": "clip"}, decay],
                {"p": p, "g": g, "m": m, "v": v, "clip": clip},
                {"p": want[0], "m": want[1], "v": want[2]},
                P_ATOL,
                M_RTOL,
                ctor={"lr": 2e-3, "step": 5, **HYPER},
            )
        )
    return cases
