"""The numpy training backend: the CPU model with AdamW (native-only, numpy).

Its AdamW follows ``torch.optim.AdamW`` exactly (decoupled decay ``p *= 1 - lr·wd`` on
decayed tensors; bias-corrected moments; ``eps`` added after the square root), and the
global-norm clip follows ``torch.nn.utils.clip_grad_norm_`` (scale by
``max_norm / (norm + 1e-6)`` when that is below 1). The GPU AdamW kernel is tested
against the same definition.
"""

from __future__ import annotations

from array import array

import numpy as np

from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.train.loop import Batch, TrainConfig


class CpuBackend:
    """Trains :class:`CpuMamba` with AdamW on the CPU.

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
        self.model = CpuMamba(config, params)
        self.m = {k: np.zeros_like(v) for k, v in self.model.params.items()}
        self.v = {k: np.zeros_like(v) for k, v in self.model.params.items()}

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
        norm = float(np.sqrt(sum(float(np.sum((g * scale) ** 2)) for g in grads.values())))
        clip = self.train.grad_clip
        if clip > 0 and norm > 0:
            scale *= min(1.0, clip / (norm + 1e-6))
        self._adamw(grads, scale, lr, step)
        return float(np.mean(losses))

    def _adamw(self, grads: dict[str, np.ndarray], scale: float, lr: float, step: int) -> None:
        t = self.train
        bias1 = 1 - t.beta1**step
        bias2 = 1 - t.beta2**step
        for name, p in self.model.params.items():
            g = (grads[name] * scale).astype(np.float32)
            m, v = self.m[name], self.v[name]
            m *= t.beta1
            m += (1 - t.beta1) * g
            v *= t.beta2
            v += (1 - t.beta2) * g * g
            if not self.config.no_decay(name):
                p *= 1 - lr * t.weight_decay
            denom = np.sqrt(v) / np.sqrt(bias2) + t.eps
            p -= (lr / bias1) * m / denom

    async def eval_batch(self, batch: Batch) -> tuple[float, int]:
        ids, targets = self._shape(batch)
        logits = self.model.forward(ids).reshape(-1, self.config.vocab_size).astype(np.float64)
        flat = targets.reshape(-1)
        logz = np.log(np.sum(np.exp(logits - logits.max(1, keepdims=True)), 1)) + logits.max(1)
        return float(np.sum(logz - logits[np.arange(flat.size), flat])), int(flat.size)

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
