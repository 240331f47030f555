"""Reading a Claude Code transcript for the hooks: the user's words and the memory writes.

A transcript is a JSONL file (``transcript_path`` in every hook payload), one event a line:
``{"type": "user", "isSidechain": false, "userType": "external", "message": {"role": "user",
"content": "…" | [blocks]}}`` for a user line, ``{"type": "assistant", "message": {"content":
[{"type": "text"…}, {"type": "tool_use", "name": …, "input": …}]}}`` for the model.
:func:`read_turns` keeps what the hooks need: each message the user typed and each
``memory_remember`` call (the MCP tool is named ``mcp__<server>__memory_remember``), in order.

Many ``user`` lines hold text the user never typed, and none of it may become "the user's
instruction": a sub-agent's turns (``isSidechain: true``: the prompt the main agent wrote for
it, and its own calls), tool results (``tool_result`` blocks, a ``toolUseResult`` field),
lines Claude Code injects (``isMeta``, the ``isCompactSummary`` summary of a compacted
window, a ``userType`` other than ``external``, ``[Request interrupted by user…]`` markers,
``<command-…>`` / ``<system-reminder>`` wrappers, the "continued from a previous
conversation" preamble). A message that holds any such part is left out whole: what else it
holds cannot be told apart from the injected text. Lines that do not parse, or do not look
like either kind, are skipped: the format belongs to Claude Code and gains fields over time.

:func:`is_durable` is the heuristic that decides whether a message is a durable instruction or
correction worth keeping ("from now on…", "always…", "never…", "I prefer…", "no, use…"):
phrases, not a model, so it is fast and predictable; its misses are what the skill file and
the tool descriptions are for. Standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: At most this much of the end of a transcript is read (a long session's file is large).
TAIL_BYTES = 4 * 1024 * 1024
#: Longer messages are pasted material (logs, files), not instructions.
MAX_INSTRUCTION_CHARS = 1500

_REMEMBER = re.compile(r"(^|__)memory_remember$")
_DURABLE = re.compile(
    r"\b(from now on|going forward|in (the )?future|for future reference|remember (that|to|this)"
    r"|always|never|don'?t ever|do not ever|stop (using|doing|adding)|please don'?t|do not use"
    r"|don'?t use|i (prefer|like|want|hate|need) |i'?d rather|my preference|we (use|don'?t use"
    r"|prefer|always|never)|our (convention|policy|rule)|the rule is|make sure (to|you)"
    r"|that'?s (wrong|not right|incorrect)|that is (wrong|not right|incorrect)"
    r"|(^|\. )no,? (use|it'?s|that'?s|we|i)|(^|\. )actually,? )",
    re.IGNORECASE,
)
#: Openings of text Claude Code writes into a user line (never typed by the user).
_INJECTED = (
    "<command-",
    "<local-command",
    "<system-reminder",
    "<bash-",
    "<user-prompt-submit-hook",
    "Caveat: ",
    "[Request interrupted by user",
    "This session is being continued from a previous conversation",
)
#: Envelope flags that mark a user line as not the user's own turn.
_NOT_THE_USER = ("isSidechain", "isMeta", "isCompactSummary", "isVisibleInTranscriptOnly")


@dataclass(frozen=True)
class Turn:
    """One event of the transcript that a hook cares about.

    Attributes:
        kind: ``user`` (a human message) or ``remember`` (a ``memory_remember`` call).
        text: The message, or the remembered content.
    """

    kind: str
    text: str


def _lines(path: Path, tail_bytes: int) -> Iterator[str]:
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        start = max(0, size - tail_bytes)
        handle.seek(start)
        data = handle.read()
    if start:
        data = data.split(b"\n", 1)[1] if b"\n" in data else b""
    for raw in data.split(b"\n"):
        if raw.strip():
            yield raw.decode("utf-8", errors="replace")


def _user_text(message: object) -> str | None:
    """The typed text of a user message; None for tool results and injected text."""
    if not isinstance(message, dict) or message.get("role", "user") != "user":
        return None
    content = message.get("content")
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        if not all(isinstance(b, dict) for b in content):
            return None
        if any(b.get("type") == "tool_result" for b in content):
            return None
        parts = [str(b.get("text", "")) for b in content if b.get("type") == "text"]
    else:
        return None
    if any(part.lstrip().startswith(_INJECTED) for part in parts):
        return None
    text = "\n".join(parts).strip()
    return text or None


def _is_own_turn(event: dict[str, object]) -> bool:
    """Whether a ``user`` line is the user's own turn of the main conversation."""
    if any(event.get(flag) for flag in _NOT_THE_USER) or event.get("toolUseResult") is not None:
        return False
    return event.get("userType", "external") == "external"


def _remembered(message: object) -> Iterator[str]:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return
    for block in message["content"]:
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            continue
        if _REMEMBER.search(str(block.get("name", ""))):
            given = block.get("input")
            yield str(given.get("content", "")) if isinstance(given, dict) else ""


def read_turns(path: Path, tail_bytes: int = TAIL_BYTES) -> list[Turn]:
    """The user's own messages and ``memory_remember`` calls of the transcript's end, in order.

    Raises:
        OSError: The file cannot be read.
    """
    turns: list[Turn] = []
    for line in _lines(path, tail_bytes):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(event, dict) or event.get("isSidechain"):
            continue  # a sub-agent's turn: neither the user's words nor the session's writes
        if event.get("type") == "user":
            text = _user_text(event.get("message")) if _is_own_turn(event) else None
            if text is not None:
                turns.append(Turn("user", text))
        elif event.get("type") == "assistant":
            turns.extend(Turn("remember", text) for text in _remembered(event.get("message")))
    return turns


def is_durable(text: str) -> bool:
    """Whether ``text`` reads as a durable instruction, preference or correction."""
    if len(text) > MAX_INSTRUCTION_CHARS:
        return False
    return _DURABLE.search(text) is not None


def unrecorded_instruction(turns: list[Turn]) -> str | None:
    """The last human message if it is durable and no ``memory_remember`` followed it."""
    for index in range(len(turns) - 1, -1, -1):
        if turns[index].kind == "user":
            last = turns[index]
            recorded = any(turn.kind == "remember" for turn in turns[index + 1 :])
            return last.text if is_durable(last.text) and not recorded else None
    return None


def durable_instructions(turns: list[Turn]) -> list[str]:
    """Every durable human message of ``turns`` (duplicates dropped), oldest first."""
    return list(dict.fromkeys(t.text for t in turns if t.kind == "user" and is_durable(t.text)))


__all__ = [
    "Turn",
    "durable_instructions",
    "is_durable",
    "read_turns",
    "unrecorded_instruction",
]
