"""The learned pair verifier: does a new question ask what a cached one asked?

This module owns :class:`PairVerifier`, a small logistic model that reads two questions and
the embedder's score for them and returns the probability that one answer serves both. It
replaces hand-written language rules with weights learned from a labelled corpus
(``evals/cache_corpus``: paraphrases and near-misses across domains), and ships with the
thresholds that keep the served error below a chosen ``δ`` on a calibration split
(:func:`evermind.search.risk.bounded_threshold`). ``evals/cache_verifier.py`` trains it;
``data/verifier.json`` is what it wrote.

The features (:func:`pair_features`) are generic, not a word list:

- the embedder's score, *normalised* by how that embedder scores unrelated texts (the
  cache's calibration), so one model serves any embedder;
- word overlap of content terms (Jaccard, coverage of each side);
- the *edit* between the two token sequences: how many tokens each side adds, whether the
  change is a single substitution or insertion (a near-miss is usually a small, deliberate
  edit; a paraphrase rewords), whether the same words come in another order (a swapped
  direction or role), whether numbers disagree;
- the edited tokens themselves, hashed into :data:`BUCKETS` buckets whose weights are
  learned: the model learns which kinds of words change meaning when swapped ("to"/"from",
  "more", "without") from data, and a stated error on a split it never saw tells how well
  that carries.

Browser-safe: standard library only.
"""

from __future__ import annotations

import json
import math
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache
from importlib import resources

from evermind.errors import ConfigError
from evermind.text import STOP_WORDS, normalise, stem, tokenize

__all__ = ["BUCKETS", "PairVerifier", "default_verifier", "envelope", "pair_features"]

#: Hash buckets for the edited tokens.
BUCKETS = 256
#: The version of the feature layout; a weights file of another version is refused.
FEATURE_VERSION = 2
#: Steps of the monotone envelope (:meth:`PairVerifier.probability`).
ENVELOPE_STEPS = 10
#: The interactions with the score: ``score_x_<name>`` is the score times feature ``<base>``.
SCORE_PRODUCTS = {"small_edit": "small_edit_any", "jaccard": "jaccard", "edit_share": "edit_share"}
#: Every feature that depends on the score.
SCORE_FEATURES = frozenset({"score", "score_sq", *(f"score_x_{n}" for n in SCORE_PRODUCTS)})


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


def _bucket(word: str) -> int:
    return zlib.crc32(word.encode("utf-8")) % BUCKETS


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


@lru_cache(maxsize=4096)
def pair_features(query: str, cached: str, score: float) -> tuple[tuple[str, float], ...]:
    """The features of one (incoming, cached) question pair.

    Args:
        query: The incoming question.
        cached: The cached question it is compared with.
        score: The embedder's score for the pair, normalised to the cache's calibration:
            0 where unrelated texts score (their high quantile), 1 at identical vectors
            (:meth:`PairVerifier.normalise`).

    Returns:
        ``(name, value)`` pairs; absent names are 0. Symmetric in the two texts.
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
        key = f"edit:{_bucket(word)}"
        feats[key] = feats.get(key, 0.0) + count / (small + large)
    if small + large <= 4:  # the few words of a small edit, once more: they carry the meaning
        for word in only_a + only_b:
            key = f"small_edit:{_bucket(word)}"
            feats[key] = 1.0
    return tuple(sorted(feats.items()))


@dataclass(frozen=True)
class PairVerifier:
    """A logistic model over :func:`pair_features`, with bounded thresholds.

    Attributes:
        weights: Feature name → weight (absent features weigh 0).
        thresholds: ``δ`` (as a string, e.g. ``"0.01"``) → the lowest probability to serve
            at which the calibration split's served error stayed ≤ δ at 95% confidence.
        trained_on: What the weights were fitted on, in words (shown in reasons and docs).
    """

    weights: Mapping[str, float]
    thresholds: Mapping[str, float]
    trained_on: str = ""

    @staticmethod
    def normalise(cosine: float, unrelated: float | None) -> float:
        """Maps a cosine onto the calibrated scale: 0 at ``unrelated``, 1 at 1.0.

        Args:
            cosine: The embedder's cosine for the pair.
            unrelated: The cache's calibration (the high quantile of unrelated-pair
                cosines); None when not measured, which treats 0.0 as unrelated.
        """
        base = 0.0 if unrelated is None else min(unrelated, 0.999)
        return (cosine - base) / (1.0 - base)

    def _logit_at(self, feats: Mapping[str, float]) -> Callable[[float], float]:
        """The model's logit as a function of the score, the pair's other features fixed
        (the score enters through :data:`SCORE_FEATURES` only: ``s``, ``s²`` and ``s`` times
        another feature)."""
        w = self.weights.get
        rest = sum(
            w(name, 0.0) * value for name, value in feats.items() if name not in SCORE_FEATURES
        )
        linear = w("score", 0.0) + sum(
            w(f"score_x_{name}", 0.0) * feats.get(base, 0.0)
            for name, base in SCORE_PRODUCTS.items()
        )
        square = w("score_sq", 0.0)
        return lambda s: rest + linear * s + square * s * s

    def probability(self, query: str, cached: str, score: float) -> float:
        """The probability that one answer serves both questions.

        A closer embedding never makes two questions *less* likely to be the same, so the
        answer is the lowest the model gives at this score or any higher one (on a grid of
        :data:`ENVELOPE_STEPS` steps to 1.0): a monotone, conservative envelope. Without it
        the model extrapolates where it saw little data, e.g. templated questions whose
        scores sit at the calibration's "unrelated" level.

        Args:
            query: The incoming question.
            cached: The cached question.
            score: The normalised score (:meth:`normalise`).
        """
        return envelope(self, dict(pair_features(query, cached, score)))

    def threshold(self, max_error: float) -> float:
        """The probability a hit needs for the served error to stay ≤ ``max_error``.

        Uses the tightest shipped ``δ`` that is at most ``max_error`` (a conservative
        choice); a ``max_error`` below every shipped ``δ`` serves nothing but exact repeats
        (threshold above 1).

        Raises:
            ConfigError: When ``max_error`` is not in (0, 1).
        """
        if not 0.0 < max_error < 1.0:
            raise ConfigError(f"cache max_error must lie in (0, 1), got {max_error}")
        usable = [(float(d), t) for d, t in self.thresholds.items() if float(d) <= max_error]
        if not usable:
            return math.inf
        return max(usable)[1]

    def to_json(self) -> dict[str, object]:
        """The weights file's content."""
        return {
            "feature_version": FEATURE_VERSION,
            "buckets": BUCKETS,
            "trained_on": self.trained_on,
            "thresholds": dict(self.thresholds),
            "weights": dict(self.weights),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> PairVerifier:
        """Reads a weights file's content.

        Raises:
            ConfigError: When it was written for another feature layout.
        """
        if data.get("feature_version") != FEATURE_VERSION or data.get("buckets") != BUCKETS:
            raise ConfigError(
                f"verifier weights: feature_version {data.get('feature_version')} / buckets "
                f"{data.get('buckets')}, expected {FEATURE_VERSION} / {BUCKETS}; retrain with "
                "evals/cache_verifier.py"
            )
        weights = data.get("weights")
        thresholds = data.get("thresholds")
        if not isinstance(weights, dict) or not isinstance(thresholds, dict):
            raise ConfigError("verifier weights: 'weights' and 'thresholds' must be objects")
        return cls(
            {str(k): float(v) for k, v in weights.items()},
            {str(k): float(v) for k, v in thresholds.items()},
            str(data.get("trained_on", "")),
        )


def envelope(model: PairVerifier, feats: Mapping[str, float]) -> float:
    """The monotone envelope of ``model`` for a pair with features ``feats``: the lowest
    probability it gives at the pair's score or any higher one (what
    :meth:`PairVerifier.probability` returns; the training script calls it on stored rows)."""
    logit = model._logit_at(feats)
    score = feats.get("score", 0.0)
    top = max(score, 1.0)
    z = min(logit(score + (top - score) * k / ENVELOPE_STEPS) for k in range(ENVELOPE_STEPS + 1))
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


@lru_cache(maxsize=1)
def default_verifier() -> PairVerifier:
    """The shipped verifier (``evermind/cache/data/verifier.json``)."""
    text = resources.files("evermind.cache").joinpath("data/verifier.json").read_text("utf-8")
    return PairVerifier.from_json(json.loads(text))
