"""The embedded engine: an exact numpy scan over the items in memory, optionally kept in SQLite.

``memory://`` keeps the items in this process only; ``sqlite:///path`` writes every change
through to one SQLite file (WAL) and loads it on open, so a restarted process finds its items.
Only the opening store's memory is scanned: two processes on one file do not see each other's
later writes (that is what the Postgres engine is for).

A query masks the items the scope may see (each distinct ACL is judged once, then one
vectorised mask over the rows) and the filter admits (the reference
:func:`~evermind.vectorstore.filters.evaluate`, only when there is a filter, so nothing is
ever residual), then scores the survivors with one float32 matrix-vector product and takes
the top ``k`` (ties by id): :func:`evermind.search.rows.cosine_scores` and
:func:`evermind.search.rows.top_rows`, the scan every numpy engine runs. Exact, so it is
also the oracle the other engines' recall is measured against. New items are appended to a
matrix that grows by doubling and a delete moves the last row into the hole, so loading in
batches stays linear; a batch is written to SQLite in one transaction (all of it or none).

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
from evermind.search.rows import cosine_scores, top_rows
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
        self._ids: list[str] = []  # row -> id; rows [0, len) of the arrays below are live
        self._matrix = np.zeros((0, dim), dtype=np.float32)  # (capacity, D), unit rows
        self._acl_of_row = np.zeros(0, dtype=np.int32)  # (capacity,): index into _acls
        self._acls: list[Acl] = []  # every distinct ACL seen (judged once per query)
        self._acl_index: dict[Acl, int] = {}
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
            self._place(VectorItem(id_, vector, text, json.loads(meta), acl))
        return db

    def _acl_id(self, acl: Acl) -> int:
        index = self._acl_index.get(acl)
        if index is None:
            index = self._acl_index[acl] = len(self._acls)
            self._acls.append(acl)
        return index

    def _place(self, item: VectorItem) -> None:
        """Under the lock: ``item`` into its row (a new one appended; the arrays double)."""
        assert item.acl is not None  # check_items refuses items without one
        row = self._rows.get(item.id)
        if row is None:
            row = len(self._ids)
            if row == len(self._matrix):
                capacity = max(16, 2 * row)
                grown = np.zeros((capacity, self.dim), dtype=np.float32)
                grown[:row] = self._matrix[:row]
                acls = np.zeros(capacity, dtype=np.int32)
                acls[:row] = self._acl_of_row[:row]
                self._matrix, self._acl_of_row = grown, acls
            self._ids.append(item.id)
            self._rows[item.id] = row
        self._items[item.id] = item
        self._matrix[row] = item.vector
        self._acl_of_row[row] = self._acl_id(item.acl)

    def _remove(self, id_: str) -> None:
        """Under the lock: drops ``id_``; the last row moves into its place."""
        del self._items[id_]
        row = self._rows.pop(id_)
        last = len(self._ids) - 1
        if row != last:
            moved = self._ids[last]
            self._ids[row] = moved
            self._rows[moved] = row
            self._matrix[row] = self._matrix[last]
            self._acl_of_row[row] = self._acl_of_row[last]
        self._ids.pop()

    async def upsert(self, items: Sequence[VectorItem]) -> None:
        """Inserts or replaces ``items`` (checked first: a bad item refuses the batch)."""
        checked = check_items(items, self.dim)
        with self._lock:
            if self._db is not None:
                self._write(checked)
            for item in checked:
                self._place(item)

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
        self._transaction(
            "write", "INSERT OR REPLACE INTO vector_items VALUES (?, ?, ?, ?, ?, ?, ?)", rows
        )

    def _transaction(self, what: str, statement: str, rows: Sequence[tuple[object, ...]]) -> None:
        """``statement`` for every row in ONE transaction: all of the batch or none of it.

        The connection is in autocommit mode (``isolation_level=None``), where ``with db:``
        begins nothing and each row would be its own commit; hence the explicit BEGIN.
        """
        assert self._db is not None
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(statement, rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as err:
            raise StorageError(f"vector store: SQLite {what} failed: {err}") from err

    async def delete(self, ids: Sequence[str]) -> int:
        """Removes the items with these ids; returns how many existed."""
        with self._lock:
            gone = [i for i in dict.fromkeys(ids) if i in self._items]
            if self._db is not None and gone:
                self._transaction(
                    "delete", "DELETE FROM vector_items WHERE id = ?", [(i,) for i in gone]
                )
            for i in gone:
                self._remove(i)
            return len(gone)

    def __len__(self) -> int:
        """How many items the store holds (every tenant's)."""
        return len(self._ids)

    async def fetch(self, ids: Sequence[str]) -> dict[str, VectorItem]:
        """The stored items with these ids (missing ones left out); the caller scopes them."""
        with self._lock:
            return {i: self._items[i] for i in dict.fromkeys(ids) if i in self._items}

    def _admitted(self, filter: object, scope: AccessScope) -> list[int]:
        """Rows of the items ``scope`` may see and ``filter`` admits, ascending."""
        node = parse_filter(filter)
        seen = [i for i, acl in enumerate(self._acls) if visible(acl, scope)]
        if not seen:
            return []
        live = self._acl_of_row[: len(self._ids)]
        rows: list[int] = np.flatnonzero(np.isin(live, seen)).tolist()
        if node is None:
            return rows
        return [r for r in rows if evaluate(node, self._items[self._ids[r]].metadata)]

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
            scores = cosine_scores(self._matrix[rows], q)  # (M,)
            hits = []
            for j in top_rows(scores, k, tie=lambda j: self._ids[rows[j]]):
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
