"""The embedded engine's own bookkeeping: rows appended and moved, ACLs judged once, and a
SQLite batch written all or nothing.

The shared engine suite (tests/runtime/test_vectorstore_engines.py) checks the port's
contract on every engine; these check what only the in-process store does: a matrix that
grows by doubling and a delete that moves the last row into the hole must keep every id on
its own vector, and a batch that fails half-way in SQLite must leave no row of it behind.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from evermind.errors import StorageError
from evermind.vectorstore import AccessScope, Acl, Eq, VectorItem
from evermind.vectorstore.inprocess import InProcessStore

DIM = 6
TENANTS = ("acme", "globex")
PRINCIPALS = ("group:a", "group:b")


def _item(rng: random.Random, key: str) -> VectorItem:
    acl = Acl(rng.choice(TENANTS), frozenset({rng.choice(PRINCIPALS)}), rng.randint(0, 2))
    vector = [rng.uniform(-1, 1) for _ in range(DIM)]
    return VectorItem(key, vector, f"text {key}", {"shard": rng.randint(0, 3)}, acl)


def _expected(
    items: dict[str, VectorItem], query: list[float], k: int, scope: AccessScope, shard: int | None
) -> list[str]:
    """The exact answer, from the items alone (no rows, no matrix)."""
    q = np.asarray(query) / np.linalg.norm(query)
    scored = []
    for item in items.values():
        acl = item.acl
        assert acl is not None
        if acl.tenant != scope.tenant or not acl.principals & scope.principals:
            continue
        if acl.sensitivity > scope.max_sensitivity:
            continue
        if shard is not None and item.metadata["shard"] != shard:
            continue
        v = np.asarray(item.vector) / np.linalg.norm(item.vector)
        scored.append((-float(v @ q), item.id))
    return [key for _, key in sorted(scored)[:k]]


def test_random_upserts_and_deletes_keep_every_id_on_its_own_vector() -> None:
    """400 random batches of upserts (new and replaced ids, ACL changes) and deletes; after
    each, queries under random scopes and filters equal the exact answer of the items."""
    rng = random.Random(7)

    async def main() -> None:
        store = InProcessStore(DIM)
        model: dict[str, VectorItem] = {}
        for _ in range(400):
            if model and rng.random() < 0.35:
                gone = rng.sample(sorted(model), rng.randint(1, min(5, len(model))))
                assert await store.delete([*gone, "never-there"]) == len(gone)
                for key in gone:
                    del model[key]
            else:
                batch = {}
                for _ in range(rng.randint(1, 6)):
                    key = f"k{rng.randint(0, 120)}"
                    batch[key] = _item(rng, key)
                await store.upsert(list(batch.values()))
                model.update(batch)
            scope = AccessScope(
                rng.choice(TENANTS), frozenset(rng.sample(PRINCIPALS, 1)), rng.randint(0, 2)
            )
            shard = rng.choice([None, 0, 1, 2, 3])
            query = [rng.uniform(-1, 1) for _ in range(DIM)]
            k = rng.randint(1, 8)
            hits = await store.query(query, k, None if shard is None else Eq("shard", shard), scope)
            assert [h.id for h in hits] == _expected(model, query, k, scope, shard)
            assert await store.count(None, scope) == len(
                _expected(model, query, 10**6, scope, None)
            )
        assert len(store._ids) == len(model)

    asyncio.run(main())


def test_a_sqlite_batch_that_fails_half_way_leaves_nothing(tmp_path: Path) -> None:
    """A row refused in the middle of a batch (a trigger stands in for a full disk or a
    constraint) rolls the whole batch back: neither the file nor the open store holds any of
    it, and the items written before are intact."""
    path = tmp_path / "vectors.db"
    rng = random.Random(3)
    acme = AccessScope("acme", frozenset(PRINCIPALS), 2)

    async def main() -> None:
        store = InProcessStore(DIM, path)
        kept = [_item(rng, "kept") for _ in range(1)]
        await store.upsert(kept)
        with sqlite3.connect(path) as db:
            db.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON vector_items WHEN NEW.id = 'bad' "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
        batch = [_item(rng, "first"), _item(rng, "bad"), _item(rng, "last")]
        with pytest.raises(StorageError, match="refused by the test"):
            await store.upsert(batch)
        assert sorted(store._items) == ["kept"]
        await store.close()
        reopened = InProcessStore(DIM, path)
        assert sorted(reopened._items) == ["kept"]
        assert (
            await reopened.count(None, AccessScope("globex", frozenset(PRINCIPALS), 2))
            + (await reopened.count(None, acme))
            == 1
        )
        await reopened.close()

    asyncio.run(main())
