"""Semantic cache: L1 in-process vectors, optional L2 over HTTP, guards beyond cosine.

This package owns Evermind's semantic cache. :class:`SemanticCache` serves a cached LLM
answer when a new query embeds close to a cached one *and* every guard agrees that the two
queries ask the same thing (:func:`default_guard`, :data:`DEFAULT_GUARDS`).
:class:`HttpSemanticCacheBackend` is the shared L2 on the agent runtime.

Browser-safe: standard library only.
"""

from __future__ import annotations

from evermind.cache.guard_base import FunctionGuard, Guard, Refusal
from evermind.cache.guards import DEFAULT_GUARDS, GuardChain, default_guard, explain
from evermind.cache.l2 import HttpRequest, HttpResponse, HttpSemanticCacheBackend, L2Hit
from evermind.cache.semantic import CacheAnswer, CacheLookup, CacheStats, SemanticCache

__all__ = [
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
