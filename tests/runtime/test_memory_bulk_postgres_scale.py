"""What keeps a Postgres memory's bulk load flat with the table (a real Postgres, pgserver).

- The vector cache lives in the embedding table only (one binary ``COPY`` a batch, the rows
  pgvector's HNSW serves from), not a second time as ``vector`` items beside the records; a
  second store reads the vectors back bit for bit and embeds nothing again; ``vector`` items
  an earlier version cached are still read.
- A bulk import into an embedding table whose HNSW index exists pays pgvector's per-row
  insert until it has written :attr:`PgVectorStore.rebuild_share` of the table (ski rental:
  about what a rebuild costs), then drops the index; another store that was ranking from it
  falls back to its in-process index with the right answers (also while the import runs),
  and the next recall rebuilds it, after which recall is served again and finds the import.
  Small writes never count.
- A batch whose embedding write fails leaves nothing: no record, no embedding, no version.
"""

from __future__ import annotations

import asyncio
import base64
import time
from array import array

import numpy as np
import psycopg
import pytest

from evermind.errors import StorageError
from evermind.memory import MemoryStore, RecallOptions
from evermind.memory.records import content_hash
from evermind.memory.shared_memory import SharedMemory
from evermind.memory.vector_backend import MEMORY_PRINCIPAL, VectorStoreBackend
from evermind.vectorstore.clock import signature
from evermind.vectorstore.pgvector import PgVectorStore
from evermind.vectorstore.port import Acl, VectorItem
from evermind.vectorstore.shared import MEMORY_TABLE

DIM, K = 16, 10
SEMANTIC = RecallOptions(lexical=False, mmr=False, importance=False, recency=False)


class Table:
    """An embedder that maps each known text to its vector (no model), counting its calls."""

    fingerprint = "test-table-v1"

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors
        self.embedded = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.embedded += len(texts)
        return np.stack([self.vectors[t] for t in texts])


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _engine(store: MemoryStore) -> PgVectorStore:
    backend = store.backend
    assert isinstance(backend, VectorStoreBackend)
    engine = backend._store
    assert isinstance(engine, PgVectorStore)
    return engine


def _count(url: str, statement: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(statement).fetchone()
    assert row is not None
    return int(row[0])


def test_the_vector_cache_is_the_embedding_table_and_reads_back_exactly(database: str) -> None:
    rng = np.random.default_rng(1)
    rows = unit(rng.standard_normal((300, DIM)))
    texts = {f"note {i}": rows[i] for i in range(300)} | {"question": rows[7]}

    async def main() -> None:
        writer = Table(texts)
        async with SharedMemory(database, writer, namespace="n") as shared:
            store = shared.store("acme")
            await store.import_([{"key": f"k{i}", "content": f"note {i}"} for i in range(300)])
            assert writer.embedded == 300
            await store.close()
        kinds = f"SELECT count(*) FROM {MEMORY_TABLE} WHERE metadata->>'kind' = 'vector'"
        assert _count(database, kinds) == 0  # no second copy beside the records
        assert _count(database, f"SELECT count(*) FROM {MEMORY_TABLE}_emb_{DIM}") == 300

        reader = Table(texts)  # another process: reads the cache, embeds only the question
        async with SharedMemory(database, reader, namespace="n") as shared:
            store = shared.store("acme")
            hits = await store.recall("question", top_k=K, options=SEMANTIC)
            assert hits[0].key == "k7"
            assert reader.embedded == 1
            engine = _engine(store)
            note = await store.get("k42")
            assert note is not None
            got = await engine.get_embeddings("acme", Table.fingerprint, [note.content_hash])
            assert np.array_equal(np.asarray(got[note.content_hash], np.float32), rows[42])
            assert (
                await engine.get_embeddings("rival", Table.fingerprint, [note.content_hash]) == {}
            )

            # A vector cached the old way (an item beside the records) is still read.
            backend = store.backend
            assert isinstance(backend, VectorStoreBackend)
            old = np.arange(1, DIM + 1, dtype=np.float32)
            meta = {
                "kind": "vector",
                "fingerprint": Table.fingerprint,
                "hash": "old-hash",
                "vector": base64.b64encode(array("f", old.tolist()).tobytes()).decode("ascii"),
            }
            acl = Acl("acme", frozenset({MEMORY_PRINCIPAL}))
            item = VectorItem("v:legacy", signature(""), "", meta, acl)
            await engine.upsert([item])
            found = await backend.get_vectors(Table.fingerprint, ["old-hash", note.content_hash])
            assert np.array_equal(np.asarray(found["old-hash"], np.float32), old)
            assert np.array_equal(np.asarray(found[note.content_hash], np.float32), rows[42])
            await store.close()

    asyncio.run(main())


def test_a_big_import_drops_the_index_readers_fall_back_and_recall_rebuilds_it(
    database: str,
) -> None:
    first, more = 2000, 1500
    rng = np.random.default_rng(5)
    rows = unit(rng.standard_normal((first + more, DIM)))
    queries = {f"question {i}": rows[i] for i in (3, 1200, first + 10, first + 1400)}
    texts = {f"memory {i}": rows[i] for i in range(first + more)} | queries
    embedder = Table(texts)

    def entries(lo: int, hi: int) -> list[dict[str, object]]:
        return [{"key": f"m{i}", "content": f"memory {i}"} for i in range(lo, hi)]

    async def main() -> None:
        async with (
            SharedMemory(database, embedder, namespace="n") as one,
            SharedMemory(database, embedder, namespace="n") as two,
        ):
            writer = MemoryStore(one.store("acme").backend, embedder, served_min_rows=500)
            reader = MemoryStore(two.store("acme").backend, embedder, served_min_rows=500)
            engine = _engine(writer)
            engine.rebuild_min_rows, engine.bulk_rows = 500, 200
            await writer.import_(entries(0, first))
            writer_backend, reader_backend = writer.backend, reader.backend
            assert isinstance(writer_backend, VectorStoreBackend)
            assert isinstance(reader_backend, VectorStoreBackend)
            assert await writer_backend.build_served_index(DIM)
            for store in (writer, reader):
                hits = await store.recall("question 1200", top_k=K, options=SEMANTIC)
                assert store.vector_index.last_scan == "served" and hits[0].key == "m1200"

            # A write under bulk_rows does not count, one under the share counts: the index
            # stays for both.
            await writer.import_(entries(first, first + 100))
            assert await engine.embedding_index_ready(DIM)
            await writer.import_(entries(first + 100, first + 400))
            assert await engine.embedding_index_ready(DIM)

            # The big import (300 + 1100 rows counted ≥ 500, and ≥ the share of the table): the
            # index goes first. The reader keeps recalling all along, on its own connection.
            seen: list[str] = []
            done = asyncio.Event()

            async def keep_recalling() -> None:
                # Until the import is done and the reader has ranked in process at least once:
                # its first recall after the drop must (nobody rebuilds before a recall finds
                # the index gone, and the writer does not recall meanwhile).
                deadline = time.monotonic() + 60
                while not (done.is_set() and any(scan != "served" for scan in seen)):
                    assert time.monotonic() < deadline, f"no fallback seen: {seen[-5:]}"
                    hits = await reader.recall("question 3", top_k=K, options=SEMANTIC)
                    assert hits[0].key == "m3"
                    seen.append(reader.vector_index.last_scan)
                    await asyncio.sleep(0)

            async def big_import() -> None:
                try:
                    await writer.import_(entries(first + 400, first + more))
                finally:
                    done.set()

            await asyncio.gather(keep_recalling(), big_import())
            assert {"numpy", "ann"} & set(seen), seen

            # A recall after the drop starts the rebuild (the reader's, here); once built,
            # recall is served again and finds the imported memories.
            await writer.recall("question 1200", top_k=K, options=SEMANTIC)
            deadline = time.monotonic() + 60
            while not await engine.embedding_index_ready(DIM):
                assert time.monotonic() < deadline, "the rebuild did not finish in 60 s"
                await asyncio.sleep(0.2)
            for store in (writer, reader):
                for query, key in (("question 2010", "m2010"), ("question 3400", "m3400")):
                    hits = await store.recall(query, top_k=K, options=SEMANTIC)
                    assert store.vector_index.last_scan == "served" and hits[0].key == key
            await writer.close()
            await reader.close()

    asyncio.run(main())


def test_a_batch_whose_embeddings_are_refused_leaves_nothing(database: str) -> None:
    rng = np.random.default_rng(9)
    rows = unit(rng.standard_normal((1200, DIM)))
    texts = {f"fact {i}": rows[i] for i in range(1200)}

    async def main() -> None:
        async with SharedMemory(database, Table(texts), namespace="n") as shared:
            store = shared.store("acme")
            await store.import_([{"key": f"f{i}", "content": f"fact {i}"} for i in range(10)])
            before = await store.version()
            table = f"{MEMORY_TABLE}_emb_{DIM}"
            emb_rows = _count(database, f"SELECT count(*) FROM {table}")
            victim = content_hash("fact 600")  # in the middle of the batch
            with psycopg.connect(database, autocommit=True) as conn:
                conn.execute(
                    "CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$ "
                    f"BEGIN IF NEW.hash = '{victim}' THEN "
                    "RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$"
                )
                conn.execute(
                    f"CREATE TRIGGER refuse BEFORE INSERT ON {table} "
                    "FOR EACH ROW EXECUTE FUNCTION refuse_one()"
                )
            batch = [{"key": f"f{i}", "content": f"fact {i}"} for i in range(10, 1200)]
            with pytest.raises(StorageError, match="refused by the test"):
                await store.import_(batch)
            assert await store.version() == before
            assert await store.count() == 10 and await store.get("f11") is None
            assert _count(database, f"SELECT count(*) FROM {table}") == emb_rows
            with psycopg.connect(database, autocommit=True) as conn:
                conn.execute(f"DROP TRIGGER refuse ON {table}")
            assert await store.import_(batch) == 1190
            assert await store.count() == 1200
            assert _count(database, f"SELECT count(*) FROM {table}") == 1200
            await store.close()

    asyncio.run(main())
