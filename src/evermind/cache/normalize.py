"""Text normalisation shared by the cache guards: tokens, stems and content words.

This module owns the first step of every guard: turning a query into a tuple of
:class:`Token` (original spelling, folded spelling, kind, sentence position) and the light
stemmer that lets "deleting", "deleted" and "delete" compare equal. It knows nothing of
numbers beyond spotting digits; :mod:`evermind.cache.quantities` reads quantities from the
tokens made here.

Browser-safe: standard library only.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Token", "fold", "stem", "tokenize"]

# Unicode forms turned into plain text before tokenising. Degrees become unit words so that
# "200°C" and "200 degrees Celsius" read the same; ½ after a digit is a decimal.
_REPLACEMENTS: tuple[tuple[str, str], ...] = (
    ("\u2019", "'"),
    ("\u2018", "'"),
    ("\u201c", '"'),
    ("\u201d", '"'),
    ("\u2013", "-"),
    ("\u2014", " - "),
    ("\u2212", "-"),
    ("°C", " degC "),
    ("° C", " degC "),
    ("°F", " degF "),
    ("° F", " degF "),
    ("°", " degree "),
    ("√", " sqrt "),
    ("·", " * "),
    ("×", " * "),
    ("÷", " / "),
)
_HALF_AFTER_DIGIT = re.compile(r"(\d)\s*½")
_LETTER_IN_PARENS = re.compile(r"(\d)\(([A-Za-z])\)")  # 401(k) -> 401k

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
    """One token of a query.

    Attributes:
        text: The spelling in the query ("Postgres", "512Mi", "-").
        low: Lower-cased, accent-stripped spelling ("postgres", "512mi").
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


def fold(text: str) -> str:
    """Lower-cases and strips accents: "Reykjavík" -> "reykjavik"."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _prepare(text: str) -> str:
    text = _HALF_AFTER_DIGIT.sub(r"\1.5", text).replace("½", " half ")
    text = text.replace("¼", " quarter ").replace("¾", " 0.75 ")
    for old, new in _REPLACEMENTS:
        text = text.replace(old, new)
    return _LETTER_IN_PARENS.sub(r"\1\2", text)


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
    """Splits a query into tokens (see :class:`Token`).

    Args:
        text: Any user query.

    Returns:
        The tokens in order. Hyphens between two alphanumeric tokens are not returned as
        symbols; they set ``joined`` on the second token instead.
    """
    prepared = _prepare(text)
    tokens: list[Token] = []
    sentence_start = True
    previous_end = -1
    for match in _TOKEN.finditer(prepared):
        start = match.start()
        gap = prepared[previous_end:start] if previous_end >= 0 else ""
        raw = match.group(0)
        joined = False
        if match.group("sym") is not None:
            # A hyphen glued between two alphanumeric runs joins them instead of being a
            # minus sign ("two-week", "medium-rare"); the next token records that.
            if raw in ("-", ".") and not gap and _glued_next(prepared, match.end()):
                continue
            previous_end = match.end()
            tokens.append(Token(raw, raw, "symbol"))
            if raw in _SENTENCE_END:
                sentence_start = True
            continue
        previous_end = match.end()
        if tokens and gap in ("-", ".") and tokens[-1].kind != "symbol":
            joined = True
        if match.group("ident") is not None:
            tok = Token(raw, fold(raw), "ident", sentence_start, joined)
        elif match.group("num") is not None:
            digits = match.group("num")
            suffix = (match.group("suffix") or "").lower()
            tok = Token(raw, fold(raw), "number", sentence_start, joined, _to_float(digits), suffix)
        else:
            has_digit = any(ch.isdigit() for ch in raw)
            tok = Token(raw, fold(raw), "ident" if has_digit else "word", sentence_start, joined)
        tokens.append(tok)
        sentence_start = False
    return tuple(tokens)


def _glued_next(text: str, index: int) -> bool:
    return index < len(text) and text[index].isalnum() and index >= 2 and text[index - 2].isalnum()


# Words whose last letters look like a suffix but are not one; kept whole by :func:`stem`.
_STEM_EXCEPTIONS = frozenset(
    {
        "bus",
        "gas",
        "yes",
        "this",
        "his",
        "its",
        "was",
        "has",
        "does",
        "is",
        "us",
        "plus",
        "less",
        "news",
        "series",
        "species",
        "always",
        "sometimes",
        "means",
        "ios",
        "macos",
        "atlas",
        "canvas",
        "analysis",
        "basis",
        "axis",
        "thesis",
        "bias",
        "alias",
        "status",
        "virus",
        "campus",
        "census",
        "chaos",
        "kubernetes",
        "postgres",
        "redis",
        "during",
        "morning",
        "evening",
        "spring",
        "string",
        "thing",
        "nothing",
        "something",
        "anything",
        "everything",
        "king",
        "ring",
        "wing",
        "bring",
        "sing",
        "swing",
        "sting",
        "ceiling",
        "red",
        "bed",
        "need",
        "feed",
        "seed",
        "speed",
        "bread",
        "head",
        "thread",
        "shed",
        "hundred",
        "used",
    }
)


@lru_cache(maxsize=16384)
def stem(word: str) -> str:
    """A light English stemmer: strips plural, -ing, -ed and a final -e.

    It is deliberately crude; it only has to make inflections of one word meet
    ("deletes", "deleting", "deleted", "delete" -> "delet") so that guards compare words,
    not spellings. Words in a small exception list are returned unchanged.

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
