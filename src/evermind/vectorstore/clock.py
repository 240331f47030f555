"""Items several writers share on one vector store: term signatures, ``fetch_all``, writer clocks.

What the memory store (:mod:`evermind.memory.vector_backend`), the runtime's shared store
(:mod:`evermind.vectorstore.shared`) and the L2 cache on the port
(:mod:`evermind.cache.l2_vectorstore`) all build on, so it lives here, below them:

- :func:`signature`: a text's terms hashed into :data:`SIGNATURE_DIM` buckets, a real,
  spread-out vector for items that are found by their metadata, not ranked by it;
- :func:`fetch_all`: every item a scope sees that a filter admits (count, then one query);
- :class:`WriterClock`: versions without transactions. The port has no atomic counter, so
  each writer counts its own writes in its own ``clock`` item (nobody else writes it: no lost
  update) and a scope's version is the sum of its writers' clocks; it grows by exactly one
  per write of anyone.

Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
import zlib
from collections.abc import Sequence
from typing import Any

from evermind.text import terms
from evermind.vectorstore.filters import And, Eq, Filter
from evermind.vectorstore.port import AccessScope, Acl, Hit, VectorItem, VectorStore

__all__ = ["CLOCK_GUESS", "SIGNATURE_DIM", "WriterClock", "fetch_all", "item_digest", "signature"]

#: Dimension of the term signatures items carry (open a store of such items with it).
SIGNATURE_DIM = 32


def signature(text: str, dim: int = SIGNATURE_DIM) -> list[float]:
    """``text``'s terms hashed into ``dim - 1`` buckets (counts), and 1.0 in the last one."""
    vector = [0.0] * dim
    for term in terms(text):
        vector[zlib.crc32(term.encode("utf-8", "surrogatepass")) % (dim - 1)] += 1.0
    vector[-1] = 1.0  # a direction even for a text without terms
    return vector


def item_digest(*parts: str) -> str:
    """A stable 40-hex-digit id part for ``parts`` (an item id that names its owner)."""
    joined = "\x00".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.sha256(joined).hexdigest()[:40]


async def fetch_all(
    store: VectorStore, where: Filter, scope: AccessScope, *, guess: int = 0
) -> list[Hit]:
    """Every item ``scope`` sees that ``where`` admits.

    A query of ``guess`` items first when given (one round trip when there are fewer, as
    for a scope's few clocks); else, or when that came back full, a count and a query of
    that many.
    """
    probe = signature("", store.dim)
    if guess > 0:
        hits = await store.query(probe, guess, where, scope)
        if len(hits) < guess:
            return hits
    n = await store.count(where, scope)
    return [] if n == 0 else await store.query(probe, n, where, scope)


#: Writers a clock read expects at most in one round trip (more cost a count and a second).
CLOCK_GUESS = 16


class WriterClock:
    """The per-writer write counters of one scope, and their sum (the scope's version).

    Args:
        store: The vector store the clock items live in (the data's own store, or a table
            of clocks only, so that reading a version scans no data items).
        scope: Whose items (the tenant's scope).
        acl: The ACL the clock items carry.
        group: What the clocks count (``memory:<namespace>``, ``l2:<dim>:<namespace>``):
            items with ``kind == "clock"`` and ``ns == group``.
    """

    def __init__(self, store: VectorStore, scope: AccessScope, acl: Acl, group: str) -> None:
        self.store = store
        self.scope = scope
        self.acl = acl
        self.group = group
        self.writer = uuid.uuid4().hex
        self.written = 0  # this writer's own count (it alone writes its clock item)
        #: Held around a write and its tick, so this writer's clock item never goes back.
        self.lock = asyncio.Lock()

    def _where(self) -> Filter:
        return And((Eq("kind", "clock"), Eq("ns", self.group)))

    async def counts(self) -> dict[str, int]:
        """Writes per writer of the group, as the store holds them now."""
        hits = await fetch_all(self.store, self._where(), self.scope, guess=CLOCK_GUESS)
        return {str(h.metadata["writer"]): int(h.metadata["n"]) for h in hits}

    async def version(self) -> int:
        """The sum of the group's clocks: grows by one with every write of any writer."""
        return sum((await self.counts()).values())

    def tick(self) -> VectorItem:
        """This writer's clock item after one more write (upsert it with the write)."""
        self.written += 1
        meta: dict[str, Any] = {
            "kind": "clock",
            "ns": self.group,
            "writer": self.writer,
            "n": self.written,
        }
        item_id = f"c:{item_digest(self.acl.tenant, self.group, self.writer)}"
        return VectorItem(item_id, signature("", self.store.dim), "", meta, self.acl)

    async def commit(self, store: VectorStore, items: Sequence[VectorItem]) -> None:
        """Upserts ``items`` into ``store`` and counts the write (hold :attr:`lock`).

        One upsert when the clock lives in ``store`` (all or nothing); else the items first,
        then the clock, so whoever sees the new count finds the items.
        """
        tick = self.tick()
        if store is self.store:
            await store.upsert([*items, tick])
            return
        if items:
            await store.upsert(items)
        await self.store.upsert([tick])
