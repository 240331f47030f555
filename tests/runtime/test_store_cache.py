"""The L2 cache on the vector-store port (``VectorCacheStore``), without HTTP in between.

Two caches on two :class:`SharedStore` s of one Postgres database stand for two runtimes: an
entry stored by one is a hit of the other, the oldest beyond ``max_entries`` go for both, and
a hit on an entry the other deleted meanwhile is a miss. A property with random tenants,
namespaces and embeddings, on ``memory://`` and Postgres: a lookup never serves an entry of
another tenant or namespace. And dimensions are each tenant's own: one table holds every
dimension, so no tenant's embedders limit another's; a count over every dimension.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evermind.cache.l2_vectorstore import VectorCacheStore
from evermind.runtime.gateway.core import StoreBackend
from evermind.vectorstore.shared import SharedStore
from tests.unit.test_memory_helpers import run


def _database(url: str) -> str:
    name = f"evermind_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@pytest.fixture(scope="module")
def database(postgres: str) -> str:
    return _database(postgres)


def _close(*shared: SharedStore) -> None:
    async def body() -> None:
        for store in shared:
            await store.close()

    run(body())


def test_two_runtimes_share_entries_and_evictions(database: str) -> None:
    one, other = SharedStore(database), SharedStore(database)
    first, second = VectorCacheStore(one, max_entries=3), VectorCacheStore(other, max_entries=3)
    try:

        async def body() -> None:
            vectors = np.eye(6, dtype=np.float32)
            await first.store("acme", "ns", vectors[0].tolist(), "zero", None, "q zero")
            hit = await second.lookup("acme", "ns", vectors[0].tolist(), 0.9, "q zero")
            assert hit.hit is not None and hit.hit["response"] == "zero"
            for n in range(1, 5):
                await first.store("acme", "ns", vectors[n].tolist(), f"r{n}", {"n": n}, f"q {n}")
            assert await first.count("acme") == 3 == await second.count("acme")
            # The second runtime still indexes entry 0 until it catches up and trims...
            gone = await second.lookup("acme", "ns", vectors[0].tolist(), 0.9, "q zero")
            assert gone.hit is None
            late = await second.lookup("acme", "ns", vectors[4].tolist(), 0.9, "q 4")
            assert late.hit is not None and late.hit["response"] == "r4"
            assert late.hit["meta"] == {"n": 4}

        run(body())
    finally:
        _close(one, other)


def test_a_hit_on_an_entry_the_other_runtime_deleted_is_a_miss(database: str) -> None:
    one, other = SharedStore(database), SharedStore(database)
    # The first keeps 2 entries, the second (configured otherwise) up to 10.
    first, second = VectorCacheStore(one, max_entries=2), VectorCacheStore(other, max_entries=10)
    try:

        async def body() -> None:
            a, b, c = ([1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0])
            await first.store("acme", "del", a, "a", None, "qa")
            assert (await second.lookup("acme", "del", a, 0.9, "qa")).hit is not None
            await first.store("acme", "del", b, "b", None, "qb")
            await first.store("acme", "del", c, "c", None, "qc")  # deletes "a" in the store
            # The second still indexes "a" (its own limit is 10), but cannot serve it.
            missed = await second.lookup("acme", "del", a, 0.9, "qa")
            assert missed.hit is None and "evicted by another runtime" in missed.reason
            # ... and the next lookup rebuilds its index from the store: "c" served, "a" gone.
            assert (await second.lookup("acme", "del", c, 0.9, "qc")).hit is not None
            again = await second.lookup("acme", "del", a, 0.9, "qa")
            assert again.hit is None and "evicted" not in again.reason

        run(body())
    finally:
        _close(one, other)


@pytest.fixture(params=["memory", "pgvector"])
def cache(request: pytest.FixtureRequest) -> Iterator[VectorCacheStore]:
    url = (
        "memory://" if request.param == "memory" else _database(request.getfixturevalue("postgres"))
    )
    shared = SharedStore(url)
    yield VectorCacheStore(shared, max_entries=1000)
    _close(shared)


def test_dimensions_are_the_tenant_s_own(cache: VectorCacheStore) -> None:
    """One tenant's many embedders (12 dimensions) neither limit another's 384-d entries nor
    show in what it is told; entries of one dimension never meet another's, and every count
    is the tenant's own."""
    tag = uuid.uuid4().hex[:8]

    async def body() -> None:
        for dim in range(2, 14):
            await cache.store(f"alpha-{tag}", "d", [1.0] * dim, dim, None, f"q{dim}")
        vector = [float(i % 5) + 1.0 for i in range(384)]
        await cache.store(f"bravo-{tag}", "d", vector, "b384", None, "q")
        found = await cache.lookup(f"bravo-{tag}", "d", vector, 0.9, "q")
        assert found.hit is not None and found.hit["response"] == "b384", found.reason
        assert "dimension" not in found.reason
        other = await cache.lookup(f"alpha-{tag}", "d", [1.0] * 5, 0.9, "q5")
        assert other.hit is not None and other.hit["response"] == 5  # its own dimension's entry
        assert await cache.count(f"alpha-{tag}") == 12
        assert await cache.count(f"bravo-{tag}") == 1

    run(body())


SCOPES = st.tuples(st.sampled_from(["acme", "globex"]), st.sampled_from(["a", "b"]))


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    entries=st.lists(st.tuples(SCOPES, st.integers(0, 5)), min_size=1, max_size=10),
    reader=SCOPES,
    probe=st.integers(0, 5),
)
def test_property_a_lookup_never_serves_another_scope_s_entry(
    cache: VectorCacheStore,
    entries: list[tuple[tuple[str, str], int]],
    reader: tuple[str, str],
    probe: int,
) -> None:
    tag = uuid.uuid4().hex[:8]  # each example in namespaces of its own
    basis = np.eye(6, dtype=np.float32) + 0.01

    async def body() -> None:
        for (tenant, namespace), n in entries:
            response = f"{tenant}|{namespace}|{n}"
            await cache.store(tenant, f"{namespace}-{tag}", basis[n].tolist(), response, None, None)
        found = await cache.lookup(
            reader[0], f"{reader[1]}-{tag}", basis[probe].tolist(), 0.0, None
        )
        mine = {n for scope, n in entries if scope == reader}
        if found.hit is not None:
            tenant, namespace, n = str(found.hit["response"]).split("|")
            assert (tenant, namespace) == reader, "served another scope's entry"
            assert int(n) in mine
        elif probe in mine:
            assert found.reason, "a miss on an entry of one's own says why"

    run(body())


def test_the_gateway_s_write_behind_l2_loses_nothing_on_postgres(database: str) -> None:
    shared = SharedStore(database)
    store = VectorCacheStore(shared, max_entries=1000)

    def vector(i: int) -> list[float]:
        return [1.0 if j == i % 8 else 0.01 * j for j in range(8)]

    async def main() -> tuple[list[bool], int, int]:
        backend = StoreBackend(store)
        seen = []
        for i in range(8):
            # astore returns before the item is written; the lookup right after still finds it.
            await backend.astore(vector(i), {"text": f"answer {i}"}, "gw", None, f"query {i}")
            hit = await backend.alookup(vector(i), 0.99, "gw", f"query {i}")
            seen.append(hit is not None and hit.response == {"text": f"answer {i}"})
        for i in range(20):
            await backend.astore(vector(i), {"n": i}, f"gw-{i % 3}", None, f"q {i}")
        await backend.aflush()
        return seen, await store.count(backend.tenant), backend.failed_writes

    try:
        seen, count, failed = run(main())
    finally:
        _close(shared)
    assert all(seen), seen
    assert count == 28 and failed == 0
