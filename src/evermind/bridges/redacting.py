"""Secrets scrubbed from everything an upstream says, before it is cached or returned
(browser-safe: standard library only).

An upstream can echo a key back: in an error message (401s quote it), or in a successful
answer (a prompt that asks for it, a misconfigured proxy). :class:`RedactingBridge` sits
between the cache and the upstream's bridge (the gateway builds
``CachingBridge(RedactingBridge(InstrumentedBridge(sdk), secrets), cache)``), so no text that
holds a configured key reaches a client or the cache:

- a completion's text, and every string in its tool calls (id, name, arguments at any depth);
- a stream's deltas, through :class:`StreamScrubber`: a key may arrive split across two
  deltas, so the longest tail of what arrived that could still begin a key is held back
  until the next delta shows it is not one (at most the longest key's length, minus one);
  the completion's text is exactly what was streamed;
- the upstream's raw answer (``Completion.raw``), every string at any depth;
- a stream's own chunks (``Delta.chunk``, relayed one for one in the same protocol), through
  :class:`ChunkScrubber`: the content and each tool call's arguments through stream
  scrubbers (what a chunk's content says is what its delta's text says), every other string
  whole; a chunk's ``logprobs`` (tokens are pieces of the text) are passed on only while no
  text is held back or replaced, else ``null``;
- an :class:`~evermind.errors.UpstreamError`'s message.

Each key is replaced by ``***``. Messages are scrubbed whole, before any cut: a cut first
could leave part of a key behind (the bridges quote an upstream's words through
:func:`evermind.bridges.answers.excerpt`, which scrubs first too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterable
from typing import Any

from evermind.bridges.answers import scrub
from evermind.bridges.base import Bridge, ChatRequest, Completion, Delta, ToolCall, Usage
from evermind.errors import UpstreamError

__all__ = ["RedactingBridge", "StreamScrubber", "scrub_value", "scrubbed_error"]


def scrubbed_error(err: UpstreamError, secrets: Iterable[str]) -> UpstreamError:
    """``err`` with every one of ``secrets`` scrubbed from its message (upstreams echo keys
    back in errors); the same error when there was nothing to scrub."""
    message = scrub(str(err), secrets)
    reported = None if err.reported is None else scrub_value(err.reported, secrets)
    if message == str(err) and reported == err.reported:
        return err
    return UpstreamError(
        message,
        provider=err.provider,
        status=err.status,
        retry_after=err.retry_after,
        code=err.code or "upstream_error",
        reported=reported,
    )


def scrub_value(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` (JSON-like: strings, lists, dicts) with every secret in every string replaced."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, list | tuple):
        return [scrub_value(item, secrets) for item in value]
    if isinstance(value, dict):
        return {scrub(str(k), secrets): scrub_value(v, secrets) for k, v in value.items()}
    return value


class StreamScrubber:
    """Scrubs secrets from text that arrives in pieces (a key may span two pieces).

    Args:
        secrets: The keys to replace by ``***``.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
        self._pending = ""

    def feed(self, text: str) -> str:
        """The part of ``text`` (after what was held back) that can be released now."""
        buffered = scrub(self._pending + text, self.secrets)
        keep = self._open_tail(buffered)
        self._pending = buffered[len(buffered) - keep :] if keep else ""
        return buffered[: len(buffered) - keep]

    @property
    def holding(self) -> bool:
        """Whether some text is held back (it may begin a key)."""
        return bool(self._pending)

    def flush(self) -> str:
        """What is still held back (the stream ended: it begins no key)."""
        rest, self._pending = self._pending, ""
        return rest

    def _open_tail(self, text: str) -> int:
        """The length of the longest tail of ``text`` that is a proper prefix of a secret."""
        longest = 0
        for secret in self.secrets:
            for size in range(min(len(text), len(secret) - 1), longest, -1):
                if text.endswith(secret[:size]):
                    longest = size
                    break
        return longest


class ChunkScrubber:
    """Scrubs a stream's Chat Completions chunks one for one (see the module docstring).

    Args:
        secrets: The keys to replace by ``***``.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = tuple(secrets)
        self._arguments: dict[object, StreamScrubber] = {}

    def scrub(self, chunk: dict[str, Any], text: str, released: str, holding: bool) -> Any:
        """``chunk`` scrubbed, key order kept; choice 0's content becomes ``released`` (the
        text scrubber's output for the chunk's ``text``: a held-back tail moves to a later
        chunk, so the chunks stay one for one)."""
        clean = text == released and not holding
        out: dict[str, Any] = {}
        for key, value in chunk.items():
            if key == "choices" and isinstance(value, list):
                out[key] = [self._choice(c, released, clean) for c in value]
            else:
                out[scrub(str(key), self.secrets)] = scrub_value(value, self.secrets)
        return out

    def flush(self) -> list[tuple[object, str]]:
        """Each tool call's arguments still held back at the end: ``(index, text)``."""
        rest = [(index, scrubber.flush()) for index, scrubber in self._arguments.items()]
        return [(index, text) for index, text in rest if text]

    def _choice(self, choice: Any, released: str, clean: bool) -> Any:
        if not isinstance(choice, dict):
            return scrub_value(choice, self.secrets)
        first = choice.get("index", 0) == 0
        out: dict[str, Any] = {}
        for key, value in choice.items():
            if key == "delta" and isinstance(value, dict):
                out[key] = self._delta(value, released if first else None)
            elif key == "logprobs":
                out[key] = scrub_value(value, self.secrets) if clean or not first else None
            else:
                out[key] = scrub_value(value, self.secrets)
        return out

    def _delta(self, delta: dict[str, Any], released: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in delta.items():
            if key == "content" and released is not None and isinstance(value, str):
                out[key] = released
            elif key == "tool_calls" and isinstance(value, list):
                out[key] = [self._call(call) for call in value]
            else:
                out[scrub(str(key), self.secrets)] = scrub_value(value, self.secrets)
        return out

    def _call(self, call: Any) -> Any:
        if not isinstance(call, dict):
            return scrub_value(call, self.secrets)
        function = call.get("function")
        out = scrub_value({k: v for k, v in call.items()}, self.secrets)
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            index = call.get("index", 0)
            scrubber = self._arguments.setdefault(
                index if isinstance(index, int) else 0, StreamScrubber(self.secrets)
            )
            out["function"] = {
                **out["function"],
                "arguments": scrubber.feed(function["arguments"]),
            }
        return out


class EventScrubber:
    """Scrubs a Messages stream's events one for one: text, thinking and tool-input deltas
    through stream scrubbers (a key split across deltas is caught; what a block still holds
    at its end goes out in one more delta of that block, just before its
    ``content_block_stop``), every other string whole.

    Args:
        secrets: The keys to replace by ``***``.
        text: The stream's text scrubber (its output is the completion's text).
    """

    def __init__(self, secrets: Iterable[str], text: StreamScrubber) -> None:
        self.secrets = tuple(secrets)
        self.text = text
        self._kinds: dict[object, str] = {}
        self._held: dict[object, StreamScrubber] = {}

    def scrub(self, event: dict[str, Any], released: str) -> list[tuple[str, dict[str, Any]]]:
        """``(text, event)`` pairs for one upstream event (``released``: the text scrubber's
        output for its text delta); usually one, two at a block's end that held text back."""
        kind = event.get("type")
        index = event.get("index")
        if kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            self._kinds[index] = str(event["content_block"].get("type"))
        delta = event.get("delta")
        if kind == "content_block_delta" and isinstance(delta, dict):
            field = {"text_delta": "text", "thinking_delta": "thinking"}.get(
                str(delta.get("type")), "partial_json"
            )
            if isinstance(delta.get(field), str):
                if field == "text":
                    value, said = released, released
                else:
                    scrubber = self._held.setdefault(index, StreamScrubber(self.secrets))
                    value, said = scrubber.feed(delta[field]), ""
                clean = self._whole(event, "delta")
                clean["delta"] = {**self._whole(delta, field), field: value}
                return [(said, _ordered(event, clean))]
        if kind == "content_block_stop":
            out = self._tail(index)
            return [*out, ("", scrub_value(event, self.secrets))]
        return [("", scrub_value(event, self.secrets))]

    def _tail(self, index: object) -> list[tuple[str, dict[str, Any]]]:
        block = self._kinds.pop(index, "")
        if block == "text":
            rest, kind, field = self.text.flush(), "text_delta", "text"
        else:
            held = self._held.pop(index, None)
            rest = "" if held is None else held.flush()
            kind, field = (
                ("thinking_delta", "thinking")
                if block == "thinking"
                else (
                    "input_json_delta",
                    "partial_json",
                )
            )
        if not rest:
            return []
        event = {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": kind, field: rest},
        }
        return [(rest if block == "text" else "", event)]

    def _whole(self, value: dict[str, Any], skip: str) -> dict[str, Any]:
        return {
            scrub(str(k), self.secrets): scrub_value(v, self.secrets)
            for k, v in value.items()
            if k != skip
        }


def _ordered(original: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` in ``original``'s key order (the keys ``values`` has)."""
    return {k: values[k] for k in original if k in values}


class RedactingBridge:
    """``bridge`` with every one of ``secrets`` scrubbed from what it returns or raises.

    Args:
        bridge: The upstream's bridge.
        secrets: The keys (every configured key of every upstream, in the gateway).
    """

    def __init__(self, bridge: Bridge, secrets: Iterable[str]) -> None:
        self.bridge = bridge
        self.provider = bridge.provider
        self.secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))

    @property
    def last_usage(self) -> Usage | None:
        """The inner bridge's usage of its last finished call."""
        return self.bridge.last_usage

    async def generate(self, request: ChatRequest) -> Completion:
        """The inner bridge's completion, scrubbed."""
        try:
            completion = await self.bridge.generate(request)
        except UpstreamError as err:
            raise self._cleaned(err) from None
        return self._scrubbed(completion, scrub(completion.text, self.secrets))

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        """The inner bridge's deltas, scrubbed (a key split across deltas included)."""
        scrubber = StreamScrubber(self.secrets)
        chunks = ChunkScrubber(self.secrets)
        events = EventScrubber(self.secrets, scrubber)
        last: dict[str, Any] | None = None
        sent: list[str] = []
        pieces = self.bridge.stream(request)
        try:
            async for delta in pieces:
                if delta.chunk is not None and self.provider == "anthropic":
                    released = scrubber.feed(delta.text)
                    for said, event in events.scrub(delta.chunk, released):
                        sent.append(said)
                        passed = event if delta.event is not None else None
                        yield Delta(text=said, event=passed, usage=delta.usage, chunk=event)
                    continue
                if delta.event is not None:  # a passed-on block's event alone (thinking)
                    for _, event in events.scrub(delta.event, ""):
                        yield Delta(event=event)
                    continue
                if delta.completion is not None:
                    rest = scrubber.flush()
                    calls = chunks.flush()
                    if rest or calls:  # held back to the end: one more chunk carries it
                        sent.append(rest)
                        tail = _tail_chunk(last, rest, calls) if last is not None else None
                        yield Delta(text=rest, chunk=tail)
                    yield Delta(completion=self._scrubbed(delta.completion, "".join(sent)))
                    return
                text = scrubber.feed(delta.text)
                if delta.chunk is not None:  # one for one, whatever it carries
                    sent.append(text)
                    last = chunks.scrub(delta.chunk, delta.text, text, scrubber.holding)
                    yield Delta(text=text, usage=delta.usage, chunk=last)
                    continue
                if text or delta.usage is not None:
                    sent.append(text)
                    yield Delta(text=text, usage=delta.usage)
        except UpstreamError as err:
            raise self._cleaned(err) from None
        finally:
            close = getattr(pieces, "aclose", None)
            if close is not None:
                await close()

    def _scrubbed(self, completion: Completion, text: str) -> Completion:
        calls = tuple(
            ToolCall(
                scrub(call.id, self.secrets),
                scrub(call.name, self.secrets),
                scrub_value(call.arguments, self.secrets),
            )
            for call in completion.tool_calls
        )
        raw = None if completion.raw is None else scrub_value(completion.raw, self.secrets)
        return dataclasses.replace(completion, text=text, tool_calls=calls, raw=raw)

    def _cleaned(self, err: UpstreamError) -> UpstreamError:
        return scrubbed_error(err, self.secrets)

    async def aclose(self) -> None:
        """Closes the inner bridge."""
        await self.bridge.aclose()


def _tail_chunk(last: dict[str, Any], text: str, calls: list[tuple[object, str]]) -> dict[str, Any]:
    """A chunk shaped like the stream's last one (its id, created, model) carrying what was
    held back to the end: the text's tail and the tool calls' argument tails."""
    delta: dict[str, Any] = {}
    if text:
        delta["content"] = text
    if calls:
        delta["tool_calls"] = [{"index": i, "function": {"arguments": a}} for i, a in calls]
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
    keep = {k: v for k, v in last.items() if k in ("id", "object", "created", "model")}
    return {**keep, "choices": [choice]}
