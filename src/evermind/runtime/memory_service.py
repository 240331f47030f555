"""The memory store per tenant and namespace, for the HTTP memory routes (native-only).

Each ``(tenant, namespace)`` is one namespace ``<tenant>/<namespace>`` of the memory store's
SQLite backend in the runtime database; tenants cannot name each other's namespaces because
the tenant part comes from the token, never from the request. The whole database is ONE
connection and one thread (:meth:`SQLiteBackend.view` per namespace), so a flood of new
namespaces costs no file descriptors or threads; the stores kept in memory are bounded per
tenant (a tenant's flood evicts its own least recently used stores, never another's) and
in total. A request may name one of
the tenant's models as the embedder (semantic recall); a request that names none embeds with the
server's default embedder (``evermind serve --embedder base|PATH``, a static embedder) when
there is one, else recalls lexically. Embeddings run on the worker pool.

Nothing a store computes runs on the server's event loop: every store operation (BM25 and
vector ranking, fusion, MMR, index refreshes) runs on one of :data:`LANES` memory threads,
each with an event loop of its own. A namespace always runs on the same lane, so a store's
in-memory indexes are only ever touched by one thread (no locks); the SQLite work still goes
to the database's one thread and embeddings to the worker pool. ``/healthz`` and the other
routes keep answering while recalls rank.

With ``--store URL`` (:class:`~evermind.vectorstore.shared.SharedStore`) each namespace is a
:class:`~evermind.memory.vector_backend.VectorStoreBackend` of the caller's tenant on that
store instead (the tenant is every item's ACL and every read's scope), and every store runs on
the shared store's one lane, where its connection lives. Runtimes on one Postgres see each
other's writes: a store reloads when the namespace's version moves without its own write.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, TypeVar

from evermind.errors import InputError
from evermind.memory import MemoryBackend, MemoryStore
from evermind.memory.sqlite_backend import SQLiteBackend
from evermind.memory.vector_backend import VectorStoreBackend
from evermind.model.inference import Model
from evermind.vectorstore.clock import WriterClock
from evermind.vectorstore.shared import Lane, SharedStore

logger = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "default"
#: Namespace stores (with their in-memory indexes) kept per tenant, least recently used out.
MAX_STORES_PER_TENANT = 32
#: ... and in all (beyond it the least recently used store of any tenant goes).
MAX_STORES = 256
#: Memory threads the stores' work runs on (a namespace always on the same one).
LANES = 4

_T = TypeVar("_T")


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
    """A model (or the default static embedder) as the memory store's embedder, computing on
    the worker pool. ``model`` needs a ``fingerprint`` and ``embed(texts)``."""

    def __init__(self, model: Model | Any, executor: Executor) -> None:
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
        db_path: The runtime database (the embedded default).
        executor: The worker pool embeddings run on.
        shared: With ``--store``: the vector store the memories live in instead (every
            namespace a :class:`VectorStoreBackend` of the caller's tenant, all work on the
            store's lane).
        default_embedder: What embeds when a request names no model (``--embedder``: a
            :class:`~evermind.embedder.static.StaticEmbedder`, or anything with a
            ``fingerprint`` and ``embed(texts)``); None: lexical recall then.
    """

    def __init__(
        self,
        db_path: Path,
        executor: Executor,
        shared: SharedStore | None = None,
        default_embedder: Any = None,
    ) -> None:
        self.db_path = db_path
        self._executor = executor
        self._shared = shared
        self.default_embedder = default_embedder
        self._root: SQLiteBackend | None = None
        #: (tenant, namespace, embedder digest) -> store, least recently used first.
        self._stores: OrderedDict[tuple[str, str, str | None], MemoryStore] = OrderedDict()
        #: (tenant, namespace) -> this process's writer clock there (shared store only).
        self._clocks: OrderedDict[tuple[str, str], WriterClock] = OrderedDict()
        self._lanes: list[Lane] = []

    async def _database(self) -> SQLiteBackend:
        if self._root is None:
            loop = asyncio.get_running_loop()
            root = await loop.run_in_executor(None, SQLiteBackend, self.db_path, "default/-")
            if self._root is None:
                self._root = root
            else:  # pragma: no cover - two first requests raced; keep one connection
                await root.close()
        return self._root

    async def _backend(self, tenant: str, namespace: str) -> MemoryBackend:
        """The namespace's storage: a view of the runtime database, or the shared store's."""
        if self._shared is None:
            return (await self._database()).view(f"{tenant}/{namespace}")
        memory = self._shared.memory
        clock = self._clocks.get((tenant, namespace))
        backend = VectorStoreBackend(
            memory, namespace, tenant=tenant, clock=clock, clocks=self._shared.clocks
        )
        self._clocks[(tenant, namespace)] = backend.clock
        self._clocks.move_to_end((tenant, namespace))
        while len(self._clocks) > 4 * MAX_STORES:  # a later store starts a new clock item
            self._clocks.popitem(last=False)
        return backend

    async def store(self, tenant: str, namespace: str, model: Model | None) -> MemoryStore:
        """The store of ``tenant``'s ``namespace``, embedding with ``model`` (None: the default
        embedder, or lexical only without one)."""
        chosen: Any = self.default_embedder if model is None else model
        digest = None if chosen is None else chosen.fingerprint
        key = (tenant, namespace, digest)
        store = self._stores.get(key)
        if store is None:
            backend = await self._backend(tenant, namespace)
            embedder = None if chosen is None else PoolEmbedder(chosen, self._executor)
            store = MemoryStore(backend, embedder)
            self._stores[key] = store
            self._evict(tenant)
        self._stores.move_to_end(key)
        return store

    async def run(
        self,
        tenant: str,
        namespace: str,
        model: Model | None,
        work: Callable[[MemoryStore], Coroutine[Any, Any, _T]],
    ) -> _T:
        """``await work(store)`` on the namespace's memory thread, off the event loop.

        ``work`` may use nothing but the store it is given (and plain values): it runs on
        another thread and event loop.
        """
        store = await self.store(tenant, namespace, model)
        return await self._lane(tenant, namespace).run(work(store))

    def _lane(self, tenant: str, namespace: str) -> Lane:
        if self._shared is not None:
            return self._shared.lane  # where the store's connection lives
        if not self._lanes:
            self._lanes = [Lane(f"evermind-memory-{n}") for n in range(LANES)]
        name = f"{tenant}/{namespace}".encode("utf-8", "surrogatepass")
        return self._lanes[zlib.crc32(name) % LANES]

    def _evict(self, tenant: str) -> None:
        """Drops least recently used stores: the tenant's own beyond its share, then any."""
        mine = [k for k in self._stores if k[0] == tenant]
        for key in mine[: max(0, len(mine) - MAX_STORES_PER_TENANT)]:
            del self._stores[key]  # a view: nothing to close; in-flight requests keep theirs
        while len(self._stores) > MAX_STORES:
            self._stores.popitem(last=False)

    def stores_held(self, tenant: str | None = None) -> int:
        """How many namespace stores are in memory (of ``tenant``, or in all)."""
        return sum(1 for k in self._stores if tenant is None or k[0] == tenant)

    def forget_model(self, digest: str) -> None:
        """Drops stores that embed with a deleted model."""
        for key in [k for k in self._stores if k[2] == digest]:
            del self._stores[key]

    async def close(self) -> None:
        """Stops the memory threads and closes the database connection."""
        lanes, self._lanes = self._lanes, []
        for lane in lanes:
            await lane.close()
        self._stores.clear()
        if self._root is not None:
            root, self._root = self._root, None
            await root.close()
