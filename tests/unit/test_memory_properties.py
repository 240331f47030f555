"""Property tests (hypothesis): TTL and eviction order, import/export round trip."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evermind.memory import InMemoryBackend, MemoryStore
from evermind.memory.sqlite_backend import SQLiteBackend
from tests.unit.test_memory_helpers import run


@dataclass
class ModelEntry:
    importance: float
    updated_at: float
    expires_at: float | None


def model_evict(model: dict[str, ModelEntry], capacity: int, protected: str, now: float) -> None:
    """An independent statement of the eviction rule, for comparison."""
    while len(model) > capacity:
        candidates = [k for k in model if k != protected]
        expired = [k for k in candidates if (e := model[k].expires_at) is not None and e <= now]
        if expired:
            pool = expired
        else:
            low = min(model[k].importance for k in candidates)
            pool = [k for k in candidates if model[k].importance == low]
        oldest = min(model[k].updated_at for k in pool)
        victim = min(k for k in pool if model[k].updated_at == oldest)
        del model[victim]


operation = st.tuples(
    st.sampled_from([f"k{i}" for i in range(6)]),
    st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    st.one_of(st.none(), st.sampled_from([1.0, 3.0, 10.0])),
    st.sampled_from([0.0, 0.5, 2.0]),
)


def _backend(kind: str) -> object:
    return InMemoryBackend() if kind == "memory" else SQLiteBackend(":memory:")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(operation, min_size=1, max_size=25), capacity=st.integers(1, 4))
def test_ttl_and_eviction_follow_the_model(
    kind: str, ops: list[tuple[str, float, float | None, float]], capacity: int
) -> None:
    now = [1000.0]

    async def body() -> None:
        store = MemoryStore(_backend(kind), capacity=capacity, clock=lambda: now[0])  # type: ignore[arg-type]
        model: dict[str, ModelEntry] = {}
        for key, importance, ttl, advance in ops:
            now[0] += advance
            await store.remember(key, f"content of {key}", importance=importance, ttl=ttl)
            expires = None if ttl is None else now[0] + ttl
            model[key] = ModelEntry(importance, now[0], expires)
            model_evict(model, capacity, key, now[0])
            stored = {e["key"] for e in await store.export()} | {
                k for k, e in model.items() if e.expires_at is not None and e.expires_at <= now[0]
            }
            assert stored == set(model)
            for k, entry in model.items():
                visible = await store.get(k) is not None
                alive = entry.expires_at is None or entry.expires_at > now[0]
                assert visible == alive
        now[0] += 100.0
        await store.purge_expired()
        assert {e["key"] for e in await store.export()} == {
            k for k, e in model.items() if e.expires_at is None
        }
        await store.close()

    run(body())


record = st.fixed_dictionaries(
    {
        "content": st.text(min_size=0, max_size=40),
        "tags": st.lists(st.sampled_from(["a", "b", "Team", "ünï"]), max_size=3),
        "importance": st.floats(0.0, 1.0),
        "ttl": st.one_of(st.none(), st.floats(1e3, 1e6)),
    }
)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@settings(max_examples=40, deadline=None)
@given(
    entries=st.dictionaries(st.text(min_size=1, max_size=12).filter(str.strip), record, max_size=8)
)
def test_export_import_round_trip(kind: str, entries: dict[str, dict[str, object]]) -> None:
    async def body() -> None:
        source = MemoryStore(_backend(kind), clock=lambda: 5000.0)  # type: ignore[arg-type]
        for key, e in entries.items():
            await source.remember(key, e["content"], e["tags"], e["importance"], e["ttl"])  # type: ignore[arg-type]
        dump = await source.export()
        for mode in ("overwrite", "merge"):
            target = MemoryStore(_backend(kind), clock=lambda: 5000.0)  # type: ignore[arg-type]
            await target.remember("pre-existing", "x")
            await target.import_(dump, mode=mode)  # type: ignore[arg-type]
            again = await target.export()
            if mode == "overwrite":
                assert again == dump
            else:
                assert [
                    e for e in again if e["key"] != "pre-existing" or "pre-existing" in entries
                ] == dump
            await target.close()
        await source.close()

    run(body())
