"""Cosines of vectors held as Python sequences: the dot products, unit scaling, sampled pairs.

Two sums, chosen per caller because they round differently and each caller's results are
pinned by its tests:

- :func:`dot`: ``sum(map(mul))``, left to right. The semantic cache's scan over its
  float64 entries (``sum(map(mul))`` runs ~2.7x faster than ``fsum`` over a generator,
  measured at 1300 entries of 128 dimensions; unit vectors need no compensated sum).
- :func:`exact_dot`: ``math.fsum``, correctly rounded, lengths checked. The memory index's
  pure-Python path and the calibration's pair cosines (:func:`pairwise_cosines`).

Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import math
import operator
from array import array
from collections.abc import Sequence
from typing import Any

from evermind.errors import ShapeError

__all__ = ["dot", "exact_dot", "normalise", "normalise_rows", "pairwise_cosines"]


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The dot product of two unit vectors of one length, summed left to right."""
    return float(sum(map(operator.mul, a, b)))


def exact_dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The correctly rounded dot product of two vectors (``math.fsum``).

    Raises:
        ValueError: The lengths differ.
    """
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def normalise(vector: Sequence[float]) -> array[float]:
    """Returns ``vector`` as an L2-normalised float32 array (a zero vector stays zero).

    Raises:
        ShapeError: The vector holds NaN or infinity.
    """
    values = array("f", (float(x) for x in vector))
    norm = math.sqrt(math.fsum(x * x for x in values))
    if not math.isfinite(norm):
        raise ShapeError(
            f"vector: expected finite numbers, got a vector of length {len(values)} with "
            "NaN or infinity; hint: check the embedder's output"
        )
    if norm > 0:
        values = array("f", (x / norm for x in values))
    return values


def normalise_rows(matrix: Any) -> list[array[float]]:
    """:func:`normalise` of every row of a 2-D numpy array at once, as float32 ``array``s.

    The bulk path of an embedder's output: the norms are summed in float64 over the rows'
    float32 values, as :func:`normalise` does, but with the array's own vectorised methods
    (this module imports no numpy, so it stays browser-safe); a zero row stays zero.

    Raises:
        ShapeError: A row holds NaN or infinity.
    """
    rows = matrix.astype("float32").astype("float64")  # (N, D): the float32 values, widened
    norms = ((rows * rows).sum(axis=1)) ** 0.5  # (N,)
    for i, norm in enumerate(norms.tolist()):
        if not math.isfinite(norm):
            raise ShapeError(
                f"vector: expected finite numbers, got a vector of length {rows.shape[1]} "
                f"with NaN or infinity (row {i}); hint: check the embedder's output"
            )
    unit = (rows / (norms + (norms == 0))[:, None]).astype("float32")  # (N, D)
    return [array("f", unit[i].tobytes()) for i in range(unit.shape[0])]


def pairwise_cosines(
    vectors: Sequence[Sequence[float]], pairs: Sequence[tuple[int, int]] | None = None
) -> list[float]:
    """Dot products (:func:`exact_dot`) of (unit) ``vectors``: of ``pairs`` (e.g.
    :func:`evermind.search.calibration.calibration_pairs`), or of every pair ``i < j``.

    A pair of vectors of different lengths is skipped.
    """
    rows = [tuple(v) for v in vectors]
    if pairs is None:
        pairs = [(i, j) for i in range(len(rows)) for j in range(i + 1, len(rows))]
    return [exact_dot(rows[i], rows[j]) for i, j in pairs if len(rows[i]) == len(rows[j])]
