"""Adaptation with rollback: a LoRA adapter trained on new text, kept only if it is better
(native-only, numpy).

This module owns :func:`adapt`, the recipe ``evermind adapt`` and the MCP tool
``experience_train`` run. Given the package served now and some new texts it:

1. holds out a seeded share of the texts (:func:`~evermind.train.acceptance.split_held_out`)
   and the original corpus's tail (:func:`~evermind.train.acceptance.rehearsal_slices`), and
   measures both losses on the served package;
2. trains a fresh adapter (:mod:`evermind.train.lora`: ``A``, ``B`` on ``in_proj``, ``x_proj``,
   ``out_proj`` of every Mamba-1 block, ``in_proj``, ``out_proj`` of every Mamba-2 one) with
   the :class:`~evermind.train.loop.Trainer` on a stream of
   the training texts and about ``rehearsal`` times as many tokens of the original corpus;
3. merges it into a candidate package and measures the same two losses on that package, read
   back as it would be served;
4. accepts only when the new texts' held-out loss fell by ``min_improvement`` and the
   original corpus's loss rose by at most ``max_forgetting`` (default
   :data:`DEFAULT_MAX_FORGETTING` nats/token) (:func:`~evermind.train.acceptance.judge`);
   otherwise it rolls back: no adapter, no package, only the reason and the numbers.

Nothing here writes a file: the caller writes what an accepted result returns (the merged
package, and the adapter alone if it wants it), so a rollback leaves every file as it was.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from evermind.errors import ConfigError, InputError, PackageError, TrainingDiverged
from evermind.model.config import MambaConfig
from evermind.model.inference import Model
from evermind.package import read_package
from evermind.train.acceptance import (
    bump_version,
    judge,
    rehearsal_slices,
    sequence_loss,
    split_held_out,
)
from evermind.train.corpus import harvest_stdlib_docstrings
from evermind.train.loop import Trainer
from evermind.train.lora import (
    DEFAULT_TARGETS,
    LoraAdapter,
    LoraBackend,
    LoraConfig,
    block_targets,
    init_adapter,
)
from evermind.train.lora_file import adapter_bytes, merge_package
from evermind.types import Progress, TrainConfig

if TYPE_CHECKING:
    from evermind.gpu import Device
    from evermind.train.lora_gpu import GpuLoraBackend

__all__ = [
    "DEFAULT_CORPUS_BYTES",
    "DEFAULT_MAX_FORGETTING",
    "AdaptConfig",
    "AdaptResult",
    "adapt",
    "split_text",
]

logger = logging.getLogger(__name__)

#: The default bound on forgetting: the original corpus's held-out loss may rise by at most
#: this many nats per token (about 2 % of a nano model's loss there).
DEFAULT_MAX_FORGETTING = 0.1
#: Bytes of the default rehearsal corpus (the standard-library docstrings the default model
#: was trained on).
DEFAULT_CORPUS_BYTES = 200_000
_BLANK_LINES = re.compile(r"\n\s*\n")


@dataclass(frozen=True)
class AdaptConfig:
    """How :func:`adapt` trains and judges.

    Attributes:
        rank: The adapter's rank r.
        alpha: The adapter's scale numerator (the update is ``alpha / rank · B·A``).
        targets: The projections adapted in every block (None: the block's default,
            :func:`~evermind.train.lora.block_targets`).
        steps: Optimizer steps (0: measure only; never accepted then).
        batch_size: Windows per step.
        seq_len: Tokens per window.
        lr: Peak learning rate (warmup, then cosine to a tenth).
        held_out: Share of the texts never trained on; their loss judges the result.
        rehearsal: Original-corpus tokens mixed in per new token.
        min_improvement: Nats per token the held-out loss must fall by to be accepted.
        max_forgetting: Nats per token the original corpus's loss may rise by (None:
            unchecked).
        seed: Seeds the split, the adapter's ``A``, the rehearsal window and the batches.

    Raises:
        ConfigError: A value is out of range (the rank through :class:`LoraConfig`).
    """

    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] | None = None
    steps: int = 60
    batch_size: int = 4
    seq_len: int = 64
    lr: float = 3e-3
    held_out: float = 0.2
    rehearsal: float = 2.0
    min_improvement: float = 1e-3
    max_forgetting: float | None = DEFAULT_MAX_FORGETTING
    seed: int = 0

    def __post_init__(self) -> None:
        self.lora()
        if self.steps < 0:
            raise ConfigError(f"AdaptConfig.steps must be >= 0, got {self.steps}")
        if self.batch_size < 1 or self.seq_len < 2:
            raise ConfigError(
                f"AdaptConfig: batch_size must be >= 1 and seq_len >= 2, got "
                f"{self.batch_size} and {self.seq_len}"
            )
        if not 0 < self.held_out < 1:
            raise ConfigError(f"AdaptConfig.held_out must be in (0, 1), got {self.held_out}")
        if self.rehearsal < 0 or self.min_improvement < 0:
            raise ConfigError(
                f"AdaptConfig.rehearsal and min_improvement must be >= 0, got "
                f"{self.rehearsal} and {self.min_improvement}"
            )
        if self.max_forgetting is not None and self.max_forgetting < 0:
            raise ConfigError(
                f"AdaptConfig.max_forgetting must be >= 0 or None, got {self.max_forgetting}"
            )

    def lora(self, model: MambaConfig | None = None) -> LoraConfig:
        """The adapter's shape for a model of ``model`` (None: a Mamba-1 one).

        Raises:
            ConfigError: A target is not a projection of that model's block.
        """
        targets = self.targets if model is None else block_targets(model, self.targets)
        return LoraConfig(
            rank=self.rank, alpha=self.alpha, targets=targets or DEFAULT_TARGETS, seed=self.seed
        )


@dataclass
class AdaptResult:
    """How one adaptation went.

    Attributes:
        accepted: The adapted model beat the served one (then ``adapter`` and ``package``).
        reason: Why (or why not), in words.
        held_out_before: The new texts' held-out loss on the served package (nats/token).
        held_out_after: The same on the merged candidate (None when no step ran).
        original_before: The original corpus's held-out loss on the served package (None
            without a corpus).
        original_after: The same on the candidate.
        train_texts: Texts trained on.
        held_out_texts: Texts held out.
        rehearsal_tokens: Original-corpus tokens mixed into training.
        steps: Optimizer steps run.
        seconds: Wall time of the whole call.
        version: The merged package's version (None when rolled back).
        adapter: The trained adapter (None when rolled back).
        package: The merged package's bytes (None when rolled back).
        train: The trainer's summary.
    """

    accepted: bool
    reason: str
    held_out_before: float
    held_out_after: float | None
    original_before: float | None
    original_after: float | None
    train_texts: int
    held_out_texts: int
    rehearsal_tokens: int
    steps: int = 0
    seconds: float = 0.0
    version: str | None = None
    adapter: LoraAdapter | None = None
    package: bytes | None = None
    train: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the numbers, and the adapter's and package's sizes for the objects."""
        out = {
            k: getattr(self, k)
            for k in self.__dataclass_fields__
            if k not in ("adapter", "package")
        }
        out["adapter_params"] = None if self.adapter is None else self.adapter.n_params
        out["adapter_bytes"] = None if self.adapter is None else len(adapter_bytes(self.adapter))
        out["package_bytes"] = None if self.package is None else len(self.package)
        return out


def split_text(text: str, min_chars: int = 600) -> list[str]:
    """A document as texts for :func:`adapt`: paragraphs (blank-line separated) joined until
    each holds at least ``min_chars`` characters (the last may be shorter)."""
    texts: list[str] = []
    current = ""
    for paragraph in _BLANK_LINES.split(text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        current = f"{current}\n\n{paragraph}" if current else paragraph
        if len(current) >= min_chars:
            texts.append(current)
            current = ""
    if current:
        texts.append(current)
    return texts


def adapt(
    package: bytes,
    texts: Sequence[str],
    config: AdaptConfig | None = None,
    *,
    corpus: str | None = None,
    version: str | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    device: Device | None = None,
) -> AdaptResult:
    """Trains a LoRA adapter on ``texts``; returns it merged only if it is better.

    Args:
        package: The bytes of the package served now.
        texts: The new texts (at least two: one to train on, one to hold out); see
            :func:`split_text` for a long document.
        config: Training and acceptance settings (default :class:`AdaptConfig`).
        corpus: The original text rehearsed and probed for forgetting (None: the first
            :data:`DEFAULT_CORPUS_BYTES` of the standard-library docstrings; "": none).
        version: The merged package's version (default: the served one's patch + 1).
        on_progress: Receives each training step.
        device: Train on this GPU (:class:`~evermind.train.lora_gpu.GpuLoraBackend`; the
            same steps as the numpy backend to float32 rounding); None: numpy. The losses that
            judge the result are measured on the CPU either way.

    Returns:
        The result; ``adapter`` and ``package`` only when accepted.

    Raises:
        InputError: Fewer than two non-empty texts.
        ConfigError: The package is an int8 one (not adapted), or a target is not a
            projection of its block (``x_proj`` / ``dt_proj`` on a Mamba-2 model).
        PackageError: ``package`` is not a valid package.
    """
    started = time.perf_counter()
    cfg = config or AdaptConfig()
    kept = [t for t in texts if t.strip()]
    if len(kept) < 2:
        raise InputError(
            f"adapt: {len(kept)} non-empty text(s); need at least 2 (one to train on, one to "
            "hold out); hint: split a long document with split_text"
        )
    base = read_package(package)
    block, dtype = base.config.get("model_type", "mamba"), base.manifest["model"]["dtype"]
    if block not in ("mamba", "mamba2") or dtype not in ("float32", "float16"):
        raise ConfigError(
            f"adapt: {base.ref} is a {block} package stored as {dtype}; LoRA adapts Mamba-1 "
            "and Mamba-2 packages stored as float32 or float16; hint: adapt the float model, "
            "then quantize"
        )
    served = Model(base)
    lora = cfg.lora(served.config)  # refuses a target the block lacks before any work
    tokenizer, mconfig = served.tokenizer, served.config
    eos = tokenizer.eos_id if tokenizer.eos_id is not None else mconfig.eos_token_id
    held_at, train_at = split_held_out(len(kept), cfg.held_out, cfg.seed)
    held_ids = [[*tokenizer.encode(kept[i]), eos] for i in held_at]
    new_ids = array("i")
    for i in train_at:
        new_ids.extend(tokenizer.encode(kept[i]))
        new_ids.append(eos)
    text = harvest_stdlib_docstrings(DEFAULT_CORPUS_BYTES) if corpus is None else corpus
    corpus_ids = array("i", tokenizer.encode(text)) if text else array("i")
    rehearse, probe = rehearsal_slices(corpus_ids, int(len(new_ids) * cfg.rehearsal), cfg.seed + 1)
    result = AdaptResult(
        accepted=False,
        reason="",
        held_out_before=sequence_loss(served.cpu, held_ids),
        held_out_after=None,
        original_before=sequence_loss(served.cpu, [probe]) if len(probe) else None,
        original_after=None,
        train_texts=len(train_at),
        held_out_texts=len(held_at),
        rehearsal_tokens=len(rehearse),
    )
    if cfg.steps == 0:
        result.reason = "0 steps: nothing trained; the previous package stays"
        result.seconds = time.perf_counter() - started
        return result
    stream = array("i", new_ids)
    stream.extend(rehearse)
    trained = _train(base.digest, base.ref, served, stream, cfg, lora, on_progress, result, device)
    if trained is None:
        result.seconds = time.perf_counter() - started
        return result
    new_version = version or bump_version(base.version)
    details = {
        "steps": result.steps,
        "texts": result.train_texts,
        "rehearsal_tokens": result.rehearsal_tokens,
    }
    try:
        merged = merge_package(base, trained, version=new_version, training=details)
    except PackageError as err:  # e.g. a float16 package whose merged weights overflow
        result.reason = f"the merged package cannot be written ({err}); the previous stays"
        result.seconds = time.perf_counter() - started
        return result
    candidate = Model(read_package(merged))
    result.held_out_after = sequence_loss(candidate.cpu, held_ids)
    result.original_after = sequence_loss(candidate.cpu, [probe]) if len(probe) else None
    result.accepted, result.reason = judge(
        result.held_out_before,
        result.held_out_after,
        result.original_before,
        result.original_after,
        cfg.min_improvement,
        cfg.max_forgetting,
    )
    if result.accepted:
        result.adapter, result.package, result.version = trained, merged, new_version
    result.seconds = time.perf_counter() - started
    logger.info("adapt %s: %s", base.ref, result.reason)
    return result


def _train(
    digest: str,
    ref: str,
    served: Model,
    stream: array[int],
    cfg: AdaptConfig,
    lora: LoraConfig,
    on_progress: Callable[[Progress], None] | None,
    result: AdaptResult,
    device: Device | None = None,
) -> LoraAdapter | None:
    """Trains a fresh adapter on ``stream``; None (and the reason in ``result``) if it
    diverged."""
    seq_len = max(2, min(cfg.seq_len, len(stream) - 1))
    train_cfg = TrainConfig(
        steps=cfg.steps,
        batch_size=cfg.batch_size,
        seq_len=seq_len,
        lr=cfg.lr,
        min_lr=cfg.lr / 10,
        warmup_steps=min(10, cfg.steps),
        weight_decay=0.0,
        eval_every=0,
        seed=cfg.seed,
    )
    params = {name: np.asarray(value) for name, value in served.cpu.params.items()}
    fresh = init_adapter(served.config, lora, digest, ref)
    backend: LoraBackend | GpuLoraBackend
    if device is None:
        backend = LoraBackend(served.config, params, fresh, train_cfg)
    else:
        from evermind.train.lora_gpu import GpuLoraBackend

        backend = GpuLoraBackend(device, served.config, params, fresh, train_cfg)
    trainer = Trainer(backend, stream, array("i"), train_cfg, on_progress=on_progress)

    async def run() -> tuple[Any, LoraAdapter]:
        summary = await trainer.run()
        return summary, await backend.read_adapter()

    try:
        summary, trained = asyncio.run(run())
    except TrainingDiverged as err:
        result.reason = f"training diverged ({err}); the previous package stays"
        result.steps = trainer.step
        return None
    result.steps = summary.steps
    result.train = {
        k: v for k, v in summary.to_dict().items() if k not in ("losses", "eval_losses")
    }
    return trained
