"""The frozen Unicode classes and the Oniguruma -> Python pattern translation."""

from __future__ import annotations

import itertools
import re
import unicodedata

import pytest

from evermind.errors import TokenizerError
from evermind.tokenizer.pretokenizer import (
    EVERMIND_PATTERN,
    GPT2_PATTERN,
    PreTokenizer,
    SplitRule,
    translate_pattern,
)
from evermind.tokenizer.unicode_tables import (
    LETTER,
    MARK,
    NUMBER,
    UNICODE_VERSION,
    WHITESPACE,
    class_body,
)

CLASSES = {r"\p{L}": LETTER, r"\p{M}": MARK, r"\p{N}": NUMBER, r"\s": WHITESPACE}
ALL_CHARS = "".join(chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF)


def _expand(ranges: tuple[tuple[int, int], ...]) -> set[int]:
    return {cp for start, end in ranges for cp in range(start, end + 1)}


def test_tables_are_sorted_disjoint_ranges() -> None:
    seen: set[int] = set()
    for ranges in CLASSES.values():
        for (start, end), (next_start, _) in itertools.pairwise(ranges):
            assert start <= end < next_start - 1  # sorted, and adjacent ranges were joined
        members = _expand(ranges)
        assert not members & seen
        seen |= members
    assert {0x20, 0x09, 0x0A, 0x85, 0xA0, 0x2028, 0x3000} <= _expand(WHITESPACE)
    assert 0x1C not in _expand(WHITESPACE)  # str.isspace() says yes, Oniguruma says no


@pytest.mark.slow
@pytest.mark.parametrize("onig_class", sorted(CLASSES))
def test_classes_equal_the_oniguruma_inside_hf_tokenizers(onig_class: str) -> None:
    """Every code point: our frozen class == what HF's regex engine matches."""
    tokenizers = pytest.importorskip(
        "tokenizers", reason="the oniguruma cross-check needs HF tokenizers (test extra)"
    )
    removed = tokenizers.pre_tokenizers.Split(tokenizers.Regex(onig_class), behavior="removed")
    kept = {char for piece, _ in removed.pre_tokenize_str(ALL_CHARS) for char in piece}
    onig_members = {ord(char) for char in ALL_CHARS if char not in kept}
    ours = _expand(CLASSES[onig_class])
    assert ours == onig_members, sorted(ours ^ onig_members)[:10]
    # The translated Python class agrees too (covers class_body and the escapes).
    python_class = re.compile(translate_pattern(onig_class))
    assert {ord(char) for char in python_class.findall(ALL_CHARS)} == ours


@pytest.mark.skipif(
    unicodedata.unidata_version != UNICODE_VERSION,
    reason=f"this Python has Unicode {unicodedata.unidata_version}, tables are {UNICODE_VERSION}",
)
def test_classes_equal_unicodedata_of_the_same_version() -> None:
    by_major: dict[str, set[int]] = {"L": set(), "M": set(), "N": set()}
    spaces = set()
    for cp in range(0x110000):
        category = unicodedata.category(chr(cp))
        if category[0] in by_major:
            by_major[category[0]].add(cp)
        if category in ("Zs", "Zl", "Zp") or cp in (9, 10, 11, 12, 13, 0x85):
            spaces.add(cp)
    assert _expand(LETTER) == by_major["L"]
    assert _expand(MARK) == by_major["M"]
    assert _expand(NUMBER) == by_major["N"]
    assert _expand(WHITESPACE) == spaces


def test_class_body_escapes_ranges() -> None:
    assert class_body(((0x41, 0x5A), (0x1F600, 0x1F600))) == r"\U00000041-\U0000005a\U0001f600"


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("don't we'll", ["don", "'t", " we", "'ll"]),
        ("1234567", ["123", "456", "7"]),
        ("x 12", ["x", " 12"]),
        ("e\u0301te\u0301", ["e\u0301te\u0301"]),
        ("a ❤️!", ["a", " ❤️!"]),
        ("a  b\n\n c", ["a", " ", " b", "\n\n", " c"]),
        ("end   ", ["end", "   "]),
        ("中文abc", ["中文abc"]),
        ("", []),
    ],
)
def test_default_pre_tokenizer_examples(text: str, pieces: list[str]) -> None:
    assert PreTokenizer.default().split(text) == pieces


def test_gpt2_pattern_keeps_long_numbers_and_splits_marks() -> None:
    gpt2 = PreTokenizer([SplitRule(GPT2_PATTERN)])
    assert gpt2.split("1234567 e\u0301") == ["1234567", " e", "\u0301"]


def test_split_rule_keeps_gaps_between_matches() -> None:
    assert SplitRule(r"\p{N}+").split("ab12cd3") == ["ab", "12", "cd", "3"]
    assert SplitRule("--", is_regex=False).split("a--b") == ["a", "--", "b"]


def test_prefix_space_and_gpt2_regex_follow_hf_order() -> None:
    chain = PreTokenizer([SplitRule(r"\|")], add_prefix_space=True, use_regex=True)
    assert chain.split("hi|yo you") == [" hi", " |", " yo", " you"]


def test_translate_spells_out_classes() -> None:
    source = translate_pattern(r"[^\s\p{L}]+|\S|\P{N}|\x{1F600}|\r\n")
    assert r"\p" not in source and r"\s" not in source
    regex = re.compile(source)
    match = regex.match("😀")
    assert match is not None and match.group() == "😀"


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"\d+", r"the escape \\d"),
        (r"\w", r"the escape \\w"),
        (r"\p{Greek}", "property"),
        (r"[^\S]", "negated class inside"),
        (r"[a[b]]", "nested"),
        (r"[a&&b]", "intersection"),
        (r"[abc", "never closed"),
        ("abc\\", "trailing backslash"),
        (r"\p{L", "unclosed"),
        (r"(?<=a+)b", "does not compile"),
    ],
)
def test_translate_refuses_what_it_cannot_match_exactly(pattern: str, message: str) -> None:
    with pytest.raises(TokenizerError, match=message):
        SplitRule(pattern).compiled()


def test_default_pattern_covers_every_character() -> None:
    pieces = SplitRule(EVERMIND_PATTERN).compiled().findall(ALL_CHARS[:200_000])
    assert "".join(pieces) == ALL_CHARS[:200_000]


def test_pre_tokenizer_json_round_trip() -> None:
    for chain in (
        PreTokenizer.default(),
        PreTokenizer(add_prefix_space=True, use_regex=True),
        PreTokenizer([SplitRule("x", is_regex=False), SplitRule(r"\s+")]),
    ):
        assert PreTokenizer.from_hf(chain.to_hf()) == chain
    with pytest.raises(TokenizerError, match="Isolated"):
        PreTokenizer.from_hf(
            {
                "type": "Sequence",
                "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Removed"},
                    {"type": "ByteLevel"},
                ],
            }
        )
