"""Reading and writing Hugging Face ``tokenizer.json`` for byte-level BPE.

What we write (and ``tokenizers`` 0.23 loads as is): ``normalizer: null``; the
pre-tokenizer chain of :class:`~evermind.tokenizer.pretokenizer.PreTokenizer`; a
``ByteLevel`` decoder; ``post_processor: null`` (we never add BOS/EOS inside
``encode``); a ``BPE`` model with ``vocab`` (token -> id, in id order) and ``merges``
(pairs); ``added_tokens`` for the special tokens (``normalized: false``, ``special:
true``).

What we read: the same, and what ``tokenizers`` writes for a byte-level BPE, including
merges in the older ``"a b"`` string form, ``ByteLevel(use_regex=true)`` alone, Split
chains, ``unk_token``, ``fuse_unk`` and ``ignore_merges``. ``post_processor``,
``truncation`` and ``padding`` are ignored (they never change the ids of ``encode``
without special tokens). Anything that would change ids and that we do not implement
(normalizers, dropout, word suffixes, ``lstrip``/``rstrip`` added tokens) is refused
with a :class:`~evermind.errors.TokenizerError` rather than silently mis-encoded.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from evermind.errors import TokenizerError
from evermind.tokenizer.pretokenizer import PreTokenizer
from evermind.tokenizer.spec import AddedToken, BPESpec

__all__ = ["dumps", "loads", "spec_from_dict", "spec_to_dict"]

logger = logging.getLogger(__name__)

_DECODER = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}


def spec_to_dict(spec: BPESpec) -> dict[str, Any]:
    """Returns the ``tokenizer.json`` object for ``spec``.

    Args:
        spec: The tokenizer data.

    Returns:
        A JSON-ready dict with the key order Hugging Face uses.
    """
    added = [
        {
            "id": token.id,
            "content": token.content,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": token.normalized,
            "special": token.special,
        }
        for token in sorted(spec.added_tokens, key=lambda token: token.id)
    ]
    model = {
        "type": "BPE",
        "dropout": None,
        "unk_token": spec.unk_token,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": spec.fuse_unk,
        "byte_fallback": False,
        "ignore_merges": spec.ignore_merges,
        "vocab": dict(sorted(spec.vocab.items(), key=lambda item: item[1])),
        "merges": [[left, right] for left, right in spec.merges],
    }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": spec.pre_tokenizer.to_hf(),
        "post_processor": None,
        "decoder": dict(_DECODER),
        "model": model,
    }


def dumps(spec: BPESpec, *, indent: int | None = None) -> str:
    """Serialises ``spec`` as ``tokenizer.json`` text (same spec, same text).

    Args:
        spec: The tokenizer data.
        indent: JSON indentation, or None for compact output.

    Returns:
        The JSON text (non-ASCII kept as is).
    """
    separators = (",", ": ") if indent is not None else (",", ":")
    return json.dumps(spec_to_dict(spec), ensure_ascii=False, indent=indent, separators=separators)


def loads(text: str | bytes) -> BPESpec:
    """Parses ``tokenizer.json`` text.

    Args:
        text: The JSON document (str, or UTF-8 bytes).

    Returns:
        The parsed spec.

    Raises:
        TokenizerError: The text is not JSON or not a supported byte-level BPE tokenizer.
    """
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TokenizerError(
            f"tokenizer.json is not valid JSON: {err}; expected the JSON text of a "
            "Hugging Face tokenizer (hint: is the file truncated?)"
        ) from err
    return spec_from_dict(document)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TokenizerError(message)


def _check_model_options(model: dict[str, Any]) -> None:
    dropout = model.get("dropout")
    _require(
        dropout is None or dropout == 0,
        f"BPE dropout {dropout!r} is not supported; expected null (hint: dropout is for "
        "training a model, not for a saved tokenizer)",
    )
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        _require(
            not model.get(key),
            f"BPE {key} {model.get(key)!r} is not supported; expected null for byte-level BPE",
        )
    _require(
        not model.get("byte_fallback", False),
        "BPE byte_fallback true is not supported; expected false (byte-level BPE has "
        "every byte in its vocabulary)",
    )


def _parse_vocab(model: dict[str, Any]) -> dict[str, int]:
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        raise TokenizerError(
            f"model.vocab is {type(vocab).__name__}; expected an object mapping token -> id"
        )
    for token, token_id in vocab.items():
        _require(
            isinstance(token_id, int) and not isinstance(token_id, bool) and token_id >= 0,
            f"model.vocab[{token!r}] is {token_id!r}; expected a non-negative integer id",
        )
    return dict(vocab)


def _parse_merges(model: dict[str, Any]) -> list[tuple[str, str]]:
    raw = model.get("merges", [])
    _require(isinstance(raw, list), f"model.merges is {type(raw).__name__}; expected a list")
    merges: list[tuple[str, str]] = []
    for index, merge in enumerate(raw):
        if isinstance(merge, str):
            parts = merge.split(" ")
        elif isinstance(merge, list):
            parts = merge
        else:
            parts = []
        _require(
            len(parts) == 2 and all(isinstance(part, str) for part in parts),
            f"model.merges[{index}] is {merge!r}; expected [left, right] or 'left right'",
        )
        merges.append((parts[0], parts[1]))
    return merges


def _parse_added(document: dict[str, Any]) -> list[AddedToken]:
    raw = document.get("added_tokens") or []
    _require(isinstance(raw, list), "added_tokens is not a list; expected a list of objects")
    added: list[AddedToken] = []
    for entry in raw:
        _require(
            isinstance(entry, dict)
            and isinstance(entry.get("content"), str)
            and bool(entry.get("content"))
            and isinstance(entry.get("id"), int),
            f"added token {entry!r} is invalid; expected an object with int id and non-empty "
            "content",
        )
        for flag in ("lstrip", "rstrip", "single_word"):
            _require(
                not entry.get(flag, False),
                f"added token {entry['content']!r} has {flag}=true, which is not supported; "
                "expected false",
            )
        added.append(
            AddedToken(
                id=entry["id"],
                content=entry["content"],
                special=bool(entry.get("special", False)),
                normalized=bool(entry.get("normalized", not entry.get("special", False))),
            )
        )
    return added


def spec_from_dict(document: object) -> BPESpec:
    """Builds a :class:`BPESpec` from a parsed ``tokenizer.json`` object.

    Args:
        document: The parsed JSON.

    Returns:
        The spec.

    Raises:
        TokenizerError: The configuration is not a supported byte-level BPE.
    """
    if not isinstance(document, dict):
        raise TokenizerError(
            f"tokenizer.json holds a {type(document).__name__}; expected a JSON object"
        )
    model = document.get("model")
    if not isinstance(model, dict):
        raise TokenizerError(
            f"tokenizer.json 'model' is {model!r:.80}; expected an object with vocab and merges"
        )
    model_type = model.get("type", "BPE" if "merges" in model else None)
    _require(
        model_type == "BPE",
        f"model type {model_type!r} is not supported; expected 'BPE' (hint: WordPiece, "
        "Unigram and WordLevel tokenizers cannot be loaded)",
    )
    normalizer = document.get("normalizer")
    _require(
        normalizer is None
        or (isinstance(normalizer, dict) and normalizer.get("normalizers") == []),
        f"normalizer {normalizer!r} is not supported; expected null (hint: byte-level BPE "
        "needs no normalizer)",
    )
    decoder = document.get("decoder")
    _require(
        isinstance(decoder, dict) and decoder.get("type") == "ByteLevel",
        f"decoder {decoder!r} is not supported; expected a ByteLevel decoder",
    )
    _check_model_options(model)
    if document.get("post_processor") is not None:
        logger.debug("ignoring post_processor: encode() never adds special tokens")
    unk = model.get("unk_token")
    _require(unk is None or isinstance(unk, str), f"unk_token {unk!r} is not a string")
    vocab = _parse_vocab(model)
    raw_merges = model.get("merges", [])
    _require(
        not isinstance(raw_merges, list) or len(raw_merges) <= len(vocab),
        f"model.merges has {len(raw_merges) if isinstance(raw_merges, list) else 0} entries "
        f"for a vocabulary of {len(vocab)}; expected at most one merge per vocabulary entry "
        "(every merge makes a token of the vocabulary)",
    )
    return BPESpec(
        vocab=vocab,
        merges=_parse_merges(model),
        added_tokens=_parse_added(document),
        pre_tokenizer=PreTokenizer.from_hf(document.get("pre_tokenizer")),
        unk_token=unk,
        fuse_unk=bool(model.get("fuse_unk", False)),
        ignore_merges=bool(model.get("ignore_merges", False)),
    )
