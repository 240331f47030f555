"""``SyncMemoryStore``: a blocking wrapper of ``MemoryStore`` for scripts (native only).

It owns a private event loop (``asyncio.Runner``) and runs each call to completion on it, so a
script can write ``store.remember(...)`` without ``asyncio``. Do not use it inside a running
event loop; use ``MemoryStore`` there.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from evermind.errors import ConfigError
from evermind.memory.backend import MemoryBackend
from evermind.memory.records import Hit, MemoryRecord
from evermind.memory.store import MemoryStore


class SyncMemoryStore:
    """The ``MemoryStore`` API, blocking. Arguments are those of ``MemoryStore``.

    Use as a context manager, or call ``close()``.
    """

    def __init__(
        self,
        backend: MemoryBackend | str | os.PathLike[str],
        embedder: Any = None,
        **kwargs: Any,
    ) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise ConfigError(
                "SyncMemoryStore: called inside a running event loop; "
                "hint: use 'await MemoryStore(...)' methods there instead"
            )
        self._runner = asyncio.Runner()
        self.store = MemoryStore(backend, embedder, **kwargs)

    def remember(
        self,
        key: str,
        content: str,
        tags: Iterable[str] = (),
        importance: float = 0.5,
        ttl: float | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> MemoryRecord:
        """See ``MemoryStore.remember`` (``ttl`` in seconds)."""
        return self._runner.run(self.store.remember(key, content, tags, importance, ttl, meta=meta))

    def get(self, key: str) -> MemoryRecord | None:
        """See ``MemoryStore.get``."""
        return self._runner.run(self.store.get(key))

    def recall(self, query: str, top_k: int = 5, tags: Iterable[str] | None = None) -> list[Hit]:
        """See ``MemoryStore.recall``."""
        return self._runner.run(self.store.recall(query, top_k, tags))

    def recall_by_tag(self, tag: str, limit: int = 20) -> list[MemoryRecord]:
        """See ``MemoryStore.recall_by_tag``."""
        return self._runner.run(self.store.recall_by_tag(tag, limit))

    def forget(self, key: str) -> bool:
        """See ``MemoryStore.forget``."""
        return self._runner.run(self.store.forget(key))

    def recent(self, n: int = 10) -> list[MemoryRecord]:
        """See ``MemoryStore.recent``."""
        return self._runner.run(self.store.recent(n))

    def export(self) -> list[dict[str, Any]]:
        """See ``MemoryStore.export``."""
        return self._runner.run(self.store.export())

    def import_(
        self,
        entries: Iterable[Mapping[str, Any]],
        mode: Literal["merge", "overwrite"] = "merge",
    ) -> int:
        """See ``MemoryStore.import_``."""
        return self._runner.run(self.store.import_(entries, mode))

    def purge_expired(self) -> int:
        """See ``MemoryStore.purge_expired``."""
        return self._runner.run(self.store.purge_expired())

    def count(self) -> int:
        """See ``MemoryStore.count``."""
        return self._runner.run(self.store.count())

    def close(self) -> None:
        """Closes the store and its event loop."""
        try:
            self._runner.run(self.store.close())
        finally:
            self._runner.close()

    def __enter__(self) -> SyncMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
