"""The tenants' vector collections the ``/v1/vectors`` routes serve (native-only).

Each (tenant, collection) is its own embedded store (:class:`~evermind.vectorstore.inprocess.
InProcessStore`, exact cosine), written through to ``<data>/vectors/<tenant digest>/
<collection>.<dim>.db``: tenants never share a file, so one tenant's names, dimensions or ids
cannot touch another's, and every item's ACL tenant is the caller's. Limits keep one tenant
from filling the server: :data:`MAX_COLLECTIONS` per tenant, :data:`MAX_DIM`, and
:data:`MAX_FLOATS` (items × dimension) per collection. Every store call runs on one
:class:`~evermind.vectorstore.shared.Lane` (a thread of its own), never on the event loop.
The collections live in this process's data folder: runtimes behind a load balancer do not
share them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from evermind.errors import ConfigError, InputError, NotFound
from evermind.vectorstore.inprocess import InProcessStore
from evermind.vectorstore.shared import Lane

__all__ = ["MAX_COLLECTIONS", "MAX_DIM", "MAX_FLOATS", "VectorCollections", "check_collection"]

_T = TypeVar("_T")
MAX_COLLECTIONS = 8
MAX_DIM = 4096
#: Items × dimension one collection may hold (10⁷ floats: 40 MB in memory).
MAX_FLOATS = 10_000_000
COLLECTION_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")


def check_collection(name: str) -> str:
    """Returns ``name`` if it is a collection name, else raises :class:`InputError`."""
    if not COLLECTION_RE.match(name):
        raise InputError(
            f"vectors: collection {name[:70]!r} is not a name; expected 1-64 letters, digits, "
            "'_' or '-', not starting with '-'",
            code="invalid_collection",
        )
    return name


class VectorCollections:
    """Every tenant's collections under ``root``; opened on first use, closed by :meth:`close`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lane: Lane | None = None
        self._stores: dict[tuple[str, str], InProcessStore] = {}

    async def run(self, work: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """``await work()`` on the collections' lane."""
        if self._lane is None:
            self._lane = Lane("evermind-vectors")
        return await self._lane.run(work())

    def _folder(self, tenant: str) -> Path:
        return self.root / hashlib.sha256(tenant.encode()).hexdigest()[:32]

    def _file(self, tenant: str, collection: str) -> Path | None:
        found = sorted(self._folder(tenant).glob(f"{collection}.*.db"))
        return found[0] if found else None

    def dim(self, tenant: str, collection: str) -> int | None:
        """(On the lane.) The collection's dimension, None when it does not exist."""
        store = self._stores.get((tenant, collection))
        if store is not None:
            return store.dim
        path = self._file(tenant, collection)
        return None if path is None else int(path.name.rsplit(".", 2)[1])

    async def store(self, tenant: str, collection: str, dim: int | None = None) -> InProcessStore:
        """(On the lane.) The tenant's collection, created with ``dim`` when given and missing.

        Raises:
            NotFound: No such collection (and no ``dim`` to create it).
            ConfigError: It exists with another dimension.
            InputError: A bad ``dim``, or the tenant holds :data:`MAX_COLLECTIONS` already.
        """
        key = (tenant, check_collection(collection))
        have = self.dim(tenant, collection)
        if have is None and dim is None:
            raise NotFound(
                f"vectors: no collection {collection!r}; upsert into it to create it",
                code="collection_not_found",
            )
        if dim is not None and have is not None and dim != have:
            raise ConfigError(
                f"vectors: collection {collection!r} holds vectors of dimension {have}, not "
                f"{dim}; send {have}-dimensional vectors or use another collection",
                code="dimension_mismatch",
            )
        if have is None:
            assert dim is not None
            if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_DIM:
                raise InputError(f"vectors: dim must be an int in 1..{MAX_DIM}, got {dim!r}")
            folder = self._folder(tenant)
            held = len(list(folder.glob("*.db"))) if folder.is_dir() else 0
            if held >= MAX_COLLECTIONS:
                raise InputError(
                    f"vectors: the tenant holds {held} collections, the most allowed; drop one "
                    "first",
                    code="too_many_collections",
                )
        store = self._stores.get(key)
        if store is None:
            size = have if have is not None else dim
            assert size is not None
            path = self._folder(tenant) / f"{collection}.{size}.db"
            store = self._stores[key] = InProcessStore(size, path)
        return store

    async def room_for(self, store: InProcessStore, new: int) -> None:
        """(On the lane.) Refuses ``new`` more items past :data:`MAX_FLOATS`."""
        if (len(store) + new) * store.dim > MAX_FLOATS:
            raise InputError(
                f"vectors: the collection would hold {len(store) + new} vectors of dimension "
                f"{store.dim}, over the limit of {MAX_FLOATS} numbers; delete some or use "
                "another collection",
                code="collection_full",
            )

    async def drop(self, tenant: str, collection: str) -> bool:
        """(On the lane.) Deletes the collection; False when there was none."""
        check_collection(collection)
        store = self._stores.pop((tenant, collection), None)
        if store is not None:
            await store.close()
        path = self._file(tenant, collection)
        if path is None:
            return False
        for extra in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            extra.unlink(missing_ok=True)
        return True

    async def close(self) -> None:
        """Closes every store and stops the lane."""
        if self._lane is None:
            return

        async def shut() -> None:
            for store in self._stores.values():
                await store.close()
            self._stores.clear()

        await self._lane.run(shut())
        await self._lane.close()
        self._lane = None
