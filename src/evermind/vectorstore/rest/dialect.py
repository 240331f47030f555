"""What a REST dialect is: the requests it builds and the answers it reads (standard library only).

:class:`~evermind.vectorstore.rest.store.RestStore` keeps the port's contract over HTTP; a
:class:`Dialect` says how one vector database is spoken to: the request that upserts a batch,
fetches items by id, deletes them, runs a top-``n`` query under a pushed-down filter and the
scope, and how each answer reads back; and which leaves of the filter algebra its filter
language runs exactly (:meth:`Dialect.pushable`, :attr:`Dialect.can_negate`), the rest being
the residual the store applies after an over-fetch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from evermind.vectorstore.filters import Filter, Leaf
from evermind.vectorstore.port import AccessScope, Hit, MetaValue, VectorItem

__all__ = ["Dialect", "Request", "dumps"]


@dataclass(frozen=True)
class Request:
    """One HTTP request a dialect asks for (``path`` below the store's base URL)."""

    method: str
    path: str
    json: Any = None
    params: list[tuple[str, str]] = field(default_factory=list)


class Dialect(Protocol):
    """How one REST vector database is spoken to (see the module docstring)."""

    #: The name errors and docs use (``pinecone``).
    name: str
    #: The most matches one query returns (``top_k``'s maximum).
    max_top_k: int
    #: The most items one upsert, fetch or delete request carries.
    batch: int
    #: Whether the filter language negates exactly (absent fields included).
    can_negate: bool

    def headers(self) -> dict[str, str]:
        """Headers every request carries (the API key among them)."""
        ...

    def pushable(self, leaf: Leaf) -> bool:
        """Whether the store's filter language runs ``leaf`` exactly."""
        ...

    def describe(self) -> Request:
        """A request whose answer tells the store's vector dimension."""
        ...

    def dimension(self, body: Any) -> int | None:
        """The dimension from :meth:`describe`'s answer (None: the store has none yet)."""
        ...

    def upsert(self, items: Sequence[VectorItem]) -> Request:
        """Writes ``items`` (checked, unit length, at most :attr:`batch`)."""
        ...

    def fetch(self, ids: Sequence[str]) -> Request:
        """Reads the items with these ids (at most :attr:`batch`)."""
        ...

    def fetched(self, body: Any) -> dict[str, dict[str, MetaValue]]:
        """``{id: metadata}`` of the items :meth:`fetch`'s answer holds."""
        ...

    def delete(self, ids: Sequence[str]) -> Request:
        """Removes the items with these ids (at most :attr:`batch`)."""
        ...

    def query(
        self,
        vector: Sequence[float],
        n: int,
        pushed: Filter | None,
        scope: AccessScope,
        with_metadata: bool,
    ) -> Request:
        """The ``n`` items nearest ``vector`` that the scope sees and ``pushed`` admits."""
        ...

    def hits(self, body: Any) -> list[Hit]:
        """The matches of :meth:`query`'s answer (asked ``with_metadata``), best first."""
        ...

    def ids(self, body: Any) -> list[str]:
        """The matched ids of :meth:`query`'s answer (asked without metadata)."""
        ...

    def drop(self) -> Request:
        """Removes every item of this store (its namespace), not the index."""
        ...


def dumps(value: object) -> str:
    """Compact, key-sorted JSON (what dialects store a metadata copy as)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
