"""Shared text primitives: Unicode folding, tokenising, stemming and stop words.

This module owns the few text operations that both lexical memory ranking
(:mod:`evermind.search.bm25`, BM25) and the semantic-cache guards
(:mod:`evermind.cache.english`) build on, so the two cannot drift apart:

- :func:`normalise` (NFKC, case-fold, straight apostrophes) and :func:`fold` (the same,
  accents stripped too);
- :func:`stem`, one light English suffix stripper ("deletes", "deleting", "deleted",
  "delete" -> "delet");
- :func:`terms`, the BM25 index terms of a text: identifiers kept whole *and* split,
  ``"TSR-417 on db-prod-01.tessera.internal"`` gives ``tsr-417, tsr, 417,
  db-prod-01.tessera.internal, db, prod, 01, tessera, internal`` once :data:`STOP_WORDS`
  such as ``on`` are dropped, so an exact code matches exactly and its parts still match
  loosely;
- :func:`counted`, a count with its noun in the right number ("1 memory", "2 memories"),
  and :func:`cut`, a text on one line cut to a length with an ellipsis;
- :func:`tokenize`, typed tokens (:class:`Token`: word, number with a glued suffix,
  identifier, symbol) with sentence starts and hyphen joins, for rules that read numbers
  and names; :func:`token_words` and :func:`token_numbers` give two of their fields without
  building the tokens (the cache's pair verifier reads every new question once).

Leaf module: standard library only, browser-safe.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "ELLIPSIS",
    "STOP_WORDS",
    "Token",
    "counted",
    "cut",
    "fold",
    "normalise",
    "stem",
    "terms",
    "token_numbers",
    "token_words",
    "tokenize",
]

# --------------------------------------------------------------------------- folding


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural unless the count is one: ``counted(1, "item")`` is
    ``"1 item"``, ``counted(3, "memory", "memories")`` ``"3 memories"`` (default plural:
    ``noun + "s"``)."""
    return f"{count} {noun if count == 1 else (plural or noun + 's')}"


ELLIPSIS = "…"
_WHITESPACE = re.compile(r"\s+")


def cut(text: str, max_chars: int) -> str:
    """Returns ``text`` with whitespace runs collapsed, cut to ``max_chars`` with an ellipsis.

    The result is at most ``max_chars`` characters long, the ellipsis included (what the MCP
    tools and the Claude Code hooks show of a memory).
    """
    flat = _WHITESPACE.sub(" ", text).strip()
    if len(flat) <= max_chars:
        return flat
    return flat[: max(0, max_chars - 1)].rstrip() + ELLIPSIS


def normalise(text: str) -> str:
    """NFKC-normalises, case-folds and straightens apostrophes ("Niamh’s" -> "niamh's")."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return text.replace("\u2019", "'").replace("\u2018", "'")


def fold(text: str) -> str:
    """:func:`normalise`, then strips accents: "Reykjavík" -> "reykjavik"."""
    decomposed = unicodedata.normalize("NFKD", normalise(text))
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


# --------------------------------------------------------------------------- stemming

# Words whose last letters look like a suffix but are not one; kept whole by :func:`stem`.
_STEM_EXCEPTION_TEXT = """
    bus gas yes this his its was has does is us plus less news series species always
    sometimes means ios macos atlas canvas analysis basis axis thesis bias alias status virus
    campus census chaos kubernetes postgres redis during morning evening spring string thing
    nothing something anything everything king ring wing bring sing swing sting ceiling red
    bed need feed seed speed bread head thread shed hundred used
"""
_STEM_EXCEPTIONS = frozenset(_STEM_EXCEPTION_TEXT.split())


@lru_cache(maxsize=16384)
def stem(word: str) -> str:
    """A light English stemmer: strips plural, -ing, -ed and a final -e.

    It is deliberately crude; it only has to make inflections of one word meet
    ("deletes", "deleting", "deleted", "delete" -> "delet", "reports" -> "report") so that
    BM25 and the guards compare words, not spellings. Codes and numbers ("v2s", "417"),
    words of three letters or fewer and a small exception list are returned unchanged.

    Args:
        word: A folded (lower-case) word.

    Returns:
        The stem; never empty for a non-empty word.
    """
    if len(word) <= 3 or word in _STEM_EXCEPTIONS or not word.isalpha():
        return word
    if word.endswith("'s"):
        word = word[:-2]
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "shes", "ches", "xes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # running -> run, stopped -> stop
            break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


# --------------------------------------------------------------------------- index terms

# English function words dropped from index terms ("the", "to", "on").
_STOP_WORD_TEXT = """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves s t
"""
STOP_WORDS = frozenset(_STOP_WORD_TEXT.split())
# Alphanumeric runs joined by identifier punctuation: codes (TSR-417), hosts, SKUs, paths.
_COMPOUND = re.compile(r"[^\W_]+(?:[-_./:@#+][^\W_]+)*")
_PART = re.compile(r"[^\W_]+")
_POSSESSIVE = re.compile(r"(?<=\w)'s\b")


def terms(text: str, *, keep_stop_words: bool = False) -> list[str]:
    """Splits text into index terms: whole identifiers plus their stemmed parts.

    Args:
        text: Any text, in any script.
        keep_stop_words: Keep function words ("the", "to") instead of dropping them.

    Returns:
        Terms in order of appearance, with repeats (term frequency matters to BM25).
    """
    norm = _POSSESSIVE.sub("", normalise(text))
    out: list[str] = []
    for match in _COMPOUND.finditer(norm):
        whole = match.group()
        parts = _PART.findall(whole)
        if len(parts) > 1:
            out.append(whole)
        for part in parts:
            if keep_stop_words or part not in STOP_WORDS:
                out.append(stem(part))
    return out


# --------------------------------------------------------------------------- typed tokens

# One alternation, tried left to right at each position:
#   ident  letters-hyphen-digits codes (ORA-00942, INV-20931) and hex (0x80070005)
#   num    digits with thousands separators, decimals or dotted parts, then an optional
#          glued suffix (14A, 512Mi, 2x, 9x13, 5mg, 1st)
#   word   letters, then letters/digits, with internal _ or ' joins (cv2, can't, SNAKE_CASE)
#   sym    a single meaningful symbol; everything else separates tokens
_TOKEN = re.compile(
    r"(?P<ident>[A-Za-z]+-\d+[A-Za-z0-9]*|0x[0-9A-Fa-f]+)"
    r"|(?P<num>\d+(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)*)(?P<suffix>[A-Za-z]+\d*)?"
    r"|(?P<word>[A-Za-z][A-Za-z0-9]*(?:[_'][A-Za-z0-9]+)*)"
    r"|(?P<sym>[$£€¥%+\-*/^=<>#:?.!,;&\"()])"
)
_SENTENCE_END = {".", "?", "!", ":", ";", '"'}


@dataclass(frozen=True)
class Token:
    """One token of a text.

    Attributes:
        text: The spelling in the text ("Postgres", "512Mi", "-").
        low: Folded spelling ("postgres", "512mi").
        kind: "word", "number" (digits, maybe with a glued suffix), "ident" (letters with
            digits or a code like ORA-00942) or "symbol".
        sentence_start: True for the first word of the text or of a sentence in it.
        joined: True when a hyphen glues this token to the previous one ("two-week").
        number: The numeric value of a "number" token without its suffix, else None.
        suffix: The glued letters after the digits of a "number" token ("mi", "x13", "st").
    """

    text: str
    low: str
    kind: str
    sentence_start: bool = False
    joined: bool = False
    number: float | None = None
    suffix: str = ""


def _fold_token(raw: str) -> str:
    """:func:`fold` of one token. For ASCII, most tokens, that is ``lower()`` (NFKC and NFKD
    leave ASCII unchanged, its case folding is lower-casing, and it holds no curly
    apostrophe or combining mark), without two Unicode passes and a per-character scan."""
    return raw.lower() if raw.isascii() else fold(raw)


def _to_float(digits: str) -> float | None:
    cleaned = digits.replace(",", "")
    if cleaned.count(".") > 1:
        return None  # dotted identifiers such as 0.0.0.0 or 3.11.2 are not one number
    try:
        return float(cleaned)
    except ValueError:
        return None


@lru_cache(maxsize=8192)
def tokenize(text: str) -> tuple[Token, ...]:
    """Splits a text into typed tokens (see :class:`Token`).

    Only ASCII letters and digits make words and numbers; callers replace the Unicode
    forms they care about ("°C", "½") before tokenising.

    Args:
        text: Any text.

    Returns:
        The tokens in order. Hyphens between two alphanumeric tokens are not returned as
        symbols; they set ``joined`` on the second token instead.
    """
    tokens: list[Token] = []
    sentence_start = True
    previous_end = -1
    for match in _TOKEN.finditer(text):
        start = match.start()
        gap = text[previous_end:start] if previous_end >= 0 else ""
        raw = match.group(0)
        joined = False
        if match.group("sym") is not None:
            # A hyphen glued between two alphanumeric runs joins them instead of being a
            # minus sign ("two-week", "medium-rare"); the next token records that.
            if raw in ("-", ".") and not gap and _glued_next(text, match.end()):
                continue
            previous_end = match.end()
            tokens.append(Token(raw, raw, "symbol"))
            if raw in _SENTENCE_END:
                sentence_start = True
            continue
        previous_end = match.end()
        if tokens and gap in ("-", ".") and tokens[-1].kind != "symbol":
            joined = True
        kind = _kind(match, raw)
        if kind == "number":
            suffix = (match.group("suffix") or "").lower()
            number = _to_float(match.group("num"))
            tok = Token(raw, _fold_token(raw), kind, sentence_start, joined, number, suffix)
        else:
            tok = Token(raw, _fold_token(raw), kind, sentence_start, joined)
        tokens.append(tok)
        sentence_start = False
    return tuple(tokens)


def _kind(match: re.Match[str], raw: str) -> str:
    """The :attr:`Token.kind` of a match of ``_TOKEN`` that is not a symbol."""
    if match.group("ident") is not None:
        return "ident"
    if match.group("num") is not None:
        return "number"
    if raw.isalpha():  # most words: no character to test for a digit
        return "word"
    return "ident" if any(ch.isdigit() for ch in raw) else "word"


def token_words(text: str) -> list[tuple[str, str]]:
    """``(kind, low)`` of each word, number and identifier token of :func:`tokenize`, in
    order, its symbols left out, without building :class:`Token`\\ s (most of tokenising's
    cost): for callers that read only those two fields of a text seen once.

    Args:
        text: Any text.
    """
    out = []
    for match in _TOKEN.finditer(text):
        if match.group("sym") is None:
            raw = match.group(0)
            out.append((_kind(match, raw), _fold_token(raw)))
    return out


def token_numbers(text: str) -> list[float]:
    """The :attr:`Token.number` of each number token of :func:`tokenize` that has one, in
    order, without building :class:`Token`\\ s.

    Args:
        text: Any text.
    """
    out = []
    for match in _TOKEN.finditer(text):
        digits = match.group("num")
        if digits is not None:
            value = _to_float(digits)
            if value is not None:
                out.append(value)
    return out


def _glued_next(text: str, index: int) -> bool:
    return index < len(text) and text[index].isalnum() and index >= 2 and text[index - 2].isalnum()
