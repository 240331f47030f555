"""The shared L2 semantic cache: SQLite storage with an in-memory cosine index (native-only).

Entries are ``(tenant, namespace, embedding, response, meta, query, created)`` rows of the
``semantic_cache`` table in the runtime's database. A lookup compares the (L2-normalised)
query embedding with every entry of the same tenant, namespace and dimension, and returns
the best one at or above the threshold. When the request carries its ``query`` text and
the entry stored one, :func:`evermind.cache.default_guard` must also agree that the two ask
the same thing (the L1 cache's guards); a refused candidate makes way for the next best.

All SQLite work and the index live on one private worker thread, so no locks are needed and
the event loop never blocks on the disk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from evermind.cache import default_guard
from evermind.errors import InputError, StorageError

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
#: Candidates above the threshold the guards may refuse before the lookup is a miss.
MAX_GUARDED_CANDIDATES = 16

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


class _Index:
    """The vectors of one (tenant, namespace, dim), in a buffer that grows by doubling."""

    def __init__(self, dim: int) -> None:
        self.ids: list[int] = []
        self.queries: list[str | None] = []
        self._vectors = np.zeros((16, dim), np.float32)

    @property
    def vectors(self) -> np.ndarray:
        return self._vectors[: len(self.ids)]  # (n, dim)

    def add(self, entry_id: int, vector: np.ndarray, query: str | None) -> None:
        if len(self.ids) == self._vectors.shape[0]:
            grown = np.zeros((2 * self._vectors.shape[0], self._vectors.shape[1]), np.float32)
            grown[: len(self.ids)] = self._vectors
            self._vectors = grown
        self._vectors[len(self.ids)] = vector
        self.ids.append(entry_id)
        self.queries.append(query)

    def drop_first(self, count: int) -> None:
        keep = len(self.ids) - count
        self._vectors[:keep] = self._vectors[count : len(self.ids)]
        del self.ids[:count], self.queries[:count]


def normalised(embedding: list[float]) -> np.ndarray:
    """``embedding`` as a unit float32 vector.

    Raises:
        InputError: Non-finite values or a zero vector.
    """
    vector = np.asarray(embedding, np.float64)
    norm = float(np.linalg.norm(vector)) if np.all(np.isfinite(vector)) else float("nan")
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
        self._indexes: dict[Scope, _Index] = {}
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

    def _index(self, scope: Scope) -> _Index:
        index = self._indexes.get(scope)
        if index is None:
            assert self._conn is not None
            index = _Index(scope[2])
            rows = self._conn.execute(
                "SELECT id, embedding, query FROM semantic_cache "
                "WHERE tenant = ? AND namespace = ? AND dim = ? ORDER BY id",
                scope,
            )
            for entry_id, blob, query in rows:
                index.add(entry_id, np.frombuffer(blob, np.float32), query)
            self._indexes[scope] = index
        return index

    async def lookup(
        self,
        tenant: str,
        namespace: str,
        embedding: list[float],
        threshold: float,
        query: str | None,
    ) -> LookupResult:
        """The best guarded entry at or above ``threshold``, or a miss."""
        vector = normalised(embedding)

        def work() -> LookupResult:
            index = self._index((tenant, namespace, vector.size))
            if not index.ids:
                return LookupResult(None)
            scores = index.vectors @ vector  # (n,)
            order = np.argsort(-scores, kind="stable")[:MAX_GUARDED_CANDIDATES]
            refused = 0
            for position in order:
                score = float(scores[position])
                if score < threshold:
                    break
                cached_query = index.queries[position]
                guarded = query is not None and cached_query is not None
                if guarded and not default_guard(query or "", cached_query or ""):
                    refused += 1
                    continue
                return LookupResult(self._hit(index.ids[position], score), refused)
            return LookupResult(None, refused)

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
        try:
            response_json = json.dumps(response, allow_nan=False)
            meta_json = None if meta is None else json.dumps(meta, allow_nan=False)
        except ValueError as err:
            raise InputError(
                f"response/meta: expected JSON values, got {err}", code="invalid_json"
            ) from err

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
            index.add(entry_id, vector, query)
            return entry_id

        return await self._run(work)

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
