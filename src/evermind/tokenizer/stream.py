"""Streaming decoding: turn token ids into text as they arrive, never half a character.

A byte-level BPE token can end in the middle of a UTF-8 character (an emoji is often
split across two or three tokens). :class:`StreamDecoder` keeps the incomplete tail
bytes back until the rest arrives, so a generation loop can print each chunk at once.
Invalid bytes become U+FFFD exactly as :meth:`Tokenizer.decode` would produce them, so
the concatenated chunks always equal ``decode`` of all the ids.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from typing import Protocol

__all__ = ["ByteDecoder", "StreamDecoder"]


class ByteDecoder(Protocol):
    """Anything that maps token ids to the bytes they stand for (e.g. ``Tokenizer``)."""

    def decode_bytes(self, ids: Iterable[int], *, skip_special: bool = False) -> bytes:
        """Returns the concatenated bytes of ``ids``."""
        ...


class StreamDecoder:
    """Incremental decoder over one token stream.

    Args:
        tokenizer: Supplies ``decode_bytes``.
        skip_special: Leave special tokens out of the text.

    Example::

        stream = tokenizer.stream_decoder()
        for token_id in generate():
            print(stream.feed([token_id]), end="")
        print(stream.flush())
    """

    def __init__(self, tokenizer: ByteDecoder, *, skip_special: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, ids: int | Iterable[int]) -> str:
        """Adds token ids and returns the text that is now complete.

        Args:
            ids: One id or several, in stream order.

        Returns:
            The newly completed characters (possibly ``""``); trailing bytes of an
            unfinished UTF-8 character are held back for the next call.

        Raises:
            TokenizerError: An id is not in the vocabulary.
        """
        batch = [ids] if isinstance(ids, int) else ids
        data = self._tokenizer.decode_bytes(batch, skip_special=self._skip_special)
        return self._utf8.decode(data)

    def flush(self) -> str:
        """Ends the stream: returns held-back bytes (as U+FFFD if incomplete) and resets.

        Returns:
            The remaining text; the decoder is ready for a new stream afterwards.
        """
        tail = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return tail

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished character are held back."""
        buffered, _ = self._utf8.getstate()
        return bool(buffered)
