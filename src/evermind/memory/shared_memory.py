"""One process's memory stores on a shared ``--store`` URL (native-only).

``evermind mcp --store URL`` (stdio or ``--http``), ``evermind ingest --store URL`` and the
Claude Code hooks keep memory where ``evermind serve --store URL`` keeps it: the memory table
of a shared vector store (:func:`~evermind.vectorstore.shared.open_memory_tables`), each
namespace a :class:`~evermind.memory.vector_backend.VectorStoreBackend` of its tenant, so every
process on one Postgres (or Qdrant) sees the others' memories, and the runtime's too.

:class:`SharedMemory` opens the tables on the running loop (an async driver's connection
belongs to the loop that opened it: a server opens them inside its own loop, at start-up) and
hands out one ``MemoryStore`` per tenant over them. Tenancy is the runtime's: the tenant is
every item's ACL and the scope of every read, inside the engine's own query, so one tenant's
store cannot return another tenant's memory even when their namespaces are named alike.
:func:`memory_source` picks it, or a host's own backend (:class:`~evermind.memory.plugin.
PluginMemory`, ``--store python:package.module:factory``), by what ``--store`` names.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from evermind.errors import StorageError
from evermind.memory.plugin import PluginMemory, is_plugin
from evermind.memory.store import MemoryStore
from evermind.memory.vector_backend import VectorStoreBackend
from evermind.vectorstore.port import VectorStore
from evermind.vectorstore.shared import open_memory_tables

__all__ = ["MemorySource", "SharedMemory", "memory_source", "shared_memory"]


class SharedMemory:
    """The memory tables at ``url``, opened on entry (on the running loop), closed on exit.

    Args:
        url: A shared ``--store`` URL (``postgresql://…``, ``qdrant://…``, ``memory://``).
        embedder: What each store embeds with (None: lexical recall only).
        namespace: The tenants' namespace (``default`` unless named).
    """

    def __init__(self, url: str, embedder: Any, *, namespace: str) -> None:
        self.url = url
        self.embedder = embedder
        self.namespace = namespace
        self._tables: tuple[VectorStore, VectorStore] | None = None

    async def __aenter__(self) -> SharedMemory:
        """Opens the tables.

        Raises:
            ConfigError: A URL ``--store`` does not take.
            StorageError: The engine cannot be reached.
        """
        self._tables = await open_memory_tables(self.url)
        return self

    async def __aexit__(self, *exc: object) -> None:
        tables, self._tables = self._tables, None
        if tables is not None:
            memory, clocks = tables
            await clocks.close()
            await memory.close()

    def store(self, tenant: str) -> MemoryStore:
        """A new memory store of ``tenant``'s namespace on the open tables (the caller closes
        it; closing a store leaves the tables open).

        Raises:
            StorageError: The tables are not open (outside ``async with``).
        """
        if self._tables is None:
            raise StorageError(
                f"shared memory store: its tables are not open; open it with `async with` "
                f"before asking for tenant {tenant!r}'s store"
            )
        memory, clocks = self._tables
        backend = VectorStoreBackend(memory, self.namespace, tenant=tenant, clocks=clocks)
        return MemoryStore(backend, self.embedder)


#: What ``--store`` opens besides a SQLite file: the engine at a URL, or a host's factory.
MemorySource = SharedMemory | PluginMemory


def memory_source(location: str, embedder: Any, *, namespace: str) -> MemorySource:
    """The source of per-tenant stores ``location`` names: a host's factory
    (``python:package.module:factory``, :mod:`evermind.memory.plugin`) or a shared store's URL.

    Raises:
        ConfigError: A malformed factory spec.
    """
    if is_plugin(location):
        return PluginMemory(location, embedder, namespace=namespace)
    return SharedMemory(location, embedder, namespace=namespace)


@contextlib.asynccontextmanager
async def shared_memory(
    url: str, embedder: Any, *, tenant: str, namespace: str
) -> AsyncIterator[MemoryStore]:
    """The memory store of ``tenant``'s ``namespace`` on the store at ``url``; closed on exit.

    Args:
        url: A shared ``--store`` URL (``postgresql://…``, ``qdrant://…``, ``memory://``) or a
            host's factory (``python:package.module:factory``).
        embedder: What the store embeds with (None: lexical recall only).
        tenant: The tenant, as ``evermind serve`` names it (every item's ACL).
        namespace: The tenant's namespace (``default`` unless named).

    Raises:
        ConfigError: A URL ``--store`` does not take, or a factory that fails or makes no
            ``MemoryBackend``.
        StorageError: The engine cannot be reached.
    """
    async with (
        memory_source(url, embedder, namespace=namespace) as source,
        source.store(tenant) as store,
    ):
        yield store
