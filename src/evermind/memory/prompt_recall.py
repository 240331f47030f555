"""The hooks' prompt recall: the memories relevant to a prompt, above the relevance floor.

A Claude Code hook injects memories into the agent's context unasked, so it asks a narrower
question than ``memory_recall``: which live memories share with the prompt a term that tells
something. **The relevance floor**: a memory must share with the prompt at least one term held
by at most :data:`SPECIFIC_SHARE` of the namespace's (unarchived) memories, or by a single one.
That is where the Robertson-Sparck Jones relevance weight ``ln((N - df + 0.5)/(df + 0.5))``,
BM25's IDF before its ``+1``, is positive: a term more than half the memories hold is evidence
of nothing, so a memory that matches a prompt only on such words is never injected, however it
ranks. The candidates that clear it are ranked by their lexical score divided by the best one,
times the importance and recency factors of ``RecallOptions`` (:mod:`evermind.memory.ranking`).

Every store answers the same question (``MemoryStore.recall_prompt``):

- a backend that implements :class:`~evermind.memory.backend.PromptRecallBackend` answers
  from its own text index: SQLite from the FTS5 side index
  (:mod:`evermind.memory.hook_index`, BM25 over :func:`evermind.text.terms`), Postgres from
  its ``tsvector`` column (``ts_rank_cd`` over the English configuration's lexemes, document
  frequencies counted by the GIN index);
- any other store (in-process, Qdrant, a host's own backend) answers from the store's
  in-memory snapshot: BM25 over the same terms, document frequencies from its index.

The term set differs by engine (Postgres stems with its English dictionary), the floor and the
weighting do not. Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from evermind.memory.ranking import importance_factor, recency_factor
from evermind.memory.records import MemoryRecord, RecallOptions
from evermind.search.bm25 import BM25Index
from evermind.text import terms

__all__ = [
    "SPECIFIC_SHARE",
    "HookMemory",
    "PromptMatch",
    "hook_memory",
    "most_holders",
    "rank_matches",
    "snapshot_matches",
]

#: The relevance floor: a recalled memory must share with the query a term held by at most
#: this share of the memories, or by one (see the module docstring).
SPECIFIC_SHARE = 0.5


@dataclass(frozen=True)
class HookMemory:
    """One memory as a hook shows it.

    Attributes:
        key: The memory's key.
        content: Its full text.
        tags: Its tags.
        importance: 0…1.
        updated_at: Latest write, seconds since the epoch.
        score: Relevance × importance × recency (1.0 for the digest's entries).
        meta: Its extra fields (a stub's link to its archived original among them).
    """

    key: str
    content: str
    tags: tuple[str, ...]
    importance: float
    updated_at: float
    score: float = 1.0
    meta: Mapping[str, Any] = field(default_factory=dict)


#: A memory that cleared the floor and its raw lexical score (higher is better).
PromptMatch = tuple[HookMemory, float]


def hook_memory(record: MemoryRecord) -> HookMemory:
    """``record`` as a hook shows it."""
    return HookMemory(
        record.key,
        record.content,
        tuple(record.tags),
        record.importance,
        record.updated_at,
        meta=dict(record.meta),
    )


def most_holders(memories: int) -> int:
    """How many of ``memories`` may hold a term for it still to tell (the floor), at least 1."""
    return max(1, math.floor(memories * SPECIFIC_SHARE))


def rank_matches(
    matches: Iterable[PromptMatch], top_k: int, options: RecallOptions, now: float
) -> list[HookMemory]:
    """The ``top_k`` best of ``matches``: score / best score × importance × recency factors."""
    pool = list(matches)
    if not pool:
        return []
    best = max(score for _, score in pool) or 1.0
    ranked = []
    for memory, score in pool:
        weight = max(score, 0.0) / best
        if options.importance:
            weight *= importance_factor(memory.importance, options.importance_weight)
        if options.recency:
            age = now - memory.updated_at
            weight *= recency_factor(age, options.half_life_s, options.recency_weight)
        ranked.append(replace(memory, score=weight))
    ranked.sort(key=lambda hit: (-hit.score, hit.key))
    return ranked[:top_k]


def snapshot_matches(
    records: Mapping[str, MemoryRecord],
    bm25: BM25Index,
    query: str,
    pool: int,
    now: float,
) -> list[PromptMatch]:
    """The floor over a store's in-memory snapshot: live memories sharing a telling term.

    Args:
        records: Every record of the namespace by key (archived and expired ones too).
        bm25: The BM25 index over those records' contents.
        query: The prompt.
        pool: How many of the best BM25 candidates are looked at.
        now: Seconds since the epoch (decides what is expired).
    """
    wanted = list(dict.fromkeys(terms(query)))
    if not wanted:
        return []
    unarchived = sum(1 for record in records.values() if not record.archived)
    most = most_holders(unarchived)
    telling = set()
    for term in wanted:
        held = sum(1 for key in bm25.holders(term) if _unarchived(records, key))
        if 1 <= held <= most:
            telling.add(term)
    if not telling:
        return []
    scored = [
        (key, score)
        for key, score in bm25.scores(query).items()
        if (record := records.get(key)) is not None
        and not record.archived
        and not record.is_expired(now)
    ]
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return [
        (hook_memory(records[key]), score)
        for key, score in scored[:pool]
        if bm25.terms(key) & telling
    ]


def _unarchived(records: Mapping[str, MemoryRecord], key: str) -> bool:
    record = records.get(key)
    return record is not None and not record.archived
