"""Bridges to language models: Claude, GPT or any OpenAI-compatible server, and Evermind itself.

See :mod:`evermind.bridges.base` for the one contract (:class:`Bridge`, :class:`ChatRequest`,
:class:`Completion`). The SDK bridges are native-only and imported from their modules.
"""

from evermind.bridges.base import (
    Bridge,
    CacheInfo,
    ChatRequest,
    Completion,
    Delta,
    Message,
    Timing,
    ToolCall,
    Usage,
)

__all__ = [
    "Bridge",
    "CacheInfo",
    "ChatRequest",
    "Completion",
    "Delta",
    "Message",
    "Timing",
    "ToolCall",
    "Usage",
]
