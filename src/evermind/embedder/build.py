"""Builds the base embedder from a teacher: distil the token table, then fine-tune it (native-only).

The two stages (docs/embedder.md):

1. **Distil** (model2vec's method): every vocabulary token goes through the teacher alone
   (``[CLS] token [SEP]``), its last hidden states mean-pooled: a (V, 384) table. PCA to D
   dimensions; each token weighted by SIF over a Zipf estimate of its frequency from its rank
   (``w = a / (a + p(rank))``, ``a`` = 1e-4: frequent tokens count less).
2. **Fine-tune** (tokenlearn's idea): the teacher embeds a corpus (:mod:`.corpus`); its
   vectors, projected on their top-D principal directions (uncentred, so the teacher's cosine
   geometry is kept), are the targets. A D × D map from the distilled space to the target
   space is fitted by least squares and folded into the table (the embedding is linear in
   the table), then the table and the per-token weights are trained with a cosine loss
   ``1 - cos(sum_i w_i E_i, t)`` by Adam with sparse updates (only the rows a batch touched),
   a held-out slice of the corpus keeping the best step.

Everything slow is checkpointed in a work folder beside the output (``<out>.work/``): the
token table, the corpus, the teacher's targets in chunks, the fine-tune's state. A build
that is stopped and run again resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from evermind.embedder.finetune import (
    Bags,
    Progress,
    align,
    bag_sums,
    fine_tune,
    quiet,
    split,
)
from evermind.embedder.static import STORAGES, StaticEmbedder
from evermind.embedder.wordpiece import WordPiece
from evermind.errors import ConfigError
from evermind.ops.pool import l2_norms
from evermind.package.tensor import Tensor

logger = logging.getLogger(__name__)

#: The SIF coefficient model2vec uses.
SIF_COEFFICIENT = 1e-4


class TokenTeacher(Protocol):
    """What the build needs from a teacher (:class:`evermind.train.teachers.MiniLMTeacher`)."""

    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit sentence vectors, (N, E)."""
        ...

    def pool_ids(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """Mean-pooled hidden states of token-id rows, (N, E)."""
        ...


@dataclass(frozen=True)
class BuildConfig:
    """What a build makes (the defaults are what ``evermind build-embedder`` runs).

    Attributes:
        dims: D, the embedding size (at most the teacher's).
        storage: ``int8`` (per-row scale), ``float16`` or ``float32``.
        corpus_limit: Texts the fine-tune learns from (0: distil only).
        steps: Fine-tune steps (0: distil only).
        batch_size: Texts per step.
        learning_rate: Adam's step size.
        holdout: Share of the corpus kept out to choose the best step.
        seed: Shuffling seed.
    """

    dims: int = 256
    storage: str = "int8"
    corpus_limit: int = 30_000
    steps: int = 1000
    batch_size: int = 256
    learning_rate: float = 0.01
    holdout: float = 0.03
    seed: int = 0

    def check(self) -> None:
        """Raises :class:`ConfigError` naming the first bad field."""
        if not 8 <= self.dims <= 384:
            raise ConfigError(f"dims is {self.dims}; expected 8..384 (the teacher has 384)")
        if self.storage not in STORAGES:
            raise ConfigError(f"storage is {self.storage!r}; expected one of {list(STORAGES)}")
        if self.corpus_limit < 0 or self.steps < 0:
            raise ConfigError(
                f"corpus_limit {self.corpus_limit} and steps {self.steps} must be >= 0"
            )
        if self.steps and self.corpus_limit < 100:
            raise ConfigError(
                f"corpus_limit {self.corpus_limit} is too small to fine-tune; expected >= 100 "
                "(or steps 0 to distil only)"
            )
        if self.batch_size < 1 or not 0 < self.learning_rate < 1 or not 0 < self.holdout < 0.5:
            raise ConfigError(
                "batch_size must be >= 1, learning_rate in (0, 1) and holdout in (0, 0.5)"
            )


# ---- stage 1: the distilled table --------------------------------------------------------


def token_outputs(
    teacher: TokenTeacher, tokenizer: WordPiece, progress: Progress = quiet, chunk: int = 2048
) -> np.ndarray:
    """(V, E) float32: each token through the teacher alone, mean-pooled."""
    rows: list[np.ndarray] = []
    size = tokenizer.vocab_size
    for start in range(0, size, chunk):
        ids = [
            [tokenizer.cls_id, t, tokenizer.sep_id] for t in range(start, min(size, start + chunk))
        ]
        rows.append(teacher.pool_ids(ids))
        progress("distil tokens", min(size, start + chunk), size)
    return np.concatenate(rows).astype(np.float32)


def sif_weights(size: int, coefficient: float = SIF_COEFFICIENT) -> np.ndarray:
    """(V,) SIF weights from a Zipf estimate of each token's frequency by its rank (id)."""
    inverse_rank = 1.0 / np.arange(2, size + 2, dtype=np.float64)
    probability = inverse_rank / inverse_rank.sum()
    weights: np.ndarray = (coefficient / (coefficient + probability)).astype(np.float32)
    return weights


def pca(rows: np.ndarray, dims: int, *, centre: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(mean (E,), components (E, dims))`` of ``rows`` (the mean is zeros unless ``centre``)."""
    data = np.asarray(rows, np.float64)
    mean = data.mean(axis=0) if centre else np.zeros(data.shape[1])
    _, _, vt = np.linalg.svd(data - mean, full_matrices=False)
    return mean, vt[:dims].T


def distilled_table(outputs: np.ndarray, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """``(vectors (V, D), weight (V,))``: model2vec's PCA and SIF weighting of the outputs."""
    mean, components = pca(outputs, dims, centre=True)
    vectors = (np.asarray(outputs, np.float64) - mean) @ components
    return vectors.astype(np.float32), sif_weights(len(outputs))


# ---- stage 2: the teacher's targets (the fine-tune is in .finetune) ------------------


def teacher_targets(
    teacher: TokenTeacher,
    texts: Sequence[str],
    work: Path,
    progress: Progress = quiet,
    chunk: int = 2048,
) -> np.ndarray:
    """(N, E) teacher vectors of ``texts``, computed in chunks saved under ``work`` (resumed)."""
    parts: list[np.ndarray] = []
    for number, start in enumerate(range(0, len(texts), chunk)):
        path = work / f"targets_{number:05d}.npy"
        batch = list(texts[start : start + chunk])
        if path.is_file():
            part = np.load(path)
            if part.shape[0] == len(batch):
                parts.append(part)
                progress("teacher targets", start + len(batch), len(texts))
                continue
        order = np.argsort([len(t) for t in batch], kind="stable")  # less padding per batch
        sorted_part = np.asarray(teacher.embed([batch[i] for i in order]), np.float32)
        part = np.empty_like(sorted_part)
        part[order] = sorted_part
        np.save(work / f"targets_{number:05d}.partial.npy", part)
        (work / f"targets_{number:05d}.partial.npy").replace(path)
        parts.append(part)
        progress("teacher targets", start + len(batch), len(texts))
    return np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)


# ---- the whole build ---------------------------------------------------------------------


def to_embedder(
    tokenizer: WordPiece,
    vectors: np.ndarray,
    weight: np.ndarray,
    storage: str,
    config: dict[str, Any],
) -> StaticEmbedder:
    """The embedder of a float table stored as ``storage``."""
    shape = (int(vectors.shape[0]), int(vectors.shape[1]))
    if storage == "int8":
        from evermind.model.quantize import quantize_rows

        q = quantize_rows(vectors)
        scale = Tensor((shape[0],), array("f", q.scale.tolist()))
        stored = Tensor(shape, q.values.tobytes(), "I8", scale=scale)
    elif storage == "float16":
        stored = Tensor(shape, vectors.astype("<f2").tobytes(), "F16")
    else:
        stored = Tensor(shape, vectors.astype("<f4").tobytes(), "F32")
    return StaticEmbedder(tokenizer, stored, weight.astype(np.float32).tolist(), config)


def build(
    teacher: TokenTeacher,
    tokenizer: WordPiece,
    config: BuildConfig,
    work: Path,
    corpus: Callable[[int], list[str]] | None = None,
    progress: Progress = quiet,
) -> tuple[StaticEmbedder, dict[str, Any]]:
    """Distils (and, with ``config.steps``, fine-tunes) the base embedder.

    Args:
        teacher: The teacher (its tokenizer's vocabulary must be ``tokenizer``'s).
        tokenizer: The WordPiece tokenizer whose ids index the table.
        config: Sizes and steps.
        work: The work folder (created; holds the checkpoints a rerun resumes from).
        corpus: ``limit -> texts`` (default :func:`evermind.embedder.corpus.build_corpus`).
        progress: Called as stages advance.

    Returns:
        ``(embedder, report)``; the report holds timings and the fine-tune's losses.
    """
    config.check()
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"config": asdict(config), "teacher": teacher.name}
    began = time.perf_counter()
    outputs_path = work / "token_outputs.npy"
    if outputs_path.is_file():
        outputs = np.load(outputs_path)
    else:
        outputs = token_outputs(teacher, tokenizer, progress)
        np.save(work / "token_outputs.partial.npy", outputs)
        (work / "token_outputs.partial.npy").replace(outputs_path)
    if outputs.shape[0] != tokenizer.vocab_size or config.dims > outputs.shape[1]:
        raise ConfigError(
            f"{outputs_path}: table of shape {outputs.shape} does not fit a vocabulary of "
            f"{tokenizer.vocab_size} and dims {config.dims}; delete the work folder {work}"
        )
    vectors, weight = distilled_table(outputs, config.dims)
    report["distil_seconds"] = round(time.perf_counter() - began, 1)
    meta: dict[str, Any] = {"teacher": teacher.name, "stage": "distilled"}
    if config.steps and config.corpus_limit:
        texts = _corpus(work, config.corpus_limit, corpus, progress)
        targets_raw = teacher_targets(teacher, texts, work, progress)
        _, basis = pca(targets_raw, config.dims, centre=False)
        targets = targets_raw @ basis
        targets /= l2_norms(targets)
        bags = Bags.of(tokenizer, texts)
        sample = split(len(texts), config)[1][:20_000]  # fitted on training rows only
        ids, owner = bags.take(sample)
        mapping = align(bag_sums(vectors, weight, ids, owner, len(sample)), targets[sample])
        vectors = (vectors.astype(np.float64) @ mapping).astype(np.float32)
        report["targets_seconds"] = round(time.perf_counter() - began, 1)
        vectors, weight, tuned = fine_tune(
            vectors, weight, bags, targets, config, progress, work / "fine_tune.npz"
        )
        report["fine_tune"] = {k: v for k, v in tuned.items() if k != "history"}
        report["fine_tune_history"] = tuned["history"]
        meta.update(stage="fine-tuned", corpus_texts=len(texts), steps=config.steps)
        meta.update(best_step=tuned["best_step"])
    report["seconds"] = round(time.perf_counter() - began, 1)
    return to_embedder(tokenizer, vectors, weight, config.storage, meta), report


def _corpus(
    work: Path, limit: int, corpus: Callable[[int], list[str]] | None, progress: Progress
) -> list[str]:
    path = work / "corpus.json"
    if path.is_file():
        saved = json.loads(path.read_text("utf-8"))
        # A corpus is a prefix of any larger one, so a smaller limit reuses it (and its
        # targets, chunk for chunk).
        known = isinstance(saved, dict) and isinstance(saved.get("limit"), int)
        if known and (saved["limit"] >= limit or len(saved["texts"]) < saved["limit"]):
            return [str(t) for t in saved["texts"][:limit]]
    for stale in [*work.glob("targets_*.npy"), work / "fine_tune.npz"]:
        stale.unlink(missing_ok=True)  # they belong to another corpus
    if corpus is None:
        from evermind.embedder.corpus import build_corpus

        corpus = build_corpus
    progress("corpus", 0, limit)
    texts = corpus(limit)
    payload = json.dumps({"limit": limit, "texts": texts})
    (work / "corpus.partial.json").write_text(payload, "utf-8")
    (work / "corpus.partial.json").replace(path)
    progress("corpus", len(texts), limit)
    return texts
