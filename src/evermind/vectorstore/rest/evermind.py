"""The evermind dialect: an Evermind runtime's ``/v1/vectors/{collection}`` routes as a store.

The port's ``name`` is the collection; the runtime scopes it to the token's tenant: an item's
ACL tenant and a scope's tenant are sent, and the runtime refuses either when it is not the
token's (a ``store_unauthorized`` 403), so nothing is re-tenanted. The filter goes over whole in
the algebra's JSON form (:func:`~evermind.vectorstore.filters.filter_json`) and the runtime's
store evaluates it: nothing is residual. Token: ``Authorization: Bearer`` from the URL's
userinfo or ``EVERMIND_TOKEN``. Routes: :mod:`evermind.runtime.routes_vectors`. Standard
library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from evermind.errors import StorageError
from evermind.vectorstore.filters import Filter, Leaf, filter_json
from evermind.vectorstore.port import AccessScope, Acl, Hit, MetaValue, VectorItem
from evermind.vectorstore.rest.dialect import Request

__all__ = ["EvermindDialect"]


class EvermindDialect:
    """An Evermind runtime's vector routes for one collection.

    Args:
        collection: The collection (1-64 letters, digits, ``_`` or ``-``).
        token: The bearer token (None: sent without one; a runtime without auth takes it).
    """

    name = "evermind"
    max_top_k = 10_000
    batch = 1000
    can_negate = True

    def __init__(self, collection: str, token: str | None) -> None:
        self._path = f"/v1/vectors/{quote(collection, safe='')}"
        self._token = token

    def headers(self) -> dict[str, str]:
        """``Authorization: Bearer`` (when given)."""
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def pushable(self, leaf: Leaf) -> bool:
        """Every leaf: the runtime runs the whole algebra."""
        return True

    def describe(self) -> Request:
        """``GET /v1/vectors/{collection}``."""
        return Request("GET", self._path)

    def dimension(self, body: Any) -> int | None:
        """The collection's ``dim`` (None: not created yet; the first upsert creates it)."""
        value = body.get("dim") if isinstance(body, dict) else None
        return value if isinstance(value, int) else None

    def upsert(self, items: Sequence[VectorItem]) -> Request:
        """``POST …/upsert`` (each item's principals and sensitivity; the tenant is the token's)."""
        rows = []
        for item in items:
            assert item.acl is not None  # check_items refused items without one
            rows.append(
                {
                    "id": item.id,
                    "vector": list(item.vector),
                    "text": item.text,
                    "metadata": dict(item.metadata),
                    "principals": sorted(item.acl.principals),
                    "sensitivity": item.acl.sensitivity,
                    "tenant": item.acl.tenant,
                }
            )
        dim = len(items[0].vector) if items else 1
        return Request("POST", f"{self._path}/upsert", json={"dim": dim, "items": rows})

    def fetch(self, ids: Sequence[str]) -> Request:
        """``POST …/fetch``."""
        return Request("POST", f"{self._path}/fetch", json={"ids": list(ids)})

    def fetched(self, body: Any) -> dict[str, dict[str, MetaValue]]:
        """``{id: metadata}`` of the answer's ``items``."""
        items = _field(body, "items", dict)
        return {str(i): dict(_field(v, "metadata", dict)) for i, v in items.items()}

    def delete(self, ids: Sequence[str]) -> Request:
        """``POST …/delete``."""
        return Request("POST", f"{self._path}/delete", json={"ids": list(ids)})

    def query(
        self,
        vector: Sequence[float],
        n: int,
        pushed: Filter | None,
        scope: AccessScope,
        with_metadata: bool,
    ) -> Request:
        """``POST …/query`` with the whole filter and the scope's principals and sensitivity."""
        body = {
            "tenant": scope.tenant,
            "vector": list(vector),
            "k": n,
            "filter": None if pushed is None else filter_json(pushed),
            "principals": sorted(scope.principals),
            "max_sensitivity": scope.max_sensitivity,
            "include_metadata": with_metadata,
        }
        return Request("POST", f"{self._path}/query", json=body)

    def hits(self, body: Any) -> list[Hit]:
        """The answer's ``matches``; the ACL's tenant is the token's, not repeated on the wire."""
        out = []
        tenant = _field(body, "tenant", str)
        for match in _field(body, "matches", list):
            try:
                acl = Acl(tenant, frozenset(match["principals"]), int(match["sensitivity"]))
                out.append(
                    Hit(
                        str(match["id"]),
                        float(match["score"]),
                        str(match["text"]),
                        dict(match["metadata"]),
                        acl,
                    )
                )
            except (KeyError, TypeError, ValueError) as err:
                raise StorageError(
                    f"evermind: a match is not in the runtime's shape ({type(err).__name__}: {err})"
                ) from err
        return out

    def ids(self, body: Any) -> list[str]:
        """The ids of the answer's ``matches``."""
        return [str(m["id"]) for m in _field(body, "matches", list)]

    def drop(self) -> Request:
        """``DELETE /v1/vectors/{collection}``."""
        return Request("DELETE", self._path)


def _field(body: Any, name: str, kind: type) -> Any:
    value = body.get(name) if isinstance(body, dict) else None
    if not isinstance(value, kind):
        raise StorageError(
            f"evermind: the answer's {name!r} is not a {kind.__name__}; is this an Evermind "
            "runtime?"
        )
    return value
