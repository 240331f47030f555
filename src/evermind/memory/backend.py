"""The storage port of the memory store, and the eviction order every backend follows.

A backend keeps the records of one *namespace* (a tenant; the runtime scopes by it) and the
embedding-vector cache, and performs each logical write as one transaction (``apply``). It
also keeps a per-namespace *version* counter that every transaction bumps, so a store can
tell whether someone else (another process, another tab) wrote since it last looked.

Implementations: ``InMemoryBackend`` (``evermind.memory.inmemory``, pure Python, the reference),
``SQLiteBackend`` (``evermind.memory.sqlite_backend``, native), ``VectorStoreBackend`` (any
vector-store engine: Postgres, Qdrant, in process), the IndexedDB backend of the browser host,
and a host's own, loaded by ``--store python:package.module:factory``
(:mod:`evermind.memory.plugin` checks it against this protocol; docs/mcp.md, "Your own
backend"). :class:`PromptRecallBackend` is an optional extra: a backend that answers the
hooks' prompt recall from its own text index. Browser-safe: standard library and ``evermind``
only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from evermind.errors import VersionConflict
from evermind.memory.prompt_recall import PromptMatch
from evermind.memory.records import MemoryRecord, WriteResult


@runtime_checkable
class MemoryBackend(Protocol):
    """Async storage of memory records and cached vectors for one namespace.

    Semantics every implementation must keep (tests/unit/test_memory_backends.py checks them):

    - ``apply`` is atomic: all deletes, puts and evictions land, or none do. Deletes run
      first, so a key both deleted and put ends up freshly written.
    - A put of an existing key keeps that key's ``created_at``; everything else is replaced.
    - With ``capacity``, after the puts the namespace holds at most ``capacity`` records;
      the excess is evicted in :func:`eviction_order`, never touching keys put in the same
      call unless the puts alone exceed the capacity.
    - Every ``apply`` and every ``delete_expired`` that removes something bumps ``version``.
    - ``apply(..., expect_version=v)`` writes only if the namespace's version is ``v`` when
      the transaction starts, else raises ``VersionConflict`` and writes nothing (a
      compare-and-set: what write-through cognition decides on is what it writes over).
      ``expect_keys={key: updated_at or None}`` is the same per key: each key must hold a
      record written at that time (None: no live record), whatever else changed.
    """

    namespace: str

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
        """Deletes ``deletes``, writes ``puts`` and evicts to ``capacity`` in one transaction.

        Raises:
            VersionConflict: ``expect_version`` is set and is not the namespace's version, or
                a key of ``expect_keys`` holds another record than expected.
        """
        ...

    async def get(self, key: str) -> MemoryRecord | None:
        """Returns the record stored under ``key`` (expired or not), or None."""
        ...

    async def load_all(self) -> tuple[int, list[MemoryRecord]]:
        """Returns ``(version, every record of the namespace)`` read in one snapshot."""
        ...

    async def version(self) -> int:
        """Returns the namespace's version counter (0 for a namespace never written)."""
        ...

    async def delete_expired(self, now: float) -> WriteResult:
        """Deletes every record with ``expires_at <= now`` in one transaction."""
        ...

    async def get_vectors(
        self, fingerprint: str, hashes: Sequence[str]
    ) -> dict[str, Sequence[float]]:
        """Returns the cached vectors among ``hashes`` for the embedder ``fingerprint``."""
        ...

    async def put_vectors(self, fingerprint: str, vectors: Mapping[str, Sequence[float]]) -> None:
        """Caches ``vectors`` (content hash -> vector) for the embedder ``fingerprint``."""
        ...

    async def close(self) -> None:
        """Releases the backend's resources; the backend is unusable afterwards."""
        ...


@runtime_checkable
class PromptRecallBackend(Protocol):
    """A backend that answers the hooks' prompt recall from a text index of its own.

    Optional: ``MemoryStore.recall_prompt`` asks a backend that has this method, and ranks its
    in-memory snapshot itself for one that has not (or that answers None).
    """

    async def prompt_matches(self, query: str, pool: int, now: float) -> list[PromptMatch] | None:
        """The live (unexpired, unarchived) memories among the ``pool`` best lexical matches
        of ``query`` that clear the relevance floor (:mod:`evermind.memory.prompt_recall`),
        each with its raw lexical score (higher is better); None when this backend has no
        text index to answer from (the store then ranks its snapshot)."""
        ...


@runtime_checkable
class ServedBackend(Protocol):
    """A backend whose engine has a nearest-neighbour index of its own (Postgres: pgvector's
    HNSW over the memory's embeddings), which the store's vector search can start from.

    Optional: ``MemoryStore`` ranks with a ``ServedVectorIndex`` over a backend that has this
    method, and scans its own index for one that has not (or that answers None).
    """

    async def nearest_hashes(
        self,
        fingerprint: str,
        vector: Sequence[float],
        n: int,
        sample: Callable[[], Sequence[str]] | None = None,
    ) -> list[str] | None:
        """The content hashes of the ``n`` stored embeddings (of embedder ``fingerprint``)
        nearest to ``vector``, best first (fewer when the engine reached no more); None when
        the engine cannot answer now, or does not hold every hash of ``sample()`` (the
        caller's own, a check the backend may make once)."""
        ...


def check_version(namespace: str, expected: int | None, actual: int) -> None:
    """Raises :class:`VersionConflict` when ``expected`` is set and differs from ``actual``."""
    if expected is not None and expected != actual:
        raise VersionConflict(
            f"memory namespace {namespace!r}: expected version {expected}, found {actual}; "
            "hint: another writer came in between, read again and decide again"
        )


def check_keys(
    namespace: str,
    expected: Mapping[str, float | None] | None,
    current: Mapping[str, MemoryRecord],
    now: float,
) -> None:
    """Raises :class:`VersionConflict` when a key of ``expected`` holds another record.

    Args:
        namespace: For the message.
        expected: Key -> the ``updated_at`` of the record read, or None (no live record).
        current: The records stored now under (some of) those keys.
        now: An expired record counts as absent.
    """
    for key, wanted in (expected or {}).items():
        record = current.get(key)
        found = None if record is None or record.is_expired(now) else record.updated_at
        if found != wanted:
            raise VersionConflict(
                f"memory namespace {namespace!r}: key {key!r} was written at {found!r}, "
                f"expected {wanted!r}; hint: another writer came in between, read again"
            )


def eviction_key(record: MemoryRecord, now: float) -> tuple[bool, float, float, str]:
    """Sort key of the eviction order: expired first, then lowest importance, then oldest write.

    The key name breaks the remaining ties so the order is total and the same in every backend.
    """
    return (not record.is_expired(now), record.importance, record.updated_at, record.key)


def eviction_order(records: Iterable[MemoryRecord], now: float) -> list[MemoryRecord]:
    """Returns ``records`` in the order a full store evicts them (first = evicted first)."""
    return sorted(records, key=lambda record: eviction_key(record, now))


def select_evictions(
    records: Iterable[MemoryRecord], capacity: int | None, protected: set[str], now: float
) -> list[str]:
    """Chooses the keys to evict so that at most ``capacity`` records remain.

    Args:
        records: Every record of the namespace after the puts.
        capacity: The limit, or None for unlimited.
        protected: Keys written in this transaction; evicted only when they alone overflow.
        now: Current time, seconds since the epoch (decides what is expired).

    Returns:
        The keys to evict, first-evicted first.
    """
    pool = list(records)
    if capacity is None or len(pool) <= capacity:
        return []
    excess = len(pool) - capacity
    others = eviction_order((r for r in pool if r.key not in protected), now)
    chosen = [r.key for r in others[:excess]]
    if len(chosen) < excess:
        fresh = eviction_order((r for r in pool if r.key in protected), now)
        chosen += [r.key for r in fresh[: excess - len(chosen)]]
    return chosen
