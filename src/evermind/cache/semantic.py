"""The semantic cache: a read-through cache of LLM answers keyed by query meaning.

This module owns :class:`SemanticCache` (L1: in-process vectors with LRU capacity, TTL and
namespaces, plus an optional L2 backend), the lookup result :class:`CacheLookup` and the
counters :class:`CacheStats`. A lookup embeds the query, scores the stored entries and
hands the best few to the verified decision (:func:`evermind.cache.verified.decide_verified`:
the learned pair verifier and the bound for the cache's ``max_error``, by default
:data:`~evermind.cache.verified.DEFAULT_MAX_ERROR`) — the decision the tab, the runtime's L2
and the gateway make too. Like the gateway, :meth:`SemanticCache.get_or_generate` checks its
would-be hits until bounded: the caller's ``generate`` is its verification signal (a
:class:`~evermind.cache.verified.Verification`, by default). A lookup without a signal
(:meth:`SemanticCache.lookup`, or a cache built with ``verification=None``) serves unchecked
hits only within the cache's own bound or, until there is one, within the stricter no-signal
fallback (:func:`~evermind.cache.verified.fallback_threshold`), and its ``reason`` says "no
verification signal". ``max_error=None`` selects the older
rule-based decision (:func:`evermind.cache.decide.decide`: a calibrated cosine threshold,
lexical evidence and language guards); it has no error bound and is kept for comparison
(docs/gateway.md measures both). The
embedder's fingerprint is part of every key, so a new model never serves vectors made by
an old one. The scoring of the stored entries is the cache's
:class:`~evermind.search.scoped.ScopedIndex`: the pure-Python scan by default,
:class:`evermind.search.matrix.MatrixIndex` (numpy, native-only) where the caller passes it;
both give the decision the same candidates.

Browser-safe: standard library and ``evermind`` only. The sync methods work with a sync
embedder and a sync L2 transport; the ``a``-prefixed methods accept sync or async ones.
"""

from __future__ import annotations

import heapq
import inspect
import json
import logging
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal, TypeVar

from evermind.cache.decide import Candidate, Decision, decide, fold
from evermind.cache.english import ENGLISH_CHAIN, default_guard
from evermind.cache.guard import GuardChain, Refusal
from evermind.cache.l2 import JSONValue, L2Hit, SemanticCacheBackend
from evermind.cache.verified import (
    DEFAULT_MAX_ERROR,
    CheckPlan,
    Verification,
    answer_text,
    answers_equivalent,
    decide_verified,
    plan_check,
    record_check,
)
from evermind.cache.verifier import PairVerifier, default_verifier
from evermind.errors import ConfigError, ShapeError, StorageError
from evermind.search.calibration import FLOOR, Calibration, measure_calibration, stale
from evermind.search.cosine import dot
from evermind.search.scoped import ScanIndex, Scope, ScopedIndex
from evermind.search.terms import TermStats

__all__ = ["CacheAnswer", "CacheLookup", "CacheStats", "SemanticCache"]

logger = logging.getLogger(__name__)

Vector = Sequence[float]
Embedder = Callable[[str], Vector | Awaitable[Vector]]
GuardCallable = Callable[[str, str], bool]
Generate = Callable[[str], JSONValue | Awaitable[JSONValue]]
Equivalent = Callable[[str, str], bool]
T = TypeVar("T")


class _Default(Enum):
    """The ``verification`` argument left out (a :class:`Verification` for ``max_error``)."""

    VERIFICATION = 0


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
        refused_by: What refused the best candidate on a miss: a guard's name, or
            ``"lexical"``, ``"ambiguous"``, ``"calibration"`` (see
            :func:`evermind.cache.decide.decide`); else None.
        reason: Why it hit or missed, in words.
        threshold: The threshold that applied (explicit or calibrated, never below the
            floor; with ``max_error`` the verifier probability a hit needed); None when the
            lookup did not get that far.
        probability: With ``max_error``: the verifier's probability that the best
            candidate's answer serves this query; else None.
        entry: The key of the best candidate's L1 entry (what a verification reports on with
            :meth:`SemanticCache.record_verification`); None without one.
    """

    hit: bool
    response: JSONValue | None = None
    tier: str | None = None
    score: float | None = None
    cached_query: str | None = None
    refused_by: str | None = None
    reason: str = ""
    threshold: float | None = None
    probability: float | None = None
    entry: int | None = None


@dataclass(frozen=True)
class CacheAnswer:
    """The result of :meth:`SemanticCache.get_or_generate`.

    Attributes:
        response: The answer, cached or freshly generated.
        lookup: The lookup that preceded it: a hit when the cached answer was served (checked
            or not); a miss, ``refused_by="verify_mismatch"``, when a check found the cached
            answer wrong and the fresh one was served instead.
        generated: True when ``generate`` was called (a miss, or a checked hit).
        checked: True when a would-be hit was checked against ``generate``'s answer.
        forced: True when that check was forced: the cache's own checks do not yet bound
            the error of serving such a hit unchecked
            (:meth:`~evermind.cache.verified.Verification.must_check`); False for a check
            drawn into the random sample.
        reason: What happened, in words.
    """

    response: JSONValue
    lookup: CacheLookup
    generated: bool
    checked: bool = False
    forced: bool = False
    reason: str = ""


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
    #: The highest cosine to another stored entry with another answer (decide's rule 6).
    contested: float | None = None
    #: What makes two answers equal (:func:`_answer_of`), computed once when stored.
    answer: object = None


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
    """A read-through semantic cache whose hits hold an error bound (``max_error``).

    Args:
        embed: ``embed(text) -> vector`` (sync or async). Vectors are L2-normalised here.
        threshold: An explicit cosine in [-1, 1] the best candidate must also reach, or None
            (the default). With ``max_error`` it is an extra floor (it can only turn hits
            into misses). In the rule-based decision it replaces the calibrated threshold:
            the served score must also beat what unrelated texts reach with this embedder
            (:func:`evermind.search.calibration.calibrate` over the stored queries) and the
            floor :data:`evermind.search.calibration.FLOOR`: an explicit value is raised to
            those, never lowered, and a miss's reason says when it was raised.
        guard: The rule-based decision's guards (``max_error=None`` only): a
            :class:`GuardChain` (refusals are named per guard), any callable
            ``(query, cached_query) -> bool``, or None for cosine only. Defaults to the
            English guards (:data:`evermind.cache.english.ENGLISH_CHAIN`).
        l2: An optional shared backend (see :class:`evermind.cache.l2.HttpSemanticCacheBackend`).
        capacity: Most L1 entries kept (all namespaces together); least recently used go.
        ttl: Seconds an entry lives, or None for no expiry.
        fingerprint: Names the embedder (model and version). Defaults to the embedder's
            ``fingerprint`` attribute, else its qualified name; pass one explicitly.
        clock: Monotonic seconds, injectable for tests.
        index: Where the entries' vectors are scored (an empty
            :class:`~evermind.search.scoped.ScopedIndex`); None: the pure-Python
            :class:`~evermind.search.scoped.ScanIndex`. Native code passes
            :class:`evermind.search.matrix.MatrixIndex` (one matrix product per lookup).
        trust_scores: Whether a score well above the threshold counts as evidence
            (:func:`evermind.cache.decide.decide`, rule 8). None (the default): the
            embedder's ``similarity_trained`` attribute (or its bound object's, e.g. a
            :class:`~evermind.model.inference.Model`'s ``embed``), True when it has none.
        max_error: δ in (0, 1), the share of lookups the caller accepts being answered
            wrongly (default :data:`~evermind.cache.verified.DEFAULT_MAX_ERROR`, 0.01): the
            verified decision (:func:`evermind.cache.verified.decide_verified`, a learned pair
            verifier with a bounded threshold). ``threshold``, ``guard`` and ``trust_scores``
            do not apply to it. None: the rule-based decision, with no error bound (measured
            to serve 4-6% of lookups wrongly on data its rules were not written from).
        verifier: The pair verifier for ``max_error`` (default: the shipped one).
        verification: What this cache learns from checking its hits. Left out, a cache with
            ``max_error`` gets ``Verification(max_error)`` (a 5% random sample, checked until
            bounded): :meth:`get_or_generate` checks every would-be hit that is not an exact
            repeat against ``generate`` until its own checks bound the served error within
            δ, as the gateway does against its upstream. This is the default because the
            shipped bound was measured over δ on traffic unlike its corpus, and a cache that
            holds the caller's ``generate`` can pay to know instead of guessing. Its
            :meth:`lookup` is guarded too (see there). A ``Verification`` passed in is the
            caller's: :meth:`get_or_generate` checks with it the same way, but :meth:`lookup`
            returns the decision as it is, for a caller that runs the protocol around its
            look-ups itself (the gateway: :func:`~evermind.cache.verified.plan_check` before
            serving, :func:`~evermind.cache.verified.record_check` after a check). None: no
            checks; every lookup then decides with the no-signal fallback (stricter).
        equivalent: ``equivalent(cached_text, fresh_text)``: whether a check found the two
            answers the same (default :func:`~evermind.cache.verified.answers_equivalent`).
            It compares :func:`~evermind.cache.verified.answer_text` of the responses: a
            string itself; a JSON object's ``"text"`` string, or the OpenAI chat shape's first
            ``choices[0].message.content``; any other JSON value its canonical JSON text.

    Raises:
        ConfigError: On an invalid threshold, capacity, ttl, max_error, verification or
            equivalent.
    """

    def __init__(
        self,
        embed: Embedder,
        *,
        threshold: float | None = None,
        guard: GuardChain | GuardCallable | None = ENGLISH_CHAIN,
        l2: SemanticCacheBackend | None = None,
        capacity: int = 1024,
        ttl: float | None = None,
        fingerprint: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        index: ScopedIndex | None = None,
        trust_scores: bool | None = None,
        max_error: float | None = DEFAULT_MAX_ERROR,
        verifier: PairVerifier | None = None,
        verification: Verification | Literal[_Default.VERIFICATION] | None = (
            _Default.VERIFICATION
        ),
        equivalent: Equivalent = answers_equivalent,
    ) -> None:
        if max_error is not None and (
            isinstance(max_error, bool)
            or not isinstance(max_error, int | float)
            or not 0.0 < float(max_error) < 1.0
        ):
            raise ConfigError(
                f"SemanticCache: max_error must be a rate in (0, 1) or None, received "
                f"{max_error!r}; hint: 0.01 serves at most 1 wrong answer in 100 hits"
            )
        self.max_error = None if max_error is None else float(max_error)
        self.verifier = (
            verifier if verifier is not None or max_error is None else default_verifier()
        )
        # A verification left out is this cache's own: its look-ups without a signal are
        # guarded (:meth:`_unchecked`). One passed in is the caller's, who runs the protocol
        # around the look-ups itself (the gateway: plan_check before serving, record_check).
        self._guards_lookups = verification is _Default.VERIFICATION and max_error is not None
        if verification is _Default.VERIFICATION:
            verification = None if max_error is None else Verification(float(max_error))
        elif verification is not None and not isinstance(verification, Verification):
            raise ConfigError(
                f"SemanticCache: verification must be a Verification or None, received "
                f"{type(verification).__name__}"
            )
        self.verification: Verification | None = verification
        if not callable(equivalent):
            raise ConfigError(
                f"SemanticCache: equivalent must be a callable (cached_text, fresh_text) -> "
                f"bool, received {type(equivalent).__name__}"
            )
        self.equivalent = equivalent
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not -1.0 <= float(threshold) <= 1.0
        ):
            raise ConfigError(
                f"SemanticCache: threshold must be a cosine in [-1, 1] or None, received "
                f"{threshold!r}; hint: leave it out for the calibrated threshold"
            )
        if not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(f"SemanticCache: capacity must be an int >= 1, received {capacity!r}")
        if ttl is not None and (not isinstance(ttl, int | float) or ttl <= 0):
            raise ConfigError(f"SemanticCache: ttl must be None or seconds > 0, received {ttl!r}")
        self.threshold = None if threshold is None else float(threshold)
        self.guard = guard
        self.l2 = l2
        self.capacity = capacity
        self.ttl = None if ttl is None else float(ttl)
        self._clock = clock
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        # (namespace, fingerprint, query) -> entry key: storing an answer replaces the old
        # one for the same query without scanning every entry.
        self._by_query: dict[tuple[str, str, str], int] = {}
        # The same, keyed by the folded question (case, spaces, the final ?.!): an exact
        # repeat is found even when the embedder does not rank its entry among the best.
        self._by_fold: dict[tuple[str, str, str], int] = {}
        self._index: ScopedIndex = ScanIndex() if index is None else index
        # (expires_at, key) of entries with a TTL: a lookup drops the expired ones without
        # visiting every entry (keys are never reused, so a dropped key's item is skipped).
        self._expiry: list[tuple[float, int]] = []
        # fingerprint -> stored query -> entries: the calibration's distinct-query count
        # without a pass over every entry per lookup.
        self._distinct: dict[str, Counter[str]] = {}
        # (fingerprint, query) -> unit vector of the last few queries embedded: a miss's
        # store (and a query asked again) does not run the embedder a second time.
        self._recent: OrderedDict[tuple[str, str], tuple[float, ...]] = OrderedDict()
        self._next_key = 0
        # The index changes (adds, removes, clears) so far, and the last lookup's neighbours:
        # a miss's store right after its lookup reuses them instead of scanning again.
        self._generation = 0
        self._last_near: tuple[int, Scope, tuple[float, ...], list[tuple[float, int]]] | None = None
        self._stats = CacheStats()
        # Namespaces whose L1 has dropped an entry (expired, evicted, invalidated, cleared:
        # None is every namespace): their L2 may hold what L1 no longer does.
        self._dropped: set[str | None] = set()
        self._embed = embed
        self._fingerprint = fingerprint or _default_fingerprint(embed)
        self._trust_explicit = trust_scores
        self.trust_scores = _trusts(embed) if trust_scores is None else bool(trust_scores)
        # (fingerprint, entries measured) -> calibration; re-measured as the cache grows.
        self._calibration: tuple[str, int, Calibration] | None = None
        # Document frequencies of the stored queries' terms (the lexical evidence's IDF),
        # updated on every store and drop.
        self._terms = TermStats()

    # ----------------------------------------------------------------- configuration

    @property
    def calibration(self) -> Calibration:
        """How the current embedder scores the cache's stored (mostly unrelated) queries.

        Measured (:func:`~evermind.search.calibration.measure_calibration`) on up to
        :data:`~evermind.search.calibration.CALIBRATION_SAMPLE` distinct stored queries of the
        current fingerprint, and again whenever their number has changed by a quarter.
        """
        cached = self._calibration
        if (
            cached is not None
            and cached[0] == self._fingerprint
            and not stale(cached[1], len(self._distinct.get(self._fingerprint, ())))
        ):
            return cached[2]
        # One entry per distinct query: the same question stored in several namespaces (two
        # tenants, two system prompts) is not a pair of unrelated texts scoring 1.0.
        distinct: dict[str, _Entry] = {}
        for entry in self._entries.values():
            if entry.fingerprint == self._fingerprint:
                distinct.setdefault(entry.query, entry)
        mine = list(distinct.values())
        found = measure_calibration(
            [e.query for e in mine],
            lambda chosen, pairs: self._index.cosines([mine[i].vector for i in chosen], pairs),
        )
        self._calibration = (self._fingerprint, len(mine) if found.pairs else 0, found)
        return found

    @property
    def effective_threshold(self) -> float:
        """The threshold a lookup applies now (explicit or calibrated, at least the floor)."""
        return decide(
            None, [], threshold=self.threshold, calibration=self.calibration, guard=None
        ).threshold

    @property
    def term_stats(self) -> TermStats:
        """Document frequencies of the L1 entries' query terms (weights lexical evidence)."""
        return self._terms

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
        if self._trust_explicit is None:
            self.trust_scores = _trusts(embed)
        self._recent.clear()
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

    def clear(self) -> int:
        """Drops every L1 entry (L2 is not touched); returns how many were dropped."""
        dropped = len(self._entries)
        self._dropped.add(None)
        self._entries.clear()
        self._by_query.clear()
        self._by_fold.clear()
        self._terms.clear()
        self._index.clear()
        self._generation += 1
        self._expiry.clear()
        self._distinct.clear()
        self._recent.clear()
        return dropped

    # ----------------------------------------------------------------- sync API

    def lookup(self, query: str, namespace: str = "default") -> CacheLookup:
        """Looks ``query`` up in L1, then L2. Never generates.

        No verification signal: in a cache with its own verification (the default), a
        would-be hit that is not an exact repeat is served only when this cache's checks
        (:meth:`get_or_generate`'s) bound the error of serving it unchecked, or else when it
        passes the stricter no-signal fallback
        (:func:`~evermind.cache.verified.fallback_threshold`; at δ = 0.01 only exact
        repeats); a miss then begins "no verification signal" in its ``reason``. With
        ``verification=None`` every lookup decides with the fallback; with a verification
        passed in, the decision is returned as it is (the caller checks).
        """
        vector = self._embed_sync(query)
        found = self._lookup_with(query, vector, namespace, sync=True)
        return self._finish(self._unchecked(query, vector, namespace, found))

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
        """Serves a cached answer, or calls ``generate(query)`` once and stores its answer.

        With a :attr:`verification` (the default for ``max_error``), ``generate`` is also
        the check, as the gateway's upstream is: a would-be hit that is not an exact repeat
        is checked (``generate`` called too) while :meth:`Verification.must_check` says the
        cache's own checks do not yet bound the error of serving one unchecked, and a random
        share of lookups is checked always. A checked hit is served only when
        :attr:`equivalent` finds the fresh answer the same; else the fresh answer is served
        and stored for this question, and the wrong entry needs more than it had from then
        on. Every outcome is recorded (:func:`~evermind.cache.verified.record_check`).
        """
        vector = self._embed_sync(query)
        found = self._lookup_with(query, vector, namespace, sync=True)
        plan = self._plan(query, namespace, found)
        if found.hit and not plan.check_hit:
            return self._served_unchecked(found, plan)
        response = _sync(generate(query), "generate")
        found, same = self._checked(found, plan, response)
        if same:
            return self._served_checked(found, plan)
        self._store_l1(query, vector, response, meta, namespace)
        if self.l2 is not None:
            self._l2_call(
                lambda b: b.store(list(vector), response, self._l2_ns(namespace), meta, query)
            )
        return self._generated(response, found, plan)

    # ----------------------------------------------------------------- async API

    async def alookup(self, query: str, namespace: str = "default") -> CacheLookup:
        """Async :meth:`lookup`; the embedder and L2 transport may be sync or async."""
        vector = await self._embed_async(query)
        local = self._lookup_with(query, vector, namespace, sync=False)
        if not local.hit and self.l2 is not None:
            local = await self._l2_lookup_async(query, vector, namespace, local)
        return self._finish(self._unchecked(query, vector, namespace, local))

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
        """Async :meth:`get_or_generate` (checks the same way); ``generate`` may be sync or
        async."""
        vector = await self._embed_async(query)
        found = self._lookup_with(query, vector, namespace, sync=False)
        if not found.hit and self.l2 is not None:
            found = await self._l2_lookup_async(query, vector, namespace, found)
        plan = self._plan(query, namespace, found)
        if found.hit and not plan.check_hit:
            return self._served_unchecked(found, plan)
        response = await _maybe_await(generate(query))
        found, same = self._checked(found, plan, response)
        if same:
            return self._served_checked(found, plan)
        self._store_l1(query, vector, response, meta, namespace)
        await self._l2_store_async(query, vector, response, meta, namespace)
        return self._generated(response, found, plan)

    # ----------------------------------------------------------------- verification

    @property
    def _never_checked(self) -> bool:
        """A verified cache without a :attr:`verification`: every lookup has no signal."""
        return self.max_error is not None and self.verification is None

    def _plan(self, query: str, namespace: str, found: CacheLookup) -> CheckPlan:
        """The shared protocol's plan for a lookup of :meth:`get_or_generate`."""
        return plan_check(
            self.verification,
            hit=found.hit,
            query=query,
            cached_query=found.cached_query,
            scope=namespace,
        )

    def _served_unchecked(self, found: CacheLookup, plan: CheckPlan) -> CacheAnswer:
        why = "served unchecked" if plan.guess else "served"
        return CacheAnswer(found.response, self._finish(found), False, reason=why)

    def _served_checked(self, found: CacheLookup, plan: CheckPlan) -> CacheAnswer:
        why = "until its error is bounded, every hit" if plan.forced else "sampled"
        reason = f"checked against generate ({why}): same answer, the cached one served"
        return CacheAnswer(found.response, self._finish(found), True, True, plan.forced, reason)

    def _generated(self, response: JSONValue, found: CacheLookup, plan: CheckPlan) -> CacheAnswer:
        if found.refused_by == "verify_mismatch":
            return CacheAnswer(response, self._finish(found), True, True, plan.forced, found.reason)
        return CacheAnswer(response, self._finish(found), True, reason="generated (a miss)")

    def _agrees(self, cached: JSONValue | None, fresh: JSONValue) -> bool:
        """Whether :attr:`equivalent` finds the two responses' texts the same; a raising or
        non-bool ``equivalent`` is the caller's error, named."""
        same = self.equivalent(answer_text(cached), answer_text(fresh))
        if not isinstance(same, bool):
            raise ConfigError(
                f"SemanticCache: equivalent must return a bool, returned {type(same).__name__}"
            )
        return same

    def _checked(
        self, found: CacheLookup, plan: CheckPlan, fresh: JSONValue
    ) -> tuple[CacheLookup, bool]:
        """Compares ``fresh`` (``generate``'s answer) with what the lookup would serve, and
        records it. Returns the lookup (a hit that proved wrong becomes a miss) and whether
        the cached answer is served."""
        checks = self.verification
        if found.hit:
            same = self._agrees(found.response, fresh)
            record_check(checks, plan, found.probability, same, found.entry, paid=True)
            if same:
                return found, True
            reason = (
                "a check found the cached answer differs from generate's: generate's answer "
                f"is served and stored for this question ({found.reason})"
            )
            miss = replace(
                found, hit=False, response=None, tier=None, refused_by="verify_mismatch",
                reason=reason,
            )  # fmt: skip
            return miss, False
        if checks is None:
            return found, False
        if found.probability is None:
            if plan.sampled:  # a sampled lookup with nothing to serve: never wrong
                record_check(checks, plan, None, True)
            return found, False
        stored = self.response_of(found.entry)
        if stored is not None:  # the best candidate's answer, compared for free
            same = self._agrees(stored, fresh)
            record_check(checks, plan, found.probability, same, found.entry)
        return found, False

    def _unchecked(
        self, query: str, vector: tuple[float, ...], namespace: str, found: CacheLookup
    ) -> CacheLookup:
        """A lookup without a verification signal (:meth:`lookup`, :meth:`alookup`): a
        would-be hit that this cache's checks do not bound yet is decided again with the
        no-signal fallback (L1 only: an L2 hit was promoted into L1 by then). A cache whose
        verification was passed in returns ``found`` as it is: its caller checks."""
        if not self._guards_lookups:
            return found
        plan = plan_check(
            self.verification,
            hit=found.hit,
            query=query,
            cached_query=found.cached_query,
            scope=namespace,
            draw=False,
        )
        if not plan.forced:
            return found
        again = self._lookup_with(query, vector, namespace, sync=False, fallback=True)
        return again if again.hit else _no_signal(again)

    # ----------------------------------------------------------------- internals

    def _check_query(self, query: str) -> None:
        if not isinstance(query, str) or not query.strip():
            raise ConfigError(
                f"SemanticCache: expected a non-empty query string, received {query!r}"
            )

    def _embed_sync(self, query: str) -> tuple[float, ...]:
        self._check_query(query)
        known = self._recent_vector(query)
        if known is not None:
            return known
        return self._remember(query, _normalise(_sync(self._embed(query), "embed"), query))

    async def _embed_async(self, query: str) -> tuple[float, ...]:
        self._check_query(query)
        known = self._recent_vector(query)
        if known is not None:
            return known
        return self._remember(query, _normalise(await _maybe_await(self._embed(query)), query))

    def _recent_vector(self, query: str) -> tuple[float, ...] | None:
        vector = self._recent.get((self._fingerprint, query))
        if vector is not None:
            self._recent.move_to_end((self._fingerprint, query))
        return vector

    def _remember(self, query: str, vector: tuple[float, ...]) -> tuple[float, ...]:
        self._recent[(self._fingerprint, query)] = vector
        while len(self._recent) > RECENT_VECTORS:
            self._recent.popitem(last=False)
        return vector

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

    def _decide(self, query: str, candidates: list[Candidate], fallback: bool = False) -> Decision:
        if self.max_error is not None and self.verifier is not None:
            learned = self.verification
            if learned is not None:
                candidates = [replace(c, contested=learned.contested(c.key)) for c in candidates]
            else:
                candidates = [replace(c, contested=None) for c in candidates]
            found = decide_verified(
                query,
                candidates,
                calibration=self.calibration,
                verifier=self.verifier,
                max_error=self.max_error,
                learned=learned,
                floor=self.threshold,
                fallback=fallback or learned is None,
            )
            if not found.hit and found.refused_by is not None:
                self._count_refusal(Refusal(found.refused_by, found.reason))
            return found
        guard = None if self.guard is None else self._refusal
        found = decide(
            query,
            candidates,
            threshold=self.threshold,
            calibration=self.calibration,
            guard=guard,
            idf=self._terms,
            trust_scores=self.trust_scores,
        )
        if not found.hit and found.refused_by is not None:
            self._count_refusal(Refusal(found.refused_by, found.reason))
        return found

    def _lookup_with(
        self, query: str, vector: Vector, namespace: str, sync: bool, fallback: bool = False
    ) -> CacheLookup:
        """L1 lookup; with ``sync`` also the sync L2 lookup on an L1 miss. ``fallback``: the
        no-signal decision (also whenever this cache has no :attr:`verification`)."""
        self._expire(self._clock())
        scored = self._neighbours(tuple(vector), namespace)[:_CANDIDATES]
        candidates = [self._candidate(key, score) for score, key in scored]
        exact = self._by_query.get((namespace, self._fingerprint, query))
        if exact is None:
            exact = self._by_fold.get((namespace, self._fingerprint, fold(query)))
        if exact is not None and all(c.key != exact for c in candidates):
            candidates.append(self._candidate(exact, dot(self._entries[exact].vector, vector)))
        found = self._decide(query, candidates, fallback)
        if found.hit and found.candidate is not None:
            key = int(str(found.candidate.key))
            entry = self._entries[key]
            self._entries.move_to_end(key)
            return CacheLookup(
                True,
                entry.response,
                "l1",
                found.candidate.score,
                entry.query,
                None,
                f"served from l1 ({found.reason})",
                found.threshold,
                found.probability,
                key,
            )
        cand = found.candidate
        miss = CacheLookup(
            False,
            None,
            None,
            None if cand is None else cand.score,
            None if cand is None else cand.query,
            found.refused_by,
            found.reason,
            found.threshold,
            found.probability,
            cand.key if cand is not None and isinstance(cand.key, int) else None,
        )
        if sync and self.l2 is not None:
            floor = self._l2_floor(found.threshold)
            hit = self._l2_call(
                lambda b: b.lookup(
                    list(vector), floor, self._l2_ns(namespace), query, self.max_error
                )
            )
            return self._accept_l2(query, vector, namespace, hit, miss)
        return _no_signal(miss) if self._never_checked else miss

    def _l2_floor(self, threshold: float | None) -> float:
        """The cosine an L2 candidate must reach to be worth judging: the decision's
        threshold, or with ``max_error`` (whose threshold is a probability) the calibrated
        cosine of unrelated texts (at least the floor)."""
        if self.max_error is None:
            return threshold if threshold is not None else self.effective_threshold
        unrelated = self.calibration.unrelated
        floor = max(FLOOR, unrelated if unrelated is not None else FLOOR)
        return floor if self.threshold is None else max(floor, self.threshold)

    def record_verification(
        self,
        lookup: CacheLookup,
        correct: bool,
        *,
        sampled: bool,
        paid: bool = False,
        cost_usd: float = 0.0,
        guess: bool = False,
        forced: bool = False,
        scope: str = "default",
    ) -> None:
        """Reports whether the best candidate of ``lookup`` would have served a right answer.

        The gateway calls this after comparing the upstream's answer with the candidate's
        (:func:`evermind.cache.verified.answers_equivalent`): on every miss whose candidate
        was judged, and on the lookups :meth:`Verification.draw` sampled (hits included).
        Needs ``max_error`` and a ``verification``; otherwise it does nothing.
        """
        if self.verification is None:
            return
        self.verification.record(
            lookup.probability,
            correct,
            lookup.entry,
            sampled=sampled,
            paid=paid,
            cost_usd=cost_usd,
            guess=guess,
            forced=forced,
            scope=scope,
        )

    def response_of(self, entry: int | None) -> JSONValue | None:
        """The stored response of an L1 entry (a lookup's ``entry``), or None when it is gone."""
        found = None if entry is None else self._entries.get(entry)
        return None if found is None else found.response

    def _candidate(self, key: int, score: float) -> Candidate:
        entry = self._entries[key]
        return Candidate(key, score, entry.query, entry.answer, entry.contested)

    def _scope(self, namespace: str, vector: Vector) -> Scope:
        return (namespace, self._fingerprint, len(vector))

    def _neighbours(self, vector: tuple[float, ...], namespace: str) -> list[tuple[float, int]]:
        """The entries of ``namespace`` nearest ``vector``: ``(cosine, key)``, best first (the
        top :data:`_CANDIDATES` are a lookup's candidates). The same question asked again
        before the index changes (a miss's store after its lookup) is answered from memory."""
        scope = self._scope(namespace, vector)
        last = self._last_near
        if last is not None and last[:3] == (self._generation, scope, vector):
            return last[3]
        near = self._index.nearest(scope, vector, _CONTEST_NEIGHBOURS)
        self._last_near = (self._generation, scope, vector, near)
        return near

    def _expire(self, now: float) -> None:
        """Drops every entry whose TTL has passed."""
        heap = self._expiry
        while heap and heap[0][0] <= now:
            _, key = heapq.heappop(heap)
            if key in self._entries:
                self._drop(key)
                self._stats.expirations += 1
        if len(heap) > 2 * len(self._entries) + 64:  # evicted entries' items pile up: compact
            self._expiry = [
                (e.expires_at, k) for k, e in self._entries.items() if e.expires_at is not None
            ]
            heapq.heapify(self._expiry)

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
        # Rule 6 of decide: the new entry and its neighbours with another answer contest
        # each other at their cosine.
        answer = entry.answer = _answer_of(entry)
        differing = [
            (score, self._entries[key])
            for score, key in self._neighbours(vector, namespace)
            if self._entries[key].answer != answer
        ]
        for score, other in differing:
            other.contested = score if other.contested is None else max(other.contested, score)
        entry.contested = max((score for score, _ in differing), default=None)
        self._entries[self._next_key] = entry
        self._by_query[(namespace, self._fingerprint, query)] = self._next_key
        self._by_fold[(namespace, self._fingerprint, fold(query))] = self._next_key
        self._index.add(self._next_key, self._scope(namespace, vector), vector)
        self._generation += 1
        self._distinct.setdefault(self._fingerprint, Counter())[query] += 1
        if expires is not None:
            heapq.heappush(self._expiry, (expires, self._next_key))
        self._terms.add(query)
        self._next_key += 1
        self._stats.stores += 1
        while len(self._entries) > self.capacity:
            self._drop(next(iter(self._entries)))
            self._stats.evictions += 1

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key)
        self._dropped.add(entry.namespace)
        self._index.remove(key)
        self._generation += 1
        counts = self._distinct[entry.fingerprint]
        counts[entry.query] -= 1
        if counts[entry.query] <= 0:
            del counts[entry.query]
        self._terms.remove(entry.query)
        index_key = (entry.namespace, entry.fingerprint, entry.query)
        if self._by_query.get(index_key) == key:
            del self._by_query[index_key]
        fold_key = (entry.namespace, entry.fingerprint, fold(entry.query))
        if self._by_fold.get(fold_key) == key:
            del self._by_fold[fold_key]

    def invalidate_exact(self, query: str, namespace: str) -> None:
        """Drops this fingerprint's entry for exactly ``query`` in ``namespace``, if any."""
        key = self._by_query.get((namespace, self._fingerprint, query))
        if key is not None:
            self._drop(key)

    def _l2_ns(self, namespace: str) -> str:
        return f"{namespace}@{self._fingerprint}"

    def _l2_mirrored(self, namespace: str, dim: int) -> bool:
        """Whether this L1 holds everything the L2 could serve for ``namespace``: the L2 holds
        only what this cache wrote (its ``holds_only_written``, where it has one) and L1 has
        dropped none of it. An L2 lookup then can only find a question L1 already judged
        (and :meth:`_accept_l2` refuses those), so it is skipped: on the gateway that is
        the L2's whole share of a miss (~0.5 ms, a trip to the store's worker thread)."""
        if None in self._dropped or namespace in self._dropped:
            return False
        holds = getattr(self.l2, "holds_only_written", None)
        return holds is not None and bool(holds(self._l2_ns(namespace), dim))

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
        if self.l2 is None or self._l2_mirrored(namespace, len(vector)):
            return miss
        try:
            tau = self._l2_floor(miss.threshold)
            hit = await self.l2.alookup(
                list(vector), tau, self._l2_ns(namespace), query, self.max_error
            )
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
        """Judges an L2 hit with the same decision as L1 and promotes it into L1; returns
        ``miss`` when it is refused.

        An L2 hit on a question this L1 already holds is not judged again: L1 judged that
        entry with its rivals, its contested mark and its own calibration (or ranked it
        below its best), and a second, narrower judgement would let through what the first
        refused — two chances at δ are not δ.
        """
        if hit is None:
            return miss
        if hit.query is not None and (namespace, self._fingerprint, hit.query) in self._by_query:
            return miss
        if hit.query is None and (self.max_error is not None or self.guard is not None):
            self._count_refusal(Refusal("l2_unguarded", "no query"))
            if miss.refused_by is not None:
                return miss
            return CacheLookup(
                False,
                None,
                None,
                hit.score,
                None,
                "l2_unguarded",
                "the L2 hit did not say which query it answers, so it could not be judged",
                miss.threshold,
            )
        found = self._decide(query, [Candidate("l2", hit.score, hit.query, None)])
        if not found.hit and self._never_checked:
            found = replace(found, reason=_no_signal_reason(found.reason))
        unmeasured = found.refused_by == "calibration" and self.calibration.unrelated is None
        if not found.hit and unmeasured and self.max_error is not None:
            # This L1 holds too few questions to measure its embedder yet; the L2 judged the
            # hit with the same verified decision at this δ on its own, measured calibration
            # (an unmeasured L2 serves only exact repeats), so its judgement stands.
            found = replace(found, hit=True)
        if not found.hit:
            if miss.refused_by is not None or found.refused_by is None:
                return miss
            return CacheLookup(
                False,
                None,
                None,
                hit.score,
                hit.query,
                found.refused_by,
                f"the l2 hit was refused: {found.reason}",
                found.threshold,
            )
        # Promote into L1. The protocol does not return the stored vector, so the incoming
        # query's vector (already within the threshold of it) stands in for it.
        self._store_l1(hit.query or query, tuple(vector), hit.response, None, namespace)
        return CacheLookup(
            True, hit.response, "l2", hit.score, hit.query, None, "served from l2", found.threshold
        )


#: How many of the best-scoring entries a lookup hands to the decision.
_CANDIDATES = 4
#: Queries whose unit vectors the cache keeps (a miss embeds once for lookup and store).
RECENT_VECTORS = 256
#: Nearest entries a store compares the new one with (their contested cosines, rule 6).
_CONTEST_NEIGHBOURS = 8


def _no_signal_reason(reason: str) -> str:
    prefix = "no verification signal: "
    return reason if reason.startswith(prefix) else prefix + reason


def _no_signal(found: CacheLookup) -> CacheLookup:
    """A no-signal miss whose candidate was judged says so first in its ``reason``."""
    if found.hit or found.probability is None:
        return found
    return replace(found, reason=_no_signal_reason(found.reason))


def _answer_of(entry: _Entry) -> object:
    """What makes two entries' answers equal for the ambiguity rule."""
    try:
        return json.dumps(entry.response, sort_keys=True)
    except (TypeError, ValueError):
        return id(entry)


def _trusts(embed: object) -> bool:
    """``similarity_trained`` of ``embed`` or of the object it is a bound method of (True
    when neither says: a sentence encoder or a lexical embedder)."""
    for holder in (embed, getattr(embed, "__self__", None)):
        said = getattr(holder, "similarity_trained", None)
        if isinstance(said, bool):
            return said
    return True


def _default_fingerprint(embed: object) -> str:
    named = getattr(embed, "fingerprint", None)
    if isinstance(named, str) and named:
        return named
    module = getattr(embed, "__module__", None) or type(embed).__module__
    name = getattr(embed, "__qualname__", None) or type(embed).__qualname__
    return f"{module}.{name}"
