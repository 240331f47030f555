"""Calibration: how an embedder scores *unrelated* texts, measured on the texts a store holds.

A cosine means nothing until one knows what unrelated texts reach with the same embedder
(a collapsed one scores everything ~0.99, a trained one spreads them). Two measurements:

**The cache's threshold** (:func:`calibrate`, :func:`measure_calibration`). The cosines
between a cache's own stored queries, sampled (:func:`sample_indices`), over the pairs that
share no content word (:func:`calibration_pairs`; all pairs when fewer than the minimum share
none, so templated traffic such as "Order 17: status?" / "Order 18: status?" does not count
as unrelated texts scoring 0.95). Only scores above the :data:`QUANTILE` of that distribution
plus :data:`MARGIN` are served, never below :data:`FLOOR`; with fewer than
:data:`MIN_CALIBRATION` stored queries there is no calibration (:data:`UNCALIBRATED`). It is
measured again when the number of stored queries has changed by a quarter (:func:`stale`).
The library's ``SemanticCache``, the tab's cache, the runtime's L2 and the Studio's
``similarity`` all run :func:`measure_calibration`; each passes its own cosines.

**Memory recall's floor and trust** (:func:`relevance_calibration`). Every pair of up to
:data:`FLOOR_SAMPLE` memories (spread evenly over the store): the :data:`FLOOR_QUANTILE` of
their cosines plus :data:`FLOOR_MARGIN` is the *relevance floor* a query's best cosine must
pass when it shares no term with any memory (:func:`below_floor`); the *trust* is the
Pearson correlation between the pairs' cosine and their term overlap (Jaccard), less
:data:`TRUST_NOISE_SE` standard errors of a zero correlation, clipped to
``[0,`` :data:`MAX_TRUST` ``]`` (the semantic weight of convex fusion).

Both read the same nearest-rank :func:`quantile`. Browser-safe: standard library and
``evermind`` only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from evermind.search.terms import jaccard
from evermind.text import terms

__all__ = [
    "CALIBRATION_SAMPLE",
    "FLOOR",
    "FLOOR_MARGIN",
    "FLOOR_MIN_MEMORIES",
    "FLOOR_QUANTILE",
    "FLOOR_SAMPLE",
    "MARGIN",
    "MAX_TRUST",
    "MIN_CALIBRATION",
    "QUANTILE",
    "TRUST_NOISE_SE",
    "UNCALIBRATED",
    "Calibration",
    "RelevanceCalibration",
    "below_floor",
    "calibrate",
    "calibration_pairs",
    "measure_calibration",
    "pearson",
    "quantile",
    "relevance_calibration",
    "sample_indices",
    "stale",
]

K = TypeVar("K", bound=Hashable)

#: The quantile of unrelated-pair cosines the served score must exceed.
QUANTILE = 0.99
#: Added to that quantile; also how close to 1.0 unrelated texts may score before the
#: embedder counts as collapsed.
MARGIN = 0.03
#: No score below this is ever served, whatever the threshold or calibration.
FLOOR = 0.4
#: Fewest stored queries the calibration measures (their pairwise cosines).
MIN_CALIBRATION = 8
#: Most stored queries sampled for the calibration (their pairs: n·(n−1)/2).
CALIBRATION_SAMPLE = 96
# Fewest pairs a calibration is measured on: those of MIN_CALIBRATION queries.
_MIN_PAIRS = MIN_CALIBRATION * (MIN_CALIBRATION - 1) // 2

#: Memory recall's relevance floor: the quantile of sampled memories' cosines, the margin
#: added to it, how many memories are sampled, and the fewest embedded memories measured.
FLOOR_QUANTILE = 0.99
FLOOR_MARGIN = 0.03
FLOOR_SAMPLE = 64
FLOOR_MIN_MEMORIES = 8
#: The most weight a measured trust gives the embedder: never more than the lexical evidence.
MAX_TRUST = 0.5
#: Standard errors of a zero correlation subtracted from the measured one.
TRUST_NOISE_SE = 3.0


def quantile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ascending, non-empty ``ordered``."""
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


@dataclass(frozen=True)
class Calibration:
    """How the embedder scores unrelated texts, and the threshold that follows.

    Attributes:
        threshold: The lowest servable score it implies (quantile + margin, at least the
            floor); None without enough stored queries to measure.
        unrelated: The measured :data:`QUANTILE` of unrelated-pair cosines, or None.
        pairs: How many pairs were measured.
        collapsed: True when unrelated texts score within the margin of 1.0.
    """

    threshold: float | None
    unrelated: float | None
    pairs: int
    collapsed: bool = False

    @property
    def words(self) -> str:
        """The calibration in words (shown in reasons)."""
        if self.unrelated is None:
            return f"not calibrated: fewer than {MIN_CALIBRATION} stored queries"
        if self.collapsed:
            return (
                f"embedder does not separate texts: unrelated queries score "
                f"{self.unrelated:.3f} ({QUANTILE:.0%} of {self.pairs} pairs)"
            )
        return (
            f"calibrated: unrelated queries score up to {self.unrelated:.3f} "
            f"({QUANTILE:.0%} of {self.pairs} pairs), so hits need {self.threshold:.3f}"
        )


#: The calibration of a cache too small to measure.
UNCALIBRATED = Calibration(None, None, 0)


def calibrate(cosines: Sequence[float]) -> Calibration:
    """The calibration implied by cosines of unrelated pairs (e.g.
    :func:`~evermind.search.cosine.pairwise_cosines`).

    Non-finite cosines are left out. Fewer than ``MIN_CALIBRATION·(MIN_CALIBRATION−1)/2``
    pairs: :data:`UNCALIBRATED`.
    """
    values = sorted(float(c) for c in cosines if math.isfinite(float(c)))
    if len(values) < _MIN_PAIRS:
        return UNCALIBRATED
    unrelated = quantile(values, QUANTILE)
    threshold = max(FLOOR, unrelated + MARGIN)
    return Calibration(threshold, unrelated, len(values), collapsed=threshold >= 1.0)


def stale(measured: int, n: int) -> bool:
    """Whether a calibration measured on ``measured`` stored queries (0: none was possible)
    should be measured again now that there are ``n``: after a change by a quarter."""
    if measured == 0:
        return n >= MIN_CALIBRATION
    return not 0.8 * measured <= n <= 1.25 * measured


def sample_indices(n: int, limit: int = CALIBRATION_SAMPLE) -> list[int]:
    """At most ``limit`` indices spread evenly over ``range(n)`` (deterministic)."""
    if n <= limit:
        return list(range(n))
    return [int(i * n / limit) for i in range(limit)]


def calibration_pairs(queries: Sequence[str | None]) -> list[tuple[int, int]]:
    """The index pairs ``i < j`` of ``queries`` the calibration reads as unrelated texts.

    Pairs whose queries share no content term (:func:`evermind.text.terms`; a query not
    known, None, shares nothing); when fewer than ``MIN_CALIBRATION·(MIN_CALIBRATION−1)/2``
    such pairs exist (a cache of one template), every pair, as before: the threshold can
    then only be higher, never lower.
    """
    bags = [frozenset() if q is None else frozenset(terms(q)) for q in queries]
    every = [(i, j) for i in range(len(bags)) for j in range(i + 1, len(bags))]
    disjoint = [(i, j) for i, j in every if not bags[i] & bags[j]]
    return disjoint if len(disjoint) >= _MIN_PAIRS else every


def measure_calibration(
    queries: Sequence[str | None],
    cosines: Callable[[list[int], list[tuple[int, int]]], Sequence[float]],
    limit: int = CALIBRATION_SAMPLE,
) -> Calibration:
    """The calibration of a cache's stored ``queries``: sample, pair, score, :func:`calibrate`.

    Args:
        queries: The stored queries (None: a query not known, which shares no term).
        cosines: ``(chosen, pairs) -> cosines``: ``chosen`` are the sampled positions in
            ``queries`` (:func:`sample_indices`), ``pairs`` index into ``chosen``
            (:func:`calibration_pairs`); one cosine per pair, each cache scoring its own
            vectors its own way.
        limit: The most queries sampled.
    """
    chosen = sample_indices(len(queries), limit)
    pairs = calibration_pairs([queries[i] for i in chosen])
    if len(chosen) < 2:
        return UNCALIBRATED
    return calibrate(cosines(chosen, pairs))


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


@dataclass(frozen=True)
class RelevanceCalibration:
    """What sampled memories say about the embedder (see the module docstring).

    Attributes:
        floor: The cosine unrelated memories reach (quantile + margin).
        trust: The measured fusion weight in ``[0, MAX_TRUST]``.
        correlation: The raw cosine-vs-term-overlap correlation over the sampled pairs.
        pairs: How many pairs were sampled.
    """

    floor: float
    trust: float
    correlation: float
    pairs: int


def relevance_calibration(
    keys: Sequence[K],
    cosine: Callable[[K, K], float],
    term_set: Callable[[K], frozenset[str]],
) -> RelevanceCalibration | None:
    """The relevance floor and trust measured on every pair of up to :data:`FLOOR_SAMPLE`
    of ``keys`` (every ``len // FLOOR_SAMPLE``-th, from the first).

    Args:
        keys: The embedded items, in a stable order.
        cosine: The cosine of two items' stored vectors.
        term_set: An item's distinct terms (their Jaccard is the pair's term overlap).

    Returns:
        None with fewer than :data:`FLOOR_MIN_MEMORIES` keys: too few to say.
    """
    if len(keys) < FLOOR_MIN_MEMORIES:
        return None
    step = max(1, len(keys) // FLOOR_SAMPLE)
    sample = keys[::step][:FLOOR_SAMPLE]
    bags = [term_set(key) for key in sample]
    cosines: list[float] = []
    overlaps: list[float] = []
    for i, a in enumerate(sample):
        for j in range(i + 1, len(sample)):
            cosines.append(cosine(a, sample[j]))
            overlaps.append(jaccard(bags[i], bags[j]))
    correlation = pearson(cosines, overlaps)
    trust = correlation - TRUST_NOISE_SE / math.sqrt(len(cosines))
    return RelevanceCalibration(
        floor=quantile(sorted(cosines), FLOOR_QUANTILE) + FLOOR_MARGIN,
        trust=min(MAX_TRUST, max(0.0, trust)),
        correlation=correlation,
        pairs=len(cosines),
    )


def below_floor(
    lexical: Iterable[float],
    semantic: Sequence[float],
    floor: Callable[[], float | None],
) -> bool:
    """True when nothing is relevant: no lexical score above 0 and no cosine above the floor.

    Args:
        lexical: The lexical scores of every item sharing a term with the query.
        semantic: The cosines of the semantic candidates (empty: nothing ranked either way,
            which is not "below" anything).
        floor: The relevance floor (:attr:`RelevanceCalibration.floor`), or None when too
            few items were measured; called only when the lexical scores leave it to decide.
    """
    if any(score > 0 for score in lexical):
        return False
    if not semantic:
        return False
    value = floor()
    if value is None:
        return False
    return max(semantic) <= value
