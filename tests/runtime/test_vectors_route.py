"""``/v1/vectors`` on a real ``evermind serve`` (loopback), and the evermind dialect on it.

The shared engine suite runs the dialect through every single-tenant case; here: two tenants
with the same collection name and ids never touch each other, a body naming another tenant is
refused, a read-only token cannot write, bad requests are 4xx (never a 500) with one-line
messages, the per-tenant limits hold, and the collections survive a restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evermind.errors import InputError, StorageError
from evermind.runtime import vector_collections
from evermind.runtime.vector_collections import VectorCollections
from evermind.vectorstore import AccessScope, Acl, VectorItem, open_store
from tests.runtime.helpers import (
    TOKEN_A,
    TOKEN_A_READ,
    TOKEN_B,
    ServerProcess,
    assert_error,
    bearer,
    write_tokens,
)

ALPHA = AccessScope("alpha", frozenset({"ana"}), 0)
BRAVO = AccessScope("bravo", frozenset({"ana"}), 0)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One ``evermind serve`` for the tests that need a running one (a start is seconds of
    imports). Safe to share: they write different collections ("docs"; "c1", dropped at
    its end) and check only those, far below the per-tenant limits."""
    root = tmp_path_factory.mktemp("vectors-route")
    running = ServerProcess(
        root / "data", write_tokens(root / "tokens.txt"), root / "serve.log"
    ).start()
    yield running
    running.stop()


def _url(server: ServerProcess, token: str) -> str:
    return f"evermind+http://:{token}@127.0.0.1:{server.port}"


def _item(item_id: str, vector: list[float], tenant: str, text: str = "") -> VectorItem:
    return VectorItem(item_id, vector, text, {"n": 1}, Acl(tenant, frozenset({"ana"})))


def test_two_tenants_share_names_and_ids_but_nothing_else(server: ServerProcess) -> None:
    async def main() -> None:
        alpha: Any = await open_store(_url(server, TOKEN_A), dim=3, name="docs")
        bravo: Any = await open_store(_url(server, TOKEN_B), dim=2, name="docs")
        try:
            await alpha.upsert([_item("x", [1.0, 0.0, 0.0], "alpha", "alpha secret")])
            await bravo.upsert([_item("x", [0.0, 1.0], "bravo", "bravo note")])
            (a,) = await alpha.query([1.0, 0.0, 0.0], 5, scope=ALPHA)
            (b,) = await bravo.query([0.0, 1.0], 5, scope=BRAVO)
            assert (a.text, a.acl.tenant) == ("alpha secret", "alpha")
            assert (b.text, b.acl.tenant) == ("bravo note", "bravo")
            assert await bravo.delete(["x"]) == 1
            assert await alpha.count(scope=ALPHA) == 1, "bravo's delete touched only its own x"
            # A body naming another tenant is refused, never re-tenanted.
            with pytest.raises(StorageError, match=r"HTTP 403.*tenant 'bravo'") as err:
                await alpha.upsert([_item("y", [0.0, 0.0, 1.0], "bravo")])
            assert err.value.code == "store_unauthorized"
            with pytest.raises(StorageError, match="HTTP 403"):
                await alpha.query([1.0, 0.0, 0.0], 5, scope=BRAVO)
            reader: Any = await open_store(_url(server, TOKEN_A_READ), dim=3, name="docs")
            try:
                assert [h.id for h in await reader.query([1.0, 0, 0], 5, scope=ALPHA)] == ["x"]
                with pytest.raises(StorageError, match="HTTP 403") as denied:
                    await reader.upsert([_item("z", [0.0, 1.0, 0.0], "alpha")])
                assert TOKEN_A_READ not in str(denied.value)
            finally:
                await reader.close()
            with pytest.raises(StorageError, match="HTTP 401") as unknown:
                await open_store(_url(server, "tok-nobody-000000"), dim=3, name="docs")
            assert "tok-nobody" not in str(unknown.value)
        finally:
            await alpha.close()
            await bravo.close()

    asyncio.run(main())


def test_bad_requests_are_one_line_4xx(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, headers=bearer(TOKEN_A), timeout=30) as client:
        item = {"id": "a", "vector": [1.0, 0.0], "principals": ["ana"]}
        ok = client.post("/v1/vectors/c1/upsert", json={"dim": 2, "items": [item]})
        assert ok.status_code == 200 and ok.json() == {"upserted": 1}
        query = {"vector": [1.0, 0.0], "k": 1, "principals": ["ana"]}
        up = "/v1/vectors/c1/upsert"
        ask = "/v1/vectors/c1/query"

        def items(**change: Any) -> dict[str, Any]:
            return {"dim": 2, "items": [{**item, **change}]}

        cases: list[tuple[str, str, Any, int, str | None]] = [
            ("POST", "/v1/vectors/c.1/upsert", items(), 400, "invalid_collection"),
            ("GET", "/v1/vectors/-x", None, 400, "invalid_collection"),
            ("POST", up, {**items(vector=[1.0, 0.0, 0.0]), "dim": 3}, 400, "dimension_mismatch"),
            ("POST", up, items(vector=[1.0]), 400, None),
            ("POST", up, items(principals=[]), 400, None),
            ("POST", up, items(metadata={"a b": 1}), 400, "bad_field"),
            ("POST", up, items(metadata={"t": [1]}), 400, None),
            ("POST", up, {"dim": 99999, "items": []}, 400, None),
            ("POST", ask, {**query, "filter": {"like": ["a", "b"]}}, 400, "unknown_filter_op"),
            ("POST", ask, {**query, "k": 0}, 400, None),
            ("POST", ask, {**query, "vector": [0.0, 0.0]}, 400, "bad_vector"),
            ("POST", ask, {**query, "vector": [1.0, 0.0, 0.0]}, 400, None),
            ("POST", "/v1/vectors/nothing/fetch", {"ids": "a"}, 400, None),
        ]
        for method, path, body, status, code in cases:
            response = client.request(method, path, json=body)
            message = assert_error(response, status, code)
            assert "\n" not in message, (path, body, message)
        assert client.post("/v1/vectors/none/query", json=query).json()["matches"] == []
        assert client.get("/v1/vectors/none").json() == {"collection": "none", "dim": None}
        assert client.delete("/v1/vectors/none").json() == {"dropped": False}
        assert client.delete("/v1/vectors/c1").json() == {"dropped": True}
        assert client.get("/v1/vectors/c1").json()["dim"] is None


def test_limits_per_tenant_and_a_restart_keeps_the_collections(tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "tokens.txt")
    server = ServerProcess(tmp_path / "data", tokens, tmp_path / "serve.log").start()
    item = {"id": "a", "vector": [1.0, 0.0], "principals": ["ana"]}
    try:
        with httpx.Client(base_url=server.url, headers=bearer(TOKEN_A), timeout=30) as client:
            for i in range(vector_collections.MAX_COLLECTIONS):
                body = {"dim": 2, "items": [item]}
                assert client.post(f"/v1/vectors/c{i}/upsert", json=body).status_code == 200
            over = client.post("/v1/vectors/one-more/upsert", json={"dim": 2, "items": [item]})
            assert_error(over, 400, "too_many_collections")
        with httpx.Client(base_url=server.url, headers=bearer(TOKEN_B), timeout=30) as client:
            mine = client.post("/v1/vectors/c0/upsert", json={"dim": 2, "items": [item]})
            assert mine.status_code == 200, "alpha's collections count against alpha only"
    finally:
        server.stop()
    again = ServerProcess(tmp_path / "data", tokens, tmp_path / "serve2.log").start()
    try:
        with httpx.Client(base_url=again.url, headers=bearer(TOKEN_A), timeout=30) as client:
            query = {"vector": [1.0, 0.0], "k": 3, "principals": ["ana"]}
            matches = client.post("/v1/vectors/c3/query", json=query).json()["matches"]
            assert [m["id"] for m in matches] == ["a"]
    finally:
        again.stop()


def test_a_full_collection_refuses_more(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_collections, "MAX_FLOATS", 10)
    collections = VectorCollections(tmp_path)

    async def main() -> None:
        async def work() -> None:
            store = await collections.store("alpha", "c", 2)
            await collections.room_for(store, 5)
            await store.upsert([_item(f"i{n}", [1.0, float(n)], "alpha") for n in range(5)])
            await collections.room_for(store, 0)
            with pytest.raises(InputError, match="over the limit of 10 numbers") as full:
                await collections.room_for(store, 1)
            assert full.value.code == "collection_full"

        try:
            await collections.run(work)
        finally:
            await collections.close()

    asyncio.run(main())
