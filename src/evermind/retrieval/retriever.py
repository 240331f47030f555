"""``EnterpriseRetriever``: dense and lexical arms at once, fused, reranked, diversified, floored.

``search(question, scope, k, filter)``:

1. embeds the question and runs the dense arm (``store.query``) and the lexical arm
   (``lexical.search``) concurrently (``asyncio.gather``), each asked for ``pool``
   candidates, both under the caller's :class:`~evermind.vectorstore.AccessScope` and filter
   (the engines enforce them; nothing is trimmed afterwards);
2. fuses them (``fusion="convex"`` with ``dense_weight``, or ``"rrf"``:
   :func:`evermind.search.fusion.fuse_convex`, :func:`evermind.search.fusion.fuse_rrf`);
3. applies the **relevance floor** (:class:`RelevanceFloor`): a candidate stays only when
   it covers enough of the question's content terms (``min_coverage``, the share of their
   weight: :func:`evermind.search.terms.coverage`, each term weighted by the lexical arm's
   ``term_weight``, the IDF for the in-process BM25 arm) or its cosine
   reaches ``min_cosine``. Fused scores are relative (the best is always 1), so the floor
   reads absolute evidence instead; when no candidate clears it the result is *refused*
   ("I don't have that") and ``answer`` never calls the model;
4. reranks the survivors with the optional ``reranker(question, passages) -> scores``;
5. orders them by MMR (``mmr_lambda``; None: by relevance alone; the similarity of two
   passages is the Jaccard of their terms: :func:`evermind.search.mmr.mmr`) and keeps ``k``.

``answer(question, bridge, scope)`` searches, returns the refusal without a model call when
the search refused, else asks the bridge over the numbered passages and checks the reply's
``[n]`` citations (the prompt and the parsing are :mod:`evermind.retrieval.citations`).
Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Literal

from evermind.bridges.base import Bridge
from evermind.errors import ConfigError, InputError, ShapeError
from evermind.memory.embedder import as_embedder
from evermind.retrieval.citations import Answer, answer_over, refused
from evermind.retrieval.lexical import LexicalArm
from evermind.retrieval.passages import Passage, RelevanceFloor, SearchResult, source_of
from evermind.search.fusion import fuse_convex, fuse_rrf, unit_scale
from evermind.search.mmr import mmr
from evermind.search.terms import coverage, jaccard, term_set
from evermind.vectorstore.port import AccessScope, Hit, VectorStore, check_query

__all__ = ["EnterpriseRetriever", "Reranker"]

#: ``reranker(question, passages)`` -> one score per passage (higher is better), sync or async.
Reranker = Callable[[str, Sequence["Passage"]], Sequence[float] | Awaitable[Sequence[float]]]
Fusion = Literal["convex", "rrf"]


class EnterpriseRetriever:
    """Hybrid retrieval over a vector store that refuses when nothing is relevant.

    Args:
        store: The dense arm: any :class:`~evermind.vectorstore.VectorStore`.
        embedder: Embeds the question (anything :func:`evermind.memory.embedder.as_embedder`
            takes; the one the store's items were embedded with).
        lexical: The lexical arm (:class:`~evermind.retrieval.lexical.BM25Arm`,
            :class:`~evermind.retrieval.lexical.StoreLexicalArm`); None: dense only, and
            coverage then weighs every term 1.
        fusion: ``"convex"`` or ``"rrf"``.
        dense_weight: The dense arm's weight in convex fusion, in [0, 1].
        rrf_k: The RRF constant.
        pool: Candidates each arm is asked for (at least ``k``).
        mmr_lambda: MMR's relevance weight in (0, 1]; None: no MMR, plain relevance order.
        reranker: Optional ``reranker(question, passages) -> scores``.
        floor: The relevance floor.
    """

    def __init__(
        self,
        store: VectorStore,
        embedder: Any,
        *,
        lexical: LexicalArm | None = None,
        fusion: Fusion = "convex",
        dense_weight: float = 0.5,
        rrf_k: int = 60,
        pool: int = 40,
        mmr_lambda: float | None = 0.7,
        reranker: Reranker | None = None,
        floor: RelevanceFloor | None = None,
    ) -> None:
        if fusion not in ("convex", "rrf"):
            raise ConfigError(
                f"EnterpriseRetriever: fusion must be 'convex' or 'rrf', got {fusion!r}"
            )
        if not 0.0 <= dense_weight <= 1.0:
            raise ConfigError(
                f"EnterpriseRetriever: dense_weight must be in [0, 1], got {dense_weight!r}"
            )
        if mmr_lambda is not None and not 0.0 < mmr_lambda <= 1.0:
            raise ConfigError(
                f"EnterpriseRetriever: mmr_lambda must be in (0, 1], got {mmr_lambda!r}"
            )
        if isinstance(pool, bool) or not isinstance(pool, int) or pool < 1:
            raise ConfigError(f"EnterpriseRetriever: pool must be an int ≥ 1, got {pool!r}")
        if isinstance(rrf_k, bool) or not isinstance(rrf_k, int) or rrf_k < 1:
            raise ConfigError(f"EnterpriseRetriever: rrf_k must be an int ≥ 1, got {rrf_k!r}")
        self.store = store
        self.embedder = as_embedder(embedder)
        self.lexical = lexical
        self.fusion: Fusion = fusion
        self.dense_weight = dense_weight
        self.rrf_k = rrf_k
        self.pool = pool
        self.mmr_lambda = mmr_lambda
        self.reranker = reranker
        self.floor = floor if floor is not None else RelevanceFloor()

    async def search(
        self, question: str, scope: AccessScope | None, k: int = 5, filter: object = None
    ) -> SearchResult:
        """The ``k`` best passages for ``question`` visible to ``scope``, or a refusal.

        Raises:
            ScopeRequired: No scope (checked before anything is embedded or queried).
            InputError: An empty question, a bad ``k`` or filter.
        """
        checked = check_query(k, scope)
        if not isinstance(question, str) or not question.strip():
            raise InputError("retriever: the question is empty; ask something")
        pool = max(self.pool, k)
        dense, lexical = await asyncio.gather(
            self._dense(question, pool, filter, checked),
            self._lexical(question, pool, filter, checked),
        )
        steps = ["dense+lexical" if self.lexical is not None else "dense only: no lexical arm"]
        passages = self._fused(question, checked, dense, lexical, steps)
        candidates = len(passages)
        kept = [p for p in passages if self.floor.admits(p)]
        if not kept:
            reason = (
                "nothing retrieved"
                if not candidates
                else f"none of {candidates} candidates cleared the relevance floor"
            )
            return SearchResult(question, (), True, reason, candidates, "; ".join(steps))
        if self.reranker is not None:
            kept = await self._rerank(question, kept)
            steps.append("reranked")
        chosen = self._order(kept, k, steps)
        return SearchResult(question, tuple(chosen), False, "", candidates, "; ".join(steps))

    async def answer(
        self,
        question: str,
        bridge: Bridge,
        scope: AccessScope | None,
        *,
        model: str = "",
        k: int = 5,
        filter: object = None,
        max_tokens: int = 512,
    ) -> Answer:
        """Answers ``question`` from the passages ``scope`` may see, citing them as ``[n]``.

        Searches first; a refused search returns the refusal without calling ``bridge``.
        Otherwise the model gets the numbered passages
        (:func:`~evermind.retrieval.citations.build_request`) and its reply's citations are
        mapped to the passages, the numbers that name none listed in ``invalid``.

        Args:
            question: The question.
            bridge: Any :class:`~evermind.bridges.Bridge`.
            scope: Who asks (required).
            model: The upstream's model name.
            k: How many passages to offer.
            filter: A vector-store filter on the passages.
            max_tokens: The answer's limit.

        Raises:
            ScopeRequired: No scope (before anything runs).
            UpstreamError: The bridge failed.
        """
        result = await self.search(question, scope, k, filter)
        if result.refused:
            return refused(result)
        assert scope is not None  # search checked it
        return await answer_over(
            result, bridge, model=model, max_tokens=max_tokens, tenant=scope.tenant
        )

    async def _dense(
        self, question: str, pool: int, filter: object, scope: AccessScope
    ) -> list[Hit]:
        (vector,) = await self.embedder.embed([question])
        return await self.store.query(vector, pool, filter, scope)

    async def _lexical(
        self, question: str, pool: int, filter: object, scope: AccessScope
    ) -> list[Hit]:
        if self.lexical is None:
            return []
        return await self.lexical.search(question, pool, filter, scope)

    def _fused(
        self,
        question: str,
        scope: AccessScope,
        dense: list[Hit],
        lexical: list[Hit],
        steps: list[str],
    ) -> list[Passage]:
        dense_pairs = [(h.id, h.score) for h in dense]
        lexical_pairs = [(h.id, h.score) for h in lexical]
        if self.fusion == "convex":
            fused = fuse_convex(dense_pairs, lexical_pairs, self.dense_weight)
            steps.append(f"convex w={self.dense_weight:.2f}")
        else:
            fused = fuse_rrf(dense_pairs, lexical_pairs, self.rrf_k)
            steps.append(f"rrf k={self.rrf_k}")
        hits = {h.id: h for h in lexical} | {h.id: h for h in dense}
        cosine_of = {h.id: h.score for h in dense}
        lexical_of = {h.id: h.score for h in lexical}
        asked = term_set(question)
        arm = self.lexical
        weight = (lambda term: arm.term_weight(term, scope)) if arm is not None else _one
        passages = []
        for key, score in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0])):
            hit = hits[key]
            passages.append(
                Passage(
                    id=key,
                    source=source_of(key, hit.metadata),
                    text=hit.text,
                    score=score,
                    cosine=cosine_of.get(key),
                    lexical=lexical_of.get(key),
                    coverage=coverage(asked, term_set(hit.text), weight),
                    metadata=dict(hit.metadata),
                )
            )
        return passages

    async def _rerank(self, question: str, passages: list[Passage]) -> list[Passage]:
        assert self.reranker is not None
        scores = self.reranker(question, passages)
        if inspect.isawaitable(scores):
            scores = await scores
        values = [float(s) for s in scores]
        if len(values) != len(passages):
            raise ShapeError(
                f"retriever: the reranker returned {len(values)} scores for {len(passages)} "
                "passages; expected one score per passage"
            )
        if not all(math.isfinite(v) for v in values):
            raise InputError("retriever: the reranker returned NaN or infinity")
        # Passage ids are distinct (the fused candidates' keys).
        scaled = unit_scale({p.id: v for p, v in zip(passages, values, strict=True)})
        out = [
            replace(p, rerank=v, score=scaled[p.id]) for p, v in zip(passages, values, strict=True)
        ]
        return sorted(out, key=lambda p: (-p.score, p.id))

    def _order(self, passages: list[Passage], k: int, steps: list[str]) -> list[Passage]:
        if self.mmr_lambda is None or len(passages) <= 1:
            return sorted(passages, key=lambda p: (-p.score, p.id))[:k]
        by_id = {p.id: p for p in passages}
        term_sets = {p.id: term_set(p.text) for p in passages}
        order = mmr(
            {p.id: p.score for p in passages},
            lambda a, b: jaccard(term_sets[a], term_sets[b]),
            k,
            self.mmr_lambda,
        )
        steps.append(f"mmr λ={self.mmr_lambda:.2f}")
        return [by_id[key] for key in order]


def _one(term: str) -> float:
    return 1.0
