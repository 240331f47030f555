"""The chat template: how a conversation becomes the plain text an Evermind model reads.

Browser-safe (standard library only). One template for every path that chats with a model:
the runtime's ``POST /v1/chat/completions`` and the in-process
:class:`~evermind.bridges.evermind.EvermindBridge` both render with :func:`render_chat`, so
the same conversation gives the same prompt (documented in docs/runtime.md)::

    <system and developer messages, joined by newlines>   (only when there are any)
    <blank line>
    User: <content>
    Assistant: <content>
    ...
    Assistant:

The model continues after the final ``Assistant:``; generation stops at :data:`CHAT_STOP`
(``\\nUser:``, the model starting the next user turn) in addition to the caller's stop
strings, and the reply's leading whitespace is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Stop string the chat template adds: the model starting the next user turn.
CHAT_STOP = "\nUser:"
ROLE_LABELS = {"user": "User", "assistant": "Assistant", "tool": "Tool", "function": "Tool"}
SYSTEM_ROLES = ("system", "developer")


def render_chat(messages: Sequence[tuple[str, str]]) -> str:
    """The prompt for ``(role, text)`` turns under the documented chat template."""
    system = [text for role, text in messages if role in SYSTEM_ROLES]
    lines = ["\n".join(system) + "\n"] if system else []
    for role, text in messages:
        if role not in SYSTEM_ROLES:
            lines.append(f"{ROLE_LABELS.get(role, role.title())}: {text}")
    lines.append("Assistant:")
    return "\n".join(lines)
