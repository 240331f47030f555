"""Quantities read from query tokens: numbers, number words, units, dates and times.

This module owns number normalisation for the cache guards, so that honest rewordings of a
quantity compare equal: "ninety" = 90, "forty-eight thousand pounds" = "£48,000",
"ten percent" = "10%", "an hour and a half" = "90 minutes", "four times an hour" =
"every 15 minutes", "two-week" = "14-day", "December 25" = "Christmas Day",
"11 pm" = "23:00". Each quantity is converted to the base unit of its dimension (seconds,
metres, grams, millilitres, bytes, ...) so values in different units can be compared.

Browser-safe: standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evermind.cache.english.lexicon import (
    AMBIGUOUS_BARE,
    AMBIGUOUS_UNITS,
    CURRENCY_SYMBOLS,
    FRACTION_WORDS,
    GLUED_UNIT_SUFFIXES,
    HOLIDAYS,
    MONTHS,
    NUMBER_MULTIPLIERS,
    NUMBER_WORDS,
    ORDINAL_WORDS,
    TENS_WORDS,
    UNITS,
)
from evermind.text import Token

__all__ = ["Quantity", "Reading", "read_quantities"]


@dataclass(frozen=True)
class Quantity:
    """One number in a query, with its unit when it has one.

    Attributes:
        raw: The number as written ("48,000" -> 48000.0, "forty-eight" -> 48.0).
        value: ``raw`` converted to the base unit of ``dimension`` (equal to ``raw`` when
            there is no unit).
        dimension: "time", "length", "mass", "volume", "data", "temperature", "angle",
            "percent", "money:usd", ..., "date" (month * 100 + day), "clock" (minutes after
            midnight), or None for a bare number.
        unit: The canonical unit name, or None.
    """

    raw: float
    value: float
    dimension: str | None = None
    unit: str | None = None

    def matches(self, other: Quantity) -> bool:
        """True when the two quantities can name the same amount.

        A bare number matches any quantity with the same written number ("port 8443" and
        "8443"); two quantities with units must agree in dimension and value; an ambiguous
        unit ("pounds", "degrees") matches any of its readings.
        """
        if self.dimension is None or other.dimension is None:
            return _close(self.raw, other.raw) or _close(self.value, other.value)
        if self.dimension == other.dimension:
            return _close(self.value, other.value)
        for one, two in ((self, other), (other, self)):
            readings = AMBIGUOUS_UNITS.get(one.unit or "", ())
            if two.dimension in readings and _close(one.raw, two.raw):
                return True
        return False


@dataclass(frozen=True)
class Reading:
    """Everything :func:`read_quantities` found in one token sequence.

    Attributes:
        quantities: The quantities in order of appearance.
        used: Indexes of the tokens that were read as part of a quantity.
        bare_units: (dimension, unit) of unit words that carry no number ("in metres").
    """

    quantities: tuple[Quantity, ...]
    used: frozenset[int]
    bare_units: frozenset[tuple[str, str]]


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def _word_number(tokens: tuple[Token, ...], i: int) -> tuple[float, int] | None:
    """Parses a run of number words starting at ``i``: "forty-eight thousand", "a hundred",
    "six and a half", "twice". Returns (value, index after the run) or None."""
    n = len(tokens)
    total, current, j, seen = 0.0, 0.0, i, False
    last_was_unit = False  # "one six" is two numbers, "forty-eight" one
    while j < n:
        low = tokens[j].low
        if last_was_unit and (low in NUMBER_WORDS or low in TENS_WORDS):
            break
        if low in ("a", "an") and j + 1 < n and tokens[j + 1].low in NUMBER_MULTIPLIERS:
            current, j, seen = max(current, 1.0), j + 1, True
            continue
        last_was_unit = low in NUMBER_WORDS
        if low in NUMBER_WORDS:
            current += NUMBER_WORDS[low]
        elif low in TENS_WORDS:
            current += TENS_WORDS[low]
        elif low in NUMBER_MULTIPLIERS and seen:
            scale = NUMBER_MULTIPLIERS[low]
            if scale >= 1000:
                total, current = total + max(current, 1.0) * scale, 0.0
            else:
                current = max(current, 1.0) * scale
        elif low == "and" and seen and _and_a_half(tokens, j) is not None:
            current += _and_a_half(tokens, j) or 0.0
            j += 3
            break
        else:
            break
        seen, j = True, j + 1
    if not seen:
        return None
    return total + current, j


def _and_a_half(tokens: tuple[Token, ...], j: int) -> float | None:
    """Value of "and a half" / "and a quarter" starting at ``j`` ("and"), else None."""
    if j + 2 < len(tokens) and tokens[j].low == "and" and tokens[j + 1].low in ("a", "an"):
        return FRACTION_WORDS.get(tokens[j + 2].low)
    return None


def _digits_number(tok: Token) -> tuple[float, str | None] | None:
    """Value of a digit token and the unit its glued suffix names, if any."""
    if tok.number is None:
        return None
    suffix = tok.suffix
    if not suffix:
        return tok.number, None
    if suffix in ("st", "nd", "rd", "th"):
        return tok.number, None
    if suffix == "k":
        return tok.number * 1000, None
    unit = GLUED_UNIT_SUFFIXES.get(
        tok.text[len(tok.text) - len(suffix) :]
    ) or GLUED_UNIT_SUFFIXES.get(suffix)
    if unit is None:
        return None  # 14A, 2FA, 2x: an identifier, read by the identifier guard instead
    return tok.number, unit


def _unit_at(tokens: tuple[Token, ...], j: int) -> tuple[str, int] | None:
    """The unit named at ``j`` (one or two words) and the index after it, else None."""
    if j >= len(tokens):
        return None
    low = tokens[j].low
    if j + 1 < len(tokens):
        pair = f"{low} {tokens[j + 1].low}"
        if pair in UNITS:
            return pair, j + 2
    if low in ("degree", "degrees") and j + 1 < len(tokens):
        follower = tokens[j + 1].low
        if follower in ("celsius", "c", "centigrade"):
            return "degc", j + 2
        if follower in ("fahrenheit", "f"):
            return "degf", j + 2
    if low in UNITS:
        return low, j + 1
    if low == "%":
        return "%", j + 1
    return None


def _make(raw: float, unit: str | None) -> Quantity:
    if unit is None:
        return Quantity(raw, raw)
    dimension, factor, offset = UNITS[unit]
    return Quantity(raw, raw * factor + offset, dimension, unit)


def _number_at(tokens: tuple[Token, ...], i: int) -> tuple[float, str | None, int] | None:
    """A number (digits or words) at ``i``: (value, glued unit, index after)."""
    tok = tokens[i]
    if tok.kind == "number":
        parsed = _digits_number(tok)
        if parsed is None:
            return None
        value, unit = parsed
        j = i + 1
        if j < len(tokens) and tokens[j].low in NUMBER_MULTIPLIERS and unit is None:
            value, j = value * NUMBER_MULTIPLIERS[tokens[j].low], j + 1
        half = _and_a_half(tokens, j)
        if half is not None:
            value, j = value + half, j + 3
        return value, unit, j
    if tok.kind != "word":
        return None
    if tok.low in ORDINAL_WORDS and not (i > 0 and tokens[i - 1].kind == "number"):
        return ORDINAL_WORDS[tok.low], None, i + 1
    parsed_words = _word_number(tokens, i)
    if parsed_words is None:
        return None
    return parsed_words[0], None, parsed_words[1]


def _fraction(tokens: tuple[Token, ...], i: int, j: int) -> tuple[float, str | None, int] | None:
    """Reads "1/4 cup" (a small fraction followed by a unit) as 0.25 cup."""
    if j + 1 >= len(tokens) or tokens[j].low != "/" or tokens[i].kind != "number":
        return None
    numerator, denominator = tokens[i].number, tokens[j + 1].number
    if numerator is None or not denominator or tokens[i].suffix or tokens[j + 1].suffix:
        return None
    unit = _unit_at(tokens, j + 2)
    if unit is None or denominator > 16:
        return None
    return numerator / denominator, unit[0], unit[1]


def _clock(tokens: tuple[Token, ...], i: int, value: float, j: int) -> tuple[Quantity, int] | None:
    """Reads "6:30 am", "23:00", "9 pm", "9 in the morning" as minutes after midnight."""
    hours, minutes, k = value, 0.0, j
    colon = k + 1 < len(tokens) and tokens[k].low == ":" and tokens[k + 1].number is not None
    if colon:
        minutes, k = tokens[k + 1].number or 0.0, k + 2
    meridiem = tokens[k].low if k < len(tokens) and tokens[k].low in ("am", "pm") else ""
    if meridiem:
        k += 1
    elif k + 2 < len(tokens) and tokens[k].low == "in" and tokens[k + 1].low == "the":
        part = tokens[k + 2].low
        meridiem = {"morning": "am", "afternoon": "pm", "evening": "pm"}.get(part, "")
        k = k + 3 if meridiem else k
    if not colon and not meridiem:
        return None
    if not 0 <= hours <= 24 or not 0 <= minutes < 60:
        return None
    if meridiem == "pm" and hours < 12:
        hours += 12
    if meridiem == "am" and hours == 12:
        hours = 0
    return Quantity(value, hours * 60 + minutes, "clock", None), k


def _date(tokens: tuple[Token, ...], i: int) -> tuple[Quantity, int] | None:
    """Reads "December 24", "24 December", "24th of Dec", "Christmas Eve" as a date."""
    n = len(tokens)
    for length in (3, 2, 1):
        phrase = " ".join(t.low for t in tokens[i : i + length])
        if i + length <= n and phrase in HOLIDAYS:
            month, day_of_month = HOLIDAYS[phrase]
            return Quantity(day_of_month, month * 100 + day_of_month, "date", None), i + length
    low = tokens[i].low
    if low in MONTHS and i + 1 < n:
        following = tokens[i + 1].number
        if (
            following is not None
            and 1 <= following <= 31
            and tokens[i + 1].suffix in ("", "st", "nd", "rd", "th")
        ):
            return Quantity(following, MONTHS[low] * 100 + following, "date", None), i + 2
    day = tokens[i].number
    if day is not None and 1 <= day <= 31 and tokens[i].suffix in ("", "st", "nd", "rd", "th"):
        k = i + 2 if i + 1 < n and tokens[i + 1].low == "of" else i + 1
        if k < n and tokens[k].low in MONTHS:
            return Quantity(day, MONTHS[tokens[k].low] * 100 + day, "date", None), k + 1
    return None


def _rate(tokens: tuple[Token, ...], j: int, count: float) -> tuple[Quantity, int] | None:
    """Reads "<count> times a/an/per <time unit>" (and "twice a day") as a period."""
    k = j
    if k < len(tokens) and tokens[k].low in ("time", "times"):
        k += 1
    if k + 1 < len(tokens) and tokens[k].low in ("a", "an", "per", "every", "each") and count > 0:
        unit = _unit_at(tokens, k + 1)
        if unit is not None and UNITS[unit[0]][0] == "time":
            period = _make(1.0, unit[0])
            return Quantity(count, period.value / count, "time", unit[0]), unit[1]
    return None


def read_quantities(tokens: tuple[Token, ...]) -> Reading:
    """Finds every quantity in a token sequence.

    Args:
        tokens: Output of :func:`evermind.text.tokenize`, run on the text after
            :func:`evermind.cache.english.analysis.prepare`.

    Returns:
        The quantities, the token indexes they used, and the unit words without a number.
    """
    found: list[Quantity] = []
    used: set[int] = set()
    bare: set[tuple[str, str]] = set()
    i, n = 0, len(tokens)
    while i < n:
        step = _read_one(tokens, i)
        if step is None:
            unit = _unit_at(tokens, i) if tokens[i].kind == "word" else None
            if unit is not None and unit[0] not in AMBIGUOUS_BARE:
                bare.add((UNITS[unit[0]][0], unit[0]))
            i += 1
            continue
        quantity, start, end = step
        found.append(quantity)
        used.update(range(start, end))
        i = end
    return Reading(tuple(found), frozenset(used), frozenset(bare))


def _read_one(tokens: tuple[Token, ...], i: int) -> tuple[Quantity, int, int] | None:
    """The quantity starting at ``i`` as (quantity, first index, index after), or None."""
    date = _date(tokens, i)
    if date is not None:
        return date[0], i, date[1]
    currency = CURRENCY_SYMBOLS.get(tokens[i].low)
    start = i + 1 if currency else i
    if start >= len(tokens):
        return None
    # "an hour and a half" = 1.5 hours; "a decade" = 1 decade; but "4% a year" is a rate:
    # after a quantity, "a/an <unit>" is read (and used up) without a quantity of its own.
    if tokens[start].low in ("a", "an") and not currency:
        unit = _unit_at(tokens, start + 1)
        if unit is None or unit[0] in AMBIGUOUS_BARE or UNITS[unit[0]][0] != "time":
            return None
        half = _and_a_half(tokens, unit[1])
        if half is not None:
            return _make(1.0 + half, unit[0]), i, unit[1] + 3
        if start > 0 and tokens[start - 1].kind in ("number", "symbol"):
            return Quantity(1.0, 1.0, "rate", None), i, unit[1]
        return _make(1.0, unit[0]), i, unit[1]
    number = _number_at(tokens, start)
    if number is None:
        return None
    value, unit_name, j = number
    fraction = _fraction(tokens, start, j)
    if fraction is not None:
        value, unit_name, j = fraction
    if currency:
        return _make(value, f"money:{currency}"), i, j
    clock = _clock(tokens, start, value, j)
    if clock is not None:
        return clock[0], i, clock[1]
    rate = _rate(tokens, j, value)
    if rate is not None:
        return rate[0], i, rate[1]
    if unit_name is None:
        unit = _unit_at(tokens, j)
        if unit is not None:
            unit_name, j = unit
    return _make(value, unit_name), i, j
