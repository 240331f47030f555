"""Low-rank adapters (LoRA) on the block projections, trained natively (native-only, numpy).

This module owns the adapter: its maths, its training backend and its file. Each targeted
projection ``W`` (out, in) of every block gets two small matrices, ``A`` (r, in) and ``B``
(out, r), and the model computes with::

    W' = W + s · B · A        s = alpha / r          (Hu et al. 2021, eq. 3)

``A`` starts small and random (PEFT's ``kaiming_uniform(a=√5)``: uniform in ±1/√in), ``B``
starts at zero, so an untrained adapter is the base model exactly. Targets of every layer,
by block (:func:`block_targets`): Mamba-1's ``in_proj``, ``x_proj``, ``out_proj`` (default)
and ``dt_proj`` (optional); Mamba-2's ``in_proj`` (D -> z | xBC | dt) and ``out_proj``
(I -> D), its only two matrices (the rest are per-head vectors and the depthwise conv).

Gradients come from the model's one full backward (:meth:`CpuMamba.loss_and_grads`, or
:class:`~evermind.model.cpu_mamba2.CpuMamba2`'s for a Mamba-2 config): it gives
``dW`` for the effective weight ``W'``, and since ``W'`` is linear in ``B`` and in ``A``::

    dB = s · dW · Aᵀ          (out, r)
    dA = s · Bᵀ · dW          (r, in)

exactly (no approximation; ``tests/unit/test_lora.py`` checks both against finite differences
in float64). :class:`LoraBackend` runs the :class:`~evermind.train.loop.Trainer` protocol with
AdamW (:func:`evermind.ops.adamw.adamw_step`) on ``A`` and ``B`` only; the base weights are a
frozen copy that nothing writes.

The adapter file (``<name>.lora.safetensors``, refused on any base but its own) and merging
into an ordinary package are :mod:`evermind.train.lora_file`'s.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from evermind.errors import ConfigError
from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.model.cpu_mamba2 import CpuMamba2
from evermind.ops.adamw import adamw_step
from evermind.ops.cross_entropy import cross_entropy_fwd
from evermind.ops.grad_norm import clip_scale, global_norm
from evermind.types import Batch, TrainConfig

__all__ = [
    "DEFAULT_TARGETS",
    "MAMBA2_TARGETS",
    "TARGETS",
    "LoraAdapter",
    "LoraBackend",
    "LoraConfig",
    "block_targets",
    "init_adapter",
    "lora_grads",
    "merged_params",
]

#: Every projection an adapter may target, by its short name in ``mixer.<name>.weight``.
TARGETS = ("in_proj", "x_proj", "dt_proj", "out_proj")
#: The default targets of a Mamba-1 block: its three big projections.
DEFAULT_TARGETS = ("in_proj", "x_proj", "out_proj")
#: The targets of a Mamba-2 block (the default there): its only two projections.
MAMBA2_TARGETS = ("in_proj", "out_proj")
_BLOCK_TARGETS = {"mamba1": TARGETS, "mamba2": MAMBA2_TARGETS}
_BLOCK_DEFAULTS = {"mamba1": DEFAULT_TARGETS, "mamba2": MAMBA2_TARGETS}


def block_targets(config: MambaConfig, targets: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The projections an adapter covers in every block of ``config``.

    Args:
        config: The model's hyperparameters (``config.block`` picks the block).
        targets: The requested short names; None: the block's default
            (:data:`DEFAULT_TARGETS` for Mamba-1, :data:`MAMBA2_TARGETS` for Mamba-2).

    Returns:
        ``targets``, or the block's default.

    Raises:
        ConfigError: The block has no projection of a requested name (``x_proj`` or
            ``dt_proj`` on a Mamba-2 model), or the block is unknown.
    """
    if config.block not in _BLOCK_TARGETS:
        raise ConfigError(
            f"LoRA: no adapter targets for block {config.block!r}; expected one of "
            f"{sorted(_BLOCK_TARGETS)}"
        )
    if targets is None:
        return _BLOCK_DEFAULTS[config.block]
    allowed = _BLOCK_TARGETS[config.block]
    missing = [t for t in targets if t not in allowed]
    if missing:
        raise ConfigError(
            f"LoRA: a {config.block} block has no {missing} projection; expected targets from "
            f"{list(allowed)}; hint: the {config.block} default is "
            f"{list(_BLOCK_DEFAULTS[config.block])}"
        )
    return targets


@dataclass(frozen=True)
class LoraConfig:
    """The adapter's shape.

    Attributes:
        rank: r, the inner dimension of ``B·A`` (at most the smaller side of every target).
        alpha: The scale's numerator: the update is ``(alpha / rank) · B·A``.
        targets: Which projections of every block get an adapter (names in :data:`TARGETS`).
        seed: Seeds ``A``'s initial values.

    Raises:
        ConfigError: The rank is not a positive integer, alpha is not a positive number, or a
            target is unknown or repeated.
    """

    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = DEFAULT_TARGETS
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ConfigError(
                f"LoraConfig.rank: expected an integer >= 1, got {self.rank!r}; "
                "hint: 4 to 16 suits the nano and small presets"
            )
        if not isinstance(self.alpha, int | float) or not math.isfinite(self.alpha):
            raise ConfigError(f"LoraConfig.alpha: expected a finite number, got {self.alpha!r}")
        if self.alpha <= 0:
            raise ConfigError(
                f"LoraConfig.alpha: expected > 0, got {self.alpha}; hint: 2 x rank is usual"
            )
        unknown = [t for t in self.targets if t not in TARGETS]
        if not self.targets or unknown or len(set(self.targets)) != len(self.targets):
            raise ConfigError(
                f"LoraConfig.targets: expected distinct names from {list(TARGETS)}, got "
                f"{list(self.targets)}; hint: the default is {list(DEFAULT_TARGETS)}"
            )


def target_names(config: MambaConfig, targets: tuple[str, ...]) -> list[str]:
    """The HF weight names an adapter with ``targets`` covers, layer by layer."""
    return [
        f"backbone.layers.{i}.mixer.{target}.weight"
        for i in range(config.n_layer)
        for target in targets
    ]


@dataclass
class LoraAdapter:
    """A trained (or fresh) adapter: ``A`` and ``B`` per targeted weight, float32.

    Attributes:
        rank: r.
        alpha: The scale's numerator.
        targets: The short names of the targeted projections.
        base_digest: ``"sha256:<hex>"`` of the base package it was trained on.
        A: Base weight name -> ``A`` (r, in).
        B: Base weight name -> ``B`` (out, r).
        base_ref: The base's model id (``evermind/<name>:<version>``), for messages.
    """

    rank: int
    alpha: float
    targets: tuple[str, ...]
    base_digest: str
    A: dict[str, np.ndarray]
    B: dict[str, np.ndarray]
    base_ref: str = ""

    @property
    def scale(self) -> float:
        """s = alpha / r."""
        return self.alpha / self.rank

    @property
    def n_params(self) -> int:
        """Trainable numbers in the adapter."""
        return sum(a.size for a in self.A.values()) + sum(b.size for b in self.B.values())

    def delta(self, name: str) -> np.ndarray:
        """``s · B · A`` of one targeted weight (out, in), float64."""
        return self.scale * (self.B[name].astype(np.float64) @ self.A[name].astype(np.float64))


def init_adapter(
    config: MambaConfig, lora: LoraConfig, base_digest: str, base_ref: str = ""
) -> LoraAdapter:
    """A fresh adapter for a model of ``config``: ``A`` uniform in ±1/√in, ``B`` zero.

    Raises:
        ConfigError: A target is not a projection of this block (:func:`block_targets`), or
            the rank exceeds the smaller side of a targeted projection.
    """
    block_targets(config, lora.targets)
    shapes = config.param_shapes()
    rng = np.random.default_rng(lora.seed)
    A: dict[str, np.ndarray] = {}
    B: dict[str, np.ndarray] = {}
    for name in target_names(config, lora.targets):
        out_dim, in_dim = shapes[name]
        if lora.rank > min(out_dim, in_dim):
            raise ConfigError(
                f"LoraConfig.rank: {lora.rank} exceeds {name} {shapes[name]} (at most "
                f"{min(out_dim, in_dim)}); hint: lower --rank, or drop that target"
            )
        bound = 1.0 / math.sqrt(in_dim)
        A[name] = rng.uniform(-bound, bound, (lora.rank, in_dim)).astype(np.float32)
        B[name] = np.zeros((out_dim, lora.rank), np.float32)
    return LoraAdapter(lora.rank, lora.alpha, lora.targets, base_digest, A, B, base_ref)


def lora_grads(
    A: Mapping[str, np.ndarray],
    B: Mapping[str, np.ndarray],
    scale: float,
    grads: Mapping[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(dA, dB) from the full gradient ``dW`` of each targeted effective weight.

    Args:
        A: Name -> ``A`` (r, in).
        B: Name -> ``B`` (out, r).
        scale: s = alpha / r.
        grads: Name -> dL/dW' (out, in), e.g. from :meth:`CpuMamba.loss_and_grads`.
    """
    dA = {name: scale * (B[name].T @ grads[name]) for name in A}  # (r, in)
    dB = {name: scale * (grads[name] @ A[name].T) for name in A}  # (out, r)
    return dA, dB


def merged_params(params: Mapping[str, np.ndarray], adapter: LoraAdapter) -> dict[str, np.ndarray]:
    """Base weights (HF names, PyTorch shapes) with ``s·B·A`` added to each target (float32)."""
    out = {name: np.asarray(value, np.float32) for name, value in params.items()}
    for name in adapter.A:
        base = out[name].astype(np.float64).reshape(adapter.B[name].shape[0], -1)
        out[name] = (base + adapter.delta(name)).astype(np.float32).reshape(out[name].shape)
    return out


class LoraBackend:
    """Trains an adapter on :class:`CpuMamba` (:class:`CpuMamba2` for a Mamba-2 config) with
    AdamW on ``A`` and ``B`` only.

    The model's targeted weights are kept equal to ``W + s·B·A`` (recomputed after every
    step); every other weight, and the frozen copy of each target's ``W``, is never written.

    Args:
        config: Model hyperparameters.
        params: The base weights (HF names; flat or shaped).
        adapter: The starting adapter (copied; read the trained one with :meth:`adapter`).
        train: Optimisation settings (betas, eps, weight decay, clipping).
        dtype: np.float32 (training) or np.float64 (gradient checks).

    Raises:
        ConfigError: The adapter targets a projection this block does not have.
    """

    def __init__(
        self,
        config: MambaConfig,
        params: Mapping[str, Any],
        adapter: LoraAdapter,
        train: TrainConfig,
        dtype: npt.DTypeLike = np.float32,
    ) -> None:
        self.config = config
        self.train = train
        self._meta = adapter
        block_targets(config, adapter.targets)
        model = CpuMamba2 if config.block == "mamba2" else CpuMamba
        self.model: CpuMamba = model(config, params, dtype)
        dt = self.model.dtype
        self.base = {name: self.model.params[name].copy() for name in adapter.A}
        self.A = {name: adapter.A[name].astype(dt) for name in adapter.A}
        self.B = {name: adapter.B[name].astype(dt) for name in adapter.B}
        self.m = {f"{p}.{n}": np.zeros_like(v) for p, d in self._tensors() for n, v in d.items()}
        self.v = {key: np.zeros_like(value) for key, value in self.m.items()}
        self._apply()

    def _tensors(self) -> tuple[tuple[str, dict[str, np.ndarray]], ...]:
        return (("lora_A", self.A), ("lora_B", self.B))

    def _apply(self) -> None:
        """Writes ``W + s·B·A`` into the model's targeted weights."""
        scale = self._meta.scale
        for name, base in self.base.items():
            self.model.params[name][...] = base + scale * (self.B[name] @ self.A[name])

    def _shape(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        ids = np.frombuffer(batch[0], dtype=np.int32).reshape(-1, self.train.seq_len)
        targets = np.frombuffer(batch[1], dtype=np.int32).reshape(-1, self.train.seq_len)
        return ids, targets

    def loss_and_grads(
        self, ids: Any, targets: Any
    ) -> tuple[float, dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(mean loss, dA, dB) of one batch at the current adapter.

        Args:
            ids: Input token ids (B, L).
            targets: Target ids (B, L).
        """
        self._apply()  # A or B may have been changed in place (finite-difference checks)
        loss, grads = self.model.loss_and_grads(ids, targets)
        dA, dB = lora_grads(self.A, self.B, self._meta.scale, grads)
        return loss, dA, dB

    async def train_step(self, micro_batches: list[Batch], lr: float, step: int) -> float:
        sums: dict[str, np.ndarray] = {}
        losses = []
        for batch in micro_batches:
            loss, dA, dB = self.loss_and_grads(*self._shape(batch))
            losses.append(loss)
            for part, grads in (("lora_A", dA), ("lora_B", dB)):
                for name, g in grads.items():
                    key = f"{part}.{name}"
                    sums[key] = sums[key] + g if key in sums else g
        scale = 1.0 / len(micro_batches)
        norm = global_norm(list(sums.values()), scale)
        if self.train.grad_clip > 0 and norm > 0:
            scale *= clip_scale(norm, self.train.grad_clip)
        t = self.train
        for part, tensors in self._tensors():
            for name, p in tensors.items():
                key = f"{part}.{name}"
                p[...], self.m[key][...], self.v[key][...] = adamw_step(
                    p,
                    sums[key],
                    self.m[key],
                    self.v[key],
                    step=step,
                    lr=lr,
                    beta1=t.beta1,
                    beta2=t.beta2,
                    eps=t.eps,
                    weight_decay=t.weight_decay,
                    clip_scale=scale,
                )
        self._apply()
        return float(np.mean(losses))

    async def eval_batch(self, batch: Batch) -> tuple[float, int]:
        ids, targets = self._shape(batch)
        logits = self.model.forward(ids).reshape(-1, self.config.vocab_size).astype(np.float64)
        flat = targets.reshape(-1)
        return float(np.sum(cross_entropy_fwd(logits, flat))), int(flat.size)

    async def state(self) -> dict[str, array[float]]:
        """``A``, ``B`` (``lora_A.<name>``, ``lora_B.<name>``) and their AdamW moments."""
        out: dict[str, array[float]] = {}
        for part, tensors in self._tensors():
            for name, value in tensors.items():
                key = f"{part}.{name}"
                out[key] = array("f", value.astype(np.float32).reshape(-1).tobytes())
                out[f"adam.m.{key}"] = array("f", self.m[key].astype(np.float32).tobytes())
                out[f"adam.v.{key}"] = array("f", self.v[key].astype(np.float32).tobytes())
        return out

    async def load_state(self, tensors: dict[str, array[float]]) -> None:
        for part, values in self._tensors():
            for name, value in values.items():
                key = f"{part}.{name}"
                for target, source in ((value, key), (self.m[key], f"adam.m.{key}")):
                    target[...] = np.frombuffer(tensors[source], np.float32).reshape(value.shape)
                self.v[key][...] = np.frombuffer(tensors[f"adam.v.{key}"], np.float32).reshape(
                    value.shape
                )
        self._apply()

    async def read_adapter(self) -> LoraAdapter:
        """:meth:`adapter`, as :class:`~evermind.train.lora_gpu.GpuLoraBackend` reads it."""
        return self.adapter()

    def adapter(self) -> LoraAdapter:
        """The adapter as trained so far (float32 copies)."""
        meta = self._meta
        return LoraAdapter(
            meta.rank,
            meta.alpha,
            meta.targets,
            meta.base_digest,
            {name: value.astype(np.float32) for name, value in self.A.items()},
            {name: value.astype(np.float32) for name, value in self.B.items()},
            meta.base_ref,
        )
