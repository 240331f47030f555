"""GPT or any OpenAI-compatible server through Chat Completions, on the ``openai`` SDK.

Native-only. One bridge for OpenAI and every server that speaks its wire format by
``base_url`` (Ollama, vLLM, LM Studio, llama.cpp's server, the Evermind runtime). The body is
:func:`evermind.bridges.wire.openai_body` (the stable system message first, the facts second,
so a provider's prefix cache keeps hitting), sent with ``AsyncOpenAI`` (auth, retries with
``retry-after``, timeouts).

``generate`` posts the body on one pooled keep-alive aiohttp session with the SDK's own
headers, retry rule and status errors (:meth:`OpenAIBridge._fast_post`: the SDK's request
path cost ~0.6 ms more client CPU per call, most of the gateway's proxy hop); ``stream``, and
``generate`` on a client passed in, post it with the SDK's raw ``post`` (auth, retries and
status errors as ``create``; no typed-parameter walk, no response model). Both read the raw
body as it arrives:
``generate`` up to :func:`~evermind.bridges.answers.body_limit` bytes, then
:func:`~evermind.bridges.wire.openai_completion`; ``stream`` through
:class:`~evermind.bridges.streams.SSEParser` and :class:`~evermind.bridges.streams.OpenAIStream`
(the SDK's typed stream drops ``data: [DONE]``, so it cannot tell a finished stream from one
cut cleanly halfway; here a stream without ``[DONE]`` raises ``upstream_stream_cut``, and
usage comes from the ``include_usage`` chunk). An answer past ``max_answer_chars``, or
malformed, or incomplete, raises (:mod:`evermind.bridges.answers`); the key is scrubbed from
any upstream text an error quotes.

Errors map as in :mod:`evermind.bridges.anthropic` (429 → ``upstream_rate_limited`` with
``retry_after``; 401/403 → ``upstream_auth``; other 4xx → ``upstream_bad_request``; 5xx,
connection failures, timeouts → ``upstream_unavailable``; a 5xx keeps its error object only
when the whole body is OpenAI's well-formed ``{"error": {"message": ...}}``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import openai
from openai._models import FinalRequestOptions

from evermind.bridges import answers, streams, wire
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
        max_answer_chars: The most characters of text and tool arguments an answer may hold
            (``upstream_too_large`` beyond; its body is never read past the bytes that allow).
    """

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 60.0,
        client: openai.AsyncOpenAI | None = None,
        provider: str = "openai",
        max_answer_chars: int = answers.MAX_ANSWER_CHARS,
    ) -> None:
        self.provider = provider
        self.max_answer_chars = max_answer_chars
        self._owned = client is None
        self._client = client or openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )
        self._last_usage: Usage | None = None
        # ``generate`` posts through one pooled aiohttp session (see :meth:`_fast_post`)
        # when this bridge built its client itself; a client passed in
        # (its own transport, hooks or auth) is used as it is.
        self._fast = (
            self._owned
            and getattr(self._client, "_provider_runtime", None) is None
            and not _proxied(str(self._client.base_url))
        )
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._fast_headers: dict[str, str] | None = None

    @property
    def last_usage(self) -> Usage | None:
        """The usage of the most recent finished call (None before one)."""
        return self._last_usage

    @property
    def _secrets(self) -> tuple[str, ...]:
        """The key this bridge sends (scrubbed from any upstream text an error quotes)."""
        return (self._client.api_key,) if self._client.api_key else ()

    async def generate(self, request: ChatRequest) -> Completion:
        """One completion of ``request``.

        Raises:
            UpstreamError: The server refused or failed, or its answer is malformed,
                incomplete or too large.
        """
        # On a client this bridge built: the pooled session (:meth:`_fast_post`). On one
        # passed in: the SDK's raw ``post`` (its documented way to reach any endpoint): the
        # same auth, retries, timeouts and status errors as ``chat.completions.create``, minus
        # its walk of the typed parameters and its pydantic response model. Either way the
        # body is read no further than the limit allows.
        payload = wire.openai_body(request)
        if self._fast:
            body = await self._fast_post(payload)
        else:
            body = await self._read(await self._post(payload))
        secrets = self._secrets
        data = answers.parse_json(body, self.provider, "the response", secrets)
        completion = wire.openai_completion(data, self.provider, secrets)
        if isinstance(data, dict):  # kept for a relay in this same protocol
            completion = dataclasses.replace(completion, raw=data)
        answers.check_size(answers.answer_chars(completion), self.max_answer_chars, self.provider)
        self._last_usage = completion.usage
        return completion

    async def _read(self, response: httpx2.Response) -> bytes:
        """The SDK response's body, read no further than the limit allows."""
        try:
            return await answers.read_limited(
                response.aiter_bytes(),
                answers.body_limit(self.max_answer_chars),
                self.provider,
                response.headers.get("content-length"),
            )
        except httpx2.HTTPError as err:  # the body broke off
            raise answers.broke_off(self.provider, f"{type(err).__name__}: {err}") from err
        finally:
            await response.aclose()

    async def _fast_post(self, payload: dict[str, Any]) -> bytes:
        """The body of a 2xx answer to ``payload``, posted on the bridge's pooled aiohttp
        session, with the SDK's retries.

        The SDK's own request path (its request building, then ``httpx``) costs ~0.9 ms of
        client CPU per loopback call where this costs ~0.3 ms (docs/gateway.md "Miss
        overhead"). What the SDK decides stays the SDK's: the headers are its own
        (``default_headers`` and ``auth_headers``, ``x-stainless-retry-count`` per attempt),
        a failed answer becomes its :class:`openai.APIStatusError` and is mapped as in
        :meth:`_post`, and whether a failure is retried, and after how long, is its
        (``_should_retry``, ``_calculate_retry_timeout``: connection failures, timeouts,
        408/409/429/5xx, ``retry-after``).

        Raises:
            UpstreamError: The server refused or failed (not retryable, or no retries
                left), or the body broke off or grew past the limit.
        """
        client = self._client
        url = str(client.base_url).rstrip("/") + "/chat/completions"
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        retries = client.max_retries
        for attempt in range(retries + 1):
            left = retries - attempt
            headers = self._headers(attempt)
            try:
                async with self._pooled().post(url, data=data, headers=headers) as response:
                    if response.status < 400:
                        try:
                            return await answers.read_limited(
                                response.content.iter_chunked(1 << 16),
                                answers.body_limit(self.max_answer_chars),
                                self.provider,
                                response.headers.get("content-length"),
                            )
                        except (aiohttp.ClientError, TimeoutError) as err:  # it broke off
                            detail = f"{type(err).__name__}: {err}"
                            raise answers.broke_off(self.provider, detail) from err
                    limit = answers.body_limit(self.max_answer_chars)
                    failed = httpx2.Response(
                        response.status,
                        headers=[
                            (k.decode("latin-1"), v.decode("latin-1"))
                            for k, v in response.raw_headers
                        ],
                        content=await _read_capped(response.content, limit),
                        request=httpx2.Request("POST", url),
                    )
            except (aiohttp.ClientError, TimeoutError) as err:  # before the answer's head
                if left > 0:
                    await asyncio.sleep(self._retry_delay(left, None))
                    continue
                request = httpx2.Request("POST", url)
                failure: openai.APIError = (
                    openai.APITimeoutError(request)
                    if isinstance(err, TimeoutError)
                    else openai.APIConnectionError(request=request)
                )
                raise self._mapped(failure) from err
            if left > 0 and client._should_retry(failed):
                await asyncio.sleep(self._retry_delay(left, failed.headers))
                continue
            raise self._mapped(client._make_status_error_from_response(failed))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _pooled(self) -> aiohttp.ClientSession:
        """The bridge's one keep-alive session (made on first use, inside the event loop; a
        bridge used from another event loop later, e.g. a second ``asyncio.run``, gets a new
        one: a session's connections belong to the loop that made them)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            self._session_loop = loop
            timeout = self._client.timeout
            seconds = timeout if isinstance(timeout, (int, float)) else None
            self._session = aiohttp.ClientSession(
                # The SDK's httpx client's trust store (its default context, SSL_CERT_FILE...).
                connector=aiohttp.TCPConnector(limit=1000, ssl=httpx2.create_ssl_context()),
                timeout=aiohttp.ClientTimeout(sock_connect=seconds, sock_read=seconds),
                # No proxy applies (else the SDK's client, which honours the environment's,
                # posts): aiohttp's trust_env would read ~/.netrc on a thread per request.
                trust_env=False,
                max_line_size=1 << 16,  # aiohttp's default 8 KiB would refuse long headers
                max_field_size=1 << 16,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    def _headers(self, attempt: int) -> dict[str, str]:
        """The headers the SDK sends (its defaults and auth, computed once) on ``attempt``."""
        if self._fast_headers is None:
            client = self._client
            merged = {**client.default_headers, **client.auth_headers}
            headers = {k: v for k, v in merged.items() if isinstance(v, str)}
            timeout = client.timeout
            if isinstance(timeout, (int, float)):
                headers["x-stainless-read-timeout"] = str(float(timeout))
            self._fast_headers = headers
        return {**self._fast_headers, "x-stainless-retry-count": str(attempt)}

    def _retry_delay(self, left: int, headers: httpx2.Headers | None) -> float:
        """The SDK's wait before a retry with ``left`` retries remaining (the server's
        ``retry-after``, or its backoff)."""
        options = FinalRequestOptions.construct(method="post", url="/chat/completions")
        delay: float = self._client._calculate_retry_timeout(left, options, headers)
        return delay

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        """Text deltas of ``request``'s completion, then one delta carrying the completion.

        Raises:
            UpstreamError: The server refused or failed, the stream ended without
                ``data: [DONE]`` (``upstream_stream_cut``), or its answer is malformed,
                incomplete or too large.
        """
        secrets = self._secrets
        state = streams.OpenAIStream(self.provider, self.max_answer_chars, secrets)
        parser = streams.SSEParser(self.provider)
        response = await self._post(wire.openai_body(request, stream=True))
        try:
            async for piece in response.aiter_text():
                for event in parser.feed(piece):
                    if event.data.startswith("[DONE]"):
                        state.finish()
                        break
                    if not event.data:
                        continue
                    data = answers.parse_json(event.data, self.provider, "an event", secrets)
                    text = state.feed(data)  # checked: a mapping, not an error chunk
                    yield Delta(text=text, chunk=data)  # every chunk, for a same-protocol relay
                if state.done:
                    break
        except httpx2.HTTPError as err:  # the body broke off mid-stream
            raise answers.stream_cut(self.provider, f"{type(err).__name__}: {err}") from err
        finally:
            await response.aclose()
        if not state.done:
            raise answers.stream_cut(self.provider, "no data: [DONE]")
        completion = state.completion()
        self._last_usage = completion.usage
        yield Delta(completion=completion)

    async def _post(self, body: dict[str, Any]) -> httpx2.Response:
        """The response to ``body``, its body unread (``stream=True``); an HTTP error raises
        the mapped :class:`UpstreamError`."""
        try:
            response: httpx2.Response = await self._client.post(
                "/chat/completions", body=body, cast_to=httpx2.Response, stream=True
            )
        except openai.APIError as err:
            raise self._mapped(err) from err
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
        except openai.APIError as err:
            raise self._mapped(err) from err
        try:
            raw = await answers.read_limited(
                response.aiter_bytes(),
                answers.body_limit(self.max_answer_chars),
                self.provider,
                response.headers.get("content-length"),
            )
        except httpx2.HTTPError as err:
            raise answers.broke_off(self.provider, f"{type(err).__name__}: {err}") from err
        finally:
            await response.aclose()
        data = answers.parse_json(raw, self.provider, "the response", self._secrets)
        return dict(answers.mapping(data, self.provider, "the response", required=True))

    async def forward_events(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> AsyncIterator[streams.SSEEvent]:
        """The server-sent events of another streamed endpoint of this API (the Responses
        API's ``POST /responses`` with ``stream: true``), each as it came, unparsed: the
        caller reads them. At most :func:`~evermind.bridges.answers.body_limit` characters
        of ``max_answer_chars`` in all, one event at most the parser's limit.

        Raises:
            UpstreamError: The API refused or failed before its first byte (mapped as in
                :meth:`generate`), the body broke off (``upstream_stream_cut``), or the
                stream grew past the limit (``upstream_too_large``).
        """
        try:
            options: Any = {"headers": headers} if headers else {}
            response: httpx2.Response = await self._client.post(
                path, body=body, cast_to=httpx2.Response, stream=True, options=options
            )
        except openai.APIError as err:
            raise self._mapped(err) from err
        parser = streams.SSEParser(self.provider)
        limit, seen = answers.body_limit(self.max_answer_chars), 0
        try:
            async for piece in response.aiter_text():
                seen += len(piece)
                answers.check_size(seen, limit, self.provider, "stream (characters)")
                for event in parser.feed(piece):
                    yield event
        except httpx2.HTTPError as err:  # the body broke off mid-stream
            raise answers.stream_cut(self.provider, f"{type(err).__name__}: {err}") from err
        finally:
            await response.aclose()

    def _mapped(self, err: openai.APIError) -> UpstreamError:
        if isinstance(err, openai.APIStatusError):
            return answers.upstream_error(
                self.provider,
                err.status_code,
                err.response.headers,
                _whole_body(err),
                self._secrets,
                shape="openai",
            )
        if isinstance(err, openai.APIConnectionError):
            kind = "timed out" if isinstance(err, openai.APITimeoutError) else "failed to connect"
            return UpstreamError(
                f"{self.provider} upstream {kind} or dropped the connection: {err}; "
                "hint: check base_url and the network",
                provider=self.provider,
                code="upstream_unavailable",
            )
        return answers.stream_error(self.provider, err.body, self._secrets)

    async def aclose(self) -> None:
        """Closes the SDK client's connections and the pooled session (unless the client
        was passed in)."""
        if self._session is not None and self._session_loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = self._session_loop = None
        if self._owned:
            await self._client.close()


def _proxied(url: str) -> bool:
    """Whether the environment's proxy settings (``HTTPS_PROXY``, ``NO_PROXY``...) send
    ``url`` through a proxy, as the SDK's ``httpx`` client would."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0]
    proxies = urllib.request.getproxies()
    if not (proxies.get(scheme.lower()) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(host)


async def _read_capped(content: aiohttp.StreamReader, limit: int) -> bytes:
    """At most ``limit`` bytes of a body (an error's: what it says is kept, not its tail)."""
    body = bytearray()
    while len(body) < limit:
        chunk = await content.read(limit - len(body))
        if not chunk:
            break
        body += chunk
    return bytes(body)


def _whole_body(err: openai.APIStatusError) -> object:
    """The error response's whole JSON body (the SDK keeps only its ``error`` object, so its
    shape could not be judged); the SDK's ``body`` when the response is not JSON."""
    try:
        return json.loads(err.response.content)
    except (ValueError, RecursionError, httpx2.ResponseNotRead):
        return err.body
