"""``InMemoryBackend``: the reference storage backend, a dictionary per namespace.

It is what the other backends are tested against, what tests and throw-away stores use, and
a template for host backends (IndexedDB). Several backends can share one ``InMemoryHub`` to
model several processes or tabs writing the same namespace. Browser-safe: standard library only.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from evermind.errors import StorageError
from evermind.memory.backend import check_keys, check_version, select_evictions
from evermind.memory.records import MemoryRecord, WriteResult


@dataclass
class InMemoryHub:
    """Shared state of in-memory backends: records per namespace, versions, vector cache."""

    records: dict[str, dict[str, MemoryRecord]] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    vectors: dict[tuple[str, str], array[float]] = field(default_factory=dict)


class InMemoryBackend:
    """A ``MemoryBackend`` that keeps everything in Python dictionaries.

    Args:
        namespace: The tenant whose records this backend sees.
        hub: Shared state; pass the same hub to several backends to share data.
    """

    def __init__(self, namespace: str = "default", hub: InMemoryHub | None = None) -> None:
        self.namespace = namespace
        self._hub = hub if hub is not None else InMemoryHub()
        self._closed = False
        # The dictionaries are only touched between awaits, so every method is atomic already;
        # the lock documents it and keeps that true if a method ever awaits inside.
        self._lock = asyncio.Lock()

    def _table(self) -> dict[str, MemoryRecord]:
        if self._closed:
            raise StorageError(
                f"in-memory backend for namespace {self.namespace!r} is closed; "
                "hint: create a new store"
            )
        return self._hub.records.setdefault(self.namespace, {})

    def _bump(self) -> int:
        version = self._hub.versions.get(self.namespace, 0) + 1
        self._hub.versions[self.namespace] = version
        return version

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
        """Writes, deletes and evicts in one step (see ``MemoryBackend.apply``)."""
        async with self._lock:
            table = self._table()
            check_version(self.namespace, expect_version, self._hub.versions.get(self.namespace, 0))
            check_keys(self.namespace, expect_keys, table, now)
            staged = dict(table)
            deleted = []
            for key in deletes:
                if staged.pop(key, None) is not None:
                    deleted.append(key)
            stored: list[MemoryRecord] = []
            for record in puts:
                previous = staged.get(record.key)
                if previous is not None:
                    record = replace(record, created_at=previous.created_at)
                staged[record.key] = record
                stored.append(record)
            protected = {r.key for r in puts}
            evicted = select_evictions(staged.values(), capacity, protected, now)
            for key in evicted:
                del staged[key]
            stored = [r for r in stored if r.key in staged and staged[r.key] is r]
            table.clear()
            table.update(staged)
            return WriteResult(self._bump(), tuple(stored), tuple(deleted), tuple(evicted))

    async def get(self, key: str) -> MemoryRecord | None:
        """Returns the record under ``key`` or None."""
        return self._table().get(key)

    async def load_all(self) -> tuple[int, list[MemoryRecord]]:
        """Returns the version and every record of the namespace."""
        return self._hub.versions.get(self.namespace, 0), list(self._table().values())

    async def version(self) -> int:
        """Returns the namespace's version counter."""
        self._table()
        return self._hub.versions.get(self.namespace, 0)

    async def delete_expired(self, now: float) -> WriteResult:
        """Deletes every expired record; bumps the version only when something went."""
        async with self._lock:
            table = self._table()
            gone = sorted(key for key, r in table.items() if r.is_expired(now))
            for key in gone:
                del table[key]
            version = self._bump() if gone else self._hub.versions.get(self.namespace, 0)
            return WriteResult(version, evicted=tuple(gone))

    async def get_vectors(
        self, fingerprint: str, hashes: Sequence[str]
    ) -> dict[str, Sequence[float]]:
        """Returns the cached vectors for ``hashes`` under ``fingerprint``."""
        self._table()
        found: dict[str, Sequence[float]] = {}
        for digest in hashes:
            vector = self._hub.vectors.get((fingerprint, digest))
            if vector is not None:
                found[digest] = vector
        return found

    async def put_vectors(self, fingerprint: str, vectors: Mapping[str, Sequence[float]]) -> None:
        """Caches vectors as float32 arrays."""
        self._table()
        for digest, vector in vectors.items():
            self._hub.vectors[(fingerprint, digest)] = array("f", vector)

    async def close(self) -> None:
        """Marks the backend closed (the hub's data stays for other backends)."""
        self._closed = True
