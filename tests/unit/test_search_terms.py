"""search.terms: the IDF formulas, TermStats, the compaction probe's table, Jaccard, coverage."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest

from evermind.search.terms import (
    MIN_IDF_ENTRIES,
    TermStats,
    bm25_idf,
    coverage,
    idf,
    idf_table,
    term_set,
)
from evermind.text import terms
from tests.factories import PYTHON_FILE_QUERIES

WORD = re.compile(r"\w+")


def test_term_stats_remove_is_the_inverse_of_add() -> None:
    stats = TermStats.of(PYTHON_FILE_QUERIES)
    for query in PYTHON_FILE_QUERIES[::2]:
        stats.remove(query)
    assert stats == TermStats.of(PYTHON_FILE_QUERIES[1::2])
    stats.clear()
    assert stats == TermStats() and stats.idf("python") == 0.0


def test_term_stats_count_each_term_once_per_text() -> None:
    texts = ["Python files, python FILES", "a file in Rust", "nothing shared here"]
    stats = TermStats.of(texts)
    expected: Counter[str] = Counter()
    for text in texts:
        expected.update(set(terms(text)))
    assert stats.n == 3 and stats.df == expected
    n, df = 3, expected["file"]
    assert stats.idf("file") == math.log((n + 1) / (df + 1))
    assert stats.idf("absent") == math.log(n + 1)
    assert stats.informativeness("absent") == 1.0
    assert not stats.active and TermStats.of(["x"] * MIN_IDF_ENTRIES).active


def test_the_formulas_are_the_ones_their_callers_used() -> None:
    for n in (0, 1, 7, 1000):
        for df in range(0, min(n, 9) + 1):
            # bit for bit, as written before the move (the caches' and BM25's tests pin them)
            assert idf(n, df) == math.log((n + 1) / (df + 1))
            assert idf(n, df, 0.5) == math.log((n + 1) / (df + 0.5))
            assert bm25_idf(n, df) == math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    assert bm25_idf(10, 10) > 0.0  # BM25's never goes negative, even for a term in every doc


def test_idf_table_is_the_compaction_probes_formula() -> None:
    texts = ["The Kestrel flew", "the kestrel, the hawk", "A hawk and THE owl"]

    def words(text: str) -> list[str]:
        return [w.casefold() for w in WORD.findall(text)]

    table = idf_table(texts, words, smoothing=0.5)
    frequency: Counter[str] = Counter()
    for text in texts:
        frequency.update({w.casefold() for w in WORD.findall(text)})
    assert table == {w: math.log((3 + 1) / (df + 0.5)) for w, df in frequency.items()}
    assert table["owl"] > table["hawk"] > table["the"]


def test_coverage_weights_rare_terms() -> None:
    asked = frozenset({"port", "okta"})
    weights = {"port": 1.0, "okta": 3.0}
    assert coverage(asked, frozenset({"port", "server"}), weights.__getitem__) == 0.25
    assert coverage(asked, frozenset({"port", "okta"}), weights.__getitem__) == 1.0
    assert coverage(frozenset(), frozenset({"port"}), weights.__getitem__) == 0.0


def test_term_set_is_the_content_terms() -> None:
    text = "The kestrel reports: kestrels were reported near TSR-417"
    assert term_set(text) == frozenset(terms(text))
    assert term_set("kestrel kestrel KESTREL") == frozenset(terms("kestrel"))
    assert term_set("the and of") == frozenset()


@pytest.mark.parametrize("text", ["", "   ", "?!"])
def test_texts_without_terms_count_as_documents(text: str) -> None:
    stats = TermStats.of([text, "kestrel"])
    assert stats.n == 2 and stats.df == Counter({"kestrel": 1})
