"""Hybrid fusion: z-scored convex mix weighted by the embedder's measured trust.

An informative embedder (its cosines between stored memories agree with their shared words)
lifts a memory only it finds above weak lexical matches; a collapsed one (constant vector plus
noise) gets weight 0 and the ranking is exactly the lexical one; the relevance floor still
returns nothing for unrelated questions with either.
"""

from __future__ import annotations

import random
import zlib

import pytest

from evermind.memory import InMemoryBackend, MemoryStore, RecallOptions
from evermind.memory.recall import calibration
from evermind.search.calibration import MAX_TRUST
from tests.unit.test_memory_helpers import run

#: Eight topics; each memory uses its topic's first words, queries may use the synonyms.
TOPICS = [
    ["solver", "route", "timeout", "optimiser"],
    ["database", "replica", "postgres", "datastore"],
    ["editor", "neovim", "plugin", "ide"],
    ["coffee", "espresso", "milk", "caffeine"],
    ["deploy", "release", "rollout", "shipping"],
    ["invoice", "billing", "payment", "accounting"],
    ["holiday", "leave", "vacation", "absence"],
    ["laptop", "keyboard", "monitor", "hardware"],
]
#: Words only memories carry: the query below shares "weekly" with the noise memories.
NOISE_WORD = "weekly"


def _memories() -> dict[str, str]:
    out = {}
    for t, words in enumerate(TOPICS):
        for i in range(3):
            extra = f" {NOISE_WORD} summary" if t in (4, 5) else f" item{i}"
            out[f"t{t}-{i}"] = f"{words[0]} {words[1]} {words[2]} note{t}{i}{extra}"
    return out


def topic_vector(text: str) -> list[float]:
    """An informative embedder: topic words (and their synonyms) point the same way."""
    tokens = text.lower().replace("?", " ").split()
    rng = random.Random(zlib.crc32(text.encode("utf-8")))
    vec = [0.05 * rng.gauss(0.0, 1.0) for _ in range(len(TOPICS) + 8)]
    for t, words in enumerate(TOPICS):
        vec[t] += sum(tok in words for tok in tokens)
    return vec


def collapsed_vector(text: str) -> list[float]:
    """A collapsed embedder: one constant direction plus small per-text noise."""
    rng = random.Random(zlib.crc32(text.encode("utf-8")))
    return [1.0 + 0.02 * rng.gauss(0.0, 1.0) for _ in range(32)]


def _batch(vector: object) -> object:
    def embed(texts: list[str]) -> list[list[float]]:
        return [vector(t) for t in texts]  # type: ignore[operator]

    return embed


NO_EXTRAS = RecallOptions(mmr=False, importance=False, recency=False)


async def _store(embedder: object | None) -> MemoryStore:
    fingerprint = None if embedder is None else f"test-{id(embedder)}"
    store = MemoryStore(InMemoryBackend(), embedder, fingerprint=fingerprint, options=NO_EXTRAS)
    for key, content in _memories().items():
        await store.remember(key, content)
    return store


def test_trust_is_high_for_an_informative_embedder_and_zero_for_a_collapsed_one() -> None:
    async def body() -> tuple[float, float]:
        good = await _store(_batch(topic_vector))
        bad = await _store(_batch(collapsed_vector))
        try:
            await good.recall("warm up", top_k=1)
            await bad.recall("warm up", top_k=1)
            good_cal, bad_cal = calibration(good.snapshot()), calibration(bad.snapshot())
            assert good_cal is not None and bad_cal is not None
            return good_cal.trust, bad_cal.trust
        finally:
            await good.close()
            await bad.close()

    good, bad = run(body())
    assert good == MAX_TRUST
    assert bad == 0.0


def test_an_informative_embedder_lifts_a_memory_only_it_finds_above_lexical_noise() -> None:
    # "caffeine" is a synonym only the embedder knows (topic 3's memories say "coffee espresso
    # milk", never "caffeine"); "weekly" is lexical noise (the memories of topics 4 and 5).
    query = f"{NOISE_WORD} caffeine habit?"

    async def body() -> tuple[list[str], list[str], str]:
        lexical = await _store(None)
        hybrid = await _store(_batch(topic_vector))
        try:
            lex = [h.key for h in await lexical.recall(query, top_k=5)]
            hits = await hybrid.recall(query, top_k=5)
            for hit in hits:
                assert 0.0 < hit.score <= 1.0
            return lex, [h.key for h in hits], hits[0].ranked_by
        finally:
            await lexical.close()
            await hybrid.close()

    lex, hyb, label = run(body())
    assert lex and all(key.startswith(("t4-", "t5-")) for key in lex)  # only the noise word
    assert hyb[0].startswith("t3-")  # the coffee memories, which share no word with the query
    assert label.startswith(f"semantic+lexical; convex w={MAX_TRUST:.2f} (measured trust)")


def test_a_collapsed_embedder_leaves_the_lexical_ranking_unchanged() -> None:
    queries = [
        f"{NOISE_WORD} summary of the rollout",
        "solver timeout note00",
        "which editor plugin?",
        "postgres replica database",
    ]

    async def body() -> None:
        lexical = await _store(None)
        hybrid = await _store(_batch(collapsed_vector))
        try:
            for query in queries:
                lex = await lexical.recall(query, top_k=24)
                hyb = await hybrid.recall(query, top_k=24)
                assert lex, query
                assert [h.key for h in hyb[: len(lex)]] == [h.key for h in lex], query
                for a, b in zip(hyb, lex, strict=False):
                    assert a.score == pytest.approx(b.score, rel=1e-9), query
                assert all(h.score <= 1e-8 for h in hyb[len(lex) :])  # shares no term
                assert "convex w=0.00 (measured trust)" in hyb[0].ranked_by
        finally:
            await lexical.close()
            await hybrid.close()

    run(body())


def test_asking_for_more_hits_does_not_reorder_the_best() -> None:
    """The z-scores' statistics come from the fixed candidate pool, not from ``k``."""
    options = RecallOptions(mmr=False, importance=False, recency=False, candidate_pool=4)

    async def body() -> None:
        store = await _store(_batch(topic_vector))
        try:
            for query in (f"{NOISE_WORD} caffeine habit?", "solver optimiser", "ide plugin"):
                few = await store.recall(query, top_k=3, options=options)
                many = await store.recall(query, top_k=24, options=options)
                assert [h.key for h in many[:3]] == [h.key for h in few], query
        finally:
            await store.close()

    run(body())


@pytest.mark.parametrize("vector", [topic_vector, collapsed_vector])
def test_unrelated_questions_return_nothing_with_either_embedder(vector: object) -> None:
    async def body() -> None:
        store = await _store(_batch(vector))
        try:
            for query in ("favourite pizza topping", "what is the capital of Peru"):
                assert await store.recall(query) == [], query
            hits = await store.recall("note31", top_k=3)  # an exact token still wins
            assert hits[0].key == "t3-1"
        finally:
            await store.close()

    run(body())
