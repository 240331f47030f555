"""``POST /v1/messages``: the gateway in Anthropic's Messages shape, JSON and SSE (native-only).

Any tool that takes an Anthropic base URL (the ``anthropic`` SDK, Claude Code) can sit
behind the gateway: the body is translated into a neutral
:class:`~evermind.bridges.base.ChatRequest` (``system`` text blocks joined; ``tool_use``
blocks become tool calls, ``tool_result`` blocks tool turns; ``stop_sequences``; tools are
already the neutral shape), goes through the same tenant bridge and cache as
``/v1/chat/completions`` (any upstream, Anthropic or OpenAI protocol), and is answered as a
Messages response: content blocks, ``stop_reason``, the four usage fields, and on a stream
the real event sequence (:mod:`evermind.runtime.gateway.anthropic_stream`).

A client in Anthropic's own protocol, to a Messages API upstream, is passed through: its body
goes upstream as sent (``ChatRequest.passthrough``; the fields in :data:`READ_FIELDS` are what
the gateway reads, every other one is part of the cache key) and a JSON answer is the
upstream's own (``model`` set to the client's id, the ``evermind`` field added). Towards an
OpenAI-protocol upstream the body is translated and the fields it cannot carry are named in
``x-evermind-dropped``. A bare provider id (``claude-sonnet-4-5-20250929``) goes to the
``anthropic`` default upstream (``[default_upstreams]``). ``/v1/messages/count_tokens`` is
forwarded to the upstream as sent.

The cache is reported as on the OpenAI route: the ``x-evermind-cache`` header and an
``evermind`` field (on ``message_delta`` in a stream). The client authenticates with its
*runtime* token, as ``x-api-key`` (the SDK's ``api_key``) or a bearer token
(``auth_token``). Local ``evermind/<ref>`` models answer on ``/v1/chat/completions``. Errors
have Anthropic's shape (:func:`evermind.runtime.errors.shaped`) and the upstream's status for
a request it refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from evermind.bridges.base import ChatRequest, Message, Passthrough, ToolCall
from evermind.errors import InputError, NotFound
from evermind.runtime.gateway.anthropic_stream import (
    STOP_REASON,
    events,
    tool_blocks,
    usage_json,
)
from evermind.runtime.gateway.core import Gateway, Resolved
from evermind.runtime.gateway.openai import SSE_HEADERS, cache_headers, evermind_field
from evermind.runtime.ids import response_id
from evermind.runtime.schemas import CountTokensRequest, MessagesRequest
from evermind.runtime.state import Reader, RuntimeDep

router = APIRouter(tags=["gateway"])


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _turns(body: MessagesRequest, passthrough: bool) -> tuple[list[Message], list[str]]:
    """The neutral turns, and the text of ``system`` turns (system prompt text in the neutral
    view); with ``passthrough`` (the upstream speaks Messages too) blocks the gateway does not
    read (images, documents, thinking) are kept on their turn as they are, else refused."""
    turns: list[Message] = []
    systems: list[str] = []
    for i, message in enumerate(body.messages):
        if message.role == "system":
            systems.append(_text(message.content))
            continue
        if isinstance(message.content, str):
            turns.append(Message(message.role, message.content))
            continue
        texts: list[str] = []
        kept: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        for j, block in enumerate(message.content):
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text", "")))
                kept.append(block)
            elif kind == "tool_use" and message.role == "assistant":
                arguments = block.get("input") or {}
                calls.append(
                    ToolCall(str(block.get("id", "")), str(block.get("name", "")), arguments)
                )
            elif kind == "tool_result" and message.role == "user":
                result = _text(block.get("content", ""))
                turns.append(
                    Message("tool", result, tool_call_id=str(block.get("tool_use_id", "")))
                )
            elif passthrough:
                kept.append(block)
            else:
                raise InputError(
                    f"messages[{i}].content[{j}]: block type {kind!r} is not supported by the "
                    "gateway towards an upstream of another protocol; expected text, tool_use "
                    "(assistant) or tool_result (user)",
                    code="unsupported_content",
                )
        if len(kept) > len(texts):  # blocks besides text: kept, so the cache keys on them
            turns.append(Message(message.role, kept, tool_calls=tuple(calls)))
        elif texts or calls:
            turns.append(Message(message.role, "".join(texts), tool_calls=tuple(calls)))
    return turns, systems


#: The client's headers a Messages API upstream receives with a passed request.
FORWARDED_HEADERS = ("anthropic-beta", "anthropic-version")

#: The Messages fields the gateway reads; every other field a client sends goes to an
#: upstream of the Messages protocol as it is (and is dropped, named in
#: ``x-evermind-dropped``, towards one of another protocol).
READ_FIELDS = frozenset(
    {"model", "max_tokens", "messages", "system", "temperature", "top_p", "top_k"}
    | {"stop_sequences", "stream", "tools"}
)


def messages_request(
    body: MessagesRequest,
    model: str,
    tenant: str,
    cache_header: str | None,
    user: str = "",
    raw: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> ChatRequest:
    """The neutral request for a Messages body (``model`` is the upstream's own name);
    ``user``: the caller's principal id (:attr:`~evermind.tokens.Principal.user`).

    ``raw``: the client's JSON body, when the upstream speaks Messages too: it is then sent as
    it is (``passthrough``) with the client's ``headers`` (:data:`FORWARDED_HEADERS`), and the
    fields the gateway does not read are in ``extra``, as are the headers (so the cache keys
    on them: a different ``thinking``, ``metadata`` or beta never shares an entry).
    """
    turns, system_turns = _turns(body, raw is not None)
    top = body.system if isinstance(body.system, str) or body.system is None else _text(body.system)
    system = "\n\n".join(text for text in (top, *system_turns) if text)
    extra: dict[str, Any] = (
        {} if raw is None else {k: v for k, v in raw.items() if k not in READ_FIELDS}
    )
    if raw is not None and headers:  # the cache's key only: a passed body is sent as it is
        extra["headers"] = dict(headers)
    if body.top_p is not None:
        extra["top_p"] = body.top_p
    if body.top_k is not None:
        extra["top_k"] = body.top_k
    opt = (cache_header or "").strip().lower()
    if opt in ("on", "true", "1", "yes"):
        extra["cache"] = True
    elif opt in ("off", "false", "0", "no"):
        extra["cache"] = False
    elif opt == "refresh":  # a fresh answer that replaces the cached one
        extra["cache"] = "refresh"
    tools = tuple(
        dict(t)
        if raw is not None  # as sent (server tools, cache_control): the cache keys on them
        else {
            "name": str(t.get("name", "")),
            "description": str(t.get("description", "")),
            "input_schema": t.get("input_schema") or {"type": "object"},
        }
        for t in body.tools or []
    )
    return ChatRequest(
        model=model,
        messages=tuple(turns),
        system=system or None,
        max_tokens=body.max_tokens,
        temperature=body.temperature,
        stop=tuple(s for s in body.stop_sequences or [] if s),
        tools=tools,
        tenant=tenant,
        extra=extra,
        user=user,
        passthrough=None if raw is None else Passthrough("anthropic", raw, headers or {}),
    )


@router.post("/v1/messages", summary="Messages (Anthropic shape) through the caching gateway")
async def messages(
    body: MessagesRequest, runtime: RuntimeDep, who: Reader, http_request: Request
) -> Any:
    """A gateway model's answer to ``messages``; ``stream: true`` answers with SSE events."""
    gateway, resolved = _resolved(runtime, body.model, who)
    raw = await http_request.json()
    same = resolved.upstream.protocol == "anthropic"
    request = messages_request(
        body,
        resolved.model,
        who.tenant,
        http_request.headers.get("x-evermind-cache"),
        who.user,
        raw if same else None,
        _forwarded(http_request),
    )
    # No input limit of ours: the upstream's context window applies (the body size cap,
    # --max-request-mb, still bounds what this server reads).
    dropped = () if same else sorted(set(raw) - READ_FIELDS)
    return await _serve(gateway, resolved, body, request, dropped)


def _forwarded(http_request: Request) -> dict[str, str]:
    """The client's :data:`FORWARDED_HEADERS` that it sent."""
    return {h: v for h in FORWARDED_HEADERS if (v := http_request.headers.get(h)) is not None}


def _resolved(runtime: Any, model: str, who: Any) -> tuple[Gateway, Resolved]:
    """The gateway and where ``model`` goes on this route (a bare provider id: the
    ``anthropic`` default upstream).

    Raises:
        NotFound: No gateway, or a model no upstream serves.
    """
    gateway = runtime.gateway
    resolved = None if gateway is None else gateway.resolve(model, who, "anthropic")
    if gateway is None or resolved is None:
        raise NotFound(
            f"model {model!r} is not a gateway model; /v1/messages serves "
            "<upstream>/<name> models of the server's --upstreams file, and bare ids with an "
            "[default_upstreams] anthropic upstream (local evermind/ models answer on "
            "/v1/chat/completions)",
            code="model_not_found",
        )
    return gateway, resolved


@router.post("/v1/messages/count_tokens", summary="Count a Messages request's input tokens")
async def count_tokens(
    body: CountTokensRequest, runtime: RuntimeDep, who: Reader, http_request: Request
) -> Any:
    """The upstream's own count of ``body`` (a Messages API upstream: the body as sent, with
    the upstream's model name)."""
    gateway, resolved = _resolved(runtime, body.model, who)
    if resolved.upstream.protocol != "anthropic":
        raise NotFound(
            f"model {body.model!r}: count_tokens needs an upstream of the anthropic protocol, "
            f"{resolved.upstream.name!r} speaks {resolved.upstream.protocol!r}",
            code="model_not_found",
        )
    raw = {**await http_request.json(), "model": resolved.model}
    headers = _forwarded(http_request)
    counted = await gateway.forward(resolved, "POST", "/v1/messages/count_tokens", raw, headers)
    return JSONResponse(counted)


async def _serve(
    gateway: Gateway,
    resolved: Resolved,
    body: MessagesRequest,
    request: ChatRequest,
    dropped: Sequence[str] = (),
) -> JSONResponse | StreamingResponse:
    message_id = response_id("msg_", 24)
    opened = await gateway.open_call(resolved, request, body.stream)
    status, reason, detail = opened.status, opened.reason, opened.detail
    headers = cache_headers(status, reason)
    if dropped:
        headers["x-evermind-dropped"] = ",".join(dropped)
    if opened.completion is None:
        assert opened.deltas is not None
        message: dict[str, Any] = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": body.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
        }
        stream = events(
            gateway, resolved, request, (status, detail), message, opened.deltas, opened.first
        )
        return StreamingResponse(
            stream, media_type="text/event-stream", headers={**SSE_HEADERS, **headers}
        )
    completion = opened.completion
    if completion.raw is not None and resolved.upstream.protocol == "anthropic":
        # The upstream's own answer, every field as it sent it (keys scrubbed).
        relayed = {
            **completion.raw,
            "model": body.model,
            "evermind": evermind_field(completion, status, detail),
        }
        return JSONResponse(relayed, headers=headers)
    content = [{"type": "text", "text": completion.text}] if completion.text else []
    answer = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": body.model,
        "content": content + tool_blocks(completion),
        "stop_reason": STOP_REASON.get(completion.finish_reason, "end_turn"),
        "stop_sequence": None,
        "usage": usage_json(completion),
        "evermind": evermind_field(completion, status, detail),
    }
    return JSONResponse(answer, headers=headers)
