"""Namespace views of one SQLite backend: one connection and thread, isolated namespaces."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from evermind.errors import ConfigError, StorageError
from evermind.memory import MemoryStore
from evermind.memory.sqlite_backend import SQLiteBackend
from evermind.runtime.memory_service import LANES, MAX_STORES_PER_TENANT, MemoryService


def test_views_share_one_connection_and_keep_namespaces_apart(tmp_path: Path) -> None:
    async def body() -> None:
        root = SQLiteBackend(tmp_path / "m.db", "a/-")
        threads = threading.active_count()
        views = [root.view(f"t/ns{i}") for i in range(200)]
        assert threading.active_count() == threads  # no thread per view
        first, second = MemoryStore(views[0]), MemoryStore(views[1])
        await first.remember("k", "only in ns0")
        assert await second.get("k") is None
        assert (await first.get("k")).content == "only in ns0"  # type: ignore[union-attr]
        await views[0].close()  # closes the view only
        with pytest.raises(StorageError):
            await views[0].get("k")
        assert (await MemoryStore(root.view("t/ns0")).get("k")) is not None
        await root.close()  # the owner closes the connection for every view
        with pytest.raises(StorageError):
            await views[1].get("k")
        with pytest.raises(StorageError):
            root.view("t/late")

    asyncio.run(body())


def test_a_tenants_flood_evicts_its_own_stores_not_anothers(tmp_path: Path) -> None:
    async def body() -> None:
        service = MemoryService(tmp_path / "runtime.db", executor=None)  # type: ignore[arg-type]
        kept = await service.store("victim", "default", None)
        for n in range(MAX_STORES_PER_TENANT * 4):
            await service.store("attacker", f"flood-{n}", None)
        assert service.stores_held("attacker") == MAX_STORES_PER_TENANT
        assert await service.store("victim", "default", None) is kept
        await service.close()

    asyncio.run(body())


def test_store_work_runs_off_the_event_loop_one_thread_per_namespace(tmp_path: Path) -> None:
    async def body() -> None:
        service = MemoryService(tmp_path / "runtime.db", executor=None)  # type: ignore[arg-type]
        loop_thread = threading.get_ident()

        async def where(store: MemoryStore) -> tuple[int, int]:
            await store.remember("k", "a memory about lanes")
            await store.recall("lanes")
            return threading.get_ident(), id(asyncio.get_running_loop())

        first = await service.run("t", "ns", None, where)
        assert first[0] != loop_thread  # ranked on a memory thread, not the server's loop
        concurrent = await asyncio.gather(*(service.run("t", "ns", None, where) for _ in range(8)))
        assert set(concurrent) == {first}  # a namespace's store only ever runs on one thread
        lanes = {(await service.run("t", f"n{n}", None, where))[0] for n in range(40)}
        assert 1 < len(lanes) <= LANES  # namespaces spread over the bounded set of lanes
        with pytest.raises(ConfigError, match="8192"):
            await service.run("t", "ns", None, lambda store: store.recall("x" * 9000))
        assert any(t.name.startswith("evermind-memory") for t in threading.enumerate())
        await service.close()  # stops the memory threads
        assert not any(t.name.startswith("evermind-memory") for t in threading.enumerate())

    asyncio.run(body())
