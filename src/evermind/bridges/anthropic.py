"""Claude through Anthropic's Messages API, on the official ``anthropic`` SDK (native-only).

The request body is :func:`evermind.bridges.wire.anthropic_body` (the static system prompt
and the facts as two ``cache_control`` breakpoints), sent with ``AsyncAnthropic`` (its auth,
retries with ``retry-after``, timeouts); the SDK's parsed response, dumped to JSON, is read
by the same :mod:`~evermind.bridges.wire` functions the tab's FetchBridge uses, so usage
(input, output, cache-read, cache-write tokens) is the SDK's, mapped once.

Errors: every SDK exception becomes :class:`~evermind.errors.UpstreamError`: 429 →
``upstream_rate_limited`` (``retry_after`` from the header), 401/403 → ``upstream_auth``,
other 4xx → ``upstream_bad_request``, 5xx, connection failures and timeouts →
``upstream_unavailable``; a stream that ends (or breaks) before ``message_stop`` →
``upstream_stream_cut``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2

from evermind.bridges import wire
from evermind.bridges.base import ChatRequest, Completion, Delta, Usage
from evermind.errors import UpstreamError

PROVIDER = "anthropic"


class AnthropicBridge:
    """A :class:`~evermind.bridges.base.Bridge` to Claude (or any Messages-API server).

    Args:
        api_key: The Anthropic API key.
        base_url: The API's base URL (None: the SDK's default, ``https://api.anthropic.com``).
        max_retries: Retries of the SDK on 408/409/429/5xx and connection errors (honouring
            ``retry-after``); 0: fail at once.
        timeout: Seconds per request.
        client: A ready ``anthropic.AsyncAnthropic`` (then the other arguments are unused and
            :meth:`aclose` leaves it open).
    """

    provider = PROVIDER

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 60.0,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        self._owned = client is None
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )
        self._arguments = wire.sdk_arguments(self._client.messages.create)
        self._last_usage: Usage | None = None

    @property
    def last_usage(self) -> Usage | None:
        """The usage of the most recent finished call (None before one)."""
        return self._last_usage

    async def generate(self, request: ChatRequest) -> Completion:
        """One completion of ``request``.

        Raises:
            UpstreamError: The API refused or failed (see the module docstring).
        """
        body, extra = wire.split_arguments(wire.anthropic_body(request), self._arguments)
        try:
            message = await self._create(body, extra)
        except anthropic.APIError as err:
            raise _mapped(err) from err
        completion = wire.anthropic_completion(message.model_dump(mode="json"))
        self._last_usage = completion.usage
        return completion

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        """Text deltas of ``request``'s completion, then one delta carrying the completion.

        Raises:
            UpstreamError: The API refused or failed, or the stream ended before
                ``message_stop`` (``upstream_stream_cut``).
        """
        body, extra = wire.split_arguments(
            wire.anthropic_body(request, stream=True), self._arguments
        )
        state = wire.AnthropicStream()
        started = False
        try:
            events = await self._create(body, extra)
            started = True
            async with events:
                async for event in events:
                    text = state.feed(event.model_dump(mode="json"))
                    if text:
                        yield Delta(text=text)
        except anthropic.APIConnectionError as err:
            if started:
                raise wire.stream_cut(PROVIDER, str(err)) from err
            raise _mapped(err) from err
        except anthropic.APIError as err:
            raise _mapped(err) from err
        except httpx2.HTTPError as err:  # the body broke off while the SDK read it
            raise wire.stream_cut(PROVIDER, f"{type(err).__name__}: {err}") from err
        if not state.done:
            raise wire.stream_cut(PROVIDER, "no message_stop event")
        completion = state.completion()
        self._last_usage = completion.usage
        yield Delta(completion=completion)

    async def _create(self, body: dict[str, Any], extra: dict[str, Any]) -> Any:
        # The SDK's overloads cannot type a body built as a dict; the wire module owns its shape.
        messages: Any = self._client.messages
        return await messages.create(**body, extra_body=extra or None)

    async def aclose(self) -> None:
        """Closes the SDK client's connections (unless it was passed in)."""
        if self._owned:
            await self._client.close()


def _mapped(err: anthropic.APIError) -> UpstreamError:
    """The UpstreamError of an SDK exception."""
    if isinstance(err, anthropic.APIStatusError):
        if err.status_code < 400:  # an ``error`` event inside a 200 stream
            return wire.stream_error(PROVIDER, err.body)
        return wire.upstream_error(PROVIDER, err.status_code, err.response.headers, err.body)
    kind = "timed out" if isinstance(err, anthropic.APITimeoutError) else "failed to connect"
    return UpstreamError(
        f"{PROVIDER} upstream {kind} or dropped the connection: {err}; "
        "hint: check base_url and the network",
        provider=PROVIDER,
        code="upstream_unavailable",
    )
