"""The MCP memory server over streamable HTTP, with bearer-token tenants (``evermind mcp --http``).

Owns the ASGI app and its HTTP answers; who a token speaks for and how fast a tenant may call
are :mod:`evermind.auth`'s, the runtime's own implementation:

- **Tokens file**: the runtime's format (``evermind.tokens``), one
  ``TOKEN TENANT [read|write]`` per line, so one file serves ``evermind serve`` and
  ``evermind mcp --http``. A ``read`` token gets the read-only tool set.
- **Authentication**: :class:`~evermind.auth.TokenTable`, in constant time. A missing,
  malformed or unknown token gets ``401`` with ``WWW-Authenticate: Bearer`` naming the
  protected-resource metadata (RFC 9728), served at
  ``/.well-known/oauth-protected-resource`` (and ``…/mcp``): the resource, bearer tokens in
  the ``Authorization`` header, and no authorization server: the token is a static one from
  the tokens file, which a client sends as a header (Claude Code:
  ``claude mcp add --transport http evermind URL/mcp --header "Authorization: Bearer T"``;
  the MCP Inspector CLI: ``--header "Authorization: Bearer T"``), never through OAuth.
- **Rate limit**: :class:`~evermind.auth.RateLimiter`, a token bucket per tenant
  (``rate_limit_per_minute`` requests a minute, bursts up to the same number); an empty
  bucket answers ``429`` with ``Retry-After``.
- **Isolation**: each tenant gets its own ``MCPServer``, session manager and ``MemoryStore``
  (the runtime's namespace ``<tenant>/default`` of the shared SQLite file, or, with a shared
  ``--store``, the tenant's own items of the store: the tenant is every item's ACL and every
  read's scope, as ``evermind serve --store`` keeps them), so one tenant's sessions and
  memories are unreachable with another's token.

Without a tokens file the server serves one tenant, ``default``, without authentication, and
only on a loopback interface. Native-only (uvicorn, starlette, the ``mcp`` SDK).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from evermind.auth import RateLimiter, TokenTable, Unauthenticated
from evermind.errors import ConfigError
from evermind.memory import MemoryStore
from evermind.tokens import DEFAULT_TENANT, Principal

logger = logging.getLogger(__name__)

#: The path the MCP endpoint is served on.
MCP_PATH = "/mcp"
#: RFC 9728's well-known path of the protected-resource metadata (and its form for MCP_PATH).
RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"
DEFAULT_RATE_LIMIT_PER_MINUTE = 600
#: The tenant served when no tokens file is given (loopback only); the runtime's default.
OPEN_TENANT = DEFAULT_TENANT


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

    @classmethod
    def of(cls, principal: Principal) -> Tenant:
        """The tenant a token's principal speaks for."""
        return cls(principal.tenant, readonly=not principal.can_write)


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
        tokens: The tokens file's table (``TokenTable(None)``: every caller is
            :data:`OPEN_TENANT`, without authentication).
        limiter: The per-tenant rate limiter.
    """

    def __init__(
        self, servers: Mapping[str, MCPServer[Any]], tokens: TokenTable, limiter: RateLimiter
    ) -> None:
        self._servers = servers
        self._tokens = tokens
        self._limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        try:
            who = self._tokens.authenticate(request.headers.get("authorization"))
        except Unauthenticated:
            metadata = f"{_base_url(request)}{RESOURCE_METADATA_PATH}{MCP_PATH}"
            challenge = f'Bearer realm="evermind-mcp", resource_metadata="{metadata}"'
            reply = _error(
                401,
                "expected 'Authorization: Bearer <token>' with a token from the server's "
                "tokens file; the request had none or an unknown one; hint: pass the token "
                "as a header (this server does no OAuth)",
                "invalid_token",
                {"WWW-Authenticate": challenge},
            )
            await reply(scope, receive, send)
            return
        tenant = Tenant.of(who)
        wait = self._limiter.acquire(tenant.name)
        if wait > 0:
            reply = _error(
                429,
                f"tenant {tenant.name!r} exceeded {self._limiter.rate * 60:g} requests a "
                f"minute; retry in {wait:.1f} s",
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
    tokens: TokenTable,
    *,
    host: str = "127.0.0.1",
    limiter: RateLimiter | None = None,
    resources: contextlib.AbstractAsyncContextManager[Any] | None = None,
) -> Starlette:
    """Returns the ASGI app: ``/mcp`` (streamable HTTP, per tenant) and ``/healthz``.

    Args:
        open_store: Opens a tenant's memory store by tenant name.
        build: Makes an ``MCPServer`` from a store and whether it is read-only.
        tokens: The tokens file's table (:meth:`TokenTable.from_file`), or ``TokenTable(None)``
            for the open loopback mode (one tenant, :data:`OPEN_TENANT`, read-write).
        host: The interface served on (decides the SDK's DNS-rebinding protection).
        limiter: The per-tenant rate limiter (600 a minute by default).
        resources: What the stores need open on the server's own event loop (a shared
            store's connections: ``SharedMemory``): entered at start-up, before any store
            is opened (the stores are then opened there too), and exited after they closed.
            None: the stores are opened now.

    Raises:
        ConfigError: ``tokens`` has no tokens but ``host`` is not a loopback address.
    """
    if not tokens.enabled and not _is_loopback(host):
        raise ConfigError(
            f"mcp --http: serving on {host} without --tokens-file would expose the memory to "
            "anyone who can reach it; hint: pass --tokens-file, or bind to 127.0.0.1"
        )
    tenants = list({t.server_key: t for t in map(Tenant.of, tokens.principals)}.values())
    stores: dict[str, MemoryStore] = {}
    servers: dict[str, MCPServer[Any]] = {}

    def open_all() -> None:
        for tenant in tenants:
            if tenant.name not in stores:
                stores[tenant.name] = open_store(tenant.name)
            server = build(stores[tenant.name], tenant.readonly)
            # Creates the server's session manager; the routes are ours, its lifespan below.
            server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
            servers[tenant.server_key] = server

    if resources is None:
        open_all()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if resources is not None:
                await stack.enter_async_context(resources)
                open_all()
            for server in servers.values():
                await stack.enter_async_context(server.session_manager.run())
            try:
                yield
            finally:
                for store in stores.values():
                    await store.close()

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "tenants": len(stores)})

    limiter = limiter or RateLimiter.per_minute(DEFAULT_RATE_LIMIT_PER_MINUTE)
    endpoint = TenantEndpoint(servers, tokens, limiter)
    routes = [Route("/healthz", health, methods=["GET"]), Route(MCP_PATH, endpoint)]
    if tokens.enabled:
        for path in (RESOURCE_METADATA_PATH, RESOURCE_METADATA_PATH + MCP_PATH):
            routes.append(Route(path, resource_metadata, methods=["GET"]))
    return Starlette(routes=routes, lifespan=lifespan)


async def resource_metadata(request: Request) -> Response:
    """RFC 9728 protected-resource metadata: bearer tokens in the header, no authorization
    server (the tokens are static, from the tokens file)."""
    return JSONResponse(
        {
            "resource": f"{_base_url(request)}{MCP_PATH}",
            "bearer_methods_supported": ["header"],
            "resource_name": "Evermind memory (MCP)",
        }
    )


def _base_url(request: Request) -> str:
    """The URL the client reached this server at (scheme and host, no trailing slash)."""
    return str(request.base_url).rstrip("/")


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
    "RESOURCE_METADATA_PATH",
    "Tenant",
    "TenantEndpoint",
    "build_http_app",
    "serve_http",
]
