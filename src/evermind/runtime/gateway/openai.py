"""``POST /v1/chat/completions`` through the gateway: the OpenAI wire shape (native-only).

Translates an OpenAI Chat Completions body into a neutral
:class:`~evermind.bridges.base.ChatRequest` (system and developer messages become
``system``; tools and tool calls are converted), runs it through the tenant's bridge from
:meth:`~evermind.runtime.gateway.core.Gateway.resolve`, and answers in the same shape, JSON or
server-sent events. Every answer says how the cache served it:

- the header ``x-evermind-cache``: ``hit-l1``, ``hit-l2``, ``miss`` (looked up, not found)
  or ``bypass`` (not cacheable: ``x-evermind-cache-reason`` says why);
- the body field ``"evermind": {"cache", "cached", "score", "cached_query", "saved_tokens",
  "saved_usd", "cost_usd", "detail"}`` (on the last chunk of a stream; ``cached_query`` only
  when the caller itself stored the entry, ``detail`` never quotes a stored query). OpenAI
  clients keep unknown fields (``response.model_extra``).

A client of an OpenAI-protocol upstream is passed through: its body goes upstream as sent
(``ChatRequest.passthrough``: every field and content part; :data:`READ_FIELDS` are the ones
the gateway reads, the others are part of the cache key; no ``max_tokens`` is invented) and a
JSON answer is the upstream's own (``model`` set to the client's id, ``evermind`` added), and
so is a stream: the upstream's chunks one for one (their id, ``logprobs``, tool-call pieces;
``usage`` only when the client asked for it), ``evermind`` on the last. A stream served from
the cache is written by the gateway.
Towards a Messages API upstream the body is translated; the fields it cannot carry are named in
``x-evermind-dropped``.

The request header ``x-evermind-cache: on|off`` opts a request in or out of the cache
(``refresh``: never served from the cache; the upstream's answer replaces the entry)
(``extra["cache"]``). Upstream failures become clean statuses (see ``runtime/app.py``);
after the first byte of a stream they arrive as an ``error`` event.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi.responses import JSONResponse, StreamingResponse

from evermind.bridges.base import (
    ChatRequest,
    Completion,
    Delta,
    Message,
    Passthrough,
    ToolCall,
    Usage,
)
from evermind.errors import EvermindError, InputError
from evermind.runtime import schemas
from evermind.runtime.gateway.core import Gateway, Resolved
from evermind.runtime.ids import response_id

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
OPT_IN = {"on", "true", "1", "yes"}
OPT_OUT = {"off", "false", "0", "no"}


def message_text(message: schemas.ChatMessage, index: int) -> str:
    """The text of ``messages[index]`` (its text parts joined), for the local model and the
    gateway alike.

    Raises:
        InputError: A part that is not text (``unsupported_content``, 400).
    """
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    texts = []
    for part in message.content:
        if part.type != "text" or part.text is None:
            raise InputError(
                f"messages[{index}].content: part of type {part.type!r} is not supported; "
                "expected text parts only",
                code="unsupported_content",
            )
        texts.append(part.text)
    return "".join(texts)


def _tool_calls(message: schemas.ChatMessage, index: int) -> tuple[ToolCall, ...]:
    calls = []
    for call in message.tool_calls or []:
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError) as err:
            raise InputError(
                f"messages[{index}].tool_calls: arguments are not JSON ({err})",
                code="invalid_tool_call",
            ) from err
        calls.append(ToolCall(str(call.get("id", "")), str(function.get("name", "")), arguments))
    return tuple(calls)


def _tools(body: schemas.ChatRequest) -> tuple[dict[str, Any], ...]:
    tools = []
    for i, tool in enumerate(body.tools or []):
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, dict):
            raise InputError(
                f"tools[{i}]: expected {{'type': 'function', 'function': {{...}}}}",
                code="invalid_tools",
            )
        tools.append(
            {
                "name": str(function.get("name", "")),
                "description": str(function.get("description", "")),
                "input_schema": function.get("parameters") or {"type": "object"},
            }
        )
    return tuple(tools)


#: The Chat Completions fields the gateway reads; every other field a client sends goes to an
#: upstream of the OpenAI protocol as it is (and is dropped, named in ``x-evermind-dropped``,
#: towards one of another protocol).
READ_FIELDS = frozenset(
    {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p"}
    | {"seed", "stop", "tools", "stream", "stream_options", "evermind"}
)


def _content(
    message: schemas.ChatMessage, index: int, raw: dict[str, Any] | None
) -> str | list[dict[str, Any]]:
    """A turn's text; with the client's raw body (the upstream speaks Chat Completions too),
    content parts besides text (images, audio, files) are kept as sent, so the cache keys on
    them and the upstream receives them."""
    if raw is not None:
        parts = raw["messages"][index].get("content")
        if isinstance(parts, list) and any(
            not (isinstance(p, dict) and p.get("type") == "text") for p in parts
        ):
            return [p for p in parts if isinstance(p, dict)]
    return message_text(message, index)


def chat_request(
    body: schemas.ChatRequest,
    model: str,
    tenant: str,
    max_tokens: int | None,
    cache_header: str | None,
    route_header: str | None = None,
    user: str = "",
    raw: dict[str, Any] | None = None,
) -> ChatRequest:
    """The neutral request for an OpenAI body (``model`` is the upstream's own name);
    ``user``: the caller's principal id (:attr:`~evermind.tokens.Principal.user`).

    ``route_header`` (``x-evermind-route: local|frontier``) overrides the router of
    ``evermind/auto``. ``raw``: the client's JSON body, when the upstream speaks Chat
    Completions too: it is then sent as it is (``passthrough``), and the fields the gateway
    does not read are in ``extra`` (so the cache keys on them).
    """
    system: list[str] = []
    turns: list[Message] = []
    for i, message in enumerate(body.messages):
        content = _content(message, i, raw)
        text = content if isinstance(content, str) else Message("user", content).text()
        if message.role in ("system", "developer"):
            system.append(text)
        elif message.role == "tool":
            turns.append(Message("tool", text, tool_call_id=message.tool_call_id))
        elif message.role in ("user", "assistant"):
            turns.append(Message(message.role, content, tool_calls=_tool_calls(message, i)))
        else:
            raise InputError(
                f"messages[{i}].role {message.role!r} is not supported by the gateway; use tool",
                code="unsupported_role",
            )
    extra: dict[str, Any] = (
        {} if raw is None else {k: v for k, v in raw.items() if k not in READ_FIELDS}
    )
    if body.top_p is not None:
        extra["top_p"] = body.top_p
    if body.seed is not None:
        extra["seed"] = body.seed
    opt = (cache_header or "").strip().lower()
    if opt in OPT_IN:
        extra["cache"] = True
    elif opt in OPT_OUT:
        extra["cache"] = False
    elif opt == "refresh":  # a fresh answer that replaces the cached one
        extra["cache"] = "refresh"
    if route_header is not None:
        route = route_header.strip().lower()
        if route not in ("local", "frontier"):
            raise InputError(
                f"x-evermind-route must be 'local' or 'frontier', got {route_header!r}; "
                "hint: leave the header out to let the router decide",
                code="invalid_route",
            )
        extra["route"] = route
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    return ChatRequest(
        model=model,
        messages=tuple(turns),
        system="\n\n".join(system) or None,
        max_tokens=max_tokens,
        temperature=body.temperature,
        stop=tuple(s for s in stop if s),
        tools=_tools(body),
        tenant=tenant,
        extra=extra,
        user=user,
        passthrough=None if raw is None else Passthrough("openai", raw),
    )


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.prompt_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
    }


def evermind_field(completion: Completion, status: str, detail: str = "") -> dict[str, Any]:
    """The ``evermind`` body field: how the cache served the call, why, and what it saved."""
    cached = completion.cached
    field: dict[str, Any] = {
        "cache": status,
        "cached": cached is not None,
        "cost_usd": completion.cost_usd,
    }
    if detail:
        field["detail"] = detail
    if completion.route is not None:
        field["route"] = {"target": completion.route[0], "reason": completion.route[1]}
        field["provider"] = completion.provider
    if cached is not None:
        saved = cached.saved
        if cached.cached_query:  # only the caller's own stored question (else not disclosed)
            field["cached_query"] = cached.cached_query
        field.update(
            tier=cached.tier,
            score=round(cached.score, 6),
            saved_tokens={
                "input": saved.input_tokens,
                "output": saved.output_tokens,
                "cache_read": saved.cache_read_tokens,
                "cache_write": saved.cache_write_tokens,
            },
            saved_usd=cached.saved_usd,
        )
    return field


def _tool_call_json(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
        }
        for c in calls
    ]


def cache_headers(status: str, reason: str | None) -> dict[str, str]:
    headers = {"x-evermind-cache": status}
    if status in ("miss", "bypass") and reason:
        headers["x-evermind-cache-reason"] = reason
    return headers


async def serve_chat(
    gateway: Gateway,
    resolved: Resolved,
    body: schemas.ChatRequest,
    request: ChatRequest,
    include_usage: bool,
    dropped: tuple[str, ...] = (),
) -> JSONResponse | StreamingResponse:
    """Runs ``request`` through ``resolved.bridge``; the JSON or SSE answer (``dropped``:
    the client's fields an upstream of another protocol was not sent, named in a header).

    Raises:
        UpstreamError: The upstream failed before the first byte (keys scrubbed).
    """
    base = {
        "id": response_id("chatcmpl-"),
        "object": "chat.completion.chunk" if body.stream else "chat.completion",
        "created": int(time.time()),
        "model": body.model,
    }
    opened = await gateway.open_call(resolved, request, body.stream)
    status, reason, detail = opened.status, opened.reason, opened.detail
    headers = cache_headers(status, reason)
    if dropped:
        headers["x-evermind-dropped"] = ",".join(dropped)
    if opened.completion is None:
        assert opened.deltas is not None
        events = _events(
            gateway,
            resolved,
            request.tenant,
            status,
            detail,
            base,
            opened.deltas,
            opened.first,
            include_usage,
        )
        return StreamingResponse(
            events,
            media_type="text/event-stream",
            headers={**SSE_HEADERS, **headers},
        )
    completion = opened.completion
    if completion.raw is not None and resolved.upstream.protocol == "openai":
        # The upstream's own answer, every field as it sent it (keys scrubbed).
        relayed = {
            **completion.raw,
            "model": body.model,
            "evermind": evermind_field(completion, status, detail),
        }
        return JSONResponse(relayed, headers=headers)
    message: dict[str, Any] = {"role": "assistant", "content": completion.text}
    if completion.tool_calls:
        message["tool_calls"] = _tool_call_json(completion.tool_calls)
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": completion.finish_reason,
    }
    answer = {
        **base,
        "choices": [choice],
        "usage": _usage(completion.usage),
        "evermind": evermind_field(completion, status, detail),
    }
    return JSONResponse(answer, headers=headers)


def sse(payload: dict[str, Any] | str) -> bytes:
    """One OpenAI-style server-sent event (``data: <json>``, or ``[DONE]``)."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


async def _events(
    gateway: Gateway,
    resolved: Resolved,
    tenant: str,
    status: str,
    detail: str,
    base: dict[str, Any],
    deltas: AsyncIterator[Delta],
    first: Delta | None,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """The SSE bytes of a stream whose first delta is already in (with ``include_usage``,
    every chunk says ``usage: null`` until the usage chunk, as OpenAI's do)."""
    upstream = resolved.upstream
    if include_usage:
        base = {**base, "usage": None}
    role = {"role": "assistant"}
    completion: Completion | None = None
    # An upstream of this protocol: its own chunks go on one for one (ids, logprobs,
    # tool-call pieces, usage), the last held back to carry the ``evermind`` field.
    same = upstream.protocol == "openai"
    held: dict[str, Any] | None = None
    relayed_any = False
    try:
        async with aclosing(gateway.relay(tenant, upstream, first, deltas)) as relayed:
            async for delta in relayed:
                if same and delta.chunk is not None:
                    chunk = _relayed_chunk(delta.chunk, base["model"], include_usage)
                    if chunk is None:
                        continue
                    if held is not None:
                        yield sse(held)
                    held, relayed_any = chunk, True
                elif delta.text:
                    if held is not None:
                        yield sse(held)
                        held = None
                    yield sse(_chunk(base, {**role, "content": delta.text}, None))
                    role = {}
                completion = delta.completion
    except EvermindError as err:  # headers are gone: report in the stream, OpenAI style
        finished = held is not None and any(
            isinstance(c, dict) and c.get("finish_reason") for c in held.get("choices") or []
        )
        if held is not None and not finished:  # a failed call never reads as finished
            yield sse(held)
        error = {"message": gateway.scrub(str(err)), "type": "server_error", "code": err.code}
        yield sse({"error": error})
        return
    assert completion is not None  # the relay ends on the completion or raises
    gateway.account(tenant, upstream.name, status, completion)
    if relayed_any:
        if held is None:  # the last relayed chunk went out before a rebuilt tail
            held = {**base, "choices": []}
        held["evermind"] = evermind_field(completion, status, detail)
        yield sse(held)
        yield sse("[DONE]")
        return
    delta_json: dict[str, Any] = dict(role)
    if completion.tool_calls:
        calls = _tool_call_json(completion.tool_calls)
        delta_json["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
    last = _chunk(base, delta_json, completion.finish_reason)
    last["evermind"] = evermind_field(completion, status, detail)
    yield sse(last)
    if include_usage:
        yield sse({**base, "choices": [], "usage": _usage(completion.usage)})
    yield sse("[DONE]")


def _relayed_chunk(chunk: dict[str, Any], model: str, include_usage: bool) -> dict[str, Any] | None:
    """The upstream's chunk as the client gets it: ``model`` is the client's id; without the
    client's ``include_usage`` (the gateway asks for usage upstream to count it) the
    ``usage`` key goes, and the usage-only chunk (no choices) is not sent (None)."""
    out = {key: (model if key == "model" else value) for key, value in chunk.items()}
    if not include_usage and "usage" in out:
        if not out.get("choices"):
            return None
        del out["usage"]
    return out


def _chunk(base: dict[str, Any], delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {**base, "choices": [choice]}
