"""``/v1/semantic-cache``: the shared L2 semantic cache, scoped to the caller's tenant; and
``/v1/gateway/cache``: the gateway's cache, asked by question text (native-only).

``/v1/semantic-cache`` speaks the protocol :class:`evermind.cache.HttpSemanticCacheBackend`
speaks, so L1 caches use it unchanged; see :mod:`evermind.cache.l2_sqlite` for the matching
rules. The caller sends its own embedding, so only callers that embed alike share entries.

``/v1/gateway/cache/lookup`` and ``/store`` are how a client that does not embed as the
gateway does (the Studio's tab) shares answers with agents served through the gateway: the
client sends the question *text* and the scope of the agent request it stands for (model,
system prompt, temperature, max_tokens, as an OpenAI chat body has them); the runtime builds
that request exactly as ``POST /v1/chat/completions`` would
(:func:`evermind.runtime.gateway.openai.chat_request`), so the key (tenant audience, scope
digest, query) is the one an agent's request gets, and the gateway's cache embeds and judges
it with its own embedder and decision (:meth:`evermind.bridges.caching.CachingBridge.peek`
and ``put``). The upstream is never called from here.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from evermind.bridges.base import ChatRequest
from evermind.bridges.caching import CachingBridge
from evermind.errors import AccessError, NotFound
from evermind.runtime import schemas
from evermind.runtime.gateway.openai import chat_request
from evermind.runtime.memory_service import check_namespace
from evermind.runtime.schemas import CacheLookupRequest, CacheStoreRequest
from evermind.runtime.state import Reader, Runtime, RuntimeDep, Writer
from evermind.tokens import Principal

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


def _gateway_scope(
    runtime: Runtime, who: Principal, body: schemas.GatewayCacheLookup
) -> tuple[CachingBridge, ChatRequest]:
    """The tenant's caching bridge for ``body.model`` and the request an agent's
    ``POST /v1/chat/completions`` with this question and scope becomes.

    Raises:
        NotFound: No gateway cache, or the model is no gateway model.
        AccessError: The tenant may not use the model's upstream.
    """
    gateway = runtime.gateway
    if gateway is None or gateway.cache is None:
        raise NotFound(
            "this runtime has no gateway cache; hint: start evermind serve with --upstreams "
            "FILE whose [cache] embedder is not 'none'",
            code="gateway_cache_off",
        )
    messages: list[dict[str, Any]] = [{"role": "user", "content": body.query}]
    if body.system:
        messages.insert(0, {"role": "system", "content": body.system})
    raw: dict[str, Any] = {"model": body.model, "messages": messages}
    if body.temperature is not None:
        raw["temperature"] = body.temperature
    if body.max_tokens is not None:
        raw["max_tokens"] = body.max_tokens
    routed = gateway.resolve(body.model, who, "openai")
    if routed is None or not isinstance(routed.bridge, CachingBridge):
        raise NotFound(
            f"model {body.model!r} is not served through the gateway's cache; hint: name an "
            "upstream model, e.g. openai/<model>, as an agent would",
            code="model_not_found",
        )
    same = routed.upstream.protocol == "openai"
    max_tokens = body.max_tokens
    if max_tokens is None and not same:  # as the chat route: a Messages API upstream needs one
        max_tokens = routed.upstream.default_max_tokens
    chat = schemas.ChatRequest.model_validate(raw)
    neutral = chat_request(
        chat, routed.model, who.tenant, max_tokens, None, None, who.user, raw if same else None
    )
    return routed.bridge, neutral


@router.post("/v1/gateway/cache/lookup", summary="Ask the gateway's cache by question text")
async def gateway_cache_lookup(
    body: schemas.GatewayCacheLookup,
    runtime: RuntimeDep,
    who: Reader,
) -> dict[str, Any]:
    """``{"hit": {"response", "score", "tier", "query"?}}``, or ``{"reason"}`` on a miss
    (``query``: only when the caller itself stored the entry)."""
    bridge, request = _gateway_scope(runtime, who, body)
    outcome = await bridge.peek(request)
    hit = outcome.hit
    runtime.metrics.cache_event("hit" if hit is not None else "miss")
    if hit is None or hit.cached is None:
        return {"reason": outcome.summary or str(outcome.reason)}
    found: dict[str, Any] = {
        "response": hit.text,
        "score": hit.cached.score,
        "tier": hit.cached.tier,
    }
    if hit.cached.cached_query:
        found["query"] = hit.cached.cached_query
    return {"hit": found}


@router.post("/v1/gateway/cache/store", summary="Store an answer in the gateway's cache")
async def gateway_cache_store(
    body: schemas.GatewayCacheStore,
    runtime: RuntimeDep,
    who: Writer,
) -> dict[str, Any]:
    """``{"stored": true}``, or ``{"stored": false, "reason"}`` when the scope is not
    cacheable (e.g. a temperature above 0) or the cache failed. A tenant whose cache is
    shared with a group (``[cache.shared]``) may not store: 403."""
    bridge, request = _gateway_scope(runtime, who, body)
    policy = bridge.policy
    if policy.scope == "group" and who.tenant in policy.shared:
        # The gateway's own entries are upstream answers; an answer written here would be
        # served to the other tenants of the group, who never chose this writer's answers.
        raise AccessError(
            f"tenant {who.tenant!r} shares the gateway's cache with its group "
            f"{policy.namespace(who.tenant)!r}, so it may look answers up here but not store "
            "them; hint: give the tenant a cache of its own (leave it out of [cache.shared])",
            code="gateway_cache_shared",
        )
    refused = await bridge.put(request, body.response)
    if refused is not None:
        return {"stored": False, "reason": refused}
    runtime.metrics.cache_event("store")
    return {"stored": True}
