"""The base embedder's fine-tune: a static table trained towards a teacher's vectors (native-only).

Texts are bags of token ids (:class:`Bags`); a text's vector is ``sum_i w_i E_i`` and the
loss ``1 - cos(sum, target)`` (:func:`cosine_loss`, its gradient checked against finite
differences in the tests). :class:`SparseAdam` updates only the rows a batch touched.
:func:`fine_tune` runs the steps, checkpoints its state, and keeps the step with the lowest
loss on a held-out slice (:func:`split`). :mod:`evermind.embedder.build` calls it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from evermind.embedder.wordpiece import WordPiece
from evermind.ops.adamw import adamw_step
from evermind.ops.embedding import embedding_bwd
from evermind.ops.pool import l2_norms

logger = logging.getLogger(__name__)

#: ``(stage, done, total)``: what a build reports as it goes.
Progress = Callable[[str, int, int], None]


class TuneConfig(Protocol):
    """The settings the fine-tune reads (:class:`evermind.embedder.build.BuildConfig`)."""

    @property
    def steps(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def learning_rate(self) -> float: ...
    @property
    def holdout(self) -> float: ...
    @property
    def seed(self) -> int: ...


def quiet(stage: str, done: int, total: int) -> None:
    """The default progress: a log line."""
    logger.info("%s %d/%d", stage, done, total)


@dataclass
class Bags:
    """Token ids of many texts, flattened: text ``i`` is ``ids[starts[i]:starts[i]+lengths[i]]``."""

    ids: np.ndarray  # (T,) int64
    starts: np.ndarray  # (N,) int64
    lengths: np.ndarray  # (N,) int64

    @classmethod
    def of(cls, tokenizer: WordPiece, texts: Sequence[str]) -> Bags:
        """Tokenizes ``texts``."""
        encoded = [tokenizer.encode(t) for t in texts]
        lengths = np.array([len(e) for e in encoded], np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        flat = np.fromiter((t for e in encoded for t in e), np.int64, int(lengths.sum()))
        return cls(flat, starts, lengths)

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ids (T,), text index (T,))`` of the texts ``rows``, in order."""
        pieces = [self.ids[self.starts[r] : self.starts[r] + self.lengths[r]] for r in rows]
        owner = np.repeat(np.arange(len(rows)), self.lengths[rows])
        return (np.concatenate(pieces) if pieces else np.zeros(0, np.int64)), owner


def bag_sums(
    vectors: np.ndarray, weight: np.ndarray, ids: np.ndarray, owner: np.ndarray, n: int
) -> np.ndarray:
    """(n, D): ``sum_i weight[id_i] * vectors[id_i]`` per text (``owner`` says whose)."""
    out = np.zeros((n, vectors.shape[1]), np.float64)
    return embedding_bwd(owner, vectors[ids] * weight[ids, None], out)


def cosine_loss(sums: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    """``(mean of 1 - cos(s, t), d loss / d s)`` for sums (n, D) and unit targets (n, D)."""
    norms = l2_norms(sums)
    unit = sums / norms
    cos = np.sum(unit * targets, axis=1, keepdims=True)
    grad = -(targets - cos * unit) / norms / len(sums)
    return float(np.mean(1.0 - cos)), grad


class SparseAdam:
    """Adam whose step updates only the rows a batch touched (torch's ``SparseAdam`` rule)."""

    def __init__(self, shape: tuple[int, ...], learning_rate: float) -> None:
        self.m = np.zeros(shape, np.float32)
        self.v = np.zeros(shape, np.float32)
        self.t = 0
        self.learning_rate = learning_rate

    def step(
        self,
        param: np.ndarray,
        rows: np.ndarray,
        grad: np.ndarray,
        b1: float = 0.9,
        b2: float = 0.999,
    ) -> None:
        """``param[rows] -= lr * m_hat / (sqrt(v_hat) + eps)`` with ``grad`` the rows' gradients."""
        self.t += 1
        param[rows], self.m[rows], self.v[rows] = adamw_step(
            param[rows], grad, self.m[rows], self.v[rows], step=self.t,
            lr=self.learning_rate, beta1=b1, beta2=b2, eps=1e-8, decay=False,
        )  # fmt: skip


def loss_of(
    vectors: np.ndarray, weight: np.ndarray, bags: Bags, rows: np.ndarray, targets: np.ndarray
) -> float:
    """Mean cosine loss of texts ``rows`` (targets already projected)."""
    total = 0.0
    for start in range(0, len(rows), 4096):
        part = rows[start : start + 4096]
        ids, owner = bags.take(part)
        loss, _ = cosine_loss(bag_sums(vectors, weight, ids, owner, len(part)), targets[part])
        total += loss * len(part)
    return total / max(len(rows), 1)


def split(n: int, config: TuneConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(held-out rows, training rows)`` of a corpus of ``n`` texts (seeded)."""
    order = np.random.default_rng(config.seed).permutation(n)
    n_hold = max(1, int(n * config.holdout))
    return order[:n_hold], order[n_hold:]


def fine_tune(
    vectors: np.ndarray,
    weight: np.ndarray,
    bags: Bags,
    targets: np.ndarray,
    config: TuneConfig,
    progress: Progress = quiet,
    state_path: Path | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Trains ``vectors`` (V, D) and ``weight`` (V,) towards unit ``targets`` (N, D).

    Returns:
        ``(vectors, weight, report)``: the best held-out step's table, and the losses.
    """
    hold, train = split(len(targets), config)
    vectors = vectors.astype(np.float32).copy()
    weight = weight.astype(np.float32).copy()
    adam_e = SparseAdam(vectors.shape, config.learning_rate)
    adam_w = SparseAdam(weight.shape, config.learning_rate)
    start_step, history = 0, []
    if state_path is not None and state_path.is_file():
        saved = np.load(state_path)
        vectors, weight = saved["vectors"], saved["weight"]
        adam_e.m, adam_e.v, adam_w.m, adam_w.v = saved["em"], saved["ev"], saved["wm"], saved["wv"]
        start_step = adam_e.t = adam_w.t = int(saved["step"])
        history = json.loads(str(saved["history"]))
    best = (loss_of(vectors, weight, bags, hold, targets), start_step)
    best_table = (vectors.copy(), weight.copy())
    initial = best[0] if not history else history[0]["held_out"]
    if not history:
        history.append({"step": 0, "held_out": best[0]})
    per_epoch = max(1, len(train) // config.batch_size)
    every = max(1, min(500, config.steps // 10))
    for step in range(start_step, config.steps):
        epoch, slot = divmod(step, per_epoch)
        shuffled = np.random.default_rng(config.seed + 1 + epoch).permutation(train)
        rows = shuffled[slot * config.batch_size : (slot + 1) * config.batch_size]
        ids, owner = bags.take(rows)
        sums = bag_sums(vectors, weight, ids, owner, len(rows))
        _, grad = cosine_loss(sums, targets[rows])  # (n, D)
        g_tok = grad[owner]  # (T, D): each token's text gradient
        unique, inverse = np.unique(ids, return_inverse=True)
        g_e = embedding_bwd(
            inverse, g_tok * weight[ids, None], np.zeros((len(unique), vectors.shape[1]))
        )
        g_w = embedding_bwd(
            inverse, np.sum(g_tok * vectors[ids], axis=1)[:, None], np.zeros((len(unique), 1))
        )[:, 0]
        adam_e.step(vectors, unique, g_e.astype(np.float32))
        adam_w.step(weight, unique, g_w.astype(np.float32))
        done = step + 1
        if done % every == 0 or done == config.steps:
            held = loss_of(vectors, weight, bags, hold, targets)
            history.append({"step": done, "held_out": held})
            if held < best[0]:
                best = (held, done)
                best_table = (vectors.copy(), weight.copy())
            if state_path is not None:
                np.savez(
                    state_path.with_suffix(".partial.npz"), vectors=vectors, weight=weight,
                    em=adam_e.m, ev=adam_e.v, wm=adam_w.m, wv=adam_w.v, step=done,
                    history=json.dumps(history),
                )  # fmt: skip
                state_path.with_suffix(".partial.npz").replace(state_path)
            progress(f"fine-tune (held-out loss {held:.4f})", done, config.steps)
    report = {
        "held_out_initial": initial,
        "held_out_best": best[0],
        "best_step": best[1],
        "history": history,
    }
    return best_table[0], best_table[1], report


def align(sums: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(D, D) least-squares map from distilled bag sums (unit rows) to the targets."""
    unit = sums / l2_norms(sums)
    solution, *_ = np.linalg.lstsq(unit, targets, rcond=None)
    return np.asarray(solution)
