"""Fitting the affect head: L2-regularised multinomial logistic regression (browser-safe).

The affect head (:mod:`evermind.package.affect`) is ``softmax(W · p + b)`` over the model's
raw pooled vector ``p``. This module owns everything of its fit but the model: checking the
labelled examples, the stratified held-out split, standardising the features, the optimiser
and the held-out scores (accuracy and macro-F1). The optimiser minimises::

    (1/N) Σₙ −log softmax(W zₙ + b)[yₙ] + (λ/2) |W|²        zₙ = (pₙ − μ) / σ

with Nesterov's accelerated gradient at the step ``1 / Lip`` (``Lip`` = half the largest
eigenvalue of the standardised features' second moment, plus λ; the softmax curvature is at
most ½) from zero, for at most ``max_iter`` steps or until the gradient norm is under
``tol``. The objective is strictly convex in ``W``, so once the gradient is under ``tol`` the
result is the unique optimum up to it (``iterations`` says whether the cap came first). The
standardisation is folded back into ``W`` and ``b`` afterwards, so the stored head takes
``p`` itself.

:func:`logistic_fit_py` is the pure-Python optimiser the tab runs (a few hundred texts);
:func:`evermind.train.affect.logistic_fit_np` is the same algorithm in numpy, and a unit test
holds the two together. Both plug into :func:`fit_affect_features`. Browser-safe: stdlib only.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import mul
from typing import Any

from evermind.errors import ConfigError, InputError, PackageError
from evermind.package.affect import AffectHead, affect_logits, check_labels

#: ``(z, y, labels, l2, step, momentum, max_iter, tol) -> (W, b, iterations)`` over
#: standardised rows ``z`` (N lists of D floats) and label indices ``y``.
Optimiser = Callable[
    [list[list[float]], list[int], int, float, float, float, int, float],
    tuple[list[list[float]], list[float], int],
]

#: Power-iteration steps that estimate the largest eigenvalue (the step size).
POWER_STEPS = 30
#: Safety factor on that estimate (power iteration approaches it from below).
POWER_SAFETY = 1.1


@dataclass(frozen=True)
class AffectConfig:
    """Knobs of the affect fit.

    Attributes:
        l2: λ, the L2 penalty on ``W`` over standardised features (the bias is not penalised).
            0.1: on ``evals/affect_dev.jsonl`` 0.01, 0.1 and 1 score within noise of each other
            (docs/architecture.md); 0.01 fits the training split almost perfectly and needs
            three times the steps.
        holdout: Fraction of each label's examples held out to score the head.
        seed: Shuffles each label's examples before the split.
        max_iter: Most optimiser steps.
        tol: Stop when the gradient's norm is below this.
        min_per_label: Fewest examples a label needs (at least one is held out).
    """

    l2: float = 0.1
    holdout: float = 0.2
    seed: int = 0
    max_iter: int = 1000
    tol: float = 1e-5
    min_per_label: int = 5

    def __post_init__(self) -> None:
        if not self.l2 > 0 or not 0 < self.holdout < 1 or self.max_iter < 1 or self.tol < 0:
            raise ConfigError(
                f"AffectConfig: l2 > 0, 0 < holdout < 1, max_iter >= 1 and tol >= 0 expected, "
                f"got {self.l2}, {self.holdout}, {self.max_iter}, {self.tol}"
            )
        if self.min_per_label < 2:
            raise ConfigError(
                f"AffectConfig: min_per_label must be at least 2 (one to train, one held "
                f"out), got {self.min_per_label}"
            )


@dataclass
class AffectFit:
    """A fitted head with its scores."""

    head: AffectHead
    train: int
    held_out: int
    iterations: int
    metrics: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """What the CLI prints and the Studio shows."""
        return {
            "labels": list(self.head.labels),
            "train": self.train,
            "held_out": self.held_out,
            "iterations": self.iterations,
            **self.metrics,
        }


def check_examples(
    texts: Sequence[str], labels: Sequence[str], known: Sequence[str] | None, min_per_label: int
) -> list[str]:
    """Checks labelled examples; returns the label list in head-row order.

    Args:
        texts: One text per example.
        labels: One label per example.
        known: The allowed labels in row order; None: the distinct labels, sorted.
        min_per_label: Fewest examples each label needs.

    Raises:
        InputError: Counts differ, a text is empty, a label is not in ``known``, there are
            fewer than two labels, or a label has too few examples.
    """
    if len(texts) != len(labels):
        raise InputError(f"affect: {len(texts)} texts but {len(labels)} labels; expected one each")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"affect: example {i + 1} has an empty text")
    order = sorted(set(labels)) if known is None else list(known)
    try:
        check_labels(order, "affect")
    except PackageError as err:
        raise InputError(f"{err}; hint: give at least two distinct labels") from err
    allowed = set(order)
    for i, label in enumerate(labels):
        if label not in allowed:
            raise InputError(
                f"affect: example {i + 1} has the unknown label {label!r}; expected one of {order}"
            )
    for label in order:
        count = sum(1 for x in labels if x == label)
        if count < min_per_label:
            raise InputError(
                f"affect: label {label!r} has {count} example(s), at least {min_per_label} "
                "are needed (some are held out to score the head); hint: add more examples"
            )
    return order


def split_examples(y: Sequence[int], holdout: float, seed: int) -> tuple[list[int], list[int]]:
    """Stratified split of example indices: ``(train, held_out)``, each label's share held out
    (at least one, at least one left to train)."""
    rng = random.Random(seed)
    train: list[int] = []
    held: list[int] = []
    for label in sorted(set(y)):
        rows = [i for i, v in enumerate(y) if v == label]
        rng.shuffle(rows)
        n_held = min(len(rows) - 1, max(1, round(holdout * len(rows))))
        held += rows[:n_held]
        train += rows[n_held:]
    return sorted(train), sorted(held)


def standardise(rows: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
    """Per-feature mean and standard deviation of ``rows`` (a constant feature gets σ = 1)."""
    n, d = len(rows), len(rows[0])
    mean = [math.fsum(r[j] for r in rows) / n for j in range(d)]
    std = []
    for j in range(d):
        var = math.fsum((r[j] - mean[j]) ** 2 for r in rows) / n
        std.append(math.sqrt(var) if var > 1e-24 else 1.0)
    return mean, std


def largest_eigenvalue(z: Sequence[Sequence[float]], seed: int = 0) -> float:
    """Power-iteration estimate of the largest eigenvalue of ``zᵀz / N`` (at least 1: the
    bias column's)."""
    n, d = len(z), len(z[0])
    rng = random.Random(seed)
    v = [rng.uniform(0.5, 1.5) for _ in range(d)]
    value = 0.0
    for _ in range(POWER_STEPS):
        zv = [sum(map(mul, row, v)) for row in z]
        w = [sum(row[j] * s for row, s in zip(z, zv, strict=True)) / n for j in range(d)]
        value = math.sqrt(math.fsum(x * x for x in w))
        if value == 0:
            break
        v = [x / value for x in w]
    return max(value, 1.0)


def logistic_fit_py(
    z: list[list[float]],
    y: list[int],
    n_labels: int,
    l2: float,
    step: float,
    momentum: float,
    max_iter: int,
    tol: float,
) -> tuple[list[list[float]], list[float], int]:
    """Nesterov's accelerated gradient on the module's objective, in pure Python.

    Args:
        z: Standardised features, N rows of D.
        y: Label index of each row.
        n_labels: K.
        l2: λ.
        step: The step size (``1 / Lip``).
        momentum: Nesterov's constant momentum.
        max_iter: Most steps.
        tol: Stop when the gradient norm at the look-ahead point is below this.

    Returns:
        ``(W, b, iterations)``: W K rows of D, b K values.
    """
    n, d = len(z), len(z[0])
    columns = [list(c) for c in zip(*z, strict=True)]  # (D, N): W's gradient as dot products
    w = [[0.0] * d for _ in range(n_labels)]
    b = [0.0] * n_labels
    w_prev, b_prev = [r[:] for r in w], b[:]
    done = 0
    while done < max_iter:
        done += 1
        vw = [
            [x + momentum * (x - p) for x, p in zip(r, rp, strict=True)]
            for r, rp in zip(w, w_prev, strict=True)
        ]
        vb = [x + momentum * (x - p) for x, p in zip(b, b_prev, strict=True)]
        residual = _residuals(z, y, vw, vb)  # (K, N): softmax − one-hot
        gw = [
            [sum(map(mul, col, res)) / n + l2 * wv for col, wv in zip(columns, row, strict=True)]
            for res, row in zip(residual, vw, strict=True)
        ]
        gb = [math.fsum(res) / n for res in residual]
        norm = math.sqrt(math.fsum(g * g for r in gw for g in r) + math.fsum(g * g for g in gb))
        w_prev, b_prev = w, b
        w = [
            [v - step * g for v, g in zip(r, gr, strict=True)] for r, gr in zip(vw, gw, strict=True)
        ]
        b = [v - step * g for v, g in zip(vb, gb, strict=True)]
        if norm < tol:
            break
    return w, b, done


def _residuals(
    z: Sequence[Sequence[float]], y: Sequence[int], w: Sequence[Sequence[float]], b: Sequence[float]
) -> list[list[float]]:
    k = len(b)
    out = [[0.0] * len(z) for _ in range(k)]
    for i, row in enumerate(z):
        logits = [sum(map(mul, wr, row)) + bias for wr, bias in zip(w, b, strict=True)]
        top = max(logits)
        exps = [math.exp(x - top) for x in logits]
        total = sum(exps)
        for c in range(k):
            out[c][i] = exps[c] / total - (1.0 if c == y[i] else 0.0)
    return out


def classification_metrics(
    truth: Sequence[int], predicted: Sequence[int], n_labels: int
) -> dict[str, float]:
    """``accuracy`` and ``macro_f1`` (the mean over labels of 2TP / (2TP + FP + FN); a label
    never true nor predicted scores 0)."""
    correct = sum(1 for t, p in zip(truth, predicted, strict=True) if t == p)
    f1s = []
    for c in range(n_labels):
        tp = sum(1 for t, p in zip(truth, predicted, strict=True) if t == c and p == c)
        fp = sum(1 for t, p in zip(truth, predicted, strict=True) if t != c and p == c)
        fn = sum(1 for t, p in zip(truth, predicted, strict=True) if t == c and p != c)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return {
        "accuracy": correct / len(truth) if truth else 0.0,
        "macro_f1": math.fsum(f1s) / n_labels,
    }


def predict(head: AffectHead, rows: Sequence[Sequence[float]]) -> list[int]:
    """The most probable label index of each raw pooled row."""
    out = []
    for row in rows:
        logits = affect_logits(head, row)
        out.append(max(range(len(logits)), key=logits.__getitem__))
    return out


def fit_affect_features(
    features: Sequence[Sequence[float]],
    labels: Sequence[str],
    texts: Sequence[str] | None = None,
    known: Sequence[str] | None = None,
    config: AffectConfig | None = None,
    optimiser: Optimiser = logistic_fit_py,
    source: str = "",
) -> AffectFit:
    """Fits the affect head on raw pooled vectors and scores it on a held-out split.

    Args:
        features: One raw pooled vector ``p`` per example (N rows of d_model).
        labels: One label per example.
        texts: The examples' texts (only checked for emptiness); None: not checked.
        known: The allowed labels in row order; None: the distinct labels, sorted.
        config: The knobs; default :class:`AffectConfig`.
        optimiser: :func:`logistic_fit_py` (pure Python) or
            :func:`evermind.train.affect.logistic_fit_np`.
        source: A short description of the data, stored in ``trained_on``.

    Returns:
        The head (fitted on the training split) and its held-out accuracy and macro-F1.

    Raises:
        InputError: The examples break a rule of :func:`check_examples`, or the vectors
            differ in width.
    """
    config = config or AffectConfig()
    order = check_examples(
        texts if texts is not None else ["x"] * len(labels), labels, known, config.min_per_label
    )
    if len(features) != len(labels):
        raise InputError(f"affect: {len(features)} vectors but {len(labels)} labels")
    width = len(features[0])
    if any(len(row) != width for row in features):
        raise InputError("affect: the pooled vectors differ in width")
    index = {label: i for i, label in enumerate(order)}
    y = [index[label] for label in labels]
    train, held = split_examples(y, config.holdout, config.seed)
    rows = [list(map(float, features[i])) for i in train]
    mean, std = standardise(rows)
    z = [[(x - m) / s for x, m, s in zip(row, mean, std, strict=True)] for row in rows]
    lip = 0.5 * largest_eigenvalue(z) * POWER_SAFETY + config.l2
    kappa = lip / config.l2
    momentum = (math.sqrt(kappa) - 1) / (math.sqrt(kappa) + 1)
    w, b, iterations = optimiser(
        z,
        [y[i] for i in train],
        len(order),
        config.l2,
        1.0 / lip,
        momentum,
        config.max_iter,
        config.tol,
    )
    # Fold the standardisation in: W z + b = (W / σ) p + (b − (W / σ) · μ).
    weight = [[wv / s for wv, s in zip(row, std, strict=True)] for row in w]
    bias = [bv - sum(map(mul, row, mean)) for row, bv in zip(weight, b, strict=True)]
    trained_on: dict[str, Any] = {"texts": len(train), "held_out": len(held), "l2": config.l2}
    if source:
        trained_on["source"] = source[:256]
    draft = AffectHead.from_lists(order, weight, bias, trained_on)
    metrics = classification_metrics(
        [y[i] for i in held], predict(draft, [features[i] for i in held]), len(order)
    )
    train_metrics = classification_metrics(
        [y[i] for i in train], predict(draft, [features[i] for i in train]), len(order)
    )
    metrics = {
        "accuracy": round(metrics["accuracy"], 4),
        "macro_f1": round(metrics["macro_f1"], 4),
        "train_accuracy": round(train_metrics["accuracy"], 4),
    }
    head = AffectHead(draft.labels, draft.weight, draft.bias, trained_on, metrics)
    return AffectFit(head, len(train), len(held), iterations, metrics)


def parse_labelled_lines(text: str) -> tuple[list[str], list[str]]:
    """``label<TAB>text`` lines (the Studio's paste box) as ``(texts, labels)``; blank lines
    and lines starting with ``#`` are skipped.

    Raises:
        InputError: A line has no tab, or an empty label or text; the message names the line.
    """
    texts: list[str] = []
    labels: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        label, tab, body = line.partition("\t")
        if not tab or not label.strip() or not body.strip():
            raise InputError(
                f"affect: line {number} is not 'label<TAB>text': {line[:60]!r}; hint: separate "
                "the label from the text with one tab"
            )
        labels.append(label.strip())
        texts.append(body.strip())
    return texts, labels
