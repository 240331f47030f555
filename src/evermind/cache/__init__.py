"""Semantic cache: L1 in-process vectors, optional L2 over HTTP, guards beyond cosine.

This package owns Evermind's semantic cache. :class:`SemanticCache` serves a cached LLM
answer when a new query embeds close to a cached one *and* every guard agrees that the two
queries ask the same thing. The guard protocol (:class:`Guard`, :class:`Refusal`,
:class:`GuardChain`) is in :mod:`evermind.cache.guard`; the default guards are the English
plug-in :mod:`evermind.cache.english` (:data:`DEFAULT_GUARDS`, :func:`default_guard`).
:class:`HttpSemanticCacheBackend` is the shared L2 on the agent runtime.

Browser-safe: standard library only.
"""

from __future__ import annotations

from evermind.cache.english import (
    ENGLISH_CHAIN,
    ENGLISH_GUARDS,
    FunctionGuard,
    default_guard,
    explain,
)
from evermind.cache.guard import Guard, GuardChain, Refusal
from evermind.cache.l2 import HttpRequest, HttpResponse, HttpSemanticCacheBackend, L2Hit
from evermind.cache.semantic import CacheAnswer, CacheLookup, CacheStats, SemanticCache

#: The guards :class:`SemanticCache` runs unless given others (the English plug-in's).
DEFAULT_GUARDS = ENGLISH_GUARDS
#: :data:`DEFAULT_GUARDS` as one :class:`GuardChain`.
DEFAULT_CHAIN = ENGLISH_CHAIN

__all__ = [
    "DEFAULT_CHAIN",
    "DEFAULT_GUARDS",
    "CacheAnswer",
    "CacheLookup",
    "CacheStats",
    "FunctionGuard",
    "Guard",
    "GuardChain",
    "HttpRequest",
    "HttpResponse",
    "HttpSemanticCacheBackend",
    "L2Hit",
    "Refusal",
    "SemanticCache",
    "default_guard",
    "explain",
]
