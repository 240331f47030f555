"""Facts an agent learns: their type, their key and the gate they pass first (browser-safe).

An agent that learns facts from a conversation (:class:`~evermind.agent.ssm_agent.SSMAgent`)
states each as a :class:`Fact`. Before one reaches memory, :func:`refusal` turns away what
is no fact: empty, longer than ``max_chars``, reading like an instruction (the patterns of
:func:`evermind.memory.sanitize.sanitize`: "ignore previous instructions", role markers,
template tokens — memory is data, never a channel for instructions) or holding control or
invisible characters. What passes is written by
:func:`evermind.memory.write_through.remember_fact`, through write-through cognition (the one
pipeline of every remember: augment, confirm, supersede with history, contested, reject).

A fact's key is ``fact:<subject slug>`` when it has a subject, else ``fact:<hash of the
normalised text>``. Normalising case-folds, collapses whitespace and drops trailing
punctuation. Deterministic and pure: nothing here reads or writes a store.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from evermind.memory.sanitize import sanitize

#: The tag every fact an agent writes carries.
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
class CognitionConfig:
    """Knobs of the fact gate and of the records facts become.

    Attributes:
        min_chars: Shorter (after stripping) is refused as empty.
        max_chars: Longer is refused: a fact is a sentence, not a document.
        importance: Importance of a fact written (a confirm or supersede keeps the
            higher of this and the incumbent's).
    """

    min_chars: int = 3
    max_chars: int = 400
    importance: float = 0.6


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


def refusal(fact: Fact, config: CognitionConfig | None = None) -> str | None:
    """Why ``fact`` must not be written (one line), or None when it may be."""
    cfg = config or CognitionConfig()
    text = fact.text.strip()
    if len(text) < cfg.min_chars:
        return f"empty: {len(text)} characters (minimum {cfg.min_chars})"
    if len(text) > cfg.max_chars:
        return f"too long: {len(text)} characters (maximum {cfg.max_chars})"
    report = sanitize(text)
    if report.defused:
        kinds = ", ".join(dict.fromkeys(report.defused))
        return f"looks like an instruction, not a fact ({kinds})"
    if report.removed_chars:
        return f"holds {report.removed_chars} control or invisible characters"
    return None


__all__ = ["FACT_TAG", "CognitionConfig", "Fact", "fact_key", "normalise", "refusal"]
