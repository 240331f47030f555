"""Claude or any OpenAI-compatible server from the tab, over ``fetch`` (browser-only).

The browser cannot load the SDKs, so :class:`FetchBridge` speaks the wire protocols itself:
any protocol of the registry (:mod:`evermind.bridges.protocols`: ``anthropic``, ``openai``,
``vertex`` and whatever else is registered) gives the endpoint, headers, body and parsers, built on
:mod:`evermind.bridges.wire` (the error mapping the SDK bridges use too), over
``pyodide.http.pyfetch``; ``pyodide`` is imported lazily, on the first call.

Streaming is real: ``pyfetch`` has no streaming reader of its own, so the stream is read from
the fetch ``Response``'s ``body`` (a ``ReadableStream``) chunk by chunk with
``body.getReader()``, decoded incrementally as UTF-8 and split into server-sent events by
:class:`~evermind.bridges.streams.SSEParser`, so text deltas arrive as the server sends them.
Where the response has no readable ``body`` (an environment without streams), the body is
read whole and parsed the same way.

Anthropic from a page needs the header ``anthropic-dangerous-direct-browser-access: true``
(sent), and the API key then lives in the page: use it only with a key the user owns, or
point ``base_url`` at a gateway that holds keys server-side. The bridge does not retry; a
429 carries ``retry_after`` on its :class:`~evermind.errors.UpstreamError`.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterator
from typing import Any

from evermind.bridges import answers, protocols, streams
from evermind.bridges.base import ChatRequest, Completion, Delta, Usage
from evermind.errors import UpstreamError


class FetchBridge:
    """A :class:`~evermind.bridges.base.Bridge` over the page's ``fetch``.

    Args:
        protocol: A name in :mod:`evermind.bridges.protocols`: ``anthropic`` (Messages API:
            ``POST {base_url}/v1/messages``), ``openai`` (Chat Completions:
            ``POST {base_url}/chat/completions``, ``base_url`` ending in ``/v1`` as for the
            ``openai`` SDK), ``vertex`` (Gemini:
            ``POST {base_url}/v1beta/models/{model}:generateContent``) or any other
            registered one.
        base_url: The API's base URL.
        api_key: The key (``x-api-key`` for Anthropic, a bearer token for OpenAI,
            ``x-goog-api-key`` for Gemini).
        provider: The name completions and errors carry (default: the protocol's).

    Raises:
        ConfigError: ``protocol`` is not registered (the message lists those that are).
    """

    def __init__(
        self, protocol: str, base_url: str, api_key: str, provider: str | None = None
    ) -> None:
        self.wire_protocol = protocols.lookup(protocol, "FetchBridge")
        self.protocol = protocol
        self.provider = provider or protocol
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self._last_usage: Usage | None = None

    @property
    def last_usage(self) -> Usage | None:
        """The usage of the most recent finished call (None before one)."""
        return self._last_usage

    def _endpoint(self, request: ChatRequest, stream: bool) -> tuple[str, dict[str, str]]:
        headers = {"content-type": "application/json", **self.wire_protocol.headers(self.api_key)}
        path = self.wire_protocol.request_path(request.model, stream)
        return f"{self.base_url}{path}", headers

    def _body(self, request: ChatRequest, stream: bool) -> dict[str, Any]:
        return self.wire_protocol.body(request, stream)

    async def _post(self, request: ChatRequest, stream: bool) -> Any:
        """The fetch response of ``request``; raises the mapped error on an HTTP error."""
        from pyodide.http import pyfetch  # browser-only: lazily, so the module imports anywhere

        url, headers = self._endpoint(request, stream)
        body = json.dumps(self._body(request, stream))
        try:
            response = await pyfetch(url, method="POST", headers=headers, body=body)
        except Exception as err:  # fetch rejects with a TypeError on any network failure
            raise UpstreamError(
                f"{self.provider} upstream at {url} could not be reached: {err}; hint: check "
                "base_url, the network and the server's CORS headers",
                provider=self.provider,
                code="upstream_unavailable",
            ) from err
        if not response.ok:
            text = await response.string()
            try:
                detail: object = json.loads(text)
            except (ValueError, RecursionError):
                detail = text
            raise self.wire_protocol.http_error(
                self.provider, response.status, response.headers, detail, (self.api_key,)
            )
        return response

    async def generate(self, request: ChatRequest) -> Completion:
        """One completion of ``request``.

        Raises:
            UpstreamError: The server refused or failed, or the body broke off.
        """
        response = await self._post(request, stream=False)
        try:
            raw = await response.string()
        except Exception as err:  # a body cut mid-way: a network error
            raise UpstreamError(
                f"{self.provider} upstream's response broke off: {err}; hint: retry",
                provider=self.provider,
                code="upstream_unavailable",
            ) from err
        data = answers.parse_json(raw, self.provider, "the response")
        completion = self.wire_protocol.completion(data, self.provider)
        self._last_usage = completion.usage
        return completion

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        """Text deltas as the server sends them, then one delta carrying the completion.

        Raises:
            UpstreamError: The server refused or failed, or the stream ended (or broke)
                before its final event (``upstream_stream_cut``).
        """
        response = await self._post(request, stream=True)
        state = self.wire_protocol.stream(self.provider)
        parser = streams.SSEParser(self.provider)
        async for piece in _body_text(response, self.provider):
            for event in parser.feed(piece):
                text = self.wire_protocol.read_event(state, event.data, self.provider)
                if text:
                    yield Delta(text=text)
            if state.done:
                break
        if not state.done:
            raise answers.stream_cut(self.provider, f"no {self.wire_protocol.stream_end}")
        completion = state.completion()
        self._last_usage = completion.usage
        yield Delta(completion=completion)

    async def aclose(self) -> None:
        """Nothing to release (each call is one fetch)."""


async def _body_text(response: Any, provider: str) -> AsyncIterator[str]:
    """The response body as text pieces, read from its ReadableStream when it has one."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    body = getattr(response.js_response, "body", None)
    if body is None:
        yield await response.string()
        return
    reader = body.getReader()
    try:
        while True:
            try:
                chunk = await reader.read()
            except Exception as err:  # the connection dropped mid-body
                raise answers.stream_cut(provider, str(err)) from err
            if chunk.done:
                break
            yield decoder.decode(chunk.value.to_bytes())
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail
    finally:
        reader.releaseLock()
