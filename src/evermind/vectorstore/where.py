"""``--where``: a small readable expression language, parsed into the filter algebra.

Grammar (keywords in any case; ``field`` an identifier as :func:`~evermind.vectorstore.port.
check_field` takes it)::

    expr      := and_expr ("or" and_expr)*
    and_expr  := unary ("and" unary)*
    unary     := "not" unary | "(" expr ")" | "exists" field | comparison
    comparison:= field ("=" | "==" | "!=" | "<" | "<=" | ">" | ">=") value
               | field ["not"] "in" "(" value ("," value)* ")"
    value     := number | "double-quoted" | 'single-quoted' | true | false

``status = "open" and (priority = "P1" or age >= 30)`` becomes
``And((Eq("status", "open"), Or((Eq("priority", "P1"), Range("age", gte=30)))))``. ``!=`` is
``Not(Eq)``, so a row without the field passes it (the algebra's two-valued logic, see
:mod:`evermind.vectorstore.filters`); ``<``… take a number or a string (compared by code
point), never a bool. Inside quotes a backslash takes the next character as it is.

:func:`parse_where_json` takes the JSON form instead (a client's ``where`` object), bounded
the same way before :func:`~evermind.vectorstore.filters.parse_filter` reads it.

A mistake is one :class:`~evermind.errors.InputError` naming the 1-based position and what was
expected there (``code="bad_where"``). Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evermind.errors import InputError
from evermind.vectorstore.filters import (
    And,
    Eq,
    Exists,
    Filter,
    In,
    Not,
    Or,
    Range,
    parse_filter,
)
from evermind.vectorstore.port import MetaValue

__all__ = ["MAX_WHERE_CHARS", "parse_where", "parse_where_json"]

#: The longest expression taken (a filter, not a program).
MAX_WHERE_CHARS = 4096
#: How deeply parentheses and ``not`` may nest.
MAX_DEPTH = 32

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<number>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op><=|>=|!=|==|=|<|>|\(|\)|,)
    | (?P<quote>["'])
    )""",
    re.VERBOSE,
)
_KEYWORDS = frozenset({"and", "or", "not", "in", "exists", "true", "false"})
_VALUE = "a value (a number, a quoted string, true or false)"


@dataclass(frozen=True)
class _Token:
    kind: str  # number | name | keyword | op | string | end
    text: str
    value: MetaValue | None
    position: int  # 0-based offset of the token's first character


def _strings(text: str, start: int, quote: str) -> tuple[str, int]:
    """The quoted string opening at ``start`` (after the quote) and the offset past it."""
    out = []
    i = start
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if char == quote:
            return "".join(out), i + 1
        out.append(char)
        i += 1
    raise InputError(
        f"where: position {start}: string opened here has no closing {quote}",
        code="bad_where",
    )


def _tokens(text: str) -> list[_Token]:
    tokens = []
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            tokens.append(_Token("end", "", None, i))
            return tokens
        match = _TOKEN.match(text, i)
        if match is None:
            raise InputError(
                f"where: position {i + 1}: unexpected character {text[i]!r}; expected a field "
                "name, an operator (= != < <= > >= in), a value, 'and', 'or', 'not' or "
                "parentheses",
                code="bad_where",
            )
        at = match.start(match.lastgroup or 0)
        kind = match.lastgroup or ""
        if kind == "quote":
            value, i = _strings(text, at + 1, match.group("quote"))
            tokens.append(_Token("string", text[at:i], value, at))
            continue
        word = match.group(kind)
        i = match.end()
        if kind == "number":
            number: MetaValue = float(word) if any(c in word for c in ".eE") else int(word)
            tokens.append(_Token("number", word, number, at))
        elif kind == "name" and word.lower() in _KEYWORDS:
            tokens.append(_Token("keyword", word.lower(), None, at))
        else:
            tokens.append(_Token(kind, word, None, at))


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.index = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def fail(self, expected: str) -> InputError:
        token = self.token
        got = "the end" if token.kind == "end" else repr(token.text)
        return InputError(
            f"where: position {token.position + 1}: expected {expected}, got {got}",
            code="bad_where",
        )

    def accept(self, kind: str, text: str) -> bool:
        if self.token.kind == kind and self.token.text == text:
            self.index += 1
            return True
        return False

    def expect(self, kind: str, text: str, expected: str) -> None:
        if not self.accept(kind, text):
            raise self.fail(expected)

    def expression(self, depth: int) -> Filter:
        if depth > MAX_DEPTH:
            raise self.fail(f"at most {MAX_DEPTH} levels of parentheses and 'not'")
        parts = [self.conjunction(depth)]
        while self.accept("keyword", "or"):
            parts.append(self.conjunction(depth))
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def conjunction(self, depth: int) -> Filter:
        parts = [self.unary(depth)]
        while self.accept("keyword", "and"):
            parts.append(self.unary(depth))
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def unary(self, depth: int) -> Filter:
        if self.accept("keyword", "not"):
            if depth + 1 > MAX_DEPTH:
                raise self.fail(f"at most {MAX_DEPTH} levels of parentheses and 'not'")
            return Not(self.unary(depth + 1))
        if self.accept("op", "("):
            inner = self.expression(depth + 1)
            self.expect("op", ")", "')' or 'and'/'or'")
            return inner
        if self.accept("keyword", "exists"):
            return Exists(self.field())
        return self.comparison()

    def field(self) -> str:
        token = self.token
        if token.kind != "name":
            raise self.fail("a field name (letters, digits and '_', not starting with a digit)")
        if len(token.text) > 64:
            raise self.fail("a field name of at most 64 characters")
        self.index += 1
        return token.text

    def value(self) -> MetaValue:
        token = self.token
        if token.kind in ("number", "string"):
            self.index += 1
            assert token.value is not None
            return token.value
        if token.kind == "keyword" and token.text in ("true", "false"):
            self.index += 1
            return token.text == "true"
        raise self.fail(_VALUE)

    def comparison(self) -> Filter:
        if self.token.kind != "name":
            raise self.fail("a condition (field = value, exists field, not …, or '(')")
        name = self.field()
        negate = self.accept("keyword", "not")
        if negate or self.accept("keyword", "in"):
            if negate:
                self.expect("keyword", "in", "'in' after 'not'")
            self.expect("op", "(", "'(' opening the list of values")
            values = [self.value()]
            while self.accept("op", ","):
                values.append(self.value())
            self.expect("op", ")", "',' or ')' closing the list of values")
            node: Filter = In(name, tuple(values))
            return Not(node) if negate else node
        token = self.token
        if token.kind != "op" or token.text not in ("=", "==", "!=", "<", "<=", ">", ">="):
            raise self.fail("an operator (= != < <= > >= in, not in)")
        self.index += 1
        value_at = self.token
        value = self.value()
        if token.text in ("=", "=="):
            return Eq(name, value)
        if token.text == "!=":
            return Not(Eq(name, value))
        if isinstance(value, bool):
            raise InputError(
                f"where: position {value_at.position + 1}: expected a number or a quoted "
                f"string after {token.text!r}, got {value_at.text!r}",
                code="bad_where",
            )
        bound = {"<": "lt", "<=": "lte", ">": "gt", ">=": "gte"}[token.text]
        return Range(name, **{bound: value})


def parse_where(text: str) -> Filter:
    """The filter ``text`` says, checked as :func:`~evermind.vectorstore.filters.parse_filter`
    checks one.

    Raises:
        InputError: A mistake (one line: the 1-based position and what was expected there),
            an empty or over-long expression, or a field or value the algebra refuses.
    """
    if not isinstance(text, str):
        raise InputError(f"where: expected a string, got {type(text).__name__}", code="bad_where")
    if len(text) > MAX_WHERE_CHARS:
        raise InputError(
            f"where: {len(text)} characters, over the limit of {MAX_WHERE_CHARS}",
            code="bad_where",
        )
    parser = _Parser(text)
    node = parser.expression(0)
    if parser.token.kind != "end":
        raise parser.fail("'and', 'or' or the end")
    checked = parse_filter(node)
    assert checked is not None
    return checked


#: The most operators and values one JSON filter may hold.
MAX_JSON_NODES = 1024


def parse_where_json(spec: object) -> Filter | None:
    """The JSON form (``{"eq": ["status", "open"]}``, see
    :mod:`evermind.vectorstore.filters`) as a filter; None stays None.

    Bounded before it is read: at most :data:`MAX_DEPTH` levels deep and
    :data:`MAX_JSON_NODES` objects, lists and values, so a client's filter cannot exhaust
    the parser's stack.

    Raises:
        InputError: Too deep or too large, or what ``parse_filter`` refuses (an unknown
            operator, a bad operand, field or value), the message naming it.
    """
    if spec is None:
        return None
    count = 0
    stack: list[tuple[object, int]] = [(spec, 0)]  # (part, objects above it)
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:  # depth counts objects (operators), not their lists
            raise InputError(
                f"where: the filter nests deeper than {MAX_DEPTH} levels", code="bad_filter"
            )
        if count > MAX_JSON_NODES:
            raise InputError(
                f"where: the filter holds more than {MAX_JSON_NODES} parts", code="bad_filter"
            )
        if isinstance(node, dict):
            stack.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list | tuple):
            stack.extend((value, depth) for value in node)
    return parse_filter(spec)
