"""The conversation as the prebuilt agents keep it in their graph state: JSON messages.

Browser-safe (standard library and ``evermind`` only). A graph's state is JSON, so a turn is
a dict, converted to a bridge :class:`~evermind.bridges.Message` for each model call:

- ``{"role": "user", "content": "..."}`` (a plain string in an input list is a user turn);
- ``{"role": "assistant", "content": "...", "tool_calls": [{"id", "name", "arguments"}]}``;
- ``{"role": "tool", "tool_call_id": "...", "name": "...", "content": "...", "is_error": bool}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evermind.agent.prebuilt.tools import ToolResult
from evermind.bridges.base import Completion, Message, ToolCall
from evermind.errors import InputError


def user(text: str) -> dict[str, Any]:
    """A user turn."""
    return {"role": "user", "content": text}


def assistant_turn(completion: Completion) -> dict[str, Any]:
    """The assistant turn a completion makes (its text and its tool calls)."""
    turn: dict[str, Any] = {"role": "assistant", "content": completion.text}
    if completion.tool_calls:
        turn["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls
        ]
    return turn


def tool_turn(result: ToolResult) -> dict[str, Any]:
    """The turn carrying one tool's result."""
    return {
        "role": "tool",
        "tool_call_id": result.call_id,
        "name": result.name,
        "content": result.content,
        "is_error": result.is_error,
    }


def normalised(turn: Any, where: str) -> dict[str, Any]:
    """``turn`` as a message dict (a string is a user turn).

    Raises:
        InputError: Not a string or a dict with a known role and string content.
    """
    if isinstance(turn, str):
        return user(turn)
    if not isinstance(turn, Mapping):
        raise InputError(f"{where}: a message is a string or a dict, got {type(turn).__name__}")
    role = turn.get("role")
    if role not in ("user", "assistant", "tool"):
        raise InputError(f"{where}: role must be user, assistant or tool, got {role!r}")
    content = turn.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise InputError(f"{where}: content must be a string, got {type(content).__name__}")
    return {**turn, "content": content}


def add_messages(current: list[Any] | None, new: Any) -> list[Any]:
    """The ``messages`` reducer: appends, a plain string becoming a user turn.

    Raises:
        InputError: ``new`` is not a list, or holds a malformed message.
    """
    if isinstance(new, str | Mapping):
        new = [new]
    if not isinstance(new, list):
        raise InputError(f"messages: expected a list of messages, got {type(new).__name__}")
    base = list(current or [])
    return base + [normalised(t, f"messages[{len(base) + i}]") for i, t in enumerate(new)]


def to_bridge(turns: Iterable[Any]) -> tuple[Message, ...]:
    """The state's messages as the bridge's :class:`Message` s.

    Raises:
        InputError: A malformed message (named by its index).
    """
    out = []
    for i, raw in enumerate(turns):
        turn = normalised(raw, f"messages[{i}]")
        role = turn["role"]
        if role == "tool":
            out.append(Message("tool", turn["content"], tool_call_id=str(turn["tool_call_id"])))
        elif role == "assistant" and turn.get("tool_calls"):
            calls = tuple(
                ToolCall(str(c["id"]), str(c["name"]), dict(c.get("arguments") or {}))
                for c in turn["tool_calls"]
            )
            out.append(Message("assistant", turn["content"], tool_calls=calls))
        else:
            out.append(Message(role, turn["content"]))
    return tuple(out)


def last_user_text(turns: Sequence[Any]) -> str:
    """The text of the latest user turn ("" when there is none)."""
    for raw in reversed(turns):
        turn = raw if isinstance(raw, Mapping) else user(str(raw))
        if turn.get("role") == "user":
            return str(turn.get("content") or "")
    return ""


def since_last_user(turns: Sequence[Any]) -> list[dict[str, Any]]:
    """The turns after the latest user turn (this run's work)."""
    for i in range(len(turns) - 1, -1, -1):
        raw = turns[i]
        if isinstance(raw, str) or (isinstance(raw, Mapping) and raw.get("role") == "user"):
            return [dict(t) for t in turns[i + 1 :] if isinstance(t, Mapping)]
    return [dict(t) for t in turns if isinstance(t, Mapping)]


def unanswered_calls(turns: Sequence[Any]) -> list[dict[str, Any]]:
    """The tool calls of the latest assistant turn that no tool turn answers yet."""
    for i in range(len(turns) - 1, -1, -1):
        turn = turns[i]
        if isinstance(turn, Mapping) and turn.get("role") == "assistant":
            answered = {
                t.get("tool_call_id")
                for t in turns[i + 1 :]
                if isinstance(t, Mapping) and t.get("role") == "tool"
            }
            return [c for c in turn.get("tool_calls") or () if c.get("id") not in answered]
    return []
