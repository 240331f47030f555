"""The GPT-2 byte-to-unicode mapping that makes byte-level BPE tokens printable.

Byte-level BPE works on the UTF-8 bytes of the text, but Hugging Face ``tokenizer.json``
stores tokens as strings. GPT-2 solved this by giving each of the 256 byte values one
printable Unicode character: the printable Latin-1 bytes (``!``..``~``, ``¡``..``¬``,
``®``..``ÿ``) stand for themselves and the other 68 bytes (controls, space, soft hyphen)
are moved to ``U+0100`` onwards, so a space becomes ``Ġ`` and a newline ``Ċ``. This module
owns that table and the two conversions built on it.
"""

from __future__ import annotations

from evermind.errors import TokenizerError

__all__ = [
    "BYTE_TO_SYMBOL",
    "SYMBOL_TO_BYTE",
    "bytes_to_symbols",
    "symbols_to_bytes",
]


def _build_byte_to_symbol() -> tuple[str, ...]:
    """Builds GPT-2's table: entry ``b`` is the one-character symbol that stands for byte ``b``."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    printable_set = set(printable)
    table: list[str] = []
    next_shifted = 0
    for byte in range(256):
        if byte in printable_set:
            table.append(chr(byte))
        else:
            # Non-printable bytes take the next free code point above Latin-1, in byte order.
            table.append(chr(256 + next_shifted))
            next_shifted += 1
    return tuple(table)


BYTE_TO_SYMBOL: tuple[str, ...] = _build_byte_to_symbol()
"""``BYTE_TO_SYMBOL[b]`` is the printable character that represents byte ``b``."""

SYMBOL_TO_BYTE: dict[str, int] = {symbol: byte for byte, symbol in enumerate(BYTE_TO_SYMBOL)}
"""Inverse of :data:`BYTE_TO_SYMBOL`."""

# str.translate tables: mapping bytes through latin-1 first makes the conversion C-speed.
_LATIN1_TO_SYMBOL = {byte: symbol for byte, symbol in enumerate(BYTE_TO_SYMBOL)}


def bytes_to_symbols(data: bytes) -> str:
    """Returns the byte-level string of ``data``: one symbol character per byte.

    Args:
        data: Any bytes, e.g. the UTF-8 encoding of a pre-token.

    Returns:
        A string of ``len(data)`` characters drawn from :data:`BYTE_TO_SYMBOL`.
    """
    return data.decode("latin-1").translate(_LATIN1_TO_SYMBOL)


def symbols_to_bytes(symbols: str) -> bytes:
    """Returns the bytes a byte-level string stands for (inverse of :func:`bytes_to_symbols`).

    Args:
        symbols: A string whose every character is in :data:`SYMBOL_TO_BYTE`.

    Returns:
        One byte per character.

    Raises:
        TokenizerError: A character is not a byte-level symbol.
    """
    try:
        return bytes([SYMBOL_TO_BYTE[symbol] for symbol in symbols])
    except KeyError as err:
        raise TokenizerError(
            f"byte-level string {symbols!r} holds {err.args[0]!r}, which is not one of the 256 "
            "byte symbols; expected only characters of the GPT-2 byte-to-unicode table "
            "(hint: is this token from a byte-level BPE vocabulary?)"
        ) from err
