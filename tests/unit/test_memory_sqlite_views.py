"""Namespace views of one SQLite backend: one connection and thread, isolated namespaces."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from evermind.errors import StorageError
from evermind.memory import MemoryStore
from evermind.memory.sqlite_backend import SQLiteBackend
from evermind.runtime.memory_service import MAX_STORES_PER_TENANT, MemoryService


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
