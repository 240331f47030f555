"""Grounded answers: the numbered-sources prompt, ``[n]`` citations parsed and checked.

The prompt keeps the instructions in the static ``system`` (a provider's prefix cache keeps
hitting) and puts the sources in the user turn, each headed ``[n] (source: <source>)``,
then the question. The model is told to cite every claim with ``[n]`` and to reply exactly
:data:`REFUSAL` when the sources do not hold the answer.

:func:`parse_citations` reads ``[2]``, ``[1, 3]`` and ``[1][2]``; a number that names no
source (``[0]``, ``[7]`` of five) is **invalid** and reported, never silently dropped; an
answer with no citation at all is *uncited*. Browser-safe: standard library and
``evermind`` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evermind.bridges.base import Bridge, ChatRequest, Completion, Message
from evermind.retrieval.passages import Passage, SearchResult

__all__ = [
    "REFUSAL",
    "SYSTEM_PROMPT",
    "Answer",
    "Citation",
    "answer_over",
    "build_request",
    "format_sources",
    "is_refusal",
    "parse_citations",
    "read_answer",
]

#: What the retriever answers, and asks the model to answer, when the sources do not say.
REFUSAL = "I don't have that."
SYSTEM_PROMPT = (
    "Answer the question using only the numbered sources in the user's message. After each "
    "claim, put the number of the source it comes from in square brackets, like [2]. Do not "
    "cite a number that is not in the list. If the sources do not contain the answer, reply "
    f"exactly: {REFUSAL}"
)
_CITATION = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_REFUSAL_OPENERS = ("i don't have that", "i do not have that", "i don’t have that")


@dataclass(frozen=True)
class Citation:
    """One valid ``[n]`` in an answer: the number and the passage it names."""

    number: int
    passage: Passage

    @property
    def source(self) -> str:
        return self.passage.source


@dataclass(frozen=True)
class Answer:
    """A grounded answer, or a refusal.

    Attributes:
        question: The question.
        text: The answer (:data:`REFUSAL` when refused before the model was asked).
        citations: The valid citations, in the order they first appear.
        invalid: Cited numbers that name no source, in the order they appear.
        refused: True when the retriever refused (nothing cleared the floor; the model was
            not called) or the model replied :data:`REFUSAL`.
        reason: Why it refused (empty when it did not).
        passages: The numbered sources offered (source ``[n]`` is ``passages[n - 1]``).
        completion: The model's completion (None when the model was not called).
    """

    question: str
    text: str
    citations: tuple[Citation, ...]
    invalid: tuple[int, ...]
    refused: bool
    reason: str
    passages: tuple[Passage, ...]
    completion: Completion | None

    @property
    def cited_sources(self) -> tuple[str, ...]:
        """The distinct sources the valid citations name, in citation order."""
        return tuple(dict.fromkeys(c.source for c in self.citations))

    @property
    def grounded(self) -> bool:
        """Answered, with at least one citation and no invalid one."""
        return not self.refused and bool(self.citations) and not self.invalid


def format_sources(passages: tuple[Passage, ...]) -> str:
    """The numbered sources block: ``[n] (source: <source>)`` then the passage's text."""
    return "\n\n".join(
        f"[{n}] (source: {p.source})\n{p.text.strip()}" for n, p in enumerate(passages, start=1)
    )


def build_request(
    question: str, passages: tuple[Passage, ...], *, model: str, max_tokens: int, tenant: str
) -> ChatRequest:
    """The chat request that asks ``question`` over the numbered ``passages``."""
    user = f"Sources:\n\n{format_sources(passages)}\n\nQuestion: {question.strip()}"
    return ChatRequest(
        model=model,
        messages=(Message("user", user),),
        system=SYSTEM_PROMPT,
        max_tokens=max_tokens,
        temperature=0.0,
        tenant=tenant,
    )


def parse_citations(text: str) -> list[int]:
    """Every cited number in ``text``, in order of appearance (repeats kept)."""
    return [int(n) for group in _CITATION.findall(text) for n in group.split(",")]


def is_refusal(text: str) -> bool:
    """Whether the model's reply is the refusal (its opening words, case-insensitive)."""
    return text.strip().lower().startswith(_REFUSAL_OPENERS)


def refused(result: SearchResult) -> Answer:
    """The answer to a search that refused: :data:`REFUSAL`, no model call."""
    return Answer(result.question, REFUSAL, (), (), True, result.reason, (), None)


def read_answer(result: SearchResult, completion: Completion) -> Answer:
    """The model's reply to the sources of ``result``, its citations checked."""
    passages = result.passages
    citations: list[Citation] = []
    invalid: list[int] = []
    seen: set[int] = set()
    for number in parse_citations(completion.text):
        if not 1 <= number <= len(passages):
            invalid.append(number)
        elif number not in seen:
            seen.add(number)
            citations.append(Citation(number, passages[number - 1]))
    if is_refusal(completion.text):
        return Answer(
            result.question,
            completion.text,
            tuple(citations),
            tuple(invalid),
            True,
            "the model found no answer in the sources",
            passages,
            completion,
        )
    return Answer(
        result.question,
        completion.text,
        tuple(citations),
        tuple(invalid),
        False,
        "",
        passages,
        completion,
    )


async def answer_over(
    result: SearchResult, bridge: Bridge, *, model: str, max_tokens: int = 512, tenant: str
) -> Answer:
    """The grounded answer to ``result``'s question over its passages, through ``bridge``.

    A refused search is answered with the refusal and ``bridge`` is not called; otherwise the
    model gets the numbered passages (:func:`build_request`) and its reply's citations are
    checked (:func:`read_answer`). ``EnterpriseRetriever.answer`` and
    ``evermind ask --answer-with`` both answer through here.

    Raises:
        UpstreamError: The bridge failed.
    """
    if result.refused or not result.passages:
        return refused(result)
    request = build_request(
        result.question, result.passages, model=model, max_tokens=max_tokens, tenant=tenant
    )
    return read_answer(result, await bridge.generate(request))
