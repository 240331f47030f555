"""The shared L2 semantic cache: SQLite storage with an in-memory cosine index (native-only).

Entries are ``(tenant, namespace, embedding, response, meta, query, created)`` rows of the
``semantic_cache`` table in the runtime's database. A lookup compares the (L2-normalised)
query embedding with every entry of the same tenant, namespace and dimension and hands the
best few to the decision the L1 caches make too (:func:`judge`): by default the verified
one (:func:`evermind.cache.verified.decide_verified`: the shipped pair verifier and the bound
for the request's ``max_error``, default 0.01; the request's ``threshold`` is an extra cosine
floor; a lookup or an entry without its question text cannot be verified and misses), or with
``max_error`` ``"off"`` the rule-based :func:`evermind.cache.decide.decide` (the threshold
raised to what unrelated texts reach, lexical checks and the English guards). Either way the
calibration is the scope's own (the cosines between its stored entries, re-measured as it
grows), only the best candidate is served, and near-tied different answers are a miss.

All SQLite work and the index live on one private worker thread, so no locks are needed and
the event loop never blocks on the disk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from evermind.cache import DEFAULT_CHAIN
from evermind.cache.decide import Candidate, contested_of, decide
from evermind.cache.verified import DEFAULT_MAX_ERROR, decide_verified
from evermind.cache.verifier import default_verifier
from evermind.errors import InputError, StorageError
from evermind.search.calibration import UNCALIBRATED, Calibration, measure_calibration, stale
from evermind.search.rows import cosine_scores, gram, ranked
from evermind.search.terms import TermStats

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
#: The best-scoring entries handed to the decision (the best is judged, the rest only show
#: whether it is ambiguous).
MAX_GUARDED_CANDIDATES = 4
#: In-memory indexes kept (least recently used out; an evicted scope reloads from SQLite).
MAX_INDEXED_SCOPES = 256
#: ... and the bytes their vectors may hold in all.
MAX_INDEXED_BYTES = 256 * 1024 * 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS semantic_cache (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant    TEXT NOT NULL,
    namespace TEXT NOT NULL,
    dim       INTEGER NOT NULL,
    embedding BLOB NOT NULL,
    response  TEXT NOT NULL,
    meta      TEXT,
    query     TEXT,
    created   REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS semantic_cache_scope ON semantic_cache (tenant, namespace, dim, id);
"""

Scope = tuple[str, str, int]


@dataclass
class LookupResult:
    """A lookup's answer: the hit (None on a miss) and how many candidates guards refused."""

    hit: dict[str, Any] | None
    refused: int = 0
    reason: str = ""
    #: The served candidate's cosine (0.0 on a miss).
    score: float = 0.0


class CacheStore(Protocol):
    """What the routes and the gateway need of an L2 store: this module's SQLite one, or
    :class:`~evermind.cache.l2_vectorstore.VectorCacheStore` on a ``--store`` engine."""

    max_entries: int

    async def lookup(
        self,
        tenant: str,
        namespace: str,
        embedding: list[float],
        threshold: float,
        query: str | None,
        max_error: float | None = DEFAULT_MAX_ERROR,
    ) -> LookupResult:
        """The best entry at or above ``threshold`` that the decision for ``max_error``
        serves (:func:`judge`), or a miss."""
        ...

    async def store(
        self,
        tenant: str,
        namespace: str,
        embedding: list[float],
        response: Any,
        meta: dict[str, Any] | None,
        query: str | None,
    ) -> int | str:
        """Adds an entry; returns its id."""
        ...

    async def count(self, tenant: str) -> int:
        """How many entries ``tenant`` has in every namespace."""
        ...

    def close(self) -> None:
        """Releases what the store holds."""
        ...


class _Index:
    """The vectors of one (tenant, namespace, dim), in a buffer that grows by doubling.

    ``ids`` are the storage's entry ids (SQLite row ids here, item ids on a vector store).
    """

    def __init__(self, dim: int) -> None:
        self.ids: list[Any] = []
        self.queries: list[str | None] = []
        self.answers: list[str] = []  # a digest of each response (equal answers do not contest)
        self._vectors = np.zeros((16, dim), np.float32)
        self.calibration: tuple[int, Calibration] = (0, UNCALIBRATED)
        self.terms = TermStats()  # the stored queries' IDF (weights the lexical evidence)
        # Rows read from the database when the index was loaded, and rows stored through
        # this process since (:meth:`SemanticCacheStore.rows_stored`).
        self.loaded = 0
        self.stored = 0

    def calibrated(self) -> Calibration:
        """How the scope's embedder scores its stored entries against each other."""
        measured, found = self.calibration
        if not stale(measured, len(self.ids)):
            return found

        def cosines(chosen: list[int], pairs: list[tuple[int, int]]) -> list[float]:
            products = gram(self.vectors[chosen])
            return [float(products[i, j]) for i, j in pairs]

        found = measure_calibration(self.queries, cosines, limit=256)
        self.calibration = (len(self.ids) if found.pairs else 0, found)
        return found

    @property
    def vectors(self) -> np.ndarray:
        return self._vectors[: len(self.ids)]  # (n, dim)

    @property
    def nbytes(self) -> int:
        """Bytes the index's vector buffer holds."""
        return int(self._vectors.nbytes)

    def contested(self, position: int) -> float | None:
        """The highest cosine between entry ``position`` and another entry with another
        answer (decide's rule 6), measured now: one scan of the scope."""
        scores = cosine_scores(self.vectors, self.vectors[position])
        return contested_of(
            (
                (float(scores[p]), p, self.answers[p])
                for p in ranked(scores, MAX_GUARDED_CANDIDATES + 1)
            ),
            position,
            self.answers[position],
        )

    def add(self, entry_id: Any, vector: np.ndarray, query: str | None, answer: str) -> None:
        if len(self.ids) == self._vectors.shape[0]:
            grown = np.zeros((2 * self._vectors.shape[0], self._vectors.shape[1]), np.float32)
            grown[: len(self.ids)] = self._vectors
            self._vectors = grown
        self._vectors[len(self.ids)] = vector
        self.ids.append(entry_id)
        self.queries.append(query)
        self.answers.append(answer)
        if query is not None:
            self.terms.add(query)

    def drop_first(self, count: int) -> None:
        keep = len(self.ids) - count
        for query in self.queries[:count]:
            if query is not None:
                self.terms.remove(query)
        self._vectors[:keep] = self._vectors[count : len(self.ids)]
        del self.ids[:count], self.queries[:count], self.answers[:count]


def judge(
    index: _Index,
    vector: np.ndarray,
    threshold: float,
    query: str | None,
    max_error: float | None = DEFAULT_MAX_ERROR,
) -> tuple[int | None, LookupResult]:
    """The cache's decision over the index's best candidates for ``vector``: the verified one
    for ``max_error`` (:func:`~evermind.cache.verified.decide_verified`, ``threshold`` an extra
    cosine floor), or for None the rule-based :func:`~evermind.cache.decide.decide`.

    Returns:
        The served entry's position in the index (None on a miss) and the result without
        its hit (the storage fetches the response of that position).
    """
    if not index.ids:
        return None, LookupResult(None, reason="the cache is empty")
    scores = cosine_scores(index.vectors, vector)  # (n,)
    candidates = [
        Candidate(p, float(scores[p]), index.queries[p], index.answers[p])
        for p in ranked(scores, MAX_GUARDED_CANDIDATES)
    ]
    if max_error is not None:
        return _verified(index, candidates, threshold, query, max_error)
    first = candidates[0]
    if first.score >= threshold:  # only a candidate that can be served is contested
        candidates[0] = dataclasses.replace(first, contested=index.contested(int(str(first.key))))
    if query is None or candidates[0].query is None:
        # Nothing to compare words with: threshold, calibration and ties still apply.
        candidates = [dataclasses.replace(c, query=None) for c in candidates]
    found = decide(
        query,
        candidates,
        threshold=threshold,
        calibration=index.calibrated(),
        guard=DEFAULT_CHAIN.check,
        idf=index.terms,
    )
    if not found.hit or found.candidate is None:
        refused = 0 if found.refused_by is None else 1
        return None, LookupResult(None, refused, found.reason)
    candidate = found.candidate
    return int(str(candidate.key)), LookupResult(None, 0, found.reason, candidate.score)


def _verified(
    index: _Index,
    candidates: list[Candidate],
    threshold: float,
    query: str | None,
    max_error: float,
) -> tuple[int | None, LookupResult]:
    if query is None:
        return None, LookupResult(
            None,
            reason="the lookup did not send its question text, so no hit can be verified "
            "(send query, or max_error 'off' for the rule-based decision)",
        )
    found = decide_verified(
        query,
        candidates,
        calibration=index.calibrated(),
        verifier=default_verifier(),
        max_error=max_error,
        floor=threshold,
    )
    if not found.hit or found.candidate is None:
        return None, LookupResult(None, 0 if found.refused_by is None else 1, found.reason)
    candidate = found.candidate
    return int(str(candidate.key)), LookupResult(None, 0, found.reason, candidate.score)


def encoded(response: Any, meta: dict[str, Any] | None) -> tuple[str, str | None]:
    """An entry's response and meta as the JSON an L2 store keeps.

    Raises:
        InputError: A value JSON cannot hold (NaN, infinity) (``code="invalid_json"``).
    """
    try:
        return (
            json.dumps(response, allow_nan=False),
            None if meta is None else json.dumps(meta, allow_nan=False),
        )
    except ValueError as err:
        raise InputError(
            f"response/meta: expected JSON values, got {err}", code="invalid_json"
        ) from err


def _digest(response_json: str) -> str:
    """What makes two stored responses the same answer (their JSON text's hash)."""
    return hashlib.sha256(response_json.encode("utf-8")).hexdigest()


def normalised(embedding: list[float]) -> np.ndarray:
    """``embedding`` as a unit float32 vector.

    Raises:
        InputError: Non-finite values or a zero vector.
    """
    vector = np.asarray(embedding, np.float64)
    norm = float("nan")
    if np.all(np.isfinite(vector)):
        # Scaled by the largest magnitude first, so huge finite values (1e300) cannot
        # overflow the squares: the direction is what the cache compares.
        scale = float(np.max(np.abs(vector))) if vector.size else 0.0
        norm = 0.0 if scale == 0.0 else float(np.linalg.norm(vector / scale))
        vector = vector / scale if scale else vector
    if not np.isfinite(norm) or norm == 0.0:
        raise InputError(
            f"embedding: expected finite numbers with a non-zero norm, got norm {norm}; "
            "hint: send the embedding your embedder returned",
            code="invalid_embedding",
        )
    return (vector / norm).astype(np.float32)


class SemanticCacheStore:
    """The L2 cache of every tenant, in the SQLite file at ``path``.

    Args:
        path: The runtime database (shared with the memory store; WAL mode).
        max_entries: Entries kept per (tenant, namespace, dimension); the oldest go first.

    Raises:
        StorageError: The database cannot be opened.
    """

    def __init__(self, path: Path, max_entries: int) -> None:
        self.max_entries = max_entries
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="evermind-l2"
        )
        self._indexes: OrderedDict[Scope, _Index] = OrderedDict()
        self._conn: sqlite3.Connection | None = None
        self._executor.submit(self._open, path).result()

    def _open(self, path: Path) -> None:
        try:
            conn = sqlite3.connect(str(path), timeout=10, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 10000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as err:
            raise StorageError(
                f"semantic cache: cannot open {str(path)!r}: {err}; hint: is the data "
                "directory writable and the file an Evermind runtime database?"
            ) from err
        self._conn = conn

    async def _run(self, work: Callable[[], _T]) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, work)

    @property
    def indexed_scopes(self) -> int:
        """How many (tenant, namespace, dim) indexes are in memory."""
        return len(self._indexes)

    def _index(self, scope: Scope, keep_empty: bool = True) -> _Index:
        """The scope's index, loaded on first use; only ``keep_empty`` keeps an empty one
        (a lookup in a namespace that holds nothing must not cost memory)."""
        index = self._indexes.get(scope)
        if index is not None:
            self._indexes.move_to_end(scope)
        else:
            assert self._conn is not None
            index = _Index(scope[2])
            rows = self._conn.execute(
                "SELECT id, embedding, query, response FROM semantic_cache "
                "WHERE tenant = ? AND namespace = ? AND dim = ? ORDER BY id",
                scope,
            )
            for entry_id, blob, query, response in rows:
                index.add(entry_id, np.frombuffer(blob, np.float32), query, _digest(response))
            index.loaded = len(index.ids)
            if index.ids or keep_empty:
                self._indexes[scope] = index
                self._evict(scope)
        return index

    def _evict(self, keep: Scope) -> None:
        """Drops least recently used indexes beyond the count and byte budgets."""
        held = sum(index.nbytes for index in self._indexes.values())
        while len(self._indexes) > 1 and (
            len(self._indexes) > MAX_INDEXED_SCOPES or held > MAX_INDEXED_BYTES
        ):
            oldest = next(iter(self._indexes))
            if oldest == keep:
                break
            held -= self._indexes.pop(oldest).nbytes

    async def lookup(
        self,
        tenant: str,
        namespace: str,
        embedding: list[float],
        threshold: float,
        query: str | None,
        max_error: float | None = DEFAULT_MAX_ERROR,
    ) -> LookupResult:
        """The best entry at or above ``threshold`` that the decision for ``max_error``
        serves (:func:`judge`), or a miss."""
        vector = normalised(embedding)

        def work() -> LookupResult:
            index = self._index((tenant, namespace, vector.size), keep_empty=False)
            position, result = judge(index, vector, threshold, query, max_error)
            if position is None:
                return result
            return LookupResult(self._hit(index.ids[position], result.score), 0, result.reason)

        return await self._run(work)

    def _hit(self, entry_id: int, score: float) -> dict[str, Any]:
        assert self._conn is not None
        response, query, meta = self._conn.execute(
            "SELECT response, query, meta FROM semantic_cache WHERE id = ?", (entry_id,)
        ).fetchone()
        hit: dict[str, Any] = {"response": json.loads(response), "score": round(score, 6)}
        if query is not None:
            hit["query"] = query
        if meta is not None:
            hit["meta"] = json.loads(meta)
        return hit

    async def store(
        self,
        tenant: str,
        namespace: str,
        embedding: list[float],
        response: Any,
        meta: dict[str, Any] | None,
        query: str | None,
    ) -> int:
        """Adds an entry; returns its id. Evicts the scope's oldest beyond ``max_entries``."""
        vector = normalised(embedding)
        response_json, meta_json = encoded(response, meta)

        def work() -> int:
            assert self._conn is not None
            scope = (tenant, namespace, vector.size)
            index = self._index(scope)
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                cursor = conn.execute(
                    "INSERT INTO semantic_cache (tenant, namespace, dim, embedding, response, "
                    "meta, query, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (*scope, vector.tobytes(), response_json, meta_json, query, time.time()),
                )
                entry_id = int(cursor.lastrowid or 0)
                excess = len(index.ids) + 1 - self.max_entries
                if excess > 0:
                    conn.execute(
                        "DELETE FROM semantic_cache WHERE tenant = ? AND namespace = ? AND "
                        "dim = ? AND id <= ?",
                        (*scope, index.ids[excess - 1]),
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            if excess > 0:
                index.drop_first(excess)
            index.add(entry_id, vector, query, _digest(response_json))
            index.stored += 1
            return entry_id

        return await self._run(work)

    def rows_stored(self, tenant: str, namespace: str, dim: int) -> int | None:
        """How many rows this process stored in the scope since its index was loaded, when
        the index is in memory and was loaded empty (so it holds exactly those rows, less
        any evicted); None otherwise (not loaded, or it holds rows read from the database).

        The in-memory index is all a lookup reads: rows another process writes later are
        not in it (they are read when the scope is loaded again). A caller that wrote every
        one of those rows itself, and still holds them, learns nothing from a lookup here
        (:meth:`evermind.runtime.gateway.core.StoreBackend.holds_only_written`). Called
        from the event loop: it reads two counters the worker thread updates, without a
        lock (each read is atomic; a stale one only makes the caller look up).
        """
        index = self._indexes.get((tenant, namespace, dim))
        if index is None or index.loaded:
            return None
        return index.stored

    async def count(self, tenant: str) -> int:
        """How many entries ``tenant`` has in every namespace."""

        def work() -> int:
            assert self._conn is not None
            row = self._conn.execute(
                "SELECT COUNT(*) FROM semantic_cache WHERE tenant = ?", (tenant,)
            ).fetchone()
            return int(row[0])

        return await self._run(work)

    def close(self) -> None:
        """Closes the database and stops the worker thread."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            self._executor.submit(conn.close).result()
        self._executor.shutdown(wait=True)
