"""Fitting a package's affect head natively (native-only, numpy).

:func:`fit_affect` embeds labelled texts with the model's raw pooled vector
(:meth:`evermind.model.inference.Model.embed_raw`, the same vector the embedding head takes)
and fits the head with :func:`logistic_fit_np`, the numpy twin of the pure-Python optimiser
in :mod:`evermind.train.affect_fit` (same algorithm, same split, same scores).
:func:`load_labelled` reads the labelled file ``evermind train-affect`` takes and
:func:`affect_package_bytes` writes the package with its new head.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

import evermind
from evermind.errors import InputError
from evermind.model.inference import Model
from evermind.package import AffectHead, Package, utc_timestamp, write_package
from evermind.train.affect_fit import (
    AffectConfig,
    AffectFit,
    check_examples,
    fit_affect_features,
)

#: Largest labelled file ``train-affect`` reads (bytes).
MAX_LABELLED_BYTES = 64 << 20


def logistic_fit_np(
    z: list[list[float]],
    y: list[int],
    n_labels: int,
    l2: float,
    step: float,
    momentum: float,
    max_iter: int,
    tol: float,
) -> tuple[list[list[float]], list[float], int]:
    """:func:`evermind.train.affect_fit.logistic_fit_py` in numpy (same arguments, same
    steps): Nesterov's accelerated gradient on the L2-regularised softmax cross-entropy."""
    x = np.asarray(z, np.float64)  # (N, D)
    n = x.shape[0]
    onehot = np.zeros((n, n_labels))
    onehot[np.arange(n), np.asarray(y, np.int64)] = 1.0
    w = np.zeros((n_labels, x.shape[1]))  # (K, D)
    b = np.zeros(n_labels)
    w_prev, b_prev = w.copy(), b.copy()
    done = 0
    while done < max_iter:
        done += 1
        vw = w + momentum * (w - w_prev)
        vb = b + momentum * (b - b_prev)
        logits = x @ vw.T + vb  # (N, K)
        logits -= logits.max(1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(1, keepdims=True)
        residual = probs - onehot
        gw = residual.T @ x / n + l2 * vw
        gb = residual.sum(0) / n
        norm = float(np.sqrt((gw * gw).sum() + (gb * gb).sum()))
        w_prev, b_prev = w, b
        w, b = vw - step * gw, vb - step * gb
        if norm < tol:
            break
    return w.tolist(), b.tolist(), done


def fit_affect(
    model: Model,
    texts: Sequence[str],
    labels: Sequence[str],
    config: AffectConfig | None = None,
    known: Sequence[str] | None = None,
    source: str = "",
) -> AffectFit:
    """Fits ``model``'s affect head on labelled texts (numpy).

    Args:
        model: The loaded package.
        texts: One text per example.
        labels: One label per example.
        config: The knobs (L2, held-out fraction, seed...); default :class:`AffectConfig`.
        known: The allowed labels in head-row order; None: the distinct labels, sorted.
        source: A short description of the data, stored in the manifest's ``trained_on``.

    Returns:
        The head (fitted on the training split) with its held-out accuracy and macro-F1.

    Raises:
        InputError: Unknown labels, too few examples per label, empty texts.
    """
    config = config or AffectConfig()
    check_examples(texts, labels, known, config.min_per_label)  # before the model runs
    raw = model.embed_raw(list(texts))
    return fit_affect_features(
        raw.astype(np.float64).tolist(), labels, texts, known, config, logistic_fit_np, source
    )


def load_labelled(path: str | Path) -> tuple[list[str], list[str]]:
    """``(texts, labels)`` from a labelled file: ``.jsonl`` (objects with ``text`` and
    ``label``) or ``.csv`` (a header with ``text`` and ``label`` columns).

    Raises:
        InputError: Missing or oversized file, another suffix, a bad line or row (named by
            number), missing columns, or no examples.
    """
    source = Path(path)
    if not source.is_file():
        raise InputError(f"labelled file {str(path)!r}: no such file")
    if source.stat().st_size > MAX_LABELLED_BYTES:
        raise InputError(f"labelled file {source.name}: over {MAX_LABELLED_BYTES} bytes")
    suffix = source.suffix.lower()
    text = source.read_text(encoding="utf-8")
    rows: list[tuple[int, object, object]] = []
    if suffix in {".jsonl", ".ndjson"}:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{source.name} line {number}: not JSON ({err.msg})") from err
            if not isinstance(row, dict):
                raise InputError(f"{source.name} line {number}: expected a JSON object")
            rows.append((number, row.get("text"), row.get("label")))
    elif suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames or not {"text", "label"} <= set(reader.fieldnames):
            raise InputError(
                f"{source.name}: the header must name 'text' and 'label' columns, found "
                f"{reader.fieldnames}"
            )
        for number, record in enumerate(reader, 2):
            rows.append((number, record.get("text"), record.get("label")))
    else:
        raise InputError(
            f"labelled file {source.name}: expected .jsonl or .csv (text, label), got "
            f"{suffix or 'no suffix'!r}"
        )
    texts, labels = [], []
    for number, body, label in rows:
        if not isinstance(body, str) or not body.strip():
            raise InputError(f"{source.name} line {number}: 'text' must be a non-empty string")
        if not isinstance(label, str) or not label.strip():
            raise InputError(f"{source.name} line {number}: 'label' must be a non-empty string")
        texts.append(body.strip())
        labels.append(label.strip())
    if not texts:
        raise InputError(f"labelled file {source.name}: no examples")
    return texts, labels


def affect_package_bytes(package: Package, head: AffectHead, version: str) -> bytes:
    """``package`` again (same weights and dtype, embedding head kept) with ``head`` as its
    affect head, as version ``version``."""
    return write_package(
        name=package.name,
        version=version,
        created_at=utc_timestamp(datetime.now(UTC)),
        producer=f"evermind {evermind.__version__} (train-affect)",
        config=package.config,
        tensors=package.tensors,
        tokenizer_json=package.tokenizer_json,
        training=package.manifest.get("training", {}),
        bench=package.manifest.get("bench", {}),
        dtype=str(package.manifest["model"]["dtype"]),
        generation_config=package.generation_config,
        embedder=package.embedder,
        affect=head,
        static_embedder=package.static_embedder,
    )
