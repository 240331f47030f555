"""A client of the runtime's gateway cache that asks by question text (browser-safe).

:class:`GatewayCacheClient` is how a cache that does not embed as the gateway does (the
Studio's tab: its own model, or character trigrams) shares answers with agents served
through the gateway of ``evermind serve``::

    POST {base_url}/v1/gateway/cache/lookup
         {"model": "openai/gpt-4o-mini", "query": "...", "temperature": 0,
          "system"?: str, "max_tokens"?: int}
      -> {"hit": {"response": "...", "score": 0.93, "tier": "l1"|"l2", "query"?: str}}
         or {"reason": "..."}
    POST {base_url}/v1/gateway/cache/store     (the same fields, plus "response": "...")
      -> {"stored": true} or {"stored": false, "reason": "..."}

No embedding crosses the wire: the runtime builds the agent request the question and scope
stand for (as ``POST /v1/chat/completions`` would), and the gateway's cache embeds and judges
it with its own embedder and decision. A lookup therefore compares like with like whatever
the tab embeds with (see :mod:`evermind.runtime.routes_cache`). An entry is shared with the
agent requests of the same scope only: same model, system prompt, temperature and
max_tokens, the last user turn being the question (the gateway's key, see
:mod:`evermind.bridges.caching`).

The HTTP call sits behind the transport of :mod:`evermind.cache.l2`
(``transport(HttpRequest) -> HttpResponse`` or an awaitable of one): httpx natively,
:func:`fetch_transport` (``pyodide.http.pyfetch``) in the tab. Every call is bounded by
``timeout_s``; any failure (unreachable, timeout, an HTTP error, a malformed answer) raises
:class:`~evermind.errors.StorageError` with one line saying what went wrong, which the
caller turns into "L1 only" (the tab never fails a lookup because the runtime did).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from dataclasses import dataclass
from typing import Any

from evermind.cache.l2 import HttpRequest, HttpResponse, Transport
from evermind.errors import ConfigError, StorageError

__all__ = ["DEFAULT_TIMEOUT_S", "GatewayCacheClient", "GatewayHit", "fetch_transport"]

LOOKUP_PATH = "/v1/gateway/cache/lookup"
STORE_PATH = "/v1/gateway/cache/store"
#: Seconds a lookup or store may take before the tab answers from L1 alone.
DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class GatewayHit:
    """A hit of the gateway's cache: the answer text, the gateway's score and tier (its own
    L1 or L2), and the stored question when the caller itself stored it."""

    response: str
    score: float
    tier: str
    query: str | None = None


class GatewayCacheClient:
    """The gateway's cache on a runtime, for questions of one agent scope.

    Args:
        base_url: The runtime's root URL, e.g. ``http://127.0.0.1:8080``.
        token: Its bearer token (the tenant whose agents share the answers).
        model: The gateway model id the agents ask, e.g. ``openai/gpt-4o-mini``.
        transport: ``transport(HttpRequest) -> HttpResponse`` or an awaitable of one.
        system: The agents' system prompt (None: none).
        temperature: The agents' temperature (0: cacheable without opting in).
        max_tokens: The agents' ``max_tokens`` (None: not sent).
        timeout_s: Seconds each call may take.

    Raises:
        ConfigError: A ``base_url`` that is not http(s), an empty model, a bad timeout.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        model: str,
        *,
        transport: Transport,
        system: str | None = None,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"runtime cache: expected an http(s) runtime URL, got {base_url!r}; "
                "hint: e.g. http://127.0.0.1:8080"
            )
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(
                f"runtime cache: expected the agents' gateway model id, got {model!r}; "
                "hint: e.g. openai/gpt-4o-mini"
            )
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ConfigError(f"runtime cache: timeout_s must be seconds > 0, got {timeout_s!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.model = model.strip()
        self.system = system or None
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = float(timeout_s)
        self._transport = transport

    def _scope(self, query: str) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "query": query}
        if self.system is not None:
            payload["system"] = self.system
        payload["temperature"] = self.temperature
        if self.max_tokens is not None:
            payload["max_tokens"] = self.max_tokens
        return payload

    async def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        request = HttpRequest("POST", self.base_url + path, headers, body)
        try:
            answer = await asyncio.wait_for(self._send(request), self.timeout_s)
        except TimeoutError as err:
            raise StorageError(
                f"runtime cache: {request.url} did not answer within {self.timeout_s:g} s"
            ) from err
        except StorageError:
            raise
        except Exception as err:  # the transport's own failure: unreachable, refused, CORS
            raise StorageError(
                f"runtime cache: could not reach {request.url} ({err}); hint: is the runtime "
                "running, and does it allow this page's origin (--cors-origin)?"
            ) from err
        return _checked(request, answer)

    async def _send(self, request: HttpRequest) -> HttpResponse:
        answer = self._transport(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if not isinstance(answer, HttpResponse):
            raise StorageError(
                f"runtime cache: the transport returned {type(answer).__name__}; "
                "expected an HttpResponse"
            )
        return answer

    async def lookup(self, query: str) -> tuple[GatewayHit | None, str]:
        """The gateway's answer to ``query`` (None: a miss) and the runtime's words.

        Raises:
            StorageError: The runtime could not be asked (see the module docstring).
        """
        payload = await self._post(LOOKUP_PATH, self._scope(query))
        hit = payload.get("hit")
        if hit is None:
            return None, str(payload.get("reason", "no cached answer"))
        if (
            not isinstance(hit, dict)
            or not isinstance(hit.get("response"), str)
            or isinstance(hit.get("score"), bool)
            or not isinstance(hit.get("score"), int | float)
        ):
            raise StorageError(
                f"runtime cache: malformed hit {str(hit)[:200]!r}; "
                "expected {'response': str, 'score': float, 'tier': str}"
            )
        cached = hit.get("query")
        found = GatewayHit(
            hit["response"],
            float(hit["score"]),
            str(hit.get("tier", "l2")),
            cached if isinstance(cached, str) else None,
        )
        return found, "served by the runtime's gateway cache"

    async def store(self, query: str, response: str) -> str | None:
        """Stores ``response`` for ``query``; None when stored, else the runtime's reason.

        Raises:
            StorageError: The runtime could not be asked.
        """
        payload = await self._post(STORE_PATH, {**self._scope(query), "response": response})
        if payload.get("stored") is True:
            return None
        return str(payload.get("reason", "not stored"))


def _checked(request: HttpRequest, answer: HttpResponse) -> dict[str, Any]:
    """The JSON object of a 2xx answer; a :class:`StorageError` with the runtime's own
    message otherwise."""
    try:
        payload = json.loads(answer.body) if answer.body.strip() else {}
    except ValueError:
        payload = None
    if not 200 <= answer.status < 300:
        message = None
        if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
            message = payload["error"].get("message")
        words = message or answer.body[:200].decode("utf-8", "replace")
        raise StorageError(f"runtime cache: {request.url} answered HTTP {answer.status}: {words}")
    if not isinstance(payload, dict):
        raise StorageError(
            f"runtime cache: {request.url} answered {answer.body[:80]!r}; expected a JSON object"
        )
    return payload


def fetch_transport() -> Transport:
    """The transport over the page's (or worker's) ``fetch``: ``pyodide.http.pyfetch``,
    imported on the first call, so this module imports anywhere."""

    async def send(request: HttpRequest) -> HttpResponse:
        from pyodide.http import pyfetch  # browser-only

        response = await pyfetch(
            request.url,
            method=request.method,
            headers=request.headers,
            body=request.body.decode("utf-8"),
        )
        return HttpResponse(response.status, await response.bytes())

    return send
