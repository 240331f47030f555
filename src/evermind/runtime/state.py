"""The server's long-lived services and the request dependencies that reach them (native-only).

:class:`Runtime` is built once per app (at start-up) from a
:class:`~evermind.runtime.config.RuntimeConfig`; routes get it, and the caller's
:class:`~evermind.tokens.Principal`, through the FastAPI dependencies below. The
principal is settled by the auth middleware before any body is read.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request

from evermind.auth import PermissionDenied, RateLimiter, TokenTable, Unauthenticated
from evermind.cache.l2_sqlite import CacheStore, SemanticCacheStore
from evermind.cache.l2_vectorstore import VectorCacheStore
from evermind.cache.verified import parse_max_error
from evermind.runtime.config import RuntimeConfig
from evermind.runtime.devices import decoder_for
from evermind.runtime.gateway.config import GatewayConfig
from evermind.runtime.gateway.core import Gateway, LocalServing
from evermind.runtime.installs import InstallStore
from evermind.runtime.memory_service import MemoryService
from evermind.runtime.metrics import Metrics
from evermind.runtime.registry import ModelRegistry
from evermind.runtime.scheduler import Scheduler
from evermind.runtime.telemetry import close_export, open_export
from evermind.runtime.vector_collections import VectorCollections
from evermind.telemetry import Telemetry
from evermind.tokens import Principal
from evermind.vectorstore.shared import SharedStore

logger = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Every service one server holds."""

    config: RuntimeConfig
    tokens: TokenTable
    limiter: RateLimiter
    executor: ThreadPoolExecutor
    installs: InstallStore
    registry: ModelRegistry
    generator: Scheduler
    cache: CacheStore
    memory: MemoryService
    metrics: Metrics
    started_at: float
    #: The tenants' vector collections (``/v1/vectors``), in ``<data>/vectors``.
    vectors: VectorCollections
    #: Loaded local teachers by model id (``teacher/...``), filled on first use.
    teachers: dict[str, Any] = field(default_factory=dict)
    #: The caching gateway to frontier models (None without ``--upstreams``).
    gateway: Gateway | None = None
    #: The ``--store`` engine memory and the L2 live in (None: the runtime database).
    shared: SharedStore | None = None
    #: OTLP export of the GenAI telemetry (None without ``--otlp-endpoint``).
    telemetry: Telemetry | None = None

    @classmethod
    def open(cls, config: RuntimeConfig) -> Runtime:
        """Creates the data directory, scans installs, opens the database.

        Raises:
            ConfigError: The tokens or upstreams file is missing or malformed, or ``--store``
                names a store the runtime cannot use.
            StorageError: The data directory, database or ``--store`` engine cannot be used.
            InputError: The ``--embedder`` file cannot be read.
            PackageError: The ``--embedder`` file is not an embedder file.
        """
        tokens = TokenTable.from_file(config.tokens_file)
        default_embedder = _default_embedder(config)  # a bad file fails before anything opens
        upstreams = (
            None
            if config.upstreams_file is None
            else GatewayConfig.load(config.upstreams_file).scoped(config.cache_scope)
        )
        if upstreams is not None and config.cache_max_error is not None:
            upstreams = dataclasses.replace(
                upstreams, max_error=parse_max_error(config.cache_max_error, "--cache-max-error")
            )
        config.data_dir.mkdir(parents=True, exist_ok=True)
        shared = None if config.store is None else SharedStore(config.store)  # fails fast
        cache: CacheStore = (
            SemanticCacheStore(config.db_path, config.cache_max_entries)
            if shared is None
            else VectorCacheStore(shared, config.cache_max_entries)
        )
        executor = ThreadPoolExecutor(config.worker_threads, thread_name_prefix="evermind-worker")
        installs = InstallStore(config.models_dir, config.tmp_dir)
        registry = ModelRegistry(installs, config.memory_budget_bytes, executor)
        metrics = Metrics()
        runtime = cls(
            config=config,
            tokens=tokens,
            limiter=RateLimiter(config.rate_limit, config.rate_burst),
            executor=executor,
            installs=installs,
            registry=registry,
            generator=Scheduler(
                executor,
                config.generation_slots,
                config.tenant_queue,
                config.batch_slots,
                decoder_factory=lambda model, slots: decoder_for(model, config.device, slots),
            ),
            cache=cache,
            memory=MemoryService(config.db_path, executor, shared, default_embedder),
            metrics=metrics,
            started_at=time.time(),
            shared=shared,
            vectors=VectorCollections(config.data_dir / "vectors"),
        )
        if upstreams is not None:

            async def load(tenant: str, model_id: str) -> Any:
                return await registry.model(registry.resolve(tenant, model_id))

            runtime.gateway = Gateway(
                upstreams,
                runtime.cache,
                executor,
                metrics,
                local=LocalServing(runtime.generator, load, config.max_tokens_cap, config.data_dir),
            )
        metrics.gauges["evermind_models_loaded"] = lambda: registry.loaded_count
        metrics.gauges["evermind_models_loaded_bytes"] = lambda: registry.loaded_bytes
        metrics.gauges["evermind_model_loads_total"] = lambda: registry.loads
        metrics.gauges["evermind_model_evictions_total"] = lambda: registry.evictions
        batcher = runtime.generator.embeddings  # texts over jobs: how well embeddings batch
        metrics.gauges["evermind_embedding_jobs_total"] = lambda: batcher.jobs
        metrics.gauges["evermind_embedding_texts_total"] = lambda: batcher.texts
        runtime.telemetry = open_export(config.otlp_endpoint)
        logger.info(
            "runtime data in %s; auth %s", config.data_dir, "on" if tokens.enabled else "off"
        )
        return runtime

    async def close(self) -> None:
        """Closes the upstream clients, the database connections and the worker pool; flushes
        the telemetry export."""
        if self.gateway is not None:
            await self.gateway.aclose()
        await self.memory.close()
        await self.vectors.close()
        self.cache.close()
        if self.shared is not None:
            await self.shared.close()
        self.executor.shutdown(wait=False, cancel_futures=True)
        await close_export(self.telemetry)


def _default_embedder(config: RuntimeConfig) -> Any:
    """The static embedder ``--embedder`` names (read once, at start), or None.

    Raises:
        InputError: The file cannot be read.
        PackageError: It is not an embedder file.
    """
    if config.embedder is None:
        return None
    from evermind.embedder.shipped import load_embedder_spec

    embedder = load_embedder_spec(config.embedder)
    logger.info("memory embeds with --embedder %s (%s)", config.embedder, embedder.fingerprint)
    return embedder


async def get_runtime(request: Request) -> Runtime:
    """The app's :class:`Runtime`."""
    runtime: Runtime = request.app.state.runtime
    return runtime


async def reader(request: Request) -> Principal:
    """The caller (authenticated by the middleware); any access level."""
    return principal_of(request)


def principal_of(request: Request) -> Principal:
    """The principal the auth middleware put in the request scope."""
    principal = request.scope.get("evermind.principal")
    if not isinstance(principal, Principal):
        raise Unauthenticated("not authenticated; expected a bearer token", code="missing_token")
    return principal


async def writer(request: Request) -> Principal:
    """The caller, who must hold a write token.

    Raises:
        PermissionDenied: The token is read-only.
    """
    principal = principal_of(request)
    if not principal.can_write:
        raise PermissionDenied(
            "this token is read-only; installing, deleting and storing need a token with "
            "'write' access in the server's tokens file"
        )
    return principal


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
Reader = Annotated[Principal, Depends(reader)]
Writer = Annotated[Principal, Depends(writer)]
