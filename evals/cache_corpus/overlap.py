"""Near-duplicate text detection for the corpus: word trigrams, Jaccard, an inverted index.

Two texts are near-duplicates when the Jaccard similarity of their word-trigram sets is at
least a threshold (0.6 by default); an exact match (after folding case and punctuation) is
the case Jaccard 1.0. :class:`TrigramIndex` finds, for one text, every indexed text at or
over the threshold without comparing against all of them: only texts that share a trigram
are scored. Standard library only.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

#: Jaccard similarity of word trigrams at or above which two texts count as near-duplicates.
NEAR_DUPLICATE = 0.6

_WORD = re.compile(r"\w+")

Shingle = tuple[str, ...]


def words(text: str) -> list[str]:
    """The lowercase word tokens of ``text`` (letters, digits, underscore; punctuation dropped)."""
    return _WORD.findall(text.lower())


def normalise(text: str) -> str:
    """``text`` folded for exact comparison: lowercase words joined by single spaces
    (punctuation dropped, so a copy that only changed punctuation still matches)."""
    return " ".join(words(text))


def fold(text: str) -> str:
    """``text`` lowercased with its whitespace collapsed; punctuation kept (``HEAD~2`` and
    ``HEAD^2`` stay different): how the check tells two texts of the corpus apart."""
    return " ".join(text.lower().split())


def trigrams(text: str) -> frozenset[Shingle]:
    """The set of word trigrams of ``text``; a text under three words is one shingle."""
    tokens = words(text)
    if len(tokens) < 3:
        return frozenset({tuple(tokens)}) if tokens else frozenset()
    return frozenset(tuple(tokens[i : i + 3]) for i in range(len(tokens) - 2))


def jaccard(left: frozenset[Shingle], right: frozenset[Shingle]) -> float:
    """|left ∩ right| / |left ∪ right|; 0.0 when both are empty."""
    union = len(left | right)
    return len(left & right) / union if union else 0.0


class TrigramIndex:
    """Texts by label, searchable for near-duplicates of a new text.

    Args:
        entries: (label, text) pairs; a label may repeat (several texts of one record).
    """

    def __init__(self, entries: Iterable[tuple[str, str]]) -> None:
        self._labels: list[str] = []
        self._shingles: list[frozenset[Shingle]] = []
        self._exact: dict[str, list[int]] = defaultdict(list)
        self._postings: dict[Shingle, list[int]] = defaultdict(list)
        for label, text in entries:
            row = len(self._labels)
            shingles = trigrams(text)
            self._labels.append(label)
            self._shingles.append(shingles)
            self._exact[normalise(text)].append(row)
            for shingle in shingles:
                self._postings[shingle].append(row)

    def __len__(self) -> int:
        return len(self._labels)

    def near(self, text: str, threshold: float = NEAR_DUPLICATE) -> list[tuple[str, float]]:
        """Indexed texts equal to ``text`` or at Jaccard >= ``threshold``, best first.

        Returns:
            (label, similarity) per matching indexed text; an exact match (after
            :func:`normalise`) scores 1.0 whatever its trigrams.
        """
        scores: dict[int, float] = {row: 1.0 for row in self._exact.get(normalise(text), [])}
        shingles = trigrams(text)
        shared: dict[int, int] = defaultdict(int)
        for shingle in shingles:
            for row in self._postings.get(shingle, ()):
                shared[row] += 1
        for row, common in shared.items():
            if row in scores:
                continue
            union = len(shingles) + len(self._shingles[row]) - common
            similarity = common / union if union else 0.0
            if similarity >= threshold:
                scores[row] = similarity
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        return [(self._labels[row], similarity) for row, similarity in ranked]
