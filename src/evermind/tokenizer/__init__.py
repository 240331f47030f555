"""Byte-level BPE tokenizer: train in pure Python, save as Hugging Face ``tokenizer.json``.

Browser-safe (standard library only). Modules, one idea each:

- :mod:`~evermind.tokenizer.bytes_map`: GPT-2's byte <-> printable-character table.
- :mod:`~evermind.tokenizer.unicode_tables`: letter/mark/number/space classes (Unicode 16).
- :mod:`~evermind.tokenizer.pretokenizer`: the regex pre-tokeniser, as HF ``Split``.
- :mod:`~evermind.tokenizer.specials`: special-token config; finding added tokens in text.
- :mod:`~evermind.tokenizer.trainer`: merge learning with incremental pair counts.
- :mod:`~evermind.tokenizer.model`: :class:`Tokenizer` (encode, decode, train, save).
- :mod:`~evermind.tokenizer.hf_json`: ``tokenizer.json`` reading and writing.
- :mod:`~evermind.tokenizer.stream`: :class:`StreamDecoder` for token-by-token output.

Example::

    tok = Tokenizer.train(corpus, vocab_size=4096, on_progress=print)
    ids = tok.encode("Hello, world!")
    assert tok.decode(ids) == "Hello, world!"
    Tokenizer.from_json(tok.to_json())  # what HF ``Tokenizer.from_str`` also loads
"""

from __future__ import annotations

from evermind.tokenizer.model import Tokenizer, encode_all
from evermind.tokenizer.pretokenizer import EVERMIND_PATTERN, GPT2_PATTERN, PreTokenizer, SplitRule
from evermind.tokenizer.spec import AddedToken, BPESpec
from evermind.tokenizer.specials import ENDOFTEXT, AllowedSpecial, SpecialTokens
from evermind.tokenizer.stream import StreamDecoder
from evermind.tokenizer.trainer import ProgressCallback

__all__ = [
    "ENDOFTEXT",
    "EVERMIND_PATTERN",
    "GPT2_PATTERN",
    "AddedToken",
    "AllowedSpecial",
    "BPESpec",
    "PreTokenizer",
    "ProgressCallback",
    "SpecialTokens",
    "SplitRule",
    "StreamDecoder",
    "Tokenizer",
    "encode_all",
]
