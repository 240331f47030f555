"""Checkpointers: where a graph's supersteps are written, in memory or in SQLite.

Browser-safe (standard library only; Postgres is :mod:`evermind.agent.graph.postgres`).

A *thread* is one durable run history. Each superstep ends with one :class:`Checkpoint`: the
state after the step, the nodes the next step runs, the join barriers still waiting, the step
number, its parent checkpoint and metadata (what each node wrote, what it cost). A checkpoint
is written in one transaction, so a process killed mid-step leaves the previous one whole.
Within a step, each node that finishes writes a :class:`PendingWrite` (its update) at once,
so a step cut short re-runs only the nodes that had not finished; the same table keeps the
interrupts a node raised, the human's answers, and the pauses before ``interrupt_before``
nodes.

Within a thread the checkpoints form a chain: a checkpoint's parent is the thread's latest
when it is written, and a second child of one parent is refused (:class:`Conflict`), so two
processes resuming one thread cannot both go on. A fork starts a new thread.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from evermind.errors import Conflict, StorageError

if TYPE_CHECKING:
    import sqlite3

#: Kinds of pending write.
UPDATE, INTERRUPT, RESUME, PAUSE = "update", "interrupt", "resume", "pause"
#: The index of a pause write: before the node, or after it.
BEFORE, AFTER = 0, 1


@dataclass(frozen=True)
class Checkpoint:
    """The state of a thread after one superstep.

    Attributes:
        thread_id: The thread.
        checkpoint_id: This checkpoint's id (unique in the thread).
        parent_id: The checkpoint it follows ("" for a thread's first).
        step: The superstep that made it (-1: the input; a fork keeps its source's step).
        values: The state (JSON).
        next: The nodes the next superstep runs, in order (empty: the run is done).
        waiting: Join barriers: a target of ``add_edge([a, b], c)`` to the sources seen.
        metadata: ``source`` (input, loop, fork, update), ``run_id``, ``writes`` (node to
            update), ``cost_usd`` (node to dollars), ``forked_from`` on a fork, and any
            more the caller set.
        created_at: Unix time it was written.
    """

    thread_id: str
    checkpoint_id: str
    parent_id: str
    step: int
    values: dict[str, Any]
    next: list[str]
    waiting: dict[str, list[str]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0


@dataclass(frozen=True)
class PendingWrite:
    """Something a node left against a checkpoint before the next one was written.

    Attributes:
        thread_id: The thread.
        checkpoint_id: The checkpoint whose next step it belongs to.
        node: The node.
        kind: ``update`` (the node finished: ``value`` is ``{"update": ..., "cost_usd": ...}``),
            ``interrupt`` (it asked: ``value`` is the payload), ``resume`` (the human's
            answer to interrupt ``index``), ``pause`` (the run stopped before the node, index
            ``BEFORE``, or after it, ``AFTER``; ``value`` says whether it was approved).
        index: Which interrupt of the node; BEFORE or AFTER for a pause; 0 for an update.
        value: JSON.
    """

    thread_id: str
    checkpoint_id: str
    node: str
    kind: str
    index: int
    value: Any


class Checkpointer(Protocol):
    """Where checkpoints and pending writes are kept (methods may block: the runner calls
    them in a worker thread)."""

    def put(self, checkpoint: Checkpoint) -> None:
        """Writes one checkpoint atomically; Conflict if its parent is not the latest."""

    def latest(self, thread_id: str) -> Checkpoint | None:
        """The thread's newest checkpoint (None: no such thread)."""

    def get(self, thread_id: str, checkpoint_id: str) -> Checkpoint | None:
        """One checkpoint of the thread (None: not there)."""

    def history(self, thread_id: str) -> list[Checkpoint]:
        """Every checkpoint of the thread, newest first."""

    def put_write(self, write: PendingWrite) -> None:
        """Keeps one pending write (replacing one of the same node, kind and index)."""

    def writes(self, thread_id: str, checkpoint_id: str) -> list[PendingWrite]:
        """The pending writes against a checkpoint, in the order they were kept."""

    def threads(self) -> list[str]:
        """Every thread id, most recently written first."""

    def close(self) -> None:
        """Releases the connection."""


def dumps(value: Any) -> str:
    """Compact JSON, NaN refused (what both stores keep)."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


class MemoryCheckpointer:
    """Checkpoints in this process only (the default: interrupts work, crashes lose all)."""

    def __init__(self) -> None:
        self._checkpoints: dict[str, list[Checkpoint]] = {}
        self._writes: dict[tuple[str, str], dict[tuple[str, str, int], PendingWrite]] = {}
        self._lock = threading.Lock()

    def put(self, checkpoint: Checkpoint) -> None:
        with self._lock:
            chain = self._checkpoints.setdefault(checkpoint.thread_id, [])
            latest = chain[-1].checkpoint_id if chain else ""
            if checkpoint.parent_id != latest:
                raise moved_on(checkpoint)
            # A JSON round trip: what is kept is what SQLite would give back.
            chain.append(_copy(checkpoint))

    def latest(self, thread_id: str) -> Checkpoint | None:
        chain = self._checkpoints.get(thread_id)
        return _copy(chain[-1]) if chain else None

    def get(self, thread_id: str, checkpoint_id: str) -> Checkpoint | None:
        for c in self._checkpoints.get(thread_id, []):
            if c.checkpoint_id == checkpoint_id:
                return _copy(c)
        return None

    def history(self, thread_id: str) -> list[Checkpoint]:
        return [_copy(c) for c in reversed(self._checkpoints.get(thread_id, []))]

    def put_write(self, write: PendingWrite) -> None:
        kept = PendingWrite(
            write.thread_id, write.checkpoint_id, write.node, write.kind, write.index,
            json.loads(dumps(write.value)),
        )  # fmt: skip
        with self._lock:
            slot = self._writes.setdefault((write.thread_id, write.checkpoint_id), {})
            slot.pop((write.node, write.kind, write.index), None)
            slot[(write.node, write.kind, write.index)] = kept

    def writes(self, thread_id: str, checkpoint_id: str) -> list[PendingWrite]:
        return list(self._writes.get((thread_id, checkpoint_id), {}).values())

    def threads(self) -> list[str]:
        chains = sorted(self._checkpoints.items(), key=lambda kv: -kv[1][-1].created_at)
        return [thread for thread, _ in chains]

    def close(self) -> None:
        pass


def _copy(c: Checkpoint) -> Checkpoint:
    return Checkpoint(
        c.thread_id, c.checkpoint_id, c.parent_id, c.step,
        json.loads(dumps(c.values)), list(c.next), json.loads(dumps(c.waiting)),
        json.loads(dumps(c.metadata)), c.created_at,
    )  # fmt: skip


def moved_on(checkpoint: Checkpoint) -> Conflict:
    """The error of a write whose parent is not the thread's latest checkpoint."""
    return Conflict(
        f"thread {checkpoint.thread_id!r} moved on past checkpoint {checkpoint.parent_id!r} "
        "(another process is running it?); read its state again and resume from the latest",
        code="thread_moved_on",
    )


_SCHEMA = """
CREATE TABLE IF NOT EXISTS graph_checkpoints (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    parent_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    state_json TEXT NOT NULL,
    next_json TEXT NOT NULL,
    waiting_json TEXT NOT NULL,
    metadata_json TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (thread_id, checkpoint_id),
    UNIQUE (thread_id, parent_id)
);
CREATE TABLE IF NOT EXISTS graph_writes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    node TEXT NOT NULL,
    kind TEXT NOT NULL,
    idx INTEGER NOT NULL,
    value_json TEXT NOT NULL,
    UNIQUE (thread_id, checkpoint_id, node, kind, idx)
);
"""
COLUMNS = (
    "thread_id, checkpoint_id, parent_id, step, state_json, next_json, waiting_json, "
    "metadata_json, created_at"
)


def row_checkpoint(row: tuple[Any, ...]) -> Checkpoint:
    """A :class:`Checkpoint` from a row of ``COLUMNS`` (SQLite and Postgres alike)."""
    thread, cid, parent, step, state, nxt, waiting, meta, created = row
    return Checkpoint(
        thread, cid, parent, int(step), json.loads(state), json.loads(nxt),
        json.loads(waiting), json.loads(meta), float(created),
    )  # fmt: skip


def checkpoint_row(c: Checkpoint) -> tuple[Any, ...]:
    """The row of ``COLUMNS`` a checkpoint is stored as."""
    return (
        c.thread_id, c.checkpoint_id, c.parent_id, c.step, dumps(c.values), dumps(c.next),
        dumps(c.waiting), dumps(c.metadata), c.created_at or time.time(),
    )  # fmt: skip


class SqlReads:
    """The reads every SQL checkpointer runs alike: the same queries, in its driver's
    placeholder style (:attr:`placeholder`), through its own :meth:`_select`."""

    #: The driver's parameter placeholder (``?`` for sqlite3, ``%s`` for psycopg).
    placeholder = "?"

    def _select(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _rows(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._select(sql.replace("{p}", self.placeholder), args)

    def latest(self, thread_id: str) -> Checkpoint | None:
        rows = self._rows(
            f"SELECT {COLUMNS} FROM graph_checkpoints WHERE thread_id = {{p}} "
            "ORDER BY seq DESC LIMIT 1",
            (thread_id,),
        )
        return row_checkpoint(rows[0]) if rows else None

    def get(self, thread_id: str, checkpoint_id: str) -> Checkpoint | None:
        rows = self._rows(
            f"SELECT {COLUMNS} FROM graph_checkpoints WHERE thread_id = {{p}} "
            "AND checkpoint_id = {p}",
            (thread_id, checkpoint_id),
        )
        return row_checkpoint(rows[0]) if rows else None

    def history(self, thread_id: str) -> list[Checkpoint]:
        rows = self._rows(
            f"SELECT {COLUMNS} FROM graph_checkpoints WHERE thread_id = {{p}} ORDER BY seq DESC",
            (thread_id,),
        )
        return [row_checkpoint(r) for r in rows]

    def writes(self, thread_id: str, checkpoint_id: str) -> list[PendingWrite]:
        rows = self._rows(
            "SELECT node, kind, idx, value_json FROM graph_writes WHERE thread_id = {p} AND "
            "checkpoint_id = {p} ORDER BY seq",
            (thread_id, checkpoint_id),
        )
        return [
            PendingWrite(thread_id, checkpoint_id, n, k, int(i), json.loads(v))
            for n, k, i, v in rows
        ]

    def threads(self) -> list[str]:
        rows = self._rows(
            "SELECT thread_id FROM graph_checkpoints GROUP BY thread_id ORDER BY MAX(seq) DESC", ()
        )
        return [r[0] for r in rows]


class SQLiteCheckpointer(SqlReads):
    """Checkpoints in one SQLite file (WAL; ``synchronous=FULL``: a written step survives a
    crash of the process and of the machine).

    Args:
        path: The database file (made, with its folder, if missing).

    Raises:
        StorageError: The file cannot be opened as a database.
    """

    def __init__(self, path: str | Path) -> None:
        import sqlite3  # here: the rest of the package runs where sqlite3 is not loaded

        self._error = sqlite3.Error
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=30
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as err:
            raise StorageError(f"cannot open the checkpoint database {str(path)!r}: {err}") from err
        self._lock = threading.Lock()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
            except self._error as err:
                raise StorageError(f"checkpoint database {str(self.path)!r}: {err}") from err

    def _select(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._conn.execute(sql, args).fetchall()
            except self._error as err:
                raise StorageError(f"checkpoint database {str(self.path)!r}: {err}") from err

    def put(self, checkpoint: Checkpoint) -> None:
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT checkpoint_id FROM graph_checkpoints WHERE thread_id = ? "
                "ORDER BY seq DESC LIMIT 1",
                (checkpoint.thread_id,),
            ).fetchone()
            if (row[0] if row else "") != checkpoint.parent_id:
                raise moved_on(checkpoint)
            conn.execute(
                f"INSERT INTO graph_checkpoints ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                checkpoint_row(checkpoint),
            )

    def put_write(self, write: PendingWrite) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO graph_writes "
                "(thread_id, checkpoint_id, node, kind, idx, value_json) VALUES (?, ?, ?, ?, ?, ?)",
                (write.thread_id, write.checkpoint_id, write.node, write.kind, write.index,
                 dumps(write.value)),
            )  # fmt: skip

    def close(self) -> None:
        with self._lock:
            self._conn.close()
