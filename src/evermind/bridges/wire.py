"""The two wire protocols, as pure functions (browser-safe: standard library only).

Anthropic's Messages API and OpenAI's Chat Completions (spoken by OpenAI and by every
OpenAI-compatible server: Ollama, vLLM, LM Studio, llama.cpp, the Evermind runtime), in both
directions:

- request: :func:`anthropic_body` / :func:`openai_body` turn a :class:`ChatRequest` into the
  JSON body of ``POST /v1/messages`` / ``POST /v1/chat/completions``;
- response: :func:`anthropic_completion` / :func:`openai_completion` turn a response's JSON
  into a :class:`Completion`; :class:`AnthropicStream` / :class:`OpenAIStream` fold the
  events of a streamed response (one parsed SSE ``data`` object at a time) into text deltas
  and, at the end, the completion; :class:`SSEParser` splits a byte stream into events;
- errors: :func:`upstream_error` turns an HTTP error (status, headers, body) into
  :class:`~evermind.errors.UpstreamError`.

The SDK bridges send with the official clients and read their responses through these same
functions (from the SDK's parsed objects dumped to JSON), and :class:`FetchBridge` speaks them
over ``fetch`` in the tab, so the mapping exists once.

Prompt caching. Anthropic caches a prompt prefix up to each ``cache_control`` breakpoint: the
static system prompt and the facts block each end with one (two breakpoints), so a change of
facts re-writes only the facts block and the system prefix keeps hitting. OpenAI caches
prompt prefixes automatically; the stable system message goes first and the facts follow as
a second system message, so the longest stable prefix comes first.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evermind.bridges.base import ChatRequest, Completion, Message, ToolCall, Usage
from evermind.errors import InputError, UpstreamError

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
    merged last, as it is.
    """
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": _anthropic_messages(request.messages),
    }
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
    OpenAI models that require it). ``request.extra`` is merged last.
    """
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": text} for text in (request.system, request.facts) if text
    ]
    messages += [_openai_message(m) for m in request.messages]
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "max_tokens": request.max_tokens,
    }
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


def anthropic_usage(usage: Mapping[str, Any] | None) -> Usage:
    """:class:`Usage` of an Anthropic ``usage`` object (missing or null fields count 0)."""
    usage = usage or {}
    return Usage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
        cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0),
    )


def openai_usage(usage: Mapping[str, Any] | None) -> Usage:
    """:class:`Usage` of an OpenAI ``usage`` object.

    ``prompt_tokens`` counts the whole prompt; the cached part
    (``prompt_tokens_details.cached_tokens``) and, where a server reports it, the part written
    to its cache (``cache_write_tokens``) are split off so ``input_tokens`` is uncached input.
    """
    usage = usage or {}
    details = usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    written = int(details.get("cache_write_tokens") or 0)
    prompt = int(usage.get("prompt_tokens") or 0)
    return Usage(
        input_tokens=max(prompt - cached - written, 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )


def anthropic_completion(message: Mapping[str, Any]) -> Completion:
    """The :class:`Completion` of a Messages API response (a ``message`` object)."""
    text, calls = [], []
    for block in message.get("content") or ():
        if block.get("type") == "text":
            text.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append(
                ToolCall(str(block["id"]), str(block["name"]), dict(block.get("input") or {}))
            )
    return Completion(
        text="".join(text),
        model=str(message.get("model", "")),
        provider="anthropic",
        finish_reason=ANTHROPIC_FINISH.get(str(message.get("stop_reason")), "stop"),
        usage=anthropic_usage(message.get("usage")),
        tool_calls=tuple(calls),
        id=str(message.get("id", "")),
    )


def openai_completion(response: Mapping[str, Any], provider: str = "openai") -> Completion:
    """The :class:`Completion` of a Chat Completions response (its first choice)."""
    choices = response.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    calls = tuple(
        _openai_call(c.get("id"), (c.get("function") or {}).get("name"), c.get("function"))
        for c in message.get("tool_calls") or ()
    )
    return Completion(
        text=str(message.get("content") or ""),
        model=str(response.get("model", "")),
        provider=provider,
        finish_reason=OPENAI_FINISH.get(str(choice.get("finish_reason")), "stop"),
        usage=openai_usage(response.get("usage")),
        tool_calls=calls,
        id=str(response.get("id", "")),
    )


def _openai_call(call_id: object, name: object, function: Mapping[str, Any] | None) -> ToolCall:
    raw = (function or {}).get("arguments") or "{}"
    return ToolCall(str(call_id or ""), str(name or ""), _json_object(raw))


def _json_object(raw: str) -> dict[str, Any]:
    """Tool arguments as a dict; text that is not a JSON object is kept under ``_raw``."""
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


# --- streams ----------------------------------------------------------------------------


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def call(self) -> ToolCall:
        return ToolCall(self.id, self.name, _json_object("".join(self.arguments)))


class AnthropicStream:
    """Folds the events of a streamed Messages response into deltas and a completion.

    Feed each event's parsed ``data`` to :meth:`feed` (``message_start``,
    ``content_block_start``/``_delta``/``_stop``, ``message_delta``, ``message_stop``,
    ``ping``, ``error``). Usage comes from ``message_start`` (input and cache fields) and is
    updated by ``message_delta`` (cumulative output; any input fields it carries win).
    """

    def __init__(self) -> None:
        self.done = False
        self._text: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._usage: dict[str, Any] = {}
        self._id = ""
        self._model = ""
        self._stop: str | None = None

    def feed(self, event: Mapping[str, Any]) -> str:
        """Takes one event; returns the text it adds ("" for most events).

        Raises:
            UpstreamError: An ``error`` event (e.g. ``overloaded_error`` mid-stream).
        """
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self._id = str(message.get("id", ""))
            self._model = str(message.get("model", ""))
            self._usage.update(_present(message.get("usage")))
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                self._calls[int(event.get("index", 0))] = _PartialCall(
                    str(block.get("id", "")), str(block.get("name", ""))
                )
            elif block.get("type") == "text" and block.get("text"):
                self._text.append(str(block["text"]))
                return str(block["text"])
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                text = str(delta.get("text", ""))
                self._text.append(text)
                return text
            if delta.get("type") == "input_json_delta":
                partial = self._calls.setdefault(int(event.get("index", 0)), _PartialCall())
                partial.arguments.append(str(delta.get("partial_json", "")))
        elif kind == "message_delta":
            self._stop = (event.get("delta") or {}).get("stop_reason") or self._stop
            self._usage.update(_present(event.get("usage")))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise stream_error("anthropic", event.get("error"))
        return ""

    def completion(self) -> Completion:
        """The completion so far (call after ``message_stop``: :attr:`done`)."""
        return Completion(
            text="".join(self._text),
            model=self._model,
            provider="anthropic",
            finish_reason=ANTHROPIC_FINISH.get(str(self._stop), "stop"),
            usage=anthropic_usage(self._usage),
            tool_calls=tuple(self._calls[i].call() for i in sorted(self._calls)),
            id=self._id,
        )


def _present(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (usage or {}).items() if v is not None}


class OpenAIStream:
    """Folds the chunks of a streamed Chat Completions response into deltas and a completion.

    Feed each chunk's parsed ``data`` to :meth:`feed` and call :meth:`finish` on
    ``data: [DONE]`` (an SDK that swallows ``[DONE]``: call it when the iterator ends).
    The usage chunk (``choices: []``, ``usage`` set) arrives last when the request asked for
    ``include_usage``.
    """

    def __init__(self, provider: str = "openai") -> None:
        self.provider = provider
        self.done = False
        self._text: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._usage: Mapping[str, Any] | None = None
        self._id = ""
        self._model = ""
        self._finish: str | None = None

    def feed(self, chunk: Mapping[str, Any]) -> str:
        """Takes one chunk; returns the text it adds.

        Raises:
            UpstreamError: The chunk is an error object (servers that report errors in-band).
        """
        if chunk.get("error"):
            raise stream_error(self.provider, chunk.get("error"))
        self._id = str(chunk.get("id") or self._id)
        self._model = str(chunk.get("model") or self._model)
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        text = ""
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text += str(delta["content"])
            for call in delta.get("tool_calls") or ():
                partial = self._calls.setdefault(int(call.get("index", 0)), _PartialCall())
                function = call.get("function") or {}
                partial.id = str(call.get("id") or partial.id)
                partial.name = str(function.get("name") or partial.name)
                if function.get("arguments"):
                    partial.arguments.append(str(function["arguments"]))
            self._finish = choice.get("finish_reason") or self._finish
        if text:
            self._text.append(text)
        return text

    def finish(self) -> None:
        """Marks the stream complete (``data: [DONE]`` or the SDK's iterator ended cleanly)."""
        self.done = True

    @property
    def finished(self) -> bool:
        """Whether a choice reported its ``finish_reason`` (a complete answer)."""
        return self._finish is not None

    def completion(self) -> Completion:
        """The completion of the chunks fed."""
        return Completion(
            text="".join(self._text),
            model=self._model,
            provider=self.provider,
            finish_reason=OPENAI_FINISH.get(str(self._finish), "stop"),
            usage=openai_usage(self._usage),
            tool_calls=tuple(self._calls[i].call() for i in sorted(self._calls)),
            id=self._id,
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
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._event = ""
        self._data: list[str] = []

    def feed(self, text: str) -> list[SSEEvent]:
        """Takes the next piece of the body; returns the events it completed."""
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
                self._event, self._data = "", []
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                self._event = value
            elif name == "data":
                self._data.append(value)
        return events


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


# --- errors -----------------------------------------------------------------------------

#: Codes of UpstreamError by HTTP status (anything else: 4xx bad request, 5xx unavailable).
_CODES = {401: "upstream_auth", 403: "upstream_auth", 429: "upstream_rate_limited"}


def error_code(status: int | None) -> str:
    """The UpstreamError ``code`` of an HTTP status (None: no response at all)."""
    if status in _CODES:
        return _CODES[status]
    if status is None or status >= 500 or status == 408:
        return "upstream_unavailable"
    return "upstream_bad_request" if 400 <= status < 500 else "upstream_error"


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a ``retry-after`` (or ``retry-after-ms``) header asks to wait; None if absent.

    Header names are matched case-insensitively; an HTTP date is not parsed (None).
    """
    lower = {k.lower(): v for k, v in headers.items()}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return float(lower[name]) / scale
        except (KeyError, TypeError, ValueError):
            continue
    return None


def upstream_error(
    provider: str, status: int | None, headers: Mapping[str, str], body: object
) -> UpstreamError:
    """The :class:`UpstreamError` of an HTTP error response (``body``: parsed JSON or text).

    The message is the upstream's own (``error.message`` in both protocols) when it gave one.
    """
    detail = ""
    if isinstance(body, Mapping):
        # The whole body ({"error": {...}}), or its error object (as the openai SDK keeps it).
        error = body.get("error", body)
        if isinstance(error, Mapping):
            detail = str(error.get("message") or error.get("type") or "")
        elif error:
            detail = str(error)
    elif body:
        detail = str(body)[:500]
    code = error_code(status)
    hint = {
        "upstream_auth": "hint: check the API key",
        "upstream_rate_limited": "hint: slow down, or wait retry_after seconds",
        "upstream_bad_request": "hint: the upstream refused the request as sent",
        "upstream_unavailable": "hint: the upstream failed; try again later",
    }.get(code, "")
    message = f"{provider} upstream answered HTTP {status}: {detail or '(no detail)'}; {hint}"
    return UpstreamError(
        message.rstrip("; "),
        provider=provider,
        status=status,
        retry_after=retry_after(headers),
        code=code,
    )


def stream_error(provider: str, error: object) -> UpstreamError:
    """The error of an ``error`` event inside a stream (the event's data or its error object).

    ``rate_limit_error`` → ``upstream_rate_limited``; anything else (``overloaded_error``,
    ``api_error``) → ``upstream_unavailable``.
    """
    if isinstance(error, Mapping) and isinstance(error.get("error"), Mapping):
        error = error["error"]
    kind = str(error.get("type", "")) if isinstance(error, Mapping) else ""
    detail = str(error.get("message", "")) if isinstance(error, Mapping) else str(error)
    code = "upstream_rate_limited" if kind == "rate_limit_error" else "upstream_unavailable"
    return UpstreamError(
        f"{provider} upstream reported an error mid-stream: {kind or 'error'}: {detail}",
        provider=provider,
        code=code,
    )


def stream_cut(provider: str, detail: str = "") -> UpstreamError:
    """The error of a stream that ended before its final event (``message_stop``/``[DONE]``)."""
    suffix = f": {detail}" if detail else ""
    return UpstreamError(
        f"{provider} upstream cut the stream before its end{suffix}; hint: retry the request",
        provider=provider,
        code="upstream_stream_cut",
    )
