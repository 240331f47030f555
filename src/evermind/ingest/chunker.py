"""The chunker: sections cut into chunks of at most ``size`` units, with ``overlap``.

Units are the model tokenizer's tokens when a tokenizer is given (anything with
``encode(text) -> list[int]``), else whitespace-separated words. The rules, in order:

1. A chunk never spans two sections, so its breadcrumbs are exact. Its content is the
   breadcrumb line (``Guide > Install > Linux``), a blank line, then the text; the
   breadcrumb line counts towards ``size`` but never leaves less than half of it for the
   text (a chunk a long breadcrumb pushes over the size is flagged ``oversize``).
2. A fenced code block (```` ``` ```` / ``~~~``) is never split. One longer than the size
   is a chunk of its own, flagged ``oversize``.
3. Text is cut at paragraph boundaries (blank lines) first; a paragraph longer than the size
   is cut at sentence ends (and before list items), a sentence longer than the size between
   words. A word is never split; a single word longer than the size is a chunk of its own,
   flagged ``oversize``.
4. Consecutive chunks of one section share ``overlap`` units: the next chunk starts with the
   last words of the previous one (never words of a code block). The overlap is dropped when
   it and the next piece would not fit together.

Token counts are summed per piece (a paragraph, a sentence, a word with the space before it):
the byte-level BPE pre-splits text at exactly those places, so the sum equals the count of
the whole chunk. Browser-safe: standard library only.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from evermind.errors import ConfigError
from evermind.ingest.documents import CRUMB_SEPARATOR, Document, Section
from evermind.ingest.markdown import closes_fence, fence_opener

#: The probe a tokenizer without a ``fingerprint`` is identified by (its ids of this text).
_TOKENIZER_PROBE = "Evermind chunker probe: ingest, chunk_size=200; naïve façade 12345."
_SENTENCE_END = re.compile(
    r"(?<=[.!?])[\"')\]]*[ \t\n]+(?=[^\sa-z])|\n(?=[ \t]*(?:[-*+]|\d+[.)])[ \t])"
)
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Chunk:
    """One piece of a source, as it becomes a memory.

    Attributes:
        source: The source id.
        position: Its index among the source's chunks (0-based, reading order).
        text: The chunk's text (without the breadcrumb line).
        breadcrumbs: The headings above it, outermost first.
        line: The source line where the chunk's new text starts (after any overlap).
        units: Its size in the chunker's unit, breadcrumb line included.
        oversize: Longer than the size: a code block or a word that could not be cut, or
            text under a breadcrumb longer than half the size.
        meta: The section's and the document's extra fields.
    """

    source: str
    position: int
    text: str
    breadcrumbs: tuple[str, ...] = ()
    line: int = 1
    units: int = 0
    oversize: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def breadcrumb(self) -> str:
        """The breadcrumbs joined, e.g. ``"Guide > Install > Linux"`` (empty without any)."""
        return CRUMB_SEPARATOR.join(self.breadcrumbs)

    @property
    def content(self) -> str:
        """What is stored and embedded: the breadcrumb line, a blank line, the text."""
        return f"{self.breadcrumb}\n\n{self.text}" if self.breadcrumbs else self.text

    @property
    def content_hash(self) -> str:
        """The hex SHA-256 of :attr:`content`."""
        return hashlib.sha256(self.content.encode("utf-8")).hexdigest()

    @property
    def key(self) -> str:
        """The deterministic memory key: ``<source>#<position>@<first 12 of the hash>``."""
        return f"{self.source}#{self.position}@{self.content_hash[:12]}"


@dataclass
class _Piece:
    text: str
    line: int
    joiner: str  # what separates it from the piece before it in the same chunk
    code: bool = False
    overlap: bool = False


class Chunker:
    """Cuts documents into chunks (rules in the module docstring).

    Args:
        size: Most units per chunk (tokens with a tokenizer, else words).
        overlap: Units shared by consecutive chunks of a section; 0 <= overlap < size.
        tokenizer: Anything with ``encode(text) -> list[int]``; None counts words.

    Raises:
        ConfigError: A bad size or overlap, or a tokenizer without ``encode``.
    """

    def __init__(self, size: int = 200, overlap: int = 30, tokenizer: Any = None) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 8:
            raise ConfigError(f"chunker: size must be an integer >= 8, got {size!r}")
        if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < size:
            raise ConfigError(
                f"chunker: overlap must be an integer in [0, size={size}), got {overlap!r}"
            )
        if tokenizer is not None and not callable(getattr(tokenizer, "encode", None)):
            raise ConfigError(
                f"chunker: tokenizer must have encode(text) -> ids, got {type(tokenizer).__name__}"
            )
        self.size = size
        self.overlap = overlap
        self.tokenizer = tokenizer
        self.unit = "words" if tokenizer is None else "tokens"
        self._costs: dict[str, int] = {}

    def count(self, text: str) -> int:
        """The size of ``text`` in this chunker's unit."""
        if self.tokenizer is None:
            return len(text.split())
        cost = self._costs.get(text)
        if cost is None:
            cost = len(self.tokenizer.encode(text))
            if len(self._costs) < 100_000:
                self._costs[text] = cost
        return cost

    def settings(self) -> dict[str, Any]:
        """What decides the chunks (part of each source's manifest fingerprint)."""
        tokenizer = None
        if self.tokenizer is not None:
            tokenizer = getattr(self.tokenizer, "fingerprint", None)
            if not isinstance(tokenizer, str):
                ids = ",".join(map(str, self.tokenizer.encode(_TOKENIZER_PROBE)))
                tokenizer = hashlib.sha256(ids.encode("ascii")).hexdigest()[:16]
        return {
            "size": self.size,
            "overlap": self.overlap,
            "unit": self.unit,
            "tokenizer": tokenizer,
        }

    # ------------------------------------------------------------------ documents

    def chunk(self, document: Document) -> list[Chunk]:
        """Every chunk of ``document``, positions numbered in reading order."""
        out: list[Chunk] = []
        shared = dict(document.meta)
        if document.title:
            shared["title"] = document.title
        for section in document.sections:
            meta = {**shared, **section.meta}
            for text, line, units, oversize in self.split(section):
                chunk = Chunk(
                    document.source,
                    len(out),
                    text,
                    section.breadcrumbs,
                    line,
                    units,
                    oversize,
                    meta,
                )
                out.append(chunk)
        return out

    def split(self, section: Section) -> Iterator[tuple[str, int, int, bool]]:
        """``(text, line, units, oversize)`` of each chunk of one section."""
        header = CRUMB_SEPARATOR.join(section.breadcrumbs)
        reserved = self.count(f"{header}\n\n") if header else 0
        budget = max(self.size - reserved, self.size // 2)
        current: list[_Piece] = []
        cost = 0
        for piece in self._pieces(section, budget):
            alone = self.count(piece.text)
            if alone > budget:
                if current:
                    yield self._emit(current, cost, reserved)
                yield piece.text, piece.line, alone + reserved, True
                current, cost = [], 0
                continue
            joined = self.count(piece.joiner + piece.text) if current else alone
            if current and cost + joined > budget:
                yield self._emit(current, cost, reserved)
                current, cost = self._carry(current), 0
                if current:
                    cost = self.count(current[0].text)
                    joined = self.count(piece.joiner + piece.text)
                    if cost + joined > budget:
                        current, cost, joined = [], 0, alone
                else:
                    joined = alone
            current.append(piece)
            cost += joined
        if current and not all(p.overlap for p in current):
            yield self._emit(current, cost, reserved)

    def _emit(self, pieces: list[_Piece], cost: int, reserved: int) -> tuple[str, int, int, bool]:
        text = pieces[0].text + "".join(p.joiner + p.text for p in pieces[1:])
        line = next((p.line for p in pieces if not p.overlap), pieces[0].line)
        return text, line, cost + reserved, cost + reserved > self.size

    def _carry(self, pieces: list[_Piece]) -> list[_Piece]:
        """The overlap piece the next chunk starts with: the last words of ``pieces``."""
        if self.overlap == 0:
            return []
        words: list[str] = []
        for piece in reversed(pieces):
            if piece.code:
                break
            words[:0] = piece.text.split()
            if len(words) >= self.overlap:
                break
        taken: list[str] = []
        total = 0
        for word in reversed(words):
            step = self.count((" " if taken else "") + word)
            if total + step > self.overlap:
                break
            taken.insert(0, word)
            total += step
        if not taken:
            return []
        return [_Piece(" ".join(taken), pieces[-1].line, "", overlap=True)]

    # ------------------------------------------------------------------ pieces

    def _pieces(self, section: Section, budget: int) -> Iterator[_Piece]:
        """The section as paragraphs and code blocks, the long paragraphs cut smaller."""
        for text, line, code in _blocks(section.text, section.line):
            if code or self.count(text) <= budget:
                yield _Piece(text, line, "\n\n", code=code)
                continue
            first = True
            for sentence, offset, sep in _sentences(text):
                here = line + text.count("\n", 0, offset)
                joiner = "\n\n" if first else sep
                first = False
                if self.count(sentence) <= budget:
                    yield _Piece(sentence, here, joiner)
                    continue
                for index, found in enumerate(_WORD.finditer(sentence)):
                    at = here + sentence.count("\n", 0, found.start())
                    yield _Piece(found.group(), at, joiner if index == 0 else " ")


def _blocks(text: str, first_line: int) -> Iterator[tuple[str, int, bool]]:
    """``(text, line, is_code)`` of each paragraph and fenced code block of ``text``."""
    lines = text.split("\n")
    paragraph: list[str] = []
    start = first_line
    index = 0
    while index < len(lines):
        line = lines[index]
        opener = fence_opener(line)
        if opener is not None:
            if paragraph:
                yield "\n".join(paragraph), start, False
                paragraph = []
            end = index + 1
            while end < len(lines) and not closes_fence(lines[end], opener):
                end += 1
            yield "\n".join(lines[index : end + 1]), first_line + index, True
            index = end + 1
            continue
        if line.strip():
            if not paragraph:
                start = first_line + index
            paragraph.append(line)
        elif paragraph:
            yield "\n".join(paragraph), start, False
            paragraph = []
        index += 1
    if paragraph:
        yield "\n".join(paragraph), start, False


def _sentences(text: str) -> Iterator[tuple[str, int, str]]:
    """``(sentence, offset, separator before it)`` of each sentence of a paragraph."""
    start = 0
    separator = ""
    for found in _SENTENCE_END.finditer(text):
        end = found.start()
        # The closing quotes/brackets matched before the space belong to the sentence.
        gap = found.group()
        stripped = gap.lstrip("\"')]")
        end += len(gap) - len(stripped)
        if text[start:end].strip():
            yield text[start:end], start, separator
        separator = "\n" if "\n" in stripped else " "
        start = found.end()
    if text[start:].strip():
        yield text[start:], start, separator


__all__ = ["Chunk", "Chunker"]
