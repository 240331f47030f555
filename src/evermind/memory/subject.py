"""What a memory is about: folded subject keys, value tokens and the same-subject rule.

Write-through cognition (:mod:`evermind.memory.write_through`) must tell whether a new memory
restates, corrects or merely sits beside one already stored. This module owns the pure,
deterministic part of that judgement (browser-safe: standard library and ``evermind`` only):

- :func:`fold_key` folds a key to its subject: case, and the separators ``.`` ``-`` ``_`` and
  spaces (``Staging_Port``, ``staging-port`` and ``staging.port`` are one subject). Word
  order is kept: ``port.staging`` is another subject than ``staging.port``.
- :func:`values` picks the *value tokens* of a text by their shape, never by a word list:
  URLs, paths and dotted names (``config/app.yaml``, ``db.example.com``), numbers with
  their dots and colons (ports, versions, times: ``9090``, ``3.11``, ``10:30``), quoted or
  backticked spans, and capitalised words (2+ letters) not starting a sentence (names: ``Neovim``).
- :func:`terms` is what is left: the content words, case-folded (one-letter words dropped).
- :class:`SubjectIndex` maps the folded keys and learned aliases of a store's live memories
  to their keys, so a write finds its subject without folding every key.
- :func:`same_subject` is the bounded rule that links a new memory to an incumbent found by
  recall under *another* key. Both must hold:

  1. the subject words of each key (the folded key's words that are not values) are all
     present on the other side (its text's terms or its key's words), a word matching
     another when equal or, both at least 4 letters, one a prefix of the other
     (``deploy`` ~ ``deploys``);
  2. both texts hold values and the values differ; keys whose own values differ
     (``deploy-1``, ``deploy-2``) are different instances, never one subject.

Limits (documented in docs/mcp.md): an opaque key (``note-7``) names no subject, so such a
memory is linked only by its exact or folded key or a declared alias; the prefix match is
crude (``port`` ~ ``portal``); values are found by shape, so a name written in lower case is
a plain word and a capitalised word that starts a sentence is not a value. A wrong link is
cheap by design: without evidence it only marks the new memory *contested* (both are kept).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evermind.memory.records import MemoryRecord, WriteResult

#: The meta field write-through cognition owns on the records it writes (aliases, history).
META = "cognition"

_KEY_SEPARATORS = re.compile(r"[\s._\-]+")
_URL = re.compile(r"https?://[^\s<>\"'`]+")
_QUOTED = re.compile(r"`([^`\n]{1,120})`|\"([^\"\n]{1,120})\"")
_PATH = re.compile(
    r"(?<![\w/.~-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]*|\b[\w-]{2,}(?:\.[A-Za-z][\w-]*)+\b"
)
_NUMBER = re.compile(r"(?<![\w.])v?\d+(?:[.:]\d+)*(?![\w])")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_CAPITALISED = re.compile(r"[A-Z][\w-]+")  # two letters at least: not the pronoun "I"
_SENTENCE_END = ".!?:;\n"
_MIN_PREFIX = 4


def fold_key(key: str) -> str:
    """The subject a key names: case-folded, ``.``/``-``/``_``/spaces collapsed to one space."""
    return " ".join(w for w in _KEY_SEPARATORS.split(key.casefold()) if w)


def _trim(value: str) -> str:
    return value.rstrip(".,;:!?)]}'\"").casefold()


def _value_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, value)`` of every value token in ``text``, leftmost first."""
    spans: list[tuple[int, int, str]] = []
    taken: list[tuple[int, int]] = []

    def add(start: int, end: int, value: str) -> None:
        if value and not any(a < end and start < b for a, b in taken):
            spans.append((start, end, value))
            taken.append((start, end))

    for match in _URL.finditer(text):
        add(match.start(), match.end(), _trim(match.group()))
    for match in _QUOTED.finditer(text):
        add(match.start(), match.end(), (match.group(1) or match.group(2)).strip().casefold())
    for match in _PATH.finditer(text):
        token = _trim(match.group())
        if "/" in token or not re.fullmatch(r"[\d.]+", token):
            add(match.start(), match.end(), token)
    for match in _NUMBER.finditer(text):
        add(match.start(), match.end(), match.group().casefold())
    for match in _CAPITALISED.finditer(text):
        before = text[: match.start()].rstrip()
        starts_sentence = not before or before[-1] in _SENTENCE_END
        previous = text[match.start() - 1] if match.start() else " "
        if not starts_sentence and not previous.isalnum():
            add(match.start(), match.end(), match.group().casefold())
    return sorted(spans)


def values(text: str) -> frozenset[str]:
    """The value tokens of ``text`` (case-folded): URLs, paths, numbers, quoted spans, names."""
    return frozenset(value for _, _, value in _value_spans(text))


def path_values(text: str) -> list[str]:
    """The path-like values of ``text`` (with a ``/`` or a dotted name), in order, URLs excluded."""
    found = []
    for _, _, value in _value_spans(text):
        if "://" in value or not _PATH.fullmatch(value):
            continue
        found.append(value)
    return list(dict.fromkeys(found))


def terms(text: str) -> frozenset[str]:
    """The content words of ``text`` outside its values, case-folded, two letters or more."""
    pieces = []
    last = 0
    for start, end, _ in _value_spans(text):
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    rest = " ".join(pieces).casefold()
    return frozenset(w for w in _WORD.findall(rest) if len(w) >= 2)


def key_terms(key: str) -> frozenset[str]:
    """The subject words of a key: its folded words that are not values (numbers)."""
    return frozenset(w for w in fold_key(key).split() if not _NUMBER.fullmatch(w))


def key_values(key: str) -> frozenset[str]:
    """The values inside a key (``deploy-2`` holds ``2``)."""
    return frozenset(w for w in fold_key(key).split() if _NUMBER.fullmatch(w))


def _matches(word: str, pool: frozenset[str]) -> bool:
    if word in pool:
        return True
    if len(word) < _MIN_PREFIX:
        return False
    return any(
        len(other) >= _MIN_PREFIX and (other.startswith(word) or word.startswith(other))
        for other in pool
    )


def _covered(words: frozenset[str], pool: frozenset[str]) -> bool:
    return bool(words) and all(_matches(word, pool) for word in words)


@dataclass(frozen=True)
class SubjectMatch:
    """Why a new memory and an incumbent are one subject with a changed value.

    Attributes:
        shared: The subject words both sides hold.
        old_values: Values only the incumbent holds (what was true).
        new_values: Values only the new memory holds (what is claimed now).
    """

    shared: tuple[str, ...]
    old_values: tuple[str, ...]
    new_values: tuple[str, ...]


def same_subject(new_key: str, new_text: str, old_key: str, old_text: str) -> SubjectMatch | None:
    """The match when the new memory is the incumbent's subject with a changed value, else None.

    See the module docstring for the rule and its limits.
    """
    if key_values(new_key) and key_values(old_key) and key_values(new_key) != key_values(old_key):
        return None
    new_subject, old_subject = key_terms(new_key), key_terms(old_key)
    new_side = terms(new_text) | new_subject
    old_side = terms(old_text) | old_subject
    if not (_covered(old_subject, new_side) and _covered(new_subject, old_side)):
        return None
    new_values, old_values = values(new_text), values(old_text)
    if not new_values or not old_values or new_values == old_values:
        return None
    shared = sorted(w for w in old_subject | new_subject if _matches(w, new_side & old_side))
    return SubjectMatch(
        tuple(shared),
        tuple(sorted(old_values - new_values)),
        tuple(sorted(new_values - old_values)),
    )


def own_meta(record: MemoryRecord) -> Mapping[str, Any]:
    """``record.meta[META]`` when it is a mapping, else an empty one."""
    value = record.meta.get(META)
    return value if isinstance(value, Mapping) else {}


def strings(value: Any) -> list[str]:
    """The strings of ``value`` when it is a list (a meta field read back from JSON), else []."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


class SubjectIndex:
    """Folded keys and learned aliases of one store's live memories, each to its keys.

    Rebuilt from the store's snapshot when its version moved under someone else's write;
    kept up to date after our own writes, so a write does not fold every key of the store.
    """

    def __init__(self) -> None:
        self.version: int | None = None
        self.folds: dict[str, set[str]] = {}
        self.aliases: dict[str, set[str]] = {}
        self._entries: dict[str, tuple[str, list[str]]] = {}

    def rebuild(self, records: Iterable[MemoryRecord], version: int) -> None:
        self.folds, self.aliases, self._entries = {}, {}, {}
        for record in records:
            self.add(record)
        self.version = version

    def add(self, record: MemoryRecord) -> None:
        self.remove(record.key)
        if record.archived:
            return
        folded = fold_key(record.key)
        learned = [fold_key(a) for a in strings(own_meta(record).get("aliases"))]
        self.folds.setdefault(folded, set()).add(record.key)
        for alias in learned:
            self.aliases.setdefault(alias, set()).add(record.key)
        self._entries[record.key] = (folded, learned)

    def remove(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        self.folds.get(entry[0], set()).discard(key)
        for alias in entry[1]:
            self.aliases.get(alias, set()).discard(key)

    def absorb(self, result: WriteResult, before: int | None) -> None:
        """Applies our own write, or forgets everything if another writer came in between."""
        if self.version is None or before != self.version or result.version != before + 1:
            self.version = None
            return
        for key in (*result.deleted, *result.evicted):
            self.remove(key)
        for record in result.stored:
            self.add(record)
        self.version = result.version


__all__ = [
    "META",
    "SubjectIndex",
    "SubjectMatch",
    "fold_key",
    "key_terms",
    "key_values",
    "own_meta",
    "path_values",
    "same_subject",
    "strings",
    "terms",
    "values",
]
