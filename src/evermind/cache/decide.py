"""The one lookup decision of every Evermind cache: candidates → calibration → lexical → guards.

The library's :class:`~evermind.cache.SemanticCache`, the Studio tab's cache
(``evermind.studio.tab_memory``) and the runtime's L2 (``evermind.runtime.cache_store``)
each find their scored candidates their own way (pure Python, the GPU scan, numpy) and then
call :func:`decide`, which alone says hit or miss. The rules, in order:

1. **Exact text wins.** A candidate whose query is the incoming query (case and spaces
   folded) is served: re-asking the same question is safe with any embedder.
2. **Calibrated threshold.** :func:`calibrate` measures how the cache's embedder scores
   *unrelated* texts: the cosines between the cache's own stored queries (mostly unrelated
   to each other), sampled by :func:`pairwise_cosines`. Only scores above the
   :data:`QUANTILE` of that distribution plus :data:`MARGIN` are served, and never below
   :data:`FLOOR`. An explicit threshold is honoured when it is *higher*; a lower one is
   raised to the calibrated value and the reason says so. With fewer than
   :data:`MIN_CALIBRATION` stored queries there is no calibration: the explicit threshold (or
   the floor) applies, and rules 3-5 still protect. When unrelated texts already score
   within :data:`MARGIN` of 1.0 the embedder does not separate texts: every lookup that is
   not an exact match is a miss, and the reason says so.
3. **The best candidate only.** Guards are a veto, never a search down the list: the
   best-scoring candidate is judged; if it is refused, the lookup is a miss with that
   refusal as its reason. A lower candidate is never served.
4. **Lexical evidence.** The incoming and cached query must share content words (stop words
   dropped, folded and stemmed with :func:`evermind.text.terms`): at least
   :data:`MIN_OVERLAP` of the shorter query's terms, and either
   :data:`STRONG_SHARED_TERMS` of them or :data:`STRONG_OVERLAP` of the shorter
   (:func:`lexical_evidence`). ``evals/cache_full.py`` measures the cache as a whole.
5. **Guards.** The guard chain (by default the English guards) compares numbers, units,
   negation, entities, direction, operation and codes.
6. **No guessing.** When the runner-up scores within :data:`AMBIGUITY_MARGIN` of the best,
   would itself pass rules 4-5 and holds a different answer, the lookup is a miss
   ("ambiguous"), unless the best is the incoming vector itself (cosine 1 within float32
   rounding) and the runner-up is not.

Browser-safe: standard library and ``evermind.text`` only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from evermind.cache.guard import Refusal
from evermind.text import terms

__all__ = [
    "AMBIGUITY_MARGIN",
    "FLOOR",
    "MARGIN",
    "MIN_CALIBRATION",
    "MIN_OVERLAP",
    "MIN_SHARED_TERMS",
    "QUANTILE",
    "STRONG_OVERLAP",
    "STRONG_SHARED_TERMS",
    "Calibration",
    "Candidate",
    "Decision",
    "calibrate",
    "decide",
    "lexical_evidence",
    "pairwise_cosines",
    "sample_indices",
    "stale",
]

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
#: Lexical evidence: shared content terms, and their share of the shorter query's terms.
MIN_SHARED_TERMS = 1
MIN_OVERLAP = 0.25
#: ... and either this many shared terms or this share (one shared generic word such as
#: "many" or "time" between two short queries is not evidence).
STRONG_SHARED_TERMS = 2
STRONG_OVERLAP = 0.5
#: A runner-up this close to the best score with another answer makes the lookup a miss.
AMBIGUITY_MARGIN = 0.01
# A cosine this close to 1 is the same vector (float32 rounding aside).
_SAME_VECTOR = 1.0 - 1e-6

Guard = Callable[[str, str], Refusal | None]


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
    """The calibration implied by cosines of unrelated pairs (e.g. :func:`pairwise_cosines`).

    Fewer than ``MIN_CALIBRATION·(MIN_CALIBRATION−1)/2`` pairs: :data:`UNCALIBRATED`.
    """
    values = sorted(float(c) for c in cosines if math.isfinite(float(c)))
    if len(values) < MIN_CALIBRATION * (MIN_CALIBRATION - 1) // 2:
        return UNCALIBRATED
    unrelated = values[min(len(values) - 1, int(QUANTILE * (len(values) - 1) + 0.5))]
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


def pairwise_cosines(vectors: Sequence[Sequence[float]]) -> list[float]:
    """Dot products of every pair of (unit) ``vectors`` of one dimension (pure Python)."""
    rows = [tuple(v) for v in vectors]
    out: list[float] = []
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            if len(a) == len(b):
                out.append(math.fsum(x * y for x, y in zip(a, b, strict=True)))
    return out


def lexical_evidence(query: str, cached_query: str) -> str | None:
    """None when the two queries share enough content words, else why not (in words)."""
    mine, theirs = set(terms(query)), set(terms(cached_query))
    if not mine or not theirs:
        return "no content words to compare"
    shared = mine & theirs
    share = len(shared) / min(len(mine), len(theirs))
    strong = len(shared) >= STRONG_SHARED_TERMS or share >= STRONG_OVERLAP
    if len(shared) < MIN_SHARED_TERMS or share < MIN_OVERLAP or not strong:
        return (
            f"the queries share {len(shared)} content word(s) "
            f"({share:.0%} of the shorter; needs {STRONG_SHARED_TERMS}, or one that is "
            f"{STRONG_OVERLAP:.0%} of the shorter)"
        )
    return None


@dataclass(frozen=True)
class Candidate:
    """A stored entry scored against the incoming query.

    Attributes:
        key: The caller's handle on the entry.
        score: Cosine with the incoming query.
        query: The stored query (None when the store does not know it: no lexical check or
            guards can run, see :func:`decide`).
        answer: Anything equal for entries that hold the same answer (e.g. the response).
    """

    key: Hashable
    score: float
    query: str | None
    answer: object = None


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` concluded.

    Attributes:
        hit: True when ``candidate`` is served.
        candidate: The served candidate, or the best one judged on a miss (None: none).
        threshold: The threshold that applied.
        refused_by: ``"threshold"``, ``"calibration"``, ``"lexical"``, ``"ambiguous"`` or
            the refusing guard's name on a miss with a candidate; else None.
        reason: Why, in words.
    """

    hit: bool
    candidate: Candidate | None
    threshold: float
    refused_by: str | None
    reason: str


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def decide(
    query: str | None,
    candidates: Sequence[Candidate],
    *,
    threshold: float | None,
    calibration: Calibration,
    guard: Guard | None,
    lexical: bool = True,
) -> Decision:
    """Hit or miss for ``query`` among ``candidates`` (the best few; see the module rules).

    Args:
        query: The incoming query text; None when the caller only has its vector (the
            lexical check and guards cannot run then: only an entry without query text is
            judged alike).
        candidates: Scored entries, in any order (the caller's top few suffice).
        threshold: An explicit threshold, or None for the calibrated one (or the floor).
        calibration: From :func:`calibrate` over the cache's stored queries.
        guard: Returns a :class:`Refusal` to veto, None to allow; None: no guards.
        lexical: Require :func:`lexical_evidence` (on by default).
    """
    ranked = sorted(candidates, key=lambda c: -c.score)
    tau = _threshold(threshold, calibration)
    if query is not None:
        wanted = _fold(query)
        for cand in ranked:
            if cand.query is not None and _fold(cand.query) == wanted:
                return Decision(True, cand, tau, None, "exact match of a cached query")
    if not ranked:
        return Decision(False, None, tau, None, "the cache is empty")
    best = ranked[0]
    if calibration.collapsed:
        return Decision(False, best, tau, "calibration", calibration.words)
    if best.score < tau:
        why = f"no cached query reached the threshold {tau:.3f} (best cosine {best.score:.3f})"
        if threshold is not None and tau > threshold:
            raised = calibration.words if calibration.threshold == tau else f"floor {FLOOR:g}"
            why += f"; the requested {threshold:g} was raised ({raised})"
        return Decision(False, None, tau, None, why)
    veto = _veto(query, best, guard, lexical)
    if veto is not None:
        name, words = veto
        return Decision(False, best, tau, name, words)
    for rival in ranked[1:]:
        if rival.score < best.score - AMBIGUITY_MARGIN or rival.score < tau:
            break
        if best.score >= _SAME_VECTOR > rival.score:
            break  # the best is the incoming vector itself: nothing to guess between
        same = rival.answer == best.answer and rival.answer is not None
        if not same and _veto(query, rival, guard, lexical) is None:
            return Decision(
                False,
                best,
                tau,
                "ambiguous",
                f"ambiguous: {rival.query!r} scores {rival.score:.3f}, within "
                f"{AMBIGUITY_MARGIN:g} of the best ({best.score:.3f}), with another answer",
            )
    return Decision(True, best, tau, None, "served")


def _threshold(threshold: float | None, calibration: Calibration) -> float:
    tau = max(FLOOR, FLOOR if threshold is None else float(threshold))
    if calibration.threshold is not None:
        tau = max(tau, calibration.threshold)
    return tau


def _veto(
    query: str | None, cand: Candidate, guard: Guard | None, lexical: bool
) -> tuple[str, str] | None:
    if query is None or cand.query is None:
        return None  # nothing to compare: the caller decides whether that is acceptable
    if lexical:
        missing = lexical_evidence(query, cand.query)
        if missing is not None:
            return "lexical", f"no lexical evidence: {missing}"
    if guard is not None:
        refusal = guard(query, cand.query)
        if refusal is not None:
            return refusal.guard, f"guard '{refusal.guard}' refused: {refusal.reason}"
    return None
