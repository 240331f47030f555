"""The Messages answer of ``POST /v1/messages``: its JSON parts and its event stream (native-only).

Owns what a Messages client reads back: ``stop_reason`` (:data:`STOP_REASON`), the four
usage fields (:func:`usage_json`), ``tool_use`` blocks (:func:`tool_blocks`), and
:func:`events`, the server-sent event sequence of a streamed call. A miss from a Messages
upstream is that upstream's own events, one for one (:func:`_relayed`); a cache hit, or an
answer from an upstream of another protocol, is written here, as Anthropic sends it:

- ``message_start``, with the upstream's own input usage when its stream said it first (a
  :class:`~evermind.bridges.base.Delta` carrying ``usage``; zero on a cache hit: nothing paid);
- content blocks opened as the answer has them (:class:`Blocks`): a block the contract does
  not carry (``thinking``, ``redacted_thinking``) passed on event by event from the upstream,
  renumbered; a text block at its first text (an answer that only calls tools has none);
  one block per tool call at the end; ``ping`` after the first block;
- ``message_delta`` (``stop_reason``, usage, the ``evermind`` field), ``message_stop``;
- an ``error`` event when the upstream fails once the headers are gone.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from evermind.bridges.base import ChatRequest, Completion, Delta
from evermind.errors import EvermindError
from evermind.runtime.gateway.core import Gateway, Resolved
from evermind.runtime.gateway.openai import evermind_field

#: The contract's ``finish_reason`` → Anthropic's ``stop_reason``.
STOP_REASON = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


def usage_json(completion: Completion) -> dict[str, int]:
    """The Messages ``usage`` of ``completion`` (what this call paid upstream)."""
    usage = completion.usage
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
    }


def tool_blocks(completion: Completion) -> list[dict[str, Any]]:
    """The ``tool_use`` content blocks of ``completion``'s tool calls."""
    return [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
        for c in completion.tool_calls
    ]


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One named server-sent event."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class Blocks:
    """The content blocks of one streamed answer, numbered in the order they open.

    A text block stays open across text deltas and closes when a passed-on block opens (or
    the text ends); a passed-on block keeps the number it got at its start.
    """

    def __init__(self) -> None:
        self.count = 0
        self._text: int | None = None
        self._passed: dict[int, int] = {}  # the upstream's index -> ours

    def start(self, block: dict[str, Any]) -> bytes:
        """Opens the next block (``ping`` after the first, as Anthropic sends it)."""
        index, self.count = self.count, self.count + 1
        opened = sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block},
        )
        return opened + (sse("ping", {"type": "ping"}) if index == 0 else b"")

    def text(self, text: str) -> bytes:
        """A text delta, opening a text block first when none is open."""
        out = b""
        if self._text is None:
            self._text = self.count
            out = self.start({"type": "text", "text": ""})
        delta = {"type": "text_delta", "text": text}
        return out + sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": self._text, "delta": delta},
        )

    def passed(self, event: dict[str, Any]) -> bytes:
        """An upstream event of a block the contract does not carry, renumbered."""
        kind, upstream = str(event.get("type")), event.get("index")
        if kind == "content_block_start" and isinstance(upstream, int):
            out = self.close_text()
            self._passed[upstream] = self.count
            return out + self.start(dict(event.get("content_block") or {}))
        ours = self._passed.get(upstream) if isinstance(upstream, int) else None
        return b"" if ours is None else sse(kind, {**event, "index": ours})

    def close_text(self) -> bytes:
        """``content_block_stop`` of the open text block, if one is open."""
        if self._text is None:
            return b""
        index, self._text = self._text, None
        return sse("content_block_stop", {"type": "content_block_stop", "index": index})

    def tools(self, completion: Completion) -> bytes:
        """One whole block per tool call, after the others."""
        out = b""
        for block in tool_blocks(completion):
            index = self.count
            out += self.start({**block, "input": {}})
            partial = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            out += sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": partial},
            )
            out += sse("content_block_stop", {"type": "content_block_stop", "index": index})
        return out


async def events(
    gateway: Gateway,
    resolved: Resolved,
    request: ChatRequest,
    opened: tuple[str, str],
    message: dict[str, Any],
    deltas: AsyncIterator[Delta],
    first: Delta | None,
) -> AsyncIterator[bytes]:
    """The Messages event stream of a call whose first delta is already in.

    Args:
        gateway: Counts the call once it completes, scrubs an error's message.
        resolved: Where the call went.
        request: The neutral request (its tenant is counted).
        opened: The cache's outcome: ``(status, detail)``.
        message: ``message_start``'s message (id, model), usage left to this function.
        deltas: The rest of the stream.
        first: Its first delta (None: the stream was empty).
    """
    upstream = resolved.upstream
    status, detail = opened
    if upstream.protocol == "anthropic" and first is not None and first.chunk is not None:
        async for out in _relayed(gateway, resolved, request, opened, message, deltas, first):
            yield out
        return
    usage = first.usage if first is not None else None
    start_usage: dict[str, int] = {"input_tokens": 0, "output_tokens": 0}
    if usage is not None:  # the upstream's own count, as its message_start says it
        start_usage = {
            "input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "output_tokens": usage.output_tokens,
        }
    start = {**message, "usage": start_usage}
    yield sse("message_start", {"type": "message_start", "message": start})
    blocks = Blocks()
    completion: Completion | None = None
    try:
        async with aclosing(gateway.relay(request.tenant, upstream, first, deltas)) as relayed:
            async for delta in relayed:
                if delta.event is not None and upstream.protocol == "anthropic":
                    yield blocks.passed(delta.event)
                if delta.text:
                    yield blocks.text(delta.text)
                completion = delta.completion
    except EvermindError as err:  # headers are gone: an error event, as Anthropic sends
        error = {"type": "api_error", "message": gateway.scrub(str(err))}
        yield sse("error", {"type": "error", "error": error})
        return
    assert completion is not None  # the relay ends on the completion or raises
    gateway.account(request.tenant, upstream.name, status, completion)
    yield blocks.close_text() + blocks.tools(completion)
    stop = {
        "stop_reason": STOP_REASON.get(completion.finish_reason, "end_turn"),
        "stop_sequence": None,
    }
    yield sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": stop,
            "usage": usage_json(completion),
            "evermind": evermind_field(completion, status, detail),
        },
    )
    yield sse("message_stop", {"type": "message_stop"})


async def _relayed(
    gateway: Gateway,
    resolved: Resolved,
    request: ChatRequest,
    opened: tuple[str, str],
    message: dict[str, Any],
    deltas: AsyncIterator[Delta],
    first: Delta,
) -> AsyncIterator[bytes]:
    """A miss from a Messages upstream: its own events one for one (its message id, pings,
    every block as it came: citations, thinking, tool input pieces), keys scrubbed,
    ``message_start``'s ``model`` the client's id, and ``message_delta`` (held with
    ``message_stop`` until the call's completion is in and checked: a malformed answer ends
    in an ``error`` event, never a stop) carrying the ``evermind`` field."""
    upstream = resolved.upstream
    status, detail = opened
    held: list[dict[str, Any]] = []  # from message_delta on: they wait for the completion
    completion: Completion | None = None
    try:
        async with aclosing(gateway.relay(request.tenant, upstream, first, deltas)) as relayed:
            async for delta in relayed:
                completion = delta.completion
                event = delta.chunk
                if event is None:
                    continue
                kind = str(event.get("type"))
                if kind == "message_start" and isinstance(event.get("message"), dict):
                    event = {**event, "message": {**event["message"], "model": message["model"]}}
                if held or kind in ("message_delta", "message_stop"):
                    held.append(event)
                    continue
                yield sse(kind, event)
    except EvermindError as err:  # headers are gone: an error event, as Anthropic sends
        # What was held (the stop) is not sent: a client must not read a failed call as done.
        error = {"type": "api_error", "message": gateway.scrub(str(err))}
        yield sse("error", {"type": "error", "error": error})
        return
    assert completion is not None  # the relay ends on the completion or raises
    gateway.account(request.tenant, upstream.name, status, completion)
    for event in held:
        if event.get("type") == "message_delta":
            event = {**event, "evermind": evermind_field(completion, status, detail)}
        yield sse(str(event.get("type")), event)


__all__ = ["STOP_REASON", "Blocks", "events", "sse", "tool_blocks", "usage_json"]
