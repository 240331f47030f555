"""Retrieval that cites or refuses: ``EnterpriseRetriever`` over a vector store and a lexical arm.

Public API::

    from evermind.retrieval import BM25Arm, EnterpriseRetriever, index_chunks, read_chunks
    arm = BM25Arm()
    await index_chunks(read_chunks(["kb/"], base="."), store, embedder, acl, lexical=arm)
    retriever = EnterpriseRetriever(store, embedder, lexical=arm, fusion="convex")
    result = await retriever.search("What port does it listen on?", scope, k=5)
    answer = await retriever.answer("What port does it listen on?", bridge, scope)
    answer.text, answer.citations, answer.invalid, answer.refused

Modules: :mod:`~evermind.retrieval.retriever` (the pipeline),
:mod:`~evermind.retrieval.lexical` (the lexical arm port, ``BM25Arm``, ``StoreLexicalArm``),
:mod:`~evermind.retrieval.passages` (result types, the relevance floor),
:mod:`~evermind.retrieval.citations` (the prompt, ``[n]`` parsing, ``Answer``),
:mod:`~evermind.retrieval.corpus` (files into both arms); the fusion (convex / RRF), coverage
and MMR it ranks with are :mod:`evermind.search`'s. docs/retrieval.md is the guide.
Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

from evermind.retrieval.citations import (
    REFUSAL,
    SYSTEM_PROMPT,
    Answer,
    Citation,
    build_request,
    parse_citations,
)
from evermind.retrieval.corpus import chunk_item, index_chunks, read_chunks
from evermind.retrieval.lexical import BM25Arm, LexicalArm, StoreLexicalArm
from evermind.retrieval.passages import Passage, RelevanceFloor, SearchResult, source_of
from evermind.retrieval.retriever import EnterpriseRetriever, Reranker

__all__ = [
    "REFUSAL",
    "SYSTEM_PROMPT",
    "Answer",
    "BM25Arm",
    "Citation",
    "EnterpriseRetriever",
    "LexicalArm",
    "Passage",
    "RelevanceFloor",
    "Reranker",
    "SearchResult",
    "StoreLexicalArm",
    "build_request",
    "chunk_item",
    "index_chunks",
    "parse_citations",
    "read_chunks",
    "source_of",
]
