"""Recall: ranks a :class:`Snapshot` of memories for a query (candidates, fusion, weighting,
MMR, hits).

The store hands out a ``Snapshot`` (its records, BM25 index and vector index, and the time)
and, when it has an embedder, a ``QueryEmbedder``; this module ranks them and never imports
the store, reads its state or writes. Browser-safe: standard library and ``evermind`` only.

**Relevance floor.** A query that shares no content term with any memory (BM25 finds
nothing) and whose best cosine is not above what *unrelated* memories score against each
other returns nothing ("no memory matches") rather than every memory at ~1.0. "Unrelated"
is measured like the semantic cache's calibration (``evermind.cache.decide``, which this
layer may not import): the :data:`FLOOR_QUANTILE` of the cosines between up to
:data:`FLOOR_SAMPLE` stored memories, plus :data:`FLOOR_MARGIN`. With fewer than
:data:`FLOOR_MIN_MEMORIES` embedded memories there is nothing to measure and the ranking is
returned as before.

**Fusion.** BM25 scores are unbounded and every embedder's cosines live in a range of their
own, so ``"convex"`` fusion z-scores each signal over the query's candidates (the union of both
rankers' pools) and mixes them, ``(1 − w)·z(bm25) + w·z(cosine)`` (Bruch et al., 2023, "An
Analysis of Fusion Functions for Hybrid Retrieval"). The weight ``w`` is measured, not fixed
(unless ``RecallOptions.semantic_weight`` fixes it): it is the embedder's **trust**, the
Pearson correlation, over the same sampled pairs of memories as the floor, between the
pairs' cosine and their term overlap (Jaccard of their BM25 terms), less three standard errors
of a correlation that is really zero (``3/√pairs``), clipped to ``[0,`` :data:`MAX_TRUST` ``]``.
An embedder whose similarities between stored memories carry meaning agrees with their shared
words; a collapsed one (every cosine ~0.999, or noise) does not, gets ``w = 0``, and the
ranking is the lexical one. The spread of the cosines alone cannot tell these apart: a
whitened but uninformative embedder spreads them as widely as a good one. With too few
memories to measure, ``w`` is :data:`MAX_TRUST`. The fused values are rescaled to (0, 1] over
the candidates (best = 1).
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from evermind.errors import EvermindError
from evermind.memory.ranking import (
    BM25Index,
    importance_factor,
    jaccard,
    mmr_order,
    pearson,
    recency_factor,
    reciprocal_rank_fusion,
    top_k,
    zscores,
)
from evermind.memory.records import Hit, MemoryRecord, RecallOptions
from evermind.memory.vectors import VectorIndex, normalise

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

#: The relevance floor (see the module docstring).
FLOOR_QUANTILE = 0.99
FLOOR_MARGIN = 0.03
FLOOR_SAMPLE = 64
FLOOR_MIN_MEMORIES = 8
#: The most weight a measured trust gives the embedder: never more than the lexical evidence.
MAX_TRUST = 0.5
#: Standard errors of a zero correlation subtracted from the measured one (see the docstring).
TRUST_NOISE_SE = 3.0


@dataclass(frozen=True)
class Calibration:
    """What the sampled memories say about the embedder (see the module docstring).

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


# vector index -> (vectors measured, calibration): re-measured as the index grows.
_calibrations: weakref.WeakKeyDictionary[VectorIndex, tuple[int, Calibration]] = (
    weakref.WeakKeyDictionary()
)


@dataclass
class _Candidates:
    """Per-ranker results for one query."""

    lexical: list[tuple[str, float]] = field(default_factory=list)
    semantic: list[tuple[str, float]] = field(default_factory=list)
    #: BM25 of every memory sharing a term with the query (fills in semantic-only candidates).
    bm25_all: dict[str, float] = field(default_factory=dict)
    #: Cosine of the query with a candidate's stored vector (fills in lexical-only ones).
    cosine_of: Callable[[str], float | None] | None = None
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
    """
    now = snapshot.now
    records = snapshot.records

    def accept(key: str) -> bool:
        record = records.get(key)
        if record is None or record.archived or record.is_expired(now):
            return False
        return tags is None or tags.issubset(record.tags)

    pool = max(opts.candidate_pool, k)
    found = await _candidates(snapshot, embed_query, query, pool, accept, opts)
    if _below_floor(snapshot, query, found):
        return []
    if found.used_vectors:
        found.weight = _weight(snapshot, opts)
    relevance, signals = _fuse(found, opts)
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
        order = _mmr(snapshot, weighted, k, opts.mmr_lambda, found.used_vectors)
        steps.append(f"mmr λ={opts.mmr_lambda:.2f}")
    else:
        order = [key for key, _ in top_k(weighted, k)]
    label = "; ".join(steps)
    return [_hit(records[key], weighted[key], label, signals[key]) for key in order]


def calibration(snapshot: Snapshot) -> Calibration | None:
    """The floor and trust measured on sampled memories, or None: too few to say.

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
    if len(keys) < FLOOR_MIN_MEMORIES:
        return None
    step = max(1, len(keys) // FLOOR_SAMPLE)
    sample = keys[::step][:FLOOR_SAMPLE]
    terms = [snapshot.bm25.terms(key) for key in sample]
    cosines: list[float] = []
    overlaps: list[float] = []
    for i, a in enumerate(sample):
        for j in range(i + 1, len(sample)):
            cosines.append(index.cosine(a, sample[j]))
            overlaps.append(jaccard(terms[i], terms[j]))
    ordered = sorted(cosines)
    value = ordered[min(len(ordered) - 1, int(FLOOR_QUANTILE * (len(ordered) - 1) + 0.5))]
    correlation = pearson(cosines, overlaps)
    trust = correlation - TRUST_NOISE_SE / math.sqrt(len(cosines))
    result = Calibration(
        floor=value + FLOOR_MARGIN,
        trust=min(MAX_TRUST, max(0.0, trust)),
        correlation=correlation,
        pairs=len(cosines),
    )
    _calibrations[index] = (n, result)
    return result


def _weight(snapshot: Snapshot, opts: RecallOptions) -> float:
    """The semantic weight of convex fusion: fixed by the options, else the measured trust."""
    if opts.semantic_weight is not None:
        return opts.semantic_weight
    measured = calibration(snapshot)
    return MAX_TRUST if measured is None else measured.trust


def _below_floor(snapshot: Snapshot, query: str, found: _Candidates) -> bool:
    """True when nothing is relevant: no shared term and no cosine above unrelated ones."""
    lexical = found.bm25_all if found.bm25_all else snapshot.bm25.scores(query)
    if any(score > 0 for score in lexical.values()):
        return False
    if not found.semantic:
        return False  # nothing ranked either way: the caller already returns nothing
    measured = calibration(snapshot)
    if measured is None:
        return False
    return max(score for _, score in found.semantic) <= measured.floor


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
                snapshot.vectors.cosine_to, unit_query=normalise(query_vector)
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


def _fuse(
    found: _Candidates, opts: RecallOptions
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Returns relevance in (0, 1] per candidate (best = 1) and the raw signals."""
    signals: dict[str, dict[str, float]] = {}
    for key, score in found.lexical:
        signals.setdefault(key, {})["bm25"] = score
    for key, score in found.semantic:
        signals.setdefault(key, {})["cosine"] = score
    if found.lexical and found.semantic and opts.fusion == "convex":
        fused = _convex(found, found.weight, signals, opts.candidate_pool)
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


def _convex(
    found: _Candidates, weight: float, signals: dict[str, dict[str, float]], pool: int
) -> dict[str, float]:
    """Convex combination of z-scored signals over the union of both rankers' candidates.

    ``(1 − w)·z(bm25) + w·z(cosine)``, each z over the candidates, rescaled to (0, 1]
    (min-max: the best candidate is 1, the weakest a tiny positive so it stays ranked). A
    candidate only one ranker returned gets its other score looked up: its BM25 (0 when it
    shares no term) or its stored vector's cosine (the lowest cosine when it has none). With
    ``w = 0`` the order is exactly the lexical one (BM25, ties by key). The means and standard
    deviations come from the first ``pool`` candidates of each ranker (``candidate_pool``),
    not from all of them, so asking for more hits (a larger ``k``) does not re-order the best.
    """
    keys = list(
        dict.fromkeys([key for key, _ in found.lexical] + [key for key, _ in found.semantic])
    )
    semantic = dict(found.semantic)
    bm25 = {key: found.bm25_all.get(key, 0.0) for key in keys}
    cosines: dict[str, float] = {}
    for key in keys:
        value = semantic.get(key)
        if value is None and found.cosine_of is not None:
            value = found.cosine_of(key)
        if value is not None:
            cosines[key] = value
    low = min(cosines.values())
    cosine_of = {key: cosines.get(key, low) for key in keys}
    if weight > 0:
        basis = {key for key, _ in found.lexical[:pool]}
        basis.update(key for key, _ in found.semantic[:pool])
        z_lexical = zscores(bm25, basis)
        z_semantic = zscores(cosine_of, basis)
        mixed = {key: (1.0 - weight) * z_lexical[key] + weight * z_semantic[key] for key in keys}
    else:
        mixed = bm25
    bottom, top = min(mixed.values()), max(mixed.values())
    fused: dict[str, float] = {}
    for key in keys:
        signals[key].setdefault("bm25", bm25[key])
        signals[key].setdefault("cosine", cosine_of[key])
        scaled = (mixed[key] - bottom) / (top - bottom) if top > bottom else 1.0
        # A floor keeps the weakest candidate ranked (last) rather than dropped.
        fused[key] = max(scaled, 1e-9)
        signals[key]["fused"] = fused[key]
    return fused


def _mmr(
    snapshot: Snapshot, weighted: dict[str, float], k: int, lam: float, use_vectors: bool
) -> list[str]:
    best = max(weighted.values())
    scaled = {key: value / best for key, value in weighted.items()}
    if use_vectors:

        def similarity(a: str, b: str) -> float:
            return max(0.0, snapshot.vectors.cosine(a, b))

    else:

        def similarity(a: str, b: str) -> float:
            return jaccard(snapshot.bm25.terms(a), snapshot.bm25.terms(b))

    return [key for key, _ in mmr_order(scaled, similarity, k, lam)]


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
    "FLOOR_MARGIN",
    "FLOOR_MIN_MEMORIES",
    "FLOOR_QUANTILE",
    "FLOOR_SAMPLE",
    "MAX_TRUST",
    "TRUST_NOISE_SE",
    "Calibration",
    "QueryEmbedder",
    "Snapshot",
    "calibration",
    "run_recall",
]
