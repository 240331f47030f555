"""Grounded answers over what ``evermind ingest`` stored (``evermind ask --answer-with``,
``POST /v1/answer``).

:func:`search_ingested` finds the passages; :func:`answer_ingested` hands them, numbered, to a
model through any :class:`~evermind.bridges.Bridge` and checks the ``[n]`` citations of its
reply. The prompt, the parsing and the refusal are the retriever's
(:func:`evermind.retrieval.citations.answer_over`): one way to answer from sources, whichever
store the passages came from. No passage (recall's relevance floor refused them all) is the
refusal, and the model is not called.

Each passage is shown to the model headed by its source id, as the retriever shows its own; the
line and section are what ``evermind ask`` prints beside each cited number.

Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evermind.bridges.base import Bridge
from evermind.ingest.passages import NO_EVIDENCE, IngestedPassage
from evermind.retrieval.citations import Answer, answer_over
from evermind.retrieval.passages import Passage, SearchResult

__all__ = ["answer_ingested", "answer_json", "as_search_result"]


def as_search_result(question: str, passages: Sequence[IngestedPassage]) -> SearchResult:
    """The ingested passages as the retriever's search result, numbered in the same order
    (source ``[n]`` is ``passages[n - 1]``); none is a refusal."""
    found = tuple(
        Passage(
            id=p.key,
            source=p.source,
            text=p.text,
            score=p.score,
            cosine=None,
            lexical=None,
            coverage=0.0,
        )
        for p in passages
    )
    reason = "" if found else f"{NO_EVIDENCE}: no passage cleared recall's relevance floor"
    return SearchResult(question, found, not found, reason, len(found), "recall")


async def answer_ingested(
    question: str,
    passages: Sequence[IngestedPassage],
    bridge: Bridge,
    *,
    model: str,
    max_tokens: int = 512,
    tenant: str = "default",
) -> Answer:
    """The model's answer to ``question`` over ``passages``, its citations checked.

    Args:
        question: The question.
        passages: What :func:`~evermind.ingest.search_ingested` found, best first.
        bridge: Any bridge (``evermind ask`` uses the OpenAI SDK one, pointed at
            ``evermind serve`` by default, whose gateway reaches Claude, GPT and the rest).
        model: The model name the bridge sends.
        max_tokens: The answer's limit.
        tenant: Sent with the request (the gateway's usage and cache scope).

    Raises:
        UpstreamError: The bridge failed.
    """
    result = as_search_result(question, passages)
    return await answer_over(result, bridge, model=model, max_tokens=max_tokens, tenant=tenant)


def answer_json(answer: Answer, passages: Sequence[IngestedPassage]) -> dict[str, Any]:
    """``answer`` as JSON-ready fields: the text, whether it refused and why, the cited
    passage numbers, the invalid ones, and every passage offered."""
    return {
        "question": answer.question,
        "answer": answer.text,
        "refused": answer.refused,
        "reason": answer.reason,
        "grounded": answer.grounded,
        "citations": [c.number for c in answer.citations],
        "invalid_citations": list(answer.invalid),
        "passages": [p.to_dict() for p in passages],
    }
