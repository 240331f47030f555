"""BERT's uncased WordPiece tokenizer in pure Python (browser-safe).

This module owns the tokenizer of the base embedder: the same ids as Hugging Face's
``BertTokenizer`` (``tokenizers``' ``BertNormalizer`` + ``BertPreTokenizer`` + ``WordPiece``)
with the uncased 30,522-token vocabulary of all-MiniLM-L6-v2, so the static token table
distilled from that teacher is indexed by the teacher's own ids. The steps:

1. clean: drop NUL, U+FFFD and control, format and private-use characters (tab, newline and
   carriage return are whitespace), map every whitespace character to a space;
2. put spaces around CJK ideographs, so each becomes a word;
3. strip accents (NFD, then drop non-spacing marks) and lowercase;
4. split on whitespace, and split every punctuation character (ASCII symbols included) off
   as its own word;
5. WordPiece: each word is cut greedily into the longest vocabulary entries, later pieces
   spelt with ``##``; a word with a piece not in the vocabulary, or longer than 100
   characters, becomes ``[UNK]``.

Which characters are dropped (step 1 and the marks of step 3) and which split off (step 4)
comes from ``data/wordpiece_unicode.json``, read off ``tokenizers`` by
:mod:`evermind.embedder.unicode_table`, not from :mod:`unicodedata` (see :class:`_Classes`).
Words are memoised (a bounded dictionary), since text repeats its words.
"""

from __future__ import annotations

import functools
import json
import unicodedata
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from importlib.resources import files

from evermind.errors import TokenizerError

#: Longest word WordPiece splits; a longer one is ``[UNK]`` (``max_input_chars_per_word``).
MAX_CHARS_PER_WORD = 100
#: Prefix of a piece that continues a word.
CONTINUATION = "##"
#: Words remembered per tokenizer before the memo is cleared.
MEMO_LIMIT = 200_000

#: The table of character classes (``data/wordpiece_unicode.json``).
TABLE_NAME = "wordpiece_unicode.json"

# Unicode's White_Space property (what Rust's ``char::is_whitespace`` reads); Python's
# ``str.isspace`` also counts U+001C..U+001F, which BERT drops as control characters.
_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
# The CJK Unified Ideographs blocks BERT isolates (its ``_is_chinese_char``), as
# ``tokenizers`` spells them: its fifth range starts at U+2B920, not BERT's U+2B820.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
_NORMAL, _REMOVED, _PUNCTUATION = 0, 1, 2


class _Classes:
    """Which characters the tokenizer drops and which it splits off, from the shipped table.

    The table is frozen rather than read from :mod:`unicodedata`, because ``tokenizers``
    classifies by an older Unicode version than any current Python: about 500 characters
    assigned since (U+0890, U+2E55, …) are letters to it but format marks or punctuation to
    ``unicodedata``, and the answer would change between CPython 3.11 and Pyodide's 3.14.
    """

    def __init__(self, table: dict[str, list[list[int]]]) -> None:
        ranges = [(lo, hi, _REMOVED) for lo, hi in table["removed"]]
        ranges += [(lo, hi, _PUNCTUATION) for lo, hi in table["punctuation"]]
        ranges.sort()
        self._starts = [lo for lo, _, _ in ranges]
        self._ranges = ranges
        self._memo: dict[str, int] = {}

    def of(self, char: str) -> int:
        known = self._memo.get(char)
        if known is not None:
            return known
        code = ord(char)
        at = bisect_right(self._starts, code) - 1
        found = _NORMAL
        if at >= 0 and code <= self._ranges[at][1]:
            found = self._ranges[at][2]
        self._memo[char] = found
        return found


@functools.cache
def _classes() -> _Classes:
    raw = files("evermind.embedder").joinpath("data", TABLE_NAME).read_text("utf-8")
    return _Classes(json.loads(raw))


def _is_cjk(code: int) -> bool:
    return any(low <= code <= high for low, high in _CJK_RANGES)


def normalize(text: str) -> str:
    """Steps 1–3: cleaned, CJK spaced, accents stripped and lowercased."""
    classes = _classes()
    out: list[str] = []
    for char in text:
        # Dropped before whitespace is mapped: U+000B, U+000C and U+0085 vanish.
        if classes.of(char) == _REMOVED:
            continue
        if char in _WHITESPACE:
            out.append(" ")
            continue
        code = ord(char)
        if code >= 0x3400 and _is_cjk(code):
            out.extend((" ", char, " "))
        else:
            out.append(char)
    cleaned = "".join(out)
    if not cleaned.isascii():
        # Accents: decompose, then drop the non-spacing marks (the table's removed class).
        decomposed = unicodedata.normalize("NFD", cleaned)
        cleaned = "".join(c for c in decomposed if classes.of(c) != _REMOVED)
    return cleaned.lower()


def pre_tokenize(normalized: str) -> list[str]:
    """Step 4: whitespace-separated words with every punctuation character on its own."""
    classes = _classes()
    words: list[str] = []
    for chunk in normalized.split(" "):
        if not chunk:
            continue
        if chunk.isalnum():
            words.append(chunk)
            continue
        start = 0
        for i, char in enumerate(chunk):
            if classes.of(char) == _PUNCTUATION:
                if start < i:
                    words.append(chunk[start:i])
                words.append(char)
                start = i + 1
        if start < len(chunk):
            words.append(chunk[start:])
    return words


class WordPiece:
    """Text to ids with a BERT uncased vocabulary.

    Args:
        vocab: The tokens in id order (``vocab.txt``'s lines); must hold ``[UNK]``, ``[CLS]``
            and ``[SEP]``.

    Raises:
        TokenizerError: The vocabulary is empty, has a duplicate, or lacks a special token.
    """

    def __init__(self, vocab: Sequence[str]) -> None:
        ids: dict[str, int] = {}
        for index, token in enumerate(vocab):
            if not isinstance(token, str) or not token:
                raise TokenizerError(
                    f"wordpiece vocabulary entry {index} is {token!r}; expected a non-empty str"
                )
            if token in ids:
                raise TokenizerError(
                    f"wordpiece vocabulary has {token!r} twice (ids {ids[token]} and {index})"
                )
            ids[token] = index
        missing = [t for t in ("[UNK]", "[CLS]", "[SEP]") if t not in ids]
        if missing:
            raise TokenizerError(
                f"wordpiece vocabulary of {len(ids)} tokens lacks {missing}; expected a BERT "
                "vocabulary"
            )
        self.vocab: list[str] = list(vocab)
        self.ids = ids
        self.unk_id = ids["[UNK]"]
        self.cls_id = ids["[CLS]"]
        self.sep_id = ids["[SEP]"]
        self._memo: dict[str, tuple[int, ...]] = {}

    @classmethod
    def from_text(cls, text: str) -> WordPiece:
        """From the contents of a ``vocab.txt`` (one token per line)."""
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return cls([line.rstrip("\r") for line in lines])

    @property
    def vocab_size(self) -> int:
        """Number of tokens."""
        return len(self.vocab)

    def word_ids(self, word: str) -> tuple[int, ...]:
        """Step 5 for one pre-tokenized word."""
        known = self._memo.get(word)
        if known is not None:
            return known
        pieces: list[int] = []
        if len(word) > MAX_CHARS_PER_WORD:
            pieces.append(self.unk_id)
        else:
            start = 0
            while start < len(word):
                end = len(word)
                found = -1
                while start < end:
                    piece = word[start:end] if start == 0 else CONTINUATION + word[start:end]
                    found = self.ids.get(piece, -1)
                    if found >= 0:
                        break
                    end -= 1
                if found < 0:
                    pieces = [self.unk_id]
                    break
                pieces.append(found)
                start = end
        result = tuple(pieces)
        if len(self._memo) >= MEMO_LIMIT:
            self._memo.clear()
        self._memo[word] = result
        return result

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """The ids of ``text`` (with ``[CLS]`` … ``[SEP]`` around them when asked).

        Raises:
            TokenizerError: ``text`` is not a str.
        """
        if not isinstance(text, str):
            raise TokenizerError(f"wordpiece encode takes a str, got {type(text).__name__}")
        out: list[int] = [self.cls_id] if add_special_tokens else []
        for word in pre_tokenize(normalize(text)):
            out.extend(self.word_ids(word))
        if add_special_tokens:
            out.append(self.sep_id)
        return out

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        """:meth:`encode` of each text."""
        return [self.encode(text) for text in texts]

    def tokens(self, ids: Iterable[int]) -> list[str]:
        """The vocabulary entries of ``ids``."""
        return [self.vocab[i] for i in ids]
