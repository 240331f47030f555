"""The character table of :mod:`evermind.embedder.wordpiece`, read off ``tokenizers`` (native-only).

:func:`probe` asks Hugging Face's BERT tokenizer what it does with every code point
``c`` between two letters (``"a" + c + "b"``): ``["ab"]`` means ``c`` is dropped (a control,
format or private-use character, or a non-spacing mark), ``["a", x, "b"]`` that it is split
off (punctuation, or a CJK ideograph). The ranges it returns are what
``data/wordpiece_unicode.json`` ships, so the pure-Python tokenizer classifies characters as
``tokenizers`` does, whatever Unicode version the running Python has.

Usage (rewrites the shipped table)::

    python -m evermind.embedder.unicode_table
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evermind.embedder.wordpiece import TABLE_NAME

_SURROGATES = range(0xD800, 0xE000)


def _ranges(codes: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for code in codes:
        if out and out[-1][1] == code - 1:
            out[-1][1] = code
        else:
            out.append([code, code])
    return out


def probe(tokenizer: Any) -> dict[str, list[list[int]]]:
    """``{"removed": ranges, "punctuation": ranges}`` (inclusive) from a ``tokenizers.Tokenizer``.

    Args:
        tokenizer: A BERT tokenizer (``Tokenizer.from_file("tokenizer.json")``); its padding
            and truncation are switched off.
    """
    tokenizer.no_padding()
    tokenizer.no_truncation()
    codes = [c for c in range(0x110000) if c not in _SURROGATES]
    encoded = tokenizer.encode_batch(["a" + chr(c) + "b" for c in codes], add_special_tokens=False)
    removed: list[int] = []
    split: list[int] = []
    for code, encoding in zip(codes, encoded, strict=True):
        tokens = encoding.tokens
        if tokens == ["ab"]:
            removed.append(code)
        elif len(tokens) == 3 and tokens[0] == "a" and tokens[2] == "b":
            split.append(code)
    return {"removed": _ranges(removed), "punctuation": _ranges(split)}


def main() -> None:
    """Rewrites ``data/wordpiece_unicode.json`` from the MiniLM teacher's tokenizer."""
    from tokenizers import Tokenizer

    from evermind.train.teachers import minilm_dir

    table = probe(Tokenizer.from_file(str(minilm_dir() / "tokenizer.json")))
    path = Path(__file__).parent / "data" / TABLE_NAME
    path.write_text(json.dumps(table, separators=(",", ":")) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
