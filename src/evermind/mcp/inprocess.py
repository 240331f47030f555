"""In-process use of the memory tools: an MCP client wired to ``build_server`` in memory.

Owns the no-subprocess path for Python agents: the same ``MemoryTools`` bodies that the stdio
and HTTP servers register, reached through the official ``mcp`` SDK's in-memory transport.
Native-only (imports the ``mcp`` SDK).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from mcp import Client

from evermind.mcp.config import ServerConfig
from evermind.mcp.server import build_server
from evermind.memory import MemoryStore


@contextlib.asynccontextmanager
async def memory_client(store: MemoryStore, config: ServerConfig) -> AsyncIterator[Client]:
    """Yields an MCP ``Client`` connected in-process to the memory tools on ``store``.

    The server runs in the caller's event loop; nothing is spawned. ``store`` stays open
    afterwards (the caller owns it).
    """
    async with Client(build_server(store, config)) as client:
        yield client


__all__ = ["memory_client"]
