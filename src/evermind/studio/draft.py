"""The Studio's draft: the corpus and tokenizer saved before any training run (browser-safe).

A training run stores its corpus and tokenizer with its first checkpoint; before that, the
work a newcomer has done (files read, a tokenizer trained: tens of seconds) lives only in
the worker. The session writes a draft record after every change to either, in one put,
and a reload restores it whole or not at all: :func:`parse_draft` checks the record's
version, every field's type, the corpus's digest and the tokenizer's JSON, and raises
:class:`DraftError` with the reason on the first problem; the caller then drops the record
and says so.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from evermind.errors import EvermindError
from evermind.tokenizer import Tokenizer

#: The storage key of the draft in the ``session`` store.
DRAFT_KEY = "draft"
DRAFT_VERSION = 1


class DraftError(EvermindError):
    """A stored draft is of another version, partial or corrupt (the message says which)."""


@dataclass(frozen=True)
class Draft:
    """A restored draft: sources by name (text, description), tokenizer and its settings."""

    sources: dict[str, tuple[str, str]]
    tokenizer: Tokenizer | None
    vocab_requested: int | None
    held_out_fraction: float
    saved_at: float


def corpus_digest(sources: dict[str, tuple[str, str]]) -> str:
    """sha256 over every source's name, text and description, in order."""
    h = hashlib.sha256()
    for name, (text, description) in sources.items():
        for part in (name, text, description):
            data = part.encode("utf-8")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    return h.hexdigest()


def draft_record(
    sources: dict[str, tuple[str, str]],
    tokenizer: Tokenizer | None,
    vocab_requested: int | None,
    held_out_fraction: float,
) -> dict[str, Any]:
    """The record :func:`parse_draft` reads back (plain dicts, lists and strings)."""
    return {
        "version": DRAFT_VERSION,
        "sources": [[n, t, d] for n, (t, d) in sources.items()],
        "digest": corpus_digest(sources),
        "tokenizer": tokenizer.to_json() if tokenizer is not None else None,
        "vocab_requested": vocab_requested,
        "held_out_fraction": held_out_fraction,
        "saved_at": time.time(),
    }


def parse_draft(value: Any) -> Draft:
    """Checks a stored draft record and rebuilds it.

    Raises:
        DraftError: the record is not a dict of this version, a field is missing or of the
            wrong type, the corpus does not match its digest (a partial write), or the
            tokenizer's JSON does not load.
    """
    if not isinstance(value, dict):
        raise DraftError(f"expected a record, found {type(value).__name__}")
    if value.get("version") != DRAFT_VERSION:
        raise DraftError(f"version {value.get('version')!r}, this Studio reads {DRAFT_VERSION}")
    rows = value.get("sources")
    if not isinstance(rows, list) or not all(
        isinstance(r, list) and len(r) == 3 and all(isinstance(x, str) for x in r) for r in rows
    ):
        raise DraftError("its sources are not a list of (name, text, description)")
    sources = {n: (t, d) for n, t, d in rows}
    if value.get("digest") != corpus_digest(sources):
        raise DraftError("its corpus does not match its digest (a partial or damaged write)")
    fraction = value.get("held_out_fraction")
    saved_at = value.get("saved_at")
    if not isinstance(fraction, (int, float)) or not 0.0 < fraction < 1.0:
        raise DraftError(f"held-out fraction {fraction!r} is not between 0 and 1")
    if not isinstance(saved_at, (int, float)):
        raise DraftError("it has no save time")
    requested = value.get("vocab_requested")
    if requested is not None and not isinstance(requested, int):
        raise DraftError(f"requested vocabulary {requested!r} is not a number")
    tokenizer = None
    if value.get("tokenizer") is not None:
        if not sources:
            raise DraftError("it has a tokenizer but no corpus")
        try:
            tokenizer = Tokenizer.from_json(str(value["tokenizer"]))
        except Exception as err:  # any parse failure means a damaged record
            raise DraftError(f"its tokenizer does not load ({err})") from err
    return Draft(sources, tokenizer, requested, float(fraction), float(saved_at))


def describe_draft(draft: Draft) -> str:
    """What a restored draft brought back, in words for the page's notice."""
    size = sum(len(t.encode("utf-8")) for t, _ in draft.sources.values())
    n = len(draft.sources)
    words = f"the corpus ({n} source{'s' if n != 1 else ''}, {size:,} bytes)"
    if draft.tokenizer is not None:
        words += f" and the tokenizer ({draft.tokenizer.vocab_size:,} tokens)"
    return f"Restored from this browser's storage: {words}."
