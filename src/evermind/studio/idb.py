"""IndexedDB from Python in the tab: a small async key-value API (browser-only module).

Stores use out-of-line keys. Values are JSON-like dicts/lists/strings/numbers and
``bytes`` (stored as Uint8Array, read back as ``bytes``). Each method is one transaction
and waits for its ``complete`` event, so a write returned is a write committed. All
requests of a transaction are issued before the first await: IndexedDB commits a
transaction as soon as the event loop is idle, so awaiting between requests would end it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from js import Object, Uint8Array, indexedDB
from pyodide.ffi import JsProxy, create_proxy, to_js

from evermind.errors import StorageError


def _to_js(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return Uint8Array.new(to_js(bytes(value)))
    if isinstance(value, dict):
        return Object.fromEntries(to_js([[k, _to_js(v)] for k, v in value.items()]))
    if isinstance(value, list | tuple):
        return to_js([_to_js(v) for v in value])
    return value


def _to_py(value: Any) -> Any:
    if isinstance(value, JsProxy):
        if value.constructor.name == "Uint8Array":
            return bytes(value.to_bytes())
        if value.constructor.name == "Array":
            return [_to_py(v) for v in value]
        return {str(entry[0]): _to_py(entry[1]) for entry in Object.entries(value)}
    if isinstance(value, memoryview):
        return value.tobytes()
    return value


def _watch(js_target: Any, ok: str, fail: str, what: str) -> asyncio.Future[Any]:
    """Attaches ``ok``/``fail`` handlers *now* and returns the future they settle.

    Attach before any await: an IDB request whose event fired with no handler attached is
    never reported again (two requests of one transaction must both be watched first).
    """
    loop = asyncio.get_event_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def on_ok(_event: Any) -> None:
        if not future.done():
            future.set_result(getattr(js_target, "result", None))

    def on_fail(_event: Any) -> None:
        if not future.done():
            error = getattr(js_target, "error", None)
            future.set_exception(StorageError(f"IndexedDB {what} failed: {error}"))

    js_ok, js_fail = create_proxy(on_ok), create_proxy(on_fail)
    setattr(js_target, ok, js_ok)
    setattr(js_target, fail, js_fail)

    def release(_future: asyncio.Future[Any]) -> None:
        js_ok.destroy()
        js_fail.destroy()

    future.add_done_callback(release)
    return future


async def _done(js_target: Any, ok: str, fail: str, what: str) -> Any:
    """Waits for ``ok``/``fail`` (e.g. onsuccess/onerror) on an IDB request or transaction."""
    return await _watch(js_target, ok, fail, what)


class IndexedDB:
    """One open IndexedDB database."""

    def __init__(self, js_db: Any, name: str) -> None:
        self.js_db = js_db
        self.name = name

    @classmethod
    async def open(cls, name: str, stores: Sequence[str], version: int = 1) -> IndexedDB:
        """Opens (creating or upgrading) database ``name`` with object ``stores``."""
        js_request = indexedDB.open(name, version)

        def upgrade(_event: Any) -> None:
            js_db = js_request.result
            for store in stores:
                if not js_db.objectStoreNames.contains(store):
                    js_db.createObjectStore(store)

        js_upgrade = create_proxy(upgrade)
        js_request.onupgradeneeded = js_upgrade
        try:
            js_db = await _done(js_request, "onsuccess", "onerror", f"open {name!r}")
        finally:
            js_upgrade.destroy()
        return cls(js_db, name)

    async def get(self, store: str, key: str) -> Any:
        """The value under ``key``, or None."""
        js_tx = self.js_db.transaction(store, "readonly")
        js_request = js_tx.objectStore(store).get(key)
        return _to_py(await _done(js_request, "onsuccess", "onerror", f"get {store}/{key}"))

    async def get_all(self, store: str) -> list[tuple[str, Any]]:
        """Every (key, value) of ``store``, in key order."""
        js_tx = self.js_db.transaction(store, "readonly")
        js_store = js_tx.objectStore(store)
        js_keys, js_values = js_store.getAllKeys(), js_store.getAll()
        # Both watched before the first await: the values' success fires right after the keys'.
        keys_done = _watch(js_keys, "onsuccess", "onerror", f"keys of {store}")
        values_done = _watch(js_values, "onsuccess", "onerror", f"values of {store}")
        keys, values = await keys_done, await values_done
        return [(str(k), _to_py(v)) for k, v in zip(keys, values, strict=True)]

    async def write(
        self, store: str, puts: Iterable[tuple[str, Any]] = (), deletes: Iterable[str] = ()
    ) -> None:
        """Puts and deletes in ONE transaction; returns once it has committed."""
        js_tx = self.js_db.transaction(store, "readwrite")
        js_store = js_tx.objectStore(store)
        for key in deletes:
            js_store.delete(key)
        for key, value in puts:
            js_store.put(_to_js(value), key)
        await _done(js_tx, "oncomplete", "onerror", f"write to {store}")

    async def put(self, store: str, key: str, value: Any) -> None:
        """Stores ``value`` under ``key`` (one committed transaction)."""
        await self.write(store, puts=[(key, value)])

    async def delete(self, store: str, key: str) -> None:
        """Deletes ``key`` (one committed transaction)."""
        await self.write(store, deletes=[key])

    async def clear(self, store: str) -> None:
        """Deletes everything in ``store``."""
        js_tx = self.js_db.transaction(store, "readwrite")
        js_tx.objectStore(store).clear()
        await _done(js_tx, "oncomplete", "onerror", f"clear {store}")
