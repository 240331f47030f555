"""Tool arguments that fail validation, said in one line (native-only).

The ``mcp`` SDK reports a call whose arguments do not match a tool's input schema with
pydantic's own text: several lines, the error's internal type, the rejected input and a
documentation URL. A model (or a person reading the Inspector) needs which argument was
wrong and how. :func:`argument_error` writes that, one line for the whole call, and
:func:`plain_tool_error` applies it to the SDK's ``ToolError``; the MCP server
(:mod:`evermind.mcp.server`) and the Agent SDK adapter (:mod:`evermind.mcp.agent_sdk`) both
answer with it.
"""

from __future__ import annotations

from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import ValidationError

#: Longest rendering of a rejected value quoted back.
QUOTED_CHARS = 60


def argument_error(tool: str, error: ValidationError) -> str:
    """``tool: argument 'x' …; argument 'y' …``: each bad argument and what was wrong."""
    problems = []
    for item in error.errors(include_url=False):
        name = ".".join(str(part) for part in item["loc"]) or "arguments"
        kind = item["type"]
        if kind == "missing":
            problems.append(f"argument {name!r} is required")
        elif kind in ("extra_forbidden", "unexpected_keyword_argument"):
            problems.append(f"argument {name!r} is not a parameter of {tool}")
        else:
            message = str(item["msg"])
            message = message[:1].lower() + message[1:]
            problems.append(f"argument {name!r}: {message}, got {_quoted(item.get('input'))}")
    return " ".join(f"{tool}: {'; '.join(problems)}".split())


def plain_tool_error(tool: str, err: ToolError) -> ToolError:
    """``err`` with a validation failure in one line (:func:`argument_error`); any other
    tool error as it is."""
    cause = err.__cause__
    if isinstance(cause, ValidationError) and not isinstance(err, UnexpectedToolError):
        plain = ToolError(argument_error(tool, cause))
        plain.__cause__ = cause  # the SDK logs the rejected field names from it
        return plain
    return err


def _quoted(value: object) -> str:
    text = repr(value)
    return text if len(text) <= QUOTED_CHARS else text[: QUOTED_CHARS - 3] + "..."


__all__ = ["argument_error", "plain_tool_error"]
