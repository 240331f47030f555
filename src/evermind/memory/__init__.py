"""Agent memory: ``MemoryStore`` with hybrid recall over a pluggable storage backend.

Public API::

    store = MemoryStore("memory.db", embedder=model)        # native: SQLite file
    store = MemoryStore(indexeddb_backend, embedder=model)   # browser: a MemoryBackend
    await store.remember("pref-editor", "Niamh uses Neovim", tags=["pref"], ttl=3600)
    hits = await store.recall("which editor?", top_k=5)     # list[Hit], each with ranked_by
    sync = SyncMemoryStore("memory.db")                      # blocking wrapper for scripts
    vs = await open_store("postgresql://…", dim=SIGNATURE_DIM)   # any vector-store engine
    store = MemoryStore(VectorStoreBackend(vs, "notes", tenant="acme"), embedder=model)

This package is browser-safe except ``sqlite_backend`` and ``sync`` (native only), which are
not imported here eagerly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evermind.memory.backend import MemoryBackend, eviction_order
from evermind.memory.embedder import BoundEmbedder, Embedder, VectorCache, as_embedder
from evermind.memory.inmemory import InMemoryBackend, InMemoryHub
from evermind.memory.records import Hit, MemoryRecord, RecallOptions, WriteResult
from evermind.memory.sanitize import fence, sanitize, sanitize_text
from evermind.memory.store import MemoryStore
from evermind.memory.vector_backend import VectorStoreBackend
from evermind.search.vectors import VectorIndex

if TYPE_CHECKING:
    from evermind.memory.sqlite_backend import SQLiteBackend
    from evermind.memory.sync import SyncMemoryStore


def __getattr__(name: str) -> Any:
    # The native-only classes load on first use, so importing the package stays browser-safe.
    if name == "SQLiteBackend":
        from evermind.memory.sqlite_backend import SQLiteBackend

        return SQLiteBackend
    if name == "SyncMemoryStore":
        from evermind.memory.sync import SyncMemoryStore

        return SyncMemoryStore
    raise AttributeError(f"module 'evermind.memory' has no attribute {name!r}")


__all__ = [
    "BoundEmbedder",
    "Embedder",
    "Hit",
    "InMemoryBackend",
    "InMemoryHub",
    "MemoryBackend",
    "MemoryRecord",
    "MemoryStore",
    "RecallOptions",
    "SQLiteBackend",
    "SyncMemoryStore",
    "VectorCache",
    "VectorIndex",
    "VectorStoreBackend",
    "WriteResult",
    "as_embedder",
    "eviction_order",
    "fence",
    "sanitize",
    "sanitize_text",
]
