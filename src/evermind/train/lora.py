"""Low-rank adapters (LoRA) on the block projections, trained natively (native-only, numpy).

This module owns the adapter: its maths, its training backend and its file. Each targeted
projection ``W`` (out, in) of every block gets two small matrices, ``A`` (r, in) and ``B``
(out, r), and the model computes with::

    W' = W + s · B · A        s = alpha / r          (Hu et al. 2021, eq. 3)

``A`` starts small and random (PEFT's ``kaiming_uniform(a=√5)``: uniform in ±1/√in), ``B``
starts at zero, so an untrained adapter is the base model exactly. Targets: ``in_proj``,
``x_proj``, ``out_proj`` (default) and ``dt_proj`` (optional) of every layer.

Gradients come from :meth:`CpuMamba.loss_and_grads`, the model's one full backward: it gives
``dW`` for the effective weight ``W'``, and since ``W'`` is linear in ``B`` and in ``A``::

    dB = s · dW · Aᵀ          (out, r)
    dA = s · Bᵀ · dW          (r, in)

exactly (no approximation; ``tests/unit/test_lora.py`` checks both against finite differences
in float64). :class:`LoraBackend` runs the :class:`~evermind.train.loop.Trainer` protocol with
AdamW (:func:`evermind.ops.adamw.adamw_step`) on ``A`` and ``B`` only; the base weights are a
frozen copy that nothing writes.

The file, ``<name>.lora.safetensors``, holds only ``A`` and ``B`` under PEFT's tensor names
(``base_model.model.backbone.layers.{i}.mixer.in_proj.lora_A.weight``, …) and in its metadata
the rank, alpha, targets and the digest of the base package; :func:`merge_package` refuses it
on any other base. Merging writes ``W + s·B·A`` into an ordinary package: the same tensor
names and shapes, so our reader and ``transformers`` load it as they load the base.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from evermind.errors import ConfigError, PackageError
from evermind.model.config import MambaConfig
from evermind.model.cpu import CpuMamba
from evermind.ops.adamw import adamw_step
from evermind.ops.cross_entropy import cross_entropy_fwd
from evermind.ops.grad_norm import clip_scale, global_norm
from evermind.package import Package, Tensor, utc_timestamp, write_package
from evermind.package.limits import PackageLimits
from evermind.package.safetensors_io import decode_safetensors, encode_safetensors
from evermind.types import Batch, TrainConfig

__all__ = [
    "ADAPTER_FORMAT",
    "ADAPTER_SUFFIX",
    "DEFAULT_TARGETS",
    "TARGETS",
    "LoraAdapter",
    "LoraBackend",
    "LoraConfig",
    "init_adapter",
    "lora_grads",
    "merge_package",
    "merged_params",
]

#: Every projection an adapter may target, by its short name in ``mixer.<name>.weight``.
TARGETS = ("in_proj", "x_proj", "dt_proj", "out_proj")
#: The default targets: the block's three big projections.
DEFAULT_TARGETS = ("in_proj", "x_proj", "out_proj")
#: The ``format`` written in an adapter file's metadata.
ADAPTER_FORMAT = "evermind.lora/1"
#: How an exported adapter file is named: ``<name>.lora.safetensors``.
ADAPTER_SUFFIX = ".lora.safetensors"
_PEFT_PREFIX = "base_model.model."


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

    def to_bytes(self) -> bytes:
        """The adapter file: ``A`` and ``B`` under PEFT's names, float32, and the metadata."""
        tensors: dict[str, Tensor] = {}
        for name in self.A:
            stem = _PEFT_PREFIX + name.removesuffix(".weight")
            for part, value in (("lora_A", self.A[name]), ("lora_B", self.B[name])):
                flat = array("f", np.ascontiguousarray(value, np.float32).tobytes())
                tensors[f"{stem}.{part}.weight"] = Tensor(tuple(value.shape), flat)
        metadata = {
            "format": ADAPTER_FORMAT,
            "rank": str(self.rank),
            "alpha": repr(float(self.alpha)),
            "targets": json.dumps(list(self.targets)),
            "base_digest": self.base_digest,
            "base_ref": self.base_ref,
            "n_layer": str(len(self.A) // len(self.targets)),
        }
        return encode_safetensors(tensors, dtype="F32", metadata=metadata)

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "adapter") -> LoraAdapter:
        """Reads and checks an adapter file written by :meth:`to_bytes`.

        Args:
            data: The file's bytes.
            where: What to call it in messages (its path).

        Raises:
            PackageError: It is not an Evermind adapter file, its metadata is missing or
                wrong, or a tensor is missing, extra, misshapen or not finite.
        """
        tensors, meta = decode_safetensors(
            data, member=where, max_header_bytes=PackageLimits().max_safetensors_header_bytes
        )
        if meta.get("format") != ADAPTER_FORMAT:
            raise PackageError(
                f"{where}: metadata format is {meta.get('format')!r}, expected "
                f"{ADAPTER_FORMAT!r}; hint: export the adapter with `evermind adapt "
                "--adapter-out`"
            )
        try:
            config = LoraConfig(
                rank=int(meta["rank"]),
                alpha=float(meta["alpha"]),
                targets=tuple(json.loads(meta["targets"])),
            )
            n_layer = int(meta["n_layer"])
            digest = meta["base_digest"]
        except (KeyError, ValueError, TypeError, ConfigError) as err:
            raise PackageError(
                f"{where}: adapter metadata is incomplete or invalid ({err}); expected rank, "
                "alpha, targets, n_layer and base_digest"
            ) from err
        pairs: dict[str, dict[str, np.ndarray]] = {"lora_A": {}, "lora_B": {}}
        for key, tensor in tensors.items():
            stem, _, part = key.removesuffix(".weight").rpartition(".")
            if not key.startswith(_PEFT_PREFIX) or part not in pairs:
                raise PackageError(f"{where}: unexpected tensor {key!r} in an adapter file")
            value = np.frombuffer(tensor.to_float32(), np.float32).reshape(tensor.shape)
            if not np.isfinite(value).all():
                raise PackageError(f"{where}: tensor {key!r} holds NaN or infinity")
            pairs[part][stem.removeprefix(_PEFT_PREFIX) + ".weight"] = value.copy()
        A, B = pairs["lora_A"], pairs["lora_B"]
        expected = {
            f"backbone.layers.{i}.mixer.{t}.weight" for i in range(n_layer) for t in config.targets
        }
        if set(A) != expected or set(B) != expected:
            raise PackageError(
                f"{where}: expected lora_A and lora_B for {len(expected)} weights "
                f"({n_layer} layers x {list(config.targets)}), got {len(A)} and {len(B)}"
            )
        for name in expected:
            if A[name].shape[0] != config.rank or B[name].shape[1] != config.rank:
                raise PackageError(
                    f"{where}: {name} has lora_A {A[name].shape} and lora_B {B[name].shape}; "
                    f"expected (r, in) and (out, r) with r = {config.rank}"
                )
        return cls(
            config.rank, config.alpha, config.targets, digest, A, B, meta.get("base_ref", "")
        )

    def check_base(self, package: Package) -> None:
        """Refuses a base other than the one this adapter was trained on.

        Raises:
            PackageError: The package's digest differs from :attr:`base_digest`, or its
                weights do not have the shapes the adapter expects.
        """
        if package.digest != self.base_digest:
            raise PackageError(
                f"adapter: trained on {self.base_ref or 'another package'} "
                f"({self.base_digest[:19]}…), refused on {package.ref} ({package.digest[:19]}…); "
                "hint: an adapter only fits the exact package it was trained on"
            )
        for name in self.A:
            shape = package.tensors[name].shape if name in package.tensors else None
            want = (self.B[name].shape[0], self.A[name].shape[1])
            if shape != want:
                raise PackageError(
                    f"adapter: {name} is {shape} in {package.ref}, the adapter needs {want}"
                )


def init_adapter(
    config: MambaConfig, lora: LoraConfig, base_digest: str, base_ref: str = ""
) -> LoraAdapter:
    """A fresh adapter for a model of ``config``: ``A`` uniform in ±1/√in, ``B`` zero.

    Raises:
        ConfigError: The rank exceeds the smaller side of a targeted projection.
    """
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


def merge_package(
    base: Package,
    adapter: LoraAdapter,
    *,
    version: str | None = None,
    training: Mapping[str, Any] | None = None,
    created_at: datetime | None = None,
) -> bytes:
    """An ordinary package: ``base`` with the adapter merged into its weights.

    Everything else is the base's — name, config, tokenizer, generation config, the
    embedding head and the storage dtype; the manifest's ``training`` gains an ``adapter``
    entry (rank, alpha, targets, the base digest) plus whatever ``training`` adds.

    Args:
        base: The package the adapter was trained on.
        adapter: The adapter.
        version: The merged package's version (default: the base's).
        training: More fields for the manifest's ``adapter`` entry (JSON-typed).
        created_at: The timestamp written (default: now).

    Raises:
        PackageError: The adapter belongs to another base (:meth:`LoraAdapter.check_base`).
    """
    adapter.check_base(base)
    params = {
        name: np.frombuffer(t.to_float32(), np.float32).reshape(t.shape)
        for name, t in base.tensors.items()
    }
    merged = merged_params(params, adapter)
    tensors = {
        name: Tensor(tuple(value.shape), array("f", value.tobytes()))
        for name, value in merged.items()
    }
    summary = dict(base.manifest.get("training", {}))
    summary["adapter"] = {
        "method": "lora",
        "rank": adapter.rank,
        "alpha": adapter.alpha,
        "targets": list(adapter.targets),
        "base": base.ref,
        "base_digest": base.digest,
        **(training or {}),
    }
    return write_package(
        name=base.name,
        version=version or base.version,
        created_at=utc_timestamp(created_at or datetime.now(UTC)),
        producer=f"{base.manifest.get('producer', 'evermind')} + lora",
        config=base.config,
        tensors=tensors,
        tokenizer_json=base.tokenizer_json,
        training=summary,
        dtype=str(base.manifest["model"]["dtype"]),
        generation_config=base.generation_config,
        embedder=base.embedder,
    )


class LoraBackend:
    """Trains an adapter on :class:`CpuMamba` with AdamW on ``A`` and ``B`` only.

    The model's targeted weights are kept equal to ``W + s·B·A`` (recomputed after every
    step); every other weight, and the frozen copy of each target's ``W``, is never written.

    Args:
        config: Model hyperparameters.
        params: The base weights (HF names; flat or shaped).
        adapter: The starting adapter (copied; read the trained one with :meth:`adapter`).
        train: Optimisation settings (betas, eps, weight decay, clipping).
        dtype: np.float32 (training) or np.float64 (gradient checks).
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
        self.model = CpuMamba(config, params, dtype)
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
