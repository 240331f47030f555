"""The MCP memory server over streamable HTTP, with bearer-token tenants (``evermind mcp --http``).

Owns tenant authentication, the per-tenant rate limit and the ASGI app:

- **Tokens file**: the runtime's format (``evermind.tokens``), one
  ``TOKEN TENANT [read|write]`` per line, so one file serves ``evermind serve`` and
  ``evermind mcp --http``. A ``read`` token gets the read-only tool set.
- **Authentication**: the presented token's SHA-256 is compared with every token's using
  ``hmac.compare_digest``, without stopping at the first match, so neither the time taken nor
  the token's length tells an attacker which tenant (if any) was close. A missing, malformed
  or unknown token gets ``401`` with ``WWW-Authenticate: Bearer``.
- **Rate limit**: a token bucket per tenant (``rate_limit_per_minute`` requests a minute,
  bursts up to the same number); an empty bucket answers ``429`` with ``Retry-After``.
- **Isolation**: each tenant gets its own ``MCPServer``, session manager and ``MemoryStore``
  (the runtime's namespace ``<tenant>/default`` of the shared SQLite file), so one tenant's
  sessions and memories are unreachable with another's token.

Without a tokens file the server serves one tenant, ``default``, without authentication, and
only on a loopback interface. Native-only (uvicorn, starlette, the ``mcp`` SDK).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from evermind.errors import ConfigError
from evermind.memory import MemoryStore
from evermind.tokens import parse_tokens

logger = logging.getLogger(__name__)

#: The path the MCP endpoint is served on.
MCP_PATH = "/mcp"
DEFAULT_RATE_LIMIT_PER_MINUTE = 600
#: The tenant served when no tokens file is given (loopback only); the runtime's default.
OPEN_TENANT = "default"


@dataclass(frozen=True)
class Tenant:
    """Who a token speaks for.

    Attributes:
        name: The tenant's name (its memories are the runtime's ``<name>/default``).
        readonly: The token has read access only: the write tools are not offered.
    """

    name: str
    readonly: bool = False

    @property
    def server_key(self) -> str:
        """The key of the ``MCPServer`` serving this tenant at this access level."""
        return f"{self.name}:{'read' if self.readonly else 'write'}"


def load_tokens_file(path: str | Path) -> list[tuple[str, Tenant]]:
    """Reads a tokens file in the runtime's format; returns ``(token, tenant)`` pairs.

    Raises:
        ConfigError: The file is missing, unreadable or malformed (see ``evermind.tokens``).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"tokens file {str(path)!r} cannot be read: {err.strerror}") from err
    return [
        (token, Tenant(who.tenant, readonly=not who.can_write))
        for token, who in parse_tokens(text, str(path))
    ]


class TokenAuthenticator:
    """Maps bearer tokens to tenants in constant time (with respect to the token and the tenants).

    Args:
        tokens: ``(token, tenant)`` pairs; each token unique.
    """

    def __init__(self, tokens: list[tuple[str, Tenant]]) -> None:
        self._digests = [(_digest(token), tenant) for token, tenant in tokens]

    def authenticate(self, authorization: str | None) -> Tenant | None:
        """Returns the tenant whose token the ``Authorization`` header carries, or None."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        presented = _digest(token.strip())
        found: Tenant | None = None
        for digest, tenant in self._digests:
            # No early exit: every tenant's digest is compared whatever the outcome.
            if hmac.compare_digest(presented, digest):
                found = tenant
        return found


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class RateLimiter:
    """A token bucket per tenant: ``per_minute`` requests a minute, bursts of the same size.

    Args:
        per_minute: Requests a minute each tenant may make.
        clock: Monotonic seconds (injectable for tests).

    Raises:
        ConfigError: ``per_minute`` is not a positive integer.
    """

    def __init__(
        self,
        per_minute: int = DEFAULT_RATE_LIMIT_PER_MINUTE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(per_minute, bool) or not isinstance(per_minute, int) or per_minute < 1:
            raise ConfigError(f"rate limit: expected requests a minute >= 1, got {per_minute!r}")
        self.per_minute = per_minute
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def acquire(self, tenant: str) -> float:
        """Takes one request from ``tenant``'s bucket.

        Returns:
            0.0 when the request may proceed, else the seconds until one would be allowed.
        """
        capacity = float(self.per_minute)
        per_second = capacity / 60.0
        now = self._clock()
        level, last = self._buckets.get(tenant, (capacity, now))
        level = min(capacity, level + (now - last) * per_second)
        if level >= 1.0:
            self._buckets[tenant] = (level - 1.0, now)
            return 0.0
        self._buckets[tenant] = (level, now)
        return (1.0 - level) / per_second


def _error(
    status: int, message: str, code: str, headers: Mapping[str, str] | None = None
) -> Response:
    kind = {401: "authentication_error", 429: "rate_limit_error"}.get(
        status, "invalid_request_error"
    )
    body = {"error": {"message": message, "type": kind, "code": code}}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


class TenantEndpoint:
    """The ASGI endpoint at ``/mcp``: authenticate, rate-limit, hand over to the tenant's server.

    Args:
        servers: ``Tenant.server_key`` mapped to the ``MCPServer`` serving it.
        tokens: ``(token, tenant)`` pairs, or None to serve :data:`OPEN_TENANT` without
            authentication.
        limiter: The per-tenant rate limiter.
    """

    def __init__(
        self,
        servers: Mapping[str, MCPServer[Any]],
        tokens: list[tuple[str, Tenant]] | None,
        limiter: RateLimiter,
    ) -> None:
        self._servers = servers
        self._auth = None if tokens is None else TokenAuthenticator(tokens)
        self._limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tenant = Tenant(OPEN_TENANT)
        if self._auth is not None:
            found = self._auth.authenticate(Request(scope).headers.get("authorization"))
            if found is None:
                reply = _error(
                    401,
                    "expected 'Authorization: Bearer <token>' with a token from the server's "
                    "tokens file; the request had none or an unknown one",
                    "invalid_token",
                    {"WWW-Authenticate": 'Bearer realm="evermind-mcp"'},
                )
                await reply(scope, receive, send)
                return
            tenant = found
        wait = self._limiter.acquire(tenant.name)
        if wait > 0:
            reply = _error(
                429,
                f"tenant {tenant.name!r} exceeded {self._limiter.per_minute} requests a minute; "
                f"retry in {wait:.1f} s",
                "rate_limited",
                {"Retry-After": str(max(1, math.ceil(wait)))},
            )
            await reply(scope, receive, send)
            return
        server = self._servers[tenant.server_key]
        await server.session_manager.handle_request(scope, receive, send)


def build_http_app(
    open_store: Callable[[str], MemoryStore],
    build: Callable[[MemoryStore, bool], MCPServer[Any]],
    tokens: list[tuple[str, Tenant]] | None,
    *,
    host: str = "127.0.0.1",
    limiter: RateLimiter | None = None,
) -> Starlette:
    """Returns the ASGI app: ``/mcp`` (streamable HTTP, per tenant) and ``/healthz``.

    Args:
        open_store: Opens a tenant's memory store by tenant name.
        build: Makes an ``MCPServer`` from a store and whether it is read-only.
        tokens: The tokens file's ``(token, tenant)`` pairs, or None for the open loopback
            mode (one tenant, :data:`OPEN_TENANT`, read-write).
        host: The interface served on (decides the SDK's DNS-rebinding protection).
        limiter: The per-tenant rate limiter (600 a minute by default).

    Raises:
        ConfigError: ``tokens`` is None but ``host`` is not a loopback address.
    """
    if tokens is None and not _is_loopback(host):
        raise ConfigError(
            f"mcp --http: serving on {host} without --tokens-file would expose the memory to "
            "anyone who can reach it; hint: pass --tokens-file, or bind to 127.0.0.1"
        )
    tenants = {t.server_key: t for _, t in tokens} if tokens else {"": Tenant(OPEN_TENANT)}
    stores: dict[str, MemoryStore] = {}
    servers: dict[str, MCPServer[Any]] = {}
    for tenant in tenants.values():
        if tenant.name not in stores:
            stores[tenant.name] = open_store(tenant.name)
        server = build(stores[tenant.name], tenant.readonly)
        # Creates the server's session manager; the routes are ours, its lifespan runs below.
        server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
        servers[tenant.server_key] = server

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for server in servers.values():
                await stack.enter_async_context(server.session_manager.run())
            try:
                yield
            finally:
                for store in stores.values():
                    await store.close()

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "tenants": len(stores)})

    endpoint = TenantEndpoint(servers, tokens, limiter or RateLimiter())
    routes = [Route("/healthz", health, methods=["GET"]), Route(MCP_PATH, endpoint)]
    return Starlette(routes=routes, lifespan=lifespan)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve_http(app: Starlette, host: str, port: int) -> None:
    """Runs ``app`` on uvicorn until interrupted."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    uvicorn.Server(config).run()


__all__ = [
    "DEFAULT_RATE_LIMIT_PER_MINUTE",
    "MCP_PATH",
    "OPEN_TENANT",
    "RateLimiter",
    "Tenant",
    "TenantEndpoint",
    "TokenAuthenticator",
    "build_http_app",
    "load_tokens_file",
    "serve_http",
]
