"""Word lists behind the English guards, loaded once from the plug-in's data files.

This module owns reading ``evermind/cache/english/data/*.json`` (through
:func:`importlib.resources.files`, so it works from an installed wheel and in Pyodide)
and turning each list into the typed constant the rules consult. The lists themselves
are data, reviewed and extended in the JSON files:

===================  =====================================================================
file                 holds
===================  =====================================================================
numbers.json         number words, tens, multipliers, ordinals, fraction words
dates.json           months, holidays, weekdays, other date words
units.json           units by dimension, ambiguous units, glued suffixes, currency symbols
function_words.json  stopwords, fillers, words never an entity, determiners, version words
negation.json        negators, negating prefixes, words that end a negation's scope
direction.json       source/target/relation markers, direction contrast sets
operations.json      operation contrast sets (create/delete, mean/median)
aliases.json         synonym groups, entity aliases, demonym suffixes
symbols.json         Unicode forms replaced before tokenising ("°C" -> "degC")
===================  =====================================================================

The lists are general English and general technical vocabulary; none is taken from an
evaluation set. Words are stored folded (lower-case, no accents); a group of
interchangeable words is one space-separated string. Entries of contrast sets and synonym
groups are run through :func:`evermind.text.stem` by the rules, so "deleting" meets
"delete".

Browser-safe: standard library only.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any, cast

#: The data files of the English plug-in, without the ``.json`` suffix.
DATA_FILES: tuple[str, ...] = (
    "numbers",
    "dates",
    "units",
    "function_words",
    "negation",
    "direction",
    "operations",
    "aliases",
    "symbols",
)


@cache
def load(name: str) -> dict[str, Any]:
    """Reads one data file of the plug-in (once; later calls return the same object).

    Args:
        name: One of :data:`DATA_FILES`.

    Returns:
        The parsed JSON object.
    """
    resource = files("evermind.cache.english") / "data" / f"{name}.json"
    return cast(dict[str, Any], json.loads(resource.read_text(encoding="utf-8")))


def _words(name: str, key: str) -> frozenset[str]:
    return frozenset(cast(list[str], load(name)[key]))


def _floats(name: str, key: str) -> dict[str, float]:
    return cast(dict[str, float], load(name)[key])


def _groups(name: str, key: str) -> tuple[frozenset[str], ...]:
    return tuple(frozenset(group.split()) for group in cast(list[str], load(name)[key]))


def _contrasts(name: str, key: str) -> tuple[tuple[frozenset[str], ...], ...]:
    sets = cast(list[list[str]], load(name)[key])
    return tuple(tuple(frozenset(group.split()) for group in contrast) for contrast in sets)


# --------------------------------------------------------------------------- numbers

NUMBER_WORDS: dict[str, float] = _floats("numbers", "number_words")
TENS_WORDS: dict[str, float] = _floats("numbers", "tens_words")
NUMBER_MULTIPLIERS: dict[str, float] = _floats("numbers", "number_multipliers")
FRACTION_WORDS: dict[str, float] = _floats("numbers", "fraction_words")
_ORDINALS = cast(list[str], load("numbers")["ordinals"])
# Ordinals, and their plurals read as fractions' denominators ("seven thirteenths").
# "seconds" is left out: it is the unit far more often than the fraction.
ORDINAL_WORDS: dict[str, float] = {w: float(i + 1) for i, w in enumerate(_ORDINALS)}
ORDINAL_WORDS.update({w + "s": float(i + 1) for i, w in enumerate(_ORDINALS) if w != "second"})
ORDINAL_WORDS["thirds"] = 3.0
ORDINAL_WORDS["halves"] = 2.0

# --------------------------------------------------------------------------- dates

MONTHS: dict[str, int] = cast(dict[str, int], load("dates")["months"])
HOLIDAYS: dict[str, tuple[int, int]] = {
    phrase: (int(month), int(day))
    for phrase, (month, day) in cast(dict[str, list[int]], load("dates")["holidays"]).items()
}
WEEKDAYS: dict[str, int] = cast(dict[str, int], load("dates")["weekdays"])
DATE_WORDS: frozenset[str] = _words("dates", "date_words")

# --------------------------------------------------------------------------- units

# name -> (dimension, factor to the base unit, offset).
UNITS: dict[str, tuple[str, float, float]] = {
    name: (dimension, factor, offset)
    for dimension, factor, offset, names in cast(
        list[tuple[str, float, float, list[str]]], load("units")["unit_groups"]
    )
    for name in names
}
AMBIGUOUS_UNITS: dict[str, tuple[str, ...]] = {
    word: tuple(readings)
    for word, readings in cast(dict[str, list[str]], load("units")["ambiguous_units"]).items()
}
GLUED_UNIT_SUFFIXES: dict[str, str] = cast(dict[str, str], load("units")["glued_unit_suffixes"])
AMBIGUOUS_BARE: frozenset[str] = _words("units", "ambiguous_bare")
CURRENCY_SYMBOLS: dict[str, str] = cast(dict[str, str], load("units")["currency_symbols"])

# --------------------------------------------------------------------------- function words

STOPWORDS: frozenset[str] = _words("function_words", "stopwords")
FILLER_WORDS: frozenset[str] = _words("function_words", "filler_words")
NOT_ENTITIES: frozenset[str] = _words("function_words", "not_entities")
DETERMINERS: frozenset[str] = _words("function_words", "determiners")
VERSION_WORDS: frozenset[str] = _words("function_words", "version_words")

# --------------------------------------------------------------------------- negation

NEGATORS: frozenset[str] = _words("negation", "negators")
NEGATING_PREFIXES: tuple[str, ...] = tuple(cast(list[str], load("negation")["negating_prefixes"]))
SCOPE_BREAKS: frozenset[str] = _words("negation", "scope_breaks")

# --------------------------------------------------------------------------- direction

SOURCE_MARKERS: frozenset[str] = _words("direction", "source_markers")
TARGET_MARKERS: frozenset[str] = _words("direction", "target_markers")
RELATION_MARKERS: frozenset[str] = _words("direction", "relation_markers")
DIRECTION_CONTRASTS: tuple[tuple[frozenset[str], ...], ...] = _contrasts(
    "direction", "direction_contrasts"
)
OPERATION_CONTRASTS: tuple[tuple[frozenset[str], ...], ...] = _contrasts(
    "operations", "operation_contrasts"
)
#: Verbs that make a query a request to act on something ("Update the credit card on
#: file"): the operation guard refuses a query that names one against one that names none.
ACTIONS: frozenset[str] = frozenset(cast(str, load("operations")["actions"]).split())

# --------------------------------------------------------------------------- aliases

SYNONYM_GROUPS: tuple[frozenset[str], ...] = _groups("aliases", "synonym_groups")
ENTITY_ALIASES: tuple[frozenset[str], ...] = _groups("aliases", "entity_aliases")
DEMONYM_SUFFIXES: tuple[str, ...] = tuple(cast(list[str], load("aliases")["demonym_suffixes"]))

# --------------------------------------------------------------------------- symbols

SYMBOL_REPLACEMENTS: tuple[tuple[str, str], ...] = tuple(
    (old, new) for old, new in cast(list[list[str]], load("symbols")["replacements"])
)
