"""The filter algebra over an item's metadata, its Python evaluator, and the residual split.

Leaves: :class:`Eq`, :class:`In`, :class:`Range` (``gt``/``gte``/``lt``/``lte``) and
:class:`Exists`; combinators :class:`And`, :class:`Or`, :class:`Not`. The JSON form
(:func:`parse_filter`) is ``{"eq": [field, value]}``, ``{"in": [field, [values]]}``,
``{"range": [field, {"gte": 1, "lt": 5}]}``, ``{"exists": field}``, ``{"and": [...]}``,
``{"or": [...]}``, ``{"not": filter}``.

The semantics, which every engine's translation matches exactly (the shared suite checks it):

- Comparisons are type-strict: a bool equals only a bool; numbers (int or float) compare
  numerically with each other; strings compare by code point (Postgres with ``COLLATE "C"``).
- A leaf on a field the item lacks, or holds a value of another type, is false; ``Not`` of it
  is true (two-valued logic, no SQL NULLs).
- ``Range`` bounds are all numbers or all strings.

:func:`evaluate` is the reference: the in-process engine filters with it and the other
engines apply it as the residual filter. :func:`split` divides a filter into the part an engine
can run itself and the residual it cannot (see docs/vectorstore.md). Browser-safe.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evermind.errors import InputError
from evermind.vectorstore.port import Hit, MetaValue, check_field, check_value

__all__ = [
    "And",
    "Eq",
    "Exists",
    "Filter",
    "In",
    "Leaf",
    "Not",
    "Or",
    "Range",
    "evaluate",
    "filter_json",
    "parse_filter",
    "residual_top_k",
    "split",
]

OPS = ("eq", "in", "range", "exists", "and", "or", "not")
BOUNDS = ("gt", "gte", "lt", "lte")


@dataclass(frozen=True)
class Eq:
    """``metadata[field] == value`` (type-strict; numbers numerically)."""

    field: str
    value: MetaValue


@dataclass(frozen=True)
class In:
    """``metadata[field]`` equals one of ``values`` (an empty tuple admits nothing)."""

    field: str
    values: tuple[MetaValue, ...]


@dataclass(frozen=True)
class Range:
    """``metadata[field]`` within the given bounds (numbers, or strings by code point)."""

    field: str
    gt: float | str | None = None
    gte: float | str | None = None
    lt: float | str | None = None
    lte: float | str | None = None

    def bounds(self) -> list[tuple[str, float | str]]:
        """The bounds set, as ``(op, value)`` pairs."""
        return [(op, v) for op in BOUNDS if (v := getattr(self, op)) is not None]


@dataclass(frozen=True)
class Exists:
    """The item has ``field`` in its metadata."""

    field: str


@dataclass(frozen=True)
class And:
    """Every part admits the item (an empty And admits everything)."""

    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Or:
    """Some part admits the item (an empty Or admits nothing)."""

    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Not:
    """The part does not admit the item."""

    part: Filter


Leaf = Eq | In | Range | Exists
Filter = Leaf | And | Or | Not


def parse_filter(spec: object) -> Filter | None:
    """A :data:`Filter` from its JSON form (or a Filter, checked; or None).

    Raises:
        InputError: An unknown operator (``code="unknown_filter_op"``), a bad field or value.
    """
    if spec is None:
        return None
    if isinstance(spec, Eq | In | Range | Exists | And | Or | Not):
        return _checked(spec)
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise InputError(
            f"filter: expected one {{op: operand}} object with op in {OPS}, got {spec!r}",
            code="bad_filter",
        )
    ((op, arg),) = spec.items()
    if op not in OPS:
        raise InputError(
            f"filter: unknown operator {op!r}; expected one of {', '.join(OPS)}",
            code="unknown_filter_op",
        )
    try:
        if op == "eq":
            name, value = arg
            return _checked(Eq(name, value))
        if op == "in":
            name, values = arg
            if not isinstance(values, list | tuple):
                raise InputError(
                    f"filter: 'in' needs a list of values, got {values!r}; e.g. "
                    '{"in": ["status", ["open", "pending"]]}',
                    code="bad_filter",
                )
            return _checked(In(name, tuple(values)))
        if op == "range":
            name, bounds = arg
            unknown = set(bounds) - set(BOUNDS)
            if unknown:
                raise InputError(
                    f"filter: unknown range bound(s) {sorted(unknown)}; expected {BOUNDS}",
                    code="unknown_filter_op",
                )
            return _checked(Range(name, **bounds))
        if op == "exists":
            return _checked(Exists(arg))
        if op == "not":
            part = parse_filter(arg)
            if part is None:
                raise InputError("filter: 'not' needs a filter", code="bad_filter")
            return Not(part)
        parts = tuple(p for p in (parse_filter(a) for a in arg) if p is not None)
        return And(parts) if op == "and" else Or(parts)
    except (TypeError, ValueError) as err:
        if isinstance(err, InputError):
            raise
        raise InputError(
            f"filter: bad operand for {op!r}: {arg!r} ({err})", code="bad_filter"
        ) from err


def filter_json(node: Filter) -> dict[str, Any]:
    """``node`` in the JSON form :func:`parse_filter` reads (``parse_filter(filter_json(f)) ==
    f``)."""
    if isinstance(node, And | Or):
        return {"and" if isinstance(node, And) else "or": [filter_json(p) for p in node.parts]}
    if isinstance(node, Not):
        return {"not": filter_json(node.part)}
    if isinstance(node, Eq):
        return {"eq": [node.field, node.value]}
    if isinstance(node, In):
        return {"in": [node.field, list(node.values)]}
    if isinstance(node, Range):
        return {"range": [node.field, dict(node.bounds())]}
    return {"exists": node.field}


def _checked(node: Filter) -> Filter:
    """``node`` with every field and value checked (recursively)."""
    if isinstance(node, And | Or):
        for part in node.parts:
            _checked(part)
        return node
    if isinstance(node, Not):
        _checked(node.part)
        return node
    check_field(node.field)
    if isinstance(node, Eq):
        check_value(node.value, f"filter eq {node.field!r}")
    elif isinstance(node, In):
        for value in node.values:
            check_value(value, f"filter in {node.field!r}")
    elif isinstance(node, Range):
        bounds = node.bounds()
        if not bounds:
            raise InputError(f"filter range {node.field!r}: give at least one of {BOUNDS}")
        kinds = {_kind(check_value(v, f"filter range {node.field!r}")) for _, v in bounds}
        if kinds - {"number", "string"} or len(kinds) > 1:
            raise InputError(
                f"filter range {node.field!r}: bounds must be all numbers or all strings, "
                f"got {[v for _, v in bounds]!r}",
                code="bad_filter",
            )
    return node


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "other"


def _equal(stored: object, wanted: object) -> bool:
    kind = _kind(wanted)
    return _kind(stored) == kind and stored == wanted


def _in_range(node: Range, stored: object) -> bool:
    bounds = node.bounds()
    kind = _kind(bounds[0][1])
    if _kind(stored) != kind:
        return False
    value: Any = stored
    for op, bound in bounds:
        ok = {
            "gt": lambda b: value > b,
            "gte": lambda b: value >= b,
            "lt": lambda b: value < b,
            "lte": lambda b: value <= b,
        }[op](bound)
        if not ok:
            return False
    return True


def evaluate(node: Filter | None, metadata: Mapping[str, MetaValue]) -> bool:
    """Whether ``node`` admits an item with ``metadata`` (the reference semantics)."""
    if node is None:
        return True
    if isinstance(node, And):
        return all(evaluate(p, metadata) for p in node.parts)
    if isinstance(node, Or):
        return any(evaluate(p, metadata) for p in node.parts)
    if isinstance(node, Not):
        return not evaluate(node.part, metadata)
    if isinstance(node, Exists):
        return node.field in metadata
    if node.field not in metadata:
        return False
    stored = metadata[node.field]
    if isinstance(node, Eq):
        return _equal(stored, node.value)
    if isinstance(node, In):
        return any(_equal(stored, v) for v in node.values)
    return _in_range(node, stored)


def _leaves(node: Filter) -> list[Leaf]:
    if isinstance(node, And | Or):
        return [leaf for p in node.parts for leaf in _leaves(p)]
    if isinstance(node, Not):
        return _leaves(node.part)
    return [node]


def split(
    node: Filter | None, can_push: Callable[[Leaf], bool], *, can_negate: bool = True
) -> tuple[Filter | None, Filter | None]:
    """``(pushed, residual)``: what an engine runs itself and what is applied after.

    An item passes ``node`` exactly when it passes both. ``And`` splits part by part; an
    ``Or`` or ``Not`` with any leaf the engine cannot express goes to the residual whole
    (pushing a piece of a disjunction would drop items the residual should keep). An engine
    whose language has no exact negation (``can_negate=False``: Pinecone's ``$ne`` over an
    absent field is undocumented) sends every part holding a ``Not`` to the residual too.
    """
    if node is None:
        return None, None
    if isinstance(node, And):
        pushed: list[Filter] = []
        residual: list[Filter] = []
        for part in node.parts:
            p, r = split(part, can_push, can_negate=can_negate)
            if p is not None:
                pushed.append(p)
            if r is not None:
                residual.append(r)
        return (And(tuple(pushed)) if pushed else None), (
            And(tuple(residual)) if residual else None
        )
    if all(can_push(leaf) for leaf in _leaves(node)) and (can_negate or not _negates(node)):
        return node, None
    return None, node


def _negates(node: Filter) -> bool:
    if isinstance(node, Not):
        return True
    return isinstance(node, And | Or) and any(_negates(p) for p in node.parts)


def fields_of(node: Filter | None) -> Sequence[str]:
    """The metadata fields a filter reads (for an engine that indexes them)."""
    return sorted({leaf.field for leaf in _leaves(node)}) if node is not None else []


#: The first over-fetch asks for this many times ``k`` when a residual filter remains.
OVERFETCH = 4
#: The most candidates one residual query reads before it gives up (recall may drop there).
MAX_FETCH = 10_000


async def residual_top_k(
    fetch: Callable[[int], Awaitable[list[Hit]]],
    k: int,
    residual: Filter | None,
    max_fetch: int = MAX_FETCH,
) -> list[Hit]:
    """The best ``k`` hits ``residual`` admits, over-fetching from ``fetch(n)`` (best n, in order).

    Asks for ``OVERFETCH * k`` candidates, filters, and doubles ``n`` until ``k`` pass, the
    engine returns fewer than asked (it has no more), or ``n`` reaches ``max_fetch``; only
    in that last case can a match ranked below ``max_fetch`` be missed.
    """
    if residual is None:
        return (await fetch(k))[:k]
    n = min(max(OVERFETCH * k, k + 16), max_fetch)
    while True:
        candidates = await fetch(n)
        kept = [h for h in candidates if evaluate(residual, h.metadata)]
        if len(kept) >= k or len(candidates) < n or n >= max_fetch:
            return kept[:k]
        n = min(2 * n, max_fetch)
