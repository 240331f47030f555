"""The lexical arm of the retriever: a port and its two implementations.

A :class:`LexicalArm` answers ``search(text, k, filter, scope)`` with vector-store
:class:`~evermind.vectorstore.Hit` s ranked by word match, and ``term_weight(term)`` (how much
a question's term counts towards the relevance floor's coverage). Like every vector-store
engine it fails closed: no :class:`~evermind.vectorstore.AccessScope`, no answer
(:class:`~evermind.vectorstore.ScopeRequired`), and the scope and filter mask the items
*before* the top ``k`` is cut.

- :class:`BM25Arm`: Okapi BM25 in this process (:class:`evermind.search.bm25.BM25Index`)
  over the same items the dense store holds (give it the items you upsert). It keeps one
  index per tenant, so a tenant's documents never shape another's BM25 scores or term
  weights (IDF and average length are the tenant's own).
- :class:`StoreLexicalArm`: an engine's own lexical query (Postgres + pgvector:
  ``lexical_query``, a ``tsvector`` ranked by ``ts_rank_cd``). Web-search syntax ANDs the
  words, and a question's words are rarely all in the passage that answers it, so the arm
  sends the question's words joined by ``or`` (:func:`any_words`) and lets the rank order
  them. It has no IDF to offer, so every term weighs 1.

Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Sequence
from typing import Protocol

from evermind.errors import ConfigError, InputError
from evermind.search.bm25 import BM25Index
from evermind.search.fusion import top_k
from evermind.vectorstore.filters import evaluate, parse_filter
from evermind.vectorstore.port import (
    AccessScope,
    Hit,
    VectorItem,
    check_field,
    check_query,
    check_scope,
    check_value,
    visible,
)

__all__ = ["BM25Arm", "LexicalArm", "StoreLexicalArm", "any_words"]

_WORD = re.compile(r"\w+(?:[.'-]\w+)*")


class LexicalArm(Protocol):
    """What the retriever needs from a lexical ranker."""

    async def search(
        self, text: str, k: int, filter: object = None, scope: AccessScope | None = None
    ) -> list[Hit]:
        """The ``k`` visible items best matching ``text``, best first (no match: left out)."""
        ...

    def term_weight(self, term: str, scope: AccessScope) -> float:
        """The weight of one content term in the coverage of a question asked by ``scope``
        (> 0)."""
        ...


class BM25Arm:
    """BM25 over items held in this process, with the vector store's ACL and filter rules.

    Args:
        items: Items to index now (the same ones upserted into the dense store).
    """

    def __init__(self, items: Sequence[VectorItem] = ()) -> None:
        self._indexes: dict[str, BM25Index] = {}  # one per tenant: statistics never shared
        self._items: dict[str, VectorItem] = {}
        self.add(items)

    def _index(self, tenant: str) -> BM25Index:
        index = self._indexes.get(tenant)
        if index is None:
            index = self._indexes[tenant] = BM25Index()
        return index

    def __len__(self) -> int:
        return len(self._items)

    def add(self, items: Sequence[VectorItem]) -> None:
        """Indexes (or replaces) ``items``; each needs an ACL, as at a store's upsert.

        Raises:
            InputError: An item without an ACL (``code="acl_required"``), a bad id or
                metadata; nothing of the batch is indexed then.
        """
        checked = [_checked(item) for item in items]
        for item in checked:
            assert item.acl is not None  # _checked refused items without one
            old = self._items.get(item.id)
            if old is not None and old.acl is not None and old.acl.tenant != item.acl.tenant:
                self._index(old.acl.tenant).remove(item.id)  # the id moved to another tenant
            self._items[item.id] = item
            self._index(item.acl.tenant).add(item.id, item.text)

    def remove(self, ids: Sequence[str]) -> int:
        """Drops the items with these ids; returns how many existed."""
        gone = [i for i in dict.fromkeys(ids) if i in self._items]
        for i in gone:
            acl = self._items.pop(i).acl
            assert acl is not None
            self._index(acl.tenant).remove(i)
        return len(gone)

    async def search(
        self, text: str, k: int, filter: object = None, scope: AccessScope | None = None
    ) -> list[Hit]:
        """The ``k`` visible items the filter admits with the highest BM25 for ``text``."""
        checked = check_query(k, scope)
        node = parse_filter(filter)

        def admitted(key: str) -> bool:
            item = self._items[key]
            return (
                item.acl is not None
                and visible(item.acl, checked)
                and evaluate(node, item.metadata)
            )

        hits = []
        index = self._indexes.get(checked.tenant)
        if index is None:
            return []
        for key, score in top_k(index.scores(text), k, admitted):
            item = self._items[key]
            assert item.acl is not None  # _checked refused items without one
            hits.append(Hit(key, score, item.text, dict(item.metadata), item.acl))
        return hits

    def term_weight(self, term: str, scope: AccessScope) -> float:
        """The term's BM25 IDF over the scope's tenant's items (an unseen term weighs the
        most)."""
        return self._index(check_scope(scope).tenant).idf(term)


def _checked(item: object) -> VectorItem:
    if not isinstance(item, VectorItem):
        raise InputError(f"BM25Arm: expected VectorItem, got {type(item).__name__}")
    where = f"BM25Arm: item {item.id!r}"
    if not isinstance(item.id, str) or not item.id:
        raise InputError(f"{where}: the id must be a non-empty string")
    if item.acl is None:
        raise InputError(
            f"{where} has no ACL; every item needs Acl(tenant, principals, sensitivity) "
            "(tenancy fails closed)",
            code="acl_required",
        )
    if not isinstance(item.text, str):
        raise InputError(f"{where}: text must be a string")
    for key, value in item.metadata.items():
        check_field(key)
        check_value(value, f"{where} field {key!r}")
    return item


class _LexicalQuery(Protocol):
    def lexical_query(
        self, text: str, k: int, filter: object = None, scope: AccessScope | None = None
    ) -> Awaitable[list[Hit]]: ...


class StoreLexicalArm:
    """An engine's own lexical query as the retriever's lexical arm (pgvector's tsvector).

    Args:
        store: A store with ``lexical_query(text, k, filter, scope)``
            (:class:`~evermind.vectorstore.pgvector.PgVectorStore`).

    Raises:
        ConfigError: The store has no lexical query (the in-process and Qdrant engines:
            use :class:`BM25Arm`).
    """

    def __init__(self, store: object) -> None:
        query = getattr(store, "lexical_query", None)
        if query is None or not callable(query):
            raise ConfigError(
                f"StoreLexicalArm: {type(store).__name__} has no lexical_query; only the "
                "Postgres engine has one; hint: use BM25Arm(items) for the other engines"
            )
        self._store: _LexicalQuery = store  # type: ignore[assignment]

    async def search(
        self, text: str, k: int, filter: object = None, scope: AccessScope | None = None
    ) -> list[Hit]:
        """The engine's ``lexical_query`` of :func:`any_words` (the engine checks the scope
        and runs the ACL in SQL)."""
        return await self._store.lexical_query(any_words(text), k, filter, scope)

    def term_weight(self, term: str, scope: AccessScope) -> float:
        """1 for every term: the engine exposes no document frequencies."""
        return 1.0


def any_words(text: str) -> str:
    """``text``'s words as a web-search query matching any of them: ``"a or b or c"``.

    Operators of the syntax (``or``, a leading ``-``, quotes) are not passed on.
    """
    words = [w for w in _WORD.findall(text) if w.lower() != "or"]
    return " or ".join(words)
