"""The embedded engine: an exact numpy scan over the items in memory, optionally kept in SQLite.

``memory://`` keeps the items in this process only; ``sqlite:///path`` writes every change
through to one SQLite file (WAL) and loads it on open, so a restarted process finds its items.
Only the opening store's memory is scanned: two processes on one file do not see each other's
later writes (that is what the Postgres engine is for).

A query masks the items the scope may see and the filter admits (both in Python, with the
reference :func:`~evermind.vectorstore.filters.evaluate`, so nothing is ever residual), then
scores the survivors with one float32 matrix-vector product and takes the top ``k`` (ties by
id). Exact, so it is also the oracle the other engines' recall is measured against.

Native-only: numpy.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from evermind.errors import ConfigError, StorageError
from evermind.vectorstore.filters import evaluate, parse_filter
from evermind.vectorstore.port import (
    AccessScope,
    Acl,
    Hit,
    VectorItem,
    check_items,
    check_query,
    check_scope,
    unit,
    visible,
)

__all__ = ["InProcessStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS vector_items (
    id TEXT PRIMARY KEY,
    vector BLOB NOT NULL,
    text TEXT NOT NULL,
    metadata TEXT NOT NULL,
    tenant TEXT NOT NULL,
    principals TEXT NOT NULL,
    sensitivity INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS vector_store_info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class InProcessStore:
    """Exact cosine search over items held in memory (and written through to SQLite).

    Args:
        dim: The vectors' dimension.
        path: A SQLite file to persist to, or None to keep everything in memory.
    """

    def __init__(self, dim: int, path: Path | None = None) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"vector store: dim must be an int ≥ 1, got {dim!r}")
        self.dim = dim
        self._items: dict[str, VectorItem] = {}
        self._rows: dict[str, int] = {}  # id -> row of the matrix
        self._matrix = np.zeros((0, dim), dtype=np.float32)  # (N, D), unit rows
        self._ids: list[str] = []
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if path is not None:
            self._db = self._open(Path(path))

    def _open(self, path: Path) -> sqlite3.Connection:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM vector_store_info WHERE key = 'dim'").fetchone()
            if row is None:
                db.execute("INSERT INTO vector_store_info VALUES ('dim', ?)", (str(self.dim),))
            elif int(row[0]) != self.dim:
                raise ConfigError(
                    f"vector store: {path} holds vectors of dimension {row[0]}, not {self.dim}; "
                    "open it with that dim or use another file"
                )
            rows = db.execute("SELECT * FROM vector_items").fetchall()
        except sqlite3.Error as err:
            raise StorageError(f"vector store: cannot open {path}: {err}") from err
        for id_, blob, text, meta, tenant, principals, sensitivity in rows:
            vector = tuple(np.frombuffer(blob, dtype=np.float32).tolist())
            acl = Acl(tenant, frozenset(json.loads(principals)), sensitivity)
            self._items[id_] = VectorItem(id_, vector, text, json.loads(meta), acl)
        self._rebuild()
        return db

    def _rebuild(self) -> None:
        self._ids = list(self._items)
        self._rows = {id_: row for row, id_ in enumerate(self._ids)}
        vectors = [self._items[i].vector for i in self._ids]
        self._matrix = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), self.dim)

    async def upsert(self, items: Sequence[VectorItem]) -> None:
        """Inserts or replaces ``items`` (checked first: a bad item refuses the batch)."""
        checked = check_items(items, self.dim)
        with self._lock:
            if self._db is not None:
                self._write(checked)
            grew = False
            for item in checked:
                row = self._rows.get(item.id)
                self._items[item.id] = item
                if row is None:
                    grew = True
                else:
                    self._matrix[row] = item.vector
            if grew:
                self._rebuild()

    def _write(self, items: list[VectorItem]) -> None:
        assert self._db is not None
        rows = [
            (
                i.id,
                np.asarray(i.vector, dtype=np.float32).tobytes(),
                i.text,
                json.dumps(dict(i.metadata)),
                i.acl.tenant if i.acl else "",
                json.dumps(sorted(i.acl.principals) if i.acl else []),
                i.acl.sensitivity if i.acl else 0,
            )
            for i in items
        ]
        try:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO vector_items VALUES (?, ?, ?, ?, ?, ?, ?)", rows
                )
        except sqlite3.Error as err:
            raise StorageError(f"vector store: SQLite write failed: {err}") from err

    async def delete(self, ids: Sequence[str]) -> int:
        """Removes the items with these ids; returns how many existed."""
        with self._lock:
            gone = [i for i in dict.fromkeys(ids) if i in self._items]
            if self._db is not None and gone:
                try:
                    with self._db:
                        self._db.executemany(
                            "DELETE FROM vector_items WHERE id = ?", [(i,) for i in gone]
                        )
                except sqlite3.Error as err:
                    raise StorageError(f"vector store: SQLite delete failed: {err}") from err
            for i in gone:
                del self._items[i]
            if gone:
                self._rebuild()
            return len(gone)

    def _admitted(self, filter: object, scope: AccessScope) -> list[int]:
        """Rows of the items ``scope`` may see and ``filter`` admits."""
        node = parse_filter(filter)
        rows = []
        for row, id_ in enumerate(self._ids):
            item = self._items[id_]
            if item.acl is not None and visible(item.acl, scope) and evaluate(node, item.metadata):
                rows.append(row)
        return rows

    async def query(
        self,
        vector: Sequence[float],
        k: int,
        filter: object = None,
        scope: AccessScope | None = None,
    ) -> list[Hit]:
        """The ``k`` visible items most similar to ``vector`` that ``filter`` admits, best first."""
        checked = check_query(k, scope)
        q = np.asarray(unit(vector, self.dim, "vector store query"), dtype=np.float32)
        with self._lock:
            rows = self._admitted(filter, checked)
            if not rows:
                return []
            scores = self._matrix[rows] @ q  # (M,)
            best = range(len(rows))
            if len(rows) > 4 * k:  # only the k best can be returned: partition, then sort those
                best = np.argpartition(-scores, k - 1)[:k].tolist()
            order = sorted(best, key=lambda j: (-float(scores[j]), self._ids[rows[j]]))
            hits = []
            for j in order[:k]:
                item = self._items[self._ids[rows[j]]]
                assert item.acl is not None
                hits.append(
                    Hit(item.id, float(scores[j]), item.text, dict(item.metadata), item.acl)
                )
            return hits

    async def count(self, filter: object = None, scope: AccessScope | None = None) -> int:
        """How many items visible to ``scope`` the filter admits."""
        checked = check_scope(scope)
        with self._lock:
            return len(self._admitted(filter, checked))

    async def close(self) -> None:
        """Closes the SQLite file (if any)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
