"""``SQLiteBackend.version`` on a file reads through a second, read-only connection on the
caller's thread (recall asks it every call; the hop to the worker thread and back was ~1 ms
and most of recall's p99 on a busy machine), sees every other writer's commit, falls back to
the worker thread when that connection is busy, and is closed with the backend.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from evermind.errors import StorageError
from evermind.memory import MemoryRecord
from evermind.memory.sqlite_backend import SQLiteBackend
from tests.unit.test_memory_helpers import run


def test_the_version_is_read_without_the_worker_thread_and_sees_other_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v.db"

    async def body() -> None:
        mine, other = SQLiteBackend(path, "ns"), SQLiteBackend(path, "ns")
        view = mine.view("elsewhere")
        try:
            await mine.apply([MemoryRecord("a", "one")])
            with monkeypatch.context() as patched:

                async def no_worker(function: Any) -> Any:
                    raise AssertionError("version() went to the worker thread")

                patched.setattr(mine, "_run", no_worker)
                patched.setattr(view, "_run", no_worker)
                assert await mine.version() == 1
                await other.apply([MemoryRecord("b", "two")])  # another connection commits
                assert await mine.version() == 2
                assert await view.version() == 0  # a view reads its own namespace
            assert await other.version() == 2
        finally:
            await view.close()
            await mine.close()
            await other.close()
        with pytest.raises(StorageError, match="closed"):
            await mine.version()

    run(body())


def test_a_busy_reader_falls_back_to_the_worker_thread(tmp_path: Path) -> None:
    class Busy:
        def execute(self, *args: object) -> None:
            raise sqlite3.OperationalError("database is locked")

        def close(self) -> None:
            pass

    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "busy.db", "ns")
        try:
            await backend.apply([MemoryRecord("a", "one")])
            backend._db.reader = Busy()  # type: ignore[assignment]
            assert await backend.version() == 1
        finally:
            await backend.close()
        assert backend._db.reader is None

    run(body())


def test_an_in_memory_database_reads_its_version_on_the_worker() -> None:
    async def body() -> None:
        backend = SQLiteBackend(":memory:", "ns")  # a second connection would be another db
        try:
            assert backend._db.reader is None
            await backend.apply([MemoryRecord("a", "one")])
            assert await backend.version() == 1
        finally:
            await backend.close()

    run(body())
