"""``KVMemoryBackend``: the memory store's backend over a key-value port (IndexedDB in the tab).

The port is anything with ``get``, ``get_all`` and ``write(store, puts, deletes)`` over named
stores — the Studio's ``KeyValueStore`` (``evermind.studio.storage``): IndexedDB in the
browser, ``MemoryKV`` natively. This module never imports ``js``; the port does.

Layout inside one object store (default ``"memory"``); values are JSON strings, vectors raw
float32 bytes, and every key carries the length of its variable parts so no two collide::

    r/<len(ns)>/<ns>/<key>        -> {"ns": ns, "record": MemoryRecord.to_dict()}  (JSON)
    v/<ns>                        -> the namespace's version counter (int)
    x/<len(fp)>/<fp>/<sha256>     -> {"fp": fp, "hash": sha256, "vector": float32 bytes}

One logical write is one ``write`` call, i.e. one IndexedDB transaction: its puts, deletes,
evictions and the bumped version commit together or not at all (the port issues every request
of the transaction before awaiting, which IndexedDB requires). The backend keeps a mirror of
what it read so a write needs one ``get`` of the version, not a scan; when the stored version
differs from the mirror's (another tab wrote), the mirror is reloaded with one ``get_all``.

Limits: IndexedDB offers no read-then-write transaction through this port, so two *tabs*
writing the same namespace at the same instant can both bump to the same version; inside one
worker every write is serialised by a lock. Browser-safe: standard library and ``evermind``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from evermind.errors import StorageError
from evermind.memory.backend import check_keys, check_version, select_evictions
from evermind.memory.inmemory import InMemoryHub
from evermind.memory.records import MemoryRecord, WriteResult

logger = logging.getLogger(__name__)

#: Vectors asked for at once above which one ``get_all`` beats one ``get`` per vector.
_BULK_READ = 32


class KeyValuePort(Protocol):
    """The slice of the Studio's ``KeyValueStore`` this backend uses."""

    async def get(self, store: str, key: str) -> Any: ...
    async def get_all(self, store: str) -> list[tuple[str, Any]]: ...
    async def write(
        self, store: str, puts: Iterable[tuple[str, Any]] = (), deletes: Iterable[str] = ()
    ) -> None: ...


def record_key(namespace: str, key: str) -> str:
    """The KV key of memory ``key`` in ``namespace``."""
    return f"r/{len(namespace)}/{namespace}/{key}"


def version_key(namespace: str) -> str:
    """The KV key of ``namespace``'s version counter."""
    return f"v/{namespace}"


def vector_key(fingerprint: str, digest: str) -> str:
    """The KV key of the cached vector of content ``digest`` under ``fingerprint``."""
    return f"x/{len(fingerprint)}/{fingerprint}/{digest}"


#: What this backend last read or wrote: all namespaces' records, versions and vectors, the
#: same three tables the in-memory backends share.
_Mirror = InMemoryHub


class KVMemoryBackend:
    """A ``MemoryBackend`` over a key-value port (see the module docstring for the layout).

    Args:
        kv: The key-value port (the Studio's IndexedDB store, or ``MemoryKV`` natively).
        namespace: The tenant whose records this backend sees.
        store: The port's object store to keep everything in.
    """

    def __init__(self, kv: KeyValuePort, namespace: str = "default", store: str = "memory") -> None:
        self.namespace = namespace
        self.kv = kv
        self.store = store
        self._mirror: _Mirror | None = None
        self._closed = False
        self._lock = asyncio.Lock()
        #: How many KV transactions this backend committed (writes) — for tests and benches.
        self.transactions = 0

    # ------------------------------------------------------------------ mirror

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(
                f"key-value memory backend for namespace {self.namespace!r} is closed; "
                "hint: create a new store"
            )

    async def _load(self) -> _Mirror:
        """Reads the whole object store into a fresh mirror (one transaction)."""
        mirror = _Mirror()
        try:
            rows = await self.kv.get_all(self.store)
        except StorageError:
            raise
        except Exception as err:
            raise StorageError(
                f"memory backend: reading object store {self.store!r} failed: {err}"
            ) from err
        for key, value in rows:
            try:
                self._absorb_row(mirror, key, value)
            except (ValueError, TypeError, KeyError) as err:
                # One damaged row must not make the whole memory unreadable.
                logger.warning("memory backend: skipping unreadable row %r: %s", key, err)
        self._mirror = mirror
        return mirror

    @staticmethod
    def _absorb_row(mirror: _Mirror, key: str, value: Any) -> None:
        if key.startswith("r/"):
            row = json.loads(value)
            record = MemoryRecord.from_dict(row["record"])
            mirror.records.setdefault(str(row["ns"]), {})[record.key] = record
        elif key.startswith("v/"):
            mirror.versions[key[2:]] = int(value)
        elif key.startswith("x/"):
            mirror.vectors[(str(value["fp"]), str(value["hash"]))] = _vector(value["vector"])

    async def _stored_version(self) -> int:
        try:
            value = await self.kv.get(self.store, version_key(self.namespace))
        except StorageError:
            raise
        except Exception as err:
            raise StorageError(f"memory backend: reading the version failed: {err}") from err
        return int(value) if value is not None else 0

    async def _fresh(self) -> _Mirror:
        """The mirror, reloaded first when the stored version moved (another tab wrote)."""
        self._check_open()
        stored = await self._stored_version()
        mirror = self._mirror
        if mirror is None or mirror.versions.get(self.namespace, 0) != stored:
            mirror = await self._load()
        return mirror

    def _table(self, mirror: _Mirror) -> dict[str, MemoryRecord]:
        return mirror.records.setdefault(self.namespace, {})

    async def _commit(
        self,
        mirror: _Mirror,
        staged: dict[str, MemoryRecord],
        puts: Sequence[MemoryRecord],
        deletes: Sequence[str],
    ) -> int:
        """Writes records and deletions plus the bumped version in one KV transaction."""
        version = mirror.versions.get(self.namespace, 0) + 1
        # Serialise everything before the transaction starts: a value that cannot be
        # serialised raises here, and nothing is written.
        rows: list[tuple[str, Any]] = [
            (
                record_key(self.namespace, r.key),
                json.dumps({"ns": self.namespace, "record": r.to_dict()}, allow_nan=False),
            )
            for r in puts
        ]
        rows.append((version_key(self.namespace), version))
        try:
            await self.kv.write(self.store, rows, [record_key(self.namespace, k) for k in deletes])
        except StorageError:
            self._mirror = None  # unknown state: re-read on next use
            raise
        except Exception as err:
            self._mirror = None
            raise StorageError(f"memory backend: the write transaction failed: {err}") from err
        self.transactions += 1
        table = self._table(mirror)
        table.clear()
        table.update(staged)
        mirror.versions[self.namespace] = version
        return version

    # ------------------------------------------------------------------ MemoryBackend

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
        """Deletes, writes and evicts in one KV transaction (see ``MemoryBackend.apply``)."""
        async with self._lock:
            mirror = await self._fresh()
            check_version(self.namespace, expect_version, mirror.versions.get(self.namespace, 0))
            check_keys(self.namespace, expect_keys, self._table(mirror), now)
            staged = dict(self._table(mirror))
            deleted = [key for key in deletes if staged.pop(key, None) is not None]
            stored: list[MemoryRecord] = []
            for record in puts:
                previous = staged.get(record.key)
                if previous is not None:
                    record = replace(record, created_at=previous.created_at)
                staged[record.key] = record
                stored.append(record)
            evicted = select_evictions(staged.values(), capacity, {r.key for r in puts}, now)
            for key in evicted:
                del staged[key]
            stored = [r for r in stored if staged.get(r.key) is r]
            # Evicted keys are deleted whether they were stored before or only put in this
            # call (then the put is not written and any older row under the key must go).
            removed = [*deleted, *evicted]
            version = await self._commit(mirror, staged, stored, removed)
            return WriteResult(version, tuple(stored), tuple(deleted), tuple(evicted))

    async def get(self, key: str) -> MemoryRecord | None:
        """Returns the record under ``key`` (expired or not), or None."""
        async with self._lock:
            mirror = await self._fresh()
            return self._table(mirror).get(key)

    async def load_all(self) -> tuple[int, list[MemoryRecord]]:
        """Returns the version and every record of the namespace."""
        async with self._lock:
            mirror = await self._fresh()
            return mirror.versions.get(self.namespace, 0), list(self._table(mirror).values())

    async def version(self) -> int:
        """Returns the namespace's version counter as stored (one KV read)."""
        self._check_open()
        return await self._stored_version()

    async def delete_expired(self, now: float) -> WriteResult:
        """Deletes every expired record in one transaction; bumps the version only if any."""
        async with self._lock:
            mirror = await self._fresh()
            table = self._table(mirror)
            gone = sorted(key for key, r in table.items() if r.is_expired(now))
            if not gone:
                return WriteResult(mirror.versions.get(self.namespace, 0))
            doomed = set(gone)
            staged = {k: r for k, r in table.items() if k not in doomed}
            version = await self._commit(mirror, staged, (), gone)
            return WriteResult(version, evicted=tuple(gone))

    async def get_vectors(
        self, fingerprint: str, hashes: Sequence[str]
    ) -> dict[str, Sequence[float]]:
        """Returns the cached vectors among ``hashes`` for ``fingerprint``."""
        async with self._lock:
            self._check_open()
            fresh = self._mirror is None
            mirror = await self._load() if self._mirror is None else self._mirror
            missing = [d for d in hashes if (fingerprint, d) not in mirror.vectors]
            if fresh or not missing:
                pass  # the mirror was just read whole: what it lacks is not stored
            elif len(missing) > _BULK_READ:
                mirror = await self._load()  # many unknown: one scan beats many reads
            else:
                for digest in missing:
                    value = await self.kv.get(self.store, vector_key(fingerprint, digest))
                    if value is not None:
                        mirror.vectors[(fingerprint, digest)] = _vector(value["vector"])
            found: dict[str, Sequence[float]] = {}
            for digest in hashes:
                vector = mirror.vectors.get((fingerprint, digest))
                if vector is not None:
                    found[digest] = vector
            return found

    async def put_vectors(self, fingerprint: str, vectors: Mapping[str, Sequence[float]]) -> None:
        """Caches vectors as float32 bytes, all in one KV transaction."""
        if not vectors:
            return
        async with self._lock:
            self._check_open()
            rows = {digest: array("f", vector) for digest, vector in vectors.items()}
            puts = [
                (
                    vector_key(fingerprint, digest),
                    {"fp": fingerprint, "hash": digest, "vector": row.tobytes()},
                )
                for digest, row in rows.items()
            ]
            try:
                await self.kv.write(self.store, puts)
            except StorageError:
                raise
            except Exception as err:
                raise StorageError(f"memory backend: caching vectors failed: {err}") from err
            self.transactions += 1
            if self._mirror is not None:
                for digest, row in rows.items():
                    self._mirror.vectors[(fingerprint, digest)] = row

    async def prune_vectors(self) -> int:
        """Deletes cached vectors whose content no memory of any namespace holds any more.

        Returns:
            How many vectors were deleted.
        """
        async with self._lock:
            self._check_open()
            mirror = await self._load()
            live = {r.content_hash for table in mirror.records.values() for r in table.values()}
            doomed = [key for key in mirror.vectors if key[1] not in live]
            if doomed:
                await self.kv.write(self.store, (), [vector_key(fp, d) for fp, d in doomed])
                self.transactions += 1
                for key in doomed:
                    del mirror.vectors[key]
            return len(doomed)

    async def close(self) -> None:
        """Marks the backend closed (the port stays open for its other users)."""
        self._closed = True
        self._mirror = None


def _vector(value: Any) -> array[float]:
    """A float32 array from stored bytes (a ``bytes``/``memoryview``) or a list of floats."""
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if len(raw) % 4:
            raise ValueError(f"vector bytes: expected a multiple of 4, got {len(raw)}")
        out = array("f")
        out.frombytes(raw)
        return out
    return array("f", (float(x) for x in value))


__all__ = ["KVMemoryBackend", "KeyValuePort", "record_key", "vector_key", "version_key"]
