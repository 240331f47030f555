"""The Postgres checkpointer: a graph's supersteps in a shared database (psycopg).

Native-only (psycopg). The same two tables and guarantees as
:class:`~evermind.agent.graph.checkpoint.SQLiteCheckpointer`: one transaction per
checkpoint, ``UNIQUE (thread_id, parent_id)`` so two processes cannot both extend a thread
(the loser gets :class:`~evermind.errors.Conflict`), pending writes upserted.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from evermind.agent.graph.checkpoint import (
    COLUMNS,
    Checkpoint,
    PendingWrite,
    SqlReads,
    checkpoint_row,
    dumps,
    moved_on,
)
from evermind.errors import StoreUnavailable

_SCHEMA = """
CREATE TABLE IF NOT EXISTS graph_checkpoints (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    parent_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    state_json TEXT NOT NULL,
    next_json TEXT NOT NULL,
    waiting_json TEXT NOT NULL,
    metadata_json TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    UNIQUE (thread_id, checkpoint_id),
    UNIQUE (thread_id, parent_id)
);
CREATE TABLE IF NOT EXISTS graph_writes (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    node TEXT NOT NULL,
    kind TEXT NOT NULL,
    idx INTEGER NOT NULL,
    value_json TEXT NOT NULL,
    UNIQUE (thread_id, checkpoint_id, node, kind, idx)
);
"""


class PostgresCheckpointer(SqlReads):
    """Checkpoints in Postgres.

    Args:
        url: A ``postgresql://`` connection URL.

    Raises:
        StoreUnavailable: The server cannot be reached.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.Lock()
        try:
            self._conn = psycopg.connect(url, autocommit=True)
            with self._conn.transaction():
                # Two processes creating the tables at once would race on the catalog.
                self._conn.execute("SELECT pg_advisory_xact_lock(hashtext('evermind_graph'))")
                self._conn.execute(_SCHEMA)
        except psycopg.Error as err:
            raise StoreUnavailable(f"cannot open the checkpoint store: {_short(err)}") from err

    placeholder = "%s"

    def _select(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._run(sql, args)

    def _run(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                cursor = self._conn.execute(sql, args)
                return cursor.fetchall() if cursor.description else []
            except psycopg.Error as err:
                raise StoreUnavailable(f"checkpoint store: {_short(err)}") from err

    def put(self, checkpoint: Checkpoint) -> None:
        with self._lock:
            try:
                with self._conn.transaction():
                    # Serialises writers of this thread: the latest is read, then extended.
                    self._conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtext(%s))", (checkpoint.thread_id,)
                    )
                    row = self._conn.execute(
                        "SELECT checkpoint_id FROM graph_checkpoints WHERE thread_id = %s "
                        "ORDER BY seq DESC LIMIT 1",
                        (checkpoint.thread_id,),
                    ).fetchone()
                    if (row[0] if row else "") != checkpoint.parent_id:
                        raise moved_on(checkpoint)
                    self._conn.execute(
                        f"INSERT INTO graph_checkpoints ({COLUMNS}) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        checkpoint_row(checkpoint),
                    )
            except psycopg.errors.UniqueViolation as err:
                raise moved_on(checkpoint) from err
            except psycopg.Error as err:
                raise StoreUnavailable(f"checkpoint store: {_short(err)}") from err

    def put_write(self, write: PendingWrite) -> None:
        self._run(
            "INSERT INTO graph_writes (thread_id, checkpoint_id, node, kind, idx, value_json) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (thread_id, checkpoint_id, node, kind, "
            "idx) DO UPDATE SET value_json = EXCLUDED.value_json",
            (write.thread_id, write.checkpoint_id, write.node, write.kind, write.index,
             dumps(write.value)),
        )  # fmt: skip

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _short(err: BaseException) -> str:
    return " ".join(str(err).split())[:300] or type(err).__name__
