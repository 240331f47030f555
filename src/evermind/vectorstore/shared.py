"""The vector store a runtime keeps its memory and L2 cache in with ``--store URL`` (native-only).

Without ``--store`` the runtime keeps both in its own SQLite database (``<data>/runtime.db``).
With ``--store postgresql://…`` (or ``qdrant://host:port``) they live in that server instead,
so several runtimes behind a load balancer share memories and cache entries (docs/runtime.md,
"Scale-out"); ``memory://`` keeps them in this process only (tests, throw-away servers).

:class:`SharedStore` owns the engine's connections and the one :class:`Lane` (a thread with an
event loop of its own) every store call runs on: an async driver's connection belongs to the
loop that opened it, so the memory threads and the cache all hand their work to this lane. It
opens, at start-up, the memory table (``evermind_memory``, term signatures of
:data:`~evermind.vectorstore.clock.SIGNATURE_DIM`) and the writer clocks' table
(``evermind_clocks``, so a version read scans only clocks) so a bad URL or an unreachable server
fails ``evermind serve`` before it listens; the cache's one table (``evermind_l2``, items found
by their metadata, whatever their embedding's dimension) opens on first use. Being one table, it
sets no limit one tenant could reach for another: an earlier layout kept a table per dimension,
at most 8 for every tenant together, so one tenant's dimensions refused another's (and the
refusal listed them). Entries an older runtime left in ``evermind_l2_<dim>`` tables are not read:
they are a cache, refilled as questions come.

It lives here, below the runtime (which opens it and keeps memory in it) and the cache
(:mod:`evermind.cache.l2_vectorstore` keeps the L2 in its tables), which both use it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit

from evermind.errors import ConfigError, StorageError
from evermind.vectorstore import STORE_SCHEMES, open_store, redacted
from evermind.vectorstore.clock import SIGNATURE_DIM
from evermind.vectorstore.port import VectorStore

__all__ = [
    "CACHE_TABLE",
    "STORE_SCHEMES",
    "Lane",
    "SharedStore",
    "check_store_url",
    "open_memory_tables",
]

_T = TypeVar("_T")

#: How long start-up waits for the engine.
OPEN_TIMEOUT_S = 60.0
MEMORY_TABLE = "evermind_memory"
#: The writer clocks of memory namespaces and cache scopes (a version read scans only these).
CLOCK_TABLE = "evermind_clocks"
#: The L2 cache's entries, of every tenant and embedding dimension.
CACHE_TABLE = "evermind_l2"


def check_store_url(url: str, *, sqlite_too: bool = False) -> str:
    """Returns ``url`` if ``--store`` can use it.

    Args:
        url: The ``--store`` value.
        sqlite_too: The caller (``evermind mcp``, ``evermind ingest``) also takes a SQLite
            file (a path or ``sqlite:///PATH``) and has handled it before this check; the
            message says so.

    Raises:
        ConfigError: Another scheme (the message names the accepted ones and why the file
            engines are not among them).
    """
    scheme = urlsplit(url).scheme.lower() if isinstance(url, str) else ""
    if scheme not in STORE_SCHEMES:
        shared = (
            "postgresql://… (shared by every process on it), qdrant://host:port or memory:// "
            "(this process only)"
        )
        if sqlite_too:
            message = f"expected a SQLite file (a path or sqlite:///PATH), {shared}"
        else:
            message = (
                f"expected {shared}; without --store the runtime keeps memory and cache in its "
                "own SQLite database, which is what a sqlite:/// store would be"
            )
        raise ConfigError(
            f"--store: {redacted(url)!r} is not a store the runtime can use; {message}",
            code="bad_store_url",
        )
    return url


async def open_memory_tables(url: str) -> tuple[VectorStore, VectorStore]:
    """Opens the memory table and the writer clocks' table at ``url``, on the running loop.

    What :class:`SharedStore` opens on its lane; ``evermind mcp --store`` and ``evermind ingest
    --store`` open them on their own loop (one process, one loop: no lane needed).

    Raises:
        ConfigError: A URL ``--store`` does not take.
        StorageError: The engine cannot be reached (within :data:`OPEN_TIMEOUT_S`).
    """
    check_store_url(url)
    try:
        async with asyncio.timeout(OPEN_TIMEOUT_S):
            # MemoryStore ranks in process: the memory and clock tables need no HNSW index
            # (on the term signatures), whose per-row upkeep bounded bulk writes to ~400
            # memories/s. The memory table keeps its GIN text index: the hooks' prompt recall
            # (specific_text_query) counts lexemes through it (500 ms → 40 ms a prompt at 10⁴
            # memories), and its upkeep costs a bulk load nothing measurable (docs/vectorstore.md).
            memory = await open_store(url, dim=SIGNATURE_DIM, name=MEMORY_TABLE, vector_index=False)
            try:
                return memory, await open_store(
                    url,
                    dim=SIGNATURE_DIM,
                    name=CLOCK_TABLE,
                    vector_index=False,
                    text_index=False,
                )
            except BaseException:
                await memory.close()
                raise
    except TimeoutError as err:
        engine = urlsplit(url).scheme.lower()
        raise StorageError(
            f"--store: the {engine} store did not answer within {OPEN_TIMEOUT_S:g} s; "
            "hint: is the server up and the URL's host and port right?"
        ) from err


class Lane:
    """A thread running an event loop of its own; work handed to it runs there."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    async def run(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Runs ``work`` on this lane; cancelling the caller cancels it there too."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.loop))

    def run_blocking(self, work: Coroutine[Any, Any, _T], timeout_s: float) -> _T:
        """Runs ``work`` on this lane from code outside any event loop and waits for it."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout=timeout_s)

    async def close(self) -> None:
        """Cancels what still runs here, then stops the thread."""

        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        await self.run(drain())
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self.loop.close()


class SharedStore:
    """The engine at ``url``, opened on a lane of its own.

    Args:
        url: A ``--store`` URL (see :func:`check_store_url`).

    Raises:
        ConfigError: A URL ``--store`` does not take, or a table of another dimension.
        StorageError: The engine cannot be reached (within :data:`OPEN_TIMEOUT_S`).
    """

    def __init__(self, url: str) -> None:
        self.url = check_store_url(url)
        self.lane = Lane("evermind-store")
        self._cache_table: VectorStore | None = None
        try:
            self.memory, self.clocks = self.lane.run_blocking(self._open(), OPEN_TIMEOUT_S)
        except concurrent.futures.TimeoutError as err:
            self.lane.loop.call_soon_threadsafe(self.lane.loop.stop)
            raise StorageError(
                f"--store: the {self.engine} store did not answer within {OPEN_TIMEOUT_S:g} s; "
                "hint: is the server up and the URL's host and port right?"
            ) from err
        except BaseException:
            self.lane.loop.call_soon_threadsafe(self.lane.loop.stop)
            raise

    async def _open(self) -> tuple[VectorStore, VectorStore]:
        return await open_memory_tables(self.url)

    @property
    def engine(self) -> str:
        """The URL's scheme (what the startup line prints; never the credentials)."""
        return urlsplit(self.url).scheme.lower()

    async def run(self, work: Coroutine[Any, Any, _T]) -> _T:
        """``await work`` on the store's lane (where its connections live)."""
        return await self.lane.run(work)

    async def cache_table(self) -> VectorStore:
        """The L2's table (call on the lane): items of :data:`SIGNATURE_DIM` vectors, the
        entries' own embeddings (any dimension) in their metadata."""
        if self._cache_table is None:
            self._cache_table = await open_store(self.url, dim=SIGNATURE_DIM, name=CACHE_TABLE)
        return self._cache_table

    async def close(self) -> None:
        """Closes every table and stops the lane."""

        async def shut() -> None:
            tables = [self.memory, self.clocks]
            if self._cache_table is not None:
                tables.append(self._cache_table)
            for table in tables:
                await table.close()
            self._cache_table = None

        await self.lane.run(shut())
        await self.lane.close()
