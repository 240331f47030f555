"""Claude through Anthropic's Messages API, on the official ``anthropic`` SDK (native-only).

The request body is :func:`evermind.bridges.wire.anthropic_body` (the static system prompt
and the facts as two ``cache_control`` breakpoints), posted with the SDK's raw ``post`` on
``AsyncAnthropic`` (its auth, ``anthropic-version`` header, retries with ``retry-after``,
timeouts and status errors). The body is read raw as it arrives, never past what
``max_answer_chars`` allows, and parsed by the same :mod:`~evermind.bridges.wire` functions
the tab's FetchBridge uses (a stream through :class:`~evermind.bridges.streams.SSEParser` and
:class:`~evermind.bridges.streams.AnthropicStream`), so usage (input, output, cache-read,
cache-write tokens) is mapped once and every value is checked
(:mod:`evermind.bridges.answers`): the SDK's typed models never see a hostile answer.

Errors: every SDK exception becomes :class:`~evermind.errors.UpstreamError`: 429 →
``upstream_rate_limited`` (``retry_after`` from the header), 401/403 → ``upstream_auth``,
other 4xx → ``upstream_bad_request``, 5xx, connection failures and timeouts →
``upstream_unavailable``; a stream that ends (or breaks) before ``message_stop`` →
``upstream_stream_cut``; a malformed, incomplete or oversized answer →
``upstream_malformed`` / ``upstream_too_large``. The key is scrubbed from any upstream text
an error quotes. A 5xx keeps its error object (``reported``: the client then gets its status)
only when its body is Anthropic's well-formed ``{"type": "error", "error": {...}}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2

from evermind.bridges import answers, streams, wire
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
        max_answer_chars: The most characters of text and tool arguments an answer may hold
            (``upstream_too_large`` beyond).
    """

    provider = PROVIDER

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 60.0,
        client: anthropic.AsyncAnthropic | None = None,
        max_answer_chars: int = answers.MAX_ANSWER_CHARS,
    ) -> None:
        self._owned = client is None
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )
        self.max_answer_chars = max_answer_chars
        self._last_usage: Usage | None = None

    @property
    def last_usage(self) -> Usage | None:
        """The usage of the most recent finished call (None before one)."""
        return self._last_usage

    @property
    def _secrets(self) -> tuple[str, ...]:
        """The key this bridge sends (scrubbed from any upstream text an error quotes)."""
        return tuple(k for k in (self._client.api_key, self._client.auth_token) if k)

    async def generate(self, request: ChatRequest) -> Completion:
        """One completion of ``request``.

        Raises:
            UpstreamError: The API refused or failed, or its answer is malformed, incomplete
                or too large (see the module docstring).
        """
        response = await self._post(
            wire.anthropic_body(request), wire.passthrough_headers(request, PROVIDER)
        )
        try:
            body = await answers.read_limited(
                response.aiter_bytes(),
                answers.body_limit(self.max_answer_chars),
                PROVIDER,
                response.headers.get("content-length"),
            )
        except httpx2.HTTPError as err:  # the body broke off
            raise answers.broke_off(PROVIDER, f"{type(err).__name__}: {err}") from err
        finally:
            await response.aclose()
        data = answers.parse_json(body, PROVIDER, "the response", self._secrets)
        completion = wire.anthropic_completion(data, PROVIDER, self._secrets)
        if isinstance(data, dict):  # kept for a relay in this same protocol
            completion = dataclasses.replace(completion, raw=data)
        answers.check_size(answers.answer_chars(completion), self.max_answer_chars, PROVIDER)
        self._last_usage = completion.usage
        return completion

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        """Text deltas of ``request``'s completion, then one delta carrying the completion.

        Raises:
            UpstreamError: The API refused or failed, the stream ended before
                ``message_stop`` (``upstream_stream_cut``), or its answer is malformed,
                incomplete or too large.
        """
        secrets = self._secrets
        state = streams.AnthropicStream(PROVIDER, self.max_answer_chars, secrets)
        parser = streams.SSEParser(PROVIDER)
        response = await self._post(
            wire.anthropic_body(request, stream=True), wire.passthrough_headers(request, PROVIDER)
        )
        try:
            async for piece in response.aiter_text():
                for event in parser.feed(piece):
                    if not event.data:
                        continue
                    data = answers.parse_json(event.data, PROVIDER, "an event", secrets)
                    text = state.feed(data)  # checked: a mapping, not an error event
                    start = isinstance(data, dict) and data.get("type") == "message_start"
                    # One delta per event: its text, a thinking block's event as it came, the
                    # input tokens as early as Anthropic says them, and the event itself for
                    # a relay in this same protocol.
                    yield Delta(
                        text=text,
                        event=None if text else state.other,
                        usage=state.usage_so_far() if start else None,
                        chunk=data,
                    )
                if state.done:
                    break
        except httpx2.HTTPError as err:  # the body broke off while it was read
            raise answers.stream_cut(PROVIDER, f"{type(err).__name__}: {err}") from err
        finally:
            await response.aclose()
        if not state.done:
            raise answers.stream_cut(PROVIDER, "no message_stop event")
        completion = state.completion()
        self._last_usage = completion.usage
        yield Delta(completion=completion)

    async def _post(
        self, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> httpx2.Response:
        """The response to ``body`` (with the client's ``headers``, a passed request's), its
        body unread (``stream=True``); an HTTP error raises the mapped :class:`UpstreamError`."""
        try:
            response: httpx2.Response = await self._client.post(
                "/v1/messages",
                body=body,
                cast_to=httpx2.Response,
                stream=True,
                options={"headers": headers} if headers else {},
            )
        except anthropic.APIError as err:
            raise _mapped(err, self._secrets) from err
        return response

    async def forward(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The JSON answer of another endpoint of this API, as it is (``GET`` the model list,
        ``POST`` a token count; ``headers``: the client's protocol headers): read like an
        answer, never past ``max_answer_chars``.

        Raises:
            UpstreamError: The API refused or failed, or answered with no JSON object.
        """
        try:
            options: Any = {"headers": headers} if headers else {}
            if method == "GET":
                response: httpx2.Response = await self._client.get(
                    path, cast_to=httpx2.Response, stream=True, options=options
                )
            else:
                response = await self._client.post(
                    path, body=body, cast_to=httpx2.Response, stream=True, options=options
                )
        except anthropic.APIError as err:
            raise _mapped(err, self._secrets) from err
        try:
            raw = await answers.read_limited(
                response.aiter_bytes(),
                answers.body_limit(self.max_answer_chars),
                PROVIDER,
                response.headers.get("content-length"),
            )
        except httpx2.HTTPError as err:
            raise answers.broke_off(PROVIDER, f"{type(err).__name__}: {err}") from err
        finally:
            await response.aclose()
        data = answers.parse_json(raw, PROVIDER, "the response", self._secrets)
        return dict(answers.mapping(data, PROVIDER, "the response", required=True))

    async def aclose(self) -> None:
        """Closes the SDK client's connections (unless it was passed in)."""
        if self._owned:
            await self._client.close()


def _mapped(err: anthropic.APIError, secrets: tuple[str, ...]) -> UpstreamError:
    """The UpstreamError of an SDK exception."""
    if isinstance(err, anthropic.APIStatusError):
        if err.status_code < 400:  # an error object in a 2xx/3xx answer
            return answers.stream_error(PROVIDER, err.body, secrets)
        return answers.upstream_error(
            PROVIDER, err.status_code, err.response.headers, err.body, secrets, shape="anthropic"
        )
    kind = "timed out" if isinstance(err, anthropic.APITimeoutError) else "failed to connect"
    return UpstreamError(
        f"{PROVIDER} upstream {kind} or dropped the connection: {err}; "
        "hint: check base_url and the network",
        provider=PROVIDER,
        code="upstream_unavailable",
    )
