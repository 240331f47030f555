"""Ranking for recall: incremental BM25, z-scores, correlation, reciprocal-rank fusion, MMR,
weighting.

Everything here is pure computation over plain Python data. Browser-safe: standard library only.

BM25 indexes the terms of :func:`evermind.text.terms`: identifiers kept whole *and* split
(``"TSR-417"`` gives ``tsr-417, tsr, 417``) so an exact code matches exactly and its parts
still match loosely, stop words dropped, words stemmed by :func:`evermind.text.stem` so
"reports" meets "report".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from evermind.text import terms


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

    def idf(self, term: str) -> float:
        """The BM25 inverse document frequency ``ln(1 + (N - df + 0.5) / (df + 0.5))``."""
        df = len(self._postings.get(term, ()))
        n = len(self._lengths)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

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


def top_k(
    scores: Mapping[str, float], k: int, accept: Callable[[str], bool] | None = None
) -> list[tuple[str, float]]:
    """Returns the ``k`` best ``(id, score)`` pairs, best first; ties by id for determinism."""
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    if accept is not None:
        ranked = [item for item in ranked if accept(item[0])]
    return ranked[:k]


def reciprocal_rank_fusion(rankings: Iterable[Sequence[str]], k: int = 60) -> dict[str, float]:
    """Fuses rankings (best first) into ``id -> Σ 1 / (k + rank)`` with rank counted from 1."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (k + rank)
    return fused


def mmr_order(
    relevance: Mapping[str, float],
    similarity: Callable[[str, str], float],
    k: int,
    lam: float = 0.7,
) -> list[tuple[str, float]]:
    """Selects up to ``k`` ids by maximal marginal relevance.

    Each step takes the id maximising ``lam·relevance − (1 − lam)·max similarity to the ids
    already taken``. Relevance should be on the same scale as similarity (both in [0, 1]).

    Returns:
        ``(id, mmr value at selection)`` in selection order.
    """
    remaining = sorted(relevance, key=lambda doc: (-relevance[doc], doc))
    chosen: list[tuple[str, float]] = []
    max_sim = dict.fromkeys(remaining, 0.0)
    while remaining and len(chosen) < k:
        best = max(
            remaining,
            key=lambda doc: lam * relevance[doc] - (1.0 - lam) * max_sim[doc],
        )
        value = lam * relevance[best] - (1.0 - lam) * max_sim[best]
        chosen.append((best, value))
        remaining.remove(best)
        for doc in remaining:
            max_sim[doc] = max(max_sim[doc], similarity(best, doc))
    return chosen


def zscores(values: Mapping[str, float], basis: Iterable[str] | None = None) -> dict[str, float]:
    """``(x − mean) / std`` per id (population std); all 0 when the values do not vary.

    The mean and std are those of the ids in ``basis`` (default: all of them).
    """
    sample = list(values.values()) if basis is None else [values[key] for key in basis]
    n = len(sample)
    if n == 0:
        return dict.fromkeys(values, 0.0)
    mean = math.fsum(sample) / n
    var = math.fsum((x - mean) ** 2 for x in sample) / n
    if var <= 1e-24 * max(1.0, mean * mean):
        return dict.fromkeys(values, 0.0)
    std = math.sqrt(var)
    return {key: (x - mean) / std for key, x in values.items()}


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Pearson correlation of two equal-length sequences (0 when either does not vary)."""
    n = len(xs)
    if n != len(ys):
        raise ValueError(f"pearson: lengths differ ({n} vs {len(ys)})")
    if n < 2:
        return 0.0
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    syy = math.fsum((y - my) ** 2 for y in ys)
    if sxx <= 0.0 or syy <= 0.0:
        return 0.0
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two term sets (0 when both are empty)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def importance_factor(importance: float, weight: float) -> float:
    """``1 + weight·(2·importance − 1)``: 0.5 is neutral, 1.0 boosts, 0.0 damps."""
    return 1.0 + weight * (2.0 * importance - 1.0)


def recency_factor(age_s: float, half_life_s: float, weight: float) -> float:
    """``1 − weight + weight·0.5^(age / half_life)``: 1.0 when fresh, ``1 − weight`` when old."""
    decay: float = 0.5 ** (max(age_s, 0.0) / half_life_s)
    return 1.0 - weight + weight * decay
