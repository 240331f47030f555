"""The vectorised L1 index: one matrix-vector product per lookup (native-only, numpy).

:class:`MatrixIndex` is the :class:`~evermind.search.scoped.ScopedIndex` the runtime's gateway
(and any native user: ``SemanticCache(embed, index=MatrixIndex())``) gives its
:class:`~evermind.cache.semantic.SemanticCache`; the tab keeps the pure-Python
:class:`~evermind.search.scoped.ScanIndex`. Each scope's unit vectors are rows of one float32
matrix (grown by doubling; a removed row is filled with the last one), so scoring every
entry of a scope is one BLAS call instead of a Python loop per entry.

Same answers as the scan, not only nearly: the float32 scores only *select* candidates.
Every entry whose float32 score is within :func:`selection_margin` of the ``k``-th best is
rescored exactly as :func:`evermind.search.cosine.dot` scores it (the same float64 products,
summed left to right: one ``cumsum`` over the selected rows of a float64 copy, so a scope
full of near-ties costs one vectorised pass, not a Python loop per entry), and those exact
scores are ordered as the scan orders them (score, then key, both descending). The margin is
twice a bound on the float32 error of a dot product of unit vectors (input rounding plus the
summation's ``(D - 1)·u``, ``u = 2**-24``), so no entry of the scan's top ``k`` can be left
out: the cache's decision (:func:`evermind.cache.decide.decide`) sees the same candidates
with the same scores. ``tests/unit/test_search_scoped.py`` checks it.

The calibration's pair cosines are one float64 product of the sampled rows; they differ
from :func:`~evermind.search.cosine.pairwise_cosines`' compensated sums by a few ulps.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from evermind.search.cosine import dot, pairwise_cosines
from evermind.search.rows import cosine_scores
from evermind.search.scoped import Scope, Vector

__all__ = ["MatrixIndex", "selection_margin"]

_UNIT_ROUNDOFF = 2.0**-24  # float32

# Python's ``sum`` of floats adds left to right before 3.12 (a ``cumsum`` row repeats it bit
# for bit) and compensates since (then the rescoring calls ``dot`` itself, entry by entry).
_SEQUENTIAL_SUM = sys.version_info < (3, 12)


def selection_margin(dim: int) -> float:
    """How far below the ``k``-th float32 score an entry is still rescored: twice a bound
    on the float32 error of one unit-vector dot product of ``dim`` components (with 5 %
    slack for the float64 rescoring's own rounding)."""
    return 2.1 * (dim + 3) * _UNIT_ROUNDOFF


class _Rows:
    """The vectors of one scope: a float32 buffer (selection), a float64 one (the exact
    rescoring) and the key of each used row."""

    def __init__(self, dim: int) -> None:
        self.matrix = np.zeros((16, dim), np.float32)
        self.exact = np.zeros((16, dim), np.float64)
        self.key_array = np.zeros(16, np.int64)
        self.keys: list[int] = []

    def grow(self) -> None:
        used = len(self.keys)
        for name in ("matrix", "exact", "key_array"):
            old = getattr(self, name)
            grown = np.zeros((2 * used, *old.shape[1:]), old.dtype)
            grown[:used] = old[:used]
            setattr(self, name, grown)

    def put(self, row: int, key: int, vector: Vector) -> None:
        self.matrix[row] = vector
        self.exact[row] = vector
        self.key_array[row] = key


class MatrixIndex:
    """A :class:`~evermind.search.scoped.ScopedIndex` on numpy matrices, one per scope."""

    def __init__(self) -> None:
        self._scopes: dict[Scope, _Rows] = {}
        # key -> (scope, row); each scope's float64 rows hold the cache's own vectors exactly.
        self._where: dict[int, tuple[Scope, int]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def add(self, key: int, scope: Scope, vector: Vector) -> None:
        """See :meth:`~evermind.search.scoped.ScopedIndex.add`."""
        rows = self._scopes.get(scope)
        if rows is None:
            rows = self._scopes[scope] = _Rows(scope[2])
        used = len(rows.keys)
        if used == rows.matrix.shape[0]:
            rows.grow()
        rows.put(used, key, vector)
        rows.keys.append(key)
        self._where[key] = (scope, used)

    def remove(self, key: int) -> None:
        """See :meth:`~evermind.search.scoped.ScopedIndex.remove`."""
        scope, row = self._where.pop(key)
        rows = self._scopes[scope]
        last = len(rows.keys) - 1
        if row != last:  # the last row fills the hole: the used rows stay contiguous
            moved = rows.keys[last]
            rows.matrix[row] = rows.matrix[last]
            rows.exact[row] = rows.exact[last]
            rows.key_array[row] = moved
            rows.keys[row] = moved
            self._where[moved] = (scope, row)
        rows.keys.pop()
        if not rows.keys:
            del self._scopes[scope]

    def clear(self) -> None:
        """See :meth:`~evermind.search.scoped.ScopedIndex.clear`."""
        self._scopes.clear()
        self._where.clear()

    def nearest(self, scope: Scope, vector: Vector, k: int) -> list[tuple[float, int]]:
        """See :meth:`~evermind.search.scoped.ScopedIndex.nearest` (same result as the scan)."""
        rows = self._scopes.get(scope)
        if rows is None or k <= 0:
            return []
        n = len(rows.keys)
        if n <= k:
            close = np.arange(n)
        else:
            scores = cosine_scores(rows.matrix[:n], np.asarray(vector, np.float32))  # (n,)
            kth = np.partition(scores, n - k)[n - k]
            close = np.flatnonzero(scores >= kth - selection_margin(scope[2]))
        if not _SEQUENTIAL_SUM:
            # The float64 rows hold the cache's own values exactly.
            scored = [(dot(rows.exact[i].tolist(), vector), rows.keys[i]) for i in close]
            scored.sort(reverse=True)
            return scored[:k]
        products = rows.exact[close] * np.asarray(vector, np.float64)  # (c, D)
        exact = np.cumsum(products, axis=1)[:, -1] if products.shape[1] else np.zeros(len(close))
        keys = rows.key_array[close]
        best = np.lexsort((keys, exact))[::-1][:k]  # score, then key, descending
        return [(float(exact[i]) + 0.0, int(keys[i])) for i in best]

    def cosines(self, vectors: Sequence[Vector], pairs: Sequence[tuple[int, int]]) -> list[float]:
        """See :meth:`~evermind.search.scoped.ScopedIndex.cosines` (one float64 product)."""
        if not pairs:
            return []
        if len({len(v) for v in vectors}) != 1:  # mixed dimensions: the scan's rules
            return pairwise_cosines(vectors, pairs)
        matrix = np.asarray(vectors, np.float64)  # (S, D)
        left, right = np.asarray(pairs, np.int64).T
        products = np.einsum("ij,ij->i", matrix[left], matrix[right])
        return [float(x) for x in products]
