"""The Studio's memory store and semantic cache: IndexedDB storage, the tab's model as embedder.

:class:`TabMemory` belongs to one :class:`~evermind.studio.session.Session`. It owns

- a :class:`~evermind.memory.MemoryStore` per namespace over :class:`~evermind.memory.
  kv_backend.KVMemoryBackend` (object store ``"memory"``; namespace ``"studio"`` unless a
  call names another, :func:`check_namespace`), ranking with the
  session's model when one is ready (GPU embeddings, GPU cosine scan through
  :class:`~evermind.search.gpu_index.GpuVectorIndex`; without WebGPU an opened package's
  pure-Python embeddings and the CPU scan) and lexically otherwise;
- a :class:`TabCache`: cached answers in object store ``"cache"`` (one JSON row per query),
  scored by cosine (the model's vector beside a character-trigram one, or trigrams alone
  without a model) over the same kind of vector index; the best few then go to the verified
  decision (:func:`evermind.cache.verified.decide_verified`), the one the library's
  ``SemanticCache``, the runtime's L2 and the gateway make too: the shipped pair verifier and
  its bound for ``max_error`` (default 0.01; the tab has no verification signal, so the
  shipped bound is all there is and each lookup's ``reason`` says so), best candidate only, no
  guessing between near ties. ``max_error="off"`` selects the older rule-based
  :func:`evermind.cache.decide.decide` (calibrated threshold, lexical evidence, the guards of
  :data:`evermind.cache.DEFAULT_CHAIN`), which has no error bound.

With a runtime (``l2``: a :class:`~evermind.cache.gateway_client.GatewayCacheClient`), a
lookup that L1 does not serve asks the runtime's gateway cache (L2) by question text, and a
store writes a text answer through to it, so a question answered in the tab is served to an
agent through the gateway and back. The two sides embed differently (the tab: its model or
trigrams; the gateway: its own embedder), so no vector crosses: the runtime embeds and
judges the question itself. A runtime that cannot be asked leaves the tab on L1 alone, and
the result's ``l2`` says why.

The embedder is re-chosen on every call: when the session's fingerprint changes (more
training, a reload, a new model) or the model starts or stops training, store and cache are
rebuilt around the new embedder; stored rows stay, vectors are re-embedded lazily (memory
vectors are cached per fingerprint in IndexedDB). Without a model the cache ranks by hashed
character trigrams, and every result says which ranking ran. Browser-safe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evermind.cache import DEFAULT_CHAIN
from evermind.cache.decide import Candidate, contested_of, decide
from evermind.cache.gateway_client import GatewayCacheClient
from evermind.cache.verified import DEFAULT_MAX_ERROR, decide_verified, parse_max_error
from evermind.cache.verifier import default_verifier
from evermind.errors import ConfigError, InputError, StorageError
from evermind.memory import MemoryStore
from evermind.memory.kv_backend import KVMemoryBackend
from evermind.search.calibration import UNCALIBRATED, Calibration, measure_calibration, stale
from evermind.search.gpu_index import GpuVectorIndex
from evermind.search.terms import TermStats
from evermind.search.vectors import VectorIndex

if TYPE_CHECKING:
    from evermind.studio.session import Session

log = logging.getLogger(__name__)

#: The memory store's namespace inside the tab's IndexedDB (when a call names none).
NAMESPACE = "studio"
#: Longest namespace name a Studio call may give.
MAX_NAMESPACE_CHARS = 64
#: Lowest thresholds of the cache, whatever the calibration: with a model the lookup vector
#: is the model's and the trigram vector side by side (cosine = their mean); without one,
#: trigrams alone. The threshold that applies is the higher of these and what the
#: calibration measures (``evermind.search.calibration``): how the embedder scores the cache's
#: own, mostly unrelated, stored queries. With a model the floor stays 0.7: an untrained
#: model's half of the vector alone scores ~0.5, so the trigram half must reach ~0.4 too.
#: Without one, trigrams alone: 0.4, the library's floor (evals/cache_full.py measures it).
HYBRID_THRESHOLD = 0.7
LEXICAL_THRESHOLD = 0.4
#: Most cached answers kept in the tab; the oldest stored go first.
CACHE_CAPACITY = 20_000
#: Dimension of the lexical (character-trigram) vectors.
TRIGRAM_DIM = 256
_EMBED_BATCH = 64


def check_namespace(namespace: object) -> str:
    """The namespace a Studio call names (:data:`NAMESPACE` for None or "").

    Raises:
        InputError: Not a string, longer than :data:`MAX_NAMESPACE_CHARS`, or holding
            spaces or control characters.
    """
    if namespace is None or namespace == "":
        return NAMESPACE
    if (
        not isinstance(namespace, str)
        or len(namespace) > MAX_NAMESPACE_CHARS
        or not namespace.isprintable()
        or any(ch.isspace() for ch in namespace)
    ):
        raise InputError(
            f"namespace: expected 1-{MAX_NAMESPACE_CHARS} printable characters without spaces, "
            f"got {str(namespace)[:80]!r}; hint: leave it empty for {NAMESPACE!r}"
        )
    return namespace


def trigram_vector(text: str, dim: int = TRIGRAM_DIM) -> list[float]:
    """Hashed character-trigram counts of ``text`` (case-folded, spaces squeezed), L2-normed."""
    padded = " " + " ".join(text.casefold().split()) + " "
    out = [0.0] * dim
    for i in range(len(padded) - 2):
        out[zlib.crc32(padded[i : i + 3].encode("utf-8")) % dim] += 1.0
    norm = math.sqrt(sum(x * x for x in out)) or 1.0
    return [x / norm for x in out]


class SessionEmbedder:
    """The session's model as a memory-store embedder, pinned to one fingerprint.

    Args:
        session: The Studio session whose model embeds.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.fingerprint = session.embedder_fingerprint

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Sentence embeddings of ``texts`` (unit norm; through the session's head): on the
        GPU, or on the CPU for a package opened without WebGPU."""
        return await self.session.embed(texts)


def embedder_status(session: Session) -> tuple[str | None, str]:
    """``(fingerprint, words)`` of the embedder the tab can use now; fingerprint None: none.

    A package opened without WebGPU embeds too (pure Python, :meth:`Session.embed`): memory
    and cache rank by its vectors as they would by the GPU model's."""
    if session.tokenizer is None or (session.model is None and not session.on_cpu):
        return None, "no model: train one (or resume the saved session) for semantic ranking"
    if session.state == "training":
        return None, "the model is training: lexical ranking until it pauses or finishes"
    if session.state == "embedding":
        return None, "the embedder phase is running: lexical ranking until it finishes"
    fingerprint = session.embedder_fingerprint
    if session.on_cpu:
        return fingerprint, f"the opened package on the CPU ({fingerprint})"
    return fingerprint, f"the tab's model ({fingerprint})"


def _index(session: Session, semantic: bool) -> VectorIndex:
    """The GPU cosine scan beside a GPU model; the CPU scan otherwise (no WebGPU)."""
    if semantic and session.model is not None:
        return GpuVectorIndex(session.model.device)
    return VectorIndex()


@dataclass
class _Cached:
    query: str
    response: Any
    stored_at: float
    seq: int = 0  # write order in this tab: breaks stored_at ties for eviction


class TabCache:
    """The tab's L1 semantic cache, persisted in the ``"cache"`` object store.

    Args:
        kv: The Studio's key-value port.
        session: The session whose model embeds (None or no model: character trigrams).
        semantic: Use the session's model (True) or the trigram fallback (False).
        clock: Seconds since the epoch.
    """

    def __init__(self, kv: Any, session: Session, semantic: bool, clock: Any = time.time) -> None:
        self.kv = kv
        self.session = session
        self.semantic = semantic
        self.fingerprint = session.embedder_fingerprint if semantic else "trigram-256"
        # decide's rule 8: the model's scores are evidence only through a head fitted to a
        # teacher (the embedder phase's distillation); trigrams are word overlap.
        head = session.head if semantic else None
        self.trust_scores = not semantic or (head is not None and head.method != "centre")
        self.index = _index(session, semantic)
        self.entries: dict[str, _Cached] = {}
        self.clock = clock
        self._read_done = False
        self._unembedded: list[str] = []  # keys read but not yet in the index, in order
        self._seq = 0
        self._calibration: tuple[int, Calibration] = (0, UNCALIBRATED)
        self.terms = TermStats()  # the stored queries' IDF (weights the lexical evidence)

    @property
    def ranked_by(self) -> str:
        """How lookups rank candidates, in words."""
        if self.semantic:
            return (
                "semantic+lexical: mean of the tab model's cosine and the character-trigram "
                f"cosine ({self.fingerprint})"
            )
        return "lexical only: no model (character-trigram cosine)"

    @property
    def default_threshold(self) -> float:
        """The lowest cosine threshold a lookup applies (calibration may raise it)."""
        return HYBRID_THRESHOLD if self.semantic else LEXICAL_THRESHOLD

    @property
    def calibration(self) -> Calibration:
        """How this embedder scores the stored (mostly unrelated) queries; re-measured when
        their number has changed by a quarter."""
        measured, found = self._calibration
        if not stale(measured, len(self.entries)):
            return found
        keys = list(self.entries)
        found = measure_calibration(
            [self.entries[k].query for k in keys],
            lambda chosen, pairs: [
                self.index.cosine(keys[chosen[i]], keys[chosen[j]]) for i, j in pairs
            ],
        )
        self._calibration = (len(keys) if found.pairs else 0, found)
        return found

    async def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        lexical = [trigram_vector(t) for t in texts]
        if not self.semantic:
            return lexical
        out: list[list[float]] = []
        half = 1 / math.sqrt(2)  # both parts unit-norm: the cosine is the mean of the two
        for start in range(0, len(texts), _EMBED_BATCH):
            batch = await self.session.embed(list(texts[start : start + _EMBED_BATCH]))
            for offset, vector in enumerate(batch):
                norm = math.sqrt(sum(x * x for x in vector)) or 1.0
                out.append(
                    [x * half / norm for x in vector] + [x * half for x in lexical[start + offset]]
                )
        return out

    async def _read(self) -> None:
        """Reads every cached answer (one transaction, once); their vectors are made by
        :meth:`ensure_vectors`."""
        if self._read_done:
            return
        rows = await self.kv.get_all("cache")
        for key, value in rows:
            try:
                row = json.loads(value)
                self.entries[key] = _Cached(str(row["query"]), row["response"], row["stored_at"])
            except (ValueError, TypeError, KeyError) as err:
                log.warning("cache: skipping unreadable row %r: %s", key, err)
        self.terms = TermStats.of(e.query for e in self.entries.values())
        self._unembedded = list(self.entries)
        self._read_done = True

    async def pending_vectors(self) -> int:
        """How many cached questions this embedder has not embedded yet (reads the rows on
        the first call: all of them for a new cache)."""
        await self._read()
        return len(self._unembedded)

    async def ensure_vectors(
        self, on_batch: Callable[[int, int], Awaitable[None]] | None = None
    ) -> None:
        """Embeds the cached questions not yet in the index, in batches of
        :data:`_EMBED_BATCH`.

        Args:
            on_batch: Awaited as ``on_batch(done, total)`` before each batch and after the
                last; an exception it raises stops the work there. Each question embedded
                before it keeps its (whole) vector for this embedder; the rest stay pending,
                and the next call embeds them.
        """
        await self._read()
        todo = self._unembedded
        for start in range(0, len(todo), _EMBED_BATCH):
            if on_batch is not None:
                await on_batch(start, len(todo))
            batch = [k for k in todo[start : start + _EMBED_BATCH] if k in self.entries]
            vectors = await self._embed([self.entries[k].query for k in batch])
            for key, vector in zip(batch, vectors, strict=True):
                if key in self.entries:  # not evicted while this awaited
                    self.index.add(key, vector)
            self._unembedded = todo[start + _EMBED_BATCH :]
        if on_batch is not None and todo:
            await on_batch(len(todo), len(todo))
        self._unembedded = []

    async def load(self) -> None:
        """Reads every cached answer (one transaction) and embeds the questions not embedded
        yet (all of them the first time)."""
        await self.ensure_vectors()

    async def store(
        self, query: str, response: Any, l2: GatewayCacheClient | None = None
    ) -> dict[str, Any]:
        """Caches ``response`` for ``query`` (one transaction, evicting the oldest if full);
        with ``l2``, writes a text answer through to the runtime's gateway cache as well
        (``l2`` in the result says whether it went there, and why not)."""
        stored = await self._store_l1(query, response)
        if l2 is None:
            return stored
        if not isinstance(response, str) or not response.strip():
            return {**stored, "l2": "not shared: the gateway caches text answers only"}
        try:
            refused = await l2.store(query, response)
        except StorageError as err:
            log.warning("cache: the runtime's cache failed, stored in L1 only: %s", err)
            return {**stored, "l2": f"L1 only: {err}"}
        if refused is not None:
            return {**stored, "l2": f"L1 only: the runtime did not store it ({refused})"}
        return {**stored, "l2": "stored in the runtime's gateway cache too"}

    async def _store_l1(self, query: str, response: Any) -> dict[str, Any]:
        query = _check_query(query)
        await self.load()
        key = "q/" + hashlib.sha256(query.encode("utf-8")).hexdigest()
        (vector,) = await self._embed([query])
        entry = _Cached(query, response, self.clock())
        row = json.dumps(
            {"query": query, "response": response, "stored_at": entry.stored_at}, allow_nan=False
        )
        self._seq += 1
        entry.seq = self._seq
        others = sorted((e.stored_at, e.seq, k) for k, e in self.entries.items() if k != key)
        evict = [k for _, _, k in others[: max(0, len(others) + 1 - CACHE_CAPACITY)]]
        await self.kv.write("cache", [(key, row)], evict)
        for gone in evict:
            self.terms.remove(self.entries.pop(gone).query)
            self.index.remove(gone)
        if key in self.entries:  # the same query stored again: its old row is replaced
            self.terms.remove(self.entries[key].query)
        self.entries[key] = entry
        self.terms.add(query)
        self.index.add(key, vector)
        return {"stored": True, "entries": len(self.entries), "evicted": len(evict)}

    async def store_many(self, pairs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
        """Caches many ``(query, response)`` pairs in one transaction (imports, benchmarks)."""
        await self.load()
        fresh: dict[str, _Cached] = {}
        for query, response in pairs:
            query = _check_query(query)
            self._seq += 1
            key = "q/" + hashlib.sha256(query.encode("utf-8")).hexdigest()
            fresh[key] = _Cached(query, response, self.clock(), self._seq)
        rows = [
            (k, json.dumps({"query": e.query, "response": e.response, "stored_at": e.stored_at}))
            for k, e in fresh.items()
        ]
        keep = sorted((e.stored_at, e.seq, k) for k, e in self.entries.items() if k not in fresh)
        evict = [k for _, _, k in keep[: max(0, len(keep) + len(fresh) - CACHE_CAPACITY)]]
        await self.kv.write("cache", rows, evict)
        for gone in evict:
            self.terms.remove(self.entries.pop(gone).query)
            self.index.remove(gone)
        vectors = await self._embed([e.query for e in fresh.values()])
        for (key, entry), vector in zip(fresh.items(), vectors, strict=True):
            if key in self.entries:  # the same query stored again: its old row is replaced
                self.terms.remove(self.entries[key].query)
            self.entries[key] = entry
            self.terms.add(entry.query)
            self.index.add(key, vector)
        return {"stored": len(fresh), "entries": len(self.entries), "evicted": len(evict)}

    async def lookup(
        self,
        query: str,
        threshold: float | None = None,
        max_error: float | str | None = DEFAULT_MAX_ERROR,
        l2: GatewayCacheClient | None = None,
    ) -> dict[str, Any]:
        """Serves a cached answer when the decision for ``max_error`` says so: from L1 (this
        tab), else, with ``l2``, from the runtime's gateway cache (L2).

        Args:
            query: The question.
            threshold: A cosine the best candidate must also reach (None: none with the
                verified decision; the calibrated default with the rule-based one).
            max_error: δ in (0, 1), or ``"off"``/None for the rule-based decision.
            l2: The runtime's gateway cache, asked on an L1 miss. It judges the question
                with its own embedder and decision; a hit is kept in L1 too. When it cannot
                be asked the result is L1's, with ``l2`` saying why (the tab never fails).
        """
        found = await self._lookup_l1(query, threshold, max_error)
        if l2 is None or found["hit"]:
            if l2 is not None:
                found["l2"] = "not asked: L1 served it"
            return found
        try:
            hit, words = await l2.lookup(query)
        except StorageError as err:
            log.warning("cache: the runtime's cache failed, L1 only: %s", err)
            return {**found, "l2": f"L1 only: {err}"}
        if hit is None:
            return {**found, "l2": f"the runtime had no answer either ({words})"}
        await self._store_l1(query, hit.response)  # kept in L1: a repeat is served here
        return {
            **found,
            "hit": True,
            "response": hit.response,
            "score": hit.score,
            "tier": "l2",
            "probability": None,  # L1's verifier judged another question; the runtime's is its own
            "refused_by": None,
            "reason": (
                f"served from l2: the runtime's gateway cache judged it with its own embedder "
                f"(its {hit.tier}, score {hit.score:.3f}); kept in L1 too"
            ),
            "cached_query": hit.query,
            "l2": words,
        }

    async def _lookup_l1(
        self,
        query: str,
        threshold: float | None,
        max_error: float | str | None,
    ) -> dict[str, Any]:
        """The L1 half of :meth:`lookup`."""
        query = _check_query(query)
        bound = None if max_error is None else parse_max_error(max_error, "cache_lookup")
        explicit = None if threshold is None else _check_threshold(threshold)
        floor = self.default_threshold if explicit is None else explicit
        await self.load()
        calibration = self.calibration
        base: dict[str, Any] = {
            "max_error": bound,
            "ranked_by": self.ranked_by,
            "threshold": floor,
            "entries": len(self.entries),
            "calibration": calibration.words,
        }
        exact = self.entries.get("q/" + hashlib.sha256(query.encode("utf-8")).hexdigest())
        if exact is not None:
            return {**base, **_answer(True, exact, 1.0, None, "exact match of a cached query")}
        (vector,) = await self._embed([query])
        found = await self.index.asearch(vector, min(64, len(self.entries)))
        base["scan"] = self.index.last_scan
        candidates = [
            Candidate(key, score, self.entries[key].query, _answer_key(self.entries[key]))
            for key, score in found[:4]
        ]
        if bound is not None:
            decision = decide_verified(
                query,
                candidates,
                calibration=calibration,
                verifier=default_verifier(),
                max_error=bound,
                floor=explicit,
                # Nothing in the tab can check a hit against a fresh answer: the no-signal
                # fallback (a stricter shipped level; exact repeats only at δ = 0.01).
                fallback=True,
            )
            base["probability"] = decision.probability
        # decide's rule 6: how close another question sits to the best one (measured only
        # when the best could be served at all).
        elif candidates and candidates[0].score >= floor:
            best = candidates[0]
            own = self.index.vector(str(best.key))
            if own is not None:
                near = await self.index.asearch(own, min(8, len(self.entries)))
                contested = contested_of(
                    ((score, key, _answer_key(self.entries[key])) for key, score in near),
                    best.key,
                    best.answer,
                )
                candidates[0] = dataclasses.replace(best, contested=contested)
        if bound is None:
            decision = decide(
                query,
                candidates,
                threshold=floor,
                calibration=calibration,
                guard=DEFAULT_CHAIN.check,
                idf=self.terms,
                trust_scores=self.trust_scores,
            )
        # An infinite level (the no-signal fallback at δ 0.01: exact repeats only) is no
        # number JSON can carry to the page: null, and the reason says why.
        level = decision.threshold
        base["threshold"] = level if level is None or math.isfinite(level) else None
        cand = decision.candidate
        if cand is not None:
            entry = self.entries[str(cand.key)]
            words = "served from l1" if decision.hit else decision.reason
            return {
                **base,
                **_answer(decision.hit, entry, cand.score, decision.refused_by, words),
            }
        return {
            **base,
            "hit": False,
            "response": None,
            "score": found[0][1] if found else None,
            "tier": None,
            "refused_by": None,
            "reason": decision.reason,
            "cached_query": None,
        }

    def release(self) -> None:
        """Frees GPU buffers of the index (the rows stay in IndexedDB)."""
        if isinstance(self.index, GpuVectorIndex):
            self.index.release()


def _answer(
    hit: bool, entry: _Cached, score: float, refused_by: str | None, reason: str
) -> dict[str, Any]:
    return {
        "hit": hit,
        "response": entry.response if hit else None,
        "score": score,
        "tier": "l1" if hit else None,
        "refused_by": refused_by,
        "reason": reason,
        "cached_query": entry.query,
    }


def _answer_key(entry: _Cached) -> str:
    try:
        return json.dumps(entry.response, sort_keys=True)
    except (TypeError, ValueError):
        return repr(entry.response)


def _check_query(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise ConfigError(
            f"cache: expected a non-empty query string, got {query!r}; hint: type a question"
        )
    return query


def _check_threshold(threshold: object) -> float:
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not -1.0 <= threshold <= 1.0
    ):
        raise ConfigError(
            f"cache_lookup: threshold must be a cosine in [-1, 1] or null, got {threshold!r}; "
            "hint: leave it out for the calibrated default"
        )
    return float(threshold)


class TabMemory:
    """Memory store and semantic cache of one Studio session (see the module docstring).

    Args:
        session: The Studio session (its storage port and model).
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self._backends: dict[str, KVMemoryBackend] = {}
        self._stores: dict[str, MemoryStore] = {}
        self._cache: TabCache | None = None
        self._fingerprint: str | None = None
        self.embedder_words = ""

    def _settle(self) -> str | None:
        """Drops stores and cache when the usable embedder changed; returns its fingerprint."""
        fingerprint, words = embedder_status(self.session)
        self.embedder_words = words
        if fingerprint != self._fingerprint:
            for old in self._stores.values():
                if isinstance(old.vector_index, GpuVectorIndex):
                    old.vector_index.release()
            if self._cache is not None:
                self._cache.release()
            self._stores = {}
            self._cache = None
            self._fingerprint = fingerprint
        return fingerprint

    async def store(self, namespace: str | None = None) -> MemoryStore:
        """The memory store of ``namespace`` (default :data:`NAMESPACE`) for the embedder
        usable now.

        Raises:
            InputError: A bad namespace name (:func:`check_namespace`).
        """
        name = check_namespace(namespace)
        fingerprint = self._settle()
        store = self._stores.get(name)
        if store is None:
            backend = self._backends.get(name)
            if backend is None:
                backend = KVMemoryBackend(await self.session.kv(), name)
                self._backends[name] = backend
            embedder = SessionEmbedder(self.session) if fingerprint else None
            store = MemoryStore(
                backend, embedder, vector_index=_index(self.session, bool(fingerprint))
            )
            self._stores[name] = store
        return store

    async def stored(self, namespace: str | None = None) -> tuple[int, int]:
        """How many live memories ``namespace`` holds and how many answers the cache keeps,
        read from storage without embedding anything (what a reload says it restored)."""
        memories = await (await self.store(namespace)).count()
        cached = len(await (await self.session.kv()).get_all("cache"))
        return memories, cached

    async def cache(self) -> TabCache:
        """The semantic cache for the embedder usable now."""
        fingerprint = self._settle()
        if self._cache is None:
            self._cache = TabCache(await self.session.kv(), self.session, bool(fingerprint))
        return self._cache


__all__ = [
    "HYBRID_THRESHOLD",
    "LEXICAL_THRESHOLD",
    "MAX_NAMESPACE_CHARS",
    "NAMESPACE",
    "SessionEmbedder",
    "TabCache",
    "TabMemory",
    "check_namespace",
    "embedder_status",
    "trigram_vector",
]
