"""KVMemoryBackend (the IndexedDB memory backend) natively, over the Studio's ``MemoryKV`` port.

The behaviour tests the in-memory and SQLite backends pass run here again on the KV backend
(imported below; they pick up this module's ``make_store`` fixture), plus what is specific to
a key-value port: one transaction per logical write, persistence across reopen, other writers
seen through the version, vector caching, and atomic failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evermind.errors import StorageError
from evermind.memory import MemoryBackend, MemoryRecord, MemoryStore
from evermind.memory.kv_backend import KVMemoryBackend, record_key, vector_key, version_key
from evermind.studio.storage import MemoryKV
from tests.unit.test_memory_helpers import TrigramEmbedder, run
from tests.unit.test_memory_properties import ModelEntry, model_evict, operation
from tests.unit.test_memory_store import (  # noqa: F401 - collected here against the KV backend
    Clock,
    StoreFactory,
    test_capacity_evicts_expired_then_unimportant_then_oldest,
    test_exact_codes_rank_first_lexical,
    test_export_import_merge_and_overwrite,
    test_hybrid_recall_labels_and_finds,
    test_invalid_arguments_raise_config_errors,
    test_recent_orders_newest_first,
    test_remember_get_forget,
    test_rewrite_keeps_created_at_and_updates_content,
    test_tag_filter_and_recall_by_tag,
    test_ttl_hides_then_purges,
)


class CountingKV(MemoryKV):
    """A real ``MemoryKV`` that also counts transactions and can be told to fail writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.reads = 0
        self.fail_next_write = False

    async def get(self, store: str, key: str) -> Any:
        self.reads += 1
        return await super().get(store, key)

    async def get_all(self, store: str) -> list[tuple[str, Any]]:
        self.reads += 1
        return await super().get_all(store)

    async def write(
        self, store: str, puts: Iterable[tuple[str, Any]] = (), deletes: Iterable[str] = ()
    ) -> None:
        if self.fail_next_write:
            self.fail_next_write = False
            raise RuntimeError("QuotaExceededError: the disk is full")
        self.writes += 1
        await super().write(store, list(puts), list(deletes))


@pytest.fixture(params=["kv"])
def make_store(request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    made: list[MemoryStore] = []

    def factory(**kwargs: Any) -> MemoryStore:
        store = MemoryStore(KVMemoryBackend(MemoryKV()), **kwargs)
        made.append(store)
        return store

    yield factory
    for store in made:
        run(store.close())


def test_satisfies_the_protocol() -> None:
    assert isinstance(KVMemoryBackend(MemoryKV()), MemoryBackend)


def test_one_kv_transaction_per_logical_write() -> None:
    kv = CountingKV()

    async def body() -> None:
        store = MemoryStore(KVMemoryBackend(kv), capacity=2)
        await store.remember("a", "alpha")
        await store.remember("b", "beta")
        assert kv.writes == 2
        await store.remember("c", "gamma")  # evicts one: still one transaction
        assert kv.writes == 3
        assert await store.forget("c") is True
        assert kv.writes == 4
        await store.import_([{"key": f"i{n}", "content": f"imported {n}"} for n in range(5)])
        assert kv.writes == 5
        assert len(await store.export()) == 2  # capacity held through the import
        assert await store.version() == 5

    run(body())


def test_layout_is_json_rows_plus_version() -> None:
    kv = MemoryKV()

    async def body() -> None:
        store = MemoryStore(KVMemoryBackend(kv, "ns/with/slashes"), clock=lambda: 10.0)
        await store.remember("k/1", "text", tags=["T"], importance=0.75, ttl=5)
        row = json.loads(kv.data["memory"][record_key("ns/with/slashes", "k/1")])
        assert row["ns"] == "ns/with/slashes"
        assert row["record"]["tags"] == ["t"] and row["record"]["expires_at"] == 15.0
        assert kv.data["memory"][version_key("ns/with/slashes")] == 1

    run(body())


def test_persists_across_reopen_and_namespaces_are_isolated() -> None:
    kv = MemoryKV()  # stands for one IndexedDB database surviving a page reload

    async def body() -> None:
        first = MemoryStore(KVMemoryBackend(kv, "tab"))
        await first.remember("pref-editor", "Niamh uses Neovim", tags=["pref"])
        await first.close()
        again = MemoryStore(KVMemoryBackend(kv, "tab"))
        got = await again.get("pref-editor")
        assert got is not None and got.tags == ("pref",)
        assert [h.key for h in await again.recall("which editor does Niamh use")] == ["pref-editor"]
        other = MemoryStore(KVMemoryBackend(kv, "tab2"))
        assert await other.get("pref-editor") is None and await other.version() == 0

    run(body())


def test_other_writer_on_the_same_kv_is_seen() -> None:
    kv = CountingKV()

    async def body() -> None:
        tab_a = MemoryStore(KVMemoryBackend(kv))
        tab_b = MemoryStore(KVMemoryBackend(kv))
        await tab_a.remember("k", "written by tab a about zebras")
        assert [h.key for h in await tab_b.recall("zebras")] == ["k"]
        await tab_b.remember("k2", "tab b writes about zebras too")
        assert {h.key for h in await tab_a.recall("zebras")} == {"k", "k2"}
        assert await tab_a.version() == await tab_b.version() == 2
        await tab_a.forget("k")
        assert [h.key for h in await tab_b.recall("zebras")] == ["k2"]

    run(body())


def test_failed_write_changes_nothing() -> None:
    kv = CountingKV()

    async def body() -> None:
        backend = KVMemoryBackend(kv)
        store = MemoryStore(backend)
        await store.remember("keep", "kept")
        with pytest.raises(TypeError):  # not JSON: fails before the transaction starts
            await backend.apply([MemoryRecord("x", "y", meta={"bad": object()})], ["keep"])
        kv.fail_next_write = True
        with pytest.raises(StorageError, match="disk is full"):
            await store.remember("lost", "never written")
        assert [e["key"] for e in await store.export()] == ["keep"]
        assert await store.version() == 1 and kv.writes == 1

    run(body())


def test_vectors_cached_per_fingerprint_and_pruned() -> None:
    kv = CountingKV()

    async def body() -> None:
        model = TrigramEmbedder()
        store = MemoryStore(KVMemoryBackend(kv), model)
        await store.remember("a", "alpha text")
        await store.remember("b", "beta text")
        await store.recall("alpha")
        seen = len(model.texts_seen)
        key = vector_key("trigram-test-v1", MemoryRecord("a", "alpha text").content_hash)
        assert isinstance(kv.data["memory"][key]["vector"], bytes)
        reopened = MemoryStore(KVMemoryBackend(kv), model)  # a reload: vectors come from the KV
        hits = await reopened.recall("alpha")
        assert hits[0].key == "a" and hits[0].ranked_by.startswith("semantic+lexical")
        assert model.texts_seen[seen:] == ["alpha"]  # only the query was embedded
        other = MemoryStore(KVMemoryBackend(kv), TrigramEmbedder(fingerprint="trigram-test-v2"))
        await other.recall("beta")
        assert other.vector_cache is not None and other.vector_cache.embedded_texts == 3
        await store.forget("a")
        backend = store.backend
        assert isinstance(backend, KVMemoryBackend)
        assert await backend.prune_vectors() == 2  # 'alpha text' under both fingerprints
        got = await backend.get_vectors(
            "trigram-test-v1", [MemoryRecord("b", "beta text").content_hash]
        )
        assert len(got) == 1

    run(body())


def test_many_vectors_read_in_one_scan() -> None:
    kv = CountingKV()

    async def body() -> None:
        writer = KVMemoryBackend(kv)
        vectors = {f"h{i}": [float(i), 1.0] for i in range(100)}
        await writer.put_vectors("fp", vectors)
        reader = KVMemoryBackend(kv)
        before = kv.reads
        got = await reader.get_vectors("fp", [*vectors, "absent"])
        assert kv.reads - before == 1 and len(got) == 100 and list(got["h7"]) == [7.0, 1.0]

    run(body())


def test_damaged_row_is_skipped_not_fatal() -> None:
    kv = MemoryKV()

    async def body() -> None:
        store = MemoryStore(KVMemoryBackend(kv))
        await store.remember("good", "a readable memory")
        kv.data["memory"][record_key("default", "bad")] = "{not json"
        kv.data["memory"]["v/default"] = 2  # as if another tab wrote the damaged row
        assert [e["key"] for e in await store.export()] == ["good"]

    run(body())


def test_closed_backend_raises() -> None:
    async def body() -> None:
        store = MemoryStore(KVMemoryBackend(MemoryKV()))
        await store.close()
        with pytest.raises(StorageError, match="closed"):
            await store.remember("k", "v")

    run(body())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(operation, min_size=1, max_size=25), capacity=st.integers(1, 4))
def test_ttl_and_eviction_follow_the_model(
    ops: list[tuple[str, float, float | None, float]], capacity: int
) -> None:
    now = [1000.0]

    async def body() -> None:
        store = MemoryStore(KVMemoryBackend(MemoryKV()), capacity=capacity, clock=lambda: now[0])
        model: dict[str, ModelEntry] = {}
        for key, importance, ttl, advance in ops:
            now[0] += advance
            await store.remember(key, f"content of {key}", importance=importance, ttl=ttl)
            model[key] = ModelEntry(importance, now[0], None if ttl is None else now[0] + ttl)
            model_evict(model, capacity, key, now[0])
            expired = {
                k for k, e in model.items() if e.expires_at is not None and e.expires_at <= now[0]
            }
            assert {e["key"] for e in await store.export()} | expired == set(model)
        now[0] += 100.0
        await store.purge_expired()
        assert {e["key"] for e in await store.export()} == {
            k for k, e in model.items() if e.expires_at is None
        }

    run(body())
