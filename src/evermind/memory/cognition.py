"""Writing a new fact back into memory: augment, confirm, supersede or reject (browser-safe).

An agent that learns facts from a conversation must not pile every statement into the store.
:func:`decide` compares one :class:`Fact` with what the store already holds and returns one
:class:`Decision`, each with its reason:

- **reject**: the fact is empty, longer than ``max_chars``, reads like an instruction (the
  patterns of :func:`evermind.memory.sanitize.sanitize`: "ignore previous instructions",
  role markers, template tokens) — memory is data, never a channel for instructions — or
  its text is already stored under another key (a duplicate);
- **confirm**: the same fact again (same key, same normalised text): the record's
  importance rises by ``confirm_boost`` and its ``updated_at`` moves to now;
- **supersede**: the same subject with a changed value ("my editor is Helix" after "my
  editor is Neovim"): the new text replaces the record under its key and the old one is
  kept, archived, under ``<key>@<old updated_at>`` (archived records are never recalled but
  stay in ``export(include_archived=True)``);
- **augment**: a new fact, stored under its key.

A fact's key is ``fact:<subject slug>`` when it has a subject, else ``fact:<hash of the
normalised text>`` — so only facts with a subject can supersede. Normalising case-folds,
collapses whitespace and drops trailing punctuation. :func:`write_back` runs the decision
against a :class:`~evermind.memory.store.MemoryStore` and applies it in one transaction.
Deterministic: the same store and fact give the same decision.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from evermind.memory.records import MemoryRecord
from evermind.memory.sanitize import sanitize
from evermind.memory.store import MemoryStore

Action = Literal["augment", "confirm", "supersede", "reject"]

#: The tag every fact written back carries.
FACT_TAG = "fact"


@dataclass(frozen=True)
class Fact:
    """A statement to remember.

    Attributes:
        text: The statement as it will be stored (``"The user's editor is Neovim"``).
        subject: What it is about (``"editor"``); a later fact with the same subject and
            another text supersedes this one. None: a free-standing note.
        source: Who stated it (``"user"``, ``"model"``), kept in the record's meta.
    """

    text: str
    subject: str | None = None
    source: str = "user"


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` chose for one fact, and why.

    Attributes:
        action: ``augment``, ``confirm``, ``supersede`` or ``reject``.
        reason: One line a person can read.
        key: The key written (None on a reject, except a duplicate: the key that holds it).
        previous: The stored record confirmed or superseded (None otherwise).
        archived_key: Where a superseded record was archived.
    """

    action: Action
    reason: str
    key: str | None = None
    previous: MemoryRecord | None = None
    archived_key: str | None = None


@dataclass(frozen=True)
class CognitionConfig:
    """Knobs of the write-back decision.

    Attributes:
        min_chars: Shorter (after stripping) is rejected as empty.
        max_chars: Longer is rejected: a fact is a sentence, not a document.
        importance: Importance of a new fact.
        confirm_boost: Added to the importance on a confirm (capped at 1.0).
    """

    min_chars: int = 3
    max_chars: int = 400
    importance: float = 0.6
    confirm_boost: float = 0.1


_SPACE = re.compile(r"\s+")
_TRAILING = re.compile(r"[\s.!?;,:]+$")
_SLUG = re.compile(r"[^a-z0-9]+")


def normalise(text: str) -> str:
    """Case-folded, whitespace collapsed, trailing punctuation dropped."""
    return _TRAILING.sub("", _SPACE.sub(" ", text).strip()).casefold()


def fact_key(fact: Fact) -> str:
    """``fact:<subject slug>``, or ``fact:<16 hex of the normalised text's SHA-256>``."""
    if fact.subject and _SLUG.sub("-", fact.subject.casefold()).strip("-"):
        return "fact:" + _SLUG.sub("-", fact.subject.casefold()).strip("-")[:120]
    digest = hashlib.sha256(normalise(fact.text).encode()).hexdigest()[:16]
    return f"fact:{digest}"


def decide(
    fact: Fact,
    current: MemoryRecord | None,
    similar: Iterable[MemoryRecord] = (),
    config: CognitionConfig | None = None,
) -> Decision:
    """The write-back decision for ``fact`` (pure: nothing is written).

    Args:
        fact: The new statement.
        current: The live record stored under ``fact_key(fact)``, or None.
        similar: Other live records whose text may equal the fact's (duplicate check).
        config: Thresholds (defaults: :class:`CognitionConfig`).
    """
    cfg = config or CognitionConfig()
    text = fact.text.strip()
    if len(text) < cfg.min_chars:
        return Decision("reject", f"empty: {len(text)} characters (minimum {cfg.min_chars})")
    if len(text) > cfg.max_chars:
        return Decision("reject", f"too long: {len(text)} characters (maximum {cfg.max_chars})")
    report = sanitize(text)
    if report.defused:
        kinds = ", ".join(dict.fromkeys(report.defused))
        return Decision("reject", f"looks like an instruction, not a fact ({kinds})")
    if report.removed_chars:
        return Decision("reject", f"holds {report.removed_chars} control or invisible characters")
    key = fact_key(fact)
    wanted = normalise(text)
    if current is not None and not current.archived:
        if normalise(current.content) == wanted:
            return Decision("confirm", "the same fact again", key, previous=current)
        archived = f"{key}@{current.updated_at:.6f}"
        return Decision(
            "supersede",
            f"same subject {fact.subject!r}, changed value (was {current.content!r})",
            key,
            previous=current,
            archived_key=archived,
        )
    for record in similar:
        if record.key != key and not record.archived and normalise(record.content) == wanted:
            return Decision("reject", f"duplicate of memory {record.key!r}", record.key)
    return Decision("augment", "a new fact", key)


async def write_back(
    store: MemoryStore,
    fact: Fact,
    config: CognitionConfig | None = None,
    *,
    tags: Iterable[str] = (),
    now: float | None = None,
) -> Decision:
    """Decides on ``fact`` against ``store`` and applies the decision (one transaction).

    The duplicate check looks at the top recall hits for the fact's text (a stored copy
    ranks first lexically), not at the whole store.
    """
    cfg = config or CognitionConfig()
    when = store.clock() if now is None else now
    key = fact_key(fact)
    current = await store.get(key)
    similar: list[MemoryRecord] = []
    text = fact.text.strip()
    if cfg.min_chars <= len(text) <= cfg.max_chars:
        for hit in await store.recall(text, top_k=3):
            record = await store.get(hit.key)
            if record is not None:
                similar.append(record)
    decision = decide(fact, current, similar, cfg)
    all_tags = (FACT_TAG, *tags)
    meta = {"source": fact.source, "subject": fact.subject, "cognition": decision.action}
    if decision.action == "augment":
        record = MemoryRecord(
            key=key,
            content=text,
            tags=_tags(all_tags),
            importance=cfg.importance,
            created_at=when,
            updated_at=when,
            meta=meta,
        )
        await store.write([record])
    elif decision.action == "confirm" and decision.previous is not None:
        previous = decision.previous
        importance = min(1.0, previous.importance + cfg.confirm_boost)
        await store.write([replace(previous, importance=importance, updated_at=when)])
    elif decision.action == "supersede" and decision.previous is not None:
        previous = decision.previous
        assert decision.archived_key is not None
        old = replace(
            previous,
            key=decision.archived_key,
            archived=True,
            meta={**previous.meta, "superseded_by": key, "superseded_at": when},
        )
        new = MemoryRecord(
            key=key,
            content=text,
            tags=_tags(all_tags),
            importance=max(cfg.importance, previous.importance),
            created_at=when,
            updated_at=when,
            meta={**meta, "supersedes": decision.archived_key},
        )
        # Deleting the key first makes the new record's created_at the one stored.
        await store.write([old, new], forget=[key])
    return decision


def _tags(tags: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({t.strip().casefold() for t in tags if t.strip()}))


__all__ = [
    "FACT_TAG",
    "Action",
    "CognitionConfig",
    "Decision",
    "Fact",
    "decide",
    "fact_key",
    "normalise",
    "write_back",
]
