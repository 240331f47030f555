"""A host's own memory backend behind ``evermind mcp --store python:package.module:factory``.

:class:`DictBackend` below is a real, small backend: dictionaries behind one
``threading.Lock``, implementing the whole ``MemoryBackend`` protocol (versions and the
compare-and-set write-through relies on, created_at kept across puts, eviction in the shared
order, expiry, the vector cache). The MCP server (a subprocess, official SDK client over
stdio) loads it through :func:`factory` and serves every tool from it: write-through's
supersede keeps history that ``memory_get`` shows, recall and forget work, and no SQLite
memory file is created. A factory that makes something short of a backend, or names nothing
importable, is one error line naming what is missing, exit status 2.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from evermind.errors import ConfigError, StorageError, VersionConflict
from evermind.memory.backend import check_keys, check_version, select_evictions
from evermind.memory.plugin import PluginMemory
from evermind.memory.records import MemoryRecord, WriteResult
from tests import procs
from tests.runtime.test_mcp_server import text_of

MODULE = "tests.runtime.test_mcp_backend_plugin"
#: Set by the test: where :func:`factory` notes each namespace it makes a backend for.
LOG_ENV = "EVERMIND_TEST_BACKEND_LOG"


class DictHub:
    """The state every ``DictBackend`` of one process shares, behind one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: dict[str, dict[str, MemoryRecord]] = {}
        self.versions: dict[str, int] = {}
        self.vectors: dict[tuple[str, str], list[float]] = {}


class DictBackend:
    """A ``MemoryBackend`` over dictionaries (one namespace of a :class:`DictHub`)."""

    def __init__(self, namespace: str, hub: DictHub) -> None:
        self.namespace = namespace
        self._hub = hub
        self._closed = False

    def _table(self) -> dict[str, MemoryRecord]:
        if self._closed:
            raise StorageError(f"dict backend of {self.namespace!r} is closed")
        return self._hub.records.setdefault(self.namespace, {})

    def _bump(self) -> int:
        self._hub.versions[self.namespace] = self._hub.versions.get(self.namespace, 0) + 1
        return self._hub.versions[self.namespace]

    async def apply(
        self,
        puts: Sequence[MemoryRecord],
        deletes: Sequence[str] = (),
        *,
        capacity: int | None = None,
        now: float = 0.0,
        expect_version: int | None = None,
        expect_keys: Mapping[str, float | None] | None = None,
    ) -> WriteResult:
        with self._hub.lock:
            table = self._table()
            check_version(self.namespace, expect_version, self._hub.versions.get(self.namespace, 0))
            check_keys(self.namespace, expect_keys, table, now)
            after = dict(table)
            deleted = [key for key in dict.fromkeys(deletes) if after.pop(key, None) is not None]
            stored: dict[str, MemoryRecord] = {}
            for record in puts:
                previous = after.get(record.key)
                if previous is not None:
                    record = replace(record, created_at=previous.created_at)
                after[record.key] = stored[record.key] = record
            evicted = select_evictions(after.values(), capacity, set(stored), now)
            for key in evicted:
                del after[key]
                stored.pop(key, None)
            table.clear()
            table.update(after)
            version = self._bump()
            return WriteResult(version, tuple(stored.values()), tuple(deleted), tuple(evicted))

    async def get(self, key: str) -> MemoryRecord | None:
        with self._hub.lock:
            return self._table().get(key)

    async def load_all(self) -> tuple[int, list[MemoryRecord]]:
        with self._hub.lock:
            records = list(self._table().values())
            return self._hub.versions.get(self.namespace, 0), records

    async def version(self) -> int:
        with self._hub.lock:
            self._table()
            return self._hub.versions.get(self.namespace, 0)

    async def delete_expired(self, now: float) -> WriteResult:
        with self._hub.lock:
            table = self._table()
            gone = tuple(sorted(key for key, r in table.items() if r.is_expired(now)))
            for key in gone:
                del table[key]
            version = self._bump() if gone else self._hub.versions.get(self.namespace, 0)
            return WriteResult(version, evicted=gone)

    async def get_vectors(
        self, fingerprint: str, hashes: Sequence[str]
    ) -> dict[str, Sequence[float]]:
        with self._hub.lock:
            found = {h: self._hub.vectors.get((fingerprint, h)) for h in hashes}
            return {h: list(v) for h, v in found.items() if v is not None}

    async def put_vectors(self, fingerprint: str, vectors: Mapping[str, Sequence[float]]) -> None:
        with self._hub.lock:
            for digest, vector in vectors.items():
                self._hub.vectors[(fingerprint, digest)] = list(vector)

    async def close(self) -> None:
        self._closed = True


HUB = DictHub()


def factory(namespace: str) -> DictBackend:
    """What ``--store python:tests.runtime.test_mcp_backend_plugin:factory`` calls."""
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(namespace + "\n")
    return DictBackend(namespace, HUB)


class Incomplete:
    """Something short of a backend: no apply, no put_vectors, and a blocking get."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def get(self, key: str) -> None:
        return None

    async def load_all(self) -> tuple[int, list[MemoryRecord]]:
        return 0, []

    async def version(self) -> int:
        return 0

    async def delete_expired(self, now: float) -> WriteResult:
        return WriteResult(0)

    async def get_vectors(self, fingerprint: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        return {}

    async def close(self) -> None:
        return None


def incomplete(namespace: str) -> Incomplete:
    return Incomplete(namespace)


NOT_A_FACTORY = 42


@asynccontextmanager
async def plugin_client(tmp_path: Path) -> AsyncIterator[Client]:
    env = {**os.environ, LOG_ENV: str(tmp_path / "made.log")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env.pop("EVERMIND_MEMORY_FILE", None)
    args = ["-m", "evermind.cli", "mcp", "--store", f"python:{MODULE}:factory"]
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    async with Client(params, read_timeout_seconds=30) as client:
        yield client


def test_the_mcp_tools_run_on_a_hosts_backend(tmp_path: Path) -> None:
    async def scenario() -> None:
        with anyio.fail_after(90):
            async with plugin_client(tmp_path) as client:
                await both(client)

    async def both(client: Client) -> None:
        said = text_of(
            await client.call_tool(
                "memory_remember", {"key": "editor", "content": "Niamh uses Neovim."}
            )
        )
        assert said.startswith("augmented: remembered 'editor'"), said
        changed = text_of(
            await client.call_tool(
                "memory_remember", {"key": "editor", "content": "Niamh uses Helix."}
            )
        )
        assert "superseded" in changed or "contested" in changed, changed
        got = text_of(
            await client.call_tool("memory_get", {"key": "editor", "include_history": True})
        )
        assert "Helix" in got and "Neovim" in got, got
        found = text_of(await client.call_tool("memory_recall", {"query": "which editor Niamh"}))
        assert "editor" in found and "Helix" in found, found
        gone = text_of(await client.call_tool("memory_forget", {"key": "editor"}))
        assert gone.startswith("forgot 'editor'"), gone
        after = text_of(await client.call_tool("memory_recall", {"query": "which editor Niamh"}))
        assert "Helix" not in after, after

    anyio.run(scenario)
    made = (tmp_path / "made.log").read_text(encoding="utf-8").split()
    assert made and set(made) == {"default/default"}, made
    assert not list((tmp_path / "data").rglob("*.db"))  # no SQLite memory file behind it


def test_the_backend_keeps_the_protocol_in_process() -> None:
    """What the MCP tools do not reach: the compare-and-set and capacity eviction."""

    async def scenario() -> None:
        async with PluginMemory(f"python:{MODULE}:factory", None, namespace="proto") as source:
            store = source.store("t1")
            await store.remember("low", "a low importance note", importance=0.1)
            await store.remember("high", "a high importance note", importance=0.9)
            version = await store.version()
            with pytest.raises(VersionConflict):
                await store.write([], ["low"], expect_version=version - 1)
            assert await store.get("low") is not None  # the refused write wrote nothing
            store.capacity = 2
            await store.remember("new", "the newest note", importance=0.5)
            assert await store.get("low") is None and await store.get("high") is not None
            other = source.store("t2")
            assert await other.get("high") is None  # another tenant's namespace
            await store.close()
            await other.close()

    asyncio.run(scenario())


def _mcp(spec: str) -> tuple[int, list[str]]:
    command = [sys.executable, "-m", "evermind.cli", "mcp", "--store", spec]
    done = procs.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return done.returncode, [line for line in done.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            f"python:{MODULE}:incomplete",
            "needs async methods apply, put_vectors; async (not plain) get",
        ),
        (f"python:{MODULE}:NOT_A_FACTORY", "'NOT_A_FACTORY' is a int, not a callable"),
        (f"python:{MODULE}:nowhere", f"module {MODULE!r} has no attribute 'nowhere'"),
        ("python:no_such_package.memory:make", "cannot import module 'no_such_package.memory'"),
        ("python:just-a-name", "expected python:package.module:factory"),
    ],
)
def test_a_bad_factory_is_one_line_naming_what_is_missing(spec: str, expected: str) -> None:
    code, lines = _mcp(spec)
    assert code == 2 and len(lines) == 1, lines
    assert expected in lines[0], lines[0]


def test_check_backend_names_a_wrong_namespace() -> None:
    from evermind.memory.plugin import check_backend

    with pytest.raises(ConfigError, match=r"namespace attribute 'a/b' \(has 'x'\)"):
        check_backend(DictBackend("x", DictHub()), "python:m:f", "a/b")


def test_the_http_server_serves_each_tenant_from_its_own_backend_namespace(
    tmp_path: Path,
) -> None:
    """``evermind mcp --http --store python:…``: one backend per token's tenant, namespace
    ``<tenant>/default``, so bob never reads what alice wrote."""
    import secrets

    from tests.runtime.test_mcp_server import free_port, http_client, wait_healthy

    tokens = {name: secrets.token_urlsafe(24) for name in ("alice", "bob")}
    tokens_file = tmp_path / "tokens.txt"
    tokens_file.write_text(f"{tokens['alice']} alice write\n{tokens['bob']} bob write\n")
    port = free_port()
    command = [sys.executable, "-m", "evermind.cli", "mcp", "--http", "--port", str(port)]
    command += ["--store", f"python:{MODULE}:factory", "--tokens-file", str(tokens_file)]
    env = {**os.environ, LOG_ENV: str(tmp_path / "made.log")}

    async def scenario(url: str) -> None:
        with anyio.fail_after(60):
            async with http_client(url, tokens["alice"]) as alice:
                said = await alice.call_tool(
                    "memory_remember", {"key": "vault", "content": "The vault opens at dawn."}
                )
                assert not said.is_error, text_of(said)
                found = text_of(await alice.call_tool("memory_recall", {"query": "vault dawn"}))
                assert "vault" in found, found
            async with http_client(url, tokens["bob"]) as bob:
                other = text_of(await bob.call_tool("memory_recall", {"query": "vault dawn"}))
                assert "opens at dawn" not in other and "0 memories searched" in other, other

    with (tmp_path / "server.log").open("wb") as log:
        process = procs.popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", process, timeout=60)
            anyio.run(scenario, f"http://127.0.0.1:{port}/mcp")
        finally:
            procs.stop_group(process, grace_s=10)
    made = set((tmp_path / "made.log").read_text(encoding="utf-8").split())
    assert {"alice/default", "bob/default"} <= made, made
