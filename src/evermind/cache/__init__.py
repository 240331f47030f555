"""Semantic cache: L1 in-process vectors, optional L2 over HTTP, hits within an error bound.

This package owns Evermind's semantic cache. :class:`SemanticCache` serves a cached LLM
answer when a new query embeds close to a cached one *and* the decision holds that the two
queries ask the same thing, within the error bound it was given. The guard protocol
(:class:`Guard`, :class:`Refusal`, :class:`GuardChain`) is in :mod:`evermind.cache.guard`;
the rule-based decision's default guards are the English plug-in
:mod:`evermind.cache.english` (:data:`DEFAULT_GUARDS`, :func:`default_guard`).
:class:`HttpSemanticCacheBackend` is the shared L2 on the agent runtime. Every cache (this
library, the Studio tab, the runtime's L2, the gateway) decides hit or miss with the verified
decision by default (:func:`evermind.cache.verified.decide_verified`: the learned pair verifier
of :mod:`evermind.cache.verifier` and an error bound δ,
:data:`~evermind.cache.verified.DEFAULT_MAX_ERROR` = 0.01). The older rule-based
:func:`evermind.cache.decide.decide` (a calibrated threshold, shared content words weighted by
IDF, the guards, a miss between near-tied different answers) runs only when asked for
(``max_error=None`` / ``"off"``): it has no error bound. The calibration, the term statistics
and the indexes that score the entries are :mod:`evermind.search`'s (re-exported here:
:class:`Calibration`, :func:`calibrate`, :class:`TermStats`).

Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

from evermind.cache.decide import Candidate, Decision, decide
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
from evermind.search.calibration import Calibration, calibrate
from evermind.search.terms import TermStats

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
    "Calibration",
    "Candidate",
    "Decision",
    "FunctionGuard",
    "Guard",
    "GuardChain",
    "HttpRequest",
    "HttpResponse",
    "HttpSemanticCacheBackend",
    "L2Hit",
    "Refusal",
    "SemanticCache",
    "TermStats",
    "calibrate",
    "decide",
    "default_guard",
    "explain",
]
