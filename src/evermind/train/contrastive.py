"""Tuning the model's sentence embeddings for retrieval on the user's own texts (numpy, CPU).

A causal language model trained on next-token prediction embeds sentences poorly: its mean
hidden state says more about syntax than about what a memory is *about*. This module tunes
the same weights with a contrastive objective so that texts about the same thing land close
together, without labels, in the manner of Contriever (Izacard et al., 2022, "Unsupervised
Dense Information Retrieval with Contrastive Learning"):

- **views**: two independent random crops of the same text (a contiguous run of 20–60% of
  its words, each word then dropped with probability 0.15) form a positive pair;
- **in-batch negatives**: the crops of every other text in the batch are negatives;
- **loss**: symmetric InfoNCE over the cosine similarities divided by a temperature τ;
- **embedding**: the one ``CpuMamba.embed`` and the runtime use (mean final normed hidden
  state, L2-normalised), so the tuned package serves exactly what was trained.

The gradient flows through the normalisation and the pooling (:mod:`evermind.ops.pool`) into
``CpuMamba.backward_hidden`` and from there into every weight; the weights move by Adam
(:func:`evermind.ops.adamw.adamw_step` without weight decay). ``info_nce`` (two
:mod:`evermind.ops.cross_entropy` passes) is checked against finite differences in
``tests/unit/test_contrastive.py``.

The texts are the user's own (memories, notes); a crop of a memory must find the rest of
it, which teaches the embedder which words and phrases belong together in this user's
world. ``evermind tune-embedder`` is the command. Native-only (numpy).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evermind.errors import ConfigError, ShapeError, check_ranges
from evermind.ops.adamw import adamw_step
from evermind.ops.cross_entropy import cross_entropy_bwd, cross_entropy_fwd
from evermind.ops.pool import lengths_of_mask, pool_bwd, pool_fwd

FloatArray = np.ndarray

__all__ = [
    "TuneConfig",
    "TuneResult",
    "blas_threads",
    "contrastive_grads",
    "crop_view",
    "info_nce",
    "length_buckets",
    "load_texts",
    "pooled_loss_grads",
    "tune_embedder",
]

#: Fewest words a text needs to give two different crops.
MIN_WORDS = 3

#: Views per length bucket at least: a step runs the model once per bucket (see
#: :func:`length_buckets`), each padded only to its own longest view.
BUCKET_ROWS = 16


@dataclass(frozen=True)
class TuneConfig:
    """Knobs of the contrastive tuning (defaults measured on the memory development set).

    Attributes:
        steps: Optimiser steps.
        batch_size: Texts per step (each gives two views; the others are negatives).
        lr: Adam learning rate (constant after a linear warm-up of ``warmup_steps``).
        warmup_steps: Steps of linear learning-rate warm-up.
        temperature: InfoNCE temperature τ: similarities are divided by it.
        min_crop: Shortest crop, as a fraction of the text's words.
        max_crop: Longest crop, as a fraction of the text's words.
        word_drop: Probability of dropping each word of a crop.
        max_tokens: Tokens kept per view (longer views are cut).
        seed: Seeds the batches and crops.
    """

    steps: int = 300
    batch_size: int = 32
    lr: float = 5e-4
    warmup_steps: int = 20
    temperature: float = 0.05
    min_crop: float = 0.2
    max_crop: float = 0.6
    word_drop: float = 0.15
    max_tokens: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        check_ranges(
            "TuneConfig",
            [
                ("steps", self.steps, 1, math.inf),
                ("batch_size", self.batch_size, 2, math.inf),
                ("lr", self.lr, 1e-12, 1.0),
                ("warmup_steps", self.warmup_steps, 0, math.inf),
                ("temperature", self.temperature, 1e-3, 10.0),
                ("min_crop", self.min_crop, 0.01, 1.0),
                ("max_crop", self.max_crop, 0.01, 1.0),
                ("word_drop", self.word_drop, 0.0, 0.9),
                ("max_tokens", self.max_tokens, 2, math.inf),
            ],
        )
        if self.min_crop > self.max_crop:
            raise ConfigError(
                f"TuneConfig: min_crop {self.min_crop} is above max_crop {self.max_crop}; "
                "expected min_crop <= max_crop"
            )


@dataclass(frozen=True)
class TuneResult:
    """What a tuning run did.

    Attributes:
        steps: Optimiser steps taken.
        texts: Distinct texts trained on.
        first_loss: Mean InfoNCE loss over the first 10% of steps.
        final_loss: Mean InfoNCE loss over the last 10% of steps.
        seconds: Wall time.
        losses: The loss of every step.
    """

    steps: int
    texts: int
    first_loss: float
    final_loss: float
    seconds: float
    losses: list[float]

    def summary(self, config: TuneConfig) -> dict[str, Any]:
        """The JSON summary written into the package's ``training.embedding_tuning``."""
        return {
            "objective": "infonce-crops",
            "steps": self.steps,
            "texts": self.texts,
            "first_loss": round(self.first_loss, 4),
            "final_loss": round(self.final_loss, 4),
            "seconds": round(self.seconds, 1),
            **asdict(config),
        }


def crop_view(
    text: str,
    rng: random.Random,
    min_crop: float = 0.2,
    max_crop: float = 0.6,
    word_drop: float = 0.15,
) -> str:
    """A random contiguous run of ``text``'s words with some words dropped.

    Always keeps at least ``MIN_WORDS`` words (or all of a shorter text) and at least one word
    after dropping.
    """
    words = text.split()
    n = len(words)
    length = min(n, max(MIN_WORDS, round(n * rng.uniform(min_crop, max_crop))))
    start = rng.randint(0, n - length)
    span = words[start : start + length]
    kept = [word for word in span if rng.random() >= word_drop]
    return " ".join(kept or span)


def info_nce(
    a: FloatArray, b: FloatArray, temperature: float
) -> tuple[float, FloatArray, FloatArray]:
    """Symmetric InfoNCE of paired unit vectors: row i of ``a`` should find row i of ``b``.

    ``loss = ½·mean_i CE(softmax_j(a_i·b_j/τ), i) + ½·mean_j CE(softmax_i(a_i·b_j/τ), j)``.

    Args:
        a: (N, D) first views.
        b: (N, D) second views.
        temperature: τ.

    Returns:
        (loss, dL/da, dL/db).
    """
    if a.shape != b.shape or a.ndim != 2:
        raise ShapeError(f"info_nce: views must both be (N, D), got {a.shape} and {b.shape}")
    n = a.shape[0]
    logits = a @ b.T / temperature  # (N, N)
    pairs = np.arange(n)  # row i's target is column i, and column j's is row j
    loss = 0.5 * (
        cross_entropy_fwd(logits, pairs).mean() + cross_entropy_fwd(logits.T, pairs).mean()
    )
    dlogits = (  # (N, N): each direction's mean contributes half
        cross_entropy_bwd(logits, pairs, 0.5 / n) + cross_entropy_bwd(logits.T, pairs, 0.5 / n).T
    )
    da = dlogits @ b / temperature
    db = dlogits.T @ a / temperature
    return float(loss), da, db


def _pad(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(row) for row in rows)
    ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros((len(rows), width), bool)
    for r, row in enumerate(rows):
        ids[r, : len(row)] = row
        mask[r, : len(row)] = True
    return ids, mask


def length_buckets(lengths: Sequence[int], rows: int = BUCKET_ROWS) -> list[list[int]]:
    """Row indices grouped by length, shortest first, at least ``rows`` per group.

    The model is causal and the views are padded on the right, so a view's hidden states, and
    the gradient it sends back, do not depend on the padding after it: running each group
    padded to its own longest view computes the same numbers (up to the rounding of summing
    the groups' weight gradients) with fewer padded positions than one batch padded to the
    longest view of all.
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    groups = [order[i : i + rows] for i in range(0, len(order), max(1, rows))]
    if len(groups) > 1 and len(groups[-1]) < rows:  # no group smaller than ``rows``
        groups[-2:] = [groups[-2] + groups[-1]]
    # Merge neighbours whose split saves under a tenth of their padded positions (each
    # group costs a model run of its own).
    merged: list[list[int]] = []
    for group in groups:
        if merged:
            last = merged[-1]
            apart = len(last) * lengths[last[-1]] + len(group) * lengths[group[-1]]
            if (len(last) + len(group)) * lengths[group[-1]] <= 1.1 * apart:
                merged[-1] = last + group
                continue
        merged.append(group)
    return merged


@contextlib.contextmanager
def blas_threads(threads: int = 1) -> Iterator[None]:
    """Limits numpy's BLAS to ``threads`` while the block runs (when ``threadpoolctl`` is there).

    The tuning's matrices are small ((batch x length) rows of d_model / d_inner): a second
    BLAS thread gains little, and when the cores are busy, OpenBLAS's spinning threads slow
    every product many times over (measured: a tuning step 7x slower on two loaded cores).
    Without ``threadpoolctl`` installed the BLAS keeps its default (set
    ``OPENBLAS_NUM_THREADS=1`` before starting Python for the same effect).
    """
    try:  # untyped module: imported by name so that strict typing does not need its stubs
        threadpoolctl: Any = importlib.import_module("threadpoolctl")
    except ImportError:
        yield
        return
    with threadpoolctl.threadpool_limits(limits=threads, user_api="blas"):
        yield


class Adam:
    """Plain Adam (AdamW without weight decay, :func:`evermind.ops.adamw.adamw_step`) over a
    dict of numpy parameters, updated in place; the moments live here."""

    def __init__(self, params: dict[str, FloatArray]) -> None:
        self.params = params
        self.first = {name: np.zeros_like(value) for name, value in params.items()}
        self.second = {name: np.zeros_like(value) for name, value in params.items()}

    def step(self, grads: dict[str, Any], step: int, lr: float) -> None:
        """One update of every parameter (``step`` counts from 1)."""
        for name, value in self.params.items():
            value[...], self.first[name], self.second[name] = adamw_step(
                value,
                grads[name],
                self.first[name],
                self.second[name],
                step=step,
                lr=lr,
                weight_decay=0.0,
            )


def pooled_loss_grads(
    cpu: Any,
    views: Sequence[Sequence[int]],
    loss_of_units: Callable[[FloatArray], tuple[float, FloatArray]],
    bucket_rows: int = BUCKET_ROWS,
) -> tuple[float, dict[str, FloatArray]]:
    """A loss of the pooled unit embeddings of ``views`` and its gradient for every weight.

    The model runs once per :func:`length_buckets` group of views, each padded only to its
    own longest view; the result equals one batch padded to the longest view up to float
    rounding (``tests/unit/test_tune_speed.py``).

    Args:
        cpu: The :class:`evermind.model.cpu.CpuMamba` being tuned.
        views: Token-id rows (any lengths >= 1).
        loss_of_units: Maps the (n, D) unit embeddings, in the order of ``views``, to
            ``(loss, dloss/dunits)``.
        bucket_rows: Fewest views per group.

    Returns:
        (loss, grads) with one gradient per parameter; grads is empty when the loss is not
        finite (nothing to step on).
    """
    runs = []
    unit = np.empty((len(views), cpu.config.d_model), cpu.dtype)  # (n, D), views' order
    for rows in length_buckets([len(view) for view in views], bucket_rows):
        ids, mask = _pad([views[r] for r in rows])
        hidden, cache = cpu.hidden_train(ids)  # (b, L, D)
        lengths = lengths_of_mask(mask)  # (b,)
        unit[rows] = pool_fwd(hidden, lengths)
        runs.append((rows, hidden, cache, lengths))
    loss, dunit = loss_of_units(unit)
    grads: dict[str, FloatArray] = {}
    if not math.isfinite(loss):
        return loss, grads
    for rows, hidden, cache, lengths in runs:
        dhidden = pool_bwd(hidden, lengths, dunit[rows])  # (b, L, D)
        for name, grad in cpu.backward_hidden(cache, dhidden).items():
            if name in grads:
                grads[name] += grad
            else:
                grads[name] = grad
    return loss, grads


def contrastive_grads(
    cpu: Any,
    views: Sequence[Sequence[int]],
    temperature: float,
    bucket_rows: int = BUCKET_ROWS,
) -> tuple[float, dict[str, FloatArray]]:
    """InfoNCE loss of paired views and its gradient for every weight of ``cpu`` (a CpuMamba).

    Args:
        cpu: The :class:`evermind.model.cpu.CpuMamba` being tuned.
        views: 2N token-id rows: row i and row N + i are the two views of text i.
        temperature: InfoNCE τ.
        bucket_rows: Fewest views per :func:`length_buckets` group.

    Returns:
        (loss, grads) with one gradient per parameter (see :func:`pooled_loss_grads`).
    """
    half = len(views) // 2

    def loss_of_units(unit: FloatArray) -> tuple[float, FloatArray]:
        loss, da, db = info_nce(unit[:half], unit[half:], temperature)
        return loss, np.concatenate([da, db])

    return pooled_loss_grads(cpu, views, loss_of_units, bucket_rows)


def tune_embedder(
    model: Any,
    texts: Sequence[str],
    config: TuneConfig | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> TuneResult:
    """Tunes ``model``'s weights in place (``model.cpu.params``) for retrieval on ``texts``.

    Args:
        model: An :class:`evermind.model.inference.Model`.
        texts: The user's texts (memories, notes, paragraphs); duplicates are dropped.
        config: The knobs; default :class:`TuneConfig`.
        on_step: Called with (step, loss) after every step (progress bars).

    Raises:
        ConfigError: Fewer than two distinct texts of at least ``MIN_WORDS`` words.
    """
    cfg = config or TuneConfig()
    pool = sorted({t.strip() for t in texts if len(t.split()) >= MIN_WORDS})
    if len(pool) < 2:
        raise ConfigError(
            f"tune_embedder: got {len(pool)} distinct text(s) of at least {MIN_WORDS} words; "
            "expected at least 2 (each text's crops are the negatives of the others')"
        )
    batch = min(cfg.batch_size, len(pool))
    rng = random.Random(cfg.seed)
    cpu = model.cpu
    params: dict[str, FloatArray] = cpu.params
    adam = Adam(params)
    losses: list[float] = []
    start = time.perf_counter()
    with blas_threads(1):  # one BLAS thread: see blas_threads
        for step in range(1, cfg.steps + 1):
            chosen = rng.sample(pool, batch)
            views = [
                model._prompt_ids(crop_view(text, rng, cfg.min_crop, cfg.max_crop, cfg.word_drop))[
                    : cfg.max_tokens
                ]
                for _ in range(2)
                for text in chosen
            ]
            loss, grads = contrastive_grads(cpu, views, cfg.temperature)
            if not math.isfinite(loss):
                raise FloatingPointError(f"tune_embedder: loss is {loss} at step {step}")
            lr = cfg.lr * min(1.0, step / cfg.warmup_steps) if cfg.warmup_steps else cfg.lr
            adam.step(grads, step, lr)
            losses.append(loss)
            if on_step is not None:
                on_step(step, loss)
    tenth = max(1, len(losses) // 10)
    return TuneResult(
        steps=cfg.steps,
        texts=len(pool),
        first_loss=float(np.mean(losses[:tenth])),
        final_loss=float(np.mean(losses[-tenth:])),
        seconds=time.perf_counter() - start,
        losses=losses,
    )


def load_texts(path: str | Path, namespace: str = "default/default") -> list[str]:
    """The texts to tune on, from a memory store, JSON lines, or plain text.

    - ``.db``/``.sqlite``/``.sqlite3``: the content of every live memory of store namespace
      ``namespace`` (``tenant/namespace``) in an Evermind memory file (the store
      ``evermind mcp`` and the runtime write);
    - ``.jsonl``/``.ndjson``: one text per line: a JSON string, or an object's ``content`` or
      ``text`` field;
    - anything else: UTF-8 text, one text per paragraph (blank-line separated), or per line
      when it has no blank lines.

    Raises:
        ConfigError: Missing or unreadable file, bad JSON line (named by number), no texts.
    """
    source = Path(path)
    if not source.is_file():
        raise ConfigError(f"texts {str(path)!r}: no such file")
    suffix = source.suffix.lower()
    texts: list[str]
    if suffix in {".db", ".sqlite", ".sqlite3"}:
        texts = _memory_texts(source, namespace)
    elif suffix in {".jsonl", ".ndjson"}:
        texts = []
        for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ConfigError(f"{source.name} line {number}: not JSON ({err.msg})") from err
            value = row if isinstance(row, str) else None
            if isinstance(row, dict):
                value = row.get("content", row.get("text"))
            if not isinstance(value, str):
                raise ConfigError(
                    f"{source.name} line {number}: expected a string or an object with a "
                    "'content' or 'text' string"
                )
            texts.append(value)
    else:
        try:
            body = source.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ConfigError(f"{source.name}: not UTF-8 text ({err.reason})") from err
        blocks = [block.strip() for block in body.split("\n\n")]
        if len([b for b in blocks if b]) < 2:
            blocks = [line.strip() for line in body.splitlines()]
        texts = [" ".join(block.split()) for block in blocks if block]
    if not texts:
        raise ConfigError(f"{source.name}: holds no texts to tune on")
    return texts


def _memory_texts(path: Path, namespace: str) -> list[str]:
    """Contents of the live memories of one namespace of an Evermind SQLite memory file."""
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as err:
        raise ConfigError(f"{path.name}: cannot open the memory file ({err})") from err
    try:
        rows = connection.execute(
            "SELECT content FROM memories WHERE namespace = ? AND archived = 0 "
            "AND (expires_at IS NULL OR expires_at > ?) ORDER BY key",
            (namespace, time.time()),
        ).fetchall()
    except sqlite3.Error as err:
        raise ConfigError(
            f"{path.name}: not an Evermind memory file ({err}); hint: pass the file given "
            "to --memory-file, or a .jsonl/.txt of texts"
        ) from err
    finally:
        connection.close()
    if not rows:
        raise ConfigError(
            f"{path.name}: namespace {namespace!r} holds no live memories; hint: name the "
            "namespace the memories were written to"
        )
    return [str(content) for (content,) in rows]
