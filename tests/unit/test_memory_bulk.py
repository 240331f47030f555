"""Bulk writes into the memory store's SQLite backend: one embedding call, one transaction.

A batch is embedded in one call (its (N, D) array normalised in one vectorised pass), written
in one ``BEGIN IMMEDIATE`` transaction, and its vectors go straight into the index (recall
does not fetch them back); a batch that fails half-way inside SQLite leaves nothing of itself,
on disk or in the store's snapshot and index.
"""

from __future__ import annotations

import asyncio
import sqlite3
from array import array
from pathlib import Path

import numpy as np
import pytest

from evermind.errors import ShapeError, StorageError
from evermind.memory import MemoryStore, RecallOptions
from evermind.memory.embedder import as_embedder
from evermind.search.cosine import normalise

DIM = 16
SEMANTIC = RecallOptions(lexical=False, mmr=False, importance=False, recency=False)


class CountingEmbedder:
    """A seeded vector per text (stable across calls); counts calls and texts."""

    fingerprint = "bulk-test-v1"

    def __init__(self) -> None:
        self.calls = 0
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        rows = [np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(DIM) for t in texts]
        return np.asarray(rows, dtype=np.float32) * 3.0  # not unit: the store normalises


def _entries(n: int, start: int = 0) -> list[dict[str, object]]:
    return [
        {"key": f"m{i}", "content": f"memory number {i} about topic {i % 17}"}
        for i in range(start, start + n)
    ]


def test_a_bulk_import_is_one_embedding_call_and_lands_in_the_index(tmp_path: Path) -> None:
    async def main() -> None:
        model = CountingEmbedder()
        async with MemoryStore(tmp_path / "m.db", model) as store:
            assert await store.import_(_entries(3000)) == 3000
            assert model.calls == 1 and model.texts == 3000  # one call for the batch
            assert len(store.vector_index) == 3000  # indexed by the write itself
            hits = await store.recall("memory number 42 about topic 8", top_k=3, options=SEMANTIC)
            assert hits[0].key == "m42" and hits[0].signals["cosine"] == pytest.approx(1.0)
            assert model.texts == 3000  # nothing embedded again (the query is m42's text)
            await store.recall("a query never written", top_k=3, options=SEMANTIC)
            assert model.texts == 3001  # only the new query
            assert await store.count() == 3000

    asyncio.run(main())


def test_a_bulk_write_that_fails_half_way_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "m.db"

    async def main() -> None:
        async with MemoryStore(path, CountingEmbedder()) as store:
            await store.import_(_entries(10))
            before = await store.version()
            # Refuse one row in the middle of the batch, inside SQLite's transaction.
            conn = sqlite3.connect(path)
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON memories WHEN NEW.key = 'm2500' "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
            conn.commit()
            with pytest.raises(StorageError, match="refused by the test"):
                await store.import_(_entries(5000, start=10))
            assert await store.version() == before
            assert await store.get("m11") is None and await store.get("m4000") is None
            assert await store.count() == 10
            assert {h.key for h in await store.recall("memory number 11", top_k=20)} <= {
                f"m{i}" for i in range(10)
            }
            conn.execute("DROP TRIGGER refuse")
            conn.commit()
            conn.close()
            assert await store.import_(_entries(5000, start=10)) == 5000
            assert await store.count() == 5010
        rows = sqlite3.connect(path).execute("SELECT COUNT(*) FROM memories").fetchone()
        assert rows == (5010,)

    asyncio.run(main())


def test_an_array_embedding_is_normalised_as_row_by_row() -> None:
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((50, DIM)).astype(np.float32) * 7
    matrix[7] = 0.0  # a zero row stays zero, as normalise leaves it

    async def main() -> None:
        fast = await as_embedder(lambda texts: matrix[: len(texts)], "f").embed(["t"] * 50)
        slow = await as_embedder(lambda texts: matrix[: len(texts)].tolist(), "s").embed(["t"] * 50)
        assert all(isinstance(v, array) and v.typecode == "f" for v in fast)
        difference = max(
            abs(a - b) for u, v in zip(fast, slow, strict=True) for a, b in zip(u, v, strict=True)
        )
        print(f"vectorised vs row-by-row: max |difference| {difference:.2e}")
        assert difference <= 1e-7
        assert list(fast[7]) == list(normalise(matrix[7].tolist())) == [0.0] * DIM

        bad = matrix.copy()
        bad[3, 2] = np.nan
        with pytest.raises(ShapeError, match="NaN or infinity"):
            await as_embedder(lambda texts: bad[: len(texts)], "n").embed(["t"] * 50)
        with pytest.raises(ShapeError, match="expected 50 vectors"):
            await as_embedder(lambda texts: matrix[:49], "w").embed(["t"] * 50)

    asyncio.run(main())
