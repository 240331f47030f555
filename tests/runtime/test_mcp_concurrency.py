"""Several processes share one memory store: two MCP servers and the runtime write at once.

Two real ``evermind mcp`` stdio servers (driven by the SDK client) and a real ``evermind
serve`` (driven over ``POST /v1/memory/remember``) each write 1,000 memories into the same
SQLite file and the same namespace (the runtime's default tenant) concurrently. Afterwards a
plain store finds all 3,000, every one with the content its writer sent, and SQLite's
integrity check passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters

from evermind.memory.sqlite_backend import SQLiteBackend
from evermind.memory.sync import SyncMemoryStore
from tests import procs
from tests.runtime.test_mcp_server import free_port, wait_healthy

PER_WRITER = 1000
IN_FLIGHT = 8  # concurrent requests per writer


async def write_over_mcp(memory_file: Path, label: str) -> None:
    """One MCP stdio server writes ``PER_WRITER`` memories, ``IN_FLIGHT`` calls at a time."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "evermind.cli", "mcp", "--memory-file", str(memory_file)],
        env=dict(os.environ),
    )
    async with Client(params, read_timeout_seconds=120) as client:

        async def worker(start: int) -> None:
            for number in range(start, PER_WRITER, IN_FLIGHT):
                result = await client.call_tool(
                    "memory_remember",
                    {"key": f"{label}-{number:04d}", "content": f"{label} wrote memory {number}"},
                )
                assert not result.is_error, result

        async with anyio.create_task_group() as group:
            for start in range(IN_FLIGHT):
                group.start_soon(worker, start)


async def write_over_runtime(base: str) -> None:
    """The runtime writes ``PER_WRITER`` memories over its HTTP memory API."""
    async with httpx2.AsyncClient(base_url=base, timeout=120) as http:

        async def worker(start: int) -> None:
            for number in range(start, PER_WRITER, IN_FLIGHT):
                body = {"key": f"rt-{number:04d}", "content": f"rt wrote memory {number}"}
                reply = await http.post("/v1/memory/remember", json=body)
                assert reply.status_code == 200, reply.text

        async with anyio.create_task_group() as group:
            for start in range(IN_FLIGHT):
                group.start_soon(worker, start)


@pytest.mark.slow
def test_two_mcp_servers_and_the_runtime_write_3000_memories(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    command = [sys.executable, "-m", "evermind.cli", "serve", "--data", str(data)]
    command += ["--port", str(port), "--rate-limit", "0", "--log-level", "warning"]
    log = (tmp_path / "runtime.log").open("wb")
    runtime = procs.popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    memory_file = data / "runtime.db"  # the runtime's database: one store for all three
    try:
        wait_healthy(base, runtime)
        start = time.perf_counter()

        async def everyone() -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(write_over_mcp, memory_file, "mcp-a")
                group.start_soon(write_over_mcp, memory_file, "mcp-b")
                group.start_soon(write_over_runtime, base)

        anyio.run(everyone)
        print(f"3 x {PER_WRITER} concurrent writes in {time.perf_counter() - start:.1f} s")
    finally:
        procs.stop_group(runtime)
        log.close()

    with SyncMemoryStore(memory_file, namespace="default/default") as store:
        records = {r["key"]: r["content"] for r in store.export()}
    expected = {
        f"{label}-{number:04d}": f"{label} wrote memory {number}"
        for label in ("mcp-a", "mcp-b", "rt")
        for number in range(PER_WRITER)
    }
    assert len(records) == 3 * PER_WRITER
    assert records == expected

    async def integrity() -> str:
        backend = SQLiteBackend(memory_file, "default/default")
        try:
            return await backend.integrity_check()
        finally:
            await backend.close()

    assert anyio.run(integrity) == "ok"
