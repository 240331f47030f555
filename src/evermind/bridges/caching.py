"""A read-through semantic cache in front of any bridge (browser-safe: standard library only).

:class:`CachingBridge` wraps one :class:`~evermind.bridges.base.Bridge` and one
:class:`~evermind.cache.SemanticCache`. Every hit-or-miss decision is the cache's (its
calibrated threshold, lexical evidence, guards and ambiguity rule: :mod:`evermind.cache.decide`;
or, with ``max_error``, the verified decision of :mod:`evermind.cache.verified`, whose sampled
checks against the upstream's answer this bridge makes and hands back to the cache);
this module only decides *whether a request may be cached at all* (:class:`CachePolicy`)
and *what must match* for an answer to be reusable.

The key of a request has two parts:

- the **query**, the text of the last turn (usually the user's question): the part that is
  compared by meaning, so a paraphrase hits;
- the **namespace**, ``<audience>/<scope digest>``: the audience is who may be served the
  entry, by the policy's :attr:`CachePolicy.scope`: ``tenant`` (any principal of the
  tenant; the default), ``user`` (only the principal, i.e. the token, that stored it) or
  ``group`` (every tenant of its ``shared`` group); the scope digest is a SHA-256 of
  everything else that shapes the answer: provider, model, system prompt, facts, the
  earlier turns, non-text blocks of the last turn, tools, stop sequences, ``max_tokens``,
  temperature and extra provider fields. Those must match *exactly*: a different system
  prompt, model or conversation never shares entries, however similar the question.

The embedder's fingerprint is part of every key inside :class:`SemanticCache` itself.

What is cacheable (:meth:`CachePolicy.refusal`), in order:

1. ``extra["cache"] is False``: the caller opted out (``opt_out``).
2. Tool results in the conversation: only with ``cache_tool_results`` (``tool_results``).
3. Tools offered: only with ``cache_tools`` (``tools``).
4. ``extra["cache"] is True``: the caller opted in; cacheable at any temperature.
   ``extra["cache"] == "refresh"`` (the gateway's ``x-evermind-cache: refresh`` request
   header): the same, and the lookup is never served: the upstream answers, the answer
   replaces the entry, and the best candidate the lookup found is checked against it.
5. Otherwise only a deterministic request: temperature 0, or temperature None (the
   upstream's default) when ``cache_default_temperature`` is set (``temperature``).

A hit returns a :class:`~evermind.bridges.base.Completion` with zero usage and
``cached=CacheInfo(tier, score, cached_query, saved, saved_usd)``; ``cached_query`` is the
stored question only when the same principal (tenant and user) stored it, else "" (another
principal's prompt is never disclosed). Likewise :attr:`CacheOutcome.summary` says why a
lookup hit or missed without quoting any stored query (``detail`` is the cache's own words,
which may quote one: for a caller that owns every entry).

Identical cacheable misses in flight at once make one upstream call
(:mod:`evermind.bridges.flights`): the others wait for it and are served its stored answer,
or its error. ``saved`` is the usage
the stored call paid; ``saved_usd`` its cost (the stored ``cost_usd`` when the inner bridge
priced it, else ``price(model, usage)`` when given, else None). Streams work on hits (the
cached text as at most :data:`MAX_HIT_DELTAS` deltas) and misses (the upstream's deltas pass
through; the full text is stored at the end; a stream that fails or is abandoned is not
stored).

Per-namespace TTL: an entry older than its cache namespace's TTL is not served (a miss,
``expired``) and is dropped from L1.

Telemetry (:mod:`evermind.telemetry`, when on): each call is one ``chat {model}`` operation
from :meth:`CachingBridge.open` to the end of :meth:`~CachingBridge.complete` or
:meth:`~CachingBridge.deltas`, with ``evermind.cache.hit`` (and status, reason, tier, score,
what a hit saved); on a miss the inner bridge's operation is its child.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evermind.bridges.base import (
    Bridge,
    CacheInfo,
    ChatRequest,
    Completion,
    Delta,
    ToolCall,
    Usage,
)
from evermind.bridges.flights import Flight, Flights
from evermind.bridges.instrumented import finish_chat, start_chat
from evermind.cache import CacheLookup, SemanticCache
from evermind.cache.l2 import JSONValue
from evermind.cache.verified import CheckPlan, answers_equivalent, plan_check, record_check
from evermind.errors import ConfigError, EvermindError, UpstreamError
from evermind.telemetry import NOOP, Operation
from evermind.telemetry import genai as semconv
from evermind.text import terms

__all__ = [
    "CacheOutcome",
    "CachePolicy",
    "CachingBridge",
    "CachingStats",
    "Price",
    "TermEmbedder",
    "scope_digest",
]

logger = logging.getLogger(__name__)

#: ``price(model, usage) -> dollars`` (None: the model is not priced).
Price = Callable[[str, Usage], float | None]

#: The ``extra`` key a caller opts in (True) or out (False) with; never sent upstream.
OPT_KEY = "cache"
#: Characters per delta when a hit is streamed, at least ...
HIT_CHUNK_CHARS = 24
#: ... and at most this many deltas however long the answer: a hit is not token-by-token,
#: and an 8 MB answer is 64 deltas of 128 KB, not 349,528 of 24 characters.
MAX_HIT_DELTAS = 64
#: Misses that go upstream (a single-flight leads them).
_UPSTREAM_MISSES = ("lookup", "expired")
#: Who may be served a stored entry (:attr:`CachePolicy.scope`).
SCOPES = ("user", "tenant", "group")
#: Version of the stored entry's shape (part of the scope digest, so a change never
#: serves entries of the old shape).
ENTRY_VERSION = 1


class TermEmbedder:
    """A model-free embedder: the query's content terms hashed into ``dim`` buckets.

    Folded, stemmed, stop words dropped (:func:`evermind.text.terms`); each term adds 1 to
    the bucket its SHA-256 picks. Costs microseconds; paraphrases that keep the content
    words hit, rewordings beyond them do not (a model embedder does better). The gateway's
    embedder when no model is configured.
    """

    def __init__(self, dim: int = 256) -> None:
        if not isinstance(dim, int) or dim < 8:
            raise ConfigError(f"TermEmbedder: dim must be an int >= 8, got {dim!r}")
        self.dim = dim
        self.fingerprint = f"evermind-terms-sha256-v1:{dim}"

    def __call__(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for term in terms(text) or terms(text, keep_stop_words=True) or [text.strip().lower()]:
            digest = hashlib.sha256(term.encode("utf-8")).digest()
            vector[int.from_bytes(digest[:4], "little") % self.dim] += 1.0
        return vector


@dataclass(frozen=True)
class CachePolicy:
    """What may be cached, for how long, and who shares entries.

    Attributes:
        cache_default_temperature: Treat temperature None (the upstream's default) as
            deterministic. Off by default: most upstreams default to sampling.
        cache_tool_results: Cache requests whose conversation carries tool results.
        cache_tools: Cache requests that offer tools (the answer may be a tool call).
        ttl: Seconds an entry is served, for cache namespaces not in ``ttls`` (None: no
            expiry beyond the cache's own).
        ttls: Per cache namespace TTL in seconds (None: no expiry for that namespace).
        shared: Tenant -> cache namespace, for tenants that share entries; every other
            tenant's cache namespace is its own name.
        scope: Who may be served an entry: ``tenant`` (any principal of the tenant that
            stored it), ``user`` (only the principal, the token, that stored it) or
            ``group`` (every tenant of its ``shared`` group). ``shared`` needs ``group``;
            left out (""), it is ``group`` when ``shared`` is given, else ``tenant``.
    """

    cache_default_temperature: bool = False
    cache_tool_results: bool = False
    cache_tools: bool = False
    ttl: float | None = None
    ttls: Mapping[str, float | None] = field(default_factory=dict)
    shared: Mapping[str, str] = field(default_factory=dict)
    scope: str = ""

    def __post_init__(self) -> None:
        if self.scope == "":
            object.__setattr__(self, "scope", "group" if self.shared else "tenant")
        if self.scope not in SCOPES:
            raise ConfigError(
                f"CachePolicy: scope must be one of {SCOPES}, got {self.scope!r}; hint: user "
                "(the storing token only), tenant (its tenant) or group (its shared group)"
            )
        if self.shared and self.scope != "group":
            raise ConfigError(
                f"CachePolicy: shared groups tenants {sorted(self.shared)}, but scope is "
                f"{self.scope!r}, under which no tenant is served another's entries; hint: "
                'scope = "group" to share, or drop the shared table'
            )
        for name, seconds in [("ttl", self.ttl), *self.ttls.items()]:
            if seconds is not None and (
                isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0
            ):
                raise ConfigError(
                    f"CachePolicy: TTL of {name!r} must be None or seconds > 0, got {seconds!r}"
                )

    def namespace(self, tenant: str) -> str:
        """The cache namespace of ``tenant`` (what ``ttls`` names): its own name unless
        ``shared`` groups it."""
        return self.shared.get(tenant, tenant)

    def audience(self, tenant: str, user: str) -> str:
        """Who may be served what ``user`` of ``tenant`` stores, by :attr:`scope` (the first
        part of every key's namespace)."""
        if self.scope == "user":
            return f"{tenant}/user-{user or '-'}"
        if self.scope == "group":
            return self.namespace(tenant)
        return tenant

    def ttl_of(self, namespace: str) -> float | None:
        """The TTL of a cache namespace."""
        return self.ttls.get(namespace, self.ttl)

    def refusal(self, request: ChatRequest) -> str | None:
        """Why ``request`` may not be cached (a short reason), or None when it may."""
        opt = request.extra.get(OPT_KEY)
        if opt is False:
            return "opt_out"
        if request.has_tool_results() and not self.cache_tool_results:
            return "tool_results"
        if request.tools and not self.cache_tools:
            return "tools"
        if opt is True or opt == "refresh":
            return None
        if request.temperature == 0 or (
            request.temperature is None and self.cache_default_temperature
        ):
            return None
        return "temperature"


@dataclass
class CachingStats:
    """Counters of one :class:`CachingBridge`.

    Attributes:
        requests: Calls made (generate and stream).
        hits_l1: Served from L1 (this process).
        hits_l2: Served from L2 (shared).
        misses: Calls that went upstream, by reason: a policy refusal (``temperature``,
            ``tools``, ``tool_results``, ``opt_out``, ``no_text``), ``lookup`` (the cache
            had nothing servable), ``expired`` (past its TTL) or ``cache_error``.
        stores: Answers stored.
        saved: Usage not paid thanks to hits.
        saved_usd: Dollars not paid (the hits whose price was known).
        verified: Lookups whose best candidate was checked against the upstream's answer
            (every miss with a candidate, free; and the sampled hits, paid).
        verify_mismatches: Checks that found the candidate's answer wrong.
        verify_paid: Upstream calls made only to check a hit.
        verify_usd: Their cost (when priced).
    """

    requests: int = 0
    hits_l1: int = 0
    hits_l2: int = 0
    misses: dict[str, int] = field(default_factory=dict)
    stores: int = 0
    saved: Usage = field(default_factory=Usage)
    saved_usd: float = 0.0
    verified: int = 0
    verify_mismatches: int = 0
    verify_paid: int = 0
    verify_usd: float = 0.0

    @property
    def hits(self) -> int:
        """Hits in either tier."""
        return self.hits_l1 + self.hits_l2

    @property
    def hit_rate(self) -> float:
        """Hits over calls (0.0 before the first)."""
        return self.hits / self.requests if self.requests else 0.0

    def miss(self, reason: str) -> None:
        """Counts one miss for ``reason``."""
        self.misses[reason] = self.misses.get(reason, 0) + 1


@dataclass(frozen=True)
class _Key:
    query: str
    namespace: str  # <audience>/<scope digest>
    cache_namespace: str  # what the TTL is looked up by
    owner: str  # the principal asking: "<tenant>/<user>"

    @property
    def flight(self) -> tuple[str, str]:
        """The single-flight id: identical requests only."""
        return self.namespace, self.query


@dataclass(frozen=True)
class CacheOutcome:
    """What :meth:`CachingBridge.open` found for one request.

    Attributes:
        request: The request as it goes upstream on a miss (the ``cache`` field removed).
        key: Its cache key; None when the policy refused it.
        hit: The cached completion, or None.
        reason: ``hit``; or why it goes upstream: a policy refusal (``temperature``,
            ``tools``, ``tool_results``, ``opt_out``, ``no_text``), ``lookup``, ``expired`` or
            ``cache_error``.
        detail: The cache's reason in words (the decision of :mod:`evermind.cache.decide`:
            which guard refused, the threshold, ...); it may quote a stored query.
        operation: The call's telemetry operation, ended by ``complete`` or ``deltas``.
        summary: The reason without any stored query's words (check, score, threshold):
            what a caller who did not store the entries may be shown.
        flight: On a miss, the single-flight this call leads (landed by ``complete`` or
            ``deltas``).
        lookup: The cache's lookup (its best candidate is checked against the upstream's
            answer when the cache verifies itself).
        sampled: Whether the lookup is in the verification sample.
        fresh: The upstream's answer already fetched by a verification that found the
            cached answer wrong (served instead of it, and stored).
    """

    request: ChatRequest
    key: _Key | None
    hit: Completion | None
    reason: str | None
    detail: str = ""
    operation: Operation = field(default=NOOP, compare=False, repr=False)
    summary: str = ""
    flight: Flight | None = field(default=None, compare=False, repr=False)
    lookup: CacheLookup | None = field(default=None, compare=False, repr=False)
    sampled: bool = False
    fresh: Completion | None = field(default=None, compare=False, repr=False)

    @property
    def status(self) -> str:
        """``hit-l1``, ``hit-l2``, ``miss`` (looked up, not found) or ``bypass`` (not
        cacheable): the gateway's ``x-evermind-cache`` header."""
        if self.hit is not None and self.hit.cached is not None:
            return f"hit-{self.hit.cached.tier}"
        return "miss" if self.key is not None else "bypass"


def upstream_reason(policy: CachePolicy, request: ChatRequest) -> str | None:
    """Why ``request`` may not be cached under ``policy`` (None: it may)."""
    refused = policy.refusal(request)
    if refused is None and not request.messages[-1].text().strip():
        return "no_text"
    return refused


class CachingBridge:
    """A read-through semantic cache in front of ``bridge``.

    Args:
        bridge: The upstream bridge (its misses are the only calls that cost).
        cache: The semantic cache (L1, optional L2); may be shared by several bridges, as
            the namespaces keep tenants, models and scopes apart.
        policy: What is cacheable; see :class:`CachePolicy`.
        price: ``price(model, usage)`` for ``saved_usd`` when the stored completion has no
            ``cost_usd`` of its own.
        clock: Wall-clock seconds (entries' age for the TTL; injectable for tests).
    """

    def __init__(
        self,
        bridge: Bridge,
        cache: SemanticCache,
        policy: CachePolicy | None = None,
        *,
        price: Price | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.bridge = bridge
        self.cache = cache
        self.policy = policy or CachePolicy()
        self.provider = bridge.provider
        self.stats = CachingStats()
        self._price = price
        self._clock = clock
        self._last_usage: Usage | None = None
        self._flights = Flights()

    @property
    def flights(self) -> Flights:
        """The single-flights in progress (and how many followers waited)."""
        return self._flights

    @property
    def last_usage(self) -> Usage | None:
        """The usage of the last finished call (zero after a hit)."""
        return self._last_usage

    async def aclose(self) -> None:
        """Closes the inner bridge."""
        await self.bridge.aclose()

    # ----------------------------------------------------------------- the two calls

    async def generate(self, request: ChatRequest) -> Completion:
        """The cached completion of ``request``, or the upstream's (then stored)."""
        return await self.complete(await self.open(request))

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        """Deltas of the cached text on a hit; the upstream's on a miss (stored at the end)."""
        async for delta in self.deltas(await self.open(request)):
            yield delta

    async def open(self, request: ChatRequest) -> CacheOutcome:
        """Looks ``request`` up: what :meth:`complete` or :meth:`deltas` will serve.

        ``generate`` and ``stream`` are ``open`` followed by one of those; a caller that must
        know whether it is a hit before the first byte (the gateway's response header) calls
        them itself. A miss while an identical miss is in flight waits for it and is served
        its answer (or raises its error); a miss that leads must be passed to ``complete``
        or ``deltas`` (dropping it unused lands its flight when it is collected).
        """
        self.stats.requests += 1
        operation = start_chat(self.provider, request)
        try:
            key, upstream, refused = self._key(request)
            if key is None:
                detail = "not cacheable by the policy"
                return CacheOutcome(
                    upstream, None, None, refused, detail, operation, summary=detail
                )
            stats = self.stats
            before = (stats.hits_l1, stats.hits_l2, stats.saved, stats.saved_usd)
            looked, waited = await self._coalesced(key, _refresh(request))
            hit, reason, detail, summary, found = looked
            # A lookup that waited on an identical in-flight miss meets an answer the upstream
            # gave seconds ago for the same question: checking it again would only undo the
            # coalescing, so it is not drawn into the sample.
            # The shared protocol (verified.plan_check): drawn into the sample, counted for the
            # namespace's served bound, and a would-be hit that is not an exact repeat checked
            # while that bound is not within δ; a coalesced lookup counts, as one that cannot
            # be wrong, and is not sampled.
            plan = self._plan(hit, found, key, eligible=not waited)
            sampled = plan.sampled
            fresh = None
            if hit is not None and plan.check_hit and found is not None:
                hit, fresh, reason, detail = await self._check_hit(upstream, key, found, hit, plan)
                if hit is None:  # it would have served a wrong answer: not a hit after all
                    stats.hits_l1, stats.hits_l2, stats.saved, stats.saved_usd = before
                    summary = detail
                else:  # served from the cache, but the check paid what a miss pays
                    stats.saved, stats.saved_usd = before[2], before[3]
                    summary = f"{summary}; checked against the upstream (paid): same answer"
        except BaseException as err:
            operation.fail(err)
            raise
        if hit is None:
            self.stats.miss(reason)
        flight = None
        if hit is None and fresh is None and reason in _UPSTREAM_MISSES:
            flight = self._flights.start(key.flight)
        outcome = CacheOutcome(
            upstream, key, hit, reason, detail, operation, summary, flight, found, sampled, fresh
        )
        if flight is not None:
            self._flights.tie(flight, outcome)
        return outcome

    async def peek(self, request: ChatRequest) -> CacheOutcome:
        """Looks ``request`` up without ever calling the upstream: a hit, or a miss that
        starts no flight (a client that keeps its own answers, such as the Studio's tab,
        asks the cache only). It counts in :attr:`stats` as :meth:`open`'s lookups do."""
        self.stats.requests += 1
        key, upstream, refused = self._key(request)
        if key is None:
            detail = "not cacheable by the policy"
            return CacheOutcome(upstream, None, None, refused, detail, summary=detail)
        stats = self.stats
        before = (stats.hits_l1, stats.hits_l2, stats.saved, stats.saved_usd)
        hit, reason, detail, summary, found = await self._lookup(key)
        if self._plan(hit, found, key, draw=False).forced:
            # Nothing can check it here, and this gateway's evidence does not bound yet what
            # serving it unchecked costs: only exact repeats are shared until it does.
            stats.hits_l1, stats.hits_l2, stats.saved, stats.saved_usd = before
            hit, reason = None, "unbounded"
            detail = summary = (
                "not served: this gateway has not yet checked enough of its hits to bound the "
                "error of serving one unchecked, and a look-up without the upstream cannot check"
            )
        if hit is None:
            self.stats.miss(reason)
        return CacheOutcome(upstream, key, hit, reason, detail, summary=summary, lookup=found)

    async def put(self, request: ChatRequest, text: str) -> str | None:
        """Stores ``text`` as the answer to ``request``, as if the upstream had given it (no
        usage, no cost): a later cacheable request of the same scope is served it. Returns
        None when stored, else why not (the policy's refusal, or ``cache_error``)."""
        key, _, refused = self._key(request)
        if key is None:
            return refused
        completion = Completion(text, request.model, self.provider, cost_usd=0.0)
        before = self.stats.stores
        await self._store(key, completion)
        return None if self.stats.stores > before else "cache_error"

    async def _coalesced(
        self, key: _Key, refresh: bool = False
    ) -> tuple[tuple[Completion | None, str, str, str, CacheLookup | None], bool]:
        """The lookup of ``key`` and whether it waited: a miss while an identical miss is in
        flight waits for that flight and looks again (its error is raised here). A refresh
        never waits: it asks for a fresh answer."""
        landed = self._flights.landed(key.flight)
        found = await self._lookup(key, refresh=refresh)
        waited = False
        while not refresh and found[0] is None and found[1] in _UPSTREAM_MISSES:
            flight = self._flights.current(key.flight)
            if flight is not None:
                await self._flights.wait(flight)
                waited = True
            elif self._flights.landed(key.flight) == landed:
                break  # nobody is asking this, nor stored it while this lookup ran: lead
            else:
                waited = True
            landed = self._flights.landed(key.flight)
            found = await self._lookup(key)
        return found, waited

    async def complete(self, outcome: CacheOutcome) -> Completion:
        """The completion of an opened request: the hit, or the upstream's (then stored)."""
        operation = outcome.operation
        if outcome.hit is not None:
            finish_chat(operation, outcome.hit, _cache_attributes(outcome))
            return outcome.hit
        if outcome.fresh is not None:
            finish_chat(operation, outcome.fresh, _cache_attributes(outcome))
            return outcome.fresh
        try:
            with operation.current():
                completion = await self.bridge.generate(outcome.request)
        except BaseException as err:
            operation.fail(err)
            self._land(outcome, err)
            raise
        self._last_usage = completion.usage
        if outcome.key is not None:
            await self._store(outcome.key, completion)
            self._check_miss(outcome, completion)
        self._land(outcome)
        finish_chat(operation, completion, _cache_attributes(outcome))
        return completion

    async def deltas(self, outcome: CacheOutcome) -> AsyncIterator[Delta]:
        """The stream of an opened request; a miss's full text is stored at its end."""
        hit, operation = outcome.hit or outcome.fresh, outcome.operation
        if hit is not None:
            operation.first_chunk()
            finish_chat(operation, hit, _cache_attributes(outcome))
            size = max(HIT_CHUNK_CHARS, -(-len(hit.text) // MAX_HIT_DELTAS))
            for start in range(0, len(hit.text), size):
                yield Delta(hit.text[start : start + size])
                await asyncio.sleep(0)  # between deltas the loop sees a disconnect, a signal
            yield Delta(completion=hit)
            return
        completion: Completion | None = None
        pieces = self.bridge.stream(outcome.request)
        try:
            while True:
                with operation.current():
                    delta = await anext(pieces, None)
                if delta is None:
                    break
                if delta.text:
                    operation.first_chunk()
                if delta.completion is not None and completion is None:
                    # Stored before the last delta is handed on: a consumer may stop there.
                    completion = delta.completion
                    self._last_usage = completion.usage
                    if outcome.key is not None:
                        await self._store(outcome.key, completion)
                        self._check_miss(outcome, completion)
                    self._land(outcome)
                    finish_chat(operation, completion, _cache_attributes(outcome))
                yield delta
        except BaseException as err:
            operation.fail(err)
            self._land(outcome, err)
            raise
        finally:
            self._land(outcome)  # abandoned (closed early): the followers look again
            close = getattr(pieces, "aclose", None)
            if close is not None:
                await close()
        if completion is None:  # the contract says a stream ends with its completion
            operation.fail("upstream_stream_cut")
            cut = UpstreamError(
                f"{self.provider}: the stream ended without its completion",
                provider=self.provider,
                code="upstream_stream_cut",
            )
            raise cut

    def _land(self, outcome: CacheOutcome, error: BaseException | None = None) -> None:
        if outcome.flight is not None:
            self._flights.land(outcome.flight, error)

    # ----------------------------------------------------------------- internals

    def _key(self, request: ChatRequest) -> tuple[_Key | None, ChatRequest, str | None]:
        """The cache key (None: not cacheable, the miss counted), the request to send
        upstream (without the ``cache`` opt-in field) and why it is not cacheable."""
        upstream = request
        if OPT_KEY in request.extra:
            extra = {k: v for k, v in request.extra.items() if k != OPT_KEY}
            upstream = dataclasses.replace(request, extra=extra)
        refused = upstream_reason(self.policy, request)
        if refused is not None:
            self.stats.miss(refused)
            return None, upstream, refused
        audience = self.policy.audience(request.tenant, request.user)
        digest = scope_digest(self.provider, upstream)
        query = request.messages[-1].text().strip()
        owner = f"{request.tenant}/{request.user}"
        key = _Key(query, f"{audience}/{digest}", self.policy.namespace(request.tenant), owner)
        return key, upstream, None

    async def _lookup(
        self, key: _Key, *, refresh: bool = False
    ) -> tuple[Completion | None, str, str, str, CacheLookup | None]:
        """The hit (None: a miss), why it missed (``lookup``, ``expired``, ``cache_error``,
        ``refresh``) or ``hit``, the cache's own reason in words, that reason without any
        stored query's words (:attr:`CacheOutcome.summary`), and the lookup."""
        try:
            found = await self.cache.alookup(key.query, key.namespace)
        except EvermindError as err:  # the cache never fails a request: go upstream
            logger.warning("caching bridge: lookup failed, calling upstream: %s", err)
            return None, "cache_error", str(err), "the cache failed; the upstream answered", None
        if refresh:  # the caller asked for a fresh answer: it replaces the entry
            why = "the client asked for a fresh answer (refresh)"
            return None, "refresh", why, why, found
        entry = found.response if found.hit and isinstance(found.response, dict) else None
        if entry is None or entry.get("v") != ENTRY_VERSION:
            return None, "lookup", found.reason, _summary(found), found
        ttl = self.policy.ttl_of(key.cache_namespace)
        stored_at = entry.get("stored_at")
        if ttl is not None and (
            not isinstance(stored_at, int | float) or self._clock() - stored_at > ttl
        ):
            self.cache.invalidate(key.namespace, found.cached_query)
            expired = f"stored more than {ttl:g} s ago"
            return None, "expired", expired, expired, found
        return self._served(found, entry, key), "hit", found.reason, _summary(found), found

    # ----------------------------------------------------------------- verification

    def _plan(
        self,
        hit: Completion | None,
        found: CacheLookup | None,
        key: _Key,
        *,
        eligible: bool = True,
        draw: bool = True,
    ) -> CheckPlan:
        """The shared protocol's plan for this lookup (:func:`plan_check`)."""
        return plan_check(
            self.cache.verification,
            hit=hit is not None and found is not None,
            query=key.query,
            cached_query=None if found is None else found.cached_query,
            scope=key.cache_namespace,
            eligible=eligible,
            draw=draw,
        )

    async def _check_hit(
        self,
        upstream: ChatRequest,
        key: _Key,
        found: CacheLookup,
        hit: Completion,
        plan: CheckPlan,
    ) -> tuple[Completion | None, Completion | None, str, str]:
        """A sampled (or, until bounded, any) hit, checked: the upstream answers too (paid)
        and the two are compared.

        Returns the hit to serve (None when it proved wrong), the upstream's answer (served
        and stored in its place when they differ), and the outcome's reason and detail.
        """
        fresh = await self.bridge.generate(upstream)
        self.stats.verify_paid += 1
        cost = fresh.cost_usd
        if cost is None and self._price is not None:
            cost = self._price(fresh.model, fresh.usage)
        self.stats.verify_usd += cost or 0.0
        same = _complete_answer(fresh) and answers_equivalent(hit.text, fresh.text)
        self._record(found, same, plan, paid=True, cost_usd=cost or 0.0)
        if same:
            why = (
                "until its error is bounded, every hit"
                if plan.forced and not plan.sampled
                else "sampled"
            )
            # The answer is the cache's, but this call paid the upstream: it saved nothing.
            paid_for = (
                None
                if hit.cached is None
                else dataclasses.replace(hit.cached, saved=Usage(), saved_usd=0.0)
            )
            checked = dataclasses.replace(hit, cost_usd=cost, usage=fresh.usage, cached=paid_for)
            self._last_usage = fresh.usage
            return (
                checked,
                None,
                "hit",
                f"{found.reason}; checked against the upstream ({why}): same answer",
            )
        self._last_usage = fresh.usage
        await self._store(key, fresh)
        return (
            None,
            fresh,
            "verify_mismatch",
            (
                "a check found the cached answer differs from the upstream's: the "
                "upstream's answer is served and stored for this question"
            ),
        )

    def _check_miss(self, outcome: CacheOutcome, completion: Completion) -> None:
        """A miss whose lookup judged a candidate: compare its stored answer (free)."""
        found = outcome.lookup
        if found is None or self.cache.verification is None or outcome.fresh is not None:
            return
        if found.probability is None:
            if outcome.sampled:  # a sampled lookup that had nothing to serve: never wrong
                record_check(self.cache.verification, CheckPlan(sampled=True), None, True)
            return
        stored = self.cache.response_of(found.entry)
        if not isinstance(stored, dict) or not isinstance(stored.get("text"), str):
            return
        same = _complete_answer(completion) and answers_equivalent(
            str(stored["text"]), completion.text
        )
        self._record(found, same, CheckPlan(sampled=outcome.sampled))

    def _record(
        self,
        found: CacheLookup,
        same: bool,
        plan: CheckPlan,
        *,
        paid: bool = False,
        cost_usd: float = 0.0,
    ) -> None:
        self.stats.verified += 1
        self.stats.verify_mismatches += not same
        record_check(
            self.cache.verification, plan, found.probability, same, found.entry,
            paid=paid, cost_usd=cost_usd,
        )  # fmt: skip

    def _served(self, found: CacheLookup, entry: dict[str, JSONValue], key: _Key) -> Completion:
        stored = _completion_of(entry)
        saved_usd = stored.cost_usd
        if saved_usd is None and self._price is not None:
            saved_usd = self._price(stored.model, stored.usage)
        if found.tier == "l2":
            self.stats.hits_l2 += 1
        else:
            self.stats.hits_l1 += 1
        self.stats.saved = self.stats.saved + stored.usage
        self.stats.saved_usd += saved_usd or 0.0
        self._last_usage = Usage()
        mine = entry.get("by") == key.owner  # another principal's prompt is not disclosed
        info = CacheInfo(
            tier=found.tier or "l1",
            score=float(found.score if found.score is not None else 1.0),
            cached_query=(found.cached_query or "") if mine else "",
            saved=stored.usage,
            saved_usd=saved_usd,
        )
        return dataclasses.replace(
            stored, usage=Usage(), cost_usd=0.0, id=f"cache-{uuid.uuid4().hex}", cached=info
        )

    async def _store(self, key: _Key, completion: Completion) -> None:
        if completion.cached is not None:
            return  # already a cached answer (a cache behind a cache)
        try:
            await self.cache.astore(
                key.query, _entry_of(completion, self._clock(), key.owner), None, key.namespace
            )
        except EvermindError as err:
            logger.warning("caching bridge: store failed, answer not cached: %s", err)
            return
        self.stats.stores += 1


def _refresh(request: ChatRequest) -> bool:
    """Whether the caller asked for a fresh answer (``extra["cache"] == "refresh"``)."""
    return request.extra.get(OPT_KEY) == "refresh"


def _complete_answer(completion: Completion) -> bool:
    """Whether an answer can be compared: it finished normally with text."""
    return bool(completion.text.strip()) and completion.finish_reason in (
        None,
        "stop",
        "end_turn",
        "length",
    )


def _summary(found: CacheLookup) -> str:
    """Why a lookup hit or missed, from the decision's check, score and threshold only: never
    a stored query or its words (the cache's own reason may quote them)."""
    threshold = "" if found.threshold is None else f", threshold {found.threshold:.3f}"
    best = "" if found.score is None else f"best cosine {found.score:.3f}"
    if found.hit:
        return f"served: {best}{threshold}"
    if found.refused_by is not None:
        return f"refused by the cache's {found.refused_by} check ({best or 'no score'}{threshold})"
    if found.score is None:
        return "no cached query to serve" + (
            f" (threshold {found.threshold:.3f})" if threshold else ""
        )
    return f"no cached query reached the threshold ({best}{threshold})"


def _cache_attributes(outcome: CacheOutcome) -> dict[str, Any]:
    """The ``evermind.cache.*`` attributes of an outcome, for its telemetry operation."""
    attributes: dict[str, Any] = {
        semconv.CACHE_HIT: outcome.hit is not None,
        semconv.CACHE_STATUS: outcome.status,
    }
    if outcome.reason is not None and outcome.hit is None:
        attributes[semconv.CACHE_REASON] = outcome.reason
    cached = None if outcome.hit is None else outcome.hit.cached
    if cached is not None:
        attributes.update(
            {
                semconv.CACHE_TIER: cached.tier,
                semconv.CACHE_SCORE: cached.score,
                semconv.CACHE_SAVED_INPUT: cached.saved.prompt_tokens,
                semconv.CACHE_SAVED_OUTPUT: cached.saved.output_tokens,
            }
        )
        if cached.saved_usd is not None:
            attributes[semconv.CACHE_SAVED_USD] = cached.saved_usd
    return attributes


def scope_digest(provider: str, request: ChatRequest) -> str:
    """SHA-256 (hex, 32 characters) of what must match exactly for an answer to be reused.

    Everything in ``request`` but the last turn's text and the tenant: provider, model,
    system, facts, earlier turns, the last turn's role and non-text blocks, tools, stop,
    max_tokens, temperature and extra fields.
    """
    last = request.messages[-1]
    blocks: Any = (
        []
        if isinstance(last.content, str)
        else [b for b in last.content if not (isinstance(b, dict) and b.get("type") == "text")]
    )
    scope = {
        "v": ENTRY_VERSION,
        "provider": provider,
        "model": request.model,
        "system": request.system,
        "facts": request.facts,
        "turns": [_turn(m) for m in request.messages[:-1]],
        "last": {"role": last.role, "tool_call_id": last.tool_call_id, "blocks": blocks},
        "tools": list(request.tools),
        "stop": list(request.stop),
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "extra": request.extra,
    }
    text = json.dumps(scope, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _turn(message: Any) -> dict[str, Any]:
    return {
        "role": message.role,
        "content": message.content,
        "tool_call_id": message.tool_call_id,
        "tool_calls": [[c.id, c.name, c.arguments] for c in message.tool_calls],
    }


def _entry_of(completion: Completion, now: float, owner: str) -> JSONValue:
    usage = completion.usage
    return {
        "v": ENTRY_VERSION,
        "by": owner,
        "text": completion.text,
        "model": completion.model,
        "provider": completion.provider,
        "finish_reason": completion.finish_reason,
        "usage": [
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        ],
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": json.dumps(c.arguments)}
            for c in completion.tool_calls
        ],
        "cost_usd": completion.cost_usd,
        "stored_at": now,
    }


def _completion_of(entry: dict[str, JSONValue]) -> Completion:
    usage = entry.get("usage")
    counts = [int(x) for x in usage if isinstance(x, int)] if isinstance(usage, list) else []
    calls = entry.get("tool_calls")
    tool_calls = tuple(
        ToolCall(str(c.get("id", "")), str(c.get("name", "")), json.loads(str(c["arguments"])))
        for c in (calls if isinstance(calls, list) else [])
        if isinstance(c, dict)
    )
    cost = entry.get("cost_usd")
    return Completion(
        text=str(entry.get("text", "")),
        model=str(entry.get("model", "")),
        provider=str(entry.get("provider", "")),
        finish_reason=str(entry.get("finish_reason", "stop")),
        usage=Usage(*counts) if len(counts) == 4 else Usage(),
        tool_calls=tool_calls,
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
    )
