"""Term statistics: document frequencies, the IDF formulas, term overlap and term coverage.

Three inverse document frequencies are in use, each pinned by its caller's tests, so each is
a formula here rather than a copy there:

- :func:`idf` ``ln((N+1)/(df+s))``: with ``s = 1`` the semantic cache's weight of a word
  over its own stored queries (:class:`TermStats`, lexical evidence); with ``s = 0.5`` the
  compaction probe's "most specific word" of a memory (:func:`idf_table`).
- :func:`bm25_idf` ``ln(1 + (N − df + 0.5)/(df + 0.5))``: Okapi BM25's
  (:class:`~evermind.search.bm25.BM25Index`).

Terms are :func:`evermind.text.terms` (folded, stemmed, stop words dropped) unless a caller
passes its own tokenizer. Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable

from evermind.text import terms

__all__ = [
    "MIN_COVERAGE",
    "MIN_IDF_ENTRIES",
    "TermStats",
    "Tokenizer",
    "bm25_idf",
    "coverage",
    "idf",
    "idf_table",
    "jaccard",
    "term_set",
]

#: Text -> its terms (each distinct term counts once per document).
Tokenizer = Callable[[str], Iterable[str]]

#: Fewest documents before :attr:`TermStats.active` (fewer: every term counts alike, as the
#: document frequencies of a handful of texts say nothing).
MIN_IDF_ENTRIES = 32


def idf(n: int, df: int, smoothing: float = 1.0) -> float:
    """``ln((N+1)/(df+smoothing))`` of a term held by ``df`` of ``n`` documents."""
    return math.log((n + 1) / (df + smoothing))


def bm25_idf(n: int, df: int) -> float:
    """The BM25 inverse document frequency ``ln(1 + (N − df + 0.5)/(df + 0.5))``."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


class TermStats:
    """Document frequencies of terms over a changing set of texts (e.g. a cache's queries).

    Each text counts once per distinct term. The owner calls :meth:`add` when it stores a
    text, :meth:`remove` when one goes (evicted, expired, replaced, invalidated) and
    :meth:`clear` when it empties, so the counts always equal :meth:`of` its current texts.
    Pure Python, O(terms) per call.

    Args:
        tokenize: Text -> terms; :func:`evermind.text.terms` by default.
    """

    __slots__ = ("_tokenize", "df", "n")

    def __init__(self, tokenize: Tokenizer = terms) -> None:
        self.df: Counter[str] = Counter()
        self.n = 0
        self._tokenize = tokenize

    @classmethod
    def of(cls, texts: Iterable[str], tokenize: Tokenizer = terms) -> TermStats:
        """The statistics of ``texts`` computed from scratch."""
        stats = cls(tokenize)
        for text in texts:
            stats.add(text)
        return stats

    def add(self, text: str) -> None:
        """Counts a newly stored text."""
        self.df.update(set(self._tokenize(text)))
        self.n += 1

    def remove(self, text: str) -> None:
        """Uncounts a stored text that left (it must have been added)."""
        for term in set(self._tokenize(text)):
            left = self.df[term] - 1
            if left > 0:
                self.df[term] = left
            else:
                del self.df[term]
        self.n = max(0, self.n - 1)

    def clear(self) -> None:
        """Forgets every text."""
        self.df.clear()
        self.n = 0

    @property
    def active(self) -> bool:
        """Whether there are enough texts (:data:`MIN_IDF_ENTRIES`) to weight terms."""
        return self.n >= MIN_IDF_ENTRIES

    def idf(self, term: str) -> float:
        """``ln((N+1)/(df+1))``: 0 for a term in every text, ``ln(N+1)`` for none."""
        return idf(self.n, self.df.get(term, 0))

    def informativeness(self, term: str) -> float:
        """:meth:`idf` over its maximum ``ln(N+1)``, in [0, 1] (1 without texts)."""
        top = math.log(self.n + 1)
        return 1.0 if top <= 0.0 else self.idf(term) / top

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TermStats):
            return NotImplemented
        return self.n == other.n and +self.df == +other.df

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TermStats(n={self.n}, terms={len(self.df)})"


def idf_table(texts: Iterable[str], tokenize: Tokenizer, smoothing: float) -> dict[str, float]:
    """:func:`idf` of every term of ``texts`` (``tokenize``) with this ``smoothing``."""
    stats = TermStats.of(texts, tokenize)
    return {term: idf(stats.n, df, smoothing) for term, df in stats.df.items()}


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two term sets (0 when both are empty)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def term_set(text: str) -> frozenset[str]:
    """The content terms of ``text`` (:func:`evermind.text.terms`) as a set."""
    return frozenset(terms(text))


#: The least weighted share of a question's content terms a passage must contain to be offered
#: as evidence (:func:`coverage`): the retriever's relevance floor and ``evermind ask``'s.
MIN_COVERAGE = 0.6


def coverage(
    question_terms: frozenset[str],
    passage_terms: frozenset[str],
    weight: Callable[[str], float],
) -> float:
    """The weighted share of ``question_terms`` found in ``passage_terms``, in [0, 1].

    A question without content terms ("what is it?") covers nothing: 0.
    """
    total = sum(weight(term) for term in question_terms)
    if total <= 0.0:
        return 0.0
    found = sum(weight(term) for term in question_terms & passage_terms)
    return found / total
