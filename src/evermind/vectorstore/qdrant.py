"""The Qdrant engine: a collection per store (cosine), the ACL and metadata as payload filters.

A point's id is a UUID derived from the item's id (Qdrant takes only UUIDs and integers); its
payload holds ``id``, ``text``, ``meta`` (the metadata), ``tenant``, ``principals`` and
``sensitivity``. The scope becomes ``must`` conditions of every query and count (tenant
matches, principals intersect, sensitivity ≤ the maximum), so Qdrant itself never returns an
item the scope may not see.

Filters run in Qdrant except a ``Range`` over strings (Qdrant ranges are numeric only), and
any ``Or`` / ``Not`` that contains one: those run as the residual filter after the query
(:func:`~evermind.vectorstore.filters.residual_top_k`: over-fetch, filter, top ``k``) and,
for :meth:`QdrantStore.count`, over a scroll of the pushed part. Equality on numbers is sent
as a closed range so ints and floats compare numerically, as everywhere else.

``qdrant://host:port`` talks to a server; ``qdrant+local:///path`` (or ``qdrant+local://``
for memory only) runs qdrant-client's local mode in this process (tests, one process).

Native-only: qdrant-client.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from qdrant_client import AsyncQdrantClient, models

from evermind.errors import ConfigError, StorageError
from evermind.vectorstore.filters import (
    And,
    Eq,
    Exists,
    Filter,
    In,
    Leaf,
    Not,
    Or,
    Range,
    evaluate,
    parse_filter,
    residual_top_k,
    split,
)
from evermind.vectorstore.port import (
    AccessScope,
    Acl,
    Hit,
    MetaValue,
    VectorItem,
    check_field,
    check_items,
    check_query,
    check_scope,
    unit,
)

__all__ = ["QdrantStore", "pushable"]

#: Item ids map to point ids in this UUID namespace (uuid5: stable across processes).
_ID_SPACE = uuid.UUID("6f1d2c3e-8a4b-5c6d-9e0f-1a2b3c4d5e6f")
_SCROLL_PAGE = 512


def _point_id(item_id: str) -> str:
    return str(uuid.uuid5(_ID_SPACE, item_id))


def pushable(leaf: Leaf) -> bool:
    """Whether Qdrant can run ``leaf`` itself (all but a range over strings)."""
    return not (isinstance(leaf, Range) and isinstance(leaf.bounds()[0][1], str))


def _equal(key: str, value: MetaValue) -> models.Condition:
    if isinstance(value, bool | str):
        return models.FieldCondition(key=key, match=models.MatchValue(value=value))
    # A closed range compares ints and floats numerically (MatchValue takes ints only).
    return models.FieldCondition(key=key, range=models.Range(gte=value, lte=value))


def _condition(node: Filter) -> models.Condition:
    """``node`` (pushable throughout) as one Qdrant condition."""
    if isinstance(node, And):
        return models.Filter(must=[_condition(p) for p in node.parts])
    if isinstance(node, Or):
        if not node.parts:  # nothing admits: a condition no point meets
            return models.Filter(must_not=[models.Filter(must=[])])
        return models.Filter(should=[_condition(p) for p in node.parts])
    if isinstance(node, Not):
        return models.Filter(must_not=[_condition(node.part)])
    key = f"meta.{check_field(node.field)}"
    if isinstance(node, Exists):
        # Values are never null or lists, so "not empty" is "present".
        return models.Filter(
            must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key=key))]
        )
    if isinstance(node, Eq):
        return _equal(key, node.value)
    if isinstance(node, In):
        return _condition(Or(tuple(Eq(node.field, v) for v in node.values)))
    numeric = {op: float(v) for op, v in node.bounds() if not isinstance(v, str)}
    return models.FieldCondition(key=key, range=models.Range(**numeric))


def _scope(scope: AccessScope) -> list[models.Condition]:
    return [
        models.FieldCondition(key="tenant", match=models.MatchValue(value=scope.tenant)),
        models.FieldCondition(
            key="principals", match=models.MatchAny(any=sorted(scope.principals))
        ),
        models.FieldCondition(key="sensitivity", range=models.Range(lte=scope.max_sensitivity)),
    ]


class QdrantStore:
    """A vector store in one Qdrant collection."""

    def __init__(self, client: AsyncQdrantClient, collection: str, dim: int) -> None:
        self._client = client
        self._collection = collection
        self.dim = dim

    @classmethod
    async def open(
        cls,
        *,
        dim: int,
        collection: str = "evermind_vectors",
        path: str | None = None,
        host: str | None = None,
        port: int = 6333,
    ) -> QdrantStore:
        """Opens (and creates when missing) the collection: on a server at ``host:port``, in
        local mode under ``path``, or in local memory when neither is given.

        Raises:
            ConfigError: A bad dim or name, or the collection holds another dimension.
            StorageError: Qdrant cannot be reached.
        """
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"qdrant: dim must be an int ≥ 1, got {dim!r}")
        check_field(collection)
        if host is not None:
            client = AsyncQdrantClient(host=host, port=port)
        else:
            client = (
                AsyncQdrantClient(path=path) if path else AsyncQdrantClient(location=":memory:")
            )
        store = cls(client, collection, dim)
        try:
            await store._create()
        except BaseException:
            await client.close()
            raise
        return store

    async def _create(self) -> None:
        try:
            if not await self._client.collection_exists(self._collection):
                await self._client.create_collection(
                    self._collection,
                    vectors_config=models.VectorParams(
                        size=self.dim, distance=models.Distance.COSINE
                    ),
                )
            info = await self._client.get_collection(self._collection)
        except Exception as err:  # qdrant-client raises transport errors of several kinds
            raise StorageError(
                f"qdrant: cannot open collection {self._collection!r}: {err}"
            ) from err
        params = info.config.params.vectors
        size = params.size if isinstance(params, models.VectorParams) else None
        if size != self.dim:
            raise ConfigError(
                f"qdrant: collection {self._collection!r} holds vectors of size {size}, "
                f"not {self.dim}; open it with that dim or name another collection"
            )

    async def upsert(self, items: Sequence[VectorItem]) -> None:
        """Inserts or replaces ``items`` (checked first: a bad item refuses the batch)."""
        checked = check_items(items, self.dim)
        points = []
        for i in checked:
            assert i.acl is not None  # check_items refuses items without one
            payload = {
                "id": i.id,
                "text": i.text,
                "meta": dict(i.metadata),
                "tenant": i.acl.tenant,
                "principals": sorted(i.acl.principals),
                "sensitivity": i.acl.sensitivity,
            }
            points.append(
                models.PointStruct(id=_point_id(i.id), vector=list(i.vector), payload=payload)
            )
        if points:
            await self._call(self._client.upsert(self._collection, points=points, wait=True))

    async def _call(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except Exception as err:  # qdrant-client raises transport errors of several kinds
            raise StorageError(f"qdrant: {err}") from err

    async def delete(self, ids: Sequence[str]) -> int:
        """Removes the items with these ids; returns how many existed."""
        if not ids:
            return 0
        point_ids: list[models.ExtendedPointId] = [_point_id(i) for i in dict.fromkeys(ids)]
        found = await self._call(self._client.retrieve(self._collection, ids=point_ids))
        if found:
            selector = models.PointIdsList(points=[p.id for p in found])
            await self._call(
                self._client.delete(self._collection, points_selector=selector, wait=True)
            )
        return len(found)

    def _filter(self, filter: object, scope: AccessScope) -> tuple[models.Filter, Filter | None]:
        pushed, residual = split(parse_filter(filter), pushable)
        must = _scope(scope)
        if pushed is not None:
            must.append(_condition(pushed))
        return models.Filter(must=must), residual

    async def query(
        self,
        vector: Sequence[float],
        k: int,
        filter: object = None,
        scope: AccessScope | None = None,
    ) -> list[Hit]:
        """The ``k`` visible items most similar to ``vector`` that ``filter`` admits, best first."""
        checked = check_query(k, scope)
        q = list(unit(vector, self.dim, "qdrant query"))
        engine_filter, residual = self._filter(filter, checked)

        async def fetch(n: int) -> list[Hit]:
            result = await self._call(
                self._client.query_points(
                    self._collection,
                    query=q,
                    query_filter=engine_filter,
                    limit=n,
                    with_payload=True,
                )
            )
            return [_hit(p.payload, float(p.score)) for p in result.points]

        hits = await residual_top_k(fetch, k, residual)
        return sorted(hits, key=lambda h: (-h.score, h.id))

    async def count(self, filter: object = None, scope: AccessScope | None = None) -> int:
        """How many items visible to ``scope`` the filter admits (exact)."""
        checked = check_scope(scope)
        engine_filter, residual = self._filter(filter, checked)
        if residual is None:
            result = await self._call(
                self._client.count(self._collection, count_filter=engine_filter, exact=True)
            )
            return int(result.count)
        total, offset = 0, None
        while True:
            points, offset = await self._call(
                self._client.scroll(
                    self._collection,
                    scroll_filter=engine_filter,
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=["meta"],
                )
            )
            total += sum(evaluate(residual, (p.payload or {}).get("meta", {})) for p in points)
            if offset is None:
                return total

    async def drop(self) -> None:
        """Deletes the collection (tests, and a user removing a store)."""
        await self._call(self._client.delete_collection(self._collection))

    async def close(self) -> None:
        """Closes the client (local mode: releases its lock on the folder)."""
        await self._client.close()


def _hit(payload: dict[str, Any] | None, score: float) -> Hit:
    p = payload or {}
    acl = Acl(p["tenant"], frozenset(p["principals"]), int(p["sensitivity"]))
    return Hit(p["id"], score, p["text"], dict(p["meta"]), acl)
