"""The learned pair verifier: does a new question ask what a cached one asked?

This module owns :class:`PairVerifier`, a small logistic model that reads two questions and
the embedder's score for them and returns the probability that one answer serves both. It
replaces hand-written language rules with weights learned from a labelled corpus
(``evals/cache_corpus``: paraphrases and near-misses across domains), and ships with the
thresholds that keep the served error below a chosen ``δ`` on a calibration split
(:func:`evermind.search.risk.bounded_threshold`). ``evals/cache_verifier.py`` trains it;
``data/verifier.json`` is what it wrote.

The features (:func:`evermind.cache.features.pair_features`, re-exported here) are generic,
not a word list: the normalised score, word overlap, the edit between the two token
sequences and the edited words hashed into buckets whose weights are learned.

Browser-safe: standard library only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources

from evermind.cache.features import (
    BUCKETS,
    FEATURE_VERSION,
    SCORE_FEATURES,
    SCORE_PRODUCTS,
    pair_features,
    pair_features_ref,
)
from evermind.errors import ConfigError

__all__ = ["BUCKETS", "PairVerifier", "default_verifier", "envelope", "pair_features"]

#: Steps of the monotone envelope (:meth:`PairVerifier.probability`).
ENVELOPE_STEPS = 10


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

        This is :func:`envelope` over :func:`pair_features`, computed with the weights split
        once per model (:attr:`_split`) instead of per call; the same floating-point
        operations in the same order, so the same value to the last bit
        (:meth:`probability_ref` is the definition the tests compare it with).

        Args:
            query: The incoming question.
            cached: The cached question.
            score: The normalised score (:meth:`normalise`).
        """
        feats = dict(pair_features(query, cached, score))
        rest_weights, score_weight, products, square = self._split
        w = rest_weights.get
        rest = sum(
            w(name, 0.0) * value for name, value in feats.items() if name not in SCORE_FEATURES
        )
        linear = score_weight + sum(weight * feats.get(base, 0.0) for base, weight in products)
        s = feats.get("score", 0.0)
        top = max(s, 1.0)
        z = min(
            rest + linear * x + square * x * x
            for x in [s + (top - s) * k / ENVELOPE_STEPS for k in range(ENVELOPE_STEPS + 1)]
        )
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))

    def probability_ref(self, query: str, cached: str, score: float) -> float:
        """:meth:`probability` as defined: :func:`envelope` over
        :func:`~evermind.cache.features.pair_features_ref` (slow; tests and benchmarks)."""
        return envelope(self, dict(pair_features_ref(query, cached, score)))

    @cached_property
    def _split(self) -> tuple[dict[str, float], float, tuple[tuple[str, float], ...], float]:
        """The weights as :meth:`probability` reads them: those of the features that do not
        depend on the score, the score's own, ``(base, weight)`` of each product with the
        score (:data:`SCORE_PRODUCTS`, in order) and the square's."""
        w = self.weights.get
        rest = {k: v for k, v in self.weights.items() if k not in SCORE_FEATURES}
        products = tuple((base, w(f"score_x_{name}", 0.0)) for name, base in SCORE_PRODUCTS.items())
        return rest, w("score", 0.0), products, w("score_sq", 0.0)

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
