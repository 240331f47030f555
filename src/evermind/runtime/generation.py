"""What a generation request asks for and what it produced (native-only).

The routes build a :class:`GenerationRequest`; the batching scheduler
(:class:`evermind.runtime.scheduler.Scheduler`) runs it and fills a :class:`GenerationResult`.
The chat template (:func:`render_chat`, documented in docs/runtime.md) lives in
:mod:`evermind.model.chat`, shared with the in-process EvermindBridge; it is re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evermind.model.chat import CHAT_STOP as CHAT_STOP  # re-exported for the routes
from evermind.model.chat import render_chat as render_chat


@dataclass
class GenerationRequest:
    """One generation's inputs, already validated by the route."""

    prompt: str
    max_tokens: int
    temperature: float = 1.0
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    #: Drop the reply's leading whitespace (chat replies).
    strip_leading: bool = False


@dataclass
class GenerationResult:
    """What came out, with the OpenAI ``usage`` counts."""

    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "length"
