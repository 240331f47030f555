"""``VectorStoreBackend``: the memory store's storage on the vector-store port (any engine URL).

A :class:`~evermind.vectorstore.VectorStore` (``memory://``, ``sqlite:///``, ``postgresql://``,
``qdrant://``, ``qdrant+local://``) keeps three kinds of item for a namespace, told apart by the
``kind`` metadata field and all carrying the ACL of the backend's tenant:

- ``record``: one memory; its text is the content, ``metadata.record`` the record's export form
  (JSON), ``metadata.expires_at`` its expiry (so a TTL purge is one range filter);
- ``clock``: one per writer (a backend instance): how many writes it made to the namespace;
- ``vector``: a cached embedding (``fingerprint``, content hash, float32 bytes in base64), on
  an engine without an embedding table of its own; Postgres caches them in that table only
  (below), and still reads such items an earlier version wrote.

The item's vector is the text's *term signature* (:func:`~evermind.vectorstore.clock.signature`:
its terms hashed into :data:`SIGNATURE_DIM` buckets, plus a constant component so an empty
text has a direction): recall does not rank with it (``MemoryStore`` ranks in process, BM25 +
the embedder's cosine, exactly as on SQLite), it only gives the engine's index a real,
spread-out vector per item.

**The engine's own nearest-neighbour index.** An engine that has one (Postgres:
``PgVectorStore.put_embeddings``, ``get_embeddings`` and ``nearest_embeddings``, pgvector's
HNSW over a table of real embeddings per dimension) keeps the vector cache there, keyed by
tenant, embedder fingerprint and content hash (one binary ``COPY`` a batch; a big import may
drop the index first, and the next recall rebuilds it: ``EMBEDDING_REBUILD_SHARE``);
:meth:`VectorStoreBackend.nearest_hashes` answers the store's ``ServedVectorIndex`` from it
once its index is built (the first ask starts the build, in the background), so every
process of a team ranks from one graph instead of building its own.

**Versions without transactions.** ``MemoryStore`` reloads when the namespace's version moves
without its own write. The port has no atomic counter, so each writer counts its own writes in
its own ``clock`` item (:class:`~evermind.vectorstore.clock.WriterClock`: nobody else writes
it, no lost update) and the version is the sum of the namespace's clocks. It grows by exactly
one per write of anyone, so a store that sees ``own + 1`` knows nobody else wrote; two
runtimes writing at once both see ``+2`` and reload.

**Tenancy fails closed.** The backend is built for one tenant (required, non-empty): every item
it writes carries ``Acl(tenant, {"memory"})`` and every read runs with that tenant's
``AccessScope``, inside the engine's own query, so a tenant's backend cannot return another
tenant's item even when namespaces collide. Not atomic across the port's calls: a write is a
``delete`` (keys forgotten, evicted) and then one ``upsert`` (records and the clock), so a crash
between them leaves the deletions without the version bump (a later write bumps it).
Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from evermind.errors import ConfigError, StorageError
from evermind.memory.backend import check_keys, check_version, select_evictions
from evermind.memory.prompt_recall import SPECIFIC_SHARE, PromptMatch, hook_memory
from evermind.memory.records import MemoryRecord, WriteResult
from evermind.vectorstore.clock import SIGNATURE_DIM, WriterClock, fetch_all, item_digest, signature
from evermind.vectorstore.filters import And, Eq, Exists, Filter, In, Not, Or, Range
from evermind.vectorstore.port import AccessScope, Acl, Hit, VectorItem, VectorStore

# SIGNATURE_DIM is the dimension to open a memory store's vector store with: exported here too.
__all__ = ["MEMORY_PRINCIPAL", "SIGNATURE_DIM", "VectorStoreBackend"]

logger = logging.getLogger(__name__)

#: The least share of the engine's embedding table a tenant's embedder must hold for its
#: nearest-neighbour index to serve recall (pgvector filters the tenant after the index scan).
SERVED_MIN_SHARE = 0.25

#: The principal every memory item is readable by (the runtime's tenant is the isolation).
MEMORY_PRINCIPAL = "memory"


class VectorStoreBackend:
    """A ``MemoryBackend`` over a vector store, for ``namespace`` of ``tenant``.

    Args:
        store: An opened store of dimension :data:`SIGNATURE_DIM`.
        namespace: The namespace whose records this backend sees.
        tenant: The tenant that owns them (the ACL of every item, the scope of every read).
        owns_store: Close the store when the backend closes.
        clock: The writer clock to count writes on; several backends of one namespace in
            one process (e.g. one per embedder) share one, so a process adds one clock item
            per namespace, not one per backend. None: a clock of its own.
        clocks: Where a clock of its own keeps its items (the runtime's clock table);
            None: in ``store``.

    Raises:
        ConfigError: No tenant or namespace, a store of another dimension, or a clock of
            another namespace or tenant.
    """

    def __init__(
        self,
        store: VectorStore,
        namespace: str,
        *,
        tenant: str,
        owns_store: bool = False,
        clock: WriterClock | None = None,
        clocks: VectorStore | None = None,
    ) -> None:
        for name, value in (("tenant", tenant), ("namespace", namespace)):
            if not isinstance(value, str) or not value:
                raise ConfigError(
                    f"VectorStoreBackend: {name} must be a non-empty string, got {value!r} "
                    "(tenancy fails closed: every item needs its tenant)"
                )
        if store.dim != SIGNATURE_DIM:
            raise ConfigError(
                f"VectorStoreBackend: the store holds vectors of dimension {store.dim}; the "
                f"memory items need {SIGNATURE_DIM}; open it with dim=SIGNATURE_DIM"
            )
        self.namespace = namespace
        self.tenant = tenant
        self._store = store
        self._owns = owns_store
        self._acl = Acl(tenant, frozenset({MEMORY_PRINCIPAL}))
        self._scope = AccessScope(tenant, frozenset({MEMORY_PRINCIPAL}))
        group = f"memory:{namespace}"
        if clock is not None and (clock.group != group or clock.acl != self._acl):
            raise ConfigError(
                f"VectorStoreBackend: the clock counts {clock.group!r} of tenant "
                f"{clock.acl.tenant!r}, not {group!r} of {tenant!r}"
            )
        self._clock = clock or WriterClock(clocks or store, self._scope, self._acl, group)
        self._closed = False
        self._served: dict[tuple[str, int], bool] = {}  # (fingerprint, dim): index usable
        self._build: asyncio.Task[None] | None = None

    @property
    def clock(self) -> WriterClock:
        """The writer clock this backend counts its writes on."""
        return self._clock

    # ------------------------------------------------------------------ items

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(
                f"vector-store memory backend for namespace {self.namespace!r} is closed; "
                "hint: open a new store"
            )

    def _record_id(self, key: str) -> str:
        return f"m:{item_digest(self.tenant, self.namespace, key)}"

    def _records_where(self, *more: Filter) -> Filter:
        return And((Eq("kind", "record"), Eq("ns", self.namespace), *more))

    def _item(self, record: MemoryRecord) -> VectorItem:
        meta: dict[str, Any] = {
            "kind": "record",
            "ns": self.namespace,
            "key": record.key,
            "record": json.dumps(record.to_dict(), sort_keys=True),
        }
        if record.expires_at is not None:
            meta["expires_at"] = record.expires_at
        if record.archived:
            meta["archived"] = True  # so an engine's own query can leave it out
        return VectorItem(
            self._record_id(record.key), signature(record.content), record.content, meta, self._acl
        )

    async def _records(self, *more: Filter) -> dict[str, MemoryRecord]:
        hits = await fetch_all(self._store, self._records_where(*more), self._scope)
        return {r.key: r for r in map(_record_of, hits)}

    # ------------------------------------------------------------------ the port

    async def apply(
        self,
        puts: Sequence[MemoryRecord],
        deletes: Sequence[str] = (),
        *,
        capacity: int | None = None,
        now: float = 0.0,
        expect_version: int | None = None,
        expect_keys: Mapping[str, float | None] | None = None,
    ) -> WriteResult:
        """Deletes, writes and evicts (see ``MemoryBackend.apply``; not atomic, see above)."""
        self._check_open()
        # An engine that can exclude other processes (Postgres: an advisory lock) holds the
        # check and the write together; elsewhere another process's writer is not excluded
        # (the port has no transactions, see above).
        exclusive = getattr(self._store, "exclusive", None)
        held: Any = (
            exclusive(f"evermind-memory\x1f{self.tenant}\x1f{self.namespace}")
            if exclusive is not None
            else contextlib.nullcontext()
        )
        async with self._clock.lock, held:
            check_version(self.namespace, expect_version, await self._clock.version())
            if expect_keys:
                seen = await self._records(In("key", tuple(expect_keys)))
                check_keys(self.namespace, expect_keys, seen, now)
            touched = list(dict.fromkeys([*deletes, *(r.key for r in puts)]))
            existing = await self._records(In("key", tuple(touched))) if touched else {}
            deleted = [key for key in dict.fromkeys(deletes) if key in existing]
            staged: dict[str, MemoryRecord] = {}
            for record in puts:
                previous = staged.get(record.key) or (
                    existing.get(record.key) if record.key not in deleted else None
                )
                if previous is not None:
                    record = replace(record, created_at=previous.created_at)
                staged[record.key] = record
            evicted = await self._evictions(capacity, staged, set(deleted), now)
            stored = [r for r in staged.values() if r.key not in evicted]
            gone = list(dict.fromkeys([*deleted, *evicted]))  # an id never stored deletes nothing
            if gone:
                await self._store.delete([self._record_id(k) for k in gone])
            await self._clock.commit(self._store, [self._item(r) for r in stored])
            version = await self._clock.version()
            return WriteResult(version, tuple(stored), tuple(deleted), tuple(evicted))

    async def _evictions(
        self, capacity: int | None, staged: dict[str, MemoryRecord], deleted: set[str], now: float
    ) -> list[str]:
        if capacity is None:
            return []
        if await self._store.count(self._records_where(), self._scope) + len(staged) <= capacity:
            return []  # cannot overflow even if every put is new
        pool = {k: r for k, r in (await self._records()).items() if k not in deleted}
        pool.update(staged)
        return select_evictions(pool.values(), capacity, set(staged), now)

    async def get(self, key: str) -> MemoryRecord | None:
        """Returns the record stored under ``key`` (expired or not), or None."""
        self._check_open()
        return (await self._records(Eq("key", key))).get(key)

    async def load_all(self) -> tuple[int, list[MemoryRecord]]:
        """Returns ``(version, every record)``: the version is read first, so a write landing
        in between shows as a newer version later and the caller reloads (never the reverse)."""
        self._check_open()
        version = await self._clock.version()
        return version, list((await self._records()).values())

    async def prompt_matches(self, query: str, pool: int, now: float) -> list[PromptMatch] | None:
        """The hooks' prompt recall from the engine's own text search, where it has one
        (Postgres: the ``tsvector`` column, :meth:`PgVectorStore.specific_text_query`); None
        on an engine without (the store ranks its snapshot)."""
        self._check_open()
        search = getattr(self._store, "specific_text_query", None)
        if search is None:
            return None
        population = self._records_where(Not(Eq("archived", True)))
        live = Or((Not(Exists("expires_at")), Range("expires_at", gt=now)))
        hits = await search(
            query, pool, share=SPECIFIC_SHARE, population=population, admit=live, scope=self._scope
        )
        matches = []
        for hit in hits:
            record = _record_of(hit)
            if not record.archived and not record.is_expired(now):
                matches.append((hook_memory(record), hit.score))
        return matches

    async def version(self) -> int:
        """The namespace's version: the sum of its writers' clocks."""
        self._check_open()
        return await self._clock.version()

    async def delete_expired(self, now: float) -> WriteResult:
        """Deletes every record with ``expires_at <= now``; bumps the version when any went."""
        self._check_open()
        async with self._clock.lock:
            expired = await self._records(Range("expires_at", lte=now))
            gone = tuple(sorted(expired))
            if gone:
                await self._store.delete([self._record_id(k) for k in gone])
                await self._clock.commit(self._store, [])
            return WriteResult(await self._clock.version(), evicted=gone)

    def _vector_id(self, fingerprint: str, digest: str) -> str:
        return f"v:{item_digest(self.tenant, fingerprint, digest)}"

    async def get_vectors(
        self, fingerprint: str, hashes: Sequence[str]
    ) -> dict[str, Sequence[float]]:
        """Returns the cached vectors among ``hashes`` for the embedder ``fingerprint``: from
        the engine's embedding table where it has one (Postgres), then, for the rest, from
        the ``vector`` items an earlier version cached beside the records."""
        self._check_open()
        wanted = tuple(dict.fromkeys(hashes))
        if not wanted:
            return {}
        found: dict[str, Sequence[float]] = {}
        table = getattr(self._store, "get_embeddings", None)
        if table is not None:
            found.update(await table(self.tenant, fingerprint, wanted))
            wanted = tuple(h for h in wanted if h not in found)
            if not wanted:
                return found
        where = And((Eq("kind", "vector"), Eq("fingerprint", fingerprint), In("hash", wanted)))
        for hit in await fetch_all(self._store, where, self._scope):
            vector = array("f")
            vector.frombytes(base64.b64decode(str(hit.metadata["vector"])))
            found[str(hit.metadata["hash"])] = vector
        return found

    async def put_vectors(self, fingerprint: str, vectors: Mapping[str, Sequence[float]]) -> None:
        """Caches ``vectors`` (content hash -> vector) for the embedder ``fingerprint``: in
        the engine's embedding table where it has one (Postgres: one binary ``COPY``, and
        the rows its nearest-neighbour index serves from), else as ``vector`` items."""
        self._check_open()
        if not vectors:
            return
        put = getattr(self._store, "put_embeddings", None)
        if put is not None:
            # Only there: a second copy as items beside the records (base64 in jsonb) cost
            # another 10⁴ rows, with their index entries, per batch of 10⁴ memories.
            dropped = await put(self.tenant, fingerprint, vectors)
            if dropped:  # a bulk write dropped the index: the next recall rebuilds it
                self._served.clear()
            return
        blank = signature("")
        items = []
        for digest, vector in vectors.items():
            meta: dict[str, Any] = {
                "kind": "vector",
                "fingerprint": fingerprint,
                "hash": digest,
                "vector": base64.b64encode(array("f", vector).tobytes()).decode("ascii"),
            }
            items.append(
                VectorItem(self._vector_id(fingerprint, digest), blank, "", meta, self._acl)
            )
        await self._store.upsert(items)

    async def nearest_hashes(
        self,
        fingerprint: str,
        vector: Sequence[float],
        n: int,
        sample: Callable[[], Sequence[str]] | None = None,
    ) -> list[str] | None:
        """The content hashes of this tenant's ``n`` cached embeddings (of ``fingerprint``)
        nearest to ``vector``, from the engine's own index (Postgres: pgvector's HNSW over the
        embedding table); None when the engine has none, its index is not built yet (the
        first ask starts the build, in the background, on its own connection), or this tenant
        and embedder hold under :data:`SERVED_MIN_SHARE` of the table (pgvector filters after
        the index scan: most candidates would be another's), or some of the content hashes
        ``sample()`` gives (the caller's, checked once) have no row there (vectors cached
        before the table existed: their memories would never be candidates). The caller then
        ranks in process.
        """
        self._check_open()
        nearest = getattr(self._store, "nearest_embeddings", None)
        if nearest is None:
            return None
        dim = len(vector)
        verdict = self._served.get((fingerprint, dim))
        if verdict is None:
            if not await self._store.embedding_index_ready(dim):  # type: ignore[attr-defined]
                self._start_build(dim)
                return None
            ours, every = await self._store.embedding_share(  # type: ignore[attr-defined]
                self.tenant, fingerprint, dim
            )
            verdict = ours > 0 and ours >= SERVED_MIN_SHARE * every
            if verdict and sample is not None:
                missing = await self._store.embeddings_missing(  # type: ignore[attr-defined]
                    self.tenant, fingerprint, dim, sample()
                )
                if missing:
                    logger.warning(
                        "memory %r: %d sampled vectors are not in the engine's embedding "
                        "table (cached before it existed); recall ranks in process",
                        self.namespace,
                        missing,
                    )
                    verdict = False
            self._served[(fingerprint, dim)] = verdict
        if not verdict:
            return None
        found: list[str] | None = await nearest(self.tenant, fingerprint, vector, n)
        if found is None:  # the index went (a bulk write dropped it): ask again next time,
            self._served.pop((fingerprint, dim), None)  # which starts its rebuild
        return found

    def _start_build(self, dim: int) -> None:
        """Builds the engine's HNSW index of ``dim``-dimensional embeddings in the background
        (once per backend at a time; the engine lets one process build)."""
        if self._build is not None and not self._build.done():
            return
        build = self._store.build_embedding_index  # type: ignore[attr-defined]

        async def run() -> None:
            try:
                await build(dim)
            except StorageError as err:  # recall stays in process; the next ask tries again
                logger.warning("memory: %s", err)

        self._build = asyncio.get_running_loop().create_task(run())

    async def build_served_index(self, dim: int) -> bool:
        """Builds the engine's nearest-neighbour index of ``dim``-dimensional embeddings now,
        or waits for the build under way here or in another process (e.g. after a bulk load);
        returns whether it is ready (False: the engine has none)."""
        self._check_open()
        build = getattr(self._store, "build_embedding_index", None)
        if build is None:
            return False
        if self._build is not None and not self._build.done():
            await asyncio.shield(self._build)  # the build a recall started
        ready: bool = await build(dim, wait=True)  # or another process's
        return ready

    async def close(self) -> None:
        """Marks the backend closed (and closes the store if it owns it)."""
        if self._closed:
            return
        self._closed = True
        build, self._build = self._build, None
        if build is not None and not build.done():
            build.cancel()  # an interrupted build leaves an invalid index: rebuilt later
            if build.get_loop() is asyncio.get_running_loop():
                with contextlib.suppress(asyncio.CancelledError):
                    await build
        if self._owns:
            await self._store.close()


def _record_of(hit: Hit) -> MemoryRecord:
    try:
        entry = json.loads(str(hit.metadata["record"]))
    except (KeyError, json.JSONDecodeError) as err:
        raise StorageError(
            f"vector-store memory: item {hit.id!r} holds no readable record ({err}); "
            "hint: the item was written by something other than Evermind"
        ) from err
    return MemoryRecord.from_dict(entry)
