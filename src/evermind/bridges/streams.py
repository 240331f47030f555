"""Streamed answers of the two wire protocols, as pure folds (browser-safe: standard library
only).

:class:`SSEParser` splits a ``text/event-stream`` body, fed in arbitrary pieces, into events
(no event past :data:`~evermind.bridges.answers.MAX_EVENT_CHARS`); :class:`AnthropicStream`
and :class:`OpenAIStream` fold the events of a streamed Messages / Chat Completions response
(one parsed ``data`` object at a time) into text deltas and, at the end, the completion. Every
value is checked as :mod:`evermind.bridges.wire` checks a whole answer
(:mod:`evermind.bridges.answers`): a stream that ends without its stop reason, an empty
answer, a tool call without an id, a count that is no count, or an answer past ``max_chars``
raises :class:`~evermind.errors.UpstreamError`. The SDK bridges and the tab's FetchBridge read
streams through these folds, so the mapping exists once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evermind.bridges import answers
from evermind.bridges.base import Completion, ToolCall, Usage
from evermind.bridges.wire import (
    ANTHROPIC_FINISH,
    OPENAI_FINISH,
    anthropic_usage,
    finish_of,
    json_object,
    openai_usage,
)

__all__ = ["AnthropicStream", "OpenAIStream", "SSEEvent", "SSEParser"]


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def call(self) -> ToolCall:
        return ToolCall(self.id, self.name, json_object("".join(self.arguments)))


class _Fold:
    """What both folds share: the answer's size so far, against ``max_chars``, and the
    ``secrets`` scrubbed from an error event before it is quoted."""

    def __init__(self, provider: str, max_chars: int, secrets: Iterable[str]) -> None:
        self.provider = provider
        self.max_chars = max_chars
        self.secrets = tuple(secrets)
        self.done = False
        self._chars = 0

    def _grow(self, piece: str) -> str:
        self._chars += len(piece)
        answers.check_size(self._chars, self.max_chars, self.provider)
        return piece


class AnthropicStream(_Fold):
    """Folds the events of a streamed Messages response into deltas and a completion.

    Feed each event's parsed ``data`` to :meth:`feed` (``message_start``,
    ``content_block_start``/``_delta``/``_stop``, ``message_delta``, ``message_stop``,
    ``ping``, ``error``). Usage comes from ``message_start`` (input and cache fields) and is
    updated by ``message_delta`` (cumulative output; any input fields it carries win).

    Content blocks the contract has no field for (``thinking``, ``redacted_thinking``, a
    server tool's blocks) are not folded: after :meth:`feed`, :attr:`other` is the event when
    it belongs to one (its start, a delta, its stop), so a relay in the same protocol can
    pass it on in its place (a thinking block must reach a client that sends it back with a
    tool result). Their text counts towards ``max_chars`` too.

    Args:
        provider: The name errors and the completion carry.
        max_chars: Characters of text and tool arguments the answer may reach
            (``upstream_too_large`` beyond).
        secrets: Scrubbed from an error event's message before it is quoted (the key).
    """

    def __init__(
        self,
        provider: str = "anthropic",
        max_chars: int = answers.MAX_ANSWER_CHARS,
        secrets: Iterable[str] = (),
    ) -> None:
        super().__init__(provider, max_chars, secrets)
        self._text: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._usage: dict[str, Any] = {}
        self._id = ""
        self._model = ""
        self._stop: str | None = None
        self._others: set[int] = set()
        #: The last event fed, when it belongs to a block the contract does not carry.
        self.other: dict[str, Any] | None = None

    def feed(self, event: object) -> str:
        """Takes one event; returns the text it adds ("" for most events; see :attr:`other`).

        Raises:
            UpstreamError: An ``error`` event (e.g. ``overloaded_error`` mid-stream), or an
                event that is malformed.
        """
        p = self.provider
        event = answers.mapping(event, p, "a stream event", required=True)
        kind = event.get("type")
        self.other = None
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            at = answers.index(event.get("index"), p, f"{kind}.index")
            block = answers.mapping(event.get("content_block"), p, "content_block")
            if kind == "content_block_start" and block.get("type") not in ("text", "tool_use"):
                self._others.add(at)
            if at in self._others:
                self._grow(json.dumps(event.get("delta") or block))
                self.other = dict(event)
                return ""
        if kind == "message_start":
            message = answers.mapping(event.get("message"), p, "message_start.message")
            self._id = answers.text(message.get("id"), p, "message_start.message.id")
            self._model = answers.text(message.get("model"), p, "message_start.message.model")
            self._usage.update(_present(message.get("usage"), p, "message_start.message.usage"))
        elif kind == "content_block_start":
            at = answers.index(event.get("index"), p, "content_block_start.index")
            block = answers.mapping(event.get("content_block"), p, "content_block")
            if block.get("type") == "tool_use":
                self._calls[at] = _PartialCall(
                    answers.text(block.get("id"), p, "content_block.id"),
                    answers.text(block.get("name"), p, "content_block.name"),
                )
            elif block.get("type") == "text":
                started = answers.text(block.get("text"), p, "content_block.text")
                if started:
                    self._text.append(self._grow(started))
                    return started
        elif kind == "content_block_delta":
            at = answers.index(event.get("index"), p, "content_block_delta.index")
            delta = answers.mapping(event.get("delta"), p, "content_block_delta.delta")
            if delta.get("type") == "text_delta":
                text = self._grow(answers.text(delta.get("text"), p, "text_delta.text"))
                self._text.append(text)
                return text
            if delta.get("type") == "input_json_delta":
                partial = self._calls.setdefault(at, _PartialCall())
                piece = answers.text(delta.get("partial_json"), p, "input_json_delta.partial_json")
                partial.arguments.append(self._grow(piece))
        elif kind == "message_delta":
            delta = answers.mapping(event.get("delta"), p, "message_delta.delta")
            stop = answers.text(delta.get("stop_reason"), p, "message_delta.delta.stop_reason")
            self._stop = stop or self._stop
            self._usage.update(_present(event.get("usage"), p, "message_delta.usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise answers.stream_error(p, event.get("error"), self.secrets)
        return ""

    def usage_so_far(self) -> Usage:
        """The usage reported so far (after ``message_start``: the input side).

        Raises:
            UpstreamError: A count that is not a whole number in range.
        """
        return anthropic_usage(self._usage, self.provider)

    def completion(self) -> Completion:
        """The completion of the events fed (call after ``message_stop``: :attr:`done`).

        Raises:
            UpstreamError: No ``stop_reason`` arrived, or the answer is malformed or empty.
        """
        p = self.provider
        return answers.check_complete(
            Completion(
                text="".join(self._text),
                model=self._model,
                provider=p,
                finish_reason=finish_of(
                    ANTHROPIC_FINISH, self._stop, p, "message_delta.stop_reason"
                ),
                usage=anthropic_usage(self._usage, p),
                tool_calls=tuple(self._calls[i].call() for i in sorted(self._calls)),
                id=self._id,
            )
        )


def _present(usage: object, provider: str, where: str) -> dict[str, Any]:
    fields = answers.mapping(usage, provider, where)
    return {k: v for k, v in fields.items() if v is not None}


class OpenAIStream(_Fold):
    """Folds the chunks of a streamed Chat Completions response into deltas and a completion.

    Feed each chunk's parsed ``data`` to :meth:`feed` and call :meth:`finish` on
    ``data: [DONE]`` (an SDK that swallows ``[DONE]``: call it when the iterator ends).
    The usage chunk (``choices: []``, ``usage`` set) arrives last when the request asked for
    ``include_usage``.

    Args:
        provider: The name errors and the completion carry.
        max_chars: Characters of text and tool arguments the answer may reach
            (``upstream_too_large`` beyond).
        secrets: Scrubbed from an error chunk's message before it is quoted (the key).
    """

    def __init__(
        self,
        provider: str = "openai",
        max_chars: int = answers.MAX_ANSWER_CHARS,
        secrets: Iterable[str] = (),
    ) -> None:
        super().__init__(provider, max_chars, secrets)
        self._text: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._usage: object = None
        self._id = ""
        self._model = ""
        self._finish: str | None = None

    def feed(self, chunk: object) -> str:
        """Takes one chunk; returns the text it adds.

        Raises:
            UpstreamError: The chunk is an error object (servers that report errors in-band),
                or malformed.
        """
        p = self.provider
        chunk = answers.mapping(chunk, p, "a stream chunk", required=True)
        if chunk.get("error"):
            raise answers.stream_error(p, chunk.get("error"), self.secrets)
        self._id = answers.text(chunk.get("id"), p, "chunk id") or self._id
        self._model = answers.text(chunk.get("model"), p, "chunk model") or self._model
        if chunk.get("usage") is not None:
            self._usage = answers.mapping(chunk["usage"], p, "chunk usage")
        text = ""
        for raw in answers.items(chunk.get("choices"), p, "chunk choices"):
            choice = answers.mapping(raw, p, "a chunk's choice", required=True)
            if answers.index(choice.get("index"), p, "choice index") != 0:
                continue
            delta = answers.mapping(choice.get("delta"), p, "choice delta")
            text += self._grow(answers.text(delta.get("content"), p, "delta content"))
            for i, call_raw in enumerate(answers.items(delta.get("tool_calls"), p, "tool_calls")):
                self._call(answers.mapping(call_raw, p, f"tool_calls[{i}]", required=True))
            finish = answers.text(choice.get("finish_reason"), p, "choice finish_reason")
            self._finish = finish or self._finish
        if text:
            self._text.append(text)
        return text

    def _call(self, call: Mapping[str, Any]) -> None:
        p = self.provider
        partial = self._calls.setdefault(
            answers.index(call.get("index"), p, "tool_call index"), _PartialCall()
        )
        function = answers.mapping(call.get("function"), p, "tool_call function")
        partial.id = answers.text(call.get("id"), p, "tool_call id") or partial.id
        partial.name = answers.text(function.get("name"), p, "tool_call name") or partial.name
        arguments = answers.text(function.get("arguments"), p, "tool_call arguments")
        if arguments:
            partial.arguments.append(self._grow(arguments))

    def finish(self) -> None:
        """Marks the stream complete (``data: [DONE]`` or the SDK's iterator ended cleanly)."""
        self.done = True

    @property
    def finished(self) -> bool:
        """Whether a choice reported its ``finish_reason`` (a complete answer)."""
        return self._finish is not None

    def completion(self) -> Completion:
        """The completion of the chunks fed.

        Raises:
            UpstreamError: No ``finish_reason`` arrived (``[DONE]`` after a partial answer), or
                the answer is malformed or empty.
        """
        p = self.provider
        return answers.check_complete(
            Completion(
                text="".join(self._text),
                model=self._model,
                provider=p,
                finish_reason=finish_of(OPENAI_FINISH, self._finish, p, "finish_reason"),
                usage=openai_usage(self._usage, p),
                tool_calls=tuple(self._calls[i].call() for i in sorted(self._calls)),
                id=self._id,
            )
        )


@dataclass
class SSEEvent:
    """One server-sent event: its ``event`` name ("" when unnamed) and ``data``."""

    event: str
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


class SSEParser:
    """Splits a ``text/event-stream`` body, fed in arbitrary pieces, into :class:`SSEEvent` s.

    Lines ``event:``/``data:`` accumulate until a blank line ends the event; comments
    (``:``) and ``id``/``retry`` lines are ignored; ``\\r\\n`` and ``\\n`` both end lines.

    Args:
        provider: The name a refusal carries.
        max_event_chars: The most characters one event (or one line) may hold: an upstream
            that never ends its line cannot grow the buffer without bound.
    """

    def __init__(
        self, provider: str = "upstream", max_event_chars: int = answers.MAX_EVENT_CHARS
    ) -> None:
        self.provider = provider
        self.max_event_chars = max_event_chars
        self._buffer = ""
        self._event = ""
        self._data: list[str] = []
        self._held = 0

    def feed(self, text: str) -> list[SSEEvent]:
        """Takes the next piece of the body; returns the events it completed.

        Raises:
            UpstreamError: An event past ``max_event_chars`` (``upstream_too_large``).
        """
        self._buffer += text
        events: list[SSEEvent] = []
        while True:
            cut = self._buffer.find("\n")
            if cut < 0:
                break
            line = self._buffer[:cut].rstrip("\r")
            self._buffer = self._buffer[cut + 1 :]
            if not line:
                if self._data or self._event:
                    events.append(SSEEvent(self._event, "\n".join(self._data)))
                self._event, self._data, self._held = "", [], 0
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                self._event = value
            elif name == "data":
                self._data.append(value)
                self._held += len(value)
        held = self._held + len(self._buffer)  # the event not yet ended
        answers.check_size(held, self.max_event_chars, self.provider, "a stream event")
        return events
