"""The memory store on the vector-store port, on every engine (memory://, SQLite, pgvector,
Qdrant local).

The MemoryStore behaviour suite of ``tests/unit/test_memory_store.py`` runs again here, its
``make_store`` fixture replaced by one that puts each store on a :class:`VectorStoreBackend`
over a fresh table / collection of each engine. Then what only this backend has: two stores
on one Postgres table see each other's writes (the version is the sum of per-writer clocks),
and a property with random tenants, namespaces and keys: no read of any kind (get, recall,
recent, export, count) ever returns a memory of another tenant or namespace. Postgres is the
session's one pgserver (the ``postgres`` fixture of tests/runtime/conftest.py).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evermind.errors import ConfigError
from evermind.memory import MemoryStore
from evermind.memory.vector_backend import SIGNATURE_DIM, VectorStoreBackend
from evermind.vectorstore import AccessScope, Hit, VectorItem, VectorStore, open_store
from tests.runtime.test_vectorstore_engines import ENGINES
from tests.unit.test_memory_helpers import TrigramEmbedder, run
from tests.unit.test_memory_store import (  # noqa: F401 - collected again with our fixture
    StoreFactory,
    test_capacity_evicts_expired_then_unimportant_then_oldest,
    test_exact_codes_rank_first_lexical,
    test_export_import_merge_and_overwrite,
    test_hybrid_recall_labels_and_finds,
    test_recent_orders_newest_first,
    test_remember_get_forget,
    test_rewrite_keeps_created_at_and_updates_content,
    test_tag_filter_and_recall_by_tag,
    test_ttl_hides_then_purges,
)


class OpenOnFirstUse:
    """A vector store opened on its first call, in the event loop of that call.

    The shared suite builds stores synchronously inside its coroutines; Postgres and Qdrant
    open asynchronously (and a psycopg connection belongs to the loop it was opened in).
    """

    def __init__(self, url: str, name: str) -> None:
        self.url, self.name, self.dim = url, name, SIGNATURE_DIM
        self._store: VectorStore | None = None

    async def _opened(self) -> VectorStore:
        if self._store is None:
            self._store = await open_store(self.url, dim=self.dim, name=self.name)
        return self._store

    async def upsert(self, items: Sequence[VectorItem]) -> None:
        await (await self._opened()).upsert(items)

    async def delete(self, ids: Sequence[str]) -> int:
        return await (await self._opened()).delete(ids)

    async def query(
        self, vector: Sequence[float], k: int, filter: object = None, scope: Any = None
    ) -> list[Hit]:
        return await (await self._opened()).query(vector, k, filter, scope)

    async def count(self, filter: object = None, scope: AccessScope | None = None) -> int:
        return await (await self._opened()).count(filter, scope)

    async def close(self) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            if hasattr(store, "drop"):
                await store.drop()
            await store.close()


def _url(engine: str, request: pytest.FixtureRequest, folder: Path) -> str:
    if engine == "memory":
        return "memory://"
    if engine == "sqlite":
        return f"sqlite:///{folder}/vectors.db"
    if engine == "pgvector":
        return str(request.getfixturevalue("postgres"))
    return f"qdrant+local:///{folder}/qdrant"


@pytest.fixture(params=ENGINES)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    made: list[MemoryStore] = []

    def factory(**kwargs: object) -> MemoryStore:
        folder = tmp_path / f"s{len(made)}"  # one folder each: qdrant local locks its own
        folder.mkdir()
        raw = OpenOnFirstUse(_url(request.param, request, folder), f"m_{uuid.uuid4().hex[:12]}")
        backend = VectorStoreBackend(raw, "ns", tenant="acme", owns_store=True)
        store = MemoryStore(backend, **kwargs)  # type: ignore[arg-type]
        made.append(store)
        return store

    yield factory
    for store in made:
        # Each test body ran in a loop of its own; the connection is reopened here to drop.
        backend = store.backend
        assert isinstance(backend, VectorStoreBackend)
        raw = backend._store
        assert isinstance(raw, OpenOnFirstUse)
        raw._store = None  # the connection belonged to the test's closed loop
        run(raw.close() if request.param != "pgvector" else _drop(raw.url, raw.name))


async def _drop(url: str, name: str) -> None:
    store = await open_store(url, dim=SIGNATURE_DIM, name=name)
    await store.drop()  # type: ignore[attr-defined]
    await store.close()


def test_the_backend_refuses_no_tenant_and_a_wrong_dimension() -> None:
    async def body() -> None:
        store = await open_store("memory://", dim=SIGNATURE_DIM)
        with pytest.raises(ConfigError, match="tenant must be a non-empty string"):
            VectorStoreBackend(store, "ns", tenant="")
        with pytest.raises(ConfigError, match="dimension 7"):
            VectorStoreBackend(await open_store("memory://", dim=7), "ns", tenant="acme")

    run(body())


def test_two_stores_on_one_postgres_table_see_each_other(postgres: str) -> None:
    name = f"m_{uuid.uuid4().hex[:12]}"

    async def body() -> None:
        a_raw = await open_store(postgres, dim=SIGNATURE_DIM, name=name)
        b_raw = await open_store(postgres, dim=SIGNATURE_DIM, name=name)
        a = MemoryStore(VectorStoreBackend(a_raw, "ns", tenant="acme"), TrigramEmbedder())
        b = MemoryStore(VectorStoreBackend(b_raw, "ns", tenant="acme"), TrigramEmbedder())
        other = MemoryStore(VectorStoreBackend(b_raw, "ns", tenant="globex"))
        try:
            await a.remember("zebra", "zebras graze on the savanna at dawn")
            assert [h.key for h in await b.recall("zebras savanna")] == ["zebra"]
            # Both write at once: each sees version +2, reloads, and sees the other's memory.
            await asyncio.gather(
                a.remember("lion", "lions sleep in the shade"),
                b.remember("giraffe", "giraffes reach the acacia leaves"),
            )
            for store in (a, b):
                assert {r.key for r in await store.recent(10)} == {"zebra", "lion", "giraffe"}
            await b.forget("zebra")
            assert await a.get("zebra") is None
            assert "zebra" not in {h.key for h in await a.recall("zebras savanna")}
            assert await other.count() == 0 and await other.recall("lions shade") == []
        finally:
            await a_raw.drop()  # type: ignore[attr-defined]
            await a_raw.close()
            await b_raw.close()

    run(body())


TENANTS = ["acme", "globex", "initech"]
NAMESPACES = ["default", "notes", "acme"]  # a namespace named like a tenant on purpose
WORDS = ["pump", "valve", "north", "ledger", "coffee", "zebra"]
WRITES = st.lists(
    st.tuples(
        st.sampled_from(TENANTS),
        st.sampled_from(NAMESPACES),
        st.sampled_from(["k1", "k2", "k3", "shared"]),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(writes=WRITES, reader=st.tuples(st.sampled_from(TENANTS), st.sampled_from(NAMESPACES)))
@pytest.mark.parametrize("engine", ENGINES)
def test_property_no_read_returns_another_tenant_s_memory(
    engine: str,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    writes: list[tuple[str, str, str, list[str]]],
    reader: tuple[str, str],
) -> None:
    folder = tmp_path_factory.mktemp("prop")
    url = _url(engine, request, folder)
    name = f"p_{uuid.uuid4().hex[:12]}"

    async def body() -> None:
        raw = await open_store(url, dim=SIGNATURE_DIM, name=name)
        try:
            expected: dict[str, str] = {}
            for tenant, namespace, key, words in writes:
                writer = MemoryStore(VectorStoreBackend(raw, namespace, tenant=tenant))
                content = f"{tenant} {namespace} " + " ".join(words)
                await writer.remember(key, content)
                if (tenant, namespace) == reader:
                    expected[key] = content
            store = MemoryStore(VectorStoreBackend(raw, reader[1], tenant=reader[0]))
            mine = f"{reader[0]} {reader[1]} "
            seen = [r.content for r in await store.recent(100)]
            seen += [e["content"] for e in await store.export()]
            for word in WORDS:
                seen += [h.content for h in await store.recall(word, top_k=50)]
            for key in ("k1", "k2", "k3", "shared"):
                got = await store.get(key)
                assert (got is None) == (key not in expected)
                seen += [got.content] if got else []
            assert all(text.startswith(mine) for text in seen), "served another's memory"
            assert {e["key"]: e["content"] for e in await store.export()} == expected
            assert await store.count() == len(expected)
        finally:
            if hasattr(raw, "drop"):
                await raw.drop()
            await raw.close()

    run(body())
