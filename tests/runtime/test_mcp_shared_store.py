"""``evermind mcp --store URL`` and ``evermind ingest --store URL`` on ONE real Postgres.

Two ``evermind mcp`` stdio servers (two processes, as two machines' agents run them) on one
Postgres (pgserver, the session's ``postgres`` fixture): what one remembers the other recalls,
and what one forgets the other no longer finds. ``evermind ingest --store postgresql://…`` of a
small folder, then ``memory_recall`` through an ``evermind mcp --store`` on the same URL, finds
an ingested chunk. Two ``evermind mcp --http --store`` servers on the same URL (official SDK
client over streamable HTTP) see each other's writes, tenant by tenant. An ``evermind serve
--store`` runtime and an ``evermind mcp --store --tenant T`` server on the same URL read each
other's memories. Bad URLs and the refused combinations are one line and exit status 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import httpx
from mcp import Client, StdioServerParameters

from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests import procs
from tests.runtime.helpers import TOKEN_A, bearer, write_tokens
from tests.runtime.test_mcp_server import free_port, http_client, text_of, wait_healthy


@contextlib.asynccontextmanager
async def store_client(url: str, *extra: str) -> AsyncIterator[Client]:
    """An SDK client on a fresh ``evermind mcp --store URL`` stdio subprocess."""
    args = ["-m", "evermind.cli", "mcp", "--store", url, *extra]
    params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
    async with Client(params, read_timeout_seconds=30) as client:
        yield client


def test_two_mcp_servers_on_one_postgres_share_remember_and_forget(
    postgres: str,
) -> None:
    async def scenario() -> None:
        with anyio.fail_after(60):
            await both()

    async def both() -> None:
        namespace = ("--namespace", "team-two-servers")
        async with (
            store_client(postgres, *namespace) as one,
            store_client(postgres, *namespace) as two,
        ):
            done = await one.call_tool(
                "memory_remember",
                {
                    "key": "deploy-day",
                    "content": "The team deploys the billing service on Thursdays",
                },
            )
            assert not done.is_error, text_of(done)
            found = text_of(await two.call_tool("memory_recall", {"query": "billing deploys"}))
            assert "deploy-day" in found and "Thursdays" in found, found
            got = text_of(await two.call_tool("memory_get", {"key": "deploy-day"}))
            assert "Thursdays" in got, got

            gone = await two.call_tool("memory_forget", {"key": "deploy-day"})
            assert not gone.is_error, text_of(gone)
            after = text_of(await one.call_tool("memory_recall", {"query": "billing deploys"}))
            assert "deploy-day" not in after, after
        # Another namespace (and tenant) on the same store sees none of it.
        async with store_client(postgres, "--namespace", "elsewhere") as other:
            elsewhere = await other.call_tool("memory_recall", {"query": "billing deploys"})
            assert "deploy-day" not in text_of(elsewhere)

    anyio.run(scenario)


def test_ingest_into_postgres_then_recall_through_mcp(
    postgres: str,
    tmp_path: Path,
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "runbook.md").write_text(
        "# Runbook\n\nRotate the pager secret with the vault-rotate script every quarter.\n"
    )
    (folder / "faq.txt").write_text("The office plants are watered on Mondays.\n")
    command = [sys.executable, "-m", "evermind.cli", "ingest", str(folder)]
    command += ["--store", postgres, "--namespace", "team-ingest"]
    done = procs.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] == 2 and report["added"] >= 2, report
    assert report["namespace"] == "default/team-ingest"

    async def scenario() -> None:
        async with store_client(postgres, "--namespace", "team-ingest") as client:
            found = text_of(await client.call_tool("memory_recall", {"query": "pager secret"}))
            assert "vault-rotate" in found, found

    anyio.run(scenario)


def test_runtime_and_mcp_on_one_postgres_are_one_memory(
    postgres: str,
    tmp_path: Path,
) -> None:
    """What ``evermind serve --store`` remembers for tenant alpha, ``evermind mcp --store
    --tenant alpha`` recalls; what the MCP server remembers, the runtime recalls."""
    config = RuntimeConfig(
        data_dir=tmp_path / "data",
        port=0,
        tokens_file=write_tokens(tmp_path / "tokens.txt"),
        rate_limit=0,
        store=postgres,
    )
    namespace = {"namespace": "serve-and-mcp"}
    with (
        ServerThread(config) as running,
        httpx.Client(base_url=running.url, headers=bearer(TOKEN_A), timeout=30) as http,
    ):
        memory = {"key": "oncall", "content": "The oncall rota changes every Tuesday at nine"}
        assert http.post("/v1/memory/remember", json={**memory, **namespace}).status_code == 200

        async def scenario() -> None:
            with anyio.fail_after(60):
                args = ("--tenant", "alpha", "--namespace", "serve-and-mcp")
                async with store_client(postgres, *args) as client:
                    found = text_of(
                        await client.call_tool("memory_recall", {"query": "oncall rota"})
                    )
                    assert "Tuesday" in found, found
                    done = await client.call_tool(
                        "memory_remember",
                        {"key": "standup", "content": "Standup moved to the quiet room"},
                    )
                    assert not done.is_error, text_of(done)

        anyio.run(scenario)
        hits = http.post("/v1/memory/recall", json={"query": "standup quiet room", **namespace})
        assert "standup" in [hit["key"] for hit in hits.json()["data"]], hits.text


def _cli(*args: str) -> tuple[int, str]:
    command = [sys.executable, "-m", "evermind.cli", *args]
    done = procs.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return done.returncode, done.stderr


def test_bad_store_urls_and_refused_combinations_are_one_line(tmp_path: Path) -> None:
    unreachable = "postgresql://nobody:secret-pw@127.0.0.1:9/none?connect_timeout=3"
    bad = [("mcp", "--store", "mysql://db/x"), ("ingest", str(tmp_path), "--store", "mysql://db/x")]
    down = [("mcp", "--store", unreachable), ("ingest", str(tmp_path), "--store", unreachable)]
    http_down = ("mcp", "--store", unreachable, "--http", "--port", "1")
    experience = ("mcp", "--store", "memory://", "--experience")
    both = ("mcp", "--store", "memory://", "--memory-file", str(tmp_path / "m.db"))
    # Seven independent commands, each a Python start-up: run side by side, checked after.
    jobs = [*bad, *down, http_down, experience, both]
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip(jobs, pool.map(lambda args: _cli(*args), jobs), strict=True))
    for args in bad:
        code, err = done[args]
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1, err
        assert "'mysql://db/x' is not a store" in lines[0] and "sqlite:///PATH" in lines[0]
        assert "postgresql://" in lines[0]
    for args in down:
        code, err = done[args]
        assert code == 2 and "cannot connect" in err and "secret-pw" not in err, err
    code, err = done[http_down]
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "cannot connect" in err, err  # before listening
    assert "secret-pw" not in err
    code, err = done[experience]
    assert code == 2 and "experience tools" in err, err
    code, err = done[both]
    assert code == 2 and "got both" in err, err


@contextlib.contextmanager
def http_mcp(url: str, tokens_file: Path, log: Path) -> Iterator[str]:
    """A real ``evermind mcp --http --store URL`` subprocess; yields its ``/mcp`` URL."""
    port = free_port()
    command = [sys.executable, "-m", "evermind.cli", "mcp", "--http", "--port", str(port)]
    command += ["--store", url, "--namespace", "team-http", "--tokens-file", str(tokens_file)]
    with log.open("wb") as out:
        process = procs.popen(command, stdout=out, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(base, process, timeout=60)
            yield base + "/mcp"
        finally:
            procs.stop_group(process, grace_s=10)


def test_two_http_mcp_servers_on_one_postgres_share_memory_per_tenant(
    postgres: str,
    tmp_path: Path,
) -> None:
    """Two streamable-HTTP servers (two processes, one tokens file) on one Postgres: what
    alice remembers through one, alice recalls through the other, both ways; bob, another
    tenant on the same servers and namespace, sees none of it."""
    tokens = {name: secrets.token_urlsafe(24) for name in ("alice", "bob")}
    tokens_file = tmp_path / "tokens.txt"
    tokens_file.write_text(f"{tokens['alice']} alice write\n{tokens['bob']} bob write\n")

    async def scenario(one: str, two: str) -> None:
        with anyio.fail_after(90):
            async with http_client(one, tokens["alice"]) as first:
                remembered = await first.call_tool(
                    "memory_remember",
                    {"key": "release-train", "content": "The release train leaves on Wednesdays"},
                )
                assert not remembered.is_error, text_of(remembered)
            async with http_client(two, tokens["alice"]) as second:
                found = text_of(await second.call_tool("memory_recall", {"query": "release train"}))
                assert "release-train" in found and "Wednesdays" in found, found
                answered = await second.call_tool(
                    "memory_remember",
                    {"key": "freeze", "content": "Code freeze starts the Monday before release"},
                )
                assert not answered.is_error, text_of(answered)
            async with http_client(one, tokens["alice"]) as first:
                got = text_of(await first.call_tool("memory_get", {"key": "freeze"}))
                assert "Code freeze" in got, got
            for url in (one, two):
                async with http_client(url, tokens["bob"]) as bob:
                    other = text_of(await bob.call_tool("memory_recall", {"query": "release"}))
                    assert "release-train" not in other and "freeze" not in other, other
                    missing = await bob.call_tool("memory_get", {"key": "freeze"})
                    assert "Code freeze" not in text_of(missing)

    with (
        http_mcp(postgres, tokens_file, tmp_path / "one.log") as one,
        http_mcp(postgres, tokens_file, tmp_path / "two.log") as two,
    ):
        anyio.run(scenario, one, two)
