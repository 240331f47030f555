"""Cosine scans over a matrix of unit rows: the scores, the Gram matrix, the best rows.

The numpy engines (the memory index's native path, the cache's
:class:`~evermind.search.matrix.MatrixIndex`, the runtime's L2 index and the vector store's
in-process engine) keep their vectors as the rows of a float32 matrix and score a query with
one matrix-vector product; this module is that product and the orderings read from it, so
each engine's scan is the same arithmetic.

The functions take numpy arrays and use only their operators and methods: this module
imports no numpy itself, so it loads in the browser (where no caller has a matrix).
Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["cosine_scores", "gram", "ranked", "top_rows"]


def cosine_scores(matrix: Any, query: Any) -> Any:
    """The cosine of each row with ``query``: ``matrix @ query``, (N, D) @ (D,) -> (N,)
    (one row, (D,) @ (D,), gives the one cosine).

    Rows and query are unit vectors, so the dot product is the cosine; the product runs in
    the arrays' dtype (float32 for every engine here).
    """
    return matrix @ query


def gram(matrix: Any) -> Any:
    """The cosines between every two rows: ``matrix @ matrix.T``, (S, D) -> (S, S)."""
    return matrix @ matrix.T


def ranked(scores: Any, limit: int) -> list[int]:
    """The positions of the ``limit`` highest ``scores``, best first (ties: lower position
    first, a stable sort of the negated scores)."""
    order: list[int] = (-scores).argsort(kind="stable")[:limit].tolist()
    return order


def top_rows(scores: Any, k: int, tie: Callable[[int], str]) -> list[int]:
    """The positions of the ``k`` highest ``scores``, best first, ties by ``tie(position)``.

    With more than ``4·k`` scores only the best ``k`` are partitioned out and sorted (the
    rest can never be returned); otherwise every position is sorted. With the partition,
    which of several positions tied at the ``k``-th score are kept is the partition's
    choice, not ``tie``'s (the in-process engine's behaviour before this module, kept).
    """
    best: Any = range(len(scores))
    if len(scores) > 4 * k:
        best = (-scores).argpartition(k - 1)[:k].tolist()
    order = sorted(best, key=lambda j: (-float(scores[j]), tie(j)))
    return order[:k]
