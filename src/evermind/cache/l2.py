"""L2 of the semantic cache: a shared cache on the agent runtime, reached over HTTP.

This module owns :class:`HttpSemanticCacheBackend`, which speaks the runtime's protocol::

    POST {base_url}/v1/semantic-cache/lookup
         {"embedding": [...], "threshold": 0.9, "namespace"?: str, "query"?: str,
          "max_error"?: 0.01 | "off"}
      -> {"hit": {"response": ..., "score": 0.93, "query"?: str}}   or   {}
    POST {base_url}/v1/semantic-cache/store
         {"embedding": [...], "response": ..., "namespace"?: str, "meta"?: {...}, "query"?: str}

The HTTP call itself sits behind a tiny transport callable,
``transport(HttpRequest) -> HttpResponse`` (sync) or an awaitable of one, so the same code
runs over httpx natively and over ``fetch`` in the browser. A hit may carry the cached
``query``; :class:`evermind.cache.semantic.SemanticCache` needs it to judge the hit with its
own decision and refuses L2 hits without it. ``max_error`` is the δ the server judges with
(the verified decision of :mod:`evermind.cache.verified`, default 0.01; ``"off"``: the
rule-based one), so L1 and L2 decide alike.

Browser-safe: standard library only.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias, cast

from evermind.cache.verified import DEFAULT_MAX_ERROR
from evermind.errors import ConfigError, StorageError

__all__ = [
    "HttpRequest",
    "HttpResponse",
    "HttpSemanticCacheBackend",
    "JSONValue",
    "L2Hit",
    "SemanticCacheBackend",
    "Transport",
]

JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None

LOOKUP_PATH = "/v1/semantic-cache/lookup"
STORE_PATH = "/v1/semantic-cache/store"


@dataclass(frozen=True)
class HttpRequest:
    """One HTTP request for the transport: method, absolute URL, headers, JSON body bytes."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True)
class HttpResponse:
    """The transport's answer: status code and body bytes."""

    status: int
    body: bytes = b""


Transport = Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]


@dataclass(frozen=True)
class L2Hit:
    """An L2 hit: the stored answer, its cosine, and the stored query when the server sent it."""

    response: JSONValue
    score: float
    query: str | None = None


class SemanticCacheBackend(Protocol):
    """What :class:`evermind.cache.semantic.SemanticCache` needs from an L2."""

    def lookup(
        self,
        embedding: list[float],
        threshold: float,
        namespace: str | None,
        query: str | None,
        max_error: float | None = DEFAULT_MAX_ERROR,
    ) -> L2Hit | None:
        """Sync lookup; None on a miss."""
        ...

    def store(
        self,
        embedding: list[float],
        response: JSONValue,
        namespace: str | None,
        meta: dict[str, JSONValue] | None,
        query: str | None,
    ) -> None:
        """Sync store."""
        ...

    async def alookup(
        self,
        embedding: list[float],
        threshold: float,
        namespace: str | None,
        query: str | None,
        max_error: float | None = DEFAULT_MAX_ERROR,
    ) -> L2Hit | None:
        """Async lookup; None on a miss."""
        ...

    async def astore(
        self,
        embedding: list[float],
        response: JSONValue,
        namespace: str | None,
        meta: dict[str, JSONValue] | None,
        query: str | None,
    ) -> None:
        """Async store."""
        ...


class HttpSemanticCacheBackend:
    """The runtime's shared semantic cache, over a pluggable HTTP transport.

    Args:
        base_url: The runtime's root URL, e.g. ``http://127.0.0.1:8000``.
        token: Bearer token for the runtime (sent as ``Authorization: Bearer ...``).
        namespace: Prefix for every namespace sent; the cache appends its own
            ``<namespace>@<embedder fingerprint>`` after a ``/``.
        transport: ``transport(HttpRequest) -> HttpResponse`` or an awaitable of one.

    Raises:
        ConfigError: When ``base_url`` is not an http(s) URL or ``transport`` is missing.
    """

    def __init__(
        self, base_url: str, token: str, namespace: str = "", *, transport: Transport
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"HttpSemanticCacheBackend: expected an http(s) base_url, received {base_url!r}"
            )
        if not callable(transport):
            raise ConfigError(
                "HttpSemanticCacheBackend: expected a transport callable, received "
                f"{type(transport).__name__}; hint: wrap httpx or fetch in a function"
            )
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.namespace = namespace
        self._transport = transport

    def _namespace(self, namespace: str | None) -> str | None:
        parts = [p for p in (self.namespace, namespace) if p]
        return "/".join(parts) or None

    def _request(
        self,
        path: str,
        payload: dict[str, JSONValue],
        namespace: str | None,
        query: str | None,
    ) -> HttpRequest:
        """The POST of ``payload`` plus the scoped namespace and the query, when there are."""
        scoped = self._namespace(namespace)
        if scoped:
            payload["namespace"] = scoped
        if query is not None:
            payload["query"] = query
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        return HttpRequest("POST", self.base_url + path, headers, body)

    def _lookup_request(
        self,
        embedding: list[float],
        threshold: float,
        namespace: str | None,
        query: str | None,
        max_error: float | None,
    ) -> HttpRequest:
        payload: dict[str, JSONValue] = {
            "embedding": cast(JSONValue, list(embedding)),
            "threshold": threshold,
            "max_error": "off" if max_error is None else max_error,
        }
        return self._request(LOOKUP_PATH, payload, namespace, query)

    def _store_request(
        self,
        embedding: list[float],
        response: JSONValue,
        namespace: str | None,
        meta: dict[str, JSONValue] | None,
        query: str | None,
    ) -> HttpRequest:
        payload: dict[str, JSONValue] = {
            "embedding": cast(JSONValue, list(embedding)),
            "response": response,
        }
        if meta is not None:
            payload["meta"] = cast(JSONValue, meta)
        return self._request(STORE_PATH, payload, namespace, query)

    def _send_sync(self, request: HttpRequest) -> HttpResponse:
        answer = self._transport(request)
        if inspect.isawaitable(answer):
            close = getattr(answer, "close", None)
            if callable(close):
                close()
            raise ConfigError(
                "HttpSemanticCacheBackend: the transport is async but a sync method was called; "
                "hint: use SemanticCache.alookup / aget_or_generate"
            )
        return answer

    async def _send_async(self, request: HttpRequest) -> HttpResponse:
        answer = self._transport(request)
        if inspect.isawaitable(answer):
            return await answer
        return answer

    def lookup(
        self,
        embedding: list[float],
        threshold: float,
        namespace: str | None,
        query: str | None,
        max_error: float | None = DEFAULT_MAX_ERROR,
    ) -> L2Hit | None:
        """POSTs a lookup; returns the hit or None."""
        request = self._lookup_request(embedding, threshold, namespace, query, max_error)
        return _parse_lookup(self._checked(request, self._send_sync(request)))

    def store(
        self,
        embedding: list[float],
        response: JSONValue,
        namespace: str | None,
        meta: dict[str, JSONValue] | None,
        query: str | None,
    ) -> None:
        """POSTs a store."""
        request = self._store_request(embedding, response, namespace, meta, query)
        self._checked(request, self._send_sync(request))

    async def alookup(
        self,
        embedding: list[float],
        threshold: float,
        namespace: str | None,
        query: str | None,
        max_error: float | None = DEFAULT_MAX_ERROR,
    ) -> L2Hit | None:
        """Async :meth:`lookup`."""
        request = self._lookup_request(embedding, threshold, namespace, query, max_error)
        return _parse_lookup(self._checked(request, await self._send_async(request)))

    async def astore(
        self,
        embedding: list[float],
        response: JSONValue,
        namespace: str | None,
        meta: dict[str, JSONValue] | None,
        query: str | None,
    ) -> None:
        """Async :meth:`store`."""
        request = self._store_request(embedding, response, namespace, meta, query)
        self._checked(request, await self._send_async(request))

    @staticmethod
    def _checked(request: HttpRequest, answer: HttpResponse) -> JSONValue:
        if not 200 <= answer.status < 300:
            snippet = answer.body[:200].decode("utf-8", "replace")
            raise StorageError(
                f"semantic cache L2: {request.method} {request.url} returned HTTP {answer.status}; "
                f"expected 2xx; body: {snippet!r}; hint: check the runtime URL and token"
            )
        if not answer.body.strip():
            return {}
        try:
            return cast(JSONValue, json.loads(answer.body))
        except ValueError as err:
            raise StorageError(
                f"semantic cache L2: {request.url} returned a body that is not JSON "
                f"({answer.body[:80]!r}); expected a JSON object"
            ) from err


def _parse_lookup(payload: JSONValue) -> L2Hit | None:
    if not isinstance(payload, dict):
        raise StorageError(
            f"semantic cache L2: lookup returned {type(payload).__name__}; expected a JSON object "
            '{"hit": {...}} or {}'
        )
    hit = payload.get("hit")
    if hit is None:
        return None
    if (
        not isinstance(hit, dict)
        or "response" not in hit
        or not isinstance(hit.get("score"), int | float)
    ):
        raise StorageError(
            f"semantic cache L2: malformed hit {hit!r}; "
            "expected {'response': ..., 'score': float}"
        )
    query = hit.get("query")
    score = hit["score"]
    if not isinstance(score, int | float):  # narrowed again for the type checker
        raise StorageError(f"semantic cache L2: malformed score {score!r}")
    return L2Hit(hit["response"], float(score), query if isinstance(query, str) else None)
