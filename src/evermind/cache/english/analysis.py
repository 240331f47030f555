"""One parsed view of a query, shared by all cache guards, and how two views overlap.

This module owns :class:`Analysis` (tokens, quantities, content words, entities,
identifiers of one query; computed once per text and memoised) and the word-level
comparison helpers the guards build on: content-word overlap, synonym canonicalisation
and entity matching.

Browser-safe: standard library only.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

from evermind.cache.english.lexicon import (
    DATE_WORDS,
    DEMONYM_SUFFIXES,
    ENTITY_ALIASES,
    FILLER_WORDS,
    GLUED_UNIT_SUFFIXES,
    HOLIDAYS,
    MONTHS,
    NEGATORS,
    NOT_ENTITIES,
    STOPWORDS,
    SYMBOL_REPLACEMENTS,
    SYNONYM_GROUPS,
    UNITS,
    WEEKDAYS,
)
from evermind.cache.english.quantities import Reading, read_quantities
from evermind.text import Token, stem, tokenize

__all__ = [
    "WEEKDAYS",
    "Analysis",
    "analyze",
    "content_overlap",
    "entity_matched",
    "one_replaced_span",
    "similarity",
]

_DATE_WORDS = (
    frozenset(MONTHS)
    | frozenset(WEEKDAYS)
    | frozenset(w for phrase in HOLIDAYS for w in phrase.split())
    | DATE_WORDS
)
_MATH_OPERATORS = frozenset({"+", "-", "=", "*", "/", "^", "<", ">"})
_CAMEL_HUMP = re.compile(r"[a-z0-9][A-Z]")
_HALF_AFTER_DIGIT = re.compile(r"(\d)\s*½")
_LETTER_IN_PARENS = re.compile(r"(\d)\(([A-Za-z])\)")  # 401(k) -> 401k


def prepare(text: str) -> str:
    """Replaces the Unicode forms the English rules read before tokenising.

    Degrees become unit words so that "200°C" and "200 degrees Celsius" read the same
    (see ``data/symbols.json``); ½ after a digit is a decimal, ¼ and ¾ become words.
    """
    text = _HALF_AFTER_DIGIT.sub(r"\1.5", text).replace("½", " half ")
    text = text.replace("¼", " quarter ").replace("¾", " 0.75 ")
    for old, new in SYMBOL_REPLACEMENTS:
        text = text.replace(old, new)
    return _LETTER_IN_PARENS.sub(r"\1\2", text)


def _canonical_map() -> dict[str, str]:
    mapping: dict[str, str] = {}
    for group in SYNONYM_GROUPS:
        stems = sorted(stem(w) for w in group)
        for word in group:
            mapping[stem(word)] = stems[0]
    return mapping


_CANONICAL = _canonical_map()


def canonical(word: str) -> str:
    """The stem of a folded word, mapped onto its synonym group's representative."""
    stemmed = stem(word)
    return _CANONICAL.get(stemmed, stemmed)


@dataclass(frozen=True)
class Analysis:
    """A query parsed once for every guard.

    Attributes:
        text: The query.
        tokens: Its tokens.
        reading: Quantities, tokens they used, unit words without a number.
        stems: Stems of every word token (folded), in order, with their token indexes.
        content: Canonical content words (no stopwords, fillers or quantities), in order.
        content_index: The token index of each entry of ``content``.
        entities: Token indexes of capitalised names ("Redis", "Aurora", "iOS").
        identifiers: Token indexes of codes and identifiers ("E0382", "TS2339",
            "CrashLoopBackOff", "CERTIFICATE_VERIFY_FAILED", "14A").
        words: Every folded word in the query, for membership tests.
        joined_text: Folded words joined by spaces, for phrase tests.
    """

    text: str
    tokens: tuple[Token, ...]
    reading: Reading
    stems: tuple[tuple[int, str], ...]
    content: tuple[str, ...]
    content_index: tuple[int, ...]
    entities: tuple[int, ...]
    identifiers: tuple[int, ...]
    words: frozenset[str]
    joined_text: str


def _is_identifier(tok: Token) -> bool:
    if tok.kind == "ident":
        return not re.fullmatch(r"v\d+(\.\d+)*", tok.low)  # v2, v3.1 are versions
    if tok.kind == "number":
        return (
            tok.number is not None
            and bool(tok.suffix)
            and tok.low[-1:] != "k"
            and (tok.suffix not in ("st", "nd", "rd", "th") and not _is_unit_suffix(tok))
        )
    if tok.kind != "word":
        return False
    if "_" in tok.text:
        return True
    humps = len(_CAMEL_HUMP.findall(tok.text))
    return humps >= 2 or (tok.text.isupper() and len(tok.text) >= 6)


def _is_unit_suffix(tok: Token) -> bool:
    raw_suffix = tok.text[len(tok.text) - len(tok.suffix) :]
    return raw_suffix in GLUED_UNIT_SUFFIXES or tok.suffix in GLUED_UNIT_SUFFIXES


def _is_entity(tok: Token) -> bool:
    if tok.kind not in ("word", "ident") or not any(ch.isupper() for ch in tok.text):
        return False
    if tok.low in STOPWORDS or tok.low in NOT_ENTITIES or tok.low in _DATE_WORDS:
        return False
    if tok.low in UNITS or stem(tok.low) in UNITS:
        return False
    inner_capital = any(ch.isupper() for ch in tok.text[1:])
    return inner_capital or not tok.sentence_start


@lru_cache(maxsize=8192)
def analyze(text: str) -> Analysis:
    """Parses a query for the guards (memoised: the same text is parsed once).

    Args:
        text: Any query.

    Returns:
        Its :class:`Analysis`.
    """
    tokens = tokenize(prepare(text))
    reading = read_quantities(tokens)
    stems: list[tuple[int, str]] = []
    content: list[str] = []
    content_index: list[int] = []
    for index, tok in enumerate(tokens):
        if tok.kind in ("word", "ident"):
            stems.append((index, stem(tok.low)))
        if index in reading.used:
            continue
        if tok.kind == "symbol":
            if tok.low in _MATH_OPERATORS and _between_terms(tokens, index):
                content.append(f"op{tok.low}")
                content_index.append(index)
            continue
        if tok.kind == "word" and (tok.low in STOPWORDS or tok.low in FILLER_WORDS):
            continue
        if tok.kind == "word" and (tok.low.endswith("n't") or tok.low in NEGATORS):
            continue  # negation is the negation guard's business, not a content word
        content.append(canonical(tok.low) if tok.kind == "word" else tok.low)
        content_index.append(index)
    entities = tuple(i for i, tok in enumerate(tokens) if _is_entity(tok))
    identifiers = tuple(i for i, tok in enumerate(tokens) if _is_identifier(tok))
    folded = [tok.low for tok in tokens if tok.kind != "symbol"]
    return Analysis(
        text=text,
        tokens=tokens,
        reading=reading,
        stems=tuple(stems),
        content=tuple(content),
        content_index=tuple(content_index),
        entities=entities,
        identifiers=identifiers,
        words=frozenset(folded) | frozenset(stem(w) for w in folded),
        joined_text=" " + " ".join(w.replace("-", " ") for w in folded) + " ",
    )


def _between_terms(tokens: tuple[Token, ...], index: int) -> bool:
    """True when a symbol sits between two operands, as in "2x - 5" or "1/x"."""
    if index == 0 or index + 1 >= len(tokens):
        return False
    before, after = tokens[index - 1], tokens[index + 1]
    operand = ("number", "ident", "word")
    return before.kind in operand and after.kind in operand and len(after.low) <= 4


def content_overlap(a: Analysis, b: Analysis) -> float:
    """Shared content words over the larger content set: 1.0 same words, 0.0 none shared."""
    set_a, set_b = set(a.content), set(b.content)
    if not set_a or not set_b:
        return 0.0
    return len(set_a & set_b) / max(len(set_a), len(set_b))


@lru_cache(maxsize=8192)
def one_replaced_span(text_a: str, text_b: str) -> bool:
    """True when the two sentences are word for word the same except for ONE contiguous
    span replaced on both sides ("recovery time after [a root canal]" / "recovery time after
    [wisdom tooth extraction]"): the same question frame about a different thing."""
    words_a = [t.low for t in analyze(text_a).tokens if t.kind in ("word", "ident")]
    words_b = [t.low for t in analyze(text_b).tokens if t.kind in ("word", "ident")]
    matcher = difflib.SequenceMatcher(None, words_a, words_b, autojunk=False)
    changed = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    return len(changed) == 1 and changed[0][0] == "replace"


@lru_cache(maxsize=8192)
def similarity(text_a: str, text_b: str) -> float:
    """How much of one sentence the other keeps, word for word, in order (0..1).

    The ratio of matching words in the longest in-order alignment of the two word
    sequences (stopwords included, punctuation not). A near-miss keeps the sentence and
    changes a word or two (about 0.6 and up); a paraphrase rewrites it (mostly below).
    """
    words_a = [t.low for t in analyze(text_a).tokens if t.kind in ("word", "ident")]
    words_b = [t.low for t in analyze(text_b).tokens if t.kind in ("word", "ident")]
    if not words_a or not words_b:
        return 0.0
    return difflib.SequenceMatcher(None, words_a, words_b, autojunk=False).ratio()


def _demonym_root(word: str) -> str:
    for suffix in DEMONYM_SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def _alias_hit(word: str, other: Analysis) -> bool:
    for group in ENTITY_ALIASES:
        if word in group:
            for alias in group:
                if alias != word and f" {alias.replace('-', ' ')} " in other.joined_text:
                    return True
    return False


def _acronym_of(acronym: str, other: Analysis) -> bool:
    """True when ``acronym`` spells the initials of consecutive words of ``other``."""
    letters = acronym.lower()
    if not 2 <= len(letters) <= 6 or not letters.isalpha():
        return False
    words = [
        tok.low
        for tok in other.tokens
        if tok.kind in ("word", "ident") and tok.low not in STOPWORDS
    ]
    return letters in "".join(w[0] for w in words)


def entity_matched(word: Token, other: Analysis) -> bool:
    """True when the entity ``word`` is named in ``other``, allowing for rewording.

    Accepted: the same word in any case or inflection; one name inside the other
    ("brew"/"Homebrew", "Postgres"/"PostgreSQL"); a country and its adjective
    ("Canada"/"Canadian"); a listed alias ("k8s"/"Kubernetes"); an acronym of consecutive
    words ("LA"/"Los Angeles") or of a longer name's start ("FRA"/"Frankfurt").
    """
    low = word.low
    if low in other.words or stem(low) in other.words:
        return True
    for tok in other.tokens:
        other_low = tok.low
        if tok.kind == "symbol" or len(other_low) < 4 or len(low) < 4:
            continue
        if other_low in low or low in other_low:
            return True
        if _demonym_root(low) == _demonym_root(other_low):
            return True
    if _alias_hit(low, other):
        return True
    if word.text.isupper() and _acronym_of(word.text, other):
        return True
    if word.text.isupper() and len(low) >= 2:
        return any(tok.low.startswith(low) for tok in other.tokens if tok.text[:1].isupper())
    return False


def acronyms_covering(a: Analysis, b: Analysis) -> set[int]:
    """Token indexes of ``a`` spelled out by an all-caps acronym in ``b`` ("Los Angeles"
    when ``b`` says "LA")."""
    covered: set[int] = set()
    word_positions = [
        i
        for i, tok in enumerate(a.tokens)
        if tok.kind in ("word", "ident") and tok.low not in STOPWORDS
    ]
    initials = "".join(a.tokens[i].low[0] for i in word_positions)
    for index in b.entities:
        text = b.tokens[index].text
        if not (text.isupper() and text.isalpha() and 2 <= len(text) <= 6):
            continue
        for i in word_positions:  # "CA" / "California", "FRA" / "Frankfurt"
            if a.tokens[i].text[:1].isupper() and a.tokens[i].low.startswith(text.lower()):
                covered.add(i)
        start = initials.find(text.lower())
        while start >= 0:
            covered.update(word_positions[start : start + len(text)])
            start = initials.find(text.lower(), start + 1)
    return covered
