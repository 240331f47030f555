"""Distilling a teacher embedder into the model's embedding head (native-only, numpy).

The student's embedding is ``normalize(W · (p − μ))`` with ``p`` the model's raw pooled vector
(see :mod:`evermind.package.head`). Fitting is two closed-form stages on the user's texts:

1. **centre**: ``μ`` = the mean raw vector of the texts (removes the common direction that
   makes raw cosines all ~1: the anisotropy);
2. **project**: ``W`` = the ridge least-squares map from centred raw vectors to the teacher's
   unit vectors, ``(XᵀX + λI) Wᵀ = XᵀT`` — exact, one forward pass of the model over the
   texts plus one (d_model × d_model) solve; no backward through the SSM.
3. **tokens** (on by default): the head's token term ``T`` (one vector per token id, weighted
   by IDF) is fitted *together with* ``W`` in one ridge solve over the features
   ``[p − μ, bag(ids)]``, pulled towards a prior: the teacher's own embedding of each token's
   text (what Model2Vec distils). The small SSM trained for minutes carries little meaning
   of its own; the token term gives the student the teacher's word meaning at the cost of a
   table lookup, and the joint fit keeps whatever the SSM adds. Costs one teacher call per
   vocabulary entry, once.

The score is the mean cosine between the student's and the teacher's embedding of held-out
texts (``agreement``), and how well the student keeps the teacher's neighbourhoods
(``neighbour_agreement``: how often both pick the same nearest held-out text).
:func:`fit_centre` alone is what teacher-free contrastive tuning stores.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

import evermind
from evermind.errors import ConfigError
from evermind.model.inference import Model, apply_head_rows, token_bags
from evermind.ops.pool import lengths_of_mask, pool_bwd, pool_fwd
from evermind.package import AffectHead, EmbedderHead, Tensor, utc_timestamp, write_package
from evermind.train.contrastive import Adam, _pad, blas_threads
from evermind.train.teachers import Teacher

#: Called with (stage, done, total): stage is "student", "teacher", "vocab" (the teacher on
#: the vocabulary, for the token term), "tune" or "fit".
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class DistillConfig:
    """Knobs of :func:`distill_head`.

    Attributes:
        ridge: λ as a fraction of the mean eigenvalue of XᵀX (regularises W).
        holdout: Fraction of the texts held out to score the student (0: score on train).
        seed: Shuffles texts before the split.
        chunk: Texts per embedding call (progress granularity).
        tune_steps: Optional third stage: Adam steps on the SSM's weights (through
            ``CpuMamba.backward_hidden``) minimising the cosine loss to the teacher with the
            head fixed, then μ and W are refitted. 0 (default): head only.
        tune_batch: Texts per tuning step.
        tune_lr: Adam learning rate of the tuning stage.
        max_tokens: Tokens per text in the tuning stage.
        tokens: Fit the token term (stage 3); False: ``μ`` and ``W`` only.
        token_ridge: λ of the joint fit, as a fraction of its mean eigenvalue; the prior
            (the teacher's token vectors) is what λ pulls towards.
        token_scale: Scale of the bag features against ``p − μ`` in the joint fit (balances
            the one λ between the two blocks; folded into ``T`` afterwards).
    """

    ridge: float = 1e-2
    holdout: float = 0.1
    seed: int = 0
    chunk: int = 64
    tune_steps: int = 0
    tune_batch: int = 32
    tune_lr: float = 5e-4
    max_tokens: int = 64
    tokens: bool = True
    token_ridge: float = 3e-2
    token_scale: float = 3.0

    def __post_init__(self) -> None:
        if self.ridge < 0 or not 0 <= self.holdout < 1 or self.chunk < 1:
            raise ConfigError(
                f"DistillConfig: ridge >= 0, 0 <= holdout < 1 and chunk >= 1 expected, got "
                f"{self.ridge}, {self.holdout}, {self.chunk}"
            )


@dataclass
class DistillResult:
    """The fitted head and its scores."""

    head: EmbedderHead
    texts: int
    held_out: int
    agreement: float  # mean cos(student, teacher) on held-out texts
    train_agreement: float
    neighbour_agreement: float
    seconds: float

    def summary(self) -> dict[str, Any]:
        """The ``training.embedding_distillation`` entry of the package manifest."""
        return {
            "method": "distill",
            "teacher": self.head.teacher,
            "texts": self.texts,
            "held_out": self.held_out,
            "agreement": round(self.agreement, 4),
            "train_agreement": round(self.train_agreement, 4),
            "neighbour_agreement": round(self.neighbour_agreement, 4),
            "dim": self.head.dim,
            "tokens": self.head.tokens is not None,
            "seconds": round(self.seconds, 2),
        }


def _chunked(
    embed: Callable[[list[str]], np.ndarray],
    texts: Sequence[str],
    chunk: int,
    stage: str,
    on_progress: Progress | None,
) -> np.ndarray:
    rows = []
    for start in range(0, len(texts), chunk):
        rows.append(np.asarray(embed(list(texts[start : start + chunk])), np.float64))
        if on_progress is not None:
            on_progress(stage, min(start + chunk, len(texts)), len(texts))
    return np.concatenate(rows) if rows else np.zeros((0, 0))


def _clean(texts: Sequence[str]) -> list[str]:
    out = list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))
    if len(out) < 2:
        raise ConfigError(f"distillation needs at least 2 distinct non-empty texts, got {len(out)}")
    return out


def fit_centre(model: Model, texts: Sequence[str], method: str = "centre") -> EmbedderHead:
    """The centring-only head: ``μ`` = mean raw pooled vector of ``texts``."""
    raw = model.embed_raw(_clean(texts))
    return EmbedderHead.from_lists(raw.astype(np.float64).mean(0).tolist(), None, method)


def fit_projection(
    raw: np.ndarray, target: np.ndarray, ridge: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(μ, W)`` minimising ``|(raw − μ) Wᵀ − target|² + λ|W|²`` in closed form.

    Args:
        raw: Raw pooled vectors, (N, D).
        target: Teacher unit vectors, (N, E).
        ridge: λ as a fraction of trace(XᵀX) / D.
    """
    mu = raw.mean(0)
    x = raw - mu
    gram = x.T @ x
    lam = ridge * max(float(np.trace(gram)) / gram.shape[0], 1e-12)
    w_t = np.linalg.solve(gram + lam * np.eye(gram.shape[0]), x.T @ target)  # (D, E)
    return mu, w_t.T


def token_weights(encoded: Sequence[Sequence[int]], vocab: int) -> np.ndarray:
    """IDF of each token id over ``encoded``: ``log(1 + total / (1 + count))`` (all > 0)."""
    counts = np.ones(vocab, np.float64)
    for ids in encoded:
        if len(ids):
            counts += np.bincount(np.asarray(ids, np.int64), minlength=vocab)
    return np.asarray(np.log1p(counts.sum() / counts), np.float64)


def token_prior(
    model: Model, teacher: Teacher, chunk: int, on_progress: Progress | None = None
) -> np.ndarray:
    """The teacher's embedding of each vocabulary entry's text, centred: (vocab, E).

    Entries whose text is blank (padding, bare whitespace) get a zero row.
    """
    tokenizer = model.tokenizer
    vocab = model.config.vocab_size
    texts = [tokenizer.decode([i]) for i in range(vocab)]
    rows = [i for i, t in enumerate(texts) if t.strip()]
    if not rows:
        raise ConfigError("the tokenizer's vocabulary has no printable entry to embed")
    vectors = _chunked(teacher.embed, [texts[i] for i in rows], chunk * 4, "vocab", on_progress)
    vectors -= vectors.mean(0)
    prior = np.zeros((vocab, vectors.shape[1]), np.float64)
    prior[rows] = vectors
    return prior


def fit_with_tokens(
    x: np.ndarray,
    encoded: Sequence[Sequence[int]],
    target: np.ndarray,
    prior: np.ndarray,
    weights: np.ndarray,
    config: DistillConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """``(W, T)`` minimising ``|x Wᵀ + bag T − target|² + λ(|W|² + |sT − sprior|²)``.

    One ridge solve over the features ``[x, s·bag]`` (s = ``config.token_scale``), pulled
    towards ``[0, prior / s]``; ``T`` is returned with ``s`` folded in, so the head applies
    ``bag @ T`` directly.

    Args:
        x: Centred raw vectors (N, D).
        encoded: The ids each row pooled.
        target: Teacher unit vectors (N, E).
        prior: The teacher's vector of each token (vocab, E).
        weights: The IDF of each token (vocab,).
    """
    s = config.token_scale
    bags = token_bags(weights, encoded, len(weights)) * s
    features = np.hstack([x, bags])
    gram = features.T @ features
    lam = config.token_ridge * max(float(np.trace(gram)) / gram.shape[0], 1e-12)
    pull = np.vstack([np.zeros((x.shape[1], target.shape[1])), prior / s])
    solved = np.linalg.solve(gram + lam * np.eye(gram.shape[0]), features.T @ target + lam * pull)
    return solved[: x.shape[1]].T, solved[x.shape[1] :] * s


def _agreement(student: np.ndarray, teacher: np.ndarray) -> float:
    return float(np.mean(np.sum(student * teacher, axis=1))) if len(student) else float("nan")


def _neighbours(student: np.ndarray, teacher: np.ndarray) -> float:
    if len(student) < 2:
        return float("nan")
    s, t = student @ student.T, teacher @ teacher.T
    np.fill_diagonal(s, -np.inf)
    np.fill_diagonal(t, -np.inf)
    return float(np.mean(s.argmax(1) == t.argmax(1)))


def distill_head(
    model: Model,
    teacher: Teacher,
    texts: Sequence[str],
    config: DistillConfig | None = None,
    on_progress: Progress | None = None,
) -> DistillResult:
    """Fits ``μ`` and ``W`` so the model's embedding agrees with ``teacher`` on ``texts``.

    Raises:
        ConfigError: Fewer than 2 texts, or too few to hold any out.
    """
    config = config or DistillConfig()
    start = time.perf_counter()
    pool = _clean(texts)
    random.Random(config.seed).shuffle(pool)
    n_hold = int(len(pool) * config.holdout)
    if config.holdout and n_hold < 1 and len(pool) >= 4:
        n_hold = 1
    train, held = pool[n_hold:], pool[:n_hold]
    encoded = model.embed_ids(pool)

    def student_raw() -> np.ndarray:
        rows = []
        for lo in range(0, len(pool), config.chunk):
            rows.append(model.embed_raw_ids(encoded[lo : lo + config.chunk]).astype(np.float64))
            if on_progress is not None:
                on_progress("student", min(lo + config.chunk, len(pool)), len(pool))
        return np.concatenate(rows)

    raw = student_raw()
    target = _chunked(teacher.embed, pool, config.chunk, "teacher", on_progress)
    prior = token_prior(model, teacher, config.chunk, on_progress) if config.tokens else None
    if on_progress is not None:
        on_progress("fit", 0, 1)
    mu, w = fit_projection(raw[n_hold:], target[n_hold:], config.ridge)
    if config.tune_steps > 0:
        tune_towards(model, train, target[n_hold:], mu, w, config, on_progress)
        raw = student_raw()
        mu, w = fit_projection(raw[n_hold:], target[n_hold:], config.ridge)
    if prior is None:
        head = EmbedderHead.from_lists(mu.tolist(), w.tolist(), "distill", teacher.name)
    else:
        weights = token_weights(encoded[n_hold:], model.config.vocab_size)
        w, table = fit_with_tokens(
            raw[n_hold:] - mu, encoded[n_hold:], target[n_hold:], prior, weights, config
        )
        head = EmbedderHead.from_lists(
            mu.tolist(), w.tolist(), "distill", teacher.name, table.tolist(), weights.tolist()
        )
    student = apply_head_rows(head, raw.astype(np.float32), encoded).astype(np.float64)
    if on_progress is not None:
        on_progress("fit", 1, 1)
    score_s, score_t = (student[:n_hold], target[:n_hold]) if n_hold else (student, target)
    return DistillResult(
        head=head,
        texts=len(train),
        held_out=len(held),
        agreement=_agreement(score_s, score_t),
        train_agreement=_agreement(student[n_hold:], target[n_hold:]),
        neighbour_agreement=_neighbours(score_s, score_t),
        seconds=time.perf_counter() - start,
    )


def _unit_fwd(e: np.ndarray) -> np.ndarray:
    return np.asarray(pool_fwd(e[:, None, :], np.ones(len(e), np.int64)))


def _unit_bwd(e: np.ndarray, grad: np.ndarray) -> np.ndarray:
    return np.asarray(pool_bwd(e[:, None, :], np.ones(len(e), np.int64), grad))[:, 0, :]


def tune_towards(
    model: Model,
    texts: Sequence[str],
    target: np.ndarray,
    mu: np.ndarray,
    w: np.ndarray,
    config: DistillConfig,
    on_progress: Progress | None = None,
) -> list[float]:
    """Adam on ``model.cpu.params`` (in place) minimising ``1 − cos(normalize(W(p − μ)), t)``.

    Returns the loss of every step.
    """
    rng = random.Random(config.seed)
    losses: list[float] = []
    batch = min(config.tune_batch, len(texts))
    cpu = model.cpu
    adam = Adam(cpu.params)
    with blas_threads(1):  # small products; spinning BLAS threads cost many times on busy cores
        for step in range(1, config.tune_steps + 1):
            rows = rng.sample(range(len(texts)), batch)
            ids, mask = _pad([model._prompt_ids(texts[r])[: config.max_tokens] for r in rows])
            hidden, cache = cpu.hidden_train(ids)  # (B, L, D)
            lengths = lengths_of_mask(mask)
            unit = np.asarray(pool_fwd(hidden, lengths), np.float64)  # (B, D)
            e = (unit - mu) @ w.T  # (B, E)
            s = _unit_fwd(e)
            t = target[rows]
            loss = float(np.mean(1.0 - np.sum(s * t, axis=1)))
            de = _unit_bwd(e, -t / batch)  # (B, E)
            dhidden = pool_bwd(hidden, lengths, de @ w)
            adam.step(cpu.backward_hidden(cache, dhidden), step, config.tune_lr)
            losses.append(loss)
            if on_progress is not None:
                on_progress("tune", step, config.tune_steps)
    return losses


def package_bytes(
    model: Model,
    head: EmbedderHead | None,
    version: str,
    producer: str,
    training: dict[str, Any] | None = None,
    affect: AffectHead | None = None,
) -> bytes:
    """A new package of ``model``'s current weights (``model.cpu.params``) with ``head`` (and
    ``affect``, an affect head fitted on these weights; None: none). A static embedder the
    package carried is not kept: the embedding this writes is the model's own."""
    package = model.package
    shapes = model.config.param_shapes()
    tensors = {
        name: Tensor(
            shapes[name],
            _f32(model.cpu.params[name]),
        )
        for name in shapes
    }
    return write_package(
        name=package.name,
        version=version,
        created_at=utc_timestamp(datetime.now(UTC)),
        producer=f"evermind {evermind.__version__} ({producer})",
        config=package.config,
        tensors=tensors,
        tokenizer_json=package.tokenizer_json,
        training={**package.manifest.get("training", {}), **(training or {})},
        bench=package.manifest.get("bench", {}),
        generation_config=package.generation_config,
        embedder=head,
        affect=affect,
    )


def _f32(values: np.ndarray) -> Any:
    from array import array

    out = array("f")
    out.frombytes(np.ascontiguousarray(values, dtype="<f4").tobytes())
    return out
