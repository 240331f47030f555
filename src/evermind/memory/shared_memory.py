"""One process's memory store on a shared ``--store`` URL (native-only).

``evermind mcp --store URL`` and ``evermind ingest --store URL`` keep memory where ``evermind
serve --store URL`` keeps it: the memory table of a shared vector store
(:func:`~evermind.vectorstore.shared.open_memory_tables`), each namespace a
:class:`~evermind.memory.vector_backend.VectorStoreBackend` of its tenant, so every process on
one Postgres (or Qdrant) sees the others' memories, and the runtime's too. A process holds
one loop, so the tables are opened on it (no lane, unlike the runtime's ``SharedStore``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from evermind.memory.store import MemoryStore
from evermind.memory.vector_backend import VectorStoreBackend
from evermind.vectorstore.shared import open_memory_tables

__all__ = ["shared_memory"]


@contextlib.asynccontextmanager
async def shared_memory(
    url: str, embedder: Any, *, tenant: str, namespace: str
) -> AsyncIterator[MemoryStore]:
    """The memory store of ``tenant``'s ``namespace`` on the store at ``url``; closed on exit.

    Args:
        url: A shared ``--store`` URL (``postgresql://…``, ``qdrant://…``, ``memory://``).
        embedder: What the store embeds with (None: lexical recall only).
        tenant: The tenant, as ``evermind serve`` names it (every item's ACL).
        namespace: The tenant's namespace (``default`` unless named).

    Raises:
        ConfigError: A URL ``--store`` does not take.
        StorageError: The engine cannot be reached.
    """
    memory, clocks = await open_memory_tables(url)
    try:
        backend = VectorStoreBackend(memory, namespace, tenant=tenant, clocks=clocks)
        async with MemoryStore(backend, embedder) as store:
            yield store
    finally:
        await clocks.close()
        await memory.close()
