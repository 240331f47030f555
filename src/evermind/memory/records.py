"""Value types of the memory store: stored records, recall hits, recall options, write results.

Owns the plain data that crosses the storage port and the public API, plus the validation of
user-supplied values (keys, tags, importance, TTL). Browser-safe: standard library only.

Time is wall-clock seconds since the Unix epoch (``float``) everywhere in ``evermind.memory``;
TTLs are seconds too.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evermind.errors import ConfigError, check_ranges

#: Longest key accepted; keys are identifiers, not documents.
MAX_KEY_LENGTH = 512
#: Longest recall query accepted: a question, not a document (ranking cost grows with it).
MAX_QUERY_CHARS = 8192
#: Deepest nesting of a JSON value accepted in ``meta`` (and, through the runtime, a cached
#: response): a document deeper than this cannot be read back by every JSON encoder.
MAX_JSON_DEPTH = 32


def content_hash(content: str) -> str:
    """Returns the hex SHA-256 of ``content`` (UTF-8), the vector-cache key for a text."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class MemoryRecord:
    """One stored memory, exactly as the backend keeps it.

    Attributes:
        key: Caller-chosen identifier, unique within a namespace.
        content: The remembered text (what recall ranks).
        tags: Normalised tags (stripped, case-folded, de-duplicated, sorted).
        importance: 0.0 (trivia) … 1.0 (critical); drives eviction and recall weighting.
        created_at: First write of this key, seconds since the epoch.
        updated_at: Latest write of this key, seconds since the epoch.
        expires_at: When the memory stops existing (seconds since the epoch), or None.
        archived: Kept for history only: never returned by recall, recent or recall_by_tag.
        meta: JSON-serialisable extra fields.
    """

    key: str
    content: str
    tags: tuple[str, ...] = ()
    importance: float = 0.5
    created_at: float = 0.0
    updated_at: float = 0.0
    expires_at: float | None = None
    archived: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        """The hex SHA-256 of ``content``."""
        return content_hash(self.content)

    def is_expired(self, now: float) -> bool:
        """Whether the record's TTL has run out at time ``now`` (seconds since the epoch)."""
        return self.expires_at is not None and self.expires_at <= now

    def to_dict(self) -> dict[str, Any]:
        """Returns the JSON-serialisable export form (see ``MemoryStore.export``)."""
        return {
            "key": self.key,
            "content": self.content,
            "tags": list(self.tags),
            "importance": self.importance,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "expires_at": self.expires_at,
            "archived": self.archived,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> MemoryRecord:
        """Builds a record from its export form, validating every field.

        Raises:
            ConfigError: A field is missing or has the wrong type or range.
        """
        if not isinstance(entry, Mapping):
            raise ConfigError(
                f"import: expected a mapping per entry, got {type(entry).__name__}; "
                "hint: pass the list that export() returned"
            )
        for name in ("key", "content"):
            if name not in entry:
                raise ConfigError(
                    f"import: entry is missing {name!r}; got fields {sorted(entry)}; "
                    "hint: every entry needs at least 'key' and 'content'"
                )
        meta = entry.get("meta") or {}
        if not isinstance(meta, Mapping):
            raise ConfigError(f"import: 'meta' must be a mapping, got {type(meta).__name__}")
        meta = validate_meta(meta)
        created = _finite_time(entry.get("created_at", 0.0), "created_at")
        updated = _finite_time(entry.get("updated_at", created), "updated_at")
        expires = entry.get("expires_at")
        return cls(
            key=validate_key(entry["key"]),
            content=validate_content(entry["content"]),
            tags=normalise_tags(entry.get("tags") or ()),
            importance=validate_importance(entry.get("importance", 0.5)),
            created_at=created,
            updated_at=updated,
            expires_at=None if expires is None else _finite_time(expires, "expires_at"),
            archived=bool(entry.get("archived", False)),
            meta=meta,
        )


@dataclass(frozen=True)
class Hit:
    """One recalled memory with its score and how it was ranked.

    Attributes:
        key: The memory's key.
        content: The memory's text.
        tags: The memory's tags.
        score: Final relevance in (0, 1]: fused relevance × importance × recency factors.
        ranked_by: Which ranking steps produced the order, e.g. ``"semantic+lexical; rrf k=60;
            mmr λ=0.70; importance; recency"`` or ``"lexical only: no embedder; …"``.
        importance: The memory's importance.
        updated_at: The memory's latest write, seconds since the epoch.
        signals: The raw per-step numbers (``bm25``, ``cosine``, ``rrf``, ``relevance``,
            ``importance_factor``, ``recency_factor``) for inspection and debugging.
        meta: The memory's extra fields.
    """

    key: str
    content: str
    tags: tuple[str, ...]
    score: float
    ranked_by: str
    importance: float = 0.5
    updated_at: float = 0.0
    signals: Mapping[str, float] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)


#: The ways ``RecallOptions.fusion`` can combine lexical and semantic scores.
FUSIONS = ("convex", "rrf")


@dataclass(frozen=True)
class RecallOptions:
    """Which recall steps run, and their knobs. Every step can be switched off.

    Attributes:
        lexical: Rank by BM25 (k1, b below).
        semantic: Rank by embedding cosine (only when the store has an embedder).
        fusion: How lexical and semantic scores combine when both run: ``"convex"``
            (``(1 − w)·z(bm25) + w·z(cosine)``, each signal z-scored over the query's
            candidates; see ``evermind.memory.recall``) or ``"rrf"`` (reciprocal-rank fusion).
        semantic_weight: w of convex fusion: 0 is lexical order, 1 is semantic order. None
            (the default) measures it: the embedder's trust, how far its cosines between
            stored memories agree with their shared terms, capped at 0.5 so the embedder
            never outweighs lexical evidence; a collapsed embedder gets 0 (lexical order).
        rrf_k: Reciprocal-rank-fusion constant; fused score of a memory is
            ``Σ 1 / (rrf_k + rank)`` over the rankings it appears in (rank from 1).
        mmr: Re-order the fused candidates by maximal marginal relevance for diversity.
        mmr_lambda: MMR trade-off; 1.0 is pure relevance, 0.0 pure diversity.
        importance: Weight relevance by importance.
        importance_weight: Strength w: factor ``1 + w·(2·importance − 1)`` (0.5 is neutral).
        recency: Weight relevance by age since the last write.
        recency_weight: Strength w: factor ``1 − w + w·0.5^(age / half_life_s)``.
        half_life_s: Age at which the recency bonus halves, in seconds.
        candidate_pool: How many candidates each ranker contributes before fusion.
        bm25_k1: BM25 term-frequency saturation.
        bm25_b: BM25 length normalisation.
    """

    lexical: bool = True
    semantic: bool = True
    fusion: str = "convex"
    semantic_weight: float | None = None
    rrf_k: int = 60
    mmr: bool = True
    mmr_lambda: float = 0.7
    importance: bool = True
    importance_weight: float = 0.2
    recency: bool = True
    recency_weight: float = 0.1
    half_life_s: float = 30 * 24 * 3600.0
    candidate_pool: int = 50
    bm25_k1: float = 1.2
    bm25_b: float = 0.75

    def __post_init__(self) -> None:
        if not (self.lexical or self.semantic):
            raise ConfigError(
                "RecallOptions: lexical and semantic are both off; expected at least one ranker; "
                "hint: keep lexical=True for stores without an embedder"
            )
        w = self.semantic_weight
        check_ranges(
            "RecallOptions",
            [
                ("semantic_weight", 0.0 if w is None else w, 0.0, 1.0),
                ("rrf_k", self.rrf_k, 0, math.inf),
                ("mmr_lambda", self.mmr_lambda, 0.0, 1.0),
                ("importance_weight", self.importance_weight, 0.0, 1.0),
                ("recency_weight", self.recency_weight, 0.0, 1.0),
                ("half_life_s", self.half_life_s, 1e-9, math.inf),
                ("candidate_pool", self.candidate_pool, 1, math.inf),
                ("bm25_k1", self.bm25_k1, 0.0, math.inf),
                ("bm25_b", self.bm25_b, 0.0, 1.0),
            ],
        )
        if self.fusion not in FUSIONS:
            raise ConfigError(
                f"RecallOptions: fusion must be one of {list(FUSIONS)}, got {self.fusion!r}"
            )


@dataclass(frozen=True)
class WriteResult:
    """What one backend transaction did.

    Attributes:
        version: The namespace's version counter after the transaction.
        stored: The records as written (``created_at`` kept from an earlier write of the key).
        deleted: Keys that existed and were deleted on request.
        evicted: Keys removed to respect the capacity (or TTL purge), in eviction order.
    """

    version: int
    stored: tuple[MemoryRecord, ...] = ()
    deleted: tuple[str, ...] = ()
    evicted: tuple[str, ...] = ()


def check_text(text: str, what: str) -> str:
    """Returns ``text`` if it is valid Unicode (encodable as UTF-8).

    Raises:
        ConfigError: ``text`` holds a lone surrogate (e.g. a JSON ``"\\ud800"`` escape with no
            partner): it cannot be stored, indexed or sent back.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")  # C speed: a request body's strings are checked on the loop
    except UnicodeEncodeError as err:
        raise ConfigError(
            f"{what}: holds a lone UTF-16 surrogate (U+{ord(text[err.start]):04X}) at character "
            f"{err.start}, which is not valid Unicode; hint: send well-formed UTF-8 text"
        ) from None
    return text


def check_json(value: object, what: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Checks a JSON-like value before it is stored: its depth and every string in it.

    Iterative (a hostile document cannot exhaust the stack). ``what`` names the value in the
    error, with the path to the offending part.

    Raises:
        ConfigError: Nested deeper than ``max_depth``, a key that is not a string, a value that
            is not JSON (e.g. NaN, a set), or a string with a lone surrogate.
    """
    stack: list[tuple[object, str, int]] = [(value, what, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            check_text(item, path)
        elif isinstance(item, bool) or item is None or isinstance(item, int):
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ConfigError(f"{path}: {item} is not a JSON number; hint: use null")
        elif isinstance(item, Mapping | list | tuple):
            if depth >= max_depth:
                where = path if len(path) <= 80 else path[:77] + "..."
                raise ConfigError(
                    f"{what}: nested deeper than {max_depth} levels (at {where}); "
                    "hint: flatten the structure"
                )
            if isinstance(item, Mapping):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise ConfigError(f"{path}: keys must be strings, got {key!r}")
                    check_text(key, f"{path} key")
                    stack.append((child, f"{path}.{key[:40]}", depth + 1))
            else:
                stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))
        else:
            raise ConfigError(f"{path}: {type(item).__name__} is not a JSON value")


def validate_meta(meta: object) -> dict[str, Any]:
    """Returns ``meta`` as a dict if it is a JSON object that can be stored and read back.

    Raises:
        ConfigError: Not a mapping, or :func:`check_json` refuses it.
    """
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise ConfigError(f"meta: expected a JSON object (mapping), got {type(meta).__name__}")
    check_json(meta, "meta")
    return dict(meta)


def validate_key(key: object) -> str:
    """Returns ``key`` if it is a usable memory key.

    Raises:
        ConfigError: The key is not a non-empty string of at most ``MAX_KEY_LENGTH`` characters.
    """
    if not isinstance(key, str) or not key.strip():
        raise ConfigError(
            f"memory key: expected a non-empty string, got {key!r}; "
            "hint: use a stable identifier such as 'pref-editor'"
        )
    if len(key) > MAX_KEY_LENGTH:
        raise ConfigError(
            f"memory key: expected at most {MAX_KEY_LENGTH} characters, got {len(key)}; "
            "hint: keys identify memories, put the text in content"
        )
    return check_text(key, "memory key")


def validate_content(content: object) -> str:
    """Returns ``content`` if it is a string.

    Raises:
        ConfigError: ``content`` is not a string.
    """
    if not isinstance(content, str):
        raise ConfigError(
            f"memory content: expected str, got {type(content).__name__}; "
            "hint: serialise structured data (e.g. json.dumps) before remembering it"
        )
    return check_text(content, "memory content")


def validate_memory_text(content: object, max_chars: int | None) -> str:
    """Returns ``content`` if a memory tool may store it as a memory's text.

    The one check of the text a user or a model hands to a memory tool (``memory_remember``
    and ``memory_restore`` alike): valid Unicode (:func:`validate_content`), not blank, at most
    ``max_chars`` characters (the caller's cap, e.g. ``evermind mcp``'s
    ``max_content_chars``; None: no cap), no NUL character (binary data, a C string's end).

    Raises:
        ConfigError: Naming what was wrong.
    """
    text = validate_content(content)
    if not text.strip():
        raise ConfigError(
            "memory content: empty (or only whitespace); expected the text to remember"
        )
    if max_chars is not None and len(text) > max_chars:
        raise ConfigError(
            f"memory content: has {len(text)} characters, expected at most {max_chars}; "
            "hint: split it into several self-contained memories"
        )
    nul = text.find("\x00")
    if nul >= 0:
        raise ConfigError(
            f"memory content: holds a NUL character at character {nul}; hint: a memory is "
            "text, remove the NUL (binary data does not belong in memory)"
        )
    return text


def validate_importance(importance: object) -> float:
    """Returns ``importance`` as a float in [0, 1].

    Raises:
        ConfigError: Not a number or outside [0, 1].
    """
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise ConfigError(f"importance: expected a number in [0, 1], got {importance!r}")
    value = float(importance)
    if not 0.0 <= value <= 1.0:
        raise ConfigError(
            f"importance: expected a number in [0, 1], got {value}; "
            "hint: 0.5 is the neutral default"
        )
    return value


def validate_ttl(ttl: object) -> float | None:
    """Returns a TTL in seconds (or None for 'never expires').

    Raises:
        ConfigError: Not a positive finite number of seconds.
    """
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise ConfigError(f"ttl: expected seconds as a positive number or None, got {ttl!r}")
    if ttl <= 0:
        raise ConfigError(
            f"ttl: expected a positive number of seconds, got {ttl}; "
            "hint: use forget(key) to delete a memory now"
        )
    return float(ttl)


def normalise_tags(tags: Iterable[object] | str) -> tuple[str, ...]:
    """Returns tags stripped, case-folded, de-duplicated and sorted.

    Raises:
        ConfigError: ``tags`` is a bare string, or holds a non-string or empty tag.
    """
    if isinstance(tags, str):
        raise ConfigError(
            f"tags: expected a sequence of strings, got the string {tags!r}; "
            f"hint: pass ({tags!r},) or [{tags!r}]"
        )
    out: set[str] = set()
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip():
            raise ConfigError(f"tags: expected non-empty strings, got {tag!r}")
        out.add(check_text(tag, "tag").strip().casefold())
    return tuple(sorted(out))


def _finite_time(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"import: {name} must be seconds since the epoch, got {value!r}")
    return float(value)
