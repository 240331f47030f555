"""LoRA adapters trained on the GPU: :class:`GpuLoraBackend` is
:class:`~evermind.train.lora.LoraBackend` on :class:`~evermind.model.gpu.GpuMamba`
(native-only: numpy at the edges, for the adapter's tensors in and out).

The maths is :mod:`evermind.train.lora`'s, the one reference: each targeted projection
computes with ``W' = W + s·B·A`` (s = alpha / r), and from the model's one full backward
(``dW`` for ``W'``) ``dB = s·dW·Aᵀ`` and ``dA = s·Bᵀ·dW``. On the GPU a targeted weight lives in
one or more slots, consecutive row blocks of the Hugging Face tensor
(:mod:`evermind.model.gpu_layout`: Mamba-1's in_proj is x | z, its x_proj dt | B | C, Mamba-2's
in_proj z | x | B | C | dt). Rows of ``W`` are rows of ``B``, so each slot ``j`` keeps its own row
block ``B_j`` and::

    W'_j = W_j + (s·B_j)·A        dB_j = dW_j·(s·A)ᵀ        dA = Σ_j (s·B_j)ᵀ·dW_j

— tiled matmuls (transposes and accumulation are the kernel's), the scaled copies made by the
elementwise kernel, AdamW on ``A`` and each ``B_j`` only, clipped by the global norm of the
adapter's gradients (as the CPU backend clips). The base ``W_j`` is a frozen copy on the GPU
that nothing writes; every other weight keeps its gradient unused and is never updated.

``tests/shaders/test_lora_gpu.py`` checks steps of it against :class:`LoraBackend`, for
Mamba-1 and Mamba-2.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from evermind.errors import ConfigError
from evermind.gpu import Buffer, Device, Dispatch
from evermind.kernels.adamw import AdamW
from evermind.kernels.grad_norm import GradNorm
from evermind.model.config import MambaConfig
from evermind.model.gpu import GpuMamba, Slot
from evermind.train.lora import LoraAdapter, block_targets
from evermind.types import Batch, TrainConfig

__all__ = ["GpuLoraBackend"]


@dataclass
class _Piece:
    """One GPU slot of a targeted weight: its rows ``[row, row + rows)`` of ``W`` and ``B``."""

    slot: Slot
    row: int
    rows: int
    base: Buffer  # the frozen W_j
    B: Buffer
    B_scaled: Buffer
    dB: Buffer
    m: Buffer
    v: Buffer


@dataclass
class _Target:
    """One adapted weight (Hugging Face name): ``A`` and its pieces."""

    name: str
    rank: int
    fan_in: int
    A: Buffer
    A_scaled: Buffer
    dA: Buffer
    m: Buffer
    v: Buffer
    pieces: list[_Piece]


class GpuLoraBackend:
    """Trains an adapter on :class:`GpuMamba` with AdamW on ``A`` and ``B`` only.

    The :class:`~evermind.train.loop.Trainer` protocol, as :class:`LoraBackend` runs it: the
    model's targeted weights are kept equal to ``W + s·B·A`` (recomputed after every step).

    Args:
        device: The GPU.
        config: Model hyperparameters (Mamba-1 or Mamba-2; not the cortex).
        params: The base weights (HF names; numpy arrays or flat float32 buffers).
        adapter: The starting adapter (read the trained one with :meth:`read_adapter`).
        train: Optimisation settings; ``batch_size`` and ``seq_len`` size the model.

    Raises:
        ConfigError: The adapter targets a projection this block does not have, or the model
            has the cortex (its experts are no LoRA target and its slots are not mapped here).
    """

    def __init__(
        self,
        device: Device,
        config: MambaConfig,
        params: Mapping[str, Any],
        adapter: LoraAdapter,
        train: TrainConfig,
    ) -> None:
        if config.moe_experts:
            raise ConfigError("GpuLoraBackend: models with the cortex are adapted on the CPU")
        block_targets(config, adapter.targets)
        self.device = dev = device
        self.config, self.train, self._meta = config, train, adapter
        self.model = model = GpuMamba(dev, config, train.batch_size, train.seq_len, train)
        model.load_params(
            {name: np.ascontiguousarray(value, np.float32) for name, value in params.items()}
        )
        scale = adapter.scale
        ew, mm = model.ew, model.mm

        def buf(label: str, values: np.ndarray | int) -> Buffer:
            if isinstance(values, int):
                return dev.buffer(4 * values, label=label)
            data = np.ascontiguousarray(values, np.float32)
            out = dev.buffer(4 * data.size, label=label)
            dev.write(out, data.tobytes())
            return out

        self.targets: list[_Target] = []
        for name in adapter.A:
            A, B = adapter.A[name], adapter.B[name]
            rank, fan_in = A.shape
            pieces = []
            for slot in model.slots.values():
                spec = slot.spec
                if spec.hf_name != name or spec.stacked:
                    continue
                row, rows = spec.offset // fan_in, spec.count // fan_in
                base = dev.buffer(4 * spec.count, label=f"lora.base.{spec.key}")
                dev.submit([ew.scale(slot.param, base, spec.count, 1.0)])  # a copy
                pieces.append(
                    _Piece(
                        slot, row, rows, base,
                        buf(f"lora_B.{spec.key}", B[row : row + rows]),
                        buf(f"lora_Bs.{spec.key}", rows * rank),
                        buf(f"lora_dB.{spec.key}", rows * rank),
                        buf(f"lora_mB.{spec.key}", rows * rank),
                        buf(f"lora_vB.{spec.key}", rows * rank),
                    )
                )  # fmt: skip
            pieces.sort(key=lambda p: p.row)
            if sum(p.rows for p in pieces) != B.shape[0]:
                raise ConfigError(f"GpuLoraBackend: {name}'s GPU slots do not cover its rows")
            self.targets.append(
                _Target(
                    name, rank, fan_in, buf(f"lora_A.{name}", A), buf(f"lora_As.{name}", A.size),
                    buf(f"lora_dA.{name}", A.size), buf(f"lora_mA.{name}", A.size),
                    buf(f"lora_vA.{name}", A.size), pieces,
                )
            )  # fmt: skip

        # W'_j = W_j + (s B_j) A, with the scaled copies the gradients use next.
        merge: list[Dispatch] = []
        for t in self.targets:
            merge.append(ew.scale(t.A, t.A_scaled, t.rank * t.fan_in, scale))
            for p in t.pieces:
                merge.append(ew.scale(p.B, p.B_scaled, p.rows * t.rank, scale))
                merge.append(ew.scale(p.base, p.slot.param, p.rows * t.fan_in, 1.0))
                merge.append(
                    mm.matmul(p.B_scaled, t.A, p.slot.param, p.rows, t.fan_in, t.rank,
                              accumulate=True)
                )  # fmt: skip
        self.merge_plan = dev.plan("lora merge").add(merge)
        grads: list[Dispatch] = []
        for t in self.targets:
            for j, p in enumerate(t.pieces):
                dW = p.slot.grad
                assert dW is not None
                # dA (r, in) (+)= (s B_j)ᵀ (r, rows) · dW_j (rows, in)
                grads.append(
                    mm.matmul(p.B_scaled, dW, t.dA, t.rank, t.fan_in, p.rows, trans_a=True,
                              accumulate=j > 0)
                )  # fmt: skip
                # dB_j (rows, r) = dW_j (rows, in) · (s A)ᵀ
                grads.append(
                    mm.matmul(dW, t.A_scaled, p.dB, p.rows, t.rank, t.fan_in, trans_b=True)
                )
        self.grad_plan = dev.plan("lora grads").add(grads)
        self.opt = AdamW(
            dev, lr=train.lr, beta1=train.beta1, beta2=train.beta2, eps=train.eps,
            weight_decay=train.weight_decay,
        )  # fmt: skip
        tensors = self._tensors()
        if train.grad_clip > 0:
            self.clip_scale = dev.buffer(4, label="lora.clip_scale")
            self.grad_norm = dev.buffer(4, label="lora.grad_norm")
            clip = GradNorm(dev).record(
                [(g, 0, count) for _, g, _, _, count in tensors], self.grad_norm,
                self.clip_scale, train.grad_clip,
            )  # fmt: skip
        else:
            self.clip_scale, clip = self.opt.unit_clip(), []
        self.opt_plan = dev.plan("lora optimizer").add(clip)
        for param, grad, m, v, count in tensors:
            self.opt_plan.add(self.opt.update(param, grad, m, v, count, self.clip_scale))
        self.merge_plan.run()

    def _tensors(self) -> list[tuple[Buffer, Buffer, Buffer, Buffer, int]]:
        """(param, grad, m, v, floats) of ``A`` and every ``B_j``: what AdamW updates."""
        out = []
        for t in self.targets:
            out.append((t.A, t.dA, t.m, t.v, t.rank * t.fan_in))
            out += [(p.B, p.dB, p.m, p.v, p.rows * t.rank) for p in t.pieces]
        return out

    async def _whole_B(self, t: _Target, part: str) -> bytes:
        """``B`` (``part`` "B"), or its AdamW moment ("m" / "v"), of ``t``: its row blocks in
        order, as the (out, r) float32 bytes the CPU backend holds."""
        blocks = [await self.device.read(getattr(p, part), 4 * p.rows * t.rank) for p in t.pieces]
        return b"".join(blocks)

    # -- the Trainer protocol -------------------------------------------------------------------
    async def train_step(self, micro_batches: list[Batch], lr: float, step: int) -> float:
        if len(micro_batches) != self.train.grad_accum:
            raise ConfigError(
                f"GpuLoraBackend: {len(micro_batches)} micro-batches, recorded for "
                f"grad_accum {self.train.grad_accum}"
            )
        self.model.zero_plan.run()
        total = 0.0
        for batch in micro_batches:
            total += await self.model.forward_backward(batch)
        self.grad_plan.run()
        self.opt.set_step(step, lr)
        self.opt_plan.run()
        self.merge_plan.run()
        return total

    async def eval_batch(self, batch: Batch) -> tuple[float, int]:
        return await self.model.eval_batch(batch)

    async def state(self) -> dict[str, array[float]]:
        """``A``, ``B`` and their AdamW moments under :class:`LoraBackend`'s keys
        (``lora_A.<name>``, ``adam.m.lora_B.<name>``, ...): either backend resumes the other's."""
        out: dict[str, array[float]] = {}
        for t in self.targets:
            for prefix, source in (("", t.A), ("adam.m.", t.m), ("adam.v.", t.v)):
                raw = await self.device.read(source, 4 * t.rank * t.fan_in)
                out[f"{prefix}lora_A.{t.name}"] = array("f", raw)
            for prefix, part in (("", "B"), ("adam.m.", "m"), ("adam.v.", "v")):
                out[f"{prefix}lora_B.{t.name}"] = array("f", await self._whole_B(t, part))
        return out

    async def load_state(self, tensors: dict[str, array[float]]) -> None:
        for t in self.targets:
            for prefix, target in (("", t.A), ("adam.m.", t.m), ("adam.v.", t.v)):
                self.device.write(target, memoryview(tensors[f"{prefix}lora_A.{t.name}"]).cast("B"))
            for prefix, part in (("", "B"), ("adam.m.", "m"), ("adam.v.", "v")):
                whole = memoryview(tensors[f"{prefix}lora_B.{t.name}"]).cast("B")
                for p in t.pieces:
                    start = 4 * p.row * t.rank
                    self.device.write(getattr(p, part), whole[start : start + 4 * p.rows * t.rank])
        self.merge_plan.run()

    async def read_adapter(self) -> LoraAdapter:
        """The adapter as trained so far (float32, ``B`` reassembled from its row blocks)."""
        meta = self._meta
        A, B = {}, {}
        for t in self.targets:
            raw = await self.device.read(t.A, 4 * t.rank * t.fan_in)
            A[t.name] = np.frombuffer(raw, np.float32).reshape(t.rank, t.fan_in).copy()
            whole = await self._whole_B(t, "B")
            B[t.name] = np.frombuffer(whole, np.float32).reshape(-1, t.rank).copy()
        return LoraAdapter(
            meta.rank, meta.alpha, meta.targets, meta.base_digest, A, B, meta.base_ref
        )
