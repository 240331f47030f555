"""The pair verifier's features: what two questions' wording says about each other.

This module owns :func:`pair_features` (what :class:`evermind.cache.verifier.PairVerifier`
reads) in two forms that must agree bit for bit:

- :func:`pair_features_ref`, the slow and obvious definition: each call tokenises both
  texts, counts their words with :class:`collections.Counter` arithmetic and hashes every
  edited word. It is what the shipped weights (``data/verifier.json``,
  :data:`FEATURE_VERSION`) were trained on, and the oracle the tests hold the fast path to.
- :func:`pair_features`, the path a lookup runs. A stored question is scored against many
  incoming ones, so everything that depends on one text alone (its folded, stemmed words,
  their counts, content set, first positions and its numbers) is computed once per text and
  kept in a bounded LRU (:func:`text_profile`), from :func:`evermind.text.token_words` and
  :func:`~evermind.text.token_numbers` (the tokeniser's fields without its ``Token``
  objects, which were most of the cost of a question seen for the first time); hash buckets
  and spelling ratios are kept per word. The pair's own work is plain dict and set
  arithmetic. It performs the same floating-point operations in the same order as the
  reference, so every value is identical, not merely close
  (``tests/unit/test_cache_verifier_fast.py`` checks every tune-split pair).

No bound skips the features of a pair that could not pass: a miss reports its best
candidate's probability (in its reason, and the gateway's free checks of misses learn from
it), so every lookup that reaches the verifier computes it.

The features are generic, not a word list:

- the embedder's score, *normalised* by how that embedder scores unrelated texts (the
  cache's calibration), so one model serves any embedder;
- word overlap of content terms (Jaccard, coverage of each side);
- the *edit* between the two token sequences: how many tokens each side adds, whether the
  change is a single substitution or insertion (a near-miss is usually a small, deliberate
  edit; a paraphrase rewords), whether the same words come in another order (a swapped
  direction or role), whether numbers disagree, and whether they *conflict*: each side names
  a number the other does not (``80`` against ``90``), as opposed to one side spelling a
  number out or leaving it implicit, which paraphrases do;
- the edited tokens themselves, hashed into :data:`BUCKETS` buckets whose weights are
  learned: the model learns which kinds of words change meaning when swapped ("to"/"from",
  "more", "without") from data. Every number token shares one bucket (:data:`NUMBER_WORD`):
  which digits were edited says nothing general, that a number was edited does.

Browser-safe: standard library only.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Sequence
from difflib import SequenceMatcher
from functools import lru_cache
from typing import NamedTuple

from evermind.text import STOP_WORDS, normalise, stem, token_numbers, token_words, tokenize

__all__ = [
    "BUCKETS",
    "FEATURE_VERSION",
    "SCORE_FEATURES",
    "SCORE_PRODUCTS",
    "clear_caches",
    "pair_features",
    "pair_features_ref",
    "text_profile",
]

#: Hash buckets for the edited tokens.
BUCKETS = 256
#: The version of the feature layout; a weights file of another version is refused.
FEATURE_VERSION = 3
#: What every number token is hashed as in the edit buckets.
NUMBER_WORD = "#number"
#: The interactions with the score: ``score_x_<name>`` is the score times feature ``<base>``.
SCORE_PRODUCTS = {"small_edit": "small_edit_any", "jaccard": "jaccard", "edit_share": "edit_share"}
#: Every feature that depends on the score.
SCORE_FEATURES = frozenset({"score", "score_sq", *(f"score_x_{n}" for n in SCORE_PRODUCTS)})
#: Texts whose :func:`text_profile` is kept (about 3 KB each: ~12 MB when full).
PROFILE_CACHE = 4096

_EDIT_KEYS = tuple(f"edit:{i}" for i in range(BUCKETS))
_SMALL_EDIT_KEYS = tuple(f"small_edit:{i}" for i in range(BUCKETS))
_PRODUCT_KEYS = tuple((f"score_x_{name}", base) for name, base in SCORE_PRODUCTS.items())


# --------------------------------------------------------------------------- the reference


def _words(text: str) -> list[str]:
    """Folded, stemmed word and number tokens in order (symbols dropped, stop words kept)."""
    out = []
    for token in tokenize(normalise(text)):
        if token.kind == "symbol":
            continue
        out.append(stem(token.low) if token.kind == "word" else token.low)
    return out


def _numbers(text: str) -> Counter[float]:
    return Counter(t.number for t in tokenize(text) if t.kind == "number" and t.number is not None)


def _number_words(text: str) -> set[str]:
    """The words of :func:`_words` that are number tokens."""
    return {t.low for t in tokenize(normalise(text)) if t.kind == "number"}


def _bucket(word: str) -> int:
    return zlib.crc32(word.encode("utf-8")) % BUCKETS


_NUMBER_BUCKET = _bucket(NUMBER_WORD)


def _discordance(a: Sequence[str], b: Sequence[str]) -> float:
    """The share of shared-word pairs whose order differs between the two texts (Kendall)."""
    first_a = {w: i for i, w in reversed(list(enumerate(a)))}
    first_b = {w: i for i, w in reversed(list(enumerate(b)))}
    shared = [w for w in first_a if w in first_b and w not in STOP_WORDS]
    if len(shared) < 2:
        return 0.0
    shared.sort(key=first_a.__getitem__)
    ranks = [first_b[w] for w in shared]
    pairs = discordant = 0
    for i in range(len(ranks)):
        for j in range(i + 1, len(ranks)):
            pairs += 1
            discordant += ranks[i] > ranks[j]
    return discordant / pairs


def pair_features_ref(query: str, cached: str, score: float) -> tuple[tuple[str, float], ...]:
    """The features of one (incoming, cached) question pair: the reference definition.

    Args:
        query: The incoming question.
        cached: The cached question it is compared with.
        score: The embedder's score for the pair, normalised to the cache's calibration:
            0 where unrelated texts score (their high quantile), 1 at identical vectors
            (:meth:`evermind.cache.verifier.PairVerifier.normalise`).

    Returns:
        ``(name, value)`` pairs sorted by name; absent names are 0. Symmetric in the texts.
    """
    a, b = _words(query), _words(cached)
    ca, cb = Counter(a), Counter(b)
    only_a, only_b = ca - cb, cb - ca
    add_a, add_b = sum(only_a.values()), sum(only_b.values())
    content_a = {w for w in ca if w not in STOP_WORDS}
    content_b = {w for w in cb if w not in STOP_WORDS}
    union = content_a | content_b
    shared = content_a & content_b
    jaccard = len(shared) / len(union) if union else 1.0
    cover_short = len(shared) / max(1, min(len(content_a), len(content_b)))
    small, large = sorted((add_a, add_b))
    same_bag = not only_a and not only_b
    nums_a, nums_b = _numbers(query), _numbers(cached)
    numeric = _number_words(query) | _number_words(cached)
    s = max(-1.0, min(1.0, score))
    feats: dict[str, float] = {
        "bias": 1.0,
        "score": s,
        "score_sq": s * s,
        "jaccard": jaccard,
        "cover_short": cover_short,
        "edit_small": math.log1p(small),
        "edit_large": math.log1p(large),
        "edit_share": (add_a + add_b) / max(1, len(a) + len(b)),
        "substitution1": float(small == 1 and large == 1),
        "substitution2": float(small <= 2 and large <= 2 and large > 0 and not small == large == 1),
        "insertion": float(small == 0 and large > 0),
        "insertion1": float(small == 0 and large == 1),
        "same_bag": float(same_bag),
        "reordered": float(same_bag and a != b),
        "discordance": _discordance(a, b),
        "numbers_differ": float(bool(nums_a or nums_b) and nums_a != nums_b),
        "numbers_one_side": float(bool(nums_a) != bool(nums_b)),
        "numbers_conflict": float(bool(nums_a.keys() - nums_b) and bool(nums_b.keys() - nums_a)),
        "length": math.log1p(len(a) + len(b)),
        "length_gap": abs(math.log1p(len(a)) - math.log1p(len(b))),
    }
    if small == 1 and large == 1:
        (wa,), (wb,) = list(only_a), list(only_b)
        feats["substitution_spelling"] = SequenceMatcher(None, wa, wb).ratio()
    # Interactions a linear model cannot form: a tiny edit at a high score is the near-miss
    # pattern; a wide rewording at a high score is the paraphrase pattern.
    feats["small_edit_any"] = float(large <= 2 and large > 0)
    for name, base in SCORE_PRODUCTS.items():
        feats[f"score_x_{name}"] = s * feats[base]
    for word, count in (only_a + only_b).items():
        key = f"edit:{_bucket(NUMBER_WORD if word in numeric else word)}"
        feats[key] = feats.get(key, 0.0) + count / (small + large)
    if small + large <= 4:  # the few words of a small edit, once more: they carry the meaning
        for word in only_a + only_b:
            key = f"small_edit:{_bucket(NUMBER_WORD if word in numeric else word)}"
            feats[key] = 1.0
    return tuple(sorted(feats.items()))


# --------------------------------------------------------------------------- the fast path


class TextProfile(NamedTuple):
    """What the features need of one text alone; shared between calls, never mutated.

    Attributes:
        words: The folded, stemmed words and numbers in order (the reference's ``_words``).
        counts: How often each word occurs, in order of first occurrence.
        first: Each word's first position.
        content: The words that are not stop words.
        content_order: The same, in order of first occurrence.
        numbers: The numbers the raw text names, with their counts (all positive, so
            plain dict equality is :class:`~collections.Counter` equality).
        numeric: The words that are number tokens (hashed as :data:`NUMBER_WORD`).
        length_log: ``log1p(len(words))``.
    """

    words: tuple[str, ...]
    counts: dict[str, int]
    first: dict[str, int]
    content: frozenset[str]
    content_order: tuple[str, ...]
    numbers: dict[float, int]
    numeric: frozenset[str]
    length_log: float


@lru_cache(maxsize=PROFILE_CACHE)
def text_profile(text: str) -> TextProfile:
    """The per-text part of :func:`pair_features`, kept for the last
    :data:`PROFILE_CACHE` texts (a stored question is compared with many incoming ones)."""
    # The reference's ``_words`` and ``_numbers`` from the same tokeniser, without building
    # its Token objects (a new question is seen once; that was most of its cost).
    tokens = token_words(normalise(text))
    words = tuple(stem(low) if kind == "word" else low for kind, low in tokens)
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, word in enumerate(words):
        if word in counts:
            counts[word] += 1
        else:
            counts[word] = 1
            first[word] = i
    content_order = tuple(w for w in counts if w not in STOP_WORDS)
    numbers: dict[float, int] = {}
    for number in token_numbers(text):  # the raw text, as the reference's ``_numbers``
        numbers[number] = numbers.get(number, 0) + 1
    return TextProfile(
        words,
        counts,
        first,
        frozenset(content_order),
        content_order,
        numbers,
        frozenset(low for kind, low in tokens if kind == "number"),
        math.log1p(len(words)),
    )


@lru_cache(maxsize=65536)
def _word_bucket(word: str) -> int:
    """:func:`_bucket`, kept per word (the edited words of a vocabulary repeat)."""
    return _bucket(word)


@lru_cache(maxsize=16384)
def _spelling(word_a: str, word_b: str) -> float:
    """How alike two substituted words are spelled (difflib's ratio), kept per word pair."""
    return SequenceMatcher(None, word_a, word_b).ratio()


def _only(mine: dict[str, int], other: dict[str, int]) -> dict[str, int]:
    """``Counter(mine) - Counter(other)``, in the same order (``mine``'s)."""
    get = other.get
    return {word: count - get(word, 0) for word, count in mine.items() if count > get(word, 0)}


def _discordance_of(pa: TextProfile, pb: TextProfile) -> float:
    """The reference's ``_discordance`` from two profiles: the shared content words in order
    of first occurrence in ``pa`` (what the reference's sort gives), ranked by ``pb``."""
    first_b = pb.first
    ranks = [first_b[w] for w in pa.content_order if w in first_b]
    n = len(ranks)
    if n < 2:
        return 0.0
    discordant = 0
    for i in range(n - 1):
        here = ranks[i]
        for later in ranks[i + 1 :]:
            discordant += here > later
    return discordant / (n * (n - 1) // 2)


@lru_cache(maxsize=4096)
def pair_features(query: str, cached: str, score: float) -> tuple[tuple[str, float], ...]:
    """The features of one (incoming, cached) question pair; identical to
    :func:`pair_features_ref` (see there for the arguments), from cached :func:`text_profile`\\ s.
    """
    pa, pb = text_profile(query), text_profile(cached)
    only_a, only_b = _only(pa.counts, pb.counts), _only(pb.counts, pa.counts)
    add_a, add_b = sum(only_a.values()), sum(only_b.values())
    content_a, content_b = pa.content, pb.content
    n_shared = len(content_a & content_b)
    n_union = len(content_a) + len(content_b) - n_shared
    jaccard = n_shared / n_union if n_union else 1.0
    cover_short = n_shared / max(1, min(len(content_a), len(content_b)))
    small, large = (add_a, add_b) if add_a <= add_b else (add_b, add_a)
    same_bag = not only_a and not only_b
    nums_a, nums_b = pa.numbers, pb.numbers
    len_a, len_b = len(pa.words), len(pb.words)
    s = max(-1.0, min(1.0, score))
    feats: dict[str, float] = {
        "bias": 1.0,
        "score": s,
        "score_sq": s * s,
        "jaccard": jaccard,
        "cover_short": cover_short,
        "edit_small": math.log1p(small),
        "edit_large": math.log1p(large),
        "edit_share": (add_a + add_b) / max(1, len_a + len_b),
        "substitution1": float(small == 1 and large == 1),
        "substitution2": float(small <= 2 and large <= 2 and large > 0 and not small == large == 1),
        "insertion": float(small == 0 and large > 0),
        "insertion1": float(small == 0 and large == 1),
        "same_bag": float(same_bag),
        "reordered": float(same_bag and pa.words != pb.words),
        "discordance": _discordance_of(pa, pb),
        "numbers_differ": float(bool(nums_a or nums_b) and nums_a != nums_b),
        "numbers_one_side": float(bool(nums_a) != bool(nums_b)),
        "numbers_conflict": float(bool(nums_a.keys() - nums_b) and bool(nums_b.keys() - nums_a)),
        "length": math.log1p(len_a + len_b),
        "length_gap": abs(pa.length_log - pb.length_log),
        "small_edit_any": float(large <= 2 and large > 0),
    }
    for key, base in _PRODUCT_KEYS:
        feats[key] = s * feats[base]
    if small == 1 and large == 1:
        (wa,), (wb,) = only_a, only_b
        feats["substitution_spelling"] = _spelling(wa, wb)
    edited = small + large
    numeric = pa.numeric | pb.numeric
    # The reference walks ``only_a + only_b``: only_a's words, then only_b's (disjoint).
    for only in (only_a, only_b):
        for word, count in only.items():
            key = _EDIT_KEYS[_NUMBER_BUCKET if word in numeric else _word_bucket(word)]
            feats[key] = feats.get(key, 0.0) + count / edited
    if edited <= 4:
        for only in (only_a, only_b):
            for word in only:
                bucket = _NUMBER_BUCKET if word in numeric else _word_bucket(word)
                feats[_SMALL_EDIT_KEYS[bucket]] = 1.0
    return tuple(sorted(feats.items()))


def clear_caches() -> None:
    """Empties the fast path's per-text and per-pair caches (:func:`text_profile`,
    :func:`pair_features`, the spelling ratios); the per-word hash buckets stay. For
    benchmarks and tests that start cold."""
    text_profile.cache_clear()
    pair_features.cache_clear()
    _spelling.cache_clear()
