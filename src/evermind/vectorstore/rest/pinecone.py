"""The Pinecone dialect: Pinecone's data-plane REST API (version 2025-01) on one index host.

Requests: ``POST /describe_index_stats`` (the dimension, on open), ``POST /vectors/upsert``,
``GET /vectors/fetch?ids=…&namespace=…``, ``POST /vectors/delete`` (ids, or ``deleteAll`` for
:meth:`~evermind.vectorstore.rest.store.RestStore.drop`) and ``POST /query``; every one carries
the ``Api-Key`` and ``X-Pinecone-API-Version`` headers and the store's namespace (the port's
``name``: one namespace per table, several in one index).

A record's metadata holds the ACL (``em_tenant``, ``em_principals`` a list of strings,
``em_sensitivity``), the text (``em_text``), an exact copy of the item's metadata as JSON
(``em_meta``: ints stay ints, which Pinecone's float64 numbers would not) and, for filtering,
each field under a key that names its type: ``s_<field>`` (a string), ``n_<field>`` (a number),
``b_<field>`` (a bool). A comparison only ever reads the key of its value's type, so the
algebra's type-strict semantics hold whatever Pinecone does across types (a bool never equals
1; ``"3"`` never equals 3). Reserved keys start ``em_``, field keys ``s_``/``n_``/``b_``: they
cannot collide.

Pushed down (exact): ``Eq``, ``In``, ``Exists``, a numeric ``Range`` and ``And``/``Or`` of them;
the scope is ``$and``-ed in front of every query (tenant ``$eq``, principals ``$in``,
sensitivity ``$lte``). Residual (applied after an over-fetch,
:func:`~evermind.vectorstore.filters.residual_top_k`): a ``Range`` over strings (Pinecone's
``$gt``… take numbers only) and every ``Not`` (Pinecone has no ``$not``, and what ``$ne`` /
``$nin`` do with a record lacking the field is not documented), with any ``Or`` holding one.
Standard library only; :class:`~evermind.vectorstore.rest.store.RestStore` sends the requests.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from evermind.errors import StorageError
from evermind.vectorstore.filters import And, Eq, Exists, Filter, In, Leaf, Or, Range
from evermind.vectorstore.port import AccessScope, Acl, Hit, MetaValue, VectorItem
from evermind.vectorstore.rest.dialect import Request, dumps

__all__ = ["API_VERSION", "PineconeDialect", "field_key"]

API_VERSION = "2025-01"
#: Admits no record (a sensitivity is never negative): Pinecone refuses an empty ``$or``/``$in``.
NOTHING: dict[str, Any] = {"em_sensitivity": {"$lt": 0}}
#: Admits every record of ours (each has a tenant).
EVERYTHING: dict[str, Any] = {"em_tenant": {"$exists": True}}
_TYPES = ("s", "n", "b")


def field_key(field: str, value: MetaValue) -> str:
    """The metadata key ``field`` holds ``value`` under (``s_``, ``n_`` or ``b_`` + field)."""
    if isinstance(value, bool):
        return f"b_{field}"
    return f"s_{field}" if isinstance(value, str) else f"n_{field}"


def _any_of(parts: list[dict[str, Any]]) -> dict[str, Any]:
    if not parts:
        return NOTHING
    return parts[0] if len(parts) == 1 else {"$or": parts}


def wire_filter(node: Filter) -> dict[str, Any]:
    """``node`` (pushable throughout, no ``Not``) in Pinecone's filter language."""
    if isinstance(node, And):
        every = [wire_filter(p) for p in node.parts]
        return EVERYTHING if not every else every[0] if len(every) == 1 else {"$and": every}
    if isinstance(node, Or):
        return _any_of([wire_filter(p) for p in node.parts])
    if isinstance(node, Exists):
        return _any_of([{f"{t}_{node.field}": {"$exists": True}} for t in _TYPES])
    if isinstance(node, Eq):
        return {field_key(node.field, node.value): {"$eq": node.value}}
    if isinstance(node, In):
        texts = [v for v in node.values if isinstance(v, str)]
        numbers = [v for v in node.values if not isinstance(v, bool | str)]
        parts: list[dict[str, Any]] = []
        if texts:
            parts.append({f"s_{node.field}": {"$in": texts}})
        if numbers:
            parts.append({f"n_{node.field}": {"$in": numbers}})
        # $in takes strings and numbers only; a bool is an $eq of its own.
        flags = dict.fromkeys(v for v in node.values if isinstance(v, bool))
        parts += [{f"b_{node.field}": {"$eq": v}} for v in flags]
        return _any_of(parts)
    if isinstance(node, Range):
        key = f"n_{node.field}"
        bounds = [{key: {f"${op}": value}} for op, value in node.bounds()]
        return bounds[0] if len(bounds) == 1 else {"$and": bounds}
    raise TypeError(f"pinecone: cannot translate {node!r}")  # split keeps Not out


class PineconeDialect:
    """Pinecone's data plane for one namespace of one index.

    Args:
        namespace: The namespace the store's items live in.
        api_key: The ``Api-Key`` header (None: sent without one, as Pinecone Local takes).
    """

    name = "pinecone"
    #: Pinecone's query returns at most 10,000 matches.
    max_top_k = 10_000
    #: Records per upsert / fetch / delete request (Pinecone allows 1,000 per upsert; a fetch's
    #: ids go in its URL, so fewer keep it short).
    batch = 100
    can_negate = False

    def __init__(self, namespace: str, api_key: str | None) -> None:
        self.namespace = namespace
        self._api_key = api_key

    def headers(self) -> dict[str, str]:
        """``Api-Key`` (when given) and ``X-Pinecone-API-Version``."""
        headers = {"X-Pinecone-API-Version": API_VERSION}
        if self._api_key:
            headers["Api-Key"] = self._api_key
        return headers

    def pushable(self, leaf: Leaf) -> bool:
        """All leaves but a range over strings (Pinecone's ranges are numeric)."""
        return not (isinstance(leaf, Range) and isinstance(leaf.bounds()[0][1], str))

    def describe(self) -> Request:
        """``POST /describe_index_stats``."""
        return Request("POST", "/describe_index_stats", json={})

    def dimension(self, body: Any) -> int | None:
        """The index's ``dimension``."""
        value = body.get("dimension") if isinstance(body, dict) else None
        return value if isinstance(value, int) and value > 0 else None

    def upsert(self, items: Sequence[VectorItem]) -> Request:
        """``POST /vectors/upsert`` of ``items`` (metadata laid out as the module says)."""
        vectors = []
        for item in items:
            assert item.acl is not None  # check_items refused items without one
            metadata: dict[str, Any] = {
                "em_tenant": item.acl.tenant,
                "em_principals": sorted(item.acl.principals),
                "em_sensitivity": item.acl.sensitivity,
                "em_text": item.text,
                "em_meta": dumps(dict(item.metadata)),
            }
            metadata.update({field_key(k, v): v for k, v in item.metadata.items()})
            vectors.append({"id": item.id, "values": list(item.vector), "metadata": metadata})
        return Request(
            "POST", "/vectors/upsert", json={"vectors": vectors, "namespace": self.namespace}
        )

    def fetch(self, ids: Sequence[str]) -> Request:
        """``GET /vectors/fetch?ids=…&namespace=…``."""
        params = [("ids", i) for i in ids] + [("namespace", self.namespace)]
        return Request("GET", "/vectors/fetch", params=params)

    def fetched(self, body: Any) -> dict[str, dict[str, MetaValue]]:
        """``{id: metadata}`` of the answer's ``vectors``."""
        vectors = _field(body, "vectors", dict)
        return {str(i): _meta(_field(v, "metadata", dict)) for i, v in vectors.items()}

    def delete(self, ids: Sequence[str]) -> Request:
        """``POST /vectors/delete`` of ``ids``."""
        return Request(
            "POST", "/vectors/delete", json={"ids": list(ids), "namespace": self.namespace}
        )

    def query(
        self,
        vector: Sequence[float],
        n: int,
        pushed: Filter | None,
        scope: AccessScope,
        with_metadata: bool,
    ) -> Request:
        """``POST /query``: top ``n`` under the scope ``$and`` the pushed filter."""
        must: list[dict[str, Any]] = [
            {"em_tenant": {"$eq": scope.tenant}},
            {"em_principals": {"$in": sorted(scope.principals)}},
            {"em_sensitivity": {"$lte": scope.max_sensitivity}},
        ]
        if pushed is not None:
            must.append(wire_filter(pushed))
        body = {
            "namespace": self.namespace,
            "vector": list(vector),
            "topK": n,
            "filter": {"$and": must},
            "includeValues": False,
            "includeMetadata": with_metadata,
        }
        return Request("POST", "/query", json=body)

    def hits(self, body: Any) -> list[Hit]:
        """The answer's ``matches`` as hits."""
        out = []
        for match in _field(body, "matches", list):
            metadata = _field(match, "metadata", dict)
            try:
                acl = Acl(
                    str(metadata["em_tenant"]),
                    frozenset(metadata["em_principals"]),
                    int(metadata["em_sensitivity"]),
                )
                hit = Hit(
                    str(match["id"]),
                    float(match["score"]),
                    str(metadata.get("em_text", "")),
                    _meta(metadata),
                    acl,
                )
            except (KeyError, TypeError, ValueError) as err:
                raise StorageError(
                    f"pinecone: a match lacks our layout ({type(err).__name__}: {err}); was "
                    "the namespace written by another program?"
                ) from err
            out.append(hit)
        return out

    def ids(self, body: Any) -> list[str]:
        """The ids of the answer's ``matches``."""
        return [str(m["id"]) for m in _field(body, "matches", list)]

    def drop(self) -> Request:
        """``POST /vectors/delete`` with ``deleteAll`` in this namespace."""
        return Request(
            "POST", "/vectors/delete", json={"deleteAll": True, "namespace": self.namespace}
        )


def _field(body: Any, name: str, kind: type) -> Any:
    value = body.get(name, kind()) if isinstance(body, dict) else None
    if not isinstance(value, kind):
        raise StorageError(
            f"pinecone: the answer's {name!r} is not a {kind.__name__}; is this a Pinecone "
            "index host?"
        )
    return value


def _meta(metadata: dict[str, Any]) -> dict[str, MetaValue]:
    try:
        meta = json.loads(metadata["em_meta"])
    except (KeyError, TypeError, ValueError) as err:
        raise StorageError(
            "pinecone: a record has no readable em_meta; was it written by another program?"
        ) from err
    if not isinstance(meta, dict):
        raise StorageError("pinecone: a record's em_meta is not a JSON object")
    return meta
