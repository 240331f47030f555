"""The numpy training backend: the CPU model with AdamW (native-only, numpy).

Its AdamW is :func:`evermind.ops.adamw.adamw_step`, ``torch.optim.AdamW`` exactly (decoupled
decay ``p *= 1 - lr·wd`` on decayed tensors; bias-corrected moments; ``eps`` added after the
square root), and the global-norm clip is :mod:`evermind.ops.grad_norm`, as
``torch.nn.utils.clip_grad_norm_`` (scale by ``max_norm / (norm + 1e-6)`` when that is below
1). The GPU AdamW and grad-norm kernels are tested against the same functions; the evaluation
loss is :func:`evermind.ops.cross_entropy.cross_entropy_fwd`.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.model.cpu_mamba2 import CpuMamba2
from evermind.ops.adamw import adamw_step
from evermind.ops.cross_entropy import cross_entropy_fwd
from evermind.ops.grad_norm import clip_scale, global_norm
from evermind.train.loop import Batch, TrainConfig


class CpuBackend:
    """Trains :class:`CpuMamba` (or :class:`CpuMamba2` for a Mamba-2 config) with AdamW on the CPU.

    Args:
        config: Model hyperparameters.
        params: Initial weights (HF names), e.g. from ``init_params``.
        train: Optimisation settings (betas, eps, weight decay, clipping).
    """

    def __init__(
        self, config: MambaConfig, params: dict[str, array[float]], train: TrainConfig
    ) -> None:
        self.config = config
        self.train = train
        self.model = (CpuMamba2 if config.block == "mamba2" else CpuMamba)(config, params)
        self.m = {k: np.zeros_like(v) for k, v in self.model.params.items()}
        self.v = {k: np.zeros_like(v) for k, v in self.model.params.items()}

    @property
    def routing(self) -> dict[str, Any] | None:
        """The cortex's routing statistics of the last step's last micro-batch (None without
        the cortex): what :class:`~evermind.train.loop.Trainer` puts in each ``Progress``."""
        return self.model.last_routing

    def _shape(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        length = self.train.seq_len
        ids = np.frombuffer(batch[0], dtype=np.int32).reshape(-1, length)
        targets = np.frombuffer(batch[1], dtype=np.int32).reshape(-1, length)
        return ids, targets

    async def train_step(self, micro_batches: list[Batch], lr: float, step: int) -> float:
        grads: dict[str, np.ndarray] = {}
        losses = []
        for batch in micro_batches:
            loss, g = self.model.loss_and_grads(*self._shape(batch))
            losses.append(loss)
            for k, v in g.items():
                grads[k] = grads[k] + v if k in grads else v
        scale = 1.0 / len(micro_batches)
        norm = global_norm(list(grads.values()), scale)
        clip = self.train.grad_clip
        if clip > 0 and norm > 0:
            scale *= clip_scale(norm, clip)
        self._optimizer_step(grads, scale, lr, step)
        return float(np.mean(losses))

    def _optimizer_step(
        self, grads: dict[str, np.ndarray], scale: float, lr: float, step: int
    ) -> None:
        t = self.train
        for name, p in self.model.params.items():
            # In place: the model owns these arrays.
            p[...], self.m[name][...], self.v[name][...] = adamw_step(
                p,
                grads[name],
                self.m[name],
                self.v[name],
                step=step,
                lr=lr,
                beta1=t.beta1,
                beta2=t.beta2,
                eps=t.eps,
                weight_decay=t.weight_decay,
                decay=not self.config.no_decay(name),
                clip_scale=scale,
            )

    async def eval_batch(self, batch: Batch) -> tuple[float, int]:
        ids, targets = self._shape(batch)
        logits = self.model.forward(ids).reshape(-1, self.config.vocab_size).astype(np.float64)
        flat = targets.reshape(-1)
        return float(np.sum(cross_entropy_fwd(logits, flat))), int(flat.size)

    async def state(self) -> dict[str, array[float]]:
        out: dict[str, array[float]] = {}
        for name, p in self.model.params.items():
            out[name] = array("f", p.astype(np.float32).reshape(-1).tobytes())
            out[f"adam.m.{name}"] = array("f", self.m[name].reshape(-1).tobytes())
            out[f"adam.v.{name}"] = array("f", self.v[name].reshape(-1).tobytes())
        return out

    async def load_state(self, tensors: dict[str, array[float]]) -> None:
        for name, p in self.model.params.items():
            p[...] = np.frombuffer(tensors[name], dtype=np.float32).reshape(p.shape)
            self.m[name][...] = np.frombuffer(tensors[f"adam.m.{name}"], np.float32).reshape(
                p.shape
            )
            self.v[name][...] = np.frombuffer(tensors[f"adam.v.{name}"], np.float32).reshape(
                p.shape
            )

    def params(self) -> dict[str, array[float]]:
        """Current weights as flat ``array('f')`` (HF names)."""
        return {
            k: array("f", v.astype(np.float32).reshape(-1).tobytes())
            for k, v in self.model.params.items()
        }
