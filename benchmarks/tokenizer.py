"""Benchmark: Evermind's pure-Python BPE against Hugging Face ``tokenizers`` (native only).

Trains a 4,096-token vocabulary on about 2 MB of standard-library docstrings (the
project's default corpus) with both libraries, using the same pre-tokenizer, special
token and minimum pair frequency, then encodes the same 2 MB with each. Prints seconds
and the ratio ours / HF, and whether HF, loading our ``tokenizer.json``, gives the same
ids as we do. "encode (cold)" starts with an empty word cache; "encode vs batch" sets
our single-threaded encode against HF's multi-threaded ``encode_batch`` over the lines.

Usage::

    .venv/bin/python -m benchmarks.tokenizer [--bytes 2000000] [--vocab 4096]
"""

from __future__ import annotations

import argparse
import time

from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from evermind.tokenizer import ENDOFTEXT, EVERMIND_PATTERN, Tokenizer
from evermind.train.corpus import harvest_stdlib_docstrings


def _train_hf(text: str, vocab_size: int) -> HFTokenizer:
    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(EVERMIND_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[ENDOFTEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([text], trainer)
    return tokenizer


def _timed(label: str, results: dict[str, float], action: object) -> object:
    started = time.perf_counter()
    value = action()  # type: ignore[operator]
    results[label] = time.perf_counter() - started
    return value


def main() -> None:
    """Runs the benchmark and prints a small table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bytes", type=int, default=2_000_000, help="corpus size in bytes")
    parser.add_argument("--vocab", type=int, default=4096, help="vocabulary size")
    args = parser.parse_args()

    times: dict[str, float] = {}
    text = _timed("harvest", times, lambda: harvest_stdlib_docstrings(args.bytes))
    assert isinstance(text, str)
    print(f"corpus: {len(text.encode('utf-8')):,} bytes, {len(text):,} characters")

    ours = _timed("ours_train", times, lambda: Tokenizer.train(text, args.vocab))
    theirs = _timed("hf_train", times, lambda: _train_hf(text, args.vocab))
    assert isinstance(ours, Tokenizer) and isinstance(theirs, HFTokenizer)
    our_ids = _timed("ours_encode_cold", times, lambda: ours.encode(text))
    _timed("hf_encode", times, lambda: theirs.encode(text, add_special_tokens=False).ids)
    lines = text.splitlines(keepends=True)
    # HF at its best: many short inputs, encoded in parallel by its thread pool.
    _timed("hf_encode_batch", times, lambda: theirs.encode_batch(lines, add_special_tokens=False))
    _timed("ours_encode", times, lambda: ours.encode(text))  # word cache now filled
    hf_on_our_json = HFTokenizer.from_str(ours.to_json())
    same_ids = hf_on_our_json.encode(text, add_special_tokens=False).ids == our_ids
    assert isinstance(our_ids, list)

    print(f"harvest: {times['harvest']:.2f} s")
    print(f"{'step':<16}{'evermind s':>12}{'HF s':>10}{'ratio':>9}")
    for step, ours_key, hf_key in (
        ("train", "ours_train", "hf_train"),
        ("encode (warm)", "ours_encode", "hf_encode"),
        ("encode (cold)", "ours_encode_cold", "hf_encode"),
        ("encode vs batch", "ours_encode", "hf_encode_batch"),
    ):
        ratio = times[ours_key] / times[hf_key]
        print(f"{step:<16}{times[ours_key]:>12.2f}{times[hf_key]:>10.2f}{ratio:>8.1f}x")
    print(f"vocab: ours {ours.vocab_size}, HF {theirs.get_vocab_size()}; tokens: {len(our_ids):,}")
    print(f"HF loading our tokenizer.json gives identical ids on the corpus: {same_ids}")


if __name__ == "__main__":
    main()
