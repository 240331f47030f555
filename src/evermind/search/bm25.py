"""Incremental Okapi BM25: the lexical ranker of memory recall and the retriever's lexical arm.

BM25 indexes the terms of :func:`evermind.text.terms`: identifiers kept whole *and* split
(``"TSR-417"`` gives ``tsr-417, tsr, 417``) so an exact code matches exactly and its parts
still match loosely, stop words dropped, words stemmed by :func:`evermind.text.stem` so
"reports" meets "report". Its IDF is :func:`evermind.search.terms.bm25_idf`.

Pure computation over plain Python data. Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator

from evermind.search.terms import bm25_idf
from evermind.text import terms

__all__ = ["BM25Index"]


class BM25Index:
    """Okapi BM25 over a changing set of documents (add, replace and remove are O(doc length)).

    Args:
        k1: Term-frequency saturation (1.2 is the usual default).
        b: Length normalisation, 0 (none) … 1 (full).
        tokenizer: Text -> terms; :func:`evermind.text.terms` by default.
    """

    def __init__(
        self,
        k1: float = 1.2,
        b: float = 0.75,
        tokenizer: Callable[[str], list[str]] = terms,
    ) -> None:
        self.k1 = k1
        self.b = b
        self._tokenize = tokenizer
        self._postings: dict[str, dict[str, int]] = {}
        self._lengths: dict[str, int] = {}
        self._terms: dict[str, frozenset[str]] = {}
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._lengths)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._lengths

    def add(self, doc_id: str, text: str) -> None:
        """Indexes ``text`` under ``doc_id``, replacing what was there."""
        if doc_id in self._lengths:
            self.remove(doc_id)
        counts = Counter(self._tokenize(text))
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[doc_id] = tf
        length = sum(counts.values())
        self._lengths[doc_id] = length
        self._terms[doc_id] = frozenset(counts)
        self._total_length += length

    def remove(self, doc_id: str) -> None:
        """Drops ``doc_id`` from the index (no-op when absent)."""
        length = self._lengths.pop(doc_id, None)
        if length is None:
            return
        self._total_length -= length
        for term in self._terms.pop(doc_id):
            posting = self._postings[term]
            del posting[doc_id]
            if not posting:
                del self._postings[term]

    def terms(self, doc_id: str) -> frozenset[str]:
        """Returns the distinct terms of a document (empty when unknown)."""
        return self._terms.get(doc_id, frozenset())

    def holders(self, term: str) -> frozenset[str]:
        """Returns the ids of the documents holding ``term`` (its document frequency's set)."""
        return frozenset(self._postings.get(term, ()))

    @property
    def scores_positive(self) -> bool:
        """Whether every document sharing a term with a query scores above 0 (``0 <= k1 <
        inf``, ``0 <= b <= 1``: the idf, the term frequency and the saturation are all > 0),
        so :meth:`sharing` answers "is any score above 0" without computing the scores."""
        return 0.0 <= self.k1 < math.inf and 0.0 <= self.b <= 1.0

    def sharing(self, query: str) -> Iterator[str]:
        """Yields the ids of the documents sharing a term with ``query`` (lazily; a document
        holding several of its terms once per term): the keys of :meth:`scores`, without
        scoring every holder of a common term."""
        for term in set(self._tokenize(query)):
            yield from self._postings.get(term, ())

    def idf(self, term: str) -> float:
        """The BM25 inverse document frequency ``ln(1 + (N - df + 0.5) / (df + 0.5))``."""
        return bm25_idf(len(self._lengths), len(self._postings.get(term, ())))

    def scores(self, query: str) -> dict[str, float]:
        """Returns the BM25 score of every document sharing at least one term with ``query``."""
        n = len(self._lengths)
        if n == 0:
            return {}
        avg_length = max(self._total_length / n, 1e-9)
        out: dict[str, float] = {}
        for term in set(self._tokenize(query)):
            posting = self._postings.get(term)
            if not posting:
                continue
            idf = self.idf(term)
            for doc_id, tf in posting.items():
                norm = self.k1 * (1.0 - self.b + self.b * self._lengths[doc_id] / avg_length)
                out[doc_id] = out.get(doc_id, 0.0) + idf * tf * (self.k1 + 1.0) / (tf + norm)
        return out
