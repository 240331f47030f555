"""BM25 (against a from-scratch reference), top-k, RRF, MMR, Jaccard."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from evermind.search.bm25 import BM25Index
from evermind.search.fusion import reciprocal_rank_fusion, top_k
from evermind.search.mmr import mmr_order
from evermind.search.terms import jaccard
from evermind.text import terms


def bm25_reference(docs: list[str], query: str, k1: float = 1.2, b: float = 0.75) -> list[float]:
    """Textbook Okapi BM25 over the same tokens, computed from scratch."""
    tokenized = [terms(d) for d in docs]
    n = len(docs)
    avg = sum(len(t) for t in tokenized) / n
    out = []
    for toks in tokenized:
        counts = Counter(toks)
        score = 0.0
        for term in set(terms(query)):
            df = sum(term in t for t in tokenized)
            if df == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = counts[term]
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(toks) / avg))
        out.append(score)
    return out


def test_bm25_matches_reference_after_adds_replaces_and_removes() -> None:
    rng = random.Random(7)
    words = ["route", "depot", "solver", "timeout", "tessera", "dublin", "fleet", "van", "sku"]
    docs = {f"d{i}": " ".join(rng.choices(words, k=rng.randint(1, 12))) for i in range(23)}
    index = BM25Index()
    for key, text in docs.items():
        index.add(key, text)
    index.add("d3", "solver solver timeout")  # replace
    docs["d3"] = "solver solver timeout"
    for key in ("d5", "d11"):
        index.remove(key)
        del docs[key]
    index.remove("never-there")
    assert len(index) == len(docs)
    for query in ("solver timeout", "dublin van", "sku", "nothing matches"):
        got = index.scores(query)
        ref = dict(zip(docs, bm25_reference(list(docs.values()), query), strict=True))
        for key, value in ref.items():
            assert got.get(key, 0.0) == pytest.approx(value, rel=1e-12, abs=1e-12)


def test_top_k_is_deterministic_and_filters() -> None:
    scores = {"b": 1.0, "a": 1.0, "c": 2.0, "d": 0.5}
    assert top_k(scores, 3) == [("c", 2.0), ("a", 1.0), ("b", 1.0)]
    assert top_k(scores, 2, accept=lambda k: k != "c") == [("a", 1.0), ("b", 1.0)]


def test_rrf_sums_reciprocal_ranks() -> None:
    fused = reciprocal_rank_fusion([["x", "y"], ["y", "z"]], k=60)
    assert fused["y"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["x"] == pytest.approx(1 / 61) and fused["z"] == pytest.approx(1 / 62)


def test_mmr_trades_relevance_for_diversity() -> None:
    relevance = {"a": 1.0, "a2": 0.95, "b": 0.6}
    same = {frozenset({"a", "a2"})}

    def sim(x: str, y: str) -> float:
        return 1.0 if frozenset({x, y}) in same else 0.0

    assert [k for k, _ in mmr_order(relevance, sim, 2, lam=1.0)] == ["a", "a2"]
    assert [k for k, _ in mmr_order(relevance, sim, 2, lam=0.5)] == ["a", "b"]
    assert len(mmr_order(relevance, sim, 10, lam=0.5)) == 3


def test_jaccard() -> None:
    assert jaccard(frozenset("ab"), frozenset("bc")) == pytest.approx(1 / 3)
    assert jaccard(frozenset(), frozenset()) == 0.0
