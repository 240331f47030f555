"""Rule 6 of the cache decision (contested entries) and the calibration's pairs.

A read-through cache stores every miss, near-misses included. When it holds two questions
that it judged different ("increase iron absorption" and "reduce iron absorption"), a third
text no closer to either than they are to each other cannot be told apart: the lookup is a
miss, in the library's L1, the runtime's L2 and the decision itself.
"""

from __future__ import annotations

import asyncio
import math
import zlib
from pathlib import Path

import pytest

from evermind.cache import SemanticCache
from evermind.cache.decide import CONTEST_MARGIN, Candidate, contested_of, decide
from evermind.cache.l2_sqlite import SemanticCacheStore
from evermind.search.calibration import UNCALIBRATED

INCREASE = "How to increase iron absorption from spinach"
REDUCE = "How to reduce iron absorption from spinach"
PARAPHRASE = "Ways to help my body absorb more iron from spinach"


def unit(*xs: float) -> list[float]:
    norm = math.sqrt(sum(x * x for x in xs))
    return [x / norm for x in xs]


#: INCREASE and REDUCE at cosine 0.96; PARAPHRASE at 0.90 to both (the embedder cannot
#: tell the direction apart, as MiniLM could not on the development set).
VECTORS = {
    INCREASE: unit(1.0, 0.0, 0.0),
    REDUCE: unit(0.96, math.sqrt(1 - 0.96**2), 0.0),
}
_b = (0.90 - 0.90 * 0.96) / math.sqrt(1 - 0.96**2)
VECTORS[PARAPHRASE] = [0.90, _b, math.sqrt(1 - 0.90**2 - _b**2)]


def test_a_contested_best_candidate_is_a_miss_that_says_why() -> None:
    best = Candidate("a", 0.90, INCREASE, "answer a", contested=0.96)
    found = decide(PARAPHRASE, [best], threshold=0.5, calibration=UNCALIBRATED, guard=None)
    assert not found.hit and found.refused_by == "contested"
    assert "0.960" in found.reason and f"{0.96 + CONTEST_MARGIN:.3f}" in found.reason
    clear = Candidate("a", 0.90, INCREASE, "answer a", contested=0.80)
    assert decide(PARAPHRASE, [clear], threshold=0.5, calibration=UNCALIBRATED, guard=None).hit
    # The exact text, and the incoming vector itself, are served whatever the neighbours.
    exact = Candidate("a", 0.97, INCREASE, "answer a", contested=0.99)
    assert decide(INCREASE, [exact], threshold=0.5, calibration=UNCALIBRATED, guard=None).hit
    same = Candidate("a", 1.0, None, "answer a", contested=0.99)
    assert decide(None, [same], threshold=0.5, calibration=UNCALIBRATED, guard=None).hit


def test_contested_of_skips_the_entry_itself_and_equal_answers() -> None:
    near = [(1.0, "a", "x"), (0.97, "b", "x"), (0.93, "c", "y"), (0.5, "d", "z")]
    assert contested_of(near, "a", "x") == 0.93
    assert contested_of([(1.0, "a", "x")], "a", "x") is None


def test_the_l1_cache_refuses_a_paraphrase_once_its_near_miss_is_stored() -> None:
    cache = SemanticCache(
        VECTORS.__getitem__, fingerprint="test", guard=None, threshold=0.5, max_error=None
    )
    cache.store(INCREASE, "eat it with vitamin C")
    assert cache.lookup(PARAPHRASE).hit  # alone, the nearest question is served
    cache.store(REDUCE, "eat it with calcium")  # a read-through cache stores the near-miss
    found = cache.lookup(PARAPHRASE)
    assert not found.hit and found.refused_by == "contested"
    assert cache.lookup(INCREASE).response == "eat it with vitamin C"  # exact still served
    # Two entries holding the same answer do not contest each other.
    same = SemanticCache(
        VECTORS.__getitem__, fingerprint="same", guard=None, threshold=0.5, max_error=None
    )
    same.store(INCREASE, "one answer")
    same.store(REDUCE, "one answer")
    assert same.lookup(PARAPHRASE).hit


def test_a_store_after_its_lookup_sees_the_index_as_it_is_then() -> None:
    # A miss's store reuses its lookup's neighbours only while the index is unchanged.
    cache = SemanticCache(
        VECTORS.__getitem__, fingerprint="memo", guard=None, threshold=0.5, max_error=None
    )
    cache.store(INCREASE, "eat it with vitamin C")
    cache.lookup(REDUCE)  # its neighbours (INCREASE) are remembered
    assert cache.invalidate(query=INCREASE) == 1  # gone before REDUCE's answer is stored
    cache.store(REDUCE, "eat it with calcium")  # nothing left to contest it
    assert [e.contested for e in cache._entries.values()] == [None]
    cache.store(INCREASE, "eat it with vitamin C")  # stored in between ...
    cache.lookup(PARAPHRASE)
    cache.store(PARAPHRASE, "eat it with vitamin C")
    contested = {e.query: e.contested for e in cache._entries.values()}
    assert contested[INCREASE] == contested[REDUCE] == pytest.approx(0.96)


def test_the_runtime_l2_measures_the_contest_at_lookup(tmp_path: Path) -> None:
    async def run() -> tuple[object, object]:
        store = SemanticCacheStore(tmp_path / "l2.db", 1000)
        try:
            await store.store("t", "ns", VECTORS[INCREASE], "vitamin C", None, INCREASE)
            alone = await store.lookup("t", "ns", VECTORS[PARAPHRASE], 0.5, PARAPHRASE, None)
            await store.store("t", "ns", VECTORS[REDUCE], "calcium", None, REDUCE)
            both = await store.lookup("t", "ns", VECTORS[PARAPHRASE], 0.5, PARAPHRASE, None)
            return alone, both
        finally:
            store.close()

    alone, both = asyncio.run(run())
    assert alone.hit is not None  # type: ignore[attr-defined]
    assert both.hit is None and "contested" in both.reason  # type: ignore[attr-defined]


@pytest.mark.parametrize("size", [40, 120])
def test_templated_traffic_does_not_raise_the_threshold_to_repeats_only(size: int) -> None:
    """The calibration of a cache whose stored queries are mostly one template."""
    import random

    rng = random.Random(size)
    words = [f"w{n}" for n in range(400)]
    queries = [f"order {n} what is the status" for n in range(size)]
    queries += [" ".join(rng.sample(words, 4)) for _ in range(60)]

    def embed(text: str) -> list[float]:  # bag of hashed words: templated texts score high
        vector = [0.0] * 64
        for word in text.split():
            vector[zlib.crc32(word.encode()) % 64] += 1.0
        return unit(*vector)

    cache = SemanticCache(embed, fingerprint="t", guard=None, max_error=None)
    for n, query in enumerate(queries):
        cache.store(query, n)
    assert cache.calibration.threshold is not None
    assert cache.calibration.threshold < 0.6  # templated pairs would put it at about 0.85
