"""``/v1/semantic-cache``: the shared L2 semantic cache, scoped to the caller's tenant
(native-only).

The protocol is the one :class:`evermind.cache.HttpSemanticCacheBackend` speaks, so L1
caches use it unchanged; see :mod:`evermind.cache.l2_sqlite` for the matching rules.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from evermind.runtime.memory_service import check_namespace
from evermind.runtime.schemas import CacheLookupRequest, CacheStoreRequest
from evermind.runtime.state import Reader, RuntimeDep, Writer

router = APIRouter(tags=["semantic cache"])


@router.post("/v1/semantic-cache/lookup", summary="Look up a cached response")
async def cache_lookup(
    body: CacheLookupRequest,
    runtime: RuntimeDep,
    who: Reader,
) -> dict[str, Any]:
    """``{"hit": {"response", "score", "query"?, "meta"?}}`` or ``{}`` on a miss."""
    result = await runtime.cache.lookup(
        who.tenant,
        check_namespace(body.namespace),
        body.embedding,
        body.threshold,
        body.query,
        body.bound,
    )
    for _ in range(result.refused):
        runtime.metrics.cache_event("guard_refused")
    runtime.metrics.cache_event("hit" if result.hit is not None else "miss")
    return {} if result.hit is None else {"hit": result.hit}


@router.post("/v1/semantic-cache/store", summary="Store a response")
async def cache_store(
    body: CacheStoreRequest,
    runtime: RuntimeDep,
    who: Writer,
) -> dict[str, Any]:
    """Adds ``(embedding, response)`` to the namespace; ``query`` enables the guards."""
    entry_id = await runtime.cache.store(
        who.tenant,
        check_namespace(body.namespace),
        body.embedding,
        body.response,
        body.meta,
        body.query,
    )
    runtime.metrics.cache_event("store")
    return {"stored": True, "id": entry_id}
