"""The REST dialects beyond the shared suite: Pinecone's wire, the residual split, errors, URLs.

The shared suite (``test_vectorstore_engines.py``) proves the Pinecone dialect answers as every
other engine does. Here: what goes over the wire (headers, the typed filter keys, no ``$ne``),
that the answers stay right on a server reading Pinecone's undocumented corners the other way
(so those cases really are residual), the over-fetch, batching, the one-line errors (an
unreachable store, 401, 4xx, 429, 5xx: each names the store and the status, never the key),
and the URL forms. Every server is a real HTTP server on 127.0.0.1, stopped at teardown.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from evermind.errors import ConfigError, InputError, StorageError, StoreUnavailable
from evermind.vectorstore import (
    AccessScope,
    Acl,
    And,
    Eq,
    Exists,
    In,
    Not,
    Or,
    Range,
    VectorItem,
    evaluate,
    open_store,
    parse_filter,
)
from evermind.vectorstore.rest import parse_rest_url
from evermind.vectorstore.rest.pinecone import API_VERSION, PineconeDialect, wire_filter
from evermind.vectorstore.shared import check_store_url
from tests.runtime.pinecone_server import PineconeServer, matches
from tests.runtime.test_vectorstore_engines import FILTERS, _filter_items, _vectors

DIM = 12
KEY = "pc-secret-key-abcdef0123"
SCOPE = AccessScope("acme", frozenset({"alice"}), 1)
ACL = Acl("acme", frozenset({"alice"}), 0)


@pytest.fixture
def server() -> Iterator[PineconeServer]:
    running = PineconeServer(DIM, api_key=KEY)
    yield running
    running.stop()


def _url(server: PineconeServer, key: str = KEY) -> str:
    return f"pinecone+http://:{key}@127.0.0.1:{server.port}"


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _items(n: int, seed: int = 0) -> list[VectorItem]:
    vectors = _vectors(n, seed)
    return [VectorItem(f"d{i:03d}", vectors[i].tolist(), f"t{i}", {"i": i}, ACL) for i in range(n)]


def _bodies(server: PineconeServer, path: str) -> list[Any]:
    return [body for _, p, _, body in server.seen if p == path]


# -- the wire -------------------------------------------------------------------------------


def test_requests_carry_the_key_the_version_and_typed_filter_keys(server: PineconeServer) -> None:
    async def main() -> None:
        store = await open_store(_url(server), dim=DIM, name="wire")
        try:
            await store.upsert(_items(3))
            spec = And((Eq("color", "red"), Eq("n", 3), Eq("flag", True), Exists("price")))
            await store.query(_vectors(1, 9)[0].tolist(), 2, filter=spec, scope=SCOPE)
        finally:
            await store.close()

    _run(main())
    for _, _, headers, _ in server.seen:
        assert headers.get("Api-Key") == KEY
        assert headers.get("X-Pinecone-API-Version") == API_VERSION
    (upsert,) = _bodies(server, "/vectors/upsert")
    assert upsert["namespace"] == "wire"
    record = upsert["vectors"][0]
    assert record["metadata"]["n_i"] == 0 and json.loads(record["metadata"]["em_meta"]) == {"i": 0}
    assert record["metadata"]["em_principals"] == ["alice"]
    (query,) = _bodies(server, "/query")
    assert query["includeMetadata"] is True and query["topK"] == 2
    scope, pushed = query["filter"]["$and"][:3], query["filter"]["$and"][3]
    assert scope == [
        {"em_tenant": {"$eq": "acme"}},
        {"em_principals": {"$in": ["alice"]}},
        {"em_sensitivity": {"$lte": 1}},
    ]
    assert pushed["$and"][:3] == [
        {"s_color": {"$eq": "red"}},
        {"n_n": {"$eq": 3}},
        {"b_flag": {"$eq": True}},
    ]
    assert pushed["$and"][3] == {
        "$or": [{f"{t}_price": {"$exists": True}} for t in ("s", "n", "b")]
    }


def test_not_and_string_ranges_stay_residual() -> None:
    dialect = PineconeDialect("ns", None)
    from evermind.vectorstore.filters import split

    def parts(spec: Any) -> tuple[Any, Any]:
        return split(parse_filter(spec), dialect.pushable, can_negate=dialect.can_negate)

    assert parts(Not(Eq("color", "red"))) == (None, Not(Eq("color", "red")))
    assert parts(Range("color", gte="a")) == (None, Range("color", gte="a"))
    mixed = And((Eq("a", 1), Not(Exists("b")), Or((Eq("c", "x"), Range("d", lt="m")))))
    pushed, residual = parts(mixed)
    assert pushed == And((Eq("a", 1),))
    assert residual == And((Not(Exists("b")), Or((Eq("c", "x"), Range("d", lt="m")))))
    assert "$ne" not in json.dumps(wire_filter(And((In("c", ("x", 2, True, False)),))))


def test_answers_hold_on_a_server_reading_the_undocumented_corners_the_other_way() -> None:
    """On a server where ``true`` equals 1 and ``$ne`` fails on an absent field, every filter of
    the shared suite still gives the evaluator's ids: type strictness rides on the typed keys,
    and every negation runs as the residual."""
    assert matches({"x": {"$eq": True}}, {"x": 1.0}, lax=True)  # the server does read
    assert not matches({"x": {"$eq": True}}, {"x": 1.0})  # them the other way
    assert not matches({"x": {"$ne": "a"}}, {}, lax=True) and matches({"x": {"$ne": "a"}}, {})
    lax = PineconeServer(DIM, api_key=KEY, lax=True)
    items = _filter_items()
    query = _vectors(1, seed=4)[0].tolist()

    async def main() -> None:
        store: Any = await open_store(_url(lax), dim=DIM, name="lax")
        try:
            await store.upsert(items)
            for spec in FILTERS:
                node = parse_filter(spec)
                expected = {it.id for it in items if evaluate(node, it.metadata)}
                got = await store.query(query, 100, filter=spec, scope=SCOPE)
                assert {h.id for h in got} == expected, spec
                assert await store.count(filter=spec, scope=SCOPE) == len(expected), spec
        finally:
            await store.close()

    try:
        _run(main())
    finally:
        lax.stop()
    sent = json.dumps(_bodies(lax, "/query"))
    assert "$ne" not in sent and "$nin" not in sent and '$exists": false' not in sent


def test_a_selective_residual_over_fetches_until_k_pass(server: PineconeServer) -> None:
    vectors = _vectors(200, seed=11)
    items = [
        VectorItem(f"r{i:03d}", vectors[i].tolist(), "", {"tag": "keep" if i % 40 else "drop"}, ACL)
        for i in range(200)
    ]
    # A range over strings is residual, and admits 5 of 200: the store asks for more.
    spec = Range("tag", lt="e")

    async def main() -> list[str]:
        store = await open_store(_url(server), dim=DIM, name="over")
        try:
            for start in range(0, 200, 100):
                await store.upsert(items[start : start + 100])
            hits = await store.query(vectors[3].tolist(), 5, filter=spec, scope=SCOPE)
            return [h.id for h in hits]
        finally:
            await store.close()

    got = _run(main())
    assert sorted(got) == [f"r{i:03d}" for i in range(0, 200, 40)]
    sizes = [body["topK"] for body in _bodies(server, "/query")]
    assert sizes[0] == 21 and len(sizes) > 1 and sizes == sorted(sizes), sizes


def test_large_batches_are_split_into_requests(server: PineconeServer) -> None:
    async def main() -> int:
        store = await open_store(_url(server), dim=DIM, name="batches")
        try:
            await store.upsert(_items(250))
            return await store.delete([f"d{i:03d}" for i in range(0, 250, 2)] + ["nope"])
        finally:
            await store.close()

    assert _run(main()) == 125
    assert [len(b["vectors"]) for b in _bodies(server, "/vectors/upsert")] == [100, 100, 50]
    assert [len(b["ids"]) for b in _bodies(server, "/vectors/delete")] == [100, 25]
    assert len(server.namespaces["batches"]) == 125


def test_caps_k_and_count_at_what_one_query_returns(server: PineconeServer) -> None:
    async def main() -> None:
        store: Any = await open_store(_url(server), dim=DIM, name="caps")
        try:
            await store.upsert(_items(8))
            with pytest.raises(InputError, match="k=10001 is more than the 10000"):
                await store.query([1.0] * DIM, 10_001, scope=SCOPE)
            store.dialect.max_top_k = 5
            with pytest.raises(StorageError, match="5 or more items match") as capped:
                await store.count(scope=SCOPE)
            assert capped.value.code == "count_capped"
            assert await store.count(filter=Range("i", lt=3), scope=SCOPE) == 3
            no_one = AccessScope("acme", frozenset(), 9)
            assert await store.query([1.0] * DIM, 3, scope=no_one) == []
            assert await store.count(scope=no_one) == 0
        finally:
            await store.close()

    _run(main())


# -- errors ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_store_is_one_line_naming_it() -> None:
    port = _free_port()
    with pytest.raises(StoreUnavailable) as err:
        _run(open_store(f"pinecone+http://:{KEY}@127.0.0.1:{port}", dim=DIM))
    message = str(err.value)
    assert f"pinecone store at http://127.0.0.1:{port}: cannot reach it" in message
    assert KEY not in message and "\n" not in message


def test_a_refused_key_is_a_401_without_the_key(server: PineconeServer) -> None:
    with pytest.raises(StorageError) as err:
        _run(open_store(_url(server, key="wrong-key-1234567"), dim=DIM))
    message = str(err.value)
    assert err.value.code == "store_unauthorized"
    assert f"pinecone store at http://127.0.0.1:{server.port}" in message
    assert "HTTP 401" in message and "Invalid API Key" in message
    assert "wrong-key" not in message and KEY not in message


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (400, StorageError, "store_refused"),
        (404, StorageError, "store_refused"),
        (429, StoreUnavailable, "store_unavailable"),
        (500, StoreUnavailable, "store_unavailable"),
        (503, StoreUnavailable, "store_unavailable"),
    ],
)
def test_store_statuses_become_one_line_errors(
    server: PineconeServer, status: int, kind: type[Exception], code: str
) -> None:
    async def main() -> None:
        store = await open_store(_url(server), dim=DIM, name="errs")
        try:
            # The store's message echoes the key: it is scrubbed before it is repeated.
            server.forced.append((status, {"code": 9, "message": f"boom for {KEY}"}))
            with pytest.raises(kind) as err:
                await store.query([1.0] * DIM, 3, scope=SCOPE)
            message = str(err.value)
            assert f"POST /query answered HTTP {status}: boom for ***" in message
            assert "pinecone store at http://127.0.0.1:" in message
            assert KEY not in message and "\n" not in message
            assert getattr(err.value, "code", "") == code
            server.forced.append((200, "not a pinecone answer"))
            with pytest.raises(StorageError, match="'matches' is not a list"):
                await store.query([1.0] * DIM, 3, scope=SCOPE)
        finally:
            await store.close()

    _run(main())


def test_an_index_of_another_dimension_refuses_to_open(server: PineconeServer) -> None:
    with pytest.raises(ConfigError, match="holds vectors of dimension 12, not 5"):
        _run(open_store(_url(server), dim=5))


# -- URLs -----------------------------------------------------------------------------------


def test_url_forms_and_where_the_key_comes_from() -> None:
    env = {"PINECONE_API_KEY": "from-env", "OTHER": "from-other"}
    https = parse_rest_url("pinecone+https://idx-1.svc.pinecone.io", env)
    assert (https.base_url, https.api_key) == ("https://idx-1.svc.pinecone.io", "from-env")
    assert parse_rest_url("pinecone+https://:in%2Furl@h", env).api_key == "in/url"
    assert parse_rest_url("pinecone+https://bare@h:8443", env).base_url == "https://h:8443"
    assert parse_rest_url("pinecone+http://127.0.0.1:5080?key_env=OTHER", env).api_key == (
        "from-other"
    )
    assert parse_rest_url("pinecone+http://127.0.0.1:5080", {}).api_key is None
    assert KEY not in repr(parse_rest_url(f"pinecone+https://:{KEY}@h", env))
    for bad, says in [
        (f"pinecone+https://:{KEY}@", "names no host"),
        (f"pinecone+https://:{KEY}@h/index", "has a path"),
        (f"pinecone+https://:{KEY}@h?index=x", "unknown parameter"),
        (f"pinecone+ftp://:{KEY}@h", "names no REST dialect"),
        (f"pinecone+https://:{KEY}@h:port", "port is not a number"),
    ]:
        with pytest.raises(ConfigError, match=says) as err:
            parse_rest_url(bad, env)
        assert KEY not in str(err.value), bad
    with pytest.raises(ConfigError, match="unknown URL scheme 'weaviate'") as unknown:
        _run(open_store(f"weaviate://:{KEY}@h", dim=DIM))
    assert KEY not in str(unknown.value) and "pinecone+https://" in str(unknown.value)


def test_store_flag_refuses_pinecone_without_printing_the_key() -> None:
    with pytest.raises(ConfigError, match="not a store the runtime can use") as err:
        check_store_url(f"pinecone+https://:{KEY}@idx.svc.pinecone.io")
    assert KEY not in str(err.value)
    assert check_store_url("qdrant://h:6333") == "qdrant://h:6333"
