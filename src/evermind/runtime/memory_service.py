"""The memory store per tenant and namespace, for the HTTP memory routes (native-only).

Each ``(tenant, namespace)`` is one namespace ``<tenant>/<namespace>`` of the memory store's
SQLite backend in the runtime database; tenants cannot name each other's namespaces because
the tenant part comes from the token, never from the request. A request may name one of
the tenant's models as the embedder (semantic recall); embeddings run on the worker pool.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from evermind.errors import InputError
from evermind.memory import MemoryStore
from evermind.memory.sqlite_backend import SQLiteBackend
from evermind.model.inference import Model

logger = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "default"
#: Open SQLite backends kept at once; the least recently used is closed after a grace time.
MAX_BACKENDS = 64
CLOSE_GRACE_S = 60.0


def check_namespace(namespace: str | None) -> str:
    """The namespace a request names (``default`` when it names none).

    Raises:
        InputError: An empty namespace, or one with control characters.
    """
    if namespace is None:
        return DEFAULT_NAMESPACE
    if not namespace or len(namespace) > 256 or not namespace.isprintable():
        raise InputError(
            f"namespace: expected 1-256 printable characters, got {namespace[:40]!r}",
            code="invalid_namespace",
        )
    return namespace


class PoolEmbedder:
    """A model as the memory store's embedder, computing on the worker pool."""

    def __init__(self, model: Model, executor: Executor) -> None:
        self.fingerprint = model.fingerprint
        self._model = model
        self._executor = executor

    async def embed(self, texts: Sequence[str]) -> Any:
        """Embeds ``texts`` off the event loop; (N, D) float32, L2-normalised."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._model.embed, list(texts))


class MemoryService:
    """Opens and caches :class:`MemoryStore` objects per tenant, namespace and embedder.

    Args:
        db_path: The runtime database.
        executor: The worker pool embeddings run on.
    """

    def __init__(self, db_path: Path, executor: Executor) -> None:
        self.db_path = db_path
        self._executor = executor
        self._backends: OrderedDict[str, SQLiteBackend] = OrderedDict()
        self._stores: dict[tuple[str, str | None], MemoryStore] = {}

    async def store(self, tenant: str, namespace: str, model: Model | None) -> MemoryStore:
        """The store of ``tenant``'s ``namespace``, embedding with ``model`` (or lexical only)."""
        scope = f"{tenant}/{namespace}"
        backend = self._backends.get(scope)
        if backend is None:
            loop = asyncio.get_running_loop()
            backend = await loop.run_in_executor(None, SQLiteBackend, self.db_path, scope)
            self._backends[scope] = backend
            self._evict()
        self._backends.move_to_end(scope)
        digest = None if model is None else model.fingerprint
        key = (scope, digest)
        store = self._stores.get(key)
        if store is None:
            embedder = None if model is None else PoolEmbedder(model, self._executor)
            store = MemoryStore(backend, embedder)
            self._stores[key] = store
        return store

    def _evict(self) -> None:
        while len(self._backends) > MAX_BACKENDS:
            scope, backend = self._backends.popitem(last=False)
            for key in [k for k in self._stores if k[0] == scope]:
                del self._stores[key]
            # In-flight requests may still hold the backend: close it a little later.
            asyncio.get_running_loop().call_later(CLOSE_GRACE_S, _close_later, backend)

    def forget_model(self, digest: str) -> None:
        """Drops stores that embed with a deleted model."""
        for key in [k for k in self._stores if k[1] == digest]:
            del self._stores[key]

    async def close(self) -> None:
        """Closes every backend."""
        self._stores.clear()
        while self._backends:
            _, backend = self._backends.popitem()
            await backend.close()


_closing: set[asyncio.Task[None]] = set()


def _close_later(backend: SQLiteBackend) -> None:
    task = asyncio.get_running_loop().create_task(backend.close())
    _closing.add(task)  # keep a reference until it finishes
    task.add_done_callback(_closing.discard)
