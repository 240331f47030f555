"""What the GPU model's step-equality tests share (``test_model_gpu*.py``): weights moved off
their initial values, one GPU forward/backward beside the CPU model's ``loss_and_grads`` on
the same batch, and the comparison of every gradient."""

from __future__ import annotations

import asyncio
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from evermind.model.config import MambaConfig
from evermind.model.gpu import GpuMamba
from evermind.types import TrainConfig
from tests.numerics import assert_close


def perturbed(params: dict[str, array], seed: int, scale: float = 0.3) -> dict[str, array]:
    """Every weight moved off its initial value by ``scale`` standard normals: at init some
    gradients (the scan's A_log, dt_bias) are ~1e-10, too small to tell a wrong kernel from a
    right one, and the router's probabilities sit near ties."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, values in params.items():
        v = np.frombuffer(values, np.float32)
        out[name] = array("f", (v + scale * rng.standard_normal(v.shape)).astype(np.float32))
    return out


@dataclass
class StepPair:
    """One step on the GPU and its CPU reference: the two models, losses and gradients."""

    gpu: GpuMamba
    cpu: Any
    loss: float
    grads: dict[str, np.ndarray]
    ref_loss: float
    ref_grads: dict[str, np.ndarray]


def one_step(
    device: Any,
    config: MambaConfig,
    params: dict[str, array],
    batch: tuple[array, array],
    rows: int,
    length: int,
    cpu_model: type,
) -> StepPair:
    """One :class:`GpuMamba` forward/backward (no optimiser step) and ``cpu_model``'s
    ``loss_and_grads`` on the same weights and batch; the losses must agree (rel 1e-5)."""
    train = TrainConfig(steps=1, batch_size=rows, seq_len=length, grad_clip=0.0)
    gpu = GpuMamba(device, config, rows, length, train)
    gpu.load_params(params)
    inputs, targets = batch
    gpu.zero_plan.run()
    loss = asyncio.run(gpu.forward_backward((inputs, targets)))
    read = asyncio.run(gpu.read_grads())
    cpu = cpu_model(config, params)
    ids = np.frombuffer(inputs, np.int32).reshape(rows, length)
    tg = np.frombuffer(targets, np.int32).reshape(rows, length)
    ref_loss, ref_grads = cpu.loss_and_grads(ids, tg)
    grads = {
        name: np.frombuffer(read[name], np.float32).reshape(ref.shape)
        for name, ref in ref_grads.items()
    }
    print(f"loss gpu {loss:.6f} cpu {ref_loss:.6f}")
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert set(ref_grads) == set(read), "the GPU model must return every gradient"
    return StepPair(gpu, cpu, loss, grads, ref_loss, ref_grads)


def assert_every_gradient(pair: StepPair) -> None:
    """Each GPU gradient equals the CPU's: fp32 in other summation orders (GPU tree
    reductions against numpy), so errors are relative to the tensor's largest gradient."""
    for name, ref in pair.ref_grads.items():
        scale = float(np.abs(ref).max()) or 1.0
        assert_close(pair.grads[name], ref, atol=2e-4 * scale, rtol=2e-3, name=f"grad {name}")
