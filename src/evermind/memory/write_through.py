"""Write-through cognition: every remember is reconciled with what memory already holds.

The one pipeline behind every memory write: MCP ``memory_remember``, HTTP
``POST /v1/memory/remember``, the Claude Code hooks' captures, the Studio's Memory panel
and the facts :class:`~evermind.agent.ssm_agent.SSMAgent` learns (:func:`remember_fact`).
:func:`remember_through` finds the *incumbent* — the live memory about the same subject —
and decides, saying what happened in one line (:attr:`Outcome.summary`):

1. incumbent, first match wins: the exact key; a key that folds to the same subject
   (:func:`evermind.memory.subject.fold_key`); a key declared or learned as an alias (the
   ``aliases`` argument; a supersede across keys records the old key as an alias of the
   new one); else the store's own recall of the new text, each hit accepted only under the
   bounded rule of :func:`evermind.memory.subject.same_subject` (or holding the very same
   text: then it is confirmed, not stored twice).
2. decision:

   - no incumbent: **augment** (stored as given);
   - the same text (normalised): **confirm** (the incumbent's ``updated_at`` moves to now);
   - found by key, fold or alias (the caller named the subject): **supersede** unless
     evidence is against it (**reject**);
   - found by recall (a guess): evidence for it **supersedes**, evidence against **rejects**,
     no evidence keeps both and marks the new memory **contested** (``meta.cognition``).

   A superseded memory is archived under ``<key>@<updated_at>`` (never recalled, listed by
   :func:`history`); the new one lists its predecessors in ``meta.cognition.history``.
3. ``mode="put"`` skips all of it: the plain key-value overwrite of ``MemoryStore.remember``
   (the value it replaces is not archived; the key's earlier history stays linked).

Concurrency: the decision and the write run under one lock per store (writers in this
process), and the write is a compare-and-set checked inside the backend's transaction
(SQLite's ``BEGIN IMMEDIATE``, the in-memory and key-value backends' lock;
``MemoryStore.write(expect_version=…, expect_keys=…)``). First the whole namespace must be
unchanged since the decision read it; if other writers keep moving it (another process
writing other memories), after :data:`MAX_ATTEMPTS` tries only the records the write
replaces (the incumbent, the key written, the archive key) must be unchanged, another
:data:`MAX_ATTEMPTS` tries; then the write is refused (``VersionConflict``) rather than
applied on a stale decision. In that second mode a same-subject memory written under
another key by another process at the same moment can be missed (both are then kept). The
vector-store backend checks under its in-process lock only (its port has no transactions).
Tenants: only ``store`` (one
tenant's namespace) is ever read. Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from evermind.errors import ConfigError, VersionConflict
from evermind.memory.cognition import (
    FACT_TAG,
    CognitionConfig,
    Fact,
    fact_key,
    normalise,
    refusal,
)
from evermind.memory.evidence import Evidence, EvidenceGatherer
from evermind.memory.records import (
    MAX_QUERY_CHARS,
    MemoryRecord,
    normalise_tags,
    validate_content,
    validate_importance,
    validate_key,
    validate_meta,
    validate_ttl,
)
from evermind.memory.store import MemoryStore
from evermind.memory.subject import (
    META,
    SubjectIndex,
    SubjectMatch,
    fold_key,
    own_meta,
    same_subject,
    strings,
    values,
)

Action = Literal["augment", "confirm", "supersede", "contested", "reject", "put"]
Mode = Literal["reconcile", "put"]
MODES = ("reconcile", "put")

#: Recall hits looked at for an incumbent by meaning.
CANDIDATES = 5
#: Decisions retaken when another writer moved the namespace in between (then as many
#: again, conditioned only on the keys written over).
MAX_ATTEMPTS = 3
#: Longest history :func:`history` returns.
MAX_HISTORY = 50

_locks: weakref.WeakKeyDictionary[MemoryStore, asyncio.Lock] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Outcome:
    """What :func:`remember_through` did.

    Attributes:
        action: ``augment``, ``confirm``, ``supersede``, ``contested``, ``reject`` or ``put``.
        key: The key written (on a confirm: the incumbent's; on a reject: the one asked for).
        summary: One line a person or a model reads.
        record: The record now stored (None on a reject).
        incumbent: The memory the write was compared with (None: there was none).
        archived_key: Where a superseded incumbent was archived.
        evidence: What the gatherer found (None when none was asked).
    """

    action: Action
    key: str
    summary: str
    record: MemoryRecord | None = None
    incumbent: MemoryRecord | None = None
    archived_key: str | None = None
    evidence: Evidence | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the HTTP route returns under ``cognition``."""
        return {
            "action": self.action,
            "key": self.key,
            "summary": self.summary,
            "incumbent": None if self.incumbent is None else self.incumbent.key,
            "archived_key": self.archived_key,
            "evidence": None
            if self.evidence is None
            else {"supports": self.evidence.supports, "detail": self.evidence.detail},
        }


@dataclass(frozen=True)
class _Found:
    record: MemoryRecord
    how: Literal["key", "fold", "alias", "recall"]
    match: SubjectMatch | None = None


@dataclass(frozen=True)
class Remember:
    """One write request, validated.

    Attributes:
        key: Where the caller wants it.
        content: The text.
        tags: Labels.
        importance: 0 … 1.
        ttl: Lifetime in seconds, or None.
        meta: The caller's extra fields (``cognition`` is write-through's own).
        aliases: Other keys the caller declares to name the same subject.
    """

    key: str
    content: str
    tags: tuple[str, ...] = ()
    importance: float = 0.5
    ttl: float | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        key: str,
        content: str,
        tags: Iterable[str] = (),
        importance: float = 0.5,
        ttl: float | None = None,
        meta: Mapping[str, Any] | None = None,
        aliases: Iterable[str] = (),
    ) -> Remember:
        """Validates every field (``ConfigError`` naming the bad one)."""
        checked = dict(validate_meta(meta))
        if META in checked:
            raise ConfigError(
                f"remember: meta.{META} is written by the server, not the caller; hint: use "
                "another field name"
            )
        return cls(
            validate_key(key),
            validate_content(content),
            normalise_tags(tags),
            validate_importance(importance),
            validate_ttl(ttl),
            checked,
            tuple(dict.fromkeys(validate_key(a) for a in aliases)),
        )


_indexes: weakref.WeakKeyDictionary[MemoryStore, SubjectIndex] = weakref.WeakKeyDictionary()


async def _subject_index(store: MemoryStore) -> SubjectIndex:
    index = _indexes.setdefault(store, SubjectIndex())
    version = await store.version()
    if index.version != version:
        await store.refresh()  # at least as new as ``version``: a later write rebuilds again
        index.rebuild(store.snapshot().records.values(), version)
    return index


async def _first_live(store: MemoryStore, keys: Iterable[str]) -> MemoryRecord | None:
    for key in sorted(keys):
        record = await store.get(key)
        if record is not None and not record.archived:
            return record
    return None


async def _find(store: MemoryStore, request: Remember) -> tuple[_Found | None, float | None]:
    """The incumbent (exact key, folded key, alias, then recall by meaning), and when the
    record under ``request.key`` was written as read (None: there is none)."""
    exact = await store.get(request.key)
    at = None if exact is None else exact.updated_at
    if exact is not None and not exact.archived:
        return _Found(exact, "key"), at
    return await _find_elsewhere(store, request), at


async def _find_elsewhere(store: MemoryStore, request: Remember) -> _Found | None:
    """The incumbent under another key: folded key, alias, then recall by meaning."""
    index = await _subject_index(store)
    wanted = fold_key(request.key)
    folded = await _first_live(store, index.folds.get(wanted, ()))
    if folded is not None:
        return _Found(folded, "fold")
    declared = {k for a in request.aliases for k in index.folds.get(fold_key(a), ())}
    aliased = await _first_live(store, declared | index.aliases.get(wanted, set()))
    if aliased is not None:
        return _Found(aliased, "alias")
    query = f"{' '.join(fold_key(request.key).split())} {request.content}"[:MAX_QUERY_CHARS]
    for hit in await store.recall(query, top_k=CANDIDATES):
        candidate = await store.get(hit.key)
        if candidate is None or candidate.archived:
            continue
        if normalise(candidate.content) == normalise(request.content):
            return _Found(candidate, "recall")  # the same text under another key: a confirm
        match = same_subject(request.key, request.content, candidate.key, candidate.content)
        if match is not None:
            return _Found(candidate, "recall", match)
    return None


def _record(request: Remember, now: float, cognition: Mapping[str, Any]) -> MemoryRecord:
    return MemoryRecord(
        key=request.key,
        content=request.content,
        tags=request.tags,
        importance=request.importance,
        created_at=now,
        updated_at=now,
        expires_at=None if request.ttl is None else now + request.ttl,
        meta={**request.meta, META: dict(cognition)},
    )


def _change(old: MemoryRecord, new_text: str, match: SubjectMatch | None) -> str:
    if match is None:
        gone = sorted(values(old.content) - values(new_text))
        came = sorted(values(new_text) - values(old.content))
    else:
        gone, came = list(match.old_values), list(match.new_values)
    if gone or came:
        return f"{', '.join(gone) or '-'} → {', '.join(came) or '-'}"
    return "text changed"


@dataclass(frozen=True)
class _Plan:
    """A decision ready to write: the outcome, and the records to put and keys to delete."""

    outcome: Outcome
    puts: tuple[MemoryRecord, ...] = ()
    forget: tuple[str, ...] = ()
    expect: Mapping[str, float | None] = field(default_factory=dict)


async def _decide_and_write(
    store: MemoryStore,
    request: Remember,
    gatherer: EvidenceGatherer | None,
    version: int | None,
) -> Outcome | None:
    """One attempt; None when another writer moved what the decision read meanwhile.

    The write expects the records it replaces to be the ones read (always) and, with
    ``version``, the whole namespace to be unchanged.
    """
    found, at = await _find(store, request)
    now = store.clock()
    plan = await _decide(request, found, at, gatherer, now)
    if not plan.puts:
        return plan.outcome  # a reject: nothing to write
    try:
        result = await store.write(
            plan.puts, plan.forget, expect_version=version, expect_keys=plan.expect
        )
    except VersionConflict:
        return None
    _indexes.setdefault(store, SubjectIndex()).absorb(result, version)
    written = plan.outcome.record
    stored = {r.key: r for r in result.stored}.get(written.key) if written else None
    return replace(plan.outcome, record=stored or written)


async def _decide(
    request: Remember,
    found: _Found | None,
    at: float | None,
    gatherer: EvidenceGatherer | None,
    now: float,
) -> _Plan:
    """The decision for ``request`` against the incumbent ``found`` (see the module docstring).

    ``at``: when the record under ``request.key`` was written, as read (None: none).
    """
    if found is None:
        record = _record(request, now, {"action": "augment"})
        summary = f"augmented: remembered {request.key!r} (a new fact)"
        outcome = Outcome("augment", request.key, summary, record)
        return _Plan(outcome, (record,), expect={request.key: at})
    old = found.record
    if normalise(old.content) == normalise(request.content):
        return _confirm(request, old, now)
    fact = Fact(request.content, subject=request.key, source="agent")
    evidence = None if gatherer is None else await gatherer.gather(fact, old)
    change = _change(old, request.content, found.match)
    if evidence is not None and evidence.supports is False:
        summary = (
            f"rejected: {request.key!r} would change {old.key!r} {change}, but the evidence "
            f"is against it: {evidence.detail}; nothing written"
        )
        return _Plan(Outcome("reject", request.key, summary, None, old, None, evidence))
    if found.how == "recall" and (evidence is None or evidence.supports is not True):
        assert found.match is not None  # a recall link without the same text has a match
        plan = _contest(request, old, found.match, evidence, now)
    else:
        plan = _supersede(request, old, change, evidence, now)
    return replace(plan, expect={request.key: at, **plan.expect})


def _confirm(request: Remember, old: MemoryRecord, now: float) -> _Plan:
    meta = {**old.meta, META: {**own_meta(old), "action": "confirm", "confirmed_at": now}}
    kept = replace(
        old,
        tags=normalise_tags([*old.tags, *request.tags]),
        importance=max(old.importance, request.importance),
        updated_at=now,
        meta=meta,
    )
    where = "" if old.key == request.key else f" (already stored under {old.key!r})"
    summary = f"confirmed {old.key!r}: the same fact again{where}"
    return _Plan(Outcome("confirm", old.key, summary, kept, old), (kept,), (), _held(old))


def _contest(
    request: Remember,
    old: MemoryRecord,
    match: SubjectMatch,
    evidence: Evidence | None,
    now: float,
) -> _Plan:
    held = ", ".join(match.old_values) or "another value"
    detail = "no evidence either way" if evidence is None else evidence.detail
    cognition = {
        "action": "contested",
        "contested_with": old.key,
        "incumbent_values": list(match.old_values),
        "evidence": detail,
    }
    record = _record(request, now, cognition)
    marked = replace(old, meta={**old.meta, META: {**own_meta(old), "contested_by": request.key}})
    summary = (
        f"contested: {old.key!r} holds {held}; kept both, {request.key!r} marked contested "
        f"({detail})"
    )
    outcome = Outcome("contested", request.key, summary, record, old, None, evidence)
    return _Plan(outcome, (marked, record), (), _held(old))


def _supersede(
    request: Remember, old: MemoryRecord, change: str, evidence: Evidence | None, now: float
) -> _Plan:
    archived = f"{old.key}@{old.updated_at:.6f}"
    old_own = own_meta(old)
    history = [archived, *strings(old_own.get("history"))][:MAX_HISTORY]
    aliases = strings(old_own.get("aliases"))
    if old.key != request.key:
        aliases = [old.key, *aliases]
    wanted = fold_key(request.key)
    aliases = [a for a in dict.fromkeys([*aliases, *request.aliases]) if fold_key(a) != wanted]
    cognition: dict[str, Any] = {"action": "supersede", "history": history, "aliases": aliases}
    if evidence is not None:
        cognition["evidence"] = evidence.detail
    record = _record(request, now, cognition)
    record = replace(record, importance=max(request.importance, old.importance))
    moved = replace(
        old,
        key=archived,
        archived=True,
        meta={**old.meta, "superseded_by": request.key, "superseded_at": now},
    )
    said = "" if evidence is None else f" (evidence: {evidence.detail})"
    by = "" if old.key == request.key else f" by {request.key!r}"
    summary = f"superseded {old.key!r}{by} {change}{said}"
    outcome = Outcome("supersede", request.key, summary, record, old, archived, evidence)
    # Deleting the keys first makes the new record's created_at the one stored.
    forget = tuple(dict.fromkeys([old.key, request.key]))
    return _Plan(outcome, (moved, record), forget, {**_held(old), archived: None})


def _held(old: MemoryRecord) -> dict[str, float | None]:
    """The expectation that ``old`` is still what its key holds."""
    return {old.key: old.updated_at}


async def _put(store: MemoryStore, request: Remember) -> Outcome:
    """The plain overwrite by key; the key's history (if any) stays linked to it."""
    previous = await store.get(request.key)
    kept = (
        {}
        if previous is None
        else {k: v for k, v in own_meta(previous).items() if k in ("history", "aliases")}
    )
    record = _record(request, store.clock(), {"action": "put", **kept})
    result = await store.write([record])
    _indexes.setdefault(store, SubjectIndex()).absorb(result, None)
    stored = result.stored[0] if result.stored else record
    verb = "replaced" if previous is not None else "remembered"
    return Outcome("put", request.key, f"put: {verb} {request.key!r}", stored, previous)


async def remember_through(
    store: MemoryStore,
    request: Remember,
    gatherer: EvidenceGatherer | None = None,
    mode: Mode = "reconcile",
) -> Outcome:
    """Writes ``request`` into ``store`` after reconciling it (see the module docstring).

    Args:
        store: One tenant's namespace.
        request: The validated write (:meth:`Remember.of`).
        gatherer: Asked on a conflict; None: no evidence is ever available.
        mode: ``"reconcile"`` (the pipeline) or ``"put"`` (the plain overwrite by key).

    Raises:
        ConfigError: A bad ``mode``.
        VersionConflict: Other writers changed the namespace during every attempt.
        StorageError: The backend failed; nothing was written.
    """
    if mode not in MODES:
        raise ConfigError(f"remember: mode must be one of {MODES}, got {mode!r}")
    if mode == "put":
        return await _put(store, request)
    lock = _locks.setdefault(store, asyncio.Lock())
    async with lock:
        for _ in range(MAX_ATTEMPTS):
            version = await store.version()
            outcome = await _decide_and_write(store, request, gatherer, version)
            if outcome is not None:
                return outcome
        # The namespace keeps moving under other writers: settle for the keys written over.
        for _ in range(MAX_ATTEMPTS):
            outcome = await _decide_and_write(store, request, gatherer, None)
            if outcome is not None:
                return outcome
    # A write on a stale decision could delete what another writer just stored: refuse.
    raise VersionConflict(
        f"remember {request.key!r}: other writers changed the memories it would replace "
        f"during each of {2 * MAX_ATTEMPTS} decisions; nothing written; hint: retry the write"
    )


async def remember_fact(
    store: MemoryStore,
    fact: Fact,
    config: CognitionConfig | None = None,
    gatherer: EvidenceGatherer | None = None,
    *,
    tags: Iterable[str] = (),
) -> Outcome:
    """Writes a fact an agent learned through :func:`remember_through`.

    The fact passes :func:`evermind.memory.cognition.refusal` first (a refused one is a
    ``reject`` outcome, nothing written); then it is remembered under
    :func:`~evermind.memory.cognition.fact_key`, tagged ``fact`` (plus ``tags``), with its
    ``source`` and ``subject`` in the meta, and reconciled like any other remember.
    """
    cfg = config or CognitionConfig()
    key = fact_key(fact)
    why = refusal(fact, cfg)
    if why is not None:
        return Outcome("reject", key, f"rejected: {key!r} {why}; nothing written")
    try:
        request = Remember.of(
            key,
            fact.text.strip(),
            tags=(FACT_TAG, *tags),
            importance=cfg.importance,
            meta={"source": fact.source, "subject": fact.subject},
        )
    except ConfigError as exc:
        return Outcome("reject", key, f"rejected: {key!r} {exc}; nothing written")
    return await remember_through(store, request, gatherer)


async def history(store: MemoryStore, key: str) -> list[MemoryRecord]:
    """The superseded versions of ``key``, newest first (archived records, never recalled).

    Follows ``meta.cognition.history`` of the live record (at most :data:`MAX_HISTORY`);
    a key with no live record has no history to show.
    """
    current = await store.get(validate_key(key))
    names: list[str] = []
    if current is not None:
        names = strings(own_meta(current).get("history"))
    found = []
    for name in names[:MAX_HISTORY]:
        record = await store.get(name)
        if record is not None:
            found.append(record)
    return found


async def forget_history(store: MemoryStore, key: str) -> int:
    """Deletes the superseded versions of ``key`` (call it before forgetting ``key``).

    Forgetting a memory forgets what it replaced too: a user who asks to forget a secret
    must not leave its older values in the archive. Returns how many versions went.
    """
    names = [r.key for r in await history(store, key)]
    if not names:
        return 0
    result = await store.write([], names)
    _indexes.setdefault(store, SubjectIndex()).absorb(result, None)
    return len(result.deleted)


__all__ = [
    "CANDIDATES",
    "MAX_ATTEMPTS",
    "META",
    "MODES",
    "Action",
    "Mode",
    "Outcome",
    "Remember",
    "forget_history",
    "history",
    "remember_fact",
    "remember_through",
]
