"""Building and running the MCP memory server over stdio (``evermind mcp``).

Owns :func:`open_store` (the SQLite-backed ``MemoryStore`` every MCP host shares, with the
``.evermind`` model (``--model``) or a static embedder (``--embedder base|PATH``) as its CPU
embedder when one is given, computing on a worker thread so
the event loop keeps serving other tools and ``/healthz``), :func:`build_server` (an
``MCPServer`` carrying the memory tools, and the experience tools when opted in) and
:func:`run_stdio`. The HTTP transport is in
``evermind.mcp.http``. Native-only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

import evermind
from evermind.errors import ConfigError
from evermind.mcp.arguments import plain_tool_error
from evermind.mcp.config import ServerConfig
from evermind.mcp.experience_tools import (
    ExperienceSettings,
    ExperienceTools,
    register_experience_tools,
)
from evermind.mcp.tools import INSTRUCTIONS, MemoryTools, register_tools
from evermind.memory import MemoryStore

logger = logging.getLogger(__name__)

SERVER_NAME = "evermind-memory"


class MemoryServer(MCPServer[Any]):
    """The SDK's ``MCPServer``, answering a call whose arguments fail validation with one
    line naming each bad argument (:func:`~evermind.mcp.arguments.argument_error`) instead of
    pydantic's text and URL."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as err:
            raise plain_tool_error(name, err) from err.__cause__


class ThreadEmbedder:
    """A model as the memory store's embedder, embedding on a worker thread (off the loop).

    ``model`` is the Evermind model (``memory_compact`` probes with it), or None when the
    embedder is a static one (``--embedder``), which has no model to probe with."""

    def __init__(self, model: Any, embedder: Any = None) -> None:
        self.model = model
        self.source: Any = model if embedder is None else embedder
        self.fingerprint: str = self.source.fingerprint

    async def embed(self, texts: Sequence[str]) -> Any:
        """(N, D) float32 rows, L2-normalised, computed by ``asyncio.to_thread``."""
        return await asyncio.to_thread(self.source.embed, list(texts))


def load_embedder(model_file: Path | None, spec: str | None = None) -> ThreadEmbedder | None:
    """The store's embedder: the ``.evermind`` package at ``model_file``, or the static
    embedder ``spec`` names (``base`` or a file, :mod:`evermind.embedder.shipped`), or None
    for lexical recall (neither given).

    Raises:
        ConfigError: Both are given.
        InputError: The embedder file cannot be read.
        PackageError: The file is not a valid package (or embedder file).
    """
    if model_file is not None and spec is not None:
        raise ConfigError("mcp: expected --model or --embedder, got both; pass one")
    if spec is not None:
        from evermind.embedder.shipped import load_embedder_spec

        static = load_embedder_spec(spec)
        logger.info("embedding with --embedder %s (%s)", spec, static.fingerprint)
        return ThreadEmbedder(None, static)
    if model_file is None:
        return None
    model = evermind.load(model_file)
    logger.info("embedding with %s (%s)", model_file, getattr(model, "fingerprint", "?"))
    if "embedding_tuning" not in model.package.manifest.get("training", {}):
        logger.warning(
            "%s: this model's embeddings are not tuned for recall, so fusing them barely helps "
            "BM25; hint: evermind tune-embedder --model %s --out tuned.evermind",
            model_file,
            model_file,
        )
    return ThreadEmbedder(model)


def open_store(memory_file: Path, embedder: Any, namespace: str) -> MemoryStore:
    """Opens the memory store on ``memory_file`` (created if missing) for the store ``namespace``.

    ``namespace`` is the full store namespace (``evermind.mcp.config.store_namespace``).

    Raises:
        StorageError: The file cannot be opened as a memory database.
    """
    return MemoryStore(memory_file, embedder, namespace=namespace)


def build_server(
    store: MemoryStore,
    config: ServerConfig,
    model: Any = None,
    experience: ExperienceSettings | None = None,
) -> MCPServer[Any]:
    """Returns an ``MCPServer`` whose tools read (and unless read-only write) ``store``.

    Args:
        store: The memory store (one tenant's namespace).
        config: Caps and mode; ``config.experience`` adds the experience tools.
        model: The local Evermind model ``memory_compact`` probes with (None: no compaction).
        experience: What the experience tools get (the private model file, whether this
            tenant owns it); None: no private model. Ignored unless ``config.experience``.

    Raises:
        StorageError: The experience tables cannot be opened in the store's file.
    """
    server: MCPServer[Any] = MemoryServer(
        SERVER_NAME,
        title="Evermind memory",
        instructions=INSTRUCTIONS,
        version=evermind.__version__,
        log_level="WARNING",
    )
    names = register_tools(server, MemoryTools(store, config, model))
    if config.experience:
        tools = ExperienceTools(store, experience or ExperienceSettings(), config.max_runs)
        names += register_experience_tools(server, tools, config.readonly)
    logger.info("MCP tools: %s", ", ".join(names))
    return server


async def run_stdio(
    store: MemoryStore,
    config: ServerConfig,
    model: Any = None,
    experience: ExperienceSettings | None = None,
) -> None:
    """Serves the memory tools on stdin/stdout until the client closes the pipe."""
    server = build_server(store, config, model, experience)
    try:
        await server.run_stdio_async()
    finally:
        await store.close()


__all__ = [
    "SERVER_NAME",
    "MemoryServer",
    "ThreadEmbedder",
    "build_server",
    "load_embedder",
    "open_store",
    "run_stdio",
]
