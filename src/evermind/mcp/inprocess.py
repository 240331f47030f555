"""In-process use of the memory tools: an MCP client wired to ``build_server`` in memory.

Owns the no-subprocess path for Python agents: the same ``MemoryTools`` bodies that the stdio
and HTTP servers register, reached through the official ``mcp`` SDK's in-memory transport.
Native-only (imports the ``mcp`` SDK).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mcp import Client

from evermind.mcp.config import ServerConfig
from evermind.mcp.experience_tools import ExperienceSettings
from evermind.mcp.server import build_server
from evermind.memory import MemoryStore


@contextlib.asynccontextmanager
async def memory_client(
    store: MemoryStore,
    config: ServerConfig,
    model: Any = None,
    experience: ExperienceSettings | None = None,
) -> AsyncIterator[Client]:
    """Yields an MCP ``Client`` connected in-process to the memory tools on ``store``.

    The server runs in the caller's event loop; nothing is spawned. ``store`` stays open
    afterwards (the caller owns it). ``model`` and ``experience`` are ``build_server``'s (the
    experience tools are served when ``config.experience`` is set).
    """
    async with Client(build_server(store, config, model, experience)) as client:
        yield client


__all__ = ["memory_client"]
