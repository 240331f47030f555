"""Special tokens: their configuration for training and finding them in raw text.

Added tokens (special or not) are cut out of the text before pre-tokenisation, exactly
as Hugging Face's ``AddedVocabulary`` does: leftmost match first and, among matches
starting at the same place, the longest; tokens with ``normalized: false`` in a first
pass, ``normalized: true`` ones in the pieces left over. ``allowed_special`` chooses
which special tokens are recognised; non-special added tokens always are.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from evermind.errors import TokenizerError
from evermind.tokenizer.spec import AddedToken

__all__ = [
    "ENDOFTEXT",
    "AddedTokenMatcher",
    "AllowedSpecial",
    "SpecialTokens",
    "split_on",
]

ENDOFTEXT = "<|endoftext|>"
"""The document separator every Evermind tokenizer has (id 0 when trained here)."""

AllowedSpecial = Literal["all", "none"] | Collection[str]
"""Which special tokens ``encode`` recognises: all, none, or these contents."""


@dataclass(frozen=True)
class SpecialTokens:
    """The special tokens of a tokenizer to train; roles may share one string.

    Attributes:
        eos: End-of-sequence token.
        bos: Beginning-of-sequence token.
        pad: Padding token.
        extra: More special tokens to reserve (e.g. chat markers).
    """

    eos: str = ENDOFTEXT
    bos: str = ENDOFTEXT
    pad: str = ENDOFTEXT
    extra: tuple[str, ...] = ()

    def contents(self) -> list[str]:
        """Returns the distinct special strings in id order, ``<|endoftext|>`` first.

        Raises:
            TokenizerError: A special token is not a non-empty string.
        """
        ordered: list[str] = []
        for content in (ENDOFTEXT, self.eos, self.bos, self.pad, *self.extra):
            if not isinstance(content, str) or not content:
                raise TokenizerError(
                    f"special token {content!r} is invalid; expected a non-empty str "
                    "(hint: e.g. '<|pad|>')"
                )
            if content not in ordered:
                ordered.append(content)
        return ordered


def _alternation(tokens: Iterable[AddedToken]) -> re.Pattern[str] | None:
    """Regex matching any of ``tokens``; longest first, so the leftmost match is longest."""
    contents = sorted({token.content for token in tokens}, key=lambda text: (-len(text), text))
    if not contents:
        return None
    return re.compile("|".join(re.escape(content) for content in contents))


def split_on(
    pattern: re.Pattern[str] | None, text: str, ids: dict[str, int]
) -> Iterator[str | int]:
    """Yields the non-empty text between matches of ``pattern`` and each match's id.

    Args:
        pattern: Alternation of token contents, or None to yield ``text`` whole.
        text: Raw text.
        ids: Token content -> id for every content ``pattern`` can match.

    Yields:
        Text pieces (str) and token ids (int) in order.
    """
    if pattern is None:
        if text:
            yield text
        return
    position = 0
    for match in pattern.finditer(text):
        if match.start() > position:
            yield text[position : match.start()]
        yield ids[match.group()]
        position = match.end()
    if position < len(text):
        yield text[position:]


Splitters = tuple[re.Pattern[str] | None, re.Pattern[str] | None]


class AddedTokenMatcher:
    """Finds added tokens in raw text, for one tokenizer's ``added_tokens``.

    Args:
        added_tokens: The tokenizer's added tokens.
    """

    def __init__(self, added_tokens: Sequence[AddedToken]) -> None:
        self._tokens = tuple(added_tokens)
        self._ids = {token.content: token.id for token in added_tokens}
        self._special = frozenset(token.content for token in added_tokens if token.special)
        self._splitters: dict[frozenset[str] | None, Splitters] = {}

    def allowed_key(self, allowed_special: AllowedSpecial) -> frozenset[str] | None:
        """Validates ``allowed_special``; returns None for "all", else the allowed contents.

        Raises:
            TokenizerError: It is a bare string other than "all"/"none", or names a
                token that is not special.
        """
        if allowed_special == "all":
            return None
        if allowed_special == "none":
            return frozenset()
        if isinstance(allowed_special, str):
            raise TokenizerError(
                f"allowed_special is {allowed_special!r}; expected 'all', 'none' or a "
                "collection of special token strings (hint: wrap one token in a set)"
            )
        allowed = frozenset(allowed_special)
        unknown = allowed - self._special
        if unknown:
            raise TokenizerError(
                f"allowed_special names {sorted(unknown)}, which are not special tokens; "
                f"expected some of {sorted(self._special)}"
            )
        return allowed

    def _splitters_for(self, key: frozenset[str] | None) -> Splitters:
        found = self._splitters.get(key)
        if found is None:
            usable = [
                token
                for token in self._tokens
                if not token.special or key is None or token.content in key
            ]
            found = (
                _alternation(token for token in usable if not token.normalized),
                _alternation(token for token in usable if token.normalized),
            )
            self._splitters[key] = found
        return found

    def segments(self, text: str, key: frozenset[str] | None) -> Iterator[str | int]:
        """Cuts ``text`` into plain pieces and added-token ids.

        Args:
            text: Raw text.
            key: From :meth:`allowed_key`.

        Yields:
            Non-empty text pieces (str) and added token ids (int), in order.
        """
        first, second = self._splitters_for(key)
        for part in split_on(first, text, self._ids):
            if isinstance(part, int) or second is None:
                yield part
            else:
                yield from split_on(second, part, self._ids)
