"""The runtime's ASGI app: routes, middleware, error handlers (native-only).

:func:`create_app` opens a :class:`~evermind.runtime.state.Runtime` for a
:class:`~evermind.runtime.config.RuntimeConfig` and returns the FastAPI app (OpenAPI docs at
``/docs``). Request flow, outermost first:

1. CORS (loopback origins by default, ``--cors-origin`` otherwise);
2. :class:`FrontDoor`: timing and request metrics; the ``Host`` header (421 unless the server
   is reached by a name it serves: DNS rebinding) and the ``Origin`` header (403 for a web
   page of another origin, whatever the method: a cross-site form post never runs); then for
   ``/v1/*`` one bearer token (401; two ``Authorization`` headers: 400), the tenant's rate
   limit (429) and the request-size cap (413), all before any body is parsed;
3. the routes, whose errors become ``{"error": {"message", "type", "code"}}``.

Library code raises domain errors (:mod:`evermind.errors`); :data:`HTTP_STATUS` is the one
place they become HTTP statuses.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import evermind
from evermind import telemetry
from evermind.auth import FailedAuthLimiter, PermissionDenied, RateLimited, Unauthenticated
from evermind.bridges.answers import MAX_RETRY_AFTER_S
from evermind.errors import (
    AccessError,
    ConfigError,
    Conflict,
    EvermindError,
    InputError,
    NotFound,
    ShapeError,
    StorageError,
    StoreUnavailable,
    Unavailable,
    UpstreamError,
)
from evermind.runtime import (
    routes_affect,
    routes_cache,
    routes_memory,
    routes_models,
    routes_openai,
    routes_vectors,
)
from evermind.runtime.config import RuntimeConfig, is_loopback
from evermind.runtime.devices import resolve_device
from evermind.runtime.errors import ApiError, error_body, provider_body, shaped
from evermind.runtime.gateway import anthropic as gateway_anthropic
from evermind.runtime.gateway import responses as gateway_responses
from evermind.runtime.state import Runtime

logger = logging.getLogger(__name__)

#: Origins allowed by default: any port on the loopback interface (the Studio's page).
LOOPBACK_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
PUSH = ("POST", "/v1/models")
#: The routes Anthropic clients call (Messages, its token count, the model list), where
#: their ``x-api-key`` header carries the runtime token.
ANTHROPIC_ROUTES = frozenset({"/v1/messages", "/v1/messages/count_tokens", "/v1/models"})
#: Content types a push may declare (none is fine: a non-browser client). A web form can
#: send text/plain, urlencoded or multipart without a preflight; none of those is a package.
PUSH_TYPES = frozenset({"application/octet-stream", "application/zip", "application/x-evermind"})

#: Library errors by HTTP status and default ``code`` (an error's own ``code`` wins), most
#: specific first: the one place a domain error becomes an HTTP status.
HTTP_STATUS: tuple[tuple[type[EvermindError], int, str], ...] = (
    (Unauthenticated, 401, "unauthenticated"),
    (PermissionDenied, 403, "forbidden"),
    (RateLimited, 429, "rate_limited"),
    (AccessError, 403, "forbidden"),
    (NotFound, 404, "not_found"),
    (Conflict, 409, "conflict"),
    (UpstreamError, 502, "upstream_error"),  # by code: see UPSTREAM_STATUS
    (Unavailable, 503, "unavailable"),
    (ConfigError, 400, "invalid_request"),
    (InputError, 400, "invalid_request"),
    (ShapeError, 400, "invalid_request"),
    (StorageError, 500, "storage_error"),
    (EvermindError, 500, "server_error"),
)
#: An upstream's failure by its code, where 502 Bad Gateway is not the answer: its rate
#: limit passes through (with its Retry-After), a timeout is 504, a request it refused is
#: the caller's 4xx: the upstream's own status (400, 404, 413, 422, ...; see
#: :func:`upstream_status`), and so is its 5xx with a well-formed error body (500, 503,
#: 529, ...: the SDKs' retries read it). Auth failures (the server's key), a 5xx without
#: the provider's error shape, refused connections and cut or malformed answers: 502.
UPSTREAM_STATUS = {
    "upstream_rate_limited": 429,
    "upstream_timeout": 504,
    "upstream_bad_request": 400,
}


def upstream_status(err: UpstreamError) -> int:
    """The status a client gets for an upstream's failure: :data:`UPSTREAM_STATUS`, with a
    refused request keeping the upstream's own 4xx (never 401/403: those are the server's
    key, not the client's, and are 502) and a relayed 5xx its own (:func:`relayed_5xx`)."""
    status = UPSTREAM_STATUS.get(err.code) or (429 if err.status == 429 else 502)
    if (
        err.code == "upstream_bad_request"
        and err.status is not None
        and 400 <= err.status < 500
        and err.status not in (401, 403)
    ):
        return err.status
    if err.status is not None and relayed_5xx(err):
        return err.status
    return status


def relayed_5xx(err: UpstreamError) -> bool:
    """Whether the upstream answered a 5xx in its provider's own error shape (the bridge
    then kept its error object, ``reported``): the client gets that status, not 502."""
    return err.status is not None and 500 <= err.status <= 599 and err.reported is not None


#: The challenge a 401 answer carries (RFC 6750).
BEARER_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="evermind"'}


def as_api_error(err: EvermindError) -> ApiError:
    """The HTTP answer to a library error, by :data:`HTTP_STATUS` (an ``ApiError`` as is)."""
    if isinstance(err, ApiError):
        return err
    status, code = next((s, c) for kind, s, c in HTTP_STATUS if isinstance(err, kind))
    headers: dict[str, str] = {}
    if isinstance(err, Unauthenticated):
        headers = dict(BEARER_CHALLENGE)
    elif isinstance(err, RateLimited):
        headers = {"Retry-After": str(err.retry_after_s)}
    elif isinstance(err, StoreUnavailable):
        headers = {"Retry-After": "1"}
    elif isinstance(err, UpstreamError):
        status = upstream_status(err)
        wait = err.retry_after
        waits = status == 429 or relayed_5xx(err)  # a 503 or 529 may say when to come back
        if waits and wait is not None and math.isfinite(wait) and wait >= 0:
            headers = {"Retry-After": str(max(1, math.ceil(min(wait, MAX_RETRY_AFTER_S))))}
    return ApiError(status, str(err), err.code or code, headers)


class FrontDoor:
    """Metrics for every request; auth, rate limit and size cap for ``/v1/*``.

    Args:
        app: The inner ASGI app.
        runtime: The server's services (tokens, limiter, metrics, config).
        routes: The app's routes (to label metrics by route template).
    """

    def __init__(self, app: ASGIApp, runtime: Runtime, routes: list[BaseRoute]) -> None:
        self.app = app
        self.runtime = runtime
        self.routes = routes
        #: Failed authentications per failed credential (per address without one).
        self.failures = FailedAuthLimiter()

    def _route(self, scope: Scope) -> str:
        partial = "unmatched"
        for route in self.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return str(getattr(route, "path", partial))
            if match == Match.PARTIAL and partial == "unmatched":
                partial = str(getattr(route, "path", partial))  # path fits, method does not
        return partial

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]
        matched: list[str] = []  # the route template, matched once (metrics and the span)

        def route() -> str:
            if not matched:
                matched.append(self._route(scope))
            return matched[0]

        async def send_and_count(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.runtime.metrics.observe_request(
                    route(), scope["method"], status[0], time.perf_counter() - start
                )

        traced = telemetry.active()
        if traced is None:
            await self._serve(scope, receive, send_and_count)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        with traced.serve(scope["method"], route(), scope["path"], headers) as span:
            try:
                await self._serve(scope, receive, send_and_count)
            finally:
                traced.finish_server(span, status[0])

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            self._check_peer(scope)
            if scope["path"].startswith("/v1/") and scope["method"] != "OPTIONS":
                receive = await self._admit(scope, receive)
        except EvermindError as err:
            refused = as_api_error(err)
            response = JSONResponse(
                shaped(scope["path"], refused.status, refused.body()),
                status_code=refused.status,
                headers=refused.headers,
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _check_peer(self, scope: Scope) -> None:
        """Refuses a ``Host`` this server is not reached by, and a foreign web ``Origin``."""
        config = self.runtime.config
        host = origin = None
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
        if host is not None and not _host_allowed(host, config.allowed_hosts, config.host):
            raise ApiError(
                421,
                f"Host {host[:100]!r} is not a name this server is reached by; hint: use "
                "127.0.0.1 or localhost, or start the server with --allowed-host NAME",
                "misdirected_request",
            )
        if origin is not None and scope["method"] != "OPTIONS":
            allowed = (
                origin in config.cors_origins
                if config.cors_origins
                else re.fullmatch(LOOPBACK_ORIGINS, origin) is not None
            )
            if not allowed:
                raise ApiError(
                    403,
                    f"requests from the web page origin {origin[:100]!r} are refused; hint: "
                    "start the server with --cors-origin ORIGIN to allow that page",
                    "forbidden_origin",
                )

    async def _admit(self, scope: Scope, receive: Receive) -> Receive:
        if sum(1 for key, _ in scope["headers"] if key == b"authorization") > 1:
            raise ApiError(
                400,
                "more than one Authorization header; expected exactly one bearer token",
                "duplicate_authorization",
            )
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        peer = str((scope.get("client") or ("?", 0))[0])
        authorization = headers.get("authorization")
        anthropic_route = scope["path"].rstrip("/") in ANTHROPIC_ROUTES
        if authorization is None and anthropic_route and "x-api-key" in headers:
            # Anthropic clients send their key as x-api-key: here, the runtime token.
            authorization = f"Bearer {headers['x-api-key']}"
        principal = self.failures.authenticate(self.runtime.tokens, authorization, peer)
        self.runtime.limiter.check(principal.tenant)
        scope["evermind.principal"] = principal
        if (scope["method"], scope["path"].rstrip("/")) == PUSH:
            declared_type = headers.get("content-type", "").split(";")[0].strip().lower()
            if declared_type and declared_type not in PUSH_TYPES:
                raise ApiError(
                    415,
                    f"Content-Type {declared_type[:80]!r} is not a package; expected "
                    "application/octet-stream (the bytes of a .evermind file)",
                    "unsupported_media_type",
                )
            return receive  # the push route streams with its own, larger cap
        cap = self.runtime.config.max_request_bytes
        declared = headers.get("content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > cap:
                raise _body_too_large(int(declared), cap)
            return receive
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return receive
        # Chunked body: read it here (up to the cap) and replay it to the route.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > cap:
                raise _body_too_large(size, cap)
            if not message.get("more_body"):
                break
        replay: list[Message] = [{"type": "http.request", "body": b"".join(chunks)}]

        async def replayed() -> Message:
            return replay.pop() if replay else await receive()

        return replayed


def _host_allowed(header: str, allowed: list[str], bound: str) -> bool:
    """Whether a ``Host`` header names this server (port ignored)."""
    name = header.strip().lower()
    if name.startswith("["):  # [::1]:8377
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.rsplit(":", 1)[0]
    if allowed:
        return name in {a.lower() for a in allowed}
    if not is_loopback(bound):
        return True  # bound to a public interface: any name may reach it
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback  # 127.0.0.2, ...
    except ValueError:
        return False  # attacker.example, 127.attacker.example


def _body_too_large(size: int, cap: int) -> ApiError:
    return ApiError(
        413,
        f"request body of {size} bytes exceeds the limit of {cap} bytes; hint: send fewer "
        "inputs per request, or raise the server's --max-request-mb",
        "request_too_large",
    )


def _validation_message(err: RequestValidationError) -> tuple[str, str]:
    problems = list(err.errors())
    if any(p.get("type") == "json_invalid" for p in problems):
        detail = next(p for p in problems if p.get("type") == "json_invalid")
        return (
            f"malformed JSON body: {detail.get('ctx', {}).get('error', detail.get('msg'))}; "
            "expected a JSON object",
            "invalid_json",
        )
    if (
        len(problems) == 1
        and tuple(problems[0].get("loc", ())) == ("body",)
        and isinstance(problems[0].get("input"), bytes | str)
    ):
        return (
            "malformed JSON body: expected a JSON object with Content-Type: application/json, "
            f"got {_short(problems[0].get('input'))}",
            "invalid_json",
        )
    parts = []
    for problem in problems[:3]:
        location = ".".join(str(x) for x in problem.get("loc", ())[1:]) or "body"
        error = problem.get("ctx", {}).get("error")
        if problem.get("type") == "value_error" and location == "body" and error is not None:
            parts.append(str(error))  # a whole-body check: its message names the field
            continue
        parts.append(f"{location}: {problem.get('msg')} (got {_short(problem.get('input'))})")
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return "invalid request: " + "; ".join(parts) + more, "invalid_request"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _error(
    request: Request, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> JSONResponse:
    """An error answer, in the shape of the route's API (:func:`shaped`)."""
    return JSONResponse(shaped(request.url.path, status, body), status_code=status, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, ApiError)
        return _error(request, err.status, err.body(), err.headers)

    async def validation_error(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, RequestValidationError)
        message, code = _validation_message(err)
        return _error(request, 400, error_body(message, "invalid_request_error", code))

    async def http_error(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code, "http_error")
        message = f"{request.method} {request.url.path}: {err.detail}"
        if err.status_code == 404:
            message += "; hint: the API lives under /v1 (see /docs)"
        kind = "invalid_request_error" if err.status_code < 500 else "server_error"
        return _error(request, err.status_code, error_body(message, kind, code))

    async def evermind_error(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, EvermindError)
        answer = as_api_error(err)
        if isinstance(err, UpstreamError) and (
            err.code == "upstream_bad_request" or relayed_5xx(err)
        ):
            # A request the upstream refused, or its own failure: in its own words, as the
            # provider answers it.
            relayed = provider_body(request.url.path, answer.status, err.provider, err.reported)
            if relayed is not None:
                return JSONResponse(relayed, status_code=answer.status, headers=answer.headers)
        if answer.status == 500:
            logger.exception("request %s %s failed", request.method, request.url.path)
        return _error(request, answer.status, answer.body(), answer.headers)

    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        logger.exception("request %s %s failed", request.method, request.url.path)
        message = f"internal error ({type(err).__name__}); the server log has the details"
        return _error(request, 500, error_body(message, "server_error", "internal_error"))

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(EvermindError, evermind_error)
    app.add_exception_handler(Exception, unexpected)


def create_app(config: RuntimeConfig) -> FastAPI:
    """The runtime app for ``config``; opens its data directory and database now.

    Raises:
        ConfigError: Bad tokens file or settings.
        StorageError: The data directory or database cannot be used.
    """
    runtime = Runtime.open(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await runtime.close()

    app = FastAPI(
        title="Evermind runtime",
        version=evermind.__version__,
        summary="Serves pushed .evermind packages: OpenAI-compatible generation and "
        "embeddings, memory, a shared semantic cache.",
        docs_url=None,  # served below from local assets, not FastAPI's CDN default
        redoc_url=None,
        lifespan=lifespan,
    )
    _mount_offline_docs(app)
    app.state.runtime = runtime
    routers = (
        routes_models,
        routes_openai,
        routes_affect,
        gateway_anthropic,
        gateway_responses,
        routes_memory,
        routes_cache,
        routes_vectors,
    )
    for module in routers:
        app.include_router(module.router)
    # add_middleware wraps the outside: FrontDoor first, then CORS around it.
    labelled: list[BaseRoute] = []  # filled below, once every route exists
    app.add_middleware(FrontDoor, runtime=runtime, routes=labelled)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(config.cors_origins),
        allow_origin_regex=None if config.cors_origins else LOOPBACK_ORIGINS,
        allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
        allow_headers=["Authorization", "Content-Type", "X-Evermind-Cache", "X-Evermind-Route"],
        expose_headers=["Retry-After", "X-Evermind-Cache", "X-Evermind-Cache-Reason"],
        max_age=600,
    )

    @app.get("/healthz", tags=["service"], summary="Liveness")
    async def healthz() -> dict[str, Any]:
        return {
            "status": "ok",
            "version": evermind.__version__,
            "uptime_s": round(time.time() - runtime.started_at, 3),
            "models_loaded": runtime.registry.loaded_count,
            "device": resolve_device(runtime.config.device).as_dict(),
        }

    @app.get("/metrics", tags=["service"], summary="Prometheus metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(runtime.metrics.render(), media_type="text/plain; version=0.0.4")

    _install_error_handlers(app)
    for module in routers:
        labelled.extend(module.router.routes)
    labelled.extend(r for r in app.router.routes if hasattr(r, "path"))
    return app


def _mount_offline_docs(app: FastAPI) -> None:
    """Serves Swagger UI at ``/docs`` from the ``swagger-ui-bundle`` wheel's files.

    FastAPI's default page loads its JavaScript and CSS from a CDN; the runtime makes no
    request off the serving host, so the assets come from the installed package instead.
    """
    import swagger_ui_bundle
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles

    app.mount(
        "/docs/assets", StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="docs-assets"
    )

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="Evermind runtime – API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon-32x32.png",
        )
