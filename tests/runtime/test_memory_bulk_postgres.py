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
from psycopg import sql

from evermind.errors import StorageError
from evermind.memory.shared_memory import shared_memory
from evermind.vectorstore import open_store
from evermind.vectorstore.clock import SIGNATURE_DIM
from evermind.vectorstore.filters import And, Eq, In
from evermind.vectorstore.pgvector import LOOKUP_FIELDS, PgVectorStore
from evermind.vectorstore.port import AccessScope
from evermind.vectorstore.shared import CLOCK_TABLE, MEMORY_TABLE

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


def test_the_memory_table_has_no_vector_index_and_a_vector_store_has_both(postgres: str) -> None:
    async def main() -> None:
        async with shared_memory(postgres, embed, tenant="acme", namespace="n") as store:
            await store.import_(_entries(5))
        assert "hnsw" not in await _indexes(postgres, MEMORY_TABLE)
        assert "gin" in await _indexes(postgres, MEMORY_TABLE)  # the hooks' text search
        assert "gin" not in await _indexes(postgres, CLOCK_TABLE)
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


def test_a_batch_lookup_by_key_or_by_hash_is_an_index_scan(postgres: str) -> None:
    """The lookups each bulk write runs (the batch's keys; the vector cache's hashes) read
    through the partial indexes on ``metadata -> 'key'`` / ``'hash'``, not the whole table
    (which held a load to 860 memories/s over 10⁵): EXPLAIN of the store's own count and
    query statements, with the backend's own filters, on a table of 30 000 rows."""

    async def main() -> None:
        table = await open_store(postgres, dim=SIGNATURE_DIM, name=MEMORY_TABLE, vector_index=False)
        assert isinstance(table, PgVectorStore)
        try:
            async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:
                cur = await conn.execute(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s",
                    [MEMORY_TABLE],
                )
                defs = dict(await cur.fetchall())
                for field in LOOKUP_FIELDS:
                    name = f"{MEMORY_TABLE}_{field}"
                    assert name in defs, defs
                    assert f"(metadata -> '{field}'::text)" in defs[name]
                    assert f"WHERE (metadata ? '{field}'::text)" in defs[name]
                await conn.execute(
                    f"INSERT INTO {MEMORY_TABLE} "
                    "(id, embedding, text, metadata, tenant, principals, sensitivity) "
                    "SELECT 'plan:' || i, array_fill(1, ARRAY[%s])::real[]::vector, 'x', "
                    "CASE WHEN i %% 2 = 0 THEN jsonb_build_object("
                    "'kind', 'record', 'ns', 'plan', 'key', 'k' || i, 'record', '{}') "
                    "ELSE jsonb_build_object('kind', 'vector', 'fingerprint', 'f', "
                    "'hash', 'h' || i, 'vector', '') END, "
                    "'acme', ARRAY['memory'], 0 FROM generate_series(1, 30000) AS i",
                    [SIGNATURE_DIM],
                )
                await conn.execute(f"ANALYZE {MEMORY_TABLE}")
            scope = AccessScope("acme", frozenset({"memory"}))
            by_key = And(
                (
                    Eq("kind", "record"),
                    Eq("ns", "plan"),
                    In("key", tuple(f"k{i}" for i in range(1, 201))),
                )
            )
            by_hash = And(
                (
                    Eq("kind", "vector"),
                    Eq("fingerprint", "f"),
                    In("hash", tuple(f"h{i}" for i in range(1, 201))),
                )
            )
            for where, index in ((by_key, "key"), (by_hash, "hash")):
                assert await table.count(where, scope) == 100  # half of the 200 exist
                cond, params = table._where(where, scope)
                probe = "[" + ",".join(["1"] * SIGNATURE_DIM) + "]"
                statements = [
                    (sql.SQL("SELECT count(*) FROM {} WHERE {}"), params),
                    (
                        sql.SQL(
                            "SELECT id FROM {} WHERE {} ORDER BY embedding <=> %s::vector LIMIT 100"
                        ),
                        [*params, probe],
                    ),
                ]
                for template, values in statements:
                    statement = template.format(sql.Identifier(MEMORY_TABLE), cond)
                    plan = await table._run(sql.SQL("EXPLAIN ") + statement, values)
                    text = "\n".join(row[0] for row in plan)
                    assert f"{MEMORY_TABLE}_{index}" in text, text
                    assert f"Seq Scan on {MEMORY_TABLE}" not in text, text
        finally:
            await table._run(
                sql.SQL("DELETE FROM {} WHERE id LIKE 'plan:%%'").format(
                    sql.Identifier(MEMORY_TABLE)
                ),
                [],
            )
            await table.close()

    asyncio.run(main())


def test_reads_are_planned_with_their_values_never_prepared(postgres: str) -> None:
    """psycopg prepares a statement run 5 times, and Postgres may then plan it once for any
    parameters: a generic plan cannot hash ``= ANY($1)``, so a bulk write's lookup of 10⁴
    keys compared every row with every key (one batch of a 10⁵ load took 58 s instead of
    ~0.5). The store runs its reads unprepared: after many identical lookups its session
    holds no prepared statement that reads the items (the
    ``set_config`` of ``hnsw.ef_search`` may be)."""

    async def main() -> None:
        async with shared_memory(postgres, embed, tenant="acme", namespace="prep") as store:
            for round_ in range(8):
                await store.import_(_entries(20, start=20 * round_))
                assert await store.get(f"m{20 * round_}") is not None
            assert await store.count() == 160
        table = await open_store(postgres, dim=SIGNATURE_DIM, name=MEMORY_TABLE)
        assert isinstance(table, PgVectorStore)
        try:
            scope = AccessScope("acme", frozenset({"memory"}))
            where = And((Eq("kind", "record"), Eq("ns", "prep"), In("key", ("m1", "m2", "m3"))))
            probe = [1.0] * SIGNATURE_DIM
            for _ in range(8):
                assert await table.count(where, scope) == 3
                assert len(await table.query(probe, 3, where, scope)) == 3
            prepared = await table._run(sql.SQL("SELECT statement FROM pg_prepared_statements"), [])
            assert not [row for row in prepared if "metadata" in row[0]], prepared
        finally:
            await table.close()

    asyncio.run(main())
