"""The memory tools used in-process: an official SDK client on the in-memory transport.

A real ``MemoryStore`` on SQLite, the real ``build_server`` tools, no subprocess: remember →
recall → get → forget round trip, and malformed arguments coming back as tool errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from evermind.mcp.config import ServerConfig
from evermind.mcp.inprocess import memory_client
from evermind.memory import MemoryStore


def text_of(result: Any) -> str:
    """The text content of a tool result."""
    return "\n".join(block.text for block in result.content if block.type == "text")


async def round_trip(memory_file: Path) -> None:
    """remember → recall → get → forget → get-missing, all through the in-process client."""
    store = MemoryStore(memory_file, namespace="default/default")
    try:
        async with memory_client(store, ServerConfig(max_chars=40)) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"memory_remember", "memory_recall", "memory_get", "memory_forget"} <= names
            long_text = "Niamh deploys the billing service on Fridays. " * 5
            saved = await client.call_tool(
                "memory_remember", {"key": "deploy-day", "content": long_text, "tags": ["ops"]}
            )
            assert not saved.is_error, text_of(saved)
            recall = await client.call_tool("memory_recall", {"query": "billing deploys"})
            assert not recall.is_error, text_of(recall)
            assert "deploy-day" in text_of(recall)
            got = text_of(await client.call_tool("memory_get", {"key": "deploy-day"}))
            assert got.count("billing service") == 5, got  # memory_get is not cut
            gone = await client.call_tool("memory_forget", {"key": "deploy-day"})
            assert not gone.is_error, text_of(gone)
            assert await store.get("deploy-day") is None
            bad = await client.call_tool("memory_remember", {"key": "k", "content": 5})
            assert bad.is_error, text_of(bad)
            assert "content" in text_of(bad)
    finally:
        await store.close()


def test_in_process_round_trip_and_a_tool_error(tmp_path: Path) -> None:
    anyio.run(round_trip, tmp_path / "memory.db")
