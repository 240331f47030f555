"""``/v1/memory``: the memory store over HTTP, scoped to the caller's tenant (native-only).

``namespace`` (default ``default``) picks one of the tenant's memories; ``model`` names one
of the tenant's models as the embedder for semantic recall (omit it for lexical recall).
Each store operation runs on the namespace's memory thread (:meth:`MemoryService.run`), never
on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query

from evermind.memory import Hit, MemoryStore
from evermind.runtime.errors import ApiError
from evermind.runtime.memory_service import check_namespace
from evermind.runtime.schemas import RecallRequest, RememberRequest
from evermind.runtime.state import Reader, Runtime, RuntimeDep, Writer
from evermind.tokens import Principal

router = APIRouter(tags=["memory"])

_T = TypeVar("_T")


async def _on_store(
    runtime: Runtime,
    who: Principal,
    namespace: str | None,
    model_id: str | None,
    work: Callable[[MemoryStore], Coroutine[Any, Any, _T]],
) -> _T:
    """``work(store)`` on the memory thread of the caller's ``namespace``."""
    model = None
    if model_id is not None:
        install = runtime.registry.resolve(who.tenant, model_id)
        model = await runtime.registry.model(install)
    return await runtime.memory.run(who.tenant, check_namespace(namespace), model, work)


def _hit(hit: Hit) -> dict[str, Any]:
    return {
        "key": hit.key,
        "content": hit.content,
        "tags": list(hit.tags),
        "score": hit.score,
        "ranked_by": hit.ranked_by,
        "importance": hit.importance,
        "updated_at": hit.updated_at,
        "meta": dict(hit.meta),
    }


def _not_found(key: str, namespace: str | None) -> ApiError:
    return ApiError(
        404,
        f"no memory with key {key!r} in namespace {check_namespace(namespace)!r}",
        "memory_not_found",
    )


@router.post("/v1/memory/remember", summary="Store a memory")
async def remember(body: RememberRequest, runtime: RuntimeDep, who: Writer) -> dict[str, Any]:
    """Stores ``content`` under ``key`` (replacing an earlier memory of that key)."""

    async def work(store: MemoryStore) -> dict[str, Any]:
        record = await store.remember(
            body.key, body.content, body.tags, body.importance, body.ttl, meta=body.meta
        )
        return {"object": "memory", **record.to_dict()}

    return await _on_store(runtime, who, body.namespace, body.model, work)


@router.post("/v1/memory/recall", summary="Recall memories relevant to a query")
async def recall(body: RecallRequest, runtime: RuntimeDep, who: Reader) -> dict[str, Any]:
    """Hybrid recall (BM25, and embeddings when ``model`` is given), best first."""

    async def work(store: MemoryStore) -> dict[str, Any]:
        hits = await store.recall(body.query, body.top_k, body.tags)
        return {"object": "list", "data": [_hit(h) for h in hits]}

    return await _on_store(runtime, who, body.namespace, body.model, work)


@router.get("/v1/memory", summary="List memories (by tag, or the most recent)")
async def list_memories(
    runtime: RuntimeDep,
    who: Reader,
    tag: Annotated[str | None, Query(description="Only memories with this tag")] = None,
    namespace: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
) -> dict[str, Any]:
    """Memories tagged ``tag`` (newest first), or the newest ``limit`` without a tag."""

    async def work(store: MemoryStore) -> dict[str, Any]:
        records = await (store.recall_by_tag(tag, limit) if tag else store.recent(limit))
        return {"object": "list", "data": [{"object": "memory", **r.to_dict()} for r in records]}

    return await _on_store(runtime, who, namespace, None, work)


@router.get("/v1/memory/{key:path}", summary="Get a memory by key")
async def get_memory(
    key: str,
    runtime: RuntimeDep,
    who: Reader,
    namespace: Annotated[str | None, Query()] = None,
) -> dict[str, Any]:
    """The memory stored under ``key``; 404 when there is none (or it expired)."""

    async def work(store: MemoryStore) -> dict[str, Any] | None:
        record = await store.get(key)
        return None if record is None else {"object": "memory", **record.to_dict()}

    found = await _on_store(runtime, who, namespace, None, work)
    if found is None:
        raise _not_found(key, namespace)
    return found


@router.delete("/v1/memory/{key:path}", summary="Forget a memory")
async def forget_memory(
    key: str,
    runtime: RuntimeDep,
    who: Writer,
    namespace: Annotated[str | None, Query()] = None,
) -> dict[str, Any]:
    """Deletes the memory ``key``; 404 when there is none."""
    if not await _on_store(runtime, who, namespace, None, lambda store: store.forget(key)):
        raise _not_found(key, namespace)
    return {"object": "memory", "key": key, "deleted": True}
