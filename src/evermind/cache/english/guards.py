"""The English guards that decide whether a cached answer may be served for a new query.

This module owns the English guard list (:data:`ENGLISH_GUARDS`, the cache's default),
:class:`FunctionGuard` (a rule over two parsed queries, named) and :func:`default_guard`.
Cosine similarity alone cannot tell "convert USD to EUR" from "convert EUR to USD": a
near-miss changes one or two words and keeps the rest, so it embeds closer to the cached
query than a true paraphrase does. Each guard here compares one aspect of the two queries
and names what differs:

=============  ==========================================================================
name           refuses when
=============  ==========================================================================
error_code     error codes / identifiers differ (E0382 vs E0499, 14A vs 14C,
               CrashLoopBackOff vs ImagePullBackOff); "TS2339" = "2339",
               CERTIFICATE_VERIFY_FAILED = "certificate verify failed"
version        versions differ (Python 3.11 vs 3.12, v5 vs v6, Aurora 2 vs Aurora 3)
date           weekdays, months, calendar dates or clock times differ (weekday =
               Monday through Friday, Christmas Day = December 25, 11 pm = 23:00)
unit           the same number in another unit (100 MB vs 100 days), or questions asked
               in different units (tablespoons vs teaspoons)
number         quantities differ after normalisation ("ninety" = 90, "10%" = "ten
               percent", "an hour and a half" = 90 minutes, "two-week" = "14-day"), or
               one query names a quantity the other does not ("0% APR card" vs "card")
negation       a shared word is negated in one query only (with/without, not, never,
               avoid, "n't", un-/non-/in- when the bare word is in the other query)
direction      a word is the source in one query and the target in the other (A to B vs
               B to A), a direction contrast (up/down, largest/smallest, before/after,
               import/export), or two slots swapped around a relation word
operation      an operation contrast (create/delete, enable/disable, encrypt/decrypt,
               melt/temper, mean/median, derivative/integral)
entity         both queries name a thing the other does not (Redis vs Memcached, Pro plan
               vs Team plan), allowing aliases and acronyms (k8s, LA, FRA, 2FA)
action         (soft: only below a confident score) one query asks for an operation
               (update, delete, install, …) and the other names none ("Update the
               credit card on file" / "Credit cards with no foreign transaction fees")
edit           the queries share most words but one changes a content word the other
               does not have (a small edit that is not a known synonym), or they are
               word for word the same frame with one span replaced by another
               ("recovery time after a root canal" vs "... after wisdom tooth extraction")
=============  ==========================================================================

Guards only ever refuse; a guard that finds nothing to compare accepts. Add your own by
passing any object with a ``name`` and ``check(query, cached_query) -> str | None`` to
:class:`evermind.cache.guard.GuardChain`.

Browser-safe: standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evermind.cache.english.analysis import (
    Analysis,
    analyze,
    content_overlap,
    one_replaced_span,
    similarity,
)
from evermind.cache.english.lexicon import DIRECTION_CONTRASTS, OPERATION_CONTRASTS
from evermind.cache.english.rules import (
    action_asymmetry,
    contrast_conflict,
    date_conflict,
    direction_role_conflict,
    edit_conflict,
    entity_conflict,
    identifier_conflict,
    negation_conflict,
    number_conflict,
    swap_conflict,
    unit_conflict,
    version_conflict,
)
from evermind.cache.guard import Guard, GuardChain, Refusal

__all__ = [
    "ENGLISH_CHAIN",
    "ENGLISH_GUARDS",
    "NEAR_IDENTICAL",
    "FunctionGuard",
    "default_guard",
    "explain",
    "guard_names",
]


@dataclass(frozen=True)
class FunctionGuard:
    """Wraps a rule over two :class:`Analysis` objects as a :class:`Guard`.

    Attributes:
        name: Shown in refusals and cache statistics.
        rule: ``rule(query_analysis, cached_analysis) -> reason | None``.
        description: One line on what the guard refuses.
    """

    name: str
    rule: Callable[[Analysis, Analysis], str | None]
    description: str = ""
    unless_confident: float | None = None

    def check(self, query: str, cached_query: str) -> str | None:
        """Runs the rule on the parsed queries."""
        return self.rule(analyze(query), analyze(cached_query))


#: The action guard's refusal is soft: a score at least this share of the way from the
#: threshold to 1.0 overrides it (a strong embedder's "put my account into the docker
#: group" for "add a user to the docker group"). Chosen on the development set.
ACTION_CONFIDENT = 0.3

# Word-alignment similarity (see :func:`evermind.cache.english.analysis.similarity`) at
# and above which two queries count as "the same sentence with a small edit". Between
# such queries any changed content word, swapped slots or changed negation refuses; true
# paraphrases rewrite the sentence and mostly fall below it.
NEAR_IDENTICAL = 0.65
# Between CLOSE and NEAR_IDENTICAL, queries count as near-identical too, but the edit guard
# refuses only a small substitution (at most SMALL_EDIT content words on either side): a
# near-miss changes a word or two, a paraphrase at this similarity rewords several.
CLOSE = 0.5
SMALL_EDIT = 2
# Two queries that share this share of content words (see
# :func:`evermind.cache.english.analysis.content_overlap`) and are at least SIMILAR_FLOOR
# similar also count as near-identical: a swap ("A to B" / "B to A") keeps every word but breaks
# the word-order alignment.
SHARED_WORDS = 0.7
SIMILAR_FLOOR = 0.4


def _near_identical(a: Analysis, b: Analysis) -> bool:
    score = similarity(a.text, b.text)
    if score >= CLOSE:
        return True
    return score >= SIMILAR_FLOOR and content_overlap(a, b) >= SHARED_WORDS


def _direction(a: Analysis, b: Analysis) -> str | None:
    near = _near_identical(a, b)
    reason = direction_role_conflict(a, b, single=near)
    reason = reason or contrast_conflict(a, b, DIRECTION_CONTRASTS)
    if reason is None and near:
        reason = swap_conflict(a, b)
    return reason


def _edit(a: Analysis, b: Analysis) -> str | None:
    if not _near_identical(a, b):
        return None
    if similarity(a.text, b.text) >= NEAR_IDENTICAL:
        return edit_conflict(a, b)
    if one_replaced_span(a.text, b.text):  # one frame, one span swapped: any size
        return edit_conflict(a, b, additions=False)
    return edit_conflict(a, b, additions=False, largest=SMALL_EDIT)


def _negation(a: Analysis, b: Analysis) -> str | None:
    if _near_identical(a, b):
        return negation_conflict(a, b)
    if similarity(a.text, b.text) >= SIMILAR_FLOOR:
        return negation_conflict(a, b, near=False)
    return None


ENGLISH_GUARDS: tuple[FunctionGuard, ...] = (
    FunctionGuard("error_code", identifier_conflict, "error codes and identifiers agree"),
    FunctionGuard("version", version_conflict, "versions agree"),
    FunctionGuard("date", date_conflict, "weekdays, months, dates and times agree"),
    FunctionGuard("unit", unit_conflict, "units agree"),
    FunctionGuard("number", number_conflict, "quantities agree after normalisation"),
    FunctionGuard("negation", _negation, "no word is negated in one query only"),
    FunctionGuard("direction", _direction, "source/target and direction words agree"),
    FunctionGuard(
        "operation",
        lambda a, b: contrast_conflict(a, b, OPERATION_CONTRASTS),
        "no contrasting operations (create/delete, mean/median)",
    ),
    FunctionGuard("entity", entity_conflict, "named entities agree (aliases allowed)"),
    FunctionGuard("edit", _edit, "a near-identical query changes no content word"),
    FunctionGuard(
        "action",
        action_asymmetry,
        "no operation asked for in one query only, unless the embedder is confident",
        unless_confident=ACTION_CONFIDENT,
    ),
)


#: The English guards as one chain (the semantic cache's default guard).
ENGLISH_CHAIN = GuardChain(ENGLISH_GUARDS)


def explain(query: str, cached_query: str) -> Refusal | None:
    """Why :func:`default_guard` refuses, or None when it accepts."""
    return ENGLISH_CHAIN.check(query, cached_query)


def default_guard(query: str, cached_query: str, cosine: float | None = None) -> bool:
    """True when serving ``cached_query``'s answer for ``query`` would be safe.

    Runs :data:`ENGLISH_GUARDS` in order. The optional ``cosine`` (already past the
    cache's threshold) is accepted for the evaluator's calling convention and ignored.

    Args:
        query: The incoming query.
        cached_query: The query whose answer is in the cache.
        cosine: Unused.

    Returns:
        False when any guard refuses.
    """
    return ENGLISH_CHAIN(query, cached_query, cosine)


def guard_names(guards: Sequence[Guard] = ENGLISH_GUARDS) -> list[str]:
    """The names of ``guards`` (the default list unless given)."""
    return [g.name for g in guards]
