"""``/v1/memory``: the memory store over HTTP, scoped to the caller's tenant (native-only).

``namespace`` (default ``default``) picks one of the tenant's memories; ``model`` names one
of the tenant's models as the embedder for semantic recall (omit it for lexical recall).
``POST /v1/retrieve`` reads the chunks ``evermind ingest`` stored in a namespace (the
runtime database's ``<tenant>/<namespace>``, or the ``--store`` engine's) as cited passages,
the same data as ``evermind ask --json``, optionally filtered on the rows' fields (``where``,
the JSON form of :mod:`evermind.vectorstore.filters`; a bad one is a 400 naming the problem).
``POST /v1/answer`` has a model answer from those passages, citing them as ``[n]``
(:func:`evermind.retrieval.citations.answer_over`, as ``evermind ask --answer-with`` does): the
model is an upstream of the gateway, called through it (its cache, routing, usage and cost), and
not called at all when there is no evidence.
Each store operation runs on the namespace's memory thread (:meth:`MemoryService.run`), never
on the event loop. ``remember`` runs write-through cognition
(:mod:`evermind.memory.write_through`) unless ``mode`` is ``put``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query

from evermind.ingest import NO_EVIDENCE, search_ingested
from evermind.memory import Hit, MemoryStore
from evermind.memory.evidence import configured
from evermind.memory.write_through import (
    Outcome,
    Remember,
    forget_history,
    history,
    remember_through,
)
from evermind.retrieval.citations import build_request, read_answer, refused
from evermind.retrieval.ingested import answer_json, as_search_result
from evermind.runtime.errors import ApiError
from evermind.runtime.memory_service import check_namespace
from evermind.runtime.schemas import (
    AnswerRequest,
    RecallRequest,
    RememberRequest,
    RetrieveRequest,
)
from evermind.runtime.state import Reader, Runtime, RuntimeDep, Writer
from evermind.tokens import Principal
from evermind.vectorstore.where import parse_where_json

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


@router.post("/v1/memory/remember", summary="Store a memory (reconciled with what memory holds)")
async def remember(body: RememberRequest, runtime: RuntimeDep, who: Writer) -> dict[str, Any]:
    """Reconciles ``content`` with the namespace's memories, then stores it.

    The answer is the record now stored plus ``cognition`` (``action``, a one-line
    ``summary``, the ``incumbent`` compared with, ``archived_key``, ``evidence``). A write
    rejected on evidence is a 409 ``memory_rejected`` whose message is the summary.
    """
    request = Remember.of(  # a ConfigError is a 400 (evermind.runtime.app)
        body.key, body.content, body.tags, body.importance, body.ttl, body.meta, body.aliases
    )
    gatherer = configured(runtime.config.memory_workspace_root, runtime.config.memory_probe_http)

    async def work(store: MemoryStore) -> Outcome:
        return await remember_through(store, request, gatherer, body.mode)

    outcome = await _on_store(runtime, who, body.namespace, body.model, work)
    if outcome.record is None:
        raise ApiError(409, outcome.summary, "memory_rejected")
    return {"object": "memory", **outcome.record.to_dict(), "cognition": outcome.to_dict()}


@router.post("/v1/memory/recall", summary="Recall memories relevant to a query")
async def recall(body: RecallRequest, runtime: RuntimeDep, who: Reader) -> dict[str, Any]:
    """Hybrid recall (BM25, and embeddings when ``model`` is given), best first."""

    async def work(store: MemoryStore) -> dict[str, Any]:
        hits = await store.recall(body.query, body.top_k, body.tags)
        return {"object": "list", "data": [_hit(h) for h in hits]}

    return await _on_store(runtime, who, body.namespace, body.model, work)


@router.post("/v1/retrieve", summary="Cited passages of the ingested documents for a question")
async def retrieve(body: RetrieveRequest, runtime: RuntimeDep, who: Reader) -> dict[str, Any]:
    """The ingested passages answering ``question``, best first, each with its citation and
    row fields; ``refused: true`` with no passages and ``reason: "no evidence"`` when none
    clears recall's relevance floor (or none passes ``where``)."""
    where = parse_where_json(body.where)  # a bad filter is a 400 before the store is touched

    async def work(store: MemoryStore) -> dict[str, Any]:
        passages = await search_ingested(store, body.question, body.top_k, where)
        return {
            "object": "retrieval",
            "question": body.question,
            "namespace": check_namespace(body.namespace),
            "refused": not passages,
            "reason": None if passages else NO_EVIDENCE,
            "passages": [p.to_dict() for p in passages],
        }

    return await _on_store(runtime, who, body.namespace, body.model, work)


@router.post("/v1/answer", summary="A model's cited answer from the ingested documents")
async def answer(body: AnswerRequest, runtime: RuntimeDep, who: Reader) -> dict[str, Any]:
    """The answer of ``answer_with`` to ``question`` from the passages ``/v1/retrieve`` finds,
    its ``[n]`` citations checked; ``refused: true`` when there is no evidence (the model is
    not called) or the model replied that the passages do not hold the answer."""
    from evermind.runtime.routes_openai import gateway_route

    where = parse_where_json(body.where)
    gateway = runtime.gateway
    routed = None if gateway is None else gateway_route(runtime, body.answer_with, who)
    if gateway is None or routed is None:
        raise ApiError(
            400,
            f"answer_with: {body.answer_with!r} is not a model of the gateway's upstreams; "
            "answers come from an upstream model (start evermind serve with --upstreams); "
            "hint: POST /v1/retrieve gives the passages for any other model",
            "invalid_model",
        )

    async def work(store: MemoryStore) -> list[Any]:
        return await search_ingested(store, body.question, body.top_k, where)

    passages = await _on_store(runtime, who, body.namespace, body.model, work)
    result = as_search_result(body.question, passages)
    cost = 0.0
    if result.refused:
        found = refused(result)
    else:
        request = build_request(
            body.question,
            result.passages,
            model=routed.model,
            max_tokens=body.max_tokens,
            tenant=who.tenant,
        )
        opened = await gateway.open_call(routed, replace(request, user=who.user), False)
        assert opened.completion is not None  # not streamed
        found = read_answer(result, opened.completion)
        cost = opened.completion.cost_usd or 0.0
    return {
        "object": "answer",
        "model": body.answer_with,
        "namespace": check_namespace(body.namespace),
        **answer_json(found, passages),
        "cost_usd": cost,
    }


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
    include_history: Annotated[
        bool, Query(description="Also list the superseded versions, newest first")
    ] = False,
) -> dict[str, Any]:
    """The memory stored under ``key``; 404 when there is none (or it expired)."""

    async def work(store: MemoryStore) -> dict[str, Any] | None:
        record = await store.get(key)
        if record is None:
            return None
        found = {"object": "memory", **record.to_dict()}
        if include_history:
            versions = await history(store, key)
            found["history"] = [{"object": "memory", **r.to_dict()} for r in versions]
        return found

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
    """Deletes the memory ``key`` and the versions it superseded; 404 when there is none."""

    async def work(store: MemoryStore) -> bool:
        await forget_history(store, key)
        return await store.forget(key)

    if not await _on_store(runtime, who, namespace, None, work):
        raise _not_found(key, namespace)
    return {"object": "memory", "key": key, "deleted": True}
