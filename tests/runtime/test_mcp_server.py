"""The MCP memory server, talked to by the official SDK client: over stdio and over HTTP.

Real servers only: ``python -m evermind.cli mcp`` as a subprocess (stdio), and
``evermind mcp --http`` as a subprocess on 127.0.0.1 with a tokens file. Checks the tool list,
remember/recall with the caps and truncation honoured, read-only mode, two servers sharing one
store, malformed arguments as tool errors (server alive afterwards), tenant isolation, 401 on a
bad or missing token and 429 past a tenant's rate limit.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from evermind.auth import TokenTable
from evermind.errors import ConfigError
from evermind.mcp.http import build_http_app
from evermind.mcp.render import ELLIPSIS, cut
from evermind.memory.sync import SyncMemoryStore
from tests import procs

ALL_TOOLS = {
    "memory_recall",
    "memory_get",
    "memory_recall_by_tag",
    "docs_search",
    "memory_remember",
    "memory_forget",
    "memory_compact",
    "memory_restore",
}
READ_TOOLS = {"memory_recall", "memory_get", "memory_recall_by_tag", "docs_search"}
HIT_LINE = re.compile(r"^\[(\d+)\] (\S+) \(score ([0-9.]+); tags: (.*)\)$")


def server_params(memory_file: Path, *extra: str) -> StdioServerParameters:
    """The stdio command for a real ``evermind mcp`` subprocess on ``memory_file``."""
    args = ["-m", "evermind.cli", "mcp", "--memory-file", str(memory_file), *extra]
    return StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))


def text_of(result: Any) -> str:
    """The text content of a tool result."""
    return "\n".join(block.text for block in result.content if block.type == "text")


def parse_hits(text: str) -> list[tuple[str, float, str]]:
    """``(key, score, preview)`` of each hit in a recall answer, in order."""
    lines = text.splitlines()
    hits = []
    for number, line in enumerate(lines):
        match = HIT_LINE.match(line)
        if match:
            hits.append((match.group(2), float(match.group(3)), lines[number + 1].strip()))
    return hits


@contextlib.asynccontextmanager
async def stdio_client(memory_file: Path, *extra: str) -> AsyncIterator[Client]:
    """An SDK client connected to a fresh stdio server subprocess."""
    async with Client(server_params(memory_file, *extra), read_timeout_seconds=30) as client:
        yield client


LONG = "word " * 200  # 1,000 characters


def test_stdio_tools_caps_truncation_and_errors(tmp_path: Path) -> None:
    memory_file = tmp_path / "memory.db"

    async def scenario() -> None:
        async with stdio_client(memory_file, "--max-results", "3", "--max-chars", "40") as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == ALL_TOOLS
            assert "BEFORE answering" in (tools["memory_recall"].description or "")
            assert "capped at 3" in (tools["memory_recall"].description or "")
            assert tools["memory_recall"].annotations.read_only_hint is True

            for number in range(6):
                result = await client.call_tool(
                    "memory_remember",
                    {
                        "key": f"deploy-{number}",
                        "content": f"deploy step {number}: the staging cluster {LONG}",
                        "tags": ["Deploy", "ops"],
                        "importance": 0.5 + number / 20,
                    },
                )
                assert not result.is_error, text_of(result)
                assert f"remembered 'deploy-{number}'" in text_of(result)
            await client.call_tool(
                "memory_remember", {"key": "editor", "content": "Niamh uses Neovim.", "tags": []}
            )

            recall = await client.call_tool(
                "memory_recall", {"query": "deploy staging cluster", "top_k": 50}
            )
            text = text_of(recall)
            assert not recall.is_error
            hits = parse_hits(text)
            assert len(hits) == 3, text  # capped at --max-results
            assert "top_k capped at 3" in text
            assert all(key.startswith("deploy-") for key, _, _ in hits)
            assert [s for _, s, _ in hits] == sorted((s for _, s, _ in hits), reverse=True)
            for _, _, preview in hits:
                assert len(preview) <= 40 and preview.endswith(ELLIPSIS), preview
            assert text.splitlines()[-1].startswith("ranked by: lexical only")
            assert "deploy step" in text and "word word word word word word word" not in text

            full = text_of(await client.call_tool("memory_get", {"key": hits[0][0]}))
            assert full.count("word") == 200  # memory_get is not cut

            tagged = text_of(
                await client.call_tool("memory_recall_by_tag", {"tag": "deploy", "limit": 9})
            )
            assert "limit capped at 3" in tagged
            assert len(re.findall(r"^\[\d\] deploy-", tagged, re.M)) == 3

            # Malformed arguments are tool errors, not protocol failures or a dead server.
            bad_calls: list[tuple[str, dict[str, Any]]] = [
                ("memory_recall", {}),
                ("memory_recall", {"query": "x", "top_k": "many"}),
                ("memory_recall", {"query": "x", "top_k": 0}),
                ("memory_remember", {"key": "", "content": "x"}),
                ("memory_remember", {"key": "k", "content": 5}),
                ("memory_remember", {"key": "k", "content": "x", "tags": "not-a-list"}),
                ("memory_remember", {"key": "k", "content": "x", "importance": 7}),
                ("memory_remember", {"key": "k", "content": "x", "ttl_ms": -1}),
                ("memory_remember", {"key": "k", "content": "x" * 20_001}),
                ("memory_get", {"key": "no-such-key"}),
                ("memory_everything", {}),
            ]
            for name, arguments in bad_calls:
                result = await client.call_tool(name, arguments)
                assert result.is_error, (name, arguments, text_of(result))
                assert text_of(result), (name, arguments)
            assert "20001 characters" in text_of(
                await client.call_tool("memory_remember", {"key": "k", "content": "x" * 20_001})
            )

            forgot = await client.call_tool("memory_forget", {"key": "editor"})
            assert text_of(forgot) == "forgot 'editor'"
            gone = await client.call_tool("memory_get", {"key": "editor"})
            assert gone.is_error
            alive = await client.call_tool("memory_recall", {"query": "deploy"})
            assert not alive.is_error and parse_hits(text_of(alive))

    anyio.run(scenario)


def test_stdio_readonly_server_sees_what_another_server_wrote(tmp_path: Path) -> None:
    memory_file = tmp_path / "shared.db"

    async def scenario() -> None:
        async with (
            stdio_client(memory_file) as writer,
            stdio_client(memory_file, "--readonly") as reader,
        ):
            tools = {tool.name for tool in (await reader.list_tools()).tools}
            assert tools == READ_TOOLS
            refused = await reader.call_tool("memory_remember", {"key": "k", "content": "x"})
            assert refused.is_error
            assert (await reader.call_tool("memory_forget", {"key": "k"})).is_error

            stored = await writer.call_tool(
                "memory_remember",
                {"key": "pref-editor", "content": "Niamh edits code in Neovim (LazyVim)."},
            )
            assert not stored.is_error
            recall = text_of(await reader.call_tool("memory_recall", {"query": "Neovim editor"}))
            assert [key for key, _, _ in parse_hits(recall)] == ["pref-editor"]

            # A memory with a TTL in milliseconds disappears once it runs out.
            await writer.call_tool(
                "memory_remember", {"key": "brief", "content": "short-lived note", "ttl_ms": 300}
            )
            await anyio.sleep(0.5)
            assert (await reader.call_tool("memory_get", {"key": "brief"})).is_error

    anyio.run(scenario)
    # The same file, read by a plain store in the runtime's namespace of the default tenant.
    with SyncMemoryStore(memory_file, namespace="default/default") as store:
        record = store.get("pref-editor")
        assert record is not None and "Neovim" in record.content


# ---------------------------------------------------------------------------------- HTTP


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_healthy(base: str, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Polls ``/healthz`` until the server answers (fails early if the process died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"server at {base} not healthy after {timeout} s")


RATE_LIMIT = 30  # requests a minute per tenant on the test server


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A real ``evermind mcp --http``: tenants alice (plus a read-only token), bob and carol."""
    folder = tmp_path_factory.mktemp("mcp-http")
    tokens = {name: secrets.token_urlsafe(24) for name in ("alice", "alice-read", "bob", "carol")}
    tokens_file = folder / "tokens.txt"
    tokens_file.write_text(
        "# token tenant access\n"
        f"{tokens['alice']} alice write\n"
        f"{tokens['alice-read']} alice read\n"
        f"{tokens['bob']} bob\n"
        f"{tokens['carol']} carol write\n"
    )
    port = free_port()
    command = [
        sys.executable,
        *("-m", "evermind.cli", "mcp", "--http", "--port", str(port)),
        *("--tokens-file", str(tokens_file), "--memory-file", str(folder / "memory.db")),
        *("--rate-limit", str(RATE_LIMIT)),
    ]
    log = (folder / "server.log").open("wb")
    process = procs.popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, process)
        yield {"base": base, "url": base + "/mcp", "tokens": tokens}
    finally:
        procs.stop_group(process, grace_s=10)
        log.close()


@contextlib.asynccontextmanager
async def http_client(url: str, token: str) -> AsyncIterator[Client]:
    """An SDK client over streamable HTTP carrying ``token``."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def raw_post(url: str, token: str | None, body: bytes = b"{}") -> tuple[int, dict[str, str], str]:
    """POSTs ``body`` to ``url``; returns ``(status, headers, text)`` without raising."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


def test_http_tools_and_tenant_isolation(http_server: dict[str, Any]) -> None:
    url, tokens = http_server["url"], http_server["tokens"]

    async def scenario() -> None:
        async with http_client(url, tokens["alice"]) as alice:
            assert {t.name for t in (await alice.list_tools()).tools} == ALL_TOOLS
            stored = await alice.call_tool(
                "memory_remember",
                {"key": "vault", "content": "Alice's vault code is 4711.", "tags": ["secret"]},
            )
            assert not stored.is_error, text_of(stored)
            recall = text_of(await alice.call_tool("memory_recall", {"query": "vault code"}))
            assert [key for key, _, _ in parse_hits(recall)] == ["vault"]
            malformed = await alice.call_tool("memory_recall", {"query": 42, "top_k": []})
            assert malformed.is_error
        async with http_client(url, tokens["bob"]) as bob:
            recall = text_of(await bob.call_tool("memory_recall", {"query": "vault code"}))
            assert parse_hits(recall) == [] and "4711" not in recall
            assert (await bob.call_tool("memory_get", {"key": "vault"})).is_error
            tagged = text_of(await bob.call_tool("memory_recall_by_tag", {"tag": "secret"}))
            assert "4711" not in tagged
            await bob.call_tool("memory_remember", {"key": "vault", "content": "Bob's is 1234."})
        async with http_client(url, tokens["alice-read"]) as reader:
            assert {t.name for t in (await reader.list_tools()).tools} == READ_TOOLS
            again = text_of(await reader.call_tool("memory_get", {"key": "vault"}))
            assert "4711" in again and "1234" not in again
            refused = await reader.call_tool("memory_forget", {"key": "vault"})
            assert refused.is_error

    anyio.run(scenario)


def test_http_bad_or_missing_token_is_401(http_server: dict[str, Any]) -> None:
    url = http_server["url"]
    for token in (None, "wrong-" + secrets.token_urlsafe(24), ""):
        status, headers, body = raw_post(url, token)
        assert status == 401, (token, status, body)
        assert headers.get("www-authenticate", headers.get("WWW-Authenticate", "")).startswith(
            "Bearer"
        )
        assert json.loads(body)["error"]["code"] == "invalid_token"
    # A token differing only in its last character is refused too.
    near = http_server["tokens"]["alice"][:-1] + (
        "A" if not http_server["tokens"]["alice"].endswith("A") else "B"
    )
    assert raw_post(url, near)[0] == 401

    async def sdk_with_bad_token() -> None:
        async with http_client(url, "bogus-" + secrets.token_urlsafe(24)) as client:
            await client.list_tools()

    with pytest.raises(Exception) as caught:  # the SDK surfaces the 401 as a failed connect
        anyio.run(sdk_with_bad_token)
    assert any(isinstance(leaf, MCPError) for leaf in leaves(caught.value)), repr(caught.value)


def test_http_401_points_at_the_protected_resource_metadata(http_server: dict[str, Any]) -> None:
    """RFC 9728: the challenge names the metadata, which says bearer tokens go in the header
    and lists no authorization server (static tokens: no OAuth flow to start)."""
    status, headers, _ = raw_post(http_server["url"], None)
    challenge = headers.get("www-authenticate", headers.get("WWW-Authenticate", ""))
    base = http_server["base"]
    assert status == 401
    assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in challenge
    for path in (
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ):
        with urllib.request.urlopen(base + path, timeout=10) as reply:
            metadata = json.loads(reply.read())
        assert metadata["resource"] == base + "/mcp", metadata
        assert metadata["bearer_methods_supported"] == ["header"]
        assert "authorization_servers" not in metadata


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def test_http_rate_limit_is_per_tenant(http_server: dict[str, Any]) -> None:
    url, tokens = http_server["url"], http_server["tokens"]
    statuses = [raw_post(url, tokens["carol"])[0] for _ in range(RATE_LIMIT + 2)]
    assert 429 not in statuses[:RATE_LIMIT], statuses
    assert statuses[RATE_LIMIT:] == [429, 429], statuses
    status, headers, body = raw_post(url, tokens["carol"])
    assert status == 429 and int(headers.get("retry-after", headers.get("Retry-After", "0"))) >= 1
    assert json.loads(body)["error"]["code"] == "rate_limited"
    # Another tenant is not affected by carol's empty bucket.
    assert raw_post(url, tokens["bob"])[0] != 429


# ---------------------------------------------------------------------------------- units


def test_open_http_refused_off_loopback(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tokens-file"):
        build_http_app(lambda name: None, lambda store, ro: None, TokenTable(None), host="0.0.0.0")  # type: ignore[arg-type,return-value]


def test_cut_caps_length_with_ellipsis() -> None:
    assert cut("short  text\n here", 40) == "short text here"
    cut_text = cut("x" * 100, 10)
    assert len(cut_text) == 10 and cut_text.endswith(ELLIPSIS)


def test_stdio_with_model_ranks_semantically(tmp_path: Path) -> None:
    from tests.factories import tiny_package

    model = tmp_path / "tiny.evermind"
    model.write_bytes(tiny_package())

    async def scenario() -> None:
        async with stdio_client(tmp_path / "m.db", "--model", str(model)) as client:
            for key, content in (("fox", "The quick brown fox jumps."), ("ssm", "A state space.")):
                await client.call_tool("memory_remember", {"key": key, "content": content})
            text = text_of(await client.call_tool("memory_recall", {"query": "brown fox"}))
            assert text.splitlines()[-1].startswith("ranked by: semantic+lexical"), text
            assert parse_hits(text)[0][0] == "fox"

    anyio.run(scenario)

    missing = tmp_path / "nope.evermind"
    refused = procs.run(
        [sys.executable, "-m", "evermind.cli", "mcp", "--model", str(missing)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert refused.returncode == 2 and "argument --model: no such file" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_untuned_model_is_served_with_a_warning_and_a_tuned_one_without(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from evermind.mcp.server import load_embedder
    from tests.factories import tiny_package

    untuned = tmp_path / "untuned.evermind"
    untuned.write_bytes(tiny_package())
    with caplog.at_level("WARNING", logger="evermind.mcp.server"):
        assert load_embedder(untuned) is not None
    assert "not tuned for recall" in caplog.text and "evermind tune-embedder" in caplog.text
    caplog.clear()
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(f"memory number {i} about topic {i * 7}" for i in range(6)))
    tuned = tmp_path / "tuned.evermind"
    done = procs.run(
        [sys.executable, "-m", "evermind.cli", "tune-embedder", "--model", str(untuned),
         "--texts", str(texts), "--steps", "1", "--batch-size", "4", "--out", str(tuned)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with caplog.at_level("WARNING", logger="evermind.mcp.server"):
        assert load_embedder(tuned) is not None
    assert "not tuned" not in caplog.text


def test_the_model_embeds_off_the_event_loop(tmp_path: Path) -> None:
    """The MCP server's embedder computes on a worker thread; the loop stays free."""
    import asyncio
    import threading

    from evermind.mcp.server import ThreadEmbedder, load_embedder
    from tests.factories import tiny_package

    package = tmp_path / "m.evermind"
    package.write_bytes(tiny_package())
    embedder = load_embedder(package)
    assert isinstance(embedder, ThreadEmbedder)
    seen: list[int] = []
    embed = embedder.model.embed
    embedder.model.embed = lambda texts: (seen.append(threading.get_ident()), embed(texts))[1]

    async def body() -> None:
        vectors = await embedder.embed(["a memory", "another"])
        assert len(vectors) == 2
        assert seen and threading.get_ident() not in seen

    asyncio.run(body())
