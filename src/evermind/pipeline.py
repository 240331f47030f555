"""The main job, end to end: corpus → tokenizer → trained model → ``.evermind`` (browser-safe).

The Studio (in the tab, GPU through ``navigator.gpu``), ``evermind train`` (natively, wgpu-py
or numpy) and ``make demo`` all run these same steps; only the backend differs.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import evermind
from evermind.errors import ConfigError
from evermind.model.config import PRESETS, MambaConfig
from evermind.package import Tensor, write_package
from evermind.package.manifest import utc_timestamp
from evermind.tokenizer import Tokenizer
from evermind.train.corpus import harvest_stdlib_docstrings
from evermind.train.data import split_held_out
from evermind.train.loop import TrainConfig, TrainResult

DEFAULT_CORPUS_BYTES = 1_000_000


@dataclass
class JobConfig:
    """What to train and how to name the result.

    Attributes:
        name: Package name, served as ``evermind/<name>:<version>``.
        version: Package version.
        preset: Model size preset (``nano``, ``small``, ``base``).
        vocab_size: Tokenizer vocabulary size to train.
        held_out: Fraction of the token stream kept for evaluation (the tail).
        seed: Seed of the weights (the batches use ``train.seed``).
        dtype: Stored weight precision in the package (``float32`` or ``float16``).
        train: Optimisation settings.
    """

    name: str = "evermind-default"
    version: str = "0.1.0"
    preset: str = "nano"
    vocab_size: int = 2048
    held_out: float = 0.05
    seed: int = 0
    dtype: str = "float32"
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ConfigError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")


def default_corpus(max_bytes: int = DEFAULT_CORPUS_BYTES) -> tuple[str, str]:
    """The embedded default corpus: this Python's standard-library docstrings.

    Returns:
        (text, description) — the description goes into the package's training summary.
    """
    text = harvest_stdlib_docstrings(max_bytes)
    import sys

    version = ".".join(map(str, sys.version_info[:3]))
    return text, f"Python {version} standard library docstrings ({len(text.encode()):,} bytes)"


def train_tokenizer(
    text: str, vocab_size: int, on_progress: Callable[[int, int], None] | None = None
) -> Tokenizer:
    """Trains the byte-level BPE tokenizer (``<|endoftext|>`` as eos/bos/pad)."""
    return Tokenizer.train(text, vocab_size, on_progress=on_progress)


def tokenize(tokenizer: Tokenizer, text: str) -> array[int]:
    """Encodes the corpus into one int32 token stream."""
    return array("i", tokenizer.encode(text))


def model_config(job: JobConfig, tokenizer: Tokenizer) -> MambaConfig:
    """The model's hyperparameters: the preset with the tokenizer's vocabulary and ids."""
    eos = tokenizer.eos_id or 0
    return MambaConfig.preset(
        job.preset,
        tokenizer.vocab_size,
        eos_token_id=eos,
        bos_token_id=tokenizer.bos_id if tokenizer.bos_id is not None else eos,
        pad_token_id=tokenizer.pad_id if tokenizer.pad_id is not None else eos,
    )


def split(job: JobConfig, tokens: array[int]) -> tuple[array[int], array[int]]:
    """(train, held-out) token streams."""
    return split_held_out(tokens, job.held_out)


def export_package(
    job: JobConfig,
    config: MambaConfig,
    params: dict[str, array[float]],
    tokenizer: Tokenizer,
    result: TrainResult | None,
    corpus: str,
    device: str,
    bench: dict[str, float] | None = None,
    created_at: datetime | None = None,
) -> bytes:
    """Writes the ``.evermind`` package bytes of a trained model."""
    shapes = config.param_shapes()
    tensors = {name: Tensor(shapes[name], params[name]) for name in shapes}
    training: dict[str, Any] = {"corpus": corpus, "device": device, "preset": job.preset}
    if result is not None:
        training.update(
            steps=result.steps,
            tokens=result.tokens,
            initial_loss=result.initial_loss,
            final_loss=result.final_loss,
            eval_loss=result.eval_loss,
            tokens_per_second=result.tokens_per_second,
            batch_size=job.train.batch_size,
            seq_len=job.train.seq_len,
            lr=job.train.lr,
            seed=job.seed,
        )
    return write_package(
        name=job.name,
        version=job.version,
        created_at=utc_timestamp(created_at or datetime.now(UTC)),
        producer=f"evermind {evermind.__version__} ({device})",
        config=config.to_hf_config(),
        tensors=tensors,
        tokenizer_json=tokenizer.to_json(),
        training=training,
        bench=bench,
        dtype=job.dtype,
    )


def sample_text(text: str, chars: int = 400, seed: int = 0) -> str:
    """A short excerpt of the corpus (shown in the Studio's data panel)."""
    if len(text) <= chars:
        return text
    start = random.Random(seed).randrange(0, len(text) - chars)
    return text[start : start + chars]
