"""Lexical evidence weighted by the cache's own IDF (``evermind.search.terms.TermStats``).

The rule: once a cache holds ``MIN_IDF_ENTRIES`` stored queries, words shared by many of
them ("python", "file" in a cache of Python questions) are not evidence that two queries
ask the same thing, while a rare shared word is; below that size every word counts alike.
The statistics are kept up to date incrementally by every cache (library, tab, L2) and must
always equal the statistics recomputed from the cache's current queries.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from evals.cache_full import collapsed_vector, measure

from evermind.cache import SemanticCache
from evermind.cache.decide import Candidate, decide, lexical_evidence
from evermind.cache.l2_sqlite import _Index
from evermind.search.calibration import calibrate
from evermind.search.terms import MIN_IDF_ENTRIES, TermStats
from evermind.studio import api, memory_api, rpc
from evermind.studio.tab_memory import trigram_vector
from tests.factories import FILE_VERBS, PYTHON_FILE_QUERIES

CALIBRATED = calibrate([0.1] * 40)


def _stats() -> TermStats:
    stats = TermStats.of(PYTHON_FILE_QUERIES)
    assert stats.active and stats.n >= MIN_IDF_ENTRIES
    return stats


def test_common_words_of_this_cache_are_not_evidence() -> None:
    stats = _stats()
    query, cached = "Python file permissions on Windows", "How do I copy a file in Python?"
    # Unweighted, "python" and "file" are two shared content words: evidence.
    assert lexical_evidence(query, cached, None, confidence=1.0) is None
    # Weighted by this cache's IDF they are in nearly every stored query: no evidence.
    why = lexical_evidence(query, cached, stats, confidence=1.0)
    assert why is not None and "too common in this cache" in why
    found = decide(
        query,
        [Candidate("copy", 0.97, cached, "copy")],
        threshold=None,
        calibration=CALIBRATED,
        guard=None,
        idf=stats,
    )
    assert not found.hit and found.refused_by == "lexical"


def test_a_rare_shared_word_is_evidence() -> None:
    stats = _stats()
    query = "How can I load a parquet dataset into Python?"
    cached = "Read a parquet dataset in Python with pyarrow"
    assert stats.informativeness("parquet") > stats.informativeness("python")
    assert lexical_evidence(query, cached, stats, confidence=1.0) is None
    found = decide(
        query,
        [
            Candidate("parquet", 0.9, cached, "parquet"),
            Candidate("read", 0.6, "How do I read a file in Python?", "read"),
        ],
        threshold=None,
        calibration=CALIBRATED,
        guard=None,
        idf=stats,
    )
    assert found.hit and found.candidate is not None and found.candidate.key == "parquet"


def test_a_small_cache_keeps_the_unweighted_rule() -> None:
    few = TermStats.of(PYTHON_FILE_QUERIES[:5])
    assert not few.active
    query, cached = "Python file permissions on Windows", "How do I copy a file in Python?"
    assert lexical_evidence(query, cached, few, confidence=1.0) is None
    assert lexical_evidence(query, cached, few, confidence=1.0) == lexical_evidence(
        query, cached, None, confidence=1.0
    )
    # And a small library cache serves what the unweighted rule allows.
    vectors = {q: trigram_vector(q) for q in [*PYTHON_FILE_QUERIES[:5], query]}
    cache = SemanticCache(vectors.__getitem__, fingerprint="trigram", threshold=0.1, max_error=None)
    for stored in PYTHON_FILE_QUERIES[:5]:
        cache.store(stored, stored)
    assert not cache.term_stats.active
    assert cache.lookup("How do I copy a file in Python?").hit  # exact
    assert lexical_evidence("the and of", "Docker volume", few)  # no content words still refused


def test_the_longer_query_must_be_covered_unless_the_score_is_confident() -> None:
    short = "Is ginger safe while pregnant?"
    long = (
        "I'm 34 weeks pregnant with a headache and swollen ankles and my blood pressure "
        "was 142/91 this morning; should I go to the maternity unit today?"
    )
    assert lexical_evidence(short, long, None, confidence=0.0) is not None
    assert "of the longer" in (lexical_evidence(short, long, None, confidence=0.0) or "")


def test_library_cache_statistics_equal_recomputed_after_store_evict_clear() -> None:
    queries = [f"question {n} about widget {n % 7} and gadget {n % 3}" for n in range(60)]
    cache = SemanticCache(
        lambda t: trigram_vector(t), fingerprint="trigram", capacity=40, max_error=None
    )
    for n, query in enumerate(queries):
        cache.store(query, n)
        current = [e.query for e in cache._entries.values()]
        assert cache.term_stats == TermStats.of(current)
    assert cache.stats.evictions == 20
    cache.store(queries[-1], "replaced")  # same query again: replaced, not counted twice
    cache.invalidate(query=queries[-2])
    cache.store("another namespace entry", 1, namespace="other")
    current = [e.query for e in cache._entries.values()]
    assert cache.term_stats == TermStats.of(current) and cache.term_stats.n == len(current)
    cache.set_embedder(lambda t: trigram_vector(t, 128), fingerprint="trigram-128")
    assert cache.term_stats == TermStats() and len(cache) == 0
    cache.store("a new query", 0)
    assert cache.clear() == 1
    assert cache.term_stats == TermStats() and cache.term_stats.n == 0


def test_expired_entries_leave_the_statistics() -> None:
    now = [0.0]
    cache = SemanticCache(
        lambda t: trigram_vector(t), fingerprint="trigram", ttl=10.0, clock=lambda: now[0]
    )
    cache.store("How do I rotate a TLS certificate?", "a")
    now[0] = 20.0
    cache.store("How do I renew a domain?", "b")
    cache.lookup("How do I renew a domain name?")
    assert cache.term_stats == TermStats.of(["How do I renew a domain?"])


def test_the_runtime_l2_index_keeps_its_statistics() -> None:
    index = _Index(4)
    queries: list[str | None] = [f"stored query {n} about topic {n % 5}" for n in range(30)]
    queries[3] = None  # an entry stored without its query text
    for n, query in enumerate(queries):
        index.add(n, np.ones(4, np.float32) / 2, query, f"answer {n}")
    index.drop_first(10)
    assert index.terms == TermStats.of(q for q in queries[10:] if q is not None)


@pytest.fixture
def fresh_tab(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc, "_session", None)
    monkeypatch.setattr(memory_api, "_tab", None)


def _call(fn: str, **kwargs: Any) -> Any:
    envelope = json.loads(asyncio.run(api.call(fn, json.dumps(kwargs))))
    assert envelope["ok"], envelope
    return envelope["result"]


def test_the_tab_cache_keeps_its_statistics(
    fresh_tab: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evermind.studio import tab_memory

    monkeypatch.setattr(tab_memory, "CACHE_CAPACITY", 30)
    pairs = [{"query": q, "response": n} for n, q in enumerate(PYTHON_FILE_QUERIES[:25])]
    _call("cache_import", entries=pairs)
    for query in PYTHON_FILE_QUERIES[20:]:
        _call("cache_store", query=query, response="again")  # replaces 5, then evicts
    cache = asyncio.run(memory_api.tab_memory().cache())
    assert len(cache.entries) == 30
    assert cache.terms == TermStats.of(e.query for e in cache.entries.values())
    memory_api._tab = None  # a reload rebuilds the statistics from the stored rows
    reloaded = asyncio.run(memory_api.tab_memory().cache())
    asyncio.run(reloaded.load())
    assert reloaded.terms == cache.terms
    # The tab's lookup uses the same IDF decision as the library's cache.
    found = _call("cache_lookup", query="Python file permissions on Windows")
    assert found["hit"] is False


def test_the_collapsed_property_holds_at_full_size() -> None:
    rows = [
        {
            "id": f"cd{n:03d}",
            "query": f"How do I {verb} a file in Python on host {n}?",
            "paraphrase": f"Python: {verb} a file, host {n}",
            "near_miss": f"How do I {verb} a folder in Python on host {n + 1}?",
        }
        for n, verb in enumerate(FILE_VERBS * 8)
    ]
    report = measure(rows, lambda b: [collapsed_vector(t) for t in b], "collapsed")
    assert report["entries"] == len(rows) >= 300
    assert report["splits"]["all"]["wrong"] == 0.0
    assert report["splits"]["all"]["near_miss_hit"] == 0.0
