"""``EvermindCognition``: write-through beliefs on top of a ``MemoryStore``.

``commit(claim)`` canonicalises the claim's subject, reads the current belief on it, gathers
evidence, reconciles, and writes the outcome through to the store in one transaction:

- the current belief of a subject lives under ``belief:<canonical subject>`` — exactly one per
  subject, because the key is the subject;
- a superseded belief is rewritten, archived, under ``belief-history:<subject>:<revision>``
  with ``valid_to`` set; archived memories are never returned by ordinary recall;
- commits on one store are serialised by an ``asyncio.Lock`` shared by every cognition object
  on that store, so concurrent commits cannot lose each other's writes (within one process).

``recall`` is served from a cache keyed by the store's version token, which every write changes.
Recalled text is sanitised; ``recall_context`` fences it as reference data. Browser-safe:
standard library and ``evermind`` only.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from evermind.cognition.canonical import AliasTable
from evermind.cognition.gatherers import Gatherer, run_gatherer
from evermind.cognition.reconcile import (
    Belief,
    Claim,
    Evidence,
    Verdict,
    reconcile,
)
from evermind.errors import ConfigError
from evermind.memory.records import MemoryRecord
from evermind.memory.sanitize import fence, sanitize_text
from evermind.memory.store import MemoryStore

logger = logging.getLogger(__name__)

BELIEF_TAG = "belief"
HISTORY_TAG = "belief-history"
_CURRENT_PREFIX = "belief:"
_HISTORY_PREFIX = "belief-history:"
_MAX_SUBJECT_IN_KEY = 300

_LOCKS: weakref.WeakKeyDictionary[MemoryStore, dict[asyncio.AbstractEventLoop, asyncio.Lock]]
_LOCKS = weakref.WeakKeyDictionary()


def _store_lock(store: MemoryStore) -> asyncio.Lock:
    """The commit lock of ``store`` for the running event loop (shared by all cognitions)."""
    per_loop = _LOCKS.setdefault(store, {})
    loop = asyncio.get_running_loop()
    lock = per_loop.get(loop)
    if lock is None:
        for stale in [other for other in per_loop if other.is_closed()]:
            del per_loop[stale]
        lock = per_loop[loop] = asyncio.Lock()
    return lock


def _subject_key(canonical: str) -> str:
    if len(canonical) <= _MAX_SUBJECT_IN_KEY:
        return canonical
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
    return f"{canonical[:_MAX_SUBJECT_IN_KEY]}#{digest}"


def current_key(canonical: str) -> str:
    """The memory key of the current belief on ``canonical``."""
    return _CURRENT_PREFIX + _subject_key(canonical)


def history_key(canonical: str, revision: int) -> str:
    """The memory key of revision ``revision`` of ``canonical`` once it is history."""
    return f"{_HISTORY_PREFIX}{_subject_key(canonical)}:{revision:06d}"


@dataclass(frozen=True)
class CommitResult:
    """What ``commit`` decided and wrote.

    Attributes:
        verdict: augment, confirm, supersede or reject.
        reason: Why, in words.
        subject: The canonical subject key.
        belief: The current belief after the commit (None when rejected with no incumbent).
        previous: The belief that was current before the commit, if any.
        evidence: What the gatherer found.
    """

    verdict: Verdict
    reason: str
    subject: str
    belief: Belief | None
    previous: Belief | None
    evidence: Evidence


class EvermindCognition:
    """Beliefs with one current version per subject, written through to a ``MemoryStore``.

    Args:
        store: Where beliefs live (any backend).
        gather: Default evidence gatherer (``commit(gather=...)`` overrides it per call).
        aliases: Alternative subject names -> canonical names.
        cache_size: How many recall results the version-keyed cache keeps.
    """

    def __init__(
        self,
        store: MemoryStore,
        gather: Gatherer | None = None,
        aliases: AliasTable | Mapping[str, str] | None = None,
        *,
        cache_size: int = 256,
    ) -> None:
        if not isinstance(store, MemoryStore):
            raise ConfigError(
                f"EvermindCognition: expected a MemoryStore, got {type(store).__name__}"
            )
        self.store = store
        self.gather = gather
        self.aliases = aliases if isinstance(aliases, AliasTable) else AliasTable(aliases)
        self._cache: OrderedDict[tuple[Any, ...], list[Belief]] = OrderedDict()
        self._cache_size = cache_size
        self.cache_hits = 0

    def canonical(self, subject: str) -> str:
        """Returns the canonical key of ``subject`` under this cognition's alias table."""
        return self.aliases.resolve(subject)

    async def commit(self, claim: Claim, gather: Gatherer | None = None) -> CommitResult:
        """Reconciles ``claim`` with the current belief on its subject and writes the outcome.

        Args:
            claim: What to believe.
            gather: Evidence gatherer for this call (default: the one given at construction).

        Returns:
            The verdict, the reason, and the beliefs before and after.

        Raises:
            ConfigError: ``claim`` is not a ``Claim`` or has a blank subject.
            StorageError: The store failed; nothing was written.
        """
        if not isinstance(claim, Claim):
            raise ConfigError(
                f"commit: expected a Claim, got {type(claim).__name__}; "
                "hint: Claim(subject='deploy window', statement='Tuesdays 10:00')"
            )
        canonical = self.canonical(claim.subject)
        async with _store_lock(self.store):
            incumbent = await self.current(canonical, resolved=True)
            evidence = await run_gatherer(gather if gather is not None else self.gather, claim)
            decision = reconcile(claim, incumbent, evidence)
            now = self.store.clock()
            puts: list[MemoryRecord] = []
            belief = incumbent
            if decision.verdict is Verdict.AUGMENT:
                belief = self._new_belief(claim, canonical, evidence, now, revision=1)
            elif decision.verdict is Verdict.CONFIRM and incumbent is not None:
                belief = replace(
                    incumbent,
                    confidence=max(incumbent.confidence, claim.confidence),
                    confirmations=incumbent.confirmations + 1,
                    evidence=incumbent.evidence + evidence.notes,
                )
            elif decision.verdict is Verdict.SUPERSEDE and incumbent is not None:
                old = replace(
                    incumbent,
                    valid_to=now,
                    key=history_key(canonical, incumbent.revision),
                )
                puts.append(self._record(old, claim, archived=True, now=now))
                belief = self._new_belief(
                    claim, canonical, evidence, now, revision=incumbent.revision + 1
                )
            if decision.verdict is not Verdict.REJECT and belief is not None:
                puts.append(self._record(belief, claim, archived=False, now=now))
                await self.store.write(puts)
            logger.info("commit %r: %s (%s)", canonical, decision.verdict, decision.reason)
            return CommitResult(
                decision.verdict, decision.reason, canonical, belief, incumbent, evidence
            )

    def _new_belief(
        self, claim: Claim, canonical: str, evidence: Evidence, now: float, revision: int
    ) -> Belief:
        return Belief(
            subject=" ".join(claim.subject.split()),
            canonical=canonical,
            statement=claim.statement,
            confidence=float(claim.confidence),
            source=claim.source,
            valid_from=now,
            revision=revision,
            evidence=evidence.notes,
            key=current_key(canonical),
        )

    def _record(self, belief: Belief, claim: Claim, archived: bool, now: float) -> MemoryRecord:
        meta = {
            "kind": "belief",
            "subject": belief.subject,
            "canonical": belief.canonical,
            "statement": belief.statement,
            "confidence": belief.confidence,
            "source": belief.source,
            "valid_from": belief.valid_from,
            "valid_to": belief.valid_to,
            "revision": belief.revision,
            "confirmations": belief.confirmations,
            "evidence": list(belief.evidence),
        }
        tags = {HISTORY_TAG if archived else BELIEF_TAG, *(t.casefold() for t in claim.tags)}
        return MemoryRecord(
            key=belief.key,
            content=f"{belief.subject}: {belief.statement}",
            tags=tuple(sorted(tags)),
            importance=claim.importance,
            created_at=now,
            updated_at=now,
            archived=archived,
            meta=meta,
        )

    async def current(self, subject: str, *, resolved: bool = False) -> Belief | None:
        """Returns the current belief on ``subject`` (canonicalised unless ``resolved``)."""
        canonical = subject if resolved else self.canonical(subject)
        record = await self.store.get(current_key(canonical))
        return None if record is None or record.archived else _belief(record)

    async def history(self, subject: str) -> list[Belief]:
        """Returns every belief ever held on ``subject``, oldest first, the current one last."""
        canonical = self.canonical(subject)
        now = await self.current(canonical, resolved=True)
        if now is None:
            return []
        past = []
        for revision in range(1, now.revision):
            record = await self.store.get(history_key(canonical, revision))
            if record is not None:
                past.append(_belief(record))
        return [*past, now]

    async def recall(self, query: str, top_k: int = 5) -> list[Belief]:
        """Returns current beliefs relevant to ``query`` (statements sanitised), best first.

        Served from a cache keyed by the store's version token, so a repeat query costs one
        version read until someone writes.
        """
        version = await self.store.version()
        key = (version, query, top_k)
        cached = self._cache.get(key)
        if cached is not None:
            self.cache_hits += 1
            self._cache.move_to_end(key)
            return list(cached)
        hits = await self.store.recall(query, top_k=top_k, tags=[BELIEF_TAG])
        beliefs = []
        for hit in hits:
            belief = _belief_from(hit.key, hit.meta)
            beliefs.append(replace(belief, statement=sanitize_text(belief.statement)))
        self._cache[key] = beliefs
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return list(beliefs)

    async def recall_context(self, query: str, top_k: int = 5) -> str:
        """Returns recalled beliefs as one fenced, sanitised reference-data block for a prompt."""
        beliefs = await self.recall(query, top_k)
        items = [
            f"{b.subject}: {b.statement} (since {_iso(b.valid_from)}; "
            f"confidence {b.confidence:.2f}; revision {b.revision})"
            for b in beliefs
        ]
        return fence(items, title=f"beliefs recalled for: {query}")


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _belief(record: MemoryRecord) -> Belief:
    return _belief_from(record.key, record.meta)


def _belief_from(key: str, meta: Mapping[str, Any]) -> Belief:
    valid_to = meta.get("valid_to")
    return Belief(
        subject=str(meta.get("subject", "")),
        canonical=str(meta.get("canonical", "")),
        statement=str(meta.get("statement", "")),
        confidence=float(meta.get("confidence", 0.5)),
        source=meta.get("source"),
        valid_from=float(meta.get("valid_from", 0.0)),
        valid_to=None if valid_to is None else float(valid_to),
        revision=int(meta.get("revision", 1)),
        confirmations=int(meta.get("confirmations", 0)),
        evidence=tuple(str(n) for n in meta.get("evidence", ())),
        key=key,
    )
