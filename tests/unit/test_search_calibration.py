"""search.calibration: the cache's threshold, memory's floor and trust, the relevance floor."""

from __future__ import annotations

import math
import random

import pytest

from evermind.search.calibration import (
    FLOOR,
    FLOOR_MARGIN,
    FLOOR_MIN_MEMORIES,
    FLOOR_SAMPLE,
    MARGIN,
    MAX_TRUST,
    MIN_CALIBRATION,
    QUANTILE,
    UNCALIBRATED,
    below_floor,
    calibrate,
    calibration_pairs,
    measure_calibration,
    quantile,
    relevance_calibration,
    sample_indices,
    stale,
)
from evermind.search.cosine import pairwise_cosines


def test_calibration_reads_only_word_disjoint_pairs_unless_too_few() -> None:
    templated = [f"Order {n}: what is the delivery status?" for n in range(10)]
    unrelated = [
        "capital of peru",
        "boil an egg",
        "python list reverse",
        "tax deadline 2024",
        "mars distance",
        "git undo commit",
        "bake sourdough bread",
        "rust borrow checker",
        "knit a scarf",
    ]
    pairs = calibration_pairs(templated + unrelated)
    # No pair of two templated questions (they share words) is read as unrelated.
    assert not any(i < 10 and j < 10 for i, j in pairs)
    assert len(pairs) >= MIN_CALIBRATION * (MIN_CALIBRATION - 1) // 2
    # A cache of one template has too few disjoint pairs: every pair, as before.
    assert len(calibration_pairs(templated)) == 45


def test_quantile_is_nearest_rank() -> None:
    ordered = [float(v) for v in range(101)]
    assert quantile(ordered, 0.99) == 99.0
    assert quantile(ordered, 0.0) == 0.0 and quantile(ordered, 1.0) == 100.0
    assert quantile([0.1, 0.2, 0.3], 0.99) == 0.3  # rounds up past the last rank
    assert quantile([0.5], 0.5) == 0.5


def test_calibrate_reads_the_quantile_plus_margin_never_below_the_floor() -> None:
    pairs = MIN_CALIBRATION * (MIN_CALIBRATION - 1) // 2
    assert calibrate([0.2] * (pairs - 1)) == UNCALIBRATED
    spread = [i / 1000 for i in range(600)] + [float("nan"), float("inf")]
    found = calibrate(spread)
    assert found.pairs == 600  # non-finite cosines are left out
    assert found.unrelated == quantile(sorted(spread[:600]), QUANTILE)
    assert found.threshold == pytest.approx(found.unrelated + MARGIN)
    assert not found.collapsed and "calibrated" in found.words
    low = calibrate([0.0] * pairs)
    assert low.threshold == FLOOR
    collapsed = calibrate([0.99] * pairs)
    assert collapsed.collapsed and "does not separate" in collapsed.words


def test_stale_and_sample_indices() -> None:
    assert not stale(0, MIN_CALIBRATION - 1) and stale(0, MIN_CALIBRATION)
    assert not stale(100, 80) and not stale(100, 125)
    assert stale(100, 79) and stale(100, 126)
    assert sample_indices(5, 96) == [0, 1, 2, 3, 4]
    spread = sample_indices(1000, 96)
    assert len(spread) == 96 == len(set(spread)) and spread[0] == 0 and spread[-1] < 1000


def test_measure_calibration_scores_the_sampled_disjoint_pairs() -> None:
    rng = random.Random(4)
    queries = [f"topic{n} word{n} thing{n}" for n in range(150)]
    vectors = []
    for _ in queries:
        raw = [rng.gauss(0.0, 1.0) for _ in range(24)]
        norm = math.sqrt(sum(x * x for x in raw))
        vectors.append([x / norm for x in raw])
    asked: list[tuple[list[int], list[tuple[int, int]]]] = []

    def cosines(chosen: list[int], pairs: list[tuple[int, int]]) -> list[float]:
        asked.append((chosen, pairs))
        return pairwise_cosines([vectors[i] for i in chosen], pairs)

    found = measure_calibration(queries, cosines, limit=40)
    ((chosen, pairs),) = asked
    assert chosen == sample_indices(150, 40)
    assert pairs == calibration_pairs([queries[i] for i in chosen])
    assert found == calibrate(pairwise_cosines([vectors[i] for i in chosen], pairs))
    assert found.pairs == 40 * 39 // 2
    # One query or none: nothing is scored.
    assert measure_calibration(queries[:1], cosines) == UNCALIBRATED and len(asked) == 1


def _topic_item(topic: int, n: int) -> tuple[list[float], frozenset[str]]:
    vector = [0.0] * 8
    vector[topic] = 1.0
    vector[7] = 0.01 * n
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector], frozenset({f"topic{topic}", f"item{topic}-{n}"})


def test_relevance_calibration_floor_and_trust() -> None:
    items = {f"m{t}-{n}": _topic_item(t, n) for t in range(6) for n in range(4)}
    keys = list(items)

    def cosine(a: str, b: str) -> float:
        return sum(x * y for x, y in zip(items[a][0], items[b][0], strict=True))

    def terms(key: str) -> frozenset[str]:
        return items[key][1]

    found = relevance_calibration(keys, cosine, terms)
    assert found is not None
    cosines = [cosine(a, b) for i, a in enumerate(keys) for b in keys[i + 1 :]]
    assert found.pairs == len(cosines) == 24 * 23 // 2
    assert found.floor == quantile(sorted(cosines), 0.99) + FLOOR_MARGIN
    # Same topic: high cosine and a shared term; other topics: neither. Trust is capped.
    assert found.correlation > 0.9 and found.trust == MAX_TRUST

    # Cosines that ignore the terms: no correlation worth trusting.
    rng = random.Random(1)
    noise = {frozenset((a, b)): rng.uniform(0.98, 1.0) for a in keys for b in keys}
    unrelated = relevance_calibration(keys, lambda a, b: noise[frozenset((a, b))], terms)
    assert unrelated is not None and unrelated.trust == 0.0

    assert relevance_calibration(keys[: FLOOR_MIN_MEMORIES - 1], cosine, terms) is None


def test_relevance_calibration_samples_every_nth_key() -> None:
    keys = [f"k{n:04d}" for n in range(3 * FLOOR_SAMPLE + 5)]
    seen: set[str] = set()

    def cosine(a: str, b: str) -> float:
        seen.update((a, b))
        return 0.0

    relevance_calibration(keys, cosine, lambda key: frozenset())
    assert sorted(seen) == keys[::3][:FLOOR_SAMPLE]


def test_below_floor_needs_no_lexical_match_and_no_cosine_above_the_floor() -> None:
    calls: list[int] = []

    def floor() -> float | None:
        calls.append(1)
        return 0.5

    assert not below_floor([0.0, 1.2], [0.1], floor) and not calls  # a shared term decides
    assert not below_floor([], [], floor) and not calls  # nothing ranked either way
    assert below_floor([0.0], [0.2, 0.5], floor)  # at the floor is not above it
    assert not below_floor([], [0.2, 0.51], floor)
    assert not below_floor([], [0.1], lambda: None)  # too few memories to measure
