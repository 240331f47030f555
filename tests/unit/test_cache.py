"""SemanticCache behaviour: threshold, guards, LRU, TTL, namespaces, fingerprints, stats.

These pin the rule-based decision (``max_error=None``): its threshold and guards. The default,
verified decision is tested in ``test_cache_verified.py``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest

from evermind.cache import SemanticCache
from evermind.errors import ConfigError, ShapeError
from tests import procs

# Fixed unit-ish vectors so every cosine in these tests is known exactly.
VECTORS: dict[str, tuple[float, ...]] = {
    "How do I delete a Docker volume?": (1.0, 0.0, 0.0),
    "How do I remove a Docker volume?": (0.96, 0.28, 0.0),  # cos 0.96 with the first
    "How do I create a Docker volume?": (0.98, 0.0, 0.199),  # cos 0.98: a near-miss
    "Best pizza in Naples": (0.0, 1.0, 0.0),
    "Where to eat pizza in Naples": (0.0, 0.95, 0.312),  # cos 0.95 with the pizza query
    "Weather in Oslo": (0.0, 0.0, 1.0),
}


class TableEmbedder:
    """Looks vectors up in VECTORS and counts calls."""

    fingerprint = "table-v1"

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, text: str) -> Sequence[float]:
        self.calls += 1
        return VECTORS[text]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_cache(**kwargs: object) -> SemanticCache:
    options: dict[str, object] = {"threshold": 0.9, "max_error": None}
    options.update(kwargs)
    return SemanticCache(TableEmbedder(), **options)  # type: ignore[arg-type]


def test_hit_above_threshold_reports_tier_score_and_cached_query() -> None:
    cache = make_cache()
    cache.store("How do I delete a Docker volume?", "docker volume rm NAME")
    found = cache.lookup("How do I remove a Docker volume?")
    assert found.hit and found.tier == "l1"
    assert found.response == "docker volume rm NAME"
    assert found.cached_query == "How do I delete a Docker volume?"
    assert found.score is not None and math.isclose(found.score, 0.96, abs_tol=1e-9)


def test_miss_below_threshold() -> None:
    cache = make_cache(threshold=0.97)
    cache.store("How do I delete a Docker volume?", "docker volume rm NAME")
    found = cache.lookup("How do I remove a Docker volume?")
    assert not found.hit and found.score is None and found.refused_by is None
    assert "threshold" in found.reason


def test_guard_refuses_near_miss_and_names_the_guard() -> None:
    cache = make_cache()
    cache.store("How do I delete a Docker volume?", "docker volume rm NAME")
    found = cache.lookup("How do I create a Docker volume?")
    assert not found.hit
    assert found.refused_by == "operation"
    assert found.score is not None and found.score > 0.97
    assert cache.stats.refusals == {"operation": 1}
    assert cache.stats.misses == 1


def test_without_guard_cosine_alone_serves_the_near_miss() -> None:
    cache = make_cache(guard=None)
    cache.store("How do I delete a Docker volume?", "docker volume rm NAME")
    assert cache.lookup("How do I create a Docker volume?").hit


def test_plain_callable_guard_is_counted_by_its_name() -> None:
    def never(query: str, cached_query: str) -> bool:
        return False

    cache = make_cache(guard=never)
    cache.store("Best pizza in Naples", "Da Michele")
    found = cache.lookup("Where to eat pizza in Naples")
    assert not found.hit and found.refused_by == "never"
    assert cache.stats.refusals == {"never": 1}


def test_refused_best_candidate_is_a_miss_never_a_search_down_the_list() -> None:
    cache = make_cache()
    cache.store("How do I create a Docker volume?", "docker volume create NAME")
    cache.store("How do I remove a Docker volume?", "docker volume rm NAME")
    # The create entry scores higher (0.98) and is refused: guards veto, they do not search,
    # so the lower remove entry (0.96) is not served either.
    found = cache.lookup("How do I delete a Docker volume?")
    assert not found.hit and found.refused_by == "operation"
    assert found.cached_query == "How do I create a Docker volume?"
    assert cache.stats.refusals == {"operation": 1}


def test_get_or_generate_calls_generate_exactly_once_on_a_miss() -> None:
    cache = make_cache()
    calls: list[str] = []

    def generate(query: str) -> str:
        calls.append(query)
        return f"answer to {query}"

    first = cache.get_or_generate("Best pizza in Naples", generate)
    second = cache.get_or_generate("Where to eat pizza in Naples", generate)
    assert calls == ["Best pizza in Naples"]
    assert first.generated and not first.lookup.hit
    assert not second.generated and second.lookup.hit
    assert second.response == "answer to Best pizza in Naples"
    assert (cache.stats.hits_l1, cache.stats.misses, cache.stats.stores) == (1, 1, 1)
    assert cache.stats.hit_rate == 0.5


def test_lru_capacity_evicts_least_recently_used() -> None:
    cache = make_cache(capacity=2)
    cache.store("Best pizza in Naples", "pizza")
    cache.store("Weather in Oslo", "cold")
    assert cache.lookup("Where to eat pizza in Naples").hit  # touches the pizza entry
    cache.store("How do I delete a Docker volume?", "rm")
    assert len(cache) == 2
    assert cache.stats.evictions == 1
    assert not cache.lookup("Weather in Oslo").hit  # the least recently used went
    assert cache.lookup("Best pizza in Naples").hit


def test_ttl_expires_entries() -> None:
    clock = Clock()
    cache = make_cache(ttl=60.0, clock=clock)
    cache.store("Weather in Oslo", "cold")
    clock.now += 59.0
    assert cache.lookup("Weather in Oslo").hit
    clock.now += 2.0
    assert not cache.lookup("Weather in Oslo").hit
    assert cache.stats.expirations == 1 and len(cache) == 0


def test_namespaces_are_isolated_and_invalidate_targets_them() -> None:
    cache = make_cache()
    cache.store("Weather in Oslo", "cold", namespace="alice")
    cache.store("Weather in Oslo", "mild", namespace="bob")
    assert cache.lookup("Weather in Oslo", namespace="alice").response == "cold"
    assert cache.lookup("Weather in Oslo", namespace="bob").response == "mild"
    assert not cache.lookup("Weather in Oslo").hit  # the default namespace is empty
    assert cache.invalidate(namespace="alice") == 1
    assert not cache.lookup("Weather in Oslo", namespace="alice").hit
    assert cache.lookup("Weather in Oslo", namespace="bob").hit
    cache.store("Best pizza in Naples", "pizza", namespace="bob")
    assert cache.invalidate(query="Weather in Oslo") == 1
    assert len(cache) == 1


def test_storing_the_same_query_replaces_the_entry() -> None:
    cache = make_cache()
    cache.store("Weather in Oslo", "cold")
    cache.store("Weather in Oslo", "snowing")
    assert len(cache) == 1
    assert cache.lookup("Weather in Oslo").response == "snowing"


def test_new_embedder_fingerprint_never_serves_old_vectors() -> None:
    cache = make_cache()
    assert cache.fingerprint == "table-v1"
    cache.store("Weather in Oslo", "cold")
    cache.set_embedder(TableEmbedder(), fingerprint="table-v2")
    assert cache.fingerprint == "table-v2"
    assert not cache.lookup("Weather in Oslo").hit
    assert len(cache) == 0


def test_default_fingerprint_falls_back_to_the_callable_name() -> None:
    def embed(text: str) -> Sequence[float]:
        return VECTORS[text]

    cache = SemanticCache(embed)
    assert cache.fingerprint.endswith("embed")


def test_async_get_or_generate_with_async_embedder_and_generator() -> None:
    async def embed(text: str) -> Sequence[float]:
        await asyncio.sleep(0)
        return VECTORS[text]

    calls: list[str] = []

    async def generate(query: str) -> str:
        calls.append(query)
        await asyncio.sleep(0)
        return "Da Michele"

    async def scenario() -> tuple[bool, bool]:
        cache = SemanticCache(embed, threshold=0.9, fingerprint="async-table", max_error=None)
        first = await cache.aget_or_generate("Best pizza in Naples", generate)
        second = await cache.aget_or_generate("Where to eat pizza in Naples", generate)
        return first.generated, second.generated

    assert asyncio.run(scenario()) == (True, False)
    assert calls == ["Best pizza in Naples"]


def test_async_methods_accept_a_sync_generator() -> None:
    cache = make_cache()
    answer = asyncio.run(cache.aget_or_generate("Weather in Oslo", lambda q: "cold"))
    assert answer.generated and answer.response == "cold"
    assert asyncio.run(cache.alookup("Weather in Oslo")).hit


def test_sync_call_with_async_embedder_is_a_config_error() -> None:
    async def embed(text: str) -> Sequence[float]:
        return VECTORS[text]

    cache = SemanticCache(embed, fingerprint="async")
    with pytest.raises(ConfigError, match="async methods"):
        cache.lookup("Weather in Oslo")


@pytest.mark.parametrize(
    "options",
    [{"threshold": 1.5}, {"threshold": "high"}, {"capacity": 0}, {"ttl": -1.0}],
)
def test_invalid_options_raise_config_error(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        make_cache(**options)


def test_bad_queries_and_vectors_are_rejected() -> None:
    cache = make_cache()
    with pytest.raises(ConfigError, match="non-empty query"):
        cache.lookup("   ")
    zero = SemanticCache(lambda text: [0.0, 0.0], fingerprint="zero")
    with pytest.raises(ShapeError, match="non-zero"):
        zero.lookup("anything")


def test_cache_modules_are_browser_safe() -> None:
    """Every evermind.cache module imports with numpy and wgpu blocked, but those that say
    they are native-only (the numpy index and the runtime's L2 stores, which the tab never
    loads)."""
    import ast
    import sys
    from pathlib import Path

    import evermind.cache

    folder = Path(evermind.cache.__file__).parent
    native = sorted(
        path.stem
        for path in folder.glob("*.py")
        if "native-only" in (ast.get_docstring(ast.parse(path.read_text("utf-8"))) or "")
    )
    assert {"l2_sqlite", "l2_vectorstore"} <= set(native)  # the filter reads them
    code = (
        "import sys; sys.modules['numpy'] = None; sys.modules['wgpu'] = None\n"
        "import importlib, pkgutil, evermind.cache as c\n"
        "for m in pkgutil.iter_modules(c.__path__):\n"
        f"    if m.name not in {native!r}:\n"
        "        importlib.import_module('evermind.cache.' + m.name)\n"
        "print('ok')\n"
    )
    done = procs.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
