"""The memory tools mounted through the Claude Agent SDK's ``create_sdk_mcp_server``, in-process.

A real ``MemoryStore`` on SQLite and the real ``claude_agent_sdk`` server config; the official
``mcp`` client talks to its ``instance`` (an ``mcp.server.Server``) over the in-memory
transport, with ``subprocess.Popen`` refused so neither a server nor the ``claude`` CLI can be
spawned. The listing must equal the MCP server's, and remember → recall → get → forget must
round-trip, with bad arguments and a missing key coming back as error results.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from evermind.errors import ConfigError
from evermind.mcp.agent_sdk import memory_agent_options, memory_sdk_server
from evermind.mcp.config import ServerConfig
from evermind.mcp.inprocess import memory_client
from evermind.mcp.tools import READ_TOOLS, WRITE_TOOLS
from evermind.memory import MemoryStore

needs_sdk = pytest.mark.skipif(
    importlib.util.find_spec("claude_agent_sdk") is None,
    reason="claude-agent-sdk is not installed (pip install 'evermind-memory[agent-sdk]')",
)


def text_of(result: Any) -> str:
    """The text content of a tool result."""
    return "\n".join(block.text for block in result.content if block.type == "text")


def listing(tools: Any) -> dict[str, tuple[Any, ...]]:
    """What a model sees of each tool: description, input schema and annotations, by name."""
    return {
        tool.name: (
            tool.description,
            tool.input_schema,
            None if tool.annotations is None else tool.annotations.model_dump(exclude_none=True),
        )
        for tool in tools.tools
    }


def refuse_subprocess(*args: Any, **kwargs: Any) -> None:
    raise AssertionError(f"the in-process round trip tried to start a process: {args!r}")


async def round_trip(memory_file: Path) -> None:
    """Lists and calls the tools through the SDK server's instance, beside the MCP server."""
    store = MemoryStore(memory_file, namespace="default/default")
    config = ServerConfig(max_chars=40)
    try:
        server = memory_sdk_server(store, config)
        assert server["type"] == "sdk" and server["name"] == "evermind"
        async with memory_client(store, config) as mcp_client:
            reference = listing(await mcp_client.list_tools())
            missing_reference = await mcp_client.call_tool("memory_get", {"key": "nope"})
        async with Client(server["instance"]) as client:
            sdk_listing = listing(await client.list_tools())
            assert set(sdk_listing) == set(READ_TOOLS + WRITE_TOOLS)
            assert sdk_listing == reference

            long_text = "Niamh deploys the billing service on Fridays. " * 5
            saved = await client.call_tool(
                "memory_remember", {"key": "deploy-day", "content": long_text, "tags": ["ops"]}
            )
            assert not saved.is_error, text_of(saved)
            assert await store.get("deploy-day") is not None
            recall = await client.call_tool("memory_recall", {"query": "billing deploys"})
            assert not recall.is_error, text_of(recall)
            assert "deploy-day" in text_of(recall)
            got = text_of(await client.call_tool("memory_get", {"key": "deploy-day"}))
            assert got.count("billing service") == 5, got  # memory_get is not cut
            gone = await client.call_tool("memory_forget", {"key": "deploy-day"})
            assert not gone.is_error, text_of(gone)
            assert "forgot 'deploy-day'" in text_of(gone)
            assert await store.get("deploy-day") is None

            # The SDK checks arguments against the same JSON schema before our body runs.
            bad = await client.call_tool("memory_remember", {"key": "k", "content": 5})
            assert bad.is_error, text_of(bad)
            assert "'string'" in text_of(bad), text_of(bad)
            empty = await client.call_tool("memory_recall", {"query": ""})
            assert empty.is_error, text_of(empty)
            # A failure inside the body reads exactly as the MCP server words it.
            missing = await client.call_tool("memory_get", {"key": "nope"})
            assert missing.is_error
            assert text_of(missing) == text_of(missing_reference), text_of(missing)
            too_long = await client.call_tool(
                "memory_remember", {"key": "k", "content": "x" * (config.max_content_chars + 1)}
            )
            assert too_long.is_error and "split it" in text_of(too_long), text_of(too_long)
            no_model = await client.call_tool("memory_compact", {})
            assert no_model.is_error and "needs a model" in text_of(no_model), text_of(no_model)
            assert await store.count() == 0
    finally:
        await store.close()


@needs_sdk
def test_sdk_server_lists_like_the_mcp_server_and_round_trips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subprocess, "Popen", refuse_subprocess)
    anyio.run(round_trip, tmp_path / "memory.db")


@needs_sdk
def test_agent_options_fragment_mounts_and_allows_the_memory_tools(tmp_path: Path) -> None:
    from claude_agent_sdk import ClaudeAgentOptions

    async def check() -> None:
        store = MemoryStore(tmp_path / "memory.db", namespace="default/default")
        try:
            fragment = memory_agent_options(store, ServerConfig(readonly=True), key="mem")
            options = ClaudeAgentOptions(**fragment)
            assert isinstance(options.mcp_servers, dict)
            assert list(options.mcp_servers) == ["mem"]
            assert options.allowed_tools == [f"mcp__mem__{name}" for name in READ_TOOLS]
            async with Client(fragment["mcp_servers"]["mem"]["instance"]) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == set(READ_TOOLS)  # read-only: no write tool is even mounted
            with pytest.raises(ConfigError, match="key 'a__b'"):
                memory_agent_options(store, ServerConfig(), key="a__b")
        finally:
            await store.close()

    anyio.run(check)


def test_missing_sdk_is_a_config_error_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "claude_agent_sdk", None)  # makes the import fail

    async def check() -> None:
        store = MemoryStore(tmp_path / "memory.db", namespace="default/default")
        try:
            with pytest.raises(ConfigError, match=r"evermind-memory\[agent-sdk\]"):
                memory_sdk_server(store, ServerConfig())
        finally:
            await store.close()

    anyio.run(check)
