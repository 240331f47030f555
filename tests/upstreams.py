"""Loopback upstreams that speak the real wire formats: Anthropic Messages, OpenAI Chat
Completions and OpenAI Responses.

Real HTTP servers (Starlette on uvicorn, a background thread, a free port on 127.0.0.1) for
the official SDK clients, the tab's ``fetch`` and the gateway to talk to, with no network::

    with AnthropicUpstream() as claude, OpenAIUpstream() as gpt:
        anthropic.AsyncAnthropic(base_url=claude.url, api_key=claude.api_key)
        openai.AsyncOpenAI(base_url=gpt.url + "/v1", api_key=gpt.api_key)
        claude.fail("rate_limit", times=1, retry_after=0.2)   # the next request gets a 429
        ...
        claude.requests[-1].body["system"]                    # what the last request sent

What they do, deterministically:

- The answer is :func:`default_reply` of the last user turn's text (``reply=`` overrides),
  cut to ``max_tokens`` words (then ``stop_reason`` ``max_tokens`` / ``finish_reason``
  ``length``). A token is a whitespace-separated word (:func:`count_tokens`), everywhere.
- Tools: when the request offers tools and the last user text names one, the model calls
  it with ``{"query": <that text>}``; when the last turn is a tool result, the answer is
  ``"Tool said: <result>"``.
- A scripted model, for multi-step tool use (``think=``, or set :attr:`Upstream.think`):
  ``think(conversation)`` sees the request as a :class:`Conversation` (the system text,
  prompt and facts joined; the turns, tool results as ``tool`` turns; the tools offered)
  and returns the answer's text, or a list of ``(tool name, arguments)`` calls (several:
  parallel calls in one turn), which each route answers in its own wire format (Anthropic
  ``tool_use`` blocks, Chat Completions ``tool_calls``, Responses ``function_call`` items),
  streamed or not. It replaces the two rules above.
- Prompt caching is simulated so usage fields mean something: Anthropic caches the prefix
  up to each ``cache_control`` breakpoint (tools, then system, then messages, the API's
  order): a breakpoint whose prefix was seen before is read from the cache
  (``cache_read_input_tokens``), the rest up to the last breakpoint is written
  (``cache_creation_input_tokens``), the remainder is ``input_tokens``. OpenAI caches message
  prefixes automatically (``prompt_tokens_details.cached_tokens`` = the longest message
  prefix seen before). There is no minimum cacheable length.
- Streams send every event the real APIs send: Anthropic ``message_start``,
  ``content_block_start``, ``ping``, ``content_block_delta`` (``text_delta`` /
  ``input_json_delta``), ``content_block_stop``, ``message_delta`` (usage), ``message_stop``;
  OpenAI ``chat.completion.chunk`` s, the usage chunk when ``stream_options.include_usage``,
  then ``data: [DONE]``; the Responses API (``POST /v1/responses``: ``input`` a string or
  items, ``function_call_output`` items answered like tool results) its named, numbered
  events from ``response.created`` to ``response.completed``, no ``[DONE]``.
- Errors have the real bodies: a wrong key → 401 (``authentication_error`` /
  ``invalid_api_key``); Anthropic requires the ``anthropic-version`` header (400 without).
- Faults, scripted with :meth:`Upstream.fail` for the next N requests: ``rate_limit`` (429
  with ``retry-after``), ``server_error`` (500), ``overloaded`` (529 / 503), ``auth`` (401
  whatever the key), ``cut`` (the connection is closed halfway through the body),
  ``truncate`` (a stream that ends cleanly halfway, without its final event) and
  ``stream_error`` (a stream that sends half, then an in-band error: Anthropic's ``error``
  event with ``overloaded_error``, an OpenAI ``{"error": ...}`` chunk). On a response that
  is not streamed, ``truncate`` and ``stream_error`` cut the body like ``cut``.
- Anything else, scripted with :meth:`Upstream.script`: the next N requests get exactly that
  status, headers and body (bytes, text or JSON), or that list of raw server-sent events
  (hostile upstreams: ``{"choices": []}``, a 429 with ``retry-after: inf``, a stream ending
  ``[DONE]`` without ``finish_reason``, ...).
- Streams record how they ended (:attr:`Upstream.stream_ends`): ``complete``, or ``aborted``
  when the client went away before the last event.
- Every request is recorded (:attr:`Upstream.requests`: path, lower-cased headers, JSON body).
- CORS is open (any origin, any header) so a page can call them (the FetchBridge test).
- ``latency_s`` delays each response before its first byte; ``chunk_delay_s`` each streamed
  event after the first (for TTFT and overhead measurements).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

FAULTS = ("rate_limit", "server_error", "overloaded", "auth", "cut", "truncate", "stream_error")
_WORD = re.compile(r"\S+")


def count_tokens(text: str) -> int:
    """The loopback upstreams' token count of ``text``: its whitespace-separated words."""
    return len(_WORD.findall(text))


def default_reply(text: str) -> str:
    """The answer the upstreams give to a last user turn of ``text``."""
    return f"Answer to: {text}"


def _pieces(text: str) -> list[str]:
    """``text`` split into streamed pieces (a word with its leading space each)."""
    return re.findall(r"\s*\S+", text) or [text]


def _text_of(content: object) -> str:
    """The text of a message's content: a string, or the text of its blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                if block.get("type") == "text":
                    parts.append(str(block.get("text", "")))
                elif block.get("type") == "tool_result":
                    parts.append(_text_of(block.get("content", "")))
        return " ".join(p for p in parts if p)
    return ""


def _conversation(
    body: dict[str, Any], messages: list[dict[str, Any]], tools: list[str]
) -> Conversation:
    """A request in any of the three wire formats as the scripted model sees it."""
    system = body.get("system")
    parts = [system] if isinstance(system, str) else [_text_of(system)]
    parts.append(str(body.get("instructions") or ""))
    turns: list[Turn] = []
    for message in messages:
        role, content = str(message.get("role")), message.get("content")
        if role in ("system", "developer"):
            parts.append(_text_of(content))
        elif role == "tool":
            turns.append(Turn("tool", _text_of(content)))
        elif isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            turns += [
                Turn("tool", _text_of([b]))
                for b in content
                if isinstance(b, dict) and b.get("type") == "tool_result"
            ]
        else:
            calls = [
                str((c.get("function") or {}).get("name"))
                for c in message.get("tool_calls") or ()
                if isinstance(c, dict)
            ]
            if isinstance(content, list):
                calls += [
                    str(b.get("name"))
                    for b in content
                    if isinstance(b, dict) and b.get("type") == "tool_use"
                ]
            turns.append(Turn(role, _text_of(content), tuple(calls)))
    return Conversation("\n".join(p for p in parts if p), tuple(turns), tuple(tools))


class _Cut(Exception):
    """Raised inside a response body: uvicorn then drops the connection mid-body."""


@dataclass(frozen=True)
class Recorded:
    """One request an upstream received."""

    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class _Fault:
    kind: str
    retry_after: float | None


@dataclass(frozen=True)
class Turn:
    """One turn of a :class:`Conversation`: ``role`` user, assistant or tool (a tool's
    result), its text, and the names of the tools an assistant turn called."""

    role: str
    text: str
    tool_calls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Conversation:
    """A request as the scripted model (:attr:`Upstream.think`) sees it, whatever the wire
    format: the system text (prompt and facts joined), the turns, the tool names offered."""

    system: str
    turns: tuple[Turn, ...]
    tools: tuple[str, ...]

    @property
    def last(self) -> Turn:
        return self.turns[-1] if self.turns else Turn("user", "")


#: A scripted model: the answer's text, or tool calls ``[(name, arguments), ...]``.
Think = Callable[[Conversation], "str | list[tuple[str, dict[str, Any]]]"]


@dataclass(frozen=True)
class _Answer:
    """What the model says: text, or tool calls (usually one); and why it stopped."""

    text: str
    tools: tuple[tuple[str, dict[str, Any]], ...]
    truncated: bool


class Upstream:
    """The shared machinery: a Starlette app on uvicorn in a thread; faults; the record.

    Args:
        api_key: The one key it accepts.
        reply: The answer to a last user turn's text.
        think: A scripted model (see the module docstring).
        latency_s: Delay before each response's first byte.
        chunk_delay_s: Delay between streamed events.
    """

    provider = ""

    def __init__(
        self,
        api_key: str = "sk-loopback-test",
        *,
        reply: Callable[[str], str] = default_reply,
        think: Think | None = None,
        latency_s: float = 0.0,
        chunk_delay_s: float = 0.0,
    ) -> None:
        self.api_key = api_key
        self.reply = reply
        #: The scripted model (None: the default rules); see the module docstring.
        self.think = think
        self.latency_s = latency_s
        self.chunk_delay_s = chunk_delay_s
        self.requests: list[Recorded] = []
        self._faults: list[_Fault] = []
        self._scripts: list[Callable[[], Response]] = []
        #: How each stream ended: "complete", or "aborted" (the client went away first).
        self.stream_ends: list[str] = []
        self._cache: set[str] = set()
        self._lock = threading.Lock()
        self._served = 0
        app = Starlette(
            routes=self._routes(),
            middleware=[
                Middleware(
                    CORSMiddleware,
                    allow_origins=["*"],
                    allow_methods=["*"],
                    allow_headers=["*"],
                    expose_headers=["retry-after", "request-id", "x-request-id"],
                )
            ],
        )
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                host="127.0.0.1",
                port=0,
                log_level="critical",  # a scripted cut is an exception in the app, by design
                timeout_graceful_shutdown=2,
            )
        )
        self._thread = threading.Thread(target=self._server.run, name=type(self).__name__)
        self.port = 0

    # --- lifecycle ---

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (Anthropic's base URL; OpenAI's is ``url + "/v1"``)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> Self:
        """Starts the server thread; returns once it accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{type(self).__name__} did not start within {timeout_s} s")
            time.sleep(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        """Shuts the server down and joins its thread."""
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- the test's controls ---

    def fail(self, kind: str, times: int = 1, retry_after: float | None = 1.0) -> None:
        """The next ``times`` requests fail with ``kind`` (one of :data:`FAULTS`).

        ``retry_after`` is the ``retry-after`` header of a ``rate_limit``/``overloaded``
        answer, in seconds (None: no header).
        """
        if kind not in FAULTS:
            raise ValueError(f"fail: kind must be one of {FAULTS}, got {kind!r}")
        with self._lock:
            self._faults += [_Fault(kind, retry_after) for _ in range(times)]

    def script(
        self,
        status: int = 200,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        events: list[str | bytes] | None = None,
        times: int = 1,
    ) -> None:
        """The next ``times`` requests are answered with exactly this, whatever they ask.

        ``body``: bytes or text as they are, anything else as JSON (``None`` with no
        ``events``: an empty body). ``events``: raw server-sent events (each sent as it is,
        bytes or text) as ``text/event-stream``, instead of a body.
        """

        def respond() -> Response:
            if events is not None:
                chunks = [e if isinstance(e, bytes) else e.encode() for e in events]

                async def sent() -> AsyncIterator[bytes]:
                    for chunk in chunks:
                        yield chunk

                return StreamingResponse(
                    sent(), status, headers=headers, media_type="text/event-stream"
                )
            if isinstance(body, bytes | str) or body is None:
                raw = body.encode() if isinstance(body, str) else (body or b"")
                return Response(raw, status, headers=headers, media_type="application/json")
            return Response(
                json.dumps(body), status, headers=headers, media_type="application/json"
            )

        with self._lock:
            self._scripts += [respond] * times

    def reset(self) -> None:
        """Forgets the record, the pending faults and the simulated prompt cache."""
        with self._lock:
            self.requests.clear()
            self._faults.clear()
            self._scripts.clear()
            self._cache.clear()

    @property
    def last(self) -> Recorded:
        """The most recent request."""
        return self.requests[-1]

    # --- shared request handling ---

    def _routes(self) -> list[Route]:
        raise NotImplementedError

    def _authorised(self, request: Request) -> bool:
        raise NotImplementedError

    def _error(self, status: int, kind: str, message: str) -> dict[str, Any]:
        raise NotImplementedError

    async def _admit(self, request: Request) -> tuple[Any, _Fault | None, Response | None]:
        """Records the request; returns (body, the fault to apply, or an error response)."""
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        with self._lock:
            self.requests.append(
                Recorded(request.url.path, {k.lower(): v for k, v in request.headers.items()}, body)
            )
            fault = self._faults.pop(0) if self._faults else None
            scripted = self._scripts.pop(0) if self._scripts else None
            self._served += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if scripted is not None:
            return body, None, scripted()
        if (fault is not None and fault.kind == "auth") or not self._authorised(request):
            return body, None, self._json_error(401, "auth", self._bad_key)
        if fault is not None and fault.kind in ("rate_limit", "server_error", "overloaded"):
            return body, None, self._fault_response(fault)
        if not isinstance(body, dict):
            return body, None, self._json_error(400, "bad", "the body must be a JSON object")
        return body, fault, None

    def _fault_response(self, fault: _Fault) -> Response:
        headers = {}
        if fault.retry_after is not None and fault.kind != "server_error":
            headers["retry-after"] = f"{fault.retry_after:g}"
        status = {"rate_limit": 429, "server_error": 500}.get(fault.kind, self._overloaded)
        return self._json_error(status, fault.kind, f"scripted fault: {fault.kind}", headers)

    _overloaded = 503
    _bad_key = "invalid api key"

    def _json_error(
        self, status: int, kind: str, message: str, headers: dict[str, str] | None = None
    ) -> JSONResponse:
        headers = {"request-id": f"req_{self._served:06d}", **(headers or {})}
        return JSONResponse(self._error(status, kind, message), status, headers=headers)

    def _answer(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> _Answer:
        limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 1 << 30)
        if self.think is not None:
            said = self.think(_conversation(body, messages, self._tool_names(body)))
            if isinstance(said, list):
                return _Answer("", tuple((str(n), dict(a)) for n, a in said), False)
            words = _pieces(said)
            return _Answer("".join(words[:limit]).strip(), (), len(words) > limit)
        last = messages[-1] if messages else {}
        content = last.get("content")
        tool_result = last.get("role") == "tool" or (
            isinstance(content, list)
            and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
        )
        text = _text_of(content)
        if tool_result:
            reply = f"Tool said: {text}"
        else:
            for name in self._tool_names(body):
                if name in text:
                    return _Answer("", ((name, {"query": text}),), False)
            reply = self.reply(text)
        words = _pieces(reply)
        return _Answer("".join(words[:limit]).strip(), (), len(words) > limit)

    def _tool_names(self, body: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def _cached(self, segments: list[tuple[str, str, bool]]) -> tuple[int, int, int]:
        """(uncached, read, written) prompt tokens of ``segments`` (key, text, breakpoint).

        A breakpoint's key is the hash of everything up to it; keys are remembered.
        """
        total = read = last = 0
        digest = hashlib.sha256()
        keys = []
        for key_text, text, breakpoint in segments:
            digest.update(key_text.encode() + b"\x00")
            total += count_tokens(text)
            if breakpoint:
                key = digest.copy().hexdigest()
                keys.append(key)
                with self._lock:
                    if key in self._cache:
                        read = total
                last = total
        with self._lock:
            self._cache.update(keys)
        return total - last, read, last - read

    async def _paced(
        self, events: list[bytes], fault: _Fault | None, error_event: bytes | None = None
    ) -> AsyncIterator[bytes]:
        """Sends ``events``, pausing ``chunk_delay_s`` between them, applying a cut
        (``error_event``: the in-band error of a ``stream_error``; the route's default)."""
        half = len(events) // 2 if fault is not None else len(events)
        sent = 0
        try:
            for i, event in enumerate(events[:half]):
                if i and self.chunk_delay_s:
                    await asyncio.sleep(self.chunk_delay_s)
                yield event
                sent += 1
        finally:
            with self._lock:
                self.stream_ends.append("complete" if sent == half else "aborted")
        if fault is not None and fault.kind == "stream_error":
            yield error_event if error_event is not None else self._error_event()
        if fault is not None and fault.kind == "cut":
            await asyncio.sleep(0.05)  # let the first half reach the client
            raise _Cut("scripted fault: the connection is dropped mid-body")

    def _error_event(self) -> bytes:
        raise NotImplementedError

    def _body_response(self, payload: dict[str, Any], fault: _Fault | None) -> Response:
        data = json.dumps(payload).encode()
        if fault is None:
            return Response(data, media_type="application/json")
        # A cut (or truncated) JSON body: half of it, then the connection drops.
        halves = [data[: len(data) // 2], data[len(data) // 2 :]]
        cut = _Fault("cut", None)
        return StreamingResponse(self._paced(halves, cut), media_type="application/json")


class AnthropicUpstream(Upstream):
    """``POST /v1/messages`` as Anthropic's Messages API answers it (JSON and SSE)."""

    provider = "anthropic"
    _overloaded = 529
    _bad_key = "invalid x-api-key"

    def _routes(self) -> list[Route]:
        return [Route("/v1/messages", self._messages, methods=["POST"])]

    def _authorised(self, request: Request) -> bool:
        # The key as ``x-api-key`` (the documented header, what a browser sends) or as a bearer
        # token (what the anthropic SDK 2.x sends).
        bearer = request.headers.get("authorization")
        return (
            request.headers.get("x-api-key") == self.api_key or bearer == f"Bearer {self.api_key}"
        )

    def _error(self, status: int, kind: str, message: str) -> dict[str, Any]:
        kinds = {
            401: "authentication_error",
            429: "rate_limit_error",
            500: "api_error",
            529: "overloaded_error",
            400: "invalid_request_error",
        }
        return {
            "type": "error",
            "error": {"type": kinds.get(status, "api_error"), "message": message},
        }

    def _tool_names(self, body: dict[str, Any]) -> list[str]:
        return [str(t.get("name")) for t in body.get("tools") or () if isinstance(t, dict)]

    def _error_event(self) -> bytes:
        data = self._error(529, "overloaded", "Overloaded")
        return f"event: error\ndata: {json.dumps(data)}\n\n".encode()

    async def _messages(self, request: Request) -> Response:
        body, fault, error = await self._admit(request)
        if error is not None:
            return error
        if "anthropic-version" not in request.headers:
            return self._json_error(400, "bad", "anthropic-version: header is required")
        missing = [k for k in ("model", "max_tokens", "messages") if k not in body]
        if missing:
            return self._json_error(400, "bad", f"{missing[0]}: Field required")
        answer = self._answer(body, body["messages"])
        uncached, read, written = self._cached(self._segments(body))
        usage = {
            "input_tokens": uncached,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": written,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": 0,
            "service_tier": "standard",
        }
        with self._lock:
            message_id = f"msg_loopback_{self._served:06d}"
        if answer.tools:
            content: list[dict[str, Any]] = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{self._served:06d}" + (f"_{i}" if i else ""),
                    "name": name,
                    "input": arguments,
                }
                for i, (name, arguments) in enumerate(answer.tools)
            ]
            stop = "tool_use"
            output = sum(count_tokens(json.dumps(b["input"])) for b in content)
        else:
            content = [{"type": "text", "text": answer.text}]
            stop = "max_tokens" if answer.truncated else "end_turn"
            output = count_tokens(answer.text)
        message = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": output},
        }
        if not body.get("stream"):
            return self._body_response(message, fault)
        events = self._events(message, usage)
        return StreamingResponse(self._paced(events, fault), media_type="text/event-stream")

    @staticmethod
    def _segments(body: dict[str, Any]) -> list[tuple[str, str, bool]]:
        """The prompt in the API's cache order: tools, system, messages (block by block).

        Each segment is (what its cache key hashes, the text its tokens count, whether a
        breakpoint follows it).
        """
        segments = []
        for tool in body.get("tools") or ():
            raw = json.dumps(tool, sort_keys=True)
            segments.append((raw, raw, bool(tool.get("cache_control"))))
        system = body.get("system")
        blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system or []
        for message in [{"role": "system", "content": blocks}, *body["messages"]]:
            content = message.get("content")
            role = str(message.get("role"))
            if isinstance(content, str):
                segments.append((f"{role}: {content}", content, False))
                continue
            for block in content or ():
                text = _text_of([block]) or json.dumps(block.get("input", block), sort_keys=True)
                segments.append((f"{role}: {text}", text, bool(block.get("cache_control"))))
        return segments

    @staticmethod
    def _events(message: dict[str, Any], usage: dict[str, Any]) -> list[bytes]:
        def sse(kind: str, data: dict[str, Any]) -> bytes:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        events = [sse("message_start", {"message": start})]
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                events.append(
                    sse(
                        "content_block_start",
                        {"index": index, "content_block": {"type": "text", "text": ""}},
                    )
                )
                events.append(sse("ping", {}))
                for piece in _pieces(block["text"]):
                    delta = {"type": "text_delta", "text": piece}
                    events.append(sse("content_block_delta", {"index": index, "delta": delta}))
            else:
                opening = {**block, "input": {}}
                events.append(
                    sse("content_block_start", {"index": index, "content_block": opening})
                )
                raw = json.dumps(block["input"])
                for part in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
                    delta = {"type": "input_json_delta", "partial_json": part}
                    events.append(sse("content_block_delta", {"index": index, "delta": delta}))
            events.append(sse("content_block_stop", {"index": index}))
        final_usage = {
            "input_tokens": usage["input_tokens"],
            "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
            "cache_read_input_tokens": usage["cache_read_input_tokens"],
            "output_tokens": message["usage"]["output_tokens"],
        }
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        events.append(sse("message_delta", {"delta": delta, "usage": final_usage}))
        events.append(sse("message_stop", {}))
        return events


class OpenAIUpstream(Upstream):
    """``POST /v1/chat/completions`` as OpenAI answers it (JSON and SSE ending ``[DONE]``),
    and ``POST /v1/responses`` as the Responses API does (a ``response`` object; a stream of
    named events from ``response.created`` to ``response.completed``, no ``[DONE]``)."""

    provider = "openai"
    _bad_key = "Incorrect API key provided. You can find your API key at your dashboard."

    def _routes(self) -> list[Route]:
        return [
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/responses", self._responses, methods=["POST"]),
        ]

    def _authorised(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.api_key}"

    def _error(self, status: int, kind: str, message: str) -> dict[str, Any]:
        types = {401: "invalid_request_error", 429: "requests", 400: "invalid_request_error"}
        codes = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
        return {
            "error": {
                "message": message,
                "type": types.get(status, "server_error"),
                "param": None,
                "code": codes.get(status),
            }
        }

    def _error_event(self) -> bytes:
        data = self._error(500, "server_error", "The server had an error mid-stream")
        return f"data: {json.dumps(data)}\n\n".encode()

    def _tool_names(self, body: dict[str, Any]) -> list[str]:
        # Chat Completions nests the name under "function"; the Responses API does not.
        return [
            str((t.get("function") or t).get("name"))
            for t in body.get("tools") or ()
            if isinstance(t, dict)
        ]

    async def _chat(self, request: Request) -> Response:
        body, fault, error = await self._admit(request)
        if error is not None:
            return error
        if "model" not in body or not body.get("messages"):
            return self._json_error(400, "bad", "you must provide a model and messages")
        messages = body["messages"]
        answer = self._answer(body, messages)
        prompt = sum(count_tokens(_text_of(m.get("content")) or "") for m in messages)
        cached = self._prefix_cached(messages)
        with self._lock:
            ident, served = f"chatcmpl-loopback{self._served:06d}", self._served
        created = 1_700_000_000 + served
        if answer.tools:
            calls = [
                {
                    "id": f"call_{served:06d}" + (f"_{i}" if i else ""),
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for i, (name, arguments) in enumerate(answer.tools)
            ]
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
            finish = "tool_calls"
            output = sum(count_tokens(c["function"]["arguments"]) for c in calls)
        else:
            message = {"role": "assistant", "content": answer.text, "refusal": None}
            finish = "length" if answer.truncated else "stop"
            output = count_tokens(answer.text)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }
        head = {
            "id": ident,
            "created": created,
            "model": body["model"],
            "system_fingerprint": "fp_loopback",
        }
        if not body.get("stream"):
            payload = {
                **head,
                "object": "chat.completion",
                "choices": [
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                ],
                "usage": usage,
            }
            return self._body_response(payload, fault)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = self._chunks(head, message, finish, usage if include_usage else None)
        return StreamingResponse(self._paced(events, fault), media_type="text/event-stream")

    async def _responses(self, request: Request) -> Response:
        body, fault, error = await self._admit(request)
        if error is not None:
            return error
        if "model" not in body or body.get("input") in (None, "", []):
            return self._json_error(400, "bad", "Missing required parameter: 'input'.")
        messages = _response_messages(body["input"])
        answer = self._answer({**body, "max_tokens": body.get("max_output_tokens")}, messages)
        prompt = sum(count_tokens(_text_of(m.get("content")) or "") for m in messages)
        prompt += count_tokens(str(body.get("instructions") or ""))
        cached = self._prefix_cached(messages)
        with self._lock:
            served = self._served
        items: list[dict[str, Any]]
        if answer.tools:
            items = [
                {
                    "type": "function_call",
                    "id": f"fc_loopback{served:06d}" + (f"_{i}" if i else ""),
                    "call_id": f"call_{served:06d}" + (f"_{i}" if i else ""),
                    "name": name,
                    "arguments": json.dumps(arguments),
                    "status": "completed",
                }
                for i, (name, arguments) in enumerate(answer.tools)
            ]
            output = sum(count_tokens(item["arguments"]) for item in items)
        else:
            text = {"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}
            items = [
                {
                    "type": "message",
                    "id": f"msg_loopback{served:06d}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [text],
                }
            ]
            output = count_tokens(answer.text)
        response = {
            "id": f"resp_loopback{served:06d}",
            "object": "response",
            "created_at": 1_700_000_000 + served,
            "status": "incomplete" if answer.truncated else "completed",
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if answer.truncated else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": body["model"],
            "output": items,
            "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": output,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + output,
            },
            "user": None,
            "metadata": body.get("metadata") or {},
        }
        if not body.get("stream"):
            return self._body_response(response, fault)
        error = _response_event(
            "error", {"code": "server_error", "message": "The server had an error mid-stream"}
        )
        return StreamingResponse(
            self._paced(_response_events(response), fault, error),
            media_type="text/event-stream",
        )

    def _prefix_cached(self, messages: list[dict[str, Any]]) -> int:
        """Tokens of the longest message prefix seen before (then remembers every prefix)."""
        digest = hashlib.sha256()
        cached = total = 0
        keys = []
        for message in messages:
            digest.update(json.dumps(message, sort_keys=True).encode() + b"\x00")
            total += count_tokens(_text_of(message.get("content")) or "")
            key = digest.copy().hexdigest()
            keys.append(key)
            with self._lock:
                if key in self._cache:
                    cached = total
        with self._lock:
            self._cache.update(keys)
        return cached

    @staticmethod
    def _chunks(
        head: dict[str, Any], message: dict[str, Any], finish: str, usage: dict[str, Any] | None
    ) -> list[bytes]:
        def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            data = {**head, "object": "chat.completion.chunk", "choices": [choice]}
            if usage is not None:
                data["usage"] = None
            return f"data: {json.dumps(data)}\n\n".encode()

        events = [chunk({"role": "assistant", "content": "", "refusal": None})]
        for index, call in enumerate(message.get("tool_calls") or ()):
            raw = call["function"]["arguments"]
            opening = {
                **call,
                "index": index,
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            events.append(chunk({"tool_calls": [opening]}))
            for part in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
                events.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
                )
        if not message.get("tool_calls"):
            events += [chunk({"content": piece}) for piece in _pieces(message["content"])]
        events.append(chunk({}, finish))
        if usage is not None:
            data = {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}
            events.append(f"data: {json.dumps(data)}\n\n".encode())
        events.append(b"data: [DONE]\n\n")
        return events


def _response_messages(items: object) -> list[dict[str, Any]]:
    """A Responses API ``input`` as chat messages (for :meth:`Upstream._answer`): a string is
    one user turn; a ``function_call_output`` item a tool turn; a message item keeps its role,
    its content parts' text joined."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages = []
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call_output":
            messages.append({"role": "tool", "content": str(item.get("output", ""))})
        elif "role" in item:
            content = item.get("content")
            if isinstance(content, list):
                content = " ".join(
                    str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
                )
            messages.append({"role": item["role"], "content": content or ""})
    return messages


def _response_event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _response_events(response: dict[str, Any]) -> list[bytes]:
    """A ``response`` as the Responses API streams it: created, in progress, the output item
    opened, its text (or arguments) in deltas, everything closed, completed; each event
    named and numbered (``sequence_number``)."""
    events: list[tuple[str, dict[str, Any]]] = []
    opened = {**response, "status": "in_progress", "output": [], "usage": None}
    events += [("response.created", {"response": opened})]
    events += [("response.in_progress", {"response": opened})]
    for index, item in enumerate(response["output"]):
        at = {"output_index": index}
        if item["type"] == "function_call":
            events.append(
                (
                    "response.output_item.added",
                    {**at, "item": {**item, "arguments": "", "status": "in_progress"}},
                )
            )
            raw = item["arguments"]
            ident = {"item_id": item["id"], **at}
            for part in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
                events.append(("response.function_call_arguments.delta", {**ident, "delta": part}))
            events.append(
                (
                    "response.function_call_arguments.done",
                    {**ident, "name": item["name"], "arguments": raw},
                )
            )
        else:
            part = item["content"][0]
            empty = {**part, "text": ""}
            ident = {"item_id": item["id"], **at, "content_index": 0}
            added = {**item, "status": "in_progress", "content": []}
            events.append(("response.output_item.added", {**at, "item": added}))
            events.append(("response.content_part.added", {**ident, "part": empty}))
            for piece in _pieces(part["text"]):
                events.append(
                    ("response.output_text.delta", {**ident, "delta": piece, "logprobs": []})
                )
            events.append(
                ("response.output_text.done", {**ident, "text": part["text"], "logprobs": []})
            )
            events.append(("response.content_part.done", {**ident, "part": part}))
        events.append(("response.output_item.done", {**at, "item": item}))
    final = "response.completed" if response["status"] == "completed" else "response.incomplete"
    events.append((final, {"response": response}))
    return [
        _response_event(kind, {**data, "sequence_number": n})
        for n, (kind, data) in enumerate(events)
    ]


def both() -> Iterator[tuple[AnthropicUpstream, OpenAIUpstream]]:
    """Both upstreams, started (a generator for a pytest fixture: ``yield from both()``)."""
    with AnthropicUpstream() as claude, OpenAIUpstream() as gpt:
        yield claude, gpt


async def drain(stream: AsyncIterator[Any]) -> tuple[list[str], Any]:
    """A bridge's stream read to its end: (the text deltas, the completion of the last delta)."""
    texts, completion = [], None
    async for delta in stream:
        assert completion is None, "a delta after the one carrying the completion"
        if delta.completion is not None:
            completion = delta.completion
        else:
            texts.append(delta.text)
    assert completion is not None, "the stream ended without a completion"
    return texts, completion
