"""A Pinecone index on 127.0.0.1: the data-plane REST API as Pinecone documents it.

Real HTTP (``http.server`` on a thread), one dense cosine index of a fixed dimension, records
in namespaces. It implements the documented wire format of API version 2025-01 and is strict
where Pinecone documents a limit, so a dialect bug shows as a 400 rather than passing here and
failing there:

- ``POST /describe_index_stats`` → ``{namespaces: {ns: {vectorCount}}, dimension,
  indexFullness, totalVectorCount, metric, vectorType}``;
- ``POST /vectors/upsert`` ``{vectors: [{id, values, metadata}], namespace}`` →
  ``{upsertedCount}``; metadata values are strings, numbers (kept as float64), booleans or
  lists of strings (null refused), at most 40 KB per record; ids at most 512 characters; at
  most 1,000 records per request; every vector of the index's dimension;
- ``GET /vectors/fetch?ids=…&namespace=…`` → ``{vectors: {id: {id, values, metadata}},
  namespace, usage}`` (missing ids left out);
- ``POST /vectors/delete`` ``{ids | deleteAll, namespace}`` → ``{}``; ``deleteAll`` in a
  namespace that does not exist → 404;
- ``POST /query`` ``{namespace, vector, topK (1..10000), filter, includeValues,
  includeMetadata}`` → ``{matches: [{id, score, values?, metadata?}], namespace, usage}``,
  best first, ``score`` the cosine similarity.

The filter language is Pinecone's subset of MongoDB's: ``$eq``, ``$ne`` (number, string,
boolean), ``$gt``, ``$gte``, ``$lt``, ``$lte`` (numbers only), ``$in``, ``$nin`` (a non-empty
array of strings or numbers), ``$exists`` (boolean), ``$and`` / ``$or`` (non-empty arrays), a
bare value meaning ``$eq``; a list-of-strings value matches ``$eq``/``$in`` when one element
does. Values compare only within their JSON type (true is not 1). What Pinecone leaves
undocumented (``$ne``/``$nin`` on a record without the field) follows MongoDB: it matches.

Every request needs the ``Api-Key`` header when the server has a key (else 401, Pinecone's
error shape). :attr:`PineconeServer.forced` answers the next requests with a given status
(error-path tests); :attr:`PineconeServer.seen` records each request's method, path, headers
and decoded body. ``lax=True`` reads the undocumented corners the other way (``true`` equals 1,
ranges read booleans as numbers, ``$ne``/``$nin`` fail on a record without the field): the
dialect's answers must not change, which is what keeping those cases residual buys.
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

MAX_METADATA_BYTES = 40 * 1024
MAX_TOP_K = 10_000
MAX_UPSERT = 1_000
MAX_ID_CHARS = 512


class BadRequest(Exception):
    """A request Pinecone answers with 400 (its message is the error's)."""


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same_type(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    return (_is_number(a) and _is_number(b)) or (isinstance(a, str) and isinstance(b, str))


def _equals(stored: object, wanted: object, lax: bool = False) -> bool:
    if isinstance(stored, list):
        return any(_equals(s, wanted, lax) for s in stored)
    return (lax or _same_type(stored, wanted)) and stored == wanted


def _operator(op: str, operand: Any, present: bool, stored: Any, lax: bool) -> bool:
    if op == "$exists":
        if not isinstance(operand, bool):
            raise BadRequest("$exists takes a boolean")
        return present == operand
    if op in ("$eq", "$ne"):
        if not (isinstance(operand, bool | str) or _is_number(operand)):
            raise BadRequest(f"{op} takes a number, string or boolean")
        if op == "$eq":
            return present and _equals(stored, operand, lax)
        if lax:  # an absent field fails every comparison, $ne too
            return present and not _equals(stored, operand, lax)
        return not present or not _equals(stored, operand)
    if op in ("$in", "$nin"):
        if not isinstance(operand, list) or not operand:
            raise BadRequest(f"{op} takes a non-empty array")
        if not all(isinstance(v, str) or _is_number(v) for v in operand):
            raise BadRequest(f"{op} takes strings or numbers")
        hit = present and any(_equals(stored, v, lax) for v in operand)
        if lax and op == "$nin":
            return present and not hit
        return hit if op == "$in" else not hit
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if not _is_number(operand):
            raise BadRequest(f"{op} takes a number, got {operand!r}")
        if not present or not (_is_number(stored) or (lax and isinstance(stored, bool))):
            return False
        return {
            "$gt": stored > operand,
            "$gte": stored >= operand,
            "$lt": stored < operand,
            "$lte": stored <= operand,
        }[op]
    raise BadRequest(f"unknown filter operator {op!r}")


def matches(filter: Any, metadata: dict[str, Any], lax: bool = False) -> bool:
    """Whether a record with ``metadata`` passes Pinecone ``filter`` (``lax``: see the class)."""
    if not isinstance(filter, dict):
        raise BadRequest("a filter is a JSON object")
    for key, value in filter.items():
        if key in ("$and", "$or"):
            if not isinstance(value, list) or not value:
                raise BadRequest(f"{key} takes a non-empty array of filters")
            results = [matches(part, metadata, lax) for part in value]
            if not (all(results) if key == "$and" else any(results)):
                return False
            continue
        if key.startswith("$"):
            raise BadRequest(f"unknown filter operator {key!r}")
        conditions = value if isinstance(value, dict) else {"$eq": value}
        present = key in metadata
        for op, operand in conditions.items():
            if not _operator(op, operand, present, metadata.get(key), lax):
                return False
    return True


def _check_metadata(metadata: Any) -> dict[str, Any]:
    if not isinstance(metadata, dict):
        raise BadRequest("metadata must be a JSON object")
    kept: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, bool | str):
            kept[key] = value
        elif _is_number(value):
            kept[key] = float(value)  # Pinecone keeps numbers as float64
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            kept[key] = list(value)
        else:
            raise BadRequest(
                f"metadata value of {key!r} must be a string, number, boolean or list of strings"
            )
    if len(json.dumps(kept).encode()) > MAX_METADATA_BYTES:
        raise BadRequest("metadata size exceeds the limit of 40960 bytes per vector")
    return kept


def _cosine(a: list[float], b: list[float]) -> float:
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b)))


class PineconeServer:
    """One index on ``127.0.0.1:<port>``; :meth:`stop` shuts it down and joins the thread."""

    def __init__(self, dimension: int, api_key: str | None = None, lax: bool = False) -> None:
        self.dimension = dimension
        self.api_key = api_key
        self.lax = lax
        self.namespaces: dict[str, dict[str, dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.forced: list[tuple[int, Any]] = []
        self.seen: list[tuple[str, str, dict[str, str], Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, body = server.handle(method, self.path, dict(self.headers), raw)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stops serving and closes the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    def handle(
        self, method: str, target: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, Any]:
        """``(status, body)`` for one request."""
        parts = urlsplit(target)
        try:
            decoded = json.loads(raw) if raw else parse_qsl(parts.query)
        except ValueError:
            decoded = None
        self.seen.append((method, parts.path, headers, decoded))
        with self.lock:
            if self.forced:
                return self.forced.pop(0)
        if self.api_key is not None and headers.get("Api-Key") != self.api_key:
            return 401, {
                "error": {"code": "UNAUTHENTICATED", "message": "Invalid API Key"},
                "status": 401,
            }
        routes = {
            ("POST", "/describe_index_stats"): self._stats,
            ("POST", "/vectors/upsert"): self._upsert,
            ("GET", "/vectors/fetch"): self._fetch,
            ("POST", "/vectors/delete"): self._delete,
            ("POST", "/query"): self._query,
        }
        route = routes.get((method, parts.path))
        if route is None:
            return 404, {"code": 5, "message": f"Not found: {method} {parts.path}", "details": []}
        try:
            if method == "GET":
                args: Any = parse_qsl(parts.query)
            else:
                args = json.loads(raw or b"{}")
                if not isinstance(args, dict):
                    raise BadRequest("the body must be a JSON object")
            with self.lock:
                return route(args)
        except (BadRequest, ValueError, TypeError, KeyError) as err:
            return 400, {"code": 3, "message": str(err), "details": []}

    def _stats(self, body: dict[str, Any]) -> tuple[int, Any]:
        counts = {ns: {"vectorCount": len(r)} for ns, r in self.namespaces.items() if r}
        return 200, {
            "namespaces": counts,
            "dimension": self.dimension,
            "indexFullness": 0.0,
            "totalVectorCount": sum(c["vectorCount"] for c in counts.values()),
            "metric": "cosine",
            "vectorType": "dense",
        }

    def _upsert(self, body: dict[str, Any]) -> tuple[int, Any]:
        vectors = body["vectors"]
        if not isinstance(vectors, list) or not 1 <= len(vectors) <= MAX_UPSERT:
            raise BadRequest(f"vectors must hold 1 to {MAX_UPSERT} records")
        records = {}
        for record in vectors:
            rid, values = record["id"], record["values"]
            if not isinstance(rid, str) or not 1 <= len(rid) <= MAX_ID_CHARS:
                raise BadRequest(f"id must be a string of 1 to {MAX_ID_CHARS} characters")
            if len(values) != self.dimension or not all(_is_number(v) for v in values):
                raise BadRequest(
                    f"Vector dimension {len(values)} does not match the dimension of the "
                    f"index {self.dimension}"
                )
            metadata = _check_metadata(record.get("metadata", {}))
            records[rid] = {"id": rid, "values": [float(v) for v in values], "metadata": metadata}
        self.namespaces.setdefault(body.get("namespace", ""), {}).update(records)
        return 200, {"upsertedCount": len(records)}

    def _fetch(self, args: list[tuple[str, str]]) -> tuple[int, Any]:
        ids = [v for k, v in args if k == "ids"]
        namespace = next((v for k, v in args if k == "namespace"), "")
        if not ids:
            raise BadRequest("ids are required")
        records = self.namespaces.get(namespace, {})
        found = {i: records[i] for i in ids if i in records}
        return 200, {"vectors": found, "namespace": namespace, "usage": {"readUnits": 1}}

    def _delete(self, body: dict[str, Any]) -> tuple[int, Any]:
        namespace = body.get("namespace", "")
        if body.get("deleteAll"):
            if namespace not in self.namespaces:
                return 404, {"code": 5, "message": "Namespace not found", "details": []}
            del self.namespaces[namespace]
            return 200, {}
        ids = body.get("ids")
        if not isinstance(ids, list) or not ids:
            raise BadRequest("give ids, deleteAll or a filter")
        records = self.namespaces.get(namespace, {})
        for rid in ids:
            records.pop(rid, None)
        return 200, {}

    def _query(self, body: dict[str, Any]) -> tuple[int, Any]:
        top_k, vector = body["topK"], body["vector"]
        if not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise BadRequest(f"topK must be between 1 and {MAX_TOP_K}")
        if len(vector) != self.dimension:
            raise BadRequest(
                f"Query vector dimension {len(vector)} does not match the dimension of the "
                f"index {self.dimension}"
            )
        namespace = body.get("namespace", "")
        chosen = body.get("filter")
        scored = [
            (_cosine(r["values"], vector), r)
            for r in self.namespaces.get(namespace, {}).values()
            if chosen is None or matches(chosen, r["metadata"], self.lax)
        ]
        scored.sort(key=lambda pair: (-pair[0], pair[1]["id"]))
        out = []
        for score, record in scored[:top_k]:
            match: dict[str, Any] = {"id": record["id"], "score": score}
            if body.get("includeValues"):
                match["values"] = record["values"]
            if body.get("includeMetadata"):
                match["metadata"] = record["metadata"]
            out.append(match)
        return 200, {"matches": out, "namespace": namespace, "usage": {"readUnits": 5}}
