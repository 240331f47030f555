"""What a Claude Code hook reads, whatever the store: a digest, a key check, prompt recall.

:func:`open_hook_reader` opens the reader of one namespace of the store ``--store`` names:

- a SQLite memory file: :class:`~evermind.memory.hook_index.HookIndex`, read-only (a hook
  never creates or migrates the file; a missing one is a :class:`StorageError`), the FTS5
  side index beside it answering prompt recall, as ``SQLiteBackend.prompt_matches`` does;
- a shared store (``postgresql://…``, ``qdrant://…``, ``memory://``) or a host's backend
  (``python:module:factory``): a ``MemoryStore`` on it, whose ``recall_prompt`` the backend
  answers from its own text index (Postgres's ``tsvector``) or the store from its snapshot.

Either way the relevance floor and the weighting are :mod:`evermind.memory.prompt_recall`'s,
and compaction stubs read through :class:`~evermind.memory.archive.StubResolver` (the one
place a stub is resolved): a stub whose original is lost is left out of what a hook injects.
Native-only; no numpy and no MCP SDK are imported, so a hook starts fast.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from evermind.memory.archive import StubResolver
from evermind.memory.prompt_recall import HookMemory, hook_memory

if TYPE_CHECKING:
    from evermind.memory.hook_index import HookIndex
    from evermind.memory.store import MemoryStore

__all__ = ["HookReader", "open_hook_reader"]


class HookReader:
    """The reads of a hook over one namespace: from a memory file's side index or a store.

    Build with :func:`open_hook_reader`. Exactly one of ``index`` and ``store`` is set.
    """

    def __init__(
        self,
        resolver: StubResolver,
        *,
        index: HookIndex | None = None,
        store: MemoryStore | None = None,
    ) -> None:
        self.resolver = resolver
        self.index = index
        self.store = store

    async def digest(self, limit: int) -> list[HookMemory]:
        """The ``limit`` most important live memories, stubs resolved (lost ones left out)."""
        if self.index is not None:
            found = self.index.digest(limit)
        else:
            assert self.store is not None
            found = [hook_memory(record) for record in await self.store.digest(limit)]
        return self.resolver.readable(found)

    async def recall(self, prompt: str, top_k: int) -> list[HookMemory]:
        """The live memories relevant to ``prompt`` above the relevance floor, best first."""
        if self.index is not None:
            found = self.index.recall(prompt, top_k)
        else:
            assert self.store is not None
            found = await self.store.recall_prompt(prompt, top_k)
        return self.resolver.readable(found)

    async def has(self, key: str) -> bool:
        """Whether a live (unexpired, unarchived) memory has the key ``key``."""
        if self.index is not None:
            return self.index.has(key)
        assert self.store is not None
        record = await self.store.get(key)
        return record is not None and not record.archived


@contextlib.asynccontextmanager
async def open_hook_reader(
    location: Path | str, *, tenant: str, namespace: str, file_namespace: str
) -> AsyncIterator[HookReader]:
    """The hook reader of ``tenant``'s ``namespace`` in the store at ``location``.

    Args:
        location: A SQLite memory file, or a ``--store`` URL (checked by the caller).
        tenant: The runtime tenant.
        namespace: The tenant's namespace.
        file_namespace: The namespace's name in a SQLite memory file (``tenant/namespace``,
            as ``evermind mcp`` and ``evermind serve`` name it).

    Raises:
        StorageError: The memory file is missing or unreadable, or the store unreachable.
        ConfigError: A bad tenant, namespace or store.
    """
    if isinstance(location, Path):
        from evermind.memory.hook_index import HookIndex

        with HookIndex(location, file_namespace) as index:
            yield HookReader(StubResolver(location, file_namespace), index=index)
        return
    from evermind.memory.shared_memory import shared_memory

    async with shared_memory(location, None, tenant=tenant, namespace=namespace) as store:
        yield HookReader(StubResolver.of(store), store=store)
