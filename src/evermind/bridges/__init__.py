"""Bridges to language models: Claude, GPT or any OpenAI-compatible server, Gemini, and Evermind.

See :mod:`evermind.bridges.base` for the one contract (:class:`Bridge`, :class:`ChatRequest`,
:class:`Completion`) and docs/bridges.md. Exported here: what runs anywhere (the contract,
:class:`InstrumentedBridge`, :class:`PriceTable`). The bridges themselves are imported from
their modules: ``bridges.anthropic.AnthropicBridge``, ``bridges.openai.OpenAIBridge``,
``bridges.vertex.VertexBridge``, ``bridges.evermind.EvermindBridge`` (native-only) and
``bridges.fetch.FetchBridge`` (the tab).
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
from evermind.bridges.instrumented import InstrumentedBridge
from evermind.bridges.pricing import PriceTable, Rates

__all__ = [
    "Bridge",
    "CacheInfo",
    "ChatRequest",
    "Completion",
    "Delta",
    "InstrumentedBridge",
    "Message",
    "PriceTable",
    "Rates",
    "Timing",
    "ToolCall",
    "Usage",
]
