"""``--where`` expressions into the filter algebra; typed CSV cells; the JSON form's bounds."""

from __future__ import annotations

import pytest

from evermind.errors import InputError
from evermind.ingest import ParseOptions
from evermind.ingest.passages import row_fields
from evermind.ingest.registry import PARSERS
from evermind.ingest.tabular import typed_cell
from evermind.vectorstore.filters import And, Eq, Exists, In, Not, Or, Range, evaluate
from evermind.vectorstore.where import MAX_DEPTH, parse_where, parse_where_json


def test_expressions_become_the_algebra() -> None:
    assert parse_where("status = \"open\" and priority == 'P1'") == And(
        (Eq("status", "open"), Eq("priority", "P1"))
    )
    assert parse_where('a != 3 OR b in ("x", 2.5, true) and not exists c') == Or(
        (Not(Eq("a", 3)), And((In("b", ("x", 2.5, True)), Not(Exists("c")))))
    )
    assert parse_where("(a < 1 or a >= -2e1) and b not in ('q') and c > \"2026-01\"") == And(
        (
            Or((Range("a", lt=1), Range("a", gte=-20.0))),
            Not(In("b", ("q",))),
            Range("c", gt="2026-01"),
        )
    )
    assert parse_where("a <= 0 and flag = false") == And((Range("a", lte=0), Eq("flag", False)))
    assert parse_where(r'note = "say \"hi\""') == Eq("note", 'say "hi"')
    # "and" binds tighter than "or"; parentheses override it.
    row = {"a": 1, "b": 2}
    assert evaluate(parse_where("a = 9 and b = 9 or a = 1"), row)
    assert not evaluate(parse_where("a = 9 and (b = 9 or a = 1)"), row)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("status = open", "position 10: expected a value (a number, a quoted string, true or "),
        ("status =", "position 9: expected a value"),
        ("", "position 1: expected a condition"),
        ("a = 1 b = 2", "position 7: expected 'and', 'or' or the end, got 'b'"),
        ("(a = 1", "position 7: expected ')' or 'and'/'or', got the end"),
        ("a < true", "position 5: expected a number or a quoted string after '<', got 'true'"),
        ("a in ()", "position 7: expected a value"),
        ("a in (1, 2", "position 11: expected ',' or ')' closing the list of values"),
        ("a not = 1", "position 7: expected 'in' after 'not'"),
        ('a = "open', 'position 5: string opened here has no closing "'),
        ("a @ 1", "position 3: unexpected character '@'"),
        ("1 = a", "position 1: expected a condition"),
        ("a 1", "position 3: expected an operator"),
        ("exists 3", "position 8: expected a field name"),
        ("not " * (MAX_DEPTH + 1) + "a = 1", f"at most {MAX_DEPTH} levels"),
        ("a = 1" + " or a = 1" * 1000, "over the limit of 4096"),
        ("x" * 65 + " = 1", "position 1: expected a field name of at most 64 characters"),
    ],
)
def test_mistakes_name_the_position_and_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(InputError, match=r"^where: ") as caught:
        parse_where(text)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_json_form_is_bounded_and_its_mistakes_are_input_errors() -> None:
    assert parse_where_json(None) is None
    assert parse_where_json({"range": ["age", {"gte": 3}]}) == Range("age", gte=3)
    deep: object = {"eq": ["a", 1]}
    for _ in range(MAX_DEPTH + 1):
        deep = {"not": deep}
    with pytest.raises(InputError, match="nests deeper than"):
        parse_where_json(deep)
    with pytest.raises(InputError, match="more than 1024 parts"):
        parse_where_json({"in": ["a", list(range(2000))]})
    for bad in (
        {"like": ["a", 1]},
        {"eq": 5},
        {"eq": ["a b", 1]},
        {"range": ["a", 5]},
        {"and": 5},
        {"exists": 5},
        {"eq": ["a", {"x": 1}]},
        {"range": ["a", {"gt": 1, "lt": "z"}]},
        [],
        "status = open",
    ):
        with pytest.raises(InputError):
            parse_where_json(bad)


def test_csv_cells_are_typed_and_empty_cells_absent() -> None:
    cases = {
        "3": 3,
        "-12": -12,
        "+4": 4,
        "2.5": 2.5,
        ".5": 0.5,
        "1e3": 1000.0,
        "0": 0,
        "007": "007",  # an id, not seven
        "00.5": "00.5",
        "nan": "nan",
        "inf": "inf",
        "True": True,
        "FALSE": False,
        " open ": "open",
        "9007199254740993": "9007199254740993",  # beyond 2**53: kept exact, as text
        "": None,
        "   ": None,
        "1.2.3": "1.2.3",
    }
    assert {cell: typed_cell(cell) for cell in cases} == cases
    text = "subject,n,ratio,done,code,empty\nDisk full on node,3,2.5,true,007,\n"
    doc = PARSERS.get("csv")(text, "t.csv", ParseOptions(columns=("subject",)))
    fields = doc.sections[0].meta["fields"]
    assert fields == {"n": 3, "ratio": 2.5, "done": True, "code": "007"}
    assert evaluate(
        parse_where("n >= 3 and ratio < 3 and done = true"), row_fields({"fields": fields})
    )
    # JSON keeps its types; nulls are absent; nested values are not filter fields.
    doc = PARSERS.get("jsonl")(
        '{"title": "x y", "n": "3", "m": 3, "gone": null, "tags": ["a"]}\n',
        "r.jsonl",
        ParseOptions(fields=("title",)),
    )
    meta = doc.sections[0].meta
    assert meta["fields"] == {"n": "3", "m": 3, "tags": ["a"]}
    assert row_fields(meta) == {"n": "3", "m": 3}
    assert row_fields({}) == {} and row_fields({"fields": "nope"}) == {}
