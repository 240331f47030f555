"""Recall on a Postgres memory store from pgvector's HNSW (a real Postgres, pgserver).

Past ``served_min_rows`` vectors (lowered here so the test runs in seconds) the vector leg of
recall asks Postgres for candidates from the HNSW index of the memory's embedding table and
rescores them exactly in process (``search/served.py``): the first such recall answers in
process and starts the index's build in the background; once built, recall@10 stays ≥ 0.95 of
the exact top 10, and another tenant's embeddings, placed right next to every query, never
come back.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import psycopg

from evermind.memory import MemoryStore, RecallOptions
from evermind.memory.shared_memory import SharedMemory
from evermind.memory.vector_backend import VectorStoreBackend

DIM, N, QUERIES, K = 16, 3000, 30, 10
SEMANTIC = RecallOptions(lexical=False, mmr=False, importance=False, recency=False)


class Table:
    """An embedder that maps each known text to its vector (no model)."""

    fingerprint = "test-table-v1"

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_recall_from_pgvector_hnsw_keeps_the_exact_top_10_and_the_tenant(database: str) -> None:
    rng = np.random.default_rng(7)
    ours = unit(rng.standard_normal((N, DIM)))
    queries = unit(ours[rng.integers(0, N, QUERIES)] + 0.3 * rng.standard_normal((QUERIES, DIM)))
    theirs = unit(queries + 0.01 * rng.standard_normal((QUERIES, DIM)))  # next to each query
    texts = {f"our memory {i}": ours[i] for i in range(N)}
    texts |= {f"question {j}": queries[j] for j in range(QUERIES)}
    texts |= {f"their memory {j}": theirs[j] for j in range(QUERIES)}
    embedder = Table(texts)

    async def main() -> None:
        async with SharedMemory(database, embedder, namespace="n") as shared:
            rival = shared.store("rival")
            await rival.import_(
                [{"key": f"t{j}", "content": f"their memory {j}"} for j in range(QUERIES)]
            )
            memories = shared.store("acme")
            store = MemoryStore(memories.backend, embedder, served_min_rows=500)
            await store.import_([{"key": f"m{i}", "content": f"our memory {i}"} for i in range(N)])

            # The first recall past the threshold: the index is not built, so the exact scan
            # answers, and the build starts in the background.
            await store.recall("question 0", top_k=K, options=SEMANTIC)
            assert store.vector_index.last_scan == "numpy"
            backend = store.backend
            assert isinstance(backend, VectorStoreBackend)
            deadline = time.monotonic() + 90
            while not await backend._store.embedding_index_ready(DIM):  # type: ignore[attr-defined]
                assert time.monotonic() < deadline, "the HNSW build did not finish in 90 s"
                await asyncio.sleep(0.2)

            recalls = []
            for j in range(QUERIES):
                hits = await store.recall(f"question {j}", top_k=K, options=SEMANTIC)
                assert store.vector_index.last_scan == "served"
                exact = np.argsort(-(ours @ queries[j]), kind="stable")[:K]
                recalls.append(len({f"m{i}" for i in exact} & {h.key for h in hits}) / K)
                # The rival's rows (nearer than any of ours) never come back from the engine.
                hashes = await backend.nearest_hashes(Table.fingerprint, queries[j].tolist(), 64)
                assert hashes is not None and len(hashes) == 64
                mine = {r.content_hash for r in [await store.get(f"m{i}") for i in exact[:3]] if r}
                assert mine <= set(hashes)
            their_hashes = {
                r.content_hash
                for r in [await rival.get(f"t{j}") for j in range(QUERIES)]
                if r is not None
            }
            for j in range(QUERIES):
                found = await backend.nearest_hashes(Table.fingerprint, queries[j].tolist(), 64)
                assert found is not None and not set(found) & their_hashes
            assert float(np.mean(recalls)) >= 0.95, recalls
            assert len(their_hashes) == QUERIES
            await store.close()
            await rival.close()

    asyncio.run(main())


def test_vectors_missing_from_the_embedding_table_keep_recall_in_process(database: str) -> None:
    """Vectors cached before the embedding table existed have no row there: their memories
    could never be candidates, so the store keeps ranking in process (exact) instead."""
    rng = np.random.default_rng(3)
    rows = unit(rng.standard_normal((400, DIM)))
    texts = {f"note {i}": rows[i] for i in range(400)} | {"question": rows[5]}
    embedder = Table(texts)

    async def main() -> None:
        async with SharedMemory(database, embedder, namespace="n") as shared:
            store = MemoryStore(shared.store("acme").backend, embedder, served_min_rows=100)
            await store.import_([{"key": f"k{i}", "content": f"note {i}"} for i in range(400)])
            note5 = await store.get("k5")
            assert note5 is not None
            with psycopg.connect(database, autocommit=True) as conn:
                gone = conn.execute(
                    f"DELETE FROM evermind_memory_emb_{DIM} WHERE hash = %s", [note5.content_hash]
                ).rowcount
            assert gone == 1
            backend = store.backend
            assert isinstance(backend, VectorStoreBackend)
            assert await backend.build_served_index(DIM)
            hits = await store.recall("question", top_k=K, options=SEMANTIC)
            assert store.vector_index.last_scan == "numpy"  # declined: not served
            assert hits[0].key == "k5"  # the memory the table lacks is still found
            await store.close()

    asyncio.run(main())
