"""Recall's relevance floor with lexical ranking off: the evidence is only whether a memory
shares a term with the query, so recall asks BM25 for the first such memory
(``BM25Index.sharing``) instead of scoring every holder of a common term (work that grew with
the store). The hits are exactly those of the scoring path, with and without ``select``.
"""

from __future__ import annotations

import asyncio
import zlib
from pathlib import Path

import numpy as np
import pytest

from evermind.memory import MemoryStore, RecallOptions
from evermind.search.bm25 import BM25Index

DIM = 16
SEMANTIC = RecallOptions(lexical=False, mmr=False, importance=False, recency=False)
QUERIES = [
    "common",
    "rare topic3",
    "nothing shares this",
    "zzz qqq",
    "note 17",
    "topic2 common",
    "topic5",
    "archived",
]


class SeededEmbedder:
    """A seeded random vector per text (unrelated texts: cosines near 0)."""

    fingerprint = "evidence-test-v1"

    def embed(self, texts: list[str]) -> np.ndarray:
        seeds = [zlib.crc32(t.encode()) for t in texts]
        return np.asarray([np.random.default_rng(s).standard_normal(DIM) for s in seeds])


def _entries() -> list[dict[str, object]]:
    return [
        {
            "key": f"m{i}",
            "content": f"note {i} about {'common' if i % 3 else 'rare'} topic{i % 7}",
            "archived": i % 50 == 0,
        }
        for i in range(300)
    ]


def test_sharing_yields_the_keys_bm25_scores_above_zero() -> None:
    index = BM25Index()
    for entry in _entries():
        index.add(str(entry["key"]), str(entry["content"]))
    index.remove("m4")
    assert index.scores_positive
    for query in [*QUERIES, "", "note note common"]:
        scores = index.scores(query)
        assert set(index.sharing(query)) == set(scores)
        assert all(score > 0 for score in scores.values())
    assert not BM25Index(k1=float("inf")).scores_positive
    assert not BM25Index(b=1.5).scores_positive


def _recall_all(store: MemoryStore) -> list[list[tuple[str, float, str]]]:
    async def run() -> list[list[tuple[str, float, str]]]:
        out = []
        for options in (SEMANTIC, RecallOptions(lexical=False)):
            for select in (None, lambda r: r.key.endswith("1")):
                for query in QUERIES:
                    hits = await store.recall(query, top_k=5, options=options, select=select)
                    out.append([(h.key, h.score, h.ranked_by) for h in hits])
        return out

    return asyncio.run(run())


def test_semantic_recall_gives_the_scoring_paths_hits_without_scoring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def open_store() -> MemoryStore:
        store = MemoryStore(tmp_path / "m.db", SeededEmbedder())
        await store.import_(_entries())
        return store

    store = asyncio.run(open_store())
    try:
        calls = []
        scores = BM25Index.scores

        def counted(self: BM25Index, query: str) -> dict[str, float]:
            calls.append(query)
            return scores(self, query)

        monkeypatch.setattr(BM25Index, "scores", counted)
        fast = _recall_all(store)
        assert calls == []  # lexical off: no holder of "common" (200 of 300) was scored
        monkeypatch.setattr(BM25Index, "scores_positive", property(lambda self: False))
        slow = _recall_all(store)
        assert calls  # the scoring path ran
        assert fast == slow
        # Both sides of the floor were exercised: some queries found nothing, some found hits.
        assert any(not hits for hits in fast) and any(hits for hits in fast)
    finally:
        asyncio.run(store.close())
