"""MemoryStore behaviour on both reference backends (in-memory and SQLite)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from evermind.errors import ConfigError, StorageError
from evermind.memory import (
    InMemoryBackend,
    InMemoryHub,
    MemoryStore,
    RecallOptions,
    SyncMemoryStore,
)
from evermind.memory.sqlite_backend import SQLiteBackend
from tests.unit.test_memory_helpers import TrigramEmbedder, run


class Clock:
    """A hand-driven clock (seconds)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


StoreFactory = Callable[..., MemoryStore]


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    made: list[MemoryStore] = []

    def factory(**kwargs: object) -> MemoryStore:
        if request.param == "memory":
            backend: object = InMemoryBackend()
        else:
            backend = SQLiteBackend(tmp_path / f"m{len(made)}.db")
        store = MemoryStore(backend, **kwargs)  # type: ignore[arg-type]
        made.append(store)
        return store

    yield factory
    for store in made:
        run(store.close())


FACTS = {
    "host-prod": "The production database primary is db-prod-01.tessera.internal on port 5432.",
    "host-stage": "The staging database runs on db-stage-02.tessera.internal, port 5433.",
    "err-417": "Error TSR-417 means the route solver timed out; raise solver_timeout_s.",
    "err-471": "Error TSR-471 means the depot list was empty.",
    "pref-editor": "Niamh uses Neovim with LazyVim; never suggest VS Code extensions.",
    "pref-coffee": "Niamh drinks flat whites, no sugar.",
}


async def _fill(store: MemoryStore) -> None:
    for key, content in FACTS.items():
        await store.remember(key, content, tags=[key.split("-")[0]])


def test_remember_get_forget(make_store: StoreFactory) -> None:
    async def body() -> None:
        store = make_store()
        record = await store.remember("k1", "hello", tags=["A", "b", "a"], importance=0.9)
        assert record.tags == ("a", "b")
        got = await store.get("k1")
        assert got is not None and got.content == "hello" and got.importance == 0.9
        assert await store.forget("k1") is True
        assert await store.forget("k1") is False
        assert await store.get("k1") is None

    run(body())


def test_rewrite_keeps_created_at_and_updates_content(make_store: StoreFactory) -> None:
    clock = Clock()

    async def body() -> None:
        store = make_store(clock=clock)
        await store.remember("k", "first version")
        clock.now += 100
        await store.remember("k", "second version")
        got = await store.get("k")
        assert got is not None
        assert got.content == "second version"
        assert got.created_at == clock.now - 100 and got.updated_at == clock.now
        hits = await store.recall("version")
        assert [h.key for h in hits] == ["k"] and hits[0].content == "second version"

    run(body())


def test_exact_codes_rank_first_lexical(make_store: StoreFactory) -> None:
    async def body() -> None:
        store = make_store()
        await _fill(store)
        hits = await store.recall("what does TSR-417 mean?", top_k=3)
        assert hits[0].key == "err-417"
        assert hits[0].ranked_by.startswith("lexical only: no embedder")
        hits = await store.recall("db-stage-02.tessera.internal", top_k=2)
        assert hits[0].key == "host-stage"

    run(body())


def test_hybrid_recall_labels_and_finds(make_store: StoreFactory) -> None:
    async def body() -> None:
        store = make_store(embedder=TrigramEmbedder())
        await _fill(store)
        hits = await store.recall("TSR-417 solver timeout", top_k=3)
        assert hits[0].key == "err-417"
        # Too few memories to measure the embedder's trust: the weight is the cap.
        assert hits[0].ranked_by.startswith("semantic+lexical; convex w=0.50 (measured trust)")
        assert "cosine" in hits[0].signals and "bm25" in hits[0].signals
        rrf = await store.recall(
            "TSR-417 solver timeout", top_k=3, options=RecallOptions(fusion="rrf")
        )
        assert rrf[0].key == "err-417"
        assert rrf[0].ranked_by.startswith("semantic+lexical; rrf k=60")
        assert "rrf" in rrf[0].signals
        # Semantic alone still finds misspelt words BM25 cannot match.
        hits = await store.recall(
            "Neovimm LazyVimm", options=RecallOptions(lexical=False, mmr=False)
        )
        assert hits[0].key == "pref-editor"
        assert hits[0].ranked_by.startswith("semantic only")

    run(body())


class TableEmbedder:
    """Vectors looked up by text: lets a test fix every cosine exactly."""

    fingerprint = "table-v1"

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.table[text] for text in texts]


def test_convex_fusion_weighs_normalised_scores(make_store: StoreFactory) -> None:
    """w = 0 keeps BM25's order, w = 1 the cosine order, between them the convex mix of
    z-scores (each signal standardised over the candidates), rescaled to (0, 1]."""
    table = {
        "alpha route solver notes": [1.0, 0.0, 0.0],
        "alpha alpha alpha solver": [0.0, 1.0, 0.0],
        "unrelated words only": [0.6, 0.8, 0.0],
        "alpha solver": [0.8, 0.6, 0.0],
    }
    no_extras = {"mmr": False, "importance": False, "recency": False}

    def z(values: dict[str, float]) -> dict[str, float]:
        mean = sum(values.values()) / len(values)
        std = (sum((v - mean) ** 2 for v in values.values()) / len(values)) ** 0.5
        return {key: (v - mean) / std for key, v in values.items()}

    async def body() -> None:
        store = make_store(embedder=TableEmbedder(table))
        await store.remember("a", "alpha route solver notes")
        await store.remember("b", "alpha alpha alpha solver")
        await store.remember("c", "unrelated words only")

        async def order(weight: float) -> list[str]:
            options = RecallOptions(semantic_weight=weight, **no_extras)
            return [hit.key for hit in await store.recall("alpha solver", options=options)]

        assert (await order(0.0))[:2] == ["b", "a"]  # BM25: b repeats the query's words
        assert await order(1.0) == ["c", "a", "b"]  # cosine: c 0.96, a 0.8, b 0.6
        mixed = await store.recall(
            "alpha solver", options=RecallOptions(semantic_weight=0.5, **no_extras)
        )
        assert mixed[0].ranked_by == "semantic+lexical; convex w=0.50"
        by_key = {hit.key: hit for hit in mixed}
        z_bm25 = z({key: hit.signals["bm25"] for key, hit in by_key.items()})
        z_cos = z({key: hit.signals["cosine"] for key, hit in by_key.items()})
        raw = {key: 0.5 * z_bm25[key] + 0.5 * z_cos[key] for key in by_key}
        low, high = min(raw.values()), max(raw.values())
        for key, hit in by_key.items():
            expected = (raw[key] - low) / (high - low)
            assert hit.signals["fused"] == pytest.approx(max(expected, 1e-9), abs=1e-6)
            assert 0.0 < hit.score <= 1.0
        assert max(hit.score for hit in mixed) == pytest.approx(1.0)
        assert by_key["c"].signals["bm25"] == 0.0  # looked up for a semantic-only candidate
        with pytest.raises(ConfigError, match="fusion must be one of"):
            RecallOptions(fusion="max")
        with pytest.raises(ConfigError, match="semantic_weight"):
            RecallOptions(semantic_weight=1.5)

    run(body())


def test_tag_filter_and_recall_by_tag(make_store: StoreFactory) -> None:
    clock = Clock()

    async def body() -> None:
        store = make_store(clock=clock)
        for key, content in FACTS.items():
            clock.now += 1
            await store.remember(key, content, tags=[key.split("-")[0]])
        hits = await store.recall("database port", tags=["pref"])
        assert hits == []
        hits = await store.recall("Niamh", tags=["PREF"])
        assert {h.key for h in hits} == {"pref-editor", "pref-coffee"}
        by_tag = await store.recall_by_tag("host", limit=5)
        assert [r.key for r in by_tag] == ["host-stage", "host-prod"]  # newest first

    run(body())


def test_recent_orders_newest_first(make_store: StoreFactory) -> None:
    clock = Clock()

    async def body() -> None:
        store = make_store(clock=clock)
        for i in range(5):
            clock.now += 1
            await store.remember(f"k{i}", f"text {i}")
        assert [r.key for r in await store.recent(3)] == ["k4", "k3", "k2"]

    run(body())


def test_ttl_hides_then_purges(make_store: StoreFactory) -> None:
    clock = Clock()

    async def body() -> None:
        store = make_store(clock=clock)
        await store.remember("short", "a fleeting thought about lunch", ttl=10)
        await store.remember("long", "a lasting thought about lunch")
        clock.now += 9.5
        assert await store.get("short") is not None
        clock.now += 1
        assert await store.get("short") is None
        assert [h.key for h in await store.recall("lunch thought")] == ["long"]
        assert await store.count() == 1
        assert await store.purge_expired() == 1
        assert await store.purge_expired() == 0
        assert [e["key"] for e in await store.export()] == ["long"]

    run(body())


def test_capacity_evicts_expired_then_unimportant_then_oldest(make_store: StoreFactory) -> None:
    clock = Clock()

    async def body() -> None:
        store = make_store(clock=clock, capacity=3)
        await store.remember("old-important", "a", importance=0.9)
        clock.now += 1
        await store.remember("expiring", "b", importance=1.0, ttl=5)
        clock.now += 1
        await store.remember("trivial", "c", importance=0.1)
        clock.now += 10  # 'expiring' has expired
        await store.remember("new1", "d", importance=0.5)
        keys = {e["key"] for e in await store.export()} | {"expiring"}
        assert await store.get("expiring") is None
        assert keys == {"old-important", "trivial", "new1", "expiring"}
        await store.remember("new2", "e", importance=0.5)  # evicts the lowest importance
        assert {e["key"] for e in await store.export()} == {"old-important", "new1", "new2"}
        clock.now += 1
        await store.remember("new3", "f", importance=0.5)  # ties on importance: oldest goes
        assert {e["key"] for e in await store.export()} == {"old-important", "new2", "new3"}

    run(body())


def test_export_import_merge_and_overwrite(make_store: StoreFactory) -> None:
    clock = Clock()

    async def body() -> None:
        source = make_store(clock=clock)
        await _fill(source)
        dump = await source.export()
        target = make_store(clock=clock)
        await target.remember("local-only", "something local")
        clock.now += 50
        await target.remember("pref-coffee", "Niamh switched to oat lattes.")
        assert await target.import_(dump, mode="merge") == len(FACTS) - 1  # newer local kept
        got = await target.get("pref-coffee")
        assert got is not None and "oat" in got.content
        assert await target.get("local-only") is not None
        await target.import_(dump, mode="overwrite")
        assert await target.export() == dump
        with pytest.raises(ConfigError, match="mode"):
            await target.import_(dump, mode="replace")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="missing 'content'"):
            await target.import_([{"key": "x"}])
        assert await target.export() == dump  # a bad import writes nothing

    run(body())


def test_invalid_arguments_raise_config_errors(make_store: StoreFactory) -> None:
    async def body() -> None:
        store = make_store()
        with pytest.raises(ConfigError, match="importance"):
            await store.remember("k", "x", importance=1.5)
        with pytest.raises(ConfigError, match="ttl"):
            await store.remember("k", "x", ttl=0)
        with pytest.raises(ConfigError, match="tags"):
            await store.remember("k", "x", tags="single")
        with pytest.raises(ConfigError, match="key"):
            await store.remember("", "x")
        with pytest.raises(ConfigError, match="top_k"):
            await store.recall("x", top_k=0)
        with pytest.raises(ConfigError):
            RecallOptions(lexical=False, semantic=False)

    run(body())


def test_vectors_reembedded_only_when_content_or_model_changes(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"

    async def body() -> None:
        model = TrigramEmbedder()
        store = MemoryStore(path, model)
        await store.remember("a", "alpha text")
        await store.remember("b", "beta text")
        await store.recall("alpha")
        stored_texts = [t for t in model.texts_seen if t != "alpha"]
        assert sorted(stored_texts) == ["alpha text", "beta text"]
        await store.remember("a", "alpha text")  # same content: no new embedding
        await store.recall("alpha")
        assert [t for t in model.texts_seen if t != "alpha"] == stored_texts
        await store.close()

        again = TrigramEmbedder()  # a new process, same model: everything from the cache
        store = MemoryStore(path, again)
        await store.recall("beta")
        assert again.texts_seen == ["beta"]
        await store.remember("b", "beta text, revised")
        await store.recall("beta")
        assert "beta text, revised" in again.texts_seen
        await store.close()

        other = TrigramEmbedder(fingerprint="trigram-test-v2")  # model changed
        store = MemoryStore(path, other)
        await store.recall("x")
        assert sorted(t for t in other.texts_seen if t != "x") == [
            "alpha text",
            "beta text, revised",
        ]
        await store.close()

    run(body())


def test_any_embed_object_or_function_sync_or_async(tmp_path: Path) -> None:
    helper = TrigramEmbedder()

    class NoFingerprint:
        def embed(self, texts: list[str]) -> list[list[float]]:
            return helper.embed(texts)

    async def async_embed(texts: list[str]) -> list[list[float]]:
        await asyncio.sleep(0)
        return helper.embed(texts)

    async def body() -> None:
        for model in (NoFingerprint(), async_embed, helper.embed):
            store = MemoryStore(InMemoryBackend(), model)
            await store.remember("e", "Neovim with LazyVim")
            await store.remember("f", "flat white coffee")
            hits = await store.recall("LazyVim editor", options=RecallOptions(lexical=False))
            assert hits[0].key == "e"
            cache = store.vector_cache
            assert cache is not None and "#256d-" in cache.embedder.fingerprint

    run(body())


def test_broken_embedder_falls_back_to_lexical() -> None:
    class Broken:
        fingerprint = "broken"

        def embed(self, texts: list[str]) -> list[list[float]]:
            raise RuntimeError("GPU fell over")

    async def body() -> None:
        store = MemoryStore(InMemoryBackend(), Broken())
        await store.remember("k", "the memory survives")
        hits = await store.recall("memory")
        assert [h.key for h in hits] == ["k"]
        assert hits[0].ranked_by.startswith("lexical only: embedder failed")

    run(body())


def test_wrong_shape_from_embedder_is_a_shape_error() -> None:
    from evermind.errors import ShapeError

    class Short:
        fingerprint = "short"

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0]]

    async def body() -> None:
        store = MemoryStore(InMemoryBackend(), Short())
        with pytest.raises(ShapeError, match="expected 2 vectors"):
            await store.write([], [])  # nothing to embed: fine
            await store.vector_cache.vectors(["a", "b"])  # type: ignore[union-attr]

    run(body())


def test_other_writers_are_seen_by_refresh() -> None:
    hub = InMemoryHub()

    async def body() -> None:
        first = MemoryStore(InMemoryBackend("t", hub))
        second = MemoryStore(InMemoryBackend("t", hub))
        third = MemoryStore(InMemoryBackend("other-tenant", hub))
        await first.remember("k", "written by the first store about zebras")
        assert [h.key for h in await second.recall("zebras")] == ["k"]
        assert await third.recall("zebras") == []
        await second.forget("k")
        assert await first.recall("zebras") == []

    run(body())


def test_mmr_diversifies_near_duplicates() -> None:
    async def body() -> None:
        store = MemoryStore(InMemoryBackend())
        await store.remember("dup1", "deploy window is Tuesday morning for the routing service")
        await store.remember("dup2", "deploy window is Tuesday morning for the routing service!")
        await store.remember("other", "routing deploy needs a change ticket")
        plain = await store.recall(
            "routing deploy window", top_k=2, options=RecallOptions(mmr=False)
        )
        diverse = await store.recall(
            "routing deploy window", top_k=2, options=RecallOptions(mmr_lambda=0.3)
        )
        assert {h.key for h in plain} == {"dup1", "dup2"}
        assert "other" in {h.key for h in diverse}
        assert "mmr λ=0.30" in diverse[0].ranked_by

    run(body())


def test_importance_breaks_ties_in_recall() -> None:
    async def body() -> None:
        store = MemoryStore(InMemoryBackend(), clock=Clock())
        await store.remember("low", "the VPN gateway address", importance=0.1)
        await store.remember("high", "the VPN gateway address", importance=0.9)
        hits = await store.recall("VPN gateway", options=RecallOptions(mmr=False))
        assert [h.key for h in hits] == ["high", "low"]
        flat = await store.recall("VPN gateway", options=RecallOptions(mmr=False, importance=False))
        assert flat[0].score == flat[1].score

    run(body())


def test_recency_prefers_fresh_memories() -> None:
    clock = Clock()

    async def body() -> None:
        store = MemoryStore(InMemoryBackend(), clock=clock)
        await store.remember("old", "standup moved to 09:45")
        clock.now += 90 * 86400
        await store.remember("new", "standup moved to 09:45")
        hits = await store.recall("standup", options=RecallOptions(mmr=False))
        assert [h.key for h in hits] == ["new", "old"]
        assert hits[1].signals["recency_factor"] < hits[0].signals["recency_factor"]

    run(body())


def test_path_constructor_and_sync_wrapper(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "sync.db"
    with SyncMemoryStore(path) as store:
        store.remember("k", "remembered from a script", tags=["script"], ttl=3600)
        assert store.get("k") is not None
        assert [h.key for h in store.recall("script")] == ["k"]
        assert [r.key for r in store.recall_by_tag("script")] == ["k"]
        assert [r.key for r in store.recent(1)] == ["k"]
        assert store.count() == 1
    with SyncMemoryStore(path, namespace="other") as other:
        assert other.get("k") is None
    with SyncMemoryStore(path) as again:
        assert again.export()[0]["content"] == "remembered from a script"


def test_closed_store_raises_storage_error(tmp_path: Path) -> None:
    async def body() -> None:
        store = MemoryStore(tmp_path / "c.db")
        await store.close()
        with pytest.raises(StorageError, match="closed"):
            await store.remember("k", "v")

    run(body())


def test_bad_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="MemoryBackend"):
        MemoryStore(42)  # type: ignore[arg-type]
