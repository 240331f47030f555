"""``evermind serve --store postgresql://…``: memory and the L2 cache on a real Postgres.

First the memory and cache HTTP suites (``test_memory_cache_api``, the memory and cache parts
of ``test_tenancy``) run again against a server whose store is Postgres (pgserver, the
session's one server; each server here gets a database of its own). Then two runtime
*processes* (``evermind serve --store …``, each on its own port and data directory, through
``tests/procs.py``) on one database: a memory remembered through one is recalled, listed, read
and forgotten through the other, a cache entry stored through one is a hit through the other,
and tenant bravo sees none of alpha's on either. Last, a bad ``--store`` URL and an unreachable
server stop ``evermind serve`` with a clear error before it listens.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
from psycopg import sql

from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests import procs
from tests.runtime.helpers import (
    PACKAGE_CAP,
    TOKEN_A,
    TOKEN_B,
    ServerProcess,
    assert_error,
    bearer,
    write_tokens,
)
from tests.runtime.test_memory_cache_api import (  # noqa: F401 - collected again on Postgres
    l2,
    test_cache_lookup_prefers_the_best_score_and_checks_input,
    test_l2_client_round_trip_with_guards,
    test_memory_validation_and_read_only,
    test_remember_get_list_recall_forget,
)
from tests.runtime.test_tenancy import (  # noqa: F401 - collected again on Postgres
    test_cache_dimensions_are_per_tenant_and_never_disclosed,
    test_cache_is_scoped_to_the_tenant,
    test_memories_are_scoped_to_the_tenant,
)


def fresh_database(url: str) -> str:
    """A new, empty database on the server of ``url`` (a ``postgresql://`` URL); its URL."""
    name = f"evermind_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    postgres: str,
) -> Iterator[ServerThread]:
    """This module's in-thread server (what the imported suites use), on Postgres."""
    root = tmp_path_factory.mktemp("runtime-pg")
    config = RuntimeConfig(
        data_dir=root / "data",
        port=0,
        tokens_file=write_tokens(root / "tokens.txt"),
        max_package_bytes=PACKAGE_CAP,
        max_tokens_cap=512,
        rate_limit=0,
        worker_threads=4,
        store=fresh_database(postgres),
    )
    with ServerThread(config) as running:
        yield running


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory,
    postgres: str,
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two ``evermind serve --store`` processes on one (fresh) database."""
    root = tmp_path_factory.mktemp("pair")
    tokens = write_tokens(root / "tokens.txt")
    url = fresh_database(postgres)
    servers = [
        ServerProcess(root / f"data-{n}", tokens, root / f"{n}.log", args=("--store", url))
        for n in "ab"
    ]
    try:
        for running in servers:
            running.start()
        yield servers[0], servers[1]
    finally:
        for running in servers:
            running.stop()


def _client(server: ServerProcess, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=bearer(token), timeout=30)


def test_a_memory_remembered_through_one_runtime_is_recalled_through_the_other(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    one, other = pair
    with _client(one, TOKEN_A) as a1, _client(other, TOKEN_A) as a2:
        memory = {"key": "rollout", "content": "The canary rollout starts at noon in Dublin"}
        assert a1.post("/v1/memory/remember", json={**memory, "tags": ["ops"]}).status_code == 200
        hits = a2.post("/v1/memory/recall", json={"query": "when does the canary rollout start"})
        assert [h["key"] for h in hits.json()["data"]] == ["rollout"]
        assert a2.get("/v1/memory/rollout").json()["content"] == memory["content"]
        listed = a2.get("/v1/memory", params={"tag": "ops"}).json()["data"]
        assert [m["key"] for m in listed] == ["rollout"]
        # A rewrite through the second is what the first reads next.
        changed = {"key": "rollout", "content": "The canary rollout moved to three in Dublin"}
        assert a2.post("/v1/memory/remember", json=changed).status_code == 200
        assert "three" in a1.get("/v1/memory/rollout").json()["content"]
        assert a2.delete("/v1/memory/rollout").json()["deleted"]
        assert_error(a1.get("/v1/memory/rollout"), 404, "memory_not_found")
        assert a1.post("/v1/memory/recall", json={"query": "canary rollout"}).json()["data"] == []
    for server in pair:  # nothing went to the embedded database
        assert not (server.data / "runtime.db").exists()


def test_a_cache_entry_stored_through_one_runtime_is_hit_through_the_other(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    one, other = pair
    embedding = [0.3, -0.2, 0.9, 0.1, 0.05]
    stored = {
        "embedding": embedding,
        "response": {"text": "Paris"},
        "query": "what is the capital of France",
        "namespace": "geo",
    }
    with _client(one, TOKEN_A) as a1, _client(other, TOKEN_A) as a2:
        assert a1.post("/v1/semantic-cache/store", json=stored).json()["stored"]
        lookup = {
            "embedding": embedding,
            "threshold": 0.9,
            "query": "what is the capital of France",
            "namespace": "geo",
        }
        hit = a2.post("/v1/semantic-cache/lookup", json=lookup).json()
        assert hit["hit"]["response"] == {"text": "Paris"}, hit
        assert hit["hit"]["score"] == pytest.approx(1.0, abs=1e-5)
        # And the first runtime hits the entry it stored, too.
        assert a1.post("/v1/semantic-cache/lookup", json=lookup).json()["hit"]["response"]


def test_tenant_bravo_sees_none_of_alpha_s_on_either_runtime(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    one, other = pair
    secret = {"key": "payroll", "content": "Alpha payroll runs on the 25th via Stripe"}
    embedding = [0.7, 0.7, 0.1, 0.0, 0.2]
    entry = {"embedding": embedding, "response": "alpha-only", "query": "alpha payroll date"}
    with _client(one, TOKEN_A) as a1:
        assert a1.post("/v1/memory/remember", json=secret).status_code == 200
        assert a1.post("/v1/semantic-cache/store", json=entry).json()["stored"]
    for server in (one, other):
        with _client(server, TOKEN_B) as b:
            assert_error(b.get("/v1/memory/payroll"), 404, "memory_not_found")
            recalled = b.post("/v1/memory/recall", json={"query": "payroll Stripe 25th"})
            assert recalled.json()["data"] == []
            assert b.get("/v1/memory").json()["data"] == []
            lookup = {"embedding": embedding, "threshold": 0.5, "query": "alpha payroll date"}
            assert b.post("/v1/semantic-cache/lookup", json=lookup).json() == {}
            assert_error(b.delete("/v1/memory/payroll"), 404, "memory_not_found")
    with _client(other, TOKEN_A) as a2:
        assert a2.get("/v1/memory/payroll").status_code == 200, "bravo's delete touched nothing"


def _serve(*args: str, data: Path) -> tuple[int, str]:
    command = [sys.executable, "-m", "evermind.cli", "serve", "--port", "0", "--data", str(data)]
    done = procs.run([*command, *args], capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr


def test_serve_refuses_a_bad_store_url_and_an_unreachable_server(tmp_path: Path) -> None:
    unreachable = "postgresql://nobody:secret-pw@127.0.0.1:9/none?connect_timeout=3"
    stores = [f"sqlite:///{tmp_path}/x.db", "mysql://db/x", unreachable]
    # Three independent commands, each a Python start-up: run side by side, checked after.
    with ThreadPoolExecutor(max_workers=3) as pool:
        sqlite, mysql, down = pool.map(
            lambda n: _serve("--store", stores[n], data=tmp_path / "abc"[n]), range(3)
        )
    code, err = sqlite
    assert code == 2 and "--store" in err and "postgresql://" in err, err
    code, err = mysql
    assert code == 2 and "mysql://db/x" in err, err
    code, err = down
    assert code == 2 and "cannot connect" in err, err
    assert "secret-pw" not in err, "the password must not be printed"


def _cut_connections(url: str, refuse: bool | None = None) -> int:
    """Terminates every other connection to ``url``'s database (as a restart or a failover of
    Postgres does), first refusing new ones when ``refuse`` is True (a server that stays
    down) or allowing them again when False; returns how many were cut."""
    database = urlsplit(url).path.lstrip("/")
    admin = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        if refuse is not None:
            allow = sql.Literal(not refuse)
            conn.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                    sql.Identifier(database), allow
                )
            )
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            [database],
        ).fetchall()
    return len(rows)


def test_the_runtime_connects_again_after_postgres_cut_it_and_is_503_while_it_is_down(
    tmp_path: Path,
    postgres: str,
) -> None:
    """Postgres cutting the runtime's connections (a restart, a failover) costs no request:
    the store connects again and repeats the statement. While the database refuses
    connections, requests get 503 store_unavailable with Retry-After (never a 500); once it
    takes them again, the runtime serves again, nothing lost."""
    url = fresh_database(postgres)
    config = RuntimeConfig(
        data_dir=tmp_path / "data", port=0, tokens_file=write_tokens(tmp_path / "tokens.txt"),
        rate_limit=0, worker_threads=2, store=url,
    )  # fmt: skip
    memory = {"key": "standup", "content": "The standup is at nine in room Kepler"}
    with (
        ServerThread(config) as running,
        httpx.Client(base_url=running.url, headers=bearer(TOKEN_A), timeout=30) as client,
    ):
        assert client.post("/v1/memory/remember", json=memory).status_code == 200
        assert _cut_connections(url) >= 1
        # The same text under another key is a plain put here (write-through would confirm
        # "standup" instead of storing a second copy): this test is about the reconnection.
        retro = client.post("/v1/memory/remember", json={**memory, "key": "retro", "mode": "put"})
        assert retro.status_code == 200, retro.text
        try:
            assert _cut_connections(url, refuse=True) >= 1
            down = client.post("/v1/memory/recall", json={"query": "when is the standup"})
            assert_error(down, 503, "store_unavailable")
            assert down.headers["Retry-After"] == "1"
        finally:
            _cut_connections(url, refuse=False)
        hits = client.post("/v1/memory/recall", json={"query": "when is the standup"})
        assert hits.status_code == 200, hits.text
        assert {h["key"] for h in hits.json()["data"]} >= {"standup", "retro"}
