"""``SQLiteBackend``: the native storage backend of the memory store (native-only).

One SQLite file holds every namespace (tenant). Concurrency and durability choices:

- WAL journal, so readers never block the writer and a killed process leaves a consistent
  file; ``synchronous=NORMAL`` by default (survives process crashes; a power loss may drop the
  last transactions), ``durable=True`` selects ``FULL``.
- ``busy_timeout`` so writers from several processes queue instead of failing.
- One ``BEGIN IMMEDIATE`` transaction per logical write: the write lock is taken up front, so
  a read-modify-write (upsert, capacity eviction, version bump) cannot interleave with another
  process's.
- A ``schema_version`` table; a file written by a newer schema is refused, not guessed at.

The ``sqlite3`` module is blocking, so every call runs on one private worker thread (which also
owns the connection); the event loop stays free while another process holds the lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import sqlite3
import threading
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from evermind.errors import ConfigError, StorageError
from evermind.memory.backend import check_keys, check_version, select_evictions
from evermind.memory.prompt_recall import PromptMatch
from evermind.memory.records import MemoryRecord, WriteResult
from evermind.memory.sqlite_schema import MIGRATIONS, SCHEMA_VERSION

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

_COLUMNS = "key, content, tags, importance, created_at, updated_at, expires_at, archived, meta"


class _Database:
    """One SQLite connection and the one thread that uses it, shared by namespace views.

    ``reader``, a second, read-only connection of a file database, answers
    :meth:`SQLiteBackend.version` on the caller's thread: every recall asks it, and a hop
    to the worker thread and back cost ~1 ms and, on a busy machine, most of recall's p99
    (docs/vectorstore.md, "Bulk writes"). In WAL mode a read never waits for a writer; a
    busy answer (a lock held outside WAL's rules) falls back to the worker thread.
    """

    def __init__(self) -> None:
        self.conn: sqlite3.Connection | None = None
        self.reader: sqlite3.Connection | None = None
        self.reader_lock = threading.Lock()  # callers on several threads share the reader
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="evermind-sqlite"
        )

    def close_reader(self) -> None:
        with self.reader_lock:
            if self.reader is not None:
                self.reader.close()
                self.reader = None


class SQLiteBackend:
    """A ``MemoryBackend`` on one SQLite file, scoped to ``namespace``.

    Each backend opened with the constructor owns a connection and a thread (and, on a
    file, a read-only connection for :meth:`version`). A server with
    many namespaces in one file opens ONE and asks it for :meth:`view` per namespace: a
    view shares the owner's connection and thread (no file descriptor, no thread of its
    own), costs a few hundred bytes, and closing it releases nothing but itself. Closing the
    owner closes the connection for every view.

    Args:
        path: The database file (created if missing) or ``":memory:"``.
        namespace: The tenant whose records this backend sees.
        busy_timeout_s: How long a write waits for another writer's lock, in seconds.
        durable: ``synchronous=FULL`` (fsync every commit) instead of ``NORMAL``.

    Raises:
        StorageError: The file cannot be opened, is not a database, or has a newer schema.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        namespace: str = "default",
        *,
        busy_timeout_s: float = 10.0,
        durable: bool = False,
    ) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ConfigError(
                f"SQLiteBackend: namespace must be a non-empty string, got {namespace!r}"
            )
        if busy_timeout_s <= 0:
            raise ConfigError(f"SQLiteBackend: busy_timeout_s must be > 0, got {busy_timeout_s}")
        self.namespace = namespace
        self.path = str(path)
        self._busy_ms = int(busy_timeout_s * 1000)
        self._durable = durable
        self._db = _Database()
        self._owner = True
        self._closed = False
        try:
            self._db.executor.submit(self._open).result()
        except BaseException:
            self._db.executor.shutdown(wait=False)
            raise

    def view(self, namespace: str) -> SQLiteBackend:
        """A backend of ``namespace`` in the same file, on this backend's connection.

        Raises:
            ConfigError: ``namespace`` is not a non-empty string.
            StorageError: This backend is closed.
        """
        if not isinstance(namespace, str) or not namespace:
            raise ConfigError(
                f"SQLiteBackend.view: namespace must be a non-empty string, got {namespace!r}"
            )
        self._connection()  # refuses on a closed backend
        other = object.__new__(SQLiteBackend)
        other.namespace = namespace
        other.path = self.path
        other._busy_ms = self._busy_ms
        other._durable = self._durable
        other._db = self._db
        other._owner = False
        other._closed = False
        return other

    # ------------------------------------------------------------------ plumbing

    def _open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(self.path, timeout=self._busy_ms / 1000, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {'FULL' if self._durable else 'NORMAL'}")
            self._db.conn = conn
            self._migrate(conn)
            if self.path != ":memory:":  # a second connection to ":memory:" is another database
                reader = sqlite3.connect(
                    self.path, timeout=0, isolation_level=None, check_same_thread=False
                )
                reader.execute("PRAGMA query_only = 1")
                self._db.reader = reader
        except sqlite3.DatabaseError as err:
            raise StorageError(
                f"SQLite: cannot open memory database {self.path!r}: {err}; "
                "hint: check the path points to an Evermind memory file and is writable"
            ) from err

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
            current = int(row[0]) if row and row[0] is not None else 0
            if current > SCHEMA_VERSION:
                raise StorageError(
                    f"SQLite: {self.path!r} has memory schema version {current}, this Evermind "
                    f"reads up to {SCHEMA_VERSION}; hint: upgrade evermind to open it"
                )
            for version in range(current, SCHEMA_VERSION):
                for statement in MIGRATIONS[version].split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version + 1,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _connection(self) -> sqlite3.Connection:
        if self._closed or self._db.conn is None:
            raise StorageError(
                f"SQLite backend for {self.path!r} is closed; hint: open a new store"
            )
        return self._db.conn

    async def _run(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        def call() -> _T:
            return function(self._connection())

        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._db.executor, call)
        except RuntimeError as err:
            if "shutdown" in str(err):
                raise StorageError(
                    f"SQLite backend for {self.path!r} is closed; hint: open a new store"
                ) from err
            raise
        except sqlite3.Error as err:
            raise StorageError(
                f"SQLite: operation on {self.path!r} (namespace {self.namespace!r}) failed: "
                f"{err}; hint: another process may hold the write lock longer than "
                f"busy_timeout ({self._busy_ms} ms), or the file is damaged"
            ) from err

    def _transaction(self, conn: sqlite3.Connection, body: Callable[[], _T]) -> _T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = body()
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    def _bump(self, conn: sqlite3.Connection) -> int:
        row = conn.execute(
            "INSERT INTO namespaces (namespace, version) VALUES (?, 1) "
            "ON CONFLICT (namespace) DO UPDATE SET version = version + 1 RETURNING version",
            (self.namespace,),
        ).fetchone()
        return int(row[0])

    def _read_version(self, conn: sqlite3.Connection) -> int:
        row = conn.execute(
            "SELECT version FROM namespaces WHERE namespace = ?", (self.namespace,)
        ).fetchone()
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ the port

    async def apply(
        self,
        puts: Sequence[MemoryRecord],
        deletes: Sequence[str] = (),
        *,
        capacity: int | None = None,
        now: float = 0.0,
        expect_version: int | None = None,
        expect_keys: Mapping[str, float | None] | None = None,
    ) -> WriteResult:
        """Writes, deletes and evicts in one ``BEGIN IMMEDIATE`` transaction."""
        puts = list(puts)
        deletes = list(deletes)

        def work(conn: sqlite3.Connection) -> WriteResult:
            def body() -> WriteResult:
                check_version(self.namespace, expect_version, self._read_version(conn))
                if expect_keys:
                    check_keys(self.namespace, expect_keys, self._rows(conn, expect_keys), now)
                deleted = []
                for key in deletes:
                    gone = conn.execute(
                        "DELETE FROM memories WHERE namespace = ? AND key = ? RETURNING key",
                        (self.namespace, key),
                    ).fetchone()
                    if gone is not None:
                        deleted.append(key)
                stored: dict[str, MemoryRecord] = {}
                for record in puts:
                    stored[record.key] = self._upsert(conn, record)
                evicted = self._evict(conn, capacity, set(stored), now)
                for key in evicted:
                    stored.pop(key, None)
                return WriteResult(
                    self._bump(conn), tuple(stored.values()), tuple(deleted), tuple(evicted)
                )

            return self._transaction(conn, body)

        return await self._run(work)

    def _rows(self, conn: sqlite3.Connection, keys: Iterable[str]) -> dict[str, MemoryRecord]:
        """The records stored under ``keys`` (inside the caller's transaction)."""
        found = {}
        for key in keys:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM memories WHERE namespace = ? AND key = ?",
                (self.namespace, key),
            ).fetchone()
            if row is not None:
                found[key] = _from_row(row)
        return found

    def _upsert(self, conn: sqlite3.Connection, record: MemoryRecord) -> MemoryRecord:
        row = conn.execute(
            f"INSERT INTO memories (namespace, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (namespace, key) DO UPDATE SET content = excluded.content, "
            "tags = excluded.tags, importance = excluded.importance, "
            "updated_at = excluded.updated_at, expires_at = excluded.expires_at, "
            "archived = excluded.archived, meta = excluded.meta RETURNING created_at",
            (self.namespace, *_to_row(record)),
        ).fetchone()
        created = float(row[0])
        if created == record.created_at:
            return record
        return MemoryRecord(
            key=record.key,
            content=record.content,
            tags=record.tags,
            importance=record.importance,
            created_at=created,
            updated_at=record.updated_at,
            expires_at=record.expires_at,
            archived=record.archived,
            meta=record.meta,
        )

    def _evict(
        self, conn: sqlite3.Connection, capacity: int | None, protected: set[str], now: float
    ) -> list[str]:
        if capacity is None:
            return []
        (count,) = conn.execute(
            "SELECT COUNT(*) FROM memories WHERE namespace = ?", (self.namespace,)
        ).fetchone()
        if count <= capacity:
            return []
        # The eviction order needs every record's (expiry, importance, age); loading the
        # lightweight columns and sorting in Python keeps one definition (backend.eviction_key).
        rows = conn.execute(
            "SELECT key, importance, updated_at, expires_at FROM memories WHERE namespace = ?",
            (self.namespace,),
        ).fetchall()
        light = [
            MemoryRecord(key=k, content="", importance=i, updated_at=u, expires_at=e)
            for k, i, u, e in rows
        ]
        evicted = select_evictions(light, capacity, protected, now)
        conn.executemany(
            "DELETE FROM memories WHERE namespace = ? AND key = ?",
            [(self.namespace, key) for key in evicted],
        )
        return evicted

    async def get(self, key: str) -> MemoryRecord | None:
        """Returns the record under ``key`` or None."""

        def work(conn: sqlite3.Connection) -> MemoryRecord | None:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM memories WHERE namespace = ? AND key = ?",
                (self.namespace, key),
            ).fetchone()
            return None if row is None else _from_row(row)

        return await self._run(work)

    async def load_all(self) -> tuple[int, list[MemoryRecord]]:
        """Returns the version and every record, read inside one transaction."""

        def work(conn: sqlite3.Connection) -> tuple[int, list[MemoryRecord]]:
            conn.execute("BEGIN")
            try:
                version = self._read_version(conn)
                rows = conn.execute(
                    f"SELECT {_COLUMNS} FROM memories WHERE namespace = ?", (self.namespace,)
                ).fetchall()
            finally:
                conn.execute("COMMIT")
            return version, [_from_row(row) for row in rows]

        return await self._run(work)

    async def prompt_matches(self, query: str, pool: int, now: float) -> list[PromptMatch] | None:
        """The hooks' prompt recall from the FTS5 side index beside the file
        (:class:`~evermind.memory.hook_index.HookIndex`); None for an in-memory database."""
        if self.path == ":memory:":
            return None
        from evermind.memory.hook_index import HookIndex

        def work(conn: sqlite3.Connection) -> list[PromptMatch]:
            with HookIndex(Path(self.path), self.namespace, clock=lambda: now) as index:
                return index.matches(query, pool)

        return await self._run(work)

    async def version(self) -> int:
        """Returns the namespace's version counter (read on the caller's thread when the
        file allows, see ``_Database``)."""
        if not self._closed:
            with self._db.reader_lock:
                if self._db.reader is not None:
                    try:
                        return self._read_version(self._db.reader)
                    except sqlite3.OperationalError:
                        pass  # busy: the worker thread reads it, waiting as a write would
        return await self._run(self._read_version)

    async def delete_expired(self, now: float) -> WriteResult:
        """Deletes every record with ``expires_at <= now`` in one transaction."""

        def work(conn: sqlite3.Connection) -> WriteResult:
            def body() -> WriteResult:
                rows = conn.execute(
                    "DELETE FROM memories WHERE namespace = ? AND expires_at IS NOT NULL "
                    "AND expires_at <= ? RETURNING key",
                    (self.namespace, now),
                ).fetchall()
                gone = tuple(sorted(str(row[0]) for row in rows))
                version = self._bump(conn) if gone else self._read_version(conn)
                return WriteResult(version, evicted=gone)

            return self._transaction(conn, body)

        return await self._run(work)

    async def get_vectors(
        self, fingerprint: str, hashes: Sequence[str]
    ) -> dict[str, Sequence[float]]:
        """Returns cached float32 vectors for ``hashes`` under ``fingerprint``."""
        wanted = list(dict.fromkeys(hashes))

        def work(conn: sqlite3.Connection) -> dict[str, Sequence[float]]:
            found: dict[str, Sequence[float]] = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(
                    f"SELECT content_hash, vector FROM vectors WHERE fingerprint = ? "
                    f"AND content_hash IN ({marks})",
                    (fingerprint, *chunk),
                ).fetchall()
                for digest, blob in rows:
                    vector = array("f")
                    vector.frombytes(blob)
                    found[digest] = vector
            return found

        return await self._run(work)

    async def put_vectors(self, fingerprint: str, vectors: Mapping[str, Sequence[float]]) -> None:
        """Caches vectors as little-endian-native float32 blobs."""
        rows = [
            (fingerprint, digest, len(vector), array("f", vector).tobytes())
            for digest, vector in vectors.items()
        ]

        def work(conn: sqlite3.Connection) -> None:
            def body() -> None:
                conn.executemany(
                    "INSERT OR REPLACE INTO vectors (fingerprint, content_hash, dim, vector) "
                    "VALUES (?, ?, ?, ?)",
                    rows,
                )

            self._transaction(conn, body)

        if rows:
            await self._run(work)

    async def prune_vectors(self) -> int:
        """Deletes cached vectors whose content no memory (in any namespace) holds any more.

        Returns:
            How many vectors were deleted.
        """
        from evermind.memory.records import content_hash

        def work(conn: sqlite3.Connection) -> int:
            def body() -> int:
                contents = conn.execute("SELECT content FROM memories")
                live = {content_hash(str(content)) for (content,) in contents}
                stale = [
                    (fp, digest)
                    for fp, digest in conn.execute("SELECT fingerprint, content_hash FROM vectors")
                    if digest not in live
                ]
                conn.executemany(
                    "DELETE FROM vectors WHERE fingerprint = ? AND content_hash = ?", stale
                )
                return len(stale)

            return self._transaction(conn, body)

        return await self._run(work)

    async def integrity_check(self) -> str:
        """Runs ``PRAGMA integrity_check`` and returns its answer (``"ok"`` when healthy)."""

        def work(conn: sqlite3.Connection) -> str:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
            return "; ".join(str(row[0]) for row in rows)

        return await self._run(work)

    async def close(self) -> None:
        """Closes the connection and stops the worker thread (a view: only itself). Safe to
        call twice."""
        if self._closed:
            return
        if not self._owner:
            self._closed = True
            return
        if self._db.conn is None:
            self._closed = True
            return

        def work(conn: sqlite3.Connection) -> None:
            conn.close()

        await self._run(work)
        self._db.close_reader()
        self._db.conn = None
        self._closed = True
        self._db.executor.shutdown(wait=True)

    def close_sync(self) -> None:
        """Closes the backend without an event loop (for scripts and finalisers)."""
        if self._closed:
            return
        self._closed = True
        if not self._owner or self._db.conn is None:
            return
        conn = self._db.conn
        self._db.executor.submit(conn.close).result()
        self._db.close_reader()
        self._db.conn = None
        self._db.executor.shutdown(wait=True)


def _to_row(record: MemoryRecord) -> tuple[Any, ...]:
    return (
        record.key,
        record.content,
        json.dumps(list(record.tags)),
        record.importance,
        record.created_at,
        record.updated_at,
        record.expires_at,
        int(record.archived),
        json.dumps(dict(record.meta), sort_keys=True),
    )


def _from_row(row: Sequence[Any]) -> MemoryRecord:
    key, content, tags, importance, created, updated, expires, archived, meta = row
    try:
        tag_list = json.loads(tags)
        meta_dict = json.loads(meta)
    except json.JSONDecodeError as err:
        raise StorageError(
            f"SQLite: memory {key!r} holds malformed JSON in tags/meta ({err.msg}); "
            "hint: the row was written by something other than Evermind"
        ) from err
    return MemoryRecord(
        key=str(key),
        content=str(content),
        tags=tuple(tag_list),
        importance=float(importance),
        created_at=float(created),
        updated_at=float(updated),
        expires_at=None if expires is None else float(expires),
        archived=bool(archived),
        meta=meta_dict,
    )
