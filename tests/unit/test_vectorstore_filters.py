"""The filter algebra on its own: parsing, the reference semantics, and the residual split."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evermind.errors import InputError
from evermind.vectorstore import And, Eq, Exists, In, Not, Or, Range, evaluate, parse_filter
from evermind.vectorstore.filters import Filter, Leaf, residual_top_k, split
from evermind.vectorstore.port import AccessScope, Acl, Hit, visible

META = {"color": "red", "n": 3, "price": 2.5, "flag": True}


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (Eq("color", "red"), True),
        (Eq("n", 3.0), True),  # numbers compare numerically
        (Eq("flag", 1), False),  # a bool is not a number
        (Eq("n", "3"), False),  # nor is a string
        (In("color", ("blue", "red")), True),
        (In("color", ()), False),
        (Range("n", gt=2, lte=3), True),
        (Range("n", gt=3), False),
        (Range("color", gte="r"), True),  # strings by code point
        (Range("color", gte="R", lt="Z"), False),
        (Range("flag", gte=0), False),
        (Range("color", gt=1), False),  # a string is not in a numeric range
        (Exists("price"), True),
        (Exists("missing"), False),
        (Eq("missing", 1), False),
        (Not(Eq("missing", 1)), True),  # two-valued: NOT of an absent field's leaf is true
        (And(()), True),
        (Or(()), False),
        (And((Eq("color", "red"), Not(Range("price", lt=1)))), True),
        (Or((Eq("color", "blue"), Eq("n", 4))), False),
    ],
)
def test_reference_semantics(node: Filter, expected: bool) -> None:
    assert evaluate(node, META) is expected


def test_json_form_parses_to_the_same_tree() -> None:
    spec = {
        "and": [
            {"eq": ["color", "red"]},
            {"or": [{"in": ["n", [1, 3]]}, {"not": {"exists": "flag"}}]},
            {"range": ["price", {"gte": 1, "lt": 5}]},
        ]
    }
    assert parse_filter(spec) == And(
        (
            Eq("color", "red"),
            Or((In("n", (1, 3)), Not(Exists("flag")))),
            Range("price", gte=1, lt=5),
        )
    )
    assert parse_filter(None) is None


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"like": ["color", "r%"]}, "unknown operator 'like'"),
        ({"range": ["n", {"between": [1, 2]}]}, "unknown range bound"),
        ({"range": ["n", {}]}, "at least one of"),
        ({"range": ["n", {"gt": 1, "lt": "z"}]}, "all numbers or all strings"),
        ({"eq": ["n"]}, "bad operand"),
        ({"eq": ["bad field", 1]}, "not an identifier"),
        ({"eq": ["n", [1]]}, "not a metadata value"),
        ({"eq": ["n", float("nan")]}, "not a finite number"),
        ({"eq": ["n", 1], "in": ["n", [1]]}, "expected one"),
        ({"in": ["color", "red"]}, "'in' needs a list of values"),
        ({"in": ["n", 3]}, "'in' needs a list of values"),
        ("color = red", "expected one"),
    ],
)
def test_bad_filters_are_refused(spec: Any, match: str) -> None:
    with pytest.raises(InputError, match=match):
        parse_filter(spec)


FIELDS = ["a", "b"]
VALUES = st.one_of(st.integers(0, 3), st.sampled_from(["x", "y"]), st.booleans())
LEAVES = st.one_of(
    st.builds(Eq, st.sampled_from(FIELDS), VALUES),
    st.builds(lambda f, v: Range(f, gte=v), st.sampled_from(FIELDS), st.sampled_from(["x", "y"])),
    st.builds(lambda f, v: Range(f, lt=v), st.sampled_from(FIELDS), st.integers(0, 3)),
    st.builds(Exists, st.sampled_from(FIELDS)),
)
TREES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.builds(lambda ps: And(tuple(ps)), st.lists(inner, max_size=3)),
        st.builds(lambda ps: Or(tuple(ps)), st.lists(inner, max_size=3)),
        st.builds(Not, inner),
    ),
    max_leaves=6,
)


def _no_string_ranges(leaf: Leaf) -> bool:
    return not (isinstance(leaf, Range) and isinstance(leaf.bounds()[0][1], str))


@settings(max_examples=200, deadline=None)
@given(node=TREES, meta=st.dictionaries(st.sampled_from(FIELDS), VALUES), can_negate=st.booleans())
def test_split_keeps_the_meaning(node: Filter, meta: dict[str, Any], can_negate: bool) -> None:
    """An item passes the filter exactly when it passes the pushed part and the residual; an
    engine without negation (``can_negate=False``, Pinecone) is pushed no ``Not``."""
    pushed, residual = split(node, _no_string_ranges, can_negate=can_negate)
    assert evaluate(node, meta) == (evaluate(pushed, meta) and evaluate(residual, meta))
    if pushed is not None:
        assert all(_no_string_ranges(leaf) for leaf in _leaves(pushed))
        assert can_negate or "Not(" not in repr(pushed)


@settings(max_examples=100, deadline=None)
@given(node=TREES)
def test_the_json_form_round_trips(node: Filter) -> None:
    from evermind.vectorstore.filters import filter_json, parse_filter

    assert parse_filter(json.loads(json.dumps(filter_json(node)))) == node


def _leaves(node: Filter) -> list[Leaf]:
    if isinstance(node, And | Or):
        return [leaf for p in node.parts for leaf in _leaves(p)]
    if isinstance(node, Not):
        return _leaves(node.part)
    return [node]


def test_residual_over_fetch_doubles_until_k_pass_or_the_engine_runs_dry() -> None:
    import asyncio

    acl = Acl("t", frozenset({"p"}))
    ranked = [Hit(f"h{i:03d}", 1 - i / 1000, "", {"keep": i % 10 == 0}, acl) for i in range(300)]
    asked: list[int] = []

    async def fetch(n: int) -> list[Hit]:
        asked.append(n)
        return ranked[:n]

    got = asyncio.run(residual_top_k(fetch, 5, Eq("keep", True)))
    assert [h.id for h in got] == ["h000", "h010", "h020", "h030", "h040"]
    assert asked == [21, 42]  # max(4k, k + 16) = 21 holds 3 matches; 42 holds 5
    asked.clear()
    got = asyncio.run(residual_top_k(fetch, 50, Eq("keep", True)))
    assert len(got) == 30 and asked == [200, 400]  # the engine ran dry at 300
    asked.clear()
    got = asyncio.run(residual_top_k(fetch, 5, Eq("keep", True), max_fetch=30))
    assert len(got) == 3 and asked == [21, 30]  # the cap: recall drops here, as documented


def test_visibility_rule() -> None:
    acl = Acl("acme", frozenset({"alice", "ops"}), 1)
    assert visible(acl, AccessScope("acme", frozenset({"ops"}), 1))
    assert not visible(acl, AccessScope("acme", frozenset({"ops"}), 0))
    assert not visible(acl, AccessScope("globex", frozenset({"alice"}), 9))
    assert not visible(acl, AccessScope("acme", frozenset({"bob"}), 9))
