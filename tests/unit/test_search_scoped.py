"""The scoped vector indexes (the L1 cache's): the numpy MatrixIndex returns exactly what the
pure-Python scan returns, and a cache decides the same with either."""

from __future__ import annotations

import math
import random

import pytest

from evermind.bridges.caching import TermEmbedder
from evermind.cache import SemanticCache
from evermind.search.cosine import dot
from evermind.search.matrix import MatrixIndex, selection_margin
from evermind.search.scoped import ScanIndex, Scope, ScopedIndex


def _unit(values: list[float]) -> tuple[float, ...]:
    norm = math.sqrt(sum(x * x for x in values))
    return tuple(x / norm for x in values)


def _random_unit(rng: random.Random, dim: int) -> tuple[float, ...]:
    return _unit([rng.gauss(0.0, 1.0) for _ in range(dim)])


@pytest.mark.parametrize("sequential", [True, False], ids=["cumsum", "per-entry-dot"])
def test_nearest_is_identical_with_ties_near_ties_and_removals(
    sequential: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both rescoring paths: the vectorised one (Python < 3.12) and the per-entry one.
    import evermind.search.matrix as matrix_module

    monkeypatch.setattr(matrix_module, "_SEQUENTIAL_SUM", sequential)
    rng = random.Random(7)
    dim = 37  # not a power of two
    scan, matrix = ScanIndex(), MatrixIndex()
    indexes: list[ScopedIndex] = [scan, matrix]
    scopes: list[Scope] = [("a", "fp", dim), ("b", "fp", dim)]
    base = _random_unit(rng, dim)
    live: list[int] = []
    for key in range(300):
        kind = key % 3
        if kind == 0:
            vector = base  # exact ties: the key breaks them
        elif kind == 1:  # within float32 noise of base: only the exact rescoring orders them
            vector = _unit([x + rng.uniform(-1e-7, 1e-7) for x in base])
        else:
            vector = _random_unit(rng, dim)
        for index in indexes:
            index.add(key, scopes[key % 2], vector)
        live.append(key)
        if key % 7 == 6:  # remove one from the middle: the matrix moves its last row
            gone = live.pop(rng.randrange(len(live)))
            for index in indexes:
                index.remove(gone)
    assert len(scan) == len(matrix) == len(live)
    queries = [base, _unit([x + 1e-8 for x in base]), *(_random_unit(rng, dim) for _ in range(20))]
    for query in queries:
        for scope in scopes:
            for k in (1, 4, 8, 500):
                got, want = matrix.nearest(scope, query, k), scan.nearest(scope, query, k)
                assert got == want, (
                    f"k={k}: first differences {[g for g in got if g not in want][:3]}"
                )
    assert matrix.nearest(("none", "fp", dim), base, 4) == []
    for index in indexes:
        index.clear()
        assert index.nearest(scopes[0], base, 4) == []


def test_selection_margin_covers_the_float32_error() -> None:
    rng = random.Random(3)
    dim = 384
    rows = [_random_unit(rng, dim) for _ in range(200)]
    query = _random_unit(rng, dim)
    index = MatrixIndex()
    for key, row in enumerate(rows):
        index.add(key, ("n", "f", dim), row)
    import numpy as np

    float32 = np.asarray(rows, np.float32) @ np.asarray(query, np.float32)
    worst = max(abs(float(a) - dot(r, query)) for a, r in zip(float32, rows, strict=True))
    print(f"worst float32 error {worst:.3g}, margin {selection_margin(dim):.3g}")
    assert 2 * worst < selection_margin(dim) < 1e-4


def test_calibration_cosines_agree() -> None:
    rng = random.Random(5)
    vectors = [_random_unit(rng, 19) for _ in range(12)]
    pairs = [(i, j) for i in range(12) for j in range(i + 1, 12)]
    got, want = MatrixIndex().cosines(vectors, pairs), ScanIndex().cosines(vectors, pairs)
    assert len(got) == len(want) == len(pairs)
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-12
    mixed = [*vectors[:2], vectors[2][:5]]  # a vector of another length: the scan's rule
    assert MatrixIndex().cosines(mixed, [(0, 1), (0, 2)]) == ScanIndex().cosines(
        mixed, [(0, 1), (0, 2)]
    )


WORDS = [
    "docker",
    "volume",
    "delete",
    "remove",
    "create",
    "image",
    "container",
    "network",
    "port",
    "python",
    "list",
    "sort",
    "reverse",
    "string",
    "join",
    "split",
    "file",
    "read",
    "write",
    "open",
    "close",
    "weather",
    "oslo",
    "pizza",
    "naples",
    "password",
    "reset",
    "account",
    "email",
    "change",
    "update",
    "install",
    "package",
    "version",
    "upgrade",
]


def _workload(seed: int, n: int) -> list[tuple[str, str, str]]:
    """(action, namespace, query): stores and lookups, with repeats, rewordings and
    near-misses of earlier queries."""
    rng = random.Random(seed)
    asked: list[str] = []
    steps = []
    for i in range(n):
        namespace = rng.choice(["t1", "t2"])
        if asked and rng.random() < 0.6:
            words = rng.choice(asked).split()
            change = rng.random()
            if change < 0.3:
                rng.shuffle(words)  # the same terms: the same TermEmbedder vector
            elif change < 0.7:
                words[rng.randrange(len(words))] = rng.choice(WORDS)
            query = " ".join(words)
        else:
            query = " ".join(rng.sample(WORDS, rng.randint(2, 5)))
        steps.append(("lookup", namespace, query))
        if rng.random() < 0.5:
            steps.append(("store", namespace, query))
            asked.append(query)
        if i % 50 == 49:
            steps.append(("tick", namespace, query))
    return steps


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("max_error", [0.01, None])
@pytest.mark.parametrize("dim", [16, 256])
def test_cache_decides_the_same_with_either_index(dim: int, max_error: float | None) -> None:
    """A replay of stores and lookups (two namespaces, TTL expiry, LRU eviction, exact
    score ties from a small TermEmbedder) gets the same lookups from both caches, with the
    verified decision and with the rule-based one."""
    results = []
    for index in (ScanIndex(), MatrixIndex()):
        clock = Clock()
        cache = SemanticCache(
            TermEmbedder(dim), capacity=60, ttl=40.0, clock=clock, index=index, max_error=max_error
        )
        seen = []
        for step, (action, namespace, query) in enumerate(_workload(11, 600)):
            clock.now = step * 0.1
            if action == "store":
                cache.store(query, {"answer": query.split()[0]}, namespace=namespace)
            elif action == "tick":
                clock.now += 5.0
            else:
                seen.append(cache.lookup(query, namespace))
        results.append((seen, cache.stats))
    (scan, scan_stats), (matrix, matrix_stats) = results
    assert scan_stats == matrix_stats
    assert sum(found.hit for found in scan) > 20 and scan_stats.evictions > 0
    # The rule-based decision serves more paraphrases, so entries live (LRU) until they expire.
    assert max_error is not None or scan_stats.expirations > 0
    for a, b in zip(scan, matrix, strict=True):
        # The calibrated threshold comes from cosines summed in another order (a few ulps).
        assert a.threshold is not None and b.threshold is not None
        assert math.isclose(a.threshold, b.threshold, rel_tol=0, abs_tol=1e-12)
        assert (a.hit, a.response, a.tier, a.score, a.cached_query, a.refused_by) == (
            b.hit,
            b.response,
            b.tier,
            b.score,
            b.cached_query,
            b.refused_by,
        )


class CountingEmbedder:
    fingerprint = "counting-v1"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.terms = TermEmbedder(32)

    def __call__(self, text: str) -> list[float]:
        self.calls.append(text)
        return self.terms(text)


def test_a_miss_embeds_its_query_once_and_a_new_embedder_starts_afresh() -> None:
    embed = CountingEmbedder()
    cache = SemanticCache(embed, index=MatrixIndex())
    assert not cache.lookup("how do I delete a docker volume").hit
    cache.store("how do I delete a docker volume", "docker volume rm NAME")
    assert embed.calls == ["how do I delete a docker volume"]  # the store reused the lookup's
    other = CountingEmbedder()
    cache.set_embedder(other, "counting-v1")  # same name, new embedder: nothing reused
    cache.lookup("how do I delete a docker volume")
    assert other.calls == ["how do I delete a docker volume"]
