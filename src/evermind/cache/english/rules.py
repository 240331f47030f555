"""The comparison rules behind each cache guard, over two parsed queries.

This module owns the rules themselves; :mod:`evermind.cache.english.guards` names them and puts
them in order. Every rule takes the incoming query's :class:`Analysis` and the cached
query's, and returns None (nothing to object to) or a short reason. Most rules refuse only
on a *substitution*: something in each query that the other lacks. A rewording that drops
or adds a detail ("on my Mac", "in 2024") passes them; the edit rule catches additions
when the two queries are otherwise the same sentence.

Browser-safe: standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from evermind.cache.english.analysis import (
    Analysis,
    acronyms_covering,
    canonical,
    entity_matched,
)
from evermind.cache.english.lexicon import (
    ACTIONS,
    DETERMINERS,
    ENTITY_ALIASES,
    MONTHS,
    NEGATING_PREFIXES,
    NEGATORS,
    RELATION_MARKERS,
    SCOPE_BREAKS,
    SOURCE_MARKERS,
    STOPWORDS,
    TARGET_MARKERS,
    UNITS,
    VERSION_WORDS,
    WEEKDAYS,
)
from evermind.cache.english.quantities import Quantity
from evermind.text import Token, stem

T = TypeVar("T")
_SPLIT_IDENT = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_NEGATION_SCOPE = 3


def _unmatched(
    items_a: Sequence[T], items_b: Sequence[T], same: Callable[[T, T], bool]
) -> tuple[list[T], list[T]]:
    """Greedy one-to-one matching; returns what is left on each side."""
    left_b = list(items_b)
    left_a: list[T] = []
    for item in items_a:
        for k, other in enumerate(left_b):
            if same(item, other):
                del left_b[k]
                break
        else:
            left_a.append(item)
    return left_a, left_b


def _show(values: Sequence[object]) -> str:
    return ", ".join(str(v) for v in values)


# --------------------------------------------------------------------------- identifiers


def _ident_parts(text: str) -> list[str]:
    return [p.lower() for p in _SPLIT_IDENT.findall(text)]


def _ident_key(tok: Token) -> str:
    return re.sub(r"[-_.]", "", tok.low)


def _ident_in(tok: Token, other: Analysis) -> bool:
    key = _ident_key(tok)
    if any(_ident_key(other.tokens[i]) == key for i in other.identifiers):
        return True
    if key in {re.sub(r"[-_.]", "", t.low) for t in other.tokens}:
        return True
    for group in ENTITY_ALIASES:
        if tok.low in group and any(
            f" {alias.replace('-', ' ')} " in other.joined_text for alias in group
        ):
            return True
    parts = _ident_parts(tok.text)
    words = [p for p in parts if not p.isdigit()]
    digits = [p for p in parts if p.isdigit()]
    spelled = all(w in other.words or stem(w) in other.words for w in words if len(w) > 1)
    if words and spelled and (not digits or all(_number_in(d, other) for d in digits)):
        return len(words) > 1 or bool(digits)
    # A code whose number appears on its own on the other side ("TS2339" / "2339").
    return bool(digits) and all(_number_in(d, other) for d in digits)


def _number_in(digits: str, other: Analysis) -> bool:
    value = float(digits)
    for q in other.reading.quantities:
        if q.dimension is None and abs(q.raw - value) < 1e-9:
            return True
    return any(t.kind == "number" and t.low == digits for t in other.tokens)


def identifier_conflict(a: Analysis, b: Analysis) -> str | None:
    """Refuses when each query has an error code or identifier the other lacks, or when
    both quote a message after the same "tool: error:" prefix and the messages differ."""
    only_a = [a.tokens[i] for i in a.identifiers if not _ident_in(a.tokens[i], b)]
    only_b = [b.tokens[i] for i in b.identifiers if not _ident_in(b.tokens[i], a)]
    if only_a and only_b:
        shown_a, shown_b = _show([t.text for t in only_a]), _show([t.text for t in only_b])
        return f"identifiers differ: {shown_a} vs {shown_b}"
    if any(_ident_in(a.tokens[i], b) for i in a.identifiers):
        return None  # the same error code: the messages are two wordings of one error
    return _message_conflict(a, b)


def _message_split(a: Analysis) -> tuple[set[str], set[str]] | None:
    """Content words before and after the last "word: word" colon, or None."""
    toks = a.tokens
    colons = [
        i
        for i in range(1, len(toks) - 1)
        if toks[i].low == ":"
        and toks[i - 1].kind == "word"
        and toks[i + 1].kind in ("word", "ident")
    ]
    if not colons:
        return None
    cut = colons[-1]
    before = {w for w, i in zip(a.content, a.content_index, strict=True) if i < cut}
    after = {w for w, i in zip(a.content, a.content_index, strict=True) if i > cut}
    return (before, after) if before and after else None


def _message_conflict(a: Analysis, b: Analysis) -> str | None:
    split_a, split_b = _message_split(a), _message_split(b)
    if split_a is None or split_b is None or not split_a[0] & split_b[0]:
        return None
    message_a, message_b = split_a[1], split_b[1]
    shared = len(message_a & message_b) / max(len(message_a), len(message_b))
    if shared < 1 / 3:
        return f"different error messages: {_show(sorted(message_a))} vs {_show(sorted(message_b))}"
    return None


# --------------------------------------------------------------------------- versions


def _versions(a: Analysis) -> list[str]:
    found: list[str] = []
    for i, tok in enumerate(a.tokens):
        if tok.kind == "ident" and re.fullmatch(r"v\d+(\.\d+)*", tok.low):
            found.append(tok.low[1:])
        elif tok.kind == "number" and not tok.suffix:
            previous = a.tokens[i - 1] if i else None
            named = (
                previous is not None
                and previous.kind == "word"
                and (previous.text[:1].isupper() and previous.low not in STOPWORDS)
            )
            if tok.number is None or named or (previous and previous.low in VERSION_WORDS):
                found.append(tok.low)
    return found


def version_conflict(a: Analysis, b: Analysis) -> str | None:
    """Refuses when each query names a version the other does not."""
    only_a, only_b = _unmatched(_versions(a), _versions(b), _same_version)
    if only_a and only_b:
        return f"versions differ: {_show(only_a)} vs {_show(only_b)}"
    return None


def _same_version(x: str, y: str) -> bool:
    return x == y or ("." not in x + y and x.lstrip("0") == y.lstrip("0"))


# --------------------------------------------------------------------------- dates


def _weekdays(a: Analysis) -> set[int]:
    days: set[int] = set()
    toks = a.tokens
    for i, tok in enumerate(toks):
        word = tok.low.rstrip("s") if tok.low.endswith("days") else tok.low
        if word in ("weekday", "workday"):
            days.update(range(5))
        elif word == "weekend":
            days.update((5, 6))
        elif word in WEEKDAYS:
            days.add(WEEKDAYS[word])
            end = _range_end(toks, i)
            if end is not None:
                first, last = WEEKDAYS[word], end
                days.update(
                    range(first, last + 1)
                    if first <= last
                    else (*range(first, 7), *range(last + 1))
                )
    return days


def _range_end(toks: tuple[Token, ...], i: int) -> int | None:
    if i + 2 < len(toks) and toks[i + 1].low in ("through", "thru", "to", "until", "-"):
        word = toks[i + 2].low
        return WEEKDAYS.get(word.rstrip("s") if word.endswith("days") else word)
    return None


def _months(a: Analysis) -> set[int]:
    months = {MONTHS[t.low] for t in a.tokens if t.low in MONTHS and len(t.low) > 3}
    months |= {int(q.value) // 100 for q in a.reading.quantities if q.dimension == "date"}
    return months


def date_conflict(a: Analysis, b: Analysis) -> str | None:
    """Refuses on different weekdays, months, calendar dates or clock times."""
    for label, get in (("weekdays", _weekdays), ("months", _months)):
        set_a, set_b = get(a), get(b)
        if set_a and set_b and set_a - set_b and set_b - set_a:
            return f"{label} differ: {sorted(set_a)} vs {sorted(set_b)}"
    for dimension in ("date", "clock"):
        qa = [q for q in a.reading.quantities if q.dimension == dimension]
        qb = [q for q in b.reading.quantities if q.dimension == dimension]
        only_a, only_b = _unmatched(qa, qb, lambda x, y: abs(x.value - y.value) < 1e-6)
        if only_a and only_b:
            shown_a, shown_b = _show([q.value for q in only_a]), _show([q.value for q in only_b])
            return f"{dimension}s differ: {shown_a} vs {shown_b}"
    return None


# --------------------------------------------------------------------------- numbers, units


def _plain_quantities(a: Analysis) -> list[Quantity]:
    return [q for q in a.reading.quantities if q.dimension not in ("date", "clock", "rate")]


def _fmt(q: Quantity) -> str:
    raw = f"{q.raw:g}"
    return f"{raw} {q.unit}" if q.unit else raw


def unit_conflict(a: Analysis, b: Analysis) -> str | None:
    """Refuses the same number in incompatible units, or questions asked in different units."""
    only_a, only_b = _unmatched(_plain_quantities(a), _plain_quantities(b), Quantity.matches)
    for qa in only_a:
        for qb in only_b:
            if qa.unit and qb.unit and abs(qa.raw - qb.raw) < 1e-9:
                return f"units differ: {_fmt(qa)} vs {_fmt(qb)}"
    # Unit words without a number ("in metres"), in dimensions neither query quantifies.
    counted = {q.dimension for q in _plain_quantities(a) + _plain_quantities(b)}
    units_a = {(d, UNITS[n][1]) for d, n in a.reading.bare_units if d not in counted}
    units_b = {(d, UNITS[n][1]) for d, n in b.reading.bare_units if d not in counted}
    if units_a and units_b and not units_a & units_b:
        names_a = sorted(n for _, n in a.reading.bare_units)
        names_b = sorted(n for _, n in b.reading.bare_units)
        return f"asked in different units: {_show(names_a)} vs {_show(names_b)}"
    return None


def _in_identifier(q: Quantity, other: Analysis) -> bool:
    """True when a bare number is the digit run of an identifier on the other side ("six"
    and "d6")."""
    if q.dimension is not None:
        return False
    runs = {
        float(run) for i in other.identifiers for run in re.findall(r"\d+", other.tokens[i].low)
    }
    return q.raw in runs


def number_conflict(a: Analysis, b: Analysis) -> str | None:
    """Refuses when a query has a quantity the other lacks (after normalisation).

    Both ways ("15 GB" vs "20 GB") and one way: a quantity only one query names changes the
    question ("transfer a balance to a 0% APR card" is not "transfer my gift card balance";
    "set the pod memory limit to 512Mi" is not "pod stuck in CrashLoopBackOff"). Measured
    on the development set's read-through replay (``evals/cache_full.py --replay``), the
    one-way refusal removed about half the remaining wrong answers for every embedder.
    """
    only_a, only_b = _unmatched(_plain_quantities(a), _plain_quantities(b), Quantity.matches)
    only_a = [q for q in only_a if not _in_identifier(q, b)]
    only_b = [q for q in only_b if not _in_identifier(q, a)]
    if only_a and only_b:
        shown_a, shown_b = _show([_fmt(q) for q in only_a]), _show([_fmt(q) for q in only_b])
        return f"numbers differ: {shown_a} vs {shown_b}"
    if only_a or only_b:
        shown = _show([_fmt(q) for q in only_a or only_b])
        which = "the new query" if only_a else "the cached query"
        return f"only {which} names {shown}"
    return None


# --------------------------------------------------------------------------- negation


def _polarity(
    a: Analysis, other: Analysis, reach: int = _NEGATION_SCOPE
) -> tuple[set[str], set[str], int]:
    """(negated words, plain words, number of negations) of ``a``."""
    negated: set[str] = set()
    plain: set[str] = set()
    count, scope, skip_subject = 0, 0, False
    other_stems = {s for _, s in other.stems}
    toks = a.tokens
    for i, tok in enumerate(toks):
        low = tok.low
        if low in SCOPE_BREAKS:
            scope = 0
            continue
        if tok.kind != "word":
            continue
        if low in NEGATORS or low.endswith("n't") or low == "non":
            count, scope = count + 1, reach
            following = toks[i + 1].low if i + 1 < len(toks) else ""
            skip_subject = low.endswith("n't") and following in DETERMINERS
            continue
        if low == "free" and tok.joined and i > 0:  # "penalty-free": without a penalty
            word = canonical(toks[i - 1].low)
            plain.discard(word)
            negated.add(word)
            count += 1
            continue
        if low in STOPWORDS:
            continue
        root = _negated_root(low, other_stems)
        if root is not None:
            negated.add(canonical(root))
            count += 1
            continue
        if skip_subject and scope:
            plain.add(canonical(low))
            skip_subject = False
            continue
        (negated if scope else plain).add(canonical(low))
        scope = max(scope - 1, 0)
    return negated, plain, count


def _negated_root(word: str, other_stems: set[str]) -> str | None:
    if stem(word) in other_stems:
        return None
    for prefix in NEGATING_PREFIXES:
        root = word[len(prefix) :]
        if word.startswith(prefix) and len(root) >= 4 and stem(root) in other_stems:
            return root
    return None


def negation_conflict(a: Analysis, b: Analysis, near: bool = True) -> str | None:
    """Refuses when a shared word is negated in only one query.

    Args:
        a: The incoming query.
        b: The cached query.
        near: The queries are near-identical sentences: a negation reaches three content
            words, and a different number of negations alone refuses ("eligible" / "not
            eligible"). Otherwise a negation reaches only the next content word.
    """
    reach = _NEGATION_SCOPE if near else 1
    neg_a, plain_a, count_a = _polarity(a, b, reach)
    neg_b, plain_b, count_b = _polarity(b, a, reach)
    for word in sorted((neg_a | plain_a) & (neg_b | plain_b)):
        negative_a = word in neg_a and word not in plain_a
        negative_b = word in neg_b and word not in plain_b
        if negative_a != negative_b:
            return f"'{word}' is negated in one query only"
    if near and (count_a % 2) != (count_b % 2):
        return f"negation differs: {count_a} vs {count_b} negations"
    return None


# --------------------------------------------------------------------------- direction


def _filler_after(toks: tuple[Token, ...], i: int) -> str | None:
    for tok in toks[i : i + 4]:
        if tok.kind == "symbol":
            return None
        if tok.low not in STOPWORDS:
            return canonical(tok.low) if tok.kind == "word" else tok.low
    return None


def _roles(a: Analysis) -> tuple[set[str], set[str]]:
    """(sources, targets) named by from/to/into/out of in ``a``."""
    sources: set[str] = set()
    targets: set[str] = set()
    toks = a.tokens
    has_from = any(t.low == "from" for t in toks)
    for i, tok in enumerate(toks):
        two = f"{tok.low} {toks[i + 1].low}" if i + 1 < len(toks) else ""
        if two in SOURCE_MARKERS:
            filler = _filler_after(toks, i + 2)
            if filler:
                sources.add(filler)
        elif tok.low in SOURCE_MARKERS:
            filler = _filler_after(toks, i + 1)
            if filler:
                sources.add(filler)
        elif tok.low in TARGET_MARKERS:
            filler = _filler_after(toks, i + 1)
            if filler:
                targets.add(filler)
            previous = toks[i - 1] if i else None
            if (
                not has_from
                and previous is not None
                and previous.kind != "symbol"
                and previous.low not in STOPWORDS
            ):
                sources.add(canonical(previous.low) if previous.kind == "word" else previous.low)
    return sources, targets


def direction_role_conflict(a: Analysis, b: Analysis, single: bool = True) -> str | None:
    """Refuses when a word is the source in one query and the target in the other.

    Args:
        a: The incoming query.
        b: The cached query.
        single: Refuse on one such word. When False (queries worded differently), both a
            source and a target must have traded roles ("A to B" vs "B to A").
    """
    src_a, tgt_a = _roles(a)
    src_b, tgt_b = _roles(b)
    now_target = sorted((src_a - tgt_a) & (tgt_b - src_b))
    now_source = sorted((tgt_a - src_a) & (src_b - tgt_b))
    if (now_target and now_source) or (single and (now_target or now_source)):
        word = (now_target or now_source)[0]
        return f"'{word}' is the source in one query and the target in the other"
    return None


def _groups_present(a: Analysis, contrast: tuple[frozenset[str], ...]) -> set[int]:
    stems = {s for _, s in a.stems} | {t.low for t in a.tokens}
    present: set[int] = set()
    for k, group in enumerate(contrast):
        for word in group:
            if ("-" in word and f" {word.replace('-', ' ')} " in a.joined_text) or stem(
                word
            ) in stems:
                present.add(k)
                break
    return present


def contrast_conflict(
    a: Analysis, b: Analysis, contrasts: tuple[tuple[frozenset[str], ...], ...]
) -> str | None:
    """Refuses when the queries use different members of one contrast set."""
    for contrast in contrasts:
        groups_a, groups_b = _groups_present(a, contrast), _groups_present(b, contrast)
        if groups_a - groups_b and groups_b - groups_a:
            word_a = sorted(contrast[min(groups_a - groups_b)])[0]
            word_b = sorted(contrast[min(groups_b - groups_a)])[0]
            return f"'{word_a}' vs '{word_b}'"
    return None


def _actions(a: Analysis) -> list[str]:
    stems = {s for _, s in a.stems} | {t.low for t in a.tokens}
    return sorted(word for word in ACTIONS if stem(word) in stems or word in stems)


def action_asymmetry(a: Analysis, b: Analysis) -> str | None:
    """Refuses when one query asks for an operation (:data:`ACTIONS`) and the other names none.

    "Update the credit card on file" asks to act on a card; "Credit cards with no foreign
    transaction fees" asks which cards exist. Two requests naming different actions are
    left to :func:`contrast_conflict` and the embedder ("update" / "change" are one
    operation reworded).
    """
    mine, theirs = _actions(a), _actions(b)
    if bool(mine) == bool(theirs):
        return None
    word = (mine or theirs)[0]
    side = "the new query" if mine else "the cached query"
    return f"'{word}' asks for an operation in {side} only"


def _keys(a: Analysis) -> list[tuple[str, int]]:
    """Content words and numbers with their token positions, in order."""
    keys = list(zip(a.content, a.content_index, strict=True))
    for i, tok in enumerate(a.tokens):
        if tok.kind == "number" and tok.number is not None:
            keys.append((f"#{tok.number:g}", i))
    return sorted(keys, key=lambda kv: kv[1])


def _relations_between(a: Analysis, i: int, j: int) -> set[str]:
    lo, hi = min(i, j), max(i, j)
    return {t.low for t in a.tokens[lo + 1 : hi] if t.low in RELATION_MARKERS}


def swap_conflict(a: Analysis, b: Analysis) -> str | None:
    """Refuses when two slots trade places around a relation word ("A for B" / "B for A")."""
    keys_a, keys_b = _keys(a), _keys(b)
    # Only first occurrences count; a slot word repeated later ("butter ... butter") keeps
    # its first place.
    pos_a: dict[str, list[int]] = {}
    pos_b: dict[str, list[int]] = {}
    for key, pos in keys_a:
        pos_a.setdefault(key, []).append(pos)
    for key, pos in keys_b:
        pos_b.setdefault(key, []).append(pos)
    shared = [k for k in pos_a if k in pos_b]
    for x_index, x in enumerate(shared):
        for y in shared[x_index + 1 :]:
            ax, ay, bx, by = pos_a[x][0], pos_a[y][0], pos_b[x][0], pos_b[y][0]
            reversed_order = (ax < ay) != (bx < by)
            if reversed_order and _relations_between(a, ax, ay) & _relations_between(b, bx, by):
                return f"'{x}' and '{y}' swap places"
    return None


# --------------------------------------------------------------------------- entities, edits


def entity_conflict(a: Analysis, b: Analysis) -> str | None:
    """Refuses when each query names an entity the other does not."""
    covered_a, covered_b = acronyms_covering(a, b), acronyms_covering(b, a)
    only_a = [
        a.tokens[i].text
        for i in a.entities
        if i not in covered_a and not entity_matched(a.tokens[i], b)
    ]
    only_b = [
        b.tokens[i].text
        for i in b.entities
        if i not in covered_b and not entity_matched(b.tokens[i], a)
    ]
    if only_a and only_b:
        return f"entities differ: {_show(only_a)} vs {_show(only_b)}"
    return None


def edit_conflict(
    a: Analysis, b: Analysis, additions: bool = True, largest: int | None = None
) -> str | None:
    """Refuses a near-identical query that changes, adds or drops a content word.

    Args:
        a: The incoming query.
        b: The cached query.
        additions: Also refuse a word added or dropped (not only one replaced).
        largest: Refuse a replacement only when neither side changes more content words
            than this (None: any size).
    """
    only_a = [w for w in dict.fromkeys(a.content) if w not in b.content and not _loose_in(w, b)]
    only_b = [w for w in dict.fromkeys(b.content) if w not in a.content and not _loose_in(w, a)]
    small = largest is None or max(len(only_a), len(only_b)) <= largest
    if only_a and only_b and small:
        return f"'{_show(only_a)}' replaced by '{_show(only_b)}'"
    if additions and (only_a or only_b):
        return f"'{_show(only_a or only_b)}' added to an otherwise identical query"
    return None


def _loose_in(word: str, other: Analysis) -> bool:
    """True when ``word`` appears in ``other`` under another spelling (compound, alias)."""
    if len(word) >= 4 and any(word in w or (len(w) >= 4 and w in word) for w in other.words):
        return True
    return any(
        word in group and any(f" {x.replace('-', ' ')} " in other.joined_text for x in group)
        for group in ENTITY_ALIASES
    )
