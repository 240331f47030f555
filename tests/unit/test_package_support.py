"""Builders for `.evermind` package tests: a tiny Mamba config, tensors and tokenizer.

Everything here is standard library only (the package is browser-safe); test files import
these builders. The one test below checks the builders agree with the contract.
"""

from __future__ import annotations

import json
import random
from array import array
from typing import Any

from evermind.package import Tensor, expected_tensor_shapes, make_config, tokenizer_vocab_size

CREATED_AT = "2025-01-31T12:00:00Z"
PRODUCER = "evermind 0.1.0 (test)"
SPECIALS = ("<|endoftext|>", "<|pad|>")


def _byte_symbols() -> list[str]:
    """The GPT-2 byte -> printable unicode mapping, as a list indexed by byte."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def tiny_tokenizer_json(vocab_size: int = 301, *, extra_added: int = 1) -> str:
    """A byte-level BPE ``tokenizer.json`` with exactly `vocab_size` tokens.

    Two specials sit in the vocab (ids 0, 1) and in ``added_tokens``; `extra_added` more
    added tokens get ids past the vocab, so they count on top of ``len(model.vocab)``.
    """
    symbols = _byte_symbols()
    vocab: dict[str, int] = {token: index for index, token in enumerate(SPECIALS)}
    for symbol in symbols:
        vocab[symbol] = len(vocab)
    merges: list[list[str]] = []
    pairs = ((a, b) for a in "etaoinshr" for b in "etaoinshrdlu")
    while len(vocab) < vocab_size - extra_added:
        left, right = next(pairs)
        merges.append([left, right])
        vocab[left + right] = len(vocab)
    added = [
        {
            "id": vocab[token],
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for token in SPECIALS
    ]
    for index in range(extra_added):
        added.append(
            {
                "id": len(vocab) + index,
                "content": f"<|extra{index}|>",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": False,
            }
        )
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": True,
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    return json.dumps(document, ensure_ascii=False)


def tiny_config(vocab_size: int = 301, **overrides: Any) -> dict[str, Any]:
    """The test model: d_model 8, 2 layers, a ~300-token vocabulary."""
    config = make_config(
        d_model=8,
        n_layer=2,
        vocab_size=vocab_size,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=0,
    )
    config.update(overrides)
    return config


def tiny_tensors(config: dict[str, Any], seed: int = 0, scale: float = 0.5) -> dict[str, Tensor]:
    """Random float32 tensors with exactly the shapes `config` implies."""
    rng = random.Random(seed)
    tensors = {}
    for name, shape in sorted(expected_tensor_shapes(config).items()):
        count = 1
        for dim in shape:
            count *= dim
        data = array("f", (rng.uniform(-scale, scale) for _ in range(count)))
        tensors[name] = Tensor(shape=shape, data=data)
    return tensors


def tiny_package_kwargs(**overrides: Any) -> dict[str, Any]:
    """Keyword arguments for ``write_package`` describing a complete tiny model."""
    config = tiny_config()
    kwargs: dict[str, Any] = {
        "name": "tiny-notes",
        "version": "1.0.0",
        "created_at": CREATED_AT,
        "producer": PRODUCER,
        "config": config,
        "tensors": tiny_tensors(config),
        "tokenizer_json": tiny_tokenizer_json(),
        "training": {
            "steps": 120,
            "tokens": 61440,
            "corpus": "stdlib docstrings (2 MB)",
            "final_loss": 3.25,
            "losses": [5.5, 4.1, 3.25],
        },
        "bench": {"eval_loss": 3.4, "perplexity": 29.96, "bits_per_token": 4.9},
    }
    kwargs.update(overrides)
    return kwargs


def test_builders_match_the_contract() -> None:
    config = tiny_config()
    tensors = tiny_tensors(config)
    assert tokenizer_vocab_size(json.loads(tiny_tokenizer_json())) == 301
    assert tensors["backbone.embeddings.weight"].shape == (301, 8)
    assert tensors["backbone.layers.1.mixer.x_proj.weight"].shape == (1 + 2 * 16, 16)
    assert len(tensors) == 2 + 2 * 10
