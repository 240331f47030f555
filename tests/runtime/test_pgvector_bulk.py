"""The pgvector engine's bulk upsert (COPY into a staging table, one INSERT … ON CONFLICT per
batch) on a real Postgres (pgserver): rows land exactly as written, the last of a repeated id
wins, and a batch that fails inside Postgres leaves nothing half-written."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from evermind.errors import InputError, StorageError
from evermind.vectorstore import AccessScope, Acl, VectorItem
from evermind.vectorstore.pgvector import PgVectorStore

DIM = 8
ACL = Acl("acme", frozenset({"bob", "alice"}), 2)
SCOPE = AccessScope("acme", frozenset({"alice"}), 2)


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real Postgres (pgserver) for the module, stopped at the end."""
    import pgserver

    folder: Path = tmp_path_factory.mktemp("pgbulk")
    server = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def _items(n: int, seed: int, prefix: str = "c") -> list[VectorItem]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return [
        VectorItem(
            f"{prefix}{i}",
            vectors[i].tolist(),
            f"chunk {i} about walrus{seed}",
            {"i": i, "tag": f"t{seed}"},
            ACL,
        )
        for i in range(n)
    ]


def _unit(vector: list[float]) -> np.ndarray:
    """The engine stores vectors normalised (cosine)."""
    array = np.asarray(vector, dtype=np.float64)
    return array / np.linalg.norm(array)


async def _rows(url: str, table: str) -> dict[str, tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            f"SELECT id, embedding::text, text, metadata, tenant, principals, sensitivity, "
            f'tsv::text FROM "{table}"'
        )
        return {row[0]: row[1:] for row in await cur.fetchall()}


async def _with_store(url: str, body: Any) -> None:
    store = await PgVectorStore.open(url, dim=DIM, table=f"b_{uuid.uuid4().hex[:10]}")
    try:
        await body(store)
    finally:
        await store.drop()
        await store.close()


def test_bulk_rows_land_exactly_as_written(postgres: str) -> None:
    items = _items(2500, seed=1)

    async def body(store: PgVectorStore) -> None:
        await store.upsert(items)
        rows = await _rows(postgres, store._name)
        assert len(rows) == 2500
        for item in (items[0], items[1234], items[-1]):
            vector, text, metadata, tenant, principals, sensitivity, tsv = rows[item.id]
            assert np.allclose(json.loads(vector), _unit(item.vector), atol=1e-6)
            assert (text, metadata, tenant) == (item.text, dict(item.metadata), "acme")
            assert (principals, sensitivity) == (["alice", "bob"], 2)
            assert "'walrus1'" in tsv  # the generated tsvector column is filled
        hits = await store.query(items[7].vector, 1, scope=SCOPE)
        assert hits[0].id == items[7].id

    asyncio.run(_with_store(postgres, body))


def test_second_batch_overwrites_only_its_ids_and_a_repeated_id_is_refused(
    postgres: str,
) -> None:
    first, second = _items(3, seed=2), _items(2, seed=3)

    async def body(store: PgVectorStore) -> None:
        await store.upsert(first)
        await store.upsert(second)
        rows = await _rows(postgres, store._name)
        assert len(rows) == 3
        assert rows["c0"][1:3] == (second[0].text, dict(second[0].metadata))
        assert np.allclose(json.loads(rows["c0"][0]), _unit(second[0].vector), atol=1e-6)
        assert rows["c2"][1] == first[2].text  # not in the second batch: untouched
        twice = [VectorItem("n1", second[0].vector, "x", {}, ACL)] * 2
        with pytest.raises(InputError, match=r"twice|n1"):
            await store.upsert(twice)
        assert "n1" not in await _rows(postgres, store._name)

    asyncio.run(_with_store(postgres, body))


def test_a_batch_failing_in_postgres_leaves_nothing_half_written(postgres: str) -> None:
    before = _items(50, seed=4)

    async def body(store: PgVectorStore) -> None:
        await store.upsert(before)
        async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:
            # A real constraint Postgres checks at INSERT time, after the COPY went through.
            table = store._name
            await conn.execute(f"ALTER TABLE \"{table}\" ADD CONSTRAINT no_bad CHECK (id <> 'bad')")
        batch = [*_items(1000, seed=5), VectorItem("bad", [1.0] * DIM, "refused", {}, ACL)]
        with pytest.raises(StorageError, match="no_bad"):
            await store.upsert(batch)
        rows = await _rows(postgres, store._name)
        assert set(rows) == {i.id for i in before}  # no new id from the failed batch
        assert all(rows[i.id][1] == i.text for i in before)  # no overwrite either
        await store.upsert(batch[:-1])  # the connection is usable again afterwards
        assert await store.count(scope=SCOPE) == 1000

    asyncio.run(_with_store(postgres, body))


def test_a_row_refused_during_the_copy_leaves_nothing_written(postgres: str) -> None:
    async def body(store: PgVectorStore) -> None:
        # Postgres' text type refuses a NUL character: the COPY itself fails mid-batch.
        batch = [*_items(500, seed=7), VectorItem("nul", [1.0] * DIM, "a\x00b", {}, ACL)]
        with pytest.raises(StorageError):
            await store.upsert(batch)
        assert await _rows(postgres, store._name) == {}

    asyncio.run(_with_store(postgres, body))


def test_the_scale_bench_builds_the_hnsw_index_after_the_load_on_pgvector() -> None:
    """A tiny pgvector run of benchmarks/vectorstore_scale.py: bulk load, then the index."""
    from benchmarks.vectorstore_scale import build_parser, format_table, run

    args = build_parser().parse_args(
        ["--n", "2000", "--queries", "20", "--batch", "500", "--engines", "pgvector"]
    )
    doc = asyncio.run(run(args))
    (row,) = doc["rows"]
    assert row["loaded"] == 2000 and row["ingest_items_per_s"] > 0
    assert row["index_build_s"] > 0 and row["analyze_s"] > 0
    assert row["recall_at_k"] >= 0.9  # HNSW: approximate, but on clustered data near exact
    assert "+ HNSW" in format_table(doc)
