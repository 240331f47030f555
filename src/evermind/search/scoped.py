"""Scoped vector indexes, where the L1 cache scores its candidates: the protocol and the scan.

A :class:`~evermind.cache.semantic.SemanticCache` keeps its entries' unit vectors in a
:class:`ScopedIndex`, grouped by scope (namespace, embedder fingerprint, dimension): a lookup
asks it for the best few entries of one scope, a store for the new entry's nearest
neighbours, the calibration for the cosines of sampled pairs. The index only *scores*; what
is served is still decided by :func:`evermind.cache.decide.decide`.

Two indexes keep one contract, so a cache decides the same whichever it holds:

- :class:`ScanIndex` (here, the default, browser-safe: standard library only): a Python dot
  product per entry of the scope. What the tab uses (Pyodide has no numpy).
- :class:`~evermind.search.matrix.MatrixIndex` (native-only, numpy): one matrix-vector
  product per scope, then the few entries that can be among the best are rescored with the
  same :func:`~evermind.search.cosine.dot` as here. Its :meth:`~ScopedIndex.nearest`
  therefore returns exactly what :class:`ScanIndex` returns (scores bit for bit, ties broken
  by key the same way).

The memory store's index (one vector per string key, no scopes) is
:class:`evermind.search.vectors.VectorIndex`.

Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from evermind.search.cosine import dot, pairwise_cosines

__all__ = ["ScanIndex", "Scope", "ScopedIndex", "Vector"]

#: (namespace, embedder fingerprint, dimension): only entries of one scope are compared.
Scope = tuple[str, str, int]
Vector = tuple[float, ...]


class ScopedIndex(Protocol):
    """The unit vectors of a cache's live entries, by scope.

    The cache calls :meth:`add` when it stores an entry and :meth:`remove` when one goes
    (evicted, expired, replaced, invalidated), so the index always holds exactly its live
    entries; keys are the cache's entry keys (ints, never reused).
    """

    def add(self, key: int, scope: Scope, vector: Vector) -> None:
        """Adds entry ``key`` of ``scope`` (``vector``: unit, ``len == scope[2]``)."""
        ...

    def remove(self, key: int) -> None:
        """Removes entry ``key`` (which must be held)."""
        ...

    def clear(self) -> None:
        """Removes every entry."""
        ...

    def nearest(self, scope: Scope, vector: Vector, k: int) -> list[tuple[float, int]]:
        """The ``k`` entries of ``scope`` with the highest
        :func:`~evermind.search.cosine.dot` with ``vector``:
        ``(score, key)`` sorted descending (equal scores: the higher key first)."""
        ...

    def cosines(self, vectors: Sequence[Vector], pairs: Sequence[tuple[int, int]]) -> list[float]:
        """The dot products of ``vectors[i]`` and ``vectors[j]`` for each pair (the
        calibration's unrelated pairs; see :func:`evermind.search.cosine.pairwise_cosines`)."""
        ...


class ScanIndex:
    """The pure-Python :class:`ScopedIndex`: one :func:`~evermind.search.cosine.dot` per
    entry of the scope."""

    def __init__(self) -> None:
        self._scopes: dict[Scope, dict[int, Vector]] = {}
        self._scope_of: dict[int, Scope] = {}

    def __len__(self) -> int:
        return len(self._scope_of)

    def add(self, key: int, scope: Scope, vector: Vector) -> None:
        """See :meth:`ScopedIndex.add`."""
        self._scopes.setdefault(scope, {})[key] = vector
        self._scope_of[key] = scope

    def remove(self, key: int) -> None:
        """See :meth:`ScopedIndex.remove`."""
        scope = self._scope_of.pop(key)
        bucket = self._scopes[scope]
        del bucket[key]
        if not bucket:
            del self._scopes[scope]

    def clear(self) -> None:
        """See :meth:`ScopedIndex.clear`."""
        self._scopes.clear()
        self._scope_of.clear()

    def nearest(self, scope: Scope, vector: Vector, k: int) -> list[tuple[float, int]]:
        """See :meth:`ScopedIndex.nearest`."""
        bucket = self._scopes.get(scope)
        if not bucket or k <= 0:
            return []
        scored = [(dot(stored, vector), key) for key, stored in bucket.items()]
        scored.sort(reverse=True)
        return scored[:k]

    def cosines(self, vectors: Sequence[Vector], pairs: Sequence[tuple[int, int]]) -> list[float]:
        """See :meth:`ScopedIndex.cosines` (:func:`~evermind.search.cosine.pairwise_cosines`)."""
        return pairwise_cosines(vectors, pairs)
