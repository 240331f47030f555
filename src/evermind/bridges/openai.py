"""GPT or any OpenAI-compatible server through Chat Completions, on the ``openai`` SDK.

Native-only. One bridge for OpenAI and every server that speaks its wire format by
``base_url`` (Ollama, vLLM, LM Studio, llama.cpp's server, the Evermind runtime). The body is
:func:`evermind.bridges.wire.openai_body` (the stable system message first, the facts second,
so a provider's prefix cache keeps hitting), sent with ``AsyncOpenAI`` (auth, retries with
``retry-after``, timeouts).

``generate`` posts the body with the SDK's raw ``post`` (auth, retries and errors as
``create``; no typed-parameter walk, no response model) and reads the JSON with
:func:`~evermind.bridges.wire.openai_completion`. ``stream`` asks the SDK for the raw
streamed response (``with_streaming_response``) and parses its server-sent events with
:class:`~evermind.bridges.wire.SSEParser`: the SDK's typed stream drops ``data: [DONE]``, so
it cannot tell a finished stream from one cut cleanly halfway; here a stream without
``[DONE]`` raises ``upstream_stream_cut``, and usage comes from the ``include_usage`` chunk.

Errors map as in :mod:`evermind.bridges.anthropic` (429 → ``upstream_rate_limited`` with
``retry_after``; 401/403 → ``upstream_auth``; other 4xx → ``upstream_bad_request``; 5xx,
connection failures, timeouts → ``upstream_unavailable``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai

from evermind.bridges import wire
from evermind.bridges.base import ChatRequest, Completion, Delta, Usage
from evermind.errors import UpstreamError


class OpenAIBridge:
    """A :class:`~evermind.bridges.base.Bridge` to an OpenAI-compatible Chat Completions API.

    Args:
        api_key: The API key (a local server that wants none: any string).
        base_url: The API's base URL, ending in ``/v1`` (None: OpenAI's).
        max_retries: Retries of the SDK on 408/409/429/5xx and connection errors; 0: none.
        timeout: Seconds per request.
        client: A ready ``openai.AsyncOpenAI`` (then :meth:`aclose` leaves it open).
        provider: The name the completions and errors carry (``openai``; ``evermind`` for a
            bridge to an Evermind runtime).
    """

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 60.0,
        client: openai.AsyncOpenAI | None = None,
        provider: str = "openai",
    ) -> None:
        self.provider = provider
        self._owned = client is None
        self._client = client or openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )
        self._arguments = wire.sdk_arguments(self._client.chat.completions.create)
        self._last_usage: Usage | None = None

    @property
    def last_usage(self) -> Usage | None:
        """The usage of the most recent finished call (None before one)."""
        return self._last_usage

    async def generate(self, request: ChatRequest) -> Completion:
        """One completion of ``request``.

        Raises:
            UpstreamError: The server refused or failed.
        """
        try:
            # The SDK's raw ``post`` (its documented way to reach any endpoint): the same
            # auth, retries, timeouts and status errors as ``chat.completions.create``, minus
            # its walk of the typed parameters and its pydantic response model, which cost
            # ~0.7 ms of a ~1.5 ms loopback call (benchmarks/gateway.py, the proxy overhead).
            response = await self._client.post(
                "/chat/completions", body=wire.openai_body(request), cast_to=httpx2.Response
            )
        except openai.APIError as err:
            raise self._mapped(err) from err
        completion = wire.openai_completion(
            _json(response.text, self.provider, "a response"), self.provider
        )
        self._last_usage = completion.usage
        return completion

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        """Text deltas of ``request``'s completion, then one delta carrying the completion.

        Raises:
            UpstreamError: The server refused or failed, or the stream ended without
                ``data: [DONE]`` (``upstream_stream_cut``).
        """
        body, extra = wire.split_arguments(wire.openai_body(request, stream=True), self._arguments)
        state = wire.OpenAIStream(self.provider)
        parser = wire.SSEParser()
        completions: Any = self._client.chat.completions.with_streaming_response
        try:
            async with completions.create(**body, extra_body=extra or None) as response:
                async for piece in response.iter_text():
                    for event in parser.feed(piece):
                        if event.data.startswith("[DONE]"):
                            state.finish()
                            break
                        text = state.feed(_json(event.data, self.provider))
                        if text:
                            yield Delta(text=text)
                    if state.done:
                        break
        except openai.APIError as err:
            raise self._mapped(err) from err
        except httpx2.HTTPError as err:  # the body broke off mid-stream
            raise wire.stream_cut(self.provider, f"{type(err).__name__}: {err}") from err
        if not state.done:
            raise wire.stream_cut(self.provider, "no data: [DONE]")
        completion = state.completion()
        self._last_usage = completion.usage
        yield Delta(completion=completion)

    def _mapped(self, err: openai.APIError) -> UpstreamError:
        if isinstance(err, openai.APIStatusError):
            return wire.upstream_error(
                self.provider, err.status_code, err.response.headers, err.body
            )
        if isinstance(err, openai.APIConnectionError):
            kind = "timed out" if isinstance(err, openai.APITimeoutError) else "failed to connect"
            return UpstreamError(
                f"{self.provider} upstream {kind} or dropped the connection: {err}; "
                "hint: check base_url and the network",
                provider=self.provider,
                code="upstream_unavailable",
            )
        return wire.stream_error(self.provider, err.body)  # an error object inside a stream

    async def aclose(self) -> None:
        """Closes the SDK client's connections (unless it was passed in)."""
        if self._owned:
            await self._client.close()


def _json(data: str, provider: str, what: str = "a stream event") -> dict[str, Any]:
    try:
        value = json.loads(data)
    except json.JSONDecodeError as err:
        raise UpstreamError(
            f"{provider} upstream sent {what} that is not JSON: {data[:200]!r}",
            provider=provider,
            code="upstream_error",
        ) from err
    if not isinstance(value, dict):
        raise UpstreamError(
            f"{provider} upstream sent {what} that is not an object: {data[:200]!r}",
            provider=provider,
            code="upstream_error",
        )
    return value
