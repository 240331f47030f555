"""The pre-tokeniser: cuts text into words before BPE, exactly as Hugging Face would.

BPE never merges across the pieces this module produces. The default pattern is GPT-2's
with two changes (numbers in chunks of at most three digits, as GPT-4 and Llama 3 do, and
combining marks kept with the letters they modify)::

    's|'t|'re|'ve|'m|'ll|'d| ?[\\p{L}\\p{M}]+| ?\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

Every character matches one alternative, so the pieces cover the text. Marks that follow
a letter join its run; marks after punctuation or an emoji (e.g. the variation selector
U+FE0F) join that run, since ``[^\\s\\p{L}\\p{N}]`` also matches marks.

Patterns are stored in the Oniguruma dialect that Hugging Face ``tokenizers`` compiles
(``Split`` pre-tokenizer), and translated here into Python ``re`` with the ``\\p{..}`` and
``\\s`` classes spelled out from :mod:`evermind.tokenizer.unicode_tables`. Both engines
backtrack and take the first alternative that matches, so the pieces are identical.
The class :class:`PreTokenizer` models the Hugging Face chain ``Split(pattern,
Isolated)* -> ByteLevel(add_prefix_space, use_regex)``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evermind.errors import TokenizerError
from evermind.tokenizer.unicode_tables import LETTER, MARK, NUMBER, WHITESPACE, class_body

__all__ = [
    "EVERMIND_PATTERN",
    "GPT2_PATTERN",
    "PreTokenizer",
    "SplitRule",
    "translate_pattern",
]

EVERMIND_PATTERN = (
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[\p{L}\p{M}]+| ?\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
)
"""Evermind's pre-tokeniser pattern (Oniguruma syntax, as written into ``tokenizer.json``)."""

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
"""The pattern Hugging Face's ``ByteLevel(use_regex=True)`` applies (GPT-2's)."""

_PROPERTIES: Mapping[str, tuple[tuple[int, int], ...]] = {
    "L": LETTER,
    "Letter": LETTER,
    "M": MARK,
    "Mark": MARK,
    "Combining_Mark": MARK,
    "N": NUMBER,
    "Number": NUMBER,
}

# Escapes whose meaning is the same in Oniguruma and Python ``re`` and independent of
# Unicode tables; anything else with a letter is refused rather than guessed.
_PLAIN_ESCAPES = frozenset("tnrfvaA")


def _unsupported(pattern: str, position: int, what: str) -> TokenizerError:
    return TokenizerError(
        f"pre-tokenizer pattern {pattern!r}: {what} at offset {position} is not supported; "
        "expected \\p{L}, \\p{M}, \\p{N} (or \\P{..} outside brackets), \\s, \\S, "
        "\\t \\n \\r \\f \\v, \\xHH, \\x{HHHH}, \\uHHHH, escaped punctuation "
        "(hint: rewrite the pattern with these classes)"
    )


def _read_braced(pattern: str, start: int) -> tuple[str, int]:
    """Returns the text inside ``{...}`` that opens at ``start`` and the offset after it."""
    if pattern[start : start + 1] != "{":
        raise _unsupported(pattern, start, "an escape without its {...} argument")
    close = pattern.find("}", start)
    if close < 0:
        raise _unsupported(pattern, start, "an unclosed {")
    return pattern[start + 1 : close], close + 1


def _translate_escape(pattern: str, index: int, in_class: bool) -> tuple[str, int]:
    """Translates the escape at ``pattern[index] == '\\\\'``; returns (text, next offset)."""
    if index + 1 >= len(pattern):
        raise _unsupported(pattern, index, "a trailing backslash")
    letter = pattern[index + 1]
    after = index + 2
    if letter in "pP":
        name, after = _read_braced(pattern, after)
        negated = letter == "P"
        if name.startswith("^"):
            negated, name = not negated, name[1:]
        if name not in _PROPERTIES:
            raise _unsupported(pattern, index, f"the property \\{letter}{{{name}}}")
        body = class_body(_PROPERTIES[name])
    elif letter in "sS":
        negated = letter == "S"
        body = class_body(WHITESPACE)
    elif letter == "x" and pattern[after : after + 1] == "{":
        hex_digits, after = _read_braced(pattern, after)
        try:
            return f"\\U{int(hex_digits, 16):08x}", after
        except ValueError as err:
            raise _unsupported(pattern, index, f"the code point \\x{{{hex_digits}}}") from err
    elif letter in "xu" or letter in _PLAIN_ESCAPES or not letter.isalnum():
        return pattern[index:after], after
    elif letter == "z":
        return "\\Z", after
    else:
        raise _unsupported(pattern, index, f"the escape \\{letter}")
    if in_class:
        if negated:
            raise _unsupported(pattern, index, "a negated class inside [...]")
        return body, after
    return ("[^" if negated else "[") + body + "]", after


def translate_pattern(pattern: str) -> str:
    """Translates an Oniguruma pre-tokenizer pattern into an equivalent Python ``re`` pattern.

    ``\\p{L}``, ``\\p{M}``, ``\\p{N}``, ``\\s`` and their negations become explicit
    code-point classes frozen at Unicode 16.0; the rest of the syntax the two engines
    share (alternation, groups, ``(?i:...)``, lookaround, greedy/lazy/possessive
    quantifiers) is copied. Use with ``re.MULTILINE``: Oniguruma's Ruby syntax makes
    ``^``/``$`` line anchors.

    Args:
        pattern: The pattern as stored in ``tokenizer.json`` (``Split`` ``Regex``).

    Returns:
        Python ``re`` source text.

    Raises:
        TokenizerError: The pattern uses a construct whose meaning differs between the two
            engines or depends on Unicode tables we do not freeze (``\\d``, ``\\w``, ...).
    """
    out: list[str] = []
    index = 0
    in_class = False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            text, index = _translate_escape(pattern, index, in_class)
            out.append(text)
            continue
        if char == "[":
            if in_class:
                raise _unsupported(pattern, index, "a nested [ (Oniguruma set syntax)")
            in_class = True
            out.append("[")
            index += 1
            if pattern[index : index + 1] == "^":
                out.append("^")
                index += 1
            continue
        if in_class and char == "]":
            in_class = False
        elif in_class and pattern.startswith("&&", index):
            raise _unsupported(pattern, index, "class intersection &&")
        out.append(char)
        index += 1
    if in_class:
        raise TokenizerError(
            f"pre-tokenizer pattern {pattern!r} opens a [ that is never closed; expected a "
            "balanced character class (hint: escape a literal bracket as \\[)"
        )
    return "".join(out)


@functools.lru_cache(maxsize=32)
def _compile(pattern: str, is_regex: bool) -> re.Pattern[str]:
    source = translate_pattern(pattern) if is_regex else re.escape(pattern)
    try:
        return re.compile(source, re.MULTILINE)
    except re.error as err:
        raise TokenizerError(
            f"pre-tokenizer pattern {pattern!r} does not compile in Python re: {err}; "
            "expected syntax common to Oniguruma and Python (hint: write named groups "
            "as (?:...) and avoid engine-specific constructs)"
        ) from err


@dataclass(frozen=True)
class SplitRule:
    """One Hugging Face ``Split`` step with ``behavior: Isolated``, ``invert: false``.

    Matches and the gaps between them both become pieces; empty pieces are dropped.

    Attributes:
        pattern: The Oniguruma regex (or literal string when ``is_regex`` is false).
        is_regex: Whether ``pattern`` is a regex (``{"Regex": ...}``) or ``{"String": ...}``.
    """

    pattern: str
    is_regex: bool = True

    def compiled(self) -> re.Pattern[str]:
        """Returns the translated, compiled pattern (cached).

        Raises:
            TokenizerError: The pattern cannot be translated or compiled.
        """
        return _compile(self.pattern, self.is_regex)

    def split(self, text: str) -> list[str]:
        """Splits ``text`` into matches and the gaps between them, in order.

        Args:
            text: One segment of input text.

        Returns:
            Non-empty pieces whose concatenation is ``text``.
        """
        regex = self.compiled()
        if not regex.groups:
            pieces = regex.findall(text)
            # Fast path: the matches cover the whole text (true for the default pattern).
            if sum(map(len, pieces)) == len(text):
                return [piece for piece in pieces if piece]
        pieces = []
        position = 0
        for match in regex.finditer(text):
            start, end = match.span()
            if start > position:
                pieces.append(text[position:start])
            if end > start:
                pieces.append(text[start:end])
            position = max(position, end)
        if position < len(text):
            pieces.append(text[position:])
        return pieces


_GPT2_RULE = SplitRule(GPT2_PATTERN)


class PreTokenizer:
    """Hugging Face's ``Split(...)* -> ByteLevel(...)`` pre-tokenizer chain in pure Python.

    Args:
        splits: ``Split`` steps applied in order, each to every piece of the previous one.
        add_prefix_space: ``ByteLevel.add_prefix_space``: prepend a space to every piece
            that does not start with one.
        use_regex: ``ByteLevel.use_regex``: after that, split with :data:`GPT2_PATTERN`.
    """

    def __init__(
        self,
        splits: Sequence[SplitRule] = (),
        *,
        add_prefix_space: bool = False,
        use_regex: bool = False,
    ) -> None:
        self.splits = tuple(splits)
        self.add_prefix_space = add_prefix_space
        self.use_regex = use_regex
        for rule in self.splits:
            rule.compiled()  # fail early on a bad pattern

    @classmethod
    def default(cls) -> PreTokenizer:
        """Returns Evermind's pre-tokenizer: ``Split(EVERMIND_PATTERN) -> ByteLevel``."""
        return cls([SplitRule(EVERMIND_PATTERN)])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PreTokenizer):
            return NotImplemented
        return self.to_hf() == other.to_hf()

    def __hash__(self) -> int:
        return hash((self.splits, self.add_prefix_space, self.use_regex))

    def __repr__(self) -> str:
        return (
            f"PreTokenizer(splits={list(self.splits)!r}, "
            f"add_prefix_space={self.add_prefix_space}, use_regex={self.use_regex})"
        )

    def split(self, text: str) -> list[str]:
        """Cuts one segment of text (no special tokens inside) into pre-tokens.

        Args:
            text: The segment.

        Returns:
            Non-empty pieces; without ``add_prefix_space`` they concatenate to ``text``.
        """
        if not text:
            return []
        pieces = [text]
        for rule in self.splits:
            if len(pieces) == 1:
                pieces = rule.split(pieces[0])
            else:
                pieces = [part for piece in pieces for part in rule.split(piece)]
        if self.add_prefix_space:
            pieces = [piece if piece.startswith(" ") else " " + piece for piece in pieces]
        if self.use_regex:
            pieces = [part for piece in pieces for part in _GPT2_RULE.split(piece)]
        return pieces

    def to_hf(self) -> dict[str, Any]:
        """Returns the Hugging Face ``pre_tokenizer`` JSON object for this chain."""
        byte_level = {
            "type": "ByteLevel",
            "add_prefix_space": self.add_prefix_space,
            "trim_offsets": True,
            "use_regex": self.use_regex,
        }
        if not self.splits:
            return byte_level
        splits: list[dict[str, Any]] = [
            {
                "type": "Split",
                "pattern": {"Regex" if rule.is_regex else "String": rule.pattern},
                "behavior": "Isolated",
                "invert": False,
            }
            for rule in self.splits
        ]
        return {"type": "Sequence", "pretokenizers": [*splits, byte_level]}

    @classmethod
    def from_hf(cls, config: object) -> PreTokenizer:
        """Builds a pre-tokenizer from a Hugging Face ``pre_tokenizer`` JSON object.

        Accepts ``ByteLevel`` alone, or a ``Sequence`` of ``Split`` steps (behaviour
        ``Isolated``, not inverted) ending in ``ByteLevel``.

        Args:
            config: The parsed JSON value.

        Returns:
            The equivalent :class:`PreTokenizer`.

        Raises:
            TokenizerError: The configuration is not one of the supported shapes.
        """
        steps: list[Any]
        if isinstance(config, dict) and config.get("type") == "Sequence":
            steps = config.get("pretokenizers") or []
        else:
            steps = [config]
        if not steps or not isinstance(steps[-1], dict) or steps[-1].get("type") != "ByteLevel":
            raise TokenizerError(
                f"pre_tokenizer {_short(config)} is not supported; expected ByteLevel, or a "
                "Sequence of Split steps ending in ByteLevel (hint: only byte-level BPE "
                "tokenizers can be loaded)"
            )
        byte_level = steps[-1]
        return cls(
            [_split_rule_from_hf(step) for step in steps[:-1]],
            add_prefix_space=bool(byte_level.get("add_prefix_space", True)),
            use_regex=bool(byte_level.get("use_regex", True)),
        )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _split_rule_from_hf(step: object) -> SplitRule:
    if not isinstance(step, dict) or step.get("type") != "Split":
        raise TokenizerError(
            f"pre_tokenizer step {_short(step)} is not supported; expected a Split step "
            "before the final ByteLevel (hint: Evermind reads Split + ByteLevel chains)"
        )
    behavior = step.get("behavior")
    if behavior != "Isolated" or step.get("invert", False):
        raise TokenizerError(
            f"Split behavior {behavior!r} (invert={step.get('invert')!r}) is not supported; "
            "expected behavior 'Isolated' with invert false"
        )
    pattern = step.get("pattern")
    if isinstance(pattern, dict) and isinstance(pattern.get("Regex"), str):
        return SplitRule(pattern["Regex"], is_regex=True)
    if isinstance(pattern, dict) and isinstance(pattern.get("String"), str):
        return SplitRule(pattern["String"], is_regex=False)
    raise TokenizerError(
        f"Split pattern {_short(pattern)} is invalid; expected {{'Regex': str}} or "
        "{'String': str}"
    )
