"""The upstream wire protocols, in one registry (browser-safe: standard library only).

A *protocol* is everything that differs between two ways of talking to a language-model API:
where a request goes and with which headers, the request body, how a response and a streamed
response are read, how a stream ends, and which official SDK speaks it natively. Three are
registered here: ``anthropic`` (the Messages API), ``openai`` (Chat Completions, spoken by
OpenAI and every OpenAI-compatible server) and ``vertex`` (Gemini's ``generateContent``, on
the Gemini API or Vertex AI). Their bodies and parsers are the pure functions of
:mod:`evermind.bridges.wire`, :mod:`evermind.bridges.streams` and
:mod:`evermind.bridges.gemini_wire`; this module only says which belong together.

Everything that takes a protocol name reads this registry and nothing else:

- the gateway's ``--upstreams`` file (``protocol = "…"``, :mod:`evermind.runtime.gateway.config`);
- the gateway's bridge to an upstream (:func:`evermind.runtime.gateway.core.connect_sdk` builds
  :attr:`WireProtocol.sdk`);
- the tab's :class:`~evermind.bridges.fetch.FetchBridge` (endpoint, headers, body, parsing).

So a new provider joins in one place: one :func:`register` call with its
:class:`WireProtocol`. The SDK bridges are imported only when :attr:`WireProtocol.sdk` is
called, so this module imports in the tab.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from evermind.bridges import answers, gemini_wire, streams, wire
from evermind.bridges.base import Bridge, ChatRequest, Completion
from evermind.errors import ConfigError, UpstreamError

__all__ = [
    "ANTHROPIC_VERSION",
    "HttpError",
    "SdkConnect",
    "StreamFold",
    "WireProtocol",
    "lookup",
    "names",
    "register",
    "unregister",
]

#: The Messages API version the Anthropic bodies follow.
ANTHROPIC_VERSION = "2023-06-01"


class StreamFold(Protocol):
    """Folds a streamed response's events into text deltas and, at the end, the completion
    (:class:`~evermind.bridges.streams.AnthropicStream`,
    :class:`~evermind.bridges.streams.OpenAIStream`).
    """

    @property
    def done(self) -> bool:
        """Whether the stream's final event has arrived."""
        ...

    def feed(self, event: Mapping[str, Any]) -> str:
        """Takes one event's parsed ``data``; returns the text it adds."""
        ...

    def completion(self) -> Completion:
        """The completion of the events fed."""
        ...


class HttpError(Protocol):
    """Maps an HTTP error response to the error a bridge raises."""

    def __call__(
        self,
        provider: str,
        status: int | None,
        headers: Mapping[str, str],
        body: object,
        secrets: Iterable[str] = (),
    ) -> UpstreamError: ...


class SdkConnect(Protocol):
    """Builds the native bridge of a protocol on its official SDK; ``max_answer_chars``: the
    most characters of text and tool arguments an answer may hold (an answer past it raises
    ``upstream_too_large`` before it is all read)."""

    def __call__(
        self,
        *,
        api_key: str,
        base_url: str | None,
        max_retries: int,
        timeout: float,
        max_answer_chars: int,
    ) -> Bridge: ...


@dataclass(frozen=True)
class WireProtocol:
    """One way of talking to a language-model API.

    Attributes:
        name: What an upstreams file's ``protocol`` and ``FetchBridge(protocol=…)`` say.
        path: The request path after the base URL (``/v1/messages``, ``/chat/completions``).
        headers: ``headers(api_key)``: the headers a request from a page carries.
        body: ``body(request, stream)``: the JSON body of a request.
        completion: ``completion(data, provider)``: a response's JSON as a completion.
        stream: ``stream(provider)``: a new fold for one streamed response.
        stream_end: What a complete stream ends with (named when one is cut).
        sdk: The native bridge on the official SDK (the gateway's upstream bridge).
        on_done: Called with the fold on a ``data: [DONE]`` line, for a protocol that ends
            its streams with one (OpenAI); None: the line is not the protocol's and is
            skipped.
        endpoint: ``endpoint(model, stream)``: the request path, for a protocol whose path
            names the model and the kind of call (Gemini's
            ``/v1beta/models/{model}:generateContent``); None: :attr:`path`, always.
        http_error: ``http_error(provider, status, headers, body, secrets)``: the
            :class:`~evermind.errors.UpstreamError` of an HTTP error response (``body``: its
            JSON, or its text); default :func:`~evermind.bridges.answers.upstream_error`.
    """

    name: str
    path: str
    headers: Callable[[str], dict[str, str]]
    body: Callable[[ChatRequest, bool], dict[str, Any]]
    completion: Callable[[Mapping[str, Any], str], Completion]
    stream: Callable[[str], StreamFold]
    stream_end: str
    sdk: SdkConnect
    on_done: Callable[[Any], None] | None = None
    endpoint: Callable[[str, bool], str] | None = None
    http_error: HttpError = answers.upstream_error

    def request_path(self, model: str, stream: bool) -> str:
        """The path a request for ``model`` goes to (:attr:`endpoint`'s, else :attr:`path`)."""
        return self.path if self.endpoint is None else self.endpoint(model, stream)

    def read_event(self, fold: StreamFold, data: str, provider: str = "") -> str:
        """Feeds one server-sent event's ``data`` to ``fold``; returns the text it adds.

        Raises:
            UpstreamError: An error event (see the fold's ``feed``), or ``data`` that is
                neither JSON nor ``[DONE]`` (``upstream_malformed``).
        """
        if data.startswith("[DONE]"):
            if self.on_done is not None:
                self.on_done(fold)
            return ""
        if not data:
            return ""
        return fold.feed(answers.parse_json(data, provider or self.name, "an event"))


_REGISTRY: dict[str, WireProtocol] = {}


def register(protocol: WireProtocol) -> WireProtocol:
    """Adds ``protocol`` under its name; returns it.

    Raises:
        ConfigError: The name is empty, not one word, or taken already.
    """
    name = protocol.name
    if not name or not name.isidentifier():
        raise ConfigError(
            f"protocol registry: a protocol name is one word of letters, digits and _, got {name!r}"
        )
    if name in _REGISTRY:
        raise ConfigError(
            f"protocol registry: {name!r} is registered already; hint: unregister it first "
            "to replace it"
        )
    _REGISTRY[name] = protocol
    return protocol


def unregister(name: str) -> None:
    """Removes the protocol ``name`` (nothing when it is not registered)."""
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """The registered protocols' names, in the order they joined."""
    return tuple(_REGISTRY)


def lookup(name: object, where: str) -> WireProtocol:
    """The protocol called ``name``.

    Args:
        name: The name as the caller got it (any value: a config file's may be anything).
        where: Who asks, to start the error message (``FetchBridge``, a file and table).

    Raises:
        ConfigError: No protocol of that name (the message lists the registered ones).
    """
    found = _REGISTRY.get(name) if isinstance(name, str) else None
    if found is None:
        raise ConfigError(f"{where}: protocol must be one of {names()}, got {name!r}")
    return found


# ---------------------------------------------------------------------- the built-in ones


def _anthropic_headers(api_key: str) -> dict[str, str]:
    return {
        "x-api-key": api_key,
        "anthropic-version": ANTHROPIC_VERSION,
        "anthropic-dangerous-direct-browser-access": "true",
    }


def _anthropic_body(request: ChatRequest, stream: bool) -> dict[str, Any]:
    return wire.anthropic_body(request, stream=stream)


def _anthropic_completion(data: Mapping[str, Any], provider: str) -> Completion:
    return wire.anthropic_completion(data)  # the Messages API names its provider itself


def _anthropic_stream(provider: str) -> StreamFold:
    return streams.AnthropicStream()


def _anthropic_sdk(
    *,
    api_key: str,
    base_url: str | None,
    max_retries: int,
    timeout: float,
    max_answer_chars: int = answers.MAX_ANSWER_CHARS,
) -> Bridge:
    from evermind.bridges.anthropic import AnthropicBridge  # native-only: on first use

    return AnthropicBridge(
        api_key=api_key,
        base_url=base_url,
        max_retries=max_retries,
        timeout=timeout,
        max_answer_chars=max_answer_chars,
    )


def _openai_headers(api_key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"}


def _openai_body(request: ChatRequest, stream: bool) -> dict[str, Any]:
    return wire.openai_body(request, stream=stream)


def _openai_stream(provider: str) -> StreamFold:
    return streams.OpenAIStream(provider)


def _openai_done(fold: streams.OpenAIStream) -> None:
    fold.finish()


def _openai_sdk(
    *,
    api_key: str,
    base_url: str | None,
    max_retries: int,
    timeout: float,
    max_answer_chars: int = answers.MAX_ANSWER_CHARS,
) -> Bridge:
    from evermind.bridges.openai import OpenAIBridge  # native-only: on first use

    return OpenAIBridge(
        api_key=api_key,
        base_url=base_url,
        max_retries=max_retries,
        timeout=timeout,
        max_answer_chars=max_answer_chars,
    )


register(
    WireProtocol(
        name="anthropic",
        path="/v1/messages",
        headers=_anthropic_headers,
        body=_anthropic_body,
        completion=_anthropic_completion,
        stream=_anthropic_stream,
        stream_end="message_stop",
        sdk=_anthropic_sdk,
    )
)
register(
    WireProtocol(
        name="openai",
        path="/chat/completions",
        headers=_openai_headers,
        body=_openai_body,
        completion=wire.openai_completion,
        stream=_openai_stream,
        stream_end="data: [DONE]",
        sdk=_openai_sdk,
        on_done=_openai_done,
    )
)


def _vertex_headers(api_key: str) -> dict[str, str]:
    return {"x-goog-api-key": api_key}


def _vertex_body(request: ChatRequest, stream: bool) -> dict[str, Any]:
    return gemini_wire.gemini_body(request, stream=stream)


def _vertex_stream(provider: str) -> StreamFold:
    return gemini_wire.GeminiStream(provider)


def _vertex_endpoint(model: str, stream: bool) -> str:
    return gemini_wire.gemini_path(model, stream)


def _vertex_sdk(
    *,
    api_key: str,
    base_url: str | None,
    max_retries: int,
    timeout: float,
    max_answer_chars: int = answers.MAX_ANSWER_CHARS,
) -> Bridge:
    from evermind.bridges.vertex import VertexBridge  # native-only: on first use

    return VertexBridge(
        api_key=api_key,
        base_url=base_url,
        max_retries=max_retries,
        timeout=timeout,
        max_answer_chars=max_answer_chars,
    )


register(
    WireProtocol(
        name="vertex",
        path="/v1beta/models/{model}:generateContent",
        headers=_vertex_headers,
        body=_vertex_body,
        completion=gemini_wire.gemini_completion,
        stream=_vertex_stream,
        stream_end="a candidate's finishReason",
        sdk=_vertex_sdk,
        endpoint=_vertex_endpoint,
        http_error=gemini_wire.gemini_error,
    )
)
