"""How memory tool results read: compact, capped text a language model can act on.

Owns the text of every tool answer. Recalled content is shown as fenced reference data
(``evermind.memory.fence``: control characters stripped, instruction-like phrases defused),
previews are cut to ``max_chars`` with an ellipsis, and a recall ends with one line saying how
the hits were ranked. Pure functions; standard library and ``evermind`` only.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from evermind.ingest.passages import NO_EVIDENCE, IngestedPassage
from evermind.memory import Hit, MemoryRecord, fence
from evermind.memory.sanitize import inline
from evermind.text import ELLIPSIS, counted, cut

#: The first words of the last line of a recall answer.
RANKED_BY_PREFIX = "ranked by: "


def _tags(tags: Sequence[str]) -> str:
    return ", ".join(inline(tag) for tag in tags) if tags else "-"


def _key(key: str) -> str:
    """A key quoted for a line outside the fence (sanitised, no line breaks, no markers)."""
    return repr(inline(key))


def _standing(meta: Mapping[str, Any]) -> str:
    """`` [contested: …]`` when write-through marked the memory as contested, else ``""``."""
    own = meta.get("cognition")
    if not isinstance(own, Mapping):
        return ""
    if own.get("action") == "contested":
        return f" [contested: {_key(str(own.get('contested_with', '?')))} says otherwise]"
    if own.get("contested_by"):
        return f" [contested by {_key(str(own['contested_by']))}]"
    return ""


def render_recall(
    hits: Sequence[Hit],
    query: str,
    *,
    max_chars: int,
    requested: int,
    cap: int,
    searched: int,
) -> str:
    """The answer of ``memory_recall``: numbered hits, then how they were ranked.

    Args:
        hits: The hits, best first.
        query: The caller's query (echoed, cut to ``max_chars``).
        max_chars: Longest content preview per hit.
        requested: The ``top_k`` the caller asked for.
        cap: The server's maximum; a larger request was capped to it.
        searched: How many live memories the namespace holds.
    """
    capped = f" (top_k capped at {cap})" if requested > cap else ""
    if not hits:
        return (
            f"No memory matches {_key(cut(query, max_chars))} "
            f"({counted(searched, 'memory', 'memories')} searched){capped}.\n"
            f"{RANKED_BY_PREFIX}nothing matched"
        )
    items = [
        f"{hit.key} (score {hit.score:.3f}; tags: {_tags(hit.tags)}){_standing(hit.meta)}\n"
        f"{cut(hit.content, max_chars)}"
        for hit in hits
    ]
    orders = list(dict.fromkeys(hit.ranked_by for hit in hits))
    header = (
        f"{len(hits)} of {counted(searched, 'memory', 'memories')} for "
        f"{_key(cut(query, max_chars))}{capped}. "
        "Previews are cut; call memory_get(key) for a full text."
    )
    return f"{header}\n{fence(items)}\n{RANKED_BY_PREFIX}{' | '.join(orders)}"


def render_passages(
    passages: Sequence[IngestedPassage],
    query: str,
    *,
    max_chars: int,
    requested: int,
    cap: int,
) -> str:
    """The answer of ``docs_search``: the ingested passages, each cited by source, or
    ``no evidence`` when none cleared recall's relevance floor.

    Args:
        passages: The passages, best first (:func:`evermind.ingest.search_ingested`).
        query: The caller's query (echoed, cut to ``max_chars``).
        max_chars: Longest passage text shown.
        requested: The ``top_k`` the caller asked for.
        cap: The server's maximum; a larger request was capped to it.
    """
    capped = f" (top_k capped at {cap})" if requested > cap else ""
    if not passages:
        return f"{NO_EVIDENCE}: no ingested passage matches {_key(cut(query, max_chars))}{capped}."
    items = [
        f"{passage.citation} (score {passage.score:.3f}; key {passage.key})\n"
        f"{cut(passage.text, max_chars)}"
        for passage in passages
    ]
    header = (
        f"{counted(len(passages), 'passage')} from the ingested documents for "
        f"{_key(cut(query, max_chars))}{capped}. Cite a passage by its source; passages are "
        "cut, call memory_get(key) for a full text."
    )
    return f"{header}\n{fence(items, title='ingested passages')}"


def render_record(record: MemoryRecord, now: float | None = None) -> str:
    """The answer of ``memory_get``: the memory's fields and its full (sanitised) text."""
    now = time.time() if now is None else now
    expiry = ""
    if record.expires_at is not None:
        expiry = f"; expires in {max(0.0, record.expires_at - now):.0f} s"
    header = (
        f"memory {_key(record.key)}: tags: {_tags(record.tags)}; "
        f"importance {record.importance:.2f}; "
        f"written {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(record.updated_at))}"
        f"{expiry}"
    )
    return f"{header}\n{fence([record.content], title='memory ' + record.key)}"


def render_tagged(
    records: Sequence[MemoryRecord], tag: str, *, max_chars: int, requested: int, cap: int
) -> str:
    """The answer of ``memory_recall_by_tag``: newest first, previews cut to ``max_chars``."""
    capped = f" (limit capped at {cap})" if requested > cap else ""
    if not records:
        return f"No memory is tagged {_key(tag)}{capped}."
    items = [f"{r.key} (tags: {_tags(r.tags)})\n{cut(r.content, max_chars)}" for r in records]
    header = (
        f"{counted(len(records), 'memory', 'memories')} tagged {_key(tag)}, newest first"
        f"{capped}. "
        "Call memory_get(key) for a full text."
    )
    return f"{header}\n{fence(items, title=f'tag {tag}')}"


def render_history(versions: Sequence[MemoryRecord], key: str, max_chars: int) -> str:
    """The superseded versions ``memory_get(include_history=true)`` appends, newest first."""
    if not versions:
        return f"history of {_key(key)}: no superseded versions"
    items = [
        f"{r.key} (was {_key(str(r.meta.get('superseded_by', key)))}'s value, superseded "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(_when(r)))})\n"
        f"{cut(r.content, max_chars)}"
        for r in versions
    ]
    header = f"history of {_key(key)}: {counted(len(versions), 'superseded version')}, newest first"
    return f"{header}\n{fence(items, title=f'history {key}')}"


def _when(record: MemoryRecord) -> float:
    at = record.meta.get("superseded_at")
    return float(at) if isinstance(at, int | float) else record.updated_at


def render_remembered(record: MemoryRecord, replaced: bool) -> str:
    """The answer of ``memory_remember``."""
    verb = "replaced" if replaced else "remembered"
    expiry = ""
    if record.expires_at is not None:
        expiry = f"; expires in {record.expires_at - record.updated_at:.0f} s"
    return (
        f"{verb} {_key(record.key)} ({counted(len(record.content), 'character')}; "
        f"tags: {_tags(record.tags)}; "
        f"importance {record.importance:.2f}{expiry})"
    )


__all__ = [
    "ELLIPSIS",
    "RANKED_BY_PREFIX",
    "cut",
    "render_history",
    "render_recall",
    "render_record",
    "render_remembered",
    "render_tagged",
]
