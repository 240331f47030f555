"""The semantic cache: a read-through cache of LLM answers keyed by query meaning.

This module owns :class:`SemanticCache` (L1: in-process vectors with LRU capacity, TTL and
namespaces, plus an optional L2 backend), the lookup result :class:`CacheLookup` and the
counters :class:`CacheStats`. A lookup embeds the query, takes the stored entries whose
cosine reaches the threshold, best first, and serves the first one every guard accepts
(see :mod:`evermind.cache.guard`; by default the English guards of
:mod:`evermind.cache.english`). The embedder's fingerprint is part of every key, so a
new model never serves vectors made by an old one.

Browser-safe: standard library only. The sync methods work with a sync embedder and a
sync L2 transport; the ``a``-prefixed methods accept sync or async ones.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from evermind.cache.english import ENGLISH_CHAIN, default_guard
from evermind.cache.guard import GuardChain, Refusal
from evermind.cache.l2 import JSONValue, L2Hit, SemanticCacheBackend
from evermind.errors import ConfigError, ShapeError, StorageError

__all__ = ["CacheAnswer", "CacheLookup", "CacheStats", "SemanticCache"]

logger = logging.getLogger(__name__)

Vector = Sequence[float]
Embedder = Callable[[str], Vector | Awaitable[Vector]]
GuardCallable = Callable[[str, str], bool]
Generate = Callable[[str], JSONValue | Awaitable[JSONValue]]
T = TypeVar("T")


@dataclass(frozen=True)
class CacheLookup:
    """What a lookup found and why.

    Attributes:
        hit: True when a cached answer is served.
        response: The cached answer on a hit, else None.
        tier: "l1" or "l2" on a hit, else None.
        score: Cosine of the best candidate seen (the served one on a hit), or None when
            no entry reached the threshold.
        cached_query: The query of the served entry, or of the best refused one.
        refused_by: The guard that refused the best candidate on a miss, else None.
        reason: Why it hit or missed, in words.
    """

    hit: bool
    response: JSONValue | None = None
    tier: str | None = None
    score: float | None = None
    cached_query: str | None = None
    refused_by: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class CacheAnswer:
    """The result of :meth:`SemanticCache.get_or_generate`.

    Attributes:
        response: The answer, cached or freshly generated.
        lookup: The lookup that preceded it.
        generated: True when ``generate`` was called.
    """

    response: JSONValue
    lookup: CacheLookup
    generated: bool


@dataclass
class CacheStats:
    """Counters since the cache was made. ``refusals`` counts refused candidates by guard."""

    hits_l1: int = 0
    hits_l2: int = 0
    misses: int = 0
    stores: int = 0
    evictions: int = 0
    expirations: int = 0
    l2_errors: int = 0
    refusals: dict[str, int] = field(default_factory=dict)

    @property
    def hits(self) -> int:
        """Hits in either tier."""
        return self.hits_l1 + self.hits_l2

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (0.0 before the first lookup)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


@dataclass
class _Entry:
    namespace: str
    fingerprint: str
    query: str
    vector: tuple[float, ...]
    response: JSONValue
    meta: dict[str, JSONValue] | None
    expires_at: float | None


def _normalise(vector: Vector, query: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in vector)
    except (TypeError, ValueError) as err:
        raise ShapeError(
            f"SemanticCache: the embedder returned {type(vector).__name__} for {query!r}; "
            "expected a sequence of floats"
        ) from err
    norm = math.sqrt(sum(x * x for x in values))
    if not values or norm == 0.0 or not math.isfinite(norm):
        raise ShapeError(
            f"SemanticCache: the embedder returned a vector of length {len(values)} and norm "
            f"{norm} for {query!r}; expected a non-empty, finite, non-zero vector"
        )
    return tuple(x / norm for x in values)


def _sync(value: T | Awaitable[T], what: str) -> T:
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()  # a coroutine that will never run; close it so Python does not warn
        raise ConfigError(
            f"SemanticCache: {what} returned an awaitable in a sync call; expected a plain "
            "value; hint: use the async methods (alookup, aget_or_generate)"
        )
    return value


async def _maybe_await(value: T | Awaitable[T]) -> T:
    if inspect.isawaitable(value):
        return await value
    return value


class SemanticCache:
    """A read-through semantic cache with guards beyond cosine.

    Args:
        embed: ``embed(text) -> vector`` (sync or async). Vectors are L2-normalised here.
        threshold: Cosine at and above which a stored query is a candidate, in [-1, 1].
        guard: A :class:`GuardChain` (refusals are named per guard), any callable
            ``(query, cached_query) -> bool``, or None for cosine only. Defaults to the
            English guards (:data:`evermind.cache.english.ENGLISH_CHAIN`).
        l2: An optional shared backend (see :class:`evermind.cache.l2.HttpSemanticCacheBackend`).
        capacity: Most L1 entries kept (all namespaces together); least recently used go.
        ttl: Seconds an entry lives, or None for no expiry.
        fingerprint: Names the embedder (model and version). Defaults to the embedder's
            ``fingerprint`` attribute, else its qualified name; pass one explicitly.
        clock: Monotonic seconds, injectable for tests.

    Raises:
        ConfigError: On an invalid threshold, capacity or ttl.
    """

    def __init__(
        self,
        embed: Embedder,
        *,
        threshold: float = 0.9,
        guard: GuardChain | GuardCallable | None = ENGLISH_CHAIN,
        l2: SemanticCacheBackend | None = None,
        capacity: int = 1024,
        ttl: float | None = None,
        fingerprint: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(threshold, int | float) or not -1.0 <= float(threshold) <= 1.0:
            raise ConfigError(
                f"SemanticCache: threshold must be a cosine in [-1, 1], received {threshold!r}; "
                "hint: 0.85-0.95 suits most sentence embedders"
            )
        if not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(f"SemanticCache: capacity must be an int >= 1, received {capacity!r}")
        if ttl is not None and (not isinstance(ttl, int | float) or ttl <= 0):
            raise ConfigError(f"SemanticCache: ttl must be None or seconds > 0, received {ttl!r}")
        self.threshold = float(threshold)
        self.guard = guard
        self.l2 = l2
        self.capacity = capacity
        self.ttl = None if ttl is None else float(ttl)
        self._clock = clock
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        # (namespace, fingerprint, query) -> entry key: storing an answer replaces the old
        # one for the same query without scanning every entry.
        self._by_query: dict[tuple[str, str, str], int] = {}
        self._next_key = 0
        self._stats = CacheStats()
        self._embed = embed
        self._fingerprint = fingerprint or _default_fingerprint(embed)

    # ----------------------------------------------------------------- configuration

    @property
    def fingerprint(self) -> str:
        """The current embedder's fingerprint (part of every key)."""
        return self._fingerprint

    @property
    def stats(self) -> CacheStats:
        """The live counters."""
        return self._stats

    def __len__(self) -> int:
        return len(self._entries)

    def set_embedder(self, embed: Embedder, fingerprint: str | None = None) -> None:
        """Switches to a new embedder; L1 entries made by any other fingerprint are dropped."""
        self._embed = embed
        self._fingerprint = fingerprint or _default_fingerprint(embed)
        stale = [k for k, e in self._entries.items() if e.fingerprint != self._fingerprint]
        for key in stale:
            self._drop(key)

    def invalidate(self, namespace: str | None = None, query: str | None = None) -> int:
        """Drops L1 entries of ``namespace`` (all when None) whose query is ``query`` (all
        when None). Returns how many were dropped. L2 entries are not touched."""
        doomed = [
            k
            for k, e in self._entries.items()
            if (namespace is None or e.namespace == namespace)
            and (query is None or e.query == query)
        ]
        for key in doomed:
            self._drop(key)
        return len(doomed)

    # ----------------------------------------------------------------- sync API

    def lookup(self, query: str, namespace: str = "default") -> CacheLookup:
        """Looks ``query`` up in L1, then L2. Never generates."""
        vector = self._embed_sync(query)
        return self._finish(self._lookup_with(query, vector, namespace, sync=True))

    def store(
        self,
        query: str,
        response: JSONValue,
        meta: dict[str, JSONValue] | None = None,
        namespace: str = "default",
    ) -> None:
        """Stores an answer for ``query`` in L1 (and L2 when configured)."""
        vector = self._embed_sync(query)
        self._store_l1(query, vector, response, meta, namespace)
        if self.l2 is not None:
            self._l2_call(
                lambda b: b.store(list(vector), response, self._l2_ns(namespace), meta, query)
            )

    def get_or_generate(
        self,
        query: str,
        generate: Callable[[str], JSONValue],
        meta: dict[str, JSONValue] | None = None,
        namespace: str = "default",
    ) -> CacheAnswer:
        """Serves a cached answer, or calls ``generate(query)`` once and stores its answer."""
        vector = self._embed_sync(query)
        found = self._finish(self._lookup_with(query, vector, namespace, sync=True))
        if found.hit:
            return CacheAnswer(found.response, found, generated=False)
        response = _sync(generate(query), "generate")
        self._store_l1(query, vector, response, meta, namespace)
        if self.l2 is not None:
            self._l2_call(
                lambda b: b.store(list(vector), response, self._l2_ns(namespace), meta, query)
            )
        return CacheAnswer(response, found, generated=True)

    # ----------------------------------------------------------------- async API

    async def alookup(self, query: str, namespace: str = "default") -> CacheLookup:
        """Async :meth:`lookup`; the embedder and L2 transport may be sync or async."""
        vector = await self._embed_async(query)
        local = self._lookup_with(query, vector, namespace, sync=False)
        if local.hit or self.l2 is None:
            return self._finish(local)
        return self._finish(await self._l2_lookup_async(query, vector, namespace, local))

    async def astore(
        self,
        query: str,
        response: JSONValue,
        meta: dict[str, JSONValue] | None = None,
        namespace: str = "default",
    ) -> None:
        """Async :meth:`store`."""
        vector = await self._embed_async(query)
        self._store_l1(query, vector, response, meta, namespace)
        await self._l2_store_async(query, vector, response, meta, namespace)

    async def aget_or_generate(
        self,
        query: str,
        generate: Generate,
        meta: dict[str, JSONValue] | None = None,
        namespace: str = "default",
    ) -> CacheAnswer:
        """Async :meth:`get_or_generate`; ``generate`` may be sync or async."""
        vector = await self._embed_async(query)
        found = self._lookup_with(query, vector, namespace, sync=False)
        if not found.hit and self.l2 is not None:
            found = await self._l2_lookup_async(query, vector, namespace, found)
        found = self._finish(found)
        if found.hit:
            return CacheAnswer(found.response, found, generated=False)
        response = await _maybe_await(generate(query))
        self._store_l1(query, vector, response, meta, namespace)
        await self._l2_store_async(query, vector, response, meta, namespace)
        return CacheAnswer(response, found, generated=True)

    # ----------------------------------------------------------------- internals

    def _check_query(self, query: str) -> None:
        if not isinstance(query, str) or not query.strip():
            raise ConfigError(
                f"SemanticCache: expected a non-empty query string, received {query!r}"
            )

    def _embed_sync(self, query: str) -> tuple[float, ...]:
        self._check_query(query)
        return _normalise(_sync(self._embed(query), "embed"), query)

    async def _embed_async(self, query: str) -> tuple[float, ...]:
        self._check_query(query)
        return _normalise(await _maybe_await(self._embed(query)), query)

    def _refusal(self, query: str, cached_query: str) -> Refusal | None:
        if self.guard is None:
            return None
        if self.guard is default_guard:  # the function form of ENGLISH_CHAIN: keep its reasons
            return ENGLISH_CHAIN.check(query, cached_query)
        if isinstance(self.guard, GuardChain):
            return self.guard.check(query, cached_query)
        if self.guard(query, cached_query):
            return None
        return Refusal(getattr(self.guard, "__name__", "guard"), "the guard refused")

    def _count_refusal(self, refusal: Refusal) -> None:
        self._stats.refusals[refusal.guard] = self._stats.refusals.get(refusal.guard, 0) + 1

    def _lookup_with(self, query: str, vector: Vector, namespace: str, sync: bool) -> CacheLookup:
        """L1 lookup; with ``sync`` also the sync L2 lookup on an L1 miss."""
        now = self._clock()
        candidates: list[tuple[float, int]] = []
        for key, entry in list(self._entries.items()):
            if entry.expires_at is not None and entry.expires_at <= now:
                self._drop(key)
                self._stats.expirations += 1
                continue
            if entry.namespace != namespace or entry.fingerprint != self._fingerprint:
                continue
            if len(entry.vector) != len(vector):
                continue
            score = sum(x * y for x, y in zip(entry.vector, vector, strict=True))
            if score >= self.threshold:
                candidates.append((score, key))
        candidates.sort(reverse=True)
        first_refusal: CacheLookup | None = None
        for score, key in candidates:
            entry = self._entries[key]
            refusal = self._refusal(query, entry.query)
            if refusal is None:
                self._entries.move_to_end(key)
                return CacheLookup(
                    True, entry.response, "l1", score, entry.query, None, "served from l1"
                )
            self._count_refusal(refusal)
            if first_refusal is None:
                first_refusal = CacheLookup(
                    False,
                    None,
                    None,
                    score,
                    entry.query,
                    refusal.guard,
                    f"guard '{refusal.guard}' refused: {refusal.reason}",
                )
        miss = first_refusal or CacheLookup(False, reason="no entry reached the threshold")
        if sync and self.l2 is not None:
            hit = self._l2_call(
                lambda b: b.lookup(list(vector), self.threshold, self._l2_ns(namespace), query)
            )
            return self._accept_l2(query, vector, namespace, hit, miss)
        return miss

    def _finish(self, found: CacheLookup) -> CacheLookup:
        if not found.hit:
            self._stats.misses += 1
        elif found.tier == "l1":
            self._stats.hits_l1 += 1
        else:
            self._stats.hits_l2 += 1
        return found

    def _store_l1(
        self,
        query: str,
        vector: tuple[float, ...],
        response: JSONValue,
        meta: dict[str, JSONValue] | None,
        namespace: str,
    ) -> None:
        self.invalidate_exact(query, namespace)
        expires = None if self.ttl is None else self._clock() + self.ttl
        entry = _Entry(namespace, self._fingerprint, query, vector, response, meta, expires)
        self._entries[self._next_key] = entry
        self._by_query[(namespace, self._fingerprint, query)] = self._next_key
        self._next_key += 1
        self._stats.stores += 1
        while len(self._entries) > self.capacity:
            self._drop(next(iter(self._entries)))
            self._stats.evictions += 1

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key)
        index_key = (entry.namespace, entry.fingerprint, entry.query)
        if self._by_query.get(index_key) == key:
            del self._by_query[index_key]

    def invalidate_exact(self, query: str, namespace: str) -> None:
        """Drops this fingerprint's entry for exactly ``query`` in ``namespace``, if any."""
        key = self._by_query.get((namespace, self._fingerprint, query))
        if key is not None:
            self._drop(key)

    def _l2_ns(self, namespace: str) -> str:
        return f"{namespace}@{self._fingerprint}"

    def _l2_call(self, call: Callable[[SemanticCacheBackend], T]) -> T | None:
        if self.l2 is None:
            return None
        try:
            return call(self.l2)
        except StorageError as err:
            self._stats.l2_errors += 1
            logger.warning("semantic cache: L2 unavailable, continuing without it: %s", err)
            return None

    async def _l2_lookup_async(
        self, query: str, vector: Vector, namespace: str, miss: CacheLookup
    ) -> CacheLookup:
        if self.l2 is None:
            return miss
        try:
            hit = await self.l2.alookup(list(vector), self.threshold, self._l2_ns(namespace), query)
        except StorageError as err:
            self._stats.l2_errors += 1
            logger.warning("semantic cache: L2 unavailable, continuing without it: %s", err)
            return miss
        return self._accept_l2(query, vector, namespace, hit, miss)

    async def _l2_store_async(
        self,
        query: str,
        vector: Vector,
        response: JSONValue,
        meta: dict[str, JSONValue] | None,
        namespace: str,
    ) -> None:
        if self.l2 is None:
            return
        try:
            await self.l2.astore(list(vector), response, self._l2_ns(namespace), meta, query)
        except StorageError as err:
            self._stats.l2_errors += 1
            logger.warning("semantic cache: L2 store failed: %s", err)

    def _accept_l2(
        self, query: str, vector: Vector, namespace: str, hit: L2Hit | None, miss: CacheLookup
    ) -> CacheLookup:
        """Guards an L2 hit and promotes it into L1; returns ``miss`` when refused."""
        if hit is None or hit.score < self.threshold:
            return miss
        refusal: Refusal | None = None
        if hit.query is None and self.guard is not None:
            refusal = Refusal("l2_unguarded", "the L2 hit did not say which query it answers")
        elif hit.query is not None:
            refusal = self._refusal(query, hit.query)
        if refusal is not None:
            self._count_refusal(refusal)
            if miss.refused_by is not None:
                return miss
            return CacheLookup(
                False,
                None,
                None,
                hit.score,
                hit.query,
                refusal.guard,
                f"guard '{refusal.guard}' refused the l2 hit: {refusal.reason}",
            )
        # Promote into L1. The protocol does not return the stored vector, so the incoming
        # query's vector (already within the threshold of it) stands in for it.
        self._store_l1(hit.query or query, tuple(vector), hit.response, None, namespace)
        return CacheLookup(True, hit.response, "l2", hit.score, hit.query, None, "served from l2")


def _default_fingerprint(embed: object) -> str:
    named = getattr(embed, "fingerprint", None)
    if isinstance(named, str) and named:
        return named
    module = getattr(embed, "__module__", None) or type(embed).__module__
    name = getattr(embed, "__qualname__", None) or type(embed).__qualname__
    return f"{module}.{name}"
