"""Recall: ranks a :class:`Snapshot` of memories for a query (candidates, fusion, weighting,
MMR, hits).

The store hands out a ``Snapshot`` (its records, BM25 index and vector index, and the time)
and, when it has an embedder, a ``QueryEmbedder``; this module ranks them and never imports
the store, reads its state or writes. Browser-safe: standard library and ``evermind`` only.

**Relevance floor.** A query that shares no content term with any memory (BM25 finds
nothing) and whose best cosine is not above what *unrelated* memories score against each
other returns nothing ("no memory matches") rather than every memory at ~1.0
(:func:`evermind.search.calibration.below_floor`). "Unrelated" is measured on the store's
own memories (:func:`evermind.search.calibration.relevance_calibration`: the quantile of the
cosines between up to ``FLOOR_SAMPLE`` sampled memories, plus a margin). With fewer than
``FLOOR_MIN_MEMORIES`` embedded memories there is nothing to measure and the ranking is
returned as before.

**Fusion.** BM25 scores are unbounded and every embedder's cosines live in a range of their
own, so ``"convex"`` fusion z-scores each signal over the query's candidates (the union of both
rankers' pools) and mixes them, ``(1 − w)·z(bm25) + w·z(cosine)``
(:func:`evermind.search.fusion.convex`). The weight ``w`` is measured, not fixed (unless
``RecallOptions.semantic_weight`` fixes it): it is the embedder's **trust**, the Pearson
correlation, over the same sampled pairs of memories as the floor, between the pairs' cosine
and their term overlap (Jaccard of their BM25 terms), less three standard errors of a
correlation that is really zero (``3/√pairs``), clipped to ``[0, MAX_TRUST]``. An embedder
whose similarities between stored memories carry meaning agrees with their shared words; a
collapsed one (every cosine ~0.999, or noise) does not, gets ``w = 0``, and the ranking is the
lexical one. The spread of the cosines alone cannot tell these apart: a whitened but
uninformative embedder spreads them as widely as a good one. With too few memories to
measure, ``w`` is ``MAX_TRUST``. The fused values are rescaled to (0, 1] over the candidates
(best = 1). MMR is :func:`evermind.search.mmr.mmr`.

This module chooses the candidates, reads the snapshot and keeps the measurement per vector
index; the arithmetic is :mod:`evermind.search`'s.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from evermind.errors import EvermindError
from evermind.memory.ranking import importance_factor, recency_factor
from evermind.memory.records import Hit, MemoryRecord, RecallOptions
from evermind.search.bm25 import BM25Index
from evermind.search.calibration import (
    FLOOR_MIN_MEMORIES,
    MAX_TRUST,
    RelevanceCalibration,
    below_floor,
    relevance_calibration,
)
from evermind.search.cosine import normalise
from evermind.search.fusion import convex, reciprocal_rank_fusion, top_k, unit_scale
from evermind.search.mmr import mmr
from evermind.search.terms import jaccard
from evermind.search.vectors import VectorIndex

#: Embeds a query for the semantic step (the store first embeds memories not yet indexed).
QueryEmbedder = Callable[[str], Awaitable[Sequence[float]]]


@dataclass(frozen=True)
class Snapshot:
    """What recall ranks: a namespace's memories at one moment, with their indexes.

    Attributes:
        records: Every memory by key (archived and expired ones too; recall skips them).
        bm25: The BM25 index over the records' contents.
        vectors: The vector index (holds the memories embedded so far).
        now: The time of the recall, seconds since the epoch (for expiry and recency).
    """

    records: Mapping[str, MemoryRecord]
    bm25: BM25Index
    vectors: VectorIndex
    now: float


logger = logging.getLogger(__name__)

# vector index -> (vectors measured, calibration): re-measured as the index grows.
_calibrations: weakref.WeakKeyDictionary[VectorIndex, tuple[int, RelevanceCalibration]] = (
    weakref.WeakKeyDictionary()
)


@dataclass
class _Candidates:
    """Per-ranker results for one query."""

    lexical: list[tuple[str, float]] = field(default_factory=list)
    semantic: list[tuple[str, float]] = field(default_factory=list)
    #: BM25 of every memory sharing a term with the query (fills in semantic-only candidates).
    bm25_all: dict[str, float] = field(default_factory=dict)
    #: Cosines of the query with candidates' stored vectors (fills in lexical-only ones).
    cosine_of: Callable[[Sequence[str]], list[float | None]] | None = None
    base_label: str = ""
    used_vectors: bool = False
    #: The semantic weight of convex fusion (set once the embedder has been used).
    weight: float = 0.0


async def run_recall(
    snapshot: Snapshot,
    query: str,
    k: int,
    tags: set[str] | None,
    opts: RecallOptions,
    embed_query: QueryEmbedder | None = None,
    select: Callable[[MemoryRecord], bool] | None = None,
) -> list[Hit]:
    """Ranks the snapshot's live memories for ``query`` (see ``MemoryStore.recall``).

    Args:
        snapshot: The memories and their indexes.
        query: Free text.
        k: How many hits at most.
        tags: Only memories carrying all of these (None: no filter).
        opts: The recall options.
        embed_query: Embeds the query for the semantic step; None ranks lexically
            ("no embedder").
        select: Only memories this admits, asked inside candidate selection (so matches
            ranked low among all memories are kept); with it, the relevance floor weighs
            the selected memories' terms only.
    """
    now = snapshot.now
    records = snapshot.records

    selected: dict[str, bool] = {}  # select's answers, asked once per key in this recall

    def accept(key: str) -> bool:
        record = records.get(key)
        if record is None or record.archived or record.is_expired(now):
            return False
        if tags is not None and not tags.issubset(record.tags):
            return False
        if select is None:
            return True
        admitted = selected.get(key)
        if admitted is None:
            admitted = selected[key] = select(record)
        return admitted

    pool = max(opts.candidate_pool, k)
    found = await _candidates(snapshot, embed_query, query, pool, accept, opts)
    evidence: Iterable[float]
    if not found.bm25_all and snapshot.bm25.scores_positive:
        # Lexical ranking off (or it found nothing): the evidence is only whether a memory
        # shares a term with the query, and every such memory scores above 0, so the scores
        # of every holder of a common term (O(store)) are not computed; the first will do.
        evidence = (1.0 for key in snapshot.bm25.sharing(query) if select is None or accept(key))
    else:
        lexical = found.bm25_all if found.bm25_all else snapshot.bm25.scores(query)
        evidence = lexical.values()
        if select is not None:  # a term only unselected memories share is no evidence
            evidence = (score for key, score in lexical.items() if score > 0 and accept(key))

    def floor() -> float | None:
        measured = calibration(snapshot)
        return None if measured is None else measured.floor

    if below_floor(evidence, [score for _, score in found.semantic], floor):
        return []
    if found.used_vectors:
        found.weight = _weight(snapshot, opts)
    relevance, signals = _relevance(found, opts)
    if not relevance:
        return []
    steps = [found.base_label]
    if found.lexical and found.semantic and opts.fusion == "convex":
        fixed = opts.semantic_weight is not None
        steps.append(f"convex w={found.weight:.2f}" + ("" if fixed else " (measured trust)"))
    elif found.lexical and found.semantic:
        steps.append(f"rrf k={opts.rrf_k}")
    weighted: dict[str, float] = {}
    for key, value in relevance.items():
        record = records[key]
        factor = 1.0
        if opts.importance:
            signals[key]["importance_factor"] = importance_factor(
                record.importance, opts.importance_weight
            )
            factor *= signals[key]["importance_factor"]
        if opts.recency:
            signals[key]["recency_factor"] = recency_factor(
                now - record.updated_at, opts.half_life_s, opts.recency_weight
            )
            factor *= signals[key]["recency_factor"]
        weighted[key] = value * factor
    if opts.importance:
        steps.append("importance")
    if opts.recency:
        steps.append(f"recency half-life {opts.half_life_s / 86400:g}d")
    if opts.mmr and len(weighted) > 1:
        order = _diverse(snapshot, weighted, k, opts.mmr_lambda, found.used_vectors)
        steps.append(f"mmr λ={opts.mmr_lambda:.2f}")
    else:
        order = [key for key, _ in top_k(weighted, k)]
    label = "; ".join(steps)
    return [_hit(records[key], weighted[key], label, signals[key]) for key in order]


def calibration(snapshot: Snapshot) -> RelevanceCalibration | None:
    """The floor and trust measured on sampled memories
    (:func:`~evermind.search.calibration.relevance_calibration`), or None: too few to say.

    Cached per vector index and re-measured when the index has grown or shrunk by a quarter.
    """
    index = snapshot.vectors
    n = len(index)
    if n < FLOOR_MIN_MEMORIES:
        return None
    cached = _calibrations.get(index)
    if cached is not None and 0.8 * cached[0] <= n <= 1.25 * cached[0]:
        return cached[1]
    keys = [key for key in snapshot.records if key in index]
    result = relevance_calibration(keys, index.cosine, snapshot.bm25.terms)
    if result is not None:
        _calibrations[index] = (n, result)
    return result


def _weight(snapshot: Snapshot, opts: RecallOptions) -> float:
    """The semantic weight of convex fusion: fixed by the options, else the measured trust."""
    if opts.semantic_weight is not None:
        return opts.semantic_weight
    measured = calibration(snapshot)
    return MAX_TRUST if measured is None else measured.trust


async def _candidates(
    snapshot: Snapshot,
    embed_query: QueryEmbedder | None,
    query: str,
    pool: int,
    accept: Callable[[str], bool],
    opts: RecallOptions,
) -> _Candidates:
    found = _Candidates()
    failed = False
    if opts.semantic and embed_query is not None:
        try:
            query_vector = await embed_query(query)
            found.semantic = await snapshot.vectors.asearch(query_vector, pool, accept)
            found.used_vectors = True
            found.cosine_of = partial(
                snapshot.vectors.cosines_to, unit_query=normalise(query_vector)
            )
        except EvermindError:
            raise
        except Exception:
            logger.warning("semantic recall failed; falling back to lexical", exc_info=True)
            failed = True
    if opts.lexical or failed:
        found.bm25_all = snapshot.bm25.scores(query)
        found.lexical = top_k(found.bm25_all, pool, accept)
    if found.used_vectors and opts.lexical:
        found.base_label = "semantic+lexical"
    elif found.used_vectors:
        found.base_label = "semantic only: lexical off"
    elif failed:
        found.base_label = "lexical only: embedder failed"
    elif embed_query is None:
        found.base_label = "lexical only: no embedder"
    else:
        found.base_label = "lexical only: semantic off"
    return found


def _relevance(
    found: _Candidates, opts: RecallOptions
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Returns relevance in (0, 1] per candidate (best = 1) and the raw signals: convex
    fusion, RRF, or the one ranker that ran."""
    signals: dict[str, dict[str, float]] = {}
    for key, score in found.lexical:
        signals.setdefault(key, {})["bm25"] = score
    for key, score in found.semantic:
        signals.setdefault(key, {})["cosine"] = score
    if found.lexical and found.semantic and opts.fusion == "convex":
        fused = _convex_relevance(found, signals, opts.candidate_pool)
    elif found.lexical and found.semantic:
        fused = reciprocal_rank_fusion(
            [[key for key, _ in found.lexical], [key for key, _ in found.semantic]], opts.rrf_k
        )
        for key, value in fused.items():
            signals[key]["rrf"] = value
    else:
        ranked = found.lexical or found.semantic
        fused = dict(ranked)
        if ranked and ranked[0][1] <= 0:
            # Cosines can all be <= 0; fall back to ranks so the order survives.
            fused = reciprocal_rank_fusion([[key for key, _ in ranked]], opts.rrf_k)
    fused = {key: value for key, value in fused.items() if value > 0}
    if not fused:
        return {}, signals
    best = max(fused.values())
    relevance = {key: value / best for key, value in fused.items()}
    for key, value in relevance.items():
        signals[key]["relevance"] = value
    return relevance, signals


def _convex_relevance(
    found: _Candidates, signals: dict[str, dict[str, float]], pool: int
) -> dict[str, float]:
    """Convex fusion (:func:`~evermind.search.fusion.convex`) over the union of both rankers'
    candidates, with ``found.weight``.

    A candidate only one ranker returned gets its other score looked up: its BM25 (0 when it
    shares no term) or its stored vector's cosine (the lowest cosine when it has none). With
    ``w = 0`` the order is exactly the lexical one (BM25, ties by key). The means and standard
    deviations come from the first ``pool`` candidates of each ranker (``candidate_pool``),
    not from all of them, so asking for more hits (a larger ``k``) does not re-order the best.
    """
    keys = list(
        dict.fromkeys([key for key, _ in found.lexical] + [key for key, _ in found.semantic])
    )
    bm25 = {key: found.bm25_all.get(key, 0.0) for key in keys}
    cosines: dict[str, float] = dict(found.semantic)
    missing = [key for key in keys if key not in cosines]
    if missing and found.cosine_of is not None:
        for key, value in zip(missing, found.cosine_of(missing), strict=True):
            if value is not None:
                cosines[key] = value
    low = min(cosines.values())
    cosine_of = {key: cosines.get(key, low) for key in keys}
    if found.weight > 0:
        basis = {key for key, _ in found.lexical[:pool]}
        basis.update(key for key, _ in found.semantic[:pool])
        fused = convex(bm25, cosine_of, found.weight, basis)
    else:
        fused = unit_scale(bm25)
    for key in keys:
        signals[key].setdefault("bm25", bm25[key])
        signals[key].setdefault("cosine", cosine_of[key])
        signals[key]["fused"] = fused[key]
    return fused


def _diverse(
    snapshot: Snapshot, weighted: dict[str, float], k: int, lam: float, use_vectors: bool
) -> list[str]:
    """MMR over the weighted relevance: similarity the (non-negative) cosine of two stored
    vectors, or without them the Jaccard of two memories' BM25 terms."""
    if use_vectors:
        keys = list(weighted)
        position = {key: i for i, key in enumerate(keys)}
        cosines = snapshot.vectors.cosine_matrix(keys)  # one product, not one per pair

        def similarity(a: str, b: str) -> float:
            return max(0.0, cosines[position[a]][position[b]])

    else:

        def similarity(a: str, b: str) -> float:
            return jaccard(snapshot.bm25.terms(a), snapshot.bm25.terms(b))

    return mmr(weighted, similarity, k, lam)


def _hit(record: MemoryRecord, score: float, label: str, signals: dict[str, float]) -> Hit:
    return Hit(
        key=record.key,
        content=record.content,
        tags=record.tags,
        score=score,
        ranked_by=label,
        importance=record.importance,
        updated_at=record.updated_at,
        signals=dict(signals),
        meta=dict(record.meta),
    )


__all__ = [
    "QueryEmbedder",
    "Snapshot",
    "calibration",
    "run_recall",
]
