"""The port over HTTP: :class:`RestStore` keeps the contract, a :class:`Dialect` speaks the wire.

A dialect says how one REST vector database is spoken to: the request that upserts a batch,
fetches items by id, deletes them, runs a top-``n`` query under a pushed-down filter and the
scope, and how each answer reads back; and which leaves of the filter algebra its filter
language runs exactly (:meth:`Dialect.pushable`, :attr:`Dialect.can_negate`). Everything else
is here, once for every dialect: the port's checks (:mod:`~evermind.vectorstore.port`), the
split of a filter into the pushed part and the residual
(:func:`~evermind.vectorstore.filters.split`), the over-fetch that applies the residual
(:func:`~evermind.vectorstore.filters.residual_top_k`, the one evaluator), the count, and the
one-line errors: an unreachable store or a 5xx / 429 is :class:`StoreUnavailable`, a 401/403
a :class:`StorageError` with ``code="store_unauthorized"``, another 4xx ``code="store_refused"``;
each names the dialect, the store's address (never its key) and the status.

Native-only: httpx.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from evermind.errors import ConfigError, InputError, StorageError, StoreUnavailable
from evermind.vectorstore.filters import (
    Filter,
    evaluate,
    parse_filter,
    residual_top_k,
    split,
)
from evermind.vectorstore.port import (
    AccessScope,
    Hit,
    MetaValue,
    VectorItem,
    check_items,
    check_query,
    check_scope,
    unit,
)
from evermind.vectorstore.rest.dialect import Dialect, Request

__all__ = ["RestStore"]

#: How long one request may take before the store counts as unreachable.
TIMEOUT_S = 30.0
#: The most characters of a store's own error message an error repeats.
_MESSAGE_CHARS = 200


class RestStore:
    """A vector store on a REST database, spoken to through ``dialect``.

    Args:
        dialect: The wire format.
        base_url: The store's address (``https://host``), without credentials: errors
            print it.
        dim: The vectors' dimension.
        transport: An httpx transport (tests); None for the default.
    """

    def __init__(
        self,
        dialect: Dialect,
        base_url: str,
        dim: int,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.dialect = dialect
        self.base_url = base_url
        self.dim = dim
        headers = dialect.headers()
        self._client = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=TIMEOUT_S, transport=transport
        )
        # A store that echoes a header back in its error must not get the key printed.
        words = {w for v in headers.values() for w in (v, v.rsplit(" ", 1)[-1])}
        self._secrets = sorted((w for w in words if len(w) >= 8), key=len, reverse=True)

    @property
    def where(self) -> str:
        """``pinecone store at https://host``: how errors name the store."""
        return f"{self.dialect.name} store at {self.base_url}"

    async def open(self) -> RestStore:
        """Checks the store answers and holds vectors of :attr:`dim`.

        Raises:
            ConfigError: The store holds vectors of another dimension.
            StoreUnavailable, StorageError: As for every call (module docstring).
        """
        try:
            found = self.dialect.dimension(await self._send(self.dialect.describe()))
        except BaseException:
            await self._client.aclose()
            raise
        if found is not None and found != self.dim:
            await self._client.aclose()
            raise ConfigError(
                f"{self.where}: the index holds vectors of dimension {found}, not {self.dim}; "
                "open it with that dim or name another index"
            )
        return self

    async def _send(self, request: Request, *, missing_ok: bool = False) -> Any:
        """The decoded JSON answer to ``request`` (None for an empty one).

        Raises:
            StoreUnavailable: No answer (refused, timed out, cut), a 429 or a 5xx.
            StorageError: A 401/403 (``store_unauthorized``), another 4xx (``store_refused``;
                a 404 is None instead when ``missing_ok``), or an answer that is not JSON.
        """
        what = f"{request.method} {request.path}"
        try:
            params: list[tuple[str, str | int | float | bool | None]] = list(request.params)
            response = await self._client.request(
                request.method, request.path, json=request.json, params=params or None
            )
        except httpx.TimeoutException as err:
            raise StoreUnavailable(
                f"{self.where}: {what} timed out after {TIMEOUT_S:g} s; hint: is it up?"
            ) from err
        except httpx.TransportError as err:
            raise StoreUnavailable(
                f"{self.where}: cannot reach it ({type(err).__name__}: {err}); "
                "hint: is the host right and the store up?"
            ) from err
        status = response.status_code
        if status == 404 and missing_ok:
            return None
        if status >= 400:
            raise self._refusal(response, what)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as err:
            raise StorageError(
                f"{self.where}: {what} answered HTTP {status} with a body that is not JSON"
            ) from err

    def _refusal(self, response: httpx.Response, what: str) -> StorageError:
        status = response.status_code
        said = self._said(response)
        head = f"{self.where}: {what} answered HTTP {status}"
        if status == 401:
            return StorageError(
                f"{head} (the key was refused{said}); hint: set the store's key "
                "(docs/vectorstore.md, REST dialects)",
                code="store_unauthorized",
            )
        if status == 403:
            return StorageError(
                f"{head} (the key may not do this{said})", code="store_unauthorized"
            )
        if status == 429 or status >= 500:
            return StoreUnavailable(f"{head}{said}; retry later")
        return StorageError(f"{head}{said}", code="store_refused")

    def _said(self, response: httpx.Response) -> str:
        """``: <the store's message>`` (cut, the key scrubbed), or empty."""
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if isinstance(body, Mapping):
            inner = body.get("error", body)
            body = inner.get("message", "") if isinstance(inner, Mapping) else inner
        text = " ".join(str(body).split())[:_MESSAGE_CHARS]
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return f": {text}" if text else ""

    async def upsert(self, items: Sequence[VectorItem]) -> None:
        """Inserts or replaces ``items``; a bad item refuses the batch before anything is sent
        (a failure between two requests of a large batch leaves the earlier ones written)."""
        checked = check_items(items, self.dim)
        step = self.dialect.batch
        for start in range(0, len(checked), step):
            await self._send(self.dialect.upsert(checked[start : start + step]))

    async def _fetch(self, ids: Sequence[str]) -> dict[str, dict[str, MetaValue]]:
        found: dict[str, dict[str, MetaValue]] = {}
        step = self.dialect.batch
        for start in range(0, len(ids), step):
            body = await self._send(self.dialect.fetch(ids[start : start + step]))
            found.update(self.dialect.fetched(body))
        return found

    async def delete(self, ids: Sequence[str]) -> int:
        """Removes the items with these ids; returns how many existed."""
        found = list(await self._fetch(list(dict.fromkeys(ids))))
        step = self.dialect.batch
        for start in range(0, len(found), step):
            await self._send(self.dialect.delete(found[start : start + step]))
        return len(found)

    def _split(self, filter: object) -> tuple[Filter | None, Filter | None]:
        return split(
            parse_filter(filter), self.dialect.pushable, can_negate=self.dialect.can_negate
        )

    async def query(
        self,
        vector: Sequence[float],
        k: int,
        filter: object = None,
        scope: AccessScope | None = None,
    ) -> list[Hit]:
        """The ``k`` visible items most similar to ``vector`` that ``filter`` admits, best first.

        Raises:
            InputError: ``k`` above what one query of the store returns.
        """
        checked = check_query(k, scope)
        q = unit(vector, self.dim, f"{self.dialect.name} query")
        pushed, residual = self._split(filter)
        if k > self.dialect.max_top_k:
            raise InputError(
                f"{self.where}: k={k} is more than the {self.dialect.max_top_k} one query "
                "returns; ask for fewer"
            )
        if not checked.principals:  # sees nothing; some stores refuse an empty $in
            return []

        async def fetch(n: int) -> list[Hit]:
            request = self.dialect.query(q, n, pushed, checked, with_metadata=True)
            return self.dialect.hits(await self._send(request))

        hits = await residual_top_k(fetch, k, residual, max_fetch=self.dialect.max_top_k)
        return sorted(hits, key=lambda h: (-h.score, h.id))

    async def count(self, filter: object = None, scope: AccessScope | None = None) -> int:
        """How many items visible to ``scope`` the filter admits.

        The ids come from one query under the pushed filter (any query vector: every match
        is returned up to ``top_k``'s maximum); the residual reads their metadata by id.

        Raises:
            StorageError: More matches than one query returns (``code="count_capped"``).
        """
        checked = check_scope(scope)
        pushed, residual = self._split(filter)
        if not checked.principals:
            return 0
        probe = [1.0] + [0.0] * (self.dim - 1)
        cap = self.dialect.max_top_k
        request = self.dialect.query(probe, cap, pushed, checked, with_metadata=False)
        ids = self.dialect.ids(await self._send(request))
        if len(ids) >= cap:
            raise StorageError(
                f"{self.where}: {len(ids)} or more items match, the most one query returns; "
                "a count stops there (narrow the filter)",
                code="count_capped",
            )
        if residual is None:
            return len(ids)
        found = await self._fetch(ids)
        return sum(evaluate(residual, meta) for meta in found.values())

    async def drop(self) -> None:
        """Removes every item of this store (tests, a user removing a store)."""
        await self._send(self.dialect.drop(), missing_ok=True)

    async def close(self) -> None:
        """Closes the HTTP connections."""
        await self._client.aclose()
