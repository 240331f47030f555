"""The memory tools mounted in a Claude Agent SDK agent, in-process (``create_sdk_mcp_server``).

Owns :func:`memory_sdk_server` (an SDK MCP server config whose tools are the ``MemoryTools``
bodies the stdio and HTTP servers register: same names, descriptions, input schemas and
annotations, taken from :func:`evermind.mcp.tools.tool_specs` so they cannot drift) and
:func:`memory_agent_options` (the ``mcp_servers`` / ``allowed_tools`` fragment of
``ClaudeAgentOptions``). ``claude_agent_sdk`` is the optional ``agent-sdk`` extra and is
imported only when a server is built. Native-only (imports the ``mcp`` SDK).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult

import evermind
from evermind.errors import ConfigError
from evermind.mcp.arguments import plain_tool_error
from evermind.mcp.config import ServerConfig
from evermind.mcp.tools import MemoryTools, tool_specs
from evermind.memory import MemoryStore

logger = logging.getLogger(__name__)

SDK_SERVER_NAME = "evermind"

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def _claude_agent_sdk() -> ModuleType:
    """The ``claude_agent_sdk`` module.

    Raises:
        ConfigError: The package is not installed.
    """
    try:
        import claude_agent_sdk
    except ImportError as err:
        raise ConfigError(
            f"the Claude Agent SDK adapter needs the claude-agent-sdk package ({err}); hint: "
            "pip install 'evermind-memory[agent-sdk]'"
        ) from err
    return claude_agent_sdk


def _result_dict(result: CallToolResult) -> dict[str, Any]:
    """An MCP tool result in the SDK handler's shape: ``{"content": [...], "is_error": ...}``."""
    content = [
        block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
    ]
    return {"content": content, "is_error": bool(result.is_error)}


def _error_dict(message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": message}], "is_error": True}


def _handler(spec: Tool) -> Handler:
    """The SDK handler for one tool: validate and run ``spec`` as ``MCPServer`` does.

    Anticipated failures (bad arguments, a missing key, the store failing) come back as an
    error result with the same text the MCP server sends; a crash is logged here and reaches
    the model only as "Error executing tool <name>" (its own text stays in the log).
    """

    async def handle(arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            # The memory tools take no Context parameter, so a bare one is never read.
            result = await spec.run(arguments, Context(), convert_result=True)
        except UnexpectedToolError as err:
            logger.exception("tool %r raised an unexpected exception", spec.name)
            return _error_dict(str(err))
        except ToolError as err:
            plain = plain_tool_error(spec.name, err)
            logger.info("tool %r failed: %r", spec.name, str(plain))
            return _error_dict(str(plain))
        if not isinstance(result, CallToolResult):
            # Only a Resolve(...) parameter can ask for more input; no memory tool has one.
            return _error_dict(f"Error executing tool {spec.name}: it asked for client input")
        return _result_dict(result)

    return handle


def _build(store: MemoryStore, config: ServerConfig, model: Any) -> tuple[Any, list[str]]:
    """The SDK server config and the names of the tools it serves."""
    sdk = _claude_agent_sdk()
    specs = tool_specs(MemoryTools(store, config, model))
    tools = [
        sdk.SdkMcpTool(
            name=spec.name,
            description=spec.description,
            input_schema=spec.parameters,
            handler=_handler(spec),
            annotations=spec.annotations,
        )
        for spec in specs
    ]
    server = sdk.create_sdk_mcp_server(SDK_SERVER_NAME, evermind.__version__, tools=tools)
    return server, [spec.name for spec in specs]


def memory_sdk_server(store: MemoryStore, config: ServerConfig, model: Any = None) -> Any:
    """Returns a Claude Agent SDK ``McpSdkServerConfig`` serving the memory tools on ``store``.

    The tools run in the caller's process and event loop; nothing is spawned. Read-only
    ``config`` gives only the read tools, as on the MCP server. ``store`` stays open (the
    caller owns it).

    Args:
        store: The memory store (one namespace) the tools read and write.
        config: The caps and mode, as for ``evermind mcp``.
        model: The local Evermind model ``memory_compact`` probes with; None: no compaction.

    Returns:
        The SDK's ``McpSdkServerConfig`` (a dict; ``["instance"]`` is an ``mcp.server.Server``)
        for ``ClaudeAgentOptions.mcp_servers``.

    Raises:
        ConfigError: ``claude-agent-sdk`` is not installed.
    """
    server, _ = _build(store, config, model)
    return server


def memory_agent_options(
    store: MemoryStore, config: ServerConfig, model: Any = None, key: str = SDK_SERVER_NAME
) -> dict[str, Any]:
    """The ``ClaudeAgentOptions`` keyword arguments that mount the memory tools in-process.

    ``ClaudeAgentOptions(**memory_agent_options(store, config), system_prompt=...)`` gives the
    agent the memory tools under ``mcp__<key>__memory_*``, each allowed without a permission
    prompt. Merge by hand when the agent has other MCP servers or allowed tools.

    Args:
        store: The memory store the tools read and write.
        config: The caps and mode (read-only: only the read tools are mounted and allowed).
        model: The local Evermind model for ``memory_compact``; None: no compaction.
        key: The server's key in ``mcp_servers``, the middle of each tool's full name.

    Returns:
        ``{"mcp_servers": {key: server}, "allowed_tools": ["mcp__<key>__memory_recall", ...]}``.

    Raises:
        ConfigError: ``claude-agent-sdk`` is not installed, or ``key`` is empty or has ``__``.
    """
    if not key or "__" in key:
        raise ConfigError(
            f"memory_agent_options: key {key!r} cannot name an MCP server in a tool name "
            "(mcp__<key>__<tool>); hint: use a plain word such as 'evermind'"
        )
    server, names = _build(store, config, model)
    return {
        "mcp_servers": {key: server},
        "allowed_tools": [f"mcp__{key}__{name}" for name in names],
    }


__all__ = ["SDK_SERVER_NAME", "memory_agent_options", "memory_sdk_server"]
