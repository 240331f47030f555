"""``/v1/vectors/{collection}``: the runtime as a vector store over HTTP, per tenant (native-only).

What the ``evermind+http(s)://`` dialect (:mod:`evermind.vectorstore.rest.evermind`) speaks:

- ``GET /v1/vectors/{c}`` → ``{collection, dim}`` (``dim`` null: no such collection yet);
- ``POST /v1/vectors/{c}/upsert`` ``{dim, items: [{id, vector, text, metadata, principals,
  sensitivity, tenant}]}`` → ``{upserted}`` (creates the collection at ``dim``);
- ``POST /v1/vectors/{c}/fetch`` ``{ids}`` → ``{items: {id: {text, metadata, principals,
  sensitivity}}}``;
- ``POST /v1/vectors/{c}/delete`` ``{ids}`` → ``{deleted}``;
- ``POST /v1/vectors/{c}/query`` ``{vector, k, filter, principals, max_sensitivity,
  include_metadata, tenant}`` → ``{tenant, matches: [{id, score, …}]}``, the filter in the
  JSON form of :mod:`evermind.vectorstore.filters`, run whole by the store;
- ``DELETE /v1/vectors/{c}`` → ``{dropped}``.

The tenant is always the caller's (its token's): an item's ACL tenant is set to it and every
query's scope names it; a body naming another tenant is refused (403 ``tenant_mismatch``).
The caller states the principals and sensitivity it reads with, as a library caller of the
port does. Writes need a write token. Collections: :mod:`evermind.runtime.vector_collections`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field

from evermind.runtime.errors import ApiError
from evermind.runtime.schemas import _Body
from evermind.runtime.state import Reader, Runtime, RuntimeDep, Writer
from evermind.runtime.vector_collections import VectorCollections, check_collection
from evermind.tokens import Principal
from evermind.vectorstore import AccessScope, Acl, Hit, VectorItem, VectorStore
from evermind.vectorstore.inprocess import InProcessStore
from evermind.vectorstore.port import check_items

router = APIRouter(tags=["vectors"])

#: Items one upsert, fetch or delete request carries at most.
MAX_BATCH = 1000
#: The most matches one query returns.
MAX_TOP_K = 10_000

MetaValue = str | int | float | bool


class ItemBody(_Body):
    """One item to upsert (``tenant``, when given, must be the token's)."""

    id: str = Field(min_length=1, max_length=512)
    tenant: str | None = None
    vector: list[float]
    text: str = ""
    metadata: dict[str, MetaValue] = Field(default_factory=dict)
    principals: list[str] = Field(min_length=1, max_length=64)
    sensitivity: int = Field(0, ge=0)


class UpsertBody(_Body):
    dim: int = Field(ge=1)
    items: list[ItemBody] = Field(max_length=MAX_BATCH)


class IdsBody(_Body):
    ids: list[str] = Field(max_length=MAX_BATCH)


class QueryBody(_Body):
    tenant: str | None = None
    vector: list[float]
    k: int = Field(ge=1, le=MAX_TOP_K)
    filter: Any = None
    principals: list[str] = Field(max_length=64)
    max_sensitivity: int = 0
    include_metadata: bool = True


def _collections(runtime: Runtime) -> VectorCollections:
    return runtime.vectors


def _same_tenant(asked: str | None, who: Principal) -> None:
    """Refuses a body naming another tenant than the token's (nothing is re-tenanted)."""
    if asked is not None and asked != who.tenant:
        raise ApiError(
            403,
            f"vectors: the request names tenant {asked[:64]!r} but the token is tenant "
            f"{who.tenant!r}; use that tenant's token",
            "tenant_mismatch",
        )


def _acl_fields(acl: Acl) -> dict[str, Any]:
    return {"principals": sorted(acl.principals), "sensitivity": acl.sensitivity}


def _match(hit: Hit, with_metadata: bool) -> dict[str, Any]:
    if not with_metadata:
        return {"id": hit.id, "score": hit.score}
    return {
        "id": hit.id,
        "score": hit.score,
        "text": hit.text,
        "metadata": hit.metadata,
        **_acl_fields(hit.acl),
    }


@router.get("/v1/vectors/{collection}", summary="A collection's dimension (null: none yet)")
async def describe(collection: str, runtime: RuntimeDep, who: Reader) -> dict[str, Any]:
    """``{collection, dim}``."""
    vectors = _collections(runtime)
    name = check_collection(collection)

    async def work() -> int | None:
        return vectors.dim(who.tenant, name)

    return {"collection": name, "dim": await vectors.run(work)}


@router.post("/v1/vectors/{collection}/upsert", summary="Insert or replace items")
async def upsert(
    collection: str, body: UpsertBody, runtime: RuntimeDep, who: Writer
) -> dict[str, Any]:
    """Writes the items (the caller's tenant in each ACL); creates the collection at ``dim``."""
    vectors = _collections(runtime)
    for item in body.items:
        _same_tenant(item.tenant, who)
    items = [
        VectorItem(
            i.id,
            i.vector,
            i.text,
            i.metadata,
            Acl(who.tenant, frozenset(i.principals), i.sensitivity),
        )
        for i in body.items
    ]

    async def work() -> int:
        check_items(items, body.dim)  # a bad batch creates no collection
        store = await vectors.store(who.tenant, collection, body.dim)
        known = await store.fetch([i.id for i in items])
        await vectors.room_for(store, len({i.id for i in items} - set(known)))
        await store.upsert(items)
        return len(items)

    return {"upserted": await vectors.run(work)}


async def _existing(
    vectors: VectorCollections, tenant: str, collection: str
) -> InProcessStore | None:
    if vectors.dim(tenant, check_collection(collection)) is None:
        return None
    return await vectors.store(tenant, collection)


@router.post("/v1/vectors/{collection}/fetch", summary="Items by id")
async def fetch(collection: str, body: IdsBody, runtime: RuntimeDep, who: Reader) -> dict[str, Any]:
    """``{items: {id: {text, metadata, principals, sensitivity}}}`` (missing ids left out)."""
    vectors = _collections(runtime)

    async def work() -> dict[str, Any]:
        store = await _existing(vectors, who.tenant, collection)
        found = {} if store is None else await store.fetch(body.ids)
        out = {}
        for item_id, item in found.items():
            assert item.acl is not None
            out[item_id] = {
                "text": item.text,
                "metadata": dict(item.metadata),
                **_acl_fields(item.acl),
            }
        return out

    return {"items": await vectors.run(work)}


@router.post("/v1/vectors/{collection}/delete", summary="Remove items by id")
async def delete(
    collection: str, body: IdsBody, runtime: RuntimeDep, who: Writer
) -> dict[str, Any]:
    """``{deleted}``: how many of the ids existed."""
    vectors = _collections(runtime)

    async def work() -> int:
        store = await _existing(vectors, who.tenant, collection)
        return 0 if store is None else await store.delete(body.ids)

    return {"deleted": await vectors.run(work)}


@router.post("/v1/vectors/{collection}/query", summary="Top k by cosine under a filter")
async def query(
    collection: str, body: QueryBody, runtime: RuntimeDep, who: Reader
) -> dict[str, Any]:
    """``{matches}``, best first: the items the caller's tenant, principals and sensitivity see
    and the filter admits."""
    vectors = _collections(runtime)
    _same_tenant(body.tenant, who)
    scope = AccessScope(who.tenant, frozenset(body.principals), body.max_sensitivity)

    async def work() -> list[Hit]:
        store: VectorStore | None = await _existing(vectors, who.tenant, collection)
        if store is None:
            return []
        return await store.query(body.vector, body.k, filter=body.filter, scope=scope)

    hits = await vectors.run(work)
    return {"tenant": who.tenant, "matches": [_match(h, body.include_metadata) for h in hits]}


@router.delete("/v1/vectors/{collection}", summary="Drop a collection")
async def drop(collection: str, runtime: RuntimeDep, who: Writer) -> dict[str, Any]:
    """``{dropped}``: False when there was no such collection."""
    vectors = _collections(runtime)

    async def work() -> bool:
        return await vectors.drop(who.tenant, collection)

    return {"dropped": await vectors.run(work)}
