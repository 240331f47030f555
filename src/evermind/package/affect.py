"""The optional affect head of a package: ``affect.safetensors`` + the manifest's ``affect``.

The limbic layer is a classifier head, nothing more: a multinomial logistic regression over
the model's raw pooled vector ``p`` (the final normed hidden state mean-pooled over the text
and L2-normalised, the same vector the embedding head takes; see
:mod:`evermind.package.head`)::

    scores = softmax(W · p + b)

``W`` (``weight``, shape (L, d_model)) and ``b`` (``bias``, shape (L,)) hold one row per
user-defined label (``["negative", "neutral", "positive"]`` or any other list); the manifest
field ``affect`` names the labels in row order, the ``d_model`` the head takes, what it was
trained on and its held-out metrics. :func:`affect_scores` is the one pure-Python
application (the tab has no numpy); native code applies the same maths with numpy
(:func:`evermind.model.inference.affect_rows`). Browser-safe: stdlib only.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evermind.errors import PackageError
from evermind.package.tensor import Tensor

#: The archive member that holds the head's tensors.
AFFECT_MEMBER = "affect.safetensors"
#: The manifest field that describes the head.
AFFECT_FIELD = "affect"
WEIGHT = "weight"
BIAS = "bias"
AFFECT_FIELDS = frozenset({"labels", "d_model", "pooling", "trained_on", "metrics"})
POOLING = "mean-l2"
MIN_LABELS = 2
MAX_LABELS = 64
MAX_LABEL_CHARS = 64
#: Keys and values of ``trained_on`` and ``metrics`` stay small (they are descriptions).
MAX_DESCRIPTION_KEYS = 32
MAX_DESCRIPTION_CHARS = 256


def check_labels(labels: Sequence[Any], where: str) -> list[str]:
    """Checks a label list: 2..64 distinct, non-empty, printable strings of at most 64 chars.

    Args:
        labels: The labels in head-row order.
        where: What to name in the error (a member, a field, a file).

    Raises:
        PackageError: The list breaks one of the rules; the message names the label.
    """
    if not isinstance(labels, list | tuple) or not MIN_LABELS <= len(labels) <= MAX_LABELS:
        raise PackageError(
            f"{where}: labels must be a list of {MIN_LABELS} to {MAX_LABELS} strings, got "
            f"{labels!r:.80}"
        )
    for label in labels:
        if (
            not isinstance(label, str)
            or not 1 <= len(label) <= MAX_LABEL_CHARS
            or not label.isprintable()
            or label != label.strip()
        ):
            raise PackageError(
                f"{where}: label {label!r:.80} must be 1-{MAX_LABEL_CHARS} printable characters "
                "without surrounding spaces"
            )
    if len(set(labels)) != len(labels):
        dup = next(x for x in labels if list(labels).count(x) > 1)
        raise PackageError(f"{where}: label {dup!r} appears twice; labels must be distinct")
    return list(labels)


def _check_description(value: Any, where: str, numbers_only: bool) -> None:
    if not isinstance(value, dict) or len(value) > MAX_DESCRIPTION_KEYS:
        raise PackageError(f"{where} must be an object of at most {MAX_DESCRIPTION_KEYS} keys")
    for key, item in value.items():
        if not isinstance(key, str) or len(key) > MAX_DESCRIPTION_CHARS:
            raise PackageError(f"{where}: key {key!r:.80} must be a short string")
        number = isinstance(item, int | float) and not isinstance(item, bool)
        if number and not math.isfinite(item):
            raise PackageError(f"{where}.{key} must be finite, found {item!r}")
        if numbers_only and not number:
            raise PackageError(f"{where}.{key} must be a finite number, found {item!r:.80}")
        if not number and not (isinstance(item, str) and len(item) <= MAX_DESCRIPTION_CHARS):
            raise PackageError(
                f"{where}.{key} must be a number or a string of at most "
                f"{MAX_DESCRIPTION_CHARS} characters, found {item!r:.80}"
            )


@dataclass(frozen=True, eq=False)
class AffectHead:
    """A linear softmax classifier over the raw pooled vector.

    Attributes:
        labels: The label of each row, e.g. ``("negative", "neutral", "positive")``.
        weight: ``W``, shape (L, d_model), float32.
        bias: ``b``, shape (L,), float32.
        trained_on: What it was fitted on (``texts``, ``held_out``, ``source``...): numbers
            and short strings.
        metrics: Held-out scores (``accuracy``, ``macro_f1``...): finite numbers.
    """

    labels: tuple[str, ...]
    weight: Tensor
    bias: Tensor
    trained_on: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    _rows: list[list[float]] = field(init=False, repr=False, compare=False)
    _bias: list[float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", tuple(check_labels(self.labels, AFFECT_MEMBER)))
        n = len(self.labels)
        if len(self.weight.shape) != 2 or self.weight.shape[0] != n or self.weight.shape[1] < 1:
            raise PackageError(
                f"{AFFECT_MEMBER}: {WEIGHT!r} must have shape ({n}, d_model) for {n} labels, "
                f"got {self.weight.shape}"
            )
        if self.bias.shape != (n,):
            raise PackageError(
                f"{AFFECT_MEMBER}: {BIAS!r} must have shape ({n},) for {n} labels, got "
                f"{self.bias.shape}"
            )
        _check_description(dict(self.trained_on), "affect.trained_on", numbers_only=False)
        _check_description(dict(self.metrics), "affect.metrics", numbers_only=True)
        flat = self.weight.to_float32()
        bias = list(self.bias.to_float32())
        if not all(math.isfinite(x) for x in flat) or not all(math.isfinite(x) for x in bias):
            raise PackageError(f"{AFFECT_MEMBER}: the head holds non-finite values")
        d = self.d_model
        object.__setattr__(self, "_rows", [list(flat[r * d : (r + 1) * d]) for r in range(n)])
        object.__setattr__(self, "_bias", bias)

    @property
    def d_model(self) -> int:
        """Width of the raw pooled vector the head takes."""
        return int(self.weight.shape[1])

    def tensors(self) -> dict[str, Tensor]:
        """The tensors stored in :data:`AFFECT_MEMBER`."""
        return {WEIGHT: self.weight, BIAS: self.bias}

    def describe(self) -> dict[str, Any]:
        """The manifest's ``affect`` field."""
        return {
            "labels": list(self.labels),
            "d_model": self.d_model,
            "pooling": POOLING,
            "trained_on": dict(self.trained_on),
            "metrics": dict(self.metrics),
        }

    @classmethod
    def from_lists(
        cls,
        labels: Sequence[str],
        weight: Sequence[Sequence[float]],
        bias: Sequence[float],
        trained_on: Mapping[str, Any] | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> AffectHead:
        """Builds a head from plain numbers (e.g. ``ndarray.tolist()``).

        Raises:
            PackageError: Shapes disagree with the labels, or a value is not finite.
        """
        rows = [list(r) for r in weight]
        width = len(rows[0]) if rows else 0
        if any(len(r) != width for r in rows):
            raise PackageError(f"{AFFECT_MEMBER}: {WEIGHT!r} rows differ in length")
        return cls(
            tuple(labels),
            Tensor(shape=(len(rows), width), data=array("f", [x for r in rows for x in r])),
            Tensor(shape=(len(bias),), data=array("f", list(bias))),
            dict(trained_on or {}),
            dict(metrics or {}),
        )

    def scores(self, pooled: Sequence[float]) -> dict[str, float]:
        """Label -> probability of one raw pooled vector, in pure Python."""
        return affect_scores(self, pooled)


def softmax(logits: Sequence[float]) -> list[float]:
    """The softmax of ``logits`` (shifted by the maximum: no overflow)."""
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = math.fsum(exps)
    return [e / total for e in exps]


def affect_logits(head: AffectHead, pooled: Sequence[float]) -> list[float]:
    """``W · pooled + b`` in pure Python.

    Raises:
        PackageError: ``pooled`` is not ``head.d_model`` wide.
    """
    if len(pooled) != head.d_model:
        raise PackageError(f"affect head takes {head.d_model} values, got {len(pooled)}")
    return [
        math.fsum(w * x for w, x in zip(row, pooled, strict=True)) + b
        for row, b in zip(head._rows, head._bias, strict=True)
    ]


def affect_scores(head: AffectHead, pooled: Sequence[float]) -> dict[str, float]:
    """Label -> probability (``softmax(W · pooled + b)``) of one raw pooled vector.

    Raises:
        PackageError: ``pooled`` is not ``head.d_model`` wide.
    """
    probs = softmax(affect_logits(head, pooled))
    return dict(zip(head.labels, probs, strict=True))


def check_affect_field(value: Any) -> None:
    """Checks the manifest's ``affect`` field on its own (types and allowed values).

    Raises:
        PackageError: A key is missing or unknown, or a value has the wrong type.
    """
    where = f"manifest.json: field {AFFECT_FIELD!r}"
    if not isinstance(value, dict) or set(value) != AFFECT_FIELDS:
        raise PackageError(f"{where} must be an object with exactly {sorted(AFFECT_FIELDS)}")
    check_labels(value["labels"], f"{where}.labels")
    d_model = value["d_model"]
    if not isinstance(d_model, int) or isinstance(d_model, bool) or not 1 <= d_model <= 1 << 16:
        raise PackageError(f"{where}.d_model must be an int in 1..65536, found {d_model!r}")
    if value["pooling"] != POOLING:
        raise PackageError(f"{where}.pooling must be {POOLING!r}, found {value['pooling']!r}")
    _check_description(value["trained_on"], f"{where}.trained_on", numbers_only=False)
    _check_description(value["metrics"], f"{where}.metrics", numbers_only=True)


def affect_from_member(
    tensors: Mapping[str, Tensor], described: Mapping[str, Any], d_model: int
) -> AffectHead:
    """Builds and cross-checks the head read from :data:`AFFECT_MEMBER` against the manifest.

    Raises:
        PackageError: Tensor names, shapes or dtype disagree with the manifest or the model.
    """
    if set(tensors) != {WEIGHT, BIAS}:
        raise PackageError(
            f"{AFFECT_MEMBER}: holds tensors {sorted(tensors)}; expected {sorted({WEIGHT, BIAS})}"
        )
    for name, tensor in tensors.items():
        if tensor.dtype != "F32":
            raise PackageError(f"{AFFECT_MEMBER}: tensor {name!r} is {tensor.dtype}; expected F32")
    if described["d_model"] != d_model:
        raise PackageError(
            f"manifest.json: field 'affect.d_model' is {described['d_model']} but the model's "
            f"d_model is {d_model}"
        )
    f32 = {n: Tensor(shape=t.shape, data=t.to_float32(), dtype="F32") for n, t in tensors.items()}
    head = AffectHead(
        tuple(described["labels"]),
        f32[WEIGHT],
        f32[BIAS],
        dict(described["trained_on"]),
        dict(described["metrics"]),
    )
    if head.d_model != d_model:
        raise PackageError(
            f"{AFFECT_MEMBER}: {WEIGHT!r} takes {head.d_model} values but the model's d_model "
            f"is {d_model}"
        )
    return head
