"""The L2 semantic cache on the shared vector store (``--store URL``; native-only).

The same cache as :class:`~evermind.cache.l2_sqlite.SemanticCacheStore`, with the same
decision (:func:`~evermind.cache.l2_sqlite.judge`: verified for the request's δ): only the
storage moves. Every entry, whatever its embedding's dimension, is an item of the one table
``evermind_l2`` (:meth:`SharedStore.cache_table`), found by its metadata: the namespace, the
dimension, the response (JSON), the ``meta``, the unit embedding (float32, base64: the port
returns no vectors) and who wrote it — a writer id and that writer's sequence number; its text
is the query and its vector the query's term signature (the table's fixed dimension). Every item
carries ``Acl(tenant, {"cache"})`` and every read the tenant's scope, so a tenant's lookups never
see another's entries on any engine; and as no table is per dimension, no tenant's dimensions
limit, or are named to, another (a tenant may use any number of embedders).

Each runtime keeps an in-memory index per ``(tenant, namespace, dim)``, as the SQLite store
does, and brings it up to date before each lookup and store: the scope's per-writer clocks
(:class:`~evermind.vectorstore.clock.WriterClock`, in the shared store's clock table,
written just after the entry) say how many entries each writer has stored, and only the
entries past what this index has seen are fetched (a range filter on the writer's sequence).
So an entry stored through one runtime is a hit through another at its next lookup. The
oldest entries beyond ``max_entries`` are deleted by whichever runtime sees the excess; a hit
on an entry another runtime deleted meanwhile is a miss, and the next lookup rebuilds that
index from the store. All work runs on the shared store's lane.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evermind.cache.l2_sqlite import (
    MAX_INDEXED_BYTES,
    MAX_INDEXED_SCOPES,
    LookupResult,
    Scope,
    _digest,
    _Index,
    encoded,
    judge,
    normalised,
)
from evermind.cache.verified import DEFAULT_MAX_ERROR
from evermind.vectorstore import AccessScope, Acl, And, Eq, Range, VectorItem, VectorStore
from evermind.vectorstore.clock import WriterClock, fetch_all, signature
from evermind.vectorstore.shared import SharedStore

__all__ = ["CACHE_PRINCIPAL", "VectorCacheStore"]

#: The principal every cache item is readable by (the tenant is the isolation).
CACHE_PRINCIPAL = "cache"


@dataclass
class _Synced:
    """One scope's index, this runtime's clock there, and what it has seen of each writer."""

    index: _Index
    clock: WriterClock
    seen: dict[str, int] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class VectorCacheStore:
    """The L2 cache of every tenant, on a :class:`SharedStore`.

    Args:
        shared: The runtime's shared store.
        max_entries: Entries kept per (tenant, namespace, dimension); the oldest go first.
    """

    def __init__(self, shared: SharedStore, max_entries: int) -> None:
        self.shared = shared
        self.max_entries = max_entries
        self._scopes: OrderedDict[Scope, _Synced] = OrderedDict()

    @property
    def indexed_scopes(self) -> int:
        """How many (tenant, namespace, dim) indexes are in memory."""
        return len(self._scopes)

    # ------------------------------------------------------------------ sync

    async def _synced(self, scope: Scope) -> tuple[_Synced, VectorStore]:
        tenant, namespace, dim = scope
        table = await self.shared.cache_table()
        synced = self._scopes.get(scope)
        if synced is None:
            acl = Acl(tenant, frozenset({CACHE_PRINCIPAL}))
            access = AccessScope(tenant, frozenset({CACHE_PRINCIPAL}))
            clock = WriterClock(self.shared.clocks, access, acl, f"l2:{dim}:{namespace}")
            synced = _Synced(_Index(dim), clock)
            self._scopes[scope] = synced
            self._evict(scope)
        self._scopes.move_to_end(scope)
        return synced, table

    async def _catch_up(
        self, synced: _Synced, table: VectorStore, namespace: str, dim: int
    ) -> None:
        """Adds the entries other writers stored since this index last looked."""
        clock = synced.clock
        for writer, count in sorted((await clock.counts()).items()):
            since = synced.seen.get(writer, 0)
            if count <= since:
                continue
            where = And(
                (
                    Eq("kind", "entry"),
                    Eq("ns", namespace),
                    Eq("dim", dim),
                    Eq("writer", writer),
                    Range("seq", gt=since),
                )
            )
            hits = await fetch_all(table, where, clock.scope)
            for hit in sorted(hits, key=lambda h: int(h.metadata["seq"])):
                vector = np.frombuffer(base64.b64decode(str(hit.metadata["vector"])), np.float32)
                query = hit.text if hit.metadata.get("has_query") else None
                synced.index.add(hit.id, vector, query, _digest(str(hit.metadata["response"])))
            synced.seen[writer] = count
        await self._trim(synced, table)

    async def _trim(self, synced: _Synced, table: VectorStore) -> None:
        excess = len(synced.index.ids) - self.max_entries
        if excess > 0:
            await table.delete([str(i) for i in synced.index.ids[:excess]])
            synced.index.drop_first(excess)

    def _evict(self, keep: Scope) -> None:
        """Drops least recently used indexes beyond the count and byte budgets."""
        held = sum(s.index.nbytes for s in self._scopes.values())
        while len(self._scopes) > 1 and (
            len(self._scopes) > MAX_INDEXED_SCOPES or held > MAX_INDEXED_BYTES
        ):
            oldest = next(iter(self._scopes))
            if oldest == keep:
                break
            held -= self._scopes.pop(oldest).index.nbytes

    # ------------------------------------------------------------------ the cache

    async def lookup(
        self,
        tenant: str,
        namespace: str,
        embedding: list[float],
        threshold: float,
        query: str | None,
        max_error: float | None = DEFAULT_MAX_ERROR,
    ) -> LookupResult:
        """The best entry at or above ``threshold`` that the decision for ``max_error``
        serves (:func:`judge`), or a miss."""
        vector = normalised(embedding)

        async def work() -> LookupResult:
            synced, table = await self._synced((tenant, namespace, vector.size))
            async with synced.lock:
                await self._catch_up(synced, table, namespace, vector.size)
                position, result = judge(synced.index, vector, threshold, query, max_error)
                if position is None:
                    return result
                entry_id = str(synced.index.ids[position])
                probe = signature("", table.dim)  # found by its id: any vector will do
                hits = await table.query(probe, 1, Eq("entry", entry_id), synced.clock.scope)
                if not hits:
                    # Another runtime deleted it: this index is behind on deletions, so the
                    # next lookup rebuilds it from the store (the clock stays this runtime's).
                    synced.index, synced.seen = _Index(vector.size), {}
                    return LookupResult(None, reason="the entry was evicted by another runtime")
            hit = _hit(hits[0].metadata, hits[0].text, result.score)
            return LookupResult(hit, 0, result.reason)

        return await self.shared.run(work())

    async def store(
        self,
        tenant: str,
        namespace: str,
        embedding: list[float],
        response: Any,
        meta: dict[str, Any] | None,
        query: str | None,
    ) -> str:
        """Adds an entry; returns its id. Evicts the scope's oldest beyond ``max_entries``."""
        vector = normalised(embedding)
        response_json, meta_json = encoded(response, meta)

        async def work() -> str:
            synced, table = await self._synced((tenant, namespace, vector.size))
            clock = synced.clock
            async with synced.lock, clock.lock:
                await self._catch_up(synced, table, namespace, vector.size)
                entry_id = f"l2:{uuid.uuid4().hex}"
                fields: dict[str, Any] = {
                    "kind": "entry",
                    "ns": namespace,
                    "dim": int(vector.size),
                    "entry": entry_id,
                    "writer": clock.writer,
                    "seq": clock.written + 1,  # the count commit makes it
                    "response": response_json,
                    "has_query": query is not None,
                    "vector": base64.b64encode(vector.tobytes()).decode("ascii"),
                    "created": time.time(),
                }
                if meta_json is not None:
                    fields["meta"] = meta_json
                mark = signature(query or "", table.dim)
                item = VectorItem(entry_id, mark, query or "", fields, clock.acl)
                await clock.commit(table, [item])
                synced.index.add(entry_id, vector, query, _digest(response_json))
                synced.seen[clock.writer] = clock.written
                await self._trim(synced, table)
            return entry_id

        return await self.shared.run(work())

    async def count(self, tenant: str) -> int:
        """How many entries ``tenant`` has in every namespace and dimension."""
        scope = AccessScope(tenant, frozenset({CACHE_PRINCIPAL}))

        async def work() -> int:
            table = await self.shared.cache_table()
            return await table.count(Eq("kind", "entry"), scope)

        return await self.shared.run(work())

    def close(self) -> None:
        """Drops the indexes (the shared store closes the tables)."""
        self._scopes.clear()


def _hit(fields: dict[str, Any], text: str, score: float) -> dict[str, Any]:
    response = json.loads(str(fields["response"]))
    hit: dict[str, Any] = {"response": response, "score": round(score, 6)}
    if fields.get("has_query"):
        hit["query"] = text
    if "meta" in fields:
        hit["meta"] = json.loads(str(fields["meta"]))
    return hit
