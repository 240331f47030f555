"""``MemoryStore``: the agent's memory — remember, get, recall (hybrid), forget, export/import.

The store is host-agnostic: it talks to storage only through the ``MemoryBackend`` port and to
the model only through the embedder port. It keeps an in-memory snapshot of its namespace (the
records, a BM25 index and a vector index) that it refreshes whenever the backend's version
counter shows a write it did not make itself (another process, another tab), and updates
incrementally after its own writes (BM25 at the next read: a bulk write only notes the keys).

Recall pipeline (each step switchable in ``RecallOptions``; every hit says which ran):

1. candidates: BM25 top-``candidate_pool`` and exact cosine top-``candidate_pool``;
2. fusion: when both rankers ran, a convex combination of the z-scored BM25 and cosine over
   the candidates, the cosine weighted by the embedder's measured trust unless
   ``semantic_weight`` fixes it (reciprocal-rank fusion with ``fusion="rrf"``), else the one
   ranker's score divided by its best score; :mod:`evermind.memory.recall` ranks (and says
   how);
3. weighting: × importance factor × recency factor (half-life) — applied *before* MMR so that
   the diversity step and the final order agree;
4. MMR: greedy maximal-marginal-relevance selection of ``top_k`` (cosine between memories when
   vectors exist, else the Jaccard overlap of their terms).

Units: TTLs and ages are **seconds**; timestamps are seconds since the Unix epoch.
Browser-safe: standard library and ``evermind`` only (the SQLite backend is imported lazily
when a path is given).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal

from evermind.errors import ConfigError, EvermindError
from evermind.memory.backend import MemoryBackend, PromptRecallBackend, ServedBackend
from evermind.memory.embedder import VectorCache, as_embedder
from evermind.memory.prompt_recall import HookMemory, rank_matches, snapshot_matches
from evermind.memory.recall import Snapshot, run_recall
from evermind.memory.records import (
    MAX_QUERY_CHARS,
    Hit,
    MemoryRecord,
    RecallOptions,
    WriteResult,
    check_text,
    normalise_tags,
    validate_content,
    validate_importance,
    validate_key,
    validate_meta,
    validate_ttl,
)
from evermind.search.bm25 import BM25Index
from evermind.search.served import SERVED_MIN_ROWS, ServedVectorIndex
from evermind.search.vectors import VectorIndex

logger = logging.getLogger(__name__)

_EMBED_BATCH = 64
#: How many of its content hashes a store asks a served backend to hold (one check): a table
#: missing 0.5 % of them is caught with probability 1 − 0.995¹⁰⁰⁰ ≈ 0.993.
_SERVED_SAMPLE = 1000


class MemoryStore:
    """An agent's memory over one storage namespace.

    Args:
        backend: A ``MemoryBackend`` (the browser passes its IndexedDB backend), or a path to
            a SQLite file (native: opens a ``SQLiteBackend`` for ``namespace``).
        embedder: Anything with ``embed(texts)`` or a function of ``texts`` (see
            ``evermind.memory.embedder``); None gives lexical-only recall.
        namespace: The tenant, used only when ``backend`` is a path.
        capacity: At most this many memories; writes evict the excess (expired first, then
            lowest importance, then oldest write). None: unlimited.
        options: Default recall options.
        fingerprint: The embedder's cache name, overriding what it says or what is derived.
        clock: Returns the current time in seconds since the epoch (injectable for tests).
        use_numpy: Vector search on numpy (True), pure Python (False), or numpy if present.
        vector_index: The vector index to rank with (e.g. a ``GpuVectorIndex`` in the tab);
            overrides ``use_numpy``. It must be empty and is owned by the store from then on.
            None: on a backend whose engine has a nearest-neighbour index
            (``nearest_hashes``: Postgres), a ``ServedVectorIndex`` over it; else a
            ``VectorIndex``.
        served_min_rows: From how many vectors recall asks that engine's index (default
            ``SERVED_MIN_ROWS``, 2·10⁵).

    Raises:
        ConfigError: A bad argument (capacity < 1, an unusable embedder or backend).
    """

    def __init__(
        self,
        backend: MemoryBackend | str | os.PathLike[str],
        embedder: Any = None,
        *,
        namespace: str = "default",
        capacity: int | None = None,
        options: RecallOptions | None = None,
        fingerprint: str | None = None,
        clock: Callable[[], float] = time.time,
        use_numpy: bool | None = None,
        vector_index: VectorIndex | None = None,
        served_min_rows: int | None = None,
    ) -> None:
        if isinstance(backend, str | os.PathLike):
            from evermind.memory.sqlite_backend import SQLiteBackend

            backend = SQLiteBackend(backend, namespace)
        elif not isinstance(backend, MemoryBackend):
            raise ConfigError(
                f"MemoryStore: expected a MemoryBackend or a path to a SQLite file, got "
                f"{type(backend).__name__}; hint: MemoryStore('memory.db') natively"
            )
        if capacity is not None and (isinstance(capacity, bool) or capacity < 1):
            raise ConfigError(f"MemoryStore: capacity must be None or >= 1, got {capacity!r}")
        self.backend: MemoryBackend = backend
        self.capacity = capacity
        self.options = options or RecallOptions()
        self.clock = clock
        bound = None if embedder is None else as_embedder(embedder, fingerprint)
        self._cache = None if bound is None else VectorCache(bound, backend)
        self._records: dict[str, MemoryRecord] = {}
        self._version: int | None = None
        self._bm25 = BM25Index(self.options.bm25_k1, self.options.bm25_b)
        # Keys whose text BM25 has not indexed yet: writes only note them and the next
        # snapshot() (every recall) indexes them, so a bulk write does not tokenise (half its
        # time at 10⁵ memories) and a reload is not paid twice.
        self._lexical_pending: set[str] = set()
        if vector_index is not None and len(vector_index):
            raise ConfigError(
                f"MemoryStore: vector_index must be empty, got one holding {len(vector_index)} "
                "vectors; hint: the store fills it from its own memories"
            )
        if vector_index is None and bound is not None and isinstance(backend, ServedBackend):
            # The backend's engine has a nearest-neighbour index of its own (Postgres: HNSW):
            # past served_min_rows recall starts from its candidates, rescored here.
            vector_index = ServedVectorIndex(
                self._served_candidates,
                min_rows=SERVED_MIN_ROWS if served_min_rows is None else served_min_rows,
                use_numpy=use_numpy,
            )
        if vector_index is None:
            # Without an embedder nothing is ever embedded: the index stays empty, so it needs
            # no numpy (whose import is ~80 ms of a Claude Code hook's lexical recall).
            lean = bound is None and use_numpy is None
            vector_index = VectorIndex(False if lean else use_numpy)
        self._vectors = vector_index
        self._hash_keys: dict[str, set[str]] = {}  # content hash -> the keys indexed with it
        self._vector_hash: dict[str, str] = {}
        # Keys that may have no vector yet: recall embeds these, not a scan of every record.
        self._unembedded: set[str] = set()
        self._sync_lock = asyncio.Lock()

    @property
    def has_embedder(self) -> bool:
        """Whether recall can rank semantically."""
        return self._cache is not None

    @property
    def vector_index(self) -> VectorIndex:
        """The index recall's semantic step searches (its ``last_scan`` says which scan ran)."""
        return self._vectors

    @property
    def vector_cache(self) -> VectorCache | None:
        """The vector cache (None without an embedder)."""
        return self._cache

    # ------------------------------------------------------------------ writes

    async def remember(
        self,
        key: str,
        content: str,
        tags: Iterable[str] = (),
        importance: float = 0.5,
        ttl: float | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> MemoryRecord:
        """Stores ``content`` under ``key`` (replacing an earlier memory of that key).

        Args:
            key: Identifier, unique within the namespace.
            content: The text to remember.
            tags: Labels for ``recall_by_tag`` and recall filters (case-folded).
            importance: 0.0 … 1.0; low-importance memories are evicted first.
            ttl: Lifetime in **seconds** (None: forever); expired memories are invisible
                at once and removed by ``purge_expired`` or eviction.
            meta: JSON-serialisable extra fields.

        Returns:
            The record as stored.

        Raises:
            ConfigError: An argument is invalid.
            StorageError: The backend failed; nothing was written.
        """
        now = self.clock()
        ttl_s = validate_ttl(ttl)
        record = MemoryRecord(
            key=validate_key(key),
            content=validate_content(content),
            tags=normalise_tags(tags),
            importance=validate_importance(importance),
            created_at=now,
            updated_at=now,
            expires_at=None if ttl_s is None else now + ttl_s,
            meta=validate_meta(meta),
        )
        result = await self.write([record])
        return result.stored[0] if result.stored else record

    async def write(
        self,
        records: Sequence[MemoryRecord],
        forget: Sequence[str] = (),
        *,
        expect_version: int | None = None,
        expect_keys: Mapping[str, float | None] | None = None,
    ) -> WriteResult:
        """Deletes ``forget`` and stores ``records`` as one transaction (all or nothing).

        The records are written as given (timestamps included); ``created_at`` of an existing
        key is kept. Embeddings of new contents are computed first; if the embedder fails the
        write still happens and recall embeds the text later. Archived records are not
        embedded: recall never ranks them.

        Args:
            records: What to store.
            forget: Keys to delete first.
            expect_version: Write only if the namespace's version (:meth:`version`) is still
                this when the transaction starts.
            expect_keys: Write only if each key still holds the record written at that
                ``updated_at`` (None: no live record), whatever else changed.

        Raises:
            VersionConflict: An expectation failed: another write came in between; nothing
                was written.
        """
        texts = [r.content for r in records if not r.archived]
        embedded: dict[str, Sequence[float]] = {}  # content -> its vector
        if self._cache is not None and texts:
            try:
                embedded = dict(zip(texts, await self._cache.vectors(texts), strict=True))
            except EvermindError:
                raise
            except Exception:
                logger.warning("embedding on write failed; recall will retry", exc_info=True)
        result = await self.backend.apply(
            list(records),
            list(forget),
            capacity=self.capacity,
            now=self.clock(),
            expect_version=expect_version,
            expect_keys=expect_keys,
        )
        self._absorb(result)
        self._index_written(result, embedded)
        if result.evicted:
            logger.info("capacity %s: evicted %s", self.capacity, ", ".join(result.evicted))
        return result

    def _index_written(self, result: WriteResult, embedded: Mapping[str, Sequence[float]]) -> None:
        """Puts the vectors this write embedded into the index at once (one batch), so recall
        need not fetch them back from the cache. A reload keeps them while the content hash
        still matches (:meth:`refresh`)."""
        keys: dict[str, None] = {}
        vectors = []
        for record in result.stored:
            vector = embedded.get(record.content)
            if vector is None or record.archived or record.key in keys:
                continue
            self._vectors.remove(record.key)
            keys[record.key] = None
            vectors.append(vector)
            self._set_hash(record.key, record.content_hash)
            self._unembedded.discard(record.key)
        self._vectors.add_many(list(keys), vectors)

    async def forget(self, key: str) -> bool:
        """Deletes the memory ``key``; returns whether it existed."""
        result = await self.write([], [validate_key(key)])
        return key in result.deleted

    async def purge_expired(self) -> int:
        """Deletes every memory whose TTL ran out; returns how many went."""
        result = await self.backend.delete_expired(self.clock())
        self._absorb(result)
        return len(result.evicted)

    async def import_(
        self,
        entries: Iterable[Mapping[str, Any]],
        mode: Literal["merge", "overwrite"] = "merge",
    ) -> int:
        """Loads entries in ``export()`` form, as one transaction.

        Args:
            entries: Dicts with at least ``key`` and ``content``.
            mode: ``"merge"`` keeps memories not in ``entries`` and, for a key present on both
                sides, keeps the one written later (``updated_at``); ``"overwrite"`` makes the
                namespace hold exactly ``entries``.

        Returns:
            How many entries were written.

        Raises:
            ConfigError: A bad mode or entry (nothing is written then).
        """
        if mode not in ("merge", "overwrite"):
            raise ConfigError(f"import_: mode must be 'merge' or 'overwrite', got {mode!r}")
        incoming: dict[str, MemoryRecord] = {}
        for entry in entries:
            record = MemoryRecord.from_dict(entry)
            incoming[record.key] = record
        # The snapshot, brought up to date (reloaded only if someone else wrote), not a
        # load_all per call: a bulk load in batches would read everything once per batch.
        await self.refresh()
        # Read, not copied (nothing awaits until the write): a copy cost O(store) per call.
        existing = self._records
        if mode == "overwrite":
            forget = sorted(existing)
            puts = list(incoming.values())
        else:
            forget = []
            puts = [
                r
                for r in incoming.values()
                if r.key not in existing or r.updated_at >= existing[r.key].updated_at
            ]
        # Deleting first makes imported created_at win over the stored one.
        forgotten = set(forget)  # a list's `in` made this O(store × batch) on overwrite
        forget += [r.key for r in puts if r.key in existing and r.key not in forgotten]
        await self.write(puts, forget)
        return len(puts)

    # ------------------------------------------------------------------ reads

    async def get(self, key: str) -> MemoryRecord | None:
        """Returns the memory ``key`` read from the backend, or None (also when expired).

        Archived memories are returned too: ``get`` is by explicit key.
        """
        record = await self.backend.get(validate_key(key))
        if record is None or record.is_expired(self.clock()):
            return None
        return record

    async def recent(self, n: int = 10) -> list[MemoryRecord]:
        """Returns the ``n`` most recently written live memories, newest first."""
        _check_count(n, "recent: n")
        await self.refresh()
        live = self._live(self.clock())
        return sorted(live, key=lambda r: (-r.updated_at, r.key))[:n]

    async def recall_by_tag(self, tag: str, limit: int = 20) -> list[MemoryRecord]:
        """Returns up to ``limit`` live memories tagged ``tag``, newest first."""
        _check_count(limit, "recall_by_tag: limit")
        (wanted,) = normalise_tags([tag])
        await self.refresh()
        live = [r for r in self._live(self.clock()) if wanted in r.tags]
        return sorted(live, key=lambda r: (-r.updated_at, r.key))[:limit]

    async def count(self) -> int:
        """Returns how many live (unexpired, unarchived) memories the namespace holds."""
        await self.refresh()
        return sum(1 for _ in self._live(self.clock()))

    async def export(self, include_archived: bool = True) -> list[dict[str, Any]]:
        """Returns every unexpired memory in ``import_`` form, sorted by key."""
        _, records = await self.backend.load_all()
        now = self.clock()
        return [
            r.to_dict()
            for r in sorted(records, key=lambda r: r.key)
            if not r.is_expired(now) and (include_archived or not r.archived)
        ]

    async def version(self) -> int:
        """Returns the backend's version token for this namespace; it changes on every write."""
        return await self.backend.version()

    async def recall(
        self,
        query: str,
        top_k: int = 5,
        tags: Iterable[str] | None = None,
        *,
        options: RecallOptions | None = None,
        select: Callable[[MemoryRecord], bool] | None = None,
    ) -> list[Hit]:
        """Returns the memories most relevant to ``query``, best first.

        Args:
            query: Free text.
            top_k: How many hits at most.
            tags: Only memories carrying *all* of these tags (None: no filter).
            options: Overrides the store's default ``RecallOptions`` for this call.
            select: Only memories this admits (e.g. a filter over their metadata). It runs
                inside candidate selection, before ranking is cut to ``top_k``, so a match
                ranked below ``top_k`` among all memories is still found; it only narrows
                what the namespace and ``tags`` already admit.

        Returns:
            Scored hits; each hit's ``ranked_by`` names the steps that ranked it. Expired and
            archived memories are never returned.
        """
        _check_query(query, "recall")
        _check_count(top_k, "recall: top_k")
        wanted = None if tags is None else set(normalise_tags(tags))
        await self.refresh()
        embed_query = None if self._cache is None else self._embed_query
        return await run_recall(
            self.snapshot(), query, top_k, wanted, options or self.options, embed_query, select
        )

    async def _embed_query(self, query: str) -> Sequence[float]:
        """Embeds every memory not yet indexed, then the query (not persisted)."""
        assert self._cache is not None  # only handed to recall when there is an embedder
        await self.ensure_vectors()
        (vector,) = await self._cache.vectors([query], persist=False, lookup=False)
        return vector

    async def recall_prompt(self, query: str, top_k: int = 5) -> list[HookMemory]:
        """The live memories relevant to ``query`` above the relevance floor, best first: the
        hooks' question (:mod:`evermind.memory.prompt_recall`), answered by the backend's own
        text index when it has one (SQLite's FTS5 side index, Postgres's ``tsvector``), else
        from this store's snapshot. Lexical only: no embedder runs.

        Raises:
            ConfigError: ``query`` is not a string or is too long, or ``top_k`` is not >= 1.
            StorageError: The backend failed.
        """
        _check_query(query, "recall_prompt")
        _check_count(top_k, "recall_prompt: top_k")
        now, pool = self.clock(), self.options.candidate_pool
        matches = None
        if isinstance(self.backend, PromptRecallBackend):
            matches = await self.backend.prompt_matches(query, pool, now)
        if matches is None:
            await self.refresh()
            snap = self.snapshot()  # indexes the texts written since the last read
            matches = snapshot_matches(snap.records, snap.bm25, query, pool, now)
        return rank_matches(matches, top_k, self.options, now)

    async def digest(self, limit: int = 12) -> list[MemoryRecord]:
        """The ``limit`` most important live memories, newest first among equals (what a
        session starts with)."""
        _check_count(limit, "digest: limit")
        await self.refresh()
        live = self._live(self.clock())
        return sorted(live, key=lambda r: (-r.importance, -r.updated_at, r.key))[:limit]

    # ------------------------------------------------------------------ snapshot

    def snapshot(self) -> Snapshot:
        """The in-memory view recall ranks: records, BM25 and vector indexes, and the time.

        Call :meth:`refresh` first to see other writers' changes. The records are a read-only
        view; the indexes are the store's own (recall only reads them).
        """
        for key in self._lexical_pending:  # writes since the last read: index their text now
            record = self._records.get(key)
            if record is None:
                self._bm25.remove(key)
            else:
                self._bm25.add(key, record.content)
        self._lexical_pending.clear()
        return Snapshot(MappingProxyType(self._records), self._bm25, self._vectors, self.clock())

    def _live(self, now: float) -> Iterable[MemoryRecord]:
        return (r for r in self._records.values() if not r.archived and not r.is_expired(now))

    async def refresh(self) -> None:
        """Reloads the in-memory snapshot if anyone else wrote since it was taken."""
        async with self._sync_lock:
            if await self.backend.version() == self._version:
                return
            version, records = await self.backend.load_all()
            self._records = {r.key: r for r in records}
            self._unembedded = set(self._records)
            self._bm25 = BM25Index(self.options.bm25_k1, self.options.bm25_b)
            self._lexical_pending = set(self._records)  # indexed by the next snapshot()
            for key in list(self._vector_hash):
                current = self._records.get(key)
                if current is None or current.content_hash != self._vector_hash[key]:
                    self._drop_vector(key)
            self._version = version

    def _absorb(self, result: WriteResult) -> None:
        """Applies our own write to the snapshot, or marks it stale if others wrote too."""
        if self._version is None or result.version != self._version + 1:
            self._version = None  # someone else wrote in between: reload on next read
            return
        for key in (*result.deleted, *result.evicted):
            self._records.pop(key, None)
            self._bm25.remove(key)
            self._lexical_pending.discard(key)
            self._drop_vector(key)
        for record in result.stored:
            self._records[record.key] = record
            self._lexical_pending.add(record.key)
            if self._vector_hash.get(record.key) != record.content_hash:
                self._drop_vector(record.key)
                self._unembedded.add(record.key)
        self._version = result.version

    def _drop_vector(self, key: str) -> None:
        self._vectors.remove(key)
        digest = self._vector_hash.pop(key, None)
        if digest is not None:
            keys = self._hash_keys.get(digest)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._hash_keys[digest]

    def _set_hash(self, key: str, digest: str) -> None:
        previous = self._vector_hash.get(key)
        if previous is not None and previous != digest:
            keys = self._hash_keys.get(previous)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._hash_keys[previous]
        self._vector_hash[key] = digest
        self._hash_keys.setdefault(digest, set()).add(key)

    def _hash_sample(self) -> list[str]:
        """Up to :data:`_SERVED_SAMPLE` of the indexed content hashes, drawn at random (what
        the backend checks its nearest-neighbour table holds before it serves recall)."""
        digests = list(self._hash_keys)
        if len(digests) <= _SERVED_SAMPLE:
            return digests
        return random.Random(len(digests)).sample(digests, _SERVED_SAMPLE)

    async def _served_candidates(self, query: list[float], n: int) -> tuple[list[str], int] | None:
        """The keys of the backend's ``n`` nearest embeddings to ``query`` (by content hash,
        each hash's keys in this namespace), and how many the backend returned; None when it
        cannot answer (``ServedVectorIndex`` then scans in process)."""
        if self._cache is None or not isinstance(self.backend, ServedBackend):
            return None
        fingerprint = await self._cache.embedder.ready()
        hashes = await self.backend.nearest_hashes(fingerprint, query, n, self._hash_sample)
        if hashes is None:
            return None
        keys = [key for digest in hashes for key in sorted(self._hash_keys.get(digest, ()))]
        return keys, len(hashes)

    def _vectors_todo(self) -> list[MemoryRecord]:
        pending = self._unembedded
        return [
            r
            for r in self._records.values()
            if r.key in pending and not r.archived and r.key not in self._vector_hash
        ]

    def pending_vectors(self) -> int:
        """How many memories the next :meth:`ensure_vectors` (a recall's first step) embeds or
        loads from the vector cache: 0 without an embedder or when the index is whole."""
        if self._cache is None or not self._unembedded:
            return 0
        return len(self._vectors_todo())

    async def ensure_vectors(
        self, on_batch: Callable[[int, int], Awaitable[None]] | None = None
    ) -> None:
        """Embeds (or loads from the cache) every memory not yet in the vector index.

        Only the keys written since the last call are looked at (a write or a reload marks
        them), so a recall on an indexed store does no work here.

        Args:
            on_batch: Awaited as ``on_batch(done, total)`` before each batch of
                ``_EMBED_BATCH`` memories and after the last; an exception it raises stops
                the work there. Each memory embedded before it keeps its (whole) vector; the
                rest stay marked, and the next call embeds them.
        """
        if self._cache is None or not self._unembedded:
            return
        todo = self._vectors_todo()
        self._unembedded = {r.key for r in todo}  # writes while this awaits add to it
        for start in range(0, len(todo), _EMBED_BATCH):
            if on_batch is not None:
                await on_batch(start, len(todo))
            batch = todo[start : start + _EMBED_BATCH]
            vectors = await self._cache.vectors([r.content for r in batch])
            for record, vector in zip(batch, vectors, strict=True):
                self._vectors.add(record.key, vector)
                self._set_hash(record.key, record.content_hash)
                current = self._records.get(record.key)
                if current is None or current.content_hash == record.content_hash:
                    self._unembedded.discard(record.key)  # not rewritten meanwhile
        if on_batch is not None and todo:
            await on_batch(len(todo), len(todo))

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Closes the backend."""
        await self.backend.close()

    async def __aenter__(self) -> MemoryStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _check_query(query: object, what: str) -> None:
    if not isinstance(query, str):
        raise ConfigError(f"{what}: query must be a string, got {type(query).__name__}")
    if len(query) > MAX_QUERY_CHARS:
        raise ConfigError(
            f"{what}: query of {len(query)} characters is over the limit of "
            f"{MAX_QUERY_CHARS}; hint: recall with the question or its key terms, "
            "not a whole document"
        )
    check_text(query, f"{what}: query")


def _check_count(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what}: expected a positive integer, got {value!r}")


__all__ = ["MemoryStore"]
