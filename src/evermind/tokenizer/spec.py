"""The plain data a byte-level BPE tokenizer is made of, shared by the model and the JSON io.

:class:`BPESpec` is what ``tokenizer.json`` holds once parsed: the vocabulary of
byte-level token strings, the ordered merges, the added (special) tokens and the
pre-tokenizer. :mod:`evermind.tokenizer.hf_json` reads and writes it;
:class:`evermind.tokenizer.model.Tokenizer` is built from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from evermind.tokenizer.pretokenizer import PreTokenizer

__all__ = ["AddedToken", "BPESpec"]


@dataclass(frozen=True)
class AddedToken:
    """A token matched as a whole in raw text before pre-tokenisation (HF ``added_tokens``).

    Attributes:
        id: Its id.
        content: The exact text it stands for, e.g. ``<|endoftext|>``.
        special: Whether it is a special token (``allowed_special`` applies, and
            ``decode(..., skip_special=True)`` drops it).
        normalized: Hugging Face's flag: matched in a second pass after the
            non-normalized added tokens (there is no normalizer, so only the order differs).
    """

    id: int
    content: str
    special: bool = True
    normalized: bool = False


@dataclass(frozen=True)
class BPESpec:
    """Everything that defines a byte-level BPE tokenizer.

    Attributes:
        vocab: Byte-level token string -> id (may include added tokens' contents).
        merges: Ordered merge rules ``(left, right)`` of byte-level strings; rank = index.
        added_tokens: Tokens matched whole in raw text.
        pre_tokenizer: How text is cut into words before BPE.
        unk_token: Token used for bytes missing from the vocabulary (None: drop them).
        fuse_unk: Fuse consecutive unknown bytes into one ``unk_token``.
        ignore_merges: Emit a whole word as one token when it is in the vocabulary.
    """

    vocab: Mapping[str, int]
    merges: Sequence[tuple[str, str]]
    added_tokens: Sequence[AddedToken] = ()
    pre_tokenizer: PreTokenizer = field(default_factory=PreTokenizer.default)
    unk_token: str | None = None
    fuse_unk: bool = False
    ignore_merges: bool = False
