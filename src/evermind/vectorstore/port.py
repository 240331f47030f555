"""The vector-store port: items with an ACL, the access scope, and the contract every engine keeps.

A :class:`VectorStore` holds :class:`VectorItem` s (an id, a vector, the text, flat metadata and
an :class:`Acl`) of one dimension and answers :meth:`~VectorStore.query` (the ``k`` items most
similar by cosine that a :class:`~evermind.vectorstore.filters.Filter` admits) and
:meth:`~VectorStore.count`. Every engine (in-process, Postgres + pgvector, Qdrant) keeps the
same contract, checked by one shared test suite.

Tenancy fails closed: a query or count without an :class:`AccessScope` raises
:class:`ScopeRequired`; an item without an ACL is refused at upsert. An item is visible to a
scope when its tenant is the scope's, its principals intersect the scope's, and its
sensitivity is at most the scope's maximum. Each engine enforces that inside its own query
(SQL, a Qdrant filter, the in-process mask), never only after.

The validation here is shared by every engine, so all of them refuse the same bad input with
the same error. Browser-safe: standard library only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from evermind.errors import AccessError, InputError, ShapeError

__all__ = [
    "AccessScope",
    "Acl",
    "Hit",
    "MetaValue",
    "ScopeRequired",
    "VectorItem",
    "VectorStore",
    "check_field",
    "check_items",
    "check_query",
    "check_scope",
    "unit",
    "visible",
]

#: A metadata value: flat scalars only, so every engine compares them the same way.
MetaValue = str | int | float | bool

#: Metadata keys (and filter fields): an identifier, so every engine can address it as a path.
FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
#: Integers beyond this lose precision in engines that keep numbers as doubles (Qdrant).
MAX_SAFE_INT = 2**53
MAX_ID_CHARS = 512


class ScopeRequired(AccessError):
    """A query or count came without an :class:`AccessScope`; nothing is served without one."""

    code = "scope_required"


@dataclass(frozen=True)
class Acl:
    """Who may see an item.

    Attributes:
        tenant: The tenant that owns the item; no other tenant ever sees it.
        principals: Users, groups or roles allowed to see it (at least one).
        sensitivity: Its level, 0 (public within the tenant) and up; a scope sees it only
            when its ``max_sensitivity`` is at least this.
    """

    tenant: str
    principals: frozenset[str]
    sensitivity: int = 0


@dataclass(frozen=True)
class AccessScope:
    """Who is asking: a query sees only items whose ACL admits this scope.

    Attributes:
        tenant: The caller's tenant.
        principals: The caller's user, groups and roles.
        max_sensitivity: The highest sensitivity level the caller may read.
    """

    tenant: str
    principals: frozenset[str]
    max_sensitivity: int = 0


@dataclass(frozen=True)
class VectorItem:
    """One stored item (a chunk, a memory).

    Attributes:
        id: Unique within the store; upserting the same id replaces the item.
        vector: Its embedding (``dim`` finite floats, not all zero).
        text: The text it embeds (the lexical arm searches it).
        metadata: Flat ``{field: str | int | float | bool}``; filters read it.
        acl: Who may see it; None is refused at upsert (tenancy fails closed).
    """

    id: str
    vector: Sequence[float]
    text: str = ""
    metadata: Mapping[str, MetaValue] = field(default_factory=dict)
    acl: Acl | None = None


@dataclass(frozen=True)
class Hit:
    """One query result: the item and its cosine similarity to the query (higher is closer)."""

    id: str
    score: float
    text: str
    metadata: dict[str, MetaValue]
    acl: Acl


class VectorStore(Protocol):
    """The port every engine implements (all calls are coroutines)."""

    dim: int

    async def upsert(self, items: Sequence[VectorItem]) -> None:
        """Inserts or replaces ``items`` (all or none: a bad item refuses the batch)."""
        ...

    async def delete(self, ids: Sequence[str]) -> int:
        """Removes the items with these ids; returns how many existed."""
        ...

    async def query(
        self,
        vector: Sequence[float],
        k: int,
        filter: object = None,
        scope: AccessScope | None = None,
    ) -> list[Hit]:
        """The ``k`` visible items most similar to ``vector`` that ``filter`` admits, best first."""
        ...

    async def count(self, filter: object = None, scope: AccessScope | None = None) -> int:
        """How many items visible to ``scope`` the filter admits."""
        ...

    async def close(self) -> None:
        """Releases connections and files; the store is unusable afterwards."""
        ...


def check_field(name: object) -> str:
    """Returns ``name`` if it is a valid metadata field, else raises :class:`InputError`."""
    if not isinstance(name, str) or not FIELD_RE.match(name):
        raise InputError(
            f"vector store: metadata field {name!r} is not an identifier; expected letters, "
            "digits and '_' (64 at most), not starting with a digit",
            code="bad_field",
        )
    return name


def check_value(value: object, where: str) -> MetaValue:
    """Returns ``value`` if it is a flat metadata value, else raises :class:`InputError`."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INT:
            raise InputError(f"{where}: integer {value} is beyond ±2**53", code="bad_value")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{where}: {value} is not a finite number", code="bad_value")
        return value
    raise InputError(
        f"{where}: {type(value).__name__} {value!r} is not a metadata value; "
        "expected str, int, float or bool (flat values only)",
        code="bad_value",
    )


def unit(vector: Sequence[float], dim: int, what: str) -> tuple[float, ...]:
    """``vector`` checked (``dim`` finite floats, not all zero) and scaled to length 1.

    Raises:
        ShapeError: Wrong length.
        InputError: A NaN or infinite component, or a zero vector (cosine is undefined).
    """
    try:
        values = tuple(map(float, vector))
    except (TypeError, ValueError) as err:
        raise InputError(f"{what}: the vector is not a sequence of numbers ({err})") from err
    if len(values) != dim:
        raise ShapeError(
            f"{what}: the vector has {len(values)} dimensions but the store holds {dim}; "
            "embed with the store's embedder or open a store of that dimension"
        )
    if not all(map(math.isfinite, values)):
        raise InputError(f"{what}: the vector holds NaN or infinity", code="bad_vector")
    norm = math.sqrt(math.fsum(x * x for x in values))
    if norm == 0.0:
        raise InputError(f"{what}: the vector is all zeros; cosine is undefined", code="bad_vector")
    return tuple(x / norm for x in values)


def check_items(items: Iterable[VectorItem], dim: int) -> list[VectorItem]:
    """The batch, each item checked (id, vector, metadata, ACL) and its vector made unit length.

    Raises:
        InputError: A missing ACL (``code="acl_required"``), an id twice in the batch, a bad
            id, metadata or vector.
        ShapeError: A vector of the wrong dimension.
    """
    out: list[VectorItem] = []
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, VectorItem):
            raise InputError(f"vector store: expected VectorItem, got {type(item).__name__}")
        where = f"vector store: item {item.id!r}"
        if not isinstance(item.id, str) or not item.id or len(item.id) > MAX_ID_CHARS:
            raise InputError(f"{where}: the id must be a non-empty string of ≤{MAX_ID_CHARS}")
        if item.acl is None:
            raise InputError(
                f"{where} has no ACL; every item needs Acl(tenant, principals, sensitivity) "
                "(tenancy fails closed)",
                code="acl_required",
            )
        _check_acl(item.acl, where)
        if not isinstance(item.text, str):
            raise InputError(f"{where}: text must be a string")
        if item.id in seen:
            raise InputError(
                f"{where} appears twice in one batch; send each id once (the later one wins "
                "only across batches)",
                code="duplicate_id",
            )
        seen.add(item.id)
        meta = {
            check_field(k): check_value(v, f"{where} field {k!r}") for k, v in item.metadata.items()
        }
        vector = unit(item.vector, dim, where)
        out.append(VectorItem(item.id, vector, item.text, meta, item.acl))
    return out


def _check_acl(acl: Acl, where: str) -> None:
    if not isinstance(acl, Acl):
        raise InputError(
            f"{where}: acl must be an Acl, got {type(acl).__name__}", code="acl_required"
        )
    if not isinstance(acl.tenant, str) or not acl.tenant:
        raise InputError(f"{where}: the ACL's tenant must be a non-empty string")
    if not acl.principals or not all(isinstance(p, str) and p for p in acl.principals):
        raise InputError(
            f"{where}: the ACL names no principals (nobody could ever see it); "
            "give at least one user, group or role",
            code="acl_required",
        )
    if (
        isinstance(acl.sensitivity, bool)
        or not isinstance(acl.sensitivity, int)
        or acl.sensitivity < 0
    ):
        raise InputError(f"{where}: sensitivity must be an int ≥ 0, got {acl.sensitivity!r}")


def check_scope(scope: object) -> AccessScope:
    """Returns ``scope`` if it is a usable :class:`AccessScope`.

    Raises:
        ScopeRequired: None, or not an AccessScope.
        InputError: An empty tenant or a bad sensitivity.
    """
    if scope is None:
        raise ScopeRequired(
            "vector store: a query or count needs an AccessScope(tenant, principals, "
            "max_sensitivity); nothing is served without one"
        )
    if not isinstance(scope, AccessScope):
        raise ScopeRequired(
            f"vector store: scope must be an AccessScope, got {type(scope).__name__}"
        )
    if not isinstance(scope.tenant, str) or not scope.tenant:
        raise InputError("vector store: the scope's tenant must be a non-empty string")
    if isinstance(scope.max_sensitivity, bool) or not isinstance(scope.max_sensitivity, int):
        raise InputError(
            f"vector store: max_sensitivity must be an int, got {scope.max_sensitivity!r}"
        )
    if not all(isinstance(p, str) for p in scope.principals):
        raise InputError("vector store: the scope's principals must be strings")
    return scope


def check_query(k: object, scope: object) -> AccessScope:
    """Checks a query's ``k`` (an int ≥ 1) and scope; returns the scope."""
    checked = check_scope(scope)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"vector store: k must be an int ≥ 1, got {k!r}")
    return checked


def visible(acl: Acl, scope: AccessScope) -> bool:
    """Whether ``scope`` may see an item with ``acl`` (the rule every engine implements)."""
    return (
        acl.tenant == scope.tenant
        and not acl.principals.isdisjoint(scope.principals)
        and acl.sensitivity <= scope.max_sensitivity
    )
