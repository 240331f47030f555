"""BPE training: learn merge rules from word frequencies with incremental pair counts.

The algorithm (Sennrich et al. 2016, byte-level as in GPT-2):

1. The caller pre-tokenises the corpus and counts each distinct word once
   (:func:`count_words`); training works on that frequency table, never on the text.
2. Each word starts as its UTF-8 bytes (ids 0..255). We count every adjacent pair,
   weighted by word frequency, and keep an index ``pair -> words containing it``.
3. Repeatedly take the most frequent pair, append its concatenation to the vocabulary
   and rewrite only the words the index names. The pair counts are updated by the
   difference between each rewritten word's old and new pairs, so no merge recounts
   the corpus. A heap with lazy deletion finds the best pair: stale entries (whose
   count changed since they were pushed) are skipped when popped.

Tie-breaking, so the same text yields the same merges on every host: the highest
count wins; among equal counts, the pair whose ``(left bytes, right bytes)`` is
lexicographically smallest wins. Within a word, occurrences merge left to right without
overlap ("aaa" with ``a+a`` becomes ``aa a``), the same rule encoding applies.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

from evermind.errors import TokenizerError
from evermind.tokenizer.bytes_map import (
    BYTE_TO_SYMBOL,
    SYMBOL_TO_BYTE,
    bytes_to_symbols,
    symbols_to_bytes,
)
from evermind.tokenizer.pretokenizer import PreTokenizer
from evermind.tokenizer.spec import AddedToken, BPESpec
from evermind.tokenizer.specials import AddedTokenMatcher, SpecialTokens

__all__ = ["ProgressCallback", "count_words", "counting_pieces", "learn_merges", "train_spec"]

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int], None]
"""``on_progress(done, total)``: merges (new tokens) done so far out of those wanted."""

Pair = tuple[int, int]
# (-count, left bytes, right bytes, left id, right id): heapq pops the best pair first.
HeapEntry = tuple[int, bytes, bytes, int, int]


def count_words(documents: Iterable[str], split: Callable[[str], list[str]]) -> Counter[str]:
    """Counts how often each pre-token occurs in ``documents``.

    Args:
        documents: Texts; each is split on its own (no word spans two documents).
        split: Cuts one text into pre-tokens, e.g. ``PreTokenizer.split``.

    Returns:
        Pre-token -> number of occurrences.

    Raises:
        TokenizerError: A document is not a ``str``.
    """
    counts: Counter[str] = Counter()
    for index, document in enumerate(documents):
        if not isinstance(document, str):
            raise TokenizerError(
                f"training text item {index} is a {type(document).__name__}; expected str "
                "(hint: decode bytes with .decode('utf-8') first)"
            )
        counts.update(split(document))
    return counts


#: A cut that the default pre-tokenizer (``EVERMIND_PATTERN``) never splits across: right after
#: a newline that follows a printable ASCII character and precedes an ASCII letter or digit.
#: There the newline is a pre-token of its own (``\s+(?!\S)`` fails before the letter, ``\s+``
#: takes the newline alone; no other alternative spans whitespace), so both sides pre-tokenise
#: alone exactly as they do inside the whole text.
_SAFE_CUT = re.compile(r"(?<=[!-~]\n)(?=[A-Za-z0-9])")


def counting_pieces(text: str, chars: int = 1 << 16) -> Iterator[str]:
    """``text`` in pieces of about ``chars`` characters (or more, up to the next safe cut)
    that Evermind's default pre-tokenizer splits exactly as it splits the whole text, so
    :func:`count_words` over the pieces counts the same words; a caller streams them to
    :func:`train_spec` to do something (report progress, stop) between pieces of the first
    pass. Only valid for :meth:`PreTokenizer.default`.
    """
    if chars < 1:
        raise TokenizerError(f"counting_pieces: chars is {chars}; expected >= 1")
    start = 0
    while start < len(text):
        cut = _SAFE_CUT.search(text, start + chars)
        end = len(text) if cut is None else cut.start()
        yield text[start:end]
        start = end


def _merge_word(word: list[int], left: int, right: int, merged: int) -> list[int]:
    """Replaces each non-overlapping ``left right`` in ``word`` (left to right) by ``merged``."""
    out: list[int] = []
    index = 0
    last = len(word) - 1
    while index <= last:
        if index < last and word[index] == left and word[index + 1] == right:
            out.append(merged)
            index += 2
        else:
            out.append(word[index])
            index += 1
    return out


class _PairTable:
    """Pair counts, the pair -> words index and the best-pair heap of one training run."""

    def __init__(self, words: list[list[int]], freqs: list[int], tokens: list[bytes]) -> None:
        self.words = words
        self.freqs = freqs
        self.tokens = tokens
        self.counts: dict[Pair, int] = defaultdict(int)
        self.where: dict[Pair, set[int]] = defaultdict(set)
        for index, word in enumerate(words):
            freq = freqs[index]
            for pair in itertools.pairwise(word):
                self.counts[pair] += freq
                self.where[pair].add(index)
        self.heap: list[HeapEntry] = [
            self._entry(pair, count) for pair, count in self.counts.items()
        ]
        heapq.heapify(self.heap)

    def _entry(self, pair: Pair, count: int) -> HeapEntry:
        return (-count, self.tokens[pair[0]], self.tokens[pair[1]], pair[0], pair[1])

    def pop_best(self) -> tuple[Pair, int] | None:
        """Removes and returns the most frequent live pair and its count, or None."""
        while self.heap:
            negative_count, _, _, left, right = heapq.heappop(self.heap)
            pair = (left, right)
            if self.counts.get(pair) == -negative_count:
                return pair, -negative_count
        return None

    def discard(self, pair: Pair) -> None:
        """Forgets ``pair`` without merging it (it may come back if later merges form it)."""
        self.counts.pop(pair, None)

    def apply(self, pair: Pair, merged: int) -> None:
        """Rewrites every word holding ``pair`` and updates counts, index and heap."""
        left, right = pair
        delta: dict[Pair, int] = defaultdict(int)
        where = self.where
        for index in self.where.pop(pair, ()):
            word = self.words[index]
            new_word = _merge_word(word, left, right, merged)
            if len(new_word) == len(word):
                continue  # stale index entry: an earlier merge removed the pair here
            freq = self.freqs[index]
            for old_pair in itertools.pairwise(word):
                delta[old_pair] -= freq
            for new_pair in itertools.pairwise(new_word):
                delta[new_pair] += freq
                # Pairs without the new token were adjacent before and are indexed already.
                if merged in new_pair:
                    where[new_pair].add(index)
            self.words[index] = new_word
        self.counts.pop(pair, None)
        for changed, difference in delta.items():
            if not difference or changed == pair:
                continue
            count = self.counts[changed] + difference
            if count > 0:
                self.counts[changed] = count
                heapq.heappush(self.heap, self._entry(changed, count))
            else:
                del self.counts[changed]
                where.pop(changed, None)


def learn_merges(
    word_counts: Mapping[str, int],
    num_new_tokens: int,
    *,
    min_frequency: int = 2,
    forbidden: Collection[bytes] = (),
    on_progress: ProgressCallback | None = None,
) -> list[tuple[bytes, bytes]]:
    """Learns BPE merges until ``num_new_tokens`` new tokens exist or no pair is frequent enough.

    Args:
        word_counts: Pre-token -> frequency (from :func:`count_words`).
        num_new_tokens: How many tokens to add beyond the 256 bytes.
        min_frequency: A pair must occur at least this often (weighted) to be merged.
        forbidden: Tokens never to create (their pairs are dropped), e.g. byte strings
            whose byte-level spelling would collide with a special token.
        on_progress: Called as ``on_progress(done, total)`` about every 1% of
            ``num_new_tokens`` and once at the end, where ``done == total`` (``total`` is
            lowered to ``done`` if the corpus ran out of pairs first).

    Returns:
        The merges in order, as ``(left bytes, right bytes)``. A merge whose result
        already exists as a token (``a+bc`` after ``ab+c``) adds no new token.

    Raises:
        TokenizerError: ``num_new_tokens`` or ``min_frequency`` is negative / below 1.
    """
    if num_new_tokens < 0:
        raise TokenizerError(
            f"learn_merges: num_new_tokens is {num_new_tokens}; expected >= 0 "
            "(hint: vocab_size must cover the 256 bytes and the special tokens)"
        )
    if min_frequency < 1:
        raise TokenizerError(f"learn_merges: min_frequency is {min_frequency}; expected >= 1")
    tokens = [bytes([byte]) for byte in range(256)]
    token_ids = {token: index for index, token in enumerate(tokens)}
    words = [list(word.encode("utf-8")) for word in word_counts]
    freqs = list(word_counts.values())
    table = _PairTable(words, freqs, tokens)
    forbidden_set = frozenset(forbidden)
    merges: list[tuple[bytes, bytes]] = []
    report_every = max(1, num_new_tokens // 100)
    added = 0
    while added < num_new_tokens:
        best = table.pop_best()
        if best is None or best[1] < min_frequency:
            break
        (left, right), _ = best
        merged_bytes = tokens[left] + tokens[right]
        if merged_bytes in forbidden_set:
            table.discard((left, right))
            continue
        merged = token_ids.get(merged_bytes)
        if merged is None:
            merged = len(tokens)
            tokens.append(merged_bytes)
            token_ids[merged_bytes] = merged
            added += 1
            if on_progress is not None and added % report_every == 0 and added < num_new_tokens:
                on_progress(added, num_new_tokens)
        merges.append((tokens[left], tokens[right]))
        table.apply((left, right), merged)
    if added < num_new_tokens:
        logger.info(
            "BPE training stopped at %d of %d new tokens: no pair occurs %d+ times",
            added,
            num_new_tokens,
            min_frequency,
        )
    if on_progress is not None:
        on_progress(added, added if added < num_new_tokens else num_new_tokens)
    return merges


def train_spec(
    text: str | Iterable[str],
    vocab_size: int,
    *,
    special_tokens: SpecialTokens,
    min_frequency: int = 2,
    on_progress: ProgressCallback | None = None,
) -> BPESpec:
    """Trains a byte-level BPE on ``text`` with Evermind's default pre-tokenizer.

    Special-token strings inside the text are cut out and not learned. Ids: specials
    first, then the 256 bytes in byte order, then learned tokens in the order learned.

    Args:
        text: One string, or an iterable of documents (streamed once).
        vocab_size: Wanted vocabulary size including bytes and special tokens.
        special_tokens: The special tokens to reserve.
        min_frequency: Minimum weighted count of a pair to be merged.
        on_progress: ``on_progress(done, total)`` with merges done / wanted.

    Returns:
        The trained tokenizer data.

    Raises:
        TokenizerError: ``vocab_size`` is too small or not an int, or text is not str.
    """
    specials = special_tokens.contents()
    base_size = len(specials) + 256
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TokenizerError(f"vocab_size is {vocab_size!r}; expected an int")
    if vocab_size < base_size:
        raise TokenizerError(
            f"vocab_size {vocab_size} is too small; expected at least {base_size} "
            f"(256 byte tokens + {len(specials)} special tokens)"
        )
    started = time.perf_counter()
    pre_tokenizer = PreTokenizer.default()
    added = [AddedToken(index, content) for index, content in enumerate(specials)]
    matcher = AddedTokenMatcher(added)
    documents = [text] if isinstance(text, str) else text

    def segments() -> Iterator[str]:
        for document in documents:
            if not isinstance(document, str):
                yield document  # count_words reports the bad type
                continue
            for part in matcher.segments(document, None):
                if isinstance(part, str):
                    yield part

    word_counts = count_words(segments(), pre_tokenizer.split)
    # A learned token spelled like a special token would clash with it in the vocab.
    forbidden = [
        symbols_to_bytes(content)
        for content in specials
        if all(char in SYMBOL_TO_BYTE for char in content)
    ]
    merges = learn_merges(
        word_counts,
        vocab_size - base_size,
        min_frequency=min_frequency,
        forbidden=forbidden,
        on_progress=on_progress,
    )
    vocab: dict[str, int] = {content: index for index, content in enumerate(specials)}
    for byte, symbol in enumerate(BYTE_TO_SYMBOL):
        vocab[symbol] = len(specials) + byte
    merge_symbols: list[tuple[str, str]] = []
    for left, right in merges:
        merge_symbols.append((bytes_to_symbols(left), bytes_to_symbols(right)))
        vocab.setdefault(bytes_to_symbols(left + right), len(vocab))
    logger.info(
        "trained BPE: %d words, %d merges, vocab %d in %.2f s",
        len(word_counts),
        len(merges),
        len(vocab),
        time.perf_counter() - started,
    )
    return BPESpec(vocab, merge_symbols, added, pre_tokenizer)
