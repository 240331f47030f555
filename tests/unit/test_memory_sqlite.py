"""SQLite backend: pragmas, schema versioning, namespaces, several processes, crash safety."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evermind.errors import StorageError
from evermind.memory import MemoryRecord, MemoryStore
from evermind.memory.sqlite_backend import SCHEMA_VERSION, SQLiteBackend
from tests import procs
from tests.unit.test_memory_helpers import SRC, run

WRITER = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from evermind.memory import MemoryStore

    async def main(path, prefix, count):
        store = MemoryStore(path)
        open(f"{path}.ready-{prefix}", "w").close()  # imported and opened: ready to write
        while not os.path.exists(path + ".go"):  # start barrier: all writers at once
            time.sleep(0.001)
        for i in range(count):
            await store.remember(f"{prefix}-{i}", f"memory {i} written by {prefix}")
            print(f"{prefix}-{i}", flush=True)  # acknowledged: remember() returned
        await store.close()

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    return env


def test_pragmas_and_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    backend = SQLiteBackend(path)
    run(backend.close())
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StorageError, match="schema version"):
        SQLiteBackend(path)


def test_not_a_database_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageError, match="cannot open"):
        SQLiteBackend(path)


def test_namespaces_are_isolated_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "ns.db"

    async def body() -> None:
        a, b = SQLiteBackend(path, "tenant-a"), SQLiteBackend(path, "tenant-b")
        await a.apply([MemoryRecord("k", "for a")])
        await a.apply([MemoryRecord("k2", "for a too")])
        await b.apply([MemoryRecord("k", "for b")])
        assert (await a.get("k")) == MemoryRecord("k", "for a")
        assert (await b.get("k")) == MemoryRecord("k", "for b")
        assert await a.version() == 2 and await b.version() == 1
        version, records = await b.load_all()
        assert version == 1 and [r.key for r in records] == ["k"]
        await a.close()
        await b.close()

    run(body())


def test_apply_is_atomic_on_failure(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "atomic.db")
        await backend.apply([MemoryRecord("keep", "v")])
        bad = MemoryRecord("x", "y", meta={"unserialisable": object()})
        with pytest.raises(TypeError):
            await backend.apply([MemoryRecord("first", "ok"), bad], ["keep"])
        _, records = await backend.load_all()
        assert [r.key for r in records] == ["keep"]
        assert await backend.version() == 1
        await backend.close()

    run(body())


def test_vectors_round_trip_as_float32(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "v.db")
        await backend.put_vectors("fp", {"h1": [0.5, -0.25, 1.0], "h2": [1.0, 0.0, 0.0]})
        got = await backend.get_vectors("fp", ["h1", "missing", "h2"])
        assert list(got["h1"]) == [0.5, -0.25, 1.0] and set(got) == {"h1", "h2"}
        assert await backend.get_vectors("other-fp", ["h1"]) == {}
        await backend.apply([MemoryRecord("k", "text")])
        assert await backend.prune_vectors() == 2  # neither hash belongs to a memory
        await backend.close()

    run(body())


def test_three_processes_write_300_each(tmp_path: Path) -> None:
    path = tmp_path / "multi.db"
    SQLiteBackend(path).close_sync()  # create the schema once, like a deployment would
    writers = [
        procs.popen(
            [sys.executable, "-c", WRITER, str(path), f"p{n}", "300"],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for n in range(3)
    ]
    # Release the writers only once all three have started (imports take longer than 300
    # writes, so touching ".go" at once let the first writer finish before the last began).
    try:
        deadline = time.monotonic() + 120
        while not all(Path(f"{path}.ready-p{n}").exists() for n in range(3)):
            assert time.monotonic() < deadline, "writers did not start"
            assert all(proc.poll() is None for proc in writers), "a writer exited early"
            time.sleep(0.01)
        Path(f"{path}.go").touch()
        for proc in writers:
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err.decode()
    finally:
        for proc in writers:
            procs.kill_group(proc)

    async def check() -> None:
        store = MemoryStore(path)
        keys = {e["key"] for e in await store.export()}
        assert keys == {f"p{n}-{i}" for n in range(3) for i in range(300)}
        assert await store.version() == 900  # one version bump per logical write
        spans = []
        for n in range(3):
            times = [e["updated_at"] for e in await store.export() if e["key"].startswith(f"p{n}-")]
            spans.append((min(times), max(times)))
        # The writers really ran at the same time: their write windows overlap.
        assert max(start for start, _ in spans) < min(end for _, end in spans)
        await store.close()

    run(check())


def test_sigkill_mid_write_loses_no_acknowledged_write(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    Path(f"{path}.go").touch()
    proc = procs.popen(
        [sys.executable, "-c", WRITER, str(path), "c", "1000000"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acknowledged = []
    for line in proc.stdout:
        acknowledged.append(line.strip())
        if len(acknowledged) >= 150:
            break
    procs.kill_group(proc)  # SIGKILL mid-loop: a write is likely in flight
    assert proc.returncode == -signal.SIGKILL

    async def check() -> None:
        backend = SQLiteBackend(path)
        assert await backend.integrity_check() == "ok"
        _, records = await backend.load_all()
        keys = {r.key for r in records}
        assert set(acknowledged) <= keys
        await backend.close()

    run(check())
