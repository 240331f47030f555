"""The byte-level BPE :class:`Tokenizer`: train, encode, decode, save and load.

Encoding follows Hugging Face ``tokenizers`` step for step, so both give the same ids
for the same ``tokenizer.json``:

1. Added tokens (``<|endoftext|>`` ...) are cut out of the raw text first, leftmost
   and longest match first; non-normalized ones in a first pass, normalized ones in a
   second. Which special tokens are recognised is chosen per call (``allowed_special``).
2. Each remaining segment is pre-tokenised (:mod:`evermind.tokenizer.pretokenizer`).
3. Each piece becomes its UTF-8 bytes, one base token per byte, and merges are applied:
   repeatedly the adjacent pair with the lowest merge rank is merged, all its
   non-overlapping occurrences left to right. Results are cached per piece.

Ids of a tokenizer trained here: the special tokens first (``<|endoftext|>`` is 0), then
the 256 bytes in byte order, then one id per learned token in the order learned.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from evermind.errors import TokenizerError
from evermind.tokenizer import hf_json
from evermind.tokenizer.bytes_map import (
    BYTE_TO_SYMBOL,
    SYMBOL_TO_BYTE,
    bytes_to_symbols,
    symbols_to_bytes,
)
from evermind.tokenizer.spec import BPESpec
from evermind.tokenizer.specials import (
    ENDOFTEXT,
    AddedTokenMatcher,
    AllowedSpecial,
    SpecialTokens,
)
from evermind.tokenizer.stream import StreamDecoder
from evermind.tokenizer.trainer import ProgressCallback, train_spec

__all__ = ["Tokenizer", "encode_all"]

logger = logging.getLogger(__name__)

_CACHE_LIMIT = 200_000  # pre-token -> ids entries kept before the cache is cleared
_NO_RANK = (1 << 62, -1)


class Tokenizer:
    """A byte-level BPE tokenizer whose ``tokenizer.json`` Hugging Face loads as is.

    Build one with :meth:`train`, :meth:`from_json` or :meth:`load`; the constructor
    takes a parsed :class:`BPESpec`.

    Args:
        spec: Vocabulary, merges, added tokens and pre-tokenizer.
        eos: Content of the end-of-sequence token; None picks ``<|endoftext|>`` if the
            tokenizer has it, else no eos (``eos_id`` is None). Same for ``bos``, ``pad``.
        bos: Content of the beginning-of-sequence token.
        pad: Content of the padding token.

    Raises:
        TokenizerError: The spec is inconsistent (merge of unknown tokens, duplicate ids,
            a role naming a token that is not an added token, ...).
    """

    def __init__(
        self,
        spec: BPESpec,
        *,
        eos: str | None = None,
        bos: str | None = None,
        pad: str | None = None,
    ) -> None:
        self._spec = spec
        self._vocab = dict(spec.vocab)
        self._added = {token.content: token for token in spec.added_tokens}
        self._added_ids = {token.content: token.id for token in spec.added_tokens}
        self._special_ids = frozenset(t.id for t in spec.added_tokens if t.special)
        self._id_to_token, self._id_to_bytes = self._build_id_tables()
        self._ranks = self._build_ranks()
        self._byte_ids = tuple(self._vocab.get(symbol, -1) for symbol in BYTE_TO_SYMBOL)
        self._unk_id = self._resolve_unk()
        self._roles = {
            role: self._resolve_role(role, content)
            for role, content in (("eos", eos), ("bos", bos), ("pad", pad))
        }
        self._cache: dict[str, tuple[int, ...]] = {}
        self._matcher = AddedTokenMatcher(spec.added_tokens)

    # ----------------------------------------------------------------- construction
    def _build_id_tables(self) -> tuple[list[str | None], list[bytes | None]]:
        ids = [*self._vocab.values(), *(token.id for token in self._spec.added_tokens)]
        for token_id in ids:
            if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
                raise TokenizerError(
                    f"token id {token_id!r} is invalid; expected a non-negative int"
                )
        size = max(ids, default=-1) + 1
        names: list[str | None] = [None] * size
        data: list[bytes | None] = [None] * size
        for content, token in self._added.items():
            if names[token.id] is not None:
                raise TokenizerError(
                    f"added tokens {names[token.id]!r} and {content!r} share id {token.id}; "
                    "expected one id per added token"
                )
            names[token.id] = content
            data[token.id] = content.encode("utf-8")
        for symbols, token_id in self._vocab.items():
            if token_id in self._special_ids or symbols in self._added:
                if names[token_id] not in (None, symbols):
                    raise TokenizerError(
                        f"id {token_id} is both vocab token {symbols!r} and added token "
                        f"{names[token_id]!r}; expected one token per id"
                    )
                continue
            if names[token_id] is not None:
                raise TokenizerError(
                    f"id {token_id} is used by {names[token_id]!r} and {symbols!r}; expected "
                    "unique ids in the vocabulary (hint: the tokenizer.json is corrupt)"
                )
            names[token_id] = symbols
            if all(char in SYMBOL_TO_BYTE for char in symbols):
                data[token_id] = symbols_to_bytes(symbols)
            else:  # as HF's ByteLevel decoder: a non byte-level token decodes to its UTF-8
                data[token_id] = symbols.encode("utf-8")
        return names, data

    def _build_ranks(self) -> dict[tuple[int, int], tuple[int, int]]:
        ranks: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, (left, right) in enumerate(self._spec.merges):
            left_id = self._vocab.get(left)
            right_id = self._vocab.get(right)
            merged_id = self._vocab.get(left + right)
            if left_id is None or right_id is None or merged_id is None:
                raise TokenizerError(
                    f"merge {rank} ({left!r}, {right!r}) uses a token missing from the vocab "
                    f"(ids {left_id}, {right_id} -> {merged_id}); expected both parts and "
                    "their concatenation in the vocab (hint: vocab and merges come from "
                    "different tokenizers?)"
                )
            ranks.setdefault((left_id, right_id), (rank, merged_id))
        return ranks

    def _resolve_unk(self) -> int | None:
        unk = self._spec.unk_token
        if unk is None:
            return None
        token_id = self._vocab.get(unk, self._added_ids.get(unk))
        if token_id is None:
            raise TokenizerError(f"unk_token {unk!r} is not in the vocabulary")
        return token_id

    def _resolve_role(self, role: str, content: str | None) -> int | None:
        if content is None:
            return self._added_ids.get(ENDOFTEXT)
        if content not in self._added_ids:
            raise TokenizerError(
                f"{role} token {content!r} is not an added token of this tokenizer; expected "
                f"one of {sorted(self._added_ids)} (hint: special tokens are fixed at training)"
            )
        return self._added_ids[content]

    @classmethod
    def train(
        cls,
        text: str | Iterable[str],
        vocab_size: int,
        *,
        special_tokens: SpecialTokens | None = None,
        min_frequency: int = 2,
        on_progress: ProgressCallback | None = None,
    ) -> Tokenizer:
        """Trains a tokenizer on ``text`` with Evermind's pre-tokenizer.

        Special-token strings inside the text are cut out and not learned. Merges are
        deterministic (see :mod:`evermind.tokenizer.trainer` for the tie-break rule).

        Args:
            text: One string, or an iterable of documents (streamed once).
            vocab_size: Wanted vocabulary size including the 256 bytes and the special
                tokens; fewer tokens result if the text has too few repeated pairs.
            special_tokens: Roles and extra specials; default: all roles ``<|endoftext|>``.
            min_frequency: Minimum weighted count of a pair to be merged.
            on_progress: ``on_progress(done, total)`` with merges done / wanted.

        Returns:
            The trained tokenizer.

        Raises:
            TokenizerError: ``vocab_size`` is too small or not an int, or text is not str.
        """
        roles = special_tokens or SpecialTokens()
        spec = train_spec(
            text,
            vocab_size,
            special_tokens=roles,
            min_frequency=min_frequency,
            on_progress=on_progress,
        )
        return cls(spec, eos=roles.eos, bos=roles.bos, pad=roles.pad)

    # ----------------------------------------------------------------- properties
    @property
    def spec(self) -> BPESpec:
        """The vocabulary, merges, added tokens and pre-tokenizer."""
        return self._spec

    @property
    def vocab_size(self) -> int:
        """Number of ids (largest id + 1); the model's embedding needs this many rows."""
        return len(self._id_to_token)

    @property
    def eos_id(self) -> int | None:
        """Id of the end-of-sequence token (None if the tokenizer has none)."""
        return self._roles["eos"]

    @property
    def bos_id(self) -> int | None:
        """Id of the beginning-of-sequence token (None if the tokenizer has none)."""
        return self._roles["bos"]

    @property
    def pad_id(self) -> int | None:
        """Id of the padding token (None if the tokenizer has none)."""
        return self._roles["pad"]

    @property
    def special_tokens(self) -> dict[str, int]:
        """Special token content -> id."""
        return {t.content: t.id for t in self._spec.added_tokens if t.special}

    def id_to_token(self, token_id: int) -> str | None:
        """Returns the token string of ``token_id`` (byte-level form), or None if unused."""
        if 0 <= token_id < len(self._id_to_token):
            return self._id_to_token[token_id]
        return None

    def token_to_id(self, token: str) -> int | None:
        """Returns the id of a token string (byte-level form or added token content)."""
        found = self._added_ids.get(token)
        return found if found is not None else self._vocab.get(token)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, specials={self.special_tokens})"

    # ----------------------------------------------------------------- encoding
    def encode(self, text: str, *, allowed_special: AllowedSpecial = "all") -> list[int]:
        """Encodes text to token ids (no BOS/EOS added).

        Args:
            text: Any Unicode text.
            allowed_special: Special tokens recognised as whole tokens in ``text``:
                ``"all"`` (default, as Hugging Face), ``"none"`` (encode them as plain
                text), or a collection of their strings. Non-special added tokens are
                always recognised.

        Returns:
            Token ids; :meth:`decode` gives ``text`` back.

        Raises:
            TokenizerError: ``text`` is not a str or ``allowed_special`` is invalid.
        """
        if not isinstance(text, str):
            raise TokenizerError(
                f"encode: text is a {type(text).__name__}; expected str "
                "(hint: decode bytes with .decode('utf-8') first)"
            )
        key = self._matcher.allowed_key(allowed_special)
        ids: list[int] = []
        cache = self._cache
        split = self._spec.pre_tokenizer.split
        for part in self._matcher.segments(text, key):
            if isinstance(part, int):
                ids.append(part)
                continue
            for piece in split(part):
                piece_ids = cache.get(piece)
                if piece_ids is None:
                    piece_ids = self._encode_piece(piece)
                    if len(cache) >= _CACHE_LIMIT:
                        cache.clear()
                    cache[piece] = piece_ids
                ids.extend(piece_ids)
        return ids

    def encode_batch(
        self, texts: Iterable[str], *, allowed_special: AllowedSpecial = "all"
    ) -> list[list[int]]:
        """Encodes several texts; see :meth:`encode`."""
        return [self.encode(text, allowed_special=allowed_special) for text in texts]

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        data = piece.encode("utf-8")
        if self._spec.ignore_merges:
            whole = self._vocab.get(bytes_to_symbols(data))
            if whole is not None:
                return (whole,)
        word: list[int] = []
        previous_unknown = False
        for byte in data:
            token_id = self._byte_ids[byte]
            if token_id >= 0:
                word.append(token_id)
                previous_unknown = False
            elif self._unk_id is not None:
                # HF: bytes missing from the vocab become unk (fused if asked), else vanish.
                if not (self._spec.fuse_unk and previous_unknown):
                    word.append(self._unk_id)
                previous_unknown = True
        return tuple(self._apply_merges(word))

    def _apply_merges(self, word: list[int]) -> list[int]:
        ranks = self._ranks
        while len(word) > 1:
            best = min(itertools.pairwise(word), key=lambda pair: ranks.get(pair, _NO_RANK))
            found = ranks.get(best)
            if found is None:
                break
            left, right = best
            merged_id = found[1]
            merged: list[int] = []
            index = 0
            last = len(word) - 1
            while index <= last:
                if index < last and word[index] == left and word[index + 1] == right:
                    merged.append(merged_id)
                    index += 2
                else:
                    merged.append(word[index])
                    index += 1
            word = merged
        return word

    # ----------------------------------------------------------------- decoding
    def decode_bytes(self, ids: Iterable[int], *, skip_special: bool = False) -> bytes:
        """Returns the bytes that ``ids`` stand for (special tokens as their UTF-8 text).

        Args:
            ids: Token ids (ints or numpy integers).
            skip_special: Leave special tokens out.

        Returns:
            The concatenated bytes; may end inside a UTF-8 character.

        Raises:
            TokenizerError: An id is outside the vocabulary.
        """
        table = self._id_to_bytes
        specials = self._special_ids
        parts: list[bytes] = []
        for token_id in ids:
            try:
                chunk = table[token_id] if token_id >= 0 else None
            except (IndexError, TypeError):
                chunk = None
            if chunk is None:
                raise TokenizerError(
                    f"token id {token_id!r} is not in the vocabulary; expected an int in "
                    f"[0, {self.vocab_size}) that names a token (hint: was the model trained "
                    "with another tokenizer?)"
                )
            if skip_special and token_id in specials:
                continue
            parts.append(chunk)
        return b"".join(parts)

    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        """Decodes token ids to text; invalid UTF-8 becomes U+FFFD.

        Args:
            ids: Token ids.
            skip_special: Leave special tokens out (Hugging Face's ``skip_special_tokens``).

        Returns:
            The text. ``decode(encode(text)) == text`` for every str.

        Raises:
            TokenizerError: An id is outside the vocabulary.
        """
        return self.decode_bytes(ids, skip_special=skip_special).decode("utf-8", "replace")

    def stream_decoder(self, *, skip_special: bool = False) -> StreamDecoder:
        """Returns a :class:`StreamDecoder` that decodes ids as they arrive."""
        return StreamDecoder(self, skip_special=skip_special)

    # ----------------------------------------------------------------- persistence
    def to_json(self, *, indent: int | None = None) -> str:
        """Returns the Hugging Face ``tokenizer.json`` text (deterministic).

        Args:
            indent: JSON indentation; None writes compact JSON.
        """
        return hf_json.dumps(self._spec, indent=indent)

    @classmethod
    def from_json(
        cls,
        text: str | bytes,
        *,
        eos: str | None = None,
        bos: str | None = None,
        pad: str | None = None,
    ) -> Tokenizer:
        """Loads a byte-level BPE ``tokenizer.json`` (ours or one Hugging Face wrote).

        ``tokenizer.json`` does not record roles; pass them (e.g. from :meth:`summary`)
        or get ``<|endoftext|>`` for each when present.

        Args:
            text: The JSON text.
            eos: Content of the eos token.
            bos: Content of the bos token.
            pad: Content of the pad token.

        Returns:
            The tokenizer.

        Raises:
            TokenizerError: Bad JSON or an unsupported tokenizer configuration.
        """
        return cls(hf_json.loads(text), eos=eos, bos=bos, pad=pad)

    def save(self, path: str | Path) -> None:
        """Writes ``tokenizer.json`` to ``path`` (UTF-8, indented)."""
        Path(path).write_text(self.to_json(indent=2), encoding="utf-8")

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        eos: str | None = None,
        bos: str | None = None,
        pad: str | None = None,
    ) -> Tokenizer:
        """Reads a ``tokenizer.json`` file; ``eos``/``bos``/``pad`` as in :meth:`from_json`.

        Raises:
            TokenizerError: The file is missing, unreadable or not a supported tokenizer.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise TokenizerError(
                f"cannot read tokenizer file {str(path)!r}: {err}; expected a UTF-8 tokenizer.json"
            ) from err
        return cls.from_json(text, eos=eos, bos=bos, pad=pad)

    def summary(self) -> dict[str, Any]:
        """Describes the tokenizer for a package manifest.

        Returns:
            ``type``, ``format``, ``vocab_size``, ``special_tokens`` (content -> id), the
            role contents ``eos``/``bos``/``pad`` (None when absent; pass them back to
            :meth:`from_json`), ``num_merges`` and the ``sha256`` of :meth:`to_json`.
        """
        names = {
            role: self.id_to_token(token_id) if token_id is not None else None
            for role, token_id in self._roles.items()
        }
        return {
            "type": "byte_level_bpe",
            "format": "huggingface-tokenizer-json",
            "vocab_size": self.vocab_size,
            "special_tokens": self.special_tokens,
            "eos": names["eos"],
            "bos": names["bos"],
            "pad": names["pad"],
            "num_merges": len(self._spec.merges),
            "sha256": hashlib.sha256(self.to_json().encode("utf-8")).hexdigest(),
        }


def encode_all(tokenizer: Tokenizer, texts: Sequence[str]) -> list[int]:
    """Encodes ``texts`` as one stream with the eos token after each document.

    Args:
        tokenizer: A tokenizer with an eos token.
        texts: Documents.

    Returns:
        ``encode(t0) + [eos] + encode(t1) + [eos] + ...``.

    Raises:
        TokenizerError: The tokenizer has no eos token.
    """
    eos = tokenizer.eos_id
    if eos is None:
        raise TokenizerError(
            "encode_all needs an eos token but this tokenizer has none; expected "
            "<|endoftext|> or an eos role (hint: pass eos= to Tokenizer.from_json)"
        )
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer.encode(text))
        ids.append(eos)
    return ids
