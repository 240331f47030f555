"""The two wire protocols, as pure functions (browser-safe: standard library only).

Anthropic's Messages API and OpenAI's Chat Completions (spoken by OpenAI and by every
OpenAI-compatible server: Ollama, vLLM, LM Studio, llama.cpp, the Evermind runtime), in both
directions:

- request: :func:`anthropic_body` / :func:`openai_body` turn a :class:`ChatRequest` into the
  JSON body of ``POST /v1/messages`` / ``POST /v1/chat/completions``;
- response: :func:`anthropic_completion` / :func:`openai_completion` turn a response's JSON
  into a :class:`Completion` (a streamed response: :mod:`evermind.bridges.streams`). Every
  value read from an answer is checked by :mod:`evermind.bridges.answers` (which also owns
  the HTTP errors): a malformed, incomplete or oversized answer is an
  :class:`~evermind.errors.UpstreamError`, never a completion.

The SDK bridges send with the official clients and read the raw responses through these same
functions, and :class:`FetchBridge` speaks them over ``fetch`` in the tab, so the mapping
exists once.

Prompt caching. Anthropic caches a prompt prefix up to each ``cache_control`` breakpoint: the
static system prompt and the facts block each end with one (two breakpoints), so a change of
facts re-writes only the facts block and the system prefix keeps hitting. OpenAI caches
prompt prefixes automatically; the stable system message goes first and the facts follow as
a second system message, so the longest stable prefix comes first.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from evermind.bridges import answers
from evermind.bridges.base import ChatRequest, Completion, Message, ToolCall, Usage
from evermind.errors import InputError

EPHEMERAL = {"type": "ephemeral"}
#: Anthropic's ``stop_reason`` → the contract's ``finish_reason``.
ANTHROPIC_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
#: OpenAI's ``finish_reason`` → the contract's (``function_call`` is the legacy name).
OPENAI_FINISH = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


# --- requests ---------------------------------------------------------------------------


def anthropic_body(request: ChatRequest, *, stream: bool = False) -> dict[str, Any]:
    """The JSON body of ``POST /v1/messages`` for ``request``.

    ``system`` becomes a list of text blocks: the static prompt, then the facts, each ending
    with a ``cache_control: {"type": "ephemeral"}`` breakpoint. Tool results (``role="tool"``)
    become ``tool_result`` blocks of a user turn (consecutive results share one turn, as the
    API requires); an assistant's tool calls become ``tool_use`` blocks. ``request.extra`` is
    merged last, as it is. ``max_tokens`` None is left out (the API then refuses the request,
    as it would the client's own). A client's Messages body (``request.passthrough``) is sent
    as it is instead, with ``model`` and ``stream`` set.
    """
    own = _passthrough(request, "anthropic", ("stream",))
    if own is not None:
        return {**own, **({"stream": True} if stream else {})}
    body: dict[str, Any] = {"model": request.model}
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    body["messages"] = _anthropic_messages(request.messages)
    system = [
        {"type": "text", "text": text, "cache_control": dict(EPHEMERAL)}
        for text in (request.system, request.facts)
        if text
    ]
    if system:
        body["system"] = system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.tools:
        body["tools"] = [_anthropic_tool(tool) for tool in request.tools]
    if stream:
        body["stream"] = True
    body.update(request.extra)
    return body


def _anthropic_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The neutral shape is Anthropic's; other keys (``cache_control``) pass through."""
    converted = {
        **tool,
        "name": _tool_name(tool),
        "input_schema": tool.get("input_schema") or {"type": "object", "properties": {}},
    }
    if not converted.get("description"):
        converted.pop("description", None)
    return converted


def _tool_name(tool: Mapping[str, Any]) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(
            f"ChatRequest.tools: each tool needs a 'name', got {dict(tool)!r}; "
            "hint: the neutral shape is {'name', 'description', 'input_schema'}"
        )
    return name


def _anthropic_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": _tool_call_id(message),
                "content": message.content,
            }
            previous = out[-1] if out else None
            if (
                previous is not None
                and previous["role"] == "user"
                and isinstance(previous["content"], list)
                and all(b.get("type") == "tool_result" for b in previous["content"])
            ):
                previous["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif message.role == "assistant" and message.tool_calls:
            blocks = _blocks(message.content)
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in message.tool_calls
            ]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": message.role, "content": message.content})
    return out


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return list(content)
    return [{"type": "text", "text": content}] if content else []


def _tool_call_id(message: Message) -> str:
    if not message.tool_call_id:
        raise InputError(
            "ChatRequest: a role='tool' message needs tool_call_id (the id of the call it answers)"
        )
    return message.tool_call_id


def openai_body(request: ChatRequest, *, stream: bool = False) -> dict[str, Any]:
    """The JSON body of ``POST /v1/chat/completions`` for ``request``.

    The static system prompt is the first message and the facts the second (both
    ``role: "system"``), so the stable prefix comes first. Tools become
    ``{"type": "function", "function": {...}}``; a streamed request asks for the usage chunk
    (``stream_options: {"include_usage": true}``). ``max_tokens`` is sent as ``max_tokens``
    (what OpenAI-compatible servers read; put ``max_completion_tokens`` in ``extra`` for
    OpenAI models that require it; None: left out, the server's default). ``request.extra`` is
    merged last. A client's Chat Completions body (``request.passthrough``) is sent as it is
    instead, with ``model`` and the stream fields set.
    """
    own = _passthrough(request, "openai", ("stream", "stream_options"))
    if own is not None:
        if stream and request.passthrough is not None:
            options = request.passthrough.body.get("stream_options")
            kept = dict(options) if isinstance(options, Mapping) else {}
            own.update(stream=True, stream_options={**kept, "include_usage": True})
        return own
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": text} for text in (request.system, request.facts) if text
    ]
    messages += [_openai_message(m) for m in request.messages]
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop"] = list(request.stop)
    if request.tools:
        body["tools"] = [_openai_tool(tool) for tool in request.tools]
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(request.extra)
    return body


def _passthrough(
    request: ChatRequest, protocol: str, stream_fields: tuple[str, ...]
) -> dict[str, Any] | None:
    """The client's own body for ``protocol`` (a copy, ``model`` set to the upstream's name,
    without the client's ``stream_fields``: the bridge sets its own); None without one."""
    if request.passthrough is None or request.passthrough.protocol != protocol:
        return None
    body = {k: v for k, v in request.passthrough.body.items() if k not in stream_fields}
    body["model"] = request.model
    return body


def passthrough_headers(request: ChatRequest, protocol: str) -> dict[str, str]:
    """The client's protocol headers to send with a passed request of ``protocol`` (none
    for any other request)."""
    own = request.passthrough
    return {} if own is None or own.protocol != protocol else dict(own.headers)


def _openai_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": _tool_name(tool),
        "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
    }
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _openai_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": _tool_call_id(message),
            "content": message.content if isinstance(message.content, str) else message.text(),
        }
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        out["content"] = message.text() or None
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in message.tool_calls
        ]
    return out


# --- responses --------------------------------------------------------------------------
#
# Every value read from an answer goes through evermind.bridges.answers (shapes, counts,
# completeness), so a broken or hostile answer is one UpstreamError, never a KeyError.


def anthropic_usage(usage: object, provider: str = "anthropic") -> Usage:
    """:class:`Usage` of an Anthropic ``usage`` object (missing or null fields count 0).

    Raises:
        UpstreamError: Not an object, or a count that is not a whole number in range.
    """
    fields = answers.mapping(usage, provider, "usage")
    return Usage(
        input_tokens=answers.count(fields.get("input_tokens"), provider, "usage.input_tokens"),
        output_tokens=answers.count(fields.get("output_tokens"), provider, "usage.output_tokens"),
        cache_read_tokens=answers.count(
            fields.get("cache_read_input_tokens"), provider, "usage.cache_read_input_tokens"
        ),
        cache_write_tokens=answers.count(
            fields.get("cache_creation_input_tokens"), provider, "usage.cache_creation_input_tokens"
        ),
    )


def openai_usage(usage: object, provider: str = "openai") -> Usage:
    """:class:`Usage` of an OpenAI ``usage`` object.

    ``prompt_tokens`` counts the whole prompt; the cached part
    (``prompt_tokens_details.cached_tokens``) and, where a server reports it, the part written
    to its cache (``cache_write_tokens``) are split off so ``input_tokens`` is uncached input.

    Raises:
        UpstreamError: Not an object, or a count that is not a whole number in range.
    """
    fields = answers.mapping(usage, provider, "usage")
    where = "usage.prompt_tokens_details"
    details = answers.mapping(fields.get("prompt_tokens_details"), provider, where)
    cached = answers.count(details.get("cached_tokens"), provider, f"{where}.cached_tokens")
    written = answers.count(
        details.get("cache_write_tokens"), provider, f"{where}.cache_write_tokens"
    )
    prompt = answers.count(fields.get("prompt_tokens"), provider, "usage.prompt_tokens")
    return Usage(
        input_tokens=max(prompt - cached - written, 0),
        output_tokens=answers.count(
            fields.get("completion_tokens"), provider, "usage.completion_tokens"
        ),
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )


def finish_of(table: Mapping[str, str], reason: object, provider: str, where: str) -> str:
    """The contract's ``finish_reason`` of a protocol's own (unknown ones are ``stop``).

    Raises:
        UpstreamError: No reason at all (the answer is not complete) or not a string.
    """
    named = answers.text(reason, provider, where)
    if not named:
        raise answers.malformed(provider, f"{where} is missing: the answer is not complete")
    return table.get(named, "stop")


def _anthropic_call(block: Mapping[str, Any], provider: str, where: str) -> ToolCall:
    arguments = answers.mapping(block.get("input"), provider, f"{where}.input")
    return ToolCall(
        answers.text(block.get("id"), provider, f"{where}.id"),
        answers.text(block.get("name"), provider, f"{where}.name"),
        dict(arguments),
    )


def anthropic_completion(
    message: object, provider: str = "anthropic", secrets: Iterable[str] = ()
) -> Completion:
    """The :class:`Completion` of a Messages API response (a ``message`` object); ``secrets``
    (the request's key) are scrubbed from an error it quotes.

    Raises:
        UpstreamError: An ``error`` object in its place, or an answer that is malformed or
            not complete (:func:`evermind.bridges.answers.check_complete`).
    """
    message = answers.mapping(message, provider, "the response", required=True)
    if message.get("type") == "error" or (message.get("error") and "content" not in message):
        raise answers.stream_error(provider, message, secrets)
    text, calls = [], []
    blocks = answers.items(message.get("content"), provider, "content", required=True)
    for i, raw in enumerate(blocks):
        block = answers.mapping(raw, provider, f"content[{i}]", required=True)
        if block.get("type") == "text":
            text.append(answers.text(block.get("text"), provider, f"content[{i}].text"))
        elif block.get("type") == "tool_use":
            calls.append(_anthropic_call(block, provider, f"content[{i}]"))
    completion = Completion(
        text="".join(text),
        model=answers.text(message.get("model"), provider, "model"),
        provider=provider,
        finish_reason=finish_of(
            ANTHROPIC_FINISH, message.get("stop_reason"), provider, "stop_reason"
        ),
        usage=anthropic_usage(message.get("usage"), provider),
        tool_calls=tuple(calls),
        id=answers.text(message.get("id"), provider, "id"),
    )
    return answers.check_complete(completion)


def openai_completion(
    response: object, provider: str = "openai", secrets: Iterable[str] = ()
) -> Completion:
    """The :class:`Completion` of a Chat Completions response (its first choice); ``secrets``
    (the request's key) are scrubbed from an error it quotes.

    Raises:
        UpstreamError: An ``error`` object in its place, or an answer that is malformed or
            not complete (:func:`evermind.bridges.answers.check_complete`).
    """
    response = answers.mapping(response, provider, "the response", required=True)
    if response.get("error"):
        raise answers.stream_error(provider, response.get("error"), secrets)
    choices = answers.items(response.get("choices"), provider, "choices", required=True)
    if not choices:
        raise answers.malformed(provider, "choices is empty")
    choice = answers.mapping(choices[0], provider, "choices[0]", required=True)
    message = answers.mapping(choice.get("message"), provider, "choices[0].message", required=True)
    calls = []
    for i, raw in enumerate(answers.items(message.get("tool_calls"), provider, "tool_calls")):
        where = f"choices[0].message.tool_calls[{i}]"
        call = answers.mapping(raw, provider, where, required=True)
        function = answers.mapping(call.get("function"), provider, f"{where}.function")
        calls.append(
            ToolCall(
                answers.text(call.get("id"), provider, f"{where}.id"),
                answers.text(function.get("name"), provider, f"{where}.function.name"),
                _arguments(function.get("arguments"), provider, f"{where}.function.arguments"),
            )
        )
    completion = Completion(
        text=answers.text(message.get("content"), provider, "choices[0].message.content"),
        model=answers.text(response.get("model"), provider, "model"),
        provider=provider,
        finish_reason=finish_of(
            OPENAI_FINISH, choice.get("finish_reason"), provider, "choices[0].finish_reason"
        ),
        usage=openai_usage(response.get("usage"), provider),
        tool_calls=tuple(calls),
        id=answers.text(response.get("id"), provider, "id"),
    )
    return answers.check_complete(completion)


def _arguments(raw: object, provider: str, where: str) -> dict[str, Any]:
    """Tool arguments: a JSON object as text (an object as such is taken too)."""
    if isinstance(raw, Mapping):
        return dict(raw)
    return json_object(answers.text(raw, provider, where))


def json_object(raw: str) -> dict[str, Any]:
    """Tool arguments as a dict; text that is not a JSON object is kept under ``_raw``."""
    try:
        value = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


# --- the SDK bridges' arguments ---


def sdk_arguments(create: Callable[..., Any]) -> frozenset[str]:
    """The body fields an SDK's ``create`` method takes as keyword arguments."""
    return frozenset(inspect.signature(create).parameters) - {
        "extra_headers",
        "extra_query",
        "extra_body",
        "timeout",
    }


def split_arguments(
    body: Mapping[str, Any], accepted: frozenset[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the fields an SDK's ``create`` takes as arguments, the rest for its ``extra_body``).

    SDK versions drop and add keyword arguments (``temperature`` is no argument of
    anthropic 2.x's ``messages.create``); what the SDK does not name still goes on the wire,
    unchanged, through ``extra_body``.
    """
    core = {k: v for k, v in body.items() if k in accepted}
    return core, {k: v for k, v in body.items() if k not in accepted}
