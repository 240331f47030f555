"""Bulk writes into the memory store on Postgres (``--store postgresql://``, pgserver).

The memory table is opened without pgvector's HNSW and GIN indexes (``MemoryStore`` ranks in
process; the per-row HNSW insert bounded a load to ~400 memories/s), while a plain vector
store still gets both. A bulk import is one COPY transaction: a batch refused half-way by
Postgres leaves nothing of itself, and the store reads back exactly what was there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

from evermind.errors import StorageError
from evermind.memory.shared_memory import shared_memory
from evermind.vectorstore import open_store
from evermind.vectorstore.shared import MEMORY_TABLE

DIM = 16


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real Postgres (pgserver) for the module, stopped at the end."""
    import pgserver

    folder: Path = tmp_path_factory.mktemp("pgmembulk")
    server = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def embed(texts: list[str]) -> np.ndarray:
    """A seeded vector per text, as an (N, D) array."""
    rows = [np.random.default_rng(sum(t.encode())).standard_normal(DIM) for t in texts]
    return np.asarray(rows, dtype=np.float32)


def _entries(n: int, start: int = 0) -> list[dict[str, object]]:
    return [
        {"key": f"m{i}", "content": f"memory {i} of topic {i % 13}"}
        for i in range(start, start + n)
    ]


async def _indexes(url: str, table: str) -> set[str]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return {row[0].split(" USING ")[1].split(" ")[0] for row in await cur.fetchall()}


def test_the_memory_table_has_no_search_index_and_a_vector_store_has_both(postgres: str) -> None:
    async def main() -> None:
        async with shared_memory(postgres, embed, tenant="acme", namespace="n") as store:
            await store.import_(_entries(5))
        assert "hnsw" not in await _indexes(postgres, MEMORY_TABLE)
        assert "gin" not in await _indexes(postgres, MEMORY_TABLE)
        chunks = await open_store(postgres, dim=DIM, name="plain_chunks")
        await chunks.close()
        assert {"hnsw", "gin", "btree"} <= await _indexes(postgres, "plain_chunks")

    asyncio.run(main())


def test_a_bulk_write_that_fails_half_way_leaves_nothing(postgres: str) -> None:
    async def main() -> None:
        async with shared_memory(postgres, embed, tenant="acme", namespace="bulk") as store:
            await store.import_(_entries(10))
            before = await store.version()
            async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:
                await conn.execute(
                    "CREATE FUNCTION refuse_m2500() RETURNS trigger LANGUAGE plpgsql AS $$ "
                    "BEGIN IF NEW.metadata->>'key' = 'm2500' THEN "
                    "RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$"
                )
                await conn.execute(
                    f"CREATE TRIGGER refuse BEFORE INSERT ON {MEMORY_TABLE} "
                    "FOR EACH ROW EXECUTE FUNCTION refuse_m2500()"
                )
                with pytest.raises(StorageError, match="refused by the test"):
                    await store.import_(_entries(5000, start=10))
                assert await store.version() == before
                assert await store.get("m11") is None and await store.get("m4999") is None
                assert await store.count() == 10
                await conn.execute(f"DROP TRIGGER refuse ON {MEMORY_TABLE}")
            assert await store.import_(_entries(5000, start=10)) == 5000
            assert await store.count() == 5010
            hits = await store.recall("memory 4321 of topic 5", top_k=1)
            assert hits[0].key == "m4321"

    asyncio.run(main())
