"""The Studio's key-value storage port: IndexedDB in the tab, a dict natively (browser-safe).

Both expose ``get``, ``put``, ``delete``, ``get_all`` and ``write`` (puts and deletes in
one transaction) over named stores; the native one lets the handlers run in unit tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from evermind.gpu import IS_BROWSER

DB_NAME = "evermind-studio"
STORES = ("session", "memory", "cache")


class KeyValueStore(Protocol):
    """Async key-value storage with named stores."""

    async def get(self, store: str, key: str) -> Any: ...
    async def put(self, store: str, key: str, value: Any) -> None: ...
    async def delete(self, store: str, key: str) -> None: ...
    async def get_all(self, store: str) -> list[tuple[str, Any]]: ...
    async def write(
        self, store: str, puts: Iterable[tuple[str, Any]] = (), deletes: Iterable[str] = ()
    ) -> None: ...
    async def clear(self, store: str) -> None: ...


class MemoryKV:
    """A :class:`KeyValueStore` in a Python dict (native tests; nothing persists)."""

    def __init__(self, stores: Sequence[str] = STORES) -> None:
        self.data: dict[str, dict[str, Any]] = {s: {} for s in stores}

    async def get(self, store: str, key: str) -> Any:
        return self.data[store].get(key)

    async def put(self, store: str, key: str, value: Any) -> None:
        self.data[store][key] = value

    async def delete(self, store: str, key: str) -> None:
        self.data[store].pop(key, None)

    async def get_all(self, store: str) -> list[tuple[str, Any]]:
        return sorted(self.data[store].items())

    async def write(
        self, store: str, puts: Iterable[tuple[str, Any]] = (), deletes: Iterable[str] = ()
    ) -> None:
        table = self.data[store]
        for key in deletes:
            table.pop(key, None)
        for key, value in puts:
            table[key] = value

    async def clear(self, store: str) -> None:
        self.data[store].clear()


async def open_storage() -> KeyValueStore:
    """IndexedDB in the browser, :class:`MemoryKV` natively."""
    if IS_BROWSER:
        from evermind.studio.idb import IndexedDB

        return await IndexedDB.open(DB_NAME, STORES)
    return MemoryKV()
