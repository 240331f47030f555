"""``ServedVectorIndex``: candidates from a store's own ANN index, rescored exactly here.

A memory store on Postgres keeps its embeddings in pgvector too, with an HNSW index built once
in the database (``vectorstore/pgvector.py``), so every process of a team shares one graph
instead of each building its own in memory (:mod:`evermind.search.ann`: minutes at 10⁶).
Past ``min_rows`` vectors (:data:`SERVED_MIN_ROWS`, 2·10⁵, why there) a search asks the store
for the ``max(4k, 64)`` nearest items
(``candidates``: keys, and how many rows the store returned), keeps those in this index that
``accept`` admits, rescores them exactly on the index's own matrix (so scores and ties are the
exact scan's, as the in-process graph's are), and asks for four times more while fewer than
``k`` survive. The store cannot answer (``candidates`` returns None: its index is not built
yet, or a filter would starve it), returns fewer rows than asked (nothing more to reach), or
more than :data:`SERVED_MAX_FETCH` would be needed: then :meth:`VectorIndex.search` answers,
the exact scan or, past its own threshold, the in-process graph. ``last_scan`` is
``"served"`` when the store's candidates answered.

Native-only in practice (it runs on the numpy path; without numpy every search is the base
class's pure-Python scan), standard library and ``evermind`` only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from evermind.errors import ConfigError
from evermind.search.cosine import normalise
from evermind.search.rows import cosine_scores
from evermind.search.vectors import VectorIndex

__all__ = ["SERVED_MAX_FETCH", "SERVED_MIN_ROWS", "Candidates", "ServedVectorIndex"]

#: From how many vectors on the store's candidates answer. Below it the in-process index
#: answers (the exact scan, then usearch's graph past 2·10⁴), which measured faster per query
#: at 10⁵ once its graph was built (recall p50 6.9 against 10.6 ms through pgvector, its build
#: 17 s; docs/vectorstore.md "pgvector HNSW for the memory store"); past this size each
#: process's own build grows to minutes (385–735 s at 10⁶) and one shared index in the
#: database (426 s at 10⁶, once) saves every process that build. The crossover between 10⁵
#: and 10⁶ is not measured.
SERVED_MIN_ROWS = 200_000
#: The most candidates one search asks the store for (pgvector's ``hnsw.ef_search`` maximum:
#: its HNSW scan returns at most that many rows).
SERVED_MAX_FETCH = 1000

#: ``candidates(unit_query, n)``: the keys of the store's ``n`` nearest items (a key may come
#: more than once, or not be in the index), and how many rows the store returned; or None.
Candidates = Callable[[list[float], int], Awaitable[tuple[Sequence[str], int] | None]]


class ServedVectorIndex(VectorIndex):
    """A :class:`VectorIndex` whose searches past ``min_rows`` start from ``candidates``.

    Args:
        candidates: The store's nearest-neighbour query (see :data:`Candidates`).
        min_rows: From how many vectors on the store is asked (default
            :data:`SERVED_MIN_ROWS`).
        use_numpy: As for :class:`VectorIndex`.

    Raises:
        ConfigError: ``min_rows`` below 1.
    """

    def __init__(
        self,
        candidates: Candidates,
        *,
        min_rows: int = SERVED_MIN_ROWS,
        use_numpy: bool | None = None,
    ) -> None:
        if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1:
            raise ConfigError(f"ServedVectorIndex: min_rows must be an int >= 1, got {min_rows!r}")
        super().__init__(use_numpy)
        self._candidates = candidates
        self._served_min_rows = min_rows

    @property
    def served(self) -> bool:
        """Whether searches at this size ask the store first."""
        return self.uses_numpy and len(self) >= self._served_min_rows

    async def asearch(
        self, query: Sequence[float], k: int, accept: Callable[[str], bool] | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` best ``(key, cosine)`` pairs that ``accept``, from the store's candidates
        past ``min_rows`` (exact scores), else as :meth:`VectorIndex.search`."""
        if k > 0 and self.served:
            self._check_dim(query)
            found = await self._served(normalise(query), k, accept)
            if found is not None:
                self._last = "served"
                return found
        return self.search(query, k, accept)

    async def _served(
        self, unit: Sequence[float], k: int, accept: Callable[[str], bool] | None
    ) -> list[tuple[str, float]] | None:
        np: Any = self._np
        n = len(self._keys)
        want = min(n, max(4 * k, 64), SERVED_MAX_FETCH)
        while True:
            answer = await self._candidates(list(unit), want)
            if answer is None:
                return None
            keys, returned = answer
            slots = []
            for key in dict.fromkeys(keys):
                slot = self._slot.get(key)
                if slot is not None and (accept is None or accept(key)):
                    slots.append(slot)
            if len(slots) >= k or len(slots) >= n:
                break
            if returned < want or want >= min(n, SERVED_MAX_FETCH):
                return None  # the store reached no more: the exact scan answers
            want = min(n, SERVED_MAX_FETCH, 4 * want)
        sims = cosine_scores(self._matrix[slots], np.asarray(unit, np.float32)).tolist()
        keys_of = [self._keys[s] for s in slots]
        ranked = sorted(zip(keys_of, sims, strict=True), key=lambda kv: (-kv[1], kv[0]))
        return ranked[:k]
